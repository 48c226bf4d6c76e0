// A whole job in one process: a data plane, the job registry, n worker
// engines and a SimNetwork between them. The tests and the demo use it to run
// all-reduces end to end, deterministically.
#pragma once

#include <memory>
#include <vector>

#include "control/job_registry.h"
#include "dataplane/data_plane.h"
#include "sim/sim_network.h"
#include "worker/worker_engine.h"

namespace switchml {

struct SimClusterOptions {
  uint16_t world_size = 2;
  uint16_t elements_per_packet = 256;
  uint16_t pool_slots = 64;  // the job's window bound
  // Packets in flight per rank (0: sized from measurements); one value for
  // every rank, or one per rank.
  std::vector<uint16_t> windows = {0};
  Nanos retransmit_timeout{std::chrono::microseconds(200)};
  // The floor of the measured timeout: a datacenter's round trips take
  // microseconds (WorkerEngineConfig::min_retransmit_timeout).
  Nanos min_retransmit_timeout{std::chrono::microseconds(5)};
  Nanos max_retransmit_timeout{std::chrono::milliseconds(20)};
  Nanos failure_timeout{std::chrono::seconds(1)};
  Nanos operation_timeout{std::chrono::seconds(2)};  // waiting on a rank the switch names
  bool non_finite_error = false;                     // WorkerEngineConfig::non_finite_error
  // The engines probe overdue slots (WorkerEngineConfig::switch_answers_probes,
  // as with the software switch); false: they resend, as with a P4 switch.
  bool probes = true;
  // The descriptor round sends exponent-only packets
  // (WorkerEngineConfig::switch_accepts_exponent_only, as with the software
  // switch); false: whole packets, as with a P4 switch.
  bool exponent_only = true;
  // The engines pace their packets at the network's link rate
  // (WorkerEngineConfig::pacing_bits_per_second); false, or no link rate:
  // the measured window bounds them.
  bool pacing = false;
  SimNetworkOptions network;
  DataPlaneConfig data_plane;  // pool and limits of the switch (of every switch of a tree)
  // 2 or more: a tree (docs/design.md §10). The ranks split into this many
  // racks of consecutive ranks (ThreadShare), each with its own switch,
  // under one root switch whose job's members are the racks.
  uint16_t racks = 1;
  Nanos upstream_retransmit_timeout{std::chrono::microseconds(200)};
};

// One rank's part of an all-reduce: its input, output, length and dtype.
// Ranks normally agree on count and dtype; tests make them disagree.
struct SimRankOp {
  const void* in = nullptr;
  void* out = nullptr;
  size_t count = 0;
  DType dtype = DType::kFloat32;
};

// Compares a float32 all-reduce output against the exact sum of the inputs
// (computed in double), element by element, using QuantizationErrorBound with
// each chunk's true maximum exponent.
struct FloatCheck {
  double max_abs_error = 0;    // max |output - exact|
  double bound_at_max = 0;     // the bound at the element with that error
  size_t violations = 0;       // elements outside their bound
  size_t first_violation = 0;  // index of the first one
};
FloatCheck CheckFloatAllReduce(const std::vector<const float*>& inputs, const float* output,
                               size_t count, uint16_t elements_per_packet);

class SimCluster {
 public:
  // Registers every rank through the JobRegistry, like real workers would.
  static StatusOr<std::unique_ptr<SimCluster>> Create(const SimClusterOptions& options);

  // Submits ops[r] on rank r (one per rank), runs the network until every
  // engine is done, and returns each rank's status. A rank that never
  // finished (silenced) reports ABORTED.
  std::vector<Status> AllReduce(const std::vector<SimRankOp>& ops);
  // The last AllReduce's virtual time, from its submission to the last
  // rank's completion. (The network may run on after that, e.g. to a
  // switch timer that finds nothing left to do; that is not the
  // operation's time.)
  Nanos last_op_time() const { return last_op_time_; }

  WorkerEngine& worker(uint16_t rank) { return *workers_.at(rank); }
  SimNetwork& network() { return *network_; }
  // The switch of a one-level job, or the root of a tree.
  DataPlane& data_plane() { return *data_plane_; }
  // Rack r's switch in a tree (REQUIRES: options.racks > 1).
  DataPlane& rack(uint16_t r) { return *racks_.at(r); }
  JobRegistry& registry() { return *registry_; }
  // The job on data_plane() (in a tree: the root's job of the racks).
  const JobAssignment& assignment() const { return assignment_; }

 private:
  SimCluster() = default;
  // Registers the tree's jobs: the root's, with the racks as its members,
  // and each rack's, with its share of the ranks.
  Status RegisterTree(const SimClusterOptions& o);

  std::unique_ptr<DataPlane> data_plane_;
  std::vector<std::unique_ptr<DataPlane>> racks_;
  std::vector<uint16_t> rack_of_rank_;
  JobId worker_job_;  // the id the workers send with
  std::unique_ptr<JobRegistry> registry_;
  std::vector<std::unique_ptr<WorkerEngine>> workers_;
  std::unique_ptr<SimNetwork> network_;
  JobAssignment assignment_;
  Nanos last_op_time_{0};
};

}  // namespace switchml
