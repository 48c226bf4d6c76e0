// The networked system as users run it: a switchml-switch process and
// switchml-bench worker processes on loopback, with kill -9 of a worker and
// of the switch.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "bench_common.h"

namespace switchml {
namespace {

using bench::Spawn;
using namespace std::chrono_literals;

const std::string kBin = SWITCHML_BIN_DIR;

// A child process whose combined output is collected by a reader thread.
class Process {
 public:
  explicit Process(const std::vector<std::string>& argv) {
    int fd = -1;
    pid_ = Spawn(argv, &fd, /*with_stderr=*/true);
    reader_ = std::thread([this, fd] { output_ = bench::ReadAll(fd); });
  }
  ~Process() {
    if (pid_ > 0 && code_ < 0) {
      kill(pid_, SIGKILL);
      Wait();
    }
  }
  void Kill(int signal) { kill(pid_, signal); }
  // Exit status (128+signal when killed); fails the test after 60 s.
  int Wait() {
    if (code_ >= 0) return code_;
    for (int i = 0; i < 6000; ++i) {
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        reader_.join();
        return code_;
      }
      std::this_thread::sleep_for(10ms);
    }
    ADD_FAILURE() << "process did not finish within 60 s";
    kill(pid_, SIGKILL);
    return Wait();
  }
  const std::string& output() {
    Wait();
    return output_;
  }
  nlohmann::json Result() {
    const std::string& out = output();
    const size_t start = out.rfind("\n{") == std::string::npos ? out.find('{') : out.rfind("\n{");
    try {
      return nlohmann::json::parse(out.substr(start));
    } catch (const std::exception&) {
      return {};
    }
  }

 private:
  pid_t pid_ = -1;
  int code_ = -1;
  std::thread reader_;
  std::string output_;
};

class Switch {
 public:
  Switch()
      : port_file_("/tmp/switchml-test-" + std::to_string(getpid()) + "-" +
                   std::to_string(counter_++)) {
    Start();
  }
  void Start() {
    unlink(port_file_.c_str());
    process_ = std::make_unique<Process>(std::vector<std::string>{
        kBin + "/switchml-switch", "--bind", "127.0.0.1", "--control-port", "0", "--data-port", "0",
        "--port-file", port_file_, "--pool-slots", "256", "--max-elements-per-packet", "8192"});
    for (int i = 0; i < 1000 && control_port_ == 0; ++i) {
      std::ifstream(port_file_) >> control_port_;
      if (control_port_ == 0) std::this_thread::sleep_for(5ms);
    }
    unlink(port_file_.c_str());
    ASSERT_NE(control_port_, 0) << "switch did not start";
  }
  Process& process() { return *process_; }
  std::string address() const { return "127.0.0.1:" + std::to_string(control_port_); }
  void Restart() {
    control_port_ = 0;
    Start();
  }
  std::string Stats() {
    Process ctl({kBin + "/switchml-ctl", "stats", "--switch", address(), "--format", "prometheus"});
    EXPECT_EQ(ctl.Wait(), 0) << ctl.output();
    return ctl.output();
  }
  ~Switch() {
    if (process_) {
      process_->Kill(SIGTERM);
      EXPECT_EQ(process_->Wait(), 0) << "switch did not stop cleanly:\n" << process_->output();
    }
  }

