// The transport interface: one contract that every implementation (kernel
// UDP, the in-process SimFabric) must keep, the fabric's own behaviour, and
// the whole system (SwitchServer, Contexts) over the fabric with loss and
// duplication, bitwise identical to the same job over UDP.
#include "transport/transport.h"

#include <gtest/gtest.h>
#include <poll.h>

#include <cstring>
#include <random>

#include "endpoint_contract.h"
#include "net_test_util.h"
#include "sim/sim_cluster.h"
#include "transport/sim/sim_fabric.h"
#include "transport/udp/udp_transport.h"

namespace switchml::transport {
namespace {

using switchml::testing::Configs;
using switchml::testing::ForEachRank;
using switchml::testing::StartAll;
using switchml::testing::StartSwitch;
using testing::ContractName;
using testing::ContractNetwork;
using testing::EndpointContract;
using testing::Loopback;
using testing::Options;
using testing::Payload;
using testing::ReceiveAll;
using testing::Received;
using testing::Same;

// ---- the contract (endpoint_contract.h), for udp and sim

std::vector<std::shared_ptr<Transport>> ThreeTimes(std::shared_ptr<Transport> t) {
  return {t, t, t};
}

INSTANTIATE_TEST_SUITE_P(
    Transports, EndpointContract,
    ::testing::Values(ContractNetwork{"udp",
                                      [] { return ThreeTimes(MakeTransport("udp").value()); },
                                      [](int) { return Loopback(); }},
                      ContractNetwork{"sim", [] { return ThreeTimes(sim::SimFabric::Create({})); },
                                      [](int) { return Loopback(); }}),
    ContractName);

// ---- names

TEST(TransportNames, AnUnknownTransportIsRefusedNamingTheKnownOnes) {
  auto t = MakeTransport("carrier-pigeon");
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("carrier-pigeon"), std::string::npos);
  EXPECT_NE(t.status().message().find("udp"), std::string::npos);
  ASSERT_TRUE(MakeTransport("udp").ok());
  EXPECT_EQ(MakeTransport("udp").value()->name(), "udp");

