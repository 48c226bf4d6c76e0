// The DPDK transport: switchml's data datagrams go through a DPDK poll-mode
// port (DPDK is the I/O that p4app-switchML's client uses). The endpoints
// build and parse the Ethernet/IPv4/UDP headers (ethernet/frames.h) and do
// their own ARP (ethernet/arp.h): they answer for their address and ask for
// the peers they send to.
//
// One port per transport (DpdkOptions::port), opened by the EAL arguments
// the user passes through (DpdkOptions::eal_args): a NIC bound to vfio-pci,
// or a kernel interface through a virtual device (net_af_packet, net_af_xdp).
// The shards of one process (a switch's data threads, a worker's I/O
// threads) share the port, one receive and one send queue each; a datagram
// that arrives on another shard's queue is handed to its shard through a
// lock-free ring (counted as off_queue). Where the kernel also has the
// endpoint's address (a virtual device), a kernel UDP socket holds the port,
// so the kernel neither gives it away nor answers its datagrams with ICMP.
//
// Poll mode: an endpoint has no file descriptor; its thread polls it
// (Endpoint::Ready) while it spins, then naps (src/net/busy_poll.h).
//
// Limits of this version, each refused with a message that says so: no
// multicast, peers on the same link (ARP for the peer itself, no gateway),
// no peer on this host (a frame put on the port never comes back).
#pragma once

#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "transport/transport.h"

namespace switchml::transport::dpdk {

class Port;  // one DPDK port and its queues (port.h)

class DpdkTransport final : public Transport {
 public:
  // Starts nothing: the EAL starts, and the port opens, at the first
  // RouteToward or Open (each fails then with one line naming the cause).
  explicit DpdkTransport(DpdkOptions options);
  ~DpdkTransport() override;

  std::string name() const override { return "dpdk"; }
  StatusOr<std::unique_ptr<Endpoint>> Open(const Address& local,
                                           const EndpointOptions& options) override;
  StatusOr<std::unique_ptr<Endpoint>> JoinGroup(const Address& group, in_addr interface,
                                                const EndpointOptions& options) override;
  // The port's address (DpdkOptions::address, else the kernel's route toward
  // `peer`) and the port's MTU.
  StatusOr<Route> RouteToward(const Address& peer) override;

 private:
  StatusOr<std::shared_ptr<Port>> FindPort();
  // DpdkOptions::address, parsed; nullopt when it is empty.
  StatusOr<std::optional<in_addr>> ConfiguredAddress() const;

  DpdkOptions options_;
  std::mutex mu_;
  std::shared_ptr<Port> port_;  // guarded by mu_
};

}  // namespace switchml::transport::dpdk
