#include "switch/stats_format.h"

#include <cstdio>

#include "dataplane/data_plane.h"

namespace switchml {
namespace {

void Line(std::string& out, const std::string& metric, const std::string& labels, uint64_t v) {
  // Appended piece by piece: GCC 12 at -O3 warns falsely (-Wrestrict) on
  // chains of std::string operator+.
  out.append(metric);
  if (!labels.empty()) {
    out.push_back('{');
    out.append(labels);
    out.push_back('}');
  }
  out.push_back(' ');
  out.append(std::to_string(v));
  out.push_back('\n');
}

void Counters(std::string& out, const control::v1::Counters& c, const std::string& labels) {
  const std::string sep = labels.empty() ? "" : labels + ",";
  for (const EventCounter& e : kEventCounters) {
    const auto* field = c.GetDescriptor()->FindFieldByName(e.name);
    Line(out, std::string("switchml_") + e.name + "_total", labels,
         c.GetReflection()->GetUInt64(c, field));
  }
  for (const auto& [reason, n] : c.drops()) {
    Line(out, "switchml_drops_total", sep + "reason=\"" + reason + "\"", n);
  }
}

// A Prometheus label value: backslash, quote and newline escaped.
std::string LabelValue(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '\\' || c == '"') out += '\\';
    out += c == '\n' ? std::string("\\n") : std::string(1, c);
  }
  return out;
}

}  // namespace

std::string FormatPrometheus(const control::v1::StatsReply& s) {
  std::string out;
  out += "# TYPE switchml_packets_total counter\n";
  Counters(out, s.total(), "");
  for (const auto& [error, n] : s.decode_errors()) {
    Line(out, "switchml_decode_errors_total", "error=\"" + error + "\"", n);
  }
  Line(out, "switchml_packets_sent_total", "", s.packets_sent());
  Line(out, "switchml_send_errors_total", "", s.send_errors());
  Line(out, "switchml_pool_slots", "", s.pool_slots());
  Line(out, "switchml_pool_free_slots", "", s.free_slots());
  for (const auto& j : s.jobs()) {
    const std::string labels =
        "job=\"" + LabelValue(j.job_name()) + "\",id=\"" + std::to_string(j.job_id()) + "\"";
    Line(out, "switchml_job_ranks_joined", labels, j.joined());
    Line(out, "switchml_job_active", labels, j.active());
    if (j.active()) {
      Line(out, "switchml_job_result_multicast", labels, j.result_multicast());
      Counters(out, j.counters(), labels);
    }
  }
  return out;
}

std::string FormatTable(const control::v1::StatsReply& s) {
  char buf[512];
  std::string out;
  std::snprintf(buf, sizeof(buf),
                "pool: %u slots, %u free; packets in %llu, out %llu, send errors %llu\n",
                s.pool_slots(), s.free_slots(), (unsigned long long)s.total().packets(),
                (unsigned long long)s.packets_sent(), (unsigned long long)s.send_errors());
  out += buf;
  for (const auto& [reason, n] : s.total().drops()) {
    out += "  dropped " + reason + ": " + std::to_string(n) + "\n";
  }
  for (const auto& [error, n] : s.decode_errors()) {
    out += "  malformed " + error + ": " + std::to_string(n) + "\n";
  }
  out += "jobs: " + std::to_string(s.jobs_size()) + "\n";
  for (const auto& j : s.jobs()) {
    const auto& c = j.counters();
    std::snprintf(buf, sizeof(buf),
                  "  %-20s id %-6u %s %u/%u ranks, %u slots%s: packets %llu, completed %llu, "
                  "resent %llu, pending %llu\n",
                  j.job_name().c_str(), j.job_id(), j.active() ? "active " : "joining", j.joined(),
                  j.world_size(), j.pool_slots(),
                  j.result_multicast() ? ", results by multicast" : "",
                  (unsigned long long)c.packets(), (unsigned long long)c.slots_completed(),
                  (unsigned long long)c.results_resent(), (unsigned long long)c.pending_replies());
    out += buf;
    for (const auto& [reason, n] : c.drops()) {
      out += "      dropped " + reason + ": " + std::to_string(n) + "\n";
    }
  }
  return out;
}

}  // namespace switchml
