// The kernel UDP transport's parts: a non-blocking UDP socket and batched
// receive and send (recvmmsg and sendmmsg, with UDP GSO/GRO). UdpEndpoint
// (udp_transport.h) puts them behind the transport interface.
//
// Batches allocate all their buffers at construction; Receive() and Flush()
// never allocate. Thread safety: none; one thread owns a socket and its batches.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>

#include <cstdint>
#include <span>
#include <vector>

#include "switchml/status.h"

namespace switchml::transport::udp {

class UdpSocket {
 public:
  // Binds to `local` (port 0: the kernel picks one) with send and receive
  // buffers of about `buffer_bytes` (SO_*BUFFORCE when running as root).
  static StatusOr<UdpSocket> Bind(const sockaddr_in& local, int buffer_bytes);
  // A socket that receives the datagrams sent to multicast `group` (address
  // and port) on the interface with address `interface`, and no other
  // group's. Several sockets on this host may join the same group.
  static StatusOr<UdpSocket> JoinGroup(const sockaddr_in& group, in_addr interface,
                                       int buffer_bytes);
  UdpSocket() = default;
  UdpSocket(UdpSocket&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
  UdpSocket& operator=(UdpSocket&& other) noexcept;
  UdpSocket(const UdpSocket&) = delete;
  UdpSocket& operator=(const UdpSocket&) = delete;
  ~UdpSocket();

  int fd() const { return fd_; }
  sockaddr_in LocalAddress() const;
  // Restricts the socket to one peer (the switch): only its datagrams are
  // received, and sends need no address.
  Status Connect(const sockaddr_in& peer);
  // Sends this socket's multicast datagrams on loopback with TTL 0, so that
  // they reach this host's members and never leave the host.
  Status SetHostLocalMulticast();

 private:
  explicit UdpSocket(int fd) : fd_(fd) {}
  int fd_ = -1;
};

// UDP offloads (Linux): segmentation on send (UDP_SEGMENT, "GSO": one
// super-datagram of up to 64 equal segments that the kernel or the NIC cuts)
// and coalescing on receive (UDP_GRO: the kernel hands over runs of
// datagrams from one sender as one buffer plus the segment size).
// True if the kernel takes UDP_SEGMENT on this socket (Linux 4.18+).
bool SegmentationSupported(int fd);
// Asks for coalesced receives (or, with on = false, for single datagrams
// again); false if the kernel cannot (Linux 5.0+).
bool EnableReceiveCoalescing(int fd, bool on = true);

// The most segments one UDP_SEGMENT send or UDP_GRO receive carries.
inline constexpr size_t kMaxSegments = 64;
// The largest super-datagram: the IPv4 UDP payload limit.
inline constexpr size_t kMaxSuperDatagramBytes = 65507;

// Receives up to `max_packets` datagrams of up to `max_bytes` each per call.
// With `coalesced` (the socket has EnableReceiveCoalescing), each of the
// `max_packets` buffers takes a whole super-datagram, which Receive() splits
// into its segments by the segment size the kernel reports, the last one
// possibly shorter; packet(i) then indexes segments.
class RecvBatch {
 public:
  RecvBatch(size_t max_packets, size_t max_bytes, bool coalesced = false);
  // Returns the number of datagrams (segments) received (0 when none is waiting).
  int Receive(int fd);
  std::span<const uint8_t> packet(int i) const {
    return {&buffers_[segments_[i].offset], segments_[i].length};
  }
  const sockaddr_in& source(int i) const { return sources_[segments_[i].message]; }
  // True if datagram i was longer than its buffer (then it is cut short).
  bool truncated(int i) const {
    return headers_[segments_[i].message].msg_hdr.msg_flags & MSG_TRUNC;
  }
  // Super-datagrams received (2 segments or more), for counters and tests.
  uint64_t coalesced_received() const { return coalesced_received_; }

  // Splits a received buffer of `length` bytes into segments of
  // `segment_size` (0: not coalesced), the last one possibly shorter. A
  // segment size of 0 or not below the length gives one segment; the count
  // is capped at kMaxSegments (the rest is counted as one truncated tail).
  // Returns the number of segments written to `out` (offsets relative to the
  // buffer). Public for tests.
  struct Segment {
    uint32_t offset;
    uint32_t length;
    uint32_t message;
  };
  static size_t Split(size_t length, int segment_size, uint32_t message, uint32_t base,
                      Segment* out);

