#include "net/address.h"

#include <arpa/inet.h>
#include <netdb.h>

#include <cstring>

namespace switchml::net {

StatusOr<sockaddr_in> ParseAddress(const std::string& text, uint16_t default_port,
                                   HostNames names) {
  std::string host = text;
  uint32_t port = default_port;
  if (const size_t colon = text.rfind(':'); colon != std::string::npos) {
    host = text.substr(0, colon);
    const std::string digits = text.substr(colon + 1);
    char* end = nullptr;
    const unsigned long p = std::strtoul(digits.c_str(), &end, 10);
    if (digits.empty() || *end != '\0' || p > 65535) {
      return InvalidArgument("address '" + text + "' has an invalid port '" + digits +
                             "'; use HOST:PORT with a port in 0..65535");
    }
    port = uint32_t(p);
  }
  if (host.empty()) return InvalidArgument("address '" + text + "' has no host; use HOST:PORT");
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_DGRAM;
  if (names == HostNames::kRefuse) hints.ai_flags = AI_NUMERICHOST;
  addrinfo* found = nullptr;
  if (int rc = getaddrinfo(host.c_str(), nullptr, &hints, &found); rc != 0 || found == nullptr) {
    if (names == HostNames::kRefuse) {
      return InvalidArgument("address '" + text + "' has no numeric IPv4 host");
    }
    return InvalidArgument("cannot resolve host '" + host + "' of address '" + text +
                           "': " + gai_strerror(rc) + " (switchml speaks IPv4)");
  }
  sockaddr_in a{};
  std::memcpy(&a, found->ai_addr, sizeof(a));
  freeaddrinfo(found);
  a.sin_port = htons(uint16_t(port));
  return a;
}

std::string FormatIp(in_addr a) {
  char ip[INET_ADDRSTRLEN] = "?";
  inet_ntop(AF_INET, &a, ip, sizeof(ip));
  return ip;
}

std::string FormatAddress(const sockaddr_in& a) {
  return FormatIp(a.sin_addr) + ":" + std::to_string(ntohs(a.sin_port));
}

}  // namespace switchml::net
