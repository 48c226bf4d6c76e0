// Packet-level scenarios against BMv2 simple_switch running
// p4/v1model/switchml.p4, programmed by the switchml driver. Each scenario
// is its own test; all of them share one switch (each installs its own job).
// Skipped, with the reason, where the toolchain or root is missing.
#include <arpa/inet.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>
#include <random>

#include "dataplane/data_plane.h"
#include "p4/bmv2_harness.h"
#include "p4/random_trace.h"

namespace switchml::p4test {
namespace {

using namespace std::chrono_literals;

constexpr auto kArrival = 5s;     // generous: BMv2 is slow, not a speed check
constexpr auto kSilence = 300ms;  // how long "nothing arrives" is watched

std::vector<uint32_t> Values(uint32_t seed) {
  std::vector<uint32_t> v(kK);
  for (uint16_t j = 0; j < kK; ++j) v[j] = seed * 1000003u + j * 7919u;
  return v;
}

std::vector<uint32_t> Sum(std::initializer_list<std::vector<uint32_t>> parts) {
  std::vector<uint32_t> s(kK, 0);
  for (const auto& p : parts) {
    for (uint16_t j = 0; j < kK; ++j) s[j] += p[j];
  }
  return s;
}

bool SameEndpoint(const Endpoint& a, const Endpoint& b) {
  return a.mac == b.mac && a.ip.s_addr == b.ip.s_addr && a.port == b.port;
}

class Bmv2Scenario : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    unavailable_ = new std::string(Bmv2Harness::Unavailable());
    if (unavailable_->empty()) harness_ = Bmv2Harness::Start(&error_).release();
  }
  static void TearDownTestSuite() {
    delete harness_;
    harness_ = nullptr;
    delete unavailable_;
  }
  void SetUp() override {
    if (!unavailable_->empty()) GTEST_SKIP() << *unavailable_;
    ASSERT_NE(harness_, nullptr) << error_;
    harness_->Drain();
  }
  void TearDown() override {
    if (harness_ == nullptr) return;
    for (JobId id : jobs_) harness_->plane().Remove(id);
  }

  Bmv2Harness& h() { return *harness_; }

  // A job of `world` ranks; rank r's thread t sends from host r's port
  // 5000 + r + kThreadPorts * t.
  JobId Install(uint16_t world, uint16_t slots = 4, uint32_t pool_base = 0, uint16_t threads = 1) {
    const JobId id(next_job_++);
    std::vector<std::vector<sockaddr_in>> addresses(world);
    for (int r = 0; r < world; ++r) {
      for (uint16_t t = 0; t < threads; ++t) addresses[r].push_back(Socket(r, kThreadPorts * t));
    }
    const Status s = h().plane().Install(
        JobInstall{JobAssignment{id, world, kK, slots, pool_base}, threads, addresses, {}, {}});
    EXPECT_TRUE(s.ok()) << s.ToString();
    jobs_.push_back(id);
    return id;
  }
  static constexpr uint16_t kThreadPorts = 100;
  static sockaddr_in Socket(int rank, uint16_t port_offset = 0) {
    const Endpoint e = Bmv2Harness::Host(rank, port_offset);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr = e.ip;
    a.sin_port = htons(e.port);
    return a;
  }

  static PacketHeader Contribution(JobId job, uint16_t rank, uint32_t chunk, uint16_t slot,
                                   uint8_t version, int16_t exponent = 0, int16_t next = 0) {
    PacketHeader p;
    p.type = MessageType::kContribution;
    p.job = job.value();
    p.chunk = chunk;
    p.rank = rank;
    p.slot = slot;
    p.element_count = kK;
    p.version = version;
    p.exponent = exponent;
    p.next_exponent = next;
    return p;
  }
  void Send(const PacketHeader& p, const std::vector<uint32_t>& values,
            uint16_t switch_port = kSwitchPort) {
    h().SendUdp(p.rank % kHosts, Bmv2Harness::Host(p.rank % kHosts),
                Bmv2Harness::SwitchEndpoint(switch_port), SwitchmlPayload(p, values));
  }

  // Send(), then waits until the switch has counted the packet: inside BMv2
  // a packet may overtake one that came in on another port before it.
  void SendInOrder(const PacketHeader& p, const std::vector<uint32_t>& values,
                   uint16_t switch_port = kSwitchPort) {
    const uint64_t packets = Counters().packets;
    Send(p, values, switch_port);
    WaitForPackets(packets + 1);
  }

  Frame Expect(int host) {
    auto f = h().Receive(host, kArrival);
    EXPECT_TRUE(f.has_value()) << "nothing arrived at host " << host;
    return f.value_or(Frame{});
  }
  void ExpectSilence(int host) {
    auto f = h().Receive(host, kSilence);
    EXPECT_FALSE(f.has_value()) << "host " << host << " got an unexpected frame";
  }

