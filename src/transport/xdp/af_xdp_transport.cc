#include "transport/xdp/af_xdp_transport.h"

#include <arpa/inet.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <linux/if_link.h>
#include <linux/if_xdp.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>
#include <xdp/libxdp.h>
#include <xdp/xsk.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <mutex>
#include <optional>
#include <vector>

#include "net/address.h"
#include "transport/ethernet/frame_endpoint.h"
#include "transport/ethernet/frames.h"
#include "transport/ethernet/mac_table.h"
#include "transport/udp/udp_socket.h"
#include "transport/udp/udp_transport.h"
#include "transport/xdp/interfaces.h"
#include "transport/xdp/umem_sizing.h"
#include "wire/wire_format.h"

// redirect.bpf.c, compiled by the build and embedded (redirect_bpf_object.cc).
extern const unsigned char kSwitchmlRedirectBpfObject[];
extern const size_t kSwitchmlRedirectBpfObjectSize;

namespace switchml::transport::xdp {
namespace {

using ethernet::FrameAddresses;
using ethernet::kHeaderBytes;
using ethernet::kThisHost;
using ethernet::ParseFrame;
using ethernet::WriteHeaders;

constexpr uint32_t kFrameBytes = XSK_UMEM__DEFAULT_FRAME_SIZE;  // 4096
constexpr uint32_t kMaxQueues = 256;  // the socket map's size in redirect.bpf.c
// The configuration's limit is the largest packet size that fits a frame.
static_assert(MaxPacketBytes(kMaxAfXdpElementsPerPacket) <= kMaxDatagramBytes &&
              MaxPacketBytes(2 * kMaxAfXdpElementsPerPacket) > kMaxDatagramBytes);

std::string Errno(int error) { return std::strerror(error < 0 ? -error : error); }

Status Failed(const std::string& what, int error, const std::string& fix) {
  return Status(StatusCode::kFailedPrecondition,
                "af_xdp: " + what + ": " + Errno(error) + " (" + fix + ")");
}

// A port's entry in the XDP program's map (struct port_entry in
// redirect.bpf.c).
struct PortEntry {
  uint32_t address;  // network order; 0: any
  uint32_t stride;   // the endpoint's shards on the interface
  uint32_t first;    // its queues: q % stride == first
};

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
    // Our errors name the cause and the fix in one line; the libraries'
    // own messages would only repeat it, in several.
    libbpf_set_print(nullptr);
    libxdp_set_print(nullptr);
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
    return Failed(
        "attaching the XDP program to " + interface.name + " (by BPF link, native or generic mode)",
        error, std::string(kNeedsRights) + "; BPF links for XDP need Linux 5.9 or later");
  }
  ~Attachment() {
    if (link_fd_ >= 0) close(link_fd_);  // detaches the program
    bpf_object__close(object_);
  }

  const Interface& interface() const { return interface_; }
  bool native() const { return native_; }
  int xsks_fd() const { return xsks_fd_; }

  // Redirects UDP to `port` on `address` (0: any) that arrives on one of
  // the endpoint's queues (q % stride == first) to that queue's socket.
  Status AddPort(uint16_t port_be, uint32_t address_be, uint32_t stride, uint32_t first) {
    const PortEntry entry{address_be, stride, first};
    if (bpf_map_update_elem(ports_fd_, &port_be, &entry, BPF_ANY) != 0) {
      return Failed("adding a port to the XDP program", errno, kNeedsRights);
    }
    return Status::Ok();
  }
  void RemovePort(uint16_t port_be) { bpf_map_delete_elem(ports_fd_, &port_be); }

