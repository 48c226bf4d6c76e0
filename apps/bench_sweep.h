// nccl-tests-style size sweeps, shared by switchml-bench and its Gloo and MPI
// peers: the same flags (-b/-e/-f/-n/-w), the same timing loop, the same
// table (size, count, type, time, algbw, busbw, #wrong) and JSON lines.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench_common.h"

namespace switchml::bench {

// The sizes and repetitions as given on the command line.
struct SweepFlags {
  std::string size = "64MiB";        // one size, when -b and -e are not given
  std::string min_bytes, max_bytes;  // -b / -e; empty when not given
  double step_factor = 2;            // -f
  int iters = 5, warmup = 1;         // -n / -w
};

// Registers --size, -b/--minbytes, -e/--maxbytes, -f/--stepfactor,
// -n/--iters (alias --reps) and -w/--warmup_iters (alias --warmup), and hands
// each option to `added` (to pass it on to worker processes).
void AddSweepFlags(CLI::App& app, SweepFlags& flags,
                   const std::function<void(CLI::Option*)>& added);

// What to run: every size (bytes, a multiple of 4) in order.
struct Sweep {
  std::vector<uint64_t> sizes;
  int iters = 5, warmup = 1;
  bool single = true;  // one --size, not a -b/-e sweep
  uint64_t max_bytes() const { return sizes.empty() ? 0 : sizes.back(); }
};
// The sweep of `flags`: minbytes, minbytes×f, ... up to maxbytes (nccl-tests'
// rule). -b alone sweeps up to --size, -e alone from --size. Returns an empty
// string, or one line naming the bad value and the fix.
std::string ResolveSweep(const SweepFlags& flags, Sweep* sweep);

// nccl-tests' bus-bandwidth factor of an all-reduce over `world` ranks,
// 2(n-1)/n: busbw = algbw × factor is comparable to a ring's link bandwidth.
double BusBandwidthFactor(uint32_t world);

// Runs warmup + iters repetitions of line_up() then op(), timing each op().
// False as soon as either returns false.
bool TimeRepetitions(int warmup, int iters, const std::function<bool()>& line_up,
                     const std::function<bool()>& op, std::vector<double>* times);

// One size's result line, as every benchmark prints it: system, workers,
// rank, bytes, count, dtype, reps, times_s, avg_s, median_s, min_s, max_s,
// goodput_gbps (bits, from the median), algbw_gbs and busbw_gbs (GB/s, 1e9
// bytes, from the average time, as nccl-tests), max_abs_error, error_bound,
// within_bound, wrong (elements out of bound, summed over the ranks:
// `wrong_total`), result_digest.
nlohmann::json SizeResultJson(const std::string& system, uint32_t workers, uint32_t rank,
                              uint64_t bytes, const std::string& dtype,
                              const std::vector<double>& times, const Verification& v,
                              const std::string& digest, uint64_t wrong_total);

// The table, on stderr: the header, one row per result line, and the
// footer (average busbw, total #wrong).
void PrintTableHeader(const std::string& system, uint32_t workers, const std::string& dtype);
void PrintTableRow(const nlohmann::json& line);
void PrintTableFooter(const std::vector<nlohmann::json>& lines);
// Reports one size: its table row (and after the `last`, the footer) when
// `table`, then its JSON line on stdout, so that the last line a run prints
// is a result. Appends `line` to `lines`.
void ReportSize(nlohmann::json line, bool table, bool last, std::vector<nlohmann::json>* lines);

}  // namespace switchml::bench
