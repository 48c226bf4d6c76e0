#include "client/context_start.h"

#include <grpcpp/grpcpp.h>
#include <netinet/in.h>

#include <algorithm>
#include <optional>
#include <thread>

#include "client/client_log.h"
#include "client/context_impl.h"
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

Status JoinError(const grpc::Status& s, const std::string& job_text) {
  const Status status = FromGrpc(s);
  if (s.error_code() == grpc::StatusCode::UNAVAILABLE) {
    return Status(status.code(), "cannot reach the switch's control plane for " + job_text + ": " +
                                     s.error_message() + " (is switchml-switch running there?)");
  }
  return Status(status.code(), "joining " + job_text + " failed: " + s.error_message());
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

// One endpoint per thread, on the address that faces its switch host. The
// data path is assumed to follow the control path's route; the smallest MTU
// of the routes bounds the packet size the switches may choose.
struct Paths {
  std::vector<sockaddr_in> locals;  // per host
  int path_elements = 0;            // 0: no MTU known
};
StatusOr<Paths> FindPaths(const ContextConfig& config, const std::vector<sockaddr_in>& controls,
                          transport::Transport& transport) {
  std::optional<sockaddr_in> fixed_local;  // local_address, for every host
  if (!config.local_address.empty()) {
    auto parsed = net::ParseAddress(config.local_address, 0);
    if (!parsed.ok()) return parsed.status();
    fixed_local = parsed.value();
  }
  Paths paths;
  for (const sockaddr_in& control : controls) {
    auto route = transport.RouteToward(control);
    if (!route.ok()) return route.status();
    sockaddr_in local{};
    local.sin_family = AF_INET;
    if (fixed_local) {
      local = *fixed_local;
    } else {
      local.sin_addr = route.value().local;
    }
    local.sin_port = 0;
    paths.locals.push_back(local);
    if (route.value().mtu > 0) {
      const int elements = int(ElementsPerPacketForMtu(size_t(route.value().mtu)));
      paths.path_elements =
          paths.path_elements == 0 ? elements : std::min(paths.path_elements, elements);
    }
  }
  return paths;
}

// The threads' endpoints (thread t on host t % hosts); their buffers are
// sized once the switch has chosen the packet size.
StatusOr<std::vector<std::unique_ptr<transport::Endpoint>>> OpenEndpoints(
    const ContextConfig& config, const Paths& paths, transport::Transport& transport,
    std::vector<HostShare>& shares) {
  std::vector<std::unique_ptr<transport::Endpoint>> endpoints;
  const size_t host_count = shares.size();
  for (uint32_t t = 0; t < config.threads; ++t) {
    transport::EndpointOptions options =
        WorkerEndpointOptions(config, MaxPacketBytes(kMinElementsPerPacket));
    options.shard = t;
    options.shards = config.threads;
    auto endpoint = transport.Open(paths.locals[t % host_count], options);
    if (!endpoint.ok()) return endpoint.status();
    endpoints.push_back(std::move(endpoint).value());
    shares[t % host_count].threads.push_back(t);
  }
  return endpoints;
}

control::v1::JoinRequest MakeJoinRequest(
    const ContextConfig& config, const HostShare& share,
    const std::vector<std::unique_ptr<transport::Endpoint>>& endpoints,
    uint32_t elements_per_packet, int path_elements, const std::optional<net::AuthKey>& secret) {
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
  return request;
}

// Joins one host (waiting for every rank there) and reads its assignment.
// `elements_per_packet`: 0, or what the hosts before it chose, which this
// one must assign too.
StatusOr<control::v1::Assignment> JoinHost(ContextImpl::Host& host, const sockaddr_in& control,
                                           const control::v1::JoinRequest& request,
                                           uint32_t elements_per_packet) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 5000);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 5000);
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  host.channel = grpc::CreateCustomChannel(net::FormatAddress(control),
                                           grpc::InsecureChannelCredentials(), args);
  host.stub = control::v1::Control::NewStub(host.channel);
  host.reader = host.stub->Join(&host.stream, request);
  control::v1::JobEvent first;
  if (!host.reader->Read(&first)) {
    const Status s = JoinError(host.reader->Finish(), host.job_text);
    host.reader.reset();
    return s;
  }
  if (!first.has_assignment()) {
    return Status(StatusCode::kInternal, "the switch sent no assignment for " + host.job_text);
  }
  const auto& a = first.assignment();
  host.token = a.token();
  if (a.elements_per_packet() < kMinElementsPerPacket ||
      a.elements_per_packet() > kMaxElementsPerPacket ||
      (elements_per_packet != 0 && a.elements_per_packet() != elements_per_packet)) {
    return Status(StatusCode::kInternal, "the switch assigned elements_per_packet=" +
                                             std::to_string(a.elements_per_packet()) + " for " +
                                             host.job_text + ", which this worker cannot use");
  }
  return a;
}

