#include "transport/xdp/af_xdp_transport.h"

#include <arpa/inet.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <linux/if_link.h>
#include <linux/if_xdp.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>
#include <xdp/xsk.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <vector>

#include "net/address.h"
#include "transport/udp/udp_socket.h"
#include "transport/udp/udp_transport.h"
#include "transport/xdp/frames.h"
#include "transport/xdp/interfaces.h"
#include "wire/wire_format.h"

// redirect.bpf.c, compiled by the build and embedded (redirect_bpf_object.cc).
extern const unsigned char kSwitchmlRedirectBpfObject[];
extern const size_t kSwitchmlRedirectBpfObjectSize;

namespace switchml::transport::xdp {
namespace {

constexpr uint32_t kFrameBytes = XSK_UMEM__DEFAULT_FRAME_SIZE;  // 4096
constexpr uint32_t kRingSize = 2048;
// Half the frames receive (all of them in the fill ring at first), half send.
constexpr uint32_t kFrames = 2 * kRingSize;
constexpr uint32_t kLearnedMacs = 1024;  // a power of two
// The configuration's limit is the largest packet size that fits a frame.
static_assert(MaxPacketBytes(kMaxAfXdpElementsPerPacket) <= kMaxDatagramBytes &&
              MaxPacketBytes(2 * kMaxAfXdpElementsPerPacket) > kMaxDatagramBytes);

std::string Errno(int error) { return std::strerror(error < 0 ? -error : error); }

Status Failed(const std::string& what, int error, const std::string& fix) {
  return Status(StatusCode::kFailedPrecondition,
                "af_xdp: " + what + ": " + Errno(error) + " (" + fix + ")");
}

const char* kNeedsRights =
    "AF_XDP needs root (CAP_NET_ADMIN and CAP_BPF) and a kernel with XDP; or use --transport udp";

}  // namespace

// The XDP program on one interface, shared by this process's endpoints. It
// is attached by a BPF link that only this process holds: the kernel
// detaches the program when the link's last descriptor closes, so when the
// last endpoint closes and also when the process dies in any way (kill -9, a
// crash). The kernel lets one XDP program hold an interface, so a second
// process on it is refused, in one line that names what holds it.
class AfXdpTransport::Attachment {
 public:
  static StatusOr<std::shared_ptr<Attachment>> Attach(const Interface& interface) {
    bpf_object* object =
        bpf_object__open_mem(kSwitchmlRedirectBpfObject, kSwitchmlRedirectBpfObjectSize, nullptr);
    if (object == nullptr) return Failed("opening the XDP program", errno, kNeedsRights);
    auto attachment = std::shared_ptr<Attachment>(new Attachment(interface, object));
    if (int error = bpf_object__load(object); error != 0) {
      return Failed("loading the XDP program", error, kNeedsRights);
    }
    bpf_program* program = bpf_object__find_program_by_name(object, "switchml_redirect");
    attachment->xsks_fd_ = bpf_object__find_map_fd_by_name(object, "switchml_xsks");
    attachment->ports_fd_ = bpf_object__find_map_fd_by_name(object, "switchml_ports");
    if (program == nullptr || attachment->xsks_fd_ < 0 || attachment->ports_fd_ < 0) {
      return Status(StatusCode::kInternal, "af_xdp: the XDP program has no switchml maps");
    }
    // The driver's own (native) XDP where it has it (veth does), else
    // generic (SKB) mode, which every driver has.
    for (const uint32_t mode : {uint32_t(XDP_FLAGS_DRV_MODE), uint32_t(XDP_FLAGS_SKB_MODE)}) {
      LIBBPF_OPTS(bpf_link_create_opts, options, .flags = mode);
      attachment->link_fd_ =
          bpf_link_create(bpf_program__fd(program), interface.index, BPF_XDP, &options);
      if (attachment->link_fd_ >= 0) {
        attachment->native_ = mode == XDP_FLAGS_DRV_MODE;
        return attachment;
      }
    }
    const int error = errno;
    if (const std::string holder = AttachedProgram(interface.index); !holder.empty()) {
      return Status(StatusCode::kFailedPrecondition,
                    "af_xdp: interface " + interface.name + " already runs the XDP program " +
                        holder +
                        (holder.find("switchml") != std::string::npos
                             ? " of another switchml process (one process per interface: stop "
                               "it, use another interface, or --transport udp)"
                             : " (`ip link set dev " + interface.name +
                                   " xdp off` removes it, or use --transport udp)"));
    }
    return Failed("attaching the XDP program to " + interface.name, error, kNeedsRights);
  }
  ~Attachment() {
    if (link_fd_ >= 0) close(link_fd_);  // detaches the program
    bpf_object__close(object_);
  }

