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
  Nanos max_retransmit_timeout{std::chrono::milliseconds(20)};
  Nanos failure_timeout{std::chrono::seconds(1)};
  bool non_finite_error = false;  // WorkerEngineConfig::non_finite_error
  SimNetworkOptions network;
  DataPlaneConfig data_plane;  // pool and limits of the switch
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

  WorkerEngine& worker(uint16_t rank) { return *workers_.at(rank); }
  SimNetwork& network() { return *network_; }
  DataPlane& data_plane() { return *data_plane_; }
  JobRegistry& registry() { return *registry_; }
  const JobAssignment& assignment() const { return assignment_; }

 private:
  SimCluster() = default;
  std::unique_ptr<DataPlane> data_plane_;
  std::unique_ptr<JobRegistry> registry_;
  std::vector<std::unique_ptr<WorkerEngine>> workers_;
  std::unique_ptr<SimNetwork> network_;
  JobAssignment assignment_;
};

}  // namespace switchml
