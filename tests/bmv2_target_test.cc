// The BMv2 control-plane driver against a scripted runtime CLI: which
// commands a job turns into, that removal undoes all of them, and that what
// the target cannot serve is refused with the fix in the message. (The same
// driver against a real simple_switch: tests/p4/.)
#include "switch/bmv2/bmv2_target.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>

#include <deque>
#include <string>
#include <vector>

namespace switchml::bmv2 {
namespace {

// Answers like simple_switch_CLI: a handle for each added entry and node.
class ScriptedCli : public CommandRunner {
 public:
  explicit ScriptedCli(std::vector<std::string>* log) : log_(log) {}
  StatusOr<std::string> Run(const std::string& command) override {
    log_->push_back(command);
    if (!fail_on.empty() && command.find(fail_on) != std::string::npos) {
      return Status(StatusCode::kFailedPrecondition, "bmv2 refused '" + command + "'");
    }
    if (command.rfind("table_add", 0) == 0) {
      return "Adding entry\nEntry has been added with handle " + std::to_string(next_entry_++);
    }
    if (command.rfind("mc_node_create", 0) == 0) {
      return "Creating node\nnode was created with handle " + std::to_string(next_node_++);
    }
    if (command.rfind("counter_read", 0) == 0) {
      return "x[1]= (" + std::to_string(1000) + " bytes, " + std::to_string(counter_++) +
             " packets)";
    }
    return std::string("ok");
  }
  std::string fail_on;

 private:
  std::vector<std::string>* log_;
  uint32_t next_entry_ = 10;
  uint32_t next_node_ = 100;
  uint64_t counter_ = 1;
};

constexpr const char* kHosts = R"(
[[host]]
ip = "10.9.0.1"
mac = "02:00:00:00:00:01"
port = 1
[[host]]
ip = "10.9.0.2"
mac = "02:00:00:00:00:02"
port = 2
)";

Bmv2Config TestConfig() {
  Bmv2Config c;
  c.switch_ip = "10.9.0.254";
  c.switch_mac = "02:00:00:00:00:fe";
  return c;
}

sockaddr_in Address(const char* ip, uint16_t port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  inet_pton(AF_INET, ip, &a.sin_addr);
  a.sin_port = htons(port);
  return a;
}

struct Fixture {
  std::vector<std::string> log;
  ScriptedCli* cli = nullptr;
  std::unique_ptr<Bmv2Target> plane;

