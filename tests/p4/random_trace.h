// A seeded random trace of the packets one job's workers send to the switch,
// valid and invalid mixed, chosen against the software data plane: each
// packet follows the slot state that the data plane's answers so far imply
// (the chunk a slot aggregates and with which exponent), with late, early,
// random and mis-versioned chunks, wrong exponents, bad ranks and slots and
// result-typed packets and probes mixed in, and chunks that follow the slot
// before's.
//
// The BMv2 scenario replays it through the P4 switch and compares every reply
// and counter with the software data plane's; RandomTrace's own test checks,
// without BMv2, that the trace reaches every path worth comparing
// (completions, resent results, pending replies, stale and mismatched chunks,
// version conflicts, exponent mismatches, NACKs, answered probes).
//
// The software switch sends its NACKs from a timer that the trace never
// runs; the v1model program sends one at once where a counted packet shows
// its rank's previous chunk lost (docs/wire-format.md, "Loss recovery"). The
// trace works that NACK out from the slot states the software's answers
// imply, and the scenario expects it too.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "dataplane/data_plane.h"
#include "wire/wire_format.h"

namespace switchml::p4test {

// The trace the BMv2 scenario replays: its seed and length.
inline constexpr uint32_t kRandomTraceSeed = 20261130;
inline constexpr int kRandomTracePackets = 400;

class RandomTrace {
 public:
  // One packet: who sent it, its bytes, and the software data plane's answer.
  struct Step {
    uint16_t rank = 0;
    std::vector<uint8_t> packet;
    Verdict verdict;
    std::vector<uint8_t> reply;  // the verdict's packet (empty for a drop)
    std::vector<uint8_t> nack;   // the P4 program's NACK to the sender, or empty
  };

  // A job of `world` ranks on `slots` slots at `pool_base`, k elements per
  // packet, registered on a software data plane of its own.
  RandomTrace(JobId job, uint16_t world, uint16_t slots, uint32_t pool_base, uint16_t k,
              uint32_t seed)
      : job_(job),
        world_(world),
        slots_(slots),
        k_(k),
        rng_(seed),
        software_(Config(k)),
        current_(slots + 1u),
        exponent_(slots + 1u, 0),
        aggregating_(slots + 1u, 0),
        version_(slots + 1u, 0),
        seen_(slots + 1u, 0),
        out_(MaxPacketBytes(k)) {
    for (uint16_t s = 0; s <= slots; ++s) current_[s] = s;
    registered_ = software_.RegisterJob({job, world, k, pool_base, slots});
  }

  const Status& registered() const { return registered_; }
  const DataPlaneCounters& counters() const { return software_.counters(); }
  // The NACKs the P4 program sends for the trace so far.
  uint64_t nacks() const { return nacks_; }
  // The probes answered (with a result or a pending reply) so far.
  uint64_t probes_answered() const { return probes_answered_; }

