#include "sim/sim_cluster.h"

#include <algorithm>
#include <cmath>
#include <optional>

#include "common/thread_split.h"
#include "quantize/quantize.h"

namespace switchml {

StatusOr<std::unique_ptr<SimCluster>> SimCluster::Create(const SimClusterOptions& o) {
  if (Status s = o.network.Validate(); !s.ok()) return s;
  if (o.windows.size() != 1 && o.windows.size() != o.world_size) {
    return InvalidArgument("windows needs one value or one per rank (" +
                           std::to_string(o.world_size) + "), not " +
                           std::to_string(o.windows.size()));
  }
  if (o.racks == 0 || o.racks > o.world_size) {
    return InvalidArgument("racks=" + std::to_string(o.racks) + " must be within 1..world_size (" +
                           std::to_string(o.world_size) + ")");
  }
  std::unique_ptr<SimCluster> c(new SimCluster());
  auto dp = DataPlane::Create(o.data_plane);
  if (!dp.ok()) return dp.status();
  c->data_plane_ = std::move(dp).value();
  c->registry_ = std::make_unique<JobRegistry>(o.data_plane);
  if (o.racks > 1) {
    if (Status s = c->RegisterTree(o); !s.ok()) return s;
  } else {
    for (uint16_t r = 0; r < o.world_size; ++r) {
      const JobRequest request{"sim", r, o.world_size, o.elements_per_packet, o.pool_slots};
      if (Status s = c->registry_->Join(request); !s.ok()) return s;
    }
    const std::optional<JobAssignment> a = c->registry_->Assignment("sim");
    if (!a) return Status(StatusCode::kInternal, "job not assigned after all ranks joined");
    if (Status s = c->data_plane_->RegisterJob(ToRegistration(*a)); !s.ok()) return s;
    c->assignment_ = *a;
    c->worker_job_ = a->id;
  }
  const JobAssignment* a = &c->assignment_;

  std::vector<WorkerEngine*> raw;
  for (uint16_t r = 0; r < o.world_size; ++r) {
    WorkerEngineConfig config;
    config.job = c->worker_job_;
    config.rank = Rank(r);
    config.world_size = o.world_size;
    config.elements_per_packet = a->elements_per_packet;
    config.pool_slots = a->pool_slots;
    config.window = o.windows[o.windows.size() == 1 ? 0 : r];
    config.retransmit_timeout = o.retransmit_timeout;
    config.min_retransmit_timeout = std::min(o.min_retransmit_timeout, o.max_retransmit_timeout);
    config.max_retransmit_timeout = o.max_retransmit_timeout;
    config.failure_timeout = o.failure_timeout;
    config.operation_timeout = o.operation_timeout;
    config.non_finite_error = o.non_finite_error;
    config.switch_answers_probes = o.probes;
    config.switch_accepts_exponent_only = o.exponent_only;
    if (o.pacing) config.pacing_bits_per_second = o.network.link_bits_per_second;
    auto engine = WorkerEngine::Create(config);
    if (!engine.ok()) return engine.status();
    raw.push_back(engine.value().get());
    c->workers_.push_back(std::move(engine).value());
  }
  if (o.racks > 1) {
    SimTopology tree{{}, c->rack_of_rank_, c->data_plane_.get()};
    for (auto& rack : c->racks_) tree.racks.push_back(rack.get());
    c->network_ = std::make_unique<SimNetwork>(tree, raw, o.network);
  } else {
    c->network_ = std::make_unique<SimNetwork>(c->data_plane_.get(), raw, o.network);
  }
  return c;
}

Status SimCluster::RegisterTree(const SimClusterOptions& o) {
  // The root's job: one member per rack.
  for (uint16_t r = 0; r < o.racks; ++r) {
    const JobRequest request{"sim", r, o.racks, o.elements_per_packet, o.pool_slots};
    if (Status s = registry_->Join(request); !s.ok()) return s;
  }
  const std::optional<JobAssignment> root = registry_->Assignment("sim");
  if (!root) return Status(StatusCode::kInternal, "root job not assigned after all racks joined");
  if (Status s = data_plane_->RegisterJob(ToRegistration(*root)); !s.ok()) return s;
  assignment_ = *root;
  // Each rack's job: every rank of the job (the scale), its own share of
  // them, and another id than the root's, as an independent switch would.
  worker_job_ = JobId(root->id.value() + 1);
  rack_of_rank_.resize(o.world_size);
  for (uint16_t r = 0; r < o.racks; ++r) {
    const ThreadRange share = ThreadShare(o.world_size, r, o.racks);
    JobRegistration job{worker_job_, o.world_size, root->elements_per_packet, 0, root->pool_slots};
    for (uint64_t rank = share.begin; rank < share.end; ++rank) {
      job.local_ranks.push_back(uint16_t(rank));
      rack_of_rank_[rank] = r;
    }
    job.upstream = UpstreamLink{root->id, r, o.upstream_retransmit_timeout};
    auto rack = DataPlane::Create(o.data_plane);
    if (!rack.ok()) return rack.status();
    if (Status s = rack.value()->RegisterJob(job); !s.ok()) return s;
    racks_.push_back(std::move(rack).value());
  }
  return Status::Ok();
}

std::vector<Status> SimCluster::AllReduce(const std::vector<SimRankOp>& ops) {
  std::vector<std::optional<Status>> done(workers_.size());
  std::vector<Status> result(workers_.size());
  const Nanos start = network_->now();
  Nanos last_finish = start;
  for (size_t r = 0; r < workers_.size() && r < ops.size(); ++r) {
    const SimRankOp& op = ops[r];
    auto id = workers_[r]->Submit(op.in, op.out, op.count, op.dtype,
                                  [this, &done, &last_finish, r](OpId, const Status& s) {
                                    done[r] = s;
                                    last_finish = std::max(last_finish, network_->now());
                                  });
    if (!id.ok()) done[r] = id.status();
  }
  network_->Run();
  last_op_time_ = last_finish - start;
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
