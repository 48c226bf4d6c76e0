#include "worker/window_sizer.h"

#include <algorithm>
#include <cmath>

namespace switchml {

WindowSizer::WindowSizer(uint16_t max_window)
    : max_window_(std::max<uint16_t>(max_window, 1)),
      window_(std::min(kInitialWindow, max_window_)) {}

void WindowSizer::OnOperationStart() {
  previous_ = current_;
  current_ = Filter{};
}

Nanos WindowSizer::min_rtt() const { return std::min(previous_.min_rtt, current_.min_rtt); }

double WindowSizer::max_rate_per_second() const {
  return std::max(previous_.max_rate, current_.max_rate) * 1e9;
}

void WindowSizer::OnSample(Nanos rtt, uint64_t delivered) {
  if (rtt <= Nanos(0)) rtt = Nanos(1);
  current_.min_rtt = std::min(current_.min_rtt, rtt);
  current_.max_rate = std::max(current_.max_rate, double(delivered) / double(rtt.count()));
  const double bdp = std::max(previous_.max_rate, current_.max_rate) * double(min_rtt().count());
  const double window = std::ceil(kGain * bdp);
  window_ = uint16_t(std::clamp<double>(window, std::min(kMinWindow, max_window_), max_window_));
}

uint16_t PoolSlotsForPath(uint64_t bits_per_second, Nanos rtt, uint32_t wire_bytes) {
  const double packet_ns =
      double(wire_bytes) * 8e9 / double(std::max<uint64_t>(bits_per_second, 1));
  const double bdp = double(rtt.count()) / packet_ns;
  uint32_t slots = WindowSizer::kMinWindow;
  while (slots < kRecoveryBdps * bdp && slots < 32768) slots *= 2;
  return uint16_t(std::min<uint32_t>(slots, 65535));
}

}  // namespace switchml
