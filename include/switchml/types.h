// Basic vocabulary types shared by every layer: distinct id types, element
// types and time. Header-only; no I/O.
#pragma once

#include <chrono>
#include <compare>
#include <cstdint>
#include <string_view>

namespace switchml {

// A distinct integer type per kind of id, so a rank can never be passed where
// a slot is expected. `Tag` only distinguishes the types.
template <typename Tag, typename Rep>
class StrongId {
 public:
  using rep = Rep;
  constexpr StrongId() = default;
  constexpr explicit StrongId(Rep v) : v_(v) {}
  constexpr Rep value() const { return v_; }
  friend constexpr auto operator<=>(StrongId, StrongId) = default;

 private:
  Rep v_{};
};

using JobId = StrongId<struct JobIdTag, uint32_t>;     // a registered job on one switch
using Rank = StrongId<struct RankTag, uint16_t>;       // a worker's index in its job
using SlotIndex = StrongId<struct SlotTag, uint16_t>;  // a slot within a job's pool segment

// Element types an all-reduce accepts.
enum class DType : uint8_t {
  kInt32 = 1,    // summed exactly (two's-complement wrap on overflow)
  kFloat32 = 2,  // quantized to int32 with block floating point
};

constexpr std::string_view DTypeName(DType t) {
  return t == DType::kInt32 ? "int32" : t == DType::kFloat32 ? "float32" : "invalid";
}
constexpr bool IsValidDType(uint8_t t) { return t == 1 || t == 2; }

// Protocol time is injected: engines never read a clock themselves. The
// simulation feeds virtual time, real transports feed steady_clock.
using Nanos = std::chrono::nanoseconds;

}  // namespace switchml
