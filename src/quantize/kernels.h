// The quantizer's inner loops, one set per instruction set, all bitwise
// identical to the scalar reference (tested). quantize.h's functions call
// the best set this CPU supports, chosen once at run time.
#pragma once

#include <cstddef>
#include <cstdint>

#include "switchml/quantize.h"

namespace switchml::kernels {

struct QuantizeKernels {
  const char* name;
  int16_t (*block_exponent)(const float* x, size_t n);
  void (*quantize)(const float* x, size_t n, BlockScale scale, uint8_t* dst_be);
  void (*dequantize)(const uint8_t* src_be, size_t n, BlockScale scale, float* out);
};

extern const QuantizeKernels kScalar;
extern const QuantizeKernels kAvx2;  // defined only where SWITCHML_HAVE_AVX2
// Null when the build or the CPU lacks AVX2.
const QuantizeKernels* Avx2();
// The set in use: AVX2 where available, else scalar.
const QuantizeKernels& Best();

}  // namespace switchml::kernels
