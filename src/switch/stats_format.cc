#include "switch/stats_format.h"

#include <cstdio>

#include "switch/metrics.h"

namespace switchml {
std::string FormatPrometheus(const control::v1::StatsReply& s) {
  return FormatMetrics(MetricFamilies(s));
}

namespace {

// The switch's totals: pool, packets, drops, malformed input, and each data
// thread's share.
std::string TotalsLines(const control::v1::StatsReply& s) {
  char buf[512];
  std::snprintf(buf, sizeof(buf),
                "pool: %u slots, %u free; packets in %llu, out %llu, send errors %llu\n",
                s.pool_slots(), s.free_slots(), (unsigned long long)s.total().packets(),
                (unsigned long long)s.packets_sent(), (unsigned long long)s.send_errors());
  std::string out = buf;
  for (const auto& [reason, n] : s.total().drops()) {
    out += "  dropped " + reason + ": " + std::to_string(n) + "\n";
  }
  for (const auto& [error, n] : s.decode_errors()) {
    out += "  malformed " + error + ": " + std::to_string(n) + "\n";
  }
  if (s.transport_drops() != 0) {
    out += "  malformed frames (transport): " + std::to_string(s.transport_drops()) + "\n";
  }
  if (s.transport_off_queue() != 0) {
    out +=
        "  datagrams off their thread's queue (af_xdp: through the kernel, from this host or "
        "on another thread's queue; dpdk: handed over): " +
        std::to_string(s.transport_off_queue()) + "\n";
  }
  if (s.shards_size() > 1) {
    for (const auto& shard : s.shards()) {
      std::snprintf(buf, sizeof(buf), "  data thread %u: packets in %llu, out %llu\n",
                    shard.shard(), (unsigned long long)shard.counters().packets(),
                    (unsigned long long)shard.packets_sent());
      out += buf;
    }
  }
  return out;
}

// One job's line, and its upstream, drops and end reason below it.
std::string JobLines(const control::v1::JobStats& j) {
  char buf[512];
  const auto& c = j.counters();
  std::snprintf(buf, sizeof(buf),
                "  %-20s id %-6u %s %u/%u ranks, %u slots%s: packets %llu, completed %llu, "
                "resent %llu, pending %llu, nacks %llu\n",
                j.job_name().c_str(), j.job_id(),
                j.ended()    ? "ended  "
                : j.active() ? "active "
                             : "joining",
                j.joined(), j.world_size(), j.pool_slots(),
                j.result_multicast() ? ", results by multicast" : "",
                (unsigned long long)c.packets(), (unsigned long long)c.slots_completed(),
                (unsigned long long)c.results_resent(), (unsigned long long)c.pending_replies(),
                (unsigned long long)c.nacks_sent());
  std::string out = buf;
  if (c.upstream_sent() != 0) {  // a rack switch's share of a tree's job
    std::snprintf(buf, sizeof(buf), "      upstream: sent %llu, resent %llu, results %llu\n",
                  (unsigned long long)c.upstream_sent(), (unsigned long long)c.upstream_resent(),
                  (unsigned long long)c.upstream_results());
    out += buf;
  }
  for (const auto& [reason, n] : c.drops()) {
    out += "      dropped " + reason + ": " + std::to_string(n) + "\n";
  }
  if (j.ended()) out += "      ended: " + j.end_reason() + "\n";
  return out;
}

}  // namespace

std::string FormatTable(const control::v1::StatsReply& s) {
  std::string out = TotalsLines(s);
  out += "jobs: " + std::to_string(s.jobs_size()) + "\n";
  for (const auto& j : s.jobs()) out += JobLines(j);
  if (s.ended_jobs_size() > 0) {
    out += "ended recently: " + std::to_string(s.ended_jobs_size()) + "\n";
    for (const auto& j : s.ended_jobs()) out += JobLines(j);
  }
  return out;
}

}  // namespace switchml
