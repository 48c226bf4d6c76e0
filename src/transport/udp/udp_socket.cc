#include "transport/udp/udp_socket.h"

#include <fcntl.h>
#include <netinet/udp.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>

#include "net/address.h"

namespace switchml::transport::udp {
namespace {

std::string Errno(const char* what) { return std::string(what) + ": " + std::strerror(errno); }

// cmsg buffers in 8-byte words: UDP_GRO carries an int, UDP_SEGMENT a uint16_t.
constexpr size_t kGroControlWords = (CMSG_SPACE(sizeof(int)) + 7) / 8;
constexpr size_t kGsoControlWords = (CMSG_SPACE(sizeof(uint16_t)) + 7) / 8;
constexpr uint32_t kEnd = UINT32_MAX;

// A header for one datagram: `iov` to `name` (null on a connected socket).
mmsghdr SingleDatagram(void* name, socklen_t namelen, iovec* iov) {
  mmsghdr h{};
  h.msg_hdr.msg_name = name;
  h.msg_hdr.msg_namelen = namelen;
  h.msg_hdr.msg_iov = iov;
  h.msg_hdr.msg_iovlen = 1;
  return h;
}

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
    return InvalidArgument(
        Errno(("cannot bind UDP socket to " + net::FormatAddress(local)).c_str()) +
        " (is the port in use, or the address not local?)");
  }
  return s;
}