  // A switchml frame of `type` for (job, chunk, slot, version) with payload
  // `words`, addressed to `to`, its rank field `rank_field`.
  static void CheckFrame(const Frame& f, const Endpoint& to, MessageType type, uint16_t rank_field,
                         JobId job, uint32_t chunk, uint16_t slot, uint8_t version,
                         const std::vector<uint32_t>& words) {
    ASSERT_TRUE(f.is_switchml);
    EXPECT_TRUE(SameEndpoint(f.dst, to));
    EXPECT_EQ(f.header.type, type);
    EXPECT_EQ(f.header.rank, rank_field);
    EXPECT_EQ(f.header.job, job.value());
    EXPECT_EQ(f.header.chunk, chunk);
    EXPECT_EQ(f.header.slot, slot);
    EXPECT_EQ(f.header.version, version);
    EXPECT_EQ(f.words, words);
  }
  // A result frame for (job, chunk, slot, version) holding `sums`, addressed
  // to rank `to`'s socket, its rank field `rank_field`.
  static void CheckResult(const Frame& f, int to, uint16_t rank_field, JobId job, uint32_t chunk,
                          uint16_t slot, uint8_t version, const std::vector<uint32_t>& sums) {
    CheckFrame(f, Bmv2Harness::Host(to), MessageType::kResult, rank_field, job, chunk, slot,
               version, sums);
  }
  // The result of (job, chunk, slot, version) with `sums` arrives at every
  // rank in `ranks`, addressed to its socket, from the switch's endpoint.
  void ExpectResultAtAll(const std::vector<int>& ranks, JobId job, uint32_t chunk, uint16_t slot,
                         uint8_t version, const std::vector<uint32_t>& sums, int16_t exponent = 0,
                         int16_t max_next = 0, uint16_t switch_port = kSwitchPort) {
    for (int r : ranks) {
      SCOPED_TRACE("rank " + std::to_string(r));
      const Frame f = Expect(r);
      CheckResult(f, r, kAllRanks, job, chunk, slot, version, sums);
      if (HasFatalFailure()) return;
      const Endpoint from = Bmv2Harness::SwitchEndpoint(switch_port);
      EXPECT_EQ(f.src.ip.s_addr, from.ip.s_addr);
      EXPECT_EQ(f.src.port, switch_port);
      EXPECT_EQ(f.src.mac, from.mac);
      EXPECT_EQ(f.header.exponent, exponent);
      EXPECT_EQ(f.header.next_exponent, max_next);
    }
  }
  // Ranks 0 and 1 of a two-rank job contribute Values(seed0) and
  // Values(seed1); the sum reaches both.
  void ReduceTwo(JobId job, uint32_t chunk, uint16_t slot, uint8_t version, uint32_t seed0,
                 uint32_t seed1) {
    Send(Contribution(job, 0, chunk, slot, version), Values(seed0));
    Send(Contribution(job, 1, chunk, slot, version), Values(seed1));
    ExpectResultAtAll({0, 1}, job, chunk, slot, version, Sum({Values(seed0), Values(seed1)}));
  }
  // A NACK of (job, chunk, slot, version) naming `lost` in its first bitmap
  // (and no rank in its second) arrives at `rank`'s socket of thread `thread`,
  // from the switch's endpoint.
  void ExpectNack(int rank, JobId job, uint32_t chunk, uint16_t slot, uint8_t version,
                  uint32_t lost, uint16_t thread = 0) {
    SCOPED_TRACE("NACK to rank " + std::to_string(rank));
    const Frame f = Expect(rank);
    CheckFrame(f, Bmv2Harness::Host(rank, kThreadPorts * thread), MessageType::kNack, kAllRanks,
               job, chunk, slot, version, {lost, 0});
    EXPECT_TRUE(SameEndpoint(f.src, Bmv2Harness::SwitchEndpoint()));
    EXPECT_FALSE(f.header.resend);
    EXPECT_EQ(f.header.exponent, 0);
    EXPECT_EQ(f.header.next_exponent, 0);
  }
  // The stored result goes back to `rank` only.
  void ExpectResultToSender(int rank, JobId job, uint32_t chunk, uint16_t slot, uint8_t version,
                            const std::vector<uint32_t>& sums) {
    CheckResult(Expect(rank), rank, uint16_t(rank), job, chunk, slot, version, sums);
  }

  // Polls until the switch has seen `packets` aggregation packets in all.
  void WaitForPackets(uint64_t packets) {
    const auto deadline = std::chrono::steady_clock::now() + kArrival;
    while (Counters().packets < packets) {
      ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "the switch lost a packet";
    }
  }

  DataPlaneCounters Counters() {
    auto c = h().plane().Counters({});
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    return c.ok() ? c.value().total : DataPlaneCounters{};
  }

  static inline Bmv2Harness* harness_ = nullptr;
  static inline std::string* unavailable_ = nullptr;
  static inline std::string error_;
  static inline uint32_t next_job_ = 1000;
  std::vector<JobId> jobs_;
};

