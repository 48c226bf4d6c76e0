// IPv4 socket addresses: parsing "host:port" and printing.
#pragma once

#include <netinet/in.h>

#include <cstdint>
#include <string>

#include "switchml/status.h"

namespace switchml::net {

enum class HostNames { kResolve, kRefuse };

// Parses "host", "host:port" (host a name or dotted quad); a missing port
// becomes `default_port`. Resolves names with getaddrinfo (setup path only),
// or with HostNames::kRefuse takes dotted quads only (text from the network).
StatusOr<sockaddr_in> ParseAddress(const std::string& text, uint16_t default_port,
                                   HostNames names = HostNames::kResolve);

std::string FormatAddress(const sockaddr_in& a);  // "1.2.3.4:5"
std::string FormatIp(in_addr a);                  // "1.2.3.4"

inline bool SameAddress(const sockaddr_in& a, const sockaddr_in& b) {
  return a.sin_addr.s_addr == b.sin_addr.s_addr && a.sin_port == b.sin_port;
}

}  // namespace switchml::net
