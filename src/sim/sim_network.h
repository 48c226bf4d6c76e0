// An in-process network in virtual time: one data plane ("the switch") and n
// worker engines exchange real encoded packets through a seeded model of loss,
// duplication, reordering and delay. The same seed gives the same run, event
// for event. Used by the tests and the demo; a transport like any other.
//
// It also runs a tree of switches (docs/design.md §10): rack switches, each
// with its workers, and a root switch above them, every rack on its own link
// to the root with the same model of loss and delay.
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
  // Plus uniform [0, jitter): queueing that varies, but never reorders
  // packets on one link (a link is a FIFO); only `reorder` does.
  Nanos jitter{std::chrono::microseconds(1)};
  Nanos reorder_delay{std::chrono::microseconds(50)};
  // Rate of every worker's link, each direction a FIFO that serializes
  // packets at this rate before the latency; 0: no limit. The link's far
  // end is the switch's port for that worker: each port has its own link,
  // and the switch forwards between them without delay.
  uint64_t link_bits_per_second = 0;
  // Bytes each packet costs on the wire besides the switchml datagram:
  // UDP 8, IPv4 20, Ethernet 14 + FCS 4, preamble 8 and inter-frame gap 12.
  uint32_t framing_bytes = 66;
  // In a tree: the rate of each rack switch's link to the root, each
  // direction (0: no limit), and its one-way delay (negative: `latency`).
  uint64_t upstream_link_bits_per_second = 0;
  Nanos upstream_latency{-1};

  Status Validate() const;
};

struct SimNetworkCounters {
  uint64_t transmissions = 0;  // packets put on the wire (before loss)
  uint64_t lost = 0;
  uint64_t duplicated = 0;
  uint64_t reordered = 0;
  uint64_t delivered = 0;
  // Contributions a worker put on the wire again (same rank and chunk), and
  // of them those whose earlier transmissions, and the results for them,
  // all arrived: resends that no loss called for.
  uint64_t retransmissions = 0;
  uint64_t spurious_retransmissions = 0;
};

// Which switch each worker talks to, and what sits above the switches.
struct SimTopology {
  std::vector<DataPlane*> racks;         // the switches workers send to
  std::vector<uint16_t> rack_of_worker;  // per rank; empty: every rank on rack 0
  DataPlane* root = nullptr;             // the racks' upstream switch; null: one level
};

class SimNetwork {
 public:
  // `data_plane` and every engine must outlive the network. Worker i is rank i.
  SimNetwork(DataPlane* data_plane, std::vector<WorkerEngine*> workers,
             const SimNetworkOptions& options);
  // A tree: rack r's packets upstream go to `topology.root`, whose member r
  // it is. Every data plane must outlive the network.
  SimNetwork(const SimTopology& topology, std::vector<WorkerEngine*> workers,
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
  // A dead switch: from `from` on, every packet to it is lost (every switch
  // of a tree).
  void SilenceSwitch(Nanos from);
  // A dead root switch of a tree: from `from` on, every packet to it is lost.
  void SilenceRoot(Nanos from);

  Nanos now() const { return now_; }
  const SimNetworkCounters& counters() const { return counters_; }
  const SimNetworkOptions& options() const { return options_; }

 private:
  // Nodes: rank r >= 0, rack switch s is -1 - s, the root -1 - racks.
  struct Event {
    Nanos at;
    uint64_t seq;
    int dest;            // a node
    bool timer = false;  // a worker's or switch's timer instead of a packet
    std::vector<uint8_t> bytes;
  };
  struct Later {
    bool operator()(const Event& a, const Event& b) const {
      return a.at != b.at ? a.at > b.at : a.seq > b.seq;
    }
  };
  class WorkerSink;

  int SwitchNode(size_t s) const { return -1 - int(s); }
  size_t SwitchOf(int node) const { return size_t(-1 - node); }
  bool IsRoot(size_t s) const { return s == racks_.size(); }
  DataPlane& SwitchAt(size_t s) { return IsRoot(s) ? *root_ : *racks_[s]; }
  // Puts `bytes` on `link` (a rank's link, or workers + rack for a rack's
  // link to the root) toward node `dest`. `up`: the direction away from the
  // workers.
  void Transmit(int dest, size_t link, bool up, std::span<const uint8_t> bytes);
  // Notes what a worker's link carries for the spurious-resend count.
  // Returns a flag byte of (rank, chunk) to mark lost, or null.
  uint8_t* TrackExchange(size_t rank, bool up, std::span<const uint8_t> bytes);
  void Push(Event e);
  void ScheduleTimer(uint16_t rank);
  void ScheduleSwitchTimer(size_t s);
  void DeliverToSwitch(size_t s, const std::vector<uint8_t>& bytes);
  // Sends what switch `s` decided (its verdict, packet in switch_out_).
  void Forward(size_t s, const Verdict& v);
  bool Silent(int node) const;
  double Uniform();

  std::vector<DataPlane*> racks_;
  DataPlane* root_ = nullptr;
  std::vector<uint16_t> rack_of_worker_;
  std::vector<std::vector<uint16_t>> ranks_of_rack_;
  std::vector<WorkerEngine*> workers_;
  std::vector<std::unique_ptr<WorkerSink>> sinks_;
  std::vector<Nanos> timer_at_;                     // pending timer event per rank, or max
  std::vector<Nanos> switch_timer_at_;              // per switch (racks, then the root)
  std::vector<Nanos> silent_from_;                  // per rank, or max
  std::vector<Nanos> uplink_free_, downlink_free_;  // per link: when it is idle again
  std::vector<Nanos> uplink_last_, downlink_last_;  // per link: its latest arrival (FIFO)
  // Per rank, per chunk id: the flags below (see TrackExchange).
  static constexpr uint8_t kExchangeSent = 1;  // a contribution went out
  static constexpr uint8_t kExchangeLost = 2;  // it, or a result for it, was lost
  std::vector<std::vector<uint8_t>> exchanges_;
  Nanos switch_silent_from_ = Nanos::max();
  Nanos root_silent_from_ = Nanos::max();
  SimNetworkOptions options_;
  std::mt19937_64 rng_;
  std::priority_queue<Event, std::vector<Event>, Later> events_;
  std::vector<uint8_t> switch_out_;
  uint64_t seq_ = 0;
  Nanos now_{0};
  SimNetworkCounters counters_;
};

}  // namespace switchml
