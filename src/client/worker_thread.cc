#include "client/worker_thread.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cassert>
#include <chrono>

#include "net/busy_poll.h"
#include "switchml/wire_format.h"

namespace switchml {
namespace {

constexpr size_t kBatch = 64;
// Receive buffers of 64 KiB each when the kernel coalesces (UDP_GRO).
constexpr size_t kCoalescedBuffers = 8;

Nanos Now() {
  return std::chrono::duration_cast<Nanos>(std::chrono::steady_clock::now().time_since_epoch());
}

}  // namespace

// Batches the engine's packets for one sendmmsg on the connected socket. The
// engine writes them straight into the batch's buffers (signed there when
// the job has a key).
class WorkerThread::BatchSink : public PacketSink {
 public:
  // `packet_bytes` has room for the MAC (MaxPacketBytes).
  BatchSink(int fd, size_t packet_bytes, std::optional<net::PacketAuthenticator>& auth,
            bool segmentation)
      : fd_(fd), batch_(kBatch, packet_bytes), auth_(auth) {
    batch_.set_segmentation(segmentation);
  }
  std::span<uint8_t> Claim(size_t bytes) override {
    claimed_ = batch_.Claim(fd_);
    return claimed_.first(std::min(bytes, claimed_.size()));
  }
  // REQUIRES: `packet` lies at the start of the buffer Claim() lent (the
  // engine always writes in place), which has room for the MAC.
  void Send(std::span<const uint8_t> packet) override {
    assert(packet.data() == claimed_.data() && packet.size() + kAuthTagBytes <= claimed_.size());
    uint8_t* buf = claimed_.data();
    claimed_ = {};
    batch_.Commit(auth_ ? auth_->Sign(buf, packet.size()) : packet.size(), nullptr);
  }
  void Flush() { batch_.Flush(fd_); }

