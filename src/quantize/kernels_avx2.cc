// AVX2 kernels (this file alone is compiled with -mavx2). Each lane does
// exactly the scalar reference's operations: float -> double, multiply,
// convert rounding half to even; and back: int -> double, multiply, round to
// float. So results are bitwise identical.
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "quantize/kernels.h"

namespace switchml::kernels {
namespace {

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

// Reverses the bytes of each 32-bit lane (host order <-> network order).
// Both loops work on 128-bit halves: loading, converting and storing each
// half on its own avoids the lane-crossing extracts and inserts of a
// 256-bit formulation, which were the bottleneck.
inline __m128i ByteSwap32(__m128i v) {
  const __m128i mask = _mm_setr_epi8(3, 2, 1, 0, 7, 6, 5, 4, 11, 10, 9, 8, 15, 14, 13, 12);
  return _mm_shuffle_epi8(v, mask);
}

void QuantizeAvx2(const float* x, size_t n, BlockScale scale, uint8_t* dst_be) {
  const __m256d factor = _mm256_set1_pd(scale.factor);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256d lo = _mm256_mul_pd(_mm256_cvtps_pd(_mm_loadu_ps(x + i)), factor);
    const __m256d hi = _mm256_mul_pd(_mm256_cvtps_pd(_mm_loadu_ps(x + i + 4)), factor);
    // The conversion rounds by MXCSR, half to even by default: the rounding
    // the scalar reference's 1.5 * 2^52 trick gets from the same register.
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst_be + 4 * i),
                     ByteSwap32(_mm256_cvtpd_epi32(lo)));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst_be + 4 * i + 16),
                     ByteSwap32(_mm256_cvtpd_epi32(hi)));
  }
  kScalar.quantize(x + i, n - i, scale, dst_be + 4 * i);
}

// kStream: non-temporal stores (16-byte aligned, after a scalar head), then
// a store fence so that the values are visible before anyone is told.
template <bool kStream>
void Dequantize(const uint8_t* src_be, size_t n, BlockScale scale, float* out) {
  const __m256d inverse = _mm256_set1_pd(scale.inverse);
  size_t i = 0;
  if constexpr (kStream) {
    i = ElementsToAlignment(out, 16, n);
    kScalar.dequantize(src_be, i, scale, out);
  }
  const auto store = [](float* p, __m128 v) {
    if constexpr (kStream) {
      _mm_stream_ps(p, v);
    } else {
      _mm_storeu_ps(p, v);
    }
  };
  // Two independent 8-lane steps per iteration keep both conversion chains busy.
  for (; i + 16 <= n; i += 16) {
    const __m128i q0 =
        ByteSwap32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src_be + 4 * i)));
    const __m128i q1 =
        ByteSwap32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src_be + 4 * i + 16)));
    const __m128i q2 =
        ByteSwap32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src_be + 4 * i + 32)));
    const __m128i q3 =
        ByteSwap32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src_be + 4 * i + 48)));
    const __m128 f0 = _mm256_cvtpd_ps(_mm256_mul_pd(_mm256_cvtepi32_pd(q0), inverse));
    const __m128 f1 = _mm256_cvtpd_ps(_mm256_mul_pd(_mm256_cvtepi32_pd(q1), inverse));
    const __m128 f2 = _mm256_cvtpd_ps(_mm256_mul_pd(_mm256_cvtepi32_pd(q2), inverse));
    const __m128 f3 = _mm256_cvtpd_ps(_mm256_mul_pd(_mm256_cvtepi32_pd(q3), inverse));
    store(out + i, f0);
    store(out + i + 4, f1);
    store(out + i + 8, f2);
    store(out + i + 12, f3);
  }
  for (; i + 8 <= n; i += 8) {
    const __m128i qlo =
        ByteSwap32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src_be + 4 * i)));
    const __m128i qhi =
        ByteSwap32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src_be + 4 * i + 16)));
    store(out + i, _mm256_cvtpd_ps(_mm256_mul_pd(_mm256_cvtepi32_pd(qlo), inverse)));
    store(out + i + 4, _mm256_cvtpd_ps(_mm256_mul_pd(_mm256_cvtepi32_pd(qhi), inverse)));
  }
  kScalar.dequantize(src_be + 4 * i, n - i, scale, out + i);
  if constexpr (kStream) _mm_sfence();
}

void DequantizeAvx2(const uint8_t* src_be, size_t n, BlockScale scale, float* out) {
  Dequantize<false>(src_be, n, scale, out);
}

void DequantizeStreamAvx2(const uint8_t* src_be, size_t n, BlockScale scale, float* out) {
  Dequantize<true>(src_be, n, scale, out);
}

// ByteSwap32 on a whole 256-bit register (the shuffle stays within lanes).
inline __m256i ByteSwap32x8(__m256i v) {
  const __m256i mask = _mm256_setr_epi8(3, 2, 1, 0, 7, 6, 5, 4, 11, 10, 9, 8, 15, 14, 13, 12, 3, 2,
                                        1, 0, 7, 6, 5, 4, 11, 10, 9, 8, 15, 14, 13, 12);
  return _mm256_shuffle_epi8(v, mask);
}

// kStream as in Dequantize (32-byte aligned stores, after a scalar head).
template <bool kStream>
void Swap32(const uint8_t* src, size_t n, uint8_t* dst) {
  size_t i = 0;
  if constexpr (kStream) {
    i = ElementsToAlignment(dst, 32, n);
    kScalar.swap32(src, i, dst);
  }
  const auto store = [](uint8_t* p, __m256i v) {
    if constexpr (kStream) {
      _mm256_stream_si256(reinterpret_cast<__m256i*>(p), v);
    } else {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), v);
    }
  };
  for (; i + 16 <= n; i += 16) {
    const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + 4 * i));
    const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + 4 * i + 32));
    store(dst + 4 * i, ByteSwap32x8(a));
    store(dst + 4 * i + 32, ByteSwap32x8(b));
  }
  kScalar.swap32(src + 4 * i, n - i, dst + 4 * i);
  if constexpr (kStream) _mm_sfence();
}

void Swap32Avx2(const uint8_t* src, size_t n, uint8_t* dst) { Swap32<false>(src, n, dst); }

void Swap32StreamAvx2(const uint8_t* src, size_t n, uint8_t* dst) { Swap32<true>(src, n, dst); }

void AddBe32Avx2(const uint8_t* src_be, size_t n, uint32_t* acc) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    auto* a = reinterpret_cast<__m256i*>(acc + i);
    const __m256i s0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src_be + 4 * i));
    const __m256i s1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src_be + 4 * i + 32));
    _mm256_storeu_si256(a, _mm256_add_epi32(_mm256_loadu_si256(a), ByteSwap32x8(s0)));
    _mm256_storeu_si256(a + 1, _mm256_add_epi32(_mm256_loadu_si256(a + 1), ByteSwap32x8(s1)));
  }
  kScalar.add_be32(src_be + 4 * i, n - i, acc + i);
}

}  // namespace

const QuantizeKernels kAvx2 = {"avx2",           BlockExponentAvx2,    QuantizeAvx2,
                               DequantizeAvx2,   DequantizeStreamAvx2, Swap32Avx2,
                               Swap32StreamAvx2, AddBe32Avx2};

}  // namespace switchml::kernels
