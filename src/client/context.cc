#include "switchml/context.h"

#include <grpcpp/grpcpp.h>
#include <netinet/in.h>

#include <algorithm>
#include <thread>

#include "client/client_log.h"
#include "client/switch_hosts.h"
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

void Work::PartDone(const Status& status) {
  std::function<void(const Status&)> callback;
  Status final_status;
  {
    std::lock_guard lock(mu_);
    if (!status.ok() && status_.ok()) status_ = status;
    if (--remaining_ != 0) return;
    cv_.notify_all();
    callback.swap(on_done_);
    final_status = status_;
  }
  if (callback) callback(final_status);
}

void Work::OnDone(std::function<void(const Status&)> callback) {
  Status final_status;
  {
    std::lock_guard lock(mu_);
    if (remaining_ > 0) {
      on_done_ = std::move(callback);
      return;
    }
    final_status = status_;
  }
  callback(final_status);
}

Status Work::Wait() {
  std::unique_lock lock(mu_);
  cv_.wait(lock, [&] { return remaining_ <= 0; });
  return status_;
}

bool Work::WaitFor(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mu_);
  return cv_.wait_for(lock, timeout, [&] { return remaining_ <= 0; });
}

bool Work::done() const {
  std::lock_guard lock(mu_);
  return remaining_ <= 0;
}

Status Work::status() const {
  std::lock_guard lock(mu_);
  return status_;
}

// ---- Context ----

struct Context::Impl {
  ContextConfig config;
  std::string job;  // "job 'name' at switch host:port[, ...]", for messages
  // One switch host of the job: its control connection and Join stream.
  struct Host {
    std::string job;  // "job 'name' at switch host:port", for messages
    std::shared_ptr<grpc::Channel> channel;
    std::unique_ptr<control::v1::Control::Stub> stub;
    grpc::ClientContext stream;
    std::unique_ptr<grpc::ClientReader<control::v1::JobEvent>> reader;
    std::thread control_thread;
    uint64_t token = 0;  // from the assignment, for Leave
  };
  std::vector<std::unique_ptr<Host>> hosts;  // worker thread t talks to host t % hosts
  std::vector<std::unique_ptr<WorkerThread>> workers;
  std::atomic<bool> stopping{false};
  std::once_flag stop_once;