  const Interface& interface() const { return interface_; }
  bool native() const { return native_; }
  int xsks_fd() const { return xsks_fd_; }

  // Redirects UDP to `port` on `address` (0: any) to the queue's socket.
  Status AddPort(uint16_t port_be, uint32_t address_be) {
    if (bpf_map_update_elem(ports_fd_, &port_be, &address_be, BPF_ANY) != 0) {
      return Failed("adding a port to the XDP program", errno, kNeedsRights);
    }
    return Status::Ok();
  }
  void RemovePort(uint16_t port_be) { bpf_map_delete_elem(ports_fd_, &port_be); }

  // Queue 0, for one endpoint at a time.
  bool TakeQueue() {
    std::lock_guard lock(mu_);
    return !std::exchange(queue_taken_, true);
  }
  void ReleaseQueue() {
    std::lock_guard lock(mu_);
    queue_taken_ = false;
  }

 private:
  Attachment(const Interface& interface, bpf_object* object)
      : interface_(interface), object_(object) {}

  // The XDP program attached to interface `index` in any mode, as "'name'
  // (id N)"; empty when none is.
  static std::string AttachedProgram(int index) {
    LIBBPF_OPTS(bpf_xdp_query_opts, query);
    if (bpf_xdp_query(index, 0, &query) != 0) return "";
    uint32_t id = 0;
    for (const uint32_t candidate :
         {query.prog_id, query.drv_prog_id, query.skb_prog_id, query.hw_prog_id}) {
      if (id == 0) id = candidate;
    }
    if (id == 0) return "";
    std::string name = "?";
    if (const int fd = bpf_prog_get_fd_by_id(id); fd >= 0) {
      bpf_prog_info info{};
      uint32_t length = sizeof(info);
      if (bpf_obj_get_info_by_fd(fd, &info, &length) == 0) name = info.name;
      close(fd);
    }
    return "'" + name + "' (id " + std::to_string(id) + ")";
  }

  Interface interface_;
  bpf_object* object_;
  int link_fd_ = -1;
  bool native_ = false;
  int xsks_fd_ = -1;
  int ports_fd_ = -1;
  std::mutex mu_;
  bool queue_taken_ = false;  // guarded by mu_
};

namespace {

class AfXdpEndpoint final : public Endpoint {
 public:
  AfXdpEndpoint(std::shared_ptr<AfXdpTransport::Attachment> attachment, udp::UdpSocket port_holder,
                Address local)
      : attachment_(std::move(attachment)), port_holder_(std::move(port_holder)), local_(local) {}

  ~AfXdpEndpoint() override {
    if (port_added_) attachment_->RemovePort(local_.sin_port);
    if (xsk_ != nullptr) xsk_socket__delete(xsk_);
    if (umem_ != nullptr) xsk_umem__delete(umem_);
    if (area_ != nullptr) munmap(area_, size_t(kFrames) * kFrameBytes);
    if (queue_taken_) attachment_->ReleaseQueue();
  }

