#include "process_group.h"

#include <pybind11/pybind11.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <set>

namespace switchml::torch_backend {
namespace {

// A c10d Work whose completion comes from a switchml::Work; its Future carries the
// output tensors (what DDP's communication hooks expect).
class SwitchMLWork : public c10d::Work {
 public:
  // `op`: the torch.distributed call, for messages.
  SwitchMLWork(std::vector<at::Tensor> outputs, c10d::OpType type, const char* op)
      : c10d::Work(-1, type),
        op_(op),
        outputs_(std::move(outputs)),
        future_(c10::make_intrusive<c10::ivalue::Future>(
            c10::ListType::create(c10::TensorType::get()))) {}

  void Complete(const Status& status) {
    if (status.ok()) {
      future_->markCompleted(c10::IValue(outputs_));
      finish();
    } else {
      auto error = std::make_exception_ptr(
          std::runtime_error("switchml " + std::string(op_) + ": " + status.ToString()));
      future_->setError(error);
      finish(error);
    }
  }
  std::vector<at::Tensor> result() override { return outputs_; }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }

 private:
  const char* op_;
  std::vector<at::Tensor> outputs_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

ContextConfig ConfigFromEnvironment() {
  ContextConfig config;
  if (const char* path = std::getenv("SWITCHML_CONFIG")) {
    auto loaded = ContextConfig::FromTomlFile(path);
    TORCH_CHECK(loaded.ok(), "switchml: ", loaded.status().message());
    config = loaded.value();
  }
  const Status s = config.ApplyEnvironment();
  TORCH_CHECK(s.ok(), "switchml: ", s.message());
  return config;
}

// Bytes of a tensor as whole int32 words (the tail zero-padded).
size_t Words(const at::Tensor& t) { return (t.nbytes() + 3) / 4; }

bool IsDenseCpu(const at::Tensor& t) {
  return t.device().is_cpu() && t.layout() == c10::kStrided && !t.is_complex();
}

// Once per (operation, dtype, device, reason): a Python warning that the
// switch does not serve this call and the internal Gloo group does.
void WarnFallback(const char* op, const at::Tensor* t, const std::string& why) {
  static std::mutex mu;
  static std::set<std::string> warned;
  const std::string dtype = t ? std::string(c10::toString(t->scalar_type())) : "-";
  const std::string device = t ? t->device().str() : "-";
  const std::string key = std::string(op) + "|" + dtype + "|" + device + "|" + why;
  {
    std::lock_guard lock(mu);
    if (!warned.insert(key).second) return;
  }
  TORCH_WARN("switchml: ", op, " of ", dtype, " on ", device,
             " runs on the internal Gloo group, not the switch: ", why,
             " (warned once per operation, dtype and device)");
}

// Why a tensor cannot be summed through the switch ("" if it can).
std::string Ineligible(const at::Tensor& t) {
  if (!IsDenseCpu(t)) return "the switch sums dense CPU tensors only";
  const auto type = t.scalar_type();
  if (type != at::kFloat && type != at::kInt && type != at::kHalf && type != at::kBFloat16) {
    return "the switch sums float32, float16, bfloat16 and int32 only";
  }
  return "";
}

// SUM, and AVG of floating types (a sum, then a division by the world size).
std::string IneligibleOp(c10d::ReduceOp op, const at::Tensor& t) {
  if (op == c10d::ReduceOp::SUM) return "";
  if (op == c10d::ReduceOp::AVG && t.scalar_type() != at::kInt) return "";
  return op == c10d::ReduceOp::AVG ? "AVG of integers is not defined by the switch"
                                   : "the switch sums (SUM, and AVG of floating types) only";
}

}  // namespace

ProcessGroupSwitchML::ProcessGroupSwitchML(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                           int size, std::chrono::milliseconds timeout,
                                           c10::intrusive_ptr<c10d::ProcessGroup> fallback)
    : c10d::ProcessGroup(rank, size), fallback_(std::move(fallback)) {
  ContextConfig config = ConfigFromEnvironment();
  // Rank 0 names the job; the store (already namespaced per process group)
  // carries the name to the others, so concurrent groups never collide.
  static std::atomic<int> groups{0};
  const std::string key = "switchml_job_name";
  if (rank == 0) {
    char host[256] = "host";
    gethostname(host, sizeof(host) - 1);
    const std::string name = config.job_name + "-" + host + "-" + std::to_string(getpid()) + "-" +
                             std::to_string(groups++);
    store->set(key, std::vector<uint8_t>(name.begin(), name.end()));
  }
  const std::vector<uint8_t> name = store->get(key);
  config.job_name.assign(name.begin(), name.end());
  config.rank = uint32_t(rank);
  config.world_size = uint32_t(size);
  // The group's timeout bounds joining and how long an operation waits for a
  // late rank (ContextConfig::operation_timeout_ms), as Gloo's does.
  const auto timeout_ms = uint32_t(std::clamp<int64_t>(timeout.count(), 1, 24 * 3600 * 1000));
  config.join_timeout_ms = timeout_ms;
  config.operation_timeout_ms = timeout_ms;
  auto context = Context::Start(config);
  TORCH_CHECK(context.ok(), "switchml: ", context.status().ToString());
  context_ = std::move(context).value();
  init();
}

ProcessGroupSwitchML::~ProcessGroupSwitchML() {
  // Python destroys the group (destroy_process_group) holding the GIL, and
  // the internal Gloo group's destructor joins its worker threads, which may
  // need the GIL to free a finished operation's tensors: release it while
  // both stop, as torch's own bindings do for their process groups.
  auto stop = [this] {
    if (context_) context_->Stop();
    fallback_.reset();
  };
  if (Py_IsInitialized() && PyGILState_Check()) {
    pybind11::gil_scoped_release release;
    stop();
  } else {
    stop();
  }
}

c10::intrusive_ptr<c10d::Work> ProcessGroupSwitchML::Submit(void* data, size_t count, DType dtype,
                                                            std::vector<at::Tensor> outputs,
                                                            c10d::OpType type, const char* op,
                                                            std::function<void()> done) {
  auto work = c10::make_intrusive<SwitchMLWork>(std::move(outputs), type, op);
  std::shared_ptr<Work> operation = context_->AllReduceAsync(data, data, count, dtype);
  operation->OnDone([work, done = std::move(done)](const Status& status) {
    if (status.ok() && done) done();
    work->Complete(status);
  });
  return work;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupSwitchML::allreduce(std::vector<at::Tensor>& tensors,
                                                               const c10d::AllreduceOptions& opts) {
  std::string why = tensors.size() == 1 ? Ineligible(tensors[0]) : "one tensor per call only";
  if (why.empty()) why = IneligibleOp(opts.reduceOp, tensors[0]);
  if (!why.empty()) {
    WarnFallback("all_reduce", tensors.empty() ? nullptr : &tensors[0], why);
    return fallback_->allreduce(tensors, opts);
  }
  at::Tensor t = tensors[0];
  const bool integer = t.scalar_type() == at::kInt;
  const bool average = opts.reduceOp == c10d::ReduceOp::AVG;
  // float32 and int32 tensors are reduced in place; others through a copy.
  const bool direct = (t.scalar_type() == at::kFloat || integer) && t.is_contiguous();
  at::Tensor buffer = direct ? t : t.to(integer ? at::kInt : at::kFloat).contiguous();
  std::function<void()> finish;
  const int world = getSize();
  if (!direct || average) {
    finish = [t, buffer, direct, average, world]() mutable {
      if (average) buffer.div_(world);
      if (!direct) t.copy_(buffer);
    };
  }
  return Submit(buffer.data_ptr(), size_t(buffer.numel()),
                integer ? DType::kInt32 : DType::kFloat32, tensors, c10d::OpType::ALLREDUCE,
                "all_reduce", std::move(finish));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupSwitchML::ReduceScatter(at::Tensor output,
                                                                   at::Tensor flat,
                                                                   c10d::ReduceOp op) {
  // All ranks' inputs summed through the switch; each rank keeps its block.
  const bool integer = flat.scalar_type() == at::kInt;
  at::Tensor buffer = flat.to(integer ? at::kInt : at::kFloat).contiguous();
  if (buffer.data_ptr() == flat.data_ptr()) buffer = buffer.clone();  // the input stays
  const int64_t block = output.numel();
  const int rank = getRank(), world = getSize();
  const bool average = op == c10d::ReduceOp::AVG;
  return Submit(buffer.data_ptr(), size_t(buffer.numel()),
                integer ? DType::kInt32 : DType::kFloat32, {output}, c10d::OpType::REDUCE_SCATTER,
                "reduce_scatter", [output, buffer, block, rank, world, average]() mutable {
                  at::Tensor mine = buffer.narrow(0, rank * block, block);
                  if (average) mine.div_(world);
                  output.copy_(mine.view(output.sizes()));
                });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupSwitchML::broadcast(std::vector<at::Tensor>& tensors,
                                                               const c10d::BroadcastOptions& opts) {
  if (tensors.size() != 1 || !IsDenseCpu(tensors[0]) || opts.rootTensor != 0) {
    return fallback_->broadcast(tensors, opts);
  }
  // The root's bytes as int32 words plus zeros from every other rank: an
  // exact sum, whatever the dtype.
  at::Tensor t = tensors[0];
  at::Tensor words = at::zeros({int64_t(Words(t))}, at::kInt);
  if (getRank() == int(opts.rootRank)) {
    std::memcpy(words.data_ptr(), t.contiguous().data_ptr(), t.nbytes());
  }
  return Submit(words.data_ptr(), size_t(words.numel()), DType::kInt32, tensors,
                c10d::OpType::BROADCAST, "broadcast", [t, words]() mutable {
                  at::Tensor result = at::empty_like(t, at::MemoryFormat::Contiguous);
                  std::memcpy(result.data_ptr(), words.data_ptr(), t.nbytes());
                  t.copy_(result);
                });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupSwitchML::allgather(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  bool eligible = inputs.size() == 1 && outputs.size() == 1 &&
                  outputs[0].size() == size_t(getSize()) && IsDenseCpu(inputs[0]);
  for (size_t r = 0; eligible && r < outputs[0].size(); ++r) {
    eligible = IsDenseCpu(outputs[0][r]) && outputs[0][r].nbytes() == inputs[0].nbytes();
  }
  if (!eligible) return fallback_->allgather(outputs, inputs, opts);
  // Each rank writes its bytes into its own block of zeros; the sum is every
  // rank's block, exactly.
  const size_t block = Words(inputs[0]);
  at::Tensor words = at::zeros({int64_t(block * size_t(getSize()))}, at::kInt);
  std::memcpy(static_cast<int32_t*>(words.data_ptr()) + block * size_t(getRank()),
              inputs[0].contiguous().data_ptr(), inputs[0].nbytes());
  std::vector<at::Tensor> results = outputs[0];
  return Submit(words.data_ptr(), size_t(words.numel()), DType::kInt32, results,
                c10d::OpType::ALLGATHER, "all_gather", [results, words, block]() mutable {
                  for (size_t r = 0; r < results.size(); ++r) {
                    at::Tensor part = at::empty_like(results[r], at::MemoryFormat::Contiguous);
                    std::memcpy(part.data_ptr(),
                                static_cast<int32_t*>(words.data_ptr()) + block * r, part.nbytes());
                    results[r].copy_(part);
                  }
                });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupSwitchML::barrier(const c10d::BarrierOptions&) {
  at::Tensor token = at::zeros({1}, at::kInt);
  return Submit(token.data_ptr(), 1, DType::kInt32, {token}, c10d::OpType::BARRIER, "barrier", {});
}

// ---- delegated to Gloo ----

void ProcessGroupSwitchML::monitoredBarrier(const c10d::BarrierOptions& opts, bool wait_all_ranks) {
  fallback_->monitoredBarrier(opts, wait_all_ranks);
}
void ProcessGroupSwitchML::setSequenceNumberForGroup() { fallback_->setSequenceNumberForGroup(); }
uint64_t ProcessGroupSwitchML::getSequenceNumberForGroup() {
  return fallback_->getSequenceNumberForGroup();
}

c10::intrusive_ptr<c10d::Work> ProcessGroupSwitchML::allreduce_coalesced(
    std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) {
  return fallback_->allreduce_coalesced(tensors, opts);
}
c10::intrusive_ptr<c10d::Work> ProcessGroupSwitchML::reduce(std::vector<at::Tensor>& tensors,
                                                            const c10d::ReduceOptions& opts) {
  return fallback_->reduce(tensors, opts);
}
c10::intrusive_ptr<c10d::Work> ProcessGroupSwitchML::_allgather_base(
    at::Tensor& output, at::Tensor& input, const c10d::AllgatherOptions& opts) {
  return fallback_->_allgather_base(output, input, opts);
}
c10::intrusive_ptr<c10d::Work> ProcessGroupSwitchML::allgather_coalesced(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  return fallback_->allgather_coalesced(outputs, inputs, opts);
}
c10::intrusive_ptr<c10d::Work> ProcessGroupSwitchML::gather(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::GatherOptions& opts) {
  return fallback_->gather(outputs, inputs, opts);
}
c10::intrusive_ptr<c10d::Work> ProcessGroupSwitchML::scatter(
    std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
    const c10d::ScatterOptions& opts) {
  return fallback_->scatter(outputs, inputs, opts);
}
c10::intrusive_ptr<c10d::Work> ProcessGroupSwitchML::reduce_scatter(
    std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
    const c10d::ReduceScatterOptions& opts) {
  std::string why;
  if (outputs.size() != 1 || inputs.size() != 1 || inputs[0].size() != size_t(getSize())) {
    why = "one output and one input per rank only";
  }
  if (why.empty()) why = Ineligible(outputs[0]);
  if (why.empty()) why = IneligibleOp(opts.reduceOp, outputs[0]);
  for (size_t r = 0; why.empty() && r < inputs[0].size(); ++r) {
    const at::Tensor& in = inputs[0][r];
    if (!IsDenseCpu(in) || in.scalar_type() != outputs[0].scalar_type() ||
        in.numel() != outputs[0].numel()) {
      why = "every input must be a dense CPU tensor of the output's dtype and size";
    }
  }
  if (!why.empty()) {
    WarnFallback("reduce_scatter", outputs.empty() ? nullptr : &outputs[0], why);
    return fallback_->reduce_scatter(outputs, inputs, opts);
  }
  std::vector<at::Tensor> flat;
  for (const at::Tensor& in : inputs[0]) flat.push_back(in.reshape({-1}));
  return ReduceScatter(outputs[0], at::cat(flat), opts.reduceOp);
}
c10::intrusive_ptr<c10d::Work> ProcessGroupSwitchML::_reduce_scatter_base(
    at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) {
  std::string why = Ineligible(output);
  if (why.empty()) why = IneligibleOp(opts.reduceOp, output);
  if (why.empty() && (!IsDenseCpu(input) || input.scalar_type() != output.scalar_type() ||
                      input.numel() != output.numel() * getSize())) {
    why = "the input must be a dense CPU tensor of the output's dtype, world_size times its size";
  }
  if (!why.empty()) {
    WarnFallback("reduce_scatter_tensor", &output, why);
    return fallback_->_reduce_scatter_base(output, input, opts);
  }
  return ReduceScatter(output, input.reshape({-1}), opts.reduceOp);
}

std::string ProcessGroupSwitchML::SettingsToml() const { return context_->config().ToToml(); }

std::map<std::string, double> ProcessGroupSwitchML::Counters() const {
  const ContextCounters c = context_->counters();
  return {{"packets_sent", double(c.packets_sent)},
          {"retransmissions", double(c.retransmissions)},
          {"fast_retransmissions", double(c.fast_retransmissions)},
          {"results_accepted", double(c.results_accepted)},
          {"duplicates", double(c.duplicates)},
          {"invalid", double(c.invalid)},
          {"multicast_received", double(c.multicast_received)},
          {"window", double(c.window)},
          {"min_rtt_us", c.min_rtt_us}};
}
c10::intrusive_ptr<c10d::Work> ProcessGroupSwitchML::alltoall_base(
    at::Tensor& output, at::Tensor& input, std::vector<int64_t>& output_split_sizes,
    std::vector<int64_t>& input_split_sizes, const c10d::AllToAllOptions& opts) {
  return fallback_->alltoall_base(output, input, output_split_sizes, input_split_sizes, opts);
}
c10::intrusive_ptr<c10d::Work> ProcessGroupSwitchML::alltoall(std::vector<at::Tensor>& outputs,
                                                              std::vector<at::Tensor>& inputs,
                                                              const c10d::AllToAllOptions& opts) {
  return fallback_->alltoall(outputs, inputs, opts);
}
c10::intrusive_ptr<c10d::Work> ProcessGroupSwitchML::send(std::vector<at::Tensor>& tensors, int dst,
                                                          int tag) {
  return fallback_->send(tensors, dst, tag);
}
c10::intrusive_ptr<c10d::Work> ProcessGroupSwitchML::recv(std::vector<at::Tensor>& tensors, int src,
                                                          int tag) {
  return fallback_->recv(tensors, src, tag);
}
c10::intrusive_ptr<c10d::Work> ProcessGroupSwitchML::recvAnysource(std::vector<at::Tensor>& tensors,
                                                                   int tag) {
  return fallback_->recvAnysource(tensors, tag);
}

}  // namespace switchml::torch_backend
