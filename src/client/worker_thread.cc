#include "client/worker_thread.h"

#include <poll.h>

#include <algorithm>
#include <cassert>
#include <chrono>

#include "client/client_log.h"
#include "net/address.h"
#include "wire/wire_format.h"

namespace switchml {
namespace {

Nanos Now() {
  return std::chrono::duration_cast<Nanos>(std::chrono::steady_clock::now().time_since_epoch());
}

}  // namespace

// Batches the engine's packets for one flush of the connected endpoint. The
// engine writes them straight into the endpoint's buffers (signed there when
// the job has a key).
class WorkerThread::BatchSink : public PacketSink {
 public:
  // The endpoint's buffers have room for the MAC (MaxPacketBytes).
  BatchSink(transport::Endpoint& endpoint, std::optional<net::PacketAuthenticator>& auth)
      : endpoint_(endpoint), auth_(auth) {}
  std::span<uint8_t> Claim(size_t bytes) override {
    claimed_ = endpoint_.Claim();
    return claimed_.first(std::min(bytes, claimed_.size()));
  }
  // REQUIRES: `packet` lies at the start of the buffer Claim() lent (the
  // engine always writes in place), which has room for the MAC.
  void Send(std::span<const uint8_t> packet) override {
    assert(packet.data() == claimed_.data() && packet.size() + kAuthTagBytes <= claimed_.size());
    uint8_t* buf = claimed_.data();
    claimed_ = {};
    endpoint_.Commit(auth_ ? auth_->Sign(buf, packet.size()) : packet.size(), nullptr);
  }
  void Flush() { endpoint_.Flush(); }

