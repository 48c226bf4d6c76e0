#include "common/thread_split.h"

#include <gtest/gtest.h>

namespace switchml {
namespace {

// Every item has exactly one owner, the shares tile [0, items) in order, and
// ThreadOf names the share that holds each item.
TEST(ThreadSplit, SharesTileTheItemsAndThreadOfFindsTheOwner) {
  for (uint64_t items = 1; items <= 70; ++items) {
    for (uint32_t threads = 1; threads <= items && threads <= 64; ++threads) {
      uint64_t next = 0;
      for (uint32_t t = 0; t < threads; ++t) {
        const ThreadRange r = ThreadShare(items, t, threads);
        ASSERT_EQ(r.begin, next) << items << " items, " << threads << " threads";
        ASSERT_GE(r.size(), items / threads);
        ASSERT_LE(r.size(), items / threads + 1);
        for (uint64_t i = r.begin; i < r.end; ++i) {
          ASSERT_EQ(ThreadOf(i, items, threads), t) << "item " << i << " of " << items;
        }
        next = r.end;
      }
      ASSERT_EQ(next, items);
    }
  }
}

TEST(ThreadSplit, LargeCountsDoNotOverflow) {
  const uint64_t chunks = uint64_t(1) << 40;
  EXPECT_EQ(ThreadShare(chunks, 63, 64).end, chunks);
  EXPECT_EQ(ThreadOf(chunks - 1, chunks, 64), 63u);
}

}  // namespace
}  // namespace switchml
