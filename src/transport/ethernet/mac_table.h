// Where an endpoint that builds its own frames (AF_XDP, DPDK) sends each IPv4
// address (no I/O, no allocation): MACs learned from received frames (replies
// go back the way requests came), peers announced at setup (pinned: never
// evicted), and MACs the endpoint resolved after a miss (AF_XDP: the kernel's
// neighbour table; DPDK: its own ARP). A miss (an address
// with none of these) is recorded once, for the endpoint to resolve off the
// packet path.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>

#include "transport/ethernet/frames.h"

namespace switchml::transport::ethernet {

// The MAC of an address of this host: its datagrams go through the kernel
// (loopback), since a frame put on the wire never comes back.
inline constexpr Mac kThisHost{};

class MacTable {
 public:
  // Learned MACs: kBuckets sets of kWays (an address only competes with the
  // few that hash to its set; a full set replaces its entries in turn).
  static constexpr size_t kWays = 4;
  static constexpr size_t kBuckets = 256;  // a power of two
  static constexpr size_t kMaxPinned = 64;
  static constexpr size_t kMaxResolved = 64;  // replaced in turn when full
  static constexpr size_t kMaxMisses = 16;    // more at once wait for a later miss

  // Addresses are IPv4 in network byte order; 0 (0.0.0.0) is never stored.
  void Learn(uint32_t address, const Mac& mac);
  // False when kMaxPinned other addresses are pinned.
  bool Pin(uint32_t address, const Mac& mac);
  void Resolved(uint32_t address, const Mac& mac);

  // Learned, else pinned, else resolved; nullptr for a miss.
  const Mac* Find(uint32_t address) const;
  // Records `address` for resolution (once until ClearMisses).
  void Miss(uint32_t address);
  std::span<const uint32_t> misses() const { return {misses_.data(), miss_count_}; }
  void ClearMisses() { miss_count_ = 0; }

 private:
  struct Entry {
    uint32_t address = 0;  // 0: empty
    Mac mac{};
  };
  template <typename E>  // Entry or const Entry
  static E* Search(std::span<E> entries, uint32_t address) {
    for (E& e : entries) {
      if (e.address == address) return &e;
    }
    return nullptr;
  }
  static size_t Bucket(uint32_t address) { return (address * 2654435761u) >> 24 & (kBuckets - 1); }

  std::array<Entry, kBuckets * kWays> learned_{};
  std::array<uint8_t, kBuckets> next_way_{};  // which way a full set replaces next
  std::array<Entry, kMaxPinned> pinned_{};
  size_t pinned_count_ = 0;
  std::array<Entry, kMaxResolved> resolved_{};
  size_t next_resolved_ = 0;
  std::array<uint32_t, kMaxMisses> misses_{};
  size_t miss_count_ = 0;
};

}  // namespace switchml::transport::ethernet