  Step Next() {
    Step step;
    step.rank = rng_() % 10 == 0 ? world_ : uint16_t(rng_() % world_);  // 10%: no such rank
    const uint16_t slot = rng_() % 16 == 0 ? slots_ : uint16_t(rng_() % slots_);
    const uint32_t pick = rng_() % 40;
    uint32_t chunk = current_[slot];                   // most packets
    if (pick < 4 && chunk >= slots_) chunk -= slots_;  // a late one
    // Early chunks (a mismatch while the slot aggregates; while it is idle,
    // rarely, so that the slots stay near each other's rounds).
    const bool early_ok = slot >= slots_ || aggregating_[slot] || rng_() % 4 == 0;
    if (pick >= 4 && pick < 7 && early_ok) chunk += slots_;  // one round early
    if ((pick == 7 || pick == 10 || pick == 11) && early_ok) chunk += 2u * slots_;  // two
    if (pick == 8) chunk = uint32_t(rng_() % (chunk + 1));                          // any older one
    if (pick >= 12 && pick < 16 && slot < slots_) {
      // The chunk after the one the slot before aggregates: where that slot
      // lacks the rank, the P4 program NACKs it.
      chunk = current_[(slot == 0 ? slots_ : slot) - 1] + 1;
    }
    const auto version = uint8_t(pick == 9 ? rng_() % 2 : (chunk / slots_) % 2);
    const int16_t exponent =
        rng_() % 10 == 0 ? int16_t(1 - exponent_[slot]) : exponent_[slot];  // 10%: the other
    PacketHeader h;
    const uint32_t kind = rng_() % 25;
    h.type = kind == 0  ? MessageType::kResult
             : kind < 4 ? MessageType::kProbe  // no values (1 in 8 of them: k, dropped)
                        : MessageType::kContribution;
    const bool probe = h.type == MessageType::kProbe;
    h.job = job_.value();
    h.chunk = chunk;
    h.rank = step.rank;
    h.slot = slot;
    h.element_count = probe && rng_() % 8 != 0 ? 0 : k_;
    h.version = version;
    h.exponent = probe ? 0 : exponent;
    h.next_exponent = probe ? 0 : int16_t(int(rng_() % 7) - 3);
    step.packet.resize(kHeaderBytes + 4u * h.element_count);
    EncodeHeader(h, step.packet);
    for (uint16_t j = 0; j < h.element_count; ++j) {
      StoreBe32(step.packet.data() + kHeaderBytes + 4 * j, rng_());
    }

    step.verdict = software_.Process(step.packet, out_);
    step.reply.assign(out_.begin(), out_.begin() + long(step.verdict.out_bytes));
    const bool counted =
        step.verdict.action == Action::kSendToAll ||
        (step.verdict.action == Action::kDrop && step.verdict.reason == DropReason::kNone);
    if (step.verdict.action == Action::kSendToAll) {
      current_[slot] = chunk + slots_;  // the workers' next round
      aggregating_[slot] = 0;
    } else if (counted) {
      current_[slot] = chunk;  // counted in: the slot aggregates this chunk now
      exponent_[slot] = exponent;
      if (!aggregating_[slot]) seen_[slot] = 0;
      aggregating_[slot] = 1;
      version_[slot] = version;
      seen_[slot] |= 1u << step.rank;
    }
    if (counted) step.nack = NackFor(step.rank, chunk, slot);
    if (probe && step.verdict.action != Action::kDrop) ++probes_answered_;
    return step;
  }

 private:
  // The slot before (the job's one thread owns every slot) still aggregates
  // chunk - 1 without `rank`: its NACK, naming the rank in bitmap 1.
  std::vector<uint8_t> NackFor(uint16_t rank, uint32_t chunk, uint16_t slot) {
    const uint16_t before = uint16_t((slot == 0 ? slots_ : slot) - 1);
    if (!aggregating_[before] || current_[before] != chunk - 1 ||
        (seen_[before] >> rank & 1) != 0) {
      return {};
    }
    ++nacks_;
    PacketHeader h;
    h.type = MessageType::kNack;
    h.job = job_.value();
    h.chunk = chunk - 1;
    h.rank = kAllRanks;
    h.slot = before;
    h.element_count = 2;
    h.version = version_[before];
    std::vector<uint8_t> nack(kHeaderBytes + 8, 0);
    EncodeHeader(h, nack);
    StoreBe32(nack.data() + kHeaderBytes, 1u << rank);
    return nack;
  }

  static DataPlaneConfig Config(uint16_t k) {
    DataPlaneConfig config;
    config.pool_slots = 512;
    config.max_elements_per_packet = k;
    config.max_workers = 32;
    config.name_previous_results = false;  // as the P4 programs
    return config;
  }

  JobId job_;
  uint16_t world_, slots_, k_;
  std::mt19937 rng_;
  DataPlane software_;
  Status registered_;
  std::vector<uint32_t> current_;     // per slot (and one out of range): its chunk now
  std::vector<int16_t> exponent_;     // per slot: the exponent it aggregates with
  std::vector<uint8_t> aggregating_;  // per slot: some ranks counted in, not all
  std::vector<uint8_t> version_;      // per slot: the version it aggregates in
  std::vector<uint32_t> seen_;        // per slot: the ranks counted in
  uint64_t nacks_ = 0;
  uint64_t probes_answered_ = 0;
  std::vector<uint8_t> out_;
};

}  // namespace switchml::p4test
