// Waiting for datagrams without letting the CPU go idle first.
//
// On a virtual machine, waking a thread on an idle (halted) virtual CPU
// takes the hypervisor tens to hundreds of microseconds, during which every
// process of a pipelined all-reduce may be waiting for that one thread. So
// a data-path thread that runs out of work first polls its sockets without
// blocking for a short budget, yielding the CPU to any runnable thread
// between polls (so it only spins where the CPU would otherwise idle), and
// only then blocks.
//
// Spinning pays only when the next datagram comes within the budget. Where
// datagrams come further apart (a slow link, a rank waiting for the others),
// every spin is CPU time taken from the computation that shares the core.
// So the budget adapts to the waits this thread sees (as Linux's haltpoll
// governor sizes a virtual CPU's idle polling): see SpinBudget.
#pragma once

#include <poll.h>

#include <chrono>

namespace switchml::net {

// What a waiting thread polls besides its descriptors: sources of data that
// have none (poll-mode transport endpoints, such as DPDK's).
class PolledSource {
 public:
  // True when data is there now. Never blocks.
  virtual bool Ready() = 0;

 protected:
  ~PolledSource() = default;
};

// How long a wait with a polled source sleeps between polls of it, once the
// spin is over: a poll-mode endpoint has no descriptor to wake the thread.
inline constexpr std::chrono::nanoseconds kPolledSourceNap = std::chrono::microseconds(20);

// Waits until one of `fds` is ready, `polled` (if not null) is, or `timeout`
// has passed, spinning (with yields) for at most `spin` of it first; after
// the spin, with a polled source, in naps of kPolledSourceNap. Returns
// poll()'s result, or 1 when the polled source was ready. With spin zero and
// no polled source, this is ppoll.
int SpinThenPoll(pollfd* fds, nfds_t count, PolledSource* polled, std::chrono::nanoseconds spin,
                 std::chrono::nanoseconds timeout);

// The spin budget of one thread, learned from how its waits ended; no I/O,
// no clock of its own. Starts at the largest budget. A wait that data ended
// after the spin gave up, but within the largest budget, says a longer spin
// would have caught it: the budget doubles (from kGrowFrom when it was 0), up
// to the largest. A wait longer than the largest budget (data or timeout)
// says no spin would have: the budget halves, and below kGrowFrom it is 0.
// Waits that the spin caught, and short timeouts, leave it as it is.
class SpinBudget {
 public:
  static constexpr std::chrono::nanoseconds kGrowFrom = std::chrono::microseconds(25);

  explicit SpinBudget(std::chrono::nanoseconds largest) : largest_(largest), spin_(largest) {}
  std::chrono::nanoseconds spin() const { return spin_; }
  // One wait ended after `waited`; `ready`: data (not the timeout) ended it.
  void Record(std::chrono::nanoseconds waited, bool ready);

 private:
  std::chrono::nanoseconds largest_;
  std::chrono::nanoseconds spin_;
};

// SpinThenPoll with the thread's SpinBudget. Thread safety: one thread.
class BusyPoller {
 public:
  // `largest`: the configured busy_poll_us; 0 never spins.
  explicit BusyPoller(std::chrono::nanoseconds largest) : budget_(largest) {}
  int Wait(pollfd* fds, nfds_t count, std::chrono::nanoseconds timeout,
           PolledSource* polled = nullptr);
  const SpinBudget& budget() const { return budget_; }

 private:
  SpinBudget budget_;
};

}  // namespace switchml::net
