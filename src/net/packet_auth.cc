#include "net/packet_auth.h"

#include <sodium.h>

#include "wire/wire_format.h"

namespace switchml::net {
namespace {

struct SodiumInit {
  SodiumInit() {
    if (sodium_init() < 0) std::abort();  // no usable randomness source: nothing can be safe
  }
};
void EnsureSodium() { static SodiumInit once; }

}  // namespace

StatusOr<AuthKey> ParseAuthKey(const std::string& hex) {
  AuthKey key{};
  size_t written = 0;
  const char* end = nullptr;
  if (hex.size() != 2 * kAuthKeyBytes ||
      sodium_hex2bin(key.data(), key.size(), hex.data(), hex.size(), nullptr, &written, &end) !=
          0 ||
      written != kAuthKeyBytes) {
    return InvalidArgument(
        "auth_key must be 64 hexadecimal digits (32 random bytes), e.g. from "
        "'head -c32 /dev/urandom | od -An -tx1 | tr -d \" \\n\"'");
  }
  return key;
}

std::string RandomSalt() {
  EnsureSodium();
  std::string salt(kAuthSaltBytes, '\0');
  randombytes_buf(salt.data(), salt.size());
  return salt;
}

PacketAuthenticator::PacketAuthenticator(const AuthKey& job_secret, const std::string& salt,
                                         uint32_t job, uint32_t sender_id)
    : sender_id_(sender_id) {
  EnsureSodium();
  std::string context = "switchml-v1" + salt;
  for (int i = 0; i < 4; ++i) context += char(job >> (8 * i));
  crypto_generichash(key_.data(), key_.size(), reinterpret_cast<const uint8_t*>(context.data()),
                     context.size(), job_secret.data(), job_secret.size());
}

namespace {
constexpr size_t kNonceBytes = crypto_aead_chacha20poly1305_IETF_NPUBBYTES;
constexpr size_t kTagBytes = crypto_aead_chacha20poly1305_IETF_ABYTES;
static_assert(kNonceBytes + kTagBytes == kAuthTagBytes);

// The tag of `length` bytes of associated data under `nonce`.
void Tag(const uint8_t* data, size_t length, const uint8_t* nonce, const AuthKey& key,
         uint8_t* tag) {
  unsigned long long tag_length = 0;
  uint8_t no_ciphertext[1];  // the message is empty; the packet is associated data
  crypto_aead_chacha20poly1305_ietf_encrypt_detached(no_ciphertext, tag, &tag_length, nullptr, 0,
                                                     data, length, nullptr, nonce, key.data());
}
}  // namespace

size_t PacketAuthenticator::Sign(uint8_t* packet, size_t length) {
  SetAuthenticatedFlag(packet);
  uint8_t* nonce = packet + length;
  const uint64_t count = counter_++;
  for (int i = 0; i < 4; ++i) nonce[i] = uint8_t(sender_id_ >> (8 * i));
  for (int i = 0; i < 8; ++i) nonce[4 + i] = uint8_t(count >> (8 * i));
  Tag(packet, length, nonce, key_, nonce + kNonceBytes);
  return length + kAuthTagBytes;
}

bool PacketAuthenticator::Verify(std::span<const uint8_t> packet) const {
  if (packet.size() < kHeaderBytes + kAuthTagBytes || !HasAuthenticatedFlag(packet)) {
    return false;
  }
  const size_t length = packet.size() - kAuthTagBytes;
  uint8_t expected[kTagBytes];
  Tag(packet.data(), length, packet.data() + length, key_, expected);
  return sodium_memcmp(expected, packet.data() + length + kNonceBytes, kTagBytes) == 0;
}

}  // namespace switchml::net
