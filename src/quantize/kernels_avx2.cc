// AVX2 kernels (this file alone is compiled with -mavx2). Each lane does
// exactly the scalar reference's operations: float -> double, multiply,
// round half to even, convert; and back: int -> double, multiply, round to
// float. So results are bitwise identical.
#include <immintrin.h>

#include <cstring>

#include "quantize/kernels.h"

namespace switchml::kernels {
namespace {

// Reverses the bytes of each 32-bit lane (host order <-> network order).
inline __m256i ByteSwap32(__m256i v) {
  const __m256i mask = _mm256_setr_epi8(3, 2, 1, 0, 7, 6, 5, 4, 11, 10, 9, 8, 15, 14, 13, 12,
                                        3, 2, 1, 0, 7, 6, 5, 4, 11, 10, 9, 8, 15, 14, 13, 12);
  return _mm256_shuffle_epi8(v, mask);
}

int16_t BlockExponentAvx2(const float* x, size_t n) {
  const __m256i abs_mask = _mm256_set1_epi32(0x7FFFFFFF);
  __m256i max = _mm256_setzero_si256();
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i bits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i));
    max = _mm256_max_epu32(max, _mm256_and_si256(bits, abs_mask));
  }
  uint32_t lanes[8];
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(lanes), max);
  uint32_t max_bits = 0;
  for (uint32_t v : lanes) max_bits = v > max_bits ? v : max_bits;
  // The tail, and the exponent, as the scalar kernel does.
  return ExponentOfMaxAbsBits(MaxAbsBits(x + i, n - i, max_bits));
}

void QuantizeAvx2(const float* x, size_t n, BlockScale scale, uint8_t* dst_be) {
  const __m256d factor = _mm256_set1_pd(scale.factor);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 f = _mm256_loadu_ps(x + i);
    const __m256d lo = _mm256_mul_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(f)), factor);
    const __m256d hi = _mm256_mul_pd(_mm256_cvtps_pd(_mm256_extractf128_ps(f, 1)), factor);
    constexpr int kRound = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;  // half to even
    const __m128i qlo = _mm256_cvtpd_epi32(_mm256_round_pd(lo, kRound));
    const __m128i qhi = _mm256_cvtpd_epi32(_mm256_round_pd(hi, kRound));
    const __m256i q = _mm256_inserti128_si256(_mm256_castsi128_si256(qlo), qhi, 1);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst_be + 4 * i), ByteSwap32(q));
  }
  kScalar.quantize(x + i, n - i, scale, dst_be + 4 * i);
}

void DequantizeAvx2(const uint8_t* src_be, size_t n, BlockScale scale, float* out) {
  const __m256d inverse = _mm256_set1_pd(scale.inverse);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i q =
        ByteSwap32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src_be + 4 * i)));
    const __m256d lo = _mm256_mul_pd(_mm256_cvtepi32_pd(_mm256_castsi256_si128(q)), inverse);
    const __m256d hi = _mm256_mul_pd(_mm256_cvtepi32_pd(_mm256_extracti128_si256(q, 1)), inverse);
    const __m256 f = _mm256_insertf128_ps(_mm256_castps128_ps256(_mm256_cvtpd_ps(lo)),
                                          _mm256_cvtpd_ps(hi), 1);
    _mm256_storeu_ps(out + i, f);
  }
  kScalar.dequantize(src_be + 4 * i, n - i, scale, out + i);
}

}  // namespace

const QuantizeKernels kAvx2 = {"avx2", BlockExponentAvx2, QuantizeAvx2, DequantizeAvx2};

}  // namespace switchml::kernels
