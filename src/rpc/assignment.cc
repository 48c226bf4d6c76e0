#include "rpc/assignment.h"

#include "net/address.h"

namespace switchml {

StatusOr<AssignedDataSockets> AssignedData(const control::v1::Assignment& a,
                                           const sockaddr_in& control) {
  AssignedDataSockets out;
  out.address = control;
  if (!a.data_address().empty()) {
    auto parsed = net::ParseAddress(a.data_address(), 0, net::HostNames::kRefuse);
    if (!parsed.ok()) {
      return Status(StatusCode::kInternal, "the switch sent an invalid data address '" +
                                               a.data_address().substr(0, 64) + "'");
    }
    out.address = parsed.value();
  }
  out.address.sin_port = 0;
  std::vector<uint32_t> ports(a.data_ports().begin(), a.data_ports().end());
  if (ports.empty()) ports.push_back(a.data_port());
  for (uint32_t port : ports) {
    if (port == 0 || port > 65535) {
      return Status(StatusCode::kInternal,
                    "the switch sent an invalid data port " + std::to_string(port));
    }
    out.ports.push_back(uint16_t(port));
  }
  return out;
}

}  // namespace switchml
