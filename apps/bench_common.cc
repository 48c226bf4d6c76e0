#include "bench_common.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include "quantize/quantize.h"

extern char** environ;

namespace switchml::bench {
namespace {

uint64_t SplitMix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

uint64_t Hash(uint64_t seed, uint32_t rank, uint64_t i) {
  return SplitMix(SplitMix(seed ^ (uint64_t(rank) << 48)) ^ i);
}

float FloatValue(uint64_t seed, uint32_t rank, uint64_t i, uint32_t block) {
  // Magnitudes 2^-4 .. 2^3, changing from block to block (exact scalings).
  static constexpr double kScale[8] = {0x1p-4, 0x1p-3, 0x1p-2, 0x1p-1, 1, 2, 4, 8};
  const double u = double(Hash(seed, rank, i) >> 40) * 0x1.0p-24 * 2.0 - 1.0;  // [-1, 1)
  return float(u * kScale[(i / block) % 8]);
}

}  // namespace

uint64_t ParseSize(const std::string& text) {
  char* end = nullptr;
  const double value = std::strtod(text.c_str(), &end);
  if (end == text.c_str() || !(value > 0)) return 0;
  const std::string unit(end);
  double scale = 0;
  if (unit.empty() || unit == "B") scale = 1;
  if (unit == "KiB" || unit == "K") scale = 1 << 10;
  if (unit == "MiB" || unit == "M") scale = 1 << 20;
  if (unit == "GiB" || unit == "G") scale = double(1 << 30);
  return uint64_t(value * scale);
}

void FillFloat(float* x, size_t count, uint64_t seed, uint32_t rank, uint32_t block) {
  for (size_t i = 0; i < count; ++i) x[i] = FloatValue(seed, rank, i, block);
}

void FillInt32(int32_t* x, size_t count, uint64_t seed, uint32_t rank) {
  for (size_t i = 0; i < count; ++i) x[i] = int32_t(uint32_t(Hash(seed, rank, i)));
}

Verification VerifyFloat(const float* out, size_t count, uint64_t seed, uint32_t world,
                         uint32_t block, bool quantized) {
  Verification v;
  std::vector<float> values(size_t(world) * block);
  std::vector<const float*> rows(world);
  for (size_t begin = 0; begin < count; begin += block) {
    const size_t len = std::min<size_t>(block, count - begin);
    for (uint32_t r = 0; r < world; ++r) {
      float* row = &values[size_t(r) * block];
      for (size_t j = 0; j < len; ++j) row[j] = FloatValue(seed, r, begin + j, block);
      rows[r] = row;
    }
    CheckBlock(rows, out + begin, len,
               [&](size_t, double error, double magnitude, double quantization) {
                 // A ring adds in float: n-1 roundings of partial sums, each
                 // at most 2^-24 of the running magnitude.
                 const double bound = quantized ? quantization : magnitude * 0x1p-24 * world;
                 v.max_abs_error = std::max(v.max_abs_error, std::isnan(error) ? INFINITY : error);
                 v.error_bound = std::max(v.error_bound, bound);
                 if (!(error <= bound)) {
                   v.within_bound = false;
                   ++v.wrong;
                 }
               });
  }
  return v;
}

Verification VerifyInt32(const int32_t* out, size_t count, uint64_t seed, uint32_t world) {
  Verification v;
  for (size_t i = 0; i < count; ++i) {
    uint32_t sum = 0;
    for (uint32_t r = 0; r < world; ++r) sum += uint32_t(Hash(seed, r, i));
    if (int32_t(sum) != out[i]) {
      v.within_bound = false;
      ++v.wrong;
      v.max_abs_error = std::max(v.max_abs_error, std::fabs(double(int32_t(sum)) - out[i]));
    }
  }
  return v;
}

std::string Digest(const void* data, size_t bytes) {
  // FNV-1a over 64-bit words (then the tail bytes): fast, and equal buffers
  // give equal digests on any machine of the same byte order.
  uint64_t h = 0xcbf29ce484222325ull;
  const auto* p = static_cast<const uint8_t*>(data);
  size_t i = 0;
  for (; i + 8 <= bytes; i += 8) {
    uint64_t word;
    std::memcpy(&word, p + i, 8);
    h = (h ^ word) * 0x100000001b3ull;
  }
  for (; i < bytes; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", (unsigned long long)h);
  return buf;
}

Timing Summarize(std::vector<double> s) {
  Timing t;
  if (s.empty()) return t;
  std::sort(s.begin(), s.end());
  t.min_s = s.front();
  t.max_s = s.back();
  t.median_s = s.size() % 2 ? s[s.size() / 2] : (s[s.size() / 2 - 1] + s[s.size() / 2]) / 2;
  double sum = 0;
  for (double x : s) sum += x;
  t.mean_s = sum / double(s.size());
  return t;
}

pid_t Spawn(const std::vector<std::string>& argv, int* stdout_fd, bool with_stderr) {
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  int fds[2] = {-1, -1};
  if (stdout_fd != nullptr) {
    if (pipe2(fds, O_CLOEXEC) != 0) return -1;
    posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
    if (with_stderr) posix_spawn_file_actions_adddup2(&actions, fds[1], STDERR_FILENO);
  }
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (stdout_fd != nullptr) {
    close(fds[1]);
    *stdout_fd = fds[0];
  }
  return rc == 0 ? pid : -1;
}

int WaitFor(pid_t pid) {
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return -1;
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

std::string ReadAll(int fd) {
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = read(fd, buf, sizeof(buf))) > 0 || (n < 0 && errno == EINTR)) {
    if (n > 0) out.append(buf, size_t(n));
  }
  close(fd);
  return out;
}

std::string FindInPath(const std::string& name) {
  const char* path = std::getenv("PATH");
  std::istringstream dirs(path != nullptr ? path : "/usr/bin:/bin");
  for (std::string dir; std::getline(dirs, dir, ':');) {
    const std::string candidate = (dir.empty() ? "." : dir) + "/" + name;
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return "";
}

std::string SelfDirectory() {
  char path[4096];
  const ssize_t n = readlink("/proc/self/exe", path, sizeof(path) - 1);
  if (n <= 0) return ".";
  path[n] = '\0';
  std::string p(path);
  return p.substr(0, p.rfind('/'));
}

}  // namespace switchml::bench

#include <nlohmann/json.hpp>

namespace switchml::bench {

bool ParseResultLines(const std::string& output, const std::string& who,
                      std::vector<nlohmann::json>* lines) {
  std::istringstream in(output);
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] != '{') continue;
    try {
      lines->push_back(nlohmann::json::parse(line));
    } catch (const std::exception&) {
      std::fprintf(stderr, "%s printed a malformed result: %s\n", who.c_str(), line.c_str());
      return false;
    }
  }
  return true;
}