TEST_F(Bmv2Scenario, BasicReductionWithTwoWorkers) {
  const JobId job = Install(2);
  Send(Contribution(job, 0, 7, 1, 0, 3, -2), Values(1));
  Send(Contribution(job, 1, 7, 1, 0, 3, 5), Values(2));
  ExpectResultAtAll({0, 1}, job, 7, 1, 0, Sum({Values(1), Values(2)}), 3, 5);
}

TEST_F(Bmv2Scenario, BasicReductionWithThreeWorkers) {
  const JobId job = Install(3);
  Send(Contribution(job, 2, 0, 0, 0), Values(3));
  Send(Contribution(job, 0, 0, 0, 0), Values(1));
  ExpectSilence(0);
  Send(Contribution(job, 1, 0, 0, 0), Values(2));
  ExpectResultAtAll({0, 1, 2}, job, 0, 0, 0, Sum({Values(1), Values(2), Values(3)}));
}

TEST_F(Bmv2Scenario, RetransmissionsAfterCompletionAreAnsweredToTheSenderOnly) {
  const JobId job = Install(2);
  Send(Contribution(job, 0, 0, 2, 0), Values(1));
  Send(Contribution(job, 1, 0, 2, 0), Values(2));
  const auto sums = Sum({Values(1), Values(2)});
  ExpectResultAtAll({0, 1}, job, 0, 2, 0, sums);
  const uint64_t resent = Counters().results_resent;
  for (int i = 0; i < 3; ++i) {
    // The retransmission repeats the values; the switch must not add them.
    Send(Contribution(job, 0, 0, 2, 0), Values(1));
    ExpectResultToSender(0, job, 0, 2, 0, sums);
  }
  ExpectSilence(1);
  EXPECT_EQ(Counters().results_resent, resent + 3);
}

TEST_F(Bmv2Scenario, RetransmissionsBeforeCompletionAreNotCounted) {
  const JobId job = Install(2);
  Send(Contribution(job, 0, 0, 0, 0), Values(1));
  for (int i = 0; i < 2; ++i) {
    Send(Contribution(job, 0, 0, 0, 0), Values(1));
    // Answered with a pending packet: rank 0 has contributed, rank 1 not.
    const Frame f = Expect(0);
    ASSERT_TRUE(f.is_switchml);
    EXPECT_EQ(f.header.type, MessageType::kPending);
    EXPECT_EQ(f.header.rank, 0);
    EXPECT_EQ(f.words, std::vector<uint32_t>{0b01});
  }
  Send(Contribution(job, 1, 0, 0, 0), Values(2));
  ExpectResultAtAll({0, 1}, job, 0, 0, 0, Sum({Values(1), Values(2)}));
}

// A resend carries flag bit 2 (docs/wire-format.md): the program takes it as
// the contribution it repeats, and the result it completes does not carry
// the flag; a reserved flag bit is still malformed.
TEST_F(Bmv2Scenario, AFlaggedResendCountsLikeTheFirstTransmission) {
  const JobId job = Install(2);
  const auto before = Counters();
  PacketHeader reserved = Contribution(job, 0, 0, 1, 1);
  std::vector<uint8_t> bad = SwitchmlPayload(reserved, Values(1));
  bad[kFlagsOffset] |= 0x08;
  h().SendUdp(0, Bmv2Harness::Host(0), Bmv2Harness::SwitchEndpoint(), bad);
  Send(Contribution(job, 1, 0, 1, 1), Values(2));
  ExpectSilence(1);  // counted in: the flagged packet below completes the slot
  PacketHeader resend = Contribution(job, 0, 0, 1, 1);
  resend.resend = true;
  Send(resend, Values(1));
  const auto sums = Sum({Values(1), Values(2)});
  for (int r : {0, 1}) {
    const Frame f = Expect(r);
    CheckResult(f, r, kAllRanks, job, 0, 1, 1, sums);
    EXPECT_FALSE(f.header.resend);
  }
  const auto after = Counters();
  EXPECT_EQ(after.contributions - before.contributions, 2u);
  EXPECT_EQ(
      after.drops[size_t(DropReason::kMalformed)] - before.drops[size_t(DropReason::kMalformed)],
      1u);
}

