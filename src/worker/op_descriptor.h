// The descriptor round: how the workers of a job check, through the switch's
// integer sums alone, that they all run the same all-reduce.
//
// Every operation starts with one round in which each slot's payload carries
// the operation's descriptor (element count, dtype, elements per packet) as
// bytes b_j, each sent twice: word 2j = b_j and word 2j+1 = b_j^2. The switch
// sums them. For n workers, n * sum(b^2) == (sum b)^2 holds exactly when all
// n workers sent the same b (Cauchy-Schwarz); then sum b == n * b_mine says it
// equals ours. Sums fit 32 bits for up to 66051 workers.
//
// Two more words are summed but not checked: each worker's proposed number of
// slots for the next operation (four of its windows), and whether it saw a
// loss in its previous operation; the sums, the same on every rank, are how
// they agree on the next operation's slots (AgreedSlots) and on sending its
// exponent-only packets twice (AgreedRedundantHeaders).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "switchml/types.h"

namespace switchml {

struct OpDescriptor {
  uint64_t element_count = 0;
  DType dtype = DType::kInt32;
  uint16_t elements_per_packet = 0;
  uint16_t proposed_slots = 0;  // not checked: see AgreedSlots
  bool saw_loss = false;        // not checked: see AgreedRedundantHeaders
};

// Words the descriptor occupies in a payload.
inline constexpr size_t kDescriptorWords = 2 * (8 + 1 + 2) + 2;

// Writes kDescriptorWords big-endian words to dst.
void EncodeDescriptor(const OpDescriptor& d, uint8_t* dst_be);

// Checks the summed descriptor words of `world_size` workers against ours.
// Returns "" when all agree, else a sentence naming what differs.
std::string CheckDescriptorSums(const OpDescriptor& mine, const uint8_t* sums_be, int world_size);

// The mean of the workers' proposed_slots, rounded up, at least 1: the same
// on every rank that got the same sums.
uint16_t AgreedSlots(const uint8_t* sums_be, int world_size);

// Whether any worker saw a loss in its previous operation: then every rank
// sends the next operation's exponent-only packets twice (a lost one holds
// up the data of its slot, and every slot has one: docs/design.md §3).
bool AgreedRedundantHeaders(const uint8_t* sums_be);

}  // namespace switchml