int CollectLocalWorkers(uint32_t world,
                        const std::function<std::vector<std::string>(uint32_t)>& argv_of,
                        std::vector<nlohmann::json>* results) {
  // A reader that goes away must not kill us before we stop our children.
  signal(SIGPIPE, SIG_IGN);
  results->clear();
  std::vector<pid_t> pids(world);
  std::vector<int> fds(world);
  for (uint32_t r = 0; r < world; ++r) {
    pids[r] = Spawn(argv_of(r), &fds[r]);
    if (pids[r] < 0) {
      std::fprintf(stderr, "cannot start worker %u\n", r);
      return 2;
    }
  }
  std::vector<std::string> outputs(world);
  int failed = 0;
  for (uint32_t r = 0; r < world; ++r) {
    outputs[r] = ReadAll(fds[r]);
    if (const int code = WaitFor(pids[r]); code != 0) {
      std::fprintf(stderr, "worker %u exited with status %d\n", r, code);
      failed = 1;
    }
  }
  // Every rank's result lines, in order.
  std::vector<std::vector<nlohmann::json>> lines(world);
  for (uint32_t r = 0; r < world; ++r) {
    if (!ParseResultLines(outputs[r], "worker " + std::to_string(r), &lines[r])) return 1;
    if (lines[r].empty() || lines[r].size() != lines[0].size()) {
      std::fprintf(stderr, "worker %u printed %zu results, worker 0 %zu\n", r, lines[r].size(),
                   lines[0].size());
      return 1;
    }
  }
  bool passed = !failed;
  for (size_t k = 0; k < lines[0].size(); ++k) {
    bool identical = true;
    for (uint32_t r = 0; r < world; ++r) {
      identical = identical &&
                  lines[r][k].value("result_digest", "") == lines[0][k].value("result_digest", "");
      passed = passed && lines[r][k].value("within_bound", false);
    }
    passed = passed && identical;
    nlohmann::json j = lines[0][k];
    j["ranks_identical"] = identical;
    results->push_back(std::move(j));
  }
  return passed ? 0 : 1;
}

void PrintLocalSummary(uint32_t world, const std::vector<nlohmann::json>& results, bool passed) {
  if (results.empty()) return;
  const nlohmann::json& first = results.front();
  const char* verdict = passed ? "PASS" : "FAIL";
  bool identical = true;
  for (const auto& j : results) identical = identical && j.value("ranks_identical", false);
  if (results.size() == 1) {
    std::fprintf(stderr,
                 "%s: %s: %u workers all-reduced %.1f MiB of %s: median %.4f s (min %.4f, max "
                 "%.4f), %.2f Gbit/s goodput; max |error| %.3g, bound %.3g; ranks bitwise "
                 "identical: %s\n",
                 verdict, first.value("system", "?").c_str(), world,
                 first.value("bytes", 0.0) / (1 << 20), first.value("dtype", "?").c_str(),
                 first.value("median_s", 0.0), first.value("min_s", 0.0), first.value("max_s", 0.0),
                 first.value("goodput_gbps", 0.0), first.value("max_abs_error", 0.0),
                 first.value("error_bound", 0.0), identical ? "yes" : "no");
    return;
  }
  std::fprintf(stderr,
               "%s: %s: %u workers all-reduced %zu sizes of %s, %llu to %llu bytes; ranks bitwise "
               "identical: %s\n",
               verdict, first.value("system", "?").c_str(), world, results.size(),
               first.value("dtype", "?").c_str(), first.value("bytes", 0ull),
               results.back().value("bytes", 0ull), identical ? "yes" : "no");
}

int RunLocalWorkers(uint32_t world,
                    const std::function<std::vector<std::string>(uint32_t)>& argv_of) {
  std::vector<nlohmann::json> results;
  const int rc = CollectLocalWorkers(world, argv_of, &results);
  PrintLocalSummary(world, results, rc == 0);
  for (const auto& j : results) std::printf("%s\n", j.dump().c_str());
  std::fflush(stdout);
  return rc;
}

}  // namespace switchml::bench
