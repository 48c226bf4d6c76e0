#include "switchml/config.h"

#include <gtest/gtest.h>

namespace switchml {
namespace {

TEST(ContextConfig, DefaultsAreValid) { EXPECT_TRUE(ContextConfig{}.Validate().ok()); }

TEST(ContextConfig, TomlRoundTrips) {
  ContextConfig c;
  c.switch_address = "10.0.0.1:5000";
  c.job_name = "a \"quoted\" name";
  c.rank = 3;
  c.world_size = 8;
  c.threads = 2;
  c.result_multicast = false;
  auto back = ContextConfig::FromTomlString(c.ToToml());
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back.value().ToToml(), c.ToToml());
  EXPECT_EQ(back.value().job_name, c.job_name);
  EXPECT_FALSE(back.value().result_multicast);
  EXPECT_NE(c.ToToml().find("\nresult_multicast = false\n"), std::string::npos);
}

TEST(ContextConfig, TomlErrorsNameTheProblem) {
  EXPECT_NE(ContextConfig::FromTomlString("rnak = 1")
                .status()
                .message()
                .find("unknown configuration key 'rnak'"),
            std::string::npos);
  EXPECT_NE(ContextConfig::FromTomlString("rank = \"one\"")
                .status()
                .message()
                .find("'rank' must be a non-negative integer"),
            std::string::npos);
  EXPECT_NE(ContextConfig::FromTomlString("rank = -1").status().message().find("'rank'"),
            std::string::npos);
  EXPECT_NE(ContextConfig::FromTomlString("result_multicast = 1")
                .status()
                .message()
                .find("'result_multicast' must be true or false"),
            std::string::npos);
  EXPECT_NE(ContextConfig::FromTomlString("rank = [").status().message().find("not valid TOML"),
            std::string::npos);
  EXPECT_NE(
      ContextConfig::FromTomlFile("/nonexistent.toml").status().message().find("/nonexistent.toml"),
      std::string::npos);
}

TEST(ContextConfig, AfXdpLimitsAreRefusedNamingTheSetting) {
  ContextConfig c;
  c.transport = "af_xdp";
#ifdef SWITCHML_HAVE_AF_XDP
  EXPECT_TRUE(c.Validate().ok()) << c.Validate().message();
  c.elements_per_packet = 1024;
  EXPECT_NE(c.Validate().message().find("elements_per_packet=1024 does not fit"),
            std::string::npos);
  c.elements_per_packet = 0;
  c.threads = 2;  // the threads split the interface's queues
  EXPECT_TRUE(c.Validate().ok()) << c.Validate().message();
#else
  EXPECT_NE(c.Validate().message().find("not in this build"), std::string::npos);
#endif
}

TEST(ContextConfig, ValidationRejectsWithoutRewriting) {
  ContextConfig c;
  c.elements_per_packet = 10;
  EXPECT_NE(c.Validate().message().find("elements_per_packet=10 is out of range 32..8192"),
            std::string::npos);
  EXPECT_EQ(c.elements_per_packet, 10u);
  c = ContextConfig{};
  c.threads = 4;
  c.pool_slots = 2;
  EXPECT_NE(c.Validate().message().find("threads=4 exceeds pool_slots=2"), std::string::npos);
  c = ContextConfig{};
  c.window_slots = 200;
  EXPECT_NE(c.Validate().message().find("window_slots=200 exceeds pool_slots=128"),
            std::string::npos);
  c.window_slots = 2;
  c.threads = 3;
  EXPECT_NE(c.Validate().message().find("window_slots=2 is less than threads=3"),
            std::string::npos);
  c.window_slots = 0;
  c.elements_per_packet = 0;
  EXPECT_TRUE(c.Validate().ok());
  c = ContextConfig{};
  EXPECT_TRUE(c.Set("world_size", "4").ok());
  EXPECT_EQ(c.world_size, 4u);
  EXPECT_FALSE(c.Set("world_size", "four").ok());
  EXPECT_FALSE(c.Set("bogus", "1").ok());
  EXPECT_TRUE(c.Set("result_multicast", "false").ok());
  EXPECT_FALSE(c.result_multicast);
  EXPECT_NE(
      c.Set("result_multicast", "no").message().find("result_multicast='no' is not true or false"),
      std::string::npos);
  EXPECT_TRUE(c.Set("busy_poll_us", "0").ok());
  EXPECT_EQ(c.busy_poll_us, 0u);
  c.busy_poll_us = 100001;
  EXPECT_NE(c.Validate().message().find("busy_poll_us=100001 is out of range 0..100000"),
            std::string::npos);
}

}  // namespace
}  // namespace switchml
