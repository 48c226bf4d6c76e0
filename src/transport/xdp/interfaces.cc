#include "transport/xdp/interfaces.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <linux/ethtool.h>
#include <linux/if_packet.h>
#include <linux/neighbour.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <linux/sockios.h>
#include <net/if.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <thread>
#include <vector>

#include "net/address.h"

namespace switchml::transport::xdp {
namespace {

// One rtnetlink request and its answers: `handle` sees each message of type
// `answer` (a dump ends with NLMSG_DONE). False when the kernel refused.
template <typename Handle>
bool AskNetlink(nlmsghdr* request, uint16_t answer, Handle&& handle) {
  const int fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);
  if (fd < 0) return false;
  sockaddr_nl kernel{};
  kernel.nl_family = AF_NETLINK;
  bool ok = sendto(fd, request, request->nlmsg_len, 0, reinterpret_cast<sockaddr*>(&kernel),
                   sizeof(kernel)) == ssize_t(request->nlmsg_len);
  std::vector<char> buffer(1 << 16);
  for (bool done = !ok; !done;) {
    const ssize_t n = recv(fd, buffer.data(), buffer.size(), 0);
    if (n <= 0) {
      ok = false;
      break;
    }
    size_t left = size_t(n);
    for (auto* m = reinterpret_cast<nlmsghdr*>(buffer.data()); NLMSG_OK(m, left);
         m = NLMSG_NEXT(m, left)) {
      if (m->nlmsg_seq != request->nlmsg_seq) continue;
      if (m->nlmsg_type == NLMSG_ERROR) {
        ok = reinterpret_cast<nlmsgerr*>(NLMSG_DATA(m))->error == 0 && ok;
        done = true;
      } else if (m->nlmsg_type == NLMSG_DONE) {
        done = true;
      } else if (m->nlmsg_type == answer) {
        handle(m);
        if ((m->nlmsg_flags & NLM_F_MULTI) == 0) done = true;
      }
    }
  }
  close(fd);
  return ok;
}

// The next hop toward `peer` on the kernel's route (RTM_GETROUTE, as `ip
// route get` asks): the route's gateway, or the peer itself when on-link;
// nullopt when the route leaves by another interface than `index`.
std::optional<in_addr> NextHop(int index, in_addr peer) {
  struct {
    nlmsghdr header;
    rtmsg route;
    char attributes[64];
  } request{};
  request.header.nlmsg_type = RTM_GETROUTE;
  request.header.nlmsg_flags = NLM_F_REQUEST;
  request.header.nlmsg_seq = 1;
  request.route.rtm_family = AF_INET;
  request.route.rtm_dst_len = 32;
  auto* dst = reinterpret_cast<rtattr*>(request.attributes);
  dst->rta_type = RTA_DST;
  dst->rta_len = RTA_LENGTH(sizeof(peer));
  std::memcpy(RTA_DATA(dst), &peer, sizeof(peer));
  request.header.nlmsg_len = NLMSG_LENGTH(sizeof(rtmsg)) + RTA_ALIGN(dst->rta_len);
  in_addr hop = peer;
  int oif = -1;
  const bool ok = AskNetlink(&request.header, RTM_NEWROUTE, [&](nlmsghdr* m) {
    int length = int(RTM_PAYLOAD(m));
    for (auto* a = RTM_RTA(static_cast<rtmsg*>(NLMSG_DATA(m))); RTA_OK(a, length);
         a = RTA_NEXT(a, length)) {
      if (a->rta_type == RTA_GATEWAY && RTA_PAYLOAD(a) == sizeof(in_addr)) {
        std::memcpy(&hop, RTA_DATA(a), sizeof(hop));
      } else if (a->rta_type == RTA_OIF && RTA_PAYLOAD(a) == sizeof(int)) {
        std::memcpy(&oif, RTA_DATA(a), sizeof(oif));
      }
    }
  });
  if (!ok || (oif >= 0 && oif != index)) return std::nullopt;
  return hop;
}

// `hop`'s link-layer address in the kernel's neighbour table of interface
// `index` (RTM_GETNEIGH, as `ip neigh` lists it), if the entry is usable.
std::optional<Mac> LookUpNeighbour(int index, in_addr hop) {
  struct {
    nlmsghdr header;
    ndmsg neighbour;
  } request{};
  request.header.nlmsg_len = NLMSG_LENGTH(sizeof(ndmsg));
  request.header.nlmsg_type = RTM_GETNEIGH;
  request.header.nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP;
  request.header.nlmsg_seq = 2;
  request.neighbour.ndm_family = AF_INET;
  std::optional<Mac> found;
  constexpr uint16_t kUsable =
      NUD_REACHABLE | NUD_STALE | NUD_DELAY | NUD_PROBE | NUD_PERMANENT | NUD_NOARP;
  AskNetlink(&request.header, RTM_NEWNEIGH, [&](nlmsghdr* m) {
    const auto* n = static_cast<ndmsg*>(NLMSG_DATA(m));
    if (n->ndm_ifindex != index || (n->ndm_state & kUsable) == 0) return;
    int length = int(m->nlmsg_len - NLMSG_LENGTH(sizeof(ndmsg)));
    bool match = false;
    Mac mac{};
    bool have_mac = false;
    for (auto* a = reinterpret_cast<rtattr*>(reinterpret_cast<char*>(NLMSG_DATA(m)) +
                                             NLMSG_ALIGN(sizeof(ndmsg)));
         RTA_OK(a, length); a = RTA_NEXT(a, length)) {
      if (a->rta_type == NDA_DST && RTA_PAYLOAD(a) == sizeof(in_addr)) {
        match = std::memcmp(RTA_DATA(a), &hop, sizeof(hop)) == 0;
      } else if (a->rta_type == NDA_LLADDR && RTA_PAYLOAD(a) == mac.size()) {
        std::memcpy(mac.data(), RTA_DATA(a), mac.size());
        have_mac = true;
      }
    }
    if (match && have_mac) found = mac;
  });
  return found;
}

// One ethtool command on interface `name`; false when refused.
bool AskEthtool(const std::string& name, void* command) {
  const int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  ifreq request{};
  std::strncpy(request.ifr_name, name.c_str(), IFNAMSIZ - 1);
  request.ifr_data = static_cast<char*>(command);
  const bool ok = ioctl(fd, SIOCETHTOOL, &request) == 0;
  close(fd);
  return ok;
}

}  // namespace

