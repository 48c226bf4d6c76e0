// Loss recovery at datacenter speed, in the simulator: the exact counts of
// resends that bench/sim_loss tabulates. No wall-clock times: the network's
// clock is virtual, so every count below is the same on every machine.
#include <gtest/gtest.h>

#include <chrono>
#include <ostream>
#include <tuple>
#include <vector>

#include "sim/sim_cluster.h"
#include "worker/window_sizer.h"

namespace switchml {
namespace {

using std::chrono::microseconds;

constexpr uint16_t kK = 256;

struct Path {
  double gbps;
  double latency_us;
};
void PrintTo(const Path& p, std::ostream* os) { *os << p.gbps << "Gbps_" << p.latency_us << "us"; }

SimClusterOptions Options(uint16_t world, Path path, double loss) {
  SimClusterOptions o;
  o.world_size = world;
  o.elements_per_packet = kK;
  o.network.seed = 1;
  o.network.loss = loss;
  o.network.link_bits_per_second = uint64_t(path.gbps * 1e9);
  o.network.latency = std::chrono::nanoseconds(int64_t(path.latency_us * 1e3));
  const uint32_t wire = uint32_t(PacketBytes(kK)) + o.network.framing_bytes;
  o.pool_slots = PoolSlotsForPath(o.network.link_bits_per_second,
                                  2 * (o.network.latency + o.network.jitter), wire);
  o.data_plane.pool_slots = o.pool_slots;
  o.data_plane.max_elements_per_packet = kK;
  o.data_plane.max_workers = std::max<uint16_t>(64, world);
  return o;
}

// Distinct values on every element of every rank.
std::vector<std::vector<int32_t>> Inputs(uint16_t world, size_t count) {
  std::vector<std::vector<int32_t>> in(world, std::vector<int32_t>(count));
  for (uint16_t r = 0; r < world; ++r) {
    for (size_t i = 0; i < count; ++i) in[r][i] = int32_t((r + 1) * 7919 + i * 104729);
  }
  return in;
}

struct Counts {
  uint64_t engine_retransmissions = 0;
  uint64_t redundant_headers = 0;   // second copies of descriptor-round packets
  uint64_t last_packet_copies = 0;  // and of operations' last packets
  uint64_t results_named_lost = 0;  // a later result named one still awaited
  uint64_t slots_completed = 0;     // the switch's: each descriptor round's slots, each chunk
  SimNetworkCounters net;
};

Counts Snapshot(SimCluster& c, uint16_t world) {
  Counts counts;
  for (uint16_t r = 0; r < world; ++r) {
    counts.engine_retransmissions += c.worker(r).counters().retransmissions;
    counts.redundant_headers += c.worker(r).counters().redundant_headers;
    counts.last_packet_copies += c.worker(r).counters().last_packet_copies;
    counts.results_named_lost += c.worker(r).counters().results_named_lost;
  }
  counts.slots_completed = c.data_plane().counters().slots_completed;
  counts.net = c.network().counters();
  return counts;
}

// Three all-reduces, each exact on every rank; the counts of all three
// (`all`), and of the last one alone (`last`): the first two let the ranks
// measure the path and agree the slots, as a training job's first steps do.
struct Runs {
  Counts all, last;
  Nanos time{0};  // of the three operations, each to its last rank's completion
};
Runs RunThree(SimCluster& c, uint16_t world, size_t count) {
  const auto in = Inputs(world, count);
  std::vector<std::vector<int32_t>> out(world, std::vector<int32_t>(count));
  std::vector<SimRankOp> ops;
  for (uint16_t r = 0; r < world; ++r) {
    ops.push_back({in[r].data(), out[r].data(), count, DType::kInt32});
  }
  Counts before;
  Nanos time{0};
  for (int op = 0; op < 3; ++op) {
    before = Snapshot(c, world);
    for (const Status& s : c.AllReduce(ops)) EXPECT_TRUE(s.ok()) << s.ToString();
    time += c.last_op_time();
    for (size_t i = 0; i < count; ++i) {
      uint32_t sum = 0;  // wraps as the switch's int32 sums do, without UB
      for (uint16_t r = 0; r < world; ++r) sum += uint32_t(in[r][i]);
      for (uint16_t r = 0; r < world; ++r) {
        EXPECT_EQ(out[r][i], int32_t(sum)) << "rank " << r << " at " << i;
      }
    }
  }
  Runs runs;
  runs.time = time;
  runs.all = Snapshot(c, world);
  runs.last = runs.all;
  runs.last.engine_retransmissions -= before.engine_retransmissions;
  runs.last.net.lost -= before.net.lost;
  runs.last.net.retransmissions -= before.net.retransmissions;
  runs.last.net.spurious_retransmissions -= before.net.spurious_retransmissions;
  runs.last.slots_completed -= before.slots_completed;
  return runs;
}

// An operation's time runs from its submission to the last rank's
// completion. The network may run on after that (a switch timer of a stall
// watch finds nothing left to do); counting up to its last event made lossy
// points up to 2.4x slower than they were (64 workers, 4 MiB, 100 Gbit/s,
// 20 us, 1%: 33.9 ms instead of 14.0).
TEST(SimulatedTime, AnOperationEndsAtItsLastRanksCompletion) {
  const uint16_t world = 8;
  const size_t count = 1024 * kK;
  auto measured = SimCluster::Create(Options(world, Path{100, 20}, 0.01));
  auto stepped = SimCluster::Create(Options(world, Path{100, 20}, 0.01));  // the same run
  ASSERT_TRUE(measured.ok() && stepped.ok());
  const auto in = Inputs(world, count);
  std::vector<std::vector<int32_t>> out(world, std::vector<int32_t>(count));
  std::vector<SimRankOp> ops;
  for (uint16_t r = 0; r < world; ++r) {
    ops.push_back({in[r].data(), out[r].data(), count, DType::kInt32});
  }
  const Nanos start = measured.value()->network().now();
  for (const Status& s : measured.value()->AllReduce(ops)) ASSERT_TRUE(s.ok()) << s.ToString();
  const Nanos time = measured.value()->last_op_time();
  ASSERT_GT(time, Nanos(0));
  // Here the network did run on past the operation.
  EXPECT_LT(start + time, measured.value()->network().now());

  // The same run, stepped: no rank is done just before that time, all are at it.
  SimCluster& c = *stepped.value();
  int done = 0;
  for (uint16_t r = 0; r < world; ++r) {
    ASSERT_TRUE(c.worker(r)
                    .Submit(in[r].data(), out[r].data(), count, DType::kInt32,
                            [&done](OpId, const Status& s) { done += s.ok(); })
                    .ok());
  }
  c.network().Run(start + time - Nanos(1));
  EXPECT_LT(done, int(world));
  c.network().Run(start + time);
  EXPECT_EQ(done, int(world));
}

class LossFree : public ::testing::TestWithParam<std::tuple<uint16_t, Path, bool>> {};

// On a loss-free path nothing is resent, at any speed or scale (before: a
// third of all packets at 100 Gbit/s), with the measured window or paced at
// the link rate (then nothing is probed either: the link holds no queue).
TEST_P(LossFree, NothingIsResent) {
  const auto [world, path, pacing] = GetParam();
  SimClusterOptions o = Options(world, path, 0.0);
  o.pacing = pacing;
  auto c = SimCluster::Create(o);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  const Counts counts = RunThree(*c.value(), world, 256 * kK).all;
  EXPECT_EQ(counts.net.lost, 0u);
  EXPECT_EQ(counts.engine_retransmissions, 0u);
  EXPECT_EQ(counts.net.retransmissions, 0u);
  EXPECT_EQ(counts.net.spurious_retransmissions, 0u);
  EXPECT_EQ(counts.redundant_headers, 0u);  // no loss, no copies
  EXPECT_EQ(counts.last_packet_copies, 0u);
  EXPECT_EQ(c.value()->data_plane().counters().tail_result_copies, 0u);
  // Every result came, so none that a later one named was still awaited.
  EXPECT_EQ(counts.results_named_lost, 0u);
  if (pacing) {
    for (uint16_t r = 0; r < world; ++r) {
      EXPECT_EQ(c.value()->worker(r).counters().probes_sent, 0u) << "rank " << r;
      EXPECT_EQ(c.value()->worker(r).counters().window, o.pool_slots) << "rank " << r;
    }
  }
  // (The switch may still NACK a rank whose packet jitter delayed: that
  // rank then sees a later packet of its own unanswered and sends nothing.)
}

INSTANTIATE_TEST_SUITE_P(
    DatacenterSpeeds, LossFree,
    ::testing::Combine(::testing::Values(uint16_t(2), uint16_t(8), uint16_t(33)),
                       ::testing::Values(Path{10, 20}, Path{100, 1}, Path{100, 20}),
                       ::testing::Bool()));

// Under 1% loss every resend is accounted for, and they stay within a bound
// of what was lost (switchml-sim, 8 MiB: 1.04x, 2.05x and 1.09x for seeds
// 1, 7 and 9; the aim is 1.5x; docs/performance.md has the table).
TEST(LossRecovery, UnderOnePercentLossEightWorkersResendAboutWhatWasLost) {
  auto c = SimCluster::Create(Options(8, Path{100, 1}, 0.01));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  const Runs runs = RunThree(*c.value(), 8, 8192 * kK);
  // The network sees every resend the engines make, and no others.
  EXPECT_EQ(runs.all.net.retransmissions, runs.all.engine_retransmissions);
  const Counts& counts = runs.last;
  ASSERT_GT(counts.net.lost, 100u);
  EXPECT_LE(counts.net.retransmissions, 5 * counts.net.lost / 2);
  EXPECT_LE(counts.net.spurious_retransmissions, 3 * counts.net.lost / 2);
  EXPECT_GT(c.value()->data_plane().counters().nacks_sent, 0u);
}

// A loss in one operation makes every rank send the descriptor round's
// headers and slot 0's descriptor twice in the one after next (the next
// one's descriptor agrees it), where the copies take less link time than a
// round trip. The switch ignores the copies and sends those results twice;
// none of it counts as a resend, and the sums stay exact (RunThree checks
// them).
TEST(LossRecovery, AfterALossEveryRankSendsTheHeadersTwice) {
  const uint16_t world = 33;
  auto c = SimCluster::Create(Options(world, Path{100, 20}, 0.001));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  const Runs runs = RunThree(*c.value(), world, 256 * kK);
  ASSERT_GT(runs.all.net.lost, 0u);
  ASSERT_GT(runs.all.engine_retransmissions, 0u);
  EXPECT_EQ(runs.all.net.retransmissions, runs.all.engine_retransmissions);
  EXPECT_EQ(runs.all.net.spurious_retransmissions, 0u);
  // The third operation's descriptor round (slot 0's descriptor and the
  // other slots' headers) a second time, the same on every rank: it uses 128
  // slots (the window the ranks agreed in the second one).
  // And each rank's last packet of it a second time.
  for (uint16_t r = 0; r < world; ++r) {
    EXPECT_EQ(c.value()->worker(r).counters().redundant_headers, 128u) << "rank " << r;
    EXPECT_EQ(c.value()->worker(r).counters().last_packet_copies, 1u) << "rank " << r;
  }
  // Each copy the network delivered while its slot aggregated was ignored
  // (the switch counts the last packets' copies with the headers').
  EXPECT_GT(c.value()->data_plane().counters().header_copies, 0u);
  EXPECT_LE(c.value()->data_plane().counters().header_copies,
            runs.all.redundant_headers + runs.all.last_packet_copies);
}

// At 10 Gbit/s a header's copy takes a tenth of a whole packet's link time,
// and a round trip covers few packets: where a lost header's recovery (two
// round trips and the rank's queue) comes back before its slot's data could
// go, a copy only delays the data. After a loss each rank copies the
// headers of the first slots alone, fewer than the operation's slots.
TEST(LossRecovery, AtTenGigabitsOnlyTheFirstSlotsHeadersGoTwice) {
  const uint16_t world = 33;
  const size_t count = 1024 * kK;
  auto c = SimCluster::Create(Options(world, Path{10, 20}, 0.0001));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  const Runs runs = RunThree(*c.value(), world, count);
  ASSERT_GT(runs.all.engine_retransmissions, 0u);
  EXPECT_EQ(runs.all.net.spurious_retransmissions, 0u);
  // The third operation's slots: its descriptor round's, then one per chunk.
  const uint64_t slots = runs.last.slots_completed - count / kK;
  ASSERT_GT(slots, 64u);
  for (uint16_t r = 0; r < world; ++r) {
    SCOPED_TRACE(r);
    const WorkerEngineCounters w = c.value()->worker(r).counters();
    EXPECT_GT(w.redundant_headers, 0u);
    EXPECT_LT(w.redundant_headers, slots);
    EXPECT_EQ(w.last_packet_copies, 1u);
  }
}

// On slow links ranks drift apart by more than the old fixed 0.5 us floor of
// the NACK delay: a packet takes 8.9 us at 1 Gbit/s. Under loss the switch
// then NACKed nearly every slot (326,000 NACKs for 11,900 lost at 64 MiB,
// 1.45x the loss-free time). The floor of two packet times keeps NACKs to
// stalls (the emulated rack's point: docs/performance.md).
TEST(LossRecovery, OnSlowLinksTheSwitchNacksOnlyStalledSlots) {
  const uint16_t world = 4;
  const size_t count = 4096 * kK;
  auto lossy = SimCluster::Create(Options(world, Path{1, 6}, 0.01));
  auto clean = SimCluster::Create(Options(world, Path{1, 6}, 0.0));
  ASSERT_TRUE(lossy.ok() && clean.ok());
  const Nanos clean_time = RunThree(*clean.value(), world, count).time;
  const Runs runs = RunThree(*lossy.value(), world, count);
  const Counts& counts = runs.all;
  const uint64_t nacks = lossy.value()->data_plane().counters().nacks_sent;
  ASSERT_GT(counts.net.lost, 200u);
  EXPECT_LE(nacks, 8 * counts.net.lost) << nacks << " NACKs for " << counts.net.lost << " lost";
  // Virtual time: the same on every machine.
  const double slowdown = double(runs.time.count()) / double(clean_time.count());
  EXPECT_LE(slowdown, 1.25) << nacks << " NACKs, " << counts.net.lost << " lost";
}

// 4 workers on a loss-free path whose round trip (40 us and more) is longer
// than their timeout.
SimClusterOptions TimeoutsBelowTheRoundTrip() {
  SimClusterOptions o = Options(4, Path{10, 20}, 0.0);
  o.retransmit_timeout = microseconds(30);
  o.min_retransmit_timeout = microseconds(30);
  o.max_retransmit_timeout = microseconds(60);
  return o;
}

// The spurious count is exact: with a timeout below the round trip every
// resend is needless, and the simulator says so.
TEST(LossRecovery, ResendsBeforeTheRoundTripAreCountedAsSpurious) {
  SimClusterOptions o = TimeoutsBelowTheRoundTrip();
  o.probes = false;  // as with a P4 switch: a timeout resends
  auto c = SimCluster::Create(o);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  const Counts counts = RunThree(*c.value(), 4, 64 * kK).all;
  EXPECT_GT(counts.net.retransmissions, 0u);
  EXPECT_EQ(counts.net.spurious_retransmissions, counts.net.retransmissions);
  EXPECT_EQ(counts.net.retransmissions, counts.engine_retransmissions);
}

// The same timeouts with a switch that answers probes: each asks for the
// slot's state, and nothing is resent.
TEST(LossRecovery, TimeoutsBeforeTheRoundTripOnlyProbe) {
  auto c = SimCluster::Create(TimeoutsBelowTheRoundTrip());
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  const Counts counts = RunThree(*c.value(), 4, 64 * kK).all;
  EXPECT_EQ(counts.net.retransmissions, 0u);
  uint64_t probes = 0;
  for (uint16_t r = 0; r < 4; ++r) probes += c.value()->worker(r).counters().probes_sent;
  EXPECT_GT(probes, 0u);
}

class UnderLoss : public ::testing::TestWithParam<std::tuple<uint16_t, Path, double, bool>> {};

// With probes a rank resends only what the switch lacks: a lost packet of
// its own (a pending reply or a NACK says so) or one whose result was lost
// (a NACK for a chunk it has not sent says so). So no resend is spurious,
// and there are fewer resends than losses (lost results, probes, NACKs and
// pending replies need none). The bound is 1.5x the lost.
TEST_P(UnderLoss, NoResendIsSpurious) {
  const auto [world, path, loss, pacing] = GetParam();
  SimClusterOptions o = Options(world, path, loss);
  o.pacing = pacing;
  auto c = SimCluster::Create(o);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  const Counts counts = RunThree(*c.value(), world, 256 * kK).all;
  ASSERT_GT(counts.net.lost, 0u);
  EXPECT_EQ(counts.net.spurious_retransmissions, 0u);
  EXPECT_EQ(counts.net.retransmissions, counts.engine_retransmissions);
  EXPECT_LE(counts.net.retransmissions, counts.net.lost);
  // Lost results were found by the next result, which names the one before
  // it (docs/wire-format.md, "The previous result"); only lost packets can
  // be named so.
  if (loss >= 0.01) {
    EXPECT_GT(counts.results_named_lost, 0u);
  }
  // Where a slot in three needs a resend, the last results of a burst went
  // twice (DataPlane::CopyTailResult).
  if (loss >= 0.01 && world >= 33) {
    EXPECT_GT(c.value()->data_plane().counters().tail_result_copies, 0u);
  }
  EXPECT_LE(counts.results_named_lost, counts.net.lost);
}

INSTANTIATE_TEST_SUITE_P(
    DatacenterSpeeds, UnderLoss,
    ::testing::Values(std::make_tuple(uint16_t(8), Path{100, 1}, 0.01, false),
                      std::make_tuple(uint16_t(33), Path{100, 20}, 0.01, false),
                      std::make_tuple(uint16_t(33), Path{10, 1}, 0.001, false),
                      std::make_tuple(uint16_t(8), Path{100, 1}, 0.01, true),
                      std::make_tuple(uint16_t(33), Path{100, 20}, 0.01, true),
                      std::make_tuple(uint16_t(33), Path{10, 1}, 0.001, true)));

// A packet held back on a FIFO link stays in order: jitter delays, it never
// reorders (the simulator once reordered within a link, which a real link
// never does, and every such reordering cost a resend).
TEST(LossRecovery, JitterNeverReordersALink) {
  SimClusterOptions o = Options(8, Path{100, 1}, 0.0);
  o.network.jitter = microseconds(5);  // far above a packet's 87 ns on the wire
  auto c = SimCluster::Create(o);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  const Counts counts = RunThree(*c.value(), 8, 512 * kK).all;
  EXPECT_EQ(counts.net.reordered, 0u);
  EXPECT_EQ(counts.engine_retransmissions, 0u);
}

// A multipath fabric reorders: a packet held back up to 5 us, less than the
// path's round trip, arrives after its rank's next chunk. The switch learns
// how late such packets run and waits that long before it calls one lost,
// so reordering alone costs (almost) no resend. Before the reordering
// window (docs/design.md §2) a newer chunk proved a loss at once: 357
// needless resends in the last of three all-reduces of switchml-sim
// --workers 8 --size 4MiB --link-gbps 100 --latency-us 20 --reorder 0.01
// --reorder-us 5 --warmup 2 (about 900 packets reordered in all); now 8,
// as in this test.
TEST(LossRecovery, ReorderingAloneCausesNoResendOnceTheSwitchHasSeenIt) {
  SimClusterOptions o = Options(8, Path{100, 20}, 0.0);
  o.network.reorder = 0.01;
  o.network.reorder_delay = microseconds(5);
  auto c = SimCluster::Create(o);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  const Runs runs = RunThree(*c.value(), 8, 4096 * kK);
  const Counts& counts = runs.last;
  EXPECT_EQ(counts.net.lost, 0u);
  ASSERT_GT(c.value()->network().counters().reordered, 300u);
  EXPECT_EQ(counts.net.retransmissions, counts.net.spurious_retransmissions);
  EXPECT_LE(counts.net.spurious_retransmissions, c.value()->network().counters().reordered / 50);
}

}  // namespace
}  // namespace switchml