// Joins the hosts in order, every rank alike (each Join waits for all ranks):
// the first chooses the packet size, the others are asked for it. Returns
// the packet size in effect.
StatusOr<uint32_t> JoinHosts(const ContextConfig& config, const std::vector<sockaddr_in>& controls,
                             const Paths& paths, const std::optional<net::AuthKey>& secret,
                             transport::Transport& transport, ContextImpl& impl,
                             std::vector<std::unique_ptr<transport::Endpoint>>& endpoints,
                             std::vector<HostShare>& shares) {
  uint32_t elements_per_packet = config.elements_per_packet;
  for (size_t h = 0; h < controls.size(); ++h) {
    ContextImpl::Host& host = *impl.hosts[h];
    HostShare& share = shares[h];
    auto a = JoinHost(
        host, controls[h],
        MakeJoinRequest(config, share, endpoints, elements_per_packet, paths.path_elements, secret),
        elements_per_packet);
    if (!a.ok()) {
      impl.Abandon();
      return a.status();
    }
    elements_per_packet = a.value().elements_per_packet();
    const transport::EndpointOptions options =
        WorkerEndpointOptions(config, MaxPacketBytes(elements_per_packet));
    for (uint32_t t : share.threads) endpoints[t]->Reconfigure(options);
    if (Status s = TakeAssignment(config, a.value(), controls[h], options, transport, &share);
        !s.ok()) {
      impl.Abandon();
      return Status(s.code(), s.message() + " (" + host.job_text + ")");
    }
  }
  return elements_per_packet;
}

// The engine of thread t, the j-th of the `threads` a host serves: it owns
// the slots [j*S/T, (j+1)*S/T) of the S slots that host holds for the job.
WorkerEngineConfig EngineConfig(const ContextConfig& config, const control::v1::Assignment& a,
                                uint32_t t, uint32_t j, uint32_t threads) {
  WorkerEngineConfig e;
  e.job = JobId(a.job_id());
  e.rank = Rank(uint16_t(config.rank));
  e.world_size = uint16_t(a.world_size());
  e.elements_per_packet = uint16_t(a.elements_per_packet());
  const ThreadRange range = ThreadShare(a.pool_slots(), j, threads);
  e.slot_offset = uint16_t(range.begin);
  e.pool_slots = uint16_t(range.size());
  // A fixed window is split like the tensor, over all threads; 0 lets each
  // thread measure.
  e.window = uint16_t(
      std::min<uint64_t>(e.pool_slots, ThreadShare(config.window_slots, t, config.threads).size()));
  e.retransmit_timeout = std::chrono::microseconds(config.retransmit_timeout_us);
  e.min_retransmit_timeout = std::chrono::microseconds(config.min_retransmit_timeout_us);
  e.max_retransmit_timeout = std::chrono::microseconds(config.max_retransmit_timeout_us);
  e.failure_timeout = std::chrono::milliseconds(config.failure_timeout_ms);
  e.operation_timeout = std::chrono::milliseconds(config.operation_timeout_ms);
  e.non_finite_error = config.non_finite_error;
  e.switch_answers_probes = a.answers_probes();
  e.switch_accepts_exponent_only = a.exponent_only_packets();
  return e;
}

