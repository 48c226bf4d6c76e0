// The random trace that the BMv2 scenario replays through the P4 switch
// (tests/p4/random_trace.h) must reach every path worth comparing; checked
// here on the software data plane alone, so that a machine without BMv2
// notices when it stops doing so. (It once did: with version conflicts
// dropped, early packets left slots stuck, and 300 packets completed 8 slots
// and hit no chunk mismatch.)
#include "p4/random_trace.h"

#include <gtest/gtest.h>

#include <cstdio>

namespace switchml::p4test {
namespace {

TEST(RandomTrace, ReachesEveryPathTheBmv2ScenarioCompares) {
  RandomTrace trace(JobId(7), 3, 2, 100, 64, kRandomTraceSeed);
  ASSERT_TRUE(trace.registered().ok()) << trace.registered().ToString();
  for (int i = 0; i < kRandomTracePackets; ++i) (void)trace.Next();
  const DataPlaneCounters& c = trace.counters();
  std::printf(
      "trace: %llu contributions, %llu slots completed, %llu results resent, %llu pending, "
      "%llu dropped, %llu NACKs, %llu probes answered\n",
      (unsigned long long)c.contributions, (unsigned long long)c.slots_completed,
      (unsigned long long)c.results_resent, (unsigned long long)c.pending_replies,
      (unsigned long long)c.TotalDrops(), (unsigned long long)trace.nacks(),
      (unsigned long long)trace.probes_answered());
  EXPECT_GT(c.slots_completed, 10u);
  EXPECT_GT(c.results_resent, 5u);
  EXPECT_GT(c.pending_replies, 5u);
  EXPECT_GT(trace.nacks(), 5u);
  EXPECT_GT(trace.probes_answered(), 5u);
  for (DropReason r :
       {DropReason::kStaleChunk, DropReason::kChunkMismatch, DropReason::kVersionConflict,
        DropReason::kExponentMismatch, DropReason::kRankOutOfRange, DropReason::kSlotOutOfRange,
        DropReason::kNotContribution, DropReason::kElementCount}) {
    SCOPED_TRACE(DropReasonName(r));
    EXPECT_GT(c.drops[size_t(r)], 0u);
  }
}

}  // namespace
}  // namespace switchml::p4test
