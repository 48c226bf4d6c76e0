// Renders the switch's statistics for operators.
#pragma once

#include <string>

#include "switchml/control.pb.h"

namespace switchml {

// Prometheus text exposition format (metric names switchml_*).
std::string FormatPrometheus(const control::v1::StatsReply& stats);
// A human-readable table.
std::string FormatTable(const control::v1::StatsReply& stats);

}  // namespace switchml
