// The software switch's packet handler: the source and MAC checks in front of
// the data plane, driven the way a data thread drives it, including the
// window in which the data plane runs a job whose address book is not yet
// installed: no packet ever skips the source or MAC check.
#include "switch/packet_handler.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>

#include <vector>

namespace switchml {
namespace {

constexpr uint16_t kK = 32;
constexpr uint16_t kSlots = 4;

sockaddr_in Address(uint16_t port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return a;
}

struct Recorder : ReplySink {
  void Send(std::span<const uint8_t> datagram, const sockaddr_in& to) override {
    sent.emplace_back(std::vector<uint8_t>(datagram.begin(), datagram.end()), ntohs(to.sin_port));
  }
  std::vector<std::pair<std::vector<uint8_t>, uint16_t>> sent;
};

class PacketHandlerTest : public ::testing::Test {
 protected:
  PacketHandlerTest() : dp_(Config()), handler_(&dp_), out_(MaxPacketBytes(kK)) {}

  static DataPlaneConfig Config() {
    DataPlaneConfig c;
    c.pool_slots = 16;
    c.max_elements_per_packet = kK;
    c.max_workers = 8;
    c.max_jobs = 4;
    return c;
  }

  // What JobRegistry::Join does for the last rank: the data plane runs the job.
  void RegisterInDataPlane() { ASSERT_TRUE(dp_.RegisterJob({job_, 2, kK, 0, kSlots}).ok()); }
  void InstallBook(const std::optional<net::PacketAuthenticator>& auth = std::nullopt) {
    handler_.Install(job_, 2, kSlots, 1, {Address(1000), Address(1001)}, auth);
  }

  static std::vector<uint8_t> Contribution(JobId job, uint16_t rank, int32_t value) {
    PacketHeader h;
    h.type = MessageType::kContribution;
    h.job = job.value();
    h.rank = rank;
    h.element_count = kK;
    std::vector<uint8_t> b(PacketBytes(kK) + kAuthTagBytes);
    EncodeHeader(h, b);
    for (size_t i = 0; i < kK; ++i) StoreBe32(&b[kHeaderBytes + 4 * i], uint32_t(value));
    b.resize(PacketBytes(kK));
    return b;
  }

  bool Handle(const std::vector<uint8_t>& packet, uint16_t from_port) {
    return handler_.Handle(packet, Address(from_port), out_, sink_);
  }

  uint64_t Drops(DropReason r) const { return dp_.counters().drops[size_t(r)]; }

