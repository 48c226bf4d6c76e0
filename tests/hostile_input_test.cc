// Millions of random and mutated packets through the decoder, the data plane
// and a worker engine: nothing may crash (run it under ASan/UBSan), and every
// packet the data plane sees must end in exactly one counted outcome.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "dataplane/data_plane.h"
#include "worker/worker_engine.h"

namespace switchml {
namespace {

struct NullSink : PacketSink {
  void Send(std::span<const uint8_t> p) override { bytes += p.size(); }
  size_t bytes = 0;
};

// A valid packet of job 7 (world 4, k 32, 8 slots) or job 12 to start from.
std::vector<uint8_t> ValidPacket(std::mt19937_64& rng, int iteration) {
  PacketHeader h;
  if (rng() % 2) {
    // A plausible contribution: chunk ids advance and versions alternate like
    // a real job's, so slots really fill, complete and get retransmissions.
    h.type = MessageType::kContribution;
    h.job = 7;
    h.chunk = uint32_t(iteration / 256);
    h.version = h.chunk & 1;
    h.rank = uint16_t(rng() % 4);
    h.slot = uint16_t(rng() % 2);
    h.element_count = 32;
    h.next_exponent = int16_t(rng() % 8);
  } else {
    h.type = MessageType(1 + rng() % 3);
    h.job = rng() % 2 ? 7 : 12;
    h.chunk = uint32_t(iteration / 64 + rng() % 16);
    h.rank = uint16_t(rng() % 5);
    h.slot = uint16_t(2 + rng() % 7);  // slots 0-1 carry the plausible traffic
    h.element_count = rng() % 8 ? 32 : uint16_t(rng() % 40);
    h.version = rng() % 2;
    h.exponent = int16_t(int(rng() % 300) - 150);
    h.next_exponent = int16_t(int(rng() % 300) - 150);
  }
  std::vector<uint8_t> b(PacketBytes(h.element_count));
  EncodeHeader(h, b);
  for (size_t i = kHeaderBytes; i < b.size(); ++i) b[i] = uint8_t(rng());
  return b;
}

void Mutate(std::vector<uint8_t>& b, std::mt19937_64& rng) {
  switch (rng() % 6) {
    case 0:  // flip a few bytes anywhere
      for (int i = 0, n = 1 + int(rng() % 4); i < n && !b.empty(); ++i)
        b[rng() % b.size()] ^= uint8_t(1 + rng() % 255);
      break;
    case 1:  // truncate
      b.resize(rng() % (b.size() + 1));
      break;
    case 2:  // extend
      b.resize(b.size() + 1 + rng() % 64, uint8_t(rng()));
      break;
    case 3:  // pure random bytes
      b.assign(rng() % 128, 0);
      for (auto& x : b) x = uint8_t(rng());
      break;
    default:  // keep it valid-looking
      break;
  }
}

TEST(HostileInput, RandomAndMutatedPacketsNeverCrashAndAreAllAccounted) {
  DataPlaneConfig config;
  config.pool_slots = 32;
  config.max_elements_per_packet = 64;
  config.max_workers = 8;
  config.max_jobs = 4;
  DataPlane dp(config);
  ASSERT_TRUE(dp.RegisterJob({JobId(7), 4, 32, 0, 8}).ok());
  ASSERT_TRUE(dp.RegisterJob({JobId(12), 1, 32, 8, 8}).ok());

  WorkerEngineConfig ec;
  ec.job = JobId(7);
  ec.rank = Rank(1);
  ec.world_size = 4;
  ec.elements_per_packet = 32;
  ec.pool_slots = 8;
  auto engine = std::make_unique<WorkerEngine>(ec);
  std::vector<float> in(32 * 20, 0.5f), out(in.size());
  NullSink sink;
  // Every packet the engine is given ends in exactly one counter.
  auto accounted = [](const WorkerEngineCounters& e) {
    return e.results_accepted + e.pending_received + e.duplicates + e.malformed +
           e.wrong_job_or_rank + e.invalid;
  };
  uint64_t engines = 1;

  std::mt19937_64 rng(2024);
  std::vector<uint8_t> reply(PacketBytes(64));
  constexpr int kIterations = 2'000'000;
  uint64_t engine_packets = 0;
  for (int i = 0; i < kIterations; ++i) {
    if (engine->broken()) {
      // A forged result can fail a job (a descriptor that disagrees); issue
      // #5's per-job keys stop forgeries. Start a fresh engine.
      ASSERT_EQ(engine_packets, accounted(engine->counters()));
      engine = std::make_unique<WorkerEngine>(ec);
      engine_packets = 0;
      ++engines;
    }
    if (engine->idle()) {
      ASSERT_TRUE(engine->Submit(in.data(), out.data(), in.size(), DType::kFloat32, {}).ok());
    }
    std::vector<uint8_t> b = ValidPacket(rng, i);
    const std::vector<uint8_t> original = b;
    Mutate(b, rng);
    // A corrupted chunk id or version bit from a registered rank claims a
    // future chunk and stalls that slot until the job times out (fail-safe,
    // see docs/wire-format.md). Keep the plausible traffic's sequencing
    // fields (bytes 8..19) so the deep paths stay reachable; the random
    // traffic mutates every byte.
    if (b.size() >= 20 && original[7] == 7 && original[3] == 1) {
      std::copy(original.begin() + 8, original.begin() + 20, b.begin() + 8);
    }
    const Verdict v = dp.Process(b, reply);
    ASSERT_LE(v.out_bytes, reply.size());
    if (v.out_bytes > 0) {
      PacketView view;
      ASSERT_EQ(DecodePacket(std::span(reply.data(), v.out_bytes), &view), DecodeError::kOk);
      engine->OnPacket(std::span(reply.data(), v.out_bytes), Nanos(i), sink);
      ++engine_packets;
    }
    engine->OnPacket(b, Nanos(i), sink);
    ++engine_packets;
    if (i % 1024 == 0) engine->OnTimer(Nanos(i), sink);
  }
  const DataPlaneCounters& c = dp.counters();
  EXPECT_EQ(c.packets, uint64_t(kIterations));
  EXPECT_EQ(c.packets, c.TotalDrops() + c.contributions + c.pending_replies + c.results_resent +
                           c.header_copies);
  // The mix really exercised the deep paths, not just the decoder.
  EXPECT_GT(c.contributions, 1000u);
  EXPECT_GT(c.slots_completed, 100u);
  EXPECT_GT(c.results_resent + c.pending_replies, 100u);
  for (int reason = 1; reason <= int(DropReason::kExponentMismatch); ++reason) {
    EXPECT_GT(c.drops[reason], 0u) << DropReasonName(DropReason(reason));
  }
  EXPECT_EQ(engine_packets, accounted(engine->counters()));
  RecordProperty("engines", std::to_string(engines));
}

}  // namespace
}  // namespace switchml