  ContextConfig worker;
  worker.transport = "carrier-pigeon";
  const Status w = worker.Validate();
  EXPECT_EQ(w.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(w.message().rfind("transport: ", 0), 0u) << w.message();
  ASSERT_TRUE(worker.Set("transport", "udp").ok());
  EXPECT_TRUE(worker.Validate().ok());

  SwitchConfig sw;
  sw.transport = "carrier-pigeon";
  EXPECT_EQ(sw.Validate().code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(SwitchServer::Start(sw).ok());
}

// ---- the fabric's own behaviour

TEST(SimFabric, LossDuplicationAndUnroutableDatagramsAreCounted) {
  auto fabric = sim::SimFabric::Create({});
  auto a = fabric->Open(Loopback(), Options());
  auto b = fabric->Open(Loopback(), Options());
  ASSERT_TRUE(a.ok() && b.ok());
  const auto payload = Payload(1, 32);
  const Address to_b = b.value()->local_address();
  fabric->SetLoss(1.0, 0.0);
  for (int i = 0; i < 10; ++i) a.value()->SendRef(payload, to_b);
  a.value()->Flush();
  EXPECT_TRUE(b.value()->Receive().empty());
  fabric->SetLoss(0.0, 1.0);
  a.value()->SendRef(payload, to_b);
  a.value()->SendRef(payload, Loopback(1));  // nobody there
  a.value()->Flush();
  EXPECT_EQ(ReceiveAll(*b.value(), 2).size(), 2u);
  const sim::SimFabricCounters c = fabric->counters();
  EXPECT_EQ(c.sent, 12u);
  EXPECT_EQ(c.lost, 10u);
  EXPECT_EQ(c.duplicated, 2u);
  EXPECT_EQ(c.unroutable, 1u);
  EXPECT_EQ(c.delivered, 2u);
}

TEST(SimFabric, AFullQueueDropsAndCounts) {
  sim::SimFabricOptions options;
  options.queue_datagrams = 4;
  auto fabric = sim::SimFabric::Create(options);
  auto a = fabric->Open(Loopback(), Options());
  auto b = fabric->Open(Loopback(), Options());
  ASSERT_TRUE(a.ok() && b.ok());
  const auto payload = Payload(1, 32);
  for (int i = 0; i < 6; ++i) a.value()->SendRef(payload, b.value()->local_address());
  a.value()->Flush();
  EXPECT_EQ(b.value()->Receive().size(), 4u);
  EXPECT_EQ(fabric->counters().queue_full, 2u);
  // Drained: not readable any more.
  EXPECT_FALSE(testing::WaitReadable(*b.value(), std::chrono::milliseconds(0)));
}

TEST(SimFabric, AWildcardBindTakesThePortForEveryAddressAndHearsThemAll) {
  auto fabric = sim::SimFabric::Create({});
  Address any{};
  any.sin_family = AF_INET;
  any.sin_port = htons(47000);
  auto wild = fabric->Open(any, Options());
  ASSERT_TRUE(wild.ok());
  EXPECT_FALSE(fabric->Open(Loopback(47000), Options()).ok());
  auto a = fabric->Open(Loopback(), Options());
  ASSERT_TRUE(a.ok());
  const auto payload = Payload(5, 40);
  a.value()->SendRef(payload, Loopback(47000));
  a.value()->Flush();
  EXPECT_EQ(ReceiveAll(*wild.value(), 1).size(), 1u);
  // Its own datagrams come from loopback, as from a socket bound to 0.0.0.0.
  wild.value()->SendRef(payload, a.value()->local_address());
  wild.value()->Flush();
  const std::vector<Received> got = ReceiveAll(*a.value(), 1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_TRUE(Same(got[0].source, Loopback(47000)));
  // Closing an endpoint frees its port.
  wild.value().reset();
  EXPECT_TRUE(fabric->Open(Loopback(47000), Options()).ok());
}

// ---- the whole system over a transport

struct Outputs {
  std::vector<std::vector<int32_t>> ints;
  std::vector<std::vector<float>> floats;
  uint64_t retransmissions = 0;
  uint64_t multicast_received = 0;
};

// A 4-rank job (2 threads each, a 2-shard switch) over `transport`: two
// all-reduces of distinct values per rank and element.
Outputs RunJob(std::shared_ptr<Transport> transport, bool multicast) {
  constexpr uint32_t kWorld = 4;
  constexpr size_t kCount = 150001;
  Outputs out;
  auto sw = StartSwitch(1024, 16, 2, SwitchConfig{}.busy_poll_us, transport);
  EXPECT_NE(sw, nullptr);
  if (sw == nullptr) return out;
  auto configs = Configs(*sw, "job", kWorld, 2);
  for (auto& c : configs) {
    c.result_multicast = multicast;
    c.retransmit_timeout_us = 500;
  }
  auto contexts = StartAll(configs, nullptr, transport);
  for (auto& c : contexts) {
    EXPECT_NE(c, nullptr);
    if (c == nullptr) return out;
  }
  std::vector<std::vector<int32_t>> ints(kWorld, std::vector<int32_t>(kCount));
  std::vector<std::vector<float>> floats(kWorld, std::vector<float>(kCount));
  std::mt19937 rng(11);
  std::normal_distribution<float> normal;
  for (uint32_t r = 0; r < kWorld; ++r) {
    for (size_t i = 0; i < kCount; ++i) {
      ints[r][i] = int32_t(r * 1000003 + i * 17) - 70000;
      floats[r][i] = normal(rng) * float(1 + i % 13);
    }
  }
  out.ints.assign(kWorld, std::vector<int32_t>(kCount));
  out.floats.assign(kWorld, std::vector<float>(kCount));
  ForEachRank(kWorld, [&](size_t r) {
    auto a = contexts[r]->AllReduceAsync(ints[r].data(), out.ints[r].data(), kCount, DType::kInt32);
    auto b = contexts[r]->AllReduceAsync(floats[r].data(), out.floats[r].data(), kCount,
                                         DType::kFloat32);
    EXPECT_TRUE(a->Wait().ok()) << a->status().ToString();
    EXPECT_TRUE(b->Wait().ok()) << b->status().ToString();
  });
  for (uint32_t r = 0; r < kWorld; ++r) {
    for (size_t i = 0; i < kCount; ++i) {
      int64_t sum = 0;
      for (uint32_t q = 0; q < kWorld; ++q) sum += ints[q][i];
      if (out.ints[r][i] != int32_t(sum)) {
        ADD_FAILURE() << "rank " << r << " element " << i << ": " << out.ints[r][i]
                      << " != " << sum;
        return out;
      }
    }
    std::vector<const float*> inputs;
    for (auto& f : floats) inputs.push_back(f.data());
    EXPECT_EQ(CheckFloatAllReduce(inputs, out.floats[r].data(), kCount, 256).violations, 0u);
    const ContextCounters c = contexts[r]->counters();
    out.retransmissions += c.retransmissions;
    out.multicast_received += c.multicast_received;
  }
  return out;
}

TEST(SystemOverSimFabric, LossAndDuplicationLeaveResultsBitwiseIdenticalToUdp) {
  const Outputs udp = RunJob(MakeTransport("udp").value(), true);
  ASSERT_FALSE(udp.floats.empty());
  for (bool multicast : {true, false}) {
    sim::SimFabricOptions options;
    options.seed = multicast ? 5 : 6;
    options.loss = 0.02;
    options.duplicate = 0.02;
    auto fabric = sim::SimFabric::Create(options);
    const Outputs sim = RunJob(fabric, multicast);
    ASSERT_FALSE(sim.floats.empty());
    EXPECT_EQ(sim.ints, udp.ints) << "multicast " << multicast;
    EXPECT_EQ(sim.floats, udp.floats) << "multicast " << multicast;
    const sim::SimFabricCounters c = fabric->counters();
    EXPECT_GT(c.lost, 0u);
    EXPECT_GT(c.duplicated, 0u);
    EXPECT_GT(sim.retransmissions, 0u);  // the losses were recovered
    if (multicast) {
      EXPECT_GT(sim.multicast_received, 0u);  // results came by the fabric's groups
    } else {
      EXPECT_EQ(sim.multicast_received, 0u);
    }
  }
}

// A rank reports the offloads it got: none when it asked for none, one of
// the four answers otherwise (the kernel decides), none on the fabric.
TEST(SystemOverSimFabric, ARankReportsTheOffloadsItGot) {
  for (bool offload : {true, false}) {
    auto sw = StartSwitch();
    ASSERT_NE(sw, nullptr);
    auto configs = Configs(*sw, "job", 1);
    configs[0].udp_offload = offload;
    auto contexts = StartAll(configs);
    ASSERT_NE(contexts[0], nullptr);
    const std::string got = contexts[0]->offload();
    if (offload) {
      EXPECT_TRUE(got == "segmentation and coalescing" || got == "coalescing only" ||
                  got == "segmentation only" || got == "off")
          << got;
    } else {
      EXPECT_EQ(got, "off");
    }
  }
  auto fabric = sim::SimFabric::Create({});
  auto sw = StartSwitch(1024, 16, 1, SwitchConfig{}.busy_poll_us, fabric);
  ASSERT_NE(sw, nullptr);
  auto contexts = StartAll(Configs(*sw, "job", 1), nullptr, fabric);
  ASSERT_NE(contexts[0], nullptr);
  EXPECT_EQ(contexts[0]->offload(), "off");
}

}  // namespace
}  // namespace switchml::transport