  Fixture() {
    auto hosts = ParseHosts(kHosts, "hosts.toml");
    EXPECT_TRUE(hosts.ok()) << hosts.status().ToString();
    auto owned = std::make_unique<ScriptedCli>(&log);
    cli = owned.get();
    auto created = Bmv2Target::Create(TestConfig(), hosts.value(), std::move(owned));
    EXPECT_TRUE(created.ok()) << created.status().ToString();
    plane = std::move(created).value();
  }
};

TEST(Bmv2Target, SetupResetsTheSwitchAndInstallsEndpointForwardingAndFlooding) {
  Fixture f;
  const std::vector<std::string> expected = {
      "reset_state",
      "table_add SwitchmlIngress.switchml_endpoint SwitchmlIngress.set_endpoint 10.9.0.254 => "
      "02:00:00:00:00:fe",
      "table_add SwitchmlIngress.arp_responder SwitchmlIngress.answer_arp 10.9.0.254 => "
      "02:00:00:00:00:fe",
      "table_add SwitchmlIngress.router_macs NoAction 02:00:00:00:00:fe => ",
      "table_add SwitchmlIngress.l2_hosts SwitchmlIngress.l2_forward 02:00:00:00:00:01 => 1",
      "table_add SwitchmlIngress.ipv4_routes SwitchmlIngress.route 10.9.0.1/32 => 1 "
      "02:00:00:00:00:01",
      "table_add SwitchmlIngress.l2_hosts SwitchmlIngress.l2_forward 02:00:00:00:00:02 => 2",
      "table_add SwitchmlIngress.ipv4_routes SwitchmlIngress.route 10.9.0.2/32 => 2 "
      "02:00:00:00:00:02",
      "mc_mgrp_create 1",
      "mc_node_create 0 1 2",
      "mc_node_associate 1 100",
      "mirroring_add 2 1",
      "mirroring_add 3 2",
  };
  EXPECT_EQ(f.log, expected);
  EXPECT_EQ(f.plane->data_address(), "10.9.0.254");
  EXPECT_EQ(f.plane->data_ports(), std::vector<uint16_t>{Bmv2Target::kUdpPort});
}

TEST(Bmv2Target, InstallsJobSendersGroupsAndReplicasPerThreadThenRemovesThemAll) {
  Fixture f;
  f.log.clear();
  JobAssignment job{JobId(77), 2, 64, 8, 16};
  // Two ranks, two threads each: thread 0 owns slots [0,4), thread 1 [4,8).
  const std::vector<std::vector<sockaddr_in>> addresses = {
      {Address("10.9.0.1", 5000), Address("10.9.0.1", 5001)},
      {Address("10.9.0.2", 6000), Address("10.9.0.2", 6001)}};
  ASSERT_TRUE(f.plane->Install(JobInstall{job, 2, addresses, {}, {}}).ok());
  const std::vector<std::string> expected = {
      "table_add SwitchmlIngress.switchml_jobs SwitchmlIngress.set_job 77 => 2 16 8",
      "mc_mgrp_create 2",
      "table_add SwitchmlIngress.switchml_senders SwitchmlIngress.set_sender 77 0 10.9.0.1 5000 "
      "=> 0 4 2",
      "table_add SwitchmlEgress.result_replicas SwitchmlEgress.to_worker 1 => 02:00:00:00:00:01 "
      "10.9.0.1 5000",
      "mc_node_create 1 1",
      "mc_node_associate 2 101",
      "table_add SwitchmlIngress.switchml_senders SwitchmlIngress.set_sender 77 1 10.9.0.2 6000 "
      "=> 0 4 2",
      "table_add SwitchmlEgress.result_replicas SwitchmlEgress.to_worker 2 => 02:00:00:00:00:02 "
      "10.9.0.2 6000",
      "mc_node_create 2 2",
      "mc_node_associate 2 102",
      "mc_mgrp_create 3",
      "table_add SwitchmlIngress.switchml_senders SwitchmlIngress.set_sender 77 0 10.9.0.1 5001 "
      "=> 4 8 3",
      "table_add SwitchmlEgress.result_replicas SwitchmlEgress.to_worker 3 => 02:00:00:00:00:01 "
      "10.9.0.1 5001",
      "mc_node_create 3 1",
      "mc_node_associate 3 103",
      "table_add SwitchmlIngress.switchml_senders SwitchmlIngress.set_sender 77 1 10.9.0.2 6001 "
      "=> 4 8 3",
      "table_add SwitchmlEgress.result_replicas SwitchmlEgress.to_worker 4 => 02:00:00:00:00:02 "
      "10.9.0.2 6001",
      "mc_node_create 4 2",
      "mc_node_associate 3 104",
  };
  EXPECT_EQ(f.log, expected);

  f.log.clear();
  f.plane->Remove(JobId(77));
  const std::vector<std::string> removal = {
      "mc_node_destroy 101", "mc_node_destroy 102", "mc_node_destroy 103", "mc_node_destroy 104",
      "mc_mgrp_destroy 2", "mc_mgrp_destroy 3",
      // Entries in reverse order of their creation (setup used handles 10..16).
      "table_delete SwitchmlEgress.result_replicas 25",
      "table_delete SwitchmlIngress.switchml_senders 24",
      "table_delete SwitchmlEgress.result_replicas 23",
      "table_delete SwitchmlIngress.switchml_senders 22",
      "table_delete SwitchmlEgress.result_replicas 21",
      "table_delete SwitchmlIngress.switchml_senders 20",
      "table_delete SwitchmlEgress.result_replicas 19",
      "table_delete SwitchmlIngress.switchml_senders 18",
      "table_delete SwitchmlIngress.switchml_jobs 17"};
  EXPECT_EQ(f.log, removal);

  // Group and replica ids are free again; removing twice does nothing.
  f.log.clear();
  f.plane->Remove(JobId(77));
  EXPECT_TRUE(f.log.empty());
  ASSERT_TRUE(
      f.plane
          ->Install(JobInstall{
              JobAssignment{JobId(78), 1, 64, 1, 0}, 1, {{Address("10.9.0.1", 5000)}}, {}, {}})
          .ok());
  EXPECT_EQ(f.log[1], "mc_mgrp_create 2");
  EXPECT_NE(f.log[3].find("SwitchmlEgress.to_worker 1 =>"), std::string::npos) << f.log[3];
}

TEST(Bmv2Target, AFailedInstallUndoesWhatItAdded) {
  Fixture f;
  f.log.clear();
  f.cli->fail_on = "mc_node_create";
  const Status s = f.plane->Install(
      JobInstall{JobAssignment{JobId(5), 1, 64, 4, 0}, 1, {{Address("10.9.0.1", 5000)}}, {}, {}});
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("installing job 5 on bmv2"), std::string::npos) << s.message();
  const std::vector<std::string> tail(f.log.end() - 4, f.log.end());
  const std::vector<std::string> expected = {"mc_mgrp_destroy 2",
                                             "table_delete SwitchmlEgress.result_replicas 19",
                                             "table_delete SwitchmlIngress.switchml_senders 18",
                                             "table_delete SwitchmlIngress.switchml_jobs 17"};
  EXPECT_EQ(tail, expected);
}