std::optional<uint32_t> SteerFlow(const Interface& interface, const sockaddr_in& local,
                                  uint32_t queue) {
  ethtool_rxnfc rule{};
  rule.cmd = ETHTOOL_SRXCLSRLINS;
  rule.fs.flow_type = UDP_V4_FLOW;
  rule.fs.h_u.udp_ip4_spec.ip4dst = local.sin_addr.s_addr;
  rule.fs.m_u.udp_ip4_spec.ip4dst = 0xFFFFFFFF;  // set bits are matched
  rule.fs.h_u.udp_ip4_spec.pdst = local.sin_port;
  rule.fs.m_u.udp_ip4_spec.pdst = 0xFFFF;
  rule.fs.ring_cookie = queue;
  rule.fs.location = RX_CLS_LOC_ANY;
  if (!AskEthtool(interface.name, &rule)) return std::nullopt;
  return rule.fs.location;
}

void RemoveFlowSteering(const Interface& interface, uint32_t location) {
  ethtool_rxnfc rule{};
  rule.cmd = ETHTOOL_SRXCLSRLDEL;
  rule.fs.location = location;
  AskEthtool(interface.name, &rule);
}

std::string FormatMac(const Mac& mac) {
  char text[18];
  std::snprintf(text, sizeof(text), "%02x:%02x:%02x:%02x:%02x:%02x", mac[0], mac[1], mac[2], mac[3],
                mac[4], mac[5]);
  return text;
}

bool IsLocalAddress(in_addr address) {
  if ((ntohl(address.s_addr) >> 24) == 127) return true;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return false;
  bool local = false;
  for (ifaddrs* i = list; i != nullptr && !local; i = i->ifa_next) {
    local = i->ifa_addr != nullptr && i->ifa_addr->sa_family == AF_INET &&
            reinterpret_cast<const sockaddr_in*>(i->ifa_addr)->sin_addr.s_addr == address.s_addr;
  }
  freeifaddrs(list);
  return local;
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
  const std::optional<in_addr> next = NextHop(interface.index, peer);
  if (!next) {
    return Status(StatusCode::kFailedPrecondition, "af_xdp: the kernel's route toward " +
                                                       net::FormatIp(peer) + " does not leave by " +
                                                       interface.name + " (check `ip route get " +
                                                       net::FormatIp(peer) + "` and --interface)");
  }
  const in_addr hop = *next;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(wait_ms);
  bool probed = false;
  while (true) {
    if (auto mac = LookUpNeighbour(interface.index, hop)) return *mac;
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
    if (std::chrono::steady_clock::now() >= deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return Status(StatusCode::kFailedPrecondition,
                "af_xdp: the kernel has no neighbour entry for " + net::FormatIp(hop) + " on " +
                    interface.name + " (is " + net::FormatIp(peer) + " reachable? try `ping " +
                    net::FormatIp(peer) + "`)");
}

}  // namespace switchml::transport::xdp
