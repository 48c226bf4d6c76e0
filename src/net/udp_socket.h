// A non-blocking UDP socket with batched receive and send (recvmmsg and
// sendmmsg), the kernel UDP transport of both the switch and the workers.
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

namespace switchml::net {

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

// Datagrams of `packet_bytes` to take per receive call: up to 64 small ones
// (fewer system calls), but no more than 256 KiB of large ones, so that a
// batch is still in the core's cache when it is read after the call.
inline size_t ReceiveBatchPackets(size_t packet_bytes) {
  const size_t fit = (size_t{256} << 10) / (packet_bytes ? packet_bytes : 1);
  return fit < 8 ? 8 : fit > 64 ? 64 : fit;
}

// Receives up to `max_packets` datagrams of up to `max_bytes` each per call.
class RecvBatch {
 public:
  RecvBatch(size_t max_packets, size_t max_bytes);
  // Returns the number of datagrams received (0 when none is waiting).
  int Receive(int fd);
  std::span<const uint8_t> packet(int i) const {
    return {&buffers_[size_t(i) * max_bytes_], size_t(headers_[i].msg_len)};
  }
  const sockaddr_in& source(int i) const { return sources_[i]; }
  // True if datagram i was longer than max_bytes (then it is cut short).
  bool truncated(int i) const { return headers_[i].msg_hdr.msg_flags & MSG_TRUNC; }

 private:
  size_t max_bytes_;
  std::vector<uint8_t> buffers_;
  std::vector<sockaddr_in> sources_;
  std::vector<iovec> iov_;
  std::vector<mmsghdr> headers_;
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
  void Flush(int fd);
  size_t pending() const { return count_; }
  uint64_t sent() const { return sent_; }
  uint64_t dropped() const { return dropped_; }

 private:
  void Queue(uint8_t* bytes, size_t length, const sockaddr_in* dest);

  size_t max_bytes_;
  size_t count_ = 0;
  std::vector<uint8_t> buffers_;
  std::vector<sockaddr_in> dests_;
  std::vector<iovec> iov_;
  std::vector<mmsghdr> headers_;
  uint64_t sent_ = 0;
  uint64_t dropped_ = 0;
};

}  // namespace switchml::net
