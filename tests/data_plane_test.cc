#include "dataplane/data_plane.h"

#include <gtest/gtest.h>

#include <map>
#include <vector>

namespace switchml {
namespace {

constexpr uint16_t kK = 4;

class DataPlaneTest : public ::testing::Test {
 protected:
  void SetUp() override {
    DataPlaneConfig config;
    config.pool_slots = 16;
    config.max_elements_per_packet = 64;
    config.max_workers = 128;
    config.max_jobs = 4;
    dp_ = std::make_unique<DataPlane>(config);
    out_.resize(PacketBytes(64));
  }

  void Register(uint32_t job, uint16_t world, uint32_t base = 0, uint16_t slots = 4,
                uint16_t k = kK) {
    ASSERT_TRUE(dp_->RegisterJob({JobId(job), world, k, base, slots}).ok());
  }

  static std::vector<uint8_t> Packet(uint32_t job, uint16_t rank, uint16_t slot, uint8_t version,
                                     uint32_t chunk, std::vector<int32_t> values,
                                     int16_t next_exponent = 0) {
    PacketHeader h;
    h.type = MessageType::kContribution;
    h.job = job;
    h.chunk = chunk;
    h.rank = rank;
    h.slot = slot;
    h.element_count = uint16_t(values.size());
    h.version = version;
    h.next_exponent = next_exponent;
    std::vector<uint8_t> b(PacketBytes(h.element_count));
    EncodeHeader(h, b);
    for (size_t i = 0; i < values.size(); ++i) StoreBe32(&b[kHeaderBytes + 4 * i], values[i]);
    return b;
  }

  Verdict Send(uint32_t job, uint16_t rank, uint16_t slot, uint8_t version, uint32_t chunk,
               std::vector<int32_t> values, int16_t next_exponent = 0) {
    return dp_->Process(Packet(job, rank, slot, version, chunk, values, next_exponent), out_);
  }

  // A probe (no values) from `rank` for (version, slot) at `chunk`.
  Verdict Probe(uint32_t job, uint16_t rank, uint16_t slot, uint8_t version, uint32_t chunk) {
    std::vector<uint8_t> b = Packet(job, rank, slot, version, chunk, {});
    b[3] = uint8_t(MessageType::kProbe);
    return Keep(dp_->Process(b, out_));
  }

  // The result in out_: header and values.
  PacketHeader OutHeader() const {
    PacketView v;
    EXPECT_EQ(DecodePacket(std::span(out_.data(), last_bytes_), &v), DecodeError::kOk);
    return v.header;
  }
  std::vector<int32_t> OutValues() const {
    std::vector<int32_t> values;
    for (size_t i = kHeaderBytes; i < last_bytes_; i += 4)
      values.push_back(int32_t(LoadBe32(&out_[i])));
    return values;
  }
  // Job 1 of four ranks learns a long spread (chunk 1's ranks 100 us apart)
  // and a turnaround of kTurnaround (chunk 5 that long after chunk 1's
  // result, from ranks 0-2: rank 3 is behind, its newest chunk stays 1). At
  // kLostAt chunk 3 (slot 3) comes from ranks 0 and 1, and rank 2's chunk 4
  // without it: rank 2's chunk 3 was lost; rank 3's is not sent yet.
  static constexpr Nanos kTurnaround = std::chrono::microseconds(5);
  static constexpr Nanos kLostAt = std::chrono::microseconds(200);
  void LoseRank2sChunk3() {
    const auto us = [](int64_t n) { return Nanos(std::chrono::microseconds(n)); };
    Register(1, 4);
    dp_->AdvanceClock(us(1));
    Send(1, 0, 1, 0, 1, {1, 1, 1, 1});
    dp_->AdvanceClock(us(101));
    for (uint16_t r = 1; r < 4; ++r) Send(1, r, 1, 0, 1, {1, 1, 1, 1});
    dp_->AdvanceClock(us(101) + kTurnaround);
    for (uint16_t r = 0; r < 3; ++r) Send(1, r, 1, 1, 5, {1, 1, 1, 1});
    dp_->AdvanceClock(kLostAt);
    Send(1, 0, 3, 0, 3, {1, 1, 1, 1});
    Send(1, 1, 3, 0, 3, {1, 1, 1, 1});
    Send(1, 2, 0, 1, 4, {1, 1, 1, 1});
  }

  Verdict Keep(Verdict v) {
    last_bytes_ = v.out_bytes;
    return v;
  }

  // Job 1 of two ranks learns a turnaround of 2,000 ns and, from rank 1's
  // chunk 1 overtaken by its chunk 2 and still coming 500 ns later, a
  // reordering window of 625 ns. Until then a newer chunk calls a loss at
  // once. Ends at 3,600 ns; chunk 1 (slot 1) is complete.
  void LearnAReorderingWindowOf625Ns() {
    Register(1, 2);
    dp_->AdvanceClock(Nanos(1000));
    Send(1, 0, 0, 0, 0, {1, 1, 1, 1});
    ASSERT_EQ(Send(1, 1, 0, 0, 0, {1, 1, 1, 1}).action, Action::kSendToAll);
    dp_->AdvanceClock(Nanos(3000));
    Send(1, 0, 0, 1, 4, {1, 1, 1, 1});  // 2,000 ns after chunk 0's result: the turnaround
    Send(1, 0, 1, 0, 1, {1, 1, 1, 1});
    dp_->AdvanceClock(Nanos(3100));
    Send(1, 1, 2, 0, 2, {1, 1, 1, 1});  // rank 1's chunk 2 overtakes its chunk 1
    const Verdict at_once = Keep(dp_->NextTimerPacket(Nanos(3100), out_));  // none seen yet
    ASSERT_EQ(at_once.action, Action::kNackToMissing);
    EXPECT_EQ(at_once.slot, 1u);
    EXPECT_EQ(OutValues(), (std::vector<int32_t>{0b10, 0b00}));  // rank 1, lost
    dp_->AdvanceClock(Nanos(3600));
    EXPECT_EQ(Send(1, 1, 1, 0, 1, {1, 1, 1, 1}).action, Action::kSendToAll);  // 500 ns late
  }

