// How many 4 KiB frames an AF_XDP endpoint's memory holds (no I/O): sized
// from its window where it knows one, and split over the interface's receive
// queues.
#pragma once

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>

#include "transport/transport.h"

namespace switchml::transport::xdp {

// Frames each way when the window is unknown (a switch), and the bounds for
// an endpoint sized from its window.
inline constexpr uint32_t kDefaultFrames = 2048;
inline constexpr uint32_t kMinFrames = 256;
inline constexpr uint32_t kMaxFrames = 8192;
// The fewest receive frames a queue gets, and the ring size of a queue that
// only receives (its completion ring, which nothing uses, cannot be empty).
inline constexpr uint32_t kMinQueueFrames = 64;

// Frames each way, a power of two (the rings' size): room for the window
// twice over (results and retransmissions) and a batch each way.
inline uint32_t FramesFor(const EndpointOptions& o) {
  if (o.window == 0) return kDefaultFrames;
  const size_t want = std::min<size_t>(2 * o.window + o.receive_batch + o.send_queue, kMaxFrames);
  return std::clamp(std::bit_ceil(uint32_t(want)), kMinFrames, kMaxFrames);
}

// Receive frames on each of `queues` queues: all `frames` on one, halved
// (down to kMinQueueFrames) until the queues together hold no more than
// `frames`.
inline uint32_t ReceiveFramesPerQueue(uint32_t frames, int queues) {
  const uint32_t total = frames;
  while (frames > kMinQueueFrames && size_t(frames) * size_t(queues) > total) frames /= 2;
  return frames;
}

}  // namespace switchml::transport::xdp
