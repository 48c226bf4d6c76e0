// switchml-sim: one all-reduce job end to end in one process — a software
// data plane and N worker engines over the simulated lossy network — and a
// one-line verification against the exact sum.
#include <CLI/CLI.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "bench_common.h"
#include "quantize/quantize.h"
#include "sim/sim_cluster.h"
#include "switchml/version.h"

int main(int argc, char** argv) {
  CLI::App app{"switchml-sim: an all-reduce through the in-process simulated network"};
  app.option_defaults()->always_capture_default();  // --help shows every default
  app.set_version_flag("--version", std::string("switchml-sim ") + SWITCHML_VERSION);
  int workers = 8;
  std::string size = "4MiB";
  double loss = 0.01;
  uint64_t seed = 1;
  int elements = 256;
  int slots = 128;
  double link_gbps = 0;
  double latency_us = 5;
  int racks = 1;
  double upstream_gbps = 0;
  double upstream_latency_us = -1;
  app.add_option("--workers", workers, "number of workers")->check(CLI::Range(1, 1024));
  app.add_option("--size", size, "tensor size per worker (B, KiB, MiB, GiB)");
  app.add_option("--loss", loss, "probability of losing each packet")->check(CLI::Range(0.0, 0.5));
  app.add_option("--seed", seed, "seed for the inputs and the network");
  app.add_option("--elements-per-packet", elements, "k: int32 values per packet")
      ->check(
          CLI::Range(int(switchml::kMinElementsPerPacket), int(switchml::kMaxElementsPerPacket)));
  app.add_option("--pool-slots", slots, "slots in the job's pool segment")
      ->check(CLI::Range(1, 65535));
  app.add_option("--link-gbps", link_gbps,
                 "every worker's link rate, each direction (Gbit/s); 0: unlimited")
      ->check(CLI::Range(0.0, 10000.0));
  app.add_option("--latency-us", latency_us, "one-way delay of every transmission (microseconds)")
      ->check(CLI::Range(0.0, 1e6));
  app.add_option("--racks", racks,
                 "2 or more: a tree (docs/design.md §10): the workers split into this many racks, "
                 "each with its own switch, under one root switch")
      ->check(CLI::Range(1, 1024));
  app.add_option("--upstream-gbps", upstream_gbps,
                 "with --racks: each rack switch's link to the root (Gbit/s); 0: unlimited")
      ->check(CLI::Range(0.0, 10000.0));
  app.add_option("--upstream-latency-us", upstream_latency_us,
                 "with --racks: one-way delay of a rack's link to the root; -1: --latency-us")
      ->check(CLI::Range(-1.0, 1e6));
  CLI11_PARSE(app, argc, argv);
  if (racks > workers) {
    std::fprintf(stderr, "--racks=%d exceeds --workers=%d; every rack needs a worker\n", racks,
                 workers);
    return 2;
  }

  const uint64_t bytes = switchml::bench::ParseSize(size);
  if (bytes < 4) {
    std::fprintf(stderr, "--size=%s is not a size of at least 4 bytes (try 4MiB)\n", size.c_str());
    return 2;
  }
  const size_t count = bytes / 4;

  switchml::SimClusterOptions options;
  options.world_size = uint16_t(workers);
  options.elements_per_packet = uint16_t(elements);
  options.pool_slots = uint16_t(slots);
  options.network.seed = seed;
  options.network.loss = loss;
  options.network.link_bits_per_second = uint64_t(link_gbps * 1e9);
  options.network.latency = std::chrono::nanoseconds(int64_t(latency_us * 1e3));
  options.racks = uint16_t(racks);
  options.network.upstream_link_bits_per_second = uint64_t(upstream_gbps * 1e9);
  options.network.upstream_latency =
      std::chrono::nanoseconds(int64_t(upstream_latency_us < 0 ? -1 : upstream_latency_us * 1e3));
  options.data_plane.max_workers = uint16_t(std::max(workers, 64));
  options.data_plane.max_elements_per_packet = uint16_t(std::max(elements, 1024));
  auto cluster = switchml::SimCluster::Create(options);
  if (!cluster.ok()) {
    std::fprintf(stderr, "error: %s\n", cluster.status().ToString().c_str());
    return 2;
  }

  // Inputs: normal values whose scale changes from chunk to chunk, so that
  // many different block exponents are exercised.
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<std::vector<float>> in(workers, std::vector<float>(count));
  std::vector<std::vector<float>> out(workers, std::vector<float>(count));
  for (auto& v : in) {
    for (size_t i = 0; i < count; ++i) {
      v[i] = normal(rng) * std::ldexp(1.0f, int((i / elements) % 16) - 8);
    }
  }
  std::vector<switchml::SimRankOp> ops;
  std::vector<const float*> inputs;
  for (int r = 0; r < workers; ++r) {
    ops.push_back({in[r].data(), out[r].data(), count, switchml::DType::kFloat32});
    inputs.push_back(in[r].data());
  }

  const auto wall_start = std::chrono::steady_clock::now();
  const std::vector<switchml::Status> status = cluster.value()->AllReduce(ops);
  const double wall =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count();
  for (int r = 0; r < workers; ++r) {
    if (!status[r].ok()) {
      std::fprintf(stderr, "rank %d failed: %s\n", r, status[r].ToString().c_str());
      return 1;
    }
  }

  auto& c = *cluster.value();
  // Rank 0 against the exact sum (each check costs workers x count), every
  // other rank bitwise against rank 0.
  const switchml::FloatCheck worst =
      switchml::CheckFloatAllReduce(inputs, out[0].data(), count, uint16_t(elements));
  bool identical = true;
  for (int r = 1; r < workers; ++r) identical = identical && out[r] == out[0];
  uint64_t sent = 0, retransmissions = 0;
  for (int r = 0; r < workers; ++r) {
    sent += c.worker(uint16_t(r)).counters().packets_sent;
    retransmissions += c.worker(uint16_t(r)).counters().retransmissions;
  }
  const double virtual_s = std::chrono::duration<double>(c.network().now()).count();
  std::printf(
      "%s: %d workers%s all-reduced %zu float32 (%.1f MiB) at %.1f%% loss: max |error| %.3g "
      "(bound %.3g there), %zu elements over their bound, ranks bitwise identical: %s; "
      "%llu packets sent, %llu retransmissions, %llu lost; %.3f s virtual, %.2f s wall\n",
      worst.violations == 0 && identical ? "PASS" : "FAIL", workers,
      racks > 1 ? (" in " + std::to_string(racks) + " racks").c_str() : "", count,
      double(count) * 4 / (1 << 20), loss * 100, worst.max_abs_error, worst.bound_at_max,
      worst.violations, identical ? "yes" : "no", (unsigned long long)sent,
      (unsigned long long)retransmissions, (unsigned long long)c.network().counters().lost,
      virtual_s, wall);
  if (link_gbps > 0) {
    // In-network aggregation sends and receives the tensor once per worker.
    std::printf("link %.3g Gbit/s: %.3f ms virtual, %.2fx the size over the link rate\n", link_gbps,
                virtual_s * 1e3, virtual_s / (double(bytes) * 8 / (link_gbps * 1e9)));
  }
  return worst.violations == 0 && identical ? 0 : 1;
}