// The version conflict (docs/design.md §2): a copy of rank 0's packet with the version bit flipped
// is dropped while the other version still aggregates, so rank 0 never counts twice.
TEST_F(Bmv2Scenario, FlippedVersionCopyIsDroppedAsAVersionConflict) {
  const JobId job = Install(2);
  const auto before = Counters();
  Send(Contribution(job, 0, 0, 0, 0), Values(1));
  Send(Contribution(job, 0, 4, 0, 1), Values(1));  // version 1, a later chunk
  ExpectSilence(0);
  Send(Contribution(job, 0, 0, 0, 0), Values(1));  // the retransmission: pending
  const Frame f = Expect(0);
  ASSERT_TRUE(f.is_switchml);
  EXPECT_EQ(f.header.type, MessageType::kPending);
  Send(Contribution(job, 1, 0, 0, 0), Values(2));
  ExpectResultAtAll({0, 1}, job, 0, 0, 0, Sum({Values(1), Values(2)}));
  const auto after = Counters();
  EXPECT_EQ(after.drops[size_t(DropReason::kVersionConflict)] -
                before.drops[size_t(DropReason::kVersionConflict)],
            1u);
}

TEST_F(Bmv2Scenario, ReductionInTheSecondVersion) {
  const JobId job = Install(2);
  Send(Contribution(job, 0, 4, 3, 1), Values(5));
  Send(Contribution(job, 1, 4, 3, 1), Values(6));
  ExpectResultAtAll({0, 1}, job, 4, 3, 1, Sum({Values(5), Values(6)}));
}

TEST_F(Bmv2Scenario, BothVersionsInTurn) {
  const JobId job = Install(2, 1);
  for (uint32_t chunk = 0; chunk < 4; ++chunk) {
    SCOPED_TRACE("chunk " + std::to_string(chunk));
    ReduceTwo(job, chunk, 0, uint8_t(chunk % 2), 10 + chunk, 20 + chunk);
  }
}

TEST_F(Bmv2Scenario, SlotReuseStartsEachAggregationAfresh) {
  // The same (slot, version) again and again: the first contribution of a
  // new chunk overwrites the accumulators instead of adding to them.
  const JobId job = Install(2, 2);
  for (uint32_t round = 0; round < 3; ++round) {
    // Slot 0 sees chunks 0, 2, 4 (window 2).
    ReduceTwo(job, round * 2, 0, uint8_t(round % 2), 30 + round, 40 + round);
  }
}

TEST_F(Bmv2Scenario, RetransmissionIntoThePreviousVersionAfterTheOtherWorkerMovedOn) {
  const JobId job = Install(2, 1);
  Send(Contribution(job, 0, 0, 0, 0), Values(1));
  Send(Contribution(job, 1, 0, 0, 0), Values(2));
  const auto first = Sum({Values(1), Values(2)});
  ExpectResultAtAll({0, 1}, job, 0, 0, 0, first);
  // Rank 1 moves on to chunk 1 in version 1; rank 0 lost the result of
  // chunk 0 and asks again in version 0: it still gets it, alone.
  Send(Contribution(job, 1, 1, 0, 1), Values(3));
  Send(Contribution(job, 0, 0, 0, 0), Values(1));
  ExpectResultToSender(0, job, 0, 0, 0, first);
  ExpectSilence(1);
  // Then rank 0 moves on too and version 1 completes.
  Send(Contribution(job, 0, 1, 0, 1), Values(4));
  ExpectResultAtAll({0, 1}, job, 1, 0, 1, Sum({Values(3), Values(4)}));
}

TEST_F(Bmv2Scenario, SlotReuseWithRetransmission) {
  const JobId job = Install(2, 1);
  // Chunks 0 (v0), 1 (v1), 2 (v0 again) through one slot.
  for (uint32_t chunk = 0; chunk < 3; ++chunk)
    ReduceTwo(job, chunk, 0, chunk % 2, chunk, chunk + 50);
  // A late retransmission of chunk 0 into version 0 (now holding chunk 2)
  // is stale: dropped, and chunk 2's result is untouched.
  const uint64_t stale = Counters().drops[size_t(DropReason::kStaleChunk)];
  Send(Contribution(job, 0, 0, 0, 0), Values(0));
  ExpectSilence(0);
  EXPECT_EQ(Counters().drops[size_t(DropReason::kStaleChunk)], stale + 1);
  Send(Contribution(job, 1, 2, 0, 0), Values(52));
  ExpectResultToSender(1, job, 2, 0, 0, Sum({Values(2), Values(52)}));
}

TEST_F(Bmv2Scenario, ReductionsInDifferentSlotsSteeredByDifferentUdpPorts) {
  const JobId job = Install(2);
  const uint16_t port_a = kSwitchPort, port_b = kSwitchPort + 5;
  Send(Contribution(job, 0, 0, 0, 0), Values(1), port_a);
  SendInOrder(Contribution(job, 0, 1, 1, 0), Values(2), port_b);
  Send(Contribution(job, 1, 1, 1, 0), Values(3), port_b);
  // Rank 1's chunk 1 came before its chunk 0: a NACK, from the base port
  // (the NACK's own endpoint; a worker checks the switch's address only).
  Frame nack = Expect(1);
  EXPECT_EQ(nack.header.type, MessageType::kNack);
  EXPECT_EQ(nack.src.port, port_b);
  ExpectResultAtAll({0, 1}, job, 1, 1, 0, Sum({Values(2), Values(3)}), 0, 0, port_b);
  Send(Contribution(job, 1, 0, 0, 0), Values(4), port_a);
  ExpectResultAtAll({0, 1}, job, 0, 0, 0, Sum({Values(1), Values(4)}), 0, 0, port_a);
  // Outside the port range the endpoint does not aggregate.
  const uint64_t packets = Counters().packets;
  Send(Contribution(job, 0, 2, 2, 0), Values(1), kSwitchPort + 16);
  ExpectSilence(0);
  EXPECT_EQ(Counters().packets, packets);
}

