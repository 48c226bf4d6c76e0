#include "transport/udp/udp_transport.h"

#include <algorithm>
#include <vector>

#include "transport/udp/udp_socket.h"

namespace switchml::transport::udp {
namespace {

class UdpEndpoint final : public Endpoint {
 public:
  UdpEndpoint(UdpSocket socket, const EndpointOptions& o) : socket_(std::move(socket)) {
    Reconfigure(o);
  }

  void Reconfigure(const EndpointOptions& o) override {
    // Offloads only where the kernel takes them; a socket that cannot
    // coalesce just delivers single datagrams.
    if (o.udp.offload) {
      coalescing_ = EnableReceiveCoalescing(socket_.fd());
    } else if (coalescing_) {
      EnableReceiveCoalescing(socket_.fd(), false);
      coalescing_ = false;
    }
    const size_t buffers = coalescing_ ? CoalescedBuffers(o) : o.receive_batch;
    // One extra byte tells a datagram that is too long from one that fits.
    recv_ = RecvBatch(buffers, o.max_datagram_bytes + 1, coalescing_);
    received_.assign(coalescing_ ? buffers * kMaxSegments : buffers, Datagram{});
    send_ = SendBatch(o.send_queue, o.claim_buffers ? o.max_datagram_bytes : 0);
    send_.set_segmentation(o.udp.offload && SegmentationSupported(socket_.fd()));
  }

  Address local_address() const override { return socket_.LocalAddress(); }
  Status Connect(const Address& peer) override { return socket_.Connect(peer); }
  Status SetHostLocalMulticast() override { return socket_.SetHostLocalMulticast(); }
  std::vector<int> wait_fds() const override { return {socket_.fd()}; }
  size_t receive_capacity() const override { return received_.size(); }
  std::string description() const override {
    if (coalescing_ && send_.segmentation()) return "segmentation and coalescing";
    if (coalescing_) return "coalescing only";
    if (send_.segmentation()) return "segmentation only";
    return "off";
  }

  std::span<uint8_t> Claim() override { return send_.Claim(socket_.fd()); }
  void Commit(size_t bytes, const Address* dest) override { send_.Commit(bytes, dest); }
  void SendRef(std::span<const uint8_t> bytes, const Address& dest) override {
    send_.AddRef(socket_.fd(), bytes, &dest);
  }
  void Flush() override { send_.Flush(socket_.fd()); }

  std::span<const Datagram> Receive() override {
    const int n = recv_.Receive(socket_.fd());
    for (int i = 0; i < n; ++i) received_[i] = {recv_.packet(i), &recv_.source(i)};
    total_received_ += uint64_t(n);
    return {received_.data(), size_t(n)};
  }

  EndpointCounters counters() const override {
    EndpointCounters c;
    c.sent = send_.sent();
    c.send_dropped = send_.dropped();
    c.sent_batches = send_.super_datagrams();
    c.received = total_received_;
    c.received_batches = recv_.coalesced_received();
    return c;
  }

 private:
  UdpSocket socket_;
  bool coalescing_ = false;
  RecvBatch recv_{1, 1};
  SendBatch send_{1, 0};
  std::vector<Datagram> received_;
  uint64_t total_received_ = 0;
};

}  // namespace

size_t CoalescedBuffers(const EndpointOptions& o) {
  return o.udp.coalesced_buffers ? o.udp.coalesced_buffers
                                 : std::max<size_t>(1, o.receive_batch / 8);
}

StatusOr<std::unique_ptr<Endpoint>> UdpTransport::Open(const Address& local,
                                                       const EndpointOptions& options) {
  auto socket = UdpSocket::Bind(local, options.udp.socket_buffer_bytes);
  if (!socket.ok()) return socket.status();
  return std::unique_ptr<Endpoint>(new UdpEndpoint(std::move(socket).value(), options));
}

StatusOr<std::unique_ptr<Endpoint>> UdpTransport::JoinGroup(const Address& group, in_addr interface,
                                                            const EndpointOptions& options) {
  auto socket = UdpSocket::JoinGroup(group, interface, options.udp.socket_buffer_bytes);
  if (!socket.ok()) return socket.status();
  return std::unique_ptr<Endpoint>(new UdpEndpoint(std::move(socket).value(), options));
}

StatusOr<Route> UdpTransport::RouteToward(const Address& peer) {
  Address any{};
  any.sin_family = AF_INET;
  auto probe = UdpSocket::Bind(any, 65536);
  if (!probe.ok()) return probe.status();
  if (Status s = probe.value().Connect(peer); !s.ok()) return s;
  Route route{probe.value().LocalAddress().sin_addr};
  socklen_t len = sizeof(route.mtu);
  if (getsockopt(probe.value().fd(), IPPROTO_IP, IP_MTU, &route.mtu, &len) != 0) route.mtu = 0;
  return route;
}

}  // namespace switchml::transport::udp
