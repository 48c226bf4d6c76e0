// The BMv2 data plane: programs p4/v1model/switchml.p4 running on
// simple_switch so that it serves the jobs this switch daemon registers.
//
// At start it resets the switch (tables, registers, counters, multicast) and
// installs the fixed entries: the aggregation endpoint, ARP answers for it,
// L2/L3 forwarding for every host of the topology, and a mirror session per
// host port that carries the program's NACKs back out of it. Per job it installs
// the job entry, one sender entry per worker socket, and one result
// multicast group per worker thread whose replicas egress rewrites to each
// worker's socket; Remove() deletes all of them.
#pragma once

#include <netinet/in.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "switch/bmv2/bmv2_config.h"
#include "switch/bmv2/runtime_cli.h"
#include "switch/data_plane_target.h"

namespace switchml::bmv2 {

struct Host {
  in_addr ip{};
  std::string mac;    // aa:bb:cc:dd:ee:ff
  uint16_t port = 0;  // simple_switch port number
};

// The hosts behind the switch's ports, from a TOML file:
//   [[host]]
//   ip = "10.0.0.1"
//   mac = "02:00:00:00:00:01"
//   port = 1
StatusOr<std::vector<Host>> LoadHosts(const std::string& path);
StatusOr<std::vector<Host>> ParseHosts(const std::string& toml_text, const std::string& origin);

class Bmv2Target final : public DataPlaneTarget {
 public:
  // Resets the switch behind `cli` and installs the fixed entries.
  static StatusOr<std::unique_ptr<Bmv2Target>> Create(const Bmv2Config& config,
                                                      std::vector<Host> hosts,
                                                      std::unique_ptr<CommandRunner> cli);

  std::string name() const override { return "bmv2"; }
  // The program's pool and packet size, its largest world size and job table.
  DataPlaneConfig limits() const override;
  std::string data_address() const override;
  std::vector<uint16_t> data_ports() const override { return {kUdpPort}; }
  Status CheckJoin(const ParsedJoin& join) const override;
  // Ignores job.auth (CheckJoin refuses keys) and job.result_groups (the
  // program multicasts results itself).
  Status Install(const JobInstall& job) override;
  void Remove(JobId id) override;
  // The program counts all jobs together: no per-job counters.
  StatusOr<TargetCounters> Counters(const std::vector<JobId>& jobs) override;
  bool counts_per_job() const override { return false; }  // one set of registers for all
  // The program answers probes with the result or a pending reply.
  bool answers_probes() const override { return true; }

  // SWITCHML_UDP_PORT_BASE of p4/common/constants.p4.
  static constexpr uint16_t kUdpPort = 0xBEE0;
  // At most 32 ranks: a slot's seen-bitmap is one 32-bit register.
  static constexpr uint16_t kMaxWorkers = 32;
  // SWITCHML_MAX_JOBS: the size of the program's job table.
  static constexpr uint16_t kMaxJobs = 64;
  static constexpr uint16_t kFloodGroup = 1;
  // NACK_SESSION_BASE: port p's NACKs leave through mirror session base + p.
  static constexpr uint32_t kNackSessionBase = 1;

 private:
  struct Installed {
    std::vector<std::pair<std::string, uint32_t>> entries;  // (table, handle)
    std::vector<uint16_t> groups;
    std::vector<uint32_t> nodes;
    std::vector<uint16_t> replica_ids;
  };
  Bmv2Target(const Bmv2Config& config, std::vector<Host> hosts, std::unique_ptr<CommandRunner> cli);
  Status Setup();
  const Host* FindHost(in_addr ip) const;
  StatusOr<uint32_t> AddEntry(const std::string& table, const std::string& action,
                              const std::string& keys, const std::string& params,
                              Installed* installed);
  void Undo(Installed& installed);
  // One rank's thread in a job: where its packets come from, and the slots
  // ("lo hi") and multicast group of that thread's share.
  struct SenderRow {
    const std::string& job_key;
    uint32_t rank;
    const sockaddr_in& address;
    std::string slots;
    uint32_t group;
  };
  // Its sender entry, and the replica of the group that returns its results.
  Status AddSender(const SenderRow& row, Installed& installed);

  Bmv2Config config_;
  std::vector<Host> hosts_;
  std::unique_ptr<CommandRunner> cli_;
  std::map<uint32_t, Installed> jobs_;  // by job id
  std::vector<bool> group_used_;        // multicast group ids (index = id)
  std::vector<bool> replica_used_;      // replica ids (index = id)
};

// Checks everything in `config` that can be checked without the switch.
Status Validate(const Bmv2Config& config);
// Validate()s, loads the hosts file, starts the runtime CLI and Create()s.
StatusOr<std::unique_ptr<Bmv2Target>> ConnectBmv2(const Bmv2Config& config);

// Parses the handle out of "... added with handle 7" / "... with handle 7".
StatusOr<uint32_t> ParseHandle(const std::string& answer);
// Parses "name[index]= (B bytes, P packets)".
StatusOr<uint64_t> ParseCounterPackets(const std::string& answer);

}  // namespace switchml::bmv2
