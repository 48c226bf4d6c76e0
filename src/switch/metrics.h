// The switch's statistics as Prometheus metric families: every family with
// its help text and type, each name once (the totals and the per-job series
// are separate families, so sum() never counts twice), counters named
// *_total and gauges not. Served over HTTP (SwitchConfig::metrics_address)
// and printed by `switchml-ctl stats --format prometheus`.
#pragma once

#include <prometheus/metric_family.h>

#include <string>
#include <vector>

#include "switchml/control.pb.h"

namespace switchml {

std::vector<prometheus::MetricFamily> MetricFamilies(const control::v1::StatsReply& stats);

// The families in the text exposition format (version 0.0.4).
std::string FormatMetrics(const std::vector<prometheus::MetricFamily>& families);

}  // namespace switchml
