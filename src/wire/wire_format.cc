#include "wire/wire_format.h"

namespace switchml {
namespace {

uint16_t LoadBe16(const uint8_t* p) { return uint16_t((p[0] << 8) | p[1]); }
void StoreBe16(uint8_t* p, uint16_t v) {
  p[0] = uint8_t(v >> 8);
  p[1] = uint8_t(v);
}

}  // namespace

const char* DecodeErrorName(DecodeError e) {
  switch (e) {
    case DecodeError::kOk:
      return "ok";
    case DecodeError::kTooShort:
      return "too_short";
    case DecodeError::kBadMagic:
      return "bad_magic";
    case DecodeError::kBadVersion:
      return "bad_version";
    case DecodeError::kBadType:
      return "bad_type";
    case DecodeError::kLengthMismatch:
      return "length_mismatch";
    case DecodeError::kTooManyElements:
      return "too_many_elements";
    case DecodeError::kBadFlags:
      return "bad_flags";
  }
  return "unknown";
}

DecodeError DecodePacket(std::span<const uint8_t> bytes, PacketView* out) {
  if (bytes.size() < kHeaderBytes) return DecodeError::kTooShort;
  const uint8_t* p = bytes.data();
  if (LoadBe16(p) != kWireMagic) return DecodeError::kBadMagic;
  if (p[2] != kWireVersion) return DecodeError::kBadVersion;
  const uint8_t type = p[3];
  if (type < uint8_t(MessageType::kContribution) || type > uint8_t(MessageType::kProbe)) {
    return DecodeError::kBadType;
  }
  const uint16_t count = LoadBe16(p + 16);
  if (count > kMaxElementsPerPacket) return DecodeError::kTooManyElements;
  const uint8_t flags = p[kFlagsOffset];
  // Only a result names a previous one, and a version goes with the name;
  // only a contribution is copied, and a copy is not a resend.
  const uint8_t known =
      kFlagVersionBit | kFlagAuthenticated | kFlagResend |
      (type == uint8_t(MessageType::kResult) ? kFlagNamesPrevious : 0) |
      ((flags & kFlagNamesPrevious) ? kFlagPreviousVersion : 0) |
      (type == uint8_t(MessageType::kContribution) && !(flags & kFlagResend) ? kFlagCopy : 0);
  if ((flags & ~known) != 0 || p[19] != 0) return DecodeError::kBadFlags;
  const bool authenticated = flags & kFlagAuthenticated;
  if (bytes.size() != PacketBytes(count) + (authenticated ? kAuthTagBytes : 0)) {
    return DecodeError::kLengthMismatch;
  }

  PacketHeader& h = out->header;
  h.type = MessageType(type);
  h.job = LoadBe32(p + 4);
  h.chunk = LoadBe32(p + 8);
  h.rank = LoadBe16(p + 12);
  h.slot = LoadBe16(p + 14);
  h.element_count = count;
  h.version = flags & kFlagVersionBit;
  h.authenticated = authenticated;
  h.resend = flags & kFlagResend;
  h.copy = flags & kFlagCopy;
  h.names_previous = flags & kFlagNamesPrevious;
  h.previous_version = (flags & kFlagPreviousVersion) ? 1 : 0;
  h.exponent = int16_t(LoadBe16(p + 20));
  h.next_exponent = int16_t(LoadBe16(p + 22));
  out->payload = p + kHeaderBytes;
  out->tag = authenticated ? p + PacketBytes(count) : nullptr;
  return DecodeError::kOk;
}

void EncodeHeader(const PacketHeader& h, std::span<uint8_t> dst) {
  uint8_t* p = dst.data();
  StoreBe16(p, kWireMagic);
  p[2] = kWireVersion;
  p[3] = uint8_t(h.type);
  StoreBe32(p + 4, h.job);
  StoreBe32(p + 8, h.chunk);
  StoreBe16(p + 12, h.rank);
  StoreBe16(p + 14, h.slot);
  StoreBe16(p + 16, h.element_count);
  p[kFlagsOffset] =
      uint8_t((h.version & kFlagVersionBit) | (h.authenticated ? kFlagAuthenticated : 0) |
              (h.resend ? kFlagResend : 0) | (h.names_previous ? kFlagNamesPrevious : 0) |
              (h.names_previous && h.previous_version ? kFlagPreviousVersion : 0) |
              (h.copy ? kFlagCopy : 0));
  p[19] = 0;
  StoreBe16(p + 20, uint16_t(h.exponent));
  StoreBe16(p + 22, uint16_t(h.next_exponent));
}

uint16_t ElementsPerPacketForMtu(size_t mtu) {
  constexpr size_t kIpUdpBytes = 20 + 8;
  uint16_t k = kMaxElementsPerPacket;
  while (k > 32 && MaxPacketBytes(k) + kIpUdpBytes > mtu) k /= 2;
  return k;
}

}  // namespace switchml