// Loss recovery (docs/wire-format.md): a rank's chunk c while the slot
// before (among its thread's slots) aggregates chunk c - 1 without it shows
// its packet for c - 1 lost; the rank is NACKed at once, the others not.
TEST_F(Bmv2Scenario, APacketOvertakenByItsRanksNextChunkIsNackedToThatRankOnly) {
  const JobId job = Install(3);
  const uint64_t nacks = Counters().nacks_sent;
  Send(Contribution(job, 0, 0, 0, 0), Values(1));
  SendInOrder(Contribution(job, 2, 0, 0, 0), Values(3));  // rank 1's chunk 0 is lost
  Send(Contribution(job, 0, 1, 1, 0), Values(4));         // rank 0 is in slot 0: no NACK
  ExpectSilence(0);
  Send(Contribution(job, 1, 1, 1, 0), Values(5));
  ExpectNack(1, job, 0, 0, 0, 0b010);
  for (int host : {0, 1, 2}) ExpectSilence(host);
  EXPECT_EQ(Counters().nacks_sent, nacks + 1);
  Send(Contribution(job, 2, 1, 1, 0), Values(6));
  ExpectResultAtAll({0, 1, 2}, job, 1, 1, 0, Sum({Values(4), Values(5), Values(6)}));
  // The NACKed rank resends; the others sent nothing more.
  PacketHeader resend = Contribution(job, 1, 0, 0, 0);
  resend.resend = true;
  Send(resend, Values(2));
  ExpectResultAtAll({0, 1, 2}, job, 0, 0, 0, Sum({Values(1), Values(2), Values(3)}));
  EXPECT_EQ(Counters().nacks_sent, nacks + 1);
}

// The overtaking packet completes its own slot: the NACK goes out with the
// result, ahead of it on the rank's port. For the first of a thread's slots
// the slot before is its last, in the other version where the slot's use
// wrapped round.
TEST_F(Bmv2Scenario, ANackGoesWithTheResultItsPacketCompletesAndAcrossTheWrap) {
  const JobId job = Install(2, 2);
  ReduceTwo(job, 0, 0, 0, 1, 2);
  Send(Contribution(job, 0, 1, 1, 0), Values(3));  // rank 1's chunk 1 is lost
  SendInOrder(Contribution(job, 0, 2, 0, 1), Values(4));
  Send(Contribution(job, 1, 2, 0, 1), Values(5));
  ExpectNack(1, job, 1, 1, 0, 0b10);
  ExpectResultAtAll({0, 1}, job, 2, 0, 1, Sum({Values(4), Values(5)}));
  // Now rank 0's chunk 3 (slot 1, version 1) is lost behind chunk 1.
  PacketHeader resend = Contribution(job, 1, 1, 1, 0);
  resend.resend = true;
  Send(resend, Values(6));
  ExpectResultAtAll({0, 1}, job, 1, 1, 0, Sum({Values(3), Values(6)}));
  SendInOrder(Contribution(job, 1, 3, 1, 1), Values(7));
  Send(Contribution(job, 0, 4, 0, 0), Values(8));  // wraps to slot 1, version 1
  ExpectNack(0, job, 3, 1, 1, 0b01);
  for (int host : {0, 1}) ExpectSilence(host);
}

// With two threads per rank, each owns half of the slots and sends its own
// chunks in order: the slot before a thread's first is its own last one,
// never the other thread's, and the NACK goes to the thread's socket.
TEST_F(Bmv2Scenario, TheSlotBeforeIsAmongTheSendingThreadsSlots) {
  const JobId job = Install(2, 4, 0, 2);  // thread 0: slots 0, 1; thread 1: 2, 3
  auto send = [&](uint16_t rank, uint16_t thread, uint32_t chunk, uint16_t slot,
                  uint8_t version = 0) {
    const uint64_t packets = Counters().packets;
    h().SendUdp(rank, Bmv2Harness::Host(rank, kThreadPorts * thread), Bmv2Harness::SwitchEndpoint(),
                SwitchmlPayload(Contribution(job, rank, chunk, slot, version), Values(chunk)));
    WaitForPackets(packets + 1);  // in order across ports (SendInOrder)
  };
  send(0, 0, 1, 1);  // thread 0's chunk 1 without rank 1's
  send(1, 1, 2, 2);  // thread 1's first chunk: slot 1 is not its slot before
  ExpectSilence(1);
  send(0, 1, 2, 2);  // completes slot 2: the result goes to thread 1's sockets
  for (int rank : {0, 1}) {
    const Frame f = Expect(rank);
    EXPECT_EQ(f.header.type, MessageType::kResult);
    EXPECT_TRUE(SameEndpoint(f.dst, Bmv2Harness::Host(rank, kThreadPorts)));
  }
  send(0, 1, 3, 3);     // thread 1's chunk 3 without rank 1's
  send(1, 1, 4, 2, 1);  // thread 1 wrapped: the slot before slot 2 is slot 3
  ExpectNack(1, job, 3, 3, 0, 0b10, 1);
  for (int host : {0, 1}) ExpectSilence(host);
}

