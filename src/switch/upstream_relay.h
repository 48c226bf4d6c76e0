// A rack switch's part in a tree of switches (docs/design.md §10): it relays
// its workers' joins to the upstream switch, reads what the upstream says of
// each job, and turns the upstream's assignment into this switch's share of
// the job. The job's state stays with ControlService, which calls this class
// without its lock held where a call blocks (Forward, Relay, Leave).
//
// Thread safety: the methods may run concurrently (UpstreamClient's are).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "switch/data_plane_target.h"
#include "switch/upstream_client.h"
#include "switchml/control.grpc.pb.h"
#include "switchml/status.h"

namespace switchml {

class UpstreamRelay {
 public:
  explicit UpstreamRelay(std::unique_ptr<UpstreamClient> client) : client_(std::move(client)) {}

  // "upstream switch HOST:PORT", for messages.
  const std::string& name() const { return client_->name(); }

  // Forwards a worker's join (UpstreamClient::Join): blocks until the
  // upstream's assignment, whose barrier is the job's, comes in `assignment`.
  StatusOr<std::unique_ptr<UpstreamCall>> Forward(const grpc::ServerContext& worker_call,
                                                  const control::v1::JoinRequest& request,
                                                  uint32_t max_elements_per_packet,
                                                  control::v1::Assignment* assignment) {
    return client_->Join(worker_call, request, max_elements_per_packet, assignment);
  }

  // This switch's share of job `job_name` as the upstream's `assignment`
  // gives it: the ranks it lists (each must have joined here: `joined_here`,
  // per rank) and the link to the upstream's job, for `threads` worker
  // threads per rank. Errors name the job and the upstream switch.
  StatusOr<JobInstall> Share(const std::string& job_name, const std::vector<bool>& joined_here,
                             uint16_t threads, const control::v1::Assignment& assignment) const;

  // Reads one forwarded rank's upstream events until the stream ends,
  // calling `on_end(rank, reason)` (rank -1: the job as a whole) for each
  // job end the upstream reports; returns why the stream ended.
  Status Relay(UpstreamCall& call,
               const std::function<void(int, const std::string&)>& on_end) const;

  // A forwarded rank leaves on purpose; a failure is logged (the upstream
  // ends the job when its call ends anyway).
  void Leave(const std::string& job_name, uint32_t rank, uint64_t token, const std::string& reason);

 private:
  std::unique_ptr<UpstreamClient> client_;
};

}  // namespace switchml
