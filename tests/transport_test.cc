// The transport interface: one contract that every implementation (kernel
// UDP, the in-process SimFabric) must keep, the fabric's own behaviour, and
// the whole system (SwitchServer, Contexts) over the fabric with loss and
// duplication, bitwise identical to the same job over UDP.
#include "transport/transport.h"

#include <gtest/gtest.h>
#include <poll.h>

#include <cstring>
#include <random>

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

Address Loopback(uint16_t port = 0) {
  Address a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(port);
  return a;
}

bool Same(const Address& a, const Address& b) {
  return a.sin_addr.s_addr == b.sin_addr.s_addr && a.sin_port == b.sin_port;
}

EndpointOptions Options(size_t max_bytes = 512) {
  EndpointOptions o;
  o.max_datagram_bytes = max_bytes;
  o.claim_buffers = true;
  o.send_queue = 16;
  o.receive_batch = 16;
  o.socket_buffer_bytes = 1 << 20;
  return o;
}

// Datagram i: its index in the first 4 bytes, then bytes of its own.
std::vector<uint8_t> Payload(uint32_t i, size_t bytes) {
  std::vector<uint8_t> p(bytes);
  for (size_t j = 0; j < bytes; ++j) p[j] = uint8_t(i * 7 + j);
  if (bytes >= 4) std::memcpy(p.data(), &i, 4);
  return p;
}

struct Received {
  std::vector<uint8_t> bytes;
  Address source;
};

// Receives until `count` datagrams arrived or nothing came for 2 s (a
// bound against hanging, not a timing check: loopback delivers in microseconds).
std::vector<Received> ReceiveAll(Endpoint& e, size_t count) {
  std::vector<Received> got;
  while (got.size() < count) {
    pollfd p{e.poll_fd(), POLLIN, 0};
    if (poll(&p, 1, 2000) <= 0) break;
    for (const Datagram& d : e.Receive()) {
      got.push_back({std::vector<uint8_t>(d.bytes.begin(), d.bytes.end()), *d.source});
    }
  }
  return got;
}

// ---- the contract, for every implementation

class EndpointContract : public ::testing::TestWithParam<std::string> {
 protected:
  std::shared_ptr<Transport> Make() {
    if (GetParam() == "sim") return sim::SimFabric::Create({});
    return MakeTransport(GetParam()).value();
  }
};

TEST_P(EndpointContract, DatagramsToOneDestinationArriveInOrderFromTheSender) {
  auto transport = Make();
  auto a = transport->Open(Loopback(), Options());
  auto b = transport->Open(Loopback(), Options());
  ASSERT_TRUE(a.ok() && b.ok()) << a.status().ToString() << b.status().ToString();
  const Address to_b = b.value()->local_address();
  EXPECT_NE(to_b.sin_port, 0);
  // Sizes vary (a run of equal ones, shorter ones, one byte), both send forms.
  std::vector<std::vector<uint8_t>> sent;
  for (uint32_t i = 0; i < 100; ++i) {
    sent.push_back(Payload(i, i % 10 == 9 ? 1 + i % 7 : i % 3 == 0 ? 300 : 512));
  }
  for (uint32_t i = 0; i < 100; ++i) {
    if (i % 2 == 0) {
      std::span<uint8_t> buf = a.value()->Claim();
      ASSERT_GE(buf.size(), sent[i].size());
      std::memcpy(buf.data(), sent[i].data(), sent[i].size());
      a.value()->Commit(sent[i].size(), &to_b);
    } else {
      a.value()->SendRef(sent[i], to_b);
    }
    if (i % 25 == 24) a.value()->Flush();
  }
  a.value()->Flush();
  const std::vector<Received> got = ReceiveAll(*b.value(), sent.size());
  ASSERT_EQ(got.size(), sent.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].bytes, sent[i]) << "datagram " << i;
    EXPECT_TRUE(Same(got[i].source, a.value()->local_address())) << "datagram " << i;
  }
  EXPECT_EQ(a.value()->counters().sent, 100u);
  EXPECT_EQ(a.value()->counters().send_dropped, 0u);
  EXPECT_EQ(b.value()->counters().received, 100u);
}

TEST_P(EndpointContract, AConnectedEndpointHearsOnlyItsPeer) {
  auto transport = Make();
  auto a = transport->Open(Loopback(), Options());
  auto stranger = transport->Open(Loopback(), Options());
  auto c = transport->Open(Loopback(), Options());
  ASSERT_TRUE(a.ok() && stranger.ok() && c.ok());
  ASSERT_TRUE(c.value()->Connect(a.value()->local_address()).ok());
  const Address to_c = c.value()->local_address();
  const auto from_stranger = Payload(1, 64), from_peer = Payload(2, 64);
  stranger.value()->SendRef(from_stranger, to_c);
  stranger.value()->Flush();
  a.value()->SendRef(from_peer, to_c);
  a.value()->Flush();
  const std::vector<Received> got = ReceiveAll(*c.value(), 1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].bytes, from_peer);
  // And it sends to its peer without an address.
  std::memcpy(c.value()->Claim().data(), from_peer.data(), from_peer.size());
  c.value()->Commit(from_peer.size(), nullptr);
  c.value()->Flush();
  const std::vector<Received> back = ReceiveAll(*a.value(), 1);
  ASSERT_EQ(back.size(), 1u);
  EXPECT_TRUE(Same(back[0].source, to_c));
}

