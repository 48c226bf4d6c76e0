// switchml-bench: times all-reduces through a switchml switch.
//
// One worker of a benchmark job:
//   switchml-bench --switch HOST[:PORT] --rank R --world N --size 64MiB --dtype float32 --reps 5
// The whole system on this machine (a switch and N worker processes):
//   switchml-bench --local N --size 64MiB --dtype float32 --reps 5
// An nccl-tests-style sweep, beside Gloo's ring on the same inputs:
//   switchml-bench --local N -b 4KiB -e 64MiB -f 4 -n 5 -w 1 --peer gloo
//
// Rank 0 prints the nccl-tests table on stderr; every worker prints one JSON
// line per size on stdout (with --local: rank 0's, then the peer's).
#include <signal.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "bench_common.h"
#include "bench_sweep.h"
#include "quantize/quantize.h"
#include "switchml/context.h"
#include "switchml/version.h"

namespace {

using namespace switchml;

struct Options {
  uint32_t local = 0;
  bench::SweepFlags sweep_flags;
  bench::Sweep sweep;  // sweep_flags, resolved
  std::string dtype = "float32";
  uint64_t seed = 1;
  std::string peer;  // --peer: "", "gloo" or "mpi"
  uint32_t local_switches = 1;
  std::string config_file;
  // Context settings given as flags, in order: (field, value).
  std::vector<std::pair<std::string, std::string>> context_flags;
};

// A Context setting on the command line: the flag and the ContextConfig field.
struct ContextFlag {
  const char* flag;
  const char* field;
  const char* help;
};
constexpr ContextFlag kContextFlags[] = {
    {"--switch", "switch_address",
     "control address of the switch, HOST[:PORT]; several, comma-separated, spread the job"},
    {"--rank", "rank", "this worker's rank (required with --world > 1)"},
    {"--world", "world_size", "number of workers"},
    {"--job", "job_name", "job name (default: bench)"},
    {"--threads", "threads", "I/O threads per worker"},
    {"--elements-per-packet", "elements_per_packet",
     "int32 values per packet (0: fit the path MTU)"},
    {"--pool-slots", "pool_slots", "switch slots per job"},
    {"--window-slots", "window_slots", "packets in flight (0: measured)"},
    {"--failure-timeout-ms", "failure_timeout_ms",
     "fail after this long without progress when the switch went quiet"},
    {"--operation-timeout-ms", "operation_timeout_ms",
     "fail after this long without progress waiting on late ranks"},
    {"--result-multicast", "result_multicast",
     "accept results by host-local multicast (true/false)"},
    {"--busy-poll-us", "busy_poll_us",
     "out of packets, poll this long (microseconds) before sleeping; with --local, the switch too"},
    {"--auth-key", "auth_key", "job secret (64 hex digits): authenticate every packet"},
    {"--udp-offload", "udp_offload",
     "send segmented and receive coalesced datagrams (UDP GSO/GRO) where the kernel has them "
     "(true/false); with --local, the switch too"},
    {"--transport", "transport",
     "how data packets travel: udp, af_xdp or dpdk; with --local, the switch too"},
    {"--interface", "interface",
     "af_xdp: the network interface (default: the one facing the switch)"},
    {"--dpdk-eal", "dpdk_eal_args",
     "dpdk: the EAL arguments, quoted as one (e.g. \"-l 0 --no-huge -m 512 "
     "--vdev=net_af_packet0,iface=eth0\")"},
    {"--dpdk-port", "dpdk_port", "dpdk: the port's device name (default: the only one)"},
    {"--dpdk-address", "dpdk_address",
     "dpdk: the port's IPv4 address (default: the kernel route's)"},
};

// No rank given anywhere (defaults < file < environment < flags).
constexpr uint32_t kNoRank = UINT32_MAX;

// The worker's settings: the benchmark's defaults, then the --config file,
// then SWITCHML_<NAME> variables, then the flags given explicitly.
ContextConfig BenchDefaults() {
  ContextConfig config;
  config.job_name = "bench";
  return config;
}

// The benchmark's default of every Context setting, by key, for --help.
std::map<std::string, std::string> ContextDefaults() {
  std::map<std::string, std::string> defaults;
  std::istringstream toml(BenchDefaults().ToToml());
  for (std::string line; std::getline(toml, line);) {
    const size_t eq = line.find(" = ");
    if (line.empty() || line[0] == '#' || eq == std::string::npos) continue;
    std::string value = line.substr(eq + 3);
    if (value.size() >= 2 && value.front() == '"') value = value.substr(1, value.size() - 2);
    defaults[line.substr(0, eq)] = value;
  }
  return defaults;
}

StatusOr<ContextConfig> WorkerConfig(const Options& o) {
  ContextConfig config = BenchDefaults();
  config.rank = kNoRank;
  if (!o.config_file.empty()) {
    auto loaded = ContextConfig::FromTomlFile(o.config_file, config);
    if (!loaded.ok()) return loaded.status();
    config = loaded.value();
  }
  if (Status s = config.ApplyEnvironment(); !s.ok()) return s;
  for (const auto& [field, value] : o.context_flags) {
    if (Status s = config.Set(field, value); !s.ok()) return s;
  }
  if (config.rank == kNoRank) {
    if (config.world_size > 1) {
      return InvalidArgument("--world " + std::to_string(config.world_size) +
                             " needs this worker's --rank (0.." +
                             std::to_string(config.world_size - 1) + ")");
    }
    config.rank = 0;
  }
  return config;
}

// The ranks' total of `wrong`, by an exact int32 all-reduce (each rank's
// count capped so that the sum cannot overflow).
StatusOr<uint64_t> WrongOverRanks(Context& ctx, uint64_t wrong) {
  int32_t n = int32_t(std::min<uint64_t>(wrong, INT32_MAX / ctx.world_size()));
  if (Status s = ctx.AllReduce(&n, &n, 1, DType::kInt32); !s.ok()) return s;
  return uint64_t(n);
}

// The JSON line of one size: the common fields, and switchml's own.
nlohmann::json SizeJson(const Options& o, const ContextConfig& config, Context& ctx,
                        const ContextCounters& before, const ContextCounters& c, uint64_t bytes,
                        const std::vector<double>& times, const bench::Verification& v,
                        const void* out, uint64_t wrong) {
  nlohmann::json j = bench::SizeResultJson("switchml", config.world_size, config.rank, bytes,
                                           o.dtype, times, v, bench::Digest(out, bytes), wrong);
  j["elements_per_packet"] = config.elements_per_packet;
  j["pool_slots"] = config.pool_slots;
  j["window_slots"] = config.window_slots;  // 0: measured
  j["window"] = c.window;
  j["min_rtt_us"] = c.min_rtt_us;
  j["threads"] = config.threads;
  j["authenticated"] = !config.auth_key.empty();
  // This size's share of the counters (its warm-up and line-ups included).
  j["packets_sent"] = c.packets_sent - before.packets_sent;
  j["retransmissions"] = c.retransmissions - before.retransmissions;
  j["fast_retransmissions"] = c.fast_retransmissions - before.fast_retransmissions;
  j["probes"] = c.probes_sent - before.probes_sent;
  j["udp_offload"] = config.udp_offload;
  j["transport"] = config.transport;
  j["offload"] = ctx.offload();  // what the kernel granted
  j["multicast_received"] = c.multicast_received - before.multicast_received;
  return j;
}

// One size of the sweep: timed, verified, reported. Returns whether every
// element was within the quantization bound.
StatusOr<bool> RunSize(const Options& o, const ContextConfig& config, Context& ctx,
                       const std::vector<uint32_t>& in, std::vector<uint32_t>& out, uint64_t bytes,
                       std::vector<nlohmann::json>* lines) {
  const bool is_float = o.dtype == "float32";
  const DType dtype = is_float ? DType::kFloat32 : DType::kInt32;
  const size_t count = bytes / 4;
  const ContextCounters before = ctx.counters();
  Status failure;
  std::vector<double> times;
  int32_t token = 0;
  const bool ran = bench::TimeRepetitions(
      o.sweep.warmup, o.sweep.iters,
      [&] { return (failure = ctx.AllReduce(&token, &token, 1, DType::kInt32)).ok(); },
      [&] { return (failure = ctx.AllReduce(in.data(), out.data(), count, dtype)).ok(); }, &times);
  if (!ran) return failure;
  const uint32_t world = config.world_size;
  const bench::Verification v =
      is_float
          ? bench::VerifyFloat(reinterpret_cast<const float*>(out.data()), count, o.seed, world,
                               config.elements_per_packet, true)
          : bench::VerifyInt32(reinterpret_cast<const int32_t*>(out.data()), count, o.seed, world);
  const ContextCounters c = ctx.counters();  // before the count of wrong elements
  auto wrong = WrongOverRanks(ctx, v.wrong);
  if (!wrong.ok()) return wrong.status();
  bench::ReportSize(SizeJson(o, config, ctx, before, c, bytes, times, v, out.data(), wrong.value()),
                    config.rank == 0, bytes == o.sweep.sizes.back(), lines);
  return v.within_bound;
}

int RunWorker(const Options& o) {
  auto configured = WorkerConfig(o);
  if (!configured.ok()) {
    std::fprintf(stderr, "%s\n", configured.status().ToString().c_str());
    return 2;
  }
  ContextConfig config = configured.value();
  auto context = Context::Start(config);
  if (!context.ok()) {
    std::fprintf(stderr, "rank %u: %s\n", config.rank, context.status().ToString().c_str());
    return 1;
  }
  Context& ctx = *context.value();
  config = ctx.config();  // with the switch's elements_per_packet
  const uint32_t rank = config.rank;
  // Every size of the sweep uses a prefix of the largest one's buffers: the
  // inputs of element i do not depend on the size.
  const size_t max_count = o.sweep.max_bytes() / 4;
  std::vector<uint32_t> in, out;
  try {
    in.resize(max_count);
    out.resize(max_count);
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "rank %u: cannot allocate two buffers of %llu bytes\n", rank,
                 static_cast<unsigned long long>(o.sweep.max_bytes()));
    return 2;
  }
  if (o.dtype == "float32") {
    bench::FillFloat(reinterpret_cast<float*>(in.data()), max_count, o.seed, rank,
                     config.elements_per_packet);
  } else {
    bench::FillInt32(reinterpret_cast<int32_t*>(in.data()), max_count, o.seed, rank);
  }
  if (rank == 0) bench::PrintTableHeader("switchml", config.world_size, o.dtype);
  std::vector<nlohmann::json> lines;
  bool all_within = true;
  for (const uint64_t bytes : o.sweep.sizes) {
    auto within = RunSize(o, config, ctx, in, out, bytes, &lines);
    if (!within.ok()) {
      std::fprintf(stderr, "rank %u: %s\n", rank, within.status().ToString().c_str());
      return 1;
    }
    all_within = all_within && within.value();
  }
  return all_within ? 0 : 1;
}

