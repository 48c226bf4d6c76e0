#include "worker/worker_engine.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <optional>
#include <vector>

#include "dataplane/data_plane.h"

namespace switchml {
namespace {

using std::chrono::milliseconds;

struct RecordingSink : PacketSink {
  void Send(std::span<const uint8_t> p) override { sent.emplace_back(p.begin(), p.end()); }
  std::vector<std::vector<uint8_t>> sent;
};

PacketHeader HeaderOf(const std::vector<uint8_t>& p) {
  PacketView v;
  EXPECT_EQ(DecodePacket(p, &v), DecodeError::kOk);
  return v.header;
}

// `second` is the packet `first` but for `flag`, which `second` carries and
// `first` does not.
::testing::AssertionResult SameBytesButFlag(std::vector<uint8_t> second,
                                            const std::vector<uint8_t>& first, uint8_t flag) {
  if (first.size() <= kFlagsOffset || (first[kFlagsOffset] & flag) != 0) {
    return ::testing::AssertionFailure() << "the first transmission carries flag " << int(flag);
  }
  if (second.size() <= kFlagsOffset || (second[kFlagsOffset] & flag) == 0) {
    return ::testing::AssertionFailure() << "the second lacks flag " << int(flag);
  }
  second[kFlagsOffset] &= uint8_t(~flag);
  if (second != first) return ::testing::AssertionFailure() << "other bytes differ";
  return ::testing::AssertionSuccess();
}

// A resend: the first transmission's bytes but for the resend flag, which it
// must carry (the switch tells a reordered first transmission by its absence).
::testing::AssertionResult IsResendOf(const std::vector<uint8_t>& resent,
                                      const std::vector<uint8_t>& first) {
  return SameBytesButFlag(resent, first, kFlagResend);
}

WorkerEngineConfig Config(uint16_t world, uint16_t rank, uint16_t slots) {
  WorkerEngineConfig c;
  c.job = JobId(3);
  c.rank = Rank(rank);
  c.world_size = world;
  c.elements_per_packet = 32;
  c.pool_slots = slots;
  c.retransmit_timeout = milliseconds(1);
  c.max_retransmit_timeout = milliseconds(8);
  c.failure_timeout = milliseconds(100);
  c.operation_timeout = milliseconds(150);
  return c;
}

// A data plane of `slots` slots, all of them job 3's (`world` ranks, k = 32),
// the job Config() describes.
std::unique_ptr<DataPlane> SwitchWithJob(uint16_t world, uint16_t slots) {
  DataPlaneConfig dc;
  dc.pool_slots = slots;
  dc.max_elements_per_packet = 32;
  auto dp = std::make_unique<DataPlane>(dc);
  EXPECT_TRUE(dp->RegisterJob({JobId(3), world, 32, 0, slots}).ok());
  return dp;
}

// Runs `e` at each of its deadlines until `called` (set by its operation's
// callback), at most 200 ms: every packet it sent reaches `dp`, and pending
// answers come back. Returns the time it stopped.
Nanos RunUntilCalled(WorkerEngine& e, DataPlane& dp, RecordingSink& sink, const bool& called) {
  std::vector<uint8_t> out(PacketBytes(32));
  Nanos now(0);
  size_t delivered = 0;
  while (!called && now < milliseconds(200)) {
    now = e.NextDeadline();
    e.OnTimer(now, sink);
    for (; delivered < sink.sent.size(); ++delivered) {
      const Verdict v = dp.Process(sink.sent[delivered], out);
      if (v.action == Action::kPendingToSender) {
        e.OnPacket(std::span(out.data(), v.out_bytes), now, sink);
      }
    }
  }
  return now;
}

// The header of a NACK from the switch about the slot, version and chunk of
// `sent` (a packet the engine sent), with the two bitmaps of a 2-rank job.
PacketHeader NackHeaderAbout(const std::vector<uint8_t>& sent) {
  PacketHeader h = HeaderOf(sent);
  h.type = MessageType::kNack;
  h.rank = kAllRanks;
  h.element_count = 2;
  return h;
}

// Runs `e`'s timers alone (nothing answers) until it has none left, at most
// 1000 of them; returns the time of the last.
Nanos RunTimersToTheEnd(WorkerEngine& e, RecordingSink& sink) {
  Nanos at{-1};
  for (int steps = 0; e.NextDeadline() != Nanos::max() && steps < 1000; ++steps) {
    at = e.NextDeadline();
    e.OnTimer(at, sink);
  }
  return at;
}

// Two engines of one 2-rank job and the switch that holds it. Deliver() takes
// the switch's answer in `out` to the ranks it is for (a result to both, a
// NACK to the ranks it names, a reply to its sender); Pump() takes every
// packet the engines sent from d0 / d1 on to the switch, one rank's after the
// other's, until none is left. `done` counts the operations that finished.
struct TwoRankJob {
  TwoRankJob(WorkerEngineConfig c0, WorkerEngineConfig c1, std::vector<int32_t> input)
      : sw(SwitchWithJob(2, c0.pool_slots)),
        e0(c0),
        e1(c1),
        x(std::move(input)),
        y0(x.size()),
        y1(x.size()),
        out(PacketBytes(32)) {}

  // Submits the all-reduce on both ranks, and each sends what it may at time 0.
  ::testing::AssertionResult Start() {
    auto finish = [this](OpId, const Status& s) {
      EXPECT_TRUE(s.ok());
      ++done;
    };
    if (!e0.Submit(x.data(), y0.data(), x.size(), DType::kInt32, finish).ok() ||
        !e1.Submit(x.data(), y1.data(), x.size(), DType::kInt32, finish).ok()) {
      return ::testing::AssertionFailure() << "Submit failed";
    }
    e0.OnTimer(Nanos(0), s0);
    e1.OnTimer(Nanos(0), s1);
    return ::testing::AssertionSuccess();
  }

  void Deliver(Verdict v, Nanos now) {
    const std::span<const uint8_t> p(out.data(), v.out_bytes);
    if (v.action == Action::kSendToAll) {
      e0.OnPacket(p, now, s0);
      e1.OnPacket(p, now, s1);
    } else if (v.action == Action::kNackToMissing || v.action == Action::kPendingToSender ||
               v.action == Action::kReplyToSender) {
      const bool nack = v.action == Action::kNackToMissing;
      if (nack ? NackNames(p, 0) : v.rank == 0) e0.OnPacket(p, now, s0);
      if (nack ? NackNames(p, 1) : v.rank == 1) e1.OnPacket(p, now, s1);
    }
  }

  void Pump(Nanos now) {
    sw->AdvanceClock(now);
    while (d0 < s0.sent.size() || d1 < s1.sent.size()) {
      if (d1 < s1.sent.size()) Deliver(sw->Process(s1.sent[d1++], out), now);
      if (d0 < s0.sent.size()) Deliver(sw->Process(s0.sent[d0++], out), now);
    }
  }