 private:
  transport::Endpoint& endpoint_;
  std::span<uint8_t> claimed_;
  std::optional<net::PacketAuthenticator>& auth_;
};

WorkerThread::WorkerThread(const WorkerEngineConfig& engine,
                           std::unique_ptr<transport::Endpoint> endpoint,
                           std::unique_ptr<transport::Endpoint> group,
                           const std::optional<net::PacketAuthenticator>& auth,
                           std::chrono::microseconds busy_poll)
    : rank_(engine.rank.value()),
      first_slot_(engine.slot_offset),
      engine_(engine),
      endpoint_(std::move(endpoint)),
      group_(std::move(group)),
      offload_(endpoint_->description()),
      poller_(busy_poll),
      auth_(auth) {}

WorkerThread::~WorkerThread() { Stop(); }

Status WorkerThread::Start(const sockaddr_in& switch_data,
                           std::function<void(const std::string&)> on_timed_out) {
  on_timed_out_ = std::move(on_timed_out);
  if (Status s = endpoint_->Connect(switch_data); !s.ok()) return s;
  // Only the switch's datagrams, as on the unicast endpoint.
  if (group_) {
    if (Status s = group_->Connect(switch_data); !s.ok()) return s;
  }
  thread_ = std::thread([this] { Run(); });
  return Status::Ok();
}

void WorkerThread::Stop() {
  const Status stopped(StatusCode::kAborted, "the switchml context was stopped");
  if (thread_.joinable()) {
    Fail(stopped);
    stop_.store(true);
    mailbox_.Wake();
    thread_.join();
  }
  // Anything the thread did not take; later submissions fail at once.
  for (Request& r : mailbox_.Close()) {
    if (r.work) r.work->PartDone(stopped);
  }
}

void WorkerThread::Submit(const void* in, void* out, size_t count, DType dtype,
                          std::shared_ptr<WorkState> work) {
  if (!mailbox_.Post({in, out, count, dtype, work, Status::Ok()})) {
    work->PartDone(Status(StatusCode::kAborted, "the switchml context was stopped"));
  }
}

void WorkerThread::Fail(const Status& status) {
  (void)mailbox_.Post({nullptr, nullptr, 0, DType::kFloat32, nullptr, status});
}

void WorkerThread::DrainMailbox() {
  for (Request& r : mailbox_.Take()) {
    if (!r.work) {  // a failure: fails what runs and everything after
      if (failure_.ok()) {
        failure_ = r.failure;
        engine_.Fail(failure_);
      }
      continue;
    }
    if (!failure_.ok()) {
      r.work->PartDone(failure_);
      continue;
    }
    std::shared_ptr<WorkState> work = r.work;
    const Nanos started = Now();
    const uint64_t resent = engine_.counters().retransmissions;
    const size_t count = r.count;
    auto id = engine_.Submit(r.in, r.out, r.count, r.dtype,
                             [this, work, started, resent, count](OpId op, const Status& s) {
                               PublishCounters();  // a waiter then sees this op's counts
                               if (ClientLog().should_log(spdlog::level::debug)) {
                                 ClientLog().debug(
                                     "rank {} slots {}+: operation {} of {} elements: {} in "
                                     "{:.3f} ms, {} retransmissions",
                                     rank_, first_slot_, op, count, s.ToString(),
                                     double((Now() - started).count()) * 1e-6,
                                     engine_.counters().retransmissions - resent);
                               }
                               work->PartDone(s);
                             });
    if (!id.ok()) work->PartDone(id.status());
  }
}

void WorkerThread::Run() {
  BatchSink sink(*endpoint_, auth_);
  std::vector<pollfd> fds =
      transport::WaitDescriptors(mailbox_.fd(), {endpoint_.get(), group_.get()});
  transport::PolledEndpoints polled({endpoint_.get(), group_.get()});
  while (!stop_.load(std::memory_order_relaxed)) {
    if (mailbox_.pending()) DrainMailbox();
    Nanos now = Now();
    const bool timed_out = engine_.timed_out();
    engine_.OnTimer(now, sink);
    sink.Flush();
    if (!timed_out && engine_.timed_out() && on_timed_out_) on_timed_out_(engine_.broken_reason());
    const Nanos deadline = engine_.NextDeadline();
    const Nanos wait = deadline == Nanos::max()
                           ? std::chrono::seconds(1)
                           : std::clamp(deadline - now, Nanos(0), Nanos(std::chrono::seconds(1)));
    poller_.Wait(fds.data(), fds.size(), wait, polled.source());
    if (fds[0].revents & POLLIN) DrainMailbox();
    for (int round = 0; round < 16; ++round) {
      const size_t unicast = ReceiveBatch(*endpoint_, sink);
      const size_t multicast = group_ ? ReceiveBatch(*group_, sink) : 0;
      if (unicast + multicast == 0) break;
    }
    PublishCounters();
    WarnOnSustainedRetransmission(Now());
  }
  // Fail whatever is left (Stop() queued the failure before stopping us).
  DrainMailbox();
}

size_t WorkerThread::ReceiveBatch(transport::Endpoint& from, BatchSink& sink) {
  const std::span<const transport::Datagram> batch = from.Receive();
  if (batch.empty()) return 0;
  // Counted before they are handled: an operation they complete publishes it.
  if (&from == group_.get()) multicast_received_ += batch.size();
  const Nanos now = Now();
  const bool trace = ClientLog().should_log(spdlog::level::trace);
  for (const transport::Datagram& d : batch) {
    if (auth_ && !auth_->Verify(d.bytes)) {
      ++auth_failures_;  // forged, corrupted or from another registration
      if (trace) ClientLog().trace("rank {}: dropped a datagram whose MAC fails", rank_);
      continue;
    }
    if (trace) TracePacket(d);
    engine_.OnPacket(d.bytes, now, sink);
  }
  sink.Flush();
  return batch.size();
}

void WorkerThread::TracePacket(const transport::Datagram& d) const {
  PacketView view;
  const DecodeError e = DecodePacket(d.bytes, &view);
  if (e != DecodeError::kOk) {
    ClientLog().trace("rank {}: {} bytes from {}: undecodable ({})", rank_, d.bytes.size(),
                      net::FormatAddress(*d.source), DecodeErrorName(e));
    return;
  }
  ClientLog().trace("rank {}: {} from {}: job {} chunk {} slot {} version {}, {} elements", rank_,
                    view.header.type == MessageType::kPending ? "pending" : "result",
                    net::FormatAddress(*d.source), view.header.job, view.header.chunk,
                    view.header.slot, int(view.header.version), view.header.element_count);
}

void WorkerThread::WarnOnSustainedRetransmission(Nanos now) {
  constexpr Nanos kWindow = std::chrono::seconds(5);
  if (now - window_start_ < kWindow) return;
  const WorkerEngineCounters c = engine_.counters();
  const uint64_t sent = c.packets_sent - window_sent_;
  // Resends the switch answered "pending" found this rank's packet there:
  // they waited on other (late) ranks, which is no loss.
  const uint64_t waited = c.pending_received - window_pending_;
  const uint64_t resent = c.retransmissions - window_resent_;
  const uint64_t lost = resent > waited ? resent - waited : 0;
  // More than 5% of a busy window's packets sent again for loss: loss on the
  // path, or a switch too slow for the window.
  if (sent >= 1000 && lost * 20 > sent) {
    ClientLog().warn(
        "rank {} slots {}+: {} of the last {} packets ({:.1f}%) were retransmissions (loss on "
        "the path to the switch, or a switch that cannot keep up?)",
        rank_, first_slot_, lost, sent, 100.0 * double(lost) / double(sent));
  }
  window_start_ = now;
  window_sent_ = c.packets_sent;
  window_resent_ = c.retransmissions;
  window_pending_ = c.pending_received;
}

void WorkerThread::PublishCounters() {
  const WorkerEngineCounters c = engine_.counters();
  packets_sent_.store(c.packets_sent, std::memory_order_relaxed);
  retransmissions_.store(c.retransmissions, std::memory_order_relaxed);
  fast_retransmissions_.store(c.fast_retransmissions, std::memory_order_relaxed);
  probes_sent_.store(c.probes_sent, std::memory_order_relaxed);
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
  total.probes_sent += probes_sent_.load(std::memory_order_relaxed);
  total.results_accepted += results_accepted_.load(std::memory_order_relaxed);
  total.duplicates += duplicates_.load(std::memory_order_relaxed);
  total.invalid += invalid_.load(std::memory_order_relaxed);
  total.multicast_received += multicast_received_total_.load(std::memory_order_relaxed);
  total.window += window_.load(std::memory_order_relaxed);
  const double rtt_us = double(min_rtt_ns_.load(std::memory_order_relaxed)) / 1e3;
  if (rtt_us > 0 && (total.min_rtt_us == 0 || rtt_us < total.min_rtt_us)) total.min_rtt_us = rtt_us;
}

}  // namespace switchml
