// The AVX-512 kernel bodies (src/quantize/kernels_avx512.inc) built on SIMDe's
// portable implementations of the intrinsics, so that quantize_test checks
// them bit for bit against the scalar reference on any CPU, AVX-512 or not.
// This file is compiled without -mavx512f: SIMDe then maps the _mm512_ names
// onto its own code.
#define SIMDE_ENABLE_NATIVE_ALIASES
#include "kernels_avx512_emulated.h"

#include <simde/x86/avx512.h>

#include <atomic>
#include <cstdint>

// SIMDe 0.7.4 lacks the 512-bit float conversions and the 512-bit streaming
// store. Intel defines the conversions lane by lane, so two of SIMDe's
// 256-bit ones (which round as the hardware does, by the current mode) make
// each. A streaming store differs from a store in caching and in faulting on
// an address not aligned to its size: these count such addresses instead.
namespace emulated {

std::atomic<uint64_t> misaligned_streaming_stores{0};

template <size_t kAlignment>
void CountIfMisaligned(const void* p) {
  if (reinterpret_cast<uintptr_t>(p) % kAlignment != 0) ++misaligned_streaming_stores;
}

// A 512-bit register of doubles from its 256-bit halves, and its halves.
inline simde__m512d Join(simde__m256d low, simde__m256d high) {
  return simde_mm512_insertf64x4(simde_mm512_castpd256_pd512(low), high, 1);
}
inline simde__m256d Low(simde__m512d a) { return simde_mm512_castpd512_pd256(a); }
inline simde__m256d High(simde__m512d a) { return simde_mm512_extractf64x4_pd(a, 1); }

inline simde__m512d CvtpsPd(simde__m256 a) {
  return Join(simde_mm256_cvtps_pd(simde_mm256_castps256_ps128(a)),
              simde_mm256_cvtps_pd(simde_mm256_extractf128_ps(a, 1)));
}
inline simde__m512d Cvtepi32Pd(simde__m256i a) {
  return Join(simde_mm256_cvtepi32_pd(simde_mm256_castsi256_si128(a)),
              simde_mm256_cvtepi32_pd(simde_mm256_extracti128_si256(a, 1)));
}
inline simde__m256i CvtpdEpi32(simde__m512d a) {
  return simde_mm256_set_m128i(simde_mm256_cvtpd_epi32(High(a)), simde_mm256_cvtpd_epi32(Low(a)));
}
inline simde__m256 CvtpdPs(simde__m512d a) {
  return simde_mm256_set_m128(simde_mm256_cvtpd_ps(High(a)), simde_mm256_cvtpd_ps(Low(a)));
}
inline void StreamSi512(simde__m512i* p, simde__m512i v) {
  CountIfMisaligned<64>(p);
  simde_mm512_storeu_si512(p, v);
}
inline void StreamPs(float* p, simde__m256 v) {
  CountIfMisaligned<32>(p);
  simde_mm256_storeu_ps(p, v);
}

}  // namespace emulated

#define _mm512_cvtps_pd emulated::CvtpsPd
#define _mm512_cvtpd_epi32 emulated::CvtpdEpi32
#define _mm512_cvtepi32_pd emulated::Cvtepi32Pd
#define _mm512_cvtpd_ps emulated::CvtpdPs
#define _mm512_stream_si512 emulated::StreamSi512
#undef _mm256_stream_ps  // SIMDe's, which neither checks nor may assume alignment
#define _mm256_stream_ps emulated::StreamPs

namespace switchml::kernels {
namespace {
#include "quantize/kernels_avx512.inc"
}  // namespace

const QuantizeKernels kAvx512Emulated = Avx512KernelSet("avx512 (emulated)");

uint64_t Avx512EmulatedMisalignedStreamingStores() {
  return emulated::misaligned_streaming_stores.load();
}

}  // namespace switchml::kernels
