// One DPDK port, shared by the transports and endpoints of this process: its
// configuration (as many queue pairs as shards), its mbuf pool, and for each
// shard the UDP port it serves and the ring that hands it the datagrams that
// arrive on another shard's queue. Ports live as long as the process (as the
// EAL does); a port is configured again when no queue of it is taken.
#pragma once

#include <rte_ethdev.h>
#include <rte_mempool.h>
#include <rte_ring.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <memory>
#include <mutex>
#include <string>

#include "switchml/status.h"
#include "transport/ethernet/frames.h"

namespace switchml::transport::dpdk {

using ethernet::Mac;

inline constexpr uint32_t kMaxShards = 64;

// "dpdk port NAME", for messages.
std::string PortText(const std::string& name);
// A DPDK call's failure: what failed, DPDK's error and last log line, the fix.
Status Failed(const std::string& what, int error, const std::string& fix);

class Port {
 public:
  // The port called `name` (empty: the only one). REQUIRES: the EAL started.
  static StatusOr<std::shared_ptr<Port>> Find(const std::string& name);

  uint16_t id() const { return id_; }
  const std::string& name() const { return name_; }
  const Mac& mac() const { return mac_; }
  // The largest IPv4 packet the port carries.
  int mtu() const { return mtu_; }
  rte_mempool* pool() const { return pool_; }

  // Takes queue `shard` of `shards` for the UDP port `udp_port` (network
  // order; 0: one is chosen). The first shard taken configures the port for
  // `shards` queue pairs (again, when no queue is taken, for another count).
  StatusOr<rte_ring*> Take(uint32_t shard, uint32_t shards, uint16_t& udp_port);

  // Gives queue `shard` back; what was handed to it and not taken goes back
  // to the pool.
  void Release(uint32_t shard);

  // The hand-over ring of the shard serving `udp_port` (network order), or
  // nullptr. Packet path: no lock.
  rte_ring* RingFor(uint16_t udp_port) const {
    for (uint32_t s = 0; s < queues_; ++s) {
      if (shares_[s].udp_port.load(std::memory_order_acquire) == udp_port) return shares_[s].ring;
    }
    return nullptr;
  }
  // The rings of every shard but `shard`, for frames all of them need (ARP replies).
  template <typename F>
  void ForOtherShards(uint32_t shard, F&& f) const {
    for (uint32_t s = 0; s < queues_; ++s) {
      if (s != shard && shares_[s].udp_port.load(std::memory_order_acquire) != 0) {
        f(shares_[s].ring);
      }
    }
  }

 private:
  struct Share {
    std::atomic<uint16_t> udp_port{0};  // 0: free
    rte_ring* ring = nullptr;
    bool taken = false;  // guarded by mu_
  };

  explicit Port(uint16_t id) : id_(id) {}

  Status ReadInfo();

  // Stops the port, sets it up for `queues` queue pairs with a pool to match
  // (MakePool, SetUpQueues), and starts it.
  Status Configure(uint32_t queues);
  Status MakePool(uint32_t queues);
  Status SetUpQueues(uint32_t queues);

  // An ephemeral UDP port (network order) no shard of this port serves.
  // An ephemeral UDP port (network order) no shard of this port serves.
  uint16_t FreeUdpPort();

  const uint16_t id_;
  std::string name_;
  Mac mac_{};
  int mtu_ = RTE_ETHER_MTU;
  std::mutex mu_;
  uint32_t queues_ = 0;  // written under mu_ while no queue is taken
  bool started_ = false;
  rte_mempool* pool_ = nullptr;
  uint32_t pools_made_ = 0;
  uint32_t next_ephemeral_ = uint32_t(getpid());
  std::array<Share, kMaxShards> shares_;
};

}  // namespace switchml::transport::dpdk
