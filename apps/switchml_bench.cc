// switchml-bench: times all-reduces through a switchml switch.
//
// One worker of a benchmark job:
//   switchml-bench --switch HOST[:PORT] --rank R --world N --size 64MiB --dtype float32 --reps 5
// The whole system on this machine (a switch and N worker processes):
//   switchml-bench --local N --size 64MiB --dtype float32 --reps 5
//
// Prints one line per repetition on stderr (rank 0) and, last, one JSON line
// on stdout.
#include <signal.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "bench_common.h"
#include "quantize/quantize.h"
#include "switchml/context.h"
#include "switchml/version.h"

namespace {

using namespace switchml;

struct Options {
  uint32_t local = 0;
  std::string size = "64MiB";
  uint64_t bytes = 0;  // --size, parsed
  std::string dtype = "float32";
  int reps = 5, warmup = 1;
  uint64_t seed = 1;
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
    {"--switch", "switch_address", "control address of the switch, HOST[:PORT]"},
    {"--rank", "rank", "this worker's rank (required with --world > 1)"},
    {"--world", "world_size", "number of workers"},
    {"--job", "job_name", "job name (default: bench)"},
    {"--threads", "threads", "I/O threads per worker"},
    {"--elements-per-packet", "elements_per_packet",
     "int32 values per packet (0: fit the path MTU)"},
    {"--pool-slots", "pool_slots", "switch slots per job"},
    {"--window-slots", "window_slots", "packets in flight (0: measured)"},
    {"--failure-timeout-ms", "failure_timeout_ms", "fail after this long without progress"},
    {"--result-multicast", "result_multicast",
     "accept results by host-local multicast (true/false)"},
    {"--busy-poll-us", "busy_poll_us",
     "out of packets, poll this long (microseconds) before sleeping; with --local, the switch too"},
    {"--auth-key", "auth_key", "job secret (64 hex digits): authenticate every packet"},
    {"--udp-offload", "udp_offload",
     "send segmented and receive coalesced datagrams (UDP GSO/GRO) where the kernel has them "
     "(true/false); with --local, the switch too"},
    {"--transport", "transport",
     "how data packets travel: udp or af_xdp; with --local, the switch too"},
    {"--interface", "interface",
     "af_xdp: the network interface (default: the one facing the switch)"},
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

int RunWorker(const Options& o) {
  auto configured = WorkerConfig(o);
  if (!configured.ok()) {
    std::fprintf(stderr, "%s\n", configured.status().ToString().c_str());
    return 2;
  }
  ContextConfig config = configured.value();
  const uint64_t bytes = o.bytes;
  const size_t count = bytes / 4;
  const bool is_float = o.dtype == "float32";
  const DType dtype = is_float ? DType::kFloat32 : DType::kInt32;

  auto context = Context::Start(config);
  if (!context.ok()) {
    std::fprintf(stderr, "rank %u: %s\n", config.rank, context.status().ToString().c_str());
    return 1;
  }
  Context& ctx = *context.value();
  config = ctx.config();  // with the switch's elements_per_packet
  const uint32_t rank = config.rank, world = config.world_size;
  std::vector<uint32_t> in, out;
  try {
    in.resize(count);
    out.resize(count);
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "rank %u: --size=%s: cannot allocate two buffers of %llu bytes\n", rank,
                 o.size.c_str(), static_cast<unsigned long long>(bytes));
    return 2;
  }
  if (is_float) {
    bench::FillFloat(reinterpret_cast<float*>(in.data()), count, o.seed, rank,
                     config.elements_per_packet);
  } else {
    bench::FillInt32(reinterpret_cast<int32_t*>(in.data()), count, o.seed, rank);
  }
  std::vector<double> times;
  int32_t token = 0;
  for (int rep = -o.warmup; rep < o.reps; ++rep) {
    // Line the ranks up, so each repetition times the all-reduce alone.
    if (Status s = ctx.AllReduce(&token, &token, 1, DType::kInt32); !s.ok()) {
      std::fprintf(stderr, "rank %u: %s\n", rank, s.ToString().c_str());
      return 1;
    }
    const auto start = std::chrono::steady_clock::now();
    const Status s = ctx.AllReduce(in.data(), out.data(), count, dtype);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (!s.ok()) {
      std::fprintf(stderr, "rank %u: %s\n", rank, s.ToString().c_str());
      return 1;
    }
    if (rep < 0) continue;
    times.push_back(seconds);
    if (rank == 0) {
      std::fprintf(stderr, "switchml rep %d/%d: %.4f s, %.2f Gbit/s\n", rep + 1, o.reps, seconds,
                   double(bytes) * 8 / seconds / 1e9);
    }
  }
  const bench::Verification v =
      is_float
          ? bench::VerifyFloat(reinterpret_cast<const float*>(out.data()), count, o.seed, world,
                               config.elements_per_packet, true)
          : bench::VerifyInt32(reinterpret_cast<const int32_t*>(out.data()), count, o.seed, world);
  const ContextCounters c = ctx.counters();
  nlohmann::json j = bench::ResultJson("switchml", world, rank, bytes, o.dtype, times, v,
                                       bench::Digest(out.data(), bytes));
  j["elements_per_packet"] = config.elements_per_packet;
  j["pool_slots"] = config.pool_slots;
  j["window_slots"] = config.window_slots;  // 0: measured
  j["window"] = c.window;
  j["min_rtt_us"] = c.min_rtt_us;
  j["threads"] = config.threads;
  j["authenticated"] = !config.auth_key.empty();
  j["packets_sent"] = c.packets_sent;
  j["retransmissions"] = c.retransmissions;
  j["fast_retransmissions"] = c.fast_retransmissions;
  j["udp_offload"] = config.udp_offload;
  j["transport"] = config.transport;
  j["offload"] = ctx.offload();  // what the kernel granted
  j["multicast_received"] = c.multicast_received;
  std::printf("%s\n", j.dump().c_str());
  return v.within_bound ? 0 : 1;
}

int RunLocal(const Options& o, const std::vector<std::string>& passthrough) {
  // The workers' settings, checked once here (any rank: the parent assigns them).
  Options any_rank = o;
  any_rank.context_flags.emplace_back("rank", "0");
  any_rank.context_flags.emplace_back("world_size", std::to_string(o.local));
  auto config = WorkerConfig(any_rank);
  if (config.ok()) {
    if (Status s = config.value().Validate(); !s.ok()) config = s;
  }
  if (!config.ok()) {
    std::fprintf(stderr, "%s\n", config.status().ToString().c_str());
    return 2;
  }
  const std::string dir = bench::SelfDirectory();
  char port_file[] = "/tmp/switchml-bench-XXXXXX";
  const int fd = mkstemp(port_file);
  if (fd < 0) return 2;
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
                                 std::to_string(std::max<uint32_t>(64, o.local)),
                                 "--max-elements-per-packet",
                                 "8192",
                                 "--pool-slots",
                                 "2048",
                                 "--busy-poll-us",
                                 std::to_string(config.value().busy_poll_us),
                                 "--udp-offload",
                                 config.value().udp_offload ? "true" : "false",
                                 "--transport",
                                 config.value().transport},
                                nullptr);
  if (sw < 0) {
    std::fprintf(stderr, "cannot start %s/switchml-switch\n", dir.c_str());
    return 2;
  }
  int control_port = 0, data_port = 0;
  for (int i = 0; i < 500 && control_port == 0; ++i) {
    std::ifstream(port_file) >> control_port >> data_port;
    if (control_port == 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  unlink(port_file);
  if (control_port == 0) {
    std::fprintf(stderr, "the switch did not start\n");
    kill(sw, SIGTERM);
    bench::WaitFor(sw);
    return 2;
  }
  const int rc = bench::RunLocalWorkers(o.local, [&](uint32_t r) {
    std::vector<std::string> argv = {dir + "/switchml-bench",
                                     "--switch",
                                     "127.0.0.1:" + std::to_string(control_port),
                                     "--rank",
                                     std::to_string(r),
                                     "--world",
                                     std::to_string(o.local)};
    argv.insert(argv.end(), passthrough.begin(), passthrough.end());
    return argv;
  });
  kill(sw, SIGTERM);
  bench::WaitFor(sw);
  return rc;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"switchml-bench: time all-reduces through a switchml switch"};
  app.option_defaults()->always_capture_default();  // --help shows every default
  app.set_version_flag("--version", std::string("switchml-bench ") + SWITCHML_VERSION);
  Options o;
  app.add_option("--local", o.local, "start a switch and this many workers here, on loopback")
      ->check(CLI::Range(1, 256));
  // The options below (but --switch, --rank and --world) are passed on to the
  // workers in --local mode.
  std::vector<std::string> passthrough;
  auto pass = [&](CLI::Option* opt) {
    opt->each([&, opt](const std::string& v) {
      passthrough.push_back(opt->get_name());
      passthrough.push_back(v);
    });
  };
  pass(app.add_option("--size", o.size, "tensor size per worker (B, KiB, MiB, GiB)"));
  pass(app.add_option("--dtype", o.dtype, "float32 or int32")
           ->check(CLI::IsMember({"float32", "int32"})));
  pass(app.add_option("--reps", o.reps, "timed repetitions")->check(CLI::Range(1, 100000)));
  pass(app.add_option("--warmup", o.warmup, "untimed repetitions first")
           ->check(CLI::Range(0, 1000)));
  pass(app.add_option("--seed", o.seed, "seed of the inputs"));
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
  // The size once, here: in --local mode before any process starts.
  o.bytes = bench::ParseSize(o.size);
  if (o.bytes < 4) {
    std::fprintf(stderr, "--size=%s is not a size (try 64MiB)\n", o.size.c_str());
    return 2;
  }
  const uint64_t processes = std::max<uint32_t>(o.local, 1);
  const double memory = double(sysconf(_SC_PHYS_PAGES)) * double(sysconf(_SC_PAGESIZE));
  if (double(o.bytes) * 2 * double(processes) > memory) {
    std::fprintf(stderr,
                 "--size=%s needs %.1f GiB (input and output of %llu worker(s)); this machine "
                 "has %.1f GiB: use a smaller --size\n",
                 o.size.c_str(), double(o.bytes) * 2 * double(processes) / double(1ull << 30),
                 static_cast<unsigned long long>(processes), memory / double(1ull << 30));
    return 2;
  }
  if (o.local > 0) return RunLocal(o, passthrough);
  return RunWorker(o);
}
