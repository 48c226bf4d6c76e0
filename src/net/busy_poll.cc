#include "net/busy_poll.h"

#include <sched.h>
#include <time.h>

#include <algorithm>

namespace switchml::net {
namespace {

std::chrono::nanoseconds Monotonic() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return std::chrono::seconds(ts.tv_sec) + std::chrono::nanoseconds(ts.tv_nsec);
}

}  // namespace

int SpinThenPoll(pollfd* fds, nfds_t count, std::chrono::nanoseconds spin,
                 std::chrono::nanoseconds timeout) {
  spin = std::min(spin, timeout);
  if (spin > std::chrono::nanoseconds(0)) {
    const auto start = Monotonic();
    for (;;) {
      const int ready = poll(fds, count, 0);
      if (ready != 0) return ready;
      if (Monotonic() - start >= spin) break;
      sched_yield();
    }
    timeout -= spin;
  }
  const timespec ts{time_t(timeout.count() / 1000000000), long(timeout.count() % 1000000000)};
  return ppoll(fds, count, &ts, nullptr);
}

}  // namespace switchml::net
