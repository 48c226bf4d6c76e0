// The quantizer's and the data plane's inner loops, one set per instruction
// set, all bitwise identical to the scalar reference (tested). quantize.h's functions call
// the best set this CPU supports, chosen once at run time.
#pragma once

#include <cstddef>
#include <cstdint>

#include "quantize/quantize.h"

namespace switchml::kernels {

struct QuantizeKernels {
  const char* name;
  int16_t (*block_exponent)(const float* x, size_t n);
  void (*quantize)(const float* x, size_t n, BlockScale scale, uint8_t* dst_be);
  void (*dequantize)(const uint8_t* src_be, size_t n, BlockScale scale, float* out);
  // The same values, stored past the caches where the instruction set can.
  void (*dequantize_stream)(const uint8_t* src_be, size_t n, BlockScale scale, float* out);
  // dst[i] = src[i] with the bytes of each 32-bit word reversed (host order
  // <-> network order, either way).
  void (*swap32)(const uint8_t* src, size_t n, uint8_t* dst);
  // The same words, stored past the caches where the instruction set can.
  void (*swap32_stream)(const uint8_t* src, size_t n, uint8_t* dst);
  // acc[i] += big-endian src[i], wrapping (the switch's aggregation).
  void (*add_be32)(const uint8_t* src_be, size_t n, uint32_t* acc);
};

// The pieces of BlockExponent every kernel set shares. `static`: each file
// gets its own copy, so the AVX2 file's (compiled with -mavx2) can never be
// the one the scalar path runs.
//
// For non-negative floats the bit patterns order like the values, so an
// integer max over |x|'s bits finds the largest magnitude, and any bits at or
// above the infinity pattern mean NaN or Inf. Branch-free; vectorizes.
static inline uint32_t MaxAbsBits(const float* x, size_t n, uint32_t max_bits) {
  for (size_t i = 0; i < n; ++i) {
    uint32_t bits;
    __builtin_memcpy(&bits, &x[i], 4);
    bits &= 0x7FFFFFFFu;
    max_bits = bits > max_bits ? bits : max_bits;
  }
  return max_bits;
}
// A normal value with biased exponent E lies in [2^(E-127), 2^(E-126));
// denormals (E = 0) and zero fall to the minimum.
static inline int16_t ExponentOfMaxAbsBits(uint32_t max_bits) {
  if (max_bits >= 0x7F800000u) return kNonFiniteExponent;
  const int e = int(max_bits >> 23) - 126;
  return int16_t(e < kMinExponent ? kMinExponent : e);
}

// Leading elements to handle one by one so that `p` + 4 * that many is
// `alignment`-byte aligned (p is 4-byte aligned), at most n: the scalar head
// before non-temporal stores, which fault on unaligned addresses.
static inline size_t ElementsToAlignment(const void* p, size_t alignment, size_t n) {
  const size_t head = ((alignment - reinterpret_cast<uintptr_t>(p) % alignment) % alignment) / 4;
  return head < n ? head : n;
}

extern const QuantizeKernels kScalar;
extern const QuantizeKernels kAvx2;    // defined only where SWITCHML_HAVE_AVX2
extern const QuantizeKernels kAvx512;  // defined only where SWITCHML_HAVE_AVX512
// Null when the build or the CPU lacks AVX2.
const QuantizeKernels* Avx2();
// Null when the build or the CPU (or the OS's saved state) lacks AVX-512F/BW.
const QuantizeKernels* Avx512();
// The set in use: AVX-512 where available, else AVX2, else scalar.
const QuantizeKernels& Best();

}  // namespace switchml::kernels