 private:
  static inline int counter_ = 0;
  std::string port_file_;
  int control_port_ = 0;
  std::unique_ptr<Process> process_;
};

std::unique_ptr<Process> Worker(const Switch& sw, const std::string& job, int rank, int world,
                                const std::vector<std::string>& extra) {
  std::vector<std::string> argv = {
      kBin + "/switchml-bench", "--switch", sw.address(),          "--job",        job, "--rank",
      std::to_string(rank),     "--world",  std::to_string(world), "--pool-slots", "32"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  return std::make_unique<Process>(argv);
}

struct Case {
  int world;
  const char* dtype;
};
class MultiProcess : public ::testing::TestWithParam<Case> {};

TEST_P(MultiProcess, WorkersAgreeAndVerify) {
  Switch sw;
  std::vector<std::unique_ptr<Process>> workers;
  for (int r = 0; r < GetParam().world; ++r) {
    workers.push_back(Worker(sw, "job", r, GetParam().world,
                             {"--size", "1MiB", "--reps", "2", "--dtype", GetParam().dtype,
                              "--elements-per-packet", "1024"}));
  }
  std::string digest;
  for (auto& w : workers) {
    ASSERT_EQ(w->Wait(), 0) << w->output();
    const auto j = w->Result();
    EXPECT_TRUE(j.value("within_bound", false)) << w->output();
    if (digest.empty()) digest = j.value("result_digest", "");
    EXPECT_EQ(j.value("result_digest", ""), digest);
  }
}

INSTANTIATE_TEST_SUITE_P(Loopback, MultiProcess,
                         ::testing::Values(Case{2, "int32"}, Case{2, "float32"}, Case{4, "int32"},
                                           Case{4, "float32"}, Case{8, "int32"},
                                           Case{8, "float32"}),
                         [](const auto& info) {
                           return "n" + std::to_string(info.param.world) + "_" + info.param.dtype;
                         });

TEST(MultiProcessJobs, TwoConcurrentJobsWithDifferentWorldSizes) {
  Switch sw;
  std::vector<std::unique_ptr<Process>> workers;
  for (int r = 0; r < 2; ++r)
    workers.push_back(Worker(sw, "a", r, 2, {"--size", "2MiB", "--reps", "3"}));
  for (int r = 0; r < 3; ++r)
    workers.push_back(Worker(sw, "b", r, 3, {"--size", "2MiB", "--reps", "3"}));
  for (auto& w : workers) EXPECT_EQ(w->Wait(), 0) << w->output();
}

TEST(MultiProcessFailures, KilledWorkerFailsTheOthersNamingItThenANewJobPasses) {
  Switch sw;
  std::vector<std::unique_ptr<Process>> workers;
  for (int r = 0; r < 3; ++r) {
    workers.push_back(Worker(
        sw, "job", r, 3, {"--size", "4MiB", "--reps", "100000", "--failure-timeout-ms", "5000"}));
  }
  std::this_thread::sleep_for(1500ms);  // well into the repetitions
  workers[1]->Kill(SIGKILL);
  EXPECT_EQ(workers[1]->Wait(), 128 + SIGKILL);
  for (int r : {0, 2}) {
    EXPECT_EQ(workers[r]->Wait(), 1);
    EXPECT_NE(workers[r]->output().find("rank 1 "), std::string::npos) << workers[r]->output();
  }
  // The switch freed the job.
  EXPECT_NE(sw.Stats().find("switchml_pool_free_slots 256\n"), std::string::npos) << sw.Stats();
  std::vector<std::unique_ptr<Process>> again;
  for (int r = 0; r < 2; ++r)
    again.push_back(Worker(sw, "job", r, 2, {"--size", "1MiB", "--reps", "1"}));
  for (auto& w : again) EXPECT_EQ(w->Wait(), 0) << w->output();
}

TEST(MultiProcessFailures, KilledSwitchFailsWorkersCleanlyAndARestartedOneServes) {
  auto sw = std::make_unique<Switch>();
  std::vector<std::unique_ptr<Process>> workers;
  for (int r = 0; r < 2; ++r) {
    workers.push_back(Worker(
        *sw, "job", r, 2, {"--size", "4MiB", "--reps", "100000", "--failure-timeout-ms", "5000"}));
  }
  std::this_thread::sleep_for(1500ms);
  sw->process().Kill(SIGKILL);
  EXPECT_EQ(sw->process().Wait(), 128 + SIGKILL);
  for (auto& w : workers) {
    EXPECT_EQ(w->Wait(), 1);
    EXPECT_NE(w->output().find("switch"), std::string::npos) << w->output();
  }
  sw->Restart();
  std::vector<std::unique_ptr<Process>> again;
  for (int r = 0; r < 2; ++r)
    again.push_back(Worker(*sw, "job", r, 2, {"--size", "1MiB", "--reps", "1"}));
  for (auto& w : again) EXPECT_EQ(w->Wait(), 0) << w->output();
}

// One job over two switch processes (--switch A,B): the same bits as
// through one switch; kill -9 of one fails every rank, naming it.
TEST(MultiProcessSwitchHosts, TwoSwitchesGiveOneSwitchsResultsAndAKilledOneIsNamed) {
  Switch one, a, b;
  const std::string both = a.address() + "," + b.address();
  auto run = [](const std::string& address, const std::string& job) {
    std::vector<std::unique_ptr<Process>> workers;
    for (int r = 0; r < 3; ++r) {
      workers.push_back(std::make_unique<Process>(std::vector<std::string>{
          kBin + "/switchml-bench", "--switch", address, "--job", job, "--rank", std::to_string(r),
          "--world", "3", "--threads", "2", "--size", "1MiB", "--reps", "2",
          "--elements-per-packet", "1024"}));
    }
    std::vector<std::string> digests;
    for (auto& w : workers) {
      EXPECT_EQ(w->Wait(), 0) << w->output();
      EXPECT_TRUE(w->Result().value("within_bound", false)) << w->output();
      digests.push_back(w->Result().value("result_digest", "?"));
    }
    return digests;
  };
  const auto flat = run(one.address(), "flat");
  const auto split = run(both, "split");
  for (size_t r = 0; r < 3; ++r) {
    EXPECT_EQ(flat[r], flat[0]);
    EXPECT_EQ(split[r], flat[0]) << "rank " << r;
  }

  std::vector<std::unique_ptr<Process>> workers;
  for (int r = 0; r < 2; ++r) {
    workers.push_back(std::make_unique<Process>(std::vector<std::string>{
        kBin + "/switchml-bench", "--switch", both, "--job", "long", "--rank", std::to_string(r),
        "--world", "2", "--threads", "2", "--size", "4MiB", "--reps", "100000",
        "--failure-timeout-ms", "600000"}));
  }
  std::this_thread::sleep_for(1500ms);  // well into the repetitions
  b.process().Kill(SIGKILL);
  EXPECT_EQ(b.process().Wait(), 128 + SIGKILL);
  for (auto& w : workers) {
    EXPECT_EQ(w->Wait(), 1);
    EXPECT_NE(w->output().find("at switch " + b.address()), std::string::npos) << w->output();
  }
  b.Restart();  // for its destructor's clean stop
}

// Bad command lines: each a one-line error and a
// non-zero exit, never a crash, a silent default or a daemon that half works.
int NonEmptyLines(const std::string& text) {
  int lines = 0;
  size_t start = 0;
  while (start < text.size()) {
    const size_t end = std::min(text.find('\n', start), text.size());
    if (end > start) ++lines;
    start = end + 1;
  }
  return lines;
}

TEST(CommandLine, SecondSwitchOnABusyControlPortFailsInOneLine) {
  Switch sw;
  const std::string port = sw.address().substr(sw.address().rfind(':') + 1);
  Process second({kBin + "/switchml-switch", "--bind", "127.0.0.1", "--control-port", port,
                  "--data-port", "0"});
  EXPECT_EQ(second.Wait(), 2);
  EXPECT_EQ(NonEmptyLines(second.output()), 1) << second.output();
  EXPECT_NE(second.output().find(port), std::string::npos) << second.output();
  EXPECT_NE(second.output().find("--control-port"), std::string::npos) << second.output();
}

TEST(CommandLine, SwitchRejectsBadSettingsAtStart) {
  const std::vector<std::vector<std::string>> bad = {
      {"--log-level", "bogus"},
      {"--port-file", "/nonexistent-switchml-dir/port"},
      {"--max-elements-per-packet", "100"},
  };
  for (const auto& args : bad) {
    std::vector<std::string> argv = {kBin + "/switchml-switch",
                                     "--bind",
                                     "127.0.0.1",
                                     "--control-port",
                                     "0",
                                     "--data-port",
                                     "0"};
    argv.insert(argv.end(), args.begin(), args.end());
    Process p(argv);
    EXPECT_NE(p.Wait(), 0) << args[0] << " " << args[1];
    EXPECT_GE(NonEmptyLines(p.output()), 1);
    EXPECT_NE(p.output().find(args[1] == "100" ? "power of two" : args[1]), std::string::npos)
        << p.output();
  }
}

TEST(CommandLine, SwitchAcceptsLogLevelsInAnyCase) {
  for (const std::string level : {"INFO", "warning", "Warn", "debug", "off"}) {
    const std::string port_file = "/tmp/switchml-test-level-" + std::to_string(getpid());
    unlink(port_file.c_str());
    Process p({kBin + "/switchml-switch", "--bind", "127.0.0.1", "--control-port", "0",
               "--data-port", "0", "--port-file", port_file, "--log-level", level});
    int port = 0;
    for (int i = 0; i < 1000 && port == 0; ++i) {
      std::ifstream(port_file) >> port;
      if (port == 0) std::this_thread::sleep_for(5ms);
    }
    unlink(port_file.c_str());
    EXPECT_NE(port, 0) << level;
    p.Kill(SIGTERM);
    EXPECT_EQ(p.Wait(), 0) << level << ": " << p.output();
  }
}

TEST(CommandLine, BenchRefusesASizeThatCannotFitOnce) {
  Process p({kBin + "/switchml-bench", "--local", "2", "--size", "100000GiB"});
  EXPECT_EQ(p.Wait(), 2);
  EXPECT_EQ(NonEmptyLines(p.output()), 1) << p.output();
  EXPECT_NE(p.output().find("--size=100000GiB"), std::string::npos) << p.output();
}

TEST(CommandLine, BenchNeedsARankWithMoreThanOneWorker) {
  Process p({kBin + "/switchml-bench", "--world", "2", "--switch", "127.0.0.1:1"});
  EXPECT_EQ(p.Wait(), 2);
  EXPECT_NE(p.output().find("--rank"), std::string::npos) << p.output();
}

// An nccl-tests-style sweep beside Gloo's ring: a table and a JSON line per
// size for each system, exact int32 sums identical across the two systems.
TEST(CommandLine, BenchSweepsSizesBesideAPeer) {
  if (access((kBin + "/switchml-gloo-bench").c_str(), X_OK) != 0) GTEST_SKIP() << "no Gloo";
  Process p({kBin + "/switchml-bench", "--local", "3", "-b", "4KiB", "-e", "100KiB", "-f", "4",
             "-n", "2", "-w", "0", "--dtype", "int32", "--peer", "gloo"});
  ASSERT_EQ(p.Wait(), 0) << p.output();
  std::vector<nlohmann::json> lines;
  std::istringstream out(p.output());
  for (std::string line; std::getline(out, line);) {
    if (!line.empty() && line[0] == '{') lines.push_back(nlohmann::json::parse(line));
  }
  ASSERT_EQ(lines.size(), 6u) << p.output();
  const uint64_t sizes[] = {4096, 16384, 65536};
  for (size_t i = 0; i < 3; ++i) {
    const auto &ours = lines[i], &theirs = lines[3 + i];
    EXPECT_EQ(ours.value("system", ""), "switchml");
    EXPECT_EQ(theirs.value("system", ""), "gloo");
    for (const auto* j : {&ours, &theirs}) {
      EXPECT_EQ(j->value("bytes", 0ull), sizes[i]);
      EXPECT_EQ(j->value("count", 0ull), sizes[i] / 4);
      EXPECT_EQ(j->value("wrong", 1), 0);
      EXPECT_EQ(j->value("reps", 0), 2);
      EXPECT_TRUE(j->value("ranks_identical", false));
      EXPECT_DOUBLE_EQ(j->value("busbw_gbs", 0.0), j->value("algbw_gbs", 0.0) * 4 / 3);
    }
    EXPECT_EQ(ours.value("result_digest", "a"), theirs.value("result_digest", "b"));
    EXPECT_EQ(ours.value("peer", ""), "gloo");
    EXPECT_DOUBLE_EQ(ours.value("ratio_to_peer", 0.0),
                     ours.value("median_s", 0.0) / theirs.value("median_s", 1.0));
  }
  EXPECT_NE(p.output().find("#wrong"), std::string::npos) << p.output();
  EXPECT_NE(p.output().find("switchml vs gloo"), std::string::npos) << p.output();
}

TEST(CommandLine, BenchPeerNeedsLocal) {
  Process p(
      {kBin + "/switchml-bench", "--world", "1", "--switch", "127.0.0.1:1", "--peer", "gloo"});
  EXPECT_EQ(p.Wait(), 2);
  EXPECT_NE(p.output().find("--peer gloo runs the peer beside a --local run"), std::string::npos)
      << p.output();
}

// Defaults < --config file < SWITCHML_<NAME> variables < explicit flags.
TEST(CommandLine, BenchSettingsTakeFileThenEnvironmentThenFlags) {
  Switch sw;
  const std::string file = "/tmp/switchml-test-config-" + std::to_string(getpid()) + ".toml";
  std::ofstream(file) << "switch_address = \"" << sw.address() << "\"\n"
                      << "rank = 0\nworld_size = 1\npool_slots = 16\nelements_per_packet = 256\n"
                      << "threads = 1\n";
  setenv("SWITCHML_POOL_SLOTS", "24", 1);            // over the file
  setenv("SWITCHML_ELEMENTS_PER_PACKET", "128", 1);  // over the file, under the flag
  Process p({kBin + "/switchml-bench", "--config", file, "--elements-per-packet", "512", "--size",
             "64KiB", "--reps", "1"});
  unsetenv("SWITCHML_POOL_SLOTS");
  unsetenv("SWITCHML_ELEMENTS_PER_PACKET");
  ASSERT_EQ(p.Wait(), 0) << p.output();
  unlink(file.c_str());
  const auto j = p.Result();
  EXPECT_EQ(j.value("pool_slots", 0), 24) << p.output();
  EXPECT_EQ(j.value("elements_per_packet", 0), 512) << p.output();
  EXPECT_EQ(j.value("workers", 0), 1) << p.output();
}

}  // namespace
}  // namespace switchml
