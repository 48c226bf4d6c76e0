#include "control/job_registry.h"

#include <gtest/gtest.h>

namespace switchml {
namespace {

class JobRegistryTest : public ::testing::Test {
 protected:
  JobRegistryTest() : registry_(Config()) {}
  static DataPlaneConfig Config() {
    DataPlaneConfig c;
    c.pool_slots = 100;
    c.max_elements_per_packet = 256;
    c.max_workers = 8;
    c.max_jobs = 2;
    return c;
  }
  JobRequest Request(const std::string& name, uint16_t rank, uint16_t world = 2,
                     uint16_t slots = 40) {
    return JobRequest{name, rank, world, 64, slots};
  }
  JobRegistry registry_;
};

TEST_F(JobRegistryTest, JobIsInstalledWhenTheLastRankJoins) {
  ASSERT_TRUE(registry_.Join(Request("a", 1, 3)).ok());
  ASSERT_TRUE(registry_.Join(Request("a", 0, 3)).ok());
  EXPECT_FALSE(registry_.Assignment("a").has_value());
  EXPECT_EQ(registry_.MissingRanks("a"), std::vector<uint16_t>{2});
  ASSERT_TRUE(registry_.Join(Request("a", 2, 3)).ok());
  const auto a = registry_.Assignment("a");
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(a->world_size, 3);
  EXPECT_EQ(a->pool_slots, 40);
  // The assignment is what a data plane needs to run the job.
  DataPlane dp(Config());
  ASSERT_TRUE(dp.RegisterJob(ToRegistration(*a)).ok());
  EXPECT_TRUE(dp.HasJob(a->id));
}

TEST_F(JobRegistryTest, WorldSizeMismatchIsRejected) {
  ASSERT_TRUE(registry_.Join(Request("a", 0, 2)).ok());
  const Status s = registry_.Join(Request("a", 1, 3));
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("rank 1's world_size 3 differs from the job's 2"), std::string::npos)
      << s.message();
}

TEST_F(JobRegistryTest, ElementsPerPacketMismatchIsRejected) {
  ASSERT_TRUE(registry_.Join(Request("a", 0)).ok());
  JobRequest r = Request("a", 1);
  r.elements_per_packet = 128;
  const Status s = registry_.Join(r);
  EXPECT_NE(s.message().find("elements_per_packet 128 differs from the job's 64"),
            std::string::npos)
      << s.message();
}

// elements_per_packet 0: the largest power of two that every rank's path
// (256 when a rank does not know) and the data plane (256 here) carry.
TEST_F(JobRegistryTest, AutomaticElementsPerPacketFitsEveryPathAndTheSwitch) {
  auto automatic = [&](const std::string& name, uint16_t rank, uint16_t path) {
    JobRequest r = Request(name, rank, 3);
    r.elements_per_packet = 0;
    r.path_elements_per_packet = path;
    return registry_.Join(r);
  };
  ASSERT_TRUE(automatic("a", 0, 8192).ok());
  ASSERT_TRUE(automatic("a", 1, 128).ok());
  ASSERT_TRUE(automatic("a", 2, 1000).ok());
  EXPECT_EQ(registry_.Assignment("a")->elements_per_packet, 128);
  ASSERT_TRUE(registry_.End("a").ok());
  for (uint16_t r = 0; r < 3; ++r) ASSERT_TRUE(automatic("b", r, 8192).ok());
  EXPECT_EQ(registry_.Assignment("b")->elements_per_packet, 256);  // the data plane's limit
  ASSERT_TRUE(registry_.End("b").ok());
  for (uint16_t r = 0; r < 3; ++r) ASSERT_TRUE(automatic("c", r, r == 1 ? 0 : 8192).ok());
  EXPECT_EQ(registry_.Assignment("c")->elements_per_packet, 256);  // unknown path: 256
}

TEST_F(JobRegistryTest, AutomaticAndFixedElementsPerPacketDoNotMix) {
  JobRequest r = Request("a", 0);
  r.elements_per_packet = 0;
  ASSERT_TRUE(registry_.Join(r).ok());
  const Status s = registry_.Join(Request("a", 1));
  EXPECT_NE(s.message().find("elements_per_packet 64 differs from the job's 0"), std::string::npos)
      << s.message();
}

TEST_F(JobRegistryTest, DuplicateRankIsRejected) {
  ASSERT_TRUE(registry_.Join(Request("a", 0, 3)).ok());
  const Status s = registry_.Join(Request("a", 0, 3));
  EXPECT_EQ(s.code(), StatusCode::kAlreadyExists);
  EXPECT_NE(s.message().find("rank 0 is already registered"), std::string::npos);
}

TEST_F(JobRegistryTest, OutOfRangeValuesAreRejected) {
  EXPECT_NE(registry_.Join(Request("a", 2, 2)).message().find("rank=2"), std::string::npos);
  EXPECT_NE(registry_.Join(Request("a", 0, 9)).message().find("world_size=9"), std::string::npos);
  JobRequest r = Request("a", 0);
  r.elements_per_packet = 512;
  EXPECT_NE(registry_.Join(r).message().find("elements_per_packet=512"), std::string::npos);
  EXPECT_EQ(registry_.Join(Request("", 0)).code(), StatusCode::kInvalidArgument);
}

TEST_F(JobRegistryTest, PoolExhaustionIsReportedAndEndingAJobFreesItsSegment) {
  for (uint16_t r = 0; r < 2; ++r) ASSERT_TRUE(registry_.Join(Request("a", r, 2, 60)).ok());
  ASSERT_TRUE(registry_.Join(Request("b", 0, 2, 60)).ok());
  const Status s = registry_.Join(Request("b", 1, 2, 60));
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(s.message().find("no free segment of 60 slots (40 of 100 free)"), std::string::npos)
      << s.message();
  const JobId old = registry_.Assignment("a")->id;
  ASSERT_TRUE(registry_.End("a").ok());
  EXPECT_FALSE(registry_.Assignment("a").has_value());
  ASSERT_TRUE(registry_.Join(Request("b", 1, 2, 60)).ok());
  EXPECT_NE(registry_.Assignment("b")->id, old);  // ids are not reused
}

TEST_F(JobRegistryTest, JobTableLimitIsReported) {
  for (const char* name : {"a", "b"}) {
    for (uint16_t r = 0; r < 2; ++r) ASSERT_TRUE(registry_.Join(Request(name, r, 2, 10)).ok());
  }
  ASSERT_TRUE(registry_.Join(Request("c", 0, 2, 10)).ok());
  const Status s = registry_.Join(Request("c", 1, 2, 10));
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(s.message().find("maximum of 2 jobs"), std::string::npos);
}

TEST_F(JobRegistryTest, EndingAnUnknownJobIsNotFound) {
  EXPECT_EQ(registry_.End("nope").code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace switchml
