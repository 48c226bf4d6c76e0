// The DPDK transport (src/transport/dpdk/), in a network namespace this
// process makes for itself: four DPDK ports (net_af_packet on veth links to
// one bridge, no kernel addresses on them), 10.77.0.x addresses that exist
// only in that namespace. The endpoint contract over three of them, and
// two threads' endpoints sharing the fourth (two queue pairs), whose
// datagrams reach the right thread whichever queue they arrive on.
// Needs root; without it, or without DPDK in the build, each test is skipped.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "endpoint_contract.h"

namespace switchml::transport {
namespace {

using testing::ContractName;
using testing::ContractNetwork;
using testing::EndpointContract;
using testing::Options;
using testing::Payload;
using testing::ReceiveAll;

// Why the network is missing (empty: it is there).
std::string& NoNetwork() {
  static std::string why = "not set up";
  return why;
}

constexpr int kMtu = 4500;  // frames of 8 KiB: framesz=8192 below
constexpr const char* kEal =
    "-l 0 --no-huge -m 512 --no-shconf --no-pci --log-level=lib.eal:error "
    "--vdev=net_af_packet0,iface=h0,blocksz=8192,framesz=8192 "
    "--vdev=net_af_packet1,iface=h1,blocksz=8192,framesz=8192 "
    "--vdev=net_af_packet2,iface=h2,blocksz=8192,framesz=8192 "
    "--vdev=net_af_packet3,iface=h3,qpairs=2,blocksz=8192,framesz=8192";

std::string SetUpNetwork() {
#ifndef SWITCHML_HAVE_DPDK
  return "this build has no DPDK transport";
#else
  if (geteuid() != 0) return "needs root for a network namespace and DPDK";
  if (unshare(CLONE_NEWNET) != 0) return std::string("unshare(CLONE_NEWNET): ") + strerror(errno);
  std::string script = "set -e; ip link set lo up; ip link add br0 mtu " + std::to_string(kMtu) +
                       " type bridge; ip link set br0 up;";
  for (int h = 0; h < 4; ++h) {
    const std::string i = "h" + std::to_string(h), mtu = std::to_string(kMtu);
    const std::string queues = h == 3 ? " numrxqueues 2 numtxqueues 2" : "";
    script += " ip link add " + i + " mtu " + mtu + queues + " type veth peer name " + i +
              "b mtu " + mtu + queues + "; ip link set " + i + "b master br0 up; ip link set " + i +
              " up;";
  }
  if (std::system(("sh -c '" + script + "' >&2").c_str()) != 0) return "could not make the links";
  return "";
#endif
}

Address Host(int host) {
  Address a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(0x0A4D0001u + uint32_t(host));  // 10.77.0.(host + 1)
  return a;
}

std::shared_ptr<Transport> PortTransport(int host) {
  TransportOptions o;
  o.dpdk.eal_args = kEal;
  o.dpdk.port = "net_af_packet" + std::to_string(host);
  o.dpdk.address = "10.77.0." + std::to_string(host + 1);
  return MakeTransport("dpdk", o).value();
}

// The transports live as long as the process, as its EAL does.
std::vector<std::shared_ptr<Transport>> Ports() {
  static const std::vector<std::shared_ptr<Transport>> ports = {PortTransport(0), PortTransport(1),
                                                                PortTransport(2)};
  return ports;
}

INSTANTIATE_TEST_SUITE_P(
    Dpdk, EndpointContract,
    ::testing::Values(ContractNetwork{
        "dpdk",
        [] { return NoNetwork().empty() ? Ports() : std::vector<std::shared_ptr<Transport>>{}; },
        Host, /*multicast=*/false}),
    ContractName);

TEST(DpdkTransport, TwoThreadsShareAPortAndEachGetsItsOwnDatagrams) {
  if (!NoNetwork().empty()) GTEST_SKIP() << NoNetwork();
  auto shared = PortTransport(3);
  auto sender = Ports()[0]->Open(Host(0), Options());
  EndpointOptions first = Options(), second = Options();
  first.shards = second.shards = 2;
  second.shard = 1;
  auto a = shared->Open(Host(3), first);
  auto b = shared->Open(Host(3), second);
  ASSERT_TRUE(sender.ok() && a.ok() && b.ok())
      << sender.status().ToString() << a.status().ToString() << b.status().ToString();
  // The port's two queues get frames by a hash of their addresses: each
  // thread polls its own and hands on what is the other's.
  std::atomic<bool> done{false};
  std::thread answer([&] {
    while (!done.load()) {
      (void)a.value()->Receive();
      (void)b.value()->Receive();
    }
  });
  const Status introduced = sender.value()->AddPeer(a.value()->local_address());
  done = true;
  answer.join();
  ASSERT_TRUE(introduced.ok()) << introduced.ToString();
  constexpr uint32_t kEach = 200;
  for (uint32_t i = 0; i < kEach; ++i) {
    sender.value()->SendRef(Payload(i, 100), a.value()->local_address());
    sender.value()->SendRef(Payload(kEach + i, 100), b.value()->local_address());
    if (i % 16 == 15) sender.value()->Flush();
  }
  sender.value()->Flush();
  // Each endpoint receives in turn (one thread at a time per endpoint).
  std::vector<testing::Received> got_a, got_b;
  for (int round = 0; round < 2000 && (got_a.size() < kEach || got_b.size() < kEach); ++round) {
    for (const Datagram& d : a.value()->Receive())
      got_a.push_back({{d.bytes.begin(), d.bytes.end()}, *d.source});
    for (const Datagram& d : b.value()->Receive())
      got_b.push_back({{d.bytes.begin(), d.bytes.end()}, *d.source});
    if (round % 100 == 99) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ASSERT_EQ(got_a.size(), kEach);
  ASSERT_EQ(got_b.size(), kEach);
  for (uint32_t i = 0; i < kEach; ++i) {
    EXPECT_EQ(got_a[i].bytes, Payload(i, 100)) << i;
    EXPECT_EQ(got_b[i].bytes, Payload(kEach + i, 100)) << i;
  }
  // Whatever the hash did, every datagram came once, by its queue or handed on.
  EXPECT_EQ(a.value()->counters().received, kEach);
  EXPECT_EQ(b.value()->counters().received, kEach);
  std::printf(
      "datagrams handed between the threads: %llu of %u\n",
      (unsigned long long)(a.value()->counters().off_queue + b.value()->counters().off_queue),
      2 * kEach);
}

TEST(DpdkTransport, MisconfigurationIsOneLineNamingTheCause) {
  if (!NoNetwork().empty()) GTEST_SKIP() << NoNetwork();
  // Another set of EAL arguments in the same process (after this one's).
  ASSERT_TRUE(Ports()[0]->RouteToward(Host(1)).ok());
  TransportOptions other;
  other.dpdk.eal_args = "-l 0 --no-huge -m 64";
  auto t = MakeTransport("dpdk", other).value();
  auto route = t->RouteToward(Host(1));
  ASSERT_FALSE(route.ok());
  EXPECT_NE(route.status().message().find("same EAL arguments"), std::string::npos)
      << route.status().message();
  // A port the EAL does not have.
  TransportOptions missing;
  missing.dpdk.eal_args = kEal;
  missing.dpdk.port = "net_af_packet9";
  auto m = MakeTransport("dpdk", missing).value()->Open(Host(0), Options());
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("no port net_af_packet9"), std::string::npos)
      << m.status().message();
  // A port shared by several, but the EAL made it with one queue pair.
  EndpointOptions two = Options();
  two.shards = 2;
  auto q = PortTransport(2)->Open(Host(2), two);
  ASSERT_FALSE(q.ok());
  EXPECT_NE(q.status().message().find("qpairs=2"), std::string::npos) << q.status().message();
  // An address that answers nobody.
  auto e = Ports()[0]->Open(Host(0), Options());
  ASSERT_TRUE(e.ok());
  const Status s = e.value()->AddPeer(Host(200));
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("no ARP reply from 10.77.0.201"), std::string::npos) << s.message();
  for (const Status& one : {route.status(), m.status(), q.status(), s}) {
    EXPECT_EQ(one.message().find('\n'), std::string::npos) << one.message();
  }
}

}  // namespace
}  // namespace switchml::transport

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  if (!::testing::GTEST_FLAG(list_tests))
    switchml::transport::NoNetwork() = switchml::transport::SetUpNetwork();
  return RUN_ALL_TESTS();
}