// The I/O threads (not started), and where each sends: thread j of a host
// talks to its data thread j % shards.
StatusOr<std::vector<sockaddr_in>> MakeWorkers(
    const ContextConfig& config, const std::optional<net::AuthKey>& secret,
    std::vector<HostShare>& shares, std::vector<std::unique_ptr<transport::Endpoint>>& endpoints,
    ContextImpl& impl) {
  std::vector<sockaddr_in> destinations(config.threads);
  impl.workers.resize(config.threads);
  for (HostShare& share : shares) {
    const auto& a = share.assignment;
    const uint32_t threads = uint32_t(share.threads.size());
    for (uint32_t j = 0; j < threads; ++j) {
      const uint32_t t = share.threads[j];
      const WorkerEngineConfig e = EngineConfig(config, a, t, j, threads);
      if (Status s = e.Validate(); !s.ok()) return s;
      std::optional<net::PacketAuthenticator> auth;
      if (secret) {
        auth.emplace(*secret, a.auth_salt(), a.job_id(),
                     net::WorkerSenderId(uint16_t(config.rank), uint16_t(j)));
      }
      impl.workers[t] = std::make_unique<WorkerThread>(
          e, std::move(endpoints[t]), share.groups.empty() ? nullptr : std::move(share.groups[j]),
          auth, std::chrono::microseconds(config.busy_poll_us));
      destinations[t] = share.data;
      destinations[t].sin_port = htons(share.ports[j % share.ports.size()]);
    }
  }
  return destinations;
}

void LogStart(const ContextImpl& impl, const std::vector<HostShare>& shares,
              const std::string& transport, const std::string& offload, bool keyed) {
  const ContextConfig& c = impl.config;
  const HostShare& first = shares[0];
  size_t ports = 0, slots = 0;
  for (const HostShare& share : shares) {
    ports += share.ports.size();
    slots += share.assignment.pool_slots();
  }
  const size_t more_hosts = shares.size() - 1;
  ClientLog().info(
      "rank {} of {} in {}: data to {}{} ({} port{}), transport {} (offload: {}), {} elements per "
      "packet, {} slots, {} thread{}, window {}, results by {}, authentication {}",
      c.rank, c.world_size, impl.job_text, net::FormatIp(first.data.sin_addr),
      more_hosts > 0 ? " and " + std::to_string(more_hosts) + " more host(s)" : "", ports,
      ports == 1 ? "" : "s", transport, offload, c.elements_per_packet, slots, c.threads,
      c.threads == 1 ? "" : "s",
      c.window_slots == 0 ? std::string("measured") : std::to_string(c.window_slots),
      first.groups.empty() && first.assignment.result_groups_size() == 0 ? "unicast"
                                                                         : "host-local multicast",
      keyed ? "on" : "off");
}

}  // namespace

StatusOr<std::unique_ptr<Context>> StartContext(const ContextConfig& config,
                                                std::shared_ptr<transport::Transport> transport) {
  if (Status s = config.Validate(); !s.ok()) return s;
  if (transport == nullptr) return InvalidArgument("StartContext needs a transport");
  auto controls = ParseSwitchHosts(config.switch_address);
  if (!controls.ok()) return controls.status();
  auto impl = std::make_unique<ContextImpl>();
  impl->config = config;
  impl->NameHosts(controls.value());
  auto paths = FindPaths(config, controls.value(), *transport);
  if (!paths.ok()) return paths.status();
  std::vector<HostShare> shares(controls.value().size());
  auto endpoints = OpenEndpoints(config, paths.value(), *transport, shares);
  if (!endpoints.ok()) return endpoints.status();
  std::optional<net::AuthKey> secret;
  if (!config.auth_key.empty()) secret = net::ParseAuthKey(config.auth_key).value();  // checked
  auto elements = JoinHosts(config, controls.value(), paths.value(), secret, *transport, *impl,
                            endpoints.value(), shares);
  if (!elements.ok()) return elements.status();
  impl->config.elements_per_packet = elements.value();  // what is in effect
  auto destinations = MakeWorkers(config, secret, shares, endpoints.value(), *impl);
  if (!destinations.ok()) {
    impl->Abandon();
    return destinations.status();
  }
  ContextImpl* raw = impl.get();
  auto context = std::make_unique<Context>(std::move(impl));
  if (Status s = raw->StartThreads(destinations.value()); !s.ok()) return s;  // ~Context stops
  LogStart(*raw, shares, transport->name(), context->offload(), secret.has_value());
  return context;
}

}  // namespace switchml
