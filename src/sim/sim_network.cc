#include "sim/sim_network.h"

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

// Hands a worker's outgoing packets to the network, addressed to the switch.
class SimNetwork::WorkerSink : public PacketSink {
 public:
  WorkerSink(SimNetwork* net, int rank) : net_(net), rank_(rank) {}
  void Send(std::span<const uint8_t> packet) override {
    if (!net_->Silent(rank_)) net_->Transmit(kSwitch, rank_, packet);
  }

 private:
  SimNetwork* net_;
  int rank_;
};

SimNetwork::SimNetwork(DataPlane* data_plane, std::vector<WorkerEngine*> workers,
                       const SimNetworkOptions& options)
    : data_plane_(data_plane),
      workers_(std::move(workers)),
      timer_at_(workers_.size(), Nanos::max()),
      silent_from_(workers_.size(), Nanos::max()),
      uplink_free_(workers_.size(), Nanos(0)),
      downlink_free_(workers_.size(), Nanos(0)),
      options_(options),
      rng_(options.seed),
      switch_out_(PacketBytes(data_plane->config().max_elements_per_packet)) {
  for (size_t r = 0; r < workers_.size(); ++r) {
    sinks_.push_back(std::make_unique<WorkerSink>(this, int(r)));
  }
}

SimNetwork::~SimNetwork() = default;

void SimNetwork::Silence(uint16_t rank, Nanos from) { silent_from_.at(rank) = from; }
void SimNetwork::SilenceSwitch(Nanos from) { switch_silent_from_ = from; }

bool SimNetwork::Silent(int node) const {
  return now_ >= (node == kSwitch ? switch_silent_from_ : silent_from_[size_t(node)]);
}

double SimNetwork::Uniform() { return double(rng_() >> 11) * 0x1.0p-53; }

void SimNetwork::Push(Event e) {
  e.seq = seq_++;
  events_.push(std::move(e));
}

void SimNetwork::Transmit(int dest, int worker, std::span<const uint8_t> bytes) {
  ++counters_.transmissions;
  Nanos departs = now_;
  if (options_.link_bits_per_second > 0) {
    // Serialized behind what the link already carries; lost packets too.
    Nanos& free = dest == kSwitch ? uplink_free_[size_t(worker)] : downlink_free_[size_t(worker)];
    const auto wire =
        Nanos(int64_t(double(bytes.size()) * 8e9 / double(options_.link_bits_per_second)));
    free = std::max(free, now_) + wire;
    departs = free;
  }
  if (Uniform() < options_.loss) {
    ++counters_.lost;
    return;
  }
  const int copies = Uniform() < options_.duplicate ? 2 : 1;
  counters_.duplicated += copies - 1;
  for (int c = 0; c < copies; ++c) {
    Nanos delay = (departs - now_) + options_.latency +
                  Nanos(int64_t(Uniform() * double(options_.jitter.count())));
    if (Uniform() < options_.reorder) {
      ++counters_.reordered;
      delay += Nanos(int64_t(Uniform() * double(options_.reorder_delay.count())));
    }
    Push(Event{now_ + delay, 0, dest, false, std::vector<uint8_t>(bytes.begin(), bytes.end())});
  }
}

void SimNetwork::ScheduleTimer(uint16_t rank) {
  const Nanos at = workers_[rank]->NextDeadline();
  if (at == Nanos::max() || at >= timer_at_[rank]) return;
  timer_at_[rank] = std::max(at, now_);
  Push(Event{timer_at_[rank], 0, int(rank), true, {}});
}

void SimNetwork::DeliverToSwitch(const std::vector<uint8_t>& bytes) {
  const Verdict v = data_plane_->Process(bytes, switch_out_);
  const std::span<const uint8_t> out(switch_out_.data(), v.out_bytes);
  switch (v.action) {
    case Action::kDrop:
      break;
    case Action::kReplyToSender:
    case Action::kPendingToSender:
      if (v.rank < workers_.size()) Transmit(v.rank, v.rank, out);
      break;
    case Action::kSendToAll:
      for (uint16_t r = 0; r < v.world_size && r < workers_.size(); ++r) Transmit(r, r, out);
      break;
  }
}

Nanos SimNetwork::Run(Nanos until) {
  for (size_t r = 0; r < workers_.size(); ++r) ScheduleTimer(uint16_t(r));
  while (!events_.empty() && events_.top().at <= until) {
    // priority_queue::top() is const; the event is moved out before pop.
    Event e = std::move(const_cast<Event&>(events_.top()));
    events_.pop();
    if (e.timer && e.at != timer_at_[size_t(e.dest)]) continue;  // superseded by an earlier timer
    now_ = e.at;
    if (e.dest == kSwitch) {
      if (Silent(kSwitch)) {
        ++counters_.lost;
      } else {
        ++counters_.delivered;
        DeliverToSwitch(e.bytes);
      }
      continue;
    }
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
