// One I/O thread of a Context: it owns a WorkerEngine (for a range of the
// job's slots), a transport endpoint connected to the switch and optionally
// one on the thread's result group. Other threads talk to it only through
// its mailbox.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <optional>
#include <thread>
#include <vector>

#include "client/work_state.h"
#include "common/mailbox.h"
#include "net/busy_poll.h"
#include "net/packet_auth.h"
#include "switchml/context.h"
#include "transport/transport.h"
#include "worker/worker_engine.h"

namespace switchml {

class WorkerThread {
 public:
  // `endpoint` is open (with claim buffers of MaxPacketBytes); Start()
  // connects it to `switch_data`. `group`, when not null, has joined the
  // thread's result group; Start() restricts it to `switch_data` too. With
  // `auth`, outgoing packets are signed and received ones must verify. Out of
  // packets, it polls its endpoints for up to `busy_poll` before it sleeps,
  // as long as that pays (net/busy_poll.h).
  WorkerThread(const WorkerEngineConfig& engine, std::unique_ptr<transport::Endpoint> endpoint,
               std::unique_ptr<transport::Endpoint> group,
               const std::optional<net::PacketAuthenticator>& auth,
               std::chrono::microseconds busy_poll);
  ~WorkerThread();  // Stop()s
  WorkerThread(const WorkerThread&) = delete;
  WorkerThread& operator=(const WorkerThread&) = delete;

  // `on_timed_out`, when set, runs once on the thread when an operation
  // timed out waiting for late ranks (WorkerEngine::timed_out()), with the
  // message; it must not block.
  Status Start(const sockaddr_in& switch_data,
               std::function<void(const std::string&)> on_timed_out = nullptr);
  // Fails every unfinished operation with ABORTED and joins the thread.
  void Stop();

  // Queues an all-reduce of this thread's slice; `job` hears of its end.
  void Submit(const void* in, void* out, size_t count, DType dtype,
              std::shared_ptr<WorkState> work);
  // Fails the running and queued operations and every later one.
  void Fail(const Status& status);

  void AddCounters(ContextCounters& total) const;
  // The unicast endpoint's offloads (fixed before Start()).
  const std::string& offload() const { return offload_; }
  // The engine failed because the switch stopped answering (any thread).
  bool switch_silent() const { return switch_silent_.load(std::memory_order_relaxed); }

 private:
  struct Request {
    const void* in;
    void* out;
    size_t count;
    DType dtype;
    std::shared_ptr<WorkState> work;  // null: a failure (Fail())
    Status failure;
  };
  class BatchSink;
  void Run();
  void DrainMailbox();     // on the thread
  void PublishCounters();  // engine counters into the atomics AddCounters reads
  // SWITCHML_LOG_LEVEL=trace: one line per received datagram.
  void TracePacket(const transport::Datagram& d) const;
  // A warning when a 5 s window's retransmissions exceed 5% of its packets.
  void WarnOnSustainedRetransmission(Nanos now);
  // Receives and handles one batch from `from`; returns the datagrams received.
  size_t ReceiveBatch(transport::Endpoint& from, BatchSink& sink);

  const uint32_t rank_;
  const uint32_t first_slot_;  // names the thread in logs
  WorkerEngine engine_;
  std::unique_ptr<transport::Endpoint> endpoint_;
  std::unique_ptr<transport::Endpoint> group_;  // or null
  const std::string offload_;
  net::BusyPoller poller_;
  uint64_t multicast_received_ = 0;
  std::optional<net::PacketAuthenticator> auth_;
  uint64_t auth_failures_ = 0;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::function<void(const std::string&)> on_timed_out_;

  Mailbox<Request> mailbox_;
  Status failure_;         // the first Fail()ure taken; applies to everything after (thread only)
  Nanos window_start_{0};  // of WarnOnSustainedRetransmission's window (thread only)
  uint64_t window_sent_ = 0, window_resent_ = 0, window_pending_ = 0;

  std::atomic<uint64_t> packets_sent_{0}, retransmissions_{0}, fast_retransmissions_{0},
      probes_sent_{0}, results_accepted_{0}, duplicates_{0}, invalid_{0},
      multicast_received_total_{0};
  std::atomic<uint32_t> window_{0};
  std::atomic<bool> switch_silent_{false};
  std::atomic<int64_t> min_rtt_ns_{0};
};

}  // namespace switchml
