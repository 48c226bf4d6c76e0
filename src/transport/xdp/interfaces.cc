#include "transport/xdp/interfaces.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <linux/if_packet.h>
#include <net/if.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "net/address.h"

namespace switchml::transport::xdp {
namespace {

std::optional<Mac> ParseMac(const std::string& text) {
  Mac mac{};
  unsigned v[6];
  if (std::sscanf(text.c_str(), "%x:%x:%x:%x:%x:%x", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5]) !=
      6) {
    return std::nullopt;
  }
  for (int i = 0; i < 6; ++i) mac[size_t(i)] = uint8_t(v[i]);
  return mac;
}

// The gateway of the most specific route on `interface` toward `peer`
// (/proc/net/route: hexadecimal, network byte order); 0 when on-link.
uint32_t Gateway(const std::string& interface, in_addr peer) {
  std::ifstream routes("/proc/net/route");
  std::string line;
  std::getline(routes, line);  // the header
  int best_bits = -1;
  uint32_t gateway = 0;
  while (std::getline(routes, line)) {
    std::istringstream f(line);
    std::string name;
    unsigned long dest = 0, gw = 0, flags = 0, refs = 0, use = 0, metric = 0, mask = 0;
    f >> name >> std::hex >> dest >> gw >> flags >> std::dec >> refs >> use >> metric >> std::hex >>
        mask;
    if (!f || name != interface || (flags & 1) == 0) continue;  // RTF_UP
    if ((peer.s_addr & uint32_t(mask)) != uint32_t(dest)) continue;
    const int bits = __builtin_popcount(uint32_t(mask));
    if (bits > best_bits) {
      best_bits = bits;
      gateway = (flags & 2) ? uint32_t(gw) : 0;  // RTF_GATEWAY
    }
  }
  return gateway;
}

std::optional<Mac> LookUpNeighbour(const std::string& interface, in_addr hop) {
  std::ifstream table("/proc/net/arp");
  std::string line;
  std::getline(table, line);  // the header
  while (std::getline(table, line)) {
    std::istringstream f(line);
    std::string ip, type, flags, mac, mask, device;
    f >> ip >> type >> flags >> mac >> mask >> device;
    in_addr a{};
    if (!f || device != interface || inet_pton(AF_INET, ip.c_str(), &a) != 1) continue;
    // Flags 0x2: complete.
    if (a.s_addr == hop.s_addr && (std::strtoul(flags.c_str(), nullptr, 16) & 0x2)) {
      return ParseMac(mac);
    }
  }
  return std::nullopt;
}

}  // namespace

std::string FormatMac(const Mac& mac) {
  char text[18];
  std::snprintf(text, sizeof(text), "%02x:%02x:%02x:%02x:%02x:%02x", mac[0], mac[1], mac[2], mac[3],
                mac[4], mac[5]);
  return text;
}

StatusOr<Interface> FindInterface(const std::string& name, in_addr address) {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return InvalidArgument("af_xdp: cannot list the interfaces");
  Interface found;
  for (ifaddrs* i = list; i != nullptr; i = i->ifa_next) {
    if (i->ifa_addr == nullptr || i->ifa_addr->sa_family != AF_INET) continue;
    const in_addr a = reinterpret_cast<const sockaddr_in*>(i->ifa_addr)->sin_addr;
    if (name.empty() ? a.s_addr == address.s_addr : name == i->ifa_name) {
      found.name = i->ifa_name;
      found.address = a;
      break;
    }
  }
  bool have_mac = false;
  for (ifaddrs* i = list; i != nullptr && !found.name.empty(); i = i->ifa_next) {
    if (i->ifa_addr == nullptr || i->ifa_addr->sa_family != AF_PACKET) continue;
    if (found.name != i->ifa_name) continue;
    const auto* ll = reinterpret_cast<const sockaddr_ll*>(i->ifa_addr);
    if (ll->sll_halen == 6) {
      std::memcpy(found.mac.data(), ll->sll_addr, 6);
      have_mac = true;
    }
  }
  freeifaddrs(list);
  if (found.name.empty()) {
    return InvalidArgument(
        name.empty()
            ? "af_xdp: no interface holds the address " + net::FormatIp(address) +
                  "; name the interface (interface = \"eth0\", SWITCHML_INTERFACE, --interface)"
            : "af_xdp: no interface '" + name.substr(0, 64) +
                  "' with an IPv4 address; check `ip -4 addr` and --interface");
  }
  if (!have_mac) {
    return InvalidArgument("af_xdp: interface " + found.name +
                           " has no Ethernet address (loopback?); AF_XDP needs an Ethernet "
                           "interface, use --transport udp here");
  }
  found.index = int(if_nametoindex(found.name.c_str()));
  std::error_code ec;
  int queues = 0;
  for (const auto& e :
       std::filesystem::directory_iterator("/sys/class/net/" + found.name + "/queues", ec)) {
    if (e.path().filename().string().rfind("rx-", 0) == 0) ++queues;
  }
  found.rx_queues = queues > 0 ? queues : 1;
  return found;
}

StatusOr<Mac> NextHopMac(const Interface& interface, in_addr peer, int wait_ms) {
  const uint32_t gateway = Gateway(interface.name, peer);
  const in_addr hop{gateway != 0 ? gateway : peer.s_addr};
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(wait_ms);
  bool probed = false;
  while (true) {
    if (auto mac = LookUpNeighbour(interface.name, hop)) return *mac;
    if (std::chrono::steady_clock::now() >= deadline) break;
    if (!probed) {
      // Let the kernel resolve it: one datagram to the discard port.
      const int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
      if (fd >= 0) {
        sockaddr_in to{};
        to.sin_family = AF_INET;
        to.sin_addr = peer;
        to.sin_port = htons(9);
        [[maybe_unused]] ssize_t n =
            sendto(fd, "", 0, MSG_DONTWAIT, reinterpret_cast<sockaddr*>(&to), sizeof(to));
        close(fd);
      }
      probed = true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return Status(StatusCode::kFailedPrecondition,
                "af_xdp: the kernel has no neighbour entry for " + net::FormatIp(hop) + " on " +
                    interface.name + " (is " + net::FormatIp(peer) + " reachable? try `ping " +
                    net::FormatIp(peer) + "`)");
}

}  // namespace switchml::transport::xdp