  // Share `shard` of the interface's queues split `shards` ways, for
  // one endpoint at a time; the endpoints open at once split them alike.
  Status TakeShare(uint32_t shard, uint32_t shards) {
    std::lock_guard lock(mu_);
    if (taken_.empty()) taken_.assign(shards, false);
    if (taken_.size() != shards || taken_[shard]) {
      return InvalidArgument("af_xdp: interface " + interface_.name +
                             " already has this process's endpoint of thread " +
                             std::to_string(shard) + " of " + std::to_string(taken_.size()) +
                             "; one job's threads per interface and process");
    }
    taken_[shard] = true;
    return Status::Ok();
  }
  void ReleaseShare(uint32_t shard) {
    std::lock_guard lock(mu_);
    taken_[shard] = false;
    if (std::none_of(taken_.begin(), taken_.end(), [](bool t) { return t; })) taken_.clear();
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
  std::vector<bool> taken_;  // [shard]; guarded by mu_
};

namespace {

// One receive queue's AF_XDP socket and the frame memory it receives into.
// An endpoint's first queue's socket also sends, from frames of its own
// memory.
struct QueueSocket {
  uint32_t id = 0;
  void* area = nullptr;
  size_t area_bytes = 0;
  xsk_umem* umem = nullptr;
  xsk_socket* xsk = nullptr;
  xsk_ring_prod fill{};
  xsk_ring_cons completion{};
  xsk_ring_cons rx{};
  std::vector<uint64_t> held;  // received frames the caller still reads

  ~QueueSocket() {
    if (xsk != nullptr) xsk_socket__delete(xsk);
    if (umem != nullptr) xsk_umem__delete(umem);
    if (area != nullptr) munmap(area, area_bytes);
  }
};

class AfXdpEndpoint final : public ethernet::FrameEndpoint {
 public:
  AfXdpEndpoint(std::shared_ptr<AfXdpTransport::Attachment> attachment, udp::UdpSocket port_holder,
                Address local)
      : FrameEndpoint("af_xdp"),
        attachment_(std::move(attachment)),
        port_holder_(std::move(port_holder)),
        local_(local) {}

  ~AfXdpEndpoint() override {
    if (steering_) RemoveFlowSteering(attachment_->interface(), *steering_);
    if (port_added_) attachment_->RemovePort(local_.sin_port);
    if (epoll_fd_ >= 0) close(epoll_fd_);
    queues_.clear();
    if (share_taken_) attachment_->ReleaseShare(shard_);
  }

  // Takes the interface's receive queues q with q % shards == shard:
  // one AF_XDP socket each, the first of which sends.
  Status Setup(const EndpointOptions& options) {
    const Interface& i = attachment_->interface();
    shards_ = std::max<uint32_t>(options.shards, 1);
    shard_ = options.shard;
    if (shard_ >= shards_) {
      return InvalidArgument("af_xdp: endpoint " + std::to_string(shard_) + " of " +
                             std::to_string(shards_));
    }
    if (uint32_t(i.rx_queues) < shards_) {
      return Status(StatusCode::kFailedPrecondition,
                    "af_xdp: interface " + i.name + " has " + std::to_string(i.rx_queues) +
                        " receive queues, fewer than the " + std::to_string(shards_) +
                        " threads that share it, which need one each (`ethtool -L " + i.name +
                        " combined " + std::to_string(shards_) +
                        "`, fewer threads, or --transport udp)");
    }
    if (Status s = attachment_->TakeShare(shard_, shards_); !s.ok()) return s;
    share_taken_ = true;
    ring_size_ = FramesFor(options);
    const uint32_t owned = (uint32_t(i.rx_queues) - shard_ + shards_ - 1) / shards_;
    const uint32_t frames = ReceiveFramesPerQueue(ring_size_, int(owned));
    queues_.reserve(owned);
    for (uint32_t q = shard_; q < uint32_t(i.rx_queues); q += shards_) {
      if (Status s = OpenQueue(q, frames); !s.ok()) return s;
    }
    if (queues_.size() > 1) {
      // One descriptor for the thread's poll: readable when any queue is.
      epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
      if (epoll_fd_ < 0) return Failed("creating an epoll set", errno, "raise the fd limit");
      for (const auto& q : queues_) {
        epoll_event e{};
        e.events = EPOLLIN;
        if (epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, xsk_socket__fd(q->xsk), &e) != 0) {
          return Failed("polling the AF_XDP sockets", errno, "raise the fd limit");
        }
      }
    }
    // Send frames: the first queue's memory after its receive frames.
    free_tx_.reserve(ring_size_);
    for (uint32_t f = frames; f < frames + ring_size_; ++f) {
      free_tx_.push_back(uint64_t(f) * kFrameBytes);
    }
    scratch_.resize(kMaxDatagramBytes);  // where Claim() writes when no frame is free
    Reconfigure(options);
    if (Status s = attachment_->AddPort(local_.sin_port, local_.sin_addr.s_addr, shards_, shard_);
        !s.ok()) {
      return s;
    }
    port_added_ = true;
    // Where the NIC can, it brings this port's frames to this endpoint's
    // queue; elsewhere (veth, ntuple off) they arrive where its hashing puts
    // them, and those on another shard's queue take the kernel path.
    if (shards_ > 1) steering_ = SteerFlow(i, local_, shard_);
    return Status::Ok();
  }