// The command line that runs the peer's sweep on this machine, or an error
// line naming what is missing.
StatusOr<std::vector<std::string>> PeerCommand(const Options& o, const std::string& dir) {
  if (o.peer == "gloo") {
    const std::string exe = dir + "/switchml-gloo-bench";
    if (access(exe.c_str(), X_OK) != 0) {
      return FailedPrecondition("--peer gloo: " + exe +
                                " is not built (apt-get install libgloo-dev, then rebuild)");
    }
    return std::vector<std::string>{exe, "--local", std::to_string(o.local)};
  }
  const std::string exe = dir + "/switchml-mpi-bench", mpirun = bench::FindInPath("mpirun");
  if (access(exe.c_str(), X_OK) != 0 || mpirun.empty()) {
    return FailedPrecondition("--peer mpi: needs " + exe +
                              " and mpirun (apt-get install libopenmpi-dev openmpi-bin, then "
                              "rebuild)");
  }
  return std::vector<std::string>{mpirun,
                                  "-np",
                                  std::to_string(o.local),
                                  "--oversubscribe",
                                  "--bind-to",
                                  "none",
                                  "--mca",
                                  "btl",
                                  "tcp,self",
                                  "--mca",
                                  "btl_tcp_if_include",
                                  "lo",
                                  "--mca",
                                  "oob_tcp_if_include",
                                  "lo",
                                  exe};
}

