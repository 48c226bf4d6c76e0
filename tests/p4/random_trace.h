// A seeded random trace of the packets one job's workers send to the switch,
// valid and invalid mixed, chosen against the software data plane: each
// packet follows the slot state that the data plane's answers so far imply
// (the chunk a slot aggregates and with which exponent), with late, early,
// random and mis-versioned chunks, wrong exponents, bad ranks and slots and
// result-typed packets mixed in.
//
// The BMv2 scenario replays it through the P4 switch and compares every reply
// and counter with the software data plane's; RandomTrace's own test checks,
// without BMv2, that the trace reaches every path worth comparing
// (completions, resent results, pending replies, stale and mismatched chunks,
// version conflicts, exponent mismatches).
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "dataplane/data_plane.h"
#include "wire/wire_format.h"

namespace switchml::p4test {

// The trace the BMv2 scenario replays: its seed and length.
inline constexpr uint32_t kRandomTraceSeed = 20261130;
inline constexpr int kRandomTracePackets = 300;

class RandomTrace {
 public:
  // One packet: who sent it, its bytes, and the software data plane's answer.
  struct Step {
    uint16_t rank = 0;
    std::vector<uint8_t> packet;
    Verdict verdict;
    std::vector<uint8_t> reply;  // the verdict's packet (empty for a drop)
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
        out_(MaxPacketBytes(k)) {
    for (uint16_t s = 0; s <= slots; ++s) current_[s] = s;
    registered_ = software_.RegisterJob({job, world, k, pool_base, slots});
  }

  const Status& registered() const { return registered_; }
  const DataPlaneCounters& counters() const { return software_.counters(); }

  Step Next() {
    Step step;
    step.rank = rng_() % 10 == 0 ? world_ : uint16_t(rng_() % world_);  // 10%: no such rank
    const uint16_t slot = rng_() % 16 == 0 ? slots_ : uint16_t(rng_() % slots_);
    const uint32_t pick = rng_() % 40;
    uint32_t chunk = current_[slot];                                  // most packets
    if (pick < 4 && chunk >= slots_) chunk -= slots_;                 // a late one
    if (pick >= 4 && pick < 7) chunk += slots_;                       // one round early
    if (pick == 7 || pick == 10 || pick == 11) chunk += 2u * slots_;  // two rounds early
    if (pick == 8) chunk = uint32_t(rng_() % (chunk + 1));            // any older one
    const auto version = uint8_t(pick == 9 ? rng_() % 2 : (chunk / slots_) % 2);
    const int16_t exponent =
        rng_() % 10 == 0 ? int16_t(1 - exponent_[slot]) : exponent_[slot];  // 10%: the other
    PacketHeader h;
    h.type = rng_() % 25 == 0 ? MessageType::kResult : MessageType::kContribution;
    h.job = job_.value();
    h.chunk = chunk;
    h.rank = step.rank;
    h.slot = slot;
    h.element_count = k_;
    h.version = version;
    h.exponent = exponent;
    h.next_exponent = int16_t(int(rng_() % 7) - 3);
    step.packet.resize(kHeaderBytes + 4u * k_);
    EncodeHeader(h, step.packet);
    for (uint16_t j = 0; j < k_; ++j) StoreBe32(step.packet.data() + kHeaderBytes + 4 * j, rng_());

    step.verdict = software_.Process(step.packet, out_);
    step.reply.assign(out_.begin(), out_.begin() + long(step.verdict.out_bytes));
    if (step.verdict.action == Action::kSendToAll) {
      current_[slot] = chunk + slots_;  // the workers' next round
    } else if (step.verdict.action == Action::kDrop && step.verdict.reason == DropReason::kNone) {
      current_[slot] = chunk;  // counted in: the slot aggregates this chunk now
      exponent_[slot] = exponent;
    }
    return step;
  }

 private:
  static DataPlaneConfig Config(uint16_t k) {
    DataPlaneConfig config;
    config.pool_slots = 512;
    config.max_elements_per_packet = k;
    config.max_workers = 32;
    return config;
  }

  JobId job_;
  uint16_t world_, slots_, k_;
  std::mt19937 rng_;
  DataPlane software_;
  Status registered_;
  std::vector<uint32_t> current_;  // per slot (and one out of range): its chunk now
  std::vector<int16_t> exponent_;  // per slot: the exponent it aggregates with
  std::vector<uint8_t> out_;
};

}  // namespace switchml::p4test