  Address local_address() const override { return local_; }

  Status AddPeer(const Address& peer) override {
    auto mac = IsLocalAddress(peer.sin_addr) ? StatusOr<Mac>(kThisHost)
                                             : NextHopMac(attachment_->interface(), peer.sin_addr);
    if (!mac.ok()) return mac.status();
    return PinPeer(peer.sin_addr.s_addr, mac.value());
  }

  // One queue's socket itself, whose poll (the threads' spin) also drives
  // its sends in copy mode; several queues' through an epoll set.
  // Beside it, the kernel socket: datagrams from this host, and from other
  // shards' queues.
  std::vector<int> wait_fds() const override {
    return {epoll_fd_ >= 0 ? epoll_fd_ : xsk_socket__fd(queues_[0]->xsk), port_holder_.fd()};
  }

  void Reconfigure(const EndpointOptions& options) override {
    options_ = options;
    options_.receive_batch = std::clamp<size_t>(options.receive_batch, 1, ring_size_);
    options_.send_queue = std::clamp<size_t>(options.send_queue, 1, ring_size_);
    // Room for a batch from the queues and one from the kernel socket.
    datagrams_.resize(2 * options_.receive_batch);
    sources_.resize(options_.receive_batch);
    kernel_batch_ = udp::RecvBatch(options_.receive_batch, options.max_datagram_bytes + 1);
  }

  size_t receive_capacity() const override { return datagrams_.size(); }
  std::string description() const override {
    std::string queues;
    for (const auto& q : queues_) queues += (queues.empty() ? "" : ",") + std::to_string(q->id);
    return std::string(zero_copy_ ? "af_xdp zero-copy" : "af_xdp copy") +
           (attachment_->native() ? ", native XDP" : ", generic XDP") +
           (queues_.size() > 1 ? ", queues " : ", queue ") + queues +
           (shards_ == 1 ? ""
            : steering_  ? ", steered there by an ntuple rule"
                         : ", no flow steering (frames on other threads' queues come "
                           "through the kernel)");
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
    Queue(frame, bytes, Destination(dest));
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
      counters_.sent += queued_;
      queued_ = 0;
    }
    // The kernel takes descriptors off the send ring when woken: a copy-mode
    // socket at most 32 per call, so kick until the ring is empty or the
    // kernel stops taking them (the device queue is full: Receive() kicks
    // again, as does the poll() of a waiting thread). A zero-copy driver
    // sends on its own once woken. The frames come back on the completion
    // ring when they have left (in copy mode, when their socket buffers are
    // freed, which can be later): Reclaim() collects those that have, and
    // waits for none.
    for (int kick = 0, stalled = 0; kick < 64 && stalled < 4; ++kick) {
      const uint32_t unsent = Unsent();
      if (unsent == 0 || !Kick() || zero_copy_) break;
      stalled = Unsent() == unsent ? stalled + 1 : 0;
    }
    Reclaim();
    if (!macs_.misses().empty()) ResolveMisses();
  }

