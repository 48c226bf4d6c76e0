#include "switchml/switch_server.h"

#include <grpcpp/grpcpp.h>
#include <prometheus/collectable.h>
#include <prometheus/exposer.h>
#include <spdlog/spdlog.h>

#include <mutex>

#include "net/address.h"
#include "switch/control_service.h"
#include "switch/metrics.h"
#include "switch/software_target.h"
#include "switch/stats_format.h"
#include "switch/switch_start.h"
#include "transport/transport.h"

namespace switchml {
namespace {

std::string PortList(const std::vector<uint16_t>& ports) {
  std::string text;
  for (uint16_t p : ports) text += (text.empty() ? "" : ",") + std::to_string(p);
  return text;
}

}  // namespace

struct SwitchServerImpl {
  SwitchConfig config;
  std::unique_ptr<DataPlaneTarget> target;
  std::unique_ptr<ControlService> service;
  std::unique_ptr<grpc::Server> server;
  uint16_t control_port = 0;
  std::shared_ptr<prometheus::Collectable> metrics;  // the exposer holds a weak pointer
  std::unique_ptr<prometheus::Exposer> exposer;
  uint16_t metrics_port = 0;
  std::once_flag stop_once;

  // The gRPC control service at `listen` (HOST:PORT; port 0: a free one).
  Status ServeControl(const std::string& listen);
  Status ServeMetrics(const std::string& address);
  // Serves the control plane over `target`, then Start()s it.
  static StatusOr<std::unique_ptr<SwitchServer>> Serve(const SwitchConfig& config,
                                                       std::unique_ptr<DataPlaneTarget> target);
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
  if (job_stats_grace_s > kMaxJobStatsGraceS) {
    return InvalidArgument("job_stats_grace_s=" + std::to_string(job_stats_grace_s) +
                           " is out of range; use 0.." + std::to_string(kMaxJobStatsGraceS) +
                           " (seconds; 0: an ended job's counters go with it)");
  }
  if (Status s = transport::CheckTransportName(transport, "transport"); !s.ok()) return s;
  if (Status s = transport::CheckElementsPerPacket(
          transport, data_plane.max_elements_per_packet, "data_plane.max_elements_per_packet",
          " (--max-elements-per-packet " + std::to_string(transport::kMaxAfXdpElementsPerPacket) +
              ")");
      !s.ok()) {
    return s;
  }
  if (auto bind = net::ParseAddress(bind_address, 0); !bind.ok()) return bind.status();
  if (!upstream.empty()) {
    if (auto up = net::ParseAddress(upstream, kDefaultControlPort); !up.ok()) {
      return InvalidArgument("upstream='" + upstream + "': " + up.status().message() +
                             "; use HOST[:PORT] of the upstream switch's control plane");
    }
  }
  return data_plane.Validate();
}

Status SwitchConfig::ValidateWithoutSoftwareDataPlane() const {
  if (Status s = Validate(); !s.ok()) return s;
  // Changed settings of the software data plane would be ignored: refuse them.
  const SwitchConfig& config = *this;
  const SwitchConfig defaults;
  const DataPlaneConfig& d = defaults.data_plane;
  const DataPlaneConfig& c = config.data_plane;
  auto refuse = [&](const std::string& field, uint64_t value) {
    return InvalidArgument(field + "=" + std::to_string(value) +
                           " applies to the software data plane only; this switch's jobs run on "
                           "another data plane, which has its own limits: leave it at its "
                           "default");
  };
  if (config.data_threads != defaults.data_threads) {
    return refuse("data_threads", config.data_threads);
  }
  if (c.pool_slots != d.pool_slots) return refuse("data_plane.pool_slots", c.pool_slots);
  if (c.max_elements_per_packet != d.max_elements_per_packet) {
    return refuse("data_plane.max_elements_per_packet", c.max_elements_per_packet);
  }
  if (c.max_workers != d.max_workers) return refuse("data_plane.max_workers", c.max_workers);
  if (c.max_jobs != d.max_jobs) return refuse("data_plane.max_jobs", c.max_jobs);
  if (!config.upstream.empty()) {
    return InvalidArgument("upstream='" + config.upstream +
                           "': only the software data plane forwards to an upstream switch "
                           "(docs/design.md §10); drop --upstream or run the software switch");
  }
  return Status::Ok();
}

namespace {

// The metrics endpoint's source: a fresh snapshot of the service's stats on
// every scrape.
class SwitchCollectable final : public prometheus::Collectable {
 public:
  explicit SwitchCollectable(ControlService* service) : service_(service) {}
  std::vector<prometheus::MetricFamily> Collect() const override {
    return MetricFamilies(service_->CollectStats());
  }

