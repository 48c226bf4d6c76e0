// The gRPC control service of the switch (proto/switchml/control.proto): the
// one owner of every job's state. It keeps the job table (JobRegistry:
// pools, ids) and, per job, the member addresses, the MAC key, the result
// groups and each rank's event queue, and pushes each started job whole to
// its data-plane target (data_plane_target.h).
//
// A Join runs parse -> admit -> start (the last rank installs the job) ->
// barrier -> stream; each step is its own function below. In a tree
// (docs/design.md §10) the same service is a root, whose job record holds its
// members (JobRecord::Members), or a rack switch, whose record holds the joins it
// relays upstream (JobRecord::Relay); a standalone switch's jobs have neither.
#pragma once

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "control/job_registry.h"
#include "switch/data_plane_target.h"
#include "switch/join_request.h"
#include "switch/upstream_relay.h"
#include "switchml/control.grpc.pb.h"

namespace switchml {

class ControlService final : public control::v1::Control::Service {
 public:
  // Jobs run on `target`, which must outlive the service. With
  // `result_multicast`, jobs whose ranks all sit on loopback and accept it
  // get their results by host-local multicast where the target has groups.
  // An ended job's final counters stay in the stats for `job_stats_grace`.
  // With `upstream`, this switch is a rack switch of a tree (docs/design.md
  // §10): it forwards every join upstream and serves its share of each job.
  explicit ControlService(DataPlaneTarget* target, bool result_multicast = true,
                          std::chrono::seconds job_stats_grace = std::chrono::seconds(300),
                          std::unique_ptr<UpstreamClient> upstream = nullptr);
  // The most ended jobs kept for the grace period; the oldest go first.
  static constexpr size_t kMaxEndedJobs = 256;

  grpc::Status Join(grpc::ServerContext* context, const control::v1::JoinRequest* request,
                    grpc::ServerWriter<control::v1::JobEvent>* writer) override;
  grpc::Status Leave(grpc::ServerContext* context, const control::v1::LeaveRequest* request,
                     control::v1::LeaveReply* reply) override;
  grpc::Status Stats(grpc::ServerContext* context, const control::v1::StatsRequest* request,
                     control::v1::StatsReply* reply) override;

  // Ends every job and wakes every Join stream (for shutdown).
  void EndAll(const std::string& reason);
  control::v1::StatsReply CollectStats();

 private:
  // One job name's registration, shared by its ranks' Join handlers.
  struct JobRecord {
    std::string name;
    uint16_t threads = 0;
    std::vector<std::vector<sockaddr_in>> addresses;  // per rank, per thread
    std::optional<JobAssignment> assignment;          // set once installed
    bool ended = false;
    std::string end_reason;
    std::vector<std::deque<control::v1::JobEvent>> events;  // per rank
    std::vector<uint64_t> tokens;                           // per rank, for Leave
    std::string auth_key;                                   // the first rank's secret
    std::string auth_salt;                                  // with a secret
    bool unicast_only = false;               // some rank refused multicast or is not on this host
    std::vector<sockaddr_in> result_groups;  // per worker thread; empty: unicast
    // Ranks that left on purpose (Leave). The job ends when all have, or at
    // `end_at`: a grace period in which the others can still fetch results of
    // operations the leaver completed (a lost result is re-sent by the switch).
    std::vector<bool> departed;
    uint16_t departed_count = 0;
    std::optional<std::chrono::steady_clock::time_point> end_at;
    int end_rank = -1;
    std::string end_at_reason;
    // A tree's root: the ranks joined through rack switches
    // (JoinRequest.via_switch), which are its members.
    struct Members {
      std::vector<std::string> via;                  // per rank: its rack switch
      std::vector<uint16_t> member_of;               // per rank, once started
      std::vector<std::vector<uint16_t>> of_member;  // its ranks, per member, once started
    };
    std::optional<Members> members;  // set: this switch is the root of the job's tree
    // A rack switch: per rank, its join forwarded upstream, the upstream's
    // token for it, and whether its relay of upstream events ended.
    struct Relay {
      std::vector<std::shared_ptr<UpstreamCall>> calls;
      std::vector<uint64_t> tokens;
      std::vector<bool> done;
      bool ended_upstream;  // the upstream switch ended it (false from emplace())
    };
    std::optional<Relay> relay;  // set: this switch serves a share of the job
    // The job's ranks (its per-rank records' size), and those that joined
    // here (in a tree: this rack switch's share).
    uint16_t world_size() const { return uint16_t(addresses.size()); }
    uint16_t joined() const {
      return uint16_t(std::count_if(addresses.begin(), addresses.end(),
                                    [](const auto& a) { return !a.empty(); }));
    }
  };
  using Lock = std::unique_lock<std::mutex>;

