// Ethernet/IPv4/UDP frames built and parsed in user space, for the transports
// that build their own headers (AF_XDP, DPDK; no I/O). VLAN-free; no IP
// options or fragments (the AF_XDP program passes such frames to the kernel;
// a DPDK endpoint drops them as malformed).
#pragma once

#include <netinet/in.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

namespace switchml::transport::ethernet {

using Mac = std::array<uint8_t, 6>;

// A 16-bit header field in network byte order, written and read.
inline void Put16(uint8_t* p, uint16_t v) {
  p[0] = uint8_t(v >> 8);
  p[1] = uint8_t(v);
}
inline uint16_t Get16(const uint8_t* p) { return uint16_t(p[0] << 8 | p[1]); }

// Ethernet (14) + IPv4 without options (20) + UDP (8).
inline constexpr size_t kHeaderBytes = 42;

struct FrameAddresses {
  Mac source_mac{};
  Mac dest_mac{};
  sockaddr_in source{};  // IPv4 address and port, network byte order
  sockaddr_in dest{};
};

// Writes the headers of a frame carrying `payload_bytes` of UDP payload that
// already sit at frame[kHeaderBytes...]. UDP checksum 0 (none, as IPv4
// allows); the IPv4 header checksum is computed. TTL 64, DF set.
// REQUIRES: frame.size() >= kHeaderBytes + payload_bytes <= 65507.
void WriteHeaders(std::span<uint8_t> frame, size_t payload_bytes, const FrameAddresses& a,
                  uint16_t ip_id);

struct ParsedFrame {
  std::span<const uint8_t> payload;
  FrameAddresses addresses;
};
// Checks every header field a hostile sender could get wrong (types, IPv4
// version and header length, lengths against the frame, the IPv4 checksum,
// fragments); nullopt if any is wrong. Not the UDP checksum (frames.cc).
std::optional<ParsedFrame> ParseFrame(std::span<const uint8_t> frame);

// The Internet checksum of `bytes` (RFC 1071), as stored in a header.
uint16_t InternetChecksum(std::span<const uint8_t> bytes, uint32_t initial = 0);

}  // namespace switchml::transport::ethernet
