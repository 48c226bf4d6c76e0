// libFuzzer target: arbitrary bytes as a packet, through the decoder, the
// data plane (with live jobs, one of them a rack switch's share of a tree),
// the switch's packet handler (source and MAC
// checks in front of a second data plane: a keyless job, a keyed job and a
// job registered but not yet installed), a worker engine, and the AF_XDP
// transport's frame parser and MAC table. Any crash,
// sanitizer report or broken invariant is a bug.
#include <arpa/inet.h>

#include <cstdlib>
#include <memory>
#include <vector>

#include "dataplane/data_plane.h"
#include "net/address.h"
#include "switch/packet_handler.h"
#include "transport/ethernet/arp.h"
#include "transport/ethernet/frames.h"
#include "transport/ethernet/mac_table.h"
#include "worker/worker_engine.h"

namespace {

using namespace switchml;

struct NullSink : PacketSink {
  void Send(std::span<const uint8_t>) override {}
};

struct CountingSink : ReplySink {
  void Send(std::span<const uint8_t> datagram, const sockaddr_in&) override {
    if (datagram.size() > MaxPacketBytes(64)) std::abort();
  }
};

sockaddr_in Loopback(uint16_t port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return a;
}

struct World {
  World() : data_plane(Config()), switch_plane(Config()), handler(&switch_plane) {
    (void)data_plane.RegisterJob({JobId(7), 3, 32, 0, 8});
    (void)data_plane.RegisterJob({JobId(12), 1, 64, 8, 4});
    // A rack switch's share of a tree's job: ranks 0 and 2 of 4 served here,
    // completed slots to member 1 of the upstream's job 20, whose results
    // (job 20) come back.
    JobRegistration share{JobId(9), 4, 32, 12, 4};
    share.local_ranks = {0, 2};
    share.upstream = UpstreamLink{JobId(20), 1, Nanos(300000)};
    (void)data_plane.RegisterJob(share);
    // The handler's jobs: 7 keyless, 12 keyed (world 1), 13 registered in the
    // data plane without an address book (mid-installation).
    (void)switch_plane.RegisterJob({JobId(7), 3, 32, 0, 8});
    (void)switch_plane.RegisterJob({JobId(12), 1, 64, 8, 4});
    (void)switch_plane.RegisterJob({JobId(13), 2, 32, 12, 4});
    handler.Install(JobId(7), 3, 8, 1, {Loopback(1000), Loopback(1001), Loopback(1002)},
                    std::nullopt);
    net::AuthKey secret{};
    handler.Install(JobId(12), 1, 4, 1, {Loopback(1000)},
                    net::PacketAuthenticator(secret, "salt", 12, net::kSwitchSenderId));
    WorkerEngineConfig c;
    c.job = JobId(7);
    c.rank = Rank(1);
    c.world_size = 3;
    c.elements_per_packet = 32;
    c.pool_slots = 8;
    c.switch_answers_probes = true;  // probes, their answers and Recheck() too
    c.switch_accepts_exponent_only = true;
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
  DataPlane switch_plane;
  PacketHandler handler;
  CountingSink replies;
  std::vector<uint8_t> handler_out = std::vector<uint8_t>(MaxPacketBytes(64));
  std::unique_ptr<WorkerEngine> engine;
  transport::ethernet::MacTable macs;
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
  const uint64_t contributions = world->data_plane.counters().contributions;
  const Verdict v = world->data_plane.Process(bytes, out);
  if (world->data_plane.counters().packets != before + 1 || v.out_bytes > out.size()) std::abort();
  // A probe never counts in.
  const bool probe =
      DecodePacket(bytes, &view) == DecodeError::kOk && view.header.type == MessageType::kProbe;
  if (probe && world->data_plane.counters().contributions != contributions) std::abort();
  // What the timers send: NACKs naming only ranks the job has (and serves
  // here), and overdue upstream contributions, well-formed packets of the
  // upstream's job.
  std::vector<uint8_t> timed(PacketBytes(64));
  for (Verdict r;
       (r = world->data_plane.NextTimerPacket(Nanos(world->now), timed)).action != Action::kDrop;) {
    PacketView sent;
    if (DecodePacket({timed.data(), r.out_bytes}, &sent) != DecodeError::kOk) std::abort();
    if (r.action == Action::kNackToMissing) {
      const uint32_t job = sent.header.job;
      const uint32_t served = job == 7 ? 0b111u : job == 12 ? 0b1u : job == 9 ? 0b101u : 0u;
      const uint32_t lost = LoadBe32(sent.payload), behind = LoadBe32(sent.payload + 4);
      if (sent.header.type != MessageType::kNack || sent.header.element_count != 2 || served == 0 ||
          ((lost | behind) & ~served) != 0 || (lost & behind) != 0 || (lost | behind) == 0) {
        std::abort();
      }
    } else if (r.action != Action::kSendUpstream || sent.header.job != 20 ||
               sent.header.rank != 1) {
      std::abort();
    }
  }
  // The handler: from one of the registered ports (the first byte picks it),
  // every packet is counted once, and a job without a book never changes state.
  const uint64_t switch_before = world->switch_plane.counters().packets;
  const uint64_t contributions_13 = world->switch_plane.JobCounters(JobId(13)).contributions;
  (void)world->handler.Handle(bytes, Loopback(uint16_t(1000 + (size ? data[0] % 4 : 0))),
                              world->handler_out, world->replies);
  if (world->switch_plane.counters().packets != switch_before + 1 ||
      world->switch_plane.JobCounters(JobId(13)).contributions != contributions_13) {
    std::abort();
  }
  while (world->handler.SendTimerPacket(Nanos(world->now), world->handler_out, world->replies)) {
  }

  if (world->engine->broken())
    world->engine = std::make_unique<WorkerEngine>(world->engine->config());
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

  // As an Ethernet frame to an AF_XDP endpoint: a parsed frame's payload lies
  // inside it, a frame rebuilt from what was parsed parses back the same, and
  // its source is then found in the MAC table that learned it.
  if (const auto frame = transport::ethernet::ParseFrame(bytes)) {
    const std::span<const uint8_t> payload = frame->payload;
    if (payload.data() < data + transport::ethernet::kHeaderBytes ||
        payload.data() + payload.size() > data + size) {
      std::abort();
    }
    std::vector<uint8_t> rebuilt(transport::ethernet::kHeaderBytes + payload.size());
    std::copy(payload.begin(), payload.end(), rebuilt.begin() + transport::ethernet::kHeaderBytes);
    transport::ethernet::WriteHeaders(rebuilt, payload.size(), frame->addresses, 1);
    const auto again = transport::ethernet::ParseFrame(rebuilt);
    const auto& a = frame->addresses;
    if (!again ||
        !std::equal(payload.begin(), payload.end(), again->payload.begin(), again->payload.end()) ||
        again->addresses.source_mac != a.source_mac || again->addresses.dest_mac != a.dest_mac ||
        !net::SameAddress(again->addresses.source, a.source) ||
        !net::SameAddress(again->addresses.dest, a.dest)) {
      std::abort();
    }
    const uint32_t source = a.source.sin_addr.s_addr;
    world->macs.Learn(source, a.source_mac);
    const transport::ethernet::Mac* learned = world->macs.Find(source);
    if (source != 0 && (learned == nullptr || *learned != a.source_mac)) std::abort();
  }
  // As an ARP frame to a DPDK endpoint: what parses is rebuilt the same.
  if (const auto arp = transport::ethernet::ParseArp(bytes)) {
    std::vector<uint8_t> rebuilt(transport::ethernet::kArpFrameBytes);
    const transport::ethernet::Mac dest{data[0], data[1], data[2], data[3], data[4], data[5]};
    transport::ethernet::WriteArp(rebuilt, *arp, dest);
    const auto again = transport::ethernet::ParseArp(rebuilt);
    if (!again || again->op != arp->op || again->sender_mac != arp->sender_mac ||
        again->sender_ip != arp->sender_ip || again->target_mac != arp->target_mac ||
        again->target_ip != arp->target_ip ||
        !std::equal(rebuilt.begin(), rebuilt.begin() + 6, data) ||
        !std::equal(rebuilt.begin() + 12, rebuilt.begin() + 42, data + 12)) {
      std::abort();
    }
  }
  return 0;
}
