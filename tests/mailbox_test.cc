#include "common/mailbox.h"

#include <gtest/gtest.h>
#include <poll.h>

#include <algorithm>
#include <thread>

namespace switchml {
namespace {

bool Readable(int fd) {
  pollfd p{fd, POLLIN, 0};
  return poll(&p, 1, 0) == 1;
}

TEST(Mailbox, DeliversInOrderAndWakesThePoller) {
  Mailbox<int> box;
  EXPECT_FALSE(Readable(box.fd()));
  EXPECT_FALSE(box.pending());
  ASSERT_TRUE(box.Post(1));
  ASSERT_TRUE(box.Post(2));
  EXPECT_TRUE(box.pending());
  EXPECT_TRUE(Readable(box.fd()));
  EXPECT_EQ(box.Take(), (std::vector<int>{1, 2}));
  EXPECT_FALSE(box.pending());
  EXPECT_FALSE(Readable(box.fd()));  // Take() clears the wakeup
  box.Wake();
  EXPECT_TRUE(Readable(box.fd()));
  EXPECT_TRUE(box.Take().empty());
}

TEST(Mailbox, AfterCloseNothingIsQueuedAndTheRestIsReturned) {
  Mailbox<int> box;
  ASSERT_TRUE(box.Post(7));
  EXPECT_EQ(box.Close(), std::vector<int>{7});
  EXPECT_FALSE(box.Post(8));  // the caller handles it
  EXPECT_TRUE(box.Take().empty());
}

TEST(Mailbox, ManyPostersLoseNothing) {
  Mailbox<int> box;
  std::vector<std::thread> posters;
  for (int t = 0; t < 4; ++t) {
    posters.emplace_back([&box, t] {
      for (int i = 0; i < 1000; ++i) ASSERT_TRUE(box.Post(t * 1000 + i));
    });
  }
  std::vector<int> seen;
  while (seen.size() < 4000) {
    pollfd p{box.fd(), POLLIN, 0};
    poll(&p, 1, 100);
    for (int v : box.Take()) seen.push_back(v);
  }
  for (auto& t : posters) t.join();
  std::sort(seen.begin(), seen.end());
  for (int i = 0; i < 4000; ++i) ASSERT_EQ(seen[size_t(i)], i);
}

}  // namespace
}  // namespace switchml
