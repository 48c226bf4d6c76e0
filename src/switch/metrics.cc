#include "switch/metrics.h"

#include <prometheus/text_serializer.h>

#include <map>
#include <set>
#include <sstream>

#include "dataplane/data_plane.h"

namespace switchml {
namespace {

using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;
using Labels = std::vector<ClientMetric::Label>;

class Families {
 public:
  // The family `name`, created on first use (families keep their first
  // appearance's order, each contiguous).
  MetricFamily& Family(const std::string& name, MetricType type, const std::string& help) {
    for (MetricFamily& f : families_) {
      if (f.name == name) return f;
    }
    families_.push_back(MetricFamily{name, help, type, {}});
    return families_.back();
  }
  void Add(const std::string& name, MetricType type, const std::string& help, Labels labels,
           double value) {
    ClientMetric m;
    m.label = std::move(labels);
    if (type == MetricType::Counter) {
      m.counter.value = value;
    } else {
      m.gauge.value = value;
    }
    Family(name, type, help).metric.push_back(std::move(m));
  }
  std::vector<MetricFamily> Take() { return std::move(families_); }

 private:
  std::vector<MetricFamily> families_;
};

// The event and drop counters of `c`, under `prefix` ("switchml_" or
// "switchml_job_"), with `labels`.
void AddCounters(Families& f, const std::string& prefix, const std::string& whose,
                 const control::v1::Counters& c, const Labels& labels) {
  const auto* fields = c.GetDescriptor();
  for (const EventCounter& e : kEventCounters) {
    const uint64_t v = c.GetReflection()->GetUInt64(c, fields->FindFieldByName(e.name));
    f.Add(prefix + e.name + "_total", MetricType::Counter, e.help + whose, labels, double(v));
  }
  // Declared even when nothing was dropped, so the family is always there.
  f.Family(prefix + "drops_total", MetricType::Counter,
           "packets dropped, by reason (docs/wire-format.md)" + whose);
  for (const auto& [reason, n] :
       std::map<std::string, uint64_t>(c.drops().begin(), c.drops().end())) {
    Labels with = labels;
    with.push_back({"reason", reason});
    f.Add(prefix + "drops_total", MetricType::Counter, "", with, double(n));
  }
}

}  // namespace

std::vector<MetricFamily> MetricFamilies(const control::v1::StatsReply& s) {
  Families f;
  AddCounters(f, "switchml_", ", all jobs since the switch started", s.total(), {});
  f.Family("switchml_decode_errors_total", MetricType::Counter,
           "datagrams that do not decode as switchml packets, by error");
  for (const auto& [error, n] :
       std::map<std::string, uint64_t>(s.decode_errors().begin(), s.decode_errors().end())) {
    f.Add("switchml_decode_errors_total", MetricType::Counter, "", {{"error", error}}, double(n));
  }
  f.Add("switchml_packets_sent_total", MetricType::Counter, "datagrams the switch sent", {},
        double(s.packets_sent()));
  f.Add("switchml_send_errors_total", MetricType::Counter, "datagrams the switch could not send",
        {}, double(s.send_errors()));
  f.Add("switchml_transport_drops_total", MetricType::Counter,
        "frames dropped by the transport before the data plane (malformed headers; af_xdp, dpdk)",
        {}, double(s.transport_drops()));
  f.Add("switchml_transport_off_queue_total", MetricType::Counter,
        "datagrams that reached a data thread other than through its own receive queue (af_xdp: "
        "through the kernel, from this host or not steered to its queue; dpdk: handed over by "
        "another data thread)",
        {}, double(s.transport_off_queue()));
  f.Add("switchml_transport_kernel_path_total", MetricType::Counter,
        "deprecated: switchml_transport_off_queue_total", {}, double(s.transport_off_queue()));
  f.Add("switchml_pool_slots", MetricType::Gauge, "aggregation slots in the pool", {},
        double(s.pool_slots()));
  f.Add("switchml_pool_free_slots", MetricType::Gauge, "pool slots no job holds", {},
        double(s.free_slots()));
  f.Add("switchml_jobs", MetricType::Gauge, "registered jobs (waiting for ranks or running)", {},
        double(s.jobs_size()));
  for (const auto& shard : s.shards()) {
    const Labels labels = {{"shard", std::to_string(shard.shard())}};
    f.Add("switchml_shard_packets_sent_total", MetricType::Counter,
          "datagrams this data thread sent", labels, double(shard.packets_sent()));
    AddCounters(f, "switchml_shard_", ", this data thread", shard.counters(), labels);
  }
  // Running jobs, then those that ended within the grace period (their last counts).
  std::set<std::pair<std::string, uint32_t>> seen;  // one series per (job, id)
  for (const auto* jobs : {&s.jobs(), &s.ended_jobs()}) {
    for (const auto& j : *jobs) {
      if (!seen.emplace(j.job_name(), j.job_id()).second) continue;
      const Labels labels = {{"job", j.job_name()}, {"id", std::to_string(j.job_id())}};
      f.Add("switchml_job_ranks_joined", MetricType::Gauge, "ranks of the job that have joined",
            labels, double(j.joined()));
      f.Add("switchml_job_active", MetricType::Gauge, "1 once every rank joined and the job runs",
            labels, j.active() ? 1 : 0);
      f.Add("switchml_job_ended", MetricType::Gauge,
            "1 for a job that ended (kept for the switch's --job-stats-grace-s)", labels,
            j.ended() ? 1 : 0);
      if (j.active() || j.ended()) {
        f.Add("switchml_job_result_multicast", MetricType::Gauge,
              "1 if the job's results go by host-local multicast", labels,
              j.result_multicast() ? 1 : 0);
        AddCounters(f, "switchml_job_", ", this job", j.counters(), labels);
      }
    }
  }
  return f.Take();
}

std::string FormatMetrics(const std::vector<MetricFamily>& families) {
  std::ostringstream out;
  prometheus::TextSerializer().Serialize(out, families);
  return out.str();
}

}  // namespace switchml