TEST_P(EndpointContract, AnOverlongDatagramArrivesLongerThanTheLimit) {
  auto transport = Make();
  auto a = transport->Open(Loopback(), Options(2048));
  auto b = transport->Open(Loopback(), Options(100));
  ASSERT_TRUE(a.ok() && b.ok());
  const auto big = Payload(7, 1500);
  a.value()->SendRef(big, b.value()->local_address());
  a.value()->Flush();
  const std::vector<Received> got = ReceiveAll(*b.value(), 1);
  ASSERT_EQ(got.size(), 1u);
  // Cut to 101 bytes, or whole where the kernel coalesces into 64 KiB buffers.
  EXPECT_GE(got[0].bytes.size(), 101u);
  EXPECT_TRUE(std::equal(got[0].bytes.begin(), got[0].bytes.end(), big.begin()));
}

TEST_P(EndpointContract, ReconfigureResizesTheBuffers) {
  auto transport = Make();
  auto a = transport->Open(Loopback(), Options(64));
  auto b = transport->Open(Loopback(), Options(64));
  ASSERT_TRUE(a.ok() && b.ok());
  a.value()->Reconfigure(Options(4096));
  b.value()->Reconfigure(Options(4096));
  ASSERT_EQ(a.value()->Claim().size(), 4096u);
  const auto large = Payload(3, 4096);
  std::memcpy(a.value()->Claim().data(), large.data(), large.size());
  const Address to_b = b.value()->local_address();
  a.value()->Commit(large.size(), &to_b);
  a.value()->Flush();
  const std::vector<Received> got = ReceiveAll(*b.value(), 1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].bytes, large);
}

TEST_P(EndpointContract, EveryMemberOfAGroupGetsItsDatagrams) {
  auto transport = Make();
  auto sender = transport->Open(Loopback(), Options());
  ASSERT_TRUE(sender.ok());
  ASSERT_TRUE(sender.value()->SetHostLocalMulticast().ok());
  // The group's port is a free one (UDP members bind it).
  auto holder = transport->Open(Loopback(), Options());
  ASSERT_TRUE(holder.ok());
  Address group{};
  group.sin_family = AF_INET;
  group.sin_addr.s_addr = htonl(0xEF00A001u);  // 239.0.160.1
  group.sin_port = holder.value()->local_address().sin_port;
  const in_addr lo{htonl(INADDR_LOOPBACK)};
  auto m1 = transport->JoinGroup(group, lo, Options());
  auto m2 = transport->JoinGroup(group, lo, Options());
  ASSERT_TRUE(m1.ok() && m2.ok()) << m1.status().ToString();
  Address other = group;
  other.sin_addr.s_addr = htonl(0xEF00A002u);
  auto outsider = transport->JoinGroup(other, lo, Options());
  ASSERT_TRUE(outsider.ok());
  const auto payload = Payload(9, 200);
  sender.value()->SendRef(payload, group);
  sender.value()->Flush();
  for (auto* m : {m1.value().get(), m2.value().get()}) {
    const std::vector<Received> got = ReceiveAll(*m, 1);
    ASSERT_EQ(got.size(), 1u);
    EXPECT_EQ(got[0].bytes, payload);
  }
  EXPECT_TRUE(outsider.value()->Receive().empty());
  Address unicast = Loopback(1);
  EXPECT_FALSE(transport->JoinGroup(unicast, lo, Options()).ok());
}

TEST_P(EndpointContract, ABoundPortIsTaken) {
  auto transport = Make();
  auto a = transport->Open(Loopback(), Options());
  ASSERT_TRUE(a.ok());
  auto again = transport->Open(a.value()->local_address(), Options());
  ASSERT_FALSE(again.ok());
  EXPECT_NE(
      again.status().message().find(std::to_string(ntohs(a.value()->local_address().sin_port))),
      std::string::npos)
      << again.status().message();
}

INSTANTIATE_TEST_SUITE_P(Transports, EndpointContract, ::testing::Values("udp", "sim"),
                         [](const auto& info) { return info.param; });

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
  pollfd p{b.value()->poll_fd(), POLLIN, 0};
  EXPECT_EQ(poll(&p, 1, 0), 0);
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
