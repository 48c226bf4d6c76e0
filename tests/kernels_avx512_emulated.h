// The AVX-512 kernel set built on emulated intrinsics (tests only).
#pragma once

#include <cstdint>

#include "quantize/kernels.h"

namespace switchml::kernels {

// The same bodies as kAvx512, runnable on any CPU (slowly).
extern const QuantizeKernels kAvx512Emulated;
// Streaming stores kAvx512Emulated has made to addresses that the hardware
// would fault on (not aligned to the store's size), since the start.
uint64_t Avx512EmulatedMisalignedStreamingStores();

}  // namespace switchml::kernels
