// Configuration of a worker's Context: defaults and units in one place, and
// one table (in config.cc) that drives TOML parsing, printing and
// validation. Validation rejects bad values with a message naming them; it
// never rewrites them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "switchml/limits.h"
#include "switchml/status.h"

namespace switchml {

struct ContextConfig {
  // The switch's control plane, HOST[:PORT]; or several switch hosts,
  // comma-separated, over which the job's slots spread: worker thread t talks
  // to host t % hosts (so threads >= hosts), each host aggregates its share,
  // and the results are bitwise those of one switch. Same order on every rank.
  std::string switch_address = "127.0.0.1:48800";
  std::string job_name = "default";  // ranks with the same name form one job
  std::string local_address;         // IPv4 to send from; empty: the route to the switch decides
  uint32_t rank = 0;                 // 0..world_size-1
  uint32_t world_size = 1;
  uint32_t threads = 1;  // I/O threads, each with its own socket and slot range
  // int32 values per packet, 32..8192; 0: the largest that fits every
  // rank's path MTU and the switch (hardware switches take 64 or 256).
  uint32_t elements_per_packet = 0;
  uint32_t pool_slots = 128;  // switch slots reserved for this job: the most in flight
  // Packets in flight (split over threads); 0: sized from the measured round
  // trip and delivery rate (twice the bandwidth-delay product).
  uint32_t window_slots = 0;
  uint32_t retransmit_timeout_us = 2000;        // first retransmission, before a round trip
                                                // was measured
  uint32_t min_retransmit_timeout_us = 20;      // floor of the measured timeout
  uint32_t max_retransmit_timeout_us = 200000;  // back-off cap
  // Two timeouts end an all-reduce that makes no progress. A rank the switch
  // names as missing is late but alive (one that exits or loses its control
  // connection fails the job at once): it is waited for up to
  // operation_timeout_ms, like torch's process-group timeout (which the
  // PyTorch backend sets it to), then the operation fails on this rank
  // with "Timed out ..." naming the missing ranks, and the job ends for
  // every rank. A switch that stopped answering fails it after
  // failure_timeout_ms (or operation_timeout_ms, if shorter).
  uint32_t failure_timeout_ms = 10000;
  uint32_t operation_timeout_ms = 1800000;  // 30 minutes, torch's default
  uint32_t join_timeout_ms = 60000;         // wait this long for all ranks to join
  uint32_t socket_buffer_bytes = 8u << 20;
  // Accept results by host-local multicast: when every rank of the job is on
  // the switch's host, the switch then sends each result once for all of
  // them instead of once per rank (fewer copies on loopback).
  bool result_multicast = true;
  // Out of packets, each I/O thread polls its sockets this long (yielding the
  // CPU to any other runnable thread) before it sleeps; 0: sleep at once.
  // Waking a sleeping thread on an idle CPU can take the kernel, and more so
  // a hypervisor, hundreds of microseconds, and a pipelined all-reduce waits
  // for it; this trades a bounded spin per wait for that latency.
  uint32_t busy_poll_us = 200;
  // Float inputs holding NaN or Inf: by default the all-reduce succeeds and
  // every chunk of k elements that holds one comes back NaN on every rank
  // (the other chunks exact as usual), so a loss scaler can test isfinite()
  // and skip the step. true: the all-reduce fails with DATA_LOSS instead,
  // naming the elements (the output is the same).
  bool non_finite_error = false;
  // UDP offloads where the kernel has them: consecutive packets to the
  // switch leave as one segmented super-datagram (UDP_SEGMENT), and results
  // arrive coalesced (UDP_GRO), saving a trip through the kernel per packet.
  // false: one system-call entry per datagram, for A/B runs.
  bool udp_offload = true;
  // How data packets travel: "udp" (kernel UDP sockets), "af_xdp" (AF_XDP
  // sockets, bypassing the kernel's UDP stack; needs root, an interface
  // with at least `threads` receive queues, elements_per_packet at most 512)
  // or "dpdk" (a DPDK poll-mode port; needs root and the dpdk_* settings).
  std::string transport = "udp";
  // af_xdp: the network interface (empty: the one that faces the switch).
  std::string interface;
  // dpdk: the EAL arguments, separated by white space (e.g. "-l 0 --no-huge
  // -m 512 --vdev=net_af_packet0,iface=eth0"; docs/transports.md).
  std::string dpdk_eal_args;
  // dpdk: the port's device name (empty: the only one the EAL found).
  std::string dpdk_port;
  // dpdk: the port's IPv4 address (empty: the kernel's route's, right for a
  // kernel interface driven through net_af_packet or net_af_xdp).
  std::string dpdk_address;
  // Optional job secret, 64 hex digits: every packet then carries a keyed MAC
  // and the switch drops packets without a valid one. Same on every rank.
  std::string auth_key;

  Status Validate() const;

  // Sets one field from text, e.g. Set("rank", "3"); errors name the field.
  Status Set(const std::string& name, const std::string& value);
  // Reads a TOML file (or text) of `name = value` lines over `defaults`.
  // Unknown keys and values of the wrong type are errors.
  static StatusOr<ContextConfig> FromTomlFile(const std::string& path,
                                              const ContextConfig& defaults);
  static StatusOr<ContextConfig> FromTomlString(const std::string& text,
                                                const ContextConfig& defaults);
  static StatusOr<ContextConfig> FromTomlFile(const std::string& path);
  static StatusOr<ContextConfig> FromTomlString(const std::string& text);
  // Sets every field whose environment variable SWITCHML_<NAME> (the field's
  // name in upper case, e.g. SWITCHML_THREADS) is set; errors name the
  // variable. Fields without one keep their value.
  Status ApplyEnvironment();

  // The whole configuration as TOML, with each field's documentation.
  std::string ToToml() const;
  // The names Set() and TOML files accept.
  static std::vector<std::string> FieldNames();
};

}  // namespace switchml
