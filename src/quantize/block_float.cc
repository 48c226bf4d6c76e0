#include <cmath>
#include <cstring>

#include "switchml/quantize.h"
#include "switchml/wire_format.h"

namespace switchml {

int16_t BlockExponent(const float* x, size_t n) {
  float max_abs = 0.0f;
  // One pass; NaN and Inf are detected through the exponent bits so the loop
  // stays branch-light.
  uint32_t non_finite = 0;
  for (size_t i = 0; i < n; ++i) {
    uint32_t bits;
    std::memcpy(&bits, &x[i], 4);
    non_finite |= uint32_t((bits & 0x7F800000u) == 0x7F800000u);
    const float a = std::fabs(x[i]);
    max_abs = a > max_abs ? a : max_abs;
  }
  if (non_finite) return kNonFiniteExponent;
  if (max_abs == 0.0f) return kMinExponent;
  int e = 0;
  std::frexp(max_abs, &e);  // max_abs = m * 2^e, m in [0.5, 1)  =>  max_abs < 2^e
  return int16_t(e < kMinExponent ? kMinExponent : e);
}

BlockScale MakeBlockScale(int e_max, int world_size) {
  const double q = std::floor(2147483647.0 / world_size);
  return BlockScale{std::ldexp(q, -e_max), std::ldexp(1.0, e_max) / q};
}

void QuantizeToBigEndian(const float* x, size_t n, BlockScale scale, uint8_t* dst_be) {
  for (size_t i = 0; i < n; ++i) {
    // nearbyint rounds half to even in the default rounding mode, as the SIMD
    // conversion instructions do.
    const auto q = int32_t(std::nearbyint(double(x[i]) * scale.factor));
    StoreBe32(dst_be + 4 * i, uint32_t(q));
  }
}

void DequantizeFromBigEndian(const uint8_t* src_be, size_t n, BlockScale scale, float* out) {
  for (size_t i = 0; i < n; ++i) {
    out[i] = float(double(int32_t(LoadBe32(src_be + 4 * i))) * scale.inverse);
  }
}

void Int32ToBigEndian(const int32_t* x, size_t n, uint8_t* dst_be) {
  for (size_t i = 0; i < n; ++i) StoreBe32(dst_be + 4 * i, uint32_t(x[i]));
}

void Int32FromBigEndian(const uint8_t* src_be, size_t n, int32_t* out) {
  for (size_t i = 0; i < n; ++i) out[i] = int32_t(LoadBe32(src_be + 4 * i));
}

double QuantizationErrorBound(int world_size, int e_max, double abs_exact_sum) {
  const BlockScale s = MakeBlockScale(e_max, world_size);
  const double rounding = 0.5 * world_size * s.inverse;
  const double output = std::ldexp(abs_exact_sum + rounding, -24);
  // Results below 2^-126 are float32 denormals, spaced 2^-149 apart.
  const double denormal = std::ldexp(1.0, -150);
  return (rounding + output) * (1.0 + std::ldexp(1.0, -40)) + denormal;
}

}  // namespace switchml
