// ARP for IPv4 over Ethernet (RFC 826), built and parsed in user space for a
// transport that owns its port and has no kernel to answer for it (DPDK; no
// I/O). Only what a host needs: ask for an address, answer for its own.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

#include "transport/ethernet/frames.h"

namespace switchml::transport::ethernet {

// An ARP frame, padded to Ethernet's 60-byte minimum (without the FCS).
inline constexpr size_t kArpFrameBytes = 60;
inline constexpr Mac kBroadcastMac{0xff, 0xff, 0xff, 0xff, 0xff, 0xff};

enum class ArpOp : uint16_t { kRequest = 1, kReply = 2 };

// Addresses are IPv4 in network byte order.
struct ArpMessage {
  ArpOp op = ArpOp::kRequest;
  Mac sender_mac{};
  uint32_t sender_ip = 0;
  Mac target_mac{};  // zero in a request
  uint32_t target_ip = 0;
};

// Writes `m` as a frame from m.sender_mac to `dest_mac` (a request:
// kBroadcastMac; a reply: the asker). REQUIRES: frame.size() >= kArpFrameBytes.
void WriteArp(std::span<uint8_t> frame, const ArpMessage& m, const Mac& dest_mac);

// An Ethernet frame holding an ARP request or reply for IPv4 over Ethernet;
// nullopt for anything else (another EtherType, hardware or protocol type,
// address length or operation, a short frame, a multicast or zero sender MAC).
std::optional<ArpMessage> ParseArp(std::span<const uint8_t> frame);

// True for a frame whose EtherType is ARP (whether or not it parses).
bool IsArp(std::span<const uint8_t> frame);

}  // namespace switchml::transport::ethernet
