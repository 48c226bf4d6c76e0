// How many slots a worker keeps in flight: sized from what it measures.
//
// A slot's round trip and the rate at which results come back are sampled on
// every result of a first transmission. The window is twice the estimated
// bandwidth-delay product (as in BBR): gain * max delivery rate * min round
// trip, in packets, between a floor and the job's slots. While the window
// limits the flow, the delivery rate is window / round trip, so the window
// doubles every round trip until the path, not the window, sets the rate.
//
// Both filters span the previous and the current operation. An operation
// starts with its engine's pipe drained, so its first round trips are the
// unloaded ones; a filter spanning the whole job would never forget an old
// path, one shorter than an operation would forget the unloaded samples and
// let the window feed on its own queueing delay.
//
// Pure logic, no clocks: the caller passes times.
#pragma once

#include <cstdint>

#include "switchml/types.h"

namespace switchml {

class WindowSizer {
 public:
  static constexpr double kGain = 2.0;
  static constexpr uint16_t kMinWindow = 8;
  static constexpr uint16_t kInitialWindow = 16;

  // `max_window`: the slots available (at least 1).
  explicit WindowSizer(uint16_t max_window);

  // A result came back `rtt` after its packet was sent, and `delivered`
  // results (this one included) arrived in that time.
  void OnSample(Nanos rtt, uint64_t delivered);
  // An operation starts: the samples of the one before the previous expire.
  void OnOperationStart();

  uint16_t window() const { return window_; }
  Nanos min_rtt() const;
  double max_rate_per_second() const;  // results per second

 private:
  struct Filter {
    Nanos min_rtt = Nanos::max();
    double max_rate = 0;  // results per nanosecond
  };
  uint16_t max_window_;
  uint16_t window_;
  Filter previous_, current_;
};

// The pool slots a job needs to keep a link of `bits_per_second` busy over a
// path whose unloaded round trip is `rtt`, with packets of `wire_bytes` on
// the wire: the window (kGain bandwidth-delay products) plus room for the
// slots that wait on loss recovery meanwhile. A slot whose packet was lost
// stalls for a timeout (at least twice the loaded round trip) and a round
// trip more; the worker keeps sending into the other slots only while they
// outnumber that. kRecoveryBdps covers it: kGain + 2 x kGain + 1, rounded up.
// A power of two between kMinWindow and 65535.
inline constexpr double kRecoveryBdps = 8;
uint16_t PoolSlotsForPath(uint64_t bits_per_second, Nanos rtt, uint32_t wire_bytes);

}  // namespace switchml
