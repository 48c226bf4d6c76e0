// The kernel UDP transport ("udp"): one non-blocking socket per endpoint,
// recvmmsg/sendmmsg batches, and UDP segmentation (GSO) and coalescing (GRO)
// where the kernel has them and EndpointOptions::udp.offload asks for them.
#pragma once

#include <memory>

#include "transport/transport.h"

namespace switchml::transport::udp {

class UdpTransport final : public Transport {
 public:
  std::string name() const override { return "udp"; }
  StatusOr<std::unique_ptr<Endpoint>> Open(const Address& local,
                                           const EndpointOptions& options) override;
  StatusOr<std::unique_ptr<Endpoint>> JoinGroup(const Address& group, in_addr interface,
                                                const EndpointOptions& options) override;
  // The kernel's route: a probe socket connected to `peer`, and IP_MTU.
  StatusOr<Route> RouteToward(const Address& peer) override;
};

// The buffers for coalesced super-datagrams an endpoint opened with `options`
// receives into per Receive() call (with coalescing on).
size_t CoalescedBuffers(const EndpointOptions& options);

}  // namespace switchml::transport::udp
