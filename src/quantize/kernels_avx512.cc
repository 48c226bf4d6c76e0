// AVX-512 kernels (this file alone is compiled with -mavx512f -mavx512bw).
// The bodies live in kernels_avx512.inc, which the tests also build on top of
// emulated intrinsics, so they are checked on any x86-64.
// GCC 12's AVX-512 headers make their "undefined" registers by
// self-initialization, which -Wmaybe-uninitialized flags (GCC bug 105593).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

#include <cstdint>

#include "quantize/kernels.h"

namespace switchml::kernels {
namespace {
#include "quantize/kernels_avx512.inc"
}  // namespace

const QuantizeKernels kAvx512 = Avx512KernelSet("avx512");

}  // namespace switchml::kernels