 private:
  ControlService* service_;
};

}  // namespace

Status SwitchServerImpl::ServeMetrics(const std::string& address) {
  auto parsed = net::ParseAddress(address, 0);
  if (!parsed.ok()) return InvalidArgument("metrics_address: " + parsed.status().message());
  const std::string bind = net::FormatAddress(parsed.value());
  try {
    exposer = std::make_unique<prometheus::Exposer>(bind, /*num_threads=*/1);
  } catch (const std::exception& e) {
    return InvalidArgument("cannot serve metrics on " + bind + ": " + e.what() +
                           " (port in use? pick another with --metrics-address)");
  }
  metrics = std::make_shared<SwitchCollectable>(service.get());
  exposer->RegisterCollectable(metrics);
  const std::vector<int> ports = exposer->GetListeningPorts();
  metrics_port = ports.empty() ? 0 : uint16_t(ports[0]);
  spdlog::info("metrics at http://{}:{}/metrics", bind.substr(0, bind.rfind(':')), metrics_port);
  return Status::Ok();
}

StatusOr<std::unique_ptr<SwitchServer>> SwitchServer::Start(const SwitchConfig& config) {
  // The rest of the configuration is validated by the overload below.
  if (Status s = transport::CheckTransportName(config.transport, "transport"); !s.ok()) return s;
  auto made = transport::MakeTransport(
      config.transport,
      {{config.interface}, {config.dpdk_eal_args, config.dpdk_port, config.dpdk_address}});
  if (!made.ok()) return made.status();
  return StartSwitchServer(config, std::move(made).value());
}

StatusOr<std::unique_ptr<SwitchServer>> StartSwitchServer(
    const SwitchConfig& config, std::shared_ptr<transport::Transport> transport) {
  if (transport == nullptr) return InvalidArgument("StartSwitchServer needs a transport");
  if (Status s = config.Validate(); !s.ok()) return s;
  auto software = SoftwareTarget::Open(config, *transport);
  if (!software.ok()) return software.status();
  return SwitchServerImpl::Serve(config, std::move(software).value());
}

StatusOr<std::unique_ptr<SwitchServer>> StartSwitchServer(const SwitchConfig& config,
                                                          std::unique_ptr<DataPlaneTarget> target) {
  if (target == nullptr) return InvalidArgument("StartSwitchServer needs a data-plane target");
  if (Status s = config.ValidateWithoutSoftwareDataPlane(); !s.ok()) return s;
  return SwitchServerImpl::Serve(config, std::move(target));
}

StatusOr<std::unique_ptr<SwitchServer>> SwitchServerImpl::Serve(
    const SwitchConfig& config, std::unique_ptr<DataPlaneTarget> target) {
  auto impl = std::make_unique<SwitchServerImpl>();
  impl->config = config;
  impl->target = std::move(target);
  const bool multicast = !impl->target->result_ports().empty();
  impl->config.result_multicast = multicast;
  std::unique_ptr<UpstreamClient> upstream;
  UpstreamClient* upstream_raw = nullptr;
  if (!config.upstream.empty()) {
    auto client =
        UpstreamClient::Create(config.upstream, config.control_port, impl->target->data_ports());
    if (!client.ok()) return client.status();
    upstream = std::move(client).value();
    upstream_raw = upstream.get();
  }
  impl->service = std::make_unique<ControlService>(
      impl->target.get(), multicast, std::chrono::seconds(impl->config.job_stats_grace_s),
      std::move(upstream));

  const std::string host = net::FormatAddress(net::ParseAddress(config.bind_address, 0).value());
  const std::string listen =
      host.substr(0, host.rfind(':')) + ":" + std::to_string(config.control_port);
  if (Status s = impl->ServeControl(listen); !s.ok()) return s;
  if (upstream_raw != nullptr) {
    upstream_raw->SetControlPort(impl->control_port);
    spdlog::info("a rack switch: every job's joins go to the {}", upstream_raw->name());
  }
  if (!config.metrics_address.empty()) {
    if (Status s = impl->ServeMetrics(config.metrics_address); !s.ok()) return s;
  }
  const std::string listen_host = listen.substr(0, listen.rfind(':'));
  impl->target->Start();
  const DataPlaneTarget& t = *impl->target;
  const DataPlaneConfig limits = t.limits();
  const std::string data_host = t.data_address().empty() ? listen_host : t.data_address();
  spdlog::info(
      "switch listening: control {}:{} (gRPC), data on the {} data plane at {}:{}; pool {} slots "
      "of {} elements, up to {} workers per job{}{}",
      listen_host, impl->control_port, t.name(), data_host, PortList(t.data_ports()),
      limits.pool_slots, limits.max_elements_per_packet, limits.max_workers,
      t.description().empty() ? "" : "; transport " + config.transport + ": ", t.description());
  return std::make_unique<SwitchServer>(std::move(impl));
}

Status SwitchServerImpl::ServeControl(const std::string& listen) {
  grpc::ServerBuilder builder;
  int selected = 0;
  builder.AddListeningPort(listen, grpc::InsecureServerCredentials(), &selected);
  builder.RegisterService(service.get());
  // gRPC sets SO_REUSEPORT by default: a second daemon on the same port would
  // start, and jobs would split between the two and hang. A busy port must
  // fail here instead.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  // Notice workers whose connection vanished without a FIN (a cut cable).
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, 5000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 5000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  // Workers (every 5 s) and rack switches (every 2 s) ping an idle Join
  // stream the same way; gRPC's default (one ping per 5 minutes without
  // data, two strikes) would answer with GOAWAY "too_many_pings" once a
  // job waits a few seconds, e.g. for a late rank.
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 1000);
  server = builder.BuildAndStart();
  if (server == nullptr || selected == 0) {
    return InvalidArgument("cannot listen for control connections on " + listen +
                           " (port in use? pick another with --control-port)");
  }
  control_port = uint16_t(selected);
  return Status::Ok();
}

SwitchServer::SwitchServer(std::unique_ptr<SwitchServerImpl> impl) : impl_(std::move(impl)) {}

SwitchServer::~SwitchServer() { Stop(); }

void SwitchServer::Stop() {
  std::call_once(impl_->stop_once, [this] {
    impl_->exposer.reset();  // no scrape runs past here
    impl_->service->EndAll("the switch is shutting down");
    impl_->server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
    impl_->server->Wait();
    impl_->target->Stop();
    spdlog::info("switch stopped");
  });
}

uint16_t SwitchServer::control_port() const { return impl_->control_port; }
uint16_t SwitchServer::metrics_port() const { return impl_->metrics_port; }
uint16_t SwitchServer::data_port() const { return impl_->target->data_ports()[0]; }
std::vector<uint16_t> SwitchServer::data_ports() const { return impl_->target->data_ports(); }

std::vector<uint16_t> SwitchServer::result_ports() const {
  return impl_->config.result_multicast ? impl_->target->result_ports() : std::vector<uint16_t>{};
}

std::string SwitchServer::PrometheusText() {
  return FormatPrometheus(impl_->service->CollectStats());
}

}  // namespace switchml
