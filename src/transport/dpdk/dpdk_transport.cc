#include "transport/dpdk/dpdk_transport.h"

#include <sys/socket.h>
#include <unistd.h>

#include <optional>

#include "net/address.h"
#include "transport/dpdk/eal.h"
#include "transport/dpdk/endpoint.h"
#include "transport/dpdk/port.h"
#include "transport/udp/udp_socket.h"
#include "transport/udp/udp_transport.h"

namespace switchml::transport::dpdk {
namespace {

// Whether the kernel holds `address` on one of its interfaces (a port driven
// through net_af_packet or net_af_xdp), so its UDP port can be held there.
bool KernelHasAddress(in_addr address) {
  const int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr = address;
  const bool bound = bind(fd, reinterpret_cast<const sockaddr*>(&a), sizeof(a)) == 0;
  close(fd);
  return bound;
}

}  // namespace

DpdkTransport::DpdkTransport(DpdkOptions options) : options_(std::move(options)) {}
DpdkTransport::~DpdkTransport() = default;

StatusOr<std::shared_ptr<Port>> DpdkTransport::FindPort() {
  std::lock_guard lock(mu_);
  if (port_ != nullptr) return port_;
  if (Status s = StartEal(options_.eal_args); !s.ok()) return s;
  auto port = Port::Find(options_.port);
  if (!port.ok()) return port.status();
  port_ = port.value();
  return port_;
}

StatusOr<std::optional<in_addr>> DpdkTransport::ConfiguredAddress() const {
  if (options_.address.empty()) return std::optional<in_addr>();
  auto address = net::ParseAddress(options_.address, 0);
  if (!address.ok()) return address.status();
  return std::optional<in_addr>(address.value().sin_addr);
}

StatusOr<std::unique_ptr<Endpoint>> DpdkTransport::Open(const Address& requested,
                                                        const EndpointOptions& options) {
  auto port = FindPort();
  if (!port.ok()) return port.status();
  Address local = requested;
  local.sin_family = AF_INET;
  auto configured = ConfiguredAddress();
  if (!configured.ok()) return configured.status();
  if (configured.value()) {
    if (local.sin_addr.s_addr != INADDR_ANY &&
        local.sin_addr.s_addr != configured.value()->s_addr) {
      return InvalidArgument("dpdk: cannot open " + net::FormatAddress(requested) + " on " +
                             PortText(port.value()->name()) + ", whose address is " +
                             options_.address);
    }
    local.sin_addr = *configured.value();
  }
  if (local.sin_addr.s_addr == INADDR_ANY) {
    return InvalidArgument(
        "dpdk: an endpoint needs its address: bind one, or set dpdk_address "
        "(--dpdk-address) to the port's");
  }
  const size_t most = size_t(port.value()->mtu()) - 28;
  if (options.claim_buffers && options.max_datagram_bytes > most) {
    return InvalidArgument("dpdk: " + PortText(port.value()->name()) +
                           " carries datagrams of at most " + std::to_string(most) +
                           " bytes (MTU " + std::to_string(port.value()->mtu()) + "), not " +
                           std::to_string(options.max_datagram_bytes));
  }
  // The kernel holds the port where it has the address (a virtual device).
  std::optional<udp::UdpSocket> holder;
  if (KernelHasAddress(local.sin_addr)) {
    auto socket = udp::UdpSocket::Bind(local, 4096);
    if (!socket.ok()) return socket.status();
    local.sin_port = socket.value().LocalAddress().sin_port;
    holder = std::move(socket).value();
  }
  auto ring =
      port.value()->Take(options.shard, std::max<uint32_t>(options.shards, 1), local.sin_port);
  if (!ring.ok()) return ring.status();
  return MakeEndpoint(port.value(), options.shard, ring.value(), local, std::move(holder), options);
}

StatusOr<std::unique_ptr<Endpoint>> DpdkTransport::JoinGroup(const Address&, in_addr,
                                                             const EndpointOptions&) {
  return Status(StatusCode::kFailedPrecondition,
                "dpdk receives no multicast (set result_multicast = false)");
}

StatusOr<Route> DpdkTransport::RouteToward(const Address& peer) {
  auto port = FindPort();
  if (!port.ok()) return port.status();
  Route route;
  auto configured = ConfiguredAddress();
  if (!configured.ok()) return configured.status();
  if (configured.value()) {
    route.local = *configured.value();
  } else {
    auto kernel = udp::UdpTransport().RouteToward(peer);
    if (!kernel.ok()) return kernel.status();
    route.local = kernel.value().local;
  }
  route.mtu = port.value()->mtu();
  return route;
}

}  // namespace switchml::transport::dpdk
