// Where the switch daemon's jobs run: the control plane (control_service.h)
// owns every job's record and pushes each started job whole to one target,
// which turns it into packet-processing state and back. Two targets exist:
// the software data plane of this process, fanned out to its data threads
// (software_target.h), and a P4 switch, BMv2 (bmv2/bmv2_target.h).
//
// Thread safety: the control plane calls a target from one thread at a time.
#pragma once

#include <netinet/in.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "control/job_registry.h"
#include "dataplane/data_plane.h"
#include "net/packet_auth.h"
#include "switch/join_request.h"
#include "switchml/status.h"

namespace switchml {

// A job whose ranks have all joined, as a target installs it.
struct JobInstall {
  JobAssignment assignment;
  uint16_t threads = 1;  // worker threads per rank
  // addresses[rank][thread]: the socket of each worker thread; thread t
  // owns the slots [t*S/T, (t+1)*S/T) of the job's S slots.
  std::vector<std::vector<sockaddr_in>> addresses;
  // Set: the job's packets must carry a valid MAC, and replies are signed.
  std::optional<net::PacketAuthenticator> auth;
  // One per worker thread (from ResultGroups), or empty: results by unicast.
  std::vector<sockaddr_in> result_groups;
  // A tree of switches (docs/design.md §10): the ranks served here, ascending
  // (empty: all), and where their completed slots go.
  std::vector<uint16_t> local_ranks = {};
  struct Upstream {
    JobId job;                           // the upstream switch's id of the job
    uint16_t member = 0;                 // this switch's member index there
    std::vector<sockaddr_in> addresses;  // the upstream's socket per worker thread
    std::string auth_key, auth_salt;     // with a job secret: its key and the upstream's salt
  };
  std::optional<Upstream> upstream = std::nullopt;
};

// A target's counters: all jobs together, and those of the jobs asked for.
struct TargetCounters {
  DataPlaneCounters total;
  // Per asked job id; absent where the target cannot tell jobs apart.
  std::map<uint32_t, DataPlaneCounters> per_job;
  uint64_t packets_sent = 0;
  uint64_t send_errors = 0;
  // Frames the transport dropped before the data plane saw them (malformed
  // headers; af_xdp, whose headers the switch parses itself).
  uint64_t transport_drops = 0;
  // Datagrams that reached a data thread other than through its own receive
  // queue (transport::EndpointCounters::off_queue).
  uint64_t transport_off_queue = 0;
  // Per data thread, where the target has them (the software switch).
  struct Shard {
    DataPlaneCounters counters;
    uint64_t packets_sent = 0;
    uint64_t send_errors = 0;
  };
  std::vector<Shard> shards;
};

class DataPlaneTarget {
 public:
  virtual ~DataPlaneTarget() = default;

  // "software" or "bmv2", for logs.
  virtual std::string name() const = 0;
  // How it moves packets, for the start-up log (the software target: its
  // transport's endpoints); empty by default.
  virtual std::string description() const { return ""; }
  // Starts forwarding packets (the software target's data threads) once the
  // control plane serves; stops for good. By default nothing: a P4 switch
  // forwards on its own. Stop() is idempotent.
  virtual void Start() {}
  virtual void Stop() {}
  // The ports of the host-local result groups, one per shard; empty where the
  // target has none (the default).
  virtual std::vector<uint16_t> result_ports() const { return {}; }
  // The pool, job table, largest world size and packet that the control
  // plane allocates within.
  virtual DataPlaneConfig limits() const = 0;
  // Where workers send their packets (the Assignment tells them): a numeric
  // IPv4 address, or "" for the host the workers reach the control plane at;
  // one port per shard.
  virtual std::string data_address() const = 0;
  virtual std::vector<uint16_t> data_ports() const = 0;
  // Whether it answers a worker's kProbe (docs/wire-format.md); the
  // Assignment tells the workers, who otherwise resend on a timeout. The
  // TNA program does not (the default); the v1model one does.
  virtual bool answers_probes() const { return false; }
  // Whether it takes exponent-only contributions (docs/wire-format.md); the
  // P4 programs take whole packets only (the default).
  virtual bool exponent_only_packets() const { return false; }

  // Refuses, before it joins, a rank whose request the target cannot serve
  // (a P4 switch's fixed packet size or its hosts). Ok by default.
  virtual Status CheckJoin(const ParsedJoin& join) const;
  // The host-local multicast groups, one per worker thread, that would carry
  // the results of `job` to all its ranks at once; empty where the target has
  // none (the default). Called only for jobs whose ranks all accept them.
  virtual std::vector<sockaddr_in> ResultGroups(const JobAssignment& job, uint16_t threads) const;

  // Installs `job` whole, or nothing of it.
  virtual Status Install(const JobInstall& job) = 0;
  // Removes everything Install() added (unknown ids are ignored).
  virtual void Remove(JobId id) = 0;
  // Counters of the whole target, and of `jobs` where it counts per job.
  virtual StatusOr<TargetCounters> Counters(const std::vector<JobId>& jobs) = 0;
  // Whether Counters() tells jobs apart (then a job's last counters are read
  // as it ends, for the stats of ended jobs).
  virtual bool counts_per_job() const { return true; }
};

}  // namespace switchml
