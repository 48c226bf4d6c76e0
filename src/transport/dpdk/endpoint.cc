#include "transport/dpdk/endpoint.h"

#include <rte_mbuf.h>
#include <rte_pause.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <vector>

#include "net/address.h"
#include "transport/ethernet/arp.h"
#include "transport/ethernet/frame_endpoint.h"
#include "transport/ethernet/mac_table.h"

namespace switchml::transport::dpdk {
namespace {

using ethernet::ArpMessage;
using ethernet::ArpOp;
using ethernet::FrameAddresses;
using ethernet::FrameEndpoint;
using ethernet::kHeaderBytes;

// A send that the port does not take within this long is dropped and counted.
constexpr std::chrono::microseconds kSendPatience{1000};
// Misses are asked for by ARP at most this often.
constexpr std::chrono::milliseconds kArpInterval{5};

std::chrono::steady_clock::time_point Now() { return std::chrono::steady_clock::now(); }

class DpdkEndpoint final : public FrameEndpoint {
 public:
  DpdkEndpoint(std::shared_ptr<Port> port, uint32_t shard, rte_ring* ring, Address local,
               std::optional<udp::UdpSocket> port_holder)
      : FrameEndpoint("dpdk"),
        port_(std::move(port)),
        shard_(shard),
        hand_off_(ring),
        local_(local),
        port_holder_(std::move(port_holder)) {}

  ~DpdkEndpoint() override {
    FreeBulk(held_);
    FreeBulk(stash_, stash_count_);
    FreeBulk(tx_, queued_);
    if (claimed_ != nullptr) rte_pktmbuf_free(claimed_);
    port_->Release(shard_);
  }

  Address local_address() const override { return local_; }

  // Asks for the peer's MAC by ARP now, for up to a second (setup path).
  Status AddPeer(const Address& peer) override {
    const uint32_t address = peer.sin_addr.s_addr;
    if (address == local_.sin_addr.s_addr) {
      return Status(StatusCode::kFailedPrecondition,
                    "dpdk: " + net::FormatAddress(peer) +
                        " is this endpoint's own address; a frame sent out of a DPDK port never "
                        "comes back (put the peer on another host, or use --transport udp)");
    }
    const auto deadline = Now() + std::chrono::seconds(1);
    for (auto next_ask = Now(); macs_.Find(address) == nullptr && Now() < deadline;) {
      if (Now() >= next_ask) {
        SendArp(ArpOp::kRequest, ethernet::kBroadcastMac, address);
        next_ask = Now() + std::chrono::milliseconds(100);
      }
      (void)Receive();  // learns from the reply; nothing else is expected yet
      rte_pause();
    }
    const Mac* mac = macs_.Find(address);
    if (mac == nullptr) {
      return Status(StatusCode::kDeadlineExceeded,
                    "dpdk: no ARP reply from " + net::FormatAddress(peer) + " on " +
                        PortText(port_->name()) +
                        " within 1 s (is the peer up and on this port's link? this version "
                        "reaches peers on the same link only)");
    }
    return PinPeer(address, *mac);
  }

  std::vector<int> wait_fds() const override { return {}; }
  size_t receive_capacity() const override { return datagrams_.size(); }

  bool Ready() override {
    if (stash_count_ != 0 || rte_ring_count(hand_off_) != 0) return true;
    stash_count_ = rte_eth_rx_burst(port_->id(), uint16_t(shard_), stash_.data(),
                                    uint16_t(options_.receive_batch));
    return stash_count_ != 0;
  }

  void Reconfigure(const EndpointOptions& options) override {
    FreeBulk(stash_, stash_count_);
    stash_count_ = 0;
    options_ = options;
    options_.receive_batch = std::clamp<size_t>(options.receive_batch, 1, 512);
    options_.send_queue = std::clamp<size_t>(options.send_queue, 1, 4096);
    batch_.resize(options_.receive_batch);
    stash_.resize(options_.receive_batch);
    held_.reserve(options_.receive_batch);
    datagrams_.resize(options_.receive_batch);
    sources_.resize(options_.receive_batch);
    tx_.resize(options_.send_queue);
    scratch_.resize(options_.max_datagram_bytes);
  }

  std::string description() const override {
    return "dpdk " + port_->name() + ", queue " + std::to_string(shard_);
  }

  std::span<uint8_t> Claim() override {
    if (queued_ >= options_.send_queue) Flush();
    const size_t room = std::min(options_.max_datagram_bytes, MaxPayload());
    if (claimed_ != nullptr) rte_pktmbuf_free(claimed_);  // claimed and never committed
    claimed_ = rte_pktmbuf_alloc(port_->pool());
    if (claimed_ == nullptr) return {scratch_.data(), room};  // Commit() counts the drop
    return {rte_pktmbuf_mtod(claimed_, uint8_t*) + kHeaderBytes, room};
  }

