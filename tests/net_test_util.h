// Helpers for tests that run a real switch and real workers on loopback.
#pragma once

#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "client/context_start.h"
#include "switch/switch_start.h"
#include "switchml/context.h"
#include "switchml/switch_server.h"
#include "transport/transport.h"

namespace switchml::testing {

// A switch on 127.0.0.1 with kernel-chosen ports, so tests run in parallel;
// over `transport` when given (else config.transport's, UDP).
inline std::unique_ptr<SwitchServer> StartSwitch(
    uint32_t pool_slots = 1024, uint16_t max_jobs = 16, uint16_t data_threads = 1,
    uint32_t busy_poll_us = SwitchConfig{}.busy_poll_us,
    std::shared_ptr<transport::Transport> transport = nullptr) {
  SwitchConfig config;
  config.data_threads = data_threads;
  config.busy_poll_us = busy_poll_us;
  config.bind_address = "127.0.0.1";
  config.control_port = 0;
  config.data_port = 0;
  config.data_plane.pool_slots = pool_slots;
  config.data_plane.max_jobs = max_jobs;
  config.socket_buffer_bytes = 4 << 20;
  auto server = transport ? StartSwitchServer(config, transport) : SwitchServer::Start(config);
  if (!server.ok()) return nullptr;
  return std::move(server).value();
}

inline ContextConfig WorkerConfig(const SwitchServer& sw, const std::string& job, uint32_t rank,
                                  uint32_t world) {
  ContextConfig c;
  c.switch_address = "127.0.0.1:" + std::to_string(sw.control_port());
  c.job_name = job;
  c.rank = rank;
  c.world_size = world;
  c.elements_per_packet = 256;
  c.pool_slots = 32;
  c.failure_timeout_ms = 5000;
  c.join_timeout_ms = 10000;
  c.socket_buffer_bytes = 1 << 20;
  return c;
}

// One config per rank of job `job`, each with `threads` I/O threads.
inline std::vector<ContextConfig> Configs(const SwitchServer& sw, const std::string& job,
                                          uint32_t world, uint32_t threads = 1) {
  std::vector<ContextConfig> configs;
  for (uint32_t r = 0; r < world; ++r) {
    configs.push_back(WorkerConfig(sw, job, r, world));
    configs.back().threads = threads;
  }
  return configs;
}

// Starts `world` contexts concurrently (Start is a barrier) and returns them
// in rank order; a failed start leaves nullptr and its status in `errors`.
inline std::vector<std::unique_ptr<Context>> StartAll(
    const std::vector<ContextConfig>& configs, std::vector<Status>* errors = nullptr,
    std::shared_ptr<transport::Transport> transport = nullptr) {
  std::vector<std::unique_ptr<Context>> contexts(configs.size());
  std::vector<Status> status(configs.size());
  std::vector<std::thread> threads;
  for (size_t r = 0; r < configs.size(); ++r) {
    threads.emplace_back([&, r] {
      auto c = transport ? StartContext(configs[r], transport) : Context::Start(configs[r]);
      if (c.ok()) {
        contexts[r] = std::move(c).value();
      } else {
        status[r] = c.status();
      }
    });
  }
  for (auto& t : threads) t.join();
  if (errors != nullptr) *errors = status;
  return contexts;
}

// Runs fn(rank) on one thread per rank and waits.
inline void ForEachRank(size_t world, const std::function<void(size_t)>& fn) {
  std::vector<std::thread> threads;
  for (size_t r = 0; r < world; ++r) threads.emplace_back(fn, r);
  for (auto& t : threads) t.join();
}

}  // namespace switchml::testing
