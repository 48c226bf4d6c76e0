// The AVX-512 kernel set built on emulated intrinsics (tests only).
#pragma once

#include "quantize/kernels.h"

namespace switchml::kernels {

// The same bodies as kAvx512, runnable on any CPU (slowly).
extern const QuantizeKernels kAvx512Emulated;

}  // namespace switchml::kernels
