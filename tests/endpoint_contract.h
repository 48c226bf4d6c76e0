// The endpoint contract: what every transport's endpoints must do, whatever
// carries their datagrams. A test binary includes this header and
// instantiates EndpointContract with the networks it has (transport_test:
// udp and sim on loopback; dpdk_transport_test: DPDK ports on veth links).
#pragma once

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <poll.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "net/busy_poll.h"
#include "transport/transport.h"

namespace switchml::transport::testing {

inline Address Loopback(uint16_t port = 0) {
  Address a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(port);
  return a;
}

inline bool Same(const Address& a, const Address& b) {
  return a.sin_addr.s_addr == b.sin_addr.s_addr && a.sin_port == b.sin_port;
}

inline EndpointOptions Options(size_t max_bytes = 512) {
  EndpointOptions o;
  o.max_datagram_bytes = max_bytes;
  o.claim_buffers = true;
  o.send_queue = 16;
  o.receive_batch = 16;
  o.udp.socket_buffer_bytes = 1 << 20;
  return o;
}

// Datagram i: its index in the first 4 bytes, then bytes of its own.
inline std::vector<uint8_t> Payload(uint32_t i, size_t bytes) {
  std::vector<uint8_t> p(bytes);
  for (size_t j = 0; j < bytes; ++j) p[j] = uint8_t(i * 7 + j);
  if (bytes >= 4) std::memcpy(p.data(), &i, 4);
  return p;
}

struct Received {
  std::vector<uint8_t> bytes;
  Address source;
};

// Whether `e` has datagrams within `timeout`, by its descriptors or, for a
// poll-mode endpoint, by polling it.
inline bool WaitReadable(Endpoint& e, std::chrono::milliseconds timeout) {
  std::vector<pollfd> fds = WaitDescriptors(-1, {&e});  // -1: ignored
  PolledEndpoints polled({&e});
  return net::SpinThenPoll(fds.data(), fds.size(), polled.source(), std::chrono::nanoseconds(0),
                           timeout) > 0;
}

// Receives until `count` datagrams arrived or nothing came for 2 s (a
// bound against hanging, not a timing check: these links deliver in microseconds).
inline std::vector<Received> ReceiveAll(Endpoint& e, size_t count) {
  std::vector<Received> got;
  while (got.size() < count) {
    if (!WaitReadable(e, std::chrono::seconds(2))) break;
    for (const Datagram& d : e.Receive()) {
      got.push_back({std::vector<uint8_t>(d.bytes.begin(), d.bytes.end()), *d.source});
    }
  }
  return got;
}

// Where a contract test's endpoints live: three hosts (maybe one), each with
// a transport and the address its endpoints bind.
struct ContractNetwork {
  std::string name;
  // The transports of hosts 0, 1 and 2, made for each test.
  std::function<std::vector<std::shared_ptr<Transport>>()> make;
  std::function<Address(int host)> address;
  // Host-local multicast groups (on loopback).
  bool multicast = true;
};

inline void PrintTo(const ContractNetwork& n, std::ostream* out) { *out << n.name; }

class EndpointContract : public ::testing::TestWithParam<ContractNetwork> {
 protected:
  void SetUp() override {
    transports_ = GetParam().make();
    if (transports_.empty()) GTEST_SKIP() << "no " << GetParam().name << " network here";
  }
  // An endpoint of host `host` (port 0: a free one).
  StatusOr<std::unique_ptr<Endpoint>> Open(int host, const EndpointOptions& options,
                                           uint16_t port = 0) {
    Address a = GetParam().address(host);
    a.sin_port = htons(port);
    return transports_[size_t(host)]->Open(a, options);
  }
  // Announces each endpoint to every other (AddPeer), as a job's setup does
  // for the addresses it sends to before hearing from them. Meanwhile the
  // peer is polled, as a live one is (it may have to answer, e.g. ARP).
  static void Introduce(std::initializer_list<Endpoint*> endpoints) {
    for (Endpoint* from : endpoints) {
      for (Endpoint* to : endpoints) {
        if (from == to) continue;
        std::atomic<bool> done{false};
        std::thread peer([&] {
          while (!done.load()) {
            (void)to->Receive();
            to->Flush();
          }
        });
        const Status s = from->AddPeer(to->local_address());
        done = true;
        peer.join();
        ASSERT_TRUE(s.ok()) << s.ToString();
      }
    }
  }
  std::vector<std::shared_ptr<Transport>> transports_;
};

inline std::string ContractName(const ::testing::TestParamInfo<ContractNetwork>& info) {
  return info.param.name;
}

TEST_P(EndpointContract, DatagramsToOneDestinationArriveInOrderFromTheSender) {
  auto a = Open(0, Options());
  auto b = Open(1, Options());
  ASSERT_TRUE(a.ok() && b.ok()) << a.status().ToString() << b.status().ToString();
  Introduce({a.value().get(), b.value().get()});
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
  auto a = Open(0, Options());
  auto stranger = Open(1, Options());
  auto c = Open(2, Options());
  ASSERT_TRUE(a.ok() && stranger.ok() && c.ok());
  Introduce({a.value().get(), stranger.value().get(), c.value().get()});
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
  auto a = Open(0, Options(2048));
  auto b = Open(1, Options(100));
  ASSERT_TRUE(a.ok() && b.ok());
  Introduce({a.value().get(), b.value().get()});
  const auto big = Payload(7, 1500);
  a.value()->SendRef(big, b.value()->local_address());
  a.value()->Flush();
  const std::vector<Received> got = ReceiveAll(*b.value(), 1);
  ASSERT_EQ(got.size(), 1u);
  // Cut to 101 bytes, or whole (coalescing buffers of 64 KiB, or frames).
  EXPECT_GE(got[0].bytes.size(), 101u);
  EXPECT_TRUE(std::equal(got[0].bytes.begin(), got[0].bytes.end(), big.begin()));
}

TEST_P(EndpointContract, ReconfigureResizesTheBuffers) {
  auto a = Open(0, Options(64));
  auto b = Open(1, Options(64));
  ASSERT_TRUE(a.ok() && b.ok());
  Introduce({a.value().get(), b.value().get()});
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
  auto sender = Open(0, Options());
  ASSERT_TRUE(sender.ok());
  const in_addr lo{htonl(INADDR_LOOPBACK)};
  Address group{};
  group.sin_family = AF_INET;
  group.sin_addr.s_addr = htonl(0xEF00A001u);  // 239.0.160.1
  if (!GetParam().multicast) {
    // Refused, saying so, at setup: the switch then sends results by unicast.
    const Status s = sender.value()->SetHostLocalMulticast();
    EXPECT_FALSE(s.ok());
    EXPECT_NE(s.message().find("multicast"), std::string::npos) << s.message();
    EXPECT_FALSE(transports_[0]->JoinGroup(group, lo, Options()).ok());
    return;
  }
  ASSERT_TRUE(sender.value()->SetHostLocalMulticast().ok());
  // The group's port is a free one (UDP members bind it).
  auto holder = Open(0, Options());
  ASSERT_TRUE(holder.ok());
  group.sin_port = holder.value()->local_address().sin_port;
  auto m1 = transports_[0]->JoinGroup(group, lo, Options());
  auto m2 = transports_[0]->JoinGroup(group, lo, Options());
  ASSERT_TRUE(m1.ok() && m2.ok()) << m1.status().ToString();
  Address other = group;
  other.sin_addr.s_addr = htonl(0xEF00A002u);
  auto outsider = transports_[0]->JoinGroup(other, lo, Options());
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
  EXPECT_FALSE(transports_[0]->JoinGroup(unicast, lo, Options()).ok());
}

TEST_P(EndpointContract, ABoundPortIsTaken) {
  auto a = Open(0, Options());
  ASSERT_TRUE(a.ok());
  auto again = Open(0, Options(), ntohs(a.value()->local_address().sin_port));
  ASSERT_FALSE(again.ok());
  EXPECT_NE(
      again.status().message().find(std::to_string(ntohs(a.value()->local_address().sin_port))),
      std::string::npos)
      << again.status().message();
}

}  // namespace switchml::transport::testing
