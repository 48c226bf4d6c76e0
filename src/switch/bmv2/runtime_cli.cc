#include "switch/bmv2/runtime_cli.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>

namespace switchml::bmv2 {
namespace {

constexpr std::string_view kPrompt = "RuntimeCmd: ";

std::string Join(const std::vector<std::string>& argv) {
  std::string s;
  for (const auto& a : argv) s += (s.empty() ? "" : " ") + a;
  return s;
}

}  // namespace

bool IsCliError(const std::string& answer) {
  // handle_bad_input() in runtime_CLI.py prints these and carries on.
  for (const char* marker : {"Error:", "Invalid ", "Traceback", "*** Unknown syntax"}) {
    if (answer.find(marker) != std::string::npos) return true;
  }
  return false;
}

StatusOr<std::unique_ptr<RuntimeCli>> RuntimeCli::Start(const std::vector<std::string>& argv,
                                                        std::chrono::milliseconds timeout) {
  if (argv.empty()) return InvalidArgument("the bmv2 runtime CLI command is empty");
  // A CLI that dies must surface as an error from write(), not kill us.
  signal(SIGPIPE, SIG_IGN);
  int to_child[2], from_child[2];
  if (pipe2(to_child, O_CLOEXEC) != 0) return Status(StatusCode::kInternal, "pipe failed");
  if (pipe2(from_child, O_CLOEXEC) != 0) {
    close(to_child[0]);
    close(to_child[1]);
    return Status(StatusCode::kInternal, "pipe failed");
  }
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(to_child[0], 0);
    dup2(from_child[1], 1);
    dup2(from_child[1], 2);
    setenv("PYTHONUNBUFFERED", "1", 1);  // answers must not sit in a buffer
    execvp(args[0], args.data());
    _exit(127);
  }
  close(to_child[0]);
  close(from_child[1]);
  if (pid < 0) {
    close(to_child[1]);
    close(from_child[0]);
    return Status(StatusCode::kInternal, "fork failed: " + std::string(std::strerror(errno)));
  }
  std::unique_ptr<RuntimeCli> cli(
      new RuntimeCli(pid, to_child[1], from_child[0], Join(argv), timeout));
  auto banner = cli->ReadAnswer();
  if (!banner.ok()) return banner.status();
  return cli;
}

RuntimeCli::RuntimeCli(pid_t pid, int in, int out, std::string description,
                       std::chrono::milliseconds timeout)
    : pid_(pid), in_(in), out_(out), description_(std::move(description)), timeout_(timeout) {}

RuntimeCli::~RuntimeCli() {
  close(in_);  // EOF ends the CLI's command loop
  close(out_);
  for (int i = 0; i < 100; ++i) {
    if (waitpid(pid_, nullptr, WNOHANG) == pid_) return;
    usleep(20000);
  }
  kill(pid_, SIGKILL);
  waitpid(pid_, nullptr, 0);
}

StatusOr<std::string> RuntimeCli::ReadAnswer() {
  std::string answer;
  const auto deadline = std::chrono::steady_clock::now() + timeout_;
  while (answer.size() < kPrompt.size() ||
         answer.compare(answer.size() - kPrompt.size(), kPrompt.size(), kPrompt) != 0) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    pollfd fd{out_, POLLIN, 0};
    if (left.count() <= 0 || poll(&fd, 1, int(left.count())) == 0) {
      return Status(StatusCode::kDeadlineExceeded,
                    "the bmv2 runtime CLI (" + description_ + ") did not answer within " +
                        std::to_string(timeout_.count()) + " ms; is simple_switch running with " +
                        "that Thrift port? It printed: " + answer.substr(0, 500));
    }
    char buffer[4096];
    const ssize_t n = read(out_, buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      return Status(StatusCode::kFailedPrecondition,
                    "the bmv2 runtime CLI (" + description_ +
                        ") exited; it printed: " + answer.substr(0, 1000) +
                        " (check --bmv2-cli, PYTHONPATH and that simple_switch runs)");
    }
    answer.append(buffer, size_t(n));
  }
  answer.resize(answer.size() - kPrompt.size());
  return answer;
}

StatusOr<std::string> RuntimeCli::Run(const std::string& command) {
  const std::string line = command + "\n";
  size_t written = 0;
  while (written < line.size()) {
    const ssize_t n = write(in_, line.data() + written, line.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      return Status(StatusCode::kFailedPrecondition,
                    "the bmv2 runtime CLI (" + description_ + ") is gone");
    }
    written += size_t(n);
  }
  auto answer = ReadAnswer();
  if (!answer.ok()) return answer.status();
  if (IsCliError(answer.value())) {
    return Status(StatusCode::kFailedPrecondition,
                  "bmv2 refused '" + command + "': " + answer.value().substr(0, 500));
  }
  return answer;
}

}  // namespace switchml::bmv2
