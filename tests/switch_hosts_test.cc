// Beyond one switch (docs/design.md §5 and §10). One job over several switch
// hosts (switch_address "A,B"): worker thread t talks to host t % hosts, each
// host aggregates its threads' share. A tree: rack switches with an upstream
// switch, each rack aggregating its ranks. Either way results are bitwise
// those of one switch, and a switch that fails fails the job on every rank,
// naming it.
#include "client/switch_hosts.h"

#include <gtest/gtest.h>

#include <functional>
#include <random>

#include "net/address.h"
#include "net_test_util.h"
#include "switchml/context.h"

namespace switchml {
namespace {

using testing::ForEachRank;
using testing::StartAll;
using testing::StartSwitch;
using testing::WorkerConfig;

TEST(SwitchHostList, SplitsOnCommasAndTrims) {
  EXPECT_EQ(SplitSwitchHosts("a:1"), std::vector<std::string>{"a:1"});
  EXPECT_EQ(SplitSwitchHosts(" a:1 ,b, c:3"), (std::vector<std::string>{"a:1", "b", "c:3"}));
  EXPECT_EQ(SplitSwitchHosts("a,,b"), (std::vector<std::string>{"a", "", "b"}));
}

TEST(SwitchHostList, ParsesEachWithTheDefaultPort) {
  auto hosts = ParseSwitchHosts("127.0.0.1:9000, 127.0.0.2");
  ASSERT_TRUE(hosts.ok()) << hosts.status().ToString();
  ASSERT_EQ(hosts.value().size(), 2u);
  EXPECT_EQ(net::FormatAddress(hosts.value()[0]), "127.0.0.1:9000");
  EXPECT_EQ(net::FormatAddress(hosts.value()[1]),
            "127.0.0.2:" + std::to_string(kDefaultControlPort));
}

TEST(SwitchHostList, RefusesEmptyEntriesDuplicatesAndTooMany) {
  EXPECT_NE(ParseSwitchHosts("127.0.0.1,").status().message().find("empty entry"),
            std::string::npos);
  EXPECT_NE(ParseSwitchHosts("127.0.0.1:5,127.0.0.1:5")
                .status()
                .message()
                .find("lists 127.0.0.1:5 twice"),
            std::string::npos);
  EXPECT_NE(ParseSwitchHosts("127.0.0.1:5,300.1.1.1").status().message().find("entry '300.1.1.1'"),
            std::string::npos);
  std::string many;
  for (size_t i = 0; i <= kMaxSwitchHosts; ++i) many += "127.0.0.1:" + std::to_string(i + 1) + ",";
  many.pop_back();
  EXPECT_NE(ParseSwitchHosts(many).status().message().find("at most 16"), std::string::npos);
}

TEST(SwitchHostList, EveryHostNeedsAThread) {
  ContextConfig c;
  c.switch_address = "127.0.0.1:1,127.0.0.1:2,127.0.0.1:3";
  c.threads = 2;
  const Status s = c.Validate();
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("threads=2 is fewer than the 3 switch hosts"), std::string::npos)
      << s.message();
  c.threads = 3;
  EXPECT_TRUE(c.Validate().ok());
}

std::string Address(const SwitchServer& sw) {
  return "127.0.0.1:" + std::to_string(sw.control_port());
}

// The contributions the switch counted for job `job` (its per-job series).
double Contributions(SwitchServer& sw, const std::string& job) {
  const std::string text = sw.PrometheusText();
  const size_t at = text.find("switchml_job_contributions_total{job=\"" + job + "\"");
  if (at == std::string::npos) return -1;
  const size_t end = text.find('\n', at);
  return std::stod(text.substr(text.rfind(' ', end) + 1, end - text.rfind(' ', end) - 1));
}

struct Outputs {
  std::vector<std::vector<int32_t>> ints;
  std::vector<std::vector<float>> floats;
};

// `world` ranks all-reduce the same int32 and float32 inputs through the
// switches `switch_address` lists (for each rank), with `threads` I/O threads each.
Outputs RunJob(const std::function<std::string(uint32_t)>& switch_address, const std::string& job,
               uint32_t world, uint32_t threads, const std::string& auth_key, SwitchServer& any) {
  const size_t n = 50021;  // not a multiple of the packet size
  std::vector<ContextConfig> configs;
  for (uint32_t r = 0; r < world; ++r) {
    ContextConfig c = WorkerConfig(any, job, r, world);
    c.switch_address = switch_address(r);
    c.threads = threads;
    c.auth_key = auth_key;
    configs.push_back(c);
  }
  auto contexts = StartAll(configs);
  Outputs out;
  for (auto& c : contexts) {
    EXPECT_NE(c, nullptr);
    if (c == nullptr) return out;
  }
  std::vector<std::vector<int32_t>> ints(world, std::vector<int32_t>(n));
  std::vector<std::vector<float>> floats(world, std::vector<float>(n));
  std::mt19937 rng(7);
  std::normal_distribution<float> normal;
  for (uint32_t r = 0; r < world; ++r) {
    for (size_t i = 0; i < n; ++i) {
      ints[r][i] = int32_t(r * 7919 + i * 13) - 100000;
      floats[r][i] = normal(rng) * float(1 << (i / 256 % 9));  // magnitudes vary by chunk
    }
  }
  out.ints.assign(world, std::vector<int32_t>(n));
  out.floats.assign(world, std::vector<float>(n));
  ForEachRank(world, [&](size_t r) {
    auto a = contexts[r]->AllReduceAsync(ints[r].data(), out.ints[r].data(), n, DType::kInt32);
    auto b =
        contexts[r]->AllReduceAsync(floats[r].data(), out.floats[r].data(), n, DType::kFloat32);
    EXPECT_TRUE(a->Wait().ok()) << a->status().ToString();
    EXPECT_TRUE(b->Wait().ok()) << b->status().ToString();
    EXPECT_EQ(contexts[r]->counters().invalid, 0u);
  });
  size_t wrong = 0;
  for (size_t i = 0; i < n; ++i) {
    int64_t sum = 0;
    for (uint32_t r = 0; r < world; ++r) sum += ints[r][i];
    wrong += out.ints[0][i] != int32_t(sum);
  }
  EXPECT_EQ(wrong, 0u) << "int32 elements not the exact sum";
  return out;
}

TEST(SwitchHosts, OneJobOverTwoSwitchesEqualsOneSwitchBitwise) {
  auto one = StartSwitch();
  auto a = StartSwitch();
  auto b = StartSwitch(1024, 16, /*data_threads=*/2);  // hosts may differ in shards
  ASSERT_TRUE(one && a && b);
  const uint32_t world = 3, threads = 4;  // two threads per host
  const auto to = [](const std::string& address) {
    return [address](uint32_t) { return address; };
  };
  const Outputs flat = RunJob(to(Address(*one)), "flat", world, threads, "", *one);
  const Outputs split =
      RunJob(to(Address(*a) + "," + Address(*b)), "split", world, threads, "", *a);
  ASSERT_EQ(split.floats.size(), world);
  for (uint32_t r = 0; r < world; ++r) {
    EXPECT_EQ(split.ints[r], flat.ints[r]) << "rank " << r;
    EXPECT_EQ(split.floats[r], flat.floats[r]) << "rank " << r;  // bitwise
  }
  // Each host aggregated a share: together, the single switch's work.
  EXPECT_GT(Contributions(*a, "split"), 0);
  EXPECT_GT(Contributions(*b, "split"), 0);

  // With every packet authenticated (each host keys its own salt), the same.
  const std::string key(64, 'a');
  const Outputs keyed =
      RunJob(to(Address(*a) + "," + Address(*b)), "keyed", world, threads, key, *a);
  ASSERT_EQ(keyed.floats.size(), world);
  for (uint32_t r = 0; r < world; ++r) EXPECT_EQ(keyed.floats[r], flat.floats[r]);
}

// Starts `configs` (failing only by the control plane), runs one all-reduce,
// stops `victim` and expects every rank's next all-reduce to fail naming `named`.
void ExpectAStoppedSwitchFailsEveryRank(std::vector<ContextConfig> configs, SwitchServer& victim,
                                        const std::string& named) {
  for (auto& c : configs) c.failure_timeout_ms = 600000;
  auto contexts = StartAll(configs);
  for (auto& c : contexts) ASSERT_NE(c, nullptr);
  const size_t world = configs.size();
  std::vector<float> x(100000, 1.0f);
  ForEachRank(world, [&](size_t r) {
    std::vector<float> mine = x;
    EXPECT_TRUE(
        contexts[r]->AllReduce(mine.data(), mine.data(), mine.size(), DType::kFloat32).ok());
    EXPECT_EQ(mine[0], float(world));
  });
  victim.Stop();
  ForEachRank(world, [&](size_t r) {
    std::vector<float> mine = x;
    const Status s = contexts[r]->AllReduce(mine.data(), mine.data(), mine.size(), DType::kFloat32);
    EXPECT_FALSE(s.ok());
    EXPECT_NE(s.message().find(named), std::string::npos) << r << ": " << s.message();
  });
}

TEST(SwitchHosts, AHostThatStopsFailsTheJobOnEveryRankNamingIt) {
  auto a = StartSwitch();
  auto b = StartSwitch();
  ASSERT_TRUE(a && b);
  std::vector<ContextConfig> configs;
  for (uint32_t r = 0; r < 2; ++r) {
    ContextConfig c = WorkerConfig(*a, "dies", r, 2);
    c.switch_address = Address(*a) + "," + Address(*b);
    c.threads = 2;
    configs.push_back(c);
  }
  ExpectAStoppedSwitchFailsEveryRank(configs, *b, "at switch " + Address(*b));
}

TEST(SwitchHosts, AnUnreachableHostFailsTheStartNamingIt) {
  auto a = StartSwitch();
  ASSERT_TRUE(a);
  ContextConfig c = WorkerConfig(*a, "half", 0, 1);
  c.switch_address = Address(*a) + ",127.0.0.1:1";
  c.threads = 2;
  auto context = Context::Start(c);
  ASSERT_FALSE(context.ok());
  EXPECT_NE(context.status().message().find("at switch 127.0.0.1:1"), std::string::npos)
      << context.status().message();
}

// A tree: two rack switches, each with two ranks, under one upstream switch.
std::unique_ptr<SwitchServer> StartRackSwitch(const SwitchServer& upstream,
                                              uint16_t data_threads = 1) {
  SwitchConfig config;
  config.data_threads = data_threads;
  config.bind_address = "127.0.0.1";
  config.control_port = 0;
  config.data_port = 0;
  config.data_plane.pool_slots = 1024;
  config.socket_buffer_bytes = 4 << 20;
  config.upstream = Address(upstream);
  auto server = SwitchServer::Start(config);
  EXPECT_TRUE(server.ok()) << server.status().ToString();
  return server.ok() ? std::move(server).value() : nullptr;
}

TEST(SwitchTree, TwoRacksUnderAnUpstreamEqualOneSwitchBitwise) {
  auto one = StartSwitch();
  auto root = StartSwitch();
  ASSERT_TRUE(one && root);
  auto rack_a = StartRackSwitch(*root);
  auto rack_b = StartRackSwitch(*root, /*data_threads=*/2);  // racks may differ in shards
  ASSERT_TRUE(rack_a && rack_b);
  const uint32_t world = 4, threads = 2;
  const auto by_rack = [&](uint32_t r) { return Address(r < 2 ? *rack_a : *rack_b); };
  const Outputs flat =
      RunJob([&](uint32_t) { return Address(*one); }, "flat", world, threads, "", *one);
  for (const std::string& key : {std::string(), std::string(64, 'b')}) {
    SCOPED_TRACE(key.empty() ? "unauthenticated" : "authenticated");
    const std::string job = key.empty() ? "tree" : "keyed-tree";
    const Outputs tree = RunJob(by_rack, job, world, threads, key, *rack_a);
    ASSERT_EQ(tree.floats.size(), world);
    for (uint32_t r = 0; r < world; ++r) {
      EXPECT_EQ(tree.ints[r], flat.ints[r]) << "rank " << r;
      EXPECT_EQ(tree.floats[r], flat.floats[r]) << "rank " << r;  // bitwise
    }
    // Each rack counted its own two ranks; the root one member per rack.
    EXPECT_GT(Contributions(*rack_a, job), 0);
    EXPECT_GT(Contributions(*rack_b, job), 0);
    EXPECT_EQ(Contributions(*rack_a, job), Contributions(*rack_b, job));
    EXPECT_EQ(Contributions(*root, job), Contributions(*rack_a, job));
    EXPECT_NE(rack_b->PrometheusText().find("switchml_job_upstream_results_total{job=\"" + job),
              std::string::npos);
    const std::string text = root->PrometheusText();
    EXPECT_EQ(text.find("switchml_job_drops_total{job=\"" + job), std::string::npos) << text;
  }
}

// The configurations of a 4-rank job `job`, ranks 0 and 1 at rack A, 2 and 3
// at rack B.
std::vector<ContextConfig> FourRanksOnTwoRacks(const SwitchServer& rack_a,
                                               const SwitchServer& rack_b, const std::string& job) {
  std::vector<ContextConfig> configs;
  for (uint32_t r = 0; r < 4; ++r)
    configs.push_back(WorkerConfig(r < 2 ? rack_a : rack_b, job, r, 4));
  return configs;
}

TEST(SwitchTree, ARackSwitchThatStopsFailsEveryRankNamingIt) {
  auto root = StartSwitch();
  ASSERT_TRUE(root);
  auto rack_a = StartRackSwitch(*root);
  auto rack_b = StartRackSwitch(*root);
  ASSERT_TRUE(rack_a && rack_b);
  // Rack A's ranks lose their switch; rack B's hear it from the upstream.
  ExpectAStoppedSwitchFailsEveryRank(FourRanksOnTwoRacks(*rack_a, *rack_b, "rack-dies"), *rack_a,
                                     Address(*rack_a));
}

// A rank that leaves ends the job only as one switch would: after the grace
// for its peers' last results, naming it. Its worker's stream, closed, must
// not read as the rack switch losing its upstream (that ended the rack's job
// at once, failing a rack-mate still fetching its last result).
TEST(SwitchTree, ARankThatLeavesEndsTheJobOnlyAsOneSwitchWould) {
  auto root = StartSwitch();
  ASSERT_TRUE(root);
  auto rack_a = StartRackSwitch(*root);
  auto rack_b = StartRackSwitch(*root);
  ASSERT_TRUE(rack_a && rack_b);
  std::vector<ContextConfig> configs = FourRanksOnTwoRacks(*rack_a, *rack_b, "leaves");
  for (auto& c : configs) c.failure_timeout_ms = 600000;
  auto contexts = StartAll(configs);
  for (auto& c : contexts) ASSERT_NE(c, nullptr);
  std::vector<float> x(10000, 1.0f);
  ForEachRank(4, [&](size_t r) {
    std::vector<float> mine = x;
    EXPECT_TRUE(
        contexts[r]->AllReduce(mine.data(), mine.data(), mine.size(), DType::kFloat32).ok());
    EXPECT_EQ(mine[0], 4.0f);
  });
  contexts[3]->Stop();  // rank 3 leaves; rank 2 shares its rack switch
  ForEachRank(3, [&](size_t r) {
    std::vector<float> mine = x;
    const Status s = contexts[r]->AllReduce(mine.data(), mine.data(), mine.size(), DType::kFloat32);
    EXPECT_FALSE(s.ok());
    EXPECT_NE(s.message().find("rank 3 left job 'leaves'"), std::string::npos)
        << r << ": " << s.message();
  });
}

TEST(SwitchTree, ARankMissingAnywhereTimesTheJoinOutEverywhere) {
  auto root = StartSwitch();
  ASSERT_TRUE(root);
  auto rack = StartRackSwitch(*root);
  ASSERT_TRUE(rack);
  ContextConfig c = WorkerConfig(*rack, "half", 0, 2);
  c.join_timeout_ms = 300;
  auto context = Context::Start(c);
  ASSERT_FALSE(context.ok());
  EXPECT_NE(context.status().message().find("missing rank(s) 1"), std::string::npos)
      << context.status().message();
}

TEST(SwitchTree, AnUnreachableUpstreamFailsTheJoinNamingIt) {
  auto root = StartSwitch();
  ASSERT_TRUE(root);
  auto rack = StartRackSwitch(*root);
  ASSERT_TRUE(rack);
  root->Stop();
  auto context = Context::Start(WorkerConfig(*rack, "orphan", 0, 1));
  ASSERT_FALSE(context.ok());
  EXPECT_NE(context.status().message().find("upstream switch " + Address(*root)), std::string::npos)
      << context.status().message();
}

}  // namespace
}  // namespace switchml
