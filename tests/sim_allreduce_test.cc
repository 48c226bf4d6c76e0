// End-to-end all-reduce over the simulated network: engines, data plane,
// registry and the lossy network together.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <tuple>
#include <vector>

#include "sim/sim_cluster.h"

namespace switchml {
namespace {

using std::chrono::microseconds;
using std::chrono::milliseconds;

constexpr uint16_t kK = 64;     // elements per packet
constexpr uint16_t kSlots = 8;  // pool slots of the job

enum class Profile { kClean, kLossy1, kLossy10 };

SimNetworkOptions Network(Profile p, uint64_t seed) {
  SimNetworkOptions n;
  n.seed = seed;
  if (p == Profile::kLossy1) {
    n.loss = 0.01, n.duplicate = 0.01, n.reorder = 0.05;
  } else if (p == Profile::kLossy10) {
    n.loss = 0.10, n.duplicate = 0.05, n.reorder = 0.10;
  }
  return n;
}

SimClusterOptions Options(uint16_t world, Profile p, uint64_t seed = 1) {
  SimClusterOptions o;
  o.world_size = world;
  o.elements_per_packet = kK;
  o.pool_slots = kSlots;
  o.network = Network(p, seed);
  o.data_plane.pool_slots = 64;
  o.data_plane.max_elements_per_packet = kK;
  o.data_plane.max_workers = std::max<uint16_t>(64, world);
  return o;
}

// Every element of every rank distinct, so a misrouted chunk changes a sum.
std::vector<std::vector<int32_t>> IntInputs(uint16_t world, size_t count) {
  std::vector<std::vector<int32_t>> in(world, std::vector<int32_t>(count));
  for (uint16_t r = 0; r < world; ++r) {
    for (size_t i = 0; i < count; ++i) {
      in[r][i] = int32_t((r + 1) * 1000003 + i * 7919) * ((i + r) % 3 == 0 ? -1 : 1);
    }
  }
  return in;
}

std::vector<std::vector<float>> FloatInputs(uint16_t world, size_t count, uint64_t seed = 5) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal;
  std::vector<std::vector<float>> in(world, std::vector<float>(count));
  for (uint16_t r = 0; r < world; ++r) {
    for (size_t i = 0; i < count; ++i) {
      in[r][i] = normal(rng) * std::ldexp(1.0f, int((i / kK) % 9) * 5 - 20) + float(r);
    }
  }
  return in;
}

// Runs one all-reduce and returns each rank's output bytes (after checking
// every rank succeeded).
template <typename T>
std::vector<std::vector<T>> RunOp(SimCluster& cluster, const std::vector<std::vector<T>>& in,
                                  DType dtype) {
  const size_t world = in.size();
  std::vector<std::vector<T>> out(world, std::vector<T>(in[0].size(), T(-7)));
  std::vector<SimRankOp> ops;
  for (size_t r = 0; r < world; ++r)
    ops.push_back({in[r].data(), out[r].data(), in[r].size(), dtype});
  const std::vector<Status> status = cluster.AllReduce(ops);
  for (size_t r = 0; r < world; ++r)
    EXPECT_TRUE(status[r].ok()) << r << ": " << status[r].ToString();
  return out;
}

void ExpectExactIntSum(const std::vector<std::vector<int32_t>>& in,
                       const std::vector<std::vector<int32_t>>& out) {
  for (size_t i = 0; i < in[0].size(); ++i) {
    uint32_t sum = 0;
    for (const auto& v : in) sum += uint32_t(v[i]);
    for (size_t r = 0; r < out.size(); ++r) {
      ASSERT_EQ(out[r][i], int32_t(sum)) << "rank " << r << " element " << i;
    }
  }
}

void ExpectFloatWithinBound(const std::vector<std::vector<float>>& in,
                            const std::vector<std::vector<float>>& out) {
  std::vector<const float*> inputs;
  for (const auto& v : in) inputs.push_back(v.data());
  for (size_t r = 0; r < out.size(); ++r) {
    const FloatCheck c = CheckFloatAllReduce(inputs, out[r].data(), in[0].size(), kK);
    ASSERT_EQ(c.violations, 0u) << "rank " << r << " first bad element " << c.first_violation;
    ASSERT_EQ(out[r], out[0]) << "rank " << r << " differs from rank 0";
  }
}

template <typename T>
bool BitwiseEqual(const std::vector<std::vector<T>>& a, const std::vector<std::vector<T>>& b) {
  if (a.size() != b.size()) return false;
  for (size_t r = 0; r < a.size(); ++r) {
    if (a[r].size() != b[r].size()) return false;
    if (!a[r].empty() && std::memcmp(a[r].data(), b[r].data(), a[r].size() * sizeof(T)) != 0) {
      return false;
    }
  }
  return true;
}

// world size, element count, dtype, network profile
using Case = std::tuple<uint16_t, size_t, DType, Profile>;

class SimAllReduce : public ::testing::TestWithParam<Case> {};

TEST_P(SimAllReduce, MatchesExactSumAndLossFreeRunBitwise) {
  const auto [world, count, dtype, profile] = GetParam();
  auto clean = SimCluster::Create(Options(world, Profile::kClean));
  auto lossy = SimCluster::Create(Options(world, profile, 42 + count));
  ASSERT_TRUE(clean.ok() && lossy.ok());
  if (dtype == DType::kInt32) {
    const auto in = IntInputs(world, count);
    const auto reference = RunOp(*clean.value(), in, dtype);
    ExpectExactIntSum(in, reference);
    if (profile != Profile::kClean) {
      EXPECT_TRUE(BitwiseEqual(RunOp(*lossy.value(), in, dtype), reference));
    }
  } else {
    const auto in = FloatInputs(world, count);
    const auto reference = RunOp(*clean.value(), in, dtype);
    ExpectFloatWithinBound(in, reference);
    if (profile != Profile::kClean) {
      EXPECT_TRUE(BitwiseEqual(RunOp(*lossy.value(), in, dtype), reference));
    }
  }
  if (profile == Profile::kLossy10 && lossy.value()->network().counters().transmissions > 500) {
    EXPECT_GT(lossy.value()->network().counters().lost, 0u);  // the loss really happened
  }
}

std::string CaseName(const ::testing::TestParamInfo<Case>& info) {
  const auto [world, count, dtype, profile] = info.param;
  const char* p = profile == Profile::kClean    ? "clean"
                  : profile == Profile::kLossy1 ? "loss1"
                                                : "loss10";
  return "n" + std::to_string(world) + "_len" + std::to_string(count) + "_" +
         std::string(DTypeName(dtype)) + "_" + p;
}

// Lengths: empty, one element, k-1 and k+1, odd lengths around one and two
// windows, and a longer tensor of many rounds.
INSTANTIATE_TEST_SUITE_P(
    Small, SimAllReduce,
    ::testing::Combine(::testing::Values<uint16_t>(1, 2, 3, 8),
                       ::testing::Values<size_t>(0, 1, kK - 1, kK + 1, kSlots* kK + 3,
                                                 2 * kSlots * kK - 5, 40 * kK + 17),
                       ::testing::Values(DType::kInt32, DType::kFloat32),
                       ::testing::Values(Profile::kClean, Profile::kLossy1, Profile::kLossy10)),
    CaseName);

INSTANTIATE_TEST_SUITE_P(
    SixtyFourWorkers, SimAllReduce,
    ::testing::Combine(::testing::Values<uint16_t>(64),
                       ::testing::Values<size_t>(0, 1, kK + 1, 3 * kSlots * kK + 11),
                       ::testing::Values(DType::kInt32, DType::kFloat32),
                       ::testing::Values(Profile::kClean, Profile::kLossy1, Profile::kLossy10)),
    CaseName);

// Large jobs: seen-bitmaps of 4 and 16 words, hundreds of contributions per
// slot (each a possible loss), the descriptor round and the pending replies
// of workers that retransmit after a result went out.
INSTANTIATE_TEST_SUITE_P(LargeJobs, SimAllReduce,
                         ::testing::Combine(::testing::Values<uint16_t>(256, 1024),
                                            ::testing::Values<size_t>(kK + 1, 3 * kSlots * kK + 11),
                                            ::testing::Values(DType::kInt32, DType::kFloat32),
                                            ::testing::Values(Profile::kLossy1)),
                         CaseName);

// A tree of switches (docs/design.md §10): racks x workers per rack under
// one root, with loss, duplication and reordering on every link (the racks'
// links to the root too). The results must be bitwise those of the flat job
// of the same ranks through one switch.
using TreeCase = std::tuple<uint16_t, uint16_t, DType>;  // racks, workers per rack, dtype

class SimTree : public ::testing::TestWithParam<TreeCase> {};

TEST_P(SimTree, MatchesTheFlatJobBitwiseUnderLossOnEveryLink) {
  const auto [racks, per_rack, dtype] = GetParam();
  const auto world = uint16_t(racks * per_rack);
  const size_t count = 3 * kSlots * kK + 11;
  auto flat = SimCluster::Create(Options(world, Profile::kClean));
  SimClusterOptions tree_options = Options(world, Profile::kLossy1, 77);
  tree_options.racks = racks;
  auto tree = SimCluster::Create(tree_options);
  ASSERT_TRUE(flat.ok() && tree.ok()) << tree.status().ToString();
  if (dtype == DType::kInt32) {
    const auto in = IntInputs(world, count);
    const auto reference = RunOp(*flat.value(), in, dtype);
    ExpectExactIntSum(in, reference);
    EXPECT_TRUE(BitwiseEqual(RunOp(*tree.value(), in, dtype), reference));
  } else {
    const auto in = FloatInputs(world, count);
    const auto reference = RunOp(*flat.value(), in, dtype);
    ExpectFloatWithinBound(in, reference);
    EXPECT_TRUE(BitwiseEqual(RunOp(*tree.value(), in, dtype), reference));
  }
  SimCluster& c = *tree.value();
  EXPECT_GT(c.network().counters().lost, 0u);
  // Every rack sent its partial sums up and took the root's results; the
  // root's members are the racks.
  uint64_t resent = 0;
  for (uint16_t r = 0; r < racks; ++r) {
    const DataPlaneCounters& rc = c.rack(r).counters();
    EXPECT_GT(rc.upstream_sent, 0u) << "rack " << r;
    EXPECT_EQ(rc.upstream_results, rc.slots_completed) << "rack " << r;
    resent += rc.upstream_resent;
  }
  // Lost upstream packets were recovered by the racks' timers.
  if (world >= 32) {
    EXPECT_GT(resent, 0u);
  }
  EXPECT_EQ(c.assignment().world_size, racks);
  EXPECT_EQ(c.data_plane().counters().drops[size_t(DropReason::kRankOutOfRange)], 0u);
}

std::string TreeName(const ::testing::TestParamInfo<TreeCase>& info) {
  const auto [racks, per_rack, dtype] = info.param;
  return std::to_string(racks) + "x" + std::to_string(per_rack) + "_" +
         std::string(DTypeName(dtype));
}

INSTANTIATE_TEST_SUITE_P(Racks, SimTree,
                         ::testing::Combine(::testing::Values<uint16_t>(2, 4),
                                            ::testing::Values<uint16_t>(1, 3, 16),
                                            ::testing::Values(DType::kInt32, DType::kFloat32)),
                         TreeName);

// A rack switch serves only its own ranks: a contribution of a rank of
// another rack is dropped there, and a result of the root for another job or
// a slot that does not await one is stale.
TEST(SimTreeRack, DropsOtherRacksRanksAndResultsItDidNotAskFor) {
  SimClusterOptions o = Options(4, Profile::kClean);
  o.racks = 2;
  auto cluster = SimCluster::Create(o);
  ASSERT_TRUE(cluster.ok()) << cluster.status().ToString();
  DataPlane& rack = cluster.value()->rack(0);  // ranks 0 and 1
  std::vector<uint8_t> packet(PacketBytes(kK)), out(MaxPacketBytes(kK));
  PacketHeader h;
  h.job = cluster.value()->assignment().id.value() + 1;  // the racks' job id
  h.rank = 2;
  h.element_count = kK;
  h.chunk = 1;
  EncodeHeader(h, packet);
  EXPECT_EQ(rack.Process(packet, out).reason, DropReason::kRankOutOfRange);
  h.type = MessageType::kResult;
  h.job = cluster.value()->assignment().id.value();  // the root's id
  h.rank = kAllRanks;
  EncodeHeader(h, packet);
  EXPECT_EQ(rack.Process(packet, out).reason, DropReason::kStaleChunk);
  EXPECT_EQ(rack.counters().upstream_results, 0u);
}

// The root gone: the racks keep their partial sums and retry with back-off;
// the workers fail after their failure timeout instead of hanging.
TEST(SimTreeRack, AGoneRootFailsTheWorkersAndTheRacksStopRetrying) {
  SimClusterOptions o = Options(4, Profile::kClean);
  o.racks = 2;
  o.failure_timeout = milliseconds(50);
  auto cluster = SimCluster::Create(o);
  ASSERT_TRUE(cluster.ok()) << cluster.status().ToString();
  cluster.value()->network().SilenceRoot(microseconds(0));
  const auto in = IntInputs(4, 3 * kK);
  std::vector<std::vector<int32_t>> out(4, std::vector<int32_t>(3 * kK));
  std::vector<SimRankOp> ops;
  for (size_t r = 0; r < 4; ++r)
    ops.push_back({in[r].data(), out[r].data(), 3 * kK, DType::kInt32});
  for (const Status& s : cluster.value()->AllReduce(ops)) {
    EXPECT_EQ(s.code(), StatusCode::kDeadlineExceeded) << s.ToString();
  }
  EXPECT_GT(cluster.value()->rack(0).counters().upstream_resent, 0u);
}

// Regression (pitfall: window larger than half the chunks): jobs of 1..2s
// chunks under heavy loss, duplication and reordering.
TEST(SimAllReduceWindow, EveryChunkCountUpToTwoWindowsUnderLoss) {
  for (size_t chunks = 1; chunks <= 2 * kSlots; ++chunks) {
    auto cluster = SimCluster::Create(Options(3, Profile::kLossy10, chunks));
    ASSERT_TRUE(cluster.ok());
    const auto in = IntInputs(3, chunks * kK - (chunks % 2));
    ExpectExactIntSum(in, RunOp(*cluster.value(), in, DType::kInt32));
  }
}

// Regression (pitfall: state across jobs): many all-reduces of different
// sizes and dtypes back to back on one job, under loss. Versions and chunk ids
// must stay in step across them.
TEST(SimAllReduceSequence, BackToBackOperationsStayCorrect) {
  auto cluster = SimCluster::Create(Options(4, Profile::kLossy10, 9));
  ASSERT_TRUE(cluster.ok());
  const size_t lengths[] = {5 * kK, 1, 0, 3 * kK + 1, 20 * kK, kK, 2 * kSlots * kK, 7};
  for (size_t i = 0; i < std::size(lengths); ++i) {
    SCOPED_TRACE(i);
    if (i % 2 == 0) {
      const auto in = IntInputs(4, lengths[i]);
      ExpectExactIntSum(in, RunOp(*cluster.value(), in, DType::kInt32));
    } else {
      const auto in = FloatInputs(4, lengths[i], i);
      ExpectFloatWithinBound(in, RunOp(*cluster.value(), in, DType::kFloat32));
    }
  }
}

TEST(SimAllReduceSequence, OperationsQueuedTogetherRunInOrder) {
  auto cluster = SimCluster::Create(Options(3, Profile::kLossy1, 3));
  ASSERT_TRUE(cluster.ok());
  SimCluster& c = *cluster.value();
  const auto a = IntInputs(3, 10 * kK + 1), b = IntInputs(3, 3);
  std::vector<std::vector<int32_t>> out_a(3, std::vector<int32_t>(a[0].size()));
  std::vector<std::vector<int32_t>> out_b(3, std::vector<int32_t>(b[0].size()));
  int finished = 0;
  for (uint16_t r = 0; r < 3; ++r) {
    auto done = [&](OpId, const Status& s) {
      EXPECT_TRUE(s.ok()) << s.ToString();
      ++finished;
    };
    ASSERT_TRUE(
        c.worker(r).Submit(a[r].data(), out_a[r].data(), a[r].size(), DType::kInt32, done).ok());
    ASSERT_TRUE(
        c.worker(r).Submit(b[r].data(), out_b[r].data(), b[r].size(), DType::kInt32, done).ok());
  }
  c.network().Run();
  EXPECT_EQ(finished, 6);
  ExpectExactIntSum(a, out_a);
  ExpectExactIntSum(b, out_b);
}

// A rank that stops while the switch keeps naming it is late, not gone (a
// rank that exits is the control plane's news): the others wait past
// failure_timeout, then fail at operation_timeout, naming it.
TEST(SimAllReduceFailure, SilentWorkerFailsTheOthersAtTheOperationTimeoutNamingIt) {
  SimClusterOptions o = Options(4, Profile::kLossy1, 11);
  o.failure_timeout = milliseconds(50);
  o.operation_timeout = milliseconds(80);
  auto cluster = SimCluster::Create(o);
  ASSERT_TRUE(cluster.ok());
  SimCluster& c = *cluster.value();
  const auto in = IntInputs(4, 200 * kK);
  std::vector<std::vector<int32_t>> out(4, std::vector<int32_t>(in[0].size()));
  const Nanos silence_at = microseconds(300);  // mid-job
  c.network().Silence(2, silence_at);
  std::vector<Status> status(4);
  std::vector<Nanos> failed_at(4, Nanos::max());
  for (uint16_t r = 0; r < 4; ++r) {
    ASSERT_TRUE(c.worker(r)
                    .Submit(in[r].data(), out[r].data(), in[r].size(), DType::kInt32,
                            [&, r](OpId, const Status& s) {
                              status[r] = s;
                              failed_at[r] = c.network().now();
                            })
                    .ok());
  }
  c.network().Run();
  for (uint16_t r : {0, 1, 3}) {
    EXPECT_EQ(status[r].code(), StatusCode::kDeadlineExceeded) << r;
    EXPECT_EQ(status[r].message().rfind("Timed out after 8", 0), 0u) << status[r].message();
    EXPECT_NE(status[r].message().find("no contribution from rank 2 "), std::string::npos)
        << status[r].message();
    EXPECT_GE(failed_at[r], silence_at + o.operation_timeout - milliseconds(1)) << r;
    EXPECT_LE(failed_at[r], silence_at + o.operation_timeout + milliseconds(1)) << r;
    EXPECT_TRUE(c.worker(r).timed_out());
  }
  EXPECT_EQ(failed_at[2], Nanos::max());  // the silent rank never ran again
}

// A rank that enters the all-reduce 15 s after the others, under the library's
// default failure_timeout (10 s) and a 60 s operation timeout, is waited for:
// every rank succeeds, bitwise as when all are on time.
TEST(SimAllReduceFailure, ARankFifteenSecondsLateIsWaitedForAndTheResultIsUnchanged) {
  SimClusterOptions o = Options(4, Profile::kLossy1, 17);
  o.failure_timeout = std::chrono::seconds(10);
  o.operation_timeout = std::chrono::seconds(60);
  const auto in = FloatInputs(4, 40 * kK);
  auto on_time = SimCluster::Create(o);
  ASSERT_TRUE(on_time.ok());
  const auto expected = RunOp(*on_time.value(), in, DType::kFloat32);

  auto cluster = SimCluster::Create(o);
  ASSERT_TRUE(cluster.ok());
  SimCluster& c = *cluster.value();
  std::vector<std::vector<float>> out(4, std::vector<float>(in[0].size()));
  std::vector<Status> status(4, Status(StatusCode::kInternal, "not done"));
  auto submit = [&](uint16_t r) {
    ASSERT_TRUE(c.worker(r)
                    .Submit(in[r].data(), out[r].data(), in[r].size(), DType::kFloat32,
                            [&, r](OpId, const Status& s) { status[r] = s; })
                    .ok());
  };
  for (uint16_t r = 0; r < 3; ++r) submit(r);
  c.network().Run(std::chrono::seconds(15));
  for (uint16_t r = 0; r < 3; ++r) EXPECT_EQ(status[r].code(), StatusCode::kInternal) << r;
  // The others' last event came well after their failure_timeout (the
  // network stops at its last event before 15 s).
  EXPECT_GT(c.network().now(), o.failure_timeout + std::chrono::seconds(4));
  submit(3);
  c.network().Run();
  for (uint16_t r = 0; r < 4; ++r) {
    ASSERT_TRUE(status[r].ok()) << r << ": " << status[r].ToString();
    EXPECT_EQ(0, std::memcmp(out[r].data(), expected[r].data(), out[r].size() * sizeof(float)))
        << "rank " << r;
  }
}

TEST(SimAllReduceFailure, DeadSwitchFailsEveryWorker) {
  SimClusterOptions o = Options(3, Profile::kClean);
  o.failure_timeout = milliseconds(30);
  auto cluster = SimCluster::Create(o);
  ASSERT_TRUE(cluster.ok());
  cluster.value()->network().SilenceSwitch(microseconds(40));
  const auto in = IntInputs(3, 100 * kK);
  std::vector<std::vector<int32_t>> out(3, std::vector<int32_t>(in[0].size()));
  std::vector<SimRankOp> ops;
  for (uint16_t r = 0; r < 3; ++r)
    ops.push_back({in[r].data(), out[r].data(), in[r].size(), DType::kInt32});
  for (const Status& s : cluster.value()->AllReduce(ops)) {
    EXPECT_EQ(s.code(), StatusCode::kDeadlineExceeded);
    EXPECT_NE(s.message().find("no answer from the switch"), std::string::npos) << s.message();
  }
}

std::vector<Status> RunMismatched(size_t count1, DType dtype1) {
  auto cluster = SimCluster::Create(Options(3, Profile::kLossy1, 13));
  EXPECT_TRUE(cluster.ok());
  std::vector<float> in(500, 1.0f), out0(500), out1(500), out2(500);
  return cluster.value()->AllReduce({{in.data(), out0.data(), 400, DType::kFloat32},
                                     {in.data(), out1.data(), count1, dtype1},
                                     {in.data(), out2.data(), 400, DType::kFloat32}});
}

TEST(SimAllReduceAgreement, DifferentTensorLengthsFailEveryRank) {
  for (size_t other : {0, 399, 401, 500}) {
    for (const Status& s : RunMismatched(other, DType::kFloat32)) {
      EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << other;
      EXPECT_NE(s.message().find("tensor length"), std::string::npos) << s.message();
    }
  }
}

TEST(SimAllReduceAgreement, DifferentDtypesFailEveryRank) {
  for (const Status& s : RunMismatched(400, DType::kInt32)) {
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find("dtype"), std::string::npos) << s.message();
  }
}