  std::span<const Datagram> Receive() override {
    ReturnHeld();
    if (Unsent() != 0) Kick();  // sends a full device queue held back
    size_t count = 0;
    const size_t n_queues = queues_.size();
    for (size_t k = 0; k < n_queues && count < options_.receive_batch; ++k) {
      QueueSocket& q = *queues_[(next_queue_ + k) % n_queues];
      uint32_t at = 0;
      const uint32_t n = xsk_ring_cons__peek(&q.rx, uint32_t(options_.receive_batch - count), &at);
      for (uint32_t i = 0; i < n; ++i) {
        const xdp_desc* d = xsk_ring_cons__rx_desc(&q.rx, at + i);
        q.held.push_back(xsk_umem__extract_addr(d->addr));
        const uint8_t* bytes = static_cast<const uint8_t*>(
            xsk_umem__get_data(q.area, xsk_umem__add_offset_to_addr(d->addr)));
        const auto frame = ParseFrame({bytes, d->len});
        if (!frame || frame->addresses.dest.sin_port != local_.sin_port ||
            !Accepts(frame->addresses.source)) {
          ++counters_.malformed;
          continue;
        }
        macs_.Learn(frame->addresses.source.sin_addr.s_addr, frame->addresses.source_mac);
        sources_[count] = frame->addresses.source;
        datagrams_[count] = Datagram{frame->payload, &sources_[count]};
        ++count;
      }
      if (n != 0) xsk_ring_cons__release(&q.rx, n);
    }
    if (n_queues > 1) next_queue_ = (next_queue_ + 1) % n_queues;
    // The kernel socket's datagrams (from this host, through loopback, and
    // frames that came on another shard's queue): read when the queues are
    // idle, and every kKernelTurns-th call anyway.
    if (count == 0 || ++kernel_turn_ % kKernelTurns == 0) count = ReceiveFromKernel(count);
    counters_.received += count;
    return {datagrams_.data(), count};
  }

  EndpointCounters counters() const override { return counters_; }

 private:
  static constexpr uint64_t kNone = ~uint64_t{0};
  static constexpr uint32_t kKernelTurns = 8;

  // The kernel socket's datagrams after the `count` from the queues. (A
  // reply to a source without a MAC misses, and the miss finds it: one of
  // this host's addresses is answered through the kernel too. Nothing is
  // looked up for a datagram that is never answered.)
  size_t ReceiveFromKernel(size_t count) {
    const int n = kernel_batch_.Receive(port_holder_.fd());
    for (int k = 0; k < n; ++k) {
      const Address& source = kernel_batch_.source(k);
      if (!Accepts(source)) {
        ++counters_.malformed;
        continue;
      }
      datagrams_[count++] = Datagram{kernel_batch_.packet(k), &source};
      ++counters_.off_queue;
    }
    return count;
  }

  // A datagram to this host itself goes through the kernel (loopback): a
  // frame put on the wire would never come back.
  void SendThroughKernel(uint64_t frame, size_t bytes, const Address& dest) {
    const ssize_t sent = sendto(port_holder_.fd(), Frame(frame) + kHeaderBytes, bytes, MSG_DONTWAIT,
                                reinterpret_cast<const sockaddr*>(&dest), sizeof(dest));
    free_tx_.push_back(frame);
    ++(sent == ssize_t(bytes) ? counters_.sent : counters_.send_dropped);
  }

  Status OpenQueue(uint32_t id, uint32_t frames) {
    auto q = std::make_unique<QueueSocket>();
    q->id = id;
    const bool sends = queues_.empty();
    if (Status s = CreateUmem(*q, frames, sends); !s.ok()) return s;
    if (Status s = CreateSocket(*q, frames, sends); !s.ok()) return s;
    uint32_t at = 0;
    if (xsk_ring_prod__reserve(&q->fill, frames, &at) != frames) {
      return Status(StatusCode::kInternal, "af_xdp: the fill ring is short");
    }
    for (uint32_t f = 0; f < frames; ++f) {
      *xsk_ring_prod__fill_addr(&q->fill, at + f) = uint64_t(f) * kFrameBytes;
    }
    xsk_ring_prod__submit(&q->fill, frames);
    q->held.reserve(frames);
    queues_.push_back(std::move(q));
    return Status::Ok();
  }

