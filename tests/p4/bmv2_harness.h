// A BMv2 simple_switch running p4/v1model/switchml.p4 in a network namespace
// of its own, with four hosts' links (veth pairs) that a test drives with raw
// Ethernet frames, and the switchml driver (Bmv2Target) programming it.
//
// Needs root (namespaces, raw sockets) and the toolchain found by CMake
// (p4/CMakeLists.txt); Available() says why not, and the tests skip.
#pragma once

#include <netinet/in.h>
#include <sys/types.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "switch/bmv2/bmv2_target.h"
#include "wire/wire_format.h"

namespace switchml::p4test {

inline constexpr int kHosts = 4;
inline constexpr uint16_t kK = 64;  // SWITCHML_K of the compiled program
inline constexpr uint16_t kSwitchPort = bmv2::Bmv2Target::kUdpPort;  // SWITCHML_UDP_PORT_BASE

struct Endpoint {
  std::array<uint8_t, 6> mac{};
  in_addr ip{};
  uint16_t port = 0;
};

// A received IPv4/UDP frame, its addresses and (when it decodes) switchml packet.
struct Frame {
  std::vector<uint8_t> bytes;  // the whole Ethernet frame
  Endpoint src, dst;
  std::vector<uint8_t> udp_payload;
  bool is_switchml = false;
  PacketHeader header;
  std::vector<uint32_t> words;  // payload words (host order)
};

class Bmv2Harness {
 public:
  // Empty when the switch can run here; otherwise why not.
  static std::string Unavailable();
  static std::unique_ptr<Bmv2Harness> Start(std::string* error);
  ~Bmv2Harness();

  // Host i (0..3): MAC 02:00:00:00:01:0i, IP 10.200.0.(i+1), port 5000+i.
  static Endpoint Host(int i, uint16_t port_offset = 0);
  static Endpoint SwitchEndpoint(uint16_t port = kSwitchPort);

  bmv2::Bmv2Target& plane() { return *plane_; }

  // Sends a frame out of host i's link into switch port i.
  void SendRaw(int host, const std::vector<uint8_t>& frame);
  // Sends a UDP datagram from `src` (on host i's link) to `dst`.
  void SendUdp(int host, const Endpoint& src, const Endpoint& dst,
               const std::vector<uint8_t>& payload);
  // The next IPv4 frame that arrives at host i, or nothing within `timeout`.
  std::optional<Frame> Receive(int host, std::chrono::milliseconds timeout);
  // The next frame of `ether_type` that arrives at host i.
  std::optional<std::vector<uint8_t>> ReceiveEtherType(int host, uint16_t ether_type,
                                                       std::chrono::milliseconds timeout);
  // Discards whatever is queued at every host.
  void Drain();

 private:
  Bmv2Harness() = default;
  // The next frame arriving at host i (not one it sent), before `deadline`.
  std::optional<std::vector<uint8_t>> ReceiveRaw(int host,
                                                 std::chrono::steady_clock::time_point deadline);
  std::string ns_;
  int original_ns_ = -1;
  pid_t switch_pid_ = -1;
  std::array<int, kHosts> sockets_{-1, -1, -1, -1};
  std::unique_ptr<bmv2::Bmv2Target> plane_;
};

// A switchml UDP payload: header + words.
std::vector<uint8_t> SwitchmlPayload(const PacketHeader& h, const std::vector<uint32_t>& words);
// Builds Ethernet + IPv4 + UDP around `payload` (UDP checksum 0).
std::vector<uint8_t> UdpFrame(const Endpoint& src, const Endpoint& dst,
                              const std::vector<uint8_t>& payload);

}  // namespace switchml::p4test