// A probe (docs/wire-format.md, "The probe") asks for a slot's state
// without values: a pending reply that says whether the slot lacks the
// prober, or its lost result; never counted in.
TEST_F(Bmv2Scenario, AProbeIsAnsweredWithTheSlotsStateForItsSenderOnly) {
  const JobId job = Install(2);
  const auto before = Counters();
  auto probe = [&](uint16_t rank, uint32_t chunk, uint16_t slot, uint8_t version) {
    PacketHeader p = Contribution(job, rank, chunk, slot, version);
    p.type = MessageType::kProbe;
    p.element_count = 0;
    Send(p, {});
  };
  auto expect_pending = [&](int rank, uint32_t chunk, uint32_t bitmap) {
    SCOPED_TRACE("pending to rank " + std::to_string(rank));
    CheckFrame(Expect(rank), Bmv2Harness::Host(rank), MessageType::kPending, uint16_t(rank), job,
               chunk, 2, 0, {bitmap});
  };
  probe(0, 0, 2, 0);  // the slot has not started: no rank listed
  expect_pending(0, 0, 0);
  SendInOrder(Contribution(job, 0, 0, 2, 0), Values(1));
  probe(0, 0, 2, 0);  // in, waiting for rank 1
  expect_pending(0, 0, 0b01);
  probe(1, 0, 2, 0);  // rank 1's contribution is not in (lost)
  expect_pending(1, 0, 0b01);
  for (int host : {0, 1}) ExpectSilence(host);
  Send(Contribution(job, 1, 0, 2, 0), Values(2));
  const auto sums = Sum({Values(1), Values(2)});
  ExpectResultAtAll({0, 1}, job, 0, 2, 0, sums);
  probe(0, 0, 2, 0);  // rank 0 lost the result: it comes to rank 0 only
  ExpectResultToSender(0, job, 0, 2, 0, sums);
  ExpectSilence(1);
  // Rank 1 moved on to chunk 4 in version 1; a probe of its chunk 0 is stale
  // (it had the result), and one with values is dropped.
  SendInOrder(Contribution(job, 1, 4, 2, 1), Values(3));
  probe(1, 0, 2, 0);
  PacketHeader with_values = Contribution(job, 0, 4, 2, 1);
  with_values.type = MessageType::kProbe;
  Send(with_values, Values(4));
  for (int host : {0, 1}) ExpectSilence(host);
  const auto after = Counters();
  EXPECT_EQ(after.contributions - before.contributions, 3u);  // probes never count in
  EXPECT_EQ(after.pending_replies - before.pending_replies, 3u);
  EXPECT_EQ(after.results_resent - before.results_resent, 1u);
  EXPECT_EQ(
      after.drops[size_t(DropReason::kStaleChunk)] - before.drops[size_t(DropReason::kStaleChunk)],
      1u);
  EXPECT_EQ(after.drops[size_t(DropReason::kElementCount)] -
                before.drops[size_t(DropReason::kElementCount)],
            1u);
}

TEST_F(Bmv2Scenario, OtherTrafficIsSwitchedUnchanged) {
  // Host 0 to host 2, to a UDP port in the aggregation range: not addressed
  // to the endpoint, so it is ordinary traffic.
  const std::vector<uint8_t> payload = {1, 2, 3, 4, 5, 6, 7, 8};
  const auto frame =
      UdpFrame(Bmv2Harness::Host(0), Bmv2Harness::Host(2, kSwitchPort - 5002), payload);
  h().SendRaw(0, frame);
  const Frame f = Expect(2);
  EXPECT_EQ(f.bytes, frame);
  ExpectSilence(1);
  // An unknown destination MAC is flooded to every port but the ingress.
  auto unknown = UdpFrame(Bmv2Harness::Host(1), Bmv2Harness::Host(3), payload);
  unknown[5] = 0x77;
  h().SendRaw(1, unknown);
  for (int host : {0, 2, 3}) EXPECT_EQ(Expect(host).bytes, unknown);
  ExpectSilence(1);
}

