// Talks to a running BMv2 switch through its runtime CLI (simple_switch_CLI,
// which speaks Thrift to the switch): one long-lived child process, one
// command at a time, its answer read up to the next prompt.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "switchml/status.h"

namespace switchml::bmv2 {

// One runtime-CLI command and its printed answer. An interface so that the
// programming logic can be tested without a switch.
class CommandRunner {
 public:
  virtual ~CommandRunner() = default;
  // Runs one command line; fails if the CLI reports an error.
  virtual StatusOr<std::string> Run(const std::string& command) = 0;
};

class RuntimeCli final : public CommandRunner {
 public:
  // `argv` starts the CLI, e.g. {"simple_switch_CLI", "--thrift-port", "9090"}.
  // Fails if it does not start or does not reach the switch within `timeout`.
  static StatusOr<std::unique_ptr<RuntimeCli>> Start(const std::vector<std::string>& argv,
                                                     std::chrono::milliseconds timeout);
  ~RuntimeCli() override;  // closes its input and reaps it
  RuntimeCli(const RuntimeCli&) = delete;
  RuntimeCli& operator=(const RuntimeCli&) = delete;

  StatusOr<std::string> Run(const std::string& command) override;

 private:
  RuntimeCli(pid_t pid, int in, int out, std::string description,
             std::chrono::milliseconds timeout);
  // Reads until the prompt; returns what came before it.
  StatusOr<std::string> ReadAnswer();

  pid_t pid_;
  int in_;   // the CLI's stdin
  int out_;  // the CLI's stdout and stderr
  std::string description_;
  std::chrono::milliseconds timeout_;
};

// The errors the CLI prints instead of failing (it never exits on them).
bool IsCliError(const std::string& answer);

}  // namespace switchml::bmv2