  std::unique_ptr<DataPlane> dp_;
  std::vector<uint8_t> out_;
  size_t last_bytes_ = 0;
};

TEST_F(DataPlaneTest, BasicReductionTwoWorkers) {
  Register(1, 2);
  EXPECT_EQ(Send(1, 0, 0, 0, 7, {1, 2, 3, 4}).action, Action::kDrop);
  const Verdict v = Keep(Send(1, 1, 0, 0, 7, {10, 20, 30, -40}));
  ASSERT_EQ(v.action, Action::kSendToAll);
  EXPECT_EQ(v.world_size, 2);
  EXPECT_EQ(OutValues(), (std::vector<int32_t>{11, 22, 33, -36}));
  EXPECT_EQ(OutHeader().type, MessageType::kResult);
  EXPECT_EQ(OutHeader().rank, kAllRanks);
  EXPECT_EQ(OutHeader().chunk, 7u);
  EXPECT_EQ(dp_->counters().slots_completed, 1u);
}

TEST_F(DataPlaneTest, BasicReductionThreeWorkers) {
  Register(1, 3);
  EXPECT_EQ(Send(1, 2, 1, 0, 1, {1, 1, 1, 1}, 5).action, Action::kDrop);
  EXPECT_EQ(Send(1, 0, 1, 0, 1, {2, 2, 2, 2}, 9).action, Action::kDrop);
  const Verdict v = Keep(Send(1, 1, 1, 0, 1, {4, 4, 4, 4}, -3));
  ASSERT_EQ(v.action, Action::kSendToAll);
  EXPECT_EQ(OutValues(), (std::vector<int32_t>{7, 7, 7, 7}));
  EXPECT_EQ(OutHeader().next_exponent, 9);  // the maximum of the look-ahead exponents
  EXPECT_EQ(OutHeader().slot, 1);
}

TEST_F(DataPlaneTest, SingleWorkerCompletesAtOnce) {
  Register(1, 1);
  const Verdict v = Keep(Send(1, 0, 0, 0, 0, {5, 6, 7, 8}));
  ASSERT_EQ(v.action, Action::kSendToAll);
  EXPECT_EQ(OutValues(), (std::vector<int32_t>{5, 6, 7, 8}));
}

TEST_F(DataPlaneTest, RetransmissionAfterCompletionRepliesToSenderOnly) {
  Register(1, 2);
  Send(1, 0, 0, 0, 3, {1, 2, 3, 4});
  ASSERT_EQ(Send(1, 1, 0, 0, 3, {1, 1, 1, 1}).action, Action::kSendToAll);
  for (int i = 0; i < 3; ++i) {
    const Verdict v = Keep(Send(1, 1, 0, 0, 3, {1, 1, 1, 1}));
    ASSERT_EQ(v.action, Action::kReplyToSender);
    EXPECT_EQ(v.rank, 1);
    EXPECT_EQ(OutHeader().rank, 1);
    EXPECT_EQ(OutValues(), (std::vector<int32_t>{2, 3, 4, 5}));
  }
  EXPECT_EQ(dp_->counters().results_resent, 3u);
  EXPECT_EQ(dp_->counters().contributions, 2u);
}

TEST_F(DataPlaneTest, RetransmissionBeforeCompletionIsNotCountedTwice) {
  Register(1, 3);
  Send(1, 0, 0, 0, 0, {1, 1, 1, 1});
  const Verdict v = Keep(Send(1, 0, 0, 0, 0, {1, 1, 1, 1}));
  EXPECT_EQ(v.action, Action::kPendingToSender);  // the contribution itself is dropped
  EXPECT_EQ(OutHeader().type, MessageType::kPending);
  EXPECT_EQ(OutValues(), (std::vector<int32_t>{0b001}));  // only rank 0 has contributed
  EXPECT_EQ(Send(1, 1, 0, 0, 0, {1, 1, 1, 1}).action, Action::kDrop);
  // Only the third worker completes the slot, and the sum counts rank 0 once.
  const Verdict done = Keep(Send(1, 2, 0, 0, 0, {1, 1, 1, 1}));
  ASSERT_EQ(done.action, Action::kSendToAll);
  EXPECT_EQ(OutValues(), (std::vector<int32_t>{3, 3, 3, 3}));
  EXPECT_EQ(dp_->counters().contributions, 3u);
  EXPECT_EQ(dp_->counters().pending_replies, 1u);
}

TEST_F(DataPlaneTest, SlotReuseAcrossTheTwoVersions) {
  Register(1, 2);
  uint32_t chunk = 0;
  for (int round = 0; round < 6; ++round, chunk += 4) {
    const uint8_t version = round % 2;
    Send(1, 0, 2, version, chunk, {round, 1, 0, 0});
    const Verdict v = Keep(Send(1, 1, 2, version, chunk, {round, 2, 0, 0}));
    ASSERT_EQ(v.action, Action::kSendToAll) << round;
    EXPECT_EQ(OutValues(), (std::vector<int32_t>{2 * round, 3, 0, 0}));
    EXPECT_EQ(OutHeader().version, version);
  }
}

TEST_F(DataPlaneTest, RetransmissionIntoPreviousVersionAfterOthersMovedOn) {
  Register(1, 3);
  for (uint16_t r = 0; r < 3; ++r) Send(1, r, 0, 0, 0, {r + 1, 0, 0, 0});  // sum 6
  // Ranks 1 and 2 got the result and moved on to version 1; rank 0 lost it.
  Send(1, 1, 0, 1, 4, {100, 0, 0, 0});
  Send(1, 2, 0, 1, 4, {100, 0, 0, 0});
  const Verdict v = Keep(Send(1, 0, 0, 0, 0, {1, 0, 0, 0}));
  ASSERT_EQ(v.action, Action::kReplyToSender);
  EXPECT_EQ(OutValues(), (std::vector<int32_t>{6, 0, 0, 0}));
  EXPECT_EQ(OutHeader().version, 0);
  // Now rank 0 moves on and completes version 1.
  const Verdict next = Keep(Send(1, 0, 0, 1, 4, {100, 0, 0, 0}));
  ASSERT_EQ(next.action, Action::kSendToAll);
  EXPECT_EQ(OutValues(), (std::vector<int32_t>{300, 0, 0, 0}));
}

TEST_F(DataPlaneTest, DuplicatesNeverChangeASum) {
  Register(1, 2);
  for (int i = 0; i < 5; ++i) Send(1, 0, 0, 0, 0, {1, 2, 3, 4});
  const Verdict v = Keep(Send(1, 1, 0, 0, 0, {1, 1, 1, 1}));
  ASSERT_EQ(v.action, Action::kSendToAll);
  EXPECT_EQ(OutValues(), (std::vector<int32_t>{2, 3, 4, 5}));
  for (int i = 0; i < 5; ++i) {
    Keep(Send(1, 0, 0, 0, 0, {1, 2, 3, 4}));
    EXPECT_EQ(OutValues(), (std::vector<int32_t>{2, 3, 4, 5}));
  }
}

// A late duplicate of round r must not start round r+2 in the same version
// and overwrite a result another worker may still need.
TEST_F(DataPlaneTest, LateDuplicateOfAnOldRoundIsDroppedAsStale) {
  Register(1, 2);
  Send(1, 0, 0, 0, 0, {1, 0, 0, 0});
  Send(1, 1, 0, 0, 0, {1, 0, 0, 0});
  Send(1, 0, 0, 1, 4, {2, 0, 0, 0});  // round 1, version 1: clears rank 0's bit in version 0
  const Verdict v = Send(1, 0, 0, 0, 0, {1, 0, 0, 0});  // the late copy of round 0
  EXPECT_EQ(v.action, Action::kDrop);
  EXPECT_EQ(v.reason, DropReason::kStaleChunk);
  // Rank 1 can still fetch round 0's intact result.
  Keep(Send(1, 1, 0, 0, 0, {1, 0, 0, 0}));
  EXPECT_EQ(OutValues(), (std::vector<int32_t>{2, 0, 0, 0}));
}

// Regression (the version conflict, docs/design.md §2): a corrupted copy of rank 0's packet with
// the version bit flipped (and optionally a later chunk id) used to clear rank 0's bit in the
// version still filling, so rank 0's retransmission counted twice and both ranks got A+A instead of
// A+B.
TEST_F(DataPlaneTest, FlippedVersionCopyNeverMakesASenderCountTwice) {
  for (const uint32_t forged_chunk : {0u, 4u}) {
    SCOPED_TRACE(forged_chunk);
    Register(1, 2);
    EXPECT_EQ(Send(1, 0, 0, 0, 0, {1, 2, 3, 4}).reason, DropReason::kNone);  // A into version 0
    const Verdict forged = Send(1, 0, 0, 1, forged_chunk, {1, 2, 3, 4});
    EXPECT_EQ(forged.action, Action::kDrop);
    EXPECT_EQ(forged.reason, DropReason::kVersionConflict);
    // Rank 0's retransmission is still recognised as one.
    EXPECT_EQ(Send(1, 0, 0, 0, 0, {1, 2, 3, 4}).action, Action::kPendingToSender);
    const Verdict v = Keep(Send(1, 1, 0, 0, 0, {10, 20, 30, 40}));  // B completes the slot
    ASSERT_EQ(v.action, Action::kSendToAll);
    EXPECT_EQ(OutValues(), (std::vector<int32_t>{11, 22, 33, 44}));
    EXPECT_EQ(dp_->JobCounters(JobId(1)).drops[size_t(DropReason::kVersionConflict)], 1u);
    // The other version is usable as soon as this one is complete.
    Send(1, 0, 0, 1, 4, {5, 0, 0, 0});
    ASSERT_EQ(Keep(Send(1, 1, 0, 1, 4, {6, 0, 0, 0})).action, Action::kSendToAll);
    EXPECT_EQ(OutValues(), (std::vector<int32_t>{11, 0, 0, 0}));
    ASSERT_TRUE(dp_->UnregisterJob(JobId(1)).ok());
  }
}

TEST_F(DataPlaneTest, ContributionForAnotherChunkWhileAggregatingIsDropped) {
  Register(1, 3);
  Send(1, 0, 0, 0, 8, {1, 0, 0, 0});
  EXPECT_EQ(Send(1, 1, 0, 0, 12, {1, 0, 0, 0}).reason, DropReason::kChunkMismatch);
  EXPECT_EQ(Send(1, 1, 0, 0, 4, {1, 0, 0, 0}).reason, DropReason::kStaleChunk);
}

TEST_F(DataPlaneTest, ExponentMismatchIsDropped) {
  Register(1, 2);
  std::vector<uint8_t> a = Packet(1, 0, 0, 0, 0, {1, 0, 0, 0});
  std::vector<uint8_t> b = Packet(1, 1, 0, 0, 0, {1, 0, 0, 0});
  b[21] = 3;  // exponent field = 3 where rank 0 sent 0
  dp_->Process(a, out_);
  EXPECT_EQ(dp_->Process(b, out_).reason, DropReason::kExponentMismatch);
  b[20] = 0x40;  // exponent 0x4003: not a valid exponent at all
  EXPECT_EQ(dp_->Process(b, out_).reason, DropReason::kBadExponent);
}

// A header sent twice (the workers saw loss: docs/design.md §3): the second,
// unflagged copy is ignored, with no pending reply and no NACK however long
// the slot then waits, and once copies came while the slot aggregated its
// result goes out twice. A flagged resend is still a retransmission, and a
// whole packet's unflagged copy too.
TEST_F(DataPlaneTest, AHeaderCopyIsIgnoredWhileItsSlotAggregatesAndDoublesTheResult) {
  Register(1, 3);
  EXPECT_EQ(Send(1, 0, 1, 0, 1, {}, 5).action, Action::kDrop);
  const Verdict copy = Send(1, 0, 1, 0, 1, {}, 5);
  EXPECT_EQ(copy.action, Action::kDrop);
  EXPECT_EQ(copy.reason, DropReason::kNone);
  EXPECT_EQ(copy.out_bytes, 0u);
  EXPECT_EQ(dp_->counters().header_copies, 1u);
  EXPECT_EQ(dp_->counters().pending_replies, 0u);
  EXPECT_EQ(dp_->counters().TotalDrops(), 0u);
  // Rank 1 then waits ten thousand times the spread: rank 2's stall, not
  // rank 0's copy, is what its watches NACK.
  EXPECT_EQ(Send(1, 1, 1, 0, 1, {}, 7).action, Action::kDrop);
  for (Nanos t{1000}; t <= Nanos(10'000'000); t *= 10) {
    for (Verdict v; (v = Keep(dp_->NextTimerPacket(t, out_))).action != Action::kDrop;) {
      ASSERT_EQ(v.action, Action::kNackToMissing);
      EXPECT_FALSE(NackNames(std::span(out_.data(), v.out_bytes), 0));
      EXPECT_FALSE(NackNames(std::span(out_.data(), v.out_bytes), 1));
    }
  }
  const Verdict result = Keep(Send(1, 2, 1, 0, 1, {}, 9));
  ASSERT_EQ(result.action, Action::kSendToAll);
  EXPECT_EQ(result.copies, 2);
  EXPECT_EQ(OutHeader().next_exponent, 9);
  // Once the result went out twice a late copy needs no answer either.
  EXPECT_EQ(Send(1, 2, 1, 0, 1, {}, 9).action, Action::kDrop);
  EXPECT_EQ(dp_->counters().header_copies, 2u);
  // A flagged resend is a retransmission (the rank lost the result).
  std::vector<uint8_t> resend = Packet(1, 1, 1, 0, 1, {}, 7);
  resend[kFlagsOffset] |= kFlagResend;
  EXPECT_EQ(dp_->Process(resend, out_).action, Action::kReplyToSender);
  // An unflagged copy of a whole packet is answered as before. Without
  // copies while it aggregated a slot's result goes out once, and a copy
  // that comes after needs no answer either.
  EXPECT_EQ(Send(1, 0, 2, 0, 2, {1, 2, 3, 4}).action, Action::kDrop);
  EXPECT_EQ(Send(1, 0, 2, 0, 2, {1, 2, 3, 4}).action, Action::kPendingToSender);
  EXPECT_EQ(Send(1, 0, 3, 0, 3, {}).action, Action::kDrop);
  EXPECT_EQ(Send(1, 1, 3, 0, 3, {}).action, Action::kDrop);
  const Verdict once = Send(1, 2, 3, 0, 3, {});
  ASSERT_EQ(once.action, Action::kSendToAll);
  EXPECT_EQ(once.copies, 1);
  EXPECT_EQ(Send(1, 2, 3, 0, 3, {}).action, Action::kDrop);
  EXPECT_EQ(dp_->counters().header_copies, 3u);
  // A late copy of an earlier chunk is stale, and marks nothing: slot 1
  // moves on to chunk 5 in version 1, then chunk 9 in version 0.
  for (uint16_t r = 0; r < 3; ++r) Send(1, r, 1, 1, 5, {});
  EXPECT_EQ(Send(1, 0, 1, 0, 9, {}).action, Action::kDrop);
  EXPECT_EQ(Send(1, 0, 1, 0, 1, {}).reason, DropReason::kStaleChunk);
  EXPECT_EQ(Send(1, 1, 1, 0, 9, {}).action, Action::kDrop);
  const Verdict next = Send(1, 2, 1, 0, 9, {});
  ASSERT_EQ(next.action, Action::kSendToAll);
  EXPECT_EQ(next.copies, 1);
  EXPECT_EQ(dp_->counters().header_copies, 3u);
}

// The last results of a burst go twice where it had many resends
// (docs/design.md §2): those completed while at most a quarter of the job's
// usual aggregations are in progress, in a burst with a resend per eight
// results or more. Loss-free, with fewer resends, and in the burst after,
// none does.
TEST_F(DataPlaneTest, TheLastResultsOfABurstWithManyResendsGoTwice) {
  Register(1, 2, 0, 16);
  const std::vector<int32_t> values = {1, 2, 3, 4};
  // Rank 0 keeps all 16 slots aggregating; rank 1 completes them in turn,
  // and rank 0 starts each slot's next chunk at once: 48 results with 16 in
  // progress. Then rank 1 drains the last round, its first `resends` packets
  // there flagged resends: 64 results in the burst.
  uint32_t round = 0;
  auto burst = [&](int resends) {
    for (uint16_t s = 0; s < 16; ++s) Send(1, 0, s, uint8_t(round % 2), round * 16 + s, values);
    std::vector<int> copies;
    for (const uint32_t last = round + 3; round <= last; ++round) {
      for (uint16_t s = 0; s < 16; ++s) {
        std::vector<uint8_t> b = Packet(1, 1, s, uint8_t(round % 2), round * 16 + s, values);
        if (round == last && s < resends) b[kFlagsOffset] |= kFlagResend;
        const Verdict v = dp_->Process(b, out_);
        EXPECT_EQ(v.action, Action::kSendToAll);
        if (round == last) {
          copies.push_back(v.copies);
        } else {
          Send(1, 0, s, uint8_t((round + 1) % 2), (round + 1) * 16 + s, values);
        }
      }
    }
    return copies;
  };
  const std::vector<int> once(16, 1);
  EXPECT_EQ(burst(0), once);  // loss-free
  EXPECT_EQ(burst(7), once);  // 7 resends in 64 results
  EXPECT_EQ(dp_->counters().tail_result_copies, 0u);
  std::vector<int> twice = once;
  twice[14] = twice[15] = 2;  // 2 and 1 in progress: the mean fell to about 9 by then
  EXPECT_EQ(burst(8), twice);
  EXPECT_EQ(dp_->counters().tail_result_copies, 2u);
  EXPECT_EQ(dp_->JobCounters(JobId(1)).tail_result_copies, 2u);
  EXPECT_EQ(burst(0), once);  // a new burst
  EXPECT_EQ(dp_->counters().tail_result_copies, 2u);
}

// A whole packet's copy flagged kFlagCopy (the descriptor sent twice after a
// loss): ignored like a header copy where the first counted, counted in
// where the first was lost, and stale where the slot moved on.
TEST_F(DataPlaneTest, AFlaggedCopyOfAWholePacketCountsOnceAndIsNeverAnswered) {
  Register(1, 2);
  auto copy_of = [](std::vector<uint8_t> b) {
    b[kFlagsOffset] |= kFlagCopy;
    return b;
  };
  const std::vector<uint8_t> first = Packet(1, 0, 0, 0, 0, {1, 2, 3, 4});
  EXPECT_EQ(dp_->Process(first, out_).action, Action::kDrop);
  const Verdict copy = dp_->Process(copy_of(first), out_);
  EXPECT_EQ(copy.action, Action::kDrop);
  EXPECT_EQ(copy.reason, DropReason::kNone);
  EXPECT_EQ(copy.out_bytes, 0u);
  EXPECT_EQ(dp_->counters().header_copies, 1u);
  EXPECT_EQ(dp_->counters().pending_replies, 0u);
  // Rank 1's first was lost: its copy counts in and completes the slot,
  // once (rank 0's copy came while the slot aggregated: twice).
  const Verdict result = Keep(dp_->Process(copy_of(Packet(1, 1, 0, 0, 0, {10, 20, 30, 40})), out_));
  ASSERT_EQ(result.action, Action::kSendToAll);
  EXPECT_EQ(result.copies, 2);
  EXPECT_EQ(OutValues(), (std::vector<int32_t>{11, 22, 33, 44}));
  EXPECT_EQ(dp_->counters().contributions, 2u);
  // A late copy needs no answer; once the slot moved on it is stale.
  EXPECT_EQ(dp_->Process(copy_of(first), out_).action, Action::kDrop);
  EXPECT_EQ(dp_->counters().header_copies, 2u);
  for (uint16_t r = 0; r < 2; ++r) Send(1, r, 0, 1, 4, {});  // the slot's next chunk
  EXPECT_EQ(dp_->Process(copy_of(first), out_).reason, DropReason::kStaleChunk);
  EXPECT_EQ(dp_->counters().header_copies, 2u);
}

// Each result names the one the job's rank thread got before it (slot and
// version in the rank field and flags, docs/wire-format.md "The previous
// result"), so a worker that still waits for that one lost it; a resent
// result names the same one.
TEST_F(DataPlaneTest, EachResultNamesThePreviousOne) {
  Register(1, 2);
  Send(1, 0, 3, 1, 3, {1, 1, 1, 1});
  Send(1, 0, 2, 0, 2, {1, 1, 1, 1});
  ASSERT_EQ(Keep(Send(1, 1, 2, 0, 2, {1, 1, 1, 1})).action, Action::kSendToAll);
  EXPECT_FALSE(OutHeader().names_previous);
  EXPECT_EQ(OutHeader().rank, kAllRanks);
  Send(1, 0, 1, 0, 1, {1, 1, 1, 1});
  const Verdict second = Keep(Send(1, 1, 1, 0, 1, {1, 1, 1, 1}));
  ASSERT_EQ(second.action, Action::kSendToAll);
  EXPECT_TRUE(OutHeader().names_previous);
  EXPECT_EQ(OutHeader().rank, 2u);             // slot 2,
  EXPECT_EQ(OutHeader().previous_version, 0);  // version 0
  EXPECT_EQ(OutHeader().slot, 1u);
  // Rank 0 lost slot 1's result and asks again: the same name.
  std::vector<uint8_t> resend = Packet(1, 0, 1, 0, 1, {1, 1, 1, 1});
  resend[kFlagsOffset] |= kFlagResend;
  ASSERT_EQ(Keep(dp_->Process(resend, out_)).action, Action::kReplyToSender);
  EXPECT_TRUE(OutHeader().names_previous);
  EXPECT_EQ(OutHeader().rank, 2u);
  EXPECT_EQ(OutHeader().previous_version, 0);
  // Slot 3's result names slot 1's, whatever came between.
  const Verdict last = Keep(Send(1, 1, 3, 1, 3, {1, 1, 1, 1}));
  ASSERT_EQ(last.action, Action::kSendToAll);
  EXPECT_EQ(last.copies, 1);
  EXPECT_EQ(OutHeader().rank, 1u);
  EXPECT_EQ(OutHeader().previous_version, 0);
  EXPECT_EQ(OutHeader().version, 1);
  // Version 1 is named as such.
  Send(1, 0, 0, 0, 4, {1, 1, 1, 1});
  ASSERT_EQ(Keep(Send(1, 1, 0, 0, 4, {1, 1, 1, 1})).action, Action::kSendToAll);
  EXPECT_EQ(OutHeader().rank, 3u);
  EXPECT_EQ(OutHeader().previous_version, 1);
  // Registering the job again forgets them.
  ASSERT_TRUE(dp_->UnregisterJob(JobId(1)).ok());
  Register(1, 2);
  Send(1, 0, 0, 0, 0, {1, 1, 1, 1});
  ASSERT_EQ(Keep(Send(1, 1, 0, 0, 0, {1, 1, 1, 1})).action, Action::kSendToAll);
  EXPECT_FALSE(OutHeader().names_previous);
}

// Threads of a rank keep no order among each other, so each thread's results
// name that thread's previous result only.
TEST_F(DataPlaneTest, AResultNamesItsOwnThreadsPreviousOne) {
  JobRegistration reg{JobId(1), 2, kK, 0, 4};
  reg.threads = 2;  // thread 0: slots 0-1, thread 1: slots 2-3
  ASSERT_TRUE(dp_->RegisterJob(reg).ok());
  for (uint16_t slot : {0, 2, 1}) {
    Send(1, 0, slot, 0, slot, {1, 1, 1, 1});
    ASSERT_EQ(Keep(Send(1, 1, slot, 0, slot, {1, 1, 1, 1})).action, Action::kSendToAll);
  }
  EXPECT_TRUE(OutHeader().names_previous);
  EXPECT_EQ(OutHeader().rank, 0u);  // slot 1 names slot 0, not slot 2
}

// An exponent-only contribution (no values, docs/wire-format.md) counts in
// like any other: its result is a header with the maximum next exponent.
// One aggregation takes whole packets or exponent-only ones, never both.
TEST_F(DataPlaneTest, ExponentOnlyContributionsAgreeTheNextExponent) {
  Register(1, 2);
  EXPECT_EQ(Send(1, 0, 1, 0, 1, {}, 5).action, Action::kDrop);
  const Verdict v = Keep(Send(1, 1, 1, 0, 1, {}, 9));
  ASSERT_EQ(v.action, Action::kSendToAll);
  ASSERT_EQ(v.out_bytes, kHeaderBytes);
  PacketView view;
  ASSERT_EQ(DecodePacket(std::span(out_.data(), v.out_bytes), &view), DecodeError::kOk);
  EXPECT_EQ(view.header.type, MessageType::kResult);
  EXPECT_EQ(view.header.element_count, 0);
  EXPECT_EQ(view.header.next_exponent, 9);
  EXPECT_EQ(view.header.chunk, 1u);
  // A retransmission (flagged as one) gets the same header.
  std::vector<uint8_t> resend = Packet(1, 0, 1, 0, 1, {}, 5);
  resend[kFlagsOffset] |= kFlagResend;
  const Verdict again = Keep(dp_->Process(resend, out_));
  EXPECT_EQ(again.action, Action::kReplyToSender);
  EXPECT_EQ(again.out_bytes, kHeaderBytes);
  // Mixed in one aggregation: dropped, and the sum is untouched.
  EXPECT_EQ(Send(1, 0, 2, 0, 2, {}).action, Action::kDrop);
  EXPECT_EQ(Send(1, 1, 2, 0, 2, {1, 2, 3, 4}).reason, DropReason::kElementCount);
  EXPECT_EQ(Send(1, 0, 3, 0, 3, {1, 2, 3, 4}).action, Action::kDrop);
  EXPECT_EQ(Send(1, 1, 3, 0, 3, {}).reason, DropReason::kElementCount);
  const Verdict whole = Keep(Send(1, 1, 3, 0, 3, {10, 20, 30, 40}));
  ASSERT_EQ(whole.action, Action::kSendToAll);
  EXPECT_EQ(OutValues(), (std::vector<int32_t>{11, 22, 33, 44}));
  EXPECT_EQ(dp_->counters().drops[size_t(DropReason::kElementCount)], 2u);
}

TEST_F(DataPlaneTest, InvalidFieldsAreCountedPerReason) {
  Register(1, 2, 0, 4);
  EXPECT_EQ(Send(2, 0, 0, 0, 0, {1, 2, 3, 4}).reason, DropReason::kUnknownJob);
  EXPECT_EQ(Send(1, 2, 0, 0, 0, {1, 2, 3, 4}).reason, DropReason::kRankOutOfRange);
  EXPECT_EQ(Send(1, 0, 4, 0, 0, {1, 2, 3, 4}).reason, DropReason::kSlotOutOfRange);
  EXPECT_EQ(Send(1, 0, 0, 0, 0, {1, 2, 3}).reason, DropReason::kElementCount);
  std::vector<uint8_t> result = Packet(1, 0, 0, 0, 0, {1, 2, 3, 4});
  result[3] = uint8_t(MessageType::kResult);
  EXPECT_EQ(dp_->Process(result, out_).reason, DropReason::kNotContribution);
  EXPECT_EQ(dp_->Process(std::vector<uint8_t>(10, 0), out_).reason, DropReason::kMalformed);
  const DataPlaneCounters& c = dp_->counters();
  EXPECT_EQ(c.TotalDrops(), 6u);
  EXPECT_EQ(c.packets, 6u);
  EXPECT_EQ(c.decode_errors[size_t(DecodeError::kTooShort)], 1u);
  EXPECT_EQ(dp_->JobCounters(JobId(1)).TotalDrops(),
            4u);  // the unknown-job and malformed ones are global
  EXPECT_EQ(c.contributions, 0u);
}

TEST_F(DataPlaneTest, JobsAreIsolated) {
  Register(1, 2, 0, 4);
  Register(2, 2, 4, 4);
  Send(1, 0, 0, 0, 0, {1, 1, 1, 1});
  Send(2, 0, 0, 0, 0, {100, 100, 100, 100});
  Keep(Send(2, 1, 0, 0, 0, {100, 100, 100, 100}));
  EXPECT_EQ(OutValues(), (std::vector<int32_t>{200, 200, 200, 200}));
  EXPECT_EQ(OutHeader().job, 2u);
  Keep(Send(1, 1, 0, 0, 0, {1, 1, 1, 1}));
  EXPECT_EQ(OutValues(), (std::vector<int32_t>{2, 2, 2, 2}));
}

TEST_F(DataPlaneTest, EndedJobsPacketsAreDroppedAndReRegistrationResets) {
  Register(1, 2);
  Send(1, 0, 0, 0, 0, {9, 9, 9, 9});  // half-finished slot
  ASSERT_TRUE(dp_->UnregisterJob(JobId(1)).ok());
  EXPECT_EQ(Send(1, 1, 0, 0, 0, {1, 1, 1, 1}).reason, DropReason::kUnknownJob);
  // Job 5 reuses table entry 1 (5 % 4) and the same segment: it starts clean.
  Register(5, 2);
  EXPECT_EQ(Send(1, 1, 0, 0, 0, {1, 1, 1, 1}).reason, DropReason::kUnknownJob);
  Send(5, 0, 0, 0, 0, {1, 1, 1, 1});
  Keep(Send(5, 1, 0, 0, 0, {1, 1, 1, 1}));
  EXPECT_EQ(OutValues(), (std::vector<int32_t>{2, 2, 2, 2}));
}

TEST_F(DataPlaneTest, RegistrationRejectsConflicts) {
  Register(1, 2, 0, 8);
  EXPECT_EQ(dp_->RegisterJob({JobId(2), 2, kK, 4, 4}).code(), StatusCode::kAlreadyExists);
  EXPECT_EQ(dp_->RegisterJob({JobId(5), 2, kK, 8, 4}).code(), StatusCode::kAlreadyExists);
  EXPECT_EQ(dp_->RegisterJob({JobId(2), 2, kK, 12, 8}).code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(dp_->RegisterJob({JobId(2), 129, kK, 8, 4}).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(dp_->RegisterJob({JobId(2), 2, 65, 8, 4}).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(dp_->RegisterJob({JobId(2), 2, kK, 8, 8}).ok());
}

TEST_F(DataPlaneTest, MoreThanSixtyFourWorkers) {
  Register(1, 100);
  for (uint16_t r = 0; r < 99; ++r) {
    ASSERT_EQ(Send(1, r, 0, 0, 0, {r, 1, 0, 0}).action, Action::kDrop);
  }
  // A retransmission from rank 70 (second bitmap word) is recognized.
  Keep(Send(1, 70, 0, 0, 0, {70, 1, 0, 0}));
  EXPECT_EQ(OutHeader().type, MessageType::kPending);
  EXPECT_EQ(OutValues().size(), 4u);  // ceil(100 / 32) bitmap words
  EXPECT_EQ(OutValues()[3], 0b0111);  // ranks 96..98 seen, 99 missing
  Keep(Send(1, 99, 0, 0, 0, {99, 1, 0, 0}));
  EXPECT_EQ(OutValues(), (std::vector<int32_t>{4950, 100, 0, 0}));
}

TEST_F(DataPlaneTest, Int32SumsWrapWithoutUndefinedBehaviour) {
  Register(1, 2);
  Send(1, 0, 0, 0, 0, {0x7FFFFFFF, int32_t(0x80000000), -1, 0});
  Keep(Send(1, 1, 0, 0, 0, {1, -1, -1, 0}));
  EXPECT_EQ(OutValues(), (std::vector<int32_t>{int32_t(0x80000000), 0x7FFFFFFF, -2, 0}));
}

TEST(DataPlaneConfigTest, ValidationNamesTheBadValue) {
  DataPlaneConfig c;
  c.pool_slots = 0;
  EXPECT_NE(c.Validate().message().find("pool_slots=0"), std::string::npos);
  c = DataPlaneConfig{};
  c.max_elements_per_packet = 9000;
  EXPECT_NE(c.Validate().message().find("max_elements_per_packet=9000"), std::string::npos);
  EXPECT_FALSE(DataPlane::Create(c).ok());
}

// The NACK (docs/wire-format.md, "Loss recovery"): a slot that stays
// incomplete past the job's spread of arrivals is watched, again after
// twice the wait each time. A watch NACKs the missing ranks whose packet
// must have been lost (their newer chunk came); from the second watch on
// also those that wait for the slot's previous result; from the fourth
// every missing rank. A watch with none of them to name sends nothing.
TEST_F(DataPlaneTest, AStalledSlotIsNackedNamingItsMissingRanks) {
  Register(1, 4);
  dp_->AdvanceClock(Nanos(1000));
  Send(1, 3, 3, 1, 10, {1, 1, 1, 1});  // rank 3's chunk 9 never came, its chunk 10 did
  Send(1, 0, 2, 1, 9, {1, 1, 1, 1});
  Send(1, 2, 2, 1, 9, {1, 1, 1, 1});
  const Nanos due = dp_->NextTimer();
  ASSERT_NE(due, Nanos::max());
  EXPECT_GT(due, Nanos(1000));
  EXPECT_EQ(dp_->NextTimerPacket(due - Nanos(1), out_).action, Action::kDrop);  // not yet
  // The NACKs of the next watch, by slot: slot 2 (rank 3 lost, rank 1
  // behind) and slot 3 (ranks 0-2 behind).
  auto watch = [&] {
    const Nanos at = dp_->NextTimer();
    std::map<uint16_t, std::vector<int32_t>> named;
    for (Verdict v; (v = Keep(dp_->NextTimerPacket(at, out_))).action != Action::kDrop;) {
      EXPECT_EQ(v.action, Action::kNackToMissing);
      EXPECT_EQ(v.job, 1u);
      named[v.slot] = OutValues();
    }
    return named;
  };
  using Named = std::map<uint16_t, std::vector<int32_t>>;
  const Named first = watch();
  EXPECT_EQ(first, (Named{{2, {0b1000, 0b0000}}}));  // lost: rank 3
  std::vector<uint8_t> nack = Packet(1, 0, 2, 1, 9, {0b1000, 0b0000});
  nack[3] = uint8_t(MessageType::kNack);
  PacketView view;
  ASSERT_EQ(DecodePacket(nack, &view), DecodeError::kOk);
  EXPECT_TRUE(NackNames(nack, 3));
  EXPECT_FALSE(NackNames(nack, 1));
  EXPECT_EQ(dp_->counters().nacks_sent, 1u);
  EXPECT_EQ(dp_->JobCounters(JobId(1)).nacks_sent, 1u);
  // No rank waits for a previous result here: the same twice more, each
  // watch twice as long after the last.
  const Nanos second_at = dp_->NextTimer();
  EXPECT_EQ(watch(), first);
  EXPECT_GT(dp_->NextTimer() - second_at, second_at - due);
  EXPECT_EQ(watch(), first);
  // Then every missing rank.
  EXPECT_EQ(watch(), (Named{{2, {0b1000, 0b0010}}, {3, {0b0000, 0b0111}}}));
  // Once ranks 1 and 3 come slot 2 completes and is NACKed no more.
  EXPECT_EQ(Send(1, 1, 2, 1, 9, {1, 1, 1, 1}).action, Action::kDrop);
  ASSERT_EQ(Send(1, 3, 2, 1, 9, {1, 1, 1, 1}).action, Action::kSendToAll);
  EXPECT_EQ(watch().count(2), 0u);
}

// A rank counted in the slot's previous chunk but missing from this one,
// which the others started once they had that result, lost the result (or
// is slow): once it has sent nothing for the spread of arrivals, the second
// watch names it. A rank still sending earlier chunks is behind, and only
// the fourth watch names it.
TEST_F(DataPlaneTest, ARankThatWaitsForTheSlotsPreviousResultIsNackedFromTheSecondWatch) {
  for (const bool stopped : {true, false}) {
    SCOPED_TRACE(stopped ? "stopped" : "behind, still sending");
    SetUp();
    Register(1, 3);
    dp_->AdvanceClock(Nanos(1000));
    for (uint32_t chunk = 4; chunk < 8; ++chunk) {  // chunk 4 completes; rank 2 sends no more
      for (uint16_t r = 0; r < (chunk == 4 ? 3 : 2); ++r) {
        Send(1, r, uint16_t(chunk - 4), 0, chunk, {1, 1, 1, 1});
      }
    }
    Send(1, 0, 0, 1, 8, {1, 1, 1, 1});  // ranks 0 and 1 had chunk 4's result; rank 2 not yet
    Send(1, 1, 0, 1, 8, {1, 1, 1, 1});
    uint32_t next_of_rank_2 = 5;
    auto nacks_of_slot_0 = [&] {
      const Nanos at = dp_->NextTimer();
      if (!stopped && next_of_rank_2 < 8) {  // just before the watch
        dp_->AdvanceClock(at - Nanos(1));
        Send(1, 2, uint16_t(next_of_rank_2 - 4), 0, next_of_rank_2, {1, 1, 1, 1});
        ++next_of_rank_2;
      }
      std::vector<int32_t> named;
      for (Verdict v; (v = Keep(dp_->NextTimerPacket(at, out_))).action != Action::kDrop;) {
        if (v.slot == 0) named = OutValues();
      }
      return named;
    };
    EXPECT_EQ(nacks_of_slot_0(), std::vector<int32_t>{});  // the first watch is silent
    const std::vector<int32_t> rank_2 = {0b000, 0b100};
    EXPECT_EQ(nacks_of_slot_0(), stopped ? rank_2 : std::vector<int32_t>{});
    EXPECT_EQ(nacks_of_slot_0(), stopped ? rank_2 : std::vector<int32_t>{});
    EXPECT_EQ(nacks_of_slot_0(), rank_2);
  }
}

// From the fourth watch on a NACK names every missing rank. A rank named so
// answers within a turnaround (the shortest time a rank took from a result
// to its next contribution to that slot): it is named again, by a NACK of
// any slot, only once a turnaround has passed. At 1024 workers NACKs naming
// ranks that were merely behind were most of all packets on the downlinks.
// A watch that a retransmission made due names them all.
TEST_F(DataPlaneTest, EveryMissingRankIsNamedAtMostOncePerTurnaround) {
  Register(1, 3);
  constexpr Nanos kTurnaround = std::chrono::microseconds(5);
  dp_->AdvanceClock(Nanos(1000));
  for (uint16_t r = 0; r < 3; ++r) Send(1, r, 2, 0, 6, {1, 1, 1, 1});  // chunk 6 completes
  dp_->AdvanceClock(Nanos(1000) + kTurnaround);
  Send(1, 0, 2, 1, 10, {1, 1, 1, 1});  // rank 0 answers its result a turnaround later
  // Chunks 8 and 9 (slots 0 and 1) lack rank 2, which sent nothing newer:
  // behind as far as the switch knows.
  for (uint16_t slot = 0; slot < 2; ++slot) {
    for (uint16_t r = 0; r < 2; ++r) Send(1, r, slot, 0, 8 + slot, {1, 1, 1, 1});
  }
  const Nanos started = dp_->NextTimer();
  std::vector<Nanos> named_at;  // when a NACK of slot 0 or 1 named rank 2
  while (named_at.size() < 3 && dp_->NextTimer() < started + 200 * kTurnaround) {
    const Nanos at = dp_->NextTimer();
    for (Verdict v; (v = Keep(dp_->NextTimerPacket(at, out_))).action != Action::kDrop;) {
      ASSERT_EQ(v.action, Action::kNackToMissing);
      const std::vector<int32_t> bitmaps = OutValues();
      ASSERT_EQ(bitmaps.size(), 2u);
      EXPECT_EQ(bitmaps[0], 0);  // none lost
      // (Slot 2's second and third watches name it too: it waits for chunk
      // 6's result as far as the switch knows, and sent nothing since.)
      if (v.slot < 2 && (bitmaps[1] & 0b100)) named_at.push_back(at);
    }
  }
  ASSERT_EQ(named_at.size(), 3u);  // named, and again later
  for (size_t i = 1; i < named_at.size(); ++i) {
    EXPECT_GE(named_at[i] - named_at[i - 1], kTurnaround) << "naming " << i;
  }
  // A retransmission (a worker whose timer fired: it does not probe) asks for
  // a NACK that names every missing rank, however recently named.
  EXPECT_EQ(Send(1, 0, 0, 0, 8, {1, 1, 1, 1}).action, Action::kPendingToSender);
  const Verdict v = Keep(dp_->NextTimerPacket(named_at.back(), out_));
  ASSERT_EQ(v.action, Action::kNackToMissing);
  EXPECT_EQ(v.slot, 0u);
  EXPECT_EQ(OutValues(), (std::vector<int32_t>{0b000, 0b100}));
}

// Ranks drift apart by a packet or two; on a slow link that is longer than
// any spread measured between ranks that happen to be in step. The first
// NACK waits at least two of the shortest gaps between a rank's packets.
TEST_F(DataPlaneTest, TheNackDelayIsAtLeastTwoPacketTimesOfTheLink) {
  Register(1, 2);
  for (uint16_t slot = 0; slot < 2; ++slot) {  // in step, 10 us apart
    dp_->AdvanceClock(Nanos(std::chrono::microseconds(10 * slot)));
    Send(1, 0, slot, 0, slot, {1, 1, 1, 1});
    ASSERT_EQ(Send(1, 1, slot, 0, slot, {1, 1, 1, 1}).action, Action::kSendToAll);
  }
  const Nanos at = Nanos(std::chrono::microseconds(35));
  // The complete slots' watches lapse: nothing to NACK.
  EXPECT_EQ(dp_->NextTimerPacket(at, out_).action, Action::kDrop);
  EXPECT_EQ(dp_->NextTimer(), Nanos::max());
  Send(1, 0, 2, 0, 2, {1, 1, 1, 1});  // 25 us after its last: the shortest gap stays 10 us
  EXPECT_EQ(dp_->NextTimer(), at + Nanos(std::chrono::microseconds(20)));
}

// A retransmission says the sender's timer fired (a worker that does not
// probe): the slot is NACKed at once, naming every missing rank.
TEST_F(DataPlaneTest, ARetransmissionToAStalledSlotNacksTheMissingRanksAtOnce) {
  Register(1, 2);
  dp_->AdvanceClock(Nanos(1000));
  Send(1, 0, 0, 0, 4, {1, 1, 1, 1});
  const Nanos due = dp_->NextTimer();
  // Rank 0's timer fired: it gets its pending reply, and rank 1 its NACK.
  EXPECT_EQ(Send(1, 0, 0, 0, 4, {1, 1, 1, 1}).action, Action::kPendingToSender);
  EXPECT_EQ(dp_->NextTimer(), Nanos(1000));
  const Verdict v = Keep(dp_->NextTimerPacket(Nanos(1000), out_));
  ASSERT_EQ(v.action, Action::kNackToMissing);
  EXPECT_EQ(OutValues(), (std::vector<int32_t>{0b00, 0b10}));  // rank 1, behind
  EXPECT_LT(Nanos(1000), due);
}

// A rank sends its chunks in order, chunk c into slot c mod the job's slots,
// over a link that keeps order: its chunk c coming while the slot before
// still aggregates chunk c - 1 without it says that packet was lost. The
// slot is NACKed at once, naming that rank only; a rank already counted
// there wakes nothing, nor does a chunk whose predecessor is not there.
TEST_F(DataPlaneTest, ARanksNextChunkNacksTheChunkItLostAtOnce) {
  Register(1, 3);
  dp_->AdvanceClock(Nanos(1000));
  Send(1, 0, 3, 0, 3, {1, 1, 1, 1});  // chunk 3: ranks 0 and 1, rank 2's was lost
  Send(1, 1, 3, 0, 3, {1, 1, 1, 1});
  const Nanos watch = dp_->NextTimer();
  ASSERT_GT(watch, Nanos(1000));
  Send(1, 0, 0, 1, 4, {1, 1, 1, 1});  // rank 0's chunk 4: counted in chunk 3
  EXPECT_EQ(dp_->NextTimer(), watch);
  Send(1, 1, 2, 1, 6, {1, 1, 1, 1});  // rank 1's chunk 6: slot 1 holds no chunk 5
  EXPECT_EQ(dp_->NextTimer(), watch);
  Send(1, 2, 0, 1, 4, {1, 1, 1, 1});  // rank 2's chunk 4: its chunk 3 was lost
  EXPECT_EQ(dp_->NextTimer(), Nanos(1000));
  const Verdict v = Keep(dp_->NextTimerPacket(Nanos(1000), out_));
  ASSERT_EQ(v.action, Action::kNackToMissing);
  EXPECT_EQ(v.slot, 3u);
  EXPECT_EQ(OutValues(), (std::vector<int32_t>{0b100, 0b000}));  // rank 2, lost
}

// A NACK is lost as often as any packet, and nothing else tells its rank:
// while the resend does not come, the lost rank is named again twice the
// job's shortest turnaround after each NACK, doubling per repeat. Repeats
// name the lost ranks only (not a rank merely behind) and leave the stall's
// own schedule as it was; the resend ends them.
TEST_F(DataPlaneTest, ANackNamingALostPacketIsRepeatedUntilTheResendComes) {
  LoseRank2sChunk3();
  const Nanos lost_at = kLostAt;
  std::vector<Nanos> named_at;
  for (int i = 0; i < 4; ++i) {
    const Nanos at = i == 0 ? lost_at : dp_->NextTimer();  // (lapsed watches lie before)
    ASSERT_LT(at, lost_at + 100 * kTurnaround) << "NACK " << i;
    const Verdict v = Keep(dp_->NextTimerPacket(at, out_));
    ASSERT_EQ(v.action, Action::kNackToMissing) << "NACK " << i;
    ASSERT_EQ(v.slot, 3u);
    EXPECT_EQ(OutValues(), (std::vector<int32_t>{0b0100, 0b0000})) << "NACK " << i;
    named_at.push_back(at);
  }
  EXPECT_EQ(named_at, (std::vector<Nanos>{lost_at, lost_at + 2 * kTurnaround,
                                          lost_at + 6 * kTurnaround, lost_at + 14 * kTurnaround}));
  // The resend comes (rank 3 still misses): the fifth repeat names no one,
  // and the stall's own schedule goes on.
  dp_->AdvanceClock(lost_at + 15 * kTurnaround);
  EXPECT_EQ(Send(1, 2, 3, 0, 3, {1, 1, 1, 1}).action, Action::kDrop);
  const Nanos fifth = lost_at + 30 * kTurnaround;
  EXPECT_EQ(dp_->NextTimer(), fifth);
  EXPECT_EQ(dp_->NextTimerPacket(fifth, out_).action, Action::kDrop);
  EXPECT_GT(dp_->NextTimer(), fifth);
  EXPECT_EQ(dp_->counters().nacks_sent, 4u);
}

// The repeats of a slot's NACK double their wait, but a rank named lost for
// the first time starts over: the NACK that first named it may be the one
// lost, and its repeat comes two turnarounds later, not at the slot's next
// (doubled) repeat.
TEST_F(DataPlaneTest, ARankNamedLostLaterHasItsNackRepeatedAfterTwoTurnarounds) {
  LoseRank2sChunk3();
  const Nanos lost_at = kLostAt;
  const auto next_nack = [&](Nanos at, int32_t lost) {
    const Verdict v = Keep(dp_->NextTimerPacket(at, out_));
    ASSERT_EQ(v.action, Action::kNackToMissing);
    ASSERT_EQ(v.slot, 3u);
    EXPECT_EQ(OutValues(), (std::vector<int32_t>{lost, 0b0000}));
  };
  next_nack(lost_at, 0b0100);
  ASSERT_EQ(dp_->NextTimer(), lost_at + 2 * kTurnaround);
  next_nack(lost_at + 2 * kTurnaround, 0b0100);
  ASSERT_EQ(dp_->NextTimer(), lost_at + 6 * kTurnaround);
  next_nack(lost_at + 6 * kTurnaround, 0b0100);
  // Rank 3's chunk 4 comes without its chunk 3: lost too, named at once.
  const Nanos later = lost_at + 7 * kTurnaround;
  dp_->AdvanceClock(later);
  Send(1, 3, 0, 1, 4, {1, 1, 1, 1});
  ASSERT_EQ(dp_->NextTimer(), later);
  next_nack(later, 0b1100);
  // Its repeat two turnarounds later (the slot's own next repeat was due 8
  // turnarounds after the third NACK), then twice as far apart again.
  EXPECT_EQ(dp_->NextTimer(), later + 2 * kTurnaround);
  next_nack(later + 2 * kTurnaround, 0b1100);
  EXPECT_EQ(dp_->NextTimer(), later + 6 * kTurnaround);
}

// A turnaround measured within one receive batch is 0: a repeat still waits
// twice the least NACK delay (500 ns), not 0 (which named the rank again and
// again in the same instant, and the switch answered nothing else).
TEST_F(DataPlaneTest, ANackRepeatAfterAZeroTurnaroundWaitsTheLeastNackDelay) {
  Register(1, 3);
  const Nanos t(1000);
  dp_->AdvanceClock(t);
  for (uint16_t r = 0; r < 3; ++r) Send(1, r, 1, 0, 1, {1, 1, 1, 1});
  Send(1, 0, 1, 1, 5, {1, 1, 1, 1});  // in the same instant as chunk 1's result
  Send(1, 0, 3, 0, 3, {1, 1, 1, 1});
  Send(1, 1, 3, 0, 3, {1, 1, 1, 1});
  Send(1, 2, 0, 1, 4, {1, 1, 1, 1});  // rank 2's chunk 3 was lost
  ASSERT_EQ(Keep(dp_->NextTimerPacket(t, out_)).action, Action::kNackToMissing);
  EXPECT_EQ(OutValues(), (std::vector<int32_t>{0b100, 0b000}));
  const Nanos repeat_at = t + Nanos(1000);
  Nanos named_again = Nanos::max();
  while (named_again == Nanos::max() && dp_->NextTimer() <= repeat_at) {
    const Nanos at = dp_->NextTimer();
    const Verdict v = Keep(dp_->NextTimerPacket(at, out_));
    if (v.action == Action::kNackToMissing && v.slot == 3) named_again = at;
  }
  EXPECT_EQ(named_again, repeat_at);
  EXPECT_EQ(OutValues(), (std::vector<int32_t>{0b100, 0b000}));
}

// With two threads per rank, each sends the chunks of its own slots in
// order, but not in order with the other: a thread's first chunk says
// nothing about the other thread's last slot. Within a thread, the slot
// before its first is its last.
TEST_F(DataPlaneTest, ANewerChunkNacksOnlyWithinTheSendingThreadsSlots) {
  JobRegistration job{JobId(1), 2, kK, 0, 4};
  job.threads = 2;  // thread 0: slots 0 and 1; thread 1: slots 2 and 3
  ASSERT_TRUE(dp_->RegisterJob(job).ok());
  dp_->AdvanceClock(Nanos(1000));
  Send(1, 0, 1, 0, 1, {1, 1, 1, 1});  // thread 0's chunk 1, without rank 1's
  const Nanos watch = dp_->NextTimer();
  ASSERT_GT(watch, Nanos(1000));
  Send(1, 1, 2, 0, 2, {1, 1, 1, 1});  // thread 1's first chunk: not a loss in slot 1
  EXPECT_GT(dp_->NextTimer(), Nanos(1000));
  EXPECT_EQ(dp_->NextTimerPacket(Nanos(1000), out_).action, Action::kDrop);
  ASSERT_EQ(Send(1, 0, 2, 0, 2, {1, 1, 1, 1}).action, Action::kSendToAll);
  Send(1, 0, 3, 0, 3, {1, 1, 1, 1});  // thread 1's chunk 3, without rank 1's
  Send(1, 1, 2, 1, 4, {1, 1, 1, 1});  // rank 1's thread 1 wrapped: its chunk 3 was lost
  EXPECT_EQ(dp_->NextTimer(), Nanos(1000));
  const Verdict v = Keep(dp_->NextTimerPacket(Nanos(1000), out_));
  ASSERT_EQ(v.action, Action::kNackToMissing);
  EXPECT_EQ(v.slot, 3u);
  EXPECT_EQ(OutValues(), (std::vector<int32_t>{0b10, 0b00}));  // rank 1, lost
  job.id = JobId(2);
  job.pool_base = 8;
  job.threads = 5;  // more threads than slots
  EXPECT_EQ(dp_->RegisterJob(job).code(), StatusCode::kInvalidArgument);
}

// Nor does a newer chunk from another thread of the rank prove a loss when
// a stalled slot's watch falls due: the rank is behind there, not lost.
TEST_F(DataPlaneTest, AnotherThreadsNewerChunkDoesNotCallAPacketLost) {
  JobRegistration job{JobId(1), 2, kK, 0, 4};
  job.threads = 2;
  ASSERT_TRUE(dp_->RegisterJob(job).ok());
  dp_->AdvanceClock(Nanos(1000));
  Send(1, 0, 1, 0, 1, {1, 1, 1, 1});  // thread 0's chunk 1, without rank 1's
  Send(1, 1, 2, 0, 2, {1, 1, 1, 1});  // rank 1's thread 1 is further on
  const Nanos watch = dp_->NextTimer();
  ASSERT_GT(watch, Nanos(1000));
  dp_->AdvanceClock(watch);
  // The first watches name only ranks proven lost: none.
  EXPECT_EQ(dp_->NextTimerPacket(watch, out_).action, Action::kDrop);
  EXPECT_EQ(dp_->counters().nacks_sent, 0u);
}

// A multipath fabric reorders: a first transmission overtaken by its rank's
// next chunk that still comes shows how late packets run. From then on the
// switch waits that long, and a quarter more (at most a rank's quickest
// turnaround from a result to its next contribution), before it calls an
// overtaken packet lost. A resend (flagged) widens nothing.
TEST_F(DataPlaneTest, APacketOvertakenYetDeliveredDelaysTheNextLossCallByItsLateness) {
  ASSERT_NO_FATAL_FAILURE(LearnAReorderingWindowOf625Ns());
  dp_->AdvanceClock(Nanos(4000));
  Send(1, 0, 3, 0, 3, {1, 1, 1, 1});  // rank 0's chunk 3 overtakes its chunk 2
  EXPECT_EQ(Keep(dp_->NextTimerPacket(Nanos(4000 + 624), out_)).action, Action::kDrop);
  const Verdict v = Keep(dp_->NextTimerPacket(Nanos(4000 + 625), out_));
  ASSERT_EQ(v.action, Action::kNackToMissing);
  EXPECT_EQ(v.slot, 2u);
  EXPECT_EQ(OutValues(), (std::vector<int32_t>{0b01, 0b00}));  // rank 0, lost
  // Its resend, 2,625 ns after chunk 3 overtook it, leaves the window as the
  // loss made it (a sixteenth less), as the next overtaken packet shows.
  dp_->AdvanceClock(Nanos(6625));
  std::vector<uint8_t> resend = Packet(1, 0, 2, 0, 2, {1, 1, 1, 1});
  resend[kFlagsOffset] |= kFlagResend;
  EXPECT_EQ(dp_->Process(resend, out_).action, Action::kSendToAll);
  dp_->AdvanceClock(Nanos(6700));
  Send(1, 1, 0, 1, 4, {1, 1, 1, 1});  // rank 1's chunk 4 overtakes its chunk 3
  const Nanos due(6700 + 625 - 625 / 16);
  EXPECT_EQ(Keep(dp_->NextTimerPacket(due - Nanos(1), out_)).action, Action::kDrop);
  const Verdict w = Keep(dp_->NextTimerPacket(due, out_));
  ASSERT_EQ(w.action, Action::kNackToMissing);
  EXPECT_EQ(w.slot, 3u);
  EXPECT_EQ(OutValues(), (std::vector<int32_t>{0b10, 0b00}));  // rank 1, lost
}

// A stall's watch that falls due while a packet overtaken within the
// reordering window may still come names it nowhere, and looks again at
// twice the window at the latest instead of after the stall's doubling
// delay.
TEST_F(DataPlaneTest, AWatchWithinTheReorderingWindowLooksAgainWhenTwiceTheWindowHasPassed) {
  // Chunk 2 (rank 1's, at 3,100 ns) is watched at 3,100 + 4,000: two gaps.
  ASSERT_NO_FATAL_FAILURE(LearnAReorderingWindowOf625Ns());
  dp_->AdvanceClock(Nanos(6800));
  Send(1, 0, 3, 0, 3, {1, 1, 1, 1});  // rank 0's chunk 3 overtakes its chunk 2
  // Chunk 2's watch, 300 ns into the window: rank 0 may still come.
  EXPECT_EQ(Keep(dp_->NextTimerPacket(Nanos(7100), out_)).action, Action::kDrop);
  EXPECT_EQ(Keep(dp_->NextTimerPacket(Nanos(6800 + 2 * 625 - 1), out_)).action, Action::kDrop);
  const Verdict v = Keep(dp_->NextTimerPacket(Nanos(6800 + 2 * 625), out_));
  ASSERT_EQ(v.action, Action::kNackToMissing);
  EXPECT_EQ(v.slot, 2u);
  EXPECT_EQ(OutValues(), (std::vector<int32_t>{0b01, 0b00}));  // rank 0, lost
}

TEST_F(DataPlaneTest, ANackSentToTheSwitchIsDroppedAsNotAContribution) {
  Register(1, 2);
  std::vector<uint8_t> nack = Packet(1, 0, 0, 0, 0, {1});
  nack[3] = uint8_t(MessageType::kNack);
  EXPECT_EQ(dp_->Process(nack, out_).reason, DropReason::kNotContribution);
  nack[4] = 0x7F;  // and for a job the switch does not hold
  EXPECT_EQ(dp_->Process(nack, out_).reason, DropReason::kNotContribution);
  EXPECT_EQ(dp_->counters().drops[size_t(DropReason::kNotContribution)], 2u);
  EXPECT_EQ(dp_->counters().contributions, 0u);
}

// In a tree, a NACK from the upstream makes the rack switch send its
// partial sum again at once, and a NACK for anything else is dropped.
TEST_F(DataPlaneTest, AnUpstreamNackResendsThePartialSumThatAwaits) {
  JobRegistration share{JobId(2), 2, kK, 0, 4};
  share.upstream = UpstreamLink{JobId(40), 1, std::chrono::milliseconds(50)};
  ASSERT_TRUE(dp_->RegisterJob(share).ok());
  Send(2, 0, 1, 0, 6, {1, 2, 3, 4});
  ASSERT_EQ(Send(2, 1, 1, 0, 6, {1, 1, 1, 1}).action, Action::kSendUpstream);
  PacketHeader h;
  h.type = MessageType::kNack;
  h.job = 40;
  h.chunk = 6;
  h.rank = kAllRanks;
  h.slot = 1;
  h.element_count = 1;
  std::vector<uint8_t> nack(PacketBytes(1));
  EncodeHeader(h, nack);
  StoreBe32(&nack[kHeaderBytes], 0b10);
  const Verdict v = Keep(dp_->Process(nack, out_));
  ASSERT_EQ(v.action, Action::kSendUpstream);
  EXPECT_EQ(OutHeader().type, MessageType::kContribution);
  EXPECT_EQ(OutHeader().job, 40u);
  EXPECT_EQ(OutValues(), (std::vector<int32_t>{2, 3, 4, 5}));
  EXPECT_EQ(dp_->counters().upstream_resent, 1u);
  h.chunk = 7;  // not what awaits
  EncodeHeader(h, nack);
  EXPECT_EQ(dp_->Process(nack, out_).reason, DropReason::kStaleChunk);
}

// A probe asks for a slot's state and never counts in: a rank whose
// contribution is in gets the result of a complete slot (its result was
// lost), or a pending reply listing the contributors.
TEST_F(DataPlaneTest, AProbeGetsTheResultOrThePendingReplyAndNeverCountsIn) {
  Register(1, 3);
  dp_->AdvanceClock(Nanos(1000));
  Send(1, 0, 0, 0, 5, {1, 2, 3, 4});
  const Nanos due = dp_->NextTimer();
  Verdict v = Probe(1, 0, 0, 0, 5);
  ASSERT_EQ(v.action, Action::kPendingToSender);
  EXPECT_EQ(v.rank, 0);
  EXPECT_EQ(OutHeader().type, MessageType::kPending);
  EXPECT_EQ(OutHeader().chunk, 5u);
  EXPECT_EQ(OutValues(), (std::vector<int32_t>{0b001}));
  // Unlike a retransmission, it does not call the slot stalled.
  EXPECT_GT(due, Nanos(1000));
  EXPECT_EQ(dp_->NextTimer(), due);
  Send(1, 1, 0, 0, 5, {1, 1, 1, 1});
  ASSERT_EQ(Send(1, 2, 0, 0, 5, {1, 1, 1, 1}).action, Action::kSendToAll);
  v = Probe(1, 2, 0, 0, 5);
  ASSERT_EQ(v.action, Action::kReplyToSender);
  EXPECT_EQ(OutHeader().type, MessageType::kResult);
  EXPECT_EQ(OutHeader().rank, 2);
  EXPECT_EQ(OutValues(), (std::vector<int32_t>{3, 4, 5, 6}));
  EXPECT_EQ(dp_->counters().contributions, 3u);
  EXPECT_EQ(dp_->counters().results_resent, 1u);
  EXPECT_EQ(dp_->counters().pending_replies, 1u);
}

// A rank whose contribution the slot lacks (lost: the probe came after it
// on the same link) learns so from the pending reply, whether the others
// started the chunk or not.
TEST_F(DataPlaneTest, AProbeTellsARankThatItsContributionIsMissing) {
  Register(1, 3);
  Send(1, 0, 1, 0, 9, {1, 1, 1, 1});
  ASSERT_EQ(Probe(1, 2, 1, 0, 9).action, Action::kPendingToSender);
  EXPECT_EQ(OutHeader().chunk, 9u);
  EXPECT_EQ(OutValues(), (std::vector<int32_t>{0b001}));  // rank 2 is not in
  // A chunk no rank has brought yet: nobody is in.
  ASSERT_EQ(Probe(1, 2, 2, 0, 10).action, Action::kPendingToSender);
  EXPECT_EQ(OutHeader().chunk, 10u);
  EXPECT_EQ(OutValues(), (std::vector<int32_t>{0}));
  EXPECT_EQ(dp_->counters().contributions, 1u);
}

TEST_F(DataPlaneTest, BadProbesAreDroppedUnderTheirReason) {
  Register(1, 2);
  Send(1, 0, 0, 0, 5, {1, 1, 1, 1});
  Send(1, 1, 0, 0, 5, {1, 1, 1, 1});
  Send(1, 0, 0, 1, 6, {1, 1, 1, 1});  // rank 0 moved on to version 1
  // Rank 0 had the result of chunk 5 (it sent chunk 6): a late probe.
  EXPECT_EQ(Probe(1, 0, 0, 0, 5).reason, DropReason::kStaleChunk);
  EXPECT_EQ(Probe(1, 1, 0, 0, 4).reason, DropReason::kStaleChunk);  // older than the slot's
  EXPECT_EQ(Probe(9, 0, 0, 0, 5).reason, DropReason::kUnknownJob);
  EXPECT_EQ(Probe(1, 2, 0, 0, 5).reason, DropReason::kRankOutOfRange);
  EXPECT_EQ(Probe(1, 0, 4, 0, 5).reason, DropReason::kSlotOutOfRange);
  std::vector<uint8_t> with_values = Packet(1, 0, 0, 1, 6, {1, 1, 1, 1});
  with_values[3] = uint8_t(MessageType::kProbe);
  EXPECT_EQ(dp_->Process(with_values, out_).reason, DropReason::kElementCount);
  EXPECT_EQ(dp_->counters().contributions, 3u);
}

}  // namespace
}  // namespace switchml