  // Admits one rank into its job (creating the job for the first): checks it
  // against the job's other ranks and registers it. A refusal of a job that
  // waits at its barrier ends it, so the other ranks fail at once.
  StatusOr<std::shared_ptr<JobRecord>> AdmitLocked(const ParsedJoin& join);
  // The record of a job whose first rank is `join`.
  // `relayed`: this switch forwards the job's joins upstream.
  static std::shared_ptr<JobRecord> NewJob(const ParsedJoin& join, bool relayed);
  // Whether the rank fits the job its first rank made: the same threads,
  // secret, and way of joining (directly or through rack switches).
  static Status CheckFitsJob(const JobRecord& job, const ParsedJoin& join);
  // Once every rank is in: installs the job on the target and wakes the
  // barrier. On failure the job ends, naming the cause.
  // `install` may carry a rack switch's share of a tree's job.
  Status StartLocked(JobRecord& job, const JobAssignment& assignment, JobInstall install = {});
  // A tree's root: the members (rack switches) of a job whose ranks joined
  // through them, and the install of its members' addresses.
  Status GroupMembersLocked(JobRecord& job, JobInstall& install);
  // The rest of a join once admitted: a standalone switch or a tree's root
  // starts the job when its last rank is in, waits at the barrier and streams.
  grpc::Status RunJoinLocked(Lock& lock, const std::shared_ptr<JobRecord>& job,
                             const ParsedJoin& join, grpc::ServerContext* context,
                             grpc::ServerWriter<control::v1::JobEvent>* writer);
  // A rack switch forwards the join upstream, whose barrier is the job's,
  // installs its share at the first assignment, and relays the upstream's
  // events while it streams its own.
  grpc::Status RelayJoinLocked(Lock& lock, const std::shared_ptr<JobRecord>& job,
                               const control::v1::JoinRequest& request, uint16_t rank,
                               grpc::ServerContext* context,
                               grpc::ServerWriter<control::v1::JobEvent>* writer);
  // Installs this rack switch's share of the job the upstream assigned.
  Status StartShareLocked(JobRecord& job, const control::v1::Assignment& upstream);
  // Relays one forwarded rank's upstream events into the job until the
  // upstream stream ends.
  void RelayUpstream(std::shared_ptr<JobRecord> job, uint16_t rank,
                     std::shared_ptr<UpstreamCall> call);
  // Waits until the job started, ended, its deadline passed or the caller left.
  grpc::Status AwaitStartLocked(Lock& lock, const std::shared_ptr<JobRecord>& job, uint16_t rank,
                                std::chrono::milliseconds timeout, grpc::ServerContext* context);
  // The rank's first event: where to send, and with which settings.
  control::v1::JobEvent AssignmentEvent(const JobRecord& job, uint16_t rank) const;
  // Streams the rank's events until the job ends or the worker goes away.
  grpc::Status StreamLocked(Lock& lock, const std::shared_ptr<JobRecord>& job, uint16_t rank,
                            grpc::ServerContext* context,
                            grpc::ServerWriter<control::v1::JobEvent>* writer);

  // Ends `job`: removes it from the target and the registry, tells the other ranks.
  void EndLocked(const std::shared_ptr<JobRecord>& job, int lost_rank, const std::string& reason);
  // The job's line in the stats, with `counters`.
  control::v1::JobStats JobStatsLocked(const JobRecord& job,
                                       const DataPlaneCounters& counters) const;
  // Keeps an ending job's final stats for the grace period.
  void KeepEndedLocked(const JobRecord& job);

  // A job that ended, as the stats show it until `until`.
  struct EndedJob {
    control::v1::JobStats stats;
    std::chrono::steady_clock::time_point until;
  };

  DataPlaneTarget* target_;
  const bool result_multicast_;
  const std::chrono::seconds job_stats_grace_;
  std::mutex mu_;
  std::condition_variable changed_;
  JobRegistry registry_;                                    // guarded by mu_
  std::map<std::string, std::shared_ptr<JobRecord>> jobs_;  // guarded by mu_
  std::mt19937_64 token_source_;                            // guarded by mu_
  std::deque<EndedJob> ended_;                              // guarded by mu_, oldest first
  std::unique_ptr<UpstreamRelay> relay_;                    // null: no upstream switch
};

}  // namespace switchml
