// The AF_XDP transport's frame codec: what it builds parses back, and every
// header a hostile sender could get wrong is refused.
#include <arpa/inet.h>
#include <gtest/gtest.h>

#include <vector>

#include "transport/ethernet/frames.h"

namespace switchml::transport::ethernet {
namespace {

FrameAddresses Addresses() {
  FrameAddresses a;
  a.source_mac = {2, 0, 0, 0, 0, 1};
  a.dest_mac = {2, 0, 0, 0, 0, 2};
  a.source.sin_family = a.dest.sin_family = AF_INET;
  inet_pton(AF_INET, "10.98.0.10", &a.source.sin_addr);
  inet_pton(AF_INET, "10.98.0.1", &a.dest.sin_addr);
  a.source.sin_port = htons(40000);
  a.dest.sin_port = htons(48864);
  return a;
}

std::vector<uint8_t> Frame(size_t payload) {
  std::vector<uint8_t> frame(kHeaderBytes + payload);
  for (size_t i = 0; i < payload; ++i) frame[kHeaderBytes + i] = uint8_t(i * 7);
  WriteHeaders(frame, payload, Addresses(), 99);
  return frame;
}

TEST(XdpFrames, WhatIsBuiltParsesBack) {
  const std::vector<uint8_t> frame = Frame(1048);
  const auto parsed = ParseFrame(frame);
  ASSERT_TRUE(parsed.has_value());
  EXPECT_EQ(parsed->payload.size(), 1048u);
  EXPECT_EQ(parsed->payload.data(), frame.data() + kHeaderBytes);
  const FrameAddresses want = Addresses();
  EXPECT_EQ(parsed->addresses.source_mac, want.source_mac);
  EXPECT_EQ(parsed->addresses.dest_mac, want.dest_mac);
  EXPECT_EQ(parsed->addresses.source.sin_addr.s_addr, want.source.sin_addr.s_addr);
  EXPECT_EQ(parsed->addresses.dest.sin_port, want.dest.sin_port);
  EXPECT_EQ(parsed->addresses.source.sin_port, want.source.sin_port);
  // The IPv4 header checksum verifies; the UDP checksum is left empty.
  EXPECT_EQ(InternetChecksum({frame.data() + 14, 20}), 0);
  EXPECT_EQ(frame[40] | frame[41], 0);
}

TEST(XdpFrames, ChecksumIsRfc1071) {
  // The example header of RFC 1071 section 3 / Wikipedia's IPv4 example.
  const std::vector<uint8_t> ip = {0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11,
                                   0x00, 0x00, 0xc0, 0xa8, 0x00, 0x01, 0xc0, 0xa8, 0x00, 0xc7};
  EXPECT_EQ(InternetChecksum(ip), 0xb861);
}

TEST(XdpFrames, HostileHeadersAreRefused) {
  const std::vector<uint8_t> good = Frame(64);
  auto refused = [&](const char* what, auto change) {
    std::vector<uint8_t> f = good;
    change(f);
    EXPECT_FALSE(ParseFrame(f).has_value()) << what;
  };
  refused("truncated below the headers", [](auto& f) { f.resize(kHeaderBytes - 1); });
  refused("not IPv4", [](auto& f) { f[12] = 0x86, f[13] = 0xdd; });
  refused("IP options", [](auto& f) { f[14] = 0x46; });
  refused("IPv6 version", [](auto& f) { f[14] = 0x65; });
  refused("not UDP", [](auto& f) { f[23] = 6; });
  refused("a bad header checksum", [](auto& f) { f[24] ^= 1; });
  refused("a fragment", [](auto& f) {
    f[20] = 0x20;  // more fragments
    f[24] = f[25] = 0;
    const uint16_t c = InternetChecksum({f.data() + 14, 20});
    f[24] = uint8_t(c >> 8), f[25] = uint8_t(c);
  });
  refused("IP length past the frame", [](auto& f) { f.resize(f.size() - 1); });
  refused("UDP length not the IP payload", [](auto& f) { f[39] ^= 1; });
  // A frame longer than its IP packet (Ethernet padding) is fine.
  std::vector<uint8_t> padded = good;
  padded.resize(good.size() + 6);
  ASSERT_TRUE(ParseFrame(padded).has_value());
  EXPECT_EQ(ParseFrame(padded)->payload.size(), 64u);
}

}  // namespace
}  // namespace switchml::transport::ethernet