TEST(SimAllReduceAgreement, DifferentElementsPerPacketAreRejectedAtRegistration) {
  JobRegistry registry(DataPlaneConfig{});
  ASSERT_TRUE(registry.Join({"job", 0, 2, 256, 32}).ok());
  const Status s = registry.Join({"job", 1, 2, 64, 32});
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("elements_per_packet"), std::string::npos);
}

// NaN/Inf: the chunks holding them come back NaN on every rank, the others
// within the bound; by default the operation succeeds (as with Gloo, so a
// loss scaler can skip the step), with non_finite_error it fails with
// DATA_LOSS naming the elements. Either way the job stays usable.
class SimAllReduceNonFinite : public ::testing::TestWithParam<bool> {};

TEST_P(SimAllReduceNonFinite, ChunksWithNanOrInfAreNanOnEveryRank) {
  const bool raise = GetParam();
  SimClusterOptions options = Options(3, Profile::kLossy1, 17);
  options.non_finite_error = raise;
  auto cluster = SimCluster::Create(options);
  ASSERT_TRUE(cluster.ok());
  SimCluster& c = *cluster.value();
  auto in = FloatInputs(3, 10 * kK);
  in[1][3 * kK + 5] = std::numeric_limits<float>::quiet_NaN();
  in[2][7 * kK] = -std::numeric_limits<float>::infinity();
  std::vector<std::vector<float>> out(3, std::vector<float>(in[0].size()));
  std::vector<SimRankOp> ops;
  for (uint16_t r = 0; r < 3; ++r)
    ops.push_back({in[r].data(), out[r].data(), in[r].size(), DType::kFloat32});
  const std::vector<Status> status = c.AllReduce(ops);
  for (uint16_t r = 0; r < 3; ++r) {
    if (raise) {
      EXPECT_EQ(status[r].code(), StatusCode::kDataLoss) << r;
      EXPECT_NE(status[r].message().find("elements [192, 256)"), std::string::npos)
          << status[r].message();
    } else {
      EXPECT_TRUE(status[r].ok()) << status[r].message();
    }
    for (size_t i = 0; i < out[r].size(); ++i) {
      const size_t chunk = i / kK;
      ASSERT_EQ(std::isnan(out[r][i]), chunk == 3 || chunk == 7)
          << "rank " << r << " element " << i;
    }
    // The finite chunks are bitwise the same on every rank.
    EXPECT_EQ(std::memcmp(out[r].data(), out[0].data(), 3 * kK * sizeof(float)), 0);
  }
  if (raise) {
    EXPECT_NE(status[1].message().find("this worker's input"), std::string::npos);
    EXPECT_NE(status[0].message().find("another worker's input"), std::string::npos);
  }
  // The finite chunks before the first NaN are within the bound of the exact sum.
  std::vector<const float*> inputs;
  for (const auto& x : in) inputs.push_back(x.data());
  EXPECT_EQ(CheckFloatAllReduce(inputs, out[0].data(), 3 * kK, kK).violations, 0u);
  // The job stays usable.
  const auto next = FloatInputs(3, 5 * kK + 1, 99);
  ExpectFloatWithinBound(next, RunOp(c, next, DType::kFloat32));
}

INSTANTIATE_TEST_SUITE_P(Mode, SimAllReduceNonFinite, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "Raise" : "PassThrough"; });

TEST(SimDeterminism, SameSeedSameRunDifferentSeedDifferentLosses) {
  auto counters = [](uint64_t seed) {
    auto cluster = SimCluster::Create(Options(4, Profile::kLossy10, seed));
    const auto in = FloatInputs(4, 30 * kK);
    const auto out = RunOp(*cluster.value(), in, DType::kFloat32);
    const SimNetworkCounters& n = cluster.value()->network().counters();
    return std::make_tuple(n.transmissions, n.lost, n.duplicated, n.delivered,
                           cluster.value()->network().now(), out);
  };
  const auto a = counters(1), b = counters(1), c = counters(2);
  EXPECT_EQ(a, b);
  EXPECT_NE(std::get<1>(a), std::get<1>(c));
  EXPECT_EQ(std::get<5>(a), std::get<5>(c));  // the results never depend on the network
}

}  // namespace
}  // namespace switchml