TEST(Bmv2Target, RefusesJobsTheProgramCannotServe) {
  Fixture f;
  ParsedJoin join;
  join.request.world_size = 4;
  join.request.elements_per_packet = 64;
  join.addresses = {Address("10.9.0.1", 5000)};
  EXPECT_TRUE(f.plane->CheckJoin(join).ok());

  ParsedJoin k = join;
  k.request.elements_per_packet = 256;
  EXPECT_NE(f.plane->CheckJoin(k).message().find("set elements_per_packet = 64"),
            std::string::npos);
  ParsedJoin n = join;
  n.request.world_size = 33;
  EXPECT_NE(f.plane->CheckJoin(n).message().find("32 workers"), std::string::npos);
  ParsedJoin key = join;
  key.auth_key = std::string(32, 'k');
  EXPECT_NE(f.plane->CheckJoin(key).message().find("auth_key"), std::string::npos);
  ParsedJoin stranger = join;
  stranger.addresses = {Address("10.9.0.3", 5000)};
  EXPECT_NE(f.plane->CheckJoin(stranger).message().find("10.9.0.3:5000 is not behind the switch"),
            std::string::npos);
}

TEST(Bmv2Target, ReadsCountersByDropReasonName) {
  Fixture f;
  auto counters = f.plane->Counters({JobId(1)});
  ASSERT_TRUE(counters.ok());
  EXPECT_TRUE(counters.value().per_job.empty());  // the program counts all jobs together
  auto c = StatusOr<DataPlaneCounters>(counters.value().total);
  // The scripted CLI answers 1, 2, 3, ... in the order of the reads:
  // six events (the upstream ones are not read), then drop reasons 1..13.
  EXPECT_EQ(c.value().packets, 1u);
  EXPECT_EQ(c.value().pending_replies, 5u);
  EXPECT_EQ(c.value().upstream_sent, 0u);
  EXPECT_EQ(c.value().nacks_sent, 6u);
  EXPECT_EQ(c.value().drops[size_t(DropReason::kMalformed)], 7u);
  EXPECT_EQ(c.value().drops[size_t(DropReason::kBadMac)], 18u);
  EXPECT_EQ(c.value().drops[size_t(DropReason::kVersionConflict)], 19u);
}

TEST(Bmv2Hosts, RejectsBadFilesNamingTheEntry) {
  EXPECT_FALSE(ParseHosts("", "h").ok());
  EXPECT_NE(ParseHosts("[[host]]\nip = \"10.0.0.1\"\nmac = \"nope\"\nport = 1\n", "h")
                .status()
                .message()
                .find("h: host 1: mac"),
            std::string::npos);
  EXPECT_NE(ParseHosts("[[host]]\nip = \"ten\"\nmac = \"02:00:00:00:00:01\"\nport = 1\n", "h")
                .status()
                .message()
                .find("ip must be a numeric IPv4 address"),
            std::string::npos);
  EXPECT_NE(
      ParseHosts("[[host]]\nip = \"10.0.0.1\"\nmac = \"02:00:00:00:00:01\"\nport = 999\n", "h")
          .status()
          .message()
          .find("port must be"),
      std::string::npos);
  const std::string twice =
      "[[host]]\nip = \"10.0.0.1\"\nmac = \"02:00:00:00:00:01\"\nport = 1\n"
      "[[host]]\nip = \"10.0.0.1\"\nmac = \"02:00:00:00:00:02\"\nport = 2\n";
  EXPECT_NE(ParseHosts(twice, "h").status().message().find("listed twice"), std::string::npos);
  EXPECT_FALSE(ParseHosts("[[host", "h").ok());
}

TEST(Bmv2Cli, ParsesHandlesCountersAndErrors) {
  EXPECT_EQ(ParseHandle("Entry has been added with handle 42").value(), 42u);
  EXPECT_EQ(ParseHandle("node was created with handle 0").value(), 0u);
  EXPECT_FALSE(ParseHandle("nothing").ok());
  EXPECT_EQ(ParseCounterPackets("c[3]= (640 bytes, 7 packets)").value(), 7u);
  EXPECT_FALSE(ParseCounterPackets("c[3]=").ok());
  EXPECT_TRUE(IsCliError("Invalid table operation (DUPLICATE_ENTRY)"));
  EXPECT_TRUE(IsCliError("Error: Bad format for rid"));
  EXPECT_FALSE(IsCliError("Entry has been added with handle 1"));
}

TEST(Bmv2Cli, ReportsACliThatCannotStart) {
  auto cli = RuntimeCli::Start({"/nonexistent/simple_switch_CLI"}, std::chrono::seconds(5));
  ASSERT_FALSE(cli.ok());
  EXPECT_NE(cli.status().message().find("exited"), std::string::npos) << cli.status().message();
}

}  // namespace
}  // namespace switchml::bmv2
