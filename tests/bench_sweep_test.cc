// The nccl-tests-style sweep of the benchmark programs: the sizes -b/-e/-f
// give, the bus-bandwidth factor, the result line, and the count of wrong
// elements.
#include "bench_sweep.h"

#include <gtest/gtest.h>

namespace switchml::bench {
namespace {

SweepFlags Flags(std::string min, std::string max, double factor = 2, std::string size = "64MiB") {
  SweepFlags f;
  f.size = std::move(size);
  f.min_bytes = std::move(min);
  f.max_bytes = std::move(max);
  f.step_factor = factor;
  return f;
}

Sweep Resolve(SweepFlags f) {
  Sweep s;
  EXPECT_EQ(ResolveSweep(f, &s), "");
  return s;
}

std::string Refusal(SweepFlags f) {
  Sweep s;
  return ResolveSweep(f, &s);
}

TEST(Sweep, OneSizeWithoutMinOrMax) {
  const Sweep s = Resolve(Flags("", "", 2, "1MiB"));
  EXPECT_TRUE(s.single);
  EXPECT_EQ(s.sizes, std::vector<uint64_t>{1 << 20});
}

TEST(Sweep, MultipliesByTheFactorUpToTheMaximum) {
  const Sweep s = Resolve(Flags("8", "128M", 2));
  EXPECT_FALSE(s.single);
  ASSERT_EQ(s.sizes.size(), 25u);  // 2^3 .. 2^27, as nccl-tests -b 8 -e 128M -f 2
  EXPECT_EQ(s.sizes.front(), 8u);
  EXPECT_EQ(s.sizes.back(), 128u << 20);
  EXPECT_EQ(Resolve(Flags("4KiB", "100KiB", 4)).sizes,
            (std::vector<uint64_t>{4096, 16384, 65536}));  // never above -e
}

TEST(Sweep, SizesAreWholeElements) {
  // 10 → 8, then × 1.5: 12, 18 → 16, 24, 36; each a multiple of 4.
  const Sweep s = Resolve(Flags("10", "40", 1.5));
  EXPECT_EQ(s.sizes, (std::vector<uint64_t>{8, 12, 16, 24, 36}));
  // A factor too small to reach the next element still grows by one.
  EXPECT_EQ(Resolve(Flags("4", "12", 1.01)).sizes, (std::vector<uint64_t>{4, 8, 12}));
}

TEST(Sweep, MinOrMaxAloneSweepsFromOrToSize) {
  EXPECT_EQ(Resolve(Flags("16KiB", "", 2, "64KiB")).sizes,
            (std::vector<uint64_t>{16384, 32768, 65536}));
  EXPECT_EQ(Resolve(Flags("", "64KiB", 2, "16KiB")).sizes,
            (std::vector<uint64_t>{16384, 32768, 65536}));
}

TEST(Sweep, RefusesBadSizesNamingTheFlag) {
  EXPECT_NE(Refusal(Flags("2", "8")).find("-b/--minbytes=2"), std::string::npos);
  EXPECT_NE(Refusal(Flags("8", "lots")).find("-e/--maxbytes=lots"), std::string::npos);
  EXPECT_NE(Refusal(Flags("", "", 2, "x")).find("--size=x"), std::string::npos);
  EXPECT_NE(Refusal(Flags("1MiB", "4KiB")).find("larger than"), std::string::npos);
  EXPECT_NE(Refusal(Flags("4", "64", 1)).find("-f/--stepfactor=1 "), std::string::npos);
  EXPECT_NE(Refusal(Flags("4", "1GiB", 1.0001)).find("more than 1000 sizes"), std::string::npos);
  // The same size at both ends needs no factor.
  EXPECT_EQ(Resolve(Flags("4", "4", 1)).sizes, std::vector<uint64_t>{4});
}

TEST(Sweep, BusBandwidthIsTheRingFactorOfNcclTests) {
  EXPECT_EQ(BusBandwidthFactor(1), 0.0);
  EXPECT_EQ(BusBandwidthFactor(2), 1.0);
  EXPECT_EQ(BusBandwidthFactor(4), 1.5);
  EXPECT_EQ(BusBandwidthFactor(8), 1.75);
}

TEST(Sweep, ResultLineHasNcclTestsColumns) {
  Verification v;
  v.wrong = 3;
  // Three repetitions averaging 2 ms of 8 MB over 4 ranks: 4 GB/s algbw.
  const auto j =
      SizeResultJson("switchml", 4, 0, 8'000'000, "float32", {0.001, 0.002, 0.003}, v, "digest", 7);
  EXPECT_EQ(j.value("count", 0u), 2'000'000u);
  EXPECT_DOUBLE_EQ(j.value("avg_s", 0.0), 0.002);
  EXPECT_DOUBLE_EQ(j.value("algbw_gbs", 0.0), 4.0);
  EXPECT_DOUBLE_EQ(j.value("busbw_gbs", 0.0), 6.0);
  EXPECT_EQ(j.value("wrong", 0u), 7u);  // the ranks' total, not this rank's 3
  EXPECT_DOUBLE_EQ(j.value("median_s", 0.0), 0.002);
  EXPECT_EQ(j.value("reps", 0u), 3u);
}

TEST(Sweep, TimesEveryIterationAfterTheWarmUp) {
  int line_ups = 0, ops = 0;
  std::vector<double> times;
  EXPECT_TRUE(TimeRepetitions(
      2, 3, [&] { return ++line_ups > 0; }, [&] { return ++ops > 0; }, &times));
  EXPECT_EQ(line_ups, 5);
  EXPECT_EQ(ops, 5);
  EXPECT_EQ(times.size(), 3u);
  EXPECT_FALSE(TimeRepetitions(
      0, 3, [] { return true; }, [&] { return ++ops < 7; }, &times));
}

TEST(Verification, CountsTheWrongElements) {
  std::vector<int32_t> ranks[3], sum(1000);
  for (uint32_t r = 0; r < 3; ++r) {
    ranks[r].resize(sum.size());
    FillInt32(ranks[r].data(), sum.size(), 5, r);
    for (size_t i = 0; i < sum.size(); ++i)
      sum[i] = int32_t(uint32_t(sum[i]) + uint32_t(ranks[r][i]));
  }
  EXPECT_EQ(VerifyInt32(sum.data(), sum.size(), 5, 3).wrong, 0u);
  sum[3] ^= 1;
  sum[999] += 2;
  const Verification v = VerifyInt32(sum.data(), sum.size(), 5, 3);
  EXPECT_EQ(v.wrong, 2u);
  EXPECT_FALSE(v.within_bound);
}

}  // namespace
}  // namespace switchml::bench