  std::unique_ptr<DataPlane> sw;
  WorkerEngine e0, e1;
  RecordingSink s0, s1;
  std::vector<int32_t> x, y0, y1;
  std::vector<uint8_t> out;
  size_t d0 = 0, d1 = 0;
  int done = 0;
};

TEST(WorkerEngineConfigTest, RejectsBadValuesByName) {
  WorkerEngineConfig c = Config(2, 2, 4);
  EXPECT_NE(c.Validate().message().find("rank=2"), std::string::npos);
  c = Config(2, 0, 4);
  c.elements_per_packet = 16;
  EXPECT_NE(c.Validate().message().find("elements_per_packet=16"), std::string::npos);
  c = Config(2, 0, 4);
  c.failure_timeout = milliseconds(1);
  EXPECT_FALSE(c.Validate().ok());
  c = Config(2, 0, 4);
  c.operation_timeout = Nanos(0);
  EXPECT_NE(c.Validate().message().find("operation_timeout"), std::string::npos);
  EXPECT_FALSE(WorkerEngine::Create(c).ok());
}

TEST(WorkerEngineConfigTest, RejectsPacingBelowOneMegabitByName) {
  WorkerEngineConfig c = Config(2, 0, 4);
  c.pacing_bits_per_second = 999'999;
  EXPECT_NE(c.Validate().message().find("pacing_bits_per_second=999999"), std::string::npos);
  c.pacing_bits_per_second = kMinPacingBitsPerSecond;
  EXPECT_TRUE(c.Validate().ok());
}

TEST(WorkerEngine, SubmitRejectsBadArguments) {
  WorkerEngine e(Config(1, 0, 4));
  EXPECT_EQ(e.Submit(nullptr, nullptr, 5, DType::kInt32, {}).status().code(),
            StatusCode::kInvalidArgument);
  int32_t x = 0;
  EXPECT_EQ(e.Submit(&x, &x, 1, DType(7), {}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(e.Submit(nullptr, nullptr, 0, DType::kInt32, {}).ok());
}

// The first window is the descriptor round: one packet per slot, never more
// slots than chunks.
TEST(WorkerEngine, FirstWindowIsOnePacketPerSlotBoundedByChunks) {
  WorkerEngine e(Config(2, 1, 8));
  RecordingSink sink;
  std::vector<int32_t> x(3 * 32 + 1), y(x.size());
  ASSERT_TRUE(e.Submit(x.data(), y.data(), x.size(), DType::kInt32, {}).ok());
  EXPECT_EQ(e.NextDeadline(), Nanos(0));
  e.OnTimer(Nanos(0), sink);
  ASSERT_EQ(sink.sent.size(), 4u);  // 4 chunks < 8 slots
  for (uint16_t i = 0; i < 4; ++i) {
    const PacketHeader h = HeaderOf(sink.sent[i]);
    EXPECT_EQ(h.slot, i);
    EXPECT_EQ(h.chunk, i);
    EXPECT_EQ(h.rank, 1);
    EXPECT_EQ(h.job, 3u);
    EXPECT_EQ(h.version, 0);
    EXPECT_EQ(h.element_count, 32);
  }
}

// Regression (pitfall: first-window timers armed under the wrong packet):
// losing the very first packet of a job must lead to its own retransmission,
// byte for byte but for the flag that marks it a resend.
TEST(WorkerEngine, LostFirstPacketIsRetransmittedUnchanged) {
  WorkerEngine e(Config(2, 0, 2));
  RecordingSink sink;
  std::vector<float> x(64, 1.0f), y(64);
  ASSERT_TRUE(e.Submit(x.data(), y.data(), x.size(), DType::kFloat32, {}).ok());
  e.OnTimer(Nanos(0), sink);
  ASSERT_EQ(sink.sent.size(), 2u);
  const std::vector<uint8_t> first = sink.sent[0], second = sink.sent[1];
  EXPECT_EQ(e.NextDeadline(), milliseconds(1));
  e.OnTimer(milliseconds(1), sink);
  ASSERT_EQ(sink.sent.size(), 4u);
  EXPECT_TRUE(IsResendOf(sink.sent[2], first));
  EXPECT_TRUE(IsResendOf(sink.sent[3], second));
  EXPECT_EQ(e.counters().retransmissions, 2u);
  // Per-slot back-off: the next retransmission waits twice as long.
  e.OnTimer(milliseconds(2), sink);
  EXPECT_EQ(sink.sent.size(), 4u);
  e.OnTimer(milliseconds(3), sink);
  EXPECT_EQ(sink.sent.size(), 6u);
}

// The engine keeps no copy of what it sent: a lost data packet is written
// again from the input, byte for byte (but for the resend flag), even in place (the input's later
// chunks are already results by then).
TEST(WorkerEngine, LostDataPacketIsRewrittenUnchangedInPlace) {
  auto sw = SwitchWithJob(1, 2);
  DataPlane& dp = *sw;
  WorkerEngine e(Config(1, 0, 2));
  RecordingSink sink;
  std::vector<float> x(100);
  for (size_t i = 0; i < x.size(); ++i) x[i] = float(i) * 0.37f - 5.0f;
  const std::vector<float> original = x;
  Status result;
  bool called = false;
  ASSERT_TRUE(e.Submit(x.data(), x.data(), x.size(), DType::kFloat32, [&](OpId, const Status& s) {
                 result = s, called = true;
               }).ok());
  std::vector<uint8_t> out(PacketBytes(32)), lost;
  int resent = 0;
  Nanos now(0);
  e.OnTimer(now, sink);
  for (size_t delivered = 0; !called;) {
    for (; delivered < sink.sent.size(); ++delivered) {
      const std::vector<uint8_t> p = sink.sent[delivered];  // OnPacket appends
      if (lost.empty() && HeaderOf(p).chunk >= 2) {         // the first data round's first packet
        lost = p;
        continue;
      }
      if (IsResendOf(p, lost)) ++resent;
      const Verdict v = dp.Process(p, out);
      if (v.action != Action::kDrop) e.OnPacket(std::span(out.data(), v.out_bytes), now, sink);
    }
    if (called) break;
    now = e.NextDeadline();
    ASSERT_LT(now, milliseconds(50));
    e.OnTimer(now, sink);
  }
  ASSERT_TRUE(result.ok()) << result.ToString();
  EXPECT_EQ(resent, 1);
  EXPECT_EQ(e.counters().retransmissions, 1u);
  for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(x[i], original[i], 1e-6) << i;
}

// Drives one engine against a real data plane with a second, scripted rank.
// The switch keeps naming the silent rank, so it is late, not gone (that is
// the control plane's news): it is waited for past failure_timeout, up to
// operation_timeout.
TEST(WorkerEngine, SilentPeerIsWaitedForUpToTheOperationTimeoutThenNamed) {
  auto sw = SwitchWithJob(3, 4);
  DataPlane& dp = *sw;
  WorkerEngine e(Config(3, 0, 4));
  RecordingSink sink;
  std::vector<int32_t> x(10, 1), y(10);
  Status result;
  bool called = false;
  ASSERT_TRUE(e.Submit(x.data(), y.data(), x.size(), DType::kInt32, [&](OpId, const Status& s) {
                 result = s, called = true;
               }).ok());
  // Rank 1 contributes, rank 2 never does; every packet of rank 0 reaches the switch.
  std::vector<uint8_t> out(PacketBytes(32));
  Nanos now(0);
  e.OnTimer(now, sink);
  ASSERT_EQ(sink.sent.size(), 1u);
  std::vector<uint8_t> peer = sink.sent[0];
  peer[13] = 1;  // same packet from rank 1
  dp.Process(peer, out);
  now = RunUntilCalled(e, dp, sink, called);
  ASSERT_TRUE(called);
  EXPECT_EQ(result.code(), StatusCode::kDeadlineExceeded);
  EXPECT_EQ(result.message().rfind("Timed out after 150 ms", 0), 0u) << result.message();
  EXPECT_NE(result.message().find("no contribution from rank 2 "), std::string::npos)
      << result.message();
  EXPECT_EQ(now, milliseconds(150));  // exactly the configured bound
  EXPECT_TRUE(e.broken());
  EXPECT_TRUE(e.timed_out());
  EXPECT_FALSE(e.switch_silent());
  EXPECT_EQ(e.Submit(x.data(), y.data(), x.size(), DType::kInt32, {}).status().code(),
            StatusCode::kFailedPrecondition);
}

// Regression: a live rank whose window held back its later
// packets used to be named missing too (the engine OR-ed the pending reports
// of every slot). Only the oldest unanswered chunk's report names exactly
// the ranks that stopped.
TEST(WorkerEngine, StallNamesOnlyTheRanksMissingAtTheOldestChunk) {
  auto sw = SwitchWithJob(3, 4);
  WorkerEngine e(Config(3, 0, 4));
  RecordingSink sink;
  std::vector<int32_t> x(4 * 32, 1), y(x.size());
  Status result;
  bool called = false;
  ASSERT_TRUE(e.Submit(x.data(), y.data(), x.size(), DType::kInt32, [&](OpId, const Status& s) {
                 result = s, called = true;
               }).ok());
  std::vector<uint8_t> out(PacketBytes(32));
  Nanos now(0);
  e.OnTimer(now, sink);
  ASSERT_EQ(sink.sent.size(), 4u);
  // Rank 1, alive with a window of one packet, sent only the first chunk;
  // rank 2 stopped.
  std::vector<uint8_t> peer = sink.sent[0];
  peer[13] = 1;
  sw->Process(peer, out);
  now = RunUntilCalled(e, *sw, sink, called);
  ASSERT_TRUE(called);
  EXPECT_EQ(result.code(), StatusCode::kDeadlineExceeded);
  EXPECT_NE(result.message().find("no contribution from rank 2 "), std::string::npos)
      << result.message();
  EXPECT_NE(result.message().find("(operation_timeout_ms = 150)"), std::string::npos)
      << result.message();
  EXPECT_FALSE(e.switch_silent());
}

// A lost contribution goes again as soon as the switch NACKs its rank, long
// before its timeout; the rank the NACK does not name sends nothing.
TEST(WorkerEngine, ANackResendsTheLostPacketAtOnceAndOnlyFromTheRankItNames) {
  std::vector<int32_t> input(8 * 32);
  for (size_t i = 0; i < input.size(); ++i) input[i] = int32_t(i);
  TwoRankJob job(Config(2, 0, 8), Config(2, 1, 8), input);
  ASSERT_TRUE(job.Start());
  ASSERT_EQ(job.s0.sent.size(), 8u);
  ASSERT_EQ(job.s1.sent.size(), 8u);
  // Rank 0's first packet (slot 0 of the descriptor round) is lost.
  job.d0 = 1;
  job.Pump(Nanos(2000));
  EXPECT_EQ(job.done, 0);  // slot 0 waits for rank 0
  EXPECT_EQ(job.e0.counters().retransmissions, 0u);
  // The switch's timer NACKs rank 0 as lost (its newer packets came), long
  // before the 1 ms timeout; rank 1 is not told anything.
  const Nanos now = job.sw->NextTimer();
  ASSERT_LT(now, milliseconds(1));
  for (Verdict v; (v = job.sw->NextTimerPacket(now, job.out)).action != Action::kDrop;) {
    ASSERT_EQ(v.action, Action::kNackToMissing);
    EXPECT_EQ(LoadBe32(&job.out[kHeaderBytes]), 1u);      // lost: rank 0
    EXPECT_EQ(LoadBe32(&job.out[kHeaderBytes + 4]), 0u);  // behind: none
    job.Deliver(v, now);
  }
  EXPECT_EQ(job.e0.counters().nacks_received, 1u);
  EXPECT_EQ(job.e1.counters().nacks_received, 0u);
  EXPECT_EQ(job.e0.counters().fast_retransmissions, 1u);
  EXPECT_EQ(job.e1.counters().retransmissions, 0u);
  ASSERT_EQ(job.s0.sent.size(), 9u);
  EXPECT_TRUE(IsResendOf(job.s0.sent[8], job.s0.sent[0]));
  job.Pump(now);
  EXPECT_EQ(job.done, 2);
  EXPECT_EQ(job.y0, job.y1);
  for (size_t i = 0; i < input.size(); ++i) ASSERT_EQ(job.y0[i], 2 * input[i]) << i;
  EXPECT_EQ(job.e0.counters().retransmissions, 1u);
  EXPECT_EQ(job.e1.counters().retransmissions, 0u);
}

// A NACK for the next round of a slot whose result this rank still waits
// for: the others had that result, so the switch sent this rank's before the
// NACK, and the link lost it. The packet goes again at once, long before the
// timeout, and once per round trip however many such NACKs come.
TEST(WorkerEngine, ANackForTheNextRoundOfAnOutstandingSlotResendsItAtOnce) {
  WorkerEngine e(Config(2, 0, 4));
  RecordingSink sink;
  std::vector<int32_t> x(4 * 32), y(x.size());
  ASSERT_TRUE(e.Submit(x.data(), y.data(), x.size(), DType::kInt32, {}).ok());
  e.OnTimer(Nanos(0), sink);
  ASSERT_EQ(sink.sent.size(), 4u);  // the descriptor round, slots 0-3
  PacketHeader h = NackHeaderAbout(sink.sent[0]);
  h.chunk += 4;  // slot 0's next round
  h.version ^= 1;
  std::vector<uint8_t> nack(PacketBytes(2));
  EncodeHeader(h, nack);
  StoreBe32(&nack[kHeaderBytes + 4], 0b01);         // rank 0 behind: it has not sent that chunk
  const Nanos at = std::chrono::microseconds(100);  // a tenth of the 1 ms timeout
  e.OnPacket(nack, at, sink);
  e.OnPacket(nack, at + std::chrono::microseconds(1), sink);
  EXPECT_EQ(e.counters().nacks_received, 2u);
  EXPECT_EQ(e.counters().fast_retransmissions, 1u);
  EXPECT_EQ(e.counters().nacks_ignored, 1u);
  ASSERT_EQ(sink.sent.size(), 5u);
  EXPECT_TRUE(IsResendOf(sink.sent[4], sink.sent[0]));
}

// At an operation's end: the other rank has all of its results and sends the
// next operation, while this one lost two results of the last round. The
// switch's NACK for the next operation names this rank, which then resends
// both at once instead of waiting for its timeout (and the other rank with
// it).
TEST(WorkerEngine, ANackFromTheNextOperationResendsEveryResultStillMissing) {
  auto sw = SwitchWithJob(2, 4);
  WorkerEngine e0(Config(2, 0, 4)), e1(Config(2, 1, 4));
  RecordingSink s0, s1;
  std::vector<int32_t> x(4 * 32, 1), y0(x.size()), y1(x.size()), z1(x.size());
  int done0 = 0, done1 = 0;
  ASSERT_TRUE(e0.Submit(x.data(), y0.data(), x.size(), DType::kInt32, [&](OpId, const Status& s) {
                  done0 += s.ok();
                }).ok());
  ASSERT_TRUE(e1.Submit(x.data(), y1.data(), x.size(), DType::kInt32, [&](OpId, const Status& s) {
                  done1 += s.ok();
                }).ok());
  ASSERT_TRUE(e1.Submit(x.data(), z1.data(), x.size(), DType::kInt32, {}).ok());
  Nanos now(0);
  e0.OnTimer(now, s0);
  e1.OnTimer(now, s1);
  std::vector<uint8_t> out(PacketBytes(32));
  size_t d0 = 0, d1 = 0, results_to_0 = 0;
  auto pump = [&] {
    sw->AdvanceClock(now);
    while (d0 < s0.sent.size() || d1 < s1.sent.size()) {
      for (auto [d, sent] : {std::pair{&d0, &s0.sent}, std::pair{&d1, &s1.sent}}) {
        if (*d >= sent->size()) continue;
        const Verdict v = sw->Process((*sent)[(*d)++], out);
        const std::span<const uint8_t> p(out.data(), v.out_bytes);
        if (v.action == Action::kReplyToSender && v.rank == 0) e0.OnPacket(p, now, s0);
        if (v.action != Action::kSendToAll) continue;
        // Rank 0 loses the results of slots 2 and 3 of the data round.
        if (++results_to_0 <= 6) e0.OnPacket(p, now, s0);
        e1.OnPacket(p, now, s1);
      }
    }
  };
  now = std::chrono::microseconds(10);
  pump();
  EXPECT_EQ(done1, 1);  // rank 1 is done, and sent the next operation
  EXPECT_EQ(done0, 0);
  EXPECT_EQ(e0.counters().retransmissions, 0u);
  // Rank 0 sent nothing newer: the switch's first watch names no one, the
  // second the rank that waits for those slots' previous results.
  for (int watch = 0; watch < 2; ++watch) {
    now = sw->NextTimer();
    ASSERT_LT(now, milliseconds(1));
    for (Verdict v; (v = sw->NextTimerPacket(now, out)).action != Action::kDrop;) {
      ASSERT_EQ(v.action, Action::kNackToMissing);
      const std::span<const uint8_t> nack(out.data(), v.out_bytes);
      EXPECT_EQ(watch, 1);
      EXPECT_TRUE(NackNames(nack, 0));
      EXPECT_FALSE(NackNames(nack, 1));
      e0.OnPacket(nack, now, s0);
    }
  }
  EXPECT_GE(e0.counters().nacks_received, 1u);
  EXPECT_EQ(e0.counters().fast_retransmissions, 2u);
  pump();
  EXPECT_EQ(done0, 1);
  EXPECT_EQ(y0, y1);
}

// What is not a NACK for this rank's outstanding slot changes nothing.
TEST(WorkerEngine, ANackForAnotherJobOrOfTheWrongSizeIsCountedAndIgnored) {
  WorkerEngine e(Config(2, 0, 4));
  RecordingSink sink;
  std::vector<int32_t> x(4 * 32), y(x.size());
  ASSERT_TRUE(e.Submit(x.data(), y.data(), x.size(), DType::kInt32, {}).ok());
  e.OnTimer(Nanos(0), sink);
  const PacketHeader sent = HeaderOf(sink.sent[0]);
  PacketHeader h = NackHeaderAbout(sink.sent[0]);
  std::vector<uint8_t> nack(PacketBytes(2));
  StoreBe32(&nack[kHeaderBytes], 0b01);  // rank 0's packet was lost
  h.job = sent.job + 1;                  // forged: another job
  EncodeHeader(h, nack);
  e.OnPacket(nack, milliseconds(2), sink);
  h.job = sent.job;
  h.element_count = 1;  // not the job's two bitmaps
  std::vector<uint8_t> narrow(PacketBytes(1));
  EncodeHeader(h, narrow);
  StoreBe32(&narrow[kHeaderBytes], 0b01);
  e.OnPacket(narrow, milliseconds(2), sink);
  EXPECT_EQ(e.counters().wrong_job_or_rank, 1u);
  EXPECT_EQ(e.counters().invalid, 1u);
  EXPECT_EQ(e.counters().nacks_received, 0u);
  EXPECT_EQ(e.counters().retransmissions, 0u);
  EXPECT_EQ(sink.sent.size(), 4u);
}

TEST(WorkerEngine, SilentSwitchFailsTheJobSayingSo) {
  WorkerEngine e(Config(2, 0, 4));
  RecordingSink sink;
  std::vector<int32_t> x(10, 1), y(10);
  Status result;
  ASSERT_TRUE(e.Submit(x.data(), y.data(), x.size(), DType::kInt32, [&](OpId, const Status& s) {
                 result = s;
               }).ok());
  RunTimersToTheEnd(e, sink);
  EXPECT_EQ(result.code(), StatusCode::kDeadlineExceeded);
  EXPECT_NE(result.message().find("no answer from the switch"), std::string::npos)
      << result.message();
  EXPECT_NE(result.message().find("(failure_timeout_ms = 100)"), std::string::npos)
      << result.message();
  EXPECT_TRUE(e.switch_silent());
  EXPECT_FALSE(e.timed_out());
}

// An operation timeout shorter than the failure timeout bounds a silent
// switch too.
TEST(WorkerEngine, AShortOperationTimeoutBoundsASilentSwitch) {
  WorkerEngineConfig c = Config(2, 0, 4);
  c.operation_timeout = milliseconds(30);
  WorkerEngine e(c);
  RecordingSink sink;
  std::vector<int32_t> x(10, 1), y(10);
  Status result;
  ASSERT_TRUE(e.Submit(x.data(), y.data(), x.size(), DType::kInt32, [&](OpId, const Status& s) {
                 result = s;
               }).ok());
  EXPECT_EQ(RunTimersToTheEnd(e, sink), milliseconds(30));
  EXPECT_EQ(result.code(), StatusCode::kDeadlineExceeded);
  EXPECT_EQ(result.message().rfind("Timed out after 30 ms", 0), 0u) << result.message();
  EXPECT_NE(result.message().find("no answer from the switch"), std::string::npos)
      << result.message();
  EXPECT_TRUE(e.timed_out());
}

TEST(WorkerEngine, ForeignAndMalformedPacketsAreCountedAndIgnored) {
  WorkerEngine e(Config(2, 0, 4));
  RecordingSink sink;
  std::vector<int32_t> x(10, 1), y(10);
  ASSERT_TRUE(e.Submit(x.data(), y.data(), x.size(), DType::kInt32, {}).ok());
  e.OnTimer(Nanos(0), sink);
  std::vector<uint8_t> p = sink.sent[0];
  p[3] = uint8_t(MessageType::kResult);
  std::vector<uint8_t> other_job = p;
  other_job[7] = 4;
  e.OnPacket(other_job, Nanos(1), sink);
  std::vector<uint8_t> other_rank = p;
  other_rank[13] = 1;
  e.OnPacket(other_rank, Nanos(1), sink);
  e.OnPacket(std::span(p.data(), 10), Nanos(1), sink);
  std::vector<uint8_t> wrong_round = p;
  wrong_round[11] = 9;  // chunk id of a round this slot is not in
  e.OnPacket(wrong_round, Nanos(1), sink);
  EXPECT_EQ(e.counters().wrong_job_or_rank, 2u);
  EXPECT_EQ(e.counters().malformed, 1u);
  EXPECT_EQ(e.counters().duplicates, 1u);
  EXPECT_EQ(e.counters().results_accepted, 0u);
  EXPECT_EQ(sink.sent.size(), 1u);
}

WorkerEngineConfig ProbingConfig(uint16_t world, uint16_t rank, uint16_t slots) {
  WorkerEngineConfig c = Config(world, rank, slots);
  c.switch_answers_probes = true;
  return c;
}

// With a switch that answers probes, a timeout asks for the slot's state
// with a header-only probe instead of resending the values; a pending reply
// that lacks this rank resends them (the packet went before the probe on
// the same link: lost), one that lists it waits.
TEST(WorkerEngine, WithProbesATimeoutAsksTheSwitchAndOnlyAMissingRankResends) {
  auto sw = SwitchWithJob(2, 2);
  WorkerEngine e(ProbingConfig(2, 0, 2));
  RecordingSink sink;
  std::vector<int32_t> x(2 * 32), y(x.size());
  ASSERT_TRUE(e.Submit(x.data(), y.data(), x.size(), DType::kInt32, {}).ok());
  e.OnTimer(Nanos(0), sink);
  ASSERT_EQ(sink.sent.size(), 2u);
  std::vector<uint8_t> out(PacketBytes(32));
  sw->Process(sink.sent[0], out);  // slot 0's packet arrives, slot 1's is lost
  auto is_probe_of = [&](size_t i, size_t of) {
    const PacketHeader probe = HeaderOf(sink.sent[i]);
    const PacketHeader sent = HeaderOf(sink.sent[of]);
    return probe.type == MessageType::kProbe && probe.element_count == 0 &&
           sink.sent[i].size() == kHeaderBytes && probe.chunk == sent.chunk &&
           probe.slot == sent.slot && probe.version == sent.version;
  };
  // Both are overdue, one stall: the oldest is asked about alone. Rank 0 is
  // in, it waits.
  e.OnTimer(milliseconds(1), sink);
  ASSERT_EQ(sink.sent.size(), 3u);
  EXPECT_TRUE(is_probe_of(2, 0));
  Verdict v = sw->Process(sink.sent[2], out);
  ASSERT_EQ(v.action, Action::kPendingToSender);
  e.OnPacket(std::span(out.data(), v.out_bytes), milliseconds(1), sink);
  EXPECT_EQ(sink.sent.size(), 3u);
  // Slot 1 is asked about a path timeout later: rank 0 is not in, it resends.
  std::optional<size_t> asked;
  for (int steps = 0; steps < 10 && e.counters().retransmissions == 0; ++steps) {
    const Nanos now = e.NextDeadline();
    const size_t from = sink.sent.size();
    e.OnTimer(now, sink);
    for (size_t i = from; i < sink.sent.size(); ++i) {
      if (!asked && HeaderOf(sink.sent[i]).slot == HeaderOf(sink.sent[1]).slot) {
        asked = i;
        EXPECT_GE(now, milliseconds(2));
      }
      v = sw->Process(sink.sent[i], out);
      if (v.action == Action::kPendingToSender) {
        e.OnPacket(std::span(out.data(), v.out_bytes), now, sink);
      }
    }
  }
  ASSERT_TRUE(asked.has_value());
  EXPECT_TRUE(is_probe_of(*asked, 1));
  ASSERT_EQ(e.counters().retransmissions, 1u);
  ASSERT_GE(sink.sent.size(), 2u);
  EXPECT_TRUE(IsResendOf(sink.sent[sink.sent.size() - 2], sink.sent[1]));
  EXPECT_TRUE(is_probe_of(sink.sent.size() - 1, 1));  // right behind the resend
}

// Every rank sends in chunk order over links that keep order, so the switch
// completes slots in that order: a result for a later packet means that an
// earlier one still waiting lost its result (or waits on a lost
// contribution). A result names the one the switch sent before it; one this
// rank still waits for is asked for at once, not at its timeout.
TEST(WorkerEngine, AResultNamedLostIsProbedAtOnceAndWalkedBack) {
  auto sw = SwitchWithJob(1, 4);
  WorkerEngine e(ProbingConfig(1, 0, 4));
  RecordingSink sink;
  bool called = false;
  std::vector<int32_t> x(4 * 32, 7), y(x.size());
  ASSERT_TRUE(e.Submit(x.data(), y.data(), x.size(), DType::kInt32, [&](OpId, const Status& s) {
                 EXPECT_TRUE(s.ok());
                 called = true;
               }).ok());
  e.OnTimer(Nanos(0), sink);
  ASSERT_EQ(sink.sent.size(), 4u);  // the descriptor round
  std::vector<uint8_t> out(PacketBytes(32));
  std::vector<std::vector<uint8_t>> results;
  for (size_t i = 0; i < 4; ++i) {
    const Verdict v = sw->Process(sink.sent[i], out);
    ASSERT_EQ(v.action, Action::kSendToAll);
    results.emplace_back(out.begin(), out.begin() + long(v.out_bytes));
  }
  // The results of slots 0 and 1 are lost; slot 2's comes, naming slot 1's
  // as the one before it (docs/wire-format.md, "The previous result").
  const Nanos at = std::chrono::microseconds(10);
  EXPECT_TRUE(HeaderOf(results[2]).names_previous);
  e.OnPacket(results[2], at, sink);
  // A probe for the result named lost. Slot 0 leaves the window but is not
  // asked about yet: a gap mostly waits on another rank's resend, which the
  // switch's NACK brings; its timer asks if its result has not come by the
  // answer time. The next round waits for slot 0 (packets go in chunk order).
  ASSERT_EQ(sink.sent.size(), 5u);
  EXPECT_EQ(HeaderOf(sink.sent[4]).type, MessageType::kProbe);
  EXPECT_EQ(HeaderOf(sink.sent[4]).slot, 1);
  EXPECT_EQ(e.counters().probes_sent, 1u);
  EXPECT_EQ(e.counters().results_named_lost, 1u);
  EXPECT_GT(e.NextDeadline(), at);
  // Slot 3's result comes too: nothing more to probe.
  e.OnPacket(results[3], at, sink);
  EXPECT_EQ(e.counters().probes_sent, 1u);
  // The switch answers the probe with the result it still holds.
  const Verdict answer = sw->Process(sink.sent[4], out);
  ASSERT_EQ(answer.action, Action::kReplyToSender);
  e.OnPacket(std::span(out.data(), answer.out_bytes), at, sink);
  // Slot 1's result, resent, named slot 0's, which was lost too: asked for
  // at once. Slot 3's named slot 2's, which this rank has; and naming a slot
  // in the version it does not wait in (slot 2 waits in version 1 now) asks
  // for nothing either.
  EXPECT_EQ(e.counters().results_named_lost, 2u);
  ASSERT_EQ(e.counters().probes_sent, 2u);
  EXPECT_EQ(HeaderOf(sink.sent[5]).type, MessageType::kProbe);
  EXPECT_EQ(HeaderOf(sink.sent[5]).slot, 0);
  PacketHeader named = HeaderOf(results[3]);
  ASSERT_TRUE(named.names_previous);
  ASSERT_EQ(named.rank, 2);
  ASSERT_EQ(named.previous_version, 0);
  e.OnPacket(results[3], at, sink);
  EXPECT_EQ(e.counters().probes_sent, 2u);
  EXPECT_EQ(e.counters().results_named_lost, 2u);
  // The rest without loss.
  for (size_t d = 5; d < sink.sent.size(); ++d) {
    const Verdict v = sw->Process(sink.sent[d], out);
    if (v.action != Action::kDrop) e.OnPacket(std::span(out.data(), v.out_bytes), at, sink);
  }
  ASSERT_TRUE(called);
  for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(y[i], 7) << i;
  EXPECT_EQ(e.counters().retransmissions, 0u);
}

// A slot still waiting when a later packet's result comes (a gap) mostly
// waits on another rank's resend, which the switch's NACK brings: the ranks
// that contributed leave it out of the window at once, but ask about it only
// if its result has not come within the answer time.
TEST(WorkerEngine, AGapIsProbedOnlyIfItsResultDoesNotComeWithinTheAnswerTime) {
  TwoRankJob job(ProbingConfig(2, 0, 4), ProbingConfig(2, 1, 4), std::vector<int32_t>(4 * 32, 3));
  ASSERT_TRUE(job.Start());
  ASSERT_EQ(job.s1.sent.size(), 4u);
  // Rank 1's packet of slot 0 is lost; slots 1-3 complete.
  job.d1 = 1;
  const Nanos at = std::chrono::microseconds(5);
  job.Pump(at);
  EXPECT_EQ(job.e0.counters().results_accepted, 3u);
  EXPECT_EQ(job.e0.counters().probes_sent, 0u);
  EXPECT_EQ(job.e1.counters().probes_sent, 0u);
  ASSERT_EQ(job.s0.sent.size(), 4u);  // the next round waits for slot 0
  // No result by rank 0's timer: it asks, and hears that rank 1 is missing.
  const Nanos asked = job.e0.NextDeadline();
  ASSERT_GT(asked, at);
  job.e0.OnTimer(asked, job.s0);
  ASSERT_EQ(job.s0.sent.size(), 5u);
  EXPECT_EQ(HeaderOf(job.s0.sent[4]).type, MessageType::kProbe);
  EXPECT_EQ(HeaderOf(job.s0.sent[4]).slot, 0);
  job.Pump(asked);
  EXPECT_EQ(job.e0.counters().pending_received, 1u);
  EXPECT_EQ(job.e0.counters().retransmissions, 0u);
  // The switch NACKs rank 1 (its newer packets came): it resends, and the
  // slot completes.
  const Nanos nacked = job.sw->NextTimer();
  for (Verdict v; (v = job.sw->NextTimerPacket(nacked, job.out)).action != Action::kDrop;) {
    job.Deliver(v, nacked);
  }
  EXPECT_EQ(job.e1.counters().retransmissions, 1u);
  job.Pump(nacked);
  ASSERT_EQ(job.done, 2);
  EXPECT_EQ(job.y0, job.y1);
  for (size_t i = 0; i < job.x.size(); ++i) ASSERT_EQ(job.y0[i], 6) << i;
  EXPECT_EQ(job.e0.counters().retransmissions, 0u);
  EXPECT_EQ(job.e1.counters().probes_sent, 1u);  // the one behind its resend
}

// Slots that only the path's timer speaks for, overdue together, wait on one
// stall (here rank 1 sends nothing): the timer asks about the oldest alone,
// as TCP's timeout resends only the first segment it lacks, and starts the
// others' timers again; the next oldest is asked about a path timeout later.
// (Probing each drew one probe per slot and stall from every rank.)
TEST(WorkerEngine, SlotsOverdueTogetherAreAskedAboutOldestFirstOnePerTimeout) {
  TwoRankJob job(ProbingConfig(2, 0, 4), ProbingConfig(2, 1, 4), std::vector<int32_t>(8 * 32, 1));
  ASSERT_TRUE(job.Start());
  ASSERT_EQ(job.s0.sent.size(), 4u);  // slots 0-3 of the descriptor round; 8 chunks follow
  job.d1 = job.s1.sent.size();        // rank 1's packets never arrive
  job.Pump(Nanos(0));
  auto probed_slots = [&](size_t from) {
    std::vector<uint16_t> slots;
    for (size_t i = from; i < job.s0.sent.size(); ++i) {
      const PacketHeader h = HeaderOf(job.s0.sent[i]);
      EXPECT_EQ(h.type, MessageType::kProbe);
      slots.push_back(h.slot);
    }
    return slots;
  };
  const Nanos first = job.e0.NextDeadline();
  job.e0.OnTimer(first, job.s0);
  EXPECT_EQ(probed_slots(4), std::vector<uint16_t>{0});
  job.Pump(first);  // the answer: rank 1 is missing
  EXPECT_EQ(job.e0.counters().pending_received, 1u);
  // Slots 1-3 were not asked about: each is asked about first in a later
  // scan of its own, oldest first.
  std::vector<uint16_t> order = {0};
  std::vector<Nanos> when = {first};
  for (int scans = 0; scans < 50 && order.size() < 4; ++scans) {
    const Nanos at = job.e0.NextDeadline();
    const size_t from = job.s0.sent.size();
    job.e0.OnTimer(at, job.s0);
    for (uint16_t slot : probed_slots(from)) {
      if (std::find(order.begin(), order.end(), slot) != order.end()) continue;
      order.push_back(slot);
      when.push_back(at);
    }
    job.Pump(at);
  }
  EXPECT_EQ(order, (std::vector<uint16_t>{0, 1, 2, 3}));
  ASSERT_EQ(when.size(), 4u);
  for (size_t i = 1; i < when.size(); ++i) EXPECT_GT(when[i], when[i - 1]) << "slot " << order[i];
  EXPECT_EQ(job.e0.counters().retransmissions, 0u);
}

// A probe follows the packets sent before it on the link: a resend goes
// with a probe right behind it, and a pending reply to that probe that still
// lacks this rank says the resend was lost too; the packet goes again at
// once (not when the slot's timer fires, nor after the answer time). The
// slot records that order, not the times: the two go in the same nanosecond.
TEST(WorkerEngine, AResendGoesWithAProbeWhosePendingReplyResendsAgain) {
  TwoRankJob job(ProbingConfig(2, 0, 4), ProbingConfig(2, 1, 4), std::vector<int32_t>(4 * 32, 5));
  ASSERT_TRUE(job.Start());
  ASSERT_EQ(job.s0.sent.size(), 4u);
  // Rank 0's packet of slot 0 is lost; slots 1-3 complete, and their
  // results wait on the way to rank 0.
  Nanos now = std::chrono::microseconds(5);
  job.sw->AdvanceClock(now);
  std::vector<std::vector<uint8_t>> to0;
  for (size_t i = 0; i < 4; ++i) {
    job.sw->Process(job.s1.sent[i], job.out);
    if (i == 0) continue;
    const Verdict v = job.sw->Process(job.s0.sent[i], job.out);
    ASSERT_EQ(v.action, Action::kSendToAll);
    job.e1.OnPacket(std::span(job.out.data(), v.out_bytes), now, job.s1);
    to0.emplace_back(job.out.begin(), job.out.begin() + long(v.out_bytes));
  }
  // The switch NACKs rank 0 (its newer packets came): it resends at once,
  // a probe of the slot right behind, and the resend is lost.
  now = job.sw->NextTimer();
  ASSERT_LT(now, milliseconds(1));
  const Verdict nack = job.sw->NextTimerPacket(now, job.out);
  ASSERT_EQ(nack.action, Action::kNackToMissing);
  job.e0.OnPacket(std::span(job.out.data(), nack.out_bytes), now, job.s0);
  ASSERT_EQ(job.s0.sent.size(), 6u);
  EXPECT_TRUE(IsResendOf(job.s0.sent[4], job.s0.sent[0]));
  EXPECT_EQ(HeaderOf(job.s0.sent[5]).type, MessageType::kProbe);
  EXPECT_EQ(HeaderOf(job.s0.sent[5]).slot, 0);
  // The later slots' results come; nothing more is sent for slot 0 yet.
  for (const auto& r : to0) job.e0.OnPacket(r, now, job.s0);
  ASSERT_EQ(job.s0.sent.size(), 6u);
  // The probe's answer lacks rank 0: it resends again (with a probe).
  const Verdict pending = job.sw->Process(job.s0.sent[5], job.out);
  ASSERT_EQ(pending.action, Action::kPendingToSender);
  now += Nanos(1);
  job.e0.OnPacket(std::span(job.out.data(), pending.out_bytes), now, job.s0);
  ASSERT_EQ(job.s0.sent.size(), 8u);
  EXPECT_TRUE(IsResendOf(job.s0.sent[6], job.s0.sent[0]));
  EXPECT_EQ(HeaderOf(job.s0.sent[7]).type, MessageType::kProbe);
  EXPECT_EQ(job.e0.counters().retransmissions, 2u);
  // The rest without loss.
  job.d0 = 6;
  job.d1 = 4;
  job.Pump(now);
  ASSERT_EQ(job.done, 2);
  EXPECT_EQ(job.y0, job.y1);
  for (size_t i = 0; i < job.x.size(); ++i) ASSERT_EQ(job.y0[i], 10) << i;
  EXPECT_EQ(job.e1.counters().retransmissions, 0u);
}

// With a switch that takes exponent-only packets the descriptor round sends
// slot 0's descriptor as values and only a header for every other slot (its
// next_exponent agrees the first exponents); those take no room in the
// window. The results are the same.
TEST(WorkerEngine, TheDescriptorRoundSendsHeadersOnlyWhereTheSwitchTakesThem) {
  for (const bool exponent_only : {false, true}) {
    SCOPED_TRACE(exponent_only ? "exponent-only" : "whole packets");
    auto sw = SwitchWithJob(2, 4);
    WorkerEngineConfig c0 = Config(2, 0, 4), c1 = Config(2, 1, 4);
    c0.switch_accepts_exponent_only = c1.switch_accepts_exponent_only = exponent_only;
    c0.window = c1.window = 1;  // one whole packet in flight
    WorkerEngine e0(c0), e1(c1);
    RecordingSink s0, s1;
    std::vector<float> x(4 * 32 * 3), y0(x.size()), y1(x.size());
    for (size_t i = 0; i < x.size(); ++i) x[i] = float(i) * 0.25f - 7.0f;
    int done = 0;
    auto finish = [&](OpId, const Status& s) { done += s.ok(); };
    ASSERT_TRUE(e0.Submit(x.data(), y0.data(), x.size(), DType::kFloat32, finish).ok());
    ASSERT_TRUE(e1.Submit(x.data(), y1.data(), x.size(), DType::kFloat32, finish).ok());
    e0.OnTimer(Nanos(0), s0);
    e1.OnTimer(Nanos(0), s1);
    // Slot 0's descriptor fills the window; the headers do not count.
    ASSERT_EQ(s0.sent.size(), exponent_only ? 4u : 1u);
    EXPECT_EQ(HeaderOf(s0.sent[0]).element_count, 32);
    for (size_t i = 1; i < s0.sent.size(); ++i) {
      const PacketHeader h = HeaderOf(s0.sent[i]);
      EXPECT_EQ(h.type, MessageType::kContribution);
      EXPECT_EQ(h.element_count, 0);
      EXPECT_EQ(s0.sent[i].size(), kHeaderBytes);
      EXPECT_EQ(h.slot, i);
    }
    std::vector<uint8_t> out(PacketBytes(32));
    size_t d0 = 0, d1 = 0, header_results = 0;
    for (int guard = 0; done < 2 && guard < 1000; ++guard) {
      for (auto [d, sent] : {std::pair{&d0, &s0.sent}, std::pair{&d1, &s1.sent}}) {
        if (*d >= sent->size()) continue;
        const Verdict v = sw->Process((*sent)[(*d)++], out);
        if (v.action != Action::kSendToAll) continue;
        const std::span<const uint8_t> p(out.data(), v.out_bytes);
        header_results += v.out_bytes == kHeaderBytes;
        e0.OnPacket(p, Nanos(1), s0);
        e1.OnPacket(p, Nanos(1), s1);
      }
    }
    ASSERT_EQ(done, 2);
    EXPECT_EQ(header_results, exponent_only ? 3u : 0u);  // slots 1-3 of the descriptor round
    EXPECT_EQ(y0, y1);
    for (size_t i = 0; i < x.size(); ++i) ASSERT_NEAR(y0[i], 2 * x[i], 1e-4f) << i;
    EXPECT_EQ(sw->counters().TotalDrops(), 0u);
  }
}

// Links keep order, and the switch answers a probe when it comes: once a
// result comes for a packet sent after a probe that got no answer, the
// probe or its answer was lost, and the engine asks again at once.
TEST(WorkerEngine, AResultForAPacketSentAfterAnUnansweredProbeAsksAgain) {
  auto sw = SwitchWithJob(1, 4);
  WorkerEngineConfig c = ProbingConfig(1, 0, 4);
  c.window = 2;
  WorkerEngine e(c);
  RecordingSink sink;
  std::vector<int32_t> x(4 * 32 * 2, 3), y(x.size());
  bool called = false;
  ASSERT_TRUE(e.Submit(x.data(), y.data(), x.size(), DType::kInt32, [&](OpId, const Status& s) {
                 called = s.ok();
               }).ok());
  e.OnTimer(Nanos(0), sink);
  ASSERT_EQ(sink.sent.size(), 2u);  // slots 0 and 1 of the descriptor round
  std::vector<uint8_t> out(PacketBytes(32));
  auto result_of = [&](size_t i) {
    const Verdict v = sw->Process(sink.sent[i], out);
    EXPECT_EQ(v.action, Action::kSendToAll);
    return std::vector<uint8_t>(out.begin(), out.begin() + long(v.out_bytes));
  };
  const std::vector<uint8_t> lost = result_of(0);  // slot 0's result is lost
  e.OnPacket(result_of(1), Nanos(10), sink);       // slot 1's: a probe for slot 0
  // The probe, then slots 2 and 3: slot 0 waits on a recovery, which takes
  // no room in the window.
  ASSERT_EQ(sink.sent.size(), 5u);
  EXPECT_EQ(HeaderOf(sink.sent[2]).type, MessageType::kProbe);
  EXPECT_EQ(HeaderOf(sink.sent[2]).slot, 0);
  EXPECT_EQ(HeaderOf(sink.sent[3]).slot, 2);
  EXPECT_EQ(HeaderOf(sink.sent[4]).slot, 3);
  // The probe is lost; slot 2's packet, sent after it, gets its result: ask
  // again.
  e.OnPacket(result_of(3), Nanos(20), sink);
  ASSERT_GE(sink.sent.size(), 6u);
  EXPECT_EQ(HeaderOf(sink.sent[5]).type, MessageType::kProbe);
  EXPECT_EQ(HeaderOf(sink.sent[5]).slot, 0);
  EXPECT_EQ(e.counters().probes_sent, 2u);
  // The answer is the result; the rest goes without loss.
  for (size_t d = 4; d < sink.sent.size() && !called; ++d) {
    const Verdict v = sw->Process(sink.sent[d], out);
    if (v.action != Action::kDrop) e.OnPacket(std::span(out.data(), v.out_bytes), Nanos(30), sink);
  }
  ASSERT_TRUE(called);
  for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(y[i], 3) << i;
  EXPECT_EQ(e.counters().retransmissions, 0u);
}

// Slot 0's probes are lost, rank 1 never sends: the times of rank 0's first
// three probes of slot 0, where the switch answers its probes of slot 1 (with
// pending replies) or answers nothing at all.
std::vector<Nanos> ProbeTimesOfSlot0(bool switch_answers_slot1) {
  auto sw = SwitchWithJob(2, 2);
  WorkerEngine e(ProbingConfig(2, 0, 2));
  RecordingSink sink;
  std::vector<int32_t> x(2 * 32), y(x.size());
  EXPECT_TRUE(e.Submit(x.data(), y.data(), x.size(), DType::kInt32, {}).ok());
  std::vector<uint8_t> out(PacketBytes(32));
  std::vector<Nanos> probes;
  size_t delivered = 0;
  for (Nanos now(0); probes.size() < 3 && now < milliseconds(50); now = e.NextDeadline()) {
    e.OnTimer(now, sink);
    for (; delivered < sink.sent.size(); ++delivered) {
      const PacketHeader h = HeaderOf(sink.sent[delivered]);
      if (h.type == MessageType::kProbe && h.slot == 0) probes.push_back(now);
      if (h.type == MessageType::kProbe && (h.slot == 0 || !switch_answers_slot1)) continue;
      const Verdict v = sw->Process(sink.sent[delivered], out);
      if (v.action == Action::kPendingToSender) {
        e.OnPacket(std::span(out.data(), v.out_bytes), now, sink);
      }
    }
  }
  EXPECT_EQ(e.counters().retransmissions, 0u);
  return probes;
}

// A probe that goes unanswered while the switch answers a probe this rank
// sent after it (slot 1's) was lost, or its answer was: links keep order. It
// is asked about again at once, and again with each such answer, never
// backing off: a random loss. Only while the switch answers nothing does the
// wait double. (At an operation's end no later result shows such a probe
// lost, and each doubling would hold up the whole job.)
TEST(WorkerEngine, AProbeLostWhileTheSwitchAnswersIsAskedAgainWithoutBackingOff) {
  const std::vector<Nanos> answering = ProbeTimesOfSlot0(true);
  const std::vector<Nanos> silent = ProbeTimesOfSlot0(false);
  ASSERT_EQ(answering.size(), 3u);
  ASSERT_EQ(silent.size(), 3u);
  // Slot 0 is asked about again a path timeout later either way, and slot 1
  // (overdue with it, so left for one timeout: the oldest goes first) with it.
  EXPECT_EQ(answering[1] - answering[0], silent[1] - silent[0]);
  EXPECT_EQ(answering[2], answering[1]);  // slot 1's pending reply came at once
  EXPECT_EQ(silent[2] - silent[1], 2 * (silent[1] - silent[0]));
}

// Pacing at the link rate: a packet leaves once the link is free of all but
// kPacingBurst of the packets before it, a timer sends the next ones as the
// link frees, the pool (not a measured window) bounds the packets in flight,
// and the result is exact.
TEST(WorkerEngine, PacingSpacesPacketsAtTheLinkRate) {
  WorkerEngineConfig c = Config(1, 0, 8);
  c.pacing_bits_per_second = 1'000'000'000;
  WorkerEngine e(c);
  auto sw = SwitchWithJob(1, 8);
  struct TimedSink : RecordingSink {
    void Send(std::span<const uint8_t> p) override {
      RecordingSink::Send(p);
      at.push_back(now);
    }
    Nanos now{0};
    std::vector<Nanos> at;
  } sink;
  // 8 chunks: the descriptor round and one data round of 8 slots.
  std::vector<int32_t> x(8 * 32), y(x.size());
  for (size_t i = 0; i < x.size(); ++i) x[i] = int32_t(i * 7919) - 1000;
  bool called = false;
  ASSERT_TRUE(e.Submit(x.data(), y.data(), x.size(), DType::kInt32, [&](OpId, const Status& s) {
                 called = s.ok();
               }).ok());
  e.OnTimer(Nanos(0), sink);
  ASSERT_EQ(sink.sent.size(), kPacingBurst + 1);
  // PacketBytes(32) plus 66 bytes of framing, at 1 Gbit/s.
  const Nanos packet_time(int64_t((PacketBytes(32) + 66) * 8));
  EXPECT_EQ(e.NextDeadline(), packet_time);
  std::vector<uint8_t> out(PacketBytes(32));
  size_t delivered = 0;
  for (int steps = 0; !called && steps < 1000; ++steps) {
    sink.now = e.NextDeadline();
    e.OnTimer(sink.now, sink);
    for (; delivered < sink.sent.size(); ++delivered) {  // a network without delay
      const Verdict v = sw->Process(sink.sent[delivered], out);
      if (v.action == Action::kSendToAll) {
        e.OnPacket(std::span(out.data(), v.out_bytes), sink.now, sink);
      }
    }
  }
  ASSERT_TRUE(called);
  EXPECT_EQ(y, x);
  ASSERT_EQ(sink.sent.size(), 16u);  // nothing resent or probed
  for (size_t i = kPacingBurst + 1; i < sink.at.size(); ++i) {
    EXPECT_GE(sink.at[i], int64_t(i - kPacingBurst) * packet_time) << "packet " << i;
  }
  EXPECT_EQ(e.counters().window, 8);  // the pool
  EXPECT_EQ(e.counters().retransmissions + e.counters().probes_sent, 0u);
}

// One rank on a switch that takes exponent-only packets, 5 us away each way,
// runs operations of 4 * kSlots int32 chunks of 32; `lose` says which of the
// rank's packets (to_switch) or the switch's answers the links lose.
class OneRankOverLinks {
 public:
  static constexpr uint16_t kSlots = 8;
  static constexpr uint32_t kChunks = 4 * kSlots;  // of an operation's data, 32 elements each
  using Lose = std::function<bool(int op, bool to_switch, const PacketHeader&)>;

  OneRankOverLinks() : sw_(SwitchWithJob(1, kSlots)), e_(Config()) {}

  // Runs operation `op` to its end; returns where its packets start in sent().
  size_t Run(int op, const Lose& lose) {
    const size_t op_start = sink_.sent.size();
    bool done = false;
    EXPECT_TRUE(
        e_.Submit(x_.data(), y_.data(), x_.size(), DType::kInt32, [&](OpId, const Status& st) {
            EXPECT_TRUE(st.ok());
            done = true;
          }).ok());
    while (!done && now_ < milliseconds(100)) {
      e_.OnTimer(now_, sink_);
      for (; queued_ < sink_.sent.size(); ++queued_) {
        if (!lose(op, true, HeaderOf(sink_.sent[queued_]))) {
          links_.push_back({now_ + kOneWay, true, sink_.sent[queued_]});
        }
      }
      // Everything due arrives, the earliest first, before time moves on.
      auto next = Earliest();
      if (next != links_.end() && next->at <= now_) {
        const InFlight arriving = std::move(*next);
        links_.erase(next);
        if (!arriving.to_switch) {
          if (!lose(op, false, HeaderOf(arriving.bytes))) e_.OnPacket(arriving.bytes, now_, sink_);
          continue;
        }
        sw_->AdvanceClock(arriving.at);
        const Verdict v = sw_->Process(arriving.bytes, out_);
        for (int c = 0; v.action != Action::kDrop && c < v.copies; ++c) {
          links_.push_back(
              {arriving.at + kOneWay, false, {out_.begin(), out_.begin() + long(v.out_bytes)}});
        }
        continue;
      }
      next = Earliest();
      now_ = std::min(e_.NextDeadline(), next == links_.end() ? Nanos::max() : next->at);
    }
    EXPECT_TRUE(done) << "operation " << op;
    EXPECT_EQ(y_, x_);  // one rank: the sum is its input
    return op_start;
  }
  const std::vector<std::vector<uint8_t>>& sent() const { return sink_.sent; }
  const WorkerEngine& engine() const { return e_; }
  // A packet of the rank's first operation that carries data (past the
  // descriptor round's headers).
  static bool FirstOpData(int op, const PacketHeader& h) {
    return op == 0 && h.element_count != 0 && h.chunk >= kSlots;
  }
  // The chunk id of operation `op`'s last packet: each operation takes its
  // descriptor round (kSlots chunk ids) and kChunks.
  static uint32_t LastChunk(int op) { return uint32_t(op + 1) * (kSlots + kChunks) - 1; }

 private:
  static constexpr Nanos kOneWay = std::chrono::microseconds(5);
  struct InFlight {
    Nanos at;
    bool to_switch;  // else the switch's answer, to the rank
    std::vector<uint8_t> bytes;
  };
  static WorkerEngineConfig Config() {
    WorkerEngineConfig config = ProbingConfig(1, 0, kSlots);
    config.switch_accepts_exponent_only = true;
    return config;
  }
  std::vector<InFlight>::iterator Earliest() {
    return std::min_element(links_.begin(), links_.end(),
                            [](const InFlight& a, const InFlight& b) { return a.at < b.at; });
  }
  std::unique_ptr<DataPlane> sw_;
  WorkerEngine e_;
  RecordingSink sink_;
  std::vector<int32_t> x_ = std::vector<int32_t>(kChunks * 32, 1);
  std::vector<int32_t> y_ = std::vector<int32_t>(x_.size());
  std::vector<uint8_t> out_ = std::vector<uint8_t>(PacketBytes(32));
  std::vector<InFlight> links_;
  size_t queued_ = 0;
  Nanos now_{0};
};

// The first data packet of the first operation is lost. The second
// operation's descriptor says so, and the third sends its descriptor round
// twice: slot 0's descriptor and the other slots' headers, each copy right
// after its first, flagged a copy and not a resend, the same bytes else.
TEST(WorkerEngine, AfterALossTheDescriptorRoundGoesTwiceEachCopyFlagged) {
  OneRankOverLinks run;
  bool lost_one = false;
  const auto first_data = [&](int op, bool to_switch, const PacketHeader& h) {
    if (lost_one || !to_switch || !OneRankOverLinks::FirstOpData(op, h)) return false;
    return lost_one = true;
  };
  for (int op = 0; op < 2; ++op) {
    run.Run(op, first_data);
    EXPECT_EQ(run.engine().counters().redundant_headers, 0u);
  }
  EXPECT_TRUE(lost_one);
  // The third: round 0 of each of its slots twice, back to back, before
  // anything else.
  const size_t op_start = run.Run(2, first_data);
  const auto& sent = run.sent();
  size_t pairs = 0;
  for (size_t i = op_start; i + 1 < sent.size(); i += 2, ++pairs) {
    const PacketHeader first = HeaderOf(sent[i]), copy = HeaderOf(sent[i + 1]);
    if (!copy.copy) break;
    SCOPED_TRACE(pairs);
    EXPECT_FALSE(first.resend || copy.resend);
    EXPECT_EQ(first.slot, pairs);
    EXPECT_EQ(first.element_count, pairs == 0 ? 32 : 0);  // slot 0: the descriptor
    EXPECT_TRUE(SameBytesButFlag(sent[i + 1], sent[i], kFlagCopy));
  }
  EXPECT_GE(pairs, 2u);
  EXPECT_EQ(run.engine().counters().redundant_headers, pairs);
  // No other copy but the operation's last packet's (the next test).
  for (size_t i = op_start + 2 * pairs; i < sent.size(); ++i) {
    const PacketHeader h = HeaderOf(sent[i]);
    EXPECT_TRUE(!h.copy || h.chunk == OneRankOverLinks::LastChunk(2)) << i;
  }
}

// After a loss, each rank sends its operation's last packet twice, the copy
// right after it, flagged a copy and not a resend: nothing after it shows the
// switch that it was lost. Before a loss, once.
TEST(WorkerEngine, AfterALossTheOperationsLastPacketGoesTwice) {
  OneRankOverLinks run;
  bool lost_one = false;
  const auto first_data = [&](int op, bool to_switch, const PacketHeader& h) {
    if (lost_one || !to_switch || !OneRankOverLinks::FirstOpData(op, h)) return false;
    return lost_one = true;
  };
  const auto copies_in = [&](size_t from) {
    std::vector<size_t> at;
    for (size_t i = from; i < run.sent().size(); ++i) {
      const PacketHeader h = HeaderOf(run.sent()[i]);
      if (h.copy && h.element_count != 0 && h.slot != 0) at.push_back(i);
    }
    return at;
  };
  for (int op = 0; op < 2; ++op) {
    EXPECT_TRUE(copies_in(run.Run(op, first_data)).empty()) << "operation " << op;
  }
  EXPECT_EQ(run.engine().counters().last_packet_copies, 0u);
  const std::vector<size_t> copies = copies_in(run.Run(2, first_data));
  ASSERT_EQ(copies.size(), 1u);
  const auto& sent = run.sent();
  const PacketHeader copy = HeaderOf(sent[copies[0]]);
  EXPECT_EQ(copy.chunk, OneRankOverLinks::LastChunk(2));
  EXPECT_FALSE(copy.resend);
  EXPECT_TRUE(SameBytesButFlag(sent[copies[0]], sent[copies[0] - 1], kFlagCopy));
  EXPECT_EQ(run.engine().counters().last_packet_copies, 1u);
}

// The copy stands in for a lost first: the operation ends without a probe
// or a resend of it.
TEST(WorkerEngine, TheLastPacketsCopyStandsInForItsLostFirst) {
  OneRankOverLinks run;
  bool lost_data = false, lost_last = false;
  const auto lose = [&](int op, bool to_switch, const PacketHeader& h) {
    if (!to_switch) return false;
    if (!lost_data && OneRankOverLinks::FirstOpData(op, h)) return lost_data = true;
    if (op == 2 && !lost_last && h.chunk == OneRankOverLinks::LastChunk(2)) {
      EXPECT_FALSE(h.copy);
      return lost_last = true;
    }
    return false;
  };
  run.Run(0, lose);
  run.Run(1, lose);
  const WorkerEngineCounters before = run.engine().counters();
  const size_t op_start = run.Run(2, lose);
  EXPECT_TRUE(lost_last);
  EXPECT_EQ(run.engine().counters().retransmissions, before.retransmissions);
  for (size_t i = op_start; i < run.sent().size(); ++i) {
    const PacketHeader h = HeaderOf(run.sent()[i]);
    EXPECT_FALSE(h.chunk == OneRankOverLinks::LastChunk(2) && h.type == MessageType::kProbe) << i;
  }
}

// After a loss, a result named lost holds up this rank's next round of its
// slot, and the one probe that asks for it is lost (or its answer is) as
// often as any packet: it goes twice, back to back, the same bytes; the
// second answer is a duplicate. Before a loss, once.
TEST(WorkerEngine, AfterALossAResultNamedLostIsAskedForTwice) {
  OneRankOverLinks run;
  bool lost_data = false;
  int lost_results = 0;
  const auto lose = [&](int op, bool to_switch, const PacketHeader& h) {
    if (to_switch) {  // the first data packet of the first operation
      if (lost_data || !OneRankOverLinks::FirstOpData(op, h)) return false;
      return lost_data = true;
    }
    // Slot 1's first result in the second and third operations: slot 2's
    // names it.
    if (op == 0 || h.type != MessageType::kResult || h.slot != 1 || lost_results > op - 1) {
      return false;
    }
    ++lost_results;
    return true;
  };
  run.Run(0, lose);
  uint64_t probes = run.engine().counters().probes_sent;
  const auto probes_of_slot_1 = [&](size_t from) {
    std::vector<size_t> at;
    for (size_t i = from; i < run.sent().size(); ++i) {
      const PacketHeader h = HeaderOf(run.sent()[i]);
      if (h.type == MessageType::kProbe && h.slot == 1) at.push_back(i);
    }
    return at;
  };
  // The second operation: no copies yet, one probe.
  size_t op_start = run.Run(1, lose);
  EXPECT_EQ(run.engine().counters().redundant_headers, 0u);
  EXPECT_EQ(run.engine().counters().results_named_lost, 1u);
  EXPECT_EQ(probes_of_slot_1(op_start).size(), 1u);
  EXPECT_EQ(run.engine().counters().probes_sent, probes + 1);
  probes = run.engine().counters().probes_sent;
  // The third: two, back to back. (The second answer, a duplicate, names
  // slot 0's result of two rounds back, and slot 0 waits in that version
  // again: a stale name, which costs a probe of slot 0, as any wrong name.)
  op_start = run.Run(2, lose);
  EXPECT_GT(run.engine().counters().redundant_headers, 0u);
  EXPECT_GE(run.engine().counters().results_named_lost, 2u);
  const std::vector<size_t> asked = probes_of_slot_1(op_start);
  ASSERT_EQ(asked.size(), 2u);
  EXPECT_EQ(asked[1], asked[0] + 1);
  EXPECT_EQ(run.sent()[asked[1]], run.sent()[asked[0]]);
  EXPECT_GE(run.engine().counters().probes_sent, probes + 2);
  EXPECT_EQ(lost_results, 2);
}

}  // namespace
}  // namespace switchml