 private:
  size_t max_bytes_;
  bool coalesced_;
  std::vector<uint8_t> buffers_;
  std::vector<sockaddr_in> sources_;
  std::vector<iovec> iov_;
  std::vector<mmsghdr> headers_;
  std::vector<uint64_t> control_;  // one cmsg buffer per message (8-byte aligned)
  std::vector<Segment> segments_;
  uint64_t coalesced_received_ = 0;
};

// Collects datagrams and sends them with one sendmmsg per Flush().
class SendBatch {
 public:
  // `max_bytes` sizes the batch's own buffers (Claim, Add); 0 for a batch
  // used only with AddRef().
  SendBatch(size_t max_packets, size_t max_bytes);
  // The batch's buffer (max_bytes) for the next datagram, to write in place;
  // Commit() queues it. Flushes first when the batch is full. Buffers are
  // reused from the first after each Flush(), so few stay warm in cache.
  // REQUIRES: max_bytes > 0.
  std::span<uint8_t> Claim(int fd);
  // Queues the first `bytes` of the buffer the last Claim() returned.
  // `dest` may be null on a connected socket.
  // REQUIRES: bytes <= max_bytes, and no other call since that Claim().
  void Commit(size_t bytes, const sockaddr_in* dest);
  // Copies `bytes` (Claim + Commit); counts it as dropped if it does not fit.
  void Add(int fd, std::span<const uint8_t> bytes, const sockaddr_in* dest);
  // Queues `bytes` without copying: they must stay valid until Flush().
  // `dest` may be null on a connected socket.
  void AddRef(int fd, std::span<const uint8_t> bytes, const sockaddr_in* dest);
  void AddRef(int fd, std::span<const uint8_t> bytes, const sockaddr_in& dest) {
    AddRef(fd, bytes, &dest);
  }
  // Sends everything queued. When the socket buffer is full it waits up to
  // ~1 ms for room, then drops the rest (the protocol retransmits).
  // With segmentation on, the datagrams queued for each destination go as
  // runs of equal size (the last of a run may be shorter), each run as one
  // UDP_SEGMENT super-datagram; the order of datagrams to one destination
  // is kept. If the kernel refuses segmentation on a send, it is turned off
  // for this batch and the datagrams go one by one.
  void Flush(int fd);
  // REQUIRES: SegmentationSupported() on the sockets this batch sends on.
  void set_segmentation(bool on) { segmentation_ = on; }
  bool segmentation() const { return segmentation_; }
  size_t pending() const { return count_; }
  uint64_t sent() const { return sent_; }  // datagrams (segments)
  uint64_t dropped() const { return dropped_; }
  uint64_t super_datagrams() const { return super_datagrams_; }  // sends of 2+ segments

 private:
  void Queue(uint8_t* bytes, size_t length, const sockaddr_in* dest);
  // Sends headers[0..n) (msg_len of each unused); counts[i] datagrams each.
  // Returns how many headers went; sets *refused if the kernel refused a
  // segmented send (EIO, EINVAL).
  size_t Send(int fd, mmsghdr* headers, const uint32_t* counts, size_t n, bool* refused);
  // Builds runs per destination into run_headers_; returns their number.
  size_t BuildRuns();

  size_t max_bytes_;
  size_t count_ = 0;
  bool segmentation_ = false;
  std::vector<uint8_t> buffers_;
  std::vector<sockaddr_in> dests_;
  std::vector<uint8_t> has_dest_;
  std::vector<iovec> iov_;
  std::vector<mmsghdr> headers_;
  std::vector<uint32_t> ones_;  // counts of 1 for the plain path
  // Segmentation: datagrams regrouped per destination.
  std::vector<uint32_t> next_;  // next queued datagram to the same destination
  std::vector<uint32_t> run_first_, run_last_;
  std::vector<iovec> run_iov_;
  std::vector<mmsghdr> run_headers_;
  std::vector<uint32_t> run_counts_;
  std::vector<uint64_t> run_control_;  // one cmsg buffer per super-datagram
  uint64_t sent_ = 0;
  uint64_t dropped_ = 0;
  uint64_t super_datagrams_ = 0;
};

}  // namespace switchml::transport::udp
