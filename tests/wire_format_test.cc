#include "wire/wire_format.h"

#include <gtest/gtest.h>

#include <vector>

namespace switchml {
namespace {

PacketHeader SampleHeader(uint16_t count) {
  PacketHeader h;
  h.type = MessageType::kResult;
  h.job = 0xA1B2C3D4;
  h.chunk = 0x01020304;
  h.rank = 0x0506;
  h.slot = 0x0708;
  h.element_count = count;
  h.version = 1;
  h.exponent = -126;
  h.next_exponent = 128;
  return h;
}

std::vector<uint8_t> Encode(const PacketHeader& h) {
  std::vector<uint8_t> bytes(PacketBytes(h.element_count));
  EncodeHeader(h, bytes);
  for (size_t i = kHeaderBytes; i < bytes.size(); ++i) bytes[i] = uint8_t(i * 7);
  return bytes;
}

TEST(WireFormat, HeaderIs24Bytes) { EXPECT_EQ(kHeaderBytes, 24u); }

TEST(WireFormat, RoundTripsEveryField) {
  const PacketHeader h = SampleHeader(3);
  const std::vector<uint8_t> bytes = Encode(h);
  PacketView v;
  ASSERT_EQ(DecodePacket(bytes, &v), DecodeError::kOk);
  EXPECT_EQ(v.header.type, h.type);
  EXPECT_EQ(v.header.job, h.job);
  EXPECT_EQ(v.header.chunk, h.chunk);
  EXPECT_EQ(v.header.rank, h.rank);
  EXPECT_EQ(v.header.slot, h.slot);
  EXPECT_EQ(v.header.element_count, h.element_count);
  EXPECT_EQ(v.header.version, h.version);
  EXPECT_EQ(v.header.exponent, h.exponent);
  EXPECT_EQ(v.header.next_exponent, h.next_exponent);
  EXPECT_EQ(v.payload, bytes.data() + kHeaderBytes);
}

TEST(WireFormat, FieldsAreBigEndianAtDocumentedOffsets) {
  const std::vector<uint8_t> b = Encode(SampleHeader(3));
  const std::vector<uint8_t> expected = {0x53, 0x4D, kWireVersion, 2,    0xA1, 0xB2, 0xC3, 0xD4,
                                         0x01, 0x02, 0x03,         0x04, 0x05, 0x06, 0x07, 0x08,
                                         0x00, 0x03, 0x01,         0x00, 0xFF, 0x82, 0x00, 0x80};
  EXPECT_EQ(std::vector<uint8_t>(b.begin(), b.begin() + kHeaderBytes), expected);
}

TEST(WireFormat, RejectsShortPacket) {
  std::vector<uint8_t> b = Encode(SampleHeader(0));
  PacketView v;
  for (size_t n = 0; n < kHeaderBytes; ++n) {
    EXPECT_EQ(DecodePacket(std::span(b.data(), n), &v), DecodeError::kTooShort) << n;
  }
}

TEST(WireFormat, RejectsBadMagic) {
  std::vector<uint8_t> b = Encode(SampleHeader(1));
  b[1] ^= 0x01;
  PacketView v;
  EXPECT_EQ(DecodePacket(b, &v), DecodeError::kBadMagic);
}

TEST(WireFormat, RejectsBadVersion) {
  std::vector<uint8_t> b = Encode(SampleHeader(1));
  b[2] = kWireVersion + 1;
  PacketView v;
  EXPECT_EQ(DecodePacket(b, &v), DecodeError::kBadVersion);
}

TEST(WireFormat, RejectsUnknownType) {
  std::vector<uint8_t> b = Encode(SampleHeader(1));
  PacketView v;
  for (uint8_t t : {0, 6, 255}) {
    b[3] = t;
    EXPECT_EQ(DecodePacket(b, &v), DecodeError::kBadType) << int(t);
  }
}

TEST(WireFormat, RejectsLengthThatDisagreesWithElementCount) {
  std::vector<uint8_t> b = Encode(SampleHeader(4));
  PacketView v;
  EXPECT_EQ(DecodePacket(std::span(b.data(), b.size() - 1), &v), DecodeError::kLengthMismatch);
  EXPECT_EQ(DecodePacket(std::span(b.data(), b.size() - 4), &v), DecodeError::kLengthMismatch);
  b.push_back(0);
  EXPECT_EQ(DecodePacket(b, &v), DecodeError::kLengthMismatch);
}

TEST(WireFormat, RejectsTooManyElements) {
  std::vector<uint8_t> b = Encode(SampleHeader(1));
  b[16] = 0xFF;  // element_count = 0xFF01 > kMaxElementsPerPacket
  PacketView v;
  EXPECT_EQ(DecodePacket(b, &v), DecodeError::kTooManyElements);
}

TEST(WireFormat, RejectsReservedFlagsAndByte) {
  PacketView v;
  std::vector<uint8_t> b = Encode(SampleHeader(1));
  // (Bits 3 and 4 of a result: AResultMayNameThePreviousOne; bit 5 of a
  // contribution: AContributionMayBeMarkedACopy.)
  for (uint8_t bit = 0x20; bit != 0; bit = uint8_t(bit << 1)) {
    b[18] |= bit;
    EXPECT_EQ(DecodePacket(b, &v), DecodeError::kBadFlags) << int(bit);
    b[18] &= uint8_t(~bit);
  }
  b = Encode(SampleHeader(1));
  b[19] = 1;
  EXPECT_EQ(DecodePacket(b, &v), DecodeError::kBadFlags);
}

// Bit 2 marks a contribution sent again; it travels with the other flags.
TEST(WireFormat, TheResendFlagRoundTrips) {
  PacketHeader h = SampleHeader(1);
  h.version = 1;
  h.resend = true;
  std::vector<uint8_t> b = Encode(h);
  EXPECT_EQ(b[18], kFlagVersionBit | kFlagResend);
  PacketView v;
  ASSERT_EQ(DecodePacket(b, &v), DecodeError::kOk);
  EXPECT_TRUE(v.header.resend);
  EXPECT_EQ(v.header.version, 1);
  h.resend = false;
  b = Encode(h);
  ASSERT_EQ(DecodePacket(b, &v), DecodeError::kOk);
  EXPECT_FALSE(v.header.resend);
}

// Bits 3 and 4: a result names the previous one (its slot in the rank
// field); no other type does, and bit 4 goes only with bit 3.
TEST(WireFormat, AResultMayNameThePreviousOne) {
  PacketHeader h = SampleHeader(1);
  h.type = MessageType::kResult;
  h.names_previous = true;
  h.previous_version = 1;
  h.rank = 17;
  std::vector<uint8_t> b = Encode(h);
  EXPECT_EQ(b[18], kFlagVersionBit | kFlagNamesPrevious | kFlagPreviousVersion);
  PacketView v;
  ASSERT_EQ(DecodePacket(b, &v), DecodeError::kOk);
  EXPECT_TRUE(v.header.names_previous);
  EXPECT_EQ(v.header.previous_version, 1);
  EXPECT_EQ(v.header.rank, 17);
  h.previous_version = 0;
  b = Encode(h);
  ASSERT_EQ(DecodePacket(b, &v), DecodeError::kOk);
  EXPECT_EQ(v.header.previous_version, 0);
  b[18] = kFlagPreviousVersion;  // a version without a name
  EXPECT_EQ(DecodePacket(b, &v), DecodeError::kBadFlags);
  for (MessageType type : {MessageType::kContribution, MessageType::kPending, MessageType::kNack,
                           MessageType::kProbe}) {
    h.type = type;
    h.names_previous = false;
    b = Encode(h);
    b[18] |= kFlagNamesPrevious;
    EXPECT_EQ(DecodePacket(b, &v), DecodeError::kBadFlags) << int(type);
  }
}

// Bit 5: a contribution's copy sent with it; no other type is copied, and a
// copy is not a resend.
TEST(WireFormat, AContributionMayBeMarkedACopy) {
  PacketHeader h = SampleHeader(1);
  h.type = MessageType::kContribution;
  h.copy = true;
  std::vector<uint8_t> b = Encode(h);
  EXPECT_EQ(b[18], kFlagVersionBit | kFlagCopy);
  PacketView v;
  ASSERT_EQ(DecodePacket(b, &v), DecodeError::kOk);
  EXPECT_TRUE(v.header.copy);
  EXPECT_FALSE(v.header.resend);
  b[18] |= kFlagResend;
  EXPECT_EQ(DecodePacket(b, &v), DecodeError::kBadFlags);
  h.copy = false;
  b = Encode(h);
  ASSERT_EQ(DecodePacket(b, &v), DecodeError::kOk);
  EXPECT_FALSE(v.header.copy);
  for (MessageType type :
       {MessageType::kResult, MessageType::kPending, MessageType::kNack, MessageType::kProbe}) {
    h.type = type;
    b = Encode(h);
    b[18] |= kFlagCopy;
    EXPECT_EQ(DecodePacket(b, &v), DecodeError::kBadFlags) << int(type);
  }
}

TEST(WireFormat, AcceptsLargestPacket) {
  const std::vector<uint8_t> b = Encode(SampleHeader(kMaxElementsPerPacket));
  PacketView v;
  EXPECT_EQ(DecodePacket(b, &v), DecodeError::kOk);
}

// Flipping any single header bit either yields one of the documented errors
// or a packet that re-encodes to exactly the flipped bytes (a different but
// valid header): nothing is silently misread.
TEST(WireFormat, EveryHeaderBitFlipIsRejectedOrFaithful) {
  const std::vector<uint8_t> good = Encode(SampleHeader(2));
  for (size_t bit = 0; bit < kHeaderBytes * 8; ++bit) {
    std::vector<uint8_t> b = good;
    b[bit / 8] ^= uint8_t(1 << (bit % 8));
    PacketView v;
    const DecodeError e = DecodePacket(b, &v);
    if (e != DecodeError::kOk) continue;
    std::vector<uint8_t> again(b.size());
    EncodeHeader(v.header, again);
    EXPECT_TRUE(std::equal(again.begin(), again.begin() + kHeaderBytes, b.begin())) << bit;
  }
}

TEST(ElementsPerPacketForMtu, LargestPowerOfTwoThatFits) {
  EXPECT_EQ(ElementsPerPacketForMtu(1500), 256);  // 1024 + 24 + 28 + 28 <= 1500
  EXPECT_EQ(ElementsPerPacketForMtu(9000), 2048);
  EXPECT_EQ(ElementsPerPacketForMtu(65536), 8192);  // loopback: capped
  EXPECT_EQ(ElementsPerPacketForMtu(MaxPacketBytes(512) + 28), 512);
  EXPECT_EQ(ElementsPerPacketForMtu(MaxPacketBytes(512) + 27), 256);
  EXPECT_EQ(ElementsPerPacketForMtu(0), 32);
}

}  // namespace
}  // namespace switchml
