// A DPDK endpoint: one queue pair of a port (port.h), its frames' headers
// built and parsed here (ethernet/frames.h), ARP answered for its address and
// asked for its peers (ethernet/arp.h), datagrams for another shard of the
// port handed over through that shard's ring. Poll mode: no descriptor;
// Ready() fetches a burst for the next Receive().
#pragma once

#include <memory>
#include <optional>

#include "transport/dpdk/port.h"
#include "transport/transport.h"
#include "transport/udp/udp_socket.h"

namespace switchml::transport::dpdk {

// An endpoint on queue `shard` of `port` (taken, with its hand-over `ring`)
// at `local`; `port_holder`: the kernel socket that holds its UDP port where
// the kernel has the address too.
std::unique_ptr<Endpoint> MakeEndpoint(std::shared_ptr<Port> port, uint32_t shard, rte_ring* ring,
                                       Address local, std::optional<udp::UdpSocket> port_holder,
                                       const EndpointOptions& options);

}  // namespace switchml::transport::dpdk
