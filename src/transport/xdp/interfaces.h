// What the AF_XDP transport asks the kernel about an interface and its
// neighbours (setup path; getifaddrs, sysfs and rtnetlink, never the packet
// path).
#pragma once

#include <netinet/in.h>

#include <optional>
#include <string>

#include "switchml/status.h"
#include "transport/ethernet/frames.h"

namespace switchml::transport::xdp {

using ethernet::Mac;

struct Interface {
  std::string name;
  int index = 0;
  in_addr address{};  // its first IPv4 address
  Mac mac{};
  int rx_queues = 1;
};

// The interface called `name`, or (name empty) the one that holds `address`.
// Errors say how to name one (`interface` setting, --interface).
StatusOr<Interface> FindInterface(const std::string& name, in_addr address);

// The MAC address of `peer`'s next hop out of `interface` (the peer itself
// on the interface's subnet, else the route's gateway: the kernel's own
// route lookup, RTM_GETROUTE), from the kernel's neighbour table
// (RTM_GETNEIGH). When the table has none it makes the
// kernel resolve it (one UDP datagram to the peer's discard port, 9, which
// the XDP program leaves to the kernel) and waits up to `wait_ms` (0: returns
// at once; a later call finds what the kernel resolved).
StatusOr<Mac> NextHopMac(const Interface& interface, in_addr peer, int wait_ms = 1000);

// Asks the NIC to deliver UDP to `local` (address and port) on receive queue
// `queue`: an ntuple rule (ETHTOOL_SRXCLSRLINS, what `ethtool -N` adds), at a
// place the driver chooses. Returns the rule's location, or nothing where
// the interface has no such rules (veth), has them off (`ethtool -K NAME
// ntuple on`) or is full.
std::optional<uint32_t> SteerFlow(const Interface& interface, const sockaddr_in& local,
                                  uint32_t queue);
// Removes the rule at `location` that SteerFlow added.
void RemoveFlowSteering(const Interface& interface, uint32_t location);

// Whether `address` is one of this host's own (any interface's, or loopback).
bool IsLocalAddress(in_addr address);

std::string FormatMac(const Mac& mac);

}  // namespace switchml::transport::xdp
