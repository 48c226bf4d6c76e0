#include "worker/op_descriptor.h"

#include <algorithm>
#include <array>

#include "wire/wire_format.h"

namespace switchml {
namespace {

// Byte fields of the descriptor, in payload order.
struct Field {
  const char* name;
  size_t first;  // first byte
  size_t size;
};
constexpr std::array<Field, 3> kFields = {{
    {"tensor length (elements)", 0, 8},
    {"dtype", 8, 1},
    {"elements per packet", 9, 2},
}};

constexpr size_t kCheckedBytes = 11;

std::array<uint8_t, kCheckedBytes> Bytes(const OpDescriptor& d) {
  std::array<uint8_t, kCheckedBytes> b{};
  for (int i = 0; i < 8; ++i) b[i] = uint8_t(d.element_count >> (8 * i));
  b[8] = uint8_t(d.dtype);
  b[9] = uint8_t(d.elements_per_packet);
  b[10] = uint8_t(d.elements_per_packet >> 8);
  return b;
}

std::string Describe(const OpDescriptor& d, size_t field) {
  switch (field) {
    case 0:
      return std::to_string(d.element_count);
    case 1:
      return std::string(DTypeName(d.dtype));
    default:
      return std::to_string(d.elements_per_packet);
  }
}

}  // namespace

void EncodeDescriptor(const OpDescriptor& d, uint8_t* dst_be) {
  const auto bytes = Bytes(d);
  for (size_t j = 0; j < bytes.size(); ++j) {
    StoreBe32(dst_be + 8 * j, bytes[j]);
    StoreBe32(dst_be + 8 * j + 4, uint32_t(bytes[j]) * bytes[j]);
  }
  StoreBe32(dst_be + 8 * kCheckedBytes, d.proposed_slots);
  StoreBe32(dst_be + 8 * kCheckedBytes + 4, d.saw_loss ? 1 : 0);
}

bool AgreedRedundantHeaders(const uint8_t* sums_be) {
  return LoadBe32(sums_be + 8 * kCheckedBytes + 4) != 0;
}

uint16_t AgreedSlots(const uint8_t* sums_be, int world_size) {
  const uint64_t sum = LoadBe32(sums_be + 8 * kCheckedBytes);
  const uint64_t n = uint64_t(world_size);
  return uint16_t(std::clamp<uint64_t>((sum + n - 1) / n, 1, 65535));
}

std::string CheckDescriptorSums(const OpDescriptor& mine, const uint8_t* sums_be, int world_size) {
  const auto bytes = Bytes(mine);
  const uint64_t n = uint64_t(world_size);
  for (size_t f = 0; f < kFields.size(); ++f) {
    for (size_t j = kFields[f].first; j < kFields[f].first + kFields[f].size; ++j) {
      const uint64_t sum = LoadBe32(sums_be + 8 * j);
      const uint64_t sum_sq = LoadBe32(sums_be + 8 * j + 4);
      if (n * sum_sq != sum * sum || sum != n * bytes[j]) {
        return std::string("workers disagree on the all-reduce's ") + kFields[f].name +
               " (this worker: " + Describe(mine, f) +
               "); every rank must call all-reduce in the same order with the same "
               "length and dtype";
      }
    }
  }
  return "";
}

}  // namespace switchml