  void Commit(size_t bytes, const Address* dest) override {
    rte_mbuf* m = std::exchange(claimed_, nullptr);
    if (m == nullptr) {
      ++counters_.send_dropped;
      return;
    }
    Queue(m, bytes, Destination(dest));
  }

  void SendRef(std::span<const uint8_t> bytes, const Address& dest) override {
    rte_mbuf* m = bytes.size() <= MaxPayload() ? rte_pktmbuf_alloc(port_->pool()) : nullptr;
    if (m == nullptr) {
      ++counters_.send_dropped;
      return;
    }
    std::memcpy(rte_pktmbuf_mtod(m, uint8_t*) + kHeaderBytes, bytes.data(), bytes.size());
    Queue(m, bytes.size(), dest);
  }

  void Flush() override {
    size_t sent = 0;
    std::optional<std::chrono::steady_clock::time_point> stalled_since;
    while (sent < queued_) {
      const uint16_t n =
          rte_eth_tx_burst(port_->id(), uint16_t(shard_), &tx_[sent], uint16_t(queued_ - sent));
      sent += n;
      if (n != 0) {
        stalled_since.reset();
      } else if (!stalled_since) {
        stalled_since = Now();
      } else if (Now() - *stalled_since > kSendPatience) {
        break;
      }
    }
    counters_.sent += sent;
    counters_.send_dropped += queued_ - sent;
    FreeBulk(std::span(tx_).subspan(sent, queued_ - sent));
    queued_ = 0;
    if (!macs_.misses().empty()) AskForMisses();
  }

  std::span<const Datagram> Receive() override {
    FreeBulk(held_);
    held_.clear();
    size_t count = 0;
    // Datagrams other shards took off their queues for this one.
    const unsigned handed = rte_ring_sc_dequeue_burst(
        hand_off_, reinterpret_cast<void**>(batch_.data()), unsigned(batch_.size()), nullptr);
    for (unsigned i = 0; i < handed; ++i) count = Take(batch_[i], count, /*handed=*/true);
    // Then this shard's own queue: what Ready() fetched, else a new burst.
    size_t n = 0;
    if (stash_count_ != 0) {
      n = std::min<size_t>(stash_count_, batch_.size() - count);
      std::copy_n(stash_.begin(), n, batch_.begin());
      std::copy(stash_.begin() + long(n), stash_.begin() + long(stash_count_), stash_.begin());
      stash_count_ -= n;
    } else if (count < batch_.size()) {
      n = rte_eth_rx_burst(port_->id(), uint16_t(shard_), batch_.data(),
                           uint16_t(batch_.size() - count));
    }
    for (size_t i = 0; i < n; ++i) count = Take(batch_[i], count, /*handed=*/false);
    counters_.received += count;
    return {datagrams_.data(), count};
  }

  EndpointCounters counters() const override { return counters_; }

 private:
  size_t MaxPayload() const { return size_t(port_->mtu()) - 28; }  // IPv4 + UDP headers

  template <typename Mbufs>
  static void FreeBulk(Mbufs& mbufs, size_t count) {
    for (size_t i = 0; i < count; ++i) rte_pktmbuf_free(mbufs[i]);
  }
  static void FreeBulk(std::span<rte_mbuf*> mbufs) { FreeBulk(mbufs, mbufs.size()); }
  static void FreeBulk(std::vector<rte_mbuf*>& mbufs) { FreeBulk(mbufs, mbufs.size()); }

  // One received frame: delivered as datagram `count` (returns count + 1),
  // answered (ARP), handed to the shard it is for, or dropped and counted.
  size_t Take(rte_mbuf* m, size_t count, bool handed) {
    const std::span<const uint8_t> frame(rte_pktmbuf_mtod(m, const uint8_t*), m->data_len);
    if (m->nb_segs != 1) return Drop(m, count);
    if (ethernet::IsArp(frame)) {
      OnArp(m, frame, handed);
      return count;
    }
    const auto parsed = ethernet::ParseFrame(frame);
    if (!parsed || parsed->addresses.dest.sin_addr.s_addr != local_.sin_addr.s_addr) {
      return Drop(m, count);  // malformed, or not for this address (af_packet sees what leaves)
    }
    if (parsed->addresses.dest.sin_port != local_.sin_port) {
      rte_ring* owner = handed ? nullptr : port_->RingFor(parsed->addresses.dest.sin_port);
      if (owner == nullptr || rte_ring_mp_enqueue(owner, m) != 0) return Drop(m, count);
      return count;
    }
    if (!Accepts(parsed->addresses.source)) return Drop(m, count);
    macs_.Learn(parsed->addresses.source.sin_addr.s_addr, parsed->addresses.source_mac);
    if (handed) ++counters_.off_queue;
    sources_[count] = parsed->addresses.source;
    datagrams_[count] = Datagram{parsed->payload, &sources_[count]};
    held_.push_back(m);
    return count + 1;
  }

