// ProcessGroupSwitchML: switchml as a torch.distributed backend (c10d,
// PyTorch 1.13). Sum and average all-reduces and reduce-scatters of dense CPU
// tensors go through the switch; broadcast, allgather and barrier are built
// on exact integer all-reduces; everything else is delegated to an internal
// Gloo process group (with a warning once per operation, dtype and device),
// so every DDP feature keeps working.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include "switchml/context.h"

namespace switchml::torch_backend {

class ProcessGroupSwitchML : public c10d::ProcessGroup {
 public:
  // Joins a switchml job named by rank 0 through `store`. Configuration: the
  // file in $SWITCHML_CONFIG (TOML), then $SWITCHML_<FIELD> variables (e.g.
  // SWITCHML_SWITCH_ADDRESS, SWITCHML_THREADS). Throws (a Python
  // RuntimeError) with switchml's message when the job cannot be joined.
  ProcessGroupSwitchML(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                       std::chrono::milliseconds timeout,
                       c10::intrusive_ptr<c10d::ProcessGroup> fallback);
  ~ProcessGroupSwitchML() override;

  const std::string getBackendName() const override { return "switchml"; }

  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override;

  // Delegated to the Gloo fallback. monitoredBarrier reports which ranks
  // did not arrive, which Gloo's point-to-point messages can tell.
  void monitoredBarrier(const c10d::BarrierOptions& opts, bool wait_all_ranks = false) override;
  void setSequenceNumberForGroup() override;
  uint64_t getSequenceNumberForGroup() override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors,
                                        const c10d::ReduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputs,
                                                     std::vector<at::Tensor>& inputs,
                                                     const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs,
                                        std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs,
                                         std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& output_split_sizes,
                                               std::vector<int64_t>& input_split_sizes,
                                               const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs,
                                          std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst, int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src, int tag) override;
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors, int tag) override;

  // The Context's settings in effect, as TOML (elements_per_packet is the
  // switch's choice), and its protocol counters.
  std::string SettingsToml() const;
  std::map<std::string, double> Counters() const;

 private:
  // Sums `flat` (world_size blocks of output's size) through the switch and
  // writes this rank's block, averaged for AVG, into `output`.
  c10::intrusive_ptr<c10d::Work> ReduceScatter(at::Tensor output, at::Tensor flat,
                                               c10d::ReduceOp op);
  // All-reduces `count` int32/float32 elements at `data` in place; `done`
  // runs on success before the work completes (to copy results back). `op`
  // names the torch.distributed call in errors.
  c10::intrusive_ptr<c10d::Work> Submit(void* data, size_t count, DType dtype,
                                        std::vector<at::Tensor> outputs, c10d::OpType type,
                                        const char* op, std::function<void()> done);

  std::unique_ptr<Context> context_;
  c10::intrusive_ptr<c10d::ProcessGroup> fallback_;
};

}  // namespace switchml::torch_backend
