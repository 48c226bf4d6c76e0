#include "transport/ethernet/frame_endpoint.h"

namespace switchml::transport::ethernet {

Status FrameEndpoint::Connect(const Address& peer) {
  if (Status s = AddPeer(peer); !s.ok()) return s;
  peer_ = peer;
  connected_ = true;
  return Status::Ok();
}

Status FrameEndpoint::SetHostLocalMulticast() {
  return Status(StatusCode::kFailedPrecondition,
                transport_ + " sends no multicast (results go by unicast)");
}

Status FrameEndpoint::PinPeer(uint32_t address, const Mac& mac) {
  if (macs_.Pin(address, mac)) return Status::Ok();
  return Status(StatusCode::kResourceExhausted, transport_ + ": an endpoint sends to at most " +
                                                    std::to_string(MacTable::kMaxPinned) +
                                                    " announced peers");
}

}  // namespace switchml::transport::ethernet
