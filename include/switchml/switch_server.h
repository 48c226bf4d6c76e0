// The software switch as a library: the data plane behind a UDP socket, and
// the gRPC control plane that registers jobs. `switchml-switch` is a thin
// main() around it; tests embed several in one process.
//
// Threads: the control plane (gRPC threads) owns every job's record and
// installs started jobs whole in the data threads, each of which owns only
// its packets: its copy of the pool and the jobs' address books (nothing on
// its packet path locks).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "switchml/data_plane_config.h"
#include "switchml/limits.h"
#include "switchml/status.h"

namespace switchml {

struct SwitchServerImpl;  // src/switch/switch_server.cc

struct SwitchConfig {
  std::string bind_address = "0.0.0.0";         // IPv4 address to listen on
  uint16_t control_port = kDefaultControlPort;  // gRPC; 0 picks a free port
  uint16_t data_port = kDefaultDataPort;        // UDP; 0 picks free ports
  // Data threads ("shards"), each with its own socket on data_port + s and
  // its own copy of the pool, serving worker threads t with t % shards == s;
  // nothing is shared between them on the packet path. Workers gain from
  // more shards when they run at least as many threads.
  uint16_t data_threads = 1;
  DataPlaneConfig data_plane;
  int socket_buffer_bytes = 16 << 20;
  // Results for all ranks of a job whose workers all sit on this host
  // (loopback) go out as one host-local multicast datagram instead of one
  // copy per worker (when the workers accept it; see ContextConfig).
  bool result_multicast = true;
  // Out of packets, each data thread polls its socket this long (yielding the
  // CPU) before it sleeps; 0: sleep at once, at most kMaxBusyPollUs (see
  // ContextConfig::busy_poll_us).
  uint32_t busy_poll_us = 200;
  // UDP offloads where the kernel has them: receive coalesced (UDP_GRO), and
  // send each receive batch's results per destination as segmented
  // super-datagrams (UDP_SEGMENT). false: one datagram per system-call entry.
  bool udp_offload = true;
  // How data packets travel: "udp" (kernel UDP sockets), "af_xdp" (AF_XDP
  // sockets; needs root, an interface with at least data_threads receive
  // queues and, bound to 0.0.0.0, `interface`) or "dpdk" (a DPDK poll-mode
  // port with at least data_threads queue pairs; needs root and the dpdk_*
  // settings).
  std::string transport = "udp";
  // af_xdp: the network interface (empty: the one holding bind_address).
  std::string interface;
  // dpdk: the EAL arguments, separated by white space (e.g. "-l 0 --no-huge
  // -m 512 --vdev=net_af_packet0,iface=eth0"; docs/transports.md).
  std::string dpdk_eal_args;
  // dpdk: the port's device name (empty: the only one the EAL found).
  std::string dpdk_port;
  // dpdk: the port's IPv4 address (empty: the kernel's route's, right for a
  // kernel interface driven through net_af_packet or net_af_xdp).
  std::string dpdk_address;
  // Serve Prometheus metrics over HTTP at HOST:PORT (GET /metrics; port 0:
  // a free one, see metrics_port()); empty: off.
  std::string metrics_address;
  // How long an ended job's final counters stay in the stats and metrics
  // (the per-job series), so that a job shorter than a scrape interval is
  // still seen; 0: they go with the job. The totals never go. At most a day.
  uint32_t job_stats_grace_s = 300;
  static constexpr uint32_t kMaxJobStatsGraceS = 86400;
  // "HOST[:PORT]" of an upstream switch's control plane: this switch is then
  // a rack switch of a tree (docs/design.md §10). It forwards every worker's
  // join there and aggregates its own workers' contributions, sending each
  // completed slot upstream as one member; the workers do not know. Empty:
  // this switch aggregates alone (or is the root of a tree). Software data
  // plane only.
  std::string upstream;

  Status Validate() const;
  // Validate(), for a switch whose jobs run on a data plane outside this
  // process: also refuses a changed data_threads or data_plane, which only
  // the software data plane uses.
  Status ValidateWithoutSoftwareDataPlane() const;
};

class SwitchServer {
 public:
  // Binds both ports and starts serving. Errors name the address or value.
  static StatusOr<std::unique_ptr<SwitchServer>> Start(const SwitchConfig& config);
  // Made by Start (its state is the library's).
  explicit SwitchServer(std::unique_ptr<SwitchServerImpl> impl);
  ~SwitchServer();  // Stop()s
  SwitchServer(const SwitchServer&) = delete;
  SwitchServer& operator=(const SwitchServer&) = delete;

  // Ends every job (their workers see the control stream close), stops the
  // gRPC server and the data thread. Idempotent; safe from any thread but a
  // gRPC handler.
  void Stop();

  uint16_t control_port() const;
  uint16_t data_port() const;  // the first shard's
  std::vector<uint16_t> data_ports() const;
  // The ports of the host-local result groups, one per shard (empty: results
  // go by unicast only).
  std::vector<uint16_t> result_ports() const;
  // The counters a `switchml-ctl stats` prints, in Prometheus text format.
  std::string PrometheusText();
  // The port of the metrics endpoint (0: metrics_address is empty).
  uint16_t metrics_port() const;

 private:
  std::unique_ptr<SwitchServerImpl> impl_;
};

}  // namespace switchml
