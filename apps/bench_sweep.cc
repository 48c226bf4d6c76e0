#include "bench_sweep.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>

namespace switchml::bench {
namespace {

constexpr uint64_t kElementBytes = 4;  // float32 and int32
constexpr size_t kMaxSizes = 1000;

const char* TypeName(const std::string& dtype) { return dtype == "float32" ? "float" : "int32"; }

}  // namespace

void AddSweepFlags(CLI::App& app, SweepFlags& f, const std::function<void(CLI::Option*)>& added) {
  CLI::Option* size = app.add_option("--size", f.size, "tensor size per worker (B, KiB, MiB, GiB)");
  CLI::Option* min = app.add_option("-b,--minbytes", f.min_bytes,
                                    "sweep: smallest size (default: --size); with -e, one row per "
                                    "size from -b to -e, each -f times the last");
  CLI::Option* max =
      app.add_option("-e,--maxbytes", f.max_bytes, "sweep: largest size (default: --size)");
  size->excludes(min)->excludes(max);
  added(size);
  added(min);
  added(max);
  added(app.add_option("-f,--stepfactor", f.step_factor, "sweep: multiply the size by this")
            ->check(CLI::Range(1.0, 1024.0)));
  added(app.add_option("-n,--iters,--reps", f.iters, "timed repetitions per size")
            ->check(CLI::Range(1, 100000)));
  added(
      app.add_option("-w,--warmup_iters,--warmup", f.warmup, "untimed repetitions first, per size")
          ->check(CLI::Range(0, 1000)));
}

std::string ResolveSweep(const SweepFlags& f, Sweep* sweep) {
  sweep->iters = f.iters;
  sweep->warmup = f.warmup;
  sweep->single = f.min_bytes.empty() && f.max_bytes.empty();
  sweep->sizes.clear();
  struct Named {
    const char* flag;
    const std::string& text;
    uint64_t bytes = 0;
  };
  Named min{f.min_bytes.empty() ? "--size" : "-b/--minbytes",
            f.min_bytes.empty() ? f.size : f.min_bytes};
  Named max{f.max_bytes.empty() ? "--size" : "-e/--maxbytes",
            f.max_bytes.empty() ? f.size : f.max_bytes};
  for (Named* n : {&min, &max}) {
    n->bytes = ParseSize(n->text) / kElementBytes * kElementBytes;
    if (n->bytes == 0) {
      return std::string(n->flag) + "=" + n->text +
             " is not a size of at least 4 bytes (try 64MiB)";
    }
  }
  if (min.bytes > max.bytes) {
    return std::string(min.flag) + "=" + min.text + " is larger than " + max.flag + "=" + max.text +
           ": give the smaller size first";
  }
  if (min.bytes < max.bytes && !(f.step_factor > 1)) {
    char factor[32];
    std::snprintf(factor, sizeof(factor), "%g", f.step_factor);
    return std::string("-f/--stepfactor=") + factor +
           " does not grow the size: give a factor above 1 (2 doubles it)";
  }
  for (uint64_t s = min.bytes; s <= max.bytes;) {
    sweep->sizes.push_back(s);
    if (sweep->sizes.size() > kMaxSizes) {
      return "-b/-e/-f give more than " + std::to_string(kMaxSizes) +
             " sizes: use a larger -f/--stepfactor";
    }
    if (s == max.bytes) break;
    const double next = std::floor(double(s) * f.step_factor / kElementBytes) * kElementBytes;
    s = std::max<uint64_t>(uint64_t(std::min(next, 1e19)), s + kElementBytes);
  }
  return "";
}

double BusBandwidthFactor(uint32_t world) {
  return world > 1 ? 2.0 * double(world - 1) / double(world) : 0.0;
}

bool TimeRepetitions(int warmup, int iters, const std::function<bool()>& line_up,
                     const std::function<bool()>& op, std::vector<double>* times) {
  times->clear();
  for (int rep = -warmup; rep < iters; ++rep) {
    // Line the ranks up, so each repetition times the all-reduce alone.
    if (!line_up()) return false;
    const auto start = std::chrono::steady_clock::now();
    if (!op()) return false;
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (rep >= 0) times->push_back(seconds);
  }
  return true;
}

nlohmann::json SizeResultJson(const std::string& system, uint32_t workers, uint32_t rank,
                              uint64_t bytes, const std::string& dtype,
                              const std::vector<double>& times, const Verification& v,
                              const std::string& digest, uint64_t wrong_total) {
  const Timing t = Summarize(times);
  const double algbw = t.mean_s > 0 ? double(bytes) / t.mean_s / 1e9 : 0;
  return {
      {"system", system},
      {"workers", workers},
      {"rank", rank},
      {"bytes", bytes},
      {"count", bytes / kElementBytes},
      {"dtype", dtype},
      {"reps", times.size()},
      {"times_s", times},
      {"avg_s", t.mean_s},
      {"median_s", t.median_s},
      {"min_s", t.min_s},
      {"max_s", t.max_s},
      {"goodput_gbps", t.median_s > 0 ? double(bytes) * 8 / t.median_s / 1e9 : 0.0},
      {"algbw_gbs", algbw},
      {"busbw_gbs", algbw * BusBandwidthFactor(workers)},
      {"max_abs_error", v.max_abs_error},
      {"error_bound", v.error_bound},
      {"within_bound", v.within_bound},
      {"wrong", wrong_total},
      {"result_digest", digest},
  };
}

void PrintTableHeader(const std::string& system, uint32_t workers, const std::string& dtype) {
  std::fprintf(stderr,
               "# %s all-reduce, %u ranks, %s, out-of-place; time: the average of -n "
               "iterations; busbw = algbw x 2(n-1)/n\n#\n"
               "# %12s %13s %9s %7s %12s %8s %8s %7s\n"
               "# %12s %13s %9s %7s %12s %8s %8s %7s\n",
               system.c_str(), workers, dtype.c_str(), "size", "count", "type", "redop", "time",
               "algbw", "busbw", "#wrong", "(B)", "(elements)", "", "", "(us)", "(GB/s)", "(GB/s)",
               "");
}

void PrintTableRow(const nlohmann::json& j) {
  std::fprintf(stderr, "  %12llu %13llu %9s %7s %12.1f %8.3f %8.3f %7llu\n", j.value("bytes", 0ull),
               j.value("count", 0ull), TypeName(j.value("dtype", std::string())), "sum",
               j.value("avg_s", 0.0) * 1e6, j.value("algbw_gbs", 0.0), j.value("busbw_gbs", 0.0),
               j.value("wrong", 0ull));
}

void PrintTableFooter(const std::vector<nlohmann::json>& lines) {
  double busbw = 0;
  unsigned long long wrong = 0;
  for (const auto& j : lines) {
    busbw += j.value("busbw_gbs", 0.0);
    wrong += j.value("wrong", 0ull);
  }
  std::fprintf(stderr, "# Out of bounds values : %llu %s\n# Avg bus bandwidth    : %.3f GB/s\n#\n",
               wrong, wrong == 0 ? "OK" : "FAILED",
               lines.empty() ? 0.0 : busbw / double(lines.size()));
}

void ReportSize(nlohmann::json line, bool table, bool last, std::vector<nlohmann::json>* lines) {
  lines->push_back(std::move(line));
  if (table) {
    PrintTableRow(lines->back());
    if (last) PrintTableFooter(*lines);
  }
  std::fflush(stderr);
  std::printf("%s\n", lines->back().dump().c_str());
  std::fflush(stdout);
}

}  // namespace switchml::bench
