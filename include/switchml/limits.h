// Limits and defaults that more than one layer needs: defined once here, and
// used by the wire format, the configuration tables, every Validate() and
// the command lines, so none of them can disagree.
#pragma once

#include <cstdint>

namespace switchml {

inline constexpr uint16_t kDefaultControlPort = 48800;  // the switch's gRPC control plane
inline constexpr uint16_t kDefaultDataPort = 48801;     // its first data thread (UDP)

// int32 values per packet. 8192 words = 32 KiB of payload: one UDP datagram
// on loopback. Hardware switches take 64 or 256 (see p4/).
inline constexpr uint16_t kMinElementsPerPacket = 32;
inline constexpr uint16_t kMaxElementsPerPacket = 8192;

// The elements per packet taken for a rank whose path MTU is unknown: what
// fits a 1500-byte MTU (JobRequest::path_elements_per_packet 0).
inline constexpr uint16_t kUnknownPathElementsPerPacket = 256;

// Ranks of one job: 0xFFFF is the wire's "all ranks".
inline constexpr uint32_t kMaxWorldSize = 65534;

// I/O threads of a worker, and data threads of a switch.
inline constexpr uint32_t kMaxThreads = 64;

// The longest busy_poll_us (ContextConfig, SwitchConfig) accepts.
inline constexpr uint32_t kMaxBusyPollUs = 100000;

// Deprecated (removed in 0.3): a limit of the af_xdp transport, which is not
// part of the public API; ContextConfig::Validate() states it.
[[deprecated("the af_xdp transport's limit left the public API")]] inline constexpr uint16_t
    kMaxAfXdpElementsPerPacket = 512;

}  // namespace switchml
