#include "transport/transport.h"

#include "transport/udp/udp_transport.h"
#ifdef SWITCHML_HAVE_AF_XDP
#include "transport/xdp/af_xdp_transport.h"
#endif

namespace switchml::transport {

std::vector<std::string> TransportNames() {
#ifdef SWITCHML_HAVE_AF_XDP
  return {"udp", "af_xdp"};
#else
  return {"udp"};
#endif
}

StatusOr<std::shared_ptr<Transport>> MakeTransport(const std::string& name,
                                                   const TransportOptions& options) {
  if (name == "udp") return std::shared_ptr<Transport>(std::make_shared<udp::UdpTransport>());
#ifdef SWITCHML_HAVE_AF_XDP
  if (name == "af_xdp") {
    return std::shared_ptr<Transport>(std::make_shared<xdp::AfXdpTransport>(options.interface));
  }
#else
  (void)options;
  if (name == "af_xdp") {
    return InvalidArgument(
        "transport 'af_xdp' is not in this build (it needs libxdp-dev and libbpf-dev at build "
        "time: ./scripts/install-deps, then rebuild); use udp");
  }
#endif
  std::string known;
  for (const std::string& n : TransportNames()) known += (known.empty() ? "" : ", ") + n;
  return InvalidArgument("unknown transport '" + name.substr(0, 64) + "'; use one of: " + known);
}

Status CheckTransportName(const std::string& name, const std::string& field) {
  auto transport = MakeTransport(name);
  if (transport.ok()) return Status::Ok();
  return InvalidArgument(field + ": " + transport.status().message());
}

}  // namespace switchml::transport
