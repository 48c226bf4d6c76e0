// Google Benchmark micro-benchmarks: the quantizer kernels next to memcpy (in
// the same run, so the ratio is meaningful on a noisy machine), the data
// plane's per-packet work, and the decoder.
//   build/switchml-microbench [--benchmark_format=json]
#include <benchmark/benchmark.h>

#include <cstring>
#include <random>
#include <vector>

#include "dataplane/data_plane.h"
#include "quantize/kernels.h"
#include "quantize/quantize.h"

namespace {

using namespace switchml;

std::vector<float> Floats(size_t n) {
  std::mt19937 rng(1);
  std::normal_distribution<float> normal;
  std::vector<float> x(n);
  for (float& v : x) v = normal(rng);
  return x;
}

// 0: scalar, 1: AVX2, 2: AVX-512; null where the CPU lacks the set.
const kernels::QuantizeKernels* Kernels(int which) {
  return which == 0 ? &kernels::kScalar : which == 1 ? kernels::Avx2() : kernels::Avx512();
}
constexpr const char* kMissingSet = "this CPU lacks this instruction set";

void BM_Memcpy(benchmark::State& state) {
  const size_t n = size_t(state.range(0));
  std::vector<float> src = Floats(n), dst(n);
  for (auto _ : state) {
    std::memcpy(dst.data(), src.data(), 4 * n);
    benchmark::DoNotOptimize(dst.data());
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(4 * n));
}

void BM_Quantize(benchmark::State& state) {
  const kernels::QuantizeKernels* k = Kernels(int(state.range(1)));
  if (k == nullptr) return state.SkipWithError(kMissingSet);
  state.SetLabel(k->name);
  const size_t n = size_t(state.range(0));
  std::vector<float> x = Floats(n);
  std::vector<uint8_t> out(4 * n);
  const BlockScale s = MakeBlockScale(k->block_exponent(x.data(), n), 8);
  for (auto _ : state) {
    k->quantize(x.data(), n, s, out.data());
    benchmark::DoNotOptimize(out.data());
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(4 * n));
}

void BM_Dequantize(benchmark::State& state) {
  const kernels::QuantizeKernels* k = Kernels(int(state.range(1)));
  if (k == nullptr) return state.SkipWithError(kMissingSet);
  state.SetLabel(k->name);
  const size_t n = size_t(state.range(0));
  std::vector<uint8_t> in(4 * n, 0x12);
  std::vector<float> out(n);
  const BlockScale s = MakeBlockScale(3, 8);
  for (auto _ : state) {
    k->dequantize(in.data(), n, s, out.data());
    benchmark::DoNotOptimize(out.data());
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(4 * n));
}

// As the worker fills a large result: one 32 KiB packet after another into
// a 64 MiB output, with stores through the caches (0) or past them (1).
void BM_DequantizeIntoLargeOutput(benchmark::State& state) {
  const bool stream = state.range(0) != 0;
  const kernels::QuantizeKernels& k = kernels::Best();
  state.SetLabel(std::string(k.name) + (stream ? " non-temporal" : " cached"));
  const size_t packet = 8192, n = size_t(16) << 20;
  std::vector<uint8_t> in(4 * packet, 0x12);
  std::vector<float> out(n, 1.0f);
  const BlockScale s = MakeBlockScale(3, 8);
  for (auto _ : state) {
    for (size_t i = 0; i < n; i += packet) {
      (stream ? k.dequantize_stream : k.dequantize)(in.data(), packet, s, out.data() + i);
    }
    benchmark::DoNotOptimize(out.data());
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(4 * n));
}

void BM_BlockExponent(benchmark::State& state) {
  const kernels::QuantizeKernels* k = Kernels(int(state.range(1)));
  if (k == nullptr) return state.SkipWithError(kMissingSet);
  state.SetLabel(k->name);
  const size_t n = size_t(state.range(0));
  std::vector<float> x = Floats(n);
  for (auto _ : state) benchmark::DoNotOptimize(k->block_exponent(x.data(), n));
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(4 * n));
}

// Contributions of `world` ranks into a pool, round after round: the switch's
// per-packet work (decode, checks, k adds, result on the last contribution).
void BM_DataPlaneContribution(benchmark::State& state) {
  const auto k = uint16_t(state.range(0));
  const uint16_t world = 4, slots = 64;
  DataPlaneConfig config;
  config.pool_slots = slots;
  config.max_elements_per_packet = k;
  DataPlane dp(config);
  (void)dp.RegisterJob({JobId(1), world, k, 0, slots});
  std::vector<std::vector<uint8_t>> packets(world, std::vector<uint8_t>(PacketBytes(k), 1));
  std::vector<uint8_t> out(PacketBytes(k));
  uint32_t round = 0;
  for (auto _ : state) {
    for (uint16_t slot = 0; slot < slots; ++slot) {
      for (uint16_t r = 0; r < world; ++r) {
        PacketHeader h;
        h.job = 1;
        h.rank = r;
        h.slot = slot;
        h.chunk = round * slots + slot;
        h.version = round & 1;
        h.element_count = k;
        EncodeHeader(h, packets[r]);
        benchmark::DoNotOptimize(dp.Process(packets[r], out));
      }
    }
    ++round;
  }
  state.SetItemsProcessed(int64_t(state.iterations()) * slots * world);
  state.SetBytesProcessed(int64_t(state.iterations()) * slots * world * int64_t(PacketBytes(k)));
}

void BM_DecodePacket(benchmark::State& state) {
  PacketHeader h;
  h.element_count = 256;
  std::vector<uint8_t> b(PacketBytes(256));
  EncodeHeader(h, b);
  PacketView v;
  for (auto _ : state) benchmark::DoNotOptimize(DecodePacket(b, &v));
  state.SetItemsProcessed(int64_t(state.iterations()));
}

BENCHMARK(BM_Memcpy)->Arg(1024)->Arg(8192)->Arg(1 << 20);
BENCHMARK(BM_Quantize)->ArgsProduct({{1024, 8192, 1 << 20}, {0, 1, 2}});
BENCHMARK(BM_Dequantize)->ArgsProduct({{1024, 8192, 1 << 20}, {0, 1, 2}});
BENCHMARK(BM_DequantizeIntoLargeOutput)->Arg(0)->Arg(1)->Arg(0)->Arg(1);
BENCHMARK(BM_BlockExponent)->ArgsProduct({{1024, 8192}, {0, 1, 2}});
BENCHMARK(BM_DataPlaneContribution)->Arg(64)->Arg(256)->Arg(1024)->Arg(8192);
BENCHMARK(BM_DecodePacket);

}  // namespace

BENCHMARK_MAIN();
