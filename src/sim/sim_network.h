// An in-process network in virtual time: one data plane ("the switch") and n
// worker engines exchange real encoded packets through a seeded model of loss,
// duplication, reordering and delay. The same seed gives the same run, event
// for event. Used by the tests and the demo; a transport like any other.
//
// Thread safety: none; Run() drives everything on the calling thread.
#pragma once

#include <cstdint>
#include <memory>
#include <queue>
#include <random>
#include <vector>

#include "dataplane/data_plane.h"
#include "switchml/types.h"
#include "worker/worker_engine.h"

namespace switchml {

struct SimNetworkOptions {
  uint64_t seed = 1;
  double loss = 0.0;       // probability that any one transmission is lost
  double duplicate = 0.0;  // probability that a transmission arrives twice
  double reorder = 0.0;    // probability that a transmission is held back by up to reorder_delay
  Nanos latency{std::chrono::microseconds(5)};  // one-way delay of every transmission
  Nanos jitter{std::chrono::microseconds(1)};   // plus uniform [0, jitter)
  Nanos reorder_delay{std::chrono::microseconds(50)};
  // Rate of every worker's link, each direction a FIFO that serializes
  // packets at this rate before the latency (the switch's own ports are
  // never the bottleneck); 0: no limit.
  uint64_t link_bits_per_second = 0;

  Status Validate() const;
};

struct SimNetworkCounters {
  uint64_t transmissions = 0;  // packets put on the wire (before loss)
  uint64_t lost = 0;
  uint64_t duplicated = 0;
  uint64_t reordered = 0;
  uint64_t delivered = 0;
};

class SimNetwork {
 public:
  // `data_plane` and every engine must outlive the network. Worker i is rank i.
  SimNetwork(DataPlane* data_plane, std::vector<WorkerEngine*> workers,
             const SimNetworkOptions& options);
  ~SimNetwork();
  SimNetwork(const SimNetwork&) = delete;
  SimNetwork& operator=(const SimNetwork&) = delete;

  // Processes events until no engine has work left or virtual time passes
  // `until`. Returns the virtual time reached.
  Nanos Run(Nanos until = Nanos::max());
  // From virtual time `from` on, `rank` neither sends nor receives anything
  // and its timers never fire: a crashed or hung worker.
  void Silence(uint16_t rank, Nanos from);
  // A dead switch: from `from` on, every packet to it is lost.
  void SilenceSwitch(Nanos from);

  Nanos now() const { return now_; }
  const SimNetworkCounters& counters() const { return counters_; }

 private:
  static constexpr int kSwitch = -1;
  struct Event {
    Nanos at;
    uint64_t seq;
    int dest;            // kSwitch or a rank
    bool timer = false;  // a worker's timer instead of a packet
    std::vector<uint8_t> bytes;
  };
  struct Later {
    bool operator()(const Event& a, const Event& b) const {
      return a.at != b.at ? a.at > b.at : a.seq > b.seq;
    }
  };
  class WorkerSink;

  // `worker`: the rank whose link the packet crosses (sender or receiver).
  void Transmit(int dest, int worker, std::span<const uint8_t> bytes);
  void Push(Event e);
  void ScheduleTimer(uint16_t rank);
  void DeliverToSwitch(const std::vector<uint8_t>& bytes);
  bool Silent(int node) const;
  double Uniform();

  DataPlane* data_plane_;
  std::vector<WorkerEngine*> workers_;
  std::vector<std::unique_ptr<WorkerSink>> sinks_;
  std::vector<Nanos> timer_at_;                     // pending timer event per rank, or max
  std::vector<Nanos> silent_from_;                  // per rank, or max
  std::vector<Nanos> uplink_free_, downlink_free_;  // per rank: when its link is idle again
  Nanos switch_silent_from_ = Nanos::max();
  SimNetworkOptions options_;
  std::mt19937_64 rng_;
  std::priority_queue<Event, std::vector<Event>, Later> events_;
  std::vector<uint8_t> switch_out_;
  uint64_t seq_ = 0;
  Nanos now_{0};
  SimNetworkCounters counters_;
};

}  // namespace switchml
