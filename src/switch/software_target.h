// The software data plane as a target: one DataThread per shard, each with
// its own endpoint and its own copy of the pool, serving the worker threads
// t with t % shards == s. A job is installed in every shard in one step
// (the same slots everywhere: a worker thread's slots live in its shard).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "switch/data_plane_target.h"
#include "switch/data_thread.h"
#include "switchml/switch_server.h"
#include "transport/transport.h"

namespace switchml {

class SoftwareTarget final : public DataPlaneTarget {
 public:
  // Opens the shards' endpoints on config.bind_address (data_port + s, or
  // free ports) and, with config.result_multicast, reserves their result
  // ports. Does not start the data threads. REQUIRES: config.Validate().
  static StatusOr<std::unique_ptr<SoftwareTarget>> Open(const SwitchConfig& config,
                                                        transport::Transport& transport);
  ~SoftwareTarget() override;  // Stop()s

  void Start() override;
  void Stop() override;

  std::string name() const override { return "software"; }
  DataPlaneConfig limits() const override { return shards_[0]->config(); }
  bool answers_probes() const override { return true; }
  bool exponent_only_packets() const override { return true; }
  std::string data_address() const override { return ""; }
  std::vector<uint16_t> data_ports() const override { return data_ports_; }
  std::vector<sockaddr_in> ResultGroups(const JobAssignment& job, uint16_t threads) const override;
  Status Install(const JobInstall& job) override;
  void Remove(JobId id) override;
  StatusOr<TargetCounters> Counters(const std::vector<JobId>& jobs) override;

  // Empty: results go by unicast only.
  std::vector<uint16_t> result_ports() const override { return result_ports_; }
  std::string description() const override { return shards_[0]->description(); }

 private:
  SoftwareTarget() = default;

  std::vector<std::unique_ptr<DataThread>> shards_;
  std::vector<uint16_t> data_ports_;
  // With result multicast: per shard, an endpoint on 127.0.0.1 that holds the
  // port of the shard's result groups (nothing is ever sent to it), so no
  // other switch on this host picks the same port.
  std::vector<std::unique_ptr<transport::Endpoint>> result_port_holders_;
  std::vector<uint16_t> result_ports_;
};

}  // namespace switchml
