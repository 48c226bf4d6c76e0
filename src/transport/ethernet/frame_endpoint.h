// What the endpoints that build their own Ethernet frames (AF_XDP, DPDK)
// share: the MACs of their peers, the one peer of a connected endpoint, and
// the answer for what such an endpoint does not do (multicast). Each back end
// adds how it finds a peer's MAC (AddPeer) and its own rings.
#pragma once

#include <string>

#include "net/address.h"
#include "transport/ethernet/mac_table.h"
#include "transport/transport.h"

namespace switchml::transport::ethernet {

class FrameEndpoint : public Endpoint {
 public:
  // Announces the peer (AddPeer); from then on only its datagrams are taken,
  // and a send without a destination goes to it.
  Status Connect(const Address& peer) final;
  // Results reach such an endpoint by unicast.
  Status SetHostLocalMulticast() final;

 protected:
  // `transport` names the back end in errors ("af_xdp", "dpdk").
  explicit FrameEndpoint(std::string transport) : transport_(std::move(transport)) {}

  // Keeps `mac` for an announced peer (never evicted).
  Status PinPeer(uint32_t address, const Mac& mac);
  // Whether a datagram from `source` is taken: a connected endpoint takes
  // its peer's only.
  bool Accepts(const Address& source) const {
    return !connected_ || net::SameAddress(source, peer_);
  }
  // Where a send goes: `dest`, or the connected peer.
  const Address& Destination(const Address* dest) const { return dest != nullptr ? *dest : peer_; }

  MacTable macs_;

 private:
  const std::string transport_;
  bool connected_ = false;
  Address peer_{};
};

}  // namespace switchml::transport::ethernet
