// switchml-mpi-bench: the same benchmark as switchml-bench, run by Open
// MPI's MPI_Allreduce, so the two can be compared side by side on the same
// inputs. Start it under mpirun; rank 0 prints one JSON line (the fields of
// every benchmark result, plus ranks_identical).
//
//   mpirun -np 4 --mca btl tcp,self switchml-mpi-bench --size 64MiB --dtype float32
#include <mpi.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>

#include "bench_common.h"
#include "switchml/version.h"

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  CLI::App app{"switchml-mpi-bench: MPI_Allreduce on the inputs of switchml-bench"};
  app.option_defaults()->always_capture_default();  // --help shows every default
  app.set_version_flag("--version", std::string("switchml-mpi-bench ") + SWITCHML_VERSION);
  std::string size = "64MiB", dtype = "float32";
  int reps = 5, warmup = 1;
  uint64_t seed = 1;
  uint32_t block = 1024;
  app.add_option("--size", size, "tensor size per worker");
  app.add_option("--dtype", dtype, "float32 or int32")->check(CLI::IsMember({"float32", "int32"}));
  app.add_option("--reps", reps, "timed repetitions");
  app.add_option("--warmup", warmup, "untimed repetitions first");
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
  namespace bench = switchml::bench;
  const uint64_t bytes = bench::ParseSize(size);
  if (bytes < 4) {
    if (rank == 0) std::fprintf(stderr, "--size=%s is not a size (try 64MiB)\n", size.c_str());
    MPI_Finalize();
    return 2;
  }
  const size_t count = bytes / 4;
  const bool is_float = dtype == "float32";
  std::vector<uint32_t> in(count), out(count);
  if (is_float) {
    bench::FillFloat(reinterpret_cast<float*>(in.data()), count, seed, uint32_t(rank), block);
  } else {
    bench::FillInt32(reinterpret_cast<int32_t*>(in.data()), count, seed, uint32_t(rank));
  }
  std::vector<double> times;
  for (int rep = -warmup; rep < reps; ++rep) {
    MPI_Barrier(MPI_COMM_WORLD);
    const auto start = std::chrono::steady_clock::now();
    MPI_Allreduce(in.data(), out.data(), int(count), is_float ? MPI_FLOAT : MPI_INT, MPI_SUM,
                  MPI_COMM_WORLD);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (rep < 0) continue;
    times.push_back(seconds);
    if (rank == 0) {
      std::fprintf(stderr, "mpi rep %d/%d: %.4f s, %.2f Gbit/s\n", rep + 1, reps, seconds,
                   double(bytes) * 8 / seconds / 1e9);
    }
  }
  const bench::Verification v =
      is_float ? bench::VerifyFloat(reinterpret_cast<const float*>(out.data()), count, seed,
                                    uint32_t(world), block, false)
               : bench::VerifyInt32(reinterpret_cast<const int32_t*>(out.data()), count, seed,
                                    uint32_t(world));
  // Rank 0 reports for all: every rank's digest and verdict.
  const std::string digest = bench::Digest(out.data(), bytes);
  char mine[80] = {};
  std::snprintf(mine, sizeof(mine), "%s %d", digest.c_str(), v.within_bound ? 1 : 0);
  std::vector<char> all(sizeof(mine) * size_t(world));
  MPI_Gather(mine, sizeof(mine), MPI_CHAR, all.data(), sizeof(mine), MPI_CHAR, 0, MPI_COMM_WORLD);
  int rc = 0;
  if (rank == 0) {
    bool identical = true, verified = true;
    for (int r = 0; r < world; ++r) {
      const char* theirs = &all[sizeof(mine) * size_t(r)];
      identical = identical && std::strncmp(theirs, digest.c_str(), digest.size()) == 0;
      verified = verified && std::strstr(theirs, " 1") != nullptr;
    }
    nlohmann::json j = bench::ResultJson("mpi", uint32_t(world), 0, bytes, dtype, times, v, digest);
    j["within_bound"] = verified;
    j["ranks_identical"] = identical;
    j["transport"] = "tcp";
    std::printf("%s\n", j.dump().c_str());
    rc = identical && verified ? 0 : 1;
  }
  MPI_Finalize();
  return rc;
}
