#include "switchml/context.h"

#include <grpcpp/grpcpp.h>
#include <netinet/in.h>

#include <algorithm>
#include <thread>

#include "client/client_log.h"
#include "client/context_impl.h"
#include "client/context_start.h"
#include "client/switch_hosts.h"
#include "client/work_state.h"
#include "client/worker_thread.h"
#include "common/thread_split.h"
#include "net/address.h"
#include "net/packet_auth.h"
#include "rpc/assignment.h"
#include "rpc/grpc_status.h"
#include "switchml/control.grpc.pb.h"
#include "transport/transport.h"
#include "wire/wire_format.h"

namespace switchml {

// ---- Work ----

Work::Work(std::shared_ptr<WorkState> state) : state_(std::move(state)) {}
Status Work::Wait() { return state_->Wait(); }
bool Work::WaitFor(std::chrono::milliseconds timeout) { return state_->WaitFor(timeout); }
bool Work::done() const { return state_->done(); }
Status Work::status() const { return state_->status(); }
void Work::OnDone(std::function<void(const Status&)> callback) {
  state_->OnDone(std::move(callback));
}

// ---- Context ----

void ContextImpl::NameHosts(const std::vector<sockaddr_in>& controls) {
  std::string switches;
  for (const sockaddr_in& control : controls) {
    switches += (switches.empty() ? "" : ", ") + net::FormatAddress(control);
    hosts.push_back(std::make_unique<Host>());
    hosts.back()->job_text =
        "job '" + config.job_name + "' at switch " + net::FormatAddress(control);
  }
  job_text =
      "job '" + config.job_name + "' at switch" + (controls.size() > 1 ? "es " : " ") + switches;
}

Status ContextImpl::StartThreads(const std::vector<sockaddr_in>& destinations) {
  for (size_t t = 0; t < workers.size(); ++t) {
    const auto on_timed_out = [this](const std::string& reason) { OnTimedOut(reason); };
    if (Status s = workers[t]->Start(destinations[t], on_timed_out); !s.ok()) return s;
  }
  for (auto& host : hosts) {
    Host* h = host.get();
    h->control_thread = std::thread([this, h] { WatchControlStream(*h); });
  }
  return Status::Ok();
}

void ContextImpl::FailAll(const Status& s) {
  for (auto& w : workers) w->Fail(s);
}

void ContextImpl::WatchControlStream(Host& host) {
  control::v1::JobEvent event;
  while (host.reader->Read(&event)) {
    if (!event.has_rank_lost()) continue;
    const auto& lost = event.rank_lost();
    FailAll(Status(StatusCode::kAborted, lost.rank() == ~0u
                                             ? host.job_text + " ended: " + lost.reason()
                                             : "rank " + std::to_string(lost.rank()) + " left " +
                                                   host.job_text + ": " + lost.reason()));
  }
  const grpc::Status end = host.reader->Finish();
  if (!stopping.load()) {
    FailAll(Status(StatusCode::kAborted, "lost the control connection to the switch (" +
                                             host.job_text + "): " + end.error_message() +
                                             " (did the switch stop?)"));
  }
}

void ContextImpl::LeaveHosts(const std::string& reason) {
  // A switch that stopped answering would only make Leave wait out its
  // deadline; closing the stream ends the job there just as well.
  for (size_t h = 0; h < hosts.size(); ++h) {
    Host& host = *hosts[h];
    bool silent = false;
    for (size_t t = h; t < workers.size(); t += hosts.size()) {
      silent = silent || workers[t]->switch_silent();
    }
    if (host.token == 0 || silent) continue;
    control::v1::LeaveRequest leave;
    leave.set_job_name(config.job_name);
    leave.set_rank(config.rank);
    leave.set_token(host.token);
    leave.set_reason(reason);
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
    control::v1::LeaveReply reply;
    (void)host.stub->Leave(&context, leave, &reply);
  }
}

void ContextImpl::OnTimedOut(const std::string& reason) {
  std::call_once(timed_out_once,
                 [&] { leaver = std::thread([this, reason] { LeaveHosts(reason); }); });
}

void ContextImpl::Abandon() {
  for (auto& h : hosts) {
    if (!h->reader) continue;
    h->stream.TryCancel();
    h->reader->Finish();
    h->reader.reset();
  }
}

StatusOr<std::unique_ptr<Context>> Context::Start(const ContextConfig& config) {
  // The rest of the configuration is validated by the overload below.
  if (Status s = transport::CheckTransportName(config.transport, "transport"); !s.ok()) return s;
  auto made = transport::MakeTransport(
      config.transport,
      {{config.interface}, {config.dpdk_eal_args, config.dpdk_port, config.dpdk_address}});
  if (!made.ok()) return made.status();
  return StartContext(config, std::move(made).value());
}

Context::Context(std::unique_ptr<ContextImpl> impl) : impl_(std::move(impl)) {}

Context::~Context() { Stop(); }

void Context::Stop() {
  std::call_once(impl_->stop_once, [this] {
    impl_->stopping.store(true);
    for (auto& w : impl_->workers) w->Stop();
    if (impl_->leaver.joinable()) impl_->leaver.join();
    impl_->LeaveHosts("");
    for (auto& host : impl_->hosts) {
      host->stream.TryCancel();
      if (host->control_thread.joinable()) {
        host->control_thread.join();
      } else if (host->reader) {
        host->reader->Finish();
      }
    }
  });
}

std::shared_ptr<Work> Context::AllReduceAsync(const void* in, void* out, size_t count,
                                              DType dtype) {
  auto& workers = impl_->workers;
  auto state = std::make_shared<WorkState>(int(workers.size()));
  // Split the tensor into one contiguous slice of whole chunks per thread;
  // every rank splits identically, so slice t meets slice t of every rank.
  const size_t k = impl_->config.elements_per_packet;  // the assigned value
  const size_t chunks = (count + k - 1) / k;
  const auto* src = static_cast<const uint8_t*>(in);
  auto* dst = static_cast<uint8_t*>(out);
  for (size_t t = 0; t < workers.size(); ++t) {
    const ThreadRange share = ThreadShare(chunks, uint32_t(t), uint32_t(workers.size()));
    const size_t begin = std::min(count, share.begin * k);
    const size_t end = std::min(count, share.end * k);
    workers[t]->Submit(src ? src + 4 * begin : nullptr, dst ? dst + 4 * begin : nullptr,
                       end - begin, dtype, state);
  }
  return std::make_shared<Work>(state);
}

uint32_t Context::rank() const { return impl_->config.rank; }
uint32_t Context::world_size() const { return impl_->config.world_size; }
const ContextConfig& Context::config() const { return impl_->config; }

std::string Context::offload() const {
  // Every thread asked for the same; the first thread's answer stands for all.
  return impl_->workers.empty() ? "off" : impl_->workers[0]->offload();
}

ContextCounters Context::counters() const {
  ContextCounters total;
  for (const auto& w : impl_->workers) w->AddCounters(total);
  return total;
}

}  // namespace switchml