  // The queue's frame memory: `frames` receive frames, and the send frames
  // after them on the queue that sends.
  Status CreateUmem(QueueSocket& q, uint32_t frames, bool sends) {
    q.area_bytes = size_t(frames + (sends ? ring_size_ : 0)) * kFrameBytes;
    q.area =
        mmap(nullptr, q.area_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (q.area == MAP_FAILED) {
      q.area = nullptr;
      return Failed("allocating frame memory", errno, "free some memory");
    }
    xsk_umem_config umem{};
    umem.fill_size = frames;
    umem.comp_size = sends ? ring_size_ : kMinQueueFrames;
    umem.frame_size = kFrameBytes;
    umem.frame_headroom = 0;
    if (int error = xsk_umem__create(&q.umem, q.area, q.area_bytes, &q.fill, &q.completion, &umem);
        error != 0) {
      q.umem = nullptr;
      return Failed("creating the socket's frame memory", error, kNeedsRights);
    }
    return Status::Ok();
  }

  // The queue's AF_XDP socket (zero-copy where the driver can, else copy
  // mode), registered in the XDP program's map.
  Status CreateSocket(QueueSocket& q, uint32_t frames, bool sends) {
    const Interface& i = attachment_->interface();
    xsk_socket_config config{};
    config.rx_size = frames;
    config.tx_size = sends ? ring_size_ : 0;
    config.libxdp_flags = XSK_LIBXDP_FLAGS__INHIBIT_PROG_LOAD;
    config.bind_flags = XDP_USE_NEED_WAKEUP;
    xsk_ring_prod* tx = sends ? &tx_ : nullptr;
    int error = xsk_socket__create(&q.xsk, i.name.c_str(), q.id, q.umem, &q.rx, tx, &config);
    if (error != 0) {
      config.bind_flags = XDP_USE_NEED_WAKEUP | XDP_COPY;
      error = xsk_socket__create(&q.xsk, i.name.c_str(), q.id, q.umem, &q.rx, tx, &config);
    }
    if (error != 0) {
      q.xsk = nullptr;
      return Failed("creating the AF_XDP socket on " + i.name + " queue " + std::to_string(q.id),
                    error, kNeedsRights);
    }
    if (sends) {
      xdp_options modes{};
      socklen_t length = sizeof(modes);
      zero_copy_ = getsockopt(xsk_socket__fd(q.xsk), SOL_XDP, XDP_OPTIONS, &modes, &length) == 0 &&
                   (modes.flags & XDP_OPTIONS_ZEROCOPY) != 0;
    }
    if (int e = xsk_socket__update_xskmap(q.xsk, attachment_->xsks_fd()); e != 0) {
      return Failed("registering the AF_XDP socket of queue " + std::to_string(q.id), e,
                    kNeedsRights);
    }
    return Status::Ok();
  }

  uint8_t* Frame(uint64_t address) {
    return static_cast<uint8_t*>(xsk_umem__get_data(queues_[0]->area, address));
  }

  void Queue(uint64_t frame, size_t bytes, const Address& dest) {
    const Mac* mac = macs_.Find(dest.sin_addr.s_addr);
    uint32_t at = 0;
    if (mac == nullptr || bytes > kMaxDatagramBytes) {
      if (mac == nullptr) macs_.Miss(dest.sin_addr.s_addr);
      free_tx_.push_back(frame);
      ++counters_.send_dropped;
      return;
    }
    if (*mac == kThisHost) {
      SendThroughKernel(frame, bytes, dest);
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

  // Wakes the kernel's send path where it needs it; false after an error
  // other than a full device queue.
  bool Kick() {
    if (zero_copy_ && !xsk_ring_prod__needs_wakeup(&tx_)) return true;
    return sendto(xsk_socket__fd(queues_[0]->xsk), nullptr, 0, MSG_DONTWAIT, nullptr, 0) >= 0 ||
           errno == EAGAIN || errno == EBUSY || errno == ENOBUFS || errno == ENETDOWN;
  }

  // Descriptors on the send ring the kernel has not taken yet.
  uint32_t Unsent() { return ring_size_ - xsk_prod_nb_free(&tx_, ring_size_); }

  // Completed sends: their frames are free again.
  void Reclaim() {
    xsk_ring_cons& completion = queues_[0]->completion;
    uint32_t at = 0;
    const uint32_t n = xsk_ring_cons__peek(&completion, ring_size_, &at);
    for (uint32_t i = 0; i < n; ++i)
      free_tx_.push_back(*xsk_ring_cons__comp_addr(&completion, at + i));
    if (n != 0) xsk_ring_cons__release(&completion, n);
  }

  // The previous batch's frames go back to their queues for receiving.
  void ReturnHeld() {
    for (const auto& queue : queues_) {
      QueueSocket& q = *queue;
      if (q.held.empty()) continue;
      uint32_t at = 0;
      const uint32_t n = uint32_t(q.held.size());
      if (xsk_ring_prod__reserve(&q.fill, n, &at) != n) continue;
      for (uint32_t i = 0; i < n; ++i) *xsk_ring_prod__fill_addr(&q.fill, at + i) = q.held[i];
      xsk_ring_prod__submit(&q.fill, n);
      q.held.clear();
      // Copy mode fills frames from the kernel's receive path; only a
      // zero-copy driver waits to be told about new ones.
      if (zero_copy_ && xsk_ring_prod__needs_wakeup(&q.fill)) {
        recvfrom(xsk_socket__fd(q.xsk), nullptr, 0, MSG_DONTWAIT, nullptr, nullptr);
      }
    }
  }

  // Addresses sent to without a MAC (never heard from, or evicted from the
  // learned table): looked up in the kernel's neighbour table, at most every
  // kResolveInterval (a netlink round trip; an absent entry is probed and
  // found on a later round); the sends were dropped, and the protocol's
  // retransmissions recover them.
  void ResolveMisses() {
    const auto now = std::chrono::steady_clock::now();
    if (now < next_resolve_) return;
    next_resolve_ = now + kResolveInterval;
    for (const uint32_t address : macs_.misses()) {
      in_addr peer{};
      peer.s_addr = address;
      if (IsLocalAddress(peer)) {
        macs_.Resolved(address, kThisHost);
        continue;
      }
      auto mac = NextHopMac(attachment_->interface(), peer, /*wait_ms=*/0);
      if (mac.ok()) macs_.Resolved(address, mac.value());
    }
    macs_.ClearMisses();
  }
  static constexpr std::chrono::milliseconds kResolveInterval{20};

  std::shared_ptr<AfXdpTransport::Attachment> attachment_;
  uint32_t shard_ = 0, shards_ = 1;  // its share of the interface's queues
  bool share_taken_ = false;
  // Keeps the port from other sockets, and carries the port's datagrams that
  // the XDP program leaves to the kernel, and those to this host.
  udp::UdpSocket port_holder_;
  udp::RecvBatch kernel_batch_{1, 1};
  uint32_t kernel_turn_ = 0;
  std::optional<uint32_t> steering_;  // the ntuple rule's location
  Address local_;
  EndpointOptions options_;
  uint32_t ring_size_ = kDefaultFrames;               // send frames; receive frames in all
  std::vector<std::unique_ptr<QueueSocket>> queues_;  // its receive queues, ascending
  int epoll_fd_ = -1;                                 // all queues' sockets, when several
  size_t next_queue_ = 0;                             // where Receive() starts
  xsk_ring_prod tx_{};                                // the first queue's socket's
  bool zero_copy_ = false;
  bool port_added_ = false;
  std::vector<uint64_t> free_tx_;
  std::vector<Datagram> datagrams_;
  std::vector<Address> sources_;
  std::vector<uint8_t> scratch_;
  uint64_t claimed_ = kNone;
  uint32_t queued_ = 0;
  uint16_t ip_id_ = 0;
  std::chrono::steady_clock::time_point next_resolve_{};
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
  if (interface.value().rx_queues > int(kMaxQueues)) {
    return InvalidArgument("af_xdp: interface " + interface.value().name + " has " +
                           std::to_string(interface.value().rx_queues) +
                           " receive queues; this version serves at most " +
                           std::to_string(kMaxQueues) + ": `ethtool -L " + interface.value().name +
                           " combined " + std::to_string(kMaxQueues) + "`, or use --transport udp");
  }
  // The port, held by a kernel socket on the interface's address, which
  // also carries the datagrams from and to this host (loopback) and those
  // that come on another shard's queue.
  Address local = requested;
  local.sin_addr = interface.value().address;
  auto holder = udp::UdpSocket::Bind(local, options.udp.socket_buffer_bytes);
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
