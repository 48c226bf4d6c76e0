// ARP in user space (src/transport/ethernet/arp.h): what a DPDK endpoint
// sends and what it accepts.
#include <arpa/inet.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "transport/ethernet/arp.h"

namespace switchml::transport::ethernet {
namespace {

constexpr Mac kAsker{0x02, 0, 0, 0, 0, 1};
constexpr Mac kAnswerer{0x02, 0, 0, 0, 0, 2};

Mac DestinationOf(const std::vector<uint8_t>& frame) {
  Mac m;
  std::copy_n(frame.begin(), 6, m.begin());
  return m;
}

ArpMessage Request() {
  ArpMessage m;
  m.op = ArpOp::kRequest;
  m.sender_mac = kAsker;
  m.sender_ip = htonl(0x0A000001);  // 10.0.0.1
  m.target_ip = htonl(0x0A000002);
  return m;
}

TEST(Arp, ARequestIsABroadcastThatParsesBack) {
  std::vector<uint8_t> frame(kArpFrameBytes, 0xAA);
  WriteArp(frame, Request(), kBroadcastMac);
  EXPECT_TRUE(IsArp(frame));
  EXPECT_EQ(DestinationOf(frame), kBroadcastMac);
  // Ethernet type 0x0806; hardware 1, protocol 0x0800, lengths 6 and 4, op 1.
  const std::vector<uint8_t> header{0x08, 0x06, 0, 1, 0x08, 0, 6, 4, 0, 1};
  EXPECT_TRUE(std::equal(header.begin(), header.end(), frame.begin() + 12));
  const auto parsed = ParseArp(frame);
  ASSERT_TRUE(parsed);
  EXPECT_EQ(parsed->op, ArpOp::kRequest);
  EXPECT_EQ(parsed->sender_mac, kAsker);
  EXPECT_EQ(parsed->sender_ip, htonl(0x0A000001));
  EXPECT_EQ(parsed->target_mac, Mac{});
  EXPECT_EQ(parsed->target_ip, htonl(0x0A000002));
  // Padded with zeros to Ethernet's minimum.
  for (size_t i = 42; i < kArpFrameBytes; ++i) EXPECT_EQ(frame[i], 0) << i;
}

TEST(Arp, AReplyGoesToTheAskerAndNamesIt) {
  ArpMessage reply;
  reply.op = ArpOp::kReply;
  reply.sender_mac = kAnswerer;
  reply.sender_ip = htonl(0x0A000002);
  reply.target_mac = kAsker;
  reply.target_ip = htonl(0x0A000001);
  std::vector<uint8_t> frame(kArpFrameBytes);
  WriteArp(frame, reply, kAsker);
  EXPECT_EQ(DestinationOf(frame), kAsker);
  const auto parsed = ParseArp(frame);
  ASSERT_TRUE(parsed);
  EXPECT_EQ(parsed->op, ArpOp::kReply);
  EXPECT_EQ(parsed->sender_mac, kAnswerer);
  EXPECT_EQ(parsed->target_mac, kAsker);
}

TEST(Arp, AnythingElseIsRefused) {
  std::vector<uint8_t> good(kArpFrameBytes);
  WriteArp(good, Request(), kBroadcastMac);
  // Each field that must hold a fixed value, and the operation, broken in turn.
  for (const size_t at : {12u, 13u, 14u, 15u, 16u, 17u, 18u, 19u, 21u}) {
    std::vector<uint8_t> bad = good;
    bad[at] ^= 0x40;
    EXPECT_FALSE(ParseArp(bad)) << "byte " << at;
  }
  // Short; a group or zero sender MAC.
  EXPECT_FALSE(ParseArp(std::span(good).first(41)));
  std::vector<uint8_t> group = good;
  group[22] |= 1;
  EXPECT_FALSE(ParseArp(group));
  std::vector<uint8_t> zero = good;
  std::fill(zero.begin() + 22, zero.begin() + 28, 0);
  EXPECT_FALSE(ParseArp(zero));
  EXPECT_FALSE(IsArp(std::span(good).first(13)));
}

}  // namespace
}  // namespace switchml::transport::ethernet
