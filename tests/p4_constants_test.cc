// The P4 programs' constants (p4/common/constants.p4) against the C++ ones
// they must equal: the wire format, the UDP port, the drop reasons and the
// event counters. Reads the .p4 text, so it runs without p4c.
#include <gtest/gtest.h>

#include <cctype>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include "dataplane/data_plane.h"
#include "quantize/quantize.h"
#include "switch/bmv2/bmv2_target.h"
#include "wire/wire_format.h"

namespace switchml {
namespace {

// Every `#define NAME VALUE` whose value is a P4 integer literal (an
// optional width prefix such as 16w, then decimal or 0x hex).
std::map<std::string, long> Defines(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in) << "cannot read " << path;
  std::map<std::string, long> out;
  for (std::string line; std::getline(in, line);) {
    std::istringstream words(line);
    std::string hash, name, value;
    if (!(words >> hash >> name >> value) || hash != "#define") continue;
    if (const size_t w = value.find('w');
        w != std::string::npos && w > 0 && std::isdigit(static_cast<unsigned char>(value[0]))) {
      value = value.substr(w + 1);
    }
    char* end = nullptr;
    const long v = std::strtol(value.c_str(), &end, 0);
    if (end != value.c_str() && *end == '\0') out[name] = v;
  }
  return out;
}

class P4Constants : public ::testing::Test {
 protected:
  void SetUp() override { defines_ = Defines(SWITCHML_P4_DIR "/common/constants.p4"); }
  long Get(const std::string& name) {
    const auto it = defines_.find(name);
    EXPECT_NE(it, defines_.end()) << name << " is not defined in p4/common/constants.p4";
    return it == defines_.end() ? -1 : it->second;
  }
  std::map<std::string, long> defines_;
};

TEST_F(P4Constants, WireFormatMatches) {
  EXPECT_EQ(Get("SWITCHML_MAGIC"), kWireMagic);
  EXPECT_EQ(Get("SWITCHML_WIRE_VERSION"), kWireVersion);
  EXPECT_EQ(Get("SWITCHML_TYPE_CONTRIBUTION"), long(MessageType::kContribution));
  EXPECT_EQ(Get("SWITCHML_TYPE_RESULT"), long(MessageType::kResult));
  EXPECT_EQ(Get("SWITCHML_TYPE_PENDING"), long(MessageType::kPending));
  EXPECT_EQ(Get("SWITCHML_TYPE_NACK"), long(MessageType::kNack));
  EXPECT_EQ(Get("SWITCHML_TYPE_PROBE"), long(MessageType::kProbe));
  EXPECT_EQ(Get("SWITCHML_FLAG_VERSION"), kFlagVersionBit);
  EXPECT_EQ(Get("SWITCHML_FLAG_AUTHENTICATED"), kFlagAuthenticated);
  EXPECT_EQ(Get("SWITCHML_FLAG_RESEND"), kFlagResend);
  EXPECT_EQ(Get("SWITCHML_FLAGS_RESERVED"),
            uint8_t(~(kFlagVersionBit | kFlagAuthenticated | kFlagResend)));
  EXPECT_EQ(Get("SWITCHML_ALL_RANKS"), kAllRanks);
  EXPECT_EQ(Get("SWITCHML_MAX_ELEMENTS"), kMaxElementsPerPacket);
  EXPECT_EQ(Get("SWITCHML_HEADER_BYTES"), long(kHeaderBytes));
  EXPECT_EQ(Get("SWITCHML_AUTH_TAG_BYTES"), long(kAuthTagBytes));
  EXPECT_EQ(Get("SWITCHML_EXPONENT_NONFINITE"), kNonFiniteExponent);
}

TEST_F(P4Constants, UdpPortMatchesTheControlPlane) {
  EXPECT_EQ(Get("SWITCHML_UDP_PORT_BASE"), bmv2::Bmv2Target::kUdpPort);
}

// DROP_<NAME> is the DropReason whose name, upper-cased, is NAME, and every
// reason has one.
TEST_F(P4Constants, DropReasonsMatchByNameAndNumber) {
  for (int r = 0; r < kNumDropReasons; ++r) {
    std::string name = "DROP_";
    for (const char* c = DropReasonName(DropReason(r)); *c != '\0'; ++c) {
      name += char(std::toupper(static_cast<unsigned char>(*c)));
    }
    EXPECT_EQ(Get(name), r) << name;
  }
  for (const auto& [name, value] : defines_) {
    if (name.rfind("DROP_", 0) == 0) {
      EXPECT_LT(value, kNumDropReasons) << name;
    }
  }
  EXPECT_GE(Get("SWITCHML_NUM_DROP_REASONS"), kNumDropReasons);
}

TEST_F(P4Constants, EventCountersMatchTheDriver) {
  // EVENT_<NAME> is the index of the counter `name` in kEventCounters.
  for (size_t i = 0; i < std::size(kEventCounters); ++i) {
    std::string name = kEventCounters[i].name;
    for (char& ch : name) ch = char(std::toupper(static_cast<unsigned char>(ch)));
    EXPECT_EQ(Get("EVENT_" + name), long(i)) << name;
  }
  EXPECT_GE(Get("SWITCHML_NUM_EVENTS"), long(std::size(kEventCounters)));
  EXPECT_EQ(Get("SWITCHML_MAX_JOBS"), bmv2::Bmv2Target::kMaxJobs);
}

}  // namespace
}  // namespace switchml