TEST_F(Bmv2Scenario, PacketsAddressedToTheSwitchAreRouted) {
  // Destination MAC = the switch: routed by IP to host 3, MACs rewritten,
  // TTL decremented.
  Endpoint to = Bmv2Harness::Host(3);
  to.mac = Bmv2Harness::SwitchEndpoint().mac;
  const auto frame = UdpFrame(Bmv2Harness::Host(0), to, {9, 9});
  h().SendRaw(0, frame);
  const Frame f = Expect(3);
  EXPECT_EQ(f.dst.mac, Bmv2Harness::Host(3).mac);
  EXPECT_EQ(f.src.mac, Bmv2Harness::SwitchEndpoint().mac);
  EXPECT_EQ(f.bytes[14 + 8], frame[14 + 8] - 1);  // TTL
  EXPECT_EQ(f.udp_payload, (std::vector<uint8_t>{9, 9}));
}

TEST_F(Bmv2Scenario, InvalidPacketsAreDroppedUnderTheirReason) {
  const JobId job = Install(2, 4);
  const auto before = Counters();
  auto send_payload = [&](int host, const Endpoint& src, std::vector<uint8_t> payload) {
    h().SendUdp(host, src, Bmv2Harness::SwitchEndpoint(), payload);
  };
  auto valid = [&] { return SwitchmlPayload(Contribution(job, 0, 0, 0, 0), Values(1)); };
  std::map<DropReason, uint64_t> sent;
  auto bad = valid();
  bad[0] = 0;  // magic
  send_payload(0, Bmv2Harness::Host(0), bad);
  auto truncated = valid();
  truncated.resize(10);  // shorter than the switchml header
  send_payload(0, Bmv2Harness::Host(0), truncated);
  sent[DropReason::kMalformed] = 2;
  send_payload(0, Bmv2Harness::Host(0),
               SwitchmlPayload(Contribution(JobId(999999), 0, 0, 0, 0), Values(1)));
  sent[DropReason::kUnknownJob] = 1;
  send_payload(0, Bmv2Harness::Host(0), SwitchmlPayload(Contribution(job, 5, 0, 0, 0), Values(1)));
  sent[DropReason::kRankOutOfRange] = 1;
  send_payload(0, Bmv2Harness::Host(0), SwitchmlPayload(Contribution(job, 0, 0, 4, 0), Values(1)));
  sent[DropReason::kSlotOutOfRange] = 1;
  PacketHeader short_packet = Contribution(job, 0, 0, 0, 0);
  short_packet.element_count = 32;
  send_payload(0, Bmv2Harness::Host(0),
               SwitchmlPayload(short_packet, std::vector<uint32_t>(32, 1)));
  sent[DropReason::kElementCount] = 1;
  send_payload(0, Bmv2Harness::Host(0),
               SwitchmlPayload(Contribution(job, 0, 0, 0, 0, 200), Values(1)));
  sent[DropReason::kBadExponent] = 1;
  // Rank 0's job entry from another socket (port) and from another host.
  send_payload(0, Bmv2Harness::Host(0, 1), valid());
  send_payload(1, Bmv2Harness::Host(1), valid());
  sent[DropReason::kSourceMismatch] = 2;
  PacketHeader result = Contribution(job, 0, 0, 0, 0);
  result.type = MessageType::kResult;
  send_payload(0, Bmv2Harness::Host(0), SwitchmlPayload(result, Values(1)));
  sent[DropReason::kNotContribution] = 1;
  PacketHeader signed_packet = Contribution(job, 0, 0, 0, 0);
  signed_packet.authenticated = true;
  auto with_tag = SwitchmlPayload(signed_packet, Values(1));
  with_tag.resize(with_tag.size() + kAuthTagBytes);
  send_payload(0, Bmv2Harness::Host(0), with_tag);
  sent[DropReason::kBadMac] = 1;
  // The slot stayed untouched: a clean reduction still works.
  Send(Contribution(job, 0, 0, 0, 0), Values(1));
  Send(Contribution(job, 1, 0, 0, 0), Values(2));
  ExpectResultAtAll({0, 1}, job, 0, 0, 0, Sum({Values(1), Values(2)}));
  const auto after = Counters();
  for (int r = 1; r < kNumDropReasons; ++r) {
    SCOPED_TRACE(DropReasonName(DropReason(r)));
    EXPECT_EQ(after.drops[size_t(r)] - before.drops[size_t(r)], sent[DropReason(r)]);
  }
  EXPECT_EQ(after.contributions - before.contributions, 2u);
}

