#include "net/udp_socket.h"

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "net/address.h"

namespace switchml::net {
namespace {

std::string Errno(const char* what) { return std::string(what) + ": " + std::strerror(errno); }

void SetBuffer(int fd, int option, int force_option, int bytes) {
  // The forced variant ignores net.core.[rw]mem_max but needs CAP_NET_ADMIN.
  if (setsockopt(fd, SOL_SOCKET, force_option, &bytes, sizeof(bytes)) != 0) {
    setsockopt(fd, SOL_SOCKET, option, &bytes, sizeof(bytes));
  }
}

}  // namespace

StatusOr<UdpSocket> UdpSocket::Bind(const sockaddr_in& local, int buffer_bytes) {
  const int fd = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return Status(StatusCode::kInternal, Errno("socket"));
  UdpSocket s(fd);
  SetBuffer(fd, SO_RCVBUF, SO_RCVBUFFORCE, buffer_bytes);
  SetBuffer(fd, SO_SNDBUF, SO_SNDBUFFORCE, buffer_bytes);
  if (bind(fd, reinterpret_cast<const sockaddr*>(&local), sizeof(local)) != 0) {
    return InvalidArgument(Errno(("cannot bind UDP socket to " + FormatAddress(local)).c_str()) +
                           " (is the port in use, or the address not local?)");
  }
  return s;
}

StatusOr<UdpSocket> UdpSocket::JoinGroup(const sockaddr_in& group, in_addr interface,
                                         int buffer_bytes) {
  if (!IN_MULTICAST(ntohl(group.sin_addr.s_addr))) {
    return InvalidArgument(FormatAddress(group) + " is not a multicast group address");
  }
  const int fd = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return Status(StatusCode::kInternal, Errno("socket"));
  UdpSocket s(fd);
  SetBuffer(fd, SO_RCVBUF, SO_RCVBUFFORCE, buffer_bytes);
  const int one = 1, zero = 0;
  // Every member on this host binds the group's port; only this group's
  // datagrams, not those of groups other sockets joined.
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  setsockopt(fd, IPPROTO_IP, IP_MULTICAST_ALL, &zero, sizeof(zero));
  if (bind(fd, reinterpret_cast<const sockaddr*>(&group), sizeof(group)) != 0) {
    return InvalidArgument(Errno(("cannot bind a UDP socket to group " + FormatAddress(group)).c_str()));
  }
  const ip_mreq membership{group.sin_addr, interface};
  if (setsockopt(fd, IPPROTO_IP, IP_ADD_MEMBERSHIP, &membership, sizeof(membership)) != 0) {
    sockaddr_in where{};
    where.sin_addr = interface;
    return InvalidArgument(Errno(("cannot join multicast group " + FormatAddress(group) +
                                  " on the interface of " + FormatAddress(where))
                                     .c_str()));
  }
  return s;
}

Status UdpSocket::SetHostLocalMulticast() {
  const in_addr loopback{htonl(INADDR_LOOPBACK)};
  const int ttl = 0, loop = 1;
  if (setsockopt(fd_, IPPROTO_IP, IP_MULTICAST_IF, &loopback, sizeof(loopback)) != 0 ||
      setsockopt(fd_, IPPROTO_IP, IP_MULTICAST_TTL, &ttl, sizeof(ttl)) != 0 ||
      setsockopt(fd_, IPPROTO_IP, IP_MULTICAST_LOOP, &loop, sizeof(loop)) != 0) {
    return Status(StatusCode::kInternal, Errno("cannot set up host-local multicast"));
  }
  return Status::Ok();
}

UdpSocket& UdpSocket::operator=(UdpSocket&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) close(fd_);
    fd_ = other.fd_;
    other.fd_ = -1;
  }
  return *this;
}

UdpSocket::~UdpSocket() {
  if (fd_ >= 0) close(fd_);
}

sockaddr_in UdpSocket::LocalAddress() const {
  sockaddr_in a{};
  socklen_t len = sizeof(a);
  getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
  return a;
}

