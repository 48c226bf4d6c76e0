#include "transport/dpdk/eal.h"

#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_log.h>
#include <sched.h>
#include <spdlog/spdlog.h>
#include <stdio.h>
#include <unistd.h>

#include <mutex>
#include <sstream>
#include <vector>

namespace switchml::transport::dpdk {
namespace {

std::mutex log_mu;
std::string last_line;  // guarded by log_mu

// The EAL's log stream: each line to spdlog, the last one kept.
ssize_t WriteLog(void*, const char* data, size_t size) {
  std::string line(data, size);
  while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.pop_back();
  if (line.empty()) return ssize_t(size);
  const uint32_t level = rte_log_cur_msg_loglevel();
  if (level <= RTE_LOG_ERR) {
    spdlog::warn("dpdk: {}", line);
  } else {
    spdlog::debug("dpdk: {}", line);
  }
  std::lock_guard lock(log_mu);
  last_line = line;
  return ssize_t(size);
}

std::string Hint(int error, const std::string& said) {
  if (said.find("hugepage") != std::string::npos) error = ENOMEM;
  switch (error) {
    case EACCES:
    case EPERM:
      return "DPDK needs root (or CAP_SYS_ADMIN, CAP_NET_RAW and CAP_IPC_LOCK)";
    case ENOMEM:
      return "no hugepages for the EAL: reserve some (e.g. `echo 512 > "
             "/proc/sys/vm/nr_hugepages`, hugetlbfs mounted) or pass --no-huge -m 512 in the EAL "
             "arguments";
    case EALREADY:
      return "this process started the EAL already";
    default:
      return "check the EAL arguments (DPDK's documentation, 'EAL parameters'), the "
             "hugepages (or --no-huge) and the device";
  }
}

}  // namespace

std::string LastEalLogLine() {
  std::lock_guard lock(log_mu);
  return last_line;
}

Status StartEal(const std::string& args) {
  static std::mutex mu;
  static bool started = false;
  static std::string used;
  static Status result;
  std::lock_guard lock(mu);
  if (started) {
    if (args == used) return result;
    return Status(StatusCode::kFailedPrecondition,
                  "dpdk: this process started DPDK's EAL with \"" + used +
                      "\"; every dpdk transport in it must pass the same EAL arguments, not \"" +
                      args + "\"");
  }
  started = true;
  used = args;
  static cookie_io_functions_t functions{nullptr, WriteLog, nullptr, nullptr};
  if (FILE* stream = fopencookie(nullptr, "w", functions)) {
    setvbuf(stream, nullptr, _IOLBF, 0);
    rte_openlog_stream(stream);
  }
  std::vector<std::string> words{"switchml"};
  std::istringstream in(args);
  for (std::string w; in >> w;) words.push_back(w);
  std::vector<char*> argv;
  for (std::string& w : words) argv.push_back(w.data());
  argv.push_back(nullptr);
  // The EAL pins the calling thread to its first lcore; the threads this
  // process starts later (data and I/O threads, gRPC's) inherit the calling
  // thread's CPUs, so they get them back: they are not EAL lcores.
  cpu_set_t cpus;
  const bool have_cpus = sched_getaffinity(0, sizeof(cpus), &cpus) == 0;
  const int started_eal = rte_eal_init(int(words.size()), argv.data());
  if (have_cpus) sched_setaffinity(0, sizeof(cpus), &cpus);
  if (started_eal < 0) {
    const int error = rte_errno;
    const std::string said = LastEalLogLine();
    result = Status(StatusCode::kFailedPrecondition,
                    "dpdk: the EAL did not start with \"" + args +
                        "\": " + (said.empty() ? std::string(rte_strerror(error)) : said) + " (" +
                        Hint(error, said) + ")");
  }
  return result;
}

}  // namespace switchml::transport::dpdk
