#include "sim/sim_cluster.h"

#include <algorithm>
#include <cmath>
#include <optional>

#include "quantize/quantize.h"

namespace switchml {

StatusOr<std::unique_ptr<SimCluster>> SimCluster::Create(const SimClusterOptions& o) {
  if (Status s = o.network.Validate(); !s.ok()) return s;
  if (o.windows.size() != 1 && o.windows.size() != o.world_size) {
    return InvalidArgument("windows needs one value or one per rank (" +
                           std::to_string(o.world_size) + "), not " +
                           std::to_string(o.windows.size()));
  }
  std::unique_ptr<SimCluster> c(new SimCluster());
  auto dp = DataPlane::Create(o.data_plane);
  if (!dp.ok()) return dp.status();
  c->data_plane_ = std::move(dp).value();
  c->registry_ = std::make_unique<JobRegistry>(o.data_plane);
  for (uint16_t r = 0; r < o.world_size; ++r) {
    const JobRequest request{"sim", r, o.world_size, o.elements_per_packet, o.pool_slots};
    if (Status s = c->registry_->Join(request); !s.ok()) return s;
  }
  const std::optional<JobAssignment> a = c->registry_->Assignment("sim");
  if (!a) return Status(StatusCode::kInternal, "job not assigned after all ranks joined");
  if (Status s = c->data_plane_->RegisterJob(ToRegistration(*a)); !s.ok()) return s;
  c->assignment_ = *a;

  std::vector<WorkerEngine*> raw;
  for (uint16_t r = 0; r < o.world_size; ++r) {
    WorkerEngineConfig config;
    config.job = a->id;
    config.rank = Rank(r);
    config.world_size = a->world_size;
    config.elements_per_packet = a->elements_per_packet;
    config.pool_slots = a->pool_slots;
    config.window = o.windows[o.windows.size() == 1 ? 0 : r];
    config.retransmit_timeout = o.retransmit_timeout;
    config.max_retransmit_timeout = o.max_retransmit_timeout;
    config.failure_timeout = o.failure_timeout;
    config.non_finite_error = o.non_finite_error;
    auto engine = WorkerEngine::Create(config);
    if (!engine.ok()) return engine.status();
    raw.push_back(engine.value().get());
    c->workers_.push_back(std::move(engine).value());
  }
  c->network_ = std::make_unique<SimNetwork>(c->data_plane_.get(), raw, o.network);
  return c;
}

std::vector<Status> SimCluster::AllReduce(const std::vector<SimRankOp>& ops) {
  std::vector<std::optional<Status>> done(workers_.size());
  std::vector<Status> result(workers_.size());
  for (size_t r = 0; r < workers_.size() && r < ops.size(); ++r) {
    const SimRankOp& op = ops[r];
    auto id = workers_[r]->Submit(op.in, op.out, op.count, op.dtype,
                                  [&done, r](OpId, const Status& s) { done[r] = s; });
    if (!id.ok()) done[r] = id.status();
  }
  network_->Run();
  for (size_t r = 0; r < workers_.size(); ++r) {
    result[r] = done[r] ? *done[r]
                        : Status(StatusCode::kAborted,
                                 "rank " + std::to_string(r) + " never finished (silenced)");
  }
  return result;
}

FloatCheck CheckFloatAllReduce(const std::vector<const float*>& inputs, const float* output,
                               size_t count, uint16_t elements_per_packet) {
  FloatCheck check;
  std::vector<const float*> rows(inputs.size());
  for (size_t begin = 0; begin < count; begin += elements_per_packet) {
    const size_t len = std::min<size_t>(elements_per_packet, count - begin);
    for (size_t r = 0; r < inputs.size(); ++r) rows[r] = inputs[r] + begin;
    CheckBlock(rows, output + begin, len, [&](size_t j, double error, double, double bound) {
      if (!(error <= bound)) {  // also catches NaN
        if (check.violations++ == 0) check.first_violation = begin + j;
      }
      if (error > check.max_abs_error || std::isnan(error)) {
        check.max_abs_error = error;
        check.bound_at_max = bound;
      }
    });
  }
  return check;
}

}  // namespace switchml
