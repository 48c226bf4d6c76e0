#include "transport/dpdk/port.h"

#include <arpa/inet.h>
#include <net/if.h>
#include <rte_errno.h>
#include <rte_mbuf.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstring>
#include <map>

#include "transport/dpdk/eal.h"

namespace switchml::transport::dpdk {
namespace {

constexpr uint16_t kQueueDescriptors = 1024;
constexpr uint32_t kHandOffRing = 1024;  // a power of two
constexpr uint32_t kMbufsPerQueue = 4 * 1024 + 512;
constexpr uint32_t kMbufCache = 256;

// The MTU of the kernel interface `index`; 0 if unknown.
uint16_t KernelMtu(unsigned index) {
  ifreq request{};
  if (if_indextoname(index, request.ifr_name) == nullptr) return 0;
  const int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return 0;
  const bool known = ioctl(fd, SIOCGIFMTU, &request) == 0;
  close(fd);
  return known && request.ifr_mtu > 0 && request.ifr_mtu <= 65535 ? uint16_t(request.ifr_mtu) : 0;
}

}  // namespace

std::string PortText(const std::string& name) { return "dpdk port " + name; }

Status Failed(const std::string& what, int error, const std::string& fix) {
  const std::string said = LastEalLogLine();
  return Status(StatusCode::kFailedPrecondition,
                "dpdk: " + what + ": " + rte_strerror(error < 0 ? -error : error) +
                    (said.empty() ? "" : " (DPDK: " + said + ")") + "; " + fix);
}

StatusOr<std::shared_ptr<Port>> Port::Find(const std::string& name) {
  static std::mutex registry_mu;
  static std::map<uint16_t, std::shared_ptr<Port>> registry;  // ports live as long as the process
  uint16_t id = 0;
  if (name.empty()) {
    const uint16_t count = rte_eth_dev_count_avail();
    if (count == 0) {
      return Status(StatusCode::kFailedPrecondition,
                    "dpdk: the EAL found no port; give it one device (-a PCI_ADDRESS, or "
                    "--vdev=net_af_packet0,iface=IFACE, in the EAL arguments)");
    }
    if (count > 1) {
      return Status(StatusCode::kFailedPrecondition,
                    "dpdk: the EAL found " + std::to_string(count) +
                        " ports; name the one to use (dpdk_port, --dpdk-port)");
    }
    uint16_t only = 0;
    RTE_ETH_FOREACH_DEV(only) { id = only; }
  } else if (rte_eth_dev_get_port_by_name(name.c_str(), &id) != 0) {
    return Status(StatusCode::kNotFound,
                  "dpdk: no port " + name +
                      " (give the EAL its device: -a PCI_ADDRESS, or --vdev=" + name +
                      ",iface=IFACE for a kernel interface)");
  }
  std::lock_guard lock(registry_mu);
  std::shared_ptr<Port>& port = registry[id];
  if (port == nullptr) {
    port.reset(new Port(id));
    if (Status s = port->ReadInfo(); !s.ok()) {
      registry.erase(id);
      return s;
    }
  }
  return port;
}

StatusOr<rte_ring*> Port::Take(uint32_t shard, uint32_t shards, uint16_t& udp_port) {
  std::lock_guard lock(mu_);
  if (shards == 0 || shards > kMaxShards || shard >= shards) {
    return InvalidArgument("dpdk: shard " + std::to_string(shard) + " of " +
                           std::to_string(shards) + " (at most " + std::to_string(kMaxShards) +
                           " threads share a port)");
  }
  const bool any_taken =
      std::any_of(shares_.begin(), shares_.end(), [](const Share& s) { return s.taken; });
  if (!any_taken && shards != queues_) {
    if (Status s = Configure(shards); !s.ok()) return s;
  } else if (shards != queues_) {
    return Status(StatusCode::kFailedPrecondition,
                  PortText(name_) + " is shared by " + std::to_string(queues_) +
                      " threads of this process, not " + std::to_string(shards));
  }
  if (udp_port == 0) udp_port = FreeUdpPort();
  for (const Share& s : shares_) {
    if (s.taken && s.udp_port.load(std::memory_order_relaxed) == udp_port) {
      return Status(StatusCode::kAlreadyExists, PortText(name_) + ": UDP port " +
                                                    std::to_string(ntohs(udp_port)) +
                                                    " is taken by another endpoint");
    }
  }
  Share& share = shares_[shard];
  if (share.taken) {
    return Status(StatusCode::kAlreadyExists, PortText(name_) + ": queue " + std::to_string(shard) +
                                                  " is taken (one endpoint per thread and queue)");
  }
  share.taken = true;
  share.udp_port.store(udp_port, std::memory_order_release);
  return share.ring;
}

void Port::Release(uint32_t shard) {
  std::lock_guard lock(mu_);
  Share& share = shares_[shard];
  share.udp_port.store(0, std::memory_order_release);
  share.taken = false;
  // Hand-overs that came too late go back to the pool.
  void* m = nullptr;
  while (rte_ring_dequeue(share.ring, &m) == 0) rte_pktmbuf_free(static_cast<rte_mbuf*>(m));
}

Status Port::ReadInfo() {
  char name[RTE_ETH_NAME_MAX_LEN] = {};
  rte_eth_dev_get_name_by_port(id_, name);
  name_ = name;
  rte_ether_addr mac{};
  if (int e = rte_eth_macaddr_get(id_, &mac); e != 0) {
    return Failed("reading the MAC of " + PortText(name_), e, "check the device");
  }
  std::memcpy(mac_.data(), mac.addr_bytes, 6);
  // A kernel interface's (net_af_packet, net_af_xdp) is the kernel's MTU;
  // DPDK reports its own default for those.
  rte_eth_dev_info info{};
  uint16_t mtu = 0;
  if (rte_eth_dev_info_get(id_, &info) == 0 && info.if_index != 0) mtu = KernelMtu(info.if_index);
  if (mtu == 0 && (rte_eth_dev_get_mtu(id_, &mtu) != 0 || mtu == 0)) mtu = RTE_ETHER_MTU;
  mtu_ = mtu;
  return Status::Ok();
}

Status Port::Configure(uint32_t queues) {
  rte_eth_dev_info info{};
  if (int e = rte_eth_dev_info_get(id_, &info); e != 0) {
    return Failed("reading " + PortText(name_), e, "check the device");
  }
  if (info.max_rx_queues < queues || info.max_tx_queues < queues) {
    return Status(StatusCode::kFailedPrecondition,
                  PortText(name_) + " has " + std::to_string(info.max_rx_queues) + " receive and " +
                      std::to_string(info.max_tx_queues) + " send queues, fewer than the " +
                      std::to_string(queues) +
                      " threads that share it, which need one each (fewer threads, or for "
                      "net_af_packet qpairs=" +
                      std::to_string(queues) + " in its --vdev)");
  }
  if (started_) {
    rte_eth_dev_stop(id_);
    started_ = false;
  }
  rte_mempool* old = pool_;
  if (Status s = MakePool(queues); !s.ok()) return s;
  rte_eth_conf conf{};
  // A kernel interface's MTU is the kernel's; a NIC's is set here.
  if (info.if_index == 0) conf.rxmode.mtu = uint32_t(mtu_);
  if (int e = rte_eth_dev_configure(id_, uint16_t(queues), uint16_t(queues), &conf); e != 0) {
    return Failed("configuring " + PortText(name_), e, "check the device");
  }
  if (Status s = SetUpQueues(queues); !s.ok()) return s;
  if (int e = rte_eth_dev_start(id_); e != 0) {
    return Failed("starting " + PortText(name_), e, "check the device and its link");
  }
  started_ = true;
  queues_ = queues;
  if (old != nullptr) rte_mempool_free(old);  // its mbufs went back with the old queues
  return Status::Ok();
}

Status Port::MakePool(uint32_t queues) {
  // A frame of the MTU, with room to spare for a driver whose receive
  // frames are larger than that: net_af_packet's framesz, a power of two
  // at least the MTU + 64 (e.g. 2048 for 1500, 16384 for 9000).
  const uint32_t room = std::max<uint32_t>(
      RTE_MBUF_DEFAULT_DATAROOM, rte_align32pow2(uint32_t(mtu_) + RTE_ETHER_HDR_LEN + 4 + 256));
  char name[RTE_MEMPOOL_NAMESIZE];
  snprintf(name, sizeof(name), "switchml%u_%u", unsigned(id_), ++pools_made_);
  rte_mempool* pool = rte_pktmbuf_pool_create(name, queues * kMbufsPerQueue, kMbufCache, 0,
                                              uint16_t(RTE_PKTMBUF_HEADROOM + room),
                                              int(rte_eth_dev_socket_id(id_)));
  if (pool == nullptr) {
    return Failed("allocating " + std::to_string(queues * kMbufsPerQueue) + " packet buffers",
                  rte_errno,
                  "give the EAL more memory (-m, or more hugepages) or use fewer threads");
  }
  pool_ = pool;
  return Status::Ok();
}

Status Port::SetUpQueues(uint32_t queues) {
  uint16_t rx_descriptors = kQueueDescriptors, tx_descriptors = kQueueDescriptors;
  rte_eth_dev_adjust_nb_rx_tx_desc(id_, &rx_descriptors, &tx_descriptors);
  const unsigned socket = unsigned(rte_eth_dev_socket_id(id_));
  for (uint16_t q = 0; q < queues; ++q) {
    if (int e = rte_eth_rx_queue_setup(id_, q, rx_descriptors, socket, nullptr, pool_); e != 0) {
      return Failed("setting up receive queue " + std::to_string(q) + " of " + PortText(name_), e,
                    "check the device");
    }
    if (int e = rte_eth_tx_queue_setup(id_, q, tx_descriptors, socket, nullptr); e != 0) {
      return Failed("setting up send queue " + std::to_string(q) + " of " + PortText(name_), e,
                    "check the device");
    }
    Share& share = shares_[q];
    if (share.ring != nullptr) continue;
    char name[RTE_RING_NAMESIZE];
    snprintf(name, sizeof(name), "switchml%u_q%u", unsigned(id_), unsigned(q));
    share.ring = rte_ring_create(name, kHandOffRing, int(socket), RING_F_SC_DEQ);
    if (share.ring == nullptr) {
      return Failed("creating a hand-over ring", rte_errno, "give the EAL more memory (-m)");
    }
  }
  return Status::Ok();
}

uint16_t Port::FreeUdpPort() {
  for (;;) {
    const uint16_t port = htons(uint16_t(49152 + next_ephemeral_++ % 16384));
    if (std::none_of(shares_.begin(), shares_.end(), [&](const Share& s) {
          return s.udp_port.load(std::memory_order_relaxed) == port;
        })) {
      return port;
    }
  }
}

}  // namespace switchml::transport::dpdk