 private:
  int fd_;
  net::SendBatch batch_;
  std::span<uint8_t> claimed_;
  std::optional<net::PacketAuthenticator>& auth_;
};

WorkerThread::WorkerThread(const WorkerEngineConfig& engine, net::UdpSocket socket,
                           net::UdpSocket group,
                           const std::optional<net::PacketAuthenticator>& auth,
                           std::chrono::microseconds busy_poll, bool udp_offload)
    : engine_(engine),
      socket_(std::move(socket)),
      group_(std::move(group)),
      busy_poll_(busy_poll),
      auth_(auth),
      wake_fd_(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {
  if (udp_offload) {
    segmentation_ = net::SegmentationSupported(socket_.fd());
    // One receive batch serves both sockets; a socket without coalescing
    // just delivers single datagrams into it.
    coalescing_ = net::EnableReceiveCoalescing(socket_.fd());
    if (coalescing_ && group_.fd() >= 0) net::EnableReceiveCoalescing(group_.fd());
  }
}

WorkerThread::~WorkerThread() {
  Stop();
  if (wake_fd_ >= 0) close(wake_fd_);
}

Status WorkerThread::Start(const sockaddr_in& switch_data) {
  if (Status s = socket_.Connect(switch_data); !s.ok()) return s;
  // Only the switch's datagrams, as on the unicast socket.
  if (group_.fd() >= 0) {
    if (Status s = group_.Connect(switch_data); !s.ok()) return s;
  }
  thread_ = std::thread([this] { Run(); });
  return Status::Ok();
}

void WorkerThread::Wake() {
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t n = write(wake_fd_, &one, sizeof(one));
}

void WorkerThread::Stop() {
  if (thread_.joinable()) {
    Fail(Status(StatusCode::kAborted, "the switchml context was stopped"));
    stop_.store(true);
    Wake();
    thread_.join();
  }
  // Anything submitted after the thread ended.
  std::lock_guard lock(mu_);
  for (Request& r : requests_) {
    r.job->PartDone(Status(StatusCode::kAborted, "the switchml context was stopped"));
  }
  requests_.clear();
}

void WorkerThread::Submit(const void* in, void* out, size_t count, DType dtype,
                          std::shared_ptr<Job> job) {
  {
    std::lock_guard lock(mu_);
    requests_.push_back({in, out, count, dtype, std::move(job)});
  }
  Wake();
}

void WorkerThread::Fail(const Status& status) {
  {
    std::lock_guard lock(mu_);
    if (failure_.ok()) failure_ = status;
  }
  Wake();
}

void WorkerThread::DrainMailbox() {
  std::vector<Request> requests;
  Status failure;
  {
    std::lock_guard lock(mu_);
    requests.swap(requests_);
    failure = failure_;
  }
  if (!failure.ok()) engine_.Fail(failure);
  for (Request& r : requests) {
    if (!failure.ok()) {
      r.job->PartDone(failure);
      continue;
    }
    std::shared_ptr<Job> job = r.job;
    auto id = engine_.Submit(r.in, r.out, r.count, r.dtype,
                             [this, job](OpId, const Status& s) {
                               PublishCounters();  // a waiter then sees this op's counts
                               job->PartDone(s);
                             });
    if (!id.ok()) job->PartDone(id.status());
  }
}

void WorkerThread::Run() {
  const size_t max_bytes = MaxPacketBytes(engine_.config().elements_per_packet);
  BatchSink sink(socket_.fd(), max_bytes, auth_, segmentation_);
  // One extra byte tells a datagram that is too long from one that fits.
  // Coalesced buffers take 64 KiB each: a few hold as many packets.
  net::RecvBatch recv(coalescing_ ? kCoalescedBuffers : net::ReceiveBatchPackets(max_bytes),
                      max_bytes + 1, coalescing_);
  // A negative fd (no group) is ignored by ppoll.
  pollfd fds[3] = {{socket_.fd(), POLLIN, 0}, {wake_fd_, POLLIN, 0}, {group_.fd(), POLLIN, 0}};
  while (!stop_.load(std::memory_order_relaxed)) {
    DrainMailbox();
    Nanos now = Now();
    engine_.OnTimer(now, sink);
    sink.Flush();
    const Nanos deadline = engine_.NextDeadline();
    const Nanos wait = deadline == Nanos::max() ? std::chrono::seconds(1)
                                                : std::clamp(deadline - now, Nanos(0), Nanos(std::chrono::seconds(1)));
    net::SpinThenPoll(fds, 3, busy_poll_, wait);
    if (fds[1].revents & POLLIN) {
      uint64_t value;
      [[maybe_unused]] ssize_t n = read(wake_fd_, &value, sizeof(value));
    }
    for (int round = 0; round < 16; ++round) {
      const int unicast = ReceiveBatch(socket_.fd(), recv, sink);
      const int multicast = group_.fd() >= 0 ? ReceiveBatch(group_.fd(), recv, sink) : 0;
      if (unicast + multicast == 0) break;
    }
    PublishCounters();
  }
  // Fail whatever is left (Stop() queued the failure before stopping us).
  DrainMailbox();
}

int WorkerThread::ReceiveBatch(int fd, net::RecvBatch& batch, BatchSink& sink) {
  const int n = batch.Receive(fd);
  if (n == 0) return 0;
  // Counted before they are handled: an operation they complete publishes it.
  if (fd == group_.fd()) multicast_received_ += uint64_t(n);
  const Nanos now = Now();
  for (int i = 0; i < n; ++i) {
    if (auth_ && !auth_->Verify(batch.packet(i))) {
      ++auth_failures_;  // forged, corrupted or from another registration
      continue;
    }
    engine_.OnPacket(batch.packet(i), now, sink);
  }
  sink.Flush();
  return n;
}

void WorkerThread::PublishCounters() {
  const WorkerEngineCounters c = engine_.counters();
  packets_sent_.store(c.packets_sent, std::memory_order_relaxed);
  retransmissions_.store(c.retransmissions, std::memory_order_relaxed);
  fast_retransmissions_.store(c.fast_retransmissions, std::memory_order_relaxed);
  results_accepted_.store(c.results_accepted, std::memory_order_relaxed);
  duplicates_.store(c.duplicates, std::memory_order_relaxed);
  invalid_.store(c.malformed + c.wrong_job_or_rank + c.invalid + auth_failures_,
                 std::memory_order_relaxed);
  multicast_received_total_.store(multicast_received_, std::memory_order_relaxed);
  window_.store(c.window, std::memory_order_relaxed);
  switch_silent_.store(engine_.switch_silent(), std::memory_order_relaxed);
  min_rtt_ns_.store(c.min_rtt_ns, std::memory_order_relaxed);
}

void WorkerThread::AddCounters(ContextCounters& total) const {
  total.packets_sent += packets_sent_.load(std::memory_order_relaxed);
  total.retransmissions += retransmissions_.load(std::memory_order_relaxed);
  total.fast_retransmissions += fast_retransmissions_.load(std::memory_order_relaxed);
  total.results_accepted += results_accepted_.load(std::memory_order_relaxed);
  total.duplicates += duplicates_.load(std::memory_order_relaxed);
  total.invalid += invalid_.load(std::memory_order_relaxed);
  total.multicast_received += multicast_received_total_.load(std::memory_order_relaxed);
  total.window += window_.load(std::memory_order_relaxed);
  const double rtt_us = double(min_rtt_ns_.load(std::memory_order_relaxed)) / 1e3;
  if (rtt_us > 0 && (total.min_rtt_us == 0 || rtt_us < total.min_rtt_us)) total.min_rtt_us = rtt_us;
}

}  // namespace switchml
