// switchml-switch: the switch daemon. gRPC control plane plus either the
// software UDP data plane or a BMv2 P4 switch that it programs
// (--dataplane bmv2); stops cleanly on SIGINT or SIGTERM.
#include <grpc/support/log.h>
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <optional>
#include <sstream>

#include "client/client_log.h"
#include "switch/bmv2/bmv2_target.h"
#include "switch/switch_start.h"
#include "switchml/switch_server.h"
#include "switchml/version.h"

using switchml::ParseLogLevel;

namespace {

// What the command line sets beyond SwitchConfig.
struct Options {
  switchml::SwitchConfig config;
  std::string bind = "0.0.0.0";
  std::string port_file;
  // SWITCHML_LOG_LEVEL, as for the library; --log-level wins.
  std::string log_level =
      std::getenv("SWITCHML_LOG_LEVEL") ? std::getenv("SWITCHML_LOG_LEVEL") : "info";
  int max_elements = config.data_plane.max_elements_per_packet;
  int max_workers = config.data_plane.max_workers;
  int max_jobs = config.data_plane.max_jobs;
  std::string dataplane = "software";
  switchml::bmv2::Bmv2Config bmv2;
  std::string bmv2_cli = "simple_switch_CLI";
};

void AddSoftwareOptions(CLI::App& app, Options& o) {
  switchml::SwitchConfig& config = o.config;
  app.add_option("--bind", o.bind, "IPv4 address to listen on");
  app.add_option("--control-port", config.control_port, "gRPC control port (0: pick a free one)");
  app.add_option("--data-port", config.data_port,
                 "UDP data port, the first of --data-threads (0: pick free ones)");
  app.add_option("--data-threads", config.data_threads,
                 "data threads (shards), each with its own port and core")
      ->check(CLI::Range(uint32_t{1}, switchml::kMaxThreads));
  app.add_option("--pool-slots", config.data_plane.pool_slots,
                 "aggregation slots shared by all jobs")
      ->check(CLI::Range(1, 1 << 24));
  app.add_option("--max-elements-per-packet", o.max_elements,
                 "largest elements per packet a job may use: a power of two, 32..8192")
      ->check(
          CLI::Range(int(switchml::kMinElementsPerPacket), int(switchml::kMaxElementsPerPacket)))
      ->check(CLI::Validator(
          [](const std::string& v) -> std::string {
            const long n = std::strtol(v.c_str(), nullptr, 10);
            return (n & (n - 1)) == 0 ? "" : "must be a power of two (32, 64, ..., 8192), not " + v;
          },
          "POWER_OF_TWO"));
  app.add_option("--max-workers", o.max_workers, "largest world size of a job")
      ->check(CLI::Range(1, int(switchml::kMaxWorldSize)));
  app.add_option("--max-jobs", o.max_jobs, "jobs at once")->check(CLI::Range(1, 65535));
  app.add_option("--result-multicast", config.result_multicast,
                 "send each result once to a host-local multicast group when all of a job's "
                 "workers are on loopback (true/false)");
  app.add_option("--busy-poll-us", config.busy_poll_us,
                 "out of packets, poll this long (microseconds, yielding the CPU) before sleeping; "
                 "0: sleep at once")
      ->check(CLI::Range(uint32_t{0}, switchml::kMaxBusyPollUs));
  app.add_option("--udp-offload", config.udp_offload,
                 "receive coalesced and send segmented datagrams (UDP GRO/GSO) where the kernel "
                 "has them (true/false)");
}

void AddTransportAndServiceOptions(CLI::App& app, Options& o) {
  switchml::SwitchConfig& config = o.config;
  app.add_option("--transport", config.transport,
                 "how data packets travel: udp (kernel UDP sockets), af_xdp (AF_XDP sockets, "
                 "kernel bypass; needs root) or dpdk (a DPDK poll-mode port; needs root)");
  app.add_option("--metrics-address", config.metrics_address,
                 "serve Prometheus metrics over HTTP at HOST:PORT (GET /metrics); empty: off");
  app.add_option("--job-stats-grace-s", config.job_stats_grace_s,
                 "keep an ended job's counters in the stats and metrics this long (seconds; 0: "
                 "they go with the job; the totals never go)")
      ->check(CLI::Range(uint32_t{0}, switchml::SwitchConfig::kMaxJobStatsGraceS));
  app.add_option("--interface", config.interface,
                 "af_xdp: the network interface (default: the one holding --bind)");
  app.add_option("--dpdk-eal", config.dpdk_eal_args,
                 "dpdk: the EAL arguments, quoted as one (e.g. \"-l 0 --no-huge -m 512 "
                 "--vdev=net_af_packet0,iface=eth0\")");
  app.add_option("--dpdk-port", config.dpdk_port,
                 "dpdk: the port's device name (default: the only one)");
  app.add_option("--dpdk-address", config.dpdk_address,
                 "dpdk: the port's IPv4 address (default: --bind's)");
  app.add_option("--upstream", config.upstream,
                 "HOST[:PORT] of an upstream switch: be a rack switch of a tree (docs/design.md "
                 "§10), forwarding joins there and each completed slot as one member");
  app.add_option("--port-file", o.port_file, "write 'CONTROL_PORT DATA_PORT' here once listening");
  app.add_option("--log-level", o.log_level, "trace, debug, info, warn, error, critical or off")
      ->check(CLI::Validator(
          [](const std::string& v) -> std::string {
            return ParseLogLevel(v)
                       ? ""
                       : "'" + v + "' is not trace, debug, info, warn, error, critical or off";
          },
          "LEVEL"));
}

void AddBmv2Options(CLI::App& app, Options& o) {
  app.add_option("--dataplane", o.dataplane, "software (this process) or bmv2 (a P4 switch)")
      ->check(CLI::IsMember({"software", "bmv2"}));
  auto* p4 = app.add_option_group("bmv2", "with --dataplane bmv2 (see p4/README.md)");
  p4->add_option("--bmv2-cli", o.bmv2_cli, "runtime CLI command (words split on spaces)");
  p4->add_option("--bmv2-thrift-port", o.bmv2.thrift_port, "simple_switch's Thrift port");
  p4->add_option("--bmv2-hosts", o.bmv2.hosts_file, "TOML file: ip, mac, port of each host");
  p4->add_option("--bmv2-switch-ip", o.bmv2.switch_ip, "aggregation address workers send to");
  p4->add_option("--bmv2-switch-mac", o.bmv2.switch_mac, "the switch's MAC address");
  p4->add_option("--bmv2-elements-per-packet", o.bmv2.elements_per_packet,
                 "SWITCHML_K of the compiled program");
  p4->add_option("--bmv2-pool-slots", o.bmv2.pool_slots,
                 "SWITCHML_POOL_SLOTS of the compiled program");
}

// The program's limits are its own: a software setting would be ignored.
bool RefuseSoftwareSettingsWithBmv2(const CLI::App& app, Options& o) {
  o.bmv2.cli.clear();
  std::istringstream words(o.bmv2_cli);
  for (std::string w; words >> w;) o.bmv2.cli.push_back(w);
  for (const auto& [flag, instead] :
       {std::pair{"--pool-slots", "--bmv2-pool-slots"},
        std::pair{"--max-elements-per-packet", "--bmv2-elements-per-packet"},
        std::pair{"--max-workers", ""}, std::pair{"--max-jobs", ""},
        std::pair{"--data-threads", ""}}) {
    if (app.count(flag) != 0) {
      std::fprintf(stderr,
                   "%s applies to the software data plane only, not with --dataplane bmv2%s%s\n",
                   flag, *instead ? "; use " : "", instead);
      return false;
    }
  }
  return true;
}

// Logging as --log-level says; false (after a message) for a bad level.
bool SetUpLogging(const std::string& log_level) {
  if (!ParseLogLevel(log_level)) {
    spdlog::error("SWITCHML_LOG_LEVEL='{}' is not trace, debug, info, warn, error, critical or off",
                  log_level.substr(0, 32));
    return false;
  }
  spdlog::set_level(*ParseLogLevel(log_level));
  // gRPC's own messages (e.g. a failed bind, which Start() reports in one
  // line of ours) at debug level.
  gpr_set_log_function([](gpr_log_func_args* args) { spdlog::debug("grpc: {}", args->message); });
  return true;
}

switchml::StatusOr<std::unique_ptr<switchml::SwitchServer>> StartServer(const Options& o) {
  if (o.dataplane != "bmv2") return switchml::SwitchServer::Start(o.config);
  // Everything is checked before the P4 switch is reset.
  if (auto s = o.config.ValidateWithoutSoftwareDataPlane(); !s.ok()) return s;
  auto target = switchml::bmv2::ConnectBmv2(o.bmv2);
  if (!target.ok()) return target.status();
  return switchml::StartSwitchServer(o.config, std::move(target).value());
}

// Writes the ports to `port_file` through `port_tmp`, so that readers never
// see a half-written file.
bool WritePortFile(const switchml::SwitchServer& server, const std::string& port_file,
                   const std::string& port_tmp) {
  std::ofstream(port_tmp) << server.control_port() << " " << server.data_port() << "\n";
  if (std::rename(port_tmp.c_str(), port_file.c_str()) != 0) {
    spdlog::error("--port-file {}: {}", port_file, std::strerror(errno));
    return false;
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"switchml-switch: in-network aggregation in software"};
  app.option_defaults()->always_capture_default();  // --help shows every default
  app.set_version_flag("--version", std::string("switchml-switch ") + SWITCHML_VERSION);
  Options o;
  AddSoftwareOptions(app, o);
  AddTransportAndServiceOptions(app, o);
  AddBmv2Options(app, o);
  CLI11_PARSE(app, argc, argv);
  if (o.dataplane == "bmv2" && !RefuseSoftwareSettingsWithBmv2(app, o)) return 2;
  if (!SetUpLogging(o.log_level)) return 2;
  // The port file's directory must be writable before anything starts.
  const std::string port_tmp = o.port_file + ".tmp";
  if (!o.port_file.empty() && !std::ofstream(port_tmp)) {
    spdlog::error("--port-file {}: cannot write {}: {}", o.port_file, port_tmp,
                  std::strerror(errno));
    return 2;
  }
  o.config.bind_address = o.bind;
  o.config.data_plane.max_elements_per_packet = uint16_t(o.max_elements);
  o.config.data_plane.max_workers = uint16_t(o.max_workers);
  o.config.data_plane.max_jobs = uint16_t(o.max_jobs);

  // Block the stop signals in every thread; the main thread waits for them.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  auto server = StartServer(o);
  if (!server.ok()) {
    spdlog::error("{}", server.status().ToString());
    if (!o.port_file.empty()) std::remove(port_tmp.c_str());
    return 2;
  }
  if (!o.port_file.empty() && !WritePortFile(*server.value(), o.port_file, port_tmp)) {
    server.value()->Stop();
    return 2;
  }
  int signal = 0;
  sigwait(&signals, &signal);
  spdlog::info("received {}, shutting down", signal == SIGINT ? "SIGINT" : "SIGTERM");
  server.value()->Stop();
  return 0;
}
