// The AF_XDP endpoint's frame memory: sized from the window, bounded, and
// split over receive queues.
#include <gtest/gtest.h>

#include "transport/xdp/umem_sizing.h"

namespace switchml::transport::xdp {
namespace {

EndpointOptions Window(size_t window, size_t batch = 64, size_t send_queue = 64) {
  EndpointOptions o;
  o.window = window;
  o.receive_batch = batch;
  o.send_queue = send_queue;
  return o;
}

TEST(UmemSizing, AnUnknownWindowGetsTheDefault) { EXPECT_EQ(FramesFor(Window(0)), kDefaultFrames); }

TEST(UmemSizing, TheWindowTwiceOverAndABatchEachWayRoundedUpToAPowerOfTwo) {
  EXPECT_EQ(FramesFor(Window(128)), 512u);           // 256 + 64 + 64 = 384
  EXPECT_EQ(FramesFor(Window(192)), 512u);           // 384 + 128 = 512 exactly
  EXPECT_EQ(FramesFor(Window(193)), 1024u);          // 514
  EXPECT_EQ(FramesFor(Window(900, 8, 64)), 2048u);   // 1872
  EXPECT_EQ(FramesFor(Window(1000, 8, 64)), 4096u);  // 2072
}

TEST(UmemSizing, SmallAndHugeWindowsAreBounded) {
  EXPECT_EQ(FramesFor(Window(1, 1, 1)), kMinFrames);
  EXPECT_EQ(FramesFor(Window(5000)), kMaxFrames);
  EXPECT_EQ(FramesFor(Window(size_t{1} << 40)), kMaxFrames);
}

TEST(UmemSizing, ReceiveFramesSplitOverQueues) {
  EXPECT_EQ(ReceiveFramesPerQueue(2048, 1), 2048u);
  EXPECT_EQ(ReceiveFramesPerQueue(2048, 2), 1024u);
  EXPECT_EQ(ReceiveFramesPerQueue(2048, 3), 512u);  // 3 x 1024 would exceed 2048
  EXPECT_EQ(ReceiveFramesPerQueue(2048, 4), 512u);
  EXPECT_EQ(ReceiveFramesPerQueue(512, 8), 64u);
  EXPECT_EQ(ReceiveFramesPerQueue(2048, 256), 64u);  // never fewer than 64 a queue
}

}  // namespace
}  // namespace switchml::transport::xdp
