// UDP segmentation (GSO) and receive coalescing (GRO) in the kernel UDP
// transport: the same datagrams arrive, in order per destination, whether
// the batch segments or not, whether the receiver coalesces or not, and when
// the kernel refuses segmentation part way; and coalesced buffers are split
// exactly, whatever segment size they claim.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <poll.h>

#include <string>
#include <vector>

#include "transport/udp/udp_socket.h"

namespace switchml::transport::udp {
namespace {

using Datagram = std::vector<uint8_t>;

TEST(RecvBatchSplit, CutsBySegmentSizeWithAShortLastSegment) {
  std::vector<RecvBatch::Segment> out(kMaxSegments);
  ASSERT_EQ(RecvBatch::Split(250, 100, 3, 1000, out.data()), 3u);
  EXPECT_EQ(out[0].offset, 1000u);
  EXPECT_EQ(out[1].offset, 1100u);
  EXPECT_EQ(out[2].offset, 1200u);
  EXPECT_EQ(out[2].length, 50u);
  EXPECT_EQ(out[2].message, 3u);
  ASSERT_EQ(RecvBatch::Split(300, 100, 0, 0, out.data()), 3u);
  EXPECT_EQ(out[2].length, 100u);
}

TEST(RecvBatchSplit, HostileSegmentSizesGiveOneDatagram) {
  std::vector<RecvBatch::Segment> out(kMaxSegments);
  for (const int size : {0, -5, 300, 301, 1 << 30}) {
    SCOPED_TRACE(size);
    ASSERT_EQ(RecvBatch::Split(300, size, 1, 64, out.data()), 1u);
    EXPECT_EQ(out[0].offset, 64u);
    EXPECT_EQ(out[0].length, 300u);
  }
  EXPECT_EQ(RecvBatch::Split(0, 100, 0, 0, out.data()), 1u);  // an empty datagram
  EXPECT_EQ(out[0].length, 0u);
}

TEST(RecvBatchSplit, NeverMoreThanTheSegmentLimit) {
  std::vector<RecvBatch::Segment> out(kMaxSegments);
  // 100 segments' worth: the first 63 exact, the last holds the rest (and
  // fails the decoder's length check as one datagram would).
  ASSERT_EQ(RecvBatch::Split(1000, 10, 0, 0, out.data()), kMaxSegments);
  EXPECT_EQ(out[kMaxSegments - 2].length, 10u);
  EXPECT_EQ(out[kMaxSegments - 1].offset, 630u);
  EXPECT_EQ(out[kMaxSegments - 1].length, 370u);
}

sockaddr_in Loopback() {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return a;
}

// Everything waiting on `fd`, in arrival order.
std::vector<Datagram> Drain(int fd, RecvBatch& batch) {
  std::vector<Datagram> got;
  for (int idle = 0; idle < 20;) {
    const int n = batch.Receive(fd);
    if (n == 0) {
      pollfd p{fd, POLLIN, 0};
      idle += poll(&p, 1, 10) == 0;
      continue;
    }
    for (int i = 0; i < n; ++i) got.emplace_back(batch.packet(i).begin(), batch.packet(i).end());
  }
  return got;
}

Datagram Make(uint8_t tag, size_t size) {
  Datagram d(size);
  for (size_t i = 0; i < size; ++i) d[i] = uint8_t(tag + i);
  return d;
}

struct Case {
  bool segmentation;
  bool coalescing;
  bool refuse;  // the sender socket makes the kernel refuse segmentation
};

class UdpOffload : public ::testing::TestWithParam<Case> {};

TEST_P(UdpOffload, SameDatagramsInOrderPerDestination) {
  const Case c = GetParam();
  auto a = UdpSocket::Bind(Loopback(), 8 << 20);
  auto b = UdpSocket::Bind(Loopback(), 8 << 20);
  auto tx = UdpSocket::Bind(Loopback(), 8 << 20);
  ASSERT_TRUE(a.ok() && b.ok() && tx.ok());
  const bool gro = c.coalescing && EnableReceiveCoalescing(a.value().fd()) &&
                   EnableReceiveCoalescing(b.value().fd());
  const bool gso = c.segmentation && SegmentationSupported(tx.value().fd());
  if (c.refuse) {
    const int one = 1;  // no UDP checksums: the kernel refuses UDP_SEGMENT (EINVAL)
    ASSERT_EQ(setsockopt(tx.value().fd(), SOL_SOCKET, SO_NO_CHECK, &one, sizeof(one)), 0);
  }
  const sockaddr_in to_a = a.value().LocalAddress(), to_b = b.value().LocalAddress();

  // To a: 70 of 100 bytes (more than one super-datagram holds), a short one,
  // then mixed sizes; to b, interleaved: 5 of 300 bytes and a longer one.
  std::vector<Datagram> for_a, for_b;
  for (int i = 0; i < 70; ++i) for_a.push_back(Make(uint8_t(i), 100));
  for_a.push_back(Make(200, 40));
  for (size_t size : {100, 100, 60, 100, 120, 120}) for_a.push_back(Make(uint8_t(size), size));
  for (int i = 0; i < 5; ++i) for_b.push_back(Make(uint8_t(100 + i), 300));
  for_b.push_back(Make(7, 500));

  SendBatch batch(256, 600);
  batch.set_segmentation(gso);
  size_t ia = 0, ib = 0;
  while (ia < for_a.size() || ib < for_b.size()) {
    if (ia < for_a.size()) batch.Add(tx.value().fd(), for_a[ia++], &to_a);
    if (ia % 4 == 0 && ib < for_b.size()) batch.Add(tx.value().fd(), for_b[ib++], &to_b);
  }
  batch.Flush(tx.value().fd());
  EXPECT_EQ(batch.sent(), for_a.size() + for_b.size());
  EXPECT_EQ(batch.dropped(), 0u);
  if (gso && !c.refuse) {
    EXPECT_GE(batch.super_datagrams(), 3u);
  } else {
    EXPECT_EQ(batch.super_datagrams(), 0u);
  }
  if (c.refuse) {
    EXPECT_FALSE(batch.segmentation());
  }

  RecvBatch ra(8, 601, gro), rb(8, 601, gro);
  EXPECT_EQ(Drain(a.value().fd(), ra), for_a);
  EXPECT_EQ(Drain(b.value().fd(), rb), for_b);
  if (gso && gro && !c.refuse) {
    EXPECT_GT(ra.coalesced_received(), 0u);
  }
  if (!gro) {
    EXPECT_EQ(ra.coalesced_received(), 0u);
  }
}

INSTANTIATE_TEST_SUITE_P(Paths, UdpOffload,
                         ::testing::Values(Case{true, true, false}, Case{true, false, false},
                                           Case{false, true, false}, Case{false, false, false},
                                           Case{true, true, true}),
                         [](const auto& info) {
                           const Case& c = info.param;
                           return std::string(c.segmentation ? "Gso" : "NoGso") +
                                  (c.coalescing ? "Gro" : "NoGro") + (c.refuse ? "Refused" : "");
                         });

}  // namespace
}  // namespace switchml::transport::udp
