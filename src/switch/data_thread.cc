#include "switch/data_thread.h"

#include <poll.h>
#include <pthread.h>

#include <algorithm>
#include <future>

namespace switchml {
namespace {
constexpr size_t kBatch = 64;
// With UDP coalescing, 4 buffers of 64 KiB.
constexpr size_t kCoalescedBuffers = 4;
}  // namespace

transport::EndpointOptions DataThread::EndpointOptions(const DataPlaneConfig& config,
                                                       int socket_buffer_bytes, bool offload) {
  transport::EndpointOptions o;
  o.max_datagram_bytes = MaxPacketBytes(config.max_elements_per_packet);
  o.receive_batch = kBatch;
  o.udp.coalesced_buffers = kCoalescedBuffers;
  o.udp.socket_buffer_bytes = socket_buffer_bytes;
  o.udp.offload = offload;
  // A result to every worker, for each datagram of one receive.
  o.send_queue = transport::MostDatagramsPerReceive(o) * config.max_workers;
  return o;
}

DataThread::DataThread(const DataPlaneConfig& config, std::unique_ptr<transport::Endpoint> endpoint,
                       uint16_t shard, uint16_t shards, std::chrono::microseconds busy_poll)
    : data_plane_(config),
      handler_(&data_plane_, shard, shards),
      poller_(busy_poll),
      endpoint_(std::move(endpoint)),
      out_(endpoint_->receive_capacity() * MaxPacketBytes(config.max_elements_per_packet)) {}

DataThread::~DataThread() { Stop(); }

void DataThread::Start() {
  thread_ = std::thread([this] { Run(); });
}

void DataThread::Stop() {
  stop_.store(true);
  commands_.Wake();
  if (thread_.joinable()) thread_.join();
  for (auto& fn : commands_.Close()) fn();
}

void DataThread::Execute(const std::function<void()>& fn) {
  std::promise<void> done;
  if (!commands_.Post([&] {
        fn();
        done.set_value();
      })) {
    fn();  // stopped: nothing else touches the data plane now
    return;
  }
  done.get_future().wait();
}

Status DataThread::InstallJob(const JobRegistration& job, uint16_t threads,
                              std::vector<sockaddr_in> addresses,
                              const std::optional<net::PacketAuthenticator>& auth,
                              std::vector<sockaddr_in> result_groups,
                              std::optional<UpstreamRoute> upstream) {
  Status status;
  Execute([&] {
    // The upstream never sends first: the endpoint must know how to reach it.
    for (size_t t = 0; upstream && t < upstream->addresses.size() && status.ok(); ++t) {
      status = endpoint_->AddPeer(upstream->addresses[t]);
    }
    if (!status.ok()) return;
    status = data_plane_.RegisterJob(job);
    if (status.ok()) {
      handler_.Install(job.id, job.world_size, job.pool_slots, threads, std::move(addresses), auth,
                       std::move(result_groups), std::move(upstream));
    }
  });
  return status;
}

void DataThread::RemoveJob(JobId id) {
  Execute([&] {
    handler_.Remove(id);
    if (data_plane_.HasJob(id)) (void)data_plane_.UnregisterJob(id);
  });
}

DataThread::Counters DataThread::ReadCounters(const std::vector<JobId>& jobs) {
  Counters c;
  Execute([&] {
    c.total = data_plane_.counters();
    for (JobId id : jobs) c.per_job.push_back(data_plane_.JobCounters(id));
    c.io = endpoint_->counters();
  });
  return c;
}

clockid_t DataThread::cpu_clock() {
  clockid_t clock = CLOCK_THREAD_CPUTIME_ID;
  pthread_getcpuclockid(thread_.native_handle(), &clock);
  return clock;
}

void DataThread::Run() {
  std::vector<pollfd> fds = transport::WaitDescriptors(commands_.fd(), {endpoint_.get()});
  transport::PolledEndpoints polled({endpoint_.get()});
  const size_t out_bytes = MaxPacketBytes(data_plane_.config().max_elements_per_packet);
  while (!stop_.load(std::memory_order_relaxed)) {
    // While a slot may stall or a partial sum awaits its upstream result,
    // wake for their timers.
    const bool timers = data_plane_.NextTimer() != Nanos::max();
    poller_.Wait(fds.data(), fds.size(), std::chrono::milliseconds(timers ? 1 : 500),
                 polled.source());
    if ((fds[0].revents & POLLIN) || commands_.pending()) {
      for (auto& fn : commands_.Take()) fn();
    }
    // The time stamps the slots this round starts and the partial sums it
    // sends upstream; what is due goes after it.
    const Nanos now = std::chrono::steady_clock::now().time_since_epoch();
    data_plane_.AdvanceClock(now);
    // A bounded number of batches, so commands never wait long under load.
    for (int round = 0; round < 64; ++round) {
      const std::span<const transport::Datagram> batch = endpoint_->Receive();
      if (batch.empty()) break;
      // Each reply stays in its own out_ buffer until the flush below.
      size_t used = 0;
      for (const transport::Datagram& d : batch) {
        const std::span<uint8_t> out(&out_[used * out_bytes], out_bytes);
        if (handler_.Handle(d.bytes, *d.source, out, *this)) ++used;
      }
      endpoint_->Flush();
    }
    if (data_plane_.NextTimer() <= now) SendTimerPackets(now);
  }
}

void DataThread::SendTimerPackets(Nanos now) {
  const size_t out_bytes = MaxPacketBytes(data_plane_.config().max_elements_per_packet);
  const size_t buffers = out_.size() / out_bytes;
  for (bool more = true; more;) {
    size_t used = 0;
    while (used < buffers &&
           (more = handler_.SendTimerPacket(now, {&out_[used * out_bytes], out_bytes}, *this))) {
      ++used;
    }
    if (used > 0) endpoint_->Flush();
  }
}

}  // namespace switchml