Status UdpSocket::Connect(const sockaddr_in& peer) {
  if (connect(fd_, reinterpret_cast<const sockaddr*>(&peer), sizeof(peer)) != 0) {
    return InvalidArgument(Errno(("cannot connect UDP socket to " + FormatAddress(peer)).c_str()));
  }
  return Status::Ok();
}

RecvBatch::RecvBatch(size_t max_packets, size_t max_bytes)
    : max_bytes_(max_bytes),
      buffers_(max_packets * max_bytes),
      sources_(max_packets),
      iov_(max_packets),
      headers_(max_packets) {
  for (size_t i = 0; i < max_packets; ++i) {
    iov_[i] = iovec{&buffers_[i * max_bytes], max_bytes};
    headers_[i] = mmsghdr{};
    headers_[i].msg_hdr.msg_name = &sources_[i];
    headers_[i].msg_hdr.msg_iov = &iov_[i];
    headers_[i].msg_hdr.msg_iovlen = 1;
  }
}

int RecvBatch::Receive(int fd) {
  for (size_t i = 0; i < headers_.size(); ++i) {
    headers_[i].msg_hdr.msg_namelen = sizeof(sockaddr_in);
    headers_[i].msg_hdr.msg_flags = 0;
  }
  const int n = recvmmsg(fd, headers_.data(), unsigned(headers_.size()), MSG_DONTWAIT, nullptr);
  return n < 0 ? 0 : n;  // EAGAIN, or an ICMP error surfaced on a connected socket
}

SendBatch::SendBatch(size_t max_packets, size_t max_bytes)
    : max_bytes_(max_bytes),
      buffers_(max_packets * max_bytes),
      dests_(max_packets),
      iov_(max_packets),
      headers_(max_packets) {}

std::span<uint8_t> SendBatch::Claim(int fd) {
  if (count_ == headers_.size()) Flush(fd);
  return {&buffers_[count_ * max_bytes_], max_bytes_};
}

void SendBatch::Commit(size_t bytes, const sockaddr_in* dest) {
  Queue(&buffers_[count_ * max_bytes_], bytes, dest);
}

void SendBatch::Add(int fd, std::span<const uint8_t> bytes, const sockaddr_in* dest) {
  if (bytes.size() > max_bytes_) {
    ++dropped_;
    return;
  }
  std::memcpy(Claim(fd).data(), bytes.data(), bytes.size());
  Commit(bytes.size(), dest);
}

void SendBatch::AddRef(int fd, std::span<const uint8_t> bytes, const sockaddr_in* dest) {
  if (count_ == headers_.size()) Flush(fd);
  Queue(const_cast<uint8_t*>(bytes.data()), bytes.size(), dest);
}

void SendBatch::Queue(uint8_t* bytes, size_t length, const sockaddr_in* dest) {
  iov_[count_] = iovec{bytes, length};
  headers_[count_] = mmsghdr{};
  if (dest != nullptr) {
    dests_[count_] = *dest;
    headers_[count_].msg_hdr.msg_name = &dests_[count_];
    headers_[count_].msg_hdr.msg_namelen = sizeof(sockaddr_in);
  }
  headers_[count_].msg_hdr.msg_iov = &iov_[count_];
  headers_[count_].msg_hdr.msg_iovlen = 1;
  ++count_;
}

void SendBatch::Flush(int fd) {
  size_t done = 0;
  int waits = 0;
  while (done < count_) {
    const int n = sendmmsg(fd, &headers_[done], unsigned(count_ - done), MSG_DONTWAIT);
    if (n > 0) {
      done += size_t(n);
      sent_ += uint64_t(n);
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == ENOBUFS) && waits < 10) {
      pollfd p{fd, POLLOUT, 0};
      poll(&p, 1, 1);
      ++waits;
      continue;
    }
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != ENOBUFS) {
      // e.g. ECONNREFUSED from an earlier ICMP error: this one datagram is lost.
      ++dropped_;
      ++done;
      continue;
    }
    break;
  }
  dropped_ += count_ - done;
  count_ = 0;
}

}  // namespace switchml::net
