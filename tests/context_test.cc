// The networked system in one process: a real switch (UDP + gRPC) and real
// Contexts on loopback, one thread per rank.
#include "switchml/context.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmath>
#include <random>
#include <type_traits>

#include "net_test_util.h"
#include "sim/sim_cluster.h"
#include "switch/result_group.h"
#include "transport/udp/udp_socket.h"

namespace switchml {
namespace {

// Code written against 0.1 still compiles (with a deprecation warning).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
static_assert(std::is_same_v<Job, Work>);
#pragma GCC diagnostic pop

using testing::Configs;
using testing::ForEachRank;
using testing::StartAll;
using testing::StartSwitch;
using testing::WorkerConfig;

struct Shape {
  uint32_t world;
  uint32_t threads;
  size_t count;
  uint16_t shards = 1;          // the switch's data threads
  bool multicast = true;        // the workers accept results by multicast
  uint32_t busy_poll_us = 200;  // switch and workers poll this long before sleeping
};

class ContextAllReduce : public ::testing::TestWithParam<Shape> {};

// The value of the switch's metric `metric` for job `job` ("" if absent).
std::string JobMetric(SwitchServer& sw, const std::string& metric, const std::string& job) {
  const std::string text = sw.PrometheusText();
  const size_t at = text.find(metric + "{job=\"" + job + "\"");
  if (at == std::string::npos) return "";
  const size_t end = text.find('\n', at);
  const size_t space = text.rfind(' ', end);
  return text.substr(space + 1, end - space - 1);
}

// With multicast, a rank got each result on its group, except those that
// answered one of its retransmissions or probes (by unicast), which can come
// first: a result lost on loopback (a full socket buffer) is fetched by a
// probe, which the switch answers by unicast.
void ExpectResultsByMulticast(const ContextCounters& c, bool multicast) {
  EXPECT_GT(c.results_accepted, 0u);
  if (multicast) {
    EXPECT_GT(c.multicast_received, 0u);
    EXPECT_GE(c.multicast_received + c.retransmissions + c.probes_sent, c.results_accepted);
  } else {
    EXPECT_EQ(c.multicast_received, 0u);
  }
}

TEST_P(ContextAllReduce, Int32IsExactAndFloat32WithinBound) {
  const Shape shape = GetParam();
  auto sw = StartSwitch(1024, 16, shape.shards, shape.busy_poll_us);
  ASSERT_NE(sw, nullptr);
  ASSERT_EQ(sw->data_ports().size(), shape.shards);
  auto configs = Configs(*sw, "job", shape.world, shape.threads);
  for (auto& c : configs) {
    c.result_multicast = shape.multicast;
    c.busy_poll_us = shape.busy_poll_us;
  }
  auto contexts = StartAll(configs);
  for (auto& c : contexts) ASSERT_NE(c, nullptr);

  const size_t n = shape.count;
  std::vector<std::vector<int32_t>> ints(shape.world, std::vector<int32_t>(n));
  std::vector<std::vector<float>> floats(shape.world, std::vector<float>(n));
  std::mt19937 rng(3);
  std::normal_distribution<float> normal;
  for (uint32_t r = 0; r < shape.world; ++r) {
    for (size_t i = 0; i < n; ++i) {
      ints[r][i] = int32_t(r * 100003 + i * 31) - 5000;
      floats[r][i] = normal(rng) * float(1 + i % 7);
    }
  }
  std::vector<std::vector<int32_t>> int_out(shape.world, std::vector<int32_t>(n));
  std::vector<std::vector<float>> float_out(shape.world, std::vector<float>(n));
  ForEachRank(shape.world, [&](size_t r) {
    // Two operations in flight at once, then one in place.
    auto a = contexts[r]->AllReduceAsync(ints[r].data(), int_out[r].data(), n, DType::kInt32);
    auto b = contexts[r]->AllReduceAsync(floats[r].data(), float_out[r].data(), n, DType::kFloat32);
    EXPECT_TRUE(a->Wait().ok()) << a->status().ToString();
    EXPECT_TRUE(b->Wait().ok()) << b->status().ToString();
  });
  std::vector<const float*> inputs;
  for (auto& f : floats) inputs.push_back(f.data());
  for (uint32_t r = 0; r < shape.world; ++r) {
    for (size_t i = 0; i < n; ++i) {
      int64_t sum = 0;
      for (uint32_t q = 0; q < shape.world; ++q) sum += ints[q][i];
      ASSERT_EQ(int_out[r][i], int32_t(sum)) << "rank " << r << " element " << i;
    }
    const FloatCheck check = CheckFloatAllReduce(inputs, float_out[r].data(), n, 256);
    EXPECT_EQ(check.violations, 0u) << "rank " << r << " element " << check.first_violation;
    EXPECT_EQ(float_out[r], float_out[0]);
  }
  // In place.
  ForEachRank(shape.world, [&](size_t r) {
    EXPECT_TRUE(contexts[r]->AllReduce(ints[r].data(), ints[r].data(), n, DType::kInt32).ok());
  });
  for (uint32_t r = 0; r < shape.world; ++r) EXPECT_EQ(ints[r], int_out[r]);
  for (uint32_t r = 0; r < shape.world; ++r) {
    ExpectResultsByMulticast(contexts[r]->counters(), shape.multicast);
    EXPECT_EQ(contexts[r]->counters().invalid, 0u);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Loopback, ContextAllReduce,
    ::testing::Values(Shape{2, 1, 100000}, Shape{4, 1, 70001}, Shape{8, 1, 20000},
                      Shape{3, 2, 50000}, Shape{2, 3, 7}, Shape{2, 1, 0},
                      // A sharded switch: worker thread t
                      // talks to data thread t % shards.
                      Shape{3, 2, 50000, 2}, Shape{2, 5, 30001, 3}, Shape{2, 1, 1000, 2},
                      // 8 MiB and more: results stored past the caches.
                      Shape{2, 2, (8 << 20) / 4 + 1001},
                      // Results by unicast, one per rank.
                      Shape{4, 1, 70001, 1, false}, Shape{3, 2, 50000, 2, false},
                      // Threads that sleep as soon as they are idle.
                      Shape{4, 1, 70001, 1, true, 0}, Shape{3, 2, 50000, 2, true, 0}),
    [](const auto& info) {
      return "n" + std::to_string(info.param.world) + "_t" + std::to_string(info.param.threads) +
             "_len" + std::to_string(info.param.count) + "_s" + std::to_string(info.param.shards) +
             (info.param.multicast ? "" : "_unicast") +
             (info.param.busy_poll_us ? "" : "_no_busy_poll");
    });

// elements_per_packet 0: loopback's 64 KiB MTU carries 8192, the switch
// (default limit 1024) less; every rank gets the switch's choice. A fixed
// window is split over the threads.
TEST(ContextSizing, PacketSizeFromThePathAndTheSwitchAndAFixedWindow) {
  auto sw = StartSwitch();
  ASSERT_NE(sw, nullptr);
  auto configs = Configs(*sw, "sized", 2, 2);
  for (auto& c : configs) {
    c.elements_per_packet = 0;
    c.window_slots = 6;
  }
  auto contexts = StartAll(configs);
  for (auto& c : contexts) ASSERT_NE(c, nullptr);
  const size_t n = 5000;
  std::vector<std::vector<int32_t>> in(2, std::vector<int32_t>(n)), out = in;
  for (size_t i = 0; i < n; ++i) in[0][i] = int32_t(i), in[1][i] = int32_t(3 * i);
  ForEachRank(2, [&](size_t r) {
    EXPECT_EQ(contexts[r]->config().elements_per_packet, 1024u);
    EXPECT_TRUE(contexts[r]->AllReduce(in[r].data(), out[r].data(), n, DType::kInt32).ok());
    EXPECT_EQ(contexts[r]->counters().window, 6u);
    // Round trips are sampled from packets sent once (Karn): on a loaded
    // machine every packet of a rank this short may have been resent.
    const ContextCounters c = contexts[r]->counters();
    EXPECT_TRUE(c.min_rtt_us > 0.0 || c.retransmissions > 0) << c.min_rtt_us;
  });
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(out[1][i], int32_t(4 * i)) << i;
  EXPECT_EQ(out[0], out[1]);
}

TEST(ContextJobs, TwoConcurrentJobsWithDifferentWorldSizesAreIsolated) {
  auto sw = StartSwitch();
  ASSERT_NE(sw, nullptr);
  std::vector<std::unique_ptr<Context>> a, b;
  std::thread start_b([&] { b = StartAll(Configs(*sw, "b", 3)); });
  a = StartAll(Configs(*sw, "a", 2));
  start_b.join();
  const size_t n = 30000;
  std::vector<std::vector<int32_t>> ia(2, std::vector<int32_t>(n, 1)),
      ib(3, std::vector<int32_t>(n, 10));
  std::thread run_b([&] {
    ForEachRank(3, [&](size_t r) {
      EXPECT_TRUE(b[r]->AllReduce(ib[r].data(), ib[r].data(), n, DType::kInt32).ok());
    });
  });
  ForEachRank(2, [&](size_t r) {
    EXPECT_TRUE(a[r]->AllReduce(ia[r].data(), ia[r].data(), n, DType::kInt32).ok());
  });
  run_b.join();
  for (auto& v : ia) EXPECT_EQ(v, std::vector<int32_t>(n, 2));
  for (auto& v : ib) EXPECT_EQ(v, std::vector<int32_t>(n, 30));
  // Each job's results on its own groups: none of the other job's arrive.
  for (const auto* job : {&a, &b}) {
    for (const auto& c : *job) {
      ExpectResultsByMulticast(c->counters(), true);
      EXPECT_EQ(c->counters().invalid, 0u);
    }
  }
  EXPECT_EQ(JobMetric(*sw, "switchml_job_result_multicast", "a"), "1");
  EXPECT_EQ(JobMetric(*sw, "switchml_job_result_multicast", "b"), "1");
}

// The switch multicasts a job's results only when every rank accepts it and
// sits on its host; otherwise each rank gets its own copy.
TEST(ContextResultMulticast, OneRankThatRefusesMakesTheJobUnicast) {
  auto sw = StartSwitch();
  ASSERT_NE(sw, nullptr);
  auto configs = Configs(*sw, "mixed", 3);
  configs[1].result_multicast = false;
  auto contexts = StartAll(configs);
  for (auto& c : contexts) ASSERT_NE(c, nullptr);
  std::vector<std::vector<int32_t>> v(3, std::vector<int32_t>(5000, 7));
  ForEachRank(3, [&](size_t r) {
    EXPECT_TRUE(contexts[r]->AllReduce(v[r].data(), v[r].data(), 5000, DType::kInt32).ok());
    EXPECT_EQ(v[r], std::vector<int32_t>(5000, 21));
    ExpectResultsByMulticast(contexts[r]->counters(), false);
  });
  EXPECT_EQ(JobMetric(*sw, "switchml_job_result_multicast", "mixed"), "0");
}

// A switch listening on every address (the default) holds its data port for
// all of them; the groups' port is another one, so workers can bind it.
TEST(ContextResultMulticast, WorksWithASwitchOnTheWildcardAddress) {
  SwitchConfig config;
  config.bind_address = "0.0.0.0";
  config.control_port = 0;
  config.data_port = 0;
  config.data_threads = 2;
  auto sw = SwitchServer::Start(config);
  ASSERT_TRUE(sw.ok()) << sw.status().ToString();
  ASSERT_EQ(sw.value()->result_ports().size(), 2u);
  auto contexts = StartAll(Configs(*sw.value(), "wild", 2, /*threads=*/2));
  for (auto& c : contexts) ASSERT_NE(c, nullptr);
  ForEachRank(2, [&](size_t r) {
    std::vector<int32_t> v(3000, int32_t(r) + 1);
    EXPECT_TRUE(contexts[r]->AllReduce(v.data(), v.data(), v.size(), DType::kInt32).ok());
    EXPECT_EQ(v, std::vector<int32_t>(3000, 3));
    ExpectResultsByMulticast(contexts[r]->counters(), true);
    EXPECT_EQ(contexts[r]->counters().invalid, 0u);
  });
  // The switch's own socket, on 0.0.0.0, takes in none of its multicasts.
  EXPECT_EQ(sw.value()->PrometheusText().find("\nswitchml_decode_errors_total{"),
            std::string::npos);
  EXPECT_EQ(sw.value()->PrometheusText().find("\nswitchml_drops_total{"), std::string::npos)
      << sw.value()->PrometheusText();
}

TEST(ContextResultMulticast, ASwitchWithoutItSendsUnicast) {
  SwitchConfig config;
  config.bind_address = "127.0.0.1";
  config.control_port = 0;
  config.data_port = 0;
  config.result_multicast = false;
  auto sw = SwitchServer::Start(config);
  ASSERT_TRUE(sw.ok()) << sw.status().ToString();
  EXPECT_TRUE(sw.value()->result_ports().empty());
  auto contexts = StartAll(Configs(*sw.value(), "plain", 2));
  for (auto& c : contexts) ASSERT_NE(c, nullptr);
  ForEachRank(2, [&](size_t r) {
    std::vector<int32_t> v(3000, int32_t(r));
    EXPECT_TRUE(contexts[r]->AllReduce(v.data(), v.data(), v.size(), DType::kInt32).ok());
    EXPECT_EQ(v, std::vector<int32_t>(3000, 1));
    ExpectResultsByMulticast(contexts[r]->counters(), false);
  });
}

// Anyone on the host can send to a result group; a worker takes only the
// switch's datagrams there, as on its unicast socket.
TEST(SwitchSecurity, ForgedResultsOnTheGroupsAreNotReceived) {
  const uint16_t max_jobs = 16;
  auto sw = StartSwitch(1024, max_jobs);
  ASSERT_NE(sw, nullptr);
  ASSERT_EQ(sw->result_ports().size(), 1u);
  auto contexts = StartAll(Configs(*sw, "job", 2));
  for (auto& c : contexts) ASSERT_NE(c, nullptr);
  auto stranger = transport::udp::UdpSocket::Bind(
      sockaddr_in{AF_INET, 0, {htonl(INADDR_LOOPBACK)}, {}}, 1 << 20);
  ASSERT_TRUE(stranger.ok());
  ASSERT_TRUE(stranger.value().SetHostLocalMulticast().ok());  // never off this host
  // Well-formed results of any early job id, to every group the job could have.
  std::vector<uint8_t> packet(PacketBytes(256));
  for (uint32_t entry = 0; entry < max_jobs; ++entry) {
    const sockaddr_in group = ResultGroup(entry, 0, sw->result_ports()[0]);
    for (uint32_t job = 0; job < 4 * max_jobs; ++job) {
      PacketHeader h;
      h.type = MessageType::kResult;
      h.job = job;
      h.element_count = 256;
      EncodeHeader(h, packet);
      sendto(stranger.value().fd(), packet.data(), packet.size(), 0,
             reinterpret_cast<const sockaddr*>(&group), sizeof(group));
    }
  }
  ForEachRank(2, [&](size_t r) {
    std::vector<int32_t> v(1000, 1);
    EXPECT_TRUE(contexts[r]->AllReduce(v.data(), v.data(), v.size(), DType::kInt32).ok());
    EXPECT_EQ(v, std::vector<int32_t>(1000, 2));
    ExpectResultsByMulticast(contexts[r]->counters(), true);
    EXPECT_EQ(contexts[r]->counters().invalid, 0u);
  });
}

TEST(ContextJobs, RankThatLeavesFailsTheOthersNamingItAndTheSwitchFreesTheJob) {
  auto sw = StartSwitch(/*pool_slots=*/64);
  ASSERT_NE(sw, nullptr);
  auto contexts = StartAll(Configs(*sw, "job", 3));
  for (auto& c : contexts) ASSERT_NE(c, nullptr);
  std::vector<int32_t> big(4'000'000, 1);
  std::vector<std::vector<int32_t>> out(3, std::vector<int32_t>(big.size()));
  auto j0 = contexts[0]->AllReduceAsync(big.data(), out[0].data(), big.size(), DType::kInt32);
  auto j1 = contexts[1]->AllReduceAsync(big.data(), out[1].data(), big.size(), DType::kInt32);
  contexts[2]->Stop();  // rank 2 leaves without contributing
  for (auto* j : {j0.get(), j1.get()}) {
    const Status s = j->Wait();
    EXPECT_EQ(s.code(), StatusCode::kAborted);
    EXPECT_NE(s.message().find("rank 2 left job 'job'"), std::string::npos) << s.message();
  }
  // The switch freed the job: its whole pool is free again ...
  for (int i = 0;
       i < 100 && sw->PrometheusText().find("switchml_pool_free_slots 64\n") == std::string::npos;
       ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_NE(sw->PrometheusText().find("switchml_pool_free_slots 64\n"), std::string::npos)
      << sw->PrometheusText();
  // ... and later operations of the old contexts fail at once.
  EXPECT_FALSE(contexts[0]->AllReduce(big.data(), out[0].data(), 10, DType::kInt32).ok());
  contexts.clear();
  // A following job of the same name passes.
  auto again = StartAll(Configs(*sw, "job", 2));
  ForEachRank(2, [&](size_t r) {
    ASSERT_NE(again[r], nullptr);
    EXPECT_TRUE(again[r]->AllReduce(big.data(), out[r].data(), 1000, DType::kInt32).ok());
  });
  EXPECT_EQ(out[0][999], 2);
}

// Starts all ranks with short join timeouts; returns the one error of kind
// `code` (ranks race, so either of two mismatching ranks may be refused).
Status RefusedJoin(std::vector<ContextConfig> configs, StatusCode code) {
  for (auto& c : configs) c.join_timeout_ms = 1000;
  std::vector<Status> errors;
  StartAll(configs, &errors);
  Status found;
  int count = 0;
  for (const Status& e : errors) {
    if (e.code() == code) found = e, ++count;
  }
  EXPECT_EQ(count, 1);
  return found;
}

TEST(ContextRegistration, WorldSizeMismatchIsReported) {
  auto sw = StartSwitch();
  auto configs = Configs(*sw, "job", 2);
  configs[1].world_size = 3;
  const Status s = RefusedJoin(configs, StatusCode::kInvalidArgument);
  EXPECT_TRUE(s.message().find("world_size 3 differs from the job's 2") != std::string::npos ||
              s.message().find("world_size 2 differs from the job's 3") != std::string::npos)
      << s.message();
}

TEST(ContextRegistration, DuplicateRankIsReported) {
  auto sw = StartSwitch();
  auto configs = Configs(*sw, "job", 3);
  configs[2].rank = 0;
  const Status s = RefusedJoin(configs, StatusCode::kAlreadyExists);
  EXPECT_NE(s.message().find("rank 0 is already registered"), std::string::npos) << s.message();
}

TEST(ContextRegistration, IncompatibleParametersAreReported) {
  auto sw = StartSwitch();
  auto configs = Configs(*sw, "job", 2);
  configs[1].elements_per_packet = 512;
  const Status s = RefusedJoin(configs, StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("elements_per_packet"), std::string::npos) << s.message();
  configs = Configs(*sw, "job2", 2);
  configs[1].threads = 2;
  const Status t = RefusedJoin(configs, StatusCode::kInvalidArgument);
  EXPECT_NE(t.message().find("threads"), std::string::npos) << t.message();
}

TEST(ContextRegistration, PoolExhaustionIsReported) {
  auto sw = StartSwitch(/*pool_slots=*/40);
  auto configs = Configs(*sw, "job", 2);  // asks for 32 slots each job
  auto first = StartAll(configs);
  auto second = Configs(*sw, "other", 1);
  auto c = Context::Start(second[0]);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(c.status().message().find("no free segment of 32 slots (8 of 40 free)"),
            std::string::npos)
      << c.status().message();
}

TEST(ContextRegistration, MissingRanksTimeOutWithTheirNames) {
  auto sw = StartSwitch();
  auto configs = Configs(*sw, "job", 3);
  configs[1].join_timeout_ms = 300;
  auto c = Context::Start(configs[1]);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kDeadlineExceeded);
  EXPECT_NE(
      c.status().message().find("only 1 of 3 ranks joined within 300 ms; missing rank(s) 0, 2"),
      std::string::npos)
      << c.status().message();
}

TEST(ContextRegistration, UnreachableSwitchIsReported) {
  ContextConfig config;
  config.switch_address = "127.0.0.1:1";  // nothing listens there
  auto c = Context::Start(config);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("cannot reach the switch"), std::string::npos)
      << c.status().message();
}

TEST(ContextRegistration, InvalidConfigurationNamesTheField) {
  ContextConfig config;
  config.rank = 4;
  config.world_size = 4;
  EXPECT_NE(Context::Start(config).status().message().find("rank=4"), std::string::npos);
}

TEST(SwitchSecurity, PacketsFromUnregisteredSourcesAreCountedAndDropped) {
  auto sw = StartSwitch();
  auto contexts = StartAll(Configs(*sw, "job", 2));
  for (auto& c : contexts) ASSERT_NE(c, nullptr);
  // A stranger sends a well-formed contribution for rank 0 of the live job.
  PacketHeader h;
  h.job = 0;  // whatever id: unknown ids are dropped too
  std::vector<uint8_t> packet(PacketBytes(256));
  for (uint32_t job = 0; job < 64; ++job) {
    h.job = job;
    h.element_count = 256;
    EncodeHeader(h, packet);
    const int fd = socket(AF_INET, SOCK_DGRAM, 0);
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_port = htons(sw->data_port());
    inet_pton(AF_INET, "127.0.0.1", &to.sin_addr);
    sendto(fd, packet.data(), packet.size(), 0, reinterpret_cast<sockaddr*>(&to), sizeof(to));
    close(fd);
  }
  std::vector<int32_t> v(1000, 1);
  ForEachRank(2, [&](size_t r) {
    std::vector<int32_t> mine = v;
    EXPECT_TRUE(contexts[r]->AllReduce(mine.data(), mine.data(), mine.size(), DType::kInt32).ok());
    EXPECT_EQ(mine, std::vector<int32_t>(1000, 2));
  });
  const std::string stats = sw->PrometheusText();
  EXPECT_NE(stats.find("switchml_drops_total{reason=\"source_mismatch\"} 1\n"), std::string::npos)
      << stats;
  EXPECT_NE(stats.find("switchml_drops_total{reason=\"unknown_job\"} 63\n"), std::string::npos)
      << stats;
}

}  // namespace
}  // namespace switchml
