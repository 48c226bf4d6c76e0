#include "quantize/quantize.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "kernels_avx512_emulated.h"
#include "quantize/kernels.h"
#include "wire/wire_format.h"

namespace switchml {
namespace {

std::vector<int32_t> Quantize(const std::vector<float>& x, int e, int n) {
  std::vector<uint8_t> be(4 * x.size());
  QuantizeToBigEndian(x.data(), x.size(), MakeBlockScale(e, n), be.data());
  std::vector<int32_t> q(x.size());
  Int32FromBigEndian(be.data(), x.size(), q.data());
  return q;
}

TEST(BlockExponent, IsSmallestPowerOfTwoAboveMax) {
  for (int e = -100; e <= 127; e += 7) {
    const float p = std::ldexp(1.0f, e);
    std::vector<float> x = {0.25f * p, -p};  // max |x| == 2^e exactly
    EXPECT_EQ(BlockExponent(x.data(), x.size()), e + 1);
    x[1] = -std::nextafter(p, 0.0f);  // just below 2^e
    EXPECT_EQ(BlockExponent(x.data(), x.size()), e);
  }
  const float biggest = std::numeric_limits<float>::max();
  EXPECT_EQ(BlockExponent(&biggest, 1), kMaxExponent);
}

TEST(BlockExponent, ZerosAndDenormalsUseTheMinimum) {
  const std::vector<float> zeros = {0.0f, -0.0f, 0.0f};
  EXPECT_EQ(BlockExponent(zeros.data(), zeros.size()), kMinExponent);
  EXPECT_EQ(BlockExponent(nullptr, 0), kMinExponent);
  const std::vector<float> denormals = {std::numeric_limits<float>::denorm_min(), -1e-40f};
  EXPECT_EQ(BlockExponent(denormals.data(), denormals.size()), kMinExponent);
}

TEST(BlockExponent, NanAndInfAreReported) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (float bad : {inf, -inf, nan}) {
    std::vector<float> x = {1.0f, bad, 2.0f};
    EXPECT_EQ(BlockExponent(x.data(), x.size()), kNonFiniteExponent);
  }
  EXPECT_TRUE(IsValidExponent(kNonFiniteExponent));
  EXPECT_FALSE(IsValidExponent(kMinExponent - 1));
  EXPECT_FALSE(IsValidExponent(kMaxExponent + 1));
}

TEST(Quantize, ExtremeInputsOfAllWorkersCannotOverflowTheSum) {
  for (int n : {1, 2, 3, 7, 64, 1000, 65534}) {
    for (int e : {int(kMinExponent), -3, 0, 20, int(kMaxExponent)}) {
      // The largest magnitude strictly below 2^e, on every worker.
      const float top = std::nextafter(float(std::ldexp(1.0, e)), 0.0f);
      if (!std::isfinite(top)) continue;
      const std::vector<int32_t> q = Quantize({top, -top}, e, n);
      const int64_t limit = (int64_t{1} << 31) - 1;
      EXPECT_LE(int64_t(q[0]) * n, limit) << n << " " << e;
      EXPECT_GE(int64_t(q[1]) * n, -limit) << n << " " << e;
      EXPECT_GT(q[0], 0);
    }
  }
}

TEST(Quantize, RoundsHalfToEvenAndKeepsZeroes) {
  // n = 2^30 makes Q = floor((2^31-1)/n) = 1, so with e = 0 the scale is 1.
  const int n = 1 << 30;
  const std::vector<int32_t> q = Quantize({0.5f, -0.5f, 0.75f, 0.25f, 0.0f, -0.0f}, 0, n);
  EXPECT_EQ(q, (std::vector<int32_t>{0, 0, 1, 0, 0, 0}));  // half away from zero would give 1
}

TEST(Quantize, RoundTripIsWithinTheDocumentedBound) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int n : {1, 2, 8, 64}) {
    for (int scale : {-130, -20, 0, 30, 120}) {
      std::vector<std::vector<float>> xs(n, std::vector<float>(257));
      int e_max = kMinExponent;
      for (auto& x : xs) {
        for (float& v : x) v = normal(rng) * std::ldexp(1.0f, scale);
        e_max = std::max<int>(e_max, BlockExponent(x.data(), x.size()));
      }
      const BlockScale s = MakeBlockScale(e_max, n);
      std::vector<uint32_t> sum(257, 0);
      for (auto& x : xs) {
        std::vector<uint8_t> be(4 * x.size());
        QuantizeToBigEndian(x.data(), x.size(), s, be.data());
        for (size_t i = 0; i < x.size(); ++i) sum[i] += LoadBe32(&be[4 * i]);
      }
      std::vector<uint8_t> sum_be(4 * sum.size());
      for (size_t i = 0; i < sum.size(); ++i) StoreBe32(&sum_be[4 * i], sum[i]);
      std::vector<float> out(sum.size());
      DequantizeFromBigEndian(sum_be.data(), out.size(), s, out.data());
      double worst_ratio = 0;
      for (size_t i = 0; i < out.size(); ++i) {
        double exact = 0;
        for (auto& x : xs) exact += x[i];
        const double bound = QuantizationErrorBound(n, e_max)(std::fabs(exact));
        const double err = std::fabs(out[i] - exact);
        EXPECT_LE(err, bound) << "n=" << n << " scale=" << scale << " i=" << i;
        worst_ratio = std::max(worst_ratio, err / bound);
      }
      // The bound is not vacuous: errors come within a factor 50 of it.
      if (scale > -130) {
        EXPECT_GT(worst_ratio, 0.02) << n << " " << scale;
      }
    }
  }
}

