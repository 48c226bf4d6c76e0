#include "worker/op_descriptor.h"

#include <gtest/gtest.h>

#include <vector>

#include "wire/wire_format.h"

namespace switchml {
namespace {

// What the switch would return: the word-wise sum of every worker's payload.
std::vector<uint8_t> Summed(const std::vector<OpDescriptor>& ds) {
  std::vector<uint32_t> sum(kDescriptorWords, 0);
  for (const OpDescriptor& d : ds) {
    std::vector<uint8_t> be(4 * kDescriptorWords);
    EncodeDescriptor(d, be.data());
    for (size_t i = 0; i < sum.size(); ++i) sum[i] += LoadBe32(&be[4 * i]);
  }
  std::vector<uint8_t> out(4 * kDescriptorWords);
  for (size_t i = 0; i < sum.size(); ++i) StoreBe32(&out[4 * i], sum[i]);
  return out;
}

TEST(OpDescriptor, AgreementPasses) {
  const OpDescriptor d{123456789, DType::kFloat32, 256};
  for (int n : {1, 2, 64, 1000}) {
    EXPECT_EQ(CheckDescriptorSums(d, Summed(std::vector<OpDescriptor>(n, d)).data(), n), "");
  }
}

TEST(OpDescriptor, DisagreementNamesTheField) {
  const OpDescriptor a{1000, DType::kFloat32, 256};
  OpDescriptor b = a;
  b.element_count = 1001;
  EXPECT_NE(CheckDescriptorSums(a, Summed({a, b, a}).data(), 3).find("tensor length"),
            std::string::npos);
  b = a;
  b.dtype = DType::kInt32;
  EXPECT_NE(CheckDescriptorSums(a, Summed({a, b}).data(), 2).find("dtype"), std::string::npos);
  b = a;
  b.elements_per_packet = 1024;
  EXPECT_NE(CheckDescriptorSums(a, Summed({b, a}).data(), 2).find("elements per packet"),
            std::string::npos);
}

// Sums alone cannot tell {1, 3} from {2, 2}; the squares can.
TEST(OpDescriptor, EqualSumsOfDifferentValuesAreCaught) {
  const OpDescriptor two{2, DType::kInt32, 64};
  const OpDescriptor one{1, DType::kInt32, 64}, three{3, DType::kInt32, 64};
  EXPECT_NE(CheckDescriptorSums(two, Summed({one, three}).data(), 2), "");
  EXPECT_NE(CheckDescriptorSums(two, Summed({two, one, three}).data(), 3), "");
}

// The proposals are summed, not checked: ranks may propose different windows
// and all read the same rounded-up mean.
TEST(OpDescriptor, ProposedSlotsAgreeOnTheRoundedUpMean) {
  OpDescriptor a{1000, DType::kFloat32, 256, 10}, b = a, c = a;
  b.proposed_slots = 13;
  c.proposed_slots = 65535;
  const auto sums = Summed({a, b, a});
  EXPECT_EQ(CheckDescriptorSums(a, sums.data(), 3), "");
  EXPECT_EQ(AgreedSlots(sums.data(), 3), 11);            // 33 / 3
  EXPECT_EQ(AgreedSlots(Summed({a, b}).data(), 2), 12);  // 23 / 2, rounded up
  EXPECT_EQ(AgreedSlots(Summed(std::vector<OpDescriptor>(65534, c)).data(), 65534), 65535);
  a.proposed_slots = 0;
  EXPECT_EQ(AgreedSlots(Summed({a, a}).data(), 2), 1);
}

// Whether any rank saw a loss is summed, not checked: one rank that did is
// enough for every rank to read the same answer.
TEST(OpDescriptor, OneRankThatSawALossMakesEveryRankSendTheHeadersTwice) {
  OpDescriptor clean{1000, DType::kFloat32, 256, 10}, lossy = clean;
  lossy.saw_loss = true;
  EXPECT_FALSE(AgreedRedundantHeaders(Summed({clean, clean, clean}).data()));
  const auto sums = Summed({clean, lossy, clean});
  EXPECT_EQ(CheckDescriptorSums(clean, sums.data(), 3), "");
  EXPECT_EQ(CheckDescriptorSums(lossy, sums.data(), 3), "");
  EXPECT_TRUE(AgreedRedundantHeaders(sums.data()));
  EXPECT_TRUE(AgreedRedundantHeaders(Summed(std::vector<OpDescriptor>(1024, lossy)).data()));
  EXPECT_EQ(AgreedSlots(sums.data(), 3), 10);
}

}  // namespace
}  // namespace switchml
