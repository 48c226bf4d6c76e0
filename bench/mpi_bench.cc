// switchml-mpi-bench: the same benchmark as switchml-bench, run by Open
// MPI's MPI_Allreduce, so the two can be compared side by side on the same
// inputs. Start it under mpirun; rank 0 prints the nccl-tests-style table on
// stderr and one JSON line per size (the fields of every benchmark result,
// plus ranks_identical) on stdout.
//
//   mpirun -np 4 --mca btl tcp,self switchml-mpi-bench --size 64MiB --dtype float32
//   mpirun -np 4 --mca btl tcp,self switchml-mpi-bench -b 4KiB -e 64MiB -f 4 -n 5 -w 1
#include <mpi.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>

#include "bench_common.h"
#include "bench_sweep.h"
#include "switchml/version.h"

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  CLI::App app{"switchml-mpi-bench: MPI_Allreduce on the inputs of switchml-bench"};
  app.option_defaults()->always_capture_default();  // --help shows every default
  app.set_version_flag("--version", std::string("switchml-mpi-bench ") + SWITCHML_VERSION);
  namespace bench = switchml::bench;
  bench::SweepFlags sweep_flags;
  std::string dtype = "float32";
  uint64_t seed = 1;
  uint32_t block = 1024;
  bench::AddSweepFlags(app, sweep_flags, [](CLI::Option*) {});
  app.add_option("--dtype", dtype, "float32 or int32")->check(CLI::IsMember({"float32", "int32"}));
  app.add_option("--seed", seed, "seed of the inputs");
  app.add_option("--block", block, "switchml's elements per packet (input pattern only)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    MPI_Finalize();
    return rc;
  }
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  bench::Sweep sweep;
  if (std::string error = bench::ResolveSweep(sweep_flags, &sweep); !error.empty()) {
    if (rank == 0) std::fprintf(stderr, "%s\n", error.c_str());
    MPI_Finalize();
    return 2;
  }
  const size_t max_count = sweep.max_bytes() / 4;
  const bool is_float = dtype == "float32";
  std::vector<uint32_t> in(max_count), out(max_count);
  if (is_float) {
    bench::FillFloat(reinterpret_cast<float*>(in.data()), max_count, seed, uint32_t(rank), block);
  } else {
    bench::FillInt32(reinterpret_cast<int32_t*>(in.data()), max_count, seed, uint32_t(rank));
  }
  if (rank == 0) bench::PrintTableHeader("mpi", uint32_t(world), dtype);
  std::vector<nlohmann::json> lines;
  int rc = 0;
  for (const uint64_t bytes : sweep.sizes) {
    const size_t count = bytes / 4;
    std::vector<double> times;
    bench::TimeRepetitions(
        sweep.warmup, sweep.iters, [] { return MPI_Barrier(MPI_COMM_WORLD) == MPI_SUCCESS; },
        [&] {
          return MPI_Allreduce(in.data(), out.data(), int(count), is_float ? MPI_FLOAT : MPI_INT,
                               MPI_SUM, MPI_COMM_WORLD) == MPI_SUCCESS;
        },
        &times);
    const bench::Verification v =
        is_float ? bench::VerifyFloat(reinterpret_cast<const float*>(out.data()), count, seed,
                                      uint32_t(world), block, false)
                 : bench::VerifyInt32(reinterpret_cast<const int32_t*>(out.data()), count, seed,
                                      uint32_t(world));
    unsigned long long mine_wrong = v.wrong, wrong = 0;
    MPI_Allreduce(&mine_wrong, &wrong, 1, MPI_UNSIGNED_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
    // Rank 0 reports for all: every rank's digest and verdict.
    const std::string digest = bench::Digest(out.data(), bytes);
    char mine[80] = {};
    std::snprintf(mine, sizeof(mine), "%s %d", digest.c_str(), v.within_bound ? 1 : 0);
    std::vector<char> all(sizeof(mine) * size_t(world));
    MPI_Gather(mine, sizeof(mine), MPI_CHAR, all.data(), sizeof(mine), MPI_CHAR, 0, MPI_COMM_WORLD);
    if (rank != 0) continue;
    bool identical = true, verified = true;
    for (int r = 0; r < world; ++r) {
      const char* theirs = &all[sizeof(mine) * size_t(r)];
      identical = identical && std::strncmp(theirs, digest.c_str(), digest.size()) == 0;
      verified = verified && std::strstr(theirs, " 1") != nullptr;
    }
    nlohmann::json j =
        bench::SizeResultJson("mpi", uint32_t(world), 0, bytes, dtype, times, v, digest, wrong);
    j["within_bound"] = verified;
    j["ranks_identical"] = identical;
    j["transport"] = "tcp";
    if (!(identical && verified)) rc = 1;
    bench::ReportSize(std::move(j), true, bytes == sweep.sizes.back(), &lines);
  }
  MPI_Finalize();
  return rc;
}
