#include "net/packet_auth.h"

#include <gtest/gtest.h>

#include <vector>

#include "wire/wire_format.h"

namespace switchml::net {
namespace {

AuthKey Key(uint8_t fill) {
  AuthKey k;
  k.fill(fill);
  return k;
}

std::vector<uint8_t> Packet(uint16_t count) {
  PacketHeader h;
  h.job = 9;
  h.element_count = count;
  std::vector<uint8_t> b(MaxPacketBytes(count));
  EncodeHeader(h, b);
  for (size_t i = kHeaderBytes; i < PacketBytes(count); ++i) b[i] = uint8_t(i);
  return b;
}

TEST(PacketAuth, SignedPacketsVerifyAndDecode) {
  PacketAuthenticator auth(Key(1), "salt-salt-salt-1", 9, 1);
  std::vector<uint8_t> b = Packet(8);
  const size_t length = auth.Sign(b.data(), PacketBytes(8));
  ASSERT_EQ(length, b.size());
  EXPECT_TRUE(auth.Verify(b));
  PacketView v;
  ASSERT_EQ(DecodePacket(b, &v), DecodeError::kOk);
  EXPECT_TRUE(v.header.authenticated);
  EXPECT_EQ(v.tag, b.data() + PacketBytes(8));
}

TEST(PacketAuth, AnyChangedByteFailsVerification) {
  PacketAuthenticator auth(Key(1), "salt-salt-salt-1", 9, 1);
  std::vector<uint8_t> b = Packet(4);
  auth.Sign(b.data(), PacketBytes(4));
  for (size_t i = 0; i < b.size(); ++i) {
    std::vector<uint8_t> t = b;
    t[i] ^= 0x10;
    EXPECT_FALSE(auth.Verify(t)) << "byte " << i;
  }
  EXPECT_FALSE(auth.Verify(std::span(b.data(), b.size() - 1)));
}

TEST(PacketAuth, OtherSecretSaltOrJobDoesNotVerify) {
  std::vector<uint8_t> b = Packet(4);
  PacketAuthenticator(Key(1), "salt-salt-salt-1", 9, 1).Sign(b.data(), PacketBytes(4));
  EXPECT_FALSE(PacketAuthenticator(Key(2), "salt-salt-salt-1", 9, 1).Verify(b));
  EXPECT_FALSE(PacketAuthenticator(Key(1), "salt-salt-salt-2", 9, 1).Verify(b));
  EXPECT_FALSE(PacketAuthenticator(Key(1), "salt-salt-salt-1", 10, 1).Verify(b));
}

TEST(PacketAuth, UnsignedPacketsDoNotVerify) {
  const PacketAuthenticator auth(Key(1), "salt-salt-salt-1", 9, 1);
  std::vector<uint8_t> b = Packet(4);
  b.resize(PacketBytes(4));
  b[18] |= kFlagAuthenticated;  // the flag alone proves nothing
  EXPECT_FALSE(auth.Verify(b));
}

TEST(PacketAuth, NoncesNeverRepeatAndOtherSendersVerify) {
  PacketAuthenticator worker(Key(1), "salt-salt-salt-1", 9, WorkerSenderId(3, 1));
  const PacketAuthenticator receiver(Key(1), "salt-salt-salt-1", 9, kSwitchSenderId);
  std::vector<uint8_t> a = Packet(4), b = Packet(4);
  worker.Sign(a.data(), PacketBytes(4));
  worker.Sign(b.data(), PacketBytes(4));  // the same packet again: a new nonce
  EXPECT_TRUE(receiver.Verify(a));
  EXPECT_TRUE(receiver.Verify(b));
  EXPECT_NE(a, b);
  EXPECT_EQ(a[PacketBytes(4)], 1);  // sender id 3 << 16 | 1, little-endian
  EXPECT_EQ(a[PacketBytes(4) + 2], 3);
}

TEST(PacketAuth, KeysParseFromHexOnly) {
  EXPECT_TRUE(ParseAuthKey(std::string(64, 'a')).ok());
  EXPECT_FALSE(ParseAuthKey(std::string(63, 'a')).ok());
  EXPECT_FALSE(ParseAuthKey(std::string(64, 'g')).ok());
  EXPECT_NE(ParseAuthKey("").status().message().find("64 hexadecimal digits"), std::string::npos);
}

}  // namespace
}  // namespace switchml::net
