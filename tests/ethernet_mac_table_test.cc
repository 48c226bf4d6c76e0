// The AF_XDP endpoint's MAC table: learned, pinned and resolved entries, their
// precedence, sets that fill up, and misses recorded once.
#include <gtest/gtest.h>

#include <set>
#include <vector>

#include "transport/ethernet/mac_table.h"

namespace switchml::transport::ethernet {
namespace {

Mac M(uint8_t n) { return {2, 0, 0, 0, 0, n}; }

TEST(MacTable, EmptyTableMissesEverything) {
  MacTable t;
  EXPECT_EQ(t.Find(0x0a000001), nullptr);
  EXPECT_EQ(t.Find(0), nullptr);
  EXPECT_TRUE(t.misses().empty());
}

TEST(MacTable, LearnedMacsAreFoundAndUpdated) {
  MacTable t;
  t.Learn(0x0a000001, M(1));
  t.Learn(0x0a000002, M(2));
  ASSERT_NE(t.Find(0x0a000001), nullptr);
  EXPECT_EQ(*t.Find(0x0a000001), M(1));
  EXPECT_EQ(*t.Find(0x0a000002), M(2));
  t.Learn(0x0a000001, M(9));  // the peer's frames now come from another MAC
  EXPECT_EQ(*t.Find(0x0a000001), M(9));
  EXPECT_EQ(t.Find(0x0a000003), nullptr);
}

TEST(MacTable, TheZeroAddressIsNeverStored) {
  MacTable t;
  t.Learn(0, M(1));
  t.Resolved(0, M(1));
  EXPECT_TRUE(t.Pin(0, M(1)));
  t.Miss(0);
  EXPECT_EQ(t.Find(0), nullptr);
  EXPECT_TRUE(t.misses().empty());
}

TEST(MacTable, ThousandsOfLearnedPeersMostlySurvive) {
  // 512 peers in 1024 entries: each set holds up to kWays, so only peers of
  // a set with more than kWays of them can be evicted, and the table keeps
  // every other one.
  MacTable t;
  for (uint32_t i = 1; i <= 512; ++i) t.Learn(0x0a000000 + i, M(uint8_t(i)));
  size_t found = 0;
  for (uint32_t i = 1; i <= 512; ++i) {
    const Mac* mac = t.Find(0x0a000000 + i);
    if (mac != nullptr) {
      EXPECT_EQ(*mac, M(uint8_t(i)));
      ++found;
    }
  }
  EXPECT_GE(found, 500u);
  EXPECT_LE(found, 512u);
}

TEST(MacTable, AFullSetReplacesItsEntriesInTurnAndTheEvictedMiss) {
  // Learn addresses until one is evicted: the first eviction is of the
  // set's first-learned entry (its entries are replaced in turn).
  MacTable t;
  std::vector<uint32_t> learned;
  uint32_t evicted = 0;
  for (uint32_t a = 0x0a000001; evicted == 0; ++a) {
    t.Learn(a, M(uint8_t(a)));
    learned.push_back(a);
    for (uint32_t b : learned) {
      if (t.Find(b) == nullptr) evicted = b;
    }
    ASSERT_LT(learned.size(), 100000u);
  }
  // Exactly one was lost, and it was learned before the kWays that now hold
  // its set (the newest address is among them).
  size_t lost = 0;
  for (uint32_t b : learned) lost += t.Find(b) == nullptr;
  EXPECT_EQ(lost, 1u);
  EXPECT_NE(t.Find(learned.back()), nullptr);
  // The evicted peer is resolved after its miss, and found again.
  t.Miss(evicted);
  ASSERT_EQ(t.misses().size(), 1u);
  EXPECT_EQ(t.misses()[0], evicted);
  t.Resolved(evicted, M(77));
  ASSERT_NE(t.Find(evicted), nullptr);
  EXPECT_EQ(*t.Find(evicted), M(77));
}

TEST(MacTable, LearnedBeatsPinnedBeatsResolved) {
  MacTable t;
  t.Resolved(0x0a000001, M(3));
  EXPECT_EQ(*t.Find(0x0a000001), M(3));
  ASSERT_TRUE(t.Pin(0x0a000001, M(2)));
  EXPECT_EQ(*t.Find(0x0a000001), M(2));
  t.Learn(0x0a000001, M(1));  // what its frames say is the freshest
  EXPECT_EQ(*t.Find(0x0a000001), M(1));
}

TEST(MacTable, PinnedPeersAreKeptAndBounded) {
  MacTable t;
  for (uint32_t i = 1; i <= MacTable::kMaxPinned; ++i) {
    ASSERT_TRUE(t.Pin(0x0b000000 + i, M(uint8_t(i))));
  }
  EXPECT_FALSE(t.Pin(0x0c000000, M(1)));  // full
  EXPECT_TRUE(t.Pin(0x0b000001, M(99)));  // an update still fits
  EXPECT_EQ(*t.Find(0x0b000001), M(99));
  // Learning thousands of others never evicts a pinned peer.
  for (uint32_t i = 1; i <= 4096; ++i) t.Learn(0x0d000000 + i, M(5));
  for (uint32_t i = 1; i <= MacTable::kMaxPinned; ++i) EXPECT_NE(t.Find(0x0b000000 + i), nullptr);
  EXPECT_EQ(t.Find(0x0c000000), nullptr);
}

TEST(MacTable, ResolvedEntriesAreReplacedInTurnWhenFull) {
  MacTable t;
  for (uint32_t i = 1; i <= MacTable::kMaxResolved; ++i) t.Resolved(0x0e000000 + i, M(1));
  t.Resolved(0x0e000001, M(2));  // an update takes no new entry
  for (uint32_t i = 1; i <= MacTable::kMaxResolved; ++i) EXPECT_NE(t.Find(0x0e000000 + i), nullptr);
  t.Resolved(0x0f000001, M(3));  // one more replaces the oldest entry
  EXPECT_EQ(*t.Find(0x0f000001), M(3));
  EXPECT_EQ(t.Find(0x0e000001), nullptr);
  EXPECT_NE(t.Find(0x0e000002), nullptr);
}

TEST(MacTable, MissesAreRecordedOnceAndBounded) {
  MacTable t;
  t.Miss(0x0a000001);
  t.Miss(0x0a000001);
  t.Miss(0x0a000002);
  ASSERT_EQ(t.misses().size(), 2u);
  EXPECT_EQ(t.misses()[0], 0x0a000001u);
  EXPECT_EQ(t.misses()[1], 0x0a000002u);
  for (uint32_t i = 0; i < 100; ++i) t.Miss(0x0b000000 + i);
  EXPECT_EQ(t.misses().size(), MacTable::kMaxMisses);
  std::set<uint32_t> distinct(t.misses().begin(), t.misses().end());
  EXPECT_EQ(distinct.size(), MacTable::kMaxMisses);
  t.ClearMisses();
  EXPECT_TRUE(t.misses().empty());
  t.Miss(0x0a000001);  // recorded again after a resolution round
  EXPECT_EQ(t.misses().size(), 1u);
}

}  // namespace
}  // namespace switchml::transport::ethernet