// Runs the peer's sweep (its tables go to stderr) and returns its result lines.
int RunPeer(std::vector<std::string> argv, const std::vector<std::string>& passthrough,
            uint32_t block, std::vector<nlohmann::json>* lines) {
  argv.insert(argv.end(), passthrough.begin(), passthrough.end());
  argv.insert(argv.end(), {"--block", std::to_string(block)});
  // Open MPI refuses root unless told; it is a benchmark peer on loopback only.
  setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
  setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
  int fd = -1;
  const pid_t pid = bench::Spawn(argv, &fd);
  if (pid < 0) {
    std::fprintf(stderr, "cannot start %s\n", argv[0].c_str());
    return 2;
  }
  const std::string output = bench::ReadAll(fd);
  const int rc = bench::WaitFor(pid);
  if (!bench::ParseResultLines(output, "the peer", lines)) return 1;
  if (rc != 0) std::fprintf(stderr, "%s exited with status %d\n", argv[0].c_str(), rc);
  return rc;
}

// Adds the peer's median and the ratio to each switchml line and prints the
// comparison table on stderr. False when a size has no peer result.
bool Compare(const std::string& peer, std::vector<nlohmann::json>& ours,
             const std::vector<nlohmann::json>& theirs) {
  std::fprintf(stderr,
               "# switchml vs %s; time: the median of -n iterations\n"
               "# %12s %14s %14s %8s\n",
               peer.c_str(), "size (B)", "switchml (us)", (peer + " (us)").c_str(), "ratio");
  bool complete = true;
  for (nlohmann::json& j : ours) {
    const auto it = std::find_if(theirs.begin(), theirs.end(), [&](const auto& t) {
      return t.value("bytes", 0ull) == j.value("bytes", 0ull);
    });
    if (it == theirs.end()) {
      complete = false;
      continue;
    }
    const double mine = j.value("median_s", 0.0), other = it->value("median_s", 0.0);
    j["peer"] = peer;
    j["peer_median_s"] = other;
    j["peer_busbw_gbs"] = it->value("busbw_gbs", 0.0);
    j["ratio_to_peer"] = other > 0 ? mine / other : 0.0;
    std::fprintf(stderr, "  %12llu %14.1f %14.1f %8.3f\n", j.value("bytes", 0ull), mine * 1e6,
                 other * 1e6, j.value("ratio_to_peer", 0.0));
  }
  return complete;
}

