// switchml-gloo-bench: the same benchmark as switchml-bench, run by Gloo's
// ring all-reduce (reduce-scatter + all-gather over TCP), so the two can be
// compared side by side on the same inputs.
//
//   switchml-gloo-bench --local N --size 64MiB --dtype float32 --reps 5
//   switchml-gloo-bench --local N -b 4KiB -e 64MiB -f 4 -n 5 -w 1     (a sweep)
//   switchml-gloo-bench --rank R --world N --store DIR --host IP ...
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>
#include <stdlib.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "bench_common.h"
#include "bench_sweep.h"
#include "switchml/version.h"

namespace {

using namespace switchml;

struct Options {
  uint32_t rank = 0, world = 1, local = 0;
  std::string store, host = "127.0.0.1", prefix = "gloo-bench";
  bench::SweepFlags sweep_flags;
  bench::Sweep sweep;  // sweep_flags, resolved
  std::string dtype = "float32";
  uint64_t seed = 1;
  uint32_t block = 1024;  // the switchml block size, only to generate identical inputs
};

template <typename T>
void AllReduce(const std::shared_ptr<gloo::Context>& context, T* in, T* out, size_t count) {
  gloo::AllreduceOptions opts(context);
  opts.setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
  opts.setInput(in, count);
  opts.setOutput(out, count);
  opts.setReduceFunction(
      static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<T>));
  gloo::allreduce(opts);
}

int RunWorker(const Options& o) {
  const size_t max_count = o.sweep.max_bytes() / 4;
  const bool is_float = o.dtype == "float32";
  std::vector<uint32_t> in(max_count), out(max_count);
  if (is_float) {
    bench::FillFloat(reinterpret_cast<float*>(in.data()), max_count, o.seed, o.rank, o.block);
  } else {
    bench::FillInt32(reinterpret_cast<int32_t*>(in.data()), max_count, o.seed, o.rank);
  }
  gloo::transport::tcp::attr attr;
  attr.hostname = o.host;
  auto device = gloo::transport::tcp::CreateDevice(attr);
  gloo::rendezvous::FileStore file_store(o.store);
  gloo::rendezvous::PrefixStore store(o.prefix, file_store);
  auto context = std::make_shared<gloo::rendezvous::Context>(int(o.rank), int(o.world));
  context->setTimeout(std::chrono::seconds(60));
  context->connectFullMesh(store, device);

  if (o.rank == 0) bench::PrintTableHeader("gloo", o.world, o.dtype);
  std::vector<nlohmann::json> lines;
  bool all_within = true;
  for (const uint64_t bytes : o.sweep.sizes) {
    const size_t count = bytes / 4;
    std::vector<double> times;
    bench::TimeRepetitions(
        o.sweep.warmup, o.sweep.iters,
        [&] {
          gloo::BarrierOptions barrier(context);
          gloo::barrier(barrier);
          return true;
        },
        [&] {
          if (is_float) {
            AllReduce(context, reinterpret_cast<float*>(in.data()),
                      reinterpret_cast<float*>(out.data()), count);
          } else {
            AllReduce(context, reinterpret_cast<int32_t*>(in.data()),
                      reinterpret_cast<int32_t*>(out.data()), count);
          }
          return true;
        },
        &times);
    const bench::Verification v =
        is_float ? bench::VerifyFloat(reinterpret_cast<const float*>(out.data()), count, o.seed,
                                      o.world, o.block, false)
                 : bench::VerifyInt32(reinterpret_cast<const int32_t*>(out.data()), count, o.seed,
                                      o.world);
    uint64_t mine = v.wrong, wrong = 0;
    AllReduce(context, &mine, &wrong, 1);
    all_within = all_within && v.within_bound;
    nlohmann::json j = bench::SizeResultJson("gloo", o.world, o.rank, bytes, o.dtype, times, v,
                                             bench::Digest(out.data(), bytes), wrong);
    j["algorithm"] = "ring";
    bench::ReportSize(std::move(j), o.rank == 0, bytes == o.sweep.sizes.back(), &lines);
  }
  return all_within ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"switchml-gloo-bench: Gloo ring all-reduce on the inputs of switchml-bench"};
  app.option_defaults()->always_capture_default();  // --help shows every default
  app.set_version_flag("--version", std::string("switchml-gloo-bench ") + SWITCHML_VERSION);
  Options o;
  std::vector<std::string> passthrough;
  auto pass = [&](CLI::Option* opt) {
    opt->each([&, opt](const std::string& v) {
      passthrough.push_back(opt->get_name());
      passthrough.push_back(v);
    });
  };
  app.add_option("--rank", o.rank, "this worker's rank");
  app.add_option("--world", o.world, "number of workers")->check(CLI::Range(1, 65534));
  app.add_option("--local", o.local, "start this many workers here, on loopback")
      ->check(CLI::Range(1, 256));
  app.add_option("--store", o.store, "rendezvous directory shared by the workers");
  app.add_option("--prefix", o.prefix, "rendezvous key prefix (unique per run)");
  pass(app.add_option("--host", o.host, "address this worker listens on"));
  bench::AddSweepFlags(app, o.sweep_flags, pass);
  pass(app.add_option("--dtype", o.dtype, "float32 or int32")
           ->check(CLI::IsMember({"float32", "int32"})));
  pass(app.add_option("--seed", o.seed, "seed of the inputs"));
  pass(app.add_option("--block", o.block, "switchml's elements per packet (input pattern only)"));
  CLI11_PARSE(app, argc, argv);
  if (std::string error = bench::ResolveSweep(o.sweep_flags, &o.sweep); !error.empty()) {
    std::fprintf(stderr, "%s\n", error.c_str());
    return 2;
  }
  if (o.local == 0) return RunWorker(o);

  char dir[] = "/tmp/switchml-gloo-XXXXXX";
  if (mkdtemp(dir) == nullptr) return 2;
  const std::string self = bench::SelfDirectory() + "/switchml-gloo-bench";
  const int rc = bench::RunLocalWorkers(o.local, [&](uint32_t r) {
    std::vector<std::string> argv = {
        self,      "--rank", std::to_string(r), "--world", std::to_string(o.local),
        "--store", dir,      "--prefix",        "run"};
    argv.insert(argv.end(), passthrough.begin(), passthrough.end());
    return argv;
  });
  std::error_code ignored;
  std::filesystem::remove_all(dir, ignored);
  return rc;
}