  size_t Drop(rte_mbuf* m, size_t count) {
    ++counters_.malformed;
    rte_pktmbuf_free(m);
    return count;
  }

  // Learns the sender of a request for this address or of a reply to it,
  // answers a request, and shows a reply that came on this shard's queue to
  // the other shards (which may have asked).
  void OnArp(rte_mbuf* m, std::span<const uint8_t> frame, bool handed) {
    const auto arp = ethernet::ParseArp(frame);
    if (arp && arp->target_ip == local_.sin_addr.s_addr && arp->sender_ip != 0) {
      macs_.Resolved(arp->sender_ip, arp->sender_mac);
      if (arp->op == ArpOp::kRequest) SendArp(ArpOp::kReply, arp->sender_mac, arp->sender_ip);
      if (arp->op == ArpOp::kReply && !handed) {
        port_->ForOtherShards(shard_, [&](rte_ring* ring) {
          rte_mbuf_refcnt_update(m, 1);
          if (rte_ring_mp_enqueue(ring, m) != 0) rte_pktmbuf_free(m);
        });
      }
    }
    rte_pktmbuf_free(m);
  }

  void SendArp(ArpOp op, const Mac& dest_mac, uint32_t target_ip) {
    rte_mbuf* m = rte_pktmbuf_alloc(port_->pool());
    if (m == nullptr) return;
    ArpMessage a;
    a.op = op;
    a.sender_mac = port_->mac();
    a.sender_ip = local_.sin_addr.s_addr;
    if (op == ArpOp::kReply) a.target_mac = dest_mac;
    a.target_ip = target_ip;
    ethernet::WriteArp({rte_pktmbuf_mtod(m, uint8_t*), ethernet::kArpFrameBytes}, a, dest_mac);
    m->data_len = m->pkt_len = ethernet::kArpFrameBytes;
    if (rte_eth_tx_burst(port_->id(), uint16_t(shard_), &m, 1) != 1) rte_pktmbuf_free(m);
  }

  // Addresses sent to without a MAC: asked for by ARP (the sends were
  // dropped; the protocol's retransmissions recover them).
  void AskForMisses() {
    const auto now = Now();
    if (now < next_ask_) return;
    next_ask_ = now + kArpInterval;
    for (const uint32_t address : macs_.misses()) {
      SendArp(ArpOp::kRequest, ethernet::kBroadcastMac, address);
    }
    macs_.ClearMisses();
  }

  void Queue(rte_mbuf* m, size_t bytes, const Address& dest) {
    const Mac* mac = macs_.Find(dest.sin_addr.s_addr);
    if (mac == nullptr || bytes > MaxPayload()) {
      if (mac == nullptr) macs_.Miss(dest.sin_addr.s_addr);
      rte_pktmbuf_free(m);
      ++counters_.send_dropped;
      return;
    }
    FrameAddresses a;
    a.source_mac = port_->mac();
    a.dest_mac = *mac;
    a.source = local_;
    a.dest = dest;
    ethernet::WriteHeaders({rte_pktmbuf_mtod(m, uint8_t*), kHeaderBytes + bytes}, bytes, a,
                           ip_id_++);
    m->data_len = m->pkt_len = uint32_t(kHeaderBytes + bytes);
    tx_[queued_++] = m;
    if (queued_ >= options_.send_queue) Flush();
  }

  std::shared_ptr<Port> port_;
  const uint32_t shard_;
  rte_ring* const hand_off_;
  Address local_;
  // Where the kernel has the address too: keeps its UDP port from others,
  // and its datagrams from an ICMP "port unreachable".
  std::optional<udp::UdpSocket> port_holder_;
  EndpointOptions options_;
  std::vector<rte_mbuf*> batch_;  // one receive burst
  std::vector<rte_mbuf*> stash_;  // what Ready() fetched, for the next Receive()
  size_t stash_count_ = 0;
  std::vector<rte_mbuf*> held_;  // the last batch's, until the next Receive()
  std::vector<Datagram> datagrams_;
  std::vector<Address> sources_;
  std::vector<rte_mbuf*> tx_;  // queued sends
  size_t queued_ = 0;
  rte_mbuf* claimed_ = nullptr;
  std::vector<uint8_t> scratch_;  // where Claim() writes when no mbuf is free
  uint16_t ip_id_ = 0;
  std::chrono::steady_clock::time_point next_ask_{};
  EndpointCounters counters_;
};

}  // namespace

std::unique_ptr<Endpoint> MakeEndpoint(std::shared_ptr<Port> port, uint32_t shard, rte_ring* ring,
                                       Address local, std::optional<udp::UdpSocket> port_holder,
                                       const EndpointOptions& options) {
  auto endpoint =
      std::make_unique<DpdkEndpoint>(std::move(port), shard, ring, local, std::move(port_holder));
  endpoint->Reconfigure(options);
  return endpoint;
}

}  // namespace switchml::transport::dpdk
