// Block floating point: float32 <-> int32 so that the switch can sum integers.
//
// For a chunk x every worker computes its block exponent e with 2^e > max|x|
// (BlockExponent). The switch returns e_max, the maximum over the workers.
// All workers then use the same scale
//
//     f = Q / 2^e_max,   Q = floor((2^31 - 1) / n)
//
// (docs/design.md §4's (2^31-1)/(n 2^e_max), with the integer part taken so that
// |round(x f)| <= Q holds exactly and the n-way int32 sum cannot overflow),
// send round(x f) (round half to even) and divide the integer sum by f.
//
// Pure functions, no I/O, no allocation; safe to call from any thread.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>

namespace switchml {

// 2^-126 exceeds every denormal, so smaller magnitudes (and all-zero chunks)
// use this exponent. 2^128 exceeds every finite float.
inline constexpr int16_t kMinExponent = -126;
inline constexpr int16_t kMaxExponent = 128;
// Reported instead of an exponent when a chunk holds NaN or Inf. It is larger
// than any real exponent, so the switch's max propagates it to every worker.
inline constexpr int16_t kNonFiniteExponent = 0x7FFF;

// True for values a peer may legitimately send as an exponent.
constexpr bool IsValidExponent(int e) {
  return (e >= kMinExponent && e <= kMaxExponent) || e == kNonFiniteExponent;
}

// The block exponent of x[0..n): the smallest e >= kMinExponent with
// 2^e > max|x_i|, or kNonFiniteExponent if any x_i is NaN or +-Inf.
int16_t BlockExponent(const float* x, size_t n);

// The scale shared by all workers for one chunk.
struct BlockScale {
  double factor;   // f: multiply a float by this to get its integer
  double inverse;  // 1/f: multiply an integer sum by this to get the float
};

// REQUIRES: kMinExponent <= e_max <= kMaxExponent, 1 <= world_size <= 65535.
BlockScale MakeBlockScale(int e_max, int world_size);

// dst_be[4i..4i+4) = big-endian int32 round(x[i] * scale.factor).
// REQUIRES: x finite and |x[i]| < 2^e_max for the e_max of `scale`.
void QuantizeToBigEndian(const float* x, size_t n, BlockScale scale, uint8_t* dst_be);

// out[i] = float(int32(src_be word i) * scale.inverse).
void DequantizeFromBigEndian(const uint8_t* src_be, size_t n, BlockScale scale, float* out);
// The same values, written with non-temporal stores where the CPU has them:
// for outputs far larger than the caches, which nobody reads soon. They
// skip the read for ownership of every line and evict nothing.
void DequantizeFromBigEndianStreaming(const uint8_t* src_be, size_t n, BlockScale scale,
                                      float* out);

// Int32 tensors travel unscaled.
void Int32ToBigEndian(const int32_t* x, size_t n, uint8_t* dst_be);
void Int32FromBigEndian(const uint8_t* src_be, size_t n, int32_t* out);
// The same, with non-temporal stores (see DequantizeFromBigEndianStreaming).
void Int32FromBigEndianStreaming(const uint8_t* src_be, size_t n, int32_t* out);
// The switch's aggregation: acc[i] += big-endian src[i], wrapping mod 2^32.
void AddBigEndian(const uint8_t* src_be, size_t n, uint32_t* acc);

// The documented error bound of one element of a float32 all-reduce:
// |result - exact_sum| <= QuantizationErrorBound(n, e_max)(|exact_sum|).
// Each of the n workers rounds to the nearest integer (error <= 1/2 unit, one
// unit being 1/f), and the float32 result adds one rounding of at most 2^-24
// relative to its magnitude:
//     n / (2 f) + 2^-24 (|exact_sum| + n / (2 f))
// plus a 2^-40 relative margin for the double-precision intermediate steps and
// 2^-150 for results in float32's denormal range.
struct ErrorBound {
  double absolute;  // independent of the sum
  double relative;  // times |exact_sum|
  double operator()(double abs_exact_sum) const { return absolute + relative * abs_exact_sum; }
};
ErrorBound QuantizationErrorBound(int world_size, int e_max);

// Checks one block (chunk) of `len` elements of a float32 all-reduce's
// output against the exact sums of the ranks' inputs, taken in double:
// rows[r] is rank r's input for the block. Calls
//     on_element(j, |output[j] - exact|, sum of |input| over ranks, bound)
// for each element, `bound` being QuantizationErrorBound at the block's
// largest exponent (NaN errors compare false against it).
template <typename OnElement>
void CheckBlock(std::span<const float* const> rows, const float* output, size_t len,
                OnElement&& on_element) {
  int e_max = kMinExponent;
  for (const float* row : rows) e_max = std::max<int>(e_max, BlockExponent(row, len));
  const ErrorBound bound = QuantizationErrorBound(int(rows.size()), e_max);
  for (size_t j = 0; j < len; ++j) {
    double exact = 0, magnitude = 0;
    for (const float* row : rows) {
      exact += row[j];
      magnitude += std::fabs(row[j]);
    }
    on_element(j, std::fabs(double(output[j]) - exact), magnitude, bound(std::fabs(exact)));
  }
}

}  // namespace switchml
