// Where an Assignment (proto/switchml/control.proto) says to send data:
// read the same way by a worker and by a rack switch toward its upstream.
// Everything in it is untrusted.
#pragma once

#include <netinet/in.h>

#include <cstdint>
#include <vector>

#include "switchml/control.pb.h"
#include "switchml/status.h"

namespace switchml {

struct AssignedDataSockets {
  sockaddr_in address{};        // port 0; the ports follow
  std::vector<uint16_t> ports;  // one per switch data thread; thread t uses ports[t % size]
};

// The data address (a numeric IPv4 address, or `control`'s host when the
// assignment names none) and the data ports. Errors name the bad value.
StatusOr<AssignedDataSockets> AssignedData(const control::v1::Assignment& a,
                                           const sockaddr_in& control);

}  // namespace switchml
