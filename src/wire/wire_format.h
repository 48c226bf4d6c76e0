// The switchml wire format: the one definition of every field.
//
// Every packet is a fixed 24-byte header followed by `element_count` 32-bit
// words in network byte order. All multi-byte fields are big-endian and
// naturally aligned, so a P4 parser can extract them as whole headers.
//
//   offset size field           meaning
//   0      2    magic           0x534D ("SM")
//   2      1    version         kWireVersion
//   3      1    type            MessageType
//   4      4    job             JobId assigned by the switch at registration
//   8      4    chunk           per-job sequence number of this packet's chunk
//   12     2    rank            sender rank (contribution) or destination rank
//                               (kAllRanks for a result sent to every worker)
//   14     2    slot            slot within the job's pool segment
//   16     2    element_count   number of 32-bit words after the header
//   18     1    flags           bit 0: pool version (shadow copy); bit 1: a
//                               kAuthTagBytes keyed MAC follows the payload;
//                               bit 2: a contribution sent again; bit 3: a
//                               result whose rank field names the previous
//                               result, bit 4 that result's pool version;
//                               bit 5: a contribution's copy, sent with it
//   19     1    reserved        0
//   20     2    exponent        int16: block exponent the values were scaled
//                               with (0 for int32 and for descriptor rounds)
//   22     2    next_exponent   int16: contribution: block exponent of the
//                               chunk that uses this slot next; result: the
//                               maximum over all workers
//
// docs/wire-format.md describes the semantics of each message type.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

#include "switchml/limits.h"  // kMaxElementsPerPacket