  JobId job_{5};
  DataPlane dp_;
  PacketHandler handler_;
  std::vector<uint8_t> out_;
  Recorder sink_;
};

TEST_F(PacketHandlerTest, JobWithoutAnInstalledBookIsUnknownEvenIfTheDataPlaneRunsIt) {
  RegisterInDataPlane();
  // From rank 0's future address and from anywhere: neither may touch a slot.
  EXPECT_FALSE(Handle(Contribution(job_, 0, 1000), 1000));
  EXPECT_FALSE(Handle(Contribution(job_, 1, 1000), 4242));
  EXPECT_EQ(Drops(DropReason::kUnknownJob), 2u);
  EXPECT_EQ(dp_.counters().contributions, 0u);
  EXPECT_FALSE(handler_.Installed(job_));

  InstallBook();
  EXPECT_TRUE(handler_.Installed(job_));
  EXPECT_FALSE(Handle(Contribution(job_, 0, 1), 1000));
  EXPECT_TRUE(Handle(Contribution(job_, 1, 2), 1001));
  ASSERT_EQ(sink_.sent.size(), 2u);  // the result to both ranks
  PacketView v;
  ASSERT_EQ(DecodePacket(sink_.sent[0].first, &v), DecodeError::kOk);
  EXPECT_EQ(v.header.type, MessageType::kResult);
  EXPECT_EQ(int32_t(LoadBe32(v.payload)), 3);  // 1 + 2: nothing from before the install
  EXPECT_EQ(sink_.sent[0].second, 1000);
  EXPECT_EQ(sink_.sent[1].second, 1001);

  handler_.Remove(job_);
  EXPECT_FALSE(Handle(Contribution(job_, 0, 1), 1000));
  EXPECT_EQ(Drops(DropReason::kUnknownJob), 3u);
}

TEST_F(PacketHandlerTest, KeyedJobNeverAcceptsAnUnsignedPacketBeforeOrAfterInstallation) {
  net::AuthKey secret{};
  secret[0] = 7;
  const net::PacketAuthenticator switch_auth(secret, "salt", job_.value(), net::kSwitchSenderId);
  RegisterInDataPlane();
  EXPECT_FALSE(Handle(Contribution(job_, 0, 1000), 1000));  // before: unknown
  InstallBook(switch_auth);
  EXPECT_FALSE(Handle(Contribution(job_, 0, 1000), 1000));  // after: bad MAC
  EXPECT_EQ(Drops(DropReason::kUnknownJob), 1u);
  EXPECT_EQ(Drops(DropReason::kBadMac), 1u);
  EXPECT_EQ(dp_.counters().contributions, 0u);

  // Signed by the ranks' own authenticators, the job runs, and the reply is signed.
  net::PacketAuthenticator rank0(secret, "salt", job_.value(), net::WorkerSenderId(0, 0));
  net::PacketAuthenticator rank1(secret, "salt", job_.value(), net::WorkerSenderId(1, 0));
  auto sign = [](net::PacketAuthenticator& a, std::vector<uint8_t> p) {
    const size_t n = p.size();
    p.resize(n + kAuthTagBytes);
    p.resize(a.Sign(p.data(), n));
    return p;
  };
  EXPECT_FALSE(Handle(sign(rank0, Contribution(job_, 0, 1)), 1000));
  EXPECT_TRUE(Handle(sign(rank1, Contribution(job_, 1, 2)), 1001));
  ASSERT_EQ(sink_.sent.size(), 2u);
  EXPECT_TRUE(switch_auth.Verify(sink_.sent[0].first));
}

TEST_F(PacketHandlerTest, OnlyTheRegisteredSocketSpeaksForARank) {
  RegisterInDataPlane();
  InstallBook();
  EXPECT_FALSE(Handle(Contribution(job_, 0, 1), 1001));  // rank 1's socket claims rank 0
  EXPECT_EQ(Drops(DropReason::kSourceMismatch), 1u);
  EXPECT_EQ(dp_.counters().contributions, 0u);
  // Longer than the data plane's largest packet: malformed, before anything else.
  std::vector<uint8_t> huge = Contribution(job_, 0, 1);
  huge.resize(MaxPacketBytes(kK) + 1);
  EXPECT_FALSE(Handle(huge, 1000));
  EXPECT_EQ(Drops(DropReason::kMalformed), 1u);
  EXPECT_EQ(dp_.counters().decode_errors[size_t(DecodeError::kLengthMismatch)], 1u);
  // Rank and slot out of range still reach the data plane's own counters.
  EXPECT_FALSE(Handle(Contribution(job_, 7, 1), 1000));
  EXPECT_EQ(Drops(DropReason::kRankOutOfRange), 1u);
}

// A rack switch of a tree (docs/design.md §10): ranks 0 and 1 of a 3-rank
// job are served here, and a completed slot goes upstream as member 1 of the
// upstream's job 99; only the upstream's socket may answer, once per slot.
TEST_F(PacketHandlerTest, ARackSendsCompletedSlotsUpstreamAndTakesOnlyItsAnswer) {
  JobRegistration share{job_, 3, kK, 0, kSlots};
  share.local_ranks = {0, 1};
  share.upstream = UpstreamLink{JobId(99), 1};
  ASSERT_TRUE(dp_.RegisterJob(share).ok());
  handler_.Install(job_, 3, kSlots, 1, {Address(1000), Address(1001), sockaddr_in{}}, std::nullopt,
                   {}, UpstreamRoute{JobId(99), {Address(2000)}, std::nullopt});
  EXPECT_FALSE(Handle(Contribution(job_, 2, 9), 1002));  // a rank of another rack
  EXPECT_FALSE(Handle(Contribution(job_, 0, 5), 1000));
  EXPECT_TRUE(Handle(Contribution(job_, 1, 7), 1001));
  ASSERT_EQ(sink_.sent.size(), 1u);
  PacketView v;
  ASSERT_EQ(DecodePacket(sink_.sent[0].first, &v), DecodeError::kOk);
  EXPECT_EQ(sink_.sent[0].second, 2000);
  EXPECT_EQ(v.header.type, MessageType::kContribution);
  EXPECT_EQ(v.header.job, 99u);
  EXPECT_EQ(v.header.rank, 1);
  EXPECT_EQ(int32_t(LoadBe32(v.payload)), 12);  // the partial sum, as it stands

  // The upstream's result, from elsewhere and then from its socket.
  std::vector<uint8_t> result = Contribution(JobId(99), kAllRanks, 30);
  PacketHeader h = v.header;
  h.type = MessageType::kResult;
  h.rank = kAllRanks;
  EncodeHeader(h, result);
  EXPECT_FALSE(Handle(result, 2001));
  EXPECT_EQ(Drops(DropReason::kSourceMismatch), 2u);  // and rank 2's packet above
  EXPECT_TRUE(Handle(result, 2000));
  ASSERT_EQ(sink_.sent.size(), 3u);  // to ranks 0 and 1, not to the unset rank 2
  ASSERT_EQ(DecodePacket(sink_.sent[1].first, &v), DecodeError::kOk);
  EXPECT_EQ(v.header.type, MessageType::kResult);
  EXPECT_EQ(v.header.job, job_.value());
  EXPECT_EQ(int32_t(LoadBe32(v.payload)), 30);
  EXPECT_EQ(sink_.sent[1].second, 1000);
  EXPECT_EQ(sink_.sent[2].second, 1001);
  EXPECT_FALSE(Handle(result, 2000));  // a duplicate answers nothing
  EXPECT_EQ(Drops(DropReason::kStaleChunk), 1u);
  EXPECT_EQ(dp_.counters().upstream_results, 1u);

  // A retransmission after the result gets the stored upstream result.
  EXPECT_TRUE(Handle(Contribution(job_, 0, 5), 1000));
  ASSERT_EQ(DecodePacket(sink_.sent.back().first, &v), DecodeError::kOk);
  EXPECT_EQ(int32_t(LoadBe32(v.payload)), 30);
}

}  // namespace
}  // namespace switchml
