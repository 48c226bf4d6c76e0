// switchml-switch: the switch daemon. gRPC control plane plus either the
// software UDP data plane or a BMv2 P4 switch that it programs
// (--dataplane bmv2); stops cleanly on SIGINT or SIGTERM.
#include <CLI/CLI.hpp>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <sstream>

#include <spdlog/spdlog.h>

#include "switchml/switch_server.h"

int main(int argc, char** argv) {
  CLI::App app{"switchml-switch: in-network aggregation in software"};
  switchml::SwitchConfig config;
  std::string bind = "0.0.0.0";
  std::string port_file;
  std::string log_level = "info";
  int max_elements = config.data_plane.max_elements_per_packet;
  int max_workers = config.data_plane.max_workers;
  int max_jobs = config.data_plane.max_jobs;
  app.add_option("--bind", bind, "IPv4 address to listen on");
  app.add_option("--control-port", config.control_port, "gRPC control port (0: pick a free one)");
  app.add_option("--data-port", config.data_port,
                 "UDP data port, the first of --data-threads (0: pick free ones)");
  app.add_option("--data-threads", config.data_threads,
                 "data threads (shards), each with its own port and core")
      ->check(CLI::Range(1, 64));
  app.add_option("--pool-slots", config.data_plane.pool_slots, "aggregation slots shared by all jobs")
      ->check(CLI::Range(1, 1 << 24));
  app.add_option("--max-elements-per-packet", max_elements, "largest elements per packet a job may use")
      ->check(CLI::Range(32, 8192));
  app.add_option("--max-workers", max_workers, "largest world size of a job")->check(CLI::Range(1, 65534));
  app.add_option("--max-jobs", max_jobs, "jobs at once")->check(CLI::Range(1, 65535));
  app.add_option("--result-multicast", config.result_multicast,
                 "send each result once to a host-local multicast group when all of a job's "
                 "workers are on loopback (true/false)");
  app.add_option("--busy-poll-us", config.busy_poll_us,
                 "out of packets, poll this long (microseconds, yielding the CPU) before sleeping; "
                 "0: sleep at once")
      ->check(CLI::Range(uint32_t{0}, switchml::kMaxBusyPollUs));
  app.add_option("--port-file", port_file, "write 'CONTROL_PORT DATA_PORT' here once listening");
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error");
  std::string dataplane = "software";
  switchml::Bmv2Config bmv2;
  std::string bmv2_cli = "simple_switch_CLI";
  app.add_option("--dataplane", dataplane, "software (this process) or bmv2 (a P4 switch)")
      ->check(CLI::IsMember({"software", "bmv2"}));
  auto* p4 = app.add_option_group("bmv2", "with --dataplane bmv2 (see p4/README.md)");
  p4->add_option("--bmv2-cli", bmv2_cli, "runtime CLI command (words split on spaces)");
  p4->add_option("--bmv2-thrift-port", bmv2.thrift_port, "simple_switch's Thrift port");
  p4->add_option("--bmv2-hosts", bmv2.hosts_file, "TOML file: ip, mac, port of each host");
  p4->add_option("--bmv2-switch-ip", bmv2.switch_ip, "aggregation address workers send to");
  p4->add_option("--bmv2-switch-mac", bmv2.switch_mac, "the switch's MAC address");
  p4->add_option("--bmv2-elements-per-packet", bmv2.elements_per_packet,
                 "SWITCHML_K of the compiled program");
  p4->add_option("--bmv2-pool-slots", bmv2.pool_slots, "SWITCHML_POOL_SLOTS of the compiled program");
  CLI11_PARSE(app, argc, argv);
  if (dataplane == "bmv2") {
    bmv2.cli.clear();
    std::istringstream words(bmv2_cli);
    for (std::string w; words >> w;) bmv2.cli.push_back(w);
    config.bmv2 = bmv2;
  }

  spdlog::set_level(spdlog::level::from_str(log_level));
  config.bind_address = bind;
  config.data_plane.max_elements_per_packet = uint16_t(max_elements);
  config.data_plane.max_workers = uint16_t(max_workers);
  config.data_plane.max_jobs = uint16_t(max_jobs);

  // Block the stop signals in every thread; the main thread waits for them.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  auto server = switchml::SwitchServer::Start(config);
  if (!server.ok()) {
    spdlog::error("{}", server.status().ToString());
    return 2;
  }
  if (!port_file.empty()) {
    const std::string tmp = port_file + ".tmp";
    std::ofstream(tmp) << server.value()->control_port() << " " << server.value()->data_port() << "\n";
    std::rename(tmp.c_str(), port_file.c_str());  // readers never see a half-written file
  }
  int signal = 0;
  sigwait(&signals, &signal);
  spdlog::info("received {}, shutting down", signal == SIGINT ? "SIGINT" : "SIGTERM");
  server.value()->Stop();
  return 0;
}