StatusOr<UdpSocket> UdpSocket::JoinGroup(const sockaddr_in& group, in_addr interface,
                                         int buffer_bytes) {
  if (!IN_MULTICAST(ntohl(group.sin_addr.s_addr))) {
    return InvalidArgument(net::FormatAddress(group) + " is not a multicast group address");
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
    return InvalidArgument(
        Errno(("cannot bind a UDP socket to group " + net::FormatAddress(group)).c_str()));
  }
  const ip_mreq membership{group.sin_addr, interface};
  if (setsockopt(fd, IPPROTO_IP, IP_ADD_MEMBERSHIP, &membership, sizeof(membership)) != 0) {
    sockaddr_in where{};
    where.sin_addr = interface;
    return InvalidArgument(Errno(("cannot join multicast group " + net::FormatAddress(group) +
                                  " on the interface of " + net::FormatAddress(where))
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
    return InvalidArgument(
        Errno(("cannot connect UDP socket to " + net::FormatAddress(peer)).c_str()));
  }
  return Status::Ok();
}

bool SegmentationSupported(int fd) {
  int size = 0;
  socklen_t len = sizeof(size);
  return getsockopt(fd, SOL_UDP, UDP_SEGMENT, &size, &len) == 0;
}

bool EnableReceiveCoalescing(int fd, bool on) {
  const int value = on;
  return setsockopt(fd, SOL_UDP, UDP_GRO, &value, sizeof(value)) == 0;
}

RecvBatch::RecvBatch(size_t max_packets, size_t max_bytes, bool coalesced)
    : max_bytes_(coalesced ? std::max<size_t>(max_bytes, size_t{1} << 16) : max_bytes),
      coalesced_(coalesced),
      buffers_(max_packets * max_bytes_),
      sources_(max_packets),
      iov_(max_packets),
      headers_(max_packets),
      control_(coalesced ? max_packets * kGroControlWords : 0),
      segments_(max_packets * (coalesced ? kMaxSegments : 1)) {
  for (size_t i = 0; i < max_packets; ++i) {
    iov_[i] = iovec{&buffers_[i * max_bytes_], max_bytes_};
    headers_[i] = mmsghdr{};
    headers_[i].msg_hdr.msg_name = &sources_[i];
    headers_[i].msg_hdr.msg_iov = &iov_[i];
    headers_[i].msg_hdr.msg_iovlen = 1;
    if (coalesced) headers_[i].msg_hdr.msg_control = &control_[i * kGroControlWords];
  }
}

int RecvBatch::Receive(int fd) {
  for (size_t i = 0; i < headers_.size(); ++i) {
    headers_[i].msg_hdr.msg_namelen = sizeof(sockaddr_in);
    headers_[i].msg_hdr.msg_flags = 0;
    if (coalesced_) headers_[i].msg_hdr.msg_controllen = kGroControlWords * 8;
  }
  const int n = recvmmsg(fd, headers_.data(), unsigned(headers_.size()), MSG_DONTWAIT, nullptr);
  if (n <= 0) return 0;  // EAGAIN, or an ICMP error surfaced on a connected socket
  size_t count = 0;
  for (int m = 0; m < n; ++m) {
    int segment_size = 0;
    if (coalesced_) {
      msghdr& h = headers_[m].msg_hdr;
      for (cmsghdr* c = CMSG_FIRSTHDR(&h); c != nullptr; c = CMSG_NXTHDR(&h, c)) {
        if (c->cmsg_level == SOL_UDP && c->cmsg_type == UDP_GRO &&
            c->cmsg_len >= CMSG_LEN(sizeof(int))) {
          std::memcpy(&segment_size, CMSG_DATA(c), sizeof(int));
        }
      }
    }
    const size_t k = Split(headers_[m].msg_len, segment_size, uint32_t(m),
                           uint32_t(size_t(m) * max_bytes_), &segments_[count]);
    coalesced_received_ += k > 1;
    count += k;
  }
  return int(count);
}

size_t RecvBatch::Split(size_t length, int segment_size, uint32_t message, uint32_t base,
                        Segment* out) {
  if (segment_size <= 0 || size_t(segment_size) >= length) {
    out[0] = {base, uint32_t(length), message};
    return 1;
  }
  const size_t size = size_t(segment_size);
  size_t n = 0;
  for (size_t offset = 0; offset < length; offset += size) {
    if (n == kMaxSegments) {  // more than the kernel ever coalesces: the rest as one tail
      out[n - 1].length += uint32_t(length - offset);
      break;
    }
    out[n++] = {base + uint32_t(offset), uint32_t(std::min(size, length - offset)), message};
  }
  return n;
}

SendBatch::SendBatch(size_t max_packets, size_t max_bytes)
    : max_bytes_(max_bytes),
      buffers_(max_packets * max_bytes),
      dests_(max_packets),
      has_dest_(max_packets),
      iov_(max_packets),
      headers_(max_packets),
      ones_(max_packets, 1),
      next_(max_packets),
      run_first_(max_packets),
      run_last_(max_packets),
      run_iov_(max_packets),
      run_headers_(max_packets),
      run_counts_(max_packets),
      run_control_(max_packets * kGsoControlWords) {}

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
  has_dest_[count_] = dest != nullptr;
  if (dest != nullptr) dests_[count_] = *dest;
  ++count_;
}

size_t SendBatch::Send(int fd, mmsghdr* headers, const uint32_t* counts, size_t n, bool* refused) {
  size_t done = 0;
  int waits = 0;
  while (done < n) {
    const int k = sendmmsg(fd, headers + done, unsigned(n - done), MSG_DONTWAIT);
    if (k > 0) {
      for (size_t i = done; i < done + size_t(k); ++i) {
        sent_ += counts[i];
        super_datagrams_ += counts[i] > 1;
      }
      done += size_t(k);
      continue;
    }
    const bool full = errno == EAGAIN || errno == EWOULDBLOCK || errno == ENOBUFS;
    if (k < 0 && full && waits < 10) {
      pollfd p{fd, POLLOUT, 0};
      poll(&p, 1, 1);
      ++waits;
      continue;
    }
    if (k < 0 && counts[done] > 1 && (errno == EIO || errno == EINVAL)) {
      *refused = true;  // this kernel, route or device does not segment UDP
      return done;
    }
    if (k < 0 && !full) {
      // e.g. ECONNREFUSED from an earlier ICMP error: this send is lost.
      dropped_ += counts[done];
      ++done;
      continue;
    }
    break;
  }
  for (size_t i = done; i < n; ++i) dropped_ += counts[i];
  return n;
}

size_t SendBatch::BuildRuns() {
  auto same_dest = [this](uint32_t a, uint32_t b) {
    return has_dest_[a] == has_dest_[b] &&
           (!has_dest_[a] || net::SameAddress(dests_[a], dests_[b]));
  };
  // Chain the datagrams of each destination, in queue order.
  size_t dests = 0;
  for (uint32_t i = 0; i < count_; ++i) {
    size_t d = 0;
    while (d < dests && !same_dest(run_first_[d], i)) ++d;
    if (d == dests) {
      run_first_[dests++] = i;
    } else {
      next_[run_last_[d]] = i;
    }
    run_last_[d] = i;
    next_[i] = kEnd;
  }
  // Cut each chain into super-datagrams of equal segments (the last may be
  // shorter), at most kMaxSegments and kMaxSuperDatagramBytes each.
  size_t runs = 0, used = 0;
  for (size_t d = 0; d < dests; ++d) {
    for (uint32_t i = run_first_[d]; i != kEnd;) {
      const uint32_t first = i;
      const size_t segment = iov_[i].iov_len, first_iov = used;
      size_t bytes = 0, n = 0;
      while (i != kEnd && n < kMaxSegments && iov_[i].iov_len <= segment &&
             bytes + iov_[i].iov_len <= kMaxSuperDatagramBytes) {
        const bool shorter = iov_[i].iov_len < segment;
        bytes += iov_[i].iov_len;
        run_iov_[used++] = iov_[i];
        ++n;
        i = next_[i];
        if (shorter) break;
      }
      mmsghdr& h = run_headers_[runs];
      h = mmsghdr{};
      if (has_dest_[first]) {
        h.msg_hdr.msg_name = &dests_[first];
        h.msg_hdr.msg_namelen = sizeof(sockaddr_in);
      }
      h.msg_hdr.msg_iov = &run_iov_[first_iov];
      h.msg_hdr.msg_iovlen = n;
      if (n > 1) {
        h.msg_hdr.msg_control = &run_control_[runs * kGsoControlWords];
        h.msg_hdr.msg_controllen = CMSG_SPACE(sizeof(uint16_t));
        cmsghdr* c = CMSG_FIRSTHDR(&h.msg_hdr);
        c->cmsg_level = SOL_UDP;
        c->cmsg_type = UDP_SEGMENT;
        c->cmsg_len = CMSG_LEN(sizeof(uint16_t));
        const auto size = uint16_t(segment);
        std::memcpy(CMSG_DATA(c), &size, sizeof(size));
      }
      run_counts_[runs++] = uint32_t(n);
    }
  }
  return runs;
}

void SendBatch::Flush(int fd) {
  if (count_ == 0) return;
  size_t n = 0;  // plain headers (one datagram each) to send below
  if (segmentation_ && count_ > 1) {
    const size_t runs = BuildRuns();
    bool refused = false;
    const size_t done = Send(fd, run_headers_.data(), run_counts_.data(), runs, &refused);
    if (!refused) {
      count_ = 0;
      return;
    }
    // The kernel does not segment here: the rest goes one by one, and so
    // does everything after.
    segmentation_ = false;
    for (size_t r = done; r < runs; ++r) {
      const msghdr& run = run_headers_[r].msg_hdr;
      for (size_t j = 0; j < run.msg_iovlen; ++j) {
        headers_[n++] = SingleDatagram(run.msg_name, run.msg_namelen, &run.msg_iov[j]);
      }
    }
  } else {
    for (size_t i = 0; i < count_; ++i) {
      headers_[n++] = has_dest_[i] ? SingleDatagram(&dests_[i], sizeof(sockaddr_in), &iov_[i])
                                   : SingleDatagram(nullptr, 0, &iov_[i]);
    }
  }
  bool refused = false;
  Send(fd, headers_.data(), ones_.data(), n, &refused);
  count_ = 0;
}

}  // namespace switchml::transport::udp
