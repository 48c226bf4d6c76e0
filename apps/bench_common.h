// Shared by the benchmark programs (switchml-bench and the Gloo and MPI
// peers) so that they generate the same inputs, verify the same way and
// print the same JSON.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

namespace switchml::bench {

// "64MiB", "512KiB", "1GiB", "4096" -> bytes; 0 when malformed.
uint64_t ParseSize(const std::string& text);

// Deterministic inputs: element i of rank r for a seed, the same in every
// process. Floats vary in magnitude from block to block of `block` elements.
void FillFloat(float* x, size_t count, uint64_t seed, uint32_t rank, uint32_t block);
void FillInt32(int32_t* x, size_t count, uint64_t seed, uint32_t rank);

struct Verification {
  double max_abs_error = 0;  // against the exact sum (double or wrapping int32)
  double error_bound = 0;    // the largest per-element documented bound (0 for int32)
  bool within_bound = true;  // every element within its own bound
  uint64_t wrong = 0;        // elements out of their bound (int32: not exact)
};
// Regenerates every rank's input and checks `out` element by element.
// `block` is the quantization block (elements per packet) for the bound;
// `quantized` false checks against plain float rounding (a ring's sum).
Verification VerifyFloat(const float* out, size_t count, uint64_t seed, uint32_t world,
                         uint32_t block, bool quantized);
Verification VerifyInt32(const int32_t* out, size_t count, uint64_t seed, uint32_t world);

// FNV-1a 64 of the bytes, as 16 hex digits.
std::string Digest(const void* data, size_t bytes);

struct Timing {
  double mean_s = 0, median_s = 0, min_s = 0, max_s = 0;
};
Timing Summarize(std::vector<double> seconds);

// Starts `argv` (argv[0] a path); its stdout (and stderr too, with
// `with_stderr`) goes to a pipe whose read end is returned in *stdout_fd (if
// not null). Returns the pid, or -1.
pid_t Spawn(const std::vector<std::string>& argv, int* stdout_fd, bool with_stderr = false);
// Waits for `pid`; returns its exit status (128+signal when killed).
int WaitFor(pid_t pid);
// Reads everything from `fd` and closes it.
std::string ReadAll(int fd);
// The path of program `name` in $PATH, or "" when none.
std::string FindInPath(const std::string& name);
// The directory holding the running executable.
std::string SelfDirectory();

}  // namespace switchml::bench

#include <functional>
#include <nlohmann/json.hpp>

namespace switchml::bench {

// The JSON objects among `output`'s lines (those starting with '{'), in
// order. False, said on stderr naming `who`, when one does not parse.
bool ParseResultLines(const std::string& output, const std::string& who,
                      std::vector<nlohmann::json>* lines);

// Runs `world` worker processes, worker r started as argv_of(r), and waits
// for all. Each prints one JSON object per line (a result per size) on
// stdout, the same number of them. Collects rank 0's objects, each with
// "ranks_identical" (the result digests of every rank equal) added, and
// returns 0 when every worker succeeded and verified, 1 (or 2 when one
// could not start) otherwise.
int CollectLocalWorkers(uint32_t world,
                        const std::function<std::vector<std::string>(uint32_t)>& argv_of,
                        std::vector<nlohmann::json>* results);
// One line on stderr: PASS or FAIL, what ran, the times (one size) or the
// sizes swept.
void PrintLocalSummary(uint32_t world, const std::vector<nlohmann::json>& results, bool passed);
// CollectLocalWorkers, then the summary on stderr and the results as JSON
// lines on stdout; returns CollectLocalWorkers' status.
int RunLocalWorkers(uint32_t world,
                    const std::function<std::vector<std::string>(uint32_t)>& argv_of);

}  // namespace switchml::bench
