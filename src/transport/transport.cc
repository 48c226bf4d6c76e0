#include "transport/transport.h"

#include "transport/udp/udp_transport.h"

namespace switchml::transport {

std::vector<std::string> TransportNames() { return {"udp"}; }

StatusOr<std::shared_ptr<Transport>> MakeTransport(const std::string& name) {
  if (name == "udp") return std::shared_ptr<Transport>(std::make_shared<udp::UdpTransport>());
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
