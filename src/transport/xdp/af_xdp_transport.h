// The AF_XDP transport: switchml's data datagrams bypass the kernel's UDP
// stack. An XDP program (redirect.bpf.c, attached by a BPF link this process
// holds, so the kernel removes it however the process exits) hands the frames for this
// endpoint's UDP port to an AF_XDP socket; the endpoint parses and builds the
// Ethernet/IPv4/UDP headers itself (frames.h). Everything else on the
// interface (ARP, ICMP, the gRPC control connection) stays with the kernel,
// and a kernel UDP socket holds each endpoint's port so nothing else gets it.
//
// Limits of this first version, each refused with a message that says so:
// one endpoint per interface (with a socket on each of its receive queues,
// up to 256), datagrams of at most kMaxDatagramBytes (frames of 4 KiB), no
// multicast groups. Needs CAP_NET_ADMIN (and CAP_BPF/CAP_SYS_ADMIN).
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "transport/transport.h"

namespace switchml::transport::xdp {

// The largest UDP payload one frame carries: a 4 KiB frame less the
// kernel's XDP headroom (256) and the headers (42).
inline constexpr size_t kMaxDatagramBytes = 4096 - 256 - 42;

class AfXdpTransport final : public Transport {
 public:
  // `interface`: the interface to use; empty: the one that holds the address
  // an endpoint is opened on (which must then not be 0.0.0.0).
  explicit AfXdpTransport(std::string interface = "");
  ~AfXdpTransport() override;

  std::string name() const override { return "af_xdp"; }
  StatusOr<std::unique_ptr<Endpoint>> Open(const Address& local,
                                           const EndpointOptions& options) override;
  StatusOr<std::unique_ptr<Endpoint>> JoinGroup(const Address& group, in_addr interface,
                                                const EndpointOptions& options) override;
  // The kernel's route, its MTU capped at what one frame carries.
  StatusOr<Route> RouteToward(const Address& peer) override;

  class Attachment;  // the XDP program on one interface (af_xdp_transport.cc)

 private:
  std::string interface_;
  std::mutex mu_;
  std::map<int, std::weak_ptr<Attachment>> attached_;  // by interface index; guarded by mu_
};

}  // namespace switchml::transport::xdp