namespace switchml {

inline constexpr uint16_t kWireMagic = 0x534D;
inline constexpr uint8_t kWireVersion = 1;
inline constexpr size_t kHeaderBytes = 24;
inline constexpr uint16_t kAllRanks = 0xFFFF;
inline constexpr uint8_t kFlagVersionBit = 0x01;
inline constexpr uint8_t kFlagAuthenticated = 0x02;
// A contribution sent again (docs/wire-format.md): a switch that sees one
// arrive overtaken without it knows the fabric reordered, not lost, it.
inline constexpr uint8_t kFlagResend = 0x04;
// A result that names the one its switch sent to every rank before it, in
// the same job and to the same worker thread (docs/wire-format.md, "The
// previous result"): `rank` holds that result's slot, and
// kFlagPreviousVersion its pool version. Links keep order, so a worker that
// still waits for the named result lost it.
inline constexpr uint8_t kFlagNamesPrevious = 0x08;
inline constexpr uint8_t kFlagPreviousVersion = 0x10;
// A contribution's second copy, sent right after the first (not a resend;
// after a loss, the descriptor round: docs/wire-format.md, "An operation on
// the wire"). A switch that counted the first drops it without an answer;
// where the first was lost, it counts in instead.
inline constexpr uint8_t kFlagCopy = 0x20;
// The authentication trailer: a 12-byte nonce (sender id, counter) and a
// 16-byte Poly1305 tag (see src/net/packet_auth.h).
inline constexpr size_t kAuthTagBytes = 28;
// Where the flags byte lies: the one field that changes after encoding (a
// packet is marked authenticated when it is signed).
inline constexpr size_t kFlagsOffset = 18;

enum class MessageType : uint8_t {
  kContribution = 1,  // worker -> switch: k values for one slot
  kResult = 2,        // switch -> worker(s): the aggregated k values
  kPending = 3,       // switch -> worker: the slot is not complete yet; the
                      // payload is a bitmap of the ranks that contributed
  kNack = 4,          // switch -> the ranks missing from a stalled slot: resend;
                      // the payload is a bitmap of the missing ranks
  kProbe = 5,         // worker -> switch: no payload; asks for the slot's state
                      // (answered with the result or a kPending, never counted in)
};

struct PacketHeader {
  MessageType type = MessageType::kContribution;
  uint32_t job = 0;
  uint32_t chunk = 0;
  uint16_t rank = 0;
  uint16_t slot = 0;
  uint16_t element_count = 0;
  uint8_t version = 0;         // the pool version bit, 0 or 1
  bool authenticated = false;  // a MAC follows the payload (see PacketAuthenticator)
  bool resend = false;         // a contribution sent before (kFlagResend)
  bool copy = false;           // a contribution's copy sent with it (kFlagCopy)
  // A result: `rank` holds the slot of the previous result (kFlagNamesPrevious),
  // sent with pool version `previous_version`.
  bool names_previous = false;
  uint8_t previous_version = 0;
  int16_t exponent = 0;
  int16_t next_exponent = 0;
};

enum class DecodeError : uint8_t {
  kOk = 0,
  kTooShort,  // fewer than kHeaderBytes
  kBadMagic,
  kBadVersion,       // wire version we do not speak
  kBadType,          // unknown message type
  kLengthMismatch,   // bytes after the header != 4 * element_count (+ the MAC)
  kTooManyElements,  // element_count > kMaxElementsPerPacket
  kBadFlags,         // reserved flag bits or reserved byte set
};
inline constexpr int kNumDecodeErrors = 8;
const char* DecodeErrorName(DecodeError e);

// A validated view of a packet. `payload` points into the caller's buffer and
// is valid only while that buffer is; it holds element_count big-endian words.
// `tag` points to the MAC of an authenticated packet (else null).
struct PacketView {
  PacketHeader header;
  const uint8_t* payload = nullptr;
  const uint8_t* tag = nullptr;
};

// Bytes needed for a packet carrying `element_count` words (without a MAC).
constexpr size_t PacketBytes(uint16_t element_count) { return kHeaderBytes + 4u * element_count; }
// Room for the largest packet of `element_count` words, MAC included.
constexpr size_t MaxPacketBytes(uint16_t element_count) {
  return PacketBytes(element_count) + kAuthTagBytes;
}

// The largest power of two of elements per packet, 32..kMaxElementsPerPacket,
// whose IPv4/UDP datagrams (MAC included) fit a path of this MTU; 32 when
// even that does not fit.
uint16_t ElementsPerPacketForMtu(size_t mtu);

// Validates every field and fills `out`. Never reads outside `bytes`.
DecodeError DecodePacket(std::span<const uint8_t> bytes, PacketView* out);

// Writes the 24-byte header to `dst`.
// REQUIRES: dst.size() >= kHeaderBytes.
void EncodeHeader(const PacketHeader& h, std::span<uint8_t> dst);

// Marks an encoded packet as carrying a MAC (PacketAuthenticator::Sign).
// REQUIRES: the packet has at least kHeaderBytes.
inline void SetAuthenticatedFlag(uint8_t* packet) { packet[kFlagsOffset] |= kFlagAuthenticated; }
// Whether a packet of at least kHeaderBytes says it carries a MAC.
inline bool HasAuthenticatedFlag(std::span<const uint8_t> packet) {
  return packet.size() >= kHeaderBytes && (packet[kFlagsOffset] & kFlagAuthenticated) != 0;
}

// Big-endian 32-bit word access for payloads (unaligned is fine).
inline uint32_t ToBigEndian32(uint32_t v) {
  if constexpr (std::endian::native == std::endian::little) return __builtin_bswap32(v);
  return v;
}
inline uint32_t LoadBe32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return ToBigEndian32(v);
}
inline void StoreBe32(uint8_t* p, uint32_t v) {
  v = ToBigEndian32(v);
  std::memcpy(p, &v, 4);
}

// Whether the kNack packet `nack` names `rank` in either of its bitmaps
// (its packet was lost, or it is behind). REQUIRES: a validated packet
// (its element_count words, two bitmaps, lie in `nack`).
inline bool NackNames(std::span<const uint8_t> nack, uint16_t rank) {
  const size_t words = (size_t(nack[16]) << 8 | nack[17]) / 2;  // per bitmap
  if (rank / 32 >= words) return false;
  const uint8_t* word = nack.data() + kHeaderBytes + 4 * (rank / 32);
  return ((LoadBe32(word) | LoadBe32(word + 4 * words)) >> (rank % 32)) & 1;
}

// Serial-number order for 32-bit chunk ids (RFC 1982): true if a is older than b.
constexpr bool ChunkBefore(uint32_t a, uint32_t b) { return int32_t(a - b) < 0; }

}  // namespace switchml
