#include "sim/sim_network.h"

#include <algorithm>
#include <string>

namespace switchml {

Status SimNetworkOptions::Validate() const {
  auto probability = [](const char* name, double p) {
    return (p >= 0.0 && p < 1.0) ? Status::Ok()
                                 : InvalidArgument(std::string(name) + "=" + std::to_string(p) +
                                                   " is not a probability in [0, 1)");
  };
  for (Status s : {probability("loss", loss), probability("duplicate", duplicate),
                   probability("reorder", reorder)}) {
    if (!s.ok()) return s;
  }
  if (latency < Nanos(0) || jitter < Nanos(0) || reorder_delay < Nanos(0)) {
    return InvalidArgument("latency, jitter and reorder_delay must not be negative");
  }
  return Status::Ok();
}

// Hands a worker's outgoing packets to the network, addressed to its switch.
class SimNetwork::WorkerSink : public PacketSink {
 public:
  WorkerSink(SimNetwork* net, int rank) : net_(net), rank_(rank) {}
  void Send(std::span<const uint8_t> packet) override {
    if (!net_->Silent(rank_)) {
      net_->Transmit(net_->SwitchNode(net_->rack_of_worker_[size_t(rank_)]), size_t(rank_), true,
                     packet);
    }
  }

 private:
  SimNetwork* net_;
  int rank_;
};

SimNetwork::SimNetwork(DataPlane* data_plane, std::vector<WorkerEngine*> workers,
                       const SimNetworkOptions& options)
    : SimNetwork(SimTopology{{data_plane}, {}, nullptr}, std::move(workers), options) {}

SimNetwork::SimNetwork(const SimTopology& topology, std::vector<WorkerEngine*> workers,
                       const SimNetworkOptions& options)
    : racks_(topology.racks),
      root_(topology.root),
      rack_of_worker_(topology.rack_of_worker),
      ranks_of_rack_(topology.racks.size()),
      workers_(std::move(workers)),
      timer_at_(workers_.size(), Nanos::max()),
      switch_timer_at_(racks_.size() + 1, Nanos::max()),
      silent_from_(workers_.size(), Nanos::max()),
      uplink_free_(workers_.size() + racks_.size(), Nanos(0)),
      downlink_free_(workers_.size() + racks_.size(), Nanos(0)),
      uplink_last_(workers_.size() + racks_.size(), Nanos(0)),
      downlink_last_(workers_.size() + racks_.size(), Nanos(0)),
      exchanges_(workers_.size()),
      options_(options),
      rng_(options.seed) {
  rack_of_worker_.resize(workers_.size(), 0);
  uint16_t largest = 0;
  for (DataPlane* dp : racks_) largest = std::max(largest, dp->config().max_elements_per_packet);
  if (root_ != nullptr) largest = std::max(largest, root_->config().max_elements_per_packet);
  switch_out_.resize(PacketBytes(largest));
  for (size_t r = 0; r < workers_.size(); ++r) {
    sinks_.push_back(std::make_unique<WorkerSink>(this, int(r)));
    ranks_of_rack_.at(rack_of_worker_[r]).push_back(uint16_t(r));
  }
}

SimNetwork::~SimNetwork() = default;

void SimNetwork::Silence(uint16_t rank, Nanos from) { silent_from_.at(rank) = from; }
void SimNetwork::SilenceSwitch(Nanos from) { switch_silent_from_ = from; }
void SimNetwork::SilenceRoot(Nanos from) { root_silent_from_ = from; }

bool SimNetwork::Silent(int node) const {
  if (node >= 0) return now_ >= silent_from_[size_t(node)];
  const bool root = IsRoot(SwitchOf(node));
  return now_ >= (root ? std::min(switch_silent_from_, root_silent_from_) : switch_silent_from_);
}

double SimNetwork::Uniform() { return double(rng_() >> 11) * 0x1.0p-53; }

void SimNetwork::Push(Event e) {
  e.seq = seq_++;
  events_.push(std::move(e));
}

uint8_t* SimNetwork::TrackExchange(size_t rank, bool up, std::span<const uint8_t> bytes) {
  constexpr uint32_t kMaxTrackedChunk = 1u << 26;  // far beyond any simulated job
  if (bytes.size() < kHeaderBytes) return nullptr;
  const auto type = MessageType(bytes[3]);
  const uint32_t chunk = LoadBe32(&bytes[8]);
  if (chunk >= kMaxTrackedChunk) return nullptr;
  // Results to this rank matter (a lost one calls for a resend); pending
  // replies and NACKs do not.
  if (up ? type != MessageType::kContribution : type != MessageType::kResult) return nullptr;
  std::vector<uint8_t>& chunks = exchanges_[rank];
  if (chunks.size() <= chunk) chunks.resize(std::max<size_t>(2 * chunks.size(), chunk + 1), 0);
  uint8_t& flags = chunks[chunk];
  // Only a flagged resend counts: a second copy sent with the first (the
  // descriptor round after a loss, kFlagCopy) is redundancy, not a
  // retransmission.
  const bool resend = (bytes[kFlagsOffset] & kFlagResend) != 0;
  if (up && resend && (flags & kExchangeSent)) {
    ++counters_.retransmissions;
    if (!(flags & kExchangeLost)) ++counters_.spurious_retransmissions;
  }
  if (up) flags |= kExchangeSent;
  return &flags;
}

void SimNetwork::Transmit(int dest, size_t link, bool up, std::span<const uint8_t> bytes) {
  ++counters_.transmissions;
  const bool rack_link = link >= workers_.size();
  uint8_t* exchange = rack_link ? nullptr : TrackExchange(link, up, bytes);
  Nanos departs = now_;
  const uint64_t rate = rack_link && options_.upstream_link_bits_per_second > 0
                            ? options_.upstream_link_bits_per_second
                            : (rack_link ? 0 : options_.link_bits_per_second);
  if (rate > 0) {
    // Serialized behind what the link already carries; lost packets too.
    Nanos& free = up ? uplink_free_[link] : downlink_free_[link];
    const auto wire =
        Nanos(int64_t(double(bytes.size() + options_.framing_bytes) * 8e9 / double(rate)));
    free = std::max(free, now_) + wire;
    departs = free;
  }
  if (Uniform() < options_.loss) {
    ++counters_.lost;
    if (exchange != nullptr) *exchange |= kExchangeLost;
    return;
  }
  const Nanos latency = rack_link && options_.upstream_latency >= Nanos(0)
                            ? options_.upstream_latency
                            : options_.latency;
  const int copies = Uniform() < options_.duplicate ? 2 : 1;
  counters_.duplicated += copies - 1;
  Nanos& last = up ? uplink_last_[link] : downlink_last_[link];
  for (int c = 0; c < copies; ++c) {
    Nanos arrives = departs + latency + Nanos(int64_t(Uniform() * double(options_.jitter.count())));
    if (Uniform() < options_.reorder) {
      ++counters_.reordered;  // held back: later packets of the link overtake it
      arrives += Nanos(int64_t(Uniform() * double(options_.reorder_delay.count())));
    } else {
      arrives = std::max(arrives, last);  // jitter never reorders a FIFO link
      last = arrives;
    }
    Push(Event{arrives, 0, dest, false, std::vector<uint8_t>(bytes.begin(), bytes.end())});
  }
}

void SimNetwork::ScheduleTimer(uint16_t rank) {
  const Nanos at = workers_[rank]->NextDeadline();
  if (at == Nanos::max() || at >= timer_at_[rank]) return;
  timer_at_[rank] = std::max(at, now_);
  Push(Event{timer_at_[rank], 0, int(rank), true, {}});
}

void SimNetwork::ScheduleSwitchTimer(size_t s) {
  const Nanos at = SwitchAt(s).NextTimer();
  if (at == Nanos::max() || at >= switch_timer_at_[s]) return;
  switch_timer_at_[s] = std::max(at, now_);
  Push(Event{switch_timer_at_[s], 0, SwitchNode(s), true, {}});
}

void SimNetwork::Forward(size_t s, const Verdict& v) {
  const std::span<const uint8_t> out(switch_out_.data(), v.out_bytes);
  const size_t racks = racks_.size();
  switch (v.action) {
    case Action::kDrop:
      break;
    case Action::kReplyToSender:
    case Action::kPendingToSender:
      if (IsRoot(s)) {
        if (v.rank < racks) Transmit(SwitchNode(v.rank), workers_.size() + v.rank, false, out);
      } else if (v.rank < workers_.size()) {
        Transmit(v.rank, v.rank, false, out);
      }
      break;
    case Action::kSendToAll:
      for (uint8_t copy = 0; copy < v.copies; ++copy) {
        if (IsRoot(s)) {
          for (uint16_t r = 0; r < v.world_size && r < racks; ++r) {
            Transmit(SwitchNode(r), workers_.size() + r, false, out);
          }
        } else {
          for (uint16_t r : ranks_of_rack_[s]) Transmit(r, r, false, out);
        }
      }
      break;
    case Action::kNackToMissing: {
      // The members the payload's bitmaps name (racks, at the root).
      const size_t members = IsRoot(s) ? racks : workers_.size();
      for (uint16_t r = 0; r < v.world_size && r < members; ++r) {
        if (!NackNames(out, r)) continue;
        if (IsRoot(s)) {
          Transmit(SwitchNode(r), workers_.size() + r, false, out);
        } else {
          Transmit(r, r, false, out);
        }
      }
      break;
    }
    case Action::kSendUpstream:
      if (root_ != nullptr && !IsRoot(s))
        Transmit(SwitchNode(racks), workers_.size() + s, true, out);
      break;
  }
}

void SimNetwork::DeliverToSwitch(size_t s, const std::vector<uint8_t>& bytes) {
  DataPlane& dp = SwitchAt(s);
  dp.AdvanceClock(now_);
  Forward(s, dp.Process(bytes, switch_out_));
}

Nanos SimNetwork::Run(Nanos until) {
  for (size_t r = 0; r < workers_.size(); ++r) ScheduleTimer(uint16_t(r));
  while (!events_.empty() && events_.top().at <= until) {
    // priority_queue::top() is const; the event is moved out before pop.
    Event e = std::move(const_cast<Event&>(events_.top()));
    events_.pop();
    if (e.dest < 0) {
      const size_t s = SwitchOf(e.dest);
      if (e.timer && e.at != switch_timer_at_[s]) continue;  // superseded
      now_ = e.at;
      if (e.timer) {
        switch_timer_at_[s] = Nanos::max();
        for (Verdict v;
             !Silent(e.dest) &&
             (v = SwitchAt(s).NextTimerPacket(now_, switch_out_)).action != Action::kDrop;) {
          Forward(s, v);
        }
      } else if (Silent(e.dest)) {
        ++counters_.lost;
      } else {
        ++counters_.delivered;
        DeliverToSwitch(s, e.bytes);
      }
      // A timer stops when no worker has anything left to wait for (a root
      // that is gone would otherwise keep the racks retrying forever).
      // (A silenced worker waits for nothing any more.)
      bool busy = false;
      for (size_t r = 0; r < workers_.size() && !busy; ++r) {
        busy = !Silent(int(r)) && workers_[r]->NextDeadline() != Nanos::max();
      }
      if (!Silent(e.dest) && (!e.timer || busy)) {
        ScheduleSwitchTimer(s);
      }
      continue;
    }
    if (e.timer && e.at != timer_at_[size_t(e.dest)]) continue;  // superseded by an earlier timer
    now_ = e.at;
    const auto rank = uint16_t(e.dest);
    if (e.timer) {
      timer_at_[rank] = Nanos::max();
      if (!Silent(rank)) workers_[rank]->OnTimer(now_, *sinks_[rank]);
    } else if (Silent(rank)) {
      ++counters_.lost;
    } else {
      ++counters_.delivered;
      workers_[rank]->OnPacket(e.bytes, now_, *sinks_[rank]);
    }
    if (!Silent(rank)) ScheduleTimer(rank);
  }
  return now_;
}

}  // namespace switchml
