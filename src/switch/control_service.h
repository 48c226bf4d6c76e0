// The gRPC control service of the software switch (proto/switchml/control.proto).
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "switch/data_thread.h"
#include "switch/external_data_plane.h"
#include "switchml/control.grpc.pb.h"

namespace switchml {

class ControlService final : public control::v1::Control::Service {
 public:
  // `shards[s]` is the data thread listening on `data_ports[s]`; each holds
  // every job (the same registrations in the same order give the same ids
  // and segments everywhere), and serves the worker threads t with
  // t % shards == s. With `external`, jobs are installed there (a P4
  // switch) and workers send their data to it; the shards still allocate
  // pools and job ids. With `result_ports` (one per shard, empty: none),
  // jobs whose ranks all sit on loopback and accept it get their results by
  // host-local multicast, to groups on those ports.
  ControlService(std::vector<DataThread*> shards, std::vector<uint16_t> data_ports,
                 ExternalDataPlane* external = nullptr, std::vector<uint16_t> result_ports = {});

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
  struct Job {
    std::string name;
    uint16_t world_size = 0;
    uint16_t threads = 0;
    std::vector<std::vector<sockaddr_in>> addresses;  // per rank, per thread
    std::optional<JobAssignment> assignment;
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
  };

  // Ends `job` (under mu_): frees it in the data plane, tells the other ranks.
  void EndLocked(const std::shared_ptr<Job>& job, int lost_rank, const std::string& reason);

  // Runs `fn(shard)` on each data thread in turn.
  void ForEachShard(const std::function<void(DataThread&)>& fn);

  std::vector<DataThread*> shards_;
  std::vector<uint16_t> data_ports_;
  ExternalDataPlane* external_;
  std::vector<uint16_t> result_ports_;
  std::mutex mu_;
  std::condition_variable changed_;
  std::map<std::string, std::shared_ptr<Job>> jobs_;  // guarded by mu_
  std::mt19937_64 token_source_;                      // guarded by mu_
};

}  // namespace switchml