TEST_F(Bmv2Scenario, ArpRequestsForTheEndpointAreAnswered) {
  std::vector<uint8_t> arp(42, 0);
  const Endpoint me = Bmv2Harness::Host(2), sw = Bmv2Harness::SwitchEndpoint();
  std::fill(arp.begin(), arp.begin() + 6, 0xff);
  std::copy(me.mac.begin(), me.mac.end(), arp.begin() + 6);
  arp[12] = 0x08, arp[13] = 0x06;
  const uint8_t fixed[] = {0, 1, 8, 0, 6, 4, 0, 1};
  std::copy(std::begin(fixed), std::end(fixed), arp.begin() + 14);
  std::copy(me.mac.begin(), me.mac.end(), arp.begin() + 22);
  std::memcpy(arp.data() + 28, &me.ip, 4);
  std::memcpy(arp.data() + 38, &sw.ip, 4);
  h().SendRaw(2, arp);
  const auto reply = h().ReceiveEtherType(2, 0x0806, kArrival);
  ASSERT_TRUE(reply.has_value());
  const std::vector<uint8_t>& r = *reply;
  EXPECT_TRUE(std::equal(me.mac.begin(), me.mac.end(), r.begin()));      // to the asker
  EXPECT_TRUE(std::equal(sw.mac.begin(), sw.mac.end(), r.begin() + 6));  // from the switch
  EXPECT_EQ(r[20], 0);
  EXPECT_EQ(r[21], 2);                                                    // a reply
  EXPECT_TRUE(std::equal(sw.mac.begin(), sw.mac.end(), r.begin() + 22));  // sender hw
  EXPECT_EQ(std::memcmp(r.data() + 28, &sw.ip, 4), 0);                    // sender ip
  EXPECT_TRUE(std::equal(me.mac.begin(), me.mac.end(), r.begin() + 32));  // target hw
  EXPECT_EQ(std::memcmp(r.data() + 38, &me.ip, 4), 0);                    // target ip
}

// "Exactly as the software data plane does": a seeded random trace of valid
// and invalid packets (random_trace.h) goes through the P4 switch and through
// switchml::DataPlane; every reply must match byte for byte, and every
// counter. All packets enter through port 0, so BMv2 sees them in order.
// What the trace covers is checked without BMv2 (random_trace_test.cc).
TEST_F(Bmv2Scenario, MatchesTheSoftwareDataPlaneOnARandomTrace) {
  constexpr uint16_t kWorld = 3, kSlots = 2;
  constexpr uint32_t kBase = 100;
  const JobId job = Install(kWorld, kSlots, kBase);
  RandomTrace trace(job, kWorld, kSlots, kBase, kK, kRandomTraceSeed);
  ASSERT_TRUE(trace.registered().ok()) << trace.registered().ToString();
  const auto before = Counters();
  for (int i = 0; i < kRandomTracePackets; ++i) {
    SCOPED_TRACE("packet " + std::to_string(i));
    const RandomTrace::Step step = trace.Next();
    h().SendUdp(0, Bmv2Harness::Host(step.rank), Bmv2Harness::SwitchEndpoint(), step.packet);
    std::vector<int> receivers;
    const Action action = step.verdict.action;
    if (action == Action::kReplyToSender || action == Action::kPendingToSender) {
      receivers = {int(step.rank)};
    } else if (action == Action::kSendToAll) {
      receivers = {0, 1, 2};
    }
    if (!step.nack.empty()) {
      // The NACK, a clone, leaves ahead of the packet's own answer.
      const Frame f = Expect(0);
      EXPECT_EQ(f.dst.port, Bmv2Harness::Host(step.rank).port);
      EXPECT_EQ(f.udp_payload, step.nack);
    } else if (receivers.empty()) {
      // Nothing to wait for: wait until the switch has counted the packet,
      // so the next one cannot overtake it or overrun its input queue.
      WaitForPackets(before.packets + trace.counters().packets);
    }
    for (int r : receivers) {
      // Replies to the sender leave through the port the packet came in on.
      const int host = action == Action::kSendToAll ? r : 0;
      const Frame f = Expect(host);
      EXPECT_EQ(f.dst.port, Bmv2Harness::Host(r).port);
      EXPECT_EQ(f.udp_payload, step.reply);
    }
  }
  for (int host = 0; host < kHosts; ++host) ExpectSilence(host);
  const auto after = Counters();
  const DataPlaneCounters& expected = trace.counters();
  EXPECT_EQ(after.packets - before.packets, expected.packets);
  EXPECT_EQ(after.contributions - before.contributions, expected.contributions);
  EXPECT_EQ(after.slots_completed - before.slots_completed, expected.slots_completed);
  EXPECT_EQ(after.results_resent - before.results_resent, expected.results_resent);
  EXPECT_EQ(after.pending_replies - before.pending_replies, expected.pending_replies);
  EXPECT_EQ(after.nacks_sent - before.nacks_sent, trace.nacks());
  for (int r = 1; r < kNumDropReasons; ++r) {
    SCOPED_TRACE(DropReasonName(DropReason(r)));
    EXPECT_EQ(after.drops[size_t(r)] - before.drops[size_t(r)], expected.drops[size_t(r)]);
  }
}

}  // namespace
}  // namespace switchml::p4test
