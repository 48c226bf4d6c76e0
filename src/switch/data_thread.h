// The switch's data thread: receives datagrams from its transport endpoint,
// checks each sender against the job's registered addresses, runs the data
// plane, and sends results.
//
// It owns only what packets need: the DataPlane and the PacketHandler (the
// address books). Jobs are allocated by the control plane and arrive whole
// (InstallJob); every call from another thread runs on the data thread
// between packet batches, so the packet path takes no lock.
#pragma once

#include <netinet/in.h>
#include <time.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/mailbox.h"
#include "dataplane/data_plane.h"
#include "net/busy_poll.h"
#include "net/packet_auth.h"
#include "switch/packet_handler.h"
#include "transport/transport.h"

namespace switchml {

class DataThread : private ReplySink {
 public:
  // Shard `shard` of `shards` serves the worker threads t with
  // t % shards == shard (each worker thread sends to one shard's endpoint).
  // Out of packets, it polls its endpoint for up to `busy_poll` before it
  // sleeps, as long as that pays (net/busy_poll.h).
  // REQUIRES: `endpoint` was opened with EndpointOptions(config).
  DataThread(const DataPlaneConfig& config, std::unique_ptr<transport::Endpoint> endpoint,
             uint16_t shard = 0, uint16_t shards = 1, std::chrono::microseconds busy_poll = {});
  // What a data thread's endpoint needs: receive batches of 64 (4 coalesced
  // buffers), a send queue that holds every reply of a batch to every worker.
  static transport::EndpointOptions EndpointOptions(const DataPlaneConfig& config,
                                                    int socket_buffer_bytes, bool offload);
  ~DataThread();  // Stop()s
  DataThread(const DataThread&) = delete;
  DataThread& operator=(const DataThread&) = delete;

  void Start();
  void Stop();

  // Registers `job` in the data plane, then its address book: addresses
  // [rank * threads + t] is rank's socket for thread t (PacketHandler::Install).
  Status InstallJob(const JobRegistration& job, uint16_t threads,
                    std::vector<sockaddr_in> addresses,
                    const std::optional<net::PacketAuthenticator>& auth,
                    std::vector<sockaddr_in> result_groups = {},
                    std::optional<UpstreamRoute> upstream = std::nullopt);
  // Removes the address book, then the job (unknown ids are ignored).
  void RemoveJob(JobId id);

  struct Counters {
    DataPlaneCounters total;
    std::vector<DataPlaneCounters> per_job;  // one per asked id
    transport::EndpointCounters io;
  };
  Counters ReadCounters(const std::vector<JobId>& jobs);

  const DataPlaneConfig& config() const { return data_plane_.config(); }
  // What the transport granted: "segmentation and coalescing", ..., or "off".
  std::string description() const { return endpoint_->description(); }
  // The data thread's CPU clock (for benchmarks). REQUIRES: Start()ed.
  clockid_t cpu_clock();

 private:
  // Runs `fn` on the data thread (or inline once stopped) and waits for it.
  void Execute(const std::function<void()>& fn);
  void Run();
  // Sends what the data plane's timers have due at `now`: NACKs of stalled
  // slots, upstream contributions whose results are overdue.
  void SendTimerPackets(Nanos now);
  void Send(std::span<const uint8_t> datagram, const sockaddr_in& to) override {
    endpoint_->SendRef(datagram, to);
  }

  DataPlane data_plane_;
  PacketHandler handler_;
  net::BusyPoller poller_;
  std::unique_ptr<transport::Endpoint> endpoint_;
  std::vector<uint8_t> out_;  // result buffers, one per packet of a receive batch

  Mailbox<std::function<void()>> commands_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace switchml