// Starts one switch on loopback for `workers` local workers; returns its pid
// (-1: none) and control port (0: it did not start, said on stderr).
std::pair<pid_t, int> StartLocalSwitch(const std::string& dir, uint32_t workers,
                                       const ContextConfig& config) {
  char port_file[] = "/tmp/switchml-bench-XXXXXX";
  const int fd = mkstemp(port_file);
  if (fd < 0) return {-1, 0};
  close(fd);
  unlink(port_file);
  const pid_t sw = bench::Spawn({dir + "/switchml-switch",
                                 "--bind",
                                 "127.0.0.1",
                                 "--control-port",
                                 "0",
                                 "--data-port",
                                 "0",
                                 "--port-file",
                                 port_file,
                                 "--log-level",
                                 "warn",
                                 "--max-workers",
                                 std::to_string(std::max<uint32_t>(64, workers)),
                                 "--max-elements-per-packet",
                                 "8192",
                                 "--pool-slots",
                                 "2048",
                                 "--busy-poll-us",
                                 std::to_string(config.busy_poll_us),
                                 "--udp-offload",
                                 config.udp_offload ? "true" : "false",
                                 "--transport",
                                 config.transport},
                                nullptr);
  if (sw < 0) {
    std::fprintf(stderr, "cannot start %s/switchml-switch\n", dir.c_str());
    return {-1, 0};
  }
  int control_port = 0, data_port = 0;
  for (int i = 0; i < 500 && control_port == 0; ++i) {
    std::ifstream(port_file) >> control_port >> data_port;
    if (control_port == 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  unlink(port_file);
  if (control_port == 0) std::fprintf(stderr, "the switch did not start\n");
  return {sw, control_port};
}

int RunLocal(const Options& o, const std::vector<std::string>& passthrough,
             const std::vector<std::string>& peer_passthrough) {
  // The workers' settings, checked once here (any rank: the parent assigns
  // them; any addresses, one per switch).
  Options any_rank = o;
  any_rank.context_flags.emplace_back("rank", "0");
  any_rank.context_flags.emplace_back("world_size", std::to_string(o.local));
  std::string placeholders;
  for (uint32_t k = 0; k < o.local_switches; ++k) {
    placeholders += (k ? ",127.0.0.1:" : "127.0.0.1:") + std::to_string(k + 1);
  }
  any_rank.context_flags.emplace_back("switch_address", placeholders);
  // Every switch needs a thread of each worker: unless --threads says, one each.
  std::vector<std::string> worker_flags = passthrough;
  const bool threads_given = std::any_of(o.context_flags.begin(), o.context_flags.end(),
                                         [](const auto& f) { return f.first == "threads"; });
  if (o.local_switches > 1 && !threads_given) {
    any_rank.context_flags.emplace_back("threads", std::to_string(o.local_switches));
    worker_flags.insert(worker_flags.end(), {"--threads", std::to_string(o.local_switches)});
  }
  auto config = WorkerConfig(any_rank);
  if (config.ok()) {
    if (Status s = config.value().Validate(); !s.ok()) config = s;
  }
  if (!config.ok()) {
    std::fprintf(stderr, "%s\n", config.status().ToString().c_str());
    return 2;
  }
  const std::string dir = bench::SelfDirectory();
  StatusOr<std::vector<std::string>> peer_command = std::vector<std::string>{};
  if (!o.peer.empty()) peer_command = PeerCommand(o, dir);
  if (!peer_command.ok()) {
    std::fprintf(stderr, "%s\n", peer_command.status().message().c_str());
    return 2;
  }
  std::vector<pid_t> switches;
  std::string addresses;
  auto stop_switches = [&switches] {
    for (pid_t sw : switches) kill(sw, SIGTERM);
    for (pid_t sw : switches) bench::WaitFor(sw);
  };
  for (uint32_t k = 0; k < o.local_switches; ++k) {
    const auto [sw, control_port] = StartLocalSwitch(dir, o.local, config.value());
    if (sw > 0) switches.push_back(sw);
    if (control_port == 0) {
      stop_switches();
      return 2;
    }
    addresses += (k ? "," : "") + std::string("127.0.0.1:") + std::to_string(control_port);
  }
  std::vector<nlohmann::json> results;
  int rc = bench::CollectLocalWorkers(
      o.local,
      [&](uint32_t r) {
        std::vector<std::string> argv = {
            dir + "/switchml-bench", "--switch", addresses, "--rank", std::to_string(r), "--world",
            std::to_string(o.local)};
        argv.insert(argv.end(), worker_flags.begin(), worker_flags.end());
        return argv;
      },
      &results);
  stop_switches();
  std::vector<nlohmann::json> peer_results;
  if (!o.peer.empty() && !results.empty()) {
    const uint32_t block = results[0].value("elements_per_packet", 1024u);
    rc = std::max(rc, RunPeer(peer_command.value(), peer_passthrough, block, &peer_results));
    if (!Compare(o.peer, results, peer_results)) rc = std::max(rc, 1);
  }
  bench::PrintLocalSummary(o.local, results, rc == 0);
  for (const auto& lines : {&results, &peer_results}) {
    for (const auto& j : *lines) std::printf("%s\n", j.dump().c_str());
  }
  std::fflush(stdout);
  return rc;
}

}  // namespace

// The checks a run needs once the flags are parsed: the sizes (resolved
// here, in --local mode before any process starts), the memory they need,
// and the flags that need --local. 0, or the exit code after a message.
int CheckRun(Options& o) {
  if (std::string error = bench::ResolveSweep(o.sweep_flags, &o.sweep); !error.empty()) {
    std::fprintf(stderr, "%s\n", error.c_str());
    return 2;
  }
  const uint64_t bytes = o.sweep.max_bytes();
  const uint64_t processes = std::max<uint32_t>(o.local, 1);
  const double memory = double(sysconf(_SC_PHYS_PAGES)) * double(sysconf(_SC_PAGESIZE));
  if (double(bytes) * 2 * double(processes) > memory) {
    std::fprintf(
        stderr,
        "%s=%s needs %.1f GiB (input and output of %llu worker(s)); this machine has "
        "%.1f GiB: use a smaller size\n",
        o.sweep_flags.max_bytes.empty() ? "--size" : "-e/--maxbytes",
        (o.sweep_flags.max_bytes.empty() ? o.sweep_flags.size : o.sweep_flags.max_bytes).c_str(),
        double(bytes) * 2 * double(processes) / double(1ull << 30),
        static_cast<unsigned long long>(processes), memory / double(1ull << 30));
    return 2;
  }
  if (o.local_switches > 1 && o.local == 0) {
    std::fprintf(stderr,
                 "--local-switches %u starts switches for a --local run; across hosts, list the "
                 "switches in --switch A,B\n",
                 o.local_switches);
    return 2;
  }
  if (!o.peer.empty() && o.local == 0) {
    std::fprintf(stderr,
                 "--peer %s runs the peer beside a --local run; across hosts, start "
                 "switchml-gloo-bench (or mpirun switchml-mpi-bench) with the same "
                 "-b/-e/-f/-n/-w yourself\n",
                 o.peer.c_str());
    return 2;
  }
  return 0;
}

int main(int argc, char** argv) {
  CLI::App app{"switchml-bench: time all-reduces through a switchml switch"};
  app.option_defaults()->always_capture_default();  // --help shows every default
  app.set_version_flag("--version", std::string("switchml-bench ") + SWITCHML_VERSION);
  Options o;
  app.add_option("--local", o.local, "start a switch and this many workers here, on loopback")
      ->check(CLI::Range(1, 256));
  app.add_option("--local-switches", o.local_switches,
                 "with --local: start this many switches and spread the job over them (each "
                 "worker gets a thread per switch unless --threads says)")
      ->check(CLI::Range(1, 16));
  app.add_option("--peer", o.peer,
                 "with --local: then run the same sweep with this peer (gloo: Gloo's ring, "
                 "mpi: Open MPI's MPI_Allreduce) and compare")
      ->check(CLI::IsMember({"gloo", "mpi"}));
  // The options below (but --switch, --rank and --world) are passed on to the
  // workers in --local mode; those of the sweep and the inputs to the peer too.
  std::vector<std::string> passthrough, peer_passthrough;
  auto pass_to = [&](CLI::Option* opt, bool to_peer) {
    opt->each([&, opt, to_peer](const std::string& v) {
      for (auto* list : {&passthrough, &peer_passthrough}) {
        if (list == &peer_passthrough && !to_peer) continue;
        list->push_back(opt->get_name());
        list->push_back(v);
      }
    });
  };
  auto pass = [&](CLI::Option* opt) { pass_to(opt, false); };
  auto pass_both = [&](CLI::Option* opt) { pass_to(opt, true); };
  bench::AddSweepFlags(app, o.sweep_flags, pass_both);
  pass_both(app.add_option("--dtype", o.dtype, "float32 or int32")
                ->check(CLI::IsMember({"float32", "int32"})));
  pass_both(app.add_option("--seed", o.seed, "seed of the inputs"));
  pass(app.add_option("--config", o.config_file,
                      "TOML file of Context settings (defaults < file < SWITCHML_<NAME> "
                      "variables < flags)"));
  // Context settings: applied over the file and the environment with
  // ContextConfig::Set, which validates them and names the field.
  std::vector<std::string> values(std::size(kContextFlags));
  const std::map<std::string, std::string> defaults = ContextDefaults();
  for (size_t i = 0; i < std::size(kContextFlags); ++i) {
    const ContextFlag& f = kContextFlags[i];
    CLI::Option* opt = app.add_option(f.flag, values[i], f.help);
    if (auto d = defaults.find(f.field); d != defaults.end()) opt->default_str(d->second);
    opt->each([&o, &f](const std::string& v) { o.context_flags.emplace_back(f.field, v); });
    const std::string flag = f.flag;
    if (flag != "--switch" && flag != "--rank" && flag != "--world") pass(opt);
  }
  CLI11_PARSE(app, argc, argv);
  if (int error = CheckRun(o); error != 0) return error;
  if (o.local > 0) return RunLocal(o, passthrough, peer_passthrough);
  return RunWorker(o);
}