TEST(Quantize, Int32PassesThroughInNetworkOrder) {
  const std::vector<int32_t> x = {0, 1, -1, 0x7FFFFFFF, int32_t(0x80000000), 0x01020304};
  std::vector<uint8_t> be(4 * x.size());
  Int32ToBigEndian(x.data(), x.size(), be.data());
  EXPECT_EQ(be[20], 0x01);
  EXPECT_EQ(be[23], 0x04);
  std::vector<int32_t> back(x.size());
  Int32FromBigEndian(be.data(), x.size(), back.data());
  EXPECT_EQ(back, x);
}

}  // namespace
}  // namespace switchml

namespace switchml {
namespace {

// The SIMD kernel sets this CPU runs, and the AVX-512 bodies on emulated
// intrinsics (so they are checked even where the CPU lacks AVX-512).
std::vector<const kernels::QuantizeKernels*> SimdSets() {
  std::vector<const kernels::QuantizeKernels*> sets = {&kernels::kAvx512Emulated};
  if (kernels::Avx2() != nullptr) sets.push_back(kernels::Avx2());
  if (kernels::Avx512() != nullptr) sets.push_back(kernels::Avx512());
  return sets;
}

// Every SIMD kernel set must agree with the scalar reference bit for bit, on
// every length (tails included), scale and special value.
void ExpectBitwiseIdenticalToScalar(const kernels::QuantizeKernels* simd) {
  SCOPED_TRACE(simd->name);
  std::mt19937 rng(11);
  std::normal_distribution<float> normal;
  for (size_t n : {0, 1, 7, 8, 9, 15, 16, 17, 31, 32, 33, 64, 255, 1024, 1027}) {
    for (int scale : {-140, -30, 0, 20, 100}) {
      std::vector<float> x(n);
      for (float& v : x) v = normal(rng) * std::ldexp(1.0f, scale);
      if (n > 3) {
        x[1] = 0.0f, x[2] = -0.0f, x[3] = std::numeric_limits<float>::denorm_min();
      }
      EXPECT_EQ(simd->block_exponent(x.data(), n), kernels::kScalar.block_exponent(x.data(), n));
      const int e = std::max<int>(kernels::kScalar.block_exponent(x.data(), n), kMinExponent);
      if (e > kMaxExponent) continue;
      for (int world : {1, 3, 64}) {
        const BlockScale s = MakeBlockScale(e, world);
        std::vector<uint8_t> a(4 * n), b(4 * n);
        simd->quantize(x.data(), n, s, a.data());
        kernels::kScalar.quantize(x.data(), n, s, b.data());
        ASSERT_EQ(a, b) << "quantize n=" << n << " scale=" << scale << " world=" << world;
        // Dequantize arbitrary integer sums, not only the ones above.
        for (auto& byte : a) byte = uint8_t(rng());
        std::vector<float> fa(n), fb(n);
        simd->dequantize(a.data(), n, s, fa.data());
        kernels::kScalar.dequantize(a.data(), n, s, fb.data());
        ASSERT_EQ(0, n ? std::memcmp(fa.data(), fb.data(), 4 * n) : 0) << "dequantize n=" << n;
        // Non-temporal stores: the same bits at every alignment of the output
        // (a scalar head up to 32 bytes), and nothing written around it.
        for (size_t offset = 0; offset < 8; ++offset) {
          std::vector<float> fs(n + 9, 7.0f);
          simd->dequantize_stream(a.data(), n, s, fs.data() + offset);
          ASSERT_EQ(0, n ? std::memcmp(fs.data() + offset, fb.data(), 4 * n) : 0)
              << "dequantize_stream n=" << n << " offset=" << offset;
          for (size_t i = 0; i < offset; ++i) ASSERT_EQ(fs[i], 7.0f);
          for (size_t i = offset + n; i < fs.size(); ++i) ASSERT_EQ(fs[i], 7.0f);
        }
      }
    }
  }
  // Exact ties (x * f = k + 1/2) round half to even in both, body and tail.
  std::vector<float> ties;
  for (int k = -20; k <= 20; ++k) ties.push_back(float(k));
  const BlockScale half{0.5, 2.0};
  std::vector<uint8_t> a(4 * ties.size()), b(4 * ties.size());
  simd->quantize(ties.data(), ties.size(), half, a.data());
  kernels::kScalar.quantize(ties.data(), ties.size(), half, b.data());
  EXPECT_EQ(a, b);
  for (size_t i = 0; i < ties.size(); ++i) {
    EXPECT_EQ(int32_t(LoadBe32(a.data() + 4 * i)), int32_t(std::nearbyint(ties[i] * 0.5))) << i;
  }
  // NaN and Inf anywhere, including in the SIMD body and in the tail.
  for (size_t at : {0, 5, 8, 20}) {
    std::vector<float> x(21, 1.0f);
    x[at] = std::numeric_limits<float>::quiet_NaN();
    EXPECT_EQ(simd->block_exponent(x.data(), x.size()), kNonFiniteExponent) << at;
    x[at] = -std::numeric_limits<float>::infinity();
    EXPECT_EQ(simd->block_exponent(x.data(), x.size()), kNonFiniteExponent) << at;
  }
}

TEST(QuantizeKernels, SimdIsBitwiseIdenticalToScalar) {
  for (const kernels::QuantizeKernels* simd : SimdSets()) ExpectBitwiseIdenticalToScalar(simd);
  // Natively, a misaligned streaming store faults; emulated, it is counted.
  EXPECT_EQ(kernels::Avx512EmulatedMisalignedStreamingStores(), 0u);
}

// The scalar word kernels against their definition, and SIMD against scalar,
// on every length (tails included) and on wrapping sums.
TEST(QuantizeKernels, WordSwapAndBigEndianAddMatchTheirDefinition) {
  std::mt19937 rng(13);
  std::vector<const kernels::QuantizeKernels*> sets = SimdSets();
  sets.push_back(&kernels::kScalar);
  for (size_t n : {0, 1, 15, 16, 17, 31, 32, 33, 63, 64, 65, 255, 8192}) {
    std::vector<uint8_t> src(4 * n);
    for (auto& byte : src) byte = uint8_t(rng());
    std::vector<uint32_t> acc0(n);
    for (auto& v : acc0) v = uint32_t(rng());
    if (n > 0) acc0[0] = 0xFFFFFFFFu, src[0] = 0, src[1] = 0, src[2] = 0, src[3] = 2;  // wraps to 1
    for (const kernels::QuantizeKernels* set : sets) {
      std::vector<uint8_t> swapped(4 * n);
      set->swap32(src.data(), n, swapped.data());
      std::vector<uint32_t> acc = acc0;
      set->add_be32(src.data(), n, acc.data());
      for (size_t i = 0; i < n; ++i) {
        const uint32_t be = uint32_t(src[4 * i]) << 24 | uint32_t(src[4 * i + 1]) << 16 |
                            uint32_t(src[4 * i + 2]) << 8 | src[4 * i + 3];
        uint32_t host;
        std::memcpy(&host, &swapped[4 * i], 4);
        ASSERT_EQ(host, be) << set->name << " swap32 n=" << n << " i=" << i;
        ASSERT_EQ(acc[i], uint32_t(acc0[i] + be)) << set->name << " add_be32 n=" << n << " i=" << i;
      }
      // Non-temporal stores: the same words at every 4-byte alignment of the
      // output (a scalar head up to 64 bytes), and nothing written around it.
      for (size_t offset = 0; offset < 16; ++offset) {
        std::vector<uint8_t> streamed(4 * (n + 17), 0xA5);
        set->swap32_stream(src.data(), n, streamed.data() + 4 * offset);
        ASSERT_TRUE(std::equal(swapped.begin(), swapped.end(), streamed.begin() + 4 * offset))
            << set->name << " swap32_stream n=" << n << " offset=" << offset;
        for (size_t b = 0; b < streamed.size(); ++b) {
          if (b < 4 * offset || b >= 4 * (offset + n)) {
            ASSERT_EQ(streamed[b], 0xA5) << b;
          }
        }
      }
    }
  }
  EXPECT_EQ(kernels::Avx512EmulatedMisalignedStreamingStores(), 0u);
}

TEST(QuantizeKernels, TheBestAvailableSetIsInUse) {
  EXPECT_STREQ(kernels::Best().name, kernels::Avx512() ? "avx512"
                                     : kernels::Avx2() ? "avx2"
                                                       : "scalar");
}

}  // namespace
}  // namespace switchml