  Status Setup(const EndpointOptions& options) {
    if (!attachment_->TakeQueue()) {
      return InvalidArgument("af_xdp: interface " + attachment_->interface().name +
                             " already has an endpoint of this process; this version serves "
                             "one per interface (threads = 1, --data-threads 1)");
    }
    queue_taken_ = true;
    area_ = mmap(nullptr, size_t(kFrames) * kFrameBytes, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (area_ == MAP_FAILED) {
      area_ = nullptr;
      return Failed("allocating frame memory", errno, "free some memory");
    }
    xsk_umem_config umem{};
    umem.fill_size = kRingSize;
    umem.comp_size = kRingSize;
    umem.frame_size = kFrameBytes;
    umem.frame_headroom = 0;
    if (int error = xsk_umem__create(&umem_, area_, size_t(kFrames) * kFrameBytes, &fill_,
                                     &completion_, &umem);
        error != 0) {
      umem_ = nullptr;
      return Failed("creating the socket's frame memory", error, kNeedsRights);
    }
    const Interface& i = attachment_->interface();
    xsk_socket_config config{};
    config.rx_size = kRingSize;
    config.tx_size = kRingSize;
    config.libxdp_flags = XSK_LIBXDP_FLAGS__INHIBIT_PROG_LOAD;
    config.bind_flags = XDP_USE_NEED_WAKEUP;
    int error = xsk_socket__create(&xsk_, i.name.c_str(), 0, umem_, &rx_, &tx_, &config);
    if (error == 0) {
      zero_copy_ = true;  // the driver took the default (zero-copy where it can)
    } else {
      config.bind_flags = XDP_USE_NEED_WAKEUP | XDP_COPY;
      error = xsk_socket__create(&xsk_, i.name.c_str(), 0, umem_, &rx_, &tx_, &config);
    }
    if (error != 0) {
      xsk_ = nullptr;
      return Failed("creating the AF_XDP socket on " + i.name + " queue 0", error, kNeedsRights);
    }
    xdp_options modes{};
    socklen_t length = sizeof(modes);
    if (getsockopt(xsk_socket__fd(xsk_), SOL_XDP, XDP_OPTIONS, &modes, &length) == 0) {
      zero_copy_ = (modes.flags & XDP_OPTIONS_ZEROCOPY) != 0;
    }
    if (int e = xsk_socket__update_xskmap(xsk_, attachment_->xsks_fd()); e != 0) {
      return Failed("registering the AF_XDP socket", e, kNeedsRights);
    }
    // Receive frames into the fill ring; send frames onto the free list.
    uint32_t at = 0;
    if (xsk_ring_prod__reserve(&fill_, kRingSize, &at) != kRingSize) {
      return Status(StatusCode::kInternal, "af_xdp: the fill ring is short");
    }
    for (uint32_t f = 0; f < kRingSize; ++f)
      *xsk_ring_prod__fill_addr(&fill_, at + f) = uint64_t(f) * kFrameBytes;
    xsk_ring_prod__submit(&fill_, kRingSize);
    free_tx_.reserve(kRingSize);
    for (uint32_t f = kRingSize; f < kFrames; ++f) free_tx_.push_back(uint64_t(f) * kFrameBytes);
    held_.reserve(kRingSize);
    scratch_.resize(kMaxDatagramBytes);  // where Claim() writes when no frame is free
    Reconfigure(options);
    if (Status s = attachment_->AddPort(local_.sin_port, local_.sin_addr.s_addr); !s.ok()) return s;
    port_added_ = true;
    return Status::Ok();
  }

  Address local_address() const override { return local_; }

  Status Connect(const Address& peer) override {
    auto mac = NextHopMac(attachment_->interface(), peer.sin_addr);
    if (!mac.ok()) return mac.status();
    peer_ = peer;
    peer_mac_ = mac.value();
    connected_ = true;
    return Status::Ok();
  }

  Status AddPeer(const Address& peer) override {
    auto mac = NextHopMac(attachment_->interface(), peer.sin_addr);
    if (!mac.ok()) return mac.status();
    for (LearnedMac& e : pinned_) {
      if (e.address == peer.sin_addr.s_addr) {
        e.mac = mac.value();
        return Status::Ok();
      }
    }
    if (pinned_.size() >= kMaxPinnedPeers) {
      return Status(StatusCode::kResourceExhausted, "af_xdp: an endpoint sends to at most " +
                                                        std::to_string(kMaxPinnedPeers) +
                                                        " announced peers");
    }
    pinned_.push_back({peer.sin_addr.s_addr, mac.value()});
    return Status::Ok();
  }

  Status SetHostLocalMulticast() override {
    return Status(StatusCode::kFailedPrecondition,
                  "af_xdp sends no multicast (results go by unicast)");
  }
  int poll_fd() const override { return xsk_socket__fd(xsk_); }

  void Reconfigure(const EndpointOptions& options) override {
    options_ = options;
    options_.receive_batch = std::clamp<size_t>(options.receive_batch, 1, kRingSize);
    options_.send_queue = std::clamp<size_t>(options.send_queue, 1, kRingSize);
    datagrams_.resize(options_.receive_batch);
    sources_.resize(options_.receive_batch);
  }

  std::string offload() const override {
    return std::string(zero_copy_ ? "af_xdp zero-copy" : "af_xdp copy") +
           (attachment_->native() ? ", native XDP" : ", generic XDP");
  }

  std::span<uint8_t> Claim() override {
    if (free_tx_.empty()) Flush();
    const size_t room = std::min(options_.max_datagram_bytes, kMaxDatagramBytes);
    if (free_tx_.empty()) {
      claimed_ = kNone;  // Commit() counts the send as dropped
      return {scratch_.data(), room};
    }
    claimed_ = free_tx_.back();
    free_tx_.pop_back();
    return {Frame(claimed_) + kHeaderBytes, room};
  }

  void Commit(size_t bytes, const Address* dest) override {
    const uint64_t frame = std::exchange(claimed_, kNone);
    if (frame == kNone) {
      ++counters_.send_dropped;
      return;
    }
    Queue(frame, bytes, dest != nullptr ? *dest : peer_);
  }

  void SendRef(std::span<const uint8_t> bytes, const Address& dest) override {
    if (bytes.size() > kMaxDatagramBytes) {
      ++counters_.send_dropped;
      return;
    }
    std::span<uint8_t> buffer = Claim();
    if (claimed_ == kNone) {
      ++counters_.send_dropped;
      return;
    }
    std::memcpy(buffer.data(), bytes.data(), bytes.size());
    Commit(bytes.size(), &dest);
  }

  void Flush() override {
    if (queued_ != 0) {
      xsk_ring_prod__submit(&tx_, queued_);
      in_flight_ += queued_;
      counters_.sent += queued_;
      queued_ = 0;
    }
    // In copy mode every send call moves a bounded number of frames: kick
    // until the ring is empty or the kernel stops taking them.
    for (int kick = 0; in_flight_ != 0 && kick < 64; ++kick) {
      if (xsk_ring_prod__needs_wakeup(&tx_) || !zero_copy_) {
        if (sendto(xsk_socket__fd(xsk_), nullptr, 0, MSG_DONTWAIT, nullptr, 0) < 0 &&
            errno != EAGAIN && errno != EBUSY && errno != ENOBUFS && errno != ENETDOWN) {
          break;
        }
      }
      const uint32_t done = Reclaim();
      if (done == 0 && zero_copy_) break;
    }
  }

  std::span<const Datagram> Receive() override {
    ReturnHeld();
    uint32_t at = 0;
    const uint32_t n = xsk_ring_cons__peek(&rx_, uint32_t(options_.receive_batch), &at);
    size_t count = 0;
    for (uint32_t i = 0; i < n; ++i) {
      const xdp_desc* d = xsk_ring_cons__rx_desc(&rx_, at + i);
      held_.push_back(xsk_umem__extract_addr(d->addr));
      const uint8_t* bytes = static_cast<const uint8_t*>(
          xsk_umem__get_data(area_, xsk_umem__add_offset_to_addr(d->addr)));
      const auto frame = ParseFrame({bytes, d->len});
      if (!frame || frame->addresses.dest.sin_port != local_.sin_port ||
          (connected_ && !net::SameAddress(frame->addresses.source, peer_))) {
        ++invalid_frames_;
        continue;
      }
      Learn(frame->addresses.source.sin_addr.s_addr, frame->addresses.source_mac);
      sources_[count] = frame->addresses.source;
      datagrams_[count] = Datagram{frame->payload, &sources_[count]};
      ++count;
    }
    if (n != 0) xsk_ring_cons__release(&rx_, n);
    counters_.received += count;
    return {datagrams_.data(), count};
  }

  EndpointCounters counters() const override { return counters_; }

 private:
  static constexpr uint64_t kNone = ~uint64_t{0};
  struct LearnedMac {
    uint32_t address = 0;  // 0: empty
    Mac mac{};
  };

  uint8_t* Frame(uint64_t address) {
    return static_cast<uint8_t*>(xsk_umem__get_data(area_, address));
  }

  void Queue(uint64_t frame, size_t bytes, const Address& dest) {
    const Mac* mac = connected_ && dest.sin_addr.s_addr == peer_.sin_addr.s_addr
                         ? &peer_mac_
                         : Learned(dest.sin_addr.s_addr);
    uint32_t at = 0;
    if (mac == nullptr || bytes > kMaxDatagramBytes) {
      free_tx_.push_back(frame);
      ++counters_.send_dropped;
      return;
    }
    if (xsk_ring_prod__reserve(&tx_, 1, &at) != 1) {
      Flush();
      if (xsk_ring_prod__reserve(&tx_, 1, &at) != 1) {
        free_tx_.push_back(frame);
        ++counters_.send_dropped;
        return;
      }
    }
    FrameAddresses a;
    a.source_mac = attachment_->interface().mac;
    a.dest_mac = *mac;
    a.source = local_;
    a.dest = dest;
    WriteHeaders({Frame(frame), kHeaderBytes + bytes}, bytes, a, ip_id_++);
    xdp_desc* d = xsk_ring_prod__tx_desc(&tx_, at);
    d->addr = frame;
    d->len = uint32_t(kHeaderBytes + bytes);
    if (++queued_ >= options_.send_queue) Flush();
  }

  // Completed sends: their frames are free again.
  uint32_t Reclaim() {
    uint32_t at = 0;
    const uint32_t n = xsk_ring_cons__peek(&completion_, kRingSize, &at);
    for (uint32_t i = 0; i < n; ++i)
      free_tx_.push_back(*xsk_ring_cons__comp_addr(&completion_, at + i));
    if (n != 0) xsk_ring_cons__release(&completion_, n);
    in_flight_ -= std::min(in_flight_, n);
    return n;
  }

  // The previous batch's frames go back to the kernel for receiving.
  void ReturnHeld() {
    if (held_.empty()) return;
    uint32_t at = 0;
    if (xsk_ring_prod__reserve(&fill_, uint32_t(held_.size()), &at) != held_.size()) return;
    for (size_t i = 0; i < held_.size(); ++i)
      *xsk_ring_prod__fill_addr(&fill_, at + uint32_t(i)) = held_[i];
    xsk_ring_prod__submit(&fill_, uint32_t(held_.size()));
    held_.clear();
    // Copy mode fills frames from the kernel's receive path; only a
    // zero-copy driver waits to be told about new ones.
    if (zero_copy_ && xsk_ring_prod__needs_wakeup(&fill_)) {
      recvfrom(xsk_socket__fd(xsk_), nullptr, 0, MSG_DONTWAIT, nullptr, nullptr);
    }
  }

  // Peers' MACs from their frames: replies go back the way requests came.
  void Learn(uint32_t address, const Mac& mac) {
    LearnedMac& e = learned_[Slot(address)];
    e.address = address;
    e.mac = mac;
  }
  // A learned MAC, else an announced peer's (AddPeer): learning may evict a
  // peer that never sends first.
  const Mac* Learned(uint32_t address) const {
    const LearnedMac& e = learned_[Slot(address)];
    if (e.address == address && address != 0) return &e.mac;
    for (const LearnedMac& p : pinned_) {
      if (p.address == address) return &p.mac;
    }
    return nullptr;
  }
  static uint32_t Slot(uint32_t address) {
    return (address * 2654435761u) >> 22 & (kLearnedMacs - 1);
  }

  std::shared_ptr<AfXdpTransport::Attachment> attachment_;
  bool queue_taken_ = false;
  udp::UdpSocket port_holder_;  // keeps the port from other sockets
  Address local_;
  EndpointOptions options_;
  void* area_ = nullptr;
  xsk_umem* umem_ = nullptr;
  xsk_socket* xsk_ = nullptr;
  xsk_ring_prod fill_{}, tx_{};
  xsk_ring_cons completion_{}, rx_{};
  bool zero_copy_ = false;
  bool port_added_ = false;
  std::vector<uint64_t> free_tx_;
  std::vector<uint64_t> held_;
  std::vector<Datagram> datagrams_;
  std::vector<Address> sources_;
  std::vector<uint8_t> scratch_;
  uint64_t claimed_ = kNone;
  uint32_t queued_ = 0;
  uint32_t in_flight_ = 0;
  uint16_t ip_id_ = 0;
  bool connected_ = false;
  Address peer_{};
  Mac peer_mac_{};
  std::array<LearnedMac, kLearnedMacs> learned_{};
  static constexpr size_t kMaxPinnedPeers = 64;
  std::vector<LearnedMac> pinned_;  // AddPeer's, resolved at setup
  uint64_t invalid_frames_ = 0;
  EndpointCounters counters_;
};

}  // namespace

AfXdpTransport::AfXdpTransport(std::string interface) : interface_(std::move(interface)) {}
AfXdpTransport::~AfXdpTransport() = default;

StatusOr<std::unique_ptr<Endpoint>> AfXdpTransport::Open(const Address& requested,
                                                         const EndpointOptions& options) {
  if (options.claim_buffers && options.max_datagram_bytes > kMaxDatagramBytes) {
    return InvalidArgument("af_xdp carries datagrams of at most " +
                           std::to_string(kMaxDatagramBytes) + " bytes (4 KiB frames), not " +
                           std::to_string(options.max_datagram_bytes) + "; use at most " +
                           std::to_string(kMaxAfXdpElementsPerPacket) + " elements per packet");
  }
  auto interface = FindInterface(interface_, requested.sin_addr);
  if (!interface.ok()) return interface.status();
  if (interface.value().rx_queues != 1) {
    return InvalidArgument("af_xdp: interface " + interface.value().name + " has " +
                           std::to_string(interface.value().rx_queues) +
                           " receive queues; this version serves queue 0 only: `ethtool -L " +
                           interface.value().name + " combined 1`, or use --transport udp");
  }
  // The port, held by a kernel socket on the interface's address.
  Address local = requested;
  local.sin_addr = interface.value().address;
  auto holder = udp::UdpSocket::Bind(local, 4096);
  if (!holder.ok()) return holder.status();
  local.sin_port = holder.value().LocalAddress().sin_port;

  std::shared_ptr<Attachment> attachment;
  {
    std::lock_guard lock(mu_);
    attachment = attached_[interface.value().index].lock();
    if (attachment == nullptr) {
      auto attached = Attachment::Attach(interface.value());
      if (!attached.ok()) return attached.status();
      attachment = std::move(attached).value();
      attached_[interface.value().index] = attachment;
    }
  }
  auto endpoint = std::make_unique<AfXdpEndpoint>(attachment, std::move(holder).value(), local);
  if (Status s = endpoint->Setup(options); !s.ok()) return s;
  return std::unique_ptr<Endpoint>(std::move(endpoint));
}

StatusOr<std::unique_ptr<Endpoint>> AfXdpTransport::JoinGroup(const Address&, in_addr,
                                                              const EndpointOptions&) {
  return Status(StatusCode::kFailedPrecondition,
                "af_xdp receives no multicast (set result_multicast = false)");
}

StatusOr<Route> AfXdpTransport::RouteToward(const Address& peer) {
  auto route = udp::UdpTransport().RouteToward(peer);
  if (!route.ok()) return route.status();
  const int most = int(kMaxDatagramBytes + 28);  // IPv4 + UDP headers
  if (route.value().mtu == 0 || route.value().mtu > most) route.value().mtu = most;
  return route;
}

}  // namespace switchml::transport::xdp
