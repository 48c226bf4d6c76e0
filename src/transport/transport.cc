#include "transport/transport.h"

#include "transport/udp/udp_socket.h"
#include "transport/udp/udp_transport.h"
#ifdef SWITCHML_HAVE_AF_XDP
#include "transport/xdp/af_xdp_transport.h"
#endif
#ifdef SWITCHML_HAVE_DPDK
#include "transport/dpdk/dpdk_transport.h"
#endif

namespace switchml::transport {

std::vector<std::string> TransportNames() {
  std::vector<std::string> names{"udp"};
#ifdef SWITCHML_HAVE_AF_XDP
  names.push_back("af_xdp");
#endif
#ifdef SWITCHML_HAVE_DPDK
  names.push_back("dpdk");
#endif
  return names;
}

StatusOr<std::shared_ptr<Transport>> MakeTransport(const std::string& name,
                                                   const TransportOptions& options) {
  if (name == "udp") return std::shared_ptr<Transport>(std::make_shared<udp::UdpTransport>());
#ifdef SWITCHML_HAVE_AF_XDP
  if (name == "af_xdp") {
    return std::shared_ptr<Transport>(
        std::make_shared<xdp::AfXdpTransport>(options.af_xdp.interface));
  }
#else
  if (name == "af_xdp") {
    return InvalidArgument(
        "transport 'af_xdp' is not in this build (it needs libxdp-dev and libbpf-dev at build "
        "time: ./scripts/install-deps, then rebuild); use udp");
  }
#endif
#ifdef SWITCHML_HAVE_DPDK
  if (name == "dpdk") {
    return std::shared_ptr<Transport>(std::make_shared<dpdk::DpdkTransport>(options.dpdk));
  }
#else
  if (name == "dpdk") {
    return InvalidArgument(
        "transport 'dpdk' is not in this build (it needs libdpdk-dev at build time: "
        "./scripts/install-deps, then rebuild); use udp");
  }
#endif
  (void)options;
  std::string known;
  for (const std::string& n : TransportNames()) known += (known.empty() ? "" : ", ") + n;
  return InvalidArgument("unknown transport '" + name.substr(0, 64) + "'; use one of: " + known);
}

size_t MostDatagramsPerReceive(const EndpointOptions& o) {
  const size_t coalesced = o.udp.offload ? udp::CoalescedBuffers(o) * udp::kMaxSegments : 0;
  return std::max(o.receive_batch, coalesced);
}

std::vector<pollfd> WaitDescriptors(int first, std::initializer_list<const Endpoint*> endpoints) {
  std::vector<pollfd> fds{{first, POLLIN, 0}};
  for (const Endpoint* e : endpoints) {
    if (e == nullptr) continue;
    for (const int fd : e->wait_fds()) fds.push_back({fd, POLLIN, 0});
  }
  return fds;
}

PolledEndpoints::PolledEndpoints(std::initializer_list<Endpoint*> endpoints) {
  for (Endpoint* e : endpoints) {
    if (e != nullptr && e->poll_mode()) endpoints_.push_back(e);
  }
}

bool PolledEndpoints::Ready() {
  for (Endpoint* e : endpoints_) {
    if (e->Ready()) return true;
  }
  return false;
}

Status CheckElementsPerPacket(const std::string& name, uint32_t elements, const std::string& field,
                              const std::string& hint) {
  if (name != "af_xdp" || elements <= kMaxAfXdpElementsPerPacket) return Status::Ok();
  return InvalidArgument(field + "=" + std::to_string(elements) +
                         " does not fit the af_xdp transport's 4 KiB frames; use at most " +
                         std::to_string(kMaxAfXdpElementsPerPacket) + hint);
}

Status CheckTransportName(const std::string& name, const std::string& field) {
  auto transport = MakeTransport(name);  // starts nothing: a dpdk transport starts at first use
  if (transport.ok()) return Status::Ok();
  return InvalidArgument(field + ": " + transport.status().message());
}

}  // namespace switchml::transport
