#include "net/busy_poll.h"

#include <sched.h>
#include <time.h>

#include <algorithm>

namespace switchml::net {

namespace {
int Ppoll(pollfd* fds, nfds_t count, std::chrono::nanoseconds timeout) {
  const timespec ts{time_t(timeout.count() / 1000000000), long(timeout.count() % 1000000000)};
  return ppoll(fds, count, &ts, nullptr);
}
}  // namespace

int SpinThenPoll(pollfd* fds, nfds_t count, PolledSource* polled, std::chrono::nanoseconds spin,
                 std::chrono::nanoseconds timeout) {
  spin = std::min(spin, timeout);
  const auto start = std::chrono::steady_clock::now();
  if (spin > std::chrono::nanoseconds(0)) {
    for (;;) {
      const int ready = poll(fds, count, 0);
      if (ready != 0) return ready;
      if (polled != nullptr && polled->Ready()) return 1;
      if (std::chrono::steady_clock::now() - start >= spin) break;
      sched_yield();
    }
  }
  if (polled == nullptr) return Ppoll(fds, count, timeout - spin);
  for (;;) {
    if (polled->Ready()) return 1;
    const auto left = timeout - (std::chrono::steady_clock::now() - start);
    if (left <= std::chrono::nanoseconds(0)) return 0;
    if (const int ready = Ppoll(fds, count, std::min(left, kPolledSourceNap)); ready != 0) {
      return ready;
    }
  }
}

void SpinBudget::Record(std::chrono::nanoseconds waited, bool ready) {
  if (waited > largest_) {
    spin_ /= 2;
    if (spin_ < kGrowFrom) spin_ = std::chrono::nanoseconds(0);
  } else if (ready && waited > spin_) {
    spin_ = std::min(largest_, std::max(2 * spin_, std::chrono::nanoseconds(kGrowFrom)));
  }
}

int BusyPoller::Wait(pollfd* fds, nfds_t count, std::chrono::nanoseconds timeout,
                     PolledSource* polled) {
  const auto start = std::chrono::steady_clock::now();
  const int ready = SpinThenPoll(fds, count, polled, budget_.spin(), timeout);
  budget_.Record(std::chrono::steady_clock::now() - start, ready > 0);
  return ready;
}

}  // namespace switchml::net
