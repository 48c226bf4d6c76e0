#include "transport/ethernet/arp.h"

#include <cstring>

namespace switchml::transport::ethernet {
namespace {

constexpr uint16_t kEtherTypeArp = 0x0806;
constexpr uint16_t kHardwareEthernet = 1;
constexpr uint16_t kProtocolIpv4 = 0x0800;
constexpr size_t kArpBodyBytes = 28;

}  // namespace

void WriteArp(std::span<uint8_t> frame, const ArpMessage& m, const Mac& dest_mac) {
  uint8_t* eth = frame.data();
  std::memset(eth, 0, kArpFrameBytes);
  std::memcpy(eth, dest_mac.data(), 6);
  std::memcpy(eth + 6, m.sender_mac.data(), 6);
  Put16(eth + 12, kEtherTypeArp);
  uint8_t* arp = eth + 14;
  Put16(arp, kHardwareEthernet);
  Put16(arp + 2, kProtocolIpv4);
  arp[4] = 6;
  arp[5] = 4;
  Put16(arp + 6, uint16_t(m.op));
  std::memcpy(arp + 8, m.sender_mac.data(), 6);
  std::memcpy(arp + 14, &m.sender_ip, 4);
  std::memcpy(arp + 18, m.target_mac.data(), 6);
  std::memcpy(arp + 24, &m.target_ip, 4);
}

bool IsArp(std::span<const uint8_t> frame) {
  return frame.size() >= 14 && Get16(frame.data() + 12) == kEtherTypeArp;
}

std::optional<ArpMessage> ParseArp(std::span<const uint8_t> frame) {
  if (!IsArp(frame) || frame.size() < 14 + kArpBodyBytes) return std::nullopt;
  const uint8_t* arp = frame.data() + 14;
  if (Get16(arp) != kHardwareEthernet || Get16(arp + 2) != kProtocolIpv4 || arp[4] != 6 ||
      arp[5] != 4) {
    return std::nullopt;
  }
  const uint16_t op = Get16(arp + 6);
  if (op != uint16_t(ArpOp::kRequest) && op != uint16_t(ArpOp::kReply)) return std::nullopt;
  ArpMessage m;
  m.op = ArpOp(op);
  std::memcpy(m.sender_mac.data(), arp + 8, 6);
  std::memcpy(&m.sender_ip, arp + 14, 4);
  std::memcpy(m.target_mac.data(), arp + 18, 6);
  std::memcpy(&m.target_ip, arp + 24, 4);
  // A group (multicast, broadcast) or zero sender MAC is no host's.
  if ((m.sender_mac[0] & 1) != 0 || m.sender_mac == Mac{}) return std::nullopt;
  return m;
}

}  // namespace switchml::transport::ethernet
