// switchml's client library: a Context is one rank of one job on one switch.
//
//   auto ctx = switchml::Context::Start(config);       // joins the job (a barrier)
//   if (!ctx.ok()) ...                                  // clear message, never a crash
//   auto work = ctx.value()->AllReduceAsync(grad, grad, n, switchml::DType::kFloat32);
//   ... overlap other work ...
//   switchml::Status s = work->Wait();                  // sum of all ranks' inputs in grad
//
// Every rank must issue the same all-reduces in the same order, as with any
// collective library. Operations run in submission order; several may be in
// flight. A failure (a rank crashed, the switch went away, ranks disagree on
// a length) fails the affected operations with a message; after a failure other
// than NaN/Inf input the Context cannot run more all-reduces: Stop it and
// Start a new one (the switch has freed the job by then).
//
// Thread safety: AllReduceAsync, AllReduce and Stop may be called from any
// thread. Several Contexts (even of the same job) may live in one process.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "switchml/config.h"
#include "switchml/status.h"
#include "switchml/types.h"

namespace switchml {
class WorkState;     // src/client/work_state.h
struct ContextImpl;  // src/client/context.cc

// The handle of one asynchronous all-reduce (c10d calls its own Work, too).
// Context::AllReduceAsync makes it; its state is the library's.
class Work {
 public:
  explicit Work(std::shared_ptr<WorkState> state);
  // Blocks until the all-reduce finished; returns its status.
  Status Wait();
  // Waits at most `timeout`; true if the all-reduce finished.
  bool WaitFor(std::chrono::milliseconds timeout);
  bool done() const;
  // REQUIRES: done().
  Status status() const;
  // Runs `callback` with the final status once the all-reduce has finished:
  // at once if it already has, else on a Context I/O thread (keep it short;
  // it must not wait for other operations of the same Context).
  void OnDone(std::function<void(const Status&)> callback);

 private:
  std::shared_ptr<WorkState> state_;
};

// The name of Work before version 0.2 (deprecated; removed in 0.3).
using Job [[deprecated("switchml::Job is now switchml::Work")]] = Work;

// Protocol counters summed over a Context's threads.
struct ContextCounters {
  uint64_t packets_sent = 0;
  uint64_t retransmissions = 0;
  uint64_t fast_retransmissions = 0;  // of them, sent before their timeout (later results came)
  uint64_t probes_sent = 0;           // header-only questions to the switch (docs/wire-format.md)
  uint64_t results_accepted = 0;
  uint64_t duplicates = 0;
  uint64_t invalid = 0;             // malformed, foreign or otherwise invalid packets received
  uint64_t multicast_received = 0;  // datagrams received on the job's result groups
  uint32_t window = 0;              // packets in flight allowed now (all threads)
  double min_rtt_us = 0;            // smallest round trip measured (0: none yet)
};

class Context {
 public:
  // Validates `config`, joins the job at the switch (waiting for every rank
  // up to join_timeout_ms) and starts the I/O threads.
  static StatusOr<std::unique_ptr<Context>> Start(const ContextConfig& config);
  // Made by Start (its state is the library's).
  explicit Context(std::unique_ptr<ContextImpl> impl);
  ~Context();  // Stop()s
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  // Starts summing `count` elements of `in` across all ranks into `out` (the
  // same buffer is fine). Both must stay valid until the work is done. Never
  // blocks on the network; errors surface in the returned work.
  std::shared_ptr<Work> AllReduceAsync(const void* in, void* out, size_t count, DType dtype);
  Status AllReduce(const void* in, void* out, size_t count, DType dtype) {
    return AllReduceAsync(in, out, count, dtype)->Wait();
  }

  // Leaves the job (the switch ends it for every rank) and stops the
  // threads; unfinished jobs fail with ABORTED. Idempotent.
  void Stop();

  uint32_t rank() const;
  uint32_t world_size() const;
  // The configuration in effect: elements_per_packet is the switch's choice
  // when the given one was 0.
  const ContextConfig& config() const;
  ContextCounters counters() const;
  // What the transport granted this rank's I/O threads, as the switch logs
  // it for its own: "segmentation and coalescing", "coalescing only",
  // "segmentation only" or "off" (udp_offload = false, or an old kernel).
  std::string offload() const;

 private:
  std::unique_ptr<ContextImpl> impl_;
};

}  // namespace switchml
