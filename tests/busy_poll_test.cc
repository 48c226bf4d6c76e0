#include "net/busy_poll.h"

#include <gtest/gtest.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <chrono>
#include <thread>

namespace switchml::net {
namespace {

using std::chrono::microseconds;
using std::chrono::milliseconds;
using std::chrono::nanoseconds;
using std::chrono::seconds;

class EventFd {
 public:
  EventFd() : fd_(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {}
  ~EventFd() { close(fd_); }
  void Signal() const {
    const uint64_t one = 1;
    ASSERT_EQ(write(fd_, &one, sizeof(one)), ssize_t(sizeof(one)));
  }
  pollfd Readable() const { return {fd_, POLLIN, 0}; }

 private:
  int fd_;
};

TEST(SpinThenPoll, AReadyDescriptorReturnsAtOnce) {
  EventFd e;
  e.Signal();
  for (auto spin : {microseconds(0), microseconds(200), microseconds(seconds(60))}) {
    pollfd fd = e.Readable();
    EXPECT_EQ(SpinThenPoll(&fd, 1, nullptr, spin, seconds(60)), 1);
    EXPECT_TRUE(fd.revents & POLLIN);
  }
}

TEST(SpinThenPoll, NothingReadyEndsAtTheTimeout) {
  EventFd e;
  // Spinning for part, all or (capped) more than all of the timeout.
  for (auto spin : {microseconds(0), microseconds(500), microseconds(2000), microseconds(5000)}) {
    pollfd fd = e.Readable();
    EXPECT_EQ(SpinThenPoll(&fd, 1, nullptr, spin, milliseconds(2)), 0) << spin.count();
    EXPECT_EQ(fd.revents, 0);
  }
}

// Whether the datagram comes while the thread spins or after it went to
// sleep, the call returns with it, long before its timeout.
TEST(SpinThenPoll, DataWakesItWhileSpinningAndWhileAsleep) {
  for (auto spin : {microseconds(seconds(60)), microseconds(100)}) {
    EventFd e;
    std::thread writer([&] {
      std::this_thread::sleep_for(milliseconds(20));
      e.Signal();
    });
    pollfd fd = e.Readable();
    EXPECT_EQ(SpinThenPoll(&fd, 1, nullptr, spin, seconds(60)), 1);
    EXPECT_TRUE(fd.revents & POLLIN);
    writer.join();
  }
}

// A poll-mode source, ready from its `ready_at`-th poll on.
struct CountingSource final : PolledSource {
  explicit CountingSource(int ready_at) : ready_at(ready_at) {}
  bool Ready() override { return ++polls >= ready_at; }
  int ready_at;
  int polls = 0;
};

TEST(SpinThenPoll, APolledSourceWakesItWhileSpinningAndBetweenNaps) {
  for (const nanoseconds spin : {nanoseconds(0), nanoseconds(seconds(60))}) {
    EventFd e;
    pollfd fd = e.Readable();
    CountingSource source(3);
    EXPECT_EQ(SpinThenPoll(&fd, 1, &source, spin, seconds(60)), 1) << spin.count();
    EXPECT_EQ(source.polls, 3) << spin.count();
  }
}

TEST(SpinThenPoll, ASourceNeverReadyEndsAtTheTimeoutAndADescriptorStillWakesIt) {
  EventFd e;
  pollfd fd = e.Readable();
  CountingSource never(INT32_MAX);
  EXPECT_EQ(SpinThenPoll(&fd, 1, &never, nanoseconds(0), milliseconds(2)), 0);
  EXPECT_GE(never.polls, 2);
  e.Signal();
  EXPECT_EQ(SpinThenPoll(&fd, 1, &never, nanoseconds(0), seconds(60)), 1);
}

TEST(SpinThenPoll, WatchesEveryDescriptor) {
  EventFd a, b;
  b.Signal();
  pollfd fds[2] = {a.Readable(), b.Readable()};
  EXPECT_EQ(SpinThenPoll(fds, 2, nullptr, microseconds(200), seconds(60)), 1);
  EXPECT_EQ(fds[0].revents, 0);
  EXPECT_TRUE(fds[1].revents & POLLIN);
}

// ---- the adaptive budget (no clock: the waits are given)

TEST(SpinBudget, StartsAtTheLargestAndKeepsItWhileSpinsCatchTheData) {
  SpinBudget b(microseconds(200));
  EXPECT_EQ(b.spin(), microseconds(200));
  for (int i = 0; i < 100; ++i) b.Record(microseconds(30), true);
  EXPECT_EQ(b.spin(), microseconds(200));
}

TEST(SpinBudget, WaitsLongerThanTheLargestShrinkItToZero) {
  SpinBudget b(microseconds(200));
  const microseconds expected[] = {microseconds(100), microseconds(50), microseconds(25),
                                   microseconds(0), microseconds(0)};
  for (microseconds e : expected) {
    b.Record(microseconds(900), true);  // data, but long after any spin would have ended
    EXPECT_EQ(b.spin(), e);
  }
  // Timeouts longer than the largest budget count the same.
  SpinBudget t(microseconds(200));
  t.Record(milliseconds(1), false);
  EXPECT_EQ(t.spin(), microseconds(100));
}

TEST(SpinBudget, DataSoonAfterTheSpinGaveUpGrowsItBackToTheLargest) {
  SpinBudget b(microseconds(200));
  for (int i = 0; i < 4; ++i) b.Record(microseconds(900), true);
  ASSERT_EQ(b.spin(), microseconds(0));
  const microseconds expected[] = {microseconds(25), microseconds(50), microseconds(100),
                                   microseconds(200), microseconds(200)};
  for (microseconds e : expected) {
    b.Record(microseconds(150), true);  // a longer spin would have caught it
    EXPECT_EQ(b.spin(), e);
  }
}

TEST(SpinBudget, ShortTimeoutsLeaveItAlone) {
  SpinBudget b(microseconds(200));
  b.Record(microseconds(900), true);
  ASSERT_EQ(b.spin(), microseconds(100));
  b.Record(microseconds(150), false);  // the timer, not data: no evidence either way
  EXPECT_EQ(b.spin(), microseconds(100));
}

TEST(SpinBudget, ALargestOfZeroNeverSpins) {
  SpinBudget b(microseconds(0));
  b.Record(microseconds(10), true);
  b.Record(microseconds(900), true);
  EXPECT_EQ(b.spin(), microseconds(0));
}

TEST(BusyPoller, ReturnsWhatTheWaitFoundAndLearnsFromIt) {
  EventFd e;
  BusyPoller p(microseconds(200));
  pollfd fd = e.Readable();
  EXPECT_EQ(p.Wait(&fd, 1, milliseconds(5)), 0);  // nothing: a timeout longer than the budget
  EXPECT_EQ(p.budget().spin(), microseconds(100));
  e.Signal();
  fd = e.Readable();
  EXPECT_EQ(p.Wait(&fd, 1, seconds(60)), 1);
  EXPECT_TRUE(fd.revents & POLLIN);
}

}  // namespace
}  // namespace switchml::net
