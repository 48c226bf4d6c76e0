// switchml-ctl: operator commands for a running switch.
//   switchml-ctl stats [--switch HOST:PORT] [--format table|prometheus]
#include <grpcpp/grpcpp.h>

#include <CLI/CLI.hpp>
#include <cstdio>

#include "net/address.h"
#include "switch/stats_format.h"
#include "switchml/control.grpc.pb.h"
#include "switchml/limits.h"
#include "switchml/version.h"

int main(int argc, char** argv) {
  CLI::App app{"switchml-ctl: inspect a running switchml switch"};
  app.option_defaults()->always_capture_default();  // --help shows every default
  app.set_version_flag("--version", std::string("switchml-ctl ") + SWITCHML_VERSION);
  app.require_subcommand(1);
  std::string address = "127.0.0.1";
  std::string format = "table";
  CLI::App* stats = app.add_subcommand("stats", "print live counters, per job and in total");
  stats->add_option("--switch", address,
                    "control address of the switch, HOST[:PORT] (port " +
                        std::to_string(switchml::kDefaultControlPort) + " unless given)");
  stats->add_option("--format", format, "table or prometheus")
      ->check(CLI::IsMember({"table", "prometheus"}));
  CLI11_PARSE(app, argc, argv);

  const auto control = switchml::net::ParseAddress(address, switchml::kDefaultControlPort);
  if (!control.ok()) {
    std::fprintf(stderr, "--switch: %s\n", control.status().message().c_str());
    return 2;
  }
  address = switchml::net::FormatAddress(control.value());
  auto stub = switchml::control::v1::Control::NewStub(
      grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  switchml::control::v1::StatsReply reply;
  const grpc::Status s = stub->Stats(&context, {}, &reply);
  if (!s.ok()) {
    std::fprintf(stderr, "cannot get stats from the switch at %s: %s\n", address.c_str(),
                 s.error_message().c_str());
    return 1;
  }
  const std::string text =
      format == "prometheus" ? switchml::FormatPrometheus(reply) : switchml::FormatTable(reply);
  std::fputs(text.c_str(), stdout);
  return 0;
}
