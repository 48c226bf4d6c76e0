#include "transport/ethernet/frames.h"

#include <arpa/inet.h>

#include <cstring>

namespace switchml::transport::ethernet {
namespace {

constexpr uint16_t kEtherTypeIpv4 = 0x0800;
constexpr uint8_t kProtocolUdp = 17;

uint32_t Sum16(std::span<const uint8_t> bytes, uint32_t sum) {
  size_t i = 0;
  for (; i + 1 < bytes.size(); i += 2) sum += Get16(&bytes[i]);
  if (i < bytes.size()) sum += uint32_t(bytes[i]) << 8;
  return sum;
}

uint16_t Fold(uint32_t sum) {
  while (sum >> 16) sum = (sum & 0xFFFF) + (sum >> 16);
  return uint16_t(~sum);
}

}  // namespace

uint16_t InternetChecksum(std::span<const uint8_t> bytes, uint32_t initial) {
  return Fold(Sum16(bytes, initial));
}

void WriteHeaders(std::span<uint8_t> frame, size_t payload_bytes, const FrameAddresses& a,
                  uint16_t ip_id) {
  uint8_t* eth = frame.data();
  std::memcpy(eth, a.dest_mac.data(), 6);
  std::memcpy(eth + 6, a.source_mac.data(), 6);
  Put16(eth + 12, kEtherTypeIpv4);
  uint8_t* ip = eth + 14;
  ip[0] = 0x45;  // version 4, 5 words
  ip[1] = 0;
  Put16(ip + 2, uint16_t(20 + 8 + payload_bytes));
  Put16(ip + 4, ip_id);
  Put16(ip + 6, 0x4000);  // DF
  ip[8] = 64;
  ip[9] = kProtocolUdp;
  Put16(ip + 10, 0);
  std::memcpy(ip + 12, &a.source.sin_addr.s_addr, 4);
  std::memcpy(ip + 16, &a.dest.sin_addr.s_addr, 4);
  Put16(ip + 10, InternetChecksum({ip, 20}));
  uint8_t* udp = ip + 20;
  std::memcpy(udp, &a.source.sin_port, 2);
  std::memcpy(udp + 2, &a.dest.sin_port, 2);
  Put16(udp + 4, uint16_t(8 + payload_bytes));
  Put16(udp + 6, 0);
}

std::optional<ParsedFrame> ParseFrame(std::span<const uint8_t> frame) {
  if (frame.size() < kHeaderBytes) return std::nullopt;
  const uint8_t* eth = frame.data();
  if (Get16(eth + 12) != kEtherTypeIpv4) return std::nullopt;
  const uint8_t* ip = eth + 14;
  if (ip[0] != 0x45 || ip[9] != kProtocolUdp) return std::nullopt;
  const size_t ip_total = Get16(ip + 2);
  if (ip_total < 28 || 14 + ip_total > frame.size()) return std::nullopt;
  if ((Get16(ip + 6) & 0x3FFF) != 0) return std::nullopt;  // a fragment
  if (InternetChecksum({ip, 20}) != 0) return std::nullopt;
  const uint8_t* udp = ip + 20;
  const size_t udp_length = Get16(udp + 4);
  if (udp_length < 8 || udp_length != ip_total - 20) return std::nullopt;
  // The UDP checksum is not checked: senders with checksum offload leave it
  // to the NIC, and a virtual link (veth) delivers it unfinished; the NIC
  // checked the frame, and keyed jobs carry a MAC over every packet.
  ParsedFrame parsed;
  std::memcpy(parsed.addresses.dest_mac.data(), eth, 6);
  std::memcpy(parsed.addresses.source_mac.data(), eth + 6, 6);
  parsed.addresses.source.sin_family = parsed.addresses.dest.sin_family = AF_INET;
  std::memcpy(&parsed.addresses.source.sin_addr.s_addr, ip + 12, 4);
  std::memcpy(&parsed.addresses.dest.sin_addr.s_addr, ip + 16, 4);
  std::memcpy(&parsed.addresses.source.sin_port, udp, 2);
  std::memcpy(&parsed.addresses.dest.sin_port, udp + 2, 2);
  parsed.payload = frame.subspan(kHeaderBytes, udp_length - 8);
  return parsed;
}

}  // namespace switchml::transport::ethernet
