// Waiting for datagrams without letting the CPU go idle first.
//
// On a virtual machine, waking a thread on an idle (halted) virtual CPU
// takes the hypervisor tens to hundreds of microseconds, during which every
// process of a pipelined all-reduce may be waiting for that one thread. So
// a data-path thread that runs out of work first polls its sockets without
// blocking for a short budget, yielding the CPU to any runnable thread
// between polls (so it only spins where the CPU would otherwise idle), and
// only then blocks.
#pragma once

#include <poll.h>

#include <chrono>

namespace switchml::net {

// Waits until one of `fds` is ready or `timeout` has passed, spinning (with
// yields) for at most `spin` of it first. Returns poll()'s result. With spin
// zero, this is ppoll.
int SpinThenPoll(pollfd* fds, nfds_t count, std::chrono::nanoseconds spin,
                 std::chrono::nanoseconds timeout);

}  // namespace switchml::net
