// switchml-sim: one all-reduce job end to end in one process — a software
// data plane and N worker engines over the simulated lossy network — and a
// one-line verification against the exact sum (or, with --json, one JSON
// object with the counts that bench/sim_loss tabulates).
#include <CLI/CLI.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "bench_common.h"
#include "quantize/quantize.h"
#include "sim/sim_cluster.h"
#include "switchml/version.h"
#include "worker/window_sizer.h"

namespace {

using switchml::Nanos;

struct Args {
  int workers = 8;
  std::string size = "4MiB";
  double loss = 0.01;
  uint64_t seed = 1;
  int elements = 256;
  int slots = 0;
  double link_gbps = 0;
  double latency_us = 5;
  double jitter_us = 1;
  double reorder = 0;
  double reorder_us = 50;
  int racks = 1;
  double upstream_gbps = 0;
  double upstream_latency_us = -1;
  int warmup = 4;
  bool no_probes = false;
  bool whole_descriptor_round = false;
  bool pacing = false;
  bool json = false;
};

void AddOptions(CLI::App& app, Args& a) {
  app.add_option("--workers", a.workers, "number of workers")->check(CLI::Range(1, 1024));
  app.add_option("--size", a.size, "tensor size per worker (B, KiB, MiB, GiB)");
  app.add_option("--loss", a.loss, "probability of losing each packet")
      ->check(CLI::Range(0.0, 0.5));
  app.add_option("--seed", a.seed, "seed for the inputs and the network");
  app.add_option("--elements-per-packet", a.elements, "k: int32 values per packet")
      ->check(
          CLI::Range(int(switchml::kMinElementsPerPacket), int(switchml::kMaxElementsPerPacket)));
  app.add_option("--pool-slots", a.slots,
                 "slots in the job's pool segment; 0: sized for the link rate and latency "
                 "(PoolSlotsForPath: the window plus room for loss recovery; 128 unlimited)")
      ->check(CLI::Range(0, 65535));
  app.add_option("--link-gbps", a.link_gbps,
                 "every worker's link rate, each direction (Gbit/s); 0: unlimited")
      ->check(CLI::Range(0.0, 10000.0));
  app.add_option("--latency-us", a.latency_us, "one-way delay of every transmission (microseconds)")
      ->check(CLI::Range(0.0, 1e6));
  app.add_option("--jitter-us", a.jitter_us,
                 "plus a uniform delay up to this (microseconds); a link stays FIFO")
      ->check(CLI::Range(0.0, 1e6));
  app.add_option("--reorder", a.reorder,
                 "probability that a packet is held back by up to --reorder-us, so later ones "
                 "overtake it (a multipath fabric)")
      ->check(CLI::Range(0.0, 0.5));
  app.add_option("--reorder-us", a.reorder_us, "the most a reordered packet is held back")
      ->check(CLI::Range(0.0, 1e6));
  app.add_option("--racks", a.racks,
                 "2 or more: a tree (docs/design.md §10): the workers split into this many racks, "
                 "each with its own switch, under one root switch")
      ->check(CLI::Range(1, 1024));
  app.add_option("--upstream-gbps", a.upstream_gbps,
                 "with --racks: each rack switch's link to the root (Gbit/s); 0: unlimited")
      ->check(CLI::Range(0.0, 10000.0));
  app.add_option("--upstream-latency-us", a.upstream_latency_us,
                 "with --racks: one-way delay of a rack's link to the root; -1: --latency-us")
      ->check(CLI::Range(-1.0, 1e6));
  app.add_option("--warmup", a.warmup,
                 "all-reduces before the measured one: a job's first operation uses the slots "
                 "every rank knows in advance; later ones, what the ranks measured (the window "
                 "and the slots settle in about three)")
      ->check(CLI::Range(0, 100));
  app.add_flag("--no-probes", a.no_probes,
               "workers resend overdue packets instead of probing the switch (as with a P4 "
               "switch, which does not answer probes)");
  app.add_flag("--whole-descriptor-round", a.whole_descriptor_round,
               "the descriptor round sends whole packets instead of exponent-only ones (as "
               "with a P4 switch, which takes whole packets only)");
  app.add_flag("--pacing", a.pacing,
               "workers pace their packets at --link-gbps and keep the pool in flight "
               "(WorkerEngineConfig::pacing_bits_per_second; not yet offered to real "
               "workers) instead of the measured window");
  app.add_flag("--json", a.json, "print one JSON object instead of the text lines");
}

Nanos Micros(double us) { return Nanos(int64_t(us * 1e3)); }

// The time the link alone needs: every packet of the tensor with its
// framing, at the link rate, plus one round trip. 0 without a link rate.
double FramingLimitSeconds(const Args& a, size_t count, uint32_t framing_bytes) {
  if (a.link_gbps <= 0) return 0;
  const double chunks = std::ceil(double(count) / a.elements);
  const double wire = double(switchml::PacketBytes(uint16_t(a.elements)) + framing_bytes);
  return chunks * wire * 8 / (a.link_gbps * 1e9) + 2 * a.latency_us * 1e-6;
}

switchml::SimClusterOptions ClusterOptions(const Args& a) {
  switchml::SimClusterOptions o;
  o.world_size = uint16_t(a.workers);
  o.elements_per_packet = uint16_t(a.elements);
  o.network.seed = a.seed;
  o.network.loss = a.loss;
  o.network.link_bits_per_second = uint64_t(a.link_gbps * 1e9);
  o.network.latency = Micros(a.latency_us);
  o.network.jitter = Micros(a.jitter_us);
  o.network.reorder = a.reorder;
  o.network.reorder_delay = Micros(a.reorder_us);
  o.racks = uint16_t(a.racks);
  o.probes = !a.no_probes;
  o.exponent_only = !a.whole_descriptor_round;
  o.pacing = a.pacing;
  o.network.upstream_link_bits_per_second = uint64_t(a.upstream_gbps * 1e9);
  o.network.upstream_latency =
      a.upstream_latency_us < 0 ? Nanos(-1) : Micros(a.upstream_latency_us);
  uint32_t slots = uint32_t(a.slots);
  if (slots == 0) {
    const uint32_t wire =
        uint32_t(switchml::PacketBytes(uint16_t(a.elements))) + o.network.framing_bytes;
    slots = o.network.link_bits_per_second == 0
                ? 128
                : switchml::PoolSlotsForPath(o.network.link_bits_per_second,
                                             2 * Micros(a.latency_us + a.jitter_us), wire);
  }
  o.pool_slots = uint16_t(slots);
  o.data_plane.pool_slots = std::max<uint32_t>(o.data_plane.pool_slots, slots);
  o.data_plane.max_workers = uint16_t(std::max(a.workers, 64));
  o.data_plane.max_elements_per_packet = uint16_t(std::max(a.elements, 1024));
  return o;
}

// Normal values whose scale changes from chunk to chunk, so that many
// different block exponents are exercised. Each rank reads one vector of
// normal draws from its own offset: drawing workers x count values took
// 10 s of a 1,024-worker run, more than the all-reduce it checks.
std::vector<std::vector<float>> MakeInputs(const Args& a, size_t count) {
  std::mt19937_64 rng(a.seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> draws(count);
  for (float& x : draws) x = normal(rng);
  float scale[16];
  for (int e = 0; e < 16; ++e) scale[e] = std::ldexp(1.0f, e - 8);
  std::vector<std::vector<float>> in(a.workers, std::vector<float>(count));
  for (size_t r = 0; r < in.size(); ++r) {
    size_t j = count == 0 ? 0 : r * 7919 % count;  // a prime stride
    for (size_t i = 0; i < count; ++i, j = j + 1 == count ? 0 : j + 1) {
      in[r][i] = draws[j] * scale[(i / a.elements) % 16];
    }
  }
  return in;
}

// What the measured operation cost: counts since the warm-up.
struct Counts {
  switchml::SimNetworkCounters net;
  uint64_t nacks_sent = 0;
  uint64_t sent = 0, retransmissions = 0, nack_resends = 0, probes = 0;
  uint64_t nacks_received = 0, nacks_ignored = 0, timeout_backoffs = 0, redundant_headers = 0;
  uint64_t results_named_lost = 0, last_packet_copies = 0;

  static Counts Of(switchml::SimCluster& c, int workers) {
    Counts t;
    t.net = c.network().counters();
    t.nacks_sent = c.data_plane().counters().nacks_sent;
    for (int r = 0; r < workers; ++r) {
      const switchml::WorkerEngineCounters e = c.worker(uint16_t(r)).counters();
      t.sent += e.packets_sent;
      t.retransmissions += e.retransmissions;
      t.nack_resends += e.fast_retransmissions;
      t.probes += e.probes_sent;
      t.nacks_received += e.nacks_received;
      t.nacks_ignored += e.nacks_ignored;
      t.timeout_backoffs += e.timeout_backoffs;
      t.redundant_headers += e.redundant_headers;
      t.results_named_lost += e.results_named_lost;
      t.last_packet_copies += e.last_packet_copies;
    }
    return t;
  }
  Counts operator-(const Counts& b) const {
    Counts d = *this;
    d.net.transmissions -= b.net.transmissions;
    d.net.lost -= b.net.lost;
    d.net.retransmissions -= b.net.retransmissions;
    d.net.spurious_retransmissions -= b.net.spurious_retransmissions;
    d.nacks_sent -= b.nacks_sent;
    d.sent -= b.sent;
    d.retransmissions -= b.retransmissions;
    d.nack_resends -= b.nack_resends;
    d.probes -= b.probes;
    d.nacks_received -= b.nacks_received;
    d.nacks_ignored -= b.nacks_ignored;
    d.timeout_backoffs -= b.timeout_backoffs;
    d.redundant_headers -= b.redundant_headers;
    d.results_named_lost -= b.results_named_lost;
    d.last_packet_copies -= b.last_packet_copies;
    return d;
  }
};

struct Outcome {
  switchml::FloatCheck worst;
  bool identical = true;
  double virtual_s = 0, wall_s = 0;
  Counts counts;
};

void Report(const Args& a, size_t count, switchml::SimCluster& c, const Outcome& o) {
  const bool pass = o.worst.violations == 0 && o.identical;
  const switchml::SimNetworkCounters& net = o.counts.net;
  const Counts& t = o.counts;
  const double limit = FramingLimitSeconds(a, count, c.network().options().framing_bytes);
  if (a.json) {
    nlohmann::json j = {
        {"pass", pass},
        {"workers", a.workers},
        {"racks", a.racks},
        {"size_bytes", count * 4},
        {"elements_per_packet", a.elements},
        {"pool_slots", c.assignment().pool_slots},
        {"link_gbps", a.link_gbps},
        {"latency_us", a.latency_us},
        {"jitter_us", a.jitter_us},
        {"reorder", a.reorder},
        {"loss", a.loss},
        {"seed", a.seed},
        {"virtual_s", o.virtual_s},
        {"framing_limit_s", limit},
        {"ratio_to_framing_limit", limit > 0 ? o.virtual_s / limit : 0.0},
        {"wall_s", o.wall_s},
        {"warmup", a.warmup},
        {"probes_enabled", !a.no_probes},
        {"exponent_only_packets", !a.whole_descriptor_round},
        {"pacing", a.pacing},
        {"packets_sent", t.sent},
        {"retransmissions", t.retransmissions},
        {"nack_retransmissions", t.nack_resends},
        {"probes", t.probes},
        {"spurious_retransmissions", net.spurious_retransmissions},
        {"lost", net.lost},
        {"transmissions", net.transmissions},
        {"nacks_sent", t.nacks_sent},
        {"switch_drops", c.data_plane().counters().TotalDrops()},
        {"nacks_received", t.nacks_received},
        {"nacks_ignored", t.nacks_ignored},
        {"results_named_lost", t.results_named_lost},
        {"timeout_backoffs", t.timeout_backoffs},
        {"redundant_headers", t.redundant_headers},
        {"last_packet_copies", t.last_packet_copies},
        {"max_abs_error", o.worst.max_abs_error},
        {"elements_over_bound", o.worst.violations},
        {"ranks_identical", o.identical},
    };
    std::printf("%s\n", j.dump().c_str());
    return;
  }
  std::printf(
      "%s: %d workers%s all-reduced %zu float32 (%.1f MiB) at %.1f%% loss: max |error| %.3g "
      "(bound %.3g there), %zu elements over their bound, ranks bitwise identical: %s; "
      "%llu packets sent, %llu retransmissions (%llu spurious), %llu probes, %llu lost; %.3f s "
      "virtual, "
      "%.2f s wall\n",
      pass ? "PASS" : "FAIL", a.workers,
      a.racks > 1 ? (" in " + std::to_string(a.racks) + " racks").c_str() : "", count,
      double(count) * 4 / (1 << 20), a.loss * 100, o.worst.max_abs_error, o.worst.bound_at_max,
      o.worst.violations, o.identical ? "yes" : "no", (unsigned long long)t.sent,
      (unsigned long long)t.retransmissions, (unsigned long long)net.spurious_retransmissions,
      (unsigned long long)t.probes, (unsigned long long)net.lost, o.virtual_s, o.wall_s);
  if (limit > 0) {
    std::printf("link %.3g Gbit/s: %.3f ms virtual, %.2fx the framing limit (%.3f ms)\n",
                a.link_gbps, o.virtual_s * 1e3, o.virtual_s / limit, limit * 1e3);
  }
}

}  // namespace

// False (after a line naming the rank, and `what` the run was) if a rank failed.
bool AllSucceeded(const std::vector<switchml::Status>& status, const std::string& what) {
  for (size_t r = 0; r < status.size(); ++r) {
    if (!status[r].ok()) {
      std::fprintf(stderr, "rank %zu failed%s: %s\n", r,
                   what.empty() ? "" : (" (" + what + ")").c_str(), status[r].ToString().c_str());
      return false;
    }
  }
  return true;
}

int main(int argc, char** argv) {
  CLI::App app{"switchml-sim: an all-reduce through the in-process simulated network"};
  app.option_defaults()->always_capture_default();  // --help shows every default
  app.set_version_flag("--version", std::string("switchml-sim ") + SWITCHML_VERSION);
  Args a;
  AddOptions(app, a);
  CLI11_PARSE(app, argc, argv);
  if (a.racks > a.workers) {
    std::fprintf(stderr, "--racks=%d exceeds --workers=%d; every rack needs a worker\n", a.racks,
                 a.workers);
    return 2;
  }
  if (a.pacing && a.link_gbps <= 0) {
    std::fprintf(stderr, "--pacing paces at the link rate: give --link-gbps too (try 100)\n");
    return 2;
  }
  const uint64_t bytes = switchml::bench::ParseSize(a.size);
  if (bytes < 4) {
    std::fprintf(stderr, "--size=%s is not a size of at least 4 bytes (try 4MiB)\n",
                 a.size.c_str());
    return 2;
  }
  const size_t count = bytes / 4;
  auto cluster = switchml::SimCluster::Create(ClusterOptions(a));
  if (!cluster.ok()) {
    std::fprintf(stderr, "error: %s\n", cluster.status().ToString().c_str());
    return 2;
  }
  switchml::SimCluster& c = *cluster.value();

  const std::vector<std::vector<float>> in = MakeInputs(a, count);
  std::vector<std::vector<float>> out(a.workers, std::vector<float>(count));
  std::vector<switchml::SimRankOp> ops;
  std::vector<const float*> inputs;
  for (int r = 0; r < a.workers; ++r) {
    ops.push_back({in[r].data(), out[r].data(), count, switchml::DType::kFloat32});
    inputs.push_back(in[r].data());
  }
  for (int w = 0; w < a.warmup; ++w) {
    if (!AllSucceeded(c.AllReduce(ops), "warm-up")) return 1;
  }
  const Counts before = Counts::Of(c, a.workers);
  const auto wall_start = std::chrono::steady_clock::now();
  const std::vector<switchml::Status> status = c.AllReduce(ops);
  Outcome o;
  o.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count();
  if (!AllSucceeded(status, "")) return 1;
  // Rank 0 against the exact sum (each check costs workers x count), every
  // other rank bitwise against rank 0.
  o.worst = switchml::CheckFloatAllReduce(inputs, out[0].data(), count, uint16_t(a.elements));
  for (int r = 1; r < a.workers; ++r) o.identical = o.identical && out[r] == out[0];
  o.counts = Counts::Of(c, a.workers) - before;
  o.virtual_s = std::chrono::duration<double>(c.last_op_time()).count();
  Report(a, count, c, o);
  return o.worst.violations == 0 && o.identical ? 0 : 1;
}
