// The window a worker keeps in flight: sized from the measured round trip and
// delivery rate (WindowSizer), checked alone and in virtual time over a
// rate-limited simulated network.
#include <gtest/gtest.h>

#include <vector>

#include "sim/sim_cluster.h"
#include "worker/window_sizer.h"

namespace switchml {
namespace {

using std::chrono::microseconds;

TEST(WindowSizer, StartsAtTheInitialWindowWithinTheSlots) {
  EXPECT_EQ(WindowSizer(128).window(), WindowSizer::kInitialWindow);
  EXPECT_EQ(WindowSizer(5).window(), 5);
  EXPECT_EQ(WindowSizer(0).window(), 1);
}

TEST(WindowSizer, DoublesWhileTheWindowLimitsTheRate) {
  WindowSizer s(1024);
  // 16 in flight, every round trip 100 us and unloaded: 16 results per round trip.
  s.OnSample(microseconds(100), 16);
  EXPECT_EQ(s.window(), 32);
  s.OnSample(microseconds(100), 32);
  EXPECT_EQ(s.window(), 64);
}

TEST(WindowSizer, SettlesAtTwiceTheBandwidthDelayProduct) {
  WindowSizer s(1024);
  // The path delivers 10 results per 100 us round trip, however many are sent:
  // queueing lengthens the round trip of a larger window.
  s.OnSample(microseconds(100), 10);
  for (int i = 0; i < 20; ++i) {
    const uint16_t w = s.window();
    s.OnSample(microseconds(100) * w / 10, w);
  }
  EXPECT_EQ(s.window(), 20);
  EXPECT_EQ(s.min_rtt(), microseconds(100));
  EXPECT_DOUBLE_EQ(s.max_rate_per_second(), 100000.0);
}

TEST(WindowSizer, StaysBetweenTheFloorAndTheSlots) {
  WindowSizer s(1024);
  s.OnSample(microseconds(100), 1);
  EXPECT_EQ(s.window(), WindowSizer::kMinWindow);
  WindowSizer small(12);
  small.OnSample(microseconds(100), 1000);
  EXPECT_EQ(small.window(), 12);
  WindowSizer tiny(3);
  tiny.OnSample(microseconds(100), 1);
  EXPECT_EQ(tiny.window(), 3);
}

TEST(WindowSizer, FiltersSpanThePreviousAndTheCurrentOperation) {
  WindowSizer s(1024);
  s.OnOperationStart();
  s.OnSample(microseconds(100), 50);  // op 1: 50 per 100 us
  s.OnOperationStart();
  s.OnSample(microseconds(400), 40);  // op 2: slower path
  EXPECT_EQ(s.min_rtt(), microseconds(100));
  EXPECT_EQ(s.window(), 100);  // 2 * 0.5/us * 100 us: op 1 still counts
  s.OnOperationStart();
  s.OnSample(microseconds(400), 40);  // op 3: op 1 forgotten
  EXPECT_EQ(s.min_rtt(), microseconds(400));
  EXPECT_EQ(s.window(), 80);  // 2 * 0.1/us * 400 us
}

// 4 workers, 256-element packets (1048 bytes), 1 Gbit/s links with 50 us of
// one-way latency: a round trip of about 117 us carries about 14 packets.
constexpr uint16_t kWorld = 4;
constexpr uint16_t kK = 256;
constexpr uint64_t kRate = 1'000'000'000;
constexpr size_t kCount = size_t(kK) * 4096;  // 4 MiB of int32

SimClusterOptions RateLimited(std::vector<uint16_t> windows) {
  SimClusterOptions o;
  o.world_size = kWorld;
  o.elements_per_packet = kK;
  o.pool_slots = 512;
  o.windows = std::move(windows);
  o.network.latency = microseconds(50);
  o.network.jitter = microseconds(2);
  o.network.link_bits_per_second = kRate;
  o.data_plane.pool_slots = 512;
  o.data_plane.max_elements_per_packet = kK;
  o.data_plane.max_workers = kWorld;
  o.retransmit_timeout = microseconds(500);
  return o;
}

struct RunResult {
  std::vector<std::vector<int32_t>> out;
  double last_op_seconds = 0;  // virtual time of the second all-reduce
  uint16_t window = 0;         // rank 0's window after it
};

// Two all-reduces of kCount int32 (the first one measures), all ranks exact.
RunResult TwoAllReduces(const SimClusterOptions& options) {
  auto c = SimCluster::Create(options);
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  RunResult run;
  std::vector<std::vector<int32_t>> in(kWorld, std::vector<int32_t>(kCount));
  for (uint16_t r = 0; r < kWorld; ++r) {
    for (size_t i = 0; i < kCount; ++i) in[r][i] = int32_t(i * 31 + r * 1000003);
  }
  run.out.assign(kWorld, std::vector<int32_t>(kCount));
  std::vector<SimRankOp> ops;
  for (uint16_t r = 0; r < kWorld; ++r) {
    ops.push_back({in[r].data(), run.out[r].data(), kCount, DType::kInt32});
  }
  for (int op = 0; op < 2; ++op) {
    const Nanos start = c.value()->network().now();
    for (const Status& s : c.value()->AllReduce(ops)) EXPECT_TRUE(s.ok()) << s.ToString();
    run.last_op_seconds = std::chrono::duration<double>(c.value()->network().now() - start).count();
  }
  run.window = c.value()->worker(0).counters().window;
  for (uint16_t r = 0; r < kWorld; ++r) {
    for (size_t i = 0; i < kCount; i += 997) {
      EXPECT_EQ(run.out[r][i], int32_t(4 * i * 31 + 6 * 1000003))
          << "rank " << r << " element " << i;
    }
  }
  return run;
}

// Sending every packet of one worker's tensor over its link, back to back,
// each with its framing (UDP, IP, Ethernet, preamble and gap).
double LinkSeconds() {
  const double wire = double(PacketBytes(kK) + SimNetworkOptions{}.framing_bytes);
  return double(kCount / kK) * wire * 8 / double(kRate);
}

TEST(SimWindowSizing, MeasuredWindowRunsAtLinkRateWithAboutTwiceTheBdpInFlight) {
  const RunResult run = TwoAllReduces(RateLimited({0}));
  const double rtt = 100e-6 + 2 * double(PacketBytes(kK)) * 8 / double(kRate);
  const double bdp = rtt * double(kRate) / 8 / double(PacketBytes(kK));
  EXPECT_GE(run.window, uint16_t(1.5 * bdp)) << "BDP " << bdp << " packets";
  EXPECT_LE(run.window, uint16_t(3 * bdp)) << "BDP " << bdp << " packets";
  // Virtual time: within 5% of the link's time (the descriptor round and the
  // first round trip are the rest).
  EXPECT_LE(run.last_op_seconds, 1.05 * LinkSeconds());
}

TEST(SimWindowSizing, TooSmallAFixedWindowCannotFillTheLink) {
  const RunResult run = TwoAllReduces(RateLimited({2}));
  EXPECT_EQ(run.window, 2);
  EXPECT_GE(run.last_op_seconds, 3 * LinkSeconds());
}

TEST(SimWindowSizing, RanksWithDifferentWindowsAgreeOnEveryResult) {
  const RunResult same = TwoAllReduces(RateLimited({0}));
  const RunResult mixed = TwoAllReduces(RateLimited({0, 3, 64, 0}));
  EXPECT_EQ(mixed.out, same.out);
  // The job runs at its smallest window: 3 packets per round trip.
  EXPECT_GE(mixed.last_op_seconds, 2 * LinkSeconds());
}

}  // namespace
}  // namespace switchml
