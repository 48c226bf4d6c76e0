#include <cmath>
#include <cstring>

#include "quantize/kernels.h"
#include "quantize/quantize.h"
#include "wire/wire_format.h"

namespace switchml {

namespace kernels {
namespace {

int16_t BlockExponentScalar(const float* x, size_t n) {
  return ExponentOfMaxAbsBits(MaxAbsBits(x, n, 0));
}

void QuantizeScalar(const float* x, size_t n, BlockScale scale, uint8_t* dst_be) {
  // Adding and subtracting 1.5 * 2^52 rounds a double of magnitude below 2^51
  // to an integer, half to even (the default rounding mode), exactly like
  // nearbyint and the SIMD conversions; |x * f| < 2^31 here.
  constexpr double kRound = 0x1.8p52;
  for (size_t i = 0; i < n; ++i) {
    const double rounded = (double(x[i]) * scale.factor + kRound) - kRound;
    StoreBe32(dst_be + 4 * i, uint32_t(int32_t(rounded)));
  }
}

void DequantizeScalar(const uint8_t* src_be, size_t n, BlockScale scale, float* out) {
  for (size_t i = 0; i < n; ++i) {
    out[i] = float(double(int32_t(LoadBe32(src_be + 4 * i))) * scale.inverse);
  }
}

void Swap32Scalar(const uint8_t* src, size_t n, uint8_t* dst) {
  for (size_t i = 0; i < n; ++i) {
    uint32_t word;
    std::memcpy(&word, src + 4 * i, 4);
    StoreBe32(dst + 4 * i, word);
  }
}

void AddBe32Scalar(const uint8_t* src_be, size_t n, uint32_t* acc) {
  for (size_t i = 0; i < n; ++i) acc[i] += LoadBe32(src_be + 4 * i);
}

}  // namespace

const QuantizeKernels kScalar = {"scalar",         BlockExponentScalar, QuantizeScalar,
                                 DequantizeScalar, DequantizeScalar,    Swap32Scalar,
                                 Swap32Scalar,     AddBe32Scalar};

#if SWITCHML_HAVE_AVX2
const QuantizeKernels* Avx2() { return __builtin_cpu_supports("avx2") ? &kAvx2 : nullptr; }
#else
const QuantizeKernels* Avx2() { return nullptr; }
#endif

#if SWITCHML_HAVE_AVX512
// __builtin_cpu_supports also checks that the OS saves the AVX-512 registers.
const QuantizeKernels* Avx512() {
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") ? &kAvx512
                                                                                 : nullptr;
}
#else
const QuantizeKernels* Avx512() { return nullptr; }
#endif

const QuantizeKernels& Best() {
  static const QuantizeKernels& best = Avx512() != nullptr ? *Avx512()
                                       : Avx2() != nullptr ? *Avx2()
                                                           : kScalar;
  return best;
}

}  // namespace kernels

int16_t BlockExponent(const float* x, size_t n) { return kernels::Best().block_exponent(x, n); }

BlockScale MakeBlockScale(int e_max, int world_size) {
  const double q = std::floor(2147483647.0 / world_size);
  return BlockScale{std::ldexp(q, -e_max), std::ldexp(1.0, e_max) / q};
}

void QuantizeToBigEndian(const float* x, size_t n, BlockScale scale, uint8_t* dst_be) {
  kernels::Best().quantize(x, n, scale, dst_be);
}

void DequantizeFromBigEndian(const uint8_t* src_be, size_t n, BlockScale scale, float* out) {
  kernels::Best().dequantize(src_be, n, scale, out);
}

void DequantizeFromBigEndianStreaming(const uint8_t* src_be, size_t n, BlockScale scale,
                                      float* out) {
  kernels::Best().dequantize_stream(src_be, n, scale, out);
}

void Int32ToBigEndian(const int32_t* x, size_t n, uint8_t* dst_be) {
  kernels::Best().swap32(reinterpret_cast<const uint8_t*>(x), n, dst_be);
}

void Int32FromBigEndian(const uint8_t* src_be, size_t n, int32_t* out) {
  kernels::Best().swap32(src_be, n, reinterpret_cast<uint8_t*>(out));
}

void Int32FromBigEndianStreaming(const uint8_t* src_be, size_t n, int32_t* out) {
  kernels::Best().swap32_stream(src_be, n, reinterpret_cast<uint8_t*>(out));
}

void AddBigEndian(const uint8_t* src_be, size_t n, uint32_t* acc) {
  kernels::Best().add_be32(src_be, n, acc);
}

ErrorBound QuantizationErrorBound(int world_size, int e_max) {
  const BlockScale s = MakeBlockScale(e_max, world_size);
  const double rounding = 0.5 * world_size * s.inverse;  // n workers, 1/2 unit each
  const double margin = 1.0 + std::ldexp(1.0, -40);      // double-precision steps
  const double float_rounding = std::ldexp(1.0, -24);    // the float32 result
  // Results below 2^-126 are float32 denormals, spaced 2^-149 apart.
  const double denormal = std::ldexp(1.0, -150);
  return ErrorBound{(rounding + float_rounding * rounding) * margin + denormal,
                    float_rounding * margin};
}

}  // namespace switchml
