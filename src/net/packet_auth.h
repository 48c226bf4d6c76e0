// Per-job packet authentication for the software switch and its workers.
// An authenticated packet sets header flag kFlagAuthenticated and ends with a
// kAuthTagBytes trailer: a 12-byte nonce and the 16-byte tag of
// ChaCha20-Poly1305 (IETF, libsodium) over the header and payload as
// associated data, i.e. a Poly1305 MAC under a per-nonce one-time key.
//
// Nonces never repeat under one key: each sender has its own 32-bit id in
// the nonce (the switch, or rank << 16 | thread) and counts its packets in
// the other 64 bits. Every registration of a job gets a fresh random salt
// from the switch and the key is BLAKE2b(key = the job's secret,
// "switchml-v1" || salt || job id), so counters restart safely and packets
// recorded from an earlier registration never verify, even when a restarted
// switch hands out the same job id again. See docs/security.md.
//
// Thread safety: Verify() may run concurrently; Sign() advances the sender's
// counter, so each sending thread owns its own authenticator.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>

#include "switchml/status.h"

namespace switchml::net {

inline constexpr size_t kAuthKeyBytes = 32;
inline constexpr size_t kAuthSaltBytes = 16;
using AuthKey = std::array<uint8_t, kAuthKeyBytes>;

// 64 hexadecimal digits -> key. Errors say how to make one.
StatusOr<AuthKey> ParseAuthKey(const std::string& hex);
// kAuthSaltBytes random bytes.
std::string RandomSalt();

inline constexpr uint32_t kSwitchSenderId = 0xFFFFFFFF;
constexpr uint32_t WorkerSenderId(uint16_t rank, uint16_t thread) {
  return uint32_t(rank) << 16 | thread;
}

class PacketAuthenticator {
 public:
  PacketAuthenticator(const AuthKey& job_secret, const std::string& salt, uint32_t job,
                      uint32_t sender_id);

  // Sets the flag and writes the trailer after the `length` bytes of
  // `packet`, whose buffer must have kAuthTagBytes more room. Returns the new
  // length.
  size_t Sign(uint8_t* packet, size_t length);
  // True if the packet carries the flag and a tag that verifies.
  bool Verify(std::span<const uint8_t> packet) const;

 private:
  AuthKey key_;
  uint32_t sender_id_;
  uint64_t counter_ = 0;
};

}  // namespace switchml::net
