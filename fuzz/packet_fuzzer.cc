// libFuzzer target: arbitrary bytes as a packet, through the decoder, the
// data plane (with live jobs) and a worker engine. Any crash, sanitizer
// report or broken invariant is a bug.
#include <cstdlib>
#include <memory>
#include <vector>

#include "switchml/data_plane.h"
#include "switchml/worker_engine.h"

namespace {

using namespace switchml;

struct NullSink : PacketSink {
  void Send(std::span<const uint8_t>) override {}
};

struct World {
  World() : data_plane(Config()) {
    (void)data_plane.RegisterJob({JobId(7), 3, 32, 0, 8});
    (void)data_plane.RegisterJob({JobId(12), 1, 64, 8, 4});
    WorkerEngineConfig c;
    c.job = JobId(7);
    c.rank = Rank(1);
    c.world_size = 3;
    c.elements_per_packet = 32;
    c.pool_slots = 8;
    engine = std::make_unique<WorkerEngine>(c);
    input.assign(32 * 40, 1.5f);
    output.resize(input.size());
  }
  static DataPlaneConfig Config() {
    DataPlaneConfig c;
    c.pool_slots = 16;
    c.max_elements_per_packet = 64;
    c.max_workers = 8;
    c.max_jobs = 4;
    return c;
  }
  DataPlane data_plane;
  std::unique_ptr<WorkerEngine> engine;
  std::vector<float> input, output;
  NullSink sink;
  int64_t now = 0;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static World* world = new World();  // state carries over, like a live switch
  const std::span<const uint8_t> bytes(data, size);

  PacketView view;
  if (DecodePacket(bytes, &view) == DecodeError::kOk) {
    // A decoded header re-encodes to the same bytes.
    std::vector<uint8_t> again(kHeaderBytes);
    EncodeHeader(view.header, again);
    if (!std::equal(again.begin(), again.end(), data)) std::abort();
  }

  std::vector<uint8_t> out(PacketBytes(64));
  const uint64_t before = world->data_plane.counters().packets;
  const Verdict v = world->data_plane.Process(bytes, out);
  if (world->data_plane.counters().packets != before + 1 || v.out_bytes > out.size()) std::abort();

  if (world->engine->broken()) world->engine = std::make_unique<WorkerEngine>(world->engine->config());
  if (world->engine->idle()) {
    (void)world->engine->Submit(world->input.data(), world->output.data(), world->input.size(),
                                DType::kFloat32, {});
  }
  world->now += 100000;
  world->engine->OnTimer(Nanos(world->now), world->sink);
  world->engine->OnPacket(bytes, Nanos(world->now), world->sink);
  if (v.out_bytes > 0) {
    world->engine->OnPacket(std::span<const uint8_t>(out.data(), v.out_bytes), Nanos(world->now),
                            world->sink);
  }
  return 0;
}