  void FailAll(const Status& s) {
    for (auto& w : workers) w->Fail(s);
  }
  // Reads a host's job events until its stream ends; turns them into
  // failures of every thread (a job that fails on one host fails on all).
  void WatchControlStream(Host& host) {
    control::v1::JobEvent event;
    while (host.reader->Read(&event)) {
      if (!event.has_rank_lost()) continue;
      const auto& lost = event.rank_lost();
      FailAll(Status(StatusCode::kAborted, lost.rank() == ~0u
                                               ? host.job + " ended: " + lost.reason()
                                               : "rank " + std::to_string(lost.rank()) + " left " +
                                                     host.job + ": " + lost.reason()));
    }
    const grpc::Status end = host.reader->Finish();
    if (!stopping.load()) {
      FailAll(Status(StatusCode::kAborted, "lost the control connection to the switch (" +
                                               host.job + "): " + end.error_message() +
                                               " (did the switch stop?)"));
    }
  }
  // Tells each host that this rank leaves the job (`reason`: why, for the
  // other ranks; "": it stopped), so that the switch ends the job at once.
  void LeaveHosts(const std::string& reason) {
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
  // An I/O thread's operation timed out waiting for late ranks: the job is
  // over for this rank, and the others (the late ones too) learn why from the
  // switch instead of waiting out their own timeouts. Off the I/O thread.
  void OnTimedOut(const std::string& reason) {
    std::call_once(timed_out_once,
                   [&] { leaver = std::thread([this, reason] { LeaveHosts(reason); }); });
  }
  std::once_flag timed_out_once;
  std::thread leaver;  // OnTimedOut's; Stop() joins it
  // Ends the Join streams (of an assignment this worker cannot use).
  void Abandon() {
    for (auto& h : hosts) {
      if (!h->reader) continue;
      h->stream.TryCancel();
      h->reader->Finish();
      h->reader.reset();
    }
  }
};

namespace {

// What an I/O thread's endpoints need: buffers for the largest packet the
// job may use, receive batches sized to stay in cache (8 coalesced buffers).
transport::EndpointOptions WorkerEndpointOptions(const ContextConfig& config, size_t max_bytes) {
  transport::EndpointOptions o;
  o.max_datagram_bytes = max_bytes;
  o.claim_buffers = true;
  o.send_queue = 64;
  // Up to 64 small datagrams per call (fewer system calls), but no more than
  // 256 KiB of large ones, so a batch is still in cache when it is read.
  o.receive_batch = std::clamp<size_t>((size_t{256} << 10) / max_bytes, 8, 64);
  o.udp.coalesced_buffers = 8;
  o.udp.socket_buffer_bytes = int(config.socket_buffer_bytes);
  o.window =
      (size_t{config.pool_slots} + config.threads - 1) / std::max<uint32_t>(config.threads, 1);
  o.udp.offload = config.udp_offload;
  return o;
}

Status JoinError(const grpc::Status& s, const std::string& job) {
  const Status status = FromGrpc(s);
  if (s.error_code() == grpc::StatusCode::UNAVAILABLE) {
    return Status(status.code(), "cannot reach the switch's control plane for " + job + ": " +
                                     s.error_message() + " (is switchml-switch running there?)");
  }
  return Status(status.code(), "joining " + job + " failed: " + s.error_message());
}

// One host's part of the job, as its assignment gave it.
struct HostShare {
  std::vector<uint32_t> threads;  // the worker threads (global indexes) it serves
  sockaddr_in data{};             // where its data threads listen
  std::vector<uint16_t> ports;    // its data threads' ports
  std::vector<std::unique_ptr<transport::Endpoint>> groups;  // per thread, or none
  control::v1::Assignment assignment;
};

// Checks one host's assignment and opens what it asks for (result groups).
Status TakeAssignment(const ContextConfig& config, const control::v1::Assignment& a,
                      const sockaddr_in& control, const transport::EndpointOptions& options,
                      transport::Transport& transport, HostShare* share) {
  auto data = AssignedData(a, control);
  if (!data.ok()) return data.status();
  share->data = data.value().address;
  share->ports = std::move(data.value().ports);
  share->assignment = a;
  // With result groups, thread j of this host also receives on group j (host-local).
  if (a.result_groups_size() == 0) return Status::Ok();
  const size_t threads = share->threads.size();
  if (!config.result_multicast || size_t(a.result_groups_size()) != threads) {
    return Status(StatusCode::kInternal,
                  "the switch sent " + std::to_string(a.result_groups_size()) +
                      " result groups for " + std::to_string(threads) + " threads" +
                      (config.result_multicast ? "" : ", unasked"));
  }
  for (const std::string& text : a.result_groups()) {
    auto group = net::ParseAddress(text, 0);
    Status failed = group.status();
    if (group.ok() && group.value().sin_port == 0) failed = InvalidArgument("no port");
    if (failed.ok()) {
      auto endpoint = transport.JoinGroup(group.value(), in_addr{htonl(INADDR_LOOPBACK)}, options);
      failed = endpoint.status();
      if (endpoint.ok()) share->groups.push_back(std::move(endpoint).value());
    }
    if (!failed.ok()) {
      return Status(StatusCode::kFailedPrecondition,
                    "cannot receive results on the switch's group '" + text.substr(0, 64) +
                        "': " + failed.message() +
                        " (set result_multicast = false to receive them by unicast)");
    }
  }
  return Status::Ok();
}

}  // namespace

StatusOr<std::unique_ptr<Context>> Context::Start(const ContextConfig& config) {
  // The rest of the configuration is validated by the overload below.
  if (Status s = transport::CheckTransportName(config.transport, "transport"); !s.ok()) return s;
  auto made = transport::MakeTransport(
      config.transport,
      {{config.interface}, {config.dpdk_eal_args, config.dpdk_port, config.dpdk_address}});
  if (!made.ok()) return made.status();
  return Start(config, std::move(made).value());
}

StatusOr<std::unique_ptr<Context>> Context::Start(const ContextConfig& config,
                                                  std::shared_ptr<transport::Transport> transport) {
  if (Status s = config.Validate(); !s.ok()) return s;
  if (transport == nullptr) return InvalidArgument("Context::Start needs a transport");
  auto controls = ParseSwitchHosts(config.switch_address);
  if (!controls.ok()) return controls.status();
  const size_t host_count = controls.value().size();
  auto impl = std::make_unique<Impl>();
  impl->config = config;
  std::string switches;
  for (const sockaddr_in& control : controls.value()) {
    switches += (switches.empty() ? "" : ", ") + net::FormatAddress(control);
    impl->hosts.push_back(std::make_unique<Impl::Host>());
    impl->hosts.back()->job =
        "job '" + config.job_name + "' at switch " + net::FormatAddress(control);
  }
  impl->job = "job '" + config.job_name + "' at switch" + (host_count > 1 ? "es " : " ") + switches;

  // One endpoint per thread, on the address that faces its switch host. The
  // data path is assumed to follow the control path's route; the smallest
  // MTU of the routes bounds the packet size the switches may choose.
  std::optional<sockaddr_in> fixed_local;  // local_address, for every host
  if (!config.local_address.empty()) {
    auto parsed = net::ParseAddress(config.local_address, 0);
    if (!parsed.ok()) return parsed.status();
    fixed_local = parsed.value();
  }
  std::vector<sockaddr_in> locals;
  int path_elements = 0;
  for (const sockaddr_in& control : controls.value()) {
    auto route = transport->RouteToward(control);
    if (!route.ok()) return route.status();
    sockaddr_in local{};
    local.sin_family = AF_INET;
    if (fixed_local) {
      local = *fixed_local;
    } else {
      local.sin_addr = route.value().local;
    }
    local.sin_port = 0;
    locals.push_back(local);
    if (route.value().mtu > 0) {
      const int elements = int(ElementsPerPacketForMtu(size_t(route.value().mtu)));
      path_elements = path_elements == 0 ? elements : std::min(path_elements, elements);
    }
  }
  // Their buffers are sized once the switch has chosen the packet size.
  std::vector<std::unique_ptr<transport::Endpoint>> endpoints;
  std::vector<HostShare> shares(host_count);
  for (uint32_t t = 0; t < config.threads; ++t) {
    transport::EndpointOptions options =
        WorkerEndpointOptions(config, MaxPacketBytes(kMinElementsPerPacket));
    options.shard = t;
    options.shards = config.threads;
    auto endpoint = transport->Open(locals[t % host_count], options);
    if (!endpoint.ok()) return endpoint.status();
    endpoints.push_back(std::move(endpoint).value());
    shares[t % host_count].threads.push_back(t);
  }
  std::optional<net::AuthKey> secret;
  if (!config.auth_key.empty()) secret = net::ParseAuthKey(config.auth_key).value();  // checked

  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 5000);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 5000);
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  // Join the hosts in order, every rank alike (each Join waits for all
  // ranks): the first chooses the packet size, the others are asked for it.
  uint32_t elements_per_packet = config.elements_per_packet;
  for (size_t h = 0; h < host_count; ++h) {
    Impl::Host& host = *impl->hosts[h];
    HostShare& share = shares[h];
    control::v1::JoinRequest request;
    for (uint32_t t : share.threads) {
      request.add_data_addresses(net::FormatAddress(endpoints[t]->local_address()));
    }
    request.set_protocol_version(kWireVersion);
    request.set_job_name(config.job_name);
    request.set_rank(config.rank);
    request.set_world_size(config.world_size);
    request.set_elements_per_packet(elements_per_packet);
    request.set_pool_slots(config.pool_slots);
    if (path_elements > 0) request.set_path_elements_per_packet(uint32_t(path_elements));
    request.set_join_timeout_ms(config.join_timeout_ms);
    request.set_accept_result_multicast(config.result_multicast);
    if (secret) request.set_auth_key(std::string(secret->begin(), secret->end()));
    host.channel = grpc::CreateCustomChannel(net::FormatAddress(controls.value()[h]),
                                             grpc::InsecureChannelCredentials(), args);
    host.stub = control::v1::Control::NewStub(host.channel);
    host.reader = host.stub->Join(&host.stream, request);
    control::v1::JobEvent first;
    if (!host.reader->Read(&first)) {
      const Status s = JoinError(host.reader->Finish(), host.job);
      host.reader.reset();
      impl->Abandon();
      return s;
    }
    if (!first.has_assignment()) {
      impl->Abandon();
      return Status(StatusCode::kInternal, "the switch sent no assignment for " + host.job);
    }
    const auto& a = first.assignment();
    host.token = a.token();
    if (a.elements_per_packet() < kMinElementsPerPacket ||
        a.elements_per_packet() > kMaxElementsPerPacket ||
        (elements_per_packet != 0 && a.elements_per_packet() != elements_per_packet)) {
      impl->Abandon();
      return Status(StatusCode::kInternal, "the switch assigned elements_per_packet=" +
                                               std::to_string(a.elements_per_packet()) + " for " +
                                               host.job + ", which this worker cannot use");
    }
    elements_per_packet = a.elements_per_packet();
    const transport::EndpointOptions options =
        WorkerEndpointOptions(config, MaxPacketBytes(elements_per_packet));
    for (uint32_t t : share.threads) endpoints[t]->Reconfigure(options);
    if (Status s = TakeAssignment(config, a, controls.value()[h], options, *transport, &share);
        !s.ok()) {
      impl->Abandon();
      return Status(s.code(), s.message() + " (" + host.job + ")");
    }
  }
  impl->config.elements_per_packet = elements_per_packet;  // what is in effect

  // Thread j of a host's T threads owns the slots [j*S/T, (j+1)*S/T) of the
  // S slots that host holds for the job, and talks to its data thread j % shards.
  std::vector<sockaddr_in> destinations(config.threads);
  impl->workers.resize(config.threads);
  for (HostShare& share : shares) {
    const auto& a = share.assignment;
    const uint32_t slots = a.pool_slots(), threads = uint32_t(share.threads.size());
    for (uint32_t j = 0; j < threads; ++j) {
      const uint32_t t = share.threads[j];
      WorkerEngineConfig e;
      e.job = JobId(a.job_id());
      e.rank = Rank(uint16_t(config.rank));
      e.world_size = uint16_t(a.world_size());
      e.elements_per_packet = uint16_t(a.elements_per_packet());
      const ThreadRange range = ThreadShare(slots, j, threads);
      e.slot_offset = uint16_t(range.begin);
      e.pool_slots = uint16_t(range.size());
      // A fixed window is split like the tensor, over all threads; 0 lets
      // each thread measure.
      const uint32_t window = config.window_slots;
      e.window =
          uint16_t(std::min<uint64_t>(e.pool_slots, ThreadShare(window, t, config.threads).size()));
      e.retransmit_timeout = std::chrono::microseconds(config.retransmit_timeout_us);
      e.min_retransmit_timeout = std::chrono::microseconds(config.min_retransmit_timeout_us);
      e.max_retransmit_timeout = std::chrono::microseconds(config.max_retransmit_timeout_us);
      e.failure_timeout = std::chrono::milliseconds(config.failure_timeout_ms);
      e.operation_timeout = std::chrono::milliseconds(config.operation_timeout_ms);
      e.non_finite_error = config.non_finite_error;
      if (Status s = e.Validate(); !s.ok()) {
        impl->Abandon();
        return s;
      }
      std::optional<net::PacketAuthenticator> auth;
      if (secret) {
        auth.emplace(*secret, a.auth_salt(), a.job_id(),
                     net::WorkerSenderId(uint16_t(config.rank), uint16_t(j)));
      }
      impl->workers[t] = std::make_unique<WorkerThread>(
          e, std::move(endpoints[t]), share.groups.empty() ? nullptr : std::move(share.groups[j]),
          auth, std::chrono::microseconds(config.busy_poll_us));
      destinations[t] = share.data;
      destinations[t].sin_port = htons(share.ports[j % share.ports.size()]);
    }
  }
  std::unique_ptr<Context> context(new Context(std::move(impl)));
  Impl* raw = context->impl_.get();
  for (size_t t = 0; t < raw->workers.size(); ++t) {
    const auto on_timed_out = [raw](const std::string& reason) { raw->OnTimedOut(reason); };
    if (Status s = raw->workers[t]->Start(destinations[t], on_timed_out); !s.ok()) {
      return s;  // ~Context stops
    }
  }
  for (auto& host : raw->hosts) {
    Impl::Host* h = host.get();
    h->control_thread = std::thread([raw, h] { raw->WatchControlStream(*h); });
  }
  const ContextConfig& c = raw->config;
  const HostShare& first = shares[0];
  size_t ports = 0, slots = 0;
  for (const HostShare& share : shares) {
    ports += share.ports.size();
    slots += share.assignment.pool_slots();
  }
  ClientLog().info(
      "rank {} of {} in {}: data to {}{} ({} port{}), transport {} (offload: {}), {} elements per "
      "packet, {} slots, {} thread{}, window {}, results by {}, authentication {}",
      c.rank, c.world_size, raw->job, net::FormatIp(first.data.sin_addr),
      host_count > 1 ? " and " + std::to_string(host_count - 1) + " more host(s)" : "", ports,
      ports == 1 ? "" : "s", transport->name(), context->offload(), c.elements_per_packet, slots,
      c.threads, c.threads == 1 ? "" : "s",
      c.window_slots == 0 ? std::string("measured") : std::to_string(c.window_slots),
      first.groups.empty() && first.assignment.result_groups_size() == 0 ? "unicast"
                                                                         : "host-local multicast",
      secret ? "on" : "off");
  return context;
}

Context::Context(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

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
  auto job = std::shared_ptr<Work>(new Work(int(workers.size())));
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
                       end - begin, dtype, job);
  }
  return job;
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
