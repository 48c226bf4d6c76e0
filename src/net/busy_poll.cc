#include "net/busy_poll.h"

#include <sched.h>
#include <time.h>

#include <algorithm>

namespace switchml::net {

int SpinThenPoll(pollfd* fds, nfds_t count, std::chrono::nanoseconds spin,
                 std::chrono::nanoseconds timeout) {
  spin = std::min(spin, timeout);
  if (spin > std::chrono::nanoseconds(0)) {
    const auto start = std::chrono::steady_clock::now();
    for (;;) {
      const int ready = poll(fds, count, 0);
      if (ready != 0) return ready;
      if (std::chrono::steady_clock::now() - start >= spin) break;
      sched_yield();
    }
    timeout -= spin;
  }
  const timespec ts{time_t(timeout.count() / 1000000000), long(timeout.count() % 1000000000)};
  return ppoll(fds, count, &ts, nullptr);
}

void SpinBudget::Record(std::chrono::nanoseconds waited, bool ready) {
  if (waited > largest_) {
    spin_ /= 2;
    if (spin_ < kGrowFrom) spin_ = std::chrono::nanoseconds(0);
  } else if (ready && waited > spin_) {
    spin_ = std::min(largest_, std::max(2 * spin_, std::chrono::nanoseconds(kGrowFrom)));
  }
}

int BusyPoller::Wait(pollfd* fds, nfds_t count, std::chrono::nanoseconds timeout) {
  const auto start = std::chrono::steady_clock::now();
  const int ready = SpinThenPoll(fds, count, budget_.spin(), timeout);
  budget_.Record(std::chrono::steady_clock::now() - start, ready > 0);
  return ready;
}

}  // namespace switchml::net
