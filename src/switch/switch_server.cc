#include "switchml/switch_server.h"

#include <grpcpp/grpcpp.h>
#include <spdlog/spdlog.h>

#include <mutex>

#include "net/address.h"
#include "switch/bmv2/bmv2_data_plane.h"
#include "switch/control_service.h"
#include "switch/data_thread.h"
#include "switch/stats_format.h"
#include "transport/transport.h"

namespace switchml {
namespace {

std::string PortList(const std::vector<uint16_t>& ports) {
  std::string text;
  for (uint16_t p : ports) text += (text.empty() ? "" : ",") + std::to_string(p);
  return text;
}

}  // namespace

struct SwitchServer::Impl {
  SwitchConfig config;
  std::unique_ptr<ExternalDataPlane> external;  // a P4 switch, or null
  std::vector<std::unique_ptr<DataThread>> shards;
  std::unique_ptr<ControlService> service;
  std::unique_ptr<grpc::Server> server;
  uint16_t control_port = 0;
  std::vector<uint16_t> data_ports;
  // With result multicast: per shard, a socket on 127.0.0.1 that holds the
  // port of the shard's result groups (nothing is ever sent to it), so no
  // other switch on this host picks the same port.
  std::vector<std::unique_ptr<transport::Endpoint>> result_port_holders;
  std::vector<uint16_t> result_ports;
  std::once_flag stop_once;
};

Status SwitchConfig::Validate() const {
  if (data_threads == 0 || data_threads > kMaxThreads) {
    return InvalidArgument("data_threads=" + std::to_string(data_threads) +
                           " is out of range; use 1.." + std::to_string(kMaxThreads) +
                           " (about one per core)");
  }
  if (data_port != 0 && uint32_t(data_port) + data_threads > 65536) {
    return InvalidArgument("data_port=" + std::to_string(data_port) + " leaves no room for " +
                           std::to_string(data_threads) + " data threads' ports");
  }
  if (busy_poll_us > kMaxBusyPollUs) {
    return InvalidArgument("busy_poll_us=" + std::to_string(busy_poll_us) +
                           " is out of range; use 0.." + std::to_string(kMaxBusyPollUs) +
                           " (0: sleep at once)");
  }
  if (Status s = transport::CheckTransportName(transport, "transport"); !s.ok()) return s;
  if (bmv2 && data_threads != 1) {
    return InvalidArgument(
        "data_threads must be 1 with the bmv2 data plane (the P4 switch "
        "carries the data)");
  }
  return data_plane.Validate();
}

namespace {

// Sets `data` up to send host-local multicast and reserves the port of its
// result groups: an endpoint bound to it on 127.0.0.1. Not the data port:
// workers bind the groups' port, which a data endpoint on 0.0.0.0 forbids.
StatusOr<std::unique_ptr<transport::Endpoint>> ReserveResultPort(transport::Transport& transport,
                                                                 transport::Endpoint& data) {
  if (Status s = data.SetHostLocalMulticast(); !s.ok()) return s;
  sockaddr_in loopback{};
  loopback.sin_family = AF_INET;
  loopback.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  transport::EndpointOptions holder;
  holder.max_datagram_bytes = 64;
  holder.receive_batch = 1;
  holder.send_queue = 1;
  holder.socket_buffer_bytes = 4096;
  holder.offload = false;
  return transport.Open(loopback, holder);
}

}  // namespace

StatusOr<std::unique_ptr<SwitchServer>> SwitchServer::Start(const SwitchConfig& config) {
  // The rest of the configuration is validated by the overload below.
  if (Status s = transport::CheckTransportName(config.transport, "transport"); !s.ok()) return s;
  return Start(config, transport::MakeTransport(config.transport).value());
}

StatusOr<std::unique_ptr<SwitchServer>> SwitchServer::Start(
    const SwitchConfig& requested, std::shared_ptr<transport::Transport> transport) {
  if (transport == nullptr) return InvalidArgument("SwitchServer::Start needs a transport");
  SwitchConfig config = requested;
  std::unique_ptr<ExternalDataPlane> external;
  if (config.bmv2) {
    auto bmv2 = bmv2::ConnectBmv2(*config.bmv2);
    if (!bmv2.ok()) return bmv2.status();
    external = std::move(bmv2).value();
    // Pools and job ids are still allocated here, within the program's limits.
    config.data_plane.pool_slots = config.bmv2->pool_slots;
    config.data_plane.max_elements_per_packet = config.bmv2->elements_per_packet;
    config.data_plane.max_workers = bmv2::Bmv2DataPlane::kMaxWorkers;
  }
  if (Status s = config.Validate(); !s.ok()) return s;
  auto bind = net::ParseAddress(config.bind_address, config.data_port);
  if (!bind.ok()) return bind.status();

  auto impl = std::make_unique<Impl>();
  impl->config = config;
  impl->external = std::move(external);
  std::vector<DataThread*> shards;
  for (uint16_t s = 0; s < config.data_threads; ++s) {
    sockaddr_in local = bind.value();
    if (config.data_port != 0) local.sin_port = htons(uint16_t(config.data_port + s));
    if (impl->external) local.sin_port = 0;  // never used: the P4 switch carries the data
    auto endpoint = transport->Open(
        local, DataThread::EndpointOptions(config.data_plane, config.socket_buffer_bytes,
                                           config.udp_offload));
    if (!endpoint.ok()) return endpoint.status();
    if (config.result_multicast && !impl->external) {
      auto holder = ReserveResultPort(*transport, *endpoint.value());
      if (holder.ok()) {
        impl->result_ports.push_back(ntohs(holder.value()->local_address().sin_port));
        impl->result_port_holders.push_back(std::move(holder).value());
      } else {
        // Without a working loopback (a network namespace whose lo is down)
        // no worker can be on loopback either: results go by unicast.
        spdlog::warn("results go by unicast only: {}", holder.status().message());
        config.result_multicast = false;
        impl->result_ports.clear();
        impl->result_port_holders.clear();
      }
    }
    impl->data_ports.push_back(ntohs(endpoint.value()->local_address().sin_port));
    impl->shards.push_back(std::make_unique<DataThread>(
        config.data_plane, std::move(endpoint).value(), s, config.data_threads,
        std::chrono::microseconds(config.busy_poll_us)));
    shards.push_back(impl->shards.back().get());
  }
  impl->config.result_multicast = config.result_multicast;
  impl->service = std::make_unique<ControlService>(shards, impl->data_ports, impl->external.get(),
                                                   impl->result_ports);

  grpc::ServerBuilder builder;
  int selected = 0;
  const std::string listen =
      net::FormatAddress(bind.value()).substr(0, net::FormatAddress(bind.value()).rfind(':')) +
      ":" + std::to_string(config.control_port);
  builder.AddListeningPort(listen, grpc::InsecureServerCredentials(), &selected);
  builder.RegisterService(impl->service.get());
  // gRPC sets SO_REUSEPORT by default: a second daemon on the same port would
  // start, and jobs would split between the two and hang. A busy port must
  // fail here instead.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  // Notice workers whose connection vanished without a FIN (a cut cable).
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, 5000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 5000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  impl->server = builder.BuildAndStart();
  if (impl->server == nullptr || selected == 0) {
    return InvalidArgument("cannot listen for control connections on " + listen +
                           " (port in use? pick another with --control-port)");
  }
  impl->control_port = uint16_t(selected);
  if (impl->external) {
    // No packets come here: the registry's commands run on the caller's
    // thread (serialized by the data thread's command lock) instead.
    for (auto& shard : impl->shards) shard->Stop();
    spdlog::info("switch control listening on {}:{} (gRPC); jobs run on the P4 switch at {}:{}",
                 listen.substr(0, listen.rfind(':')), impl->control_port,
                 impl->external->data_address(), impl->external->data_port());
    return std::unique_ptr<SwitchServer>(new SwitchServer(std::move(impl)));
  }
  for (auto& shard : impl->shards) shard->Start();
  spdlog::info(
      "switch listening: control {}:{} (gRPC), data {}:{} ({}); pool {} slots of {} "
      "elements, up to {} workers per job; offload: {}",
      listen.substr(0, listen.rfind(':')), impl->control_port, listen.substr(0, listen.rfind(':')),
      PortList(impl->data_ports), transport->name(), config.data_plane.pool_slots,
      config.data_plane.max_elements_per_packet, config.data_plane.max_workers,
      impl->shards[0]->offload());
  return std::unique_ptr<SwitchServer>(new SwitchServer(std::move(impl)));
}

SwitchServer::SwitchServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

SwitchServer::~SwitchServer() { Stop(); }

void SwitchServer::Stop() {
  std::call_once(impl_->stop_once, [this] {
    impl_->service->EndAll("the switch is shutting down");
    impl_->server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
    impl_->server->Wait();
    for (auto& shard : impl_->shards) shard->Stop();
    spdlog::info("switch stopped");
  });
}

uint16_t SwitchServer::control_port() const { return impl_->control_port; }
uint16_t SwitchServer::data_port() const {
  return impl_->external ? impl_->external->data_port() : impl_->data_ports[0];
}
std::vector<uint16_t> SwitchServer::data_ports() const { return impl_->data_ports; }

std::vector<uint16_t> SwitchServer::result_ports() const { return impl_->result_ports; }

std::string SwitchServer::PrometheusText() {
  return FormatPrometheus(impl_->service->CollectStats());
}

}  // namespace switchml
