// The switch's control plane over a data-plane target: one owner of each
// job's record pushes started jobs whole to the target (here one that
// records what it gets), and the software target fans a job out to its
// shards in one step.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <map>
#include <mutex>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include "net/address.h"
#include "switch/data_plane_target.h"
#include "switch/join_request.h"
#include "switch/software_target.h"
#include "switch/switch_start.h"
#include "switchml/context.h"
#include "switchml/control.grpc.pb.h"
#include "switchml/switch_server.h"
#include "transport/sim/sim_fabric.h"
#include "wire/wire_format.h"

namespace switchml {
namespace {

class RecordingTarget final : public DataPlaneTarget {
 public:
  struct Log {
    std::mutex mu;
    std::vector<JobInstall> installs;
    std::vector<JobId> removes;
    Status install_result = Status::Ok();
  };
  explicit RecordingTarget(std::shared_ptr<Log> log) : log_(std::move(log)) {}

  std::string name() const override { return "recording"; }
  DataPlaneConfig limits() const override {
    DataPlaneConfig c;
    c.pool_slots = 64;
    c.max_elements_per_packet = 256;
    c.max_workers = 8;
    c.max_jobs = 4;
    return c;
  }
  std::string data_address() const override { return "10.0.0.9"; }
  std::vector<uint16_t> data_ports() const override { return {4242}; }
  Status Install(const JobInstall& job) override {
    std::lock_guard lock(log_->mu);
    if (!log_->install_result.ok()) return log_->install_result;
    log_->installs.push_back(job);
    return Status::Ok();
  }
  void Remove(JobId id) override {
    std::lock_guard lock(log_->mu);
    log_->removes.push_back(id);
  }
  StatusOr<TargetCounters> Counters(const std::vector<JobId>&) override { return TargetCounters{}; }

 private:
  std::shared_ptr<Log> log_;
};

SwitchConfig ControlOnlyConfig() {
  SwitchConfig config;
  config.bind_address = "127.0.0.1";
  config.control_port = 0;
  return config;
}

control::v1::JoinRequest Join(uint32_t rank, uint32_t world, uint32_t threads) {
  control::v1::JoinRequest join;
  join.set_protocol_version(kWireVersion);
  join.set_job_name("j");
  join.set_rank(rank);
  join.set_world_size(world);
  for (uint32_t t = 0; t < threads; ++t) {
    join.add_data_addresses("127.0.0.1:" + std::to_string(5000 + 10 * rank + t));
  }
  join.set_elements_per_packet(256);
  join.set_pool_slots(32);
  join.set_join_timeout_ms(10000);
  return join;
}

// Joins ranks 0..world-1 at once; each rank's first event (or its error).
struct Joined {
  std::vector<control::v1::JobEvent> first;
  std::vector<grpc::Status> status;
};
Joined JoinAll(uint16_t control_port, uint32_t world, uint32_t threads,
               std::vector<std::unique_ptr<grpc::ClientContext>>* contexts) {
  auto stub = control::v1::Control::NewStub(grpc::CreateChannel(
      "127.0.0.1:" + std::to_string(control_port), grpc::InsecureChannelCredentials()));
  Joined joined;
  joined.first.resize(world);
  joined.status.resize(world);
  contexts->resize(world);
  std::vector<std::thread> ranks;
  for (uint32_t r = 0; r < world; ++r) {
    (*contexts)[r] = std::make_unique<grpc::ClientContext>();
    ranks.emplace_back([&, r] {
      auto reader = stub->Join((*contexts)[r].get(), Join(r, world, threads));
      if (!reader->Read(&joined.first[r])) joined.status[r] = reader->Finish();
    });
  }
  for (auto& t : ranks) t.join();
  return joined;
}

TEST(ControlPlane, PushesEachStartedJobWholeToItsTarget) {
  auto log = std::make_shared<RecordingTarget::Log>();
  auto sw = StartSwitchServer(ControlOnlyConfig(), std::make_unique<RecordingTarget>(log));
  ASSERT_TRUE(sw.ok()) << sw.status().ToString();
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts;
  const Joined joined = JoinAll(sw.value()->control_port(), 2, 2, &contexts);
  for (uint32_t r = 0; r < 2; ++r) {
    ASSERT_TRUE(joined.first[r].has_assignment()) << joined.status[r].error_message();
    EXPECT_EQ(joined.first[r].assignment().data_address(), "10.0.0.9");
    EXPECT_EQ(joined.first[r].assignment().data_port(), 4242u);
    // Its workers resend on a timeout: the target does not say it answers probes.
    EXPECT_FALSE(joined.first[r].assignment().answers_probes());
    // Nor that it takes exponent-only packets: the descriptor round sends
    // whole ones.
    EXPECT_FALSE(joined.first[r].assignment().exponent_only_packets());
  }
  {
    std::lock_guard lock(log->mu);
    ASSERT_EQ(log->installs.size(), 1u);
    const JobInstall& job = log->installs[0];
    EXPECT_EQ(job.assignment.id.value(), joined.first[0].assignment().job_id());
    EXPECT_EQ(job.threads, 2);
    ASSERT_EQ(job.addresses.size(), 2u);
    for (uint32_t r = 0; r < 2; ++r) {
      ASSERT_EQ(job.addresses[r].size(), 2u);
      for (uint32_t t = 0; t < 2; ++t) {
        EXPECT_EQ(net::FormatAddress(job.addresses[r][t]),
                  "127.0.0.1:" + std::to_string(5000 + 10 * r + t));
      }
    }
    EXPECT_FALSE(job.auth.has_value());
    EXPECT_TRUE(job.result_groups.empty());  // this target has none
  }
  // The pool is the target's, not the software data plane's.
  const std::string stats = sw.value()->PrometheusText();
  EXPECT_NE(stats.find("switchml_pool_slots 64"), std::string::npos) << stats;
  EXPECT_NE(stats.find("switchml_pool_free_slots 32"), std::string::npos) << stats;
  sw.value()->Stop();
  std::lock_guard lock(log->mu);
  ASSERT_EQ(log->removes.size(), 1u);
  EXPECT_EQ(log->removes[0], log->installs[0].assignment.id);
}

TEST(ControlPlane, AFailedInstallFailsEveryRankAndFreesThePool) {
  auto log = std::make_shared<RecordingTarget::Log>();
  log->install_result = Status(StatusCode::kResourceExhausted, "the recording target is full");
  auto sw = StartSwitchServer(ControlOnlyConfig(), std::make_unique<RecordingTarget>(log));
  ASSERT_TRUE(sw.ok()) << sw.status().ToString();
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts;
  const Joined joined = JoinAll(sw.value()->control_port(), 2, 1, &contexts);
  for (uint32_t r = 0; r < 2; ++r) {
    // The installing rank gets the target's error, the waiting one the end
    // of its job naming it.
    const std::string what = joined.first[r].has_rank_lost() ? joined.first[r].rank_lost().reason()
                                                             : joined.status[r].error_message();
    EXPECT_NE(what.find("the recording target is full"), std::string::npos) << what;
  }
  const std::string stats = sw.value()->PrometheusText();
  EXPECT_NE(stats.find("switchml_pool_free_slots 64"), std::string::npos) << stats;
  std::lock_guard lock(log->mu);
  EXPECT_TRUE(log->removes.empty());  // nothing was installed
}

TEST(ControlPlane, SoftwareSettingsAreRefusedWithAnotherTargetNamingTheField) {
  auto log = std::make_shared<RecordingTarget::Log>();
  SwitchConfig config = ControlOnlyConfig();
  config.data_plane.pool_slots = 100;
  auto sw = StartSwitchServer(config, std::make_unique<RecordingTarget>(log));
  ASSERT_FALSE(sw.ok());
  EXPECT_EQ(sw.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(sw.status().message().find("data_plane.pool_slots=100"), std::string::npos)
      << sw.status().message();
  config = ControlOnlyConfig();
  config.data_threads = 2;
  EXPECT_NE(config.ValidateWithoutSoftwareDataPlane().message().find("data_threads=2"),
            std::string::npos);
  EXPECT_TRUE(ControlOnlyConfig().ValidateWithoutSoftwareDataPlane().ok());
}

TEST(SoftwareTarget, InstallsAJobInEveryShardAndRemovesItEverywhere) {
  auto fabric = transport::sim::SimFabric::Create({});
  SwitchConfig config = ControlOnlyConfig();
  config.data_threads = 3;
  config.data_port = 0;
  config.data_plane.pool_slots = 64;
  auto target = SoftwareTarget::Open(config, *fabric);
  ASSERT_TRUE(target.ok()) << target.status().ToString();
  SoftwareTarget& software = *target.value();
  EXPECT_TRUE(software.answers_probes());  // its data plane does (docs/wire-format.md)
  EXPECT_TRUE(software.exponent_only_packets());
  EXPECT_EQ(software.data_ports().size(), 3u);
  software.Start();
  JobInstall job;
  job.assignment = JobAssignment{JobId(7), 2, 256, 16, 8};
  job.threads = 1;
  job.addresses = {{net::ParseAddress("127.0.0.1", 5000).value()},
                   {net::ParseAddress("127.0.0.1", 5001).value()}};
  ASSERT_TRUE(software.Install(job).ok());
  // A second job on the same table entry cannot be installed anywhere.
  JobInstall clash = job;
  clash.assignment.id = JobId(7 + config.data_plane.max_jobs);
  EXPECT_FALSE(software.Install(clash).ok());
  auto counters = software.Counters({JobId(7)});
  ASSERT_TRUE(counters.ok());
  EXPECT_EQ(counters.value().per_job.count(7), 1u);
  software.Remove(JobId(7));
  // Removed from every shard: the entry is free again in all of them.
  EXPECT_TRUE(software.Install(clash).ok());
  software.Stop();
}

// What the af_xdp transport cannot carry is refused before anything starts,
// naming the setting (or, in a build without it, the transport itself).
TEST(SwitchConfigValidation, AfXdpLimitsAreRefusedNamingTheSetting) {
  SwitchConfig config = ControlOnlyConfig();
  config.transport = "af_xdp";
#ifdef SWITCHML_HAVE_AF_XDP
  EXPECT_NE(config.Validate().message().find("data_plane.max_elements_per_packet=1024"),
            std::string::npos)
      << config.Validate().message();
  config.data_plane.max_elements_per_packet = transport::kMaxAfXdpElementsPerPacket;
  EXPECT_TRUE(config.Validate().ok()) << config.Validate().message();
  config.data_threads = 2;  // the data threads split the interface's queues
  EXPECT_TRUE(config.Validate().ok()) << config.Validate().message();
#else
  EXPECT_NE(config.Validate().message().find("not in this build"), std::string::npos);
#endif
}

// The event counters are listed once (kEventCounters); the protocol must
// have a field of each name, which the service fills by name.
TEST(ControlPlane, EveryEventCounterHasItsFieldInTheProtocol) {
  const auto* fields = control::v1::Counters::descriptor();
  for (const EventCounter& e : kEventCounters) {
    const auto* field = fields->FindFieldByName(e.name);
    ASSERT_NE(field, nullptr) << e.name;
    EXPECT_EQ(field->cpp_type(), google::protobuf::FieldDescriptor::CPPTYPE_UINT64) << e.name;
  }
  // Every uint64 field but the drop map is one of them.
  EXPECT_EQ(size_t(fields->field_count()), std::size(kEventCounters) + 1);
}

// Addresses from the network are never resolved: dotted quads with a
// nonzero port only.
TEST(JoinRequests, DataAddressesAreNumericWithAPort) {
  for (const char* bad :
       {"localhost:5000", "127.0.0.1", "127.0.0.1:0", "127.0.0.1:x", "127.0.0.1:70000", ":5000"}) {
    control::v1::JoinRequest join = Join(0, 1, 1);
    join.set_data_addresses(0, bad);
    const auto parsed = ParseJoinRequest(join);
    ASSERT_FALSE(parsed.ok()) << bad;
    EXPECT_NE(parsed.status().message().find("is not IPv4ADDRESS:PORT"), std::string::npos)
        << parsed.status().message();
  }
  const auto parsed = ParseJoinRequest(Join(0, 1, 1));
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_EQ(net::FormatAddress(parsed.value().addresses[0]), "127.0.0.1:5000");
}

TEST(DataPlaneCounters, AddUpEveryCounter) {
  DataPlaneCounters a, b;
  for (const EventCounter& e : kEventCounters) a.*e.field = 1, b.*e.field = 2;
  a.drops[1] = 3, b.drops[1] = 4, b.decode_errors[2] = 5;
  a += b;
  for (const EventCounter& e : kEventCounters) EXPECT_EQ(a.*e.field, 3u) << e.name;
  EXPECT_EQ(a.drops[1], 7u);
  EXPECT_EQ(a.decode_errors[2], 5u);
}

// A strict reader of the Prometheus text format (0.0.4): every family has
// HELP then TYPE before its samples, appears once and contiguously, counters
// end in _total and gauges do not, sample lines parse. Returns "" or the
// first problem; fills `samples` (the line without its value -> value).
std::string CheckExposition(const std::string& text, std::map<std::string, double>* samples) {
  static const std::regex kSample(
      R"re(^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[a-zA-Z_][a-zA-Z0-9_]*="([^"\\]|\\.)*")re"
      R"re((,[a-zA-Z_][a-zA-Z0-9_]*="([^"\\]|\\.)*")*\})? (\S+)$)re");
  std::set<std::string> seen;
  std::string family, type;
  bool have_help = false;
  std::istringstream lines(text);
  int n = 0;
  for (std::string line; std::getline(lines, line);) {
    ++n;
    const std::string where = "line " + std::to_string(n) + " '" + line + "': ";
    if (line.rfind("# HELP ", 0) == 0) {
      family = line.substr(7, line.find(' ', 7) - 7);
      if (!seen.insert(family).second) return where + "family again";
      have_help = true;
      type.clear();
    } else if (line.rfind("# TYPE ", 0) == 0) {
      std::istringstream f(line.substr(7));
      std::string name;
      f >> name >> type;
      if (!have_help || name != family) return where + "TYPE without its HELP";
      if (type != "counter" && type != "gauge" && type != "summary" && type != "histogram") {
        return where + "unknown type";
      }
      const bool total = name.size() > 6 && name.substr(name.size() - 6) == "_total";
      if (name.rfind("switchml_", 0) == 0 && total != (type == "counter")) {
        return where + "counters end in _total, and only they";
      }
    } else {
      std::smatch m;
      if (!std::regex_match(line, m, kSample)) return where + "not a sample";
      std::string name = m[1].str();
      if (type == "summary" || type == "histogram") {
        for (const char* suffix : {"_sum", "_count", "_bucket"}) {
          const std::string s = suffix;
          if (name.size() > s.size() && name.substr(name.size() - s.size()) == s) {
            name = name.substr(0, name.size() - s.size());
          }
        }
      }
      if (type.empty() || name != family) return where + "a sample outside its family";
      const std::string value = m[m.size() - 1].str();
      char* end = nullptr;
      const double v = std::strtod(value.c_str(), &end);
      if (*end != '\0' && value != "Nan") return where + "not a number";
      (*samples)[line.substr(0, line.rfind(' '))] = v;
    }
  }
  return "";
}

// GET /metrics from 127.0.0.1:port; the body, or "" on any failure.
std::string Scrape(uint16_t port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a = net::ParseAddress("127.0.0.1", port).value();
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    close(fd);
    return "";
  }
  const std::string request = "GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
  if (write(fd, request.data(), request.size()) != ssize_t(request.size())) return "";
  std::string response;
  char buffer[4096];
  for (ssize_t got; (got = read(fd, buffer, sizeof(buffer))) > 0;)
    response.append(buffer, size_t(got));
  close(fd);
  const size_t body = response.find("\r\n\r\n");
  if (response.rfind("HTTP/1.1 200", 0) != 0 && response.rfind("HTTP/1.0 200", 0) != 0) return "";
  return body == std::string::npos ? "" : response.substr(body + 4);
}

// The samples of one job's series, by family: {"switchml_job_active": 1, ...}.
std::map<std::string, double> JobSeries(const std::map<std::string, double>& samples,
                                        const std::string& job) {
  std::map<std::string, double> series;
  const std::string labels = "{job=\"" + job + "\",id=\"";
  for (const auto& [sample, value] : samples) {
    const size_t at = sample.find(labels);
    if (at != std::string::npos && sample.find(',', at + labels.size()) == std::string::npos) {
      series[sample.substr(0, at)] = value;
    }
  }
  return series;
}

// The sum of a family's samples labelled by shard.
double SumOverShards(const std::map<std::string, double>& samples, const std::string& family) {
  double sum = 0;
  for (const auto& [sample, value] : samples) {
    if (sample.rfind(family + "{shard=\"", 0) == 0) sum += value;
  }
  return sum;
}

struct Scrapes {
  std::map<std::string, double> during, after;
  std::string during_text, after_text;
};

// A two-rank job "scraped" with two I/O threads each, through `config`'s
// switch: its metrics scraped over HTTP after an all-reduce and once the
// job has ended. Every scrape is checked by the strict reader.
Scrapes ScrapeAroundAJob(SwitchConfig config) {
  Scrapes out;
  config.data_port = 0;
  config.metrics_address = "127.0.0.1:0";
  auto sw = SwitchServer::Start(config);
  EXPECT_TRUE(sw.ok()) << sw.status().ToString();
  if (!sw.ok() || sw.value()->metrics_port() == 0) return out;
  std::vector<std::unique_ptr<Context>> contexts(2);
  std::vector<std::thread> ranks;
  for (uint32_t r = 0; r < 2; ++r) {
    ranks.emplace_back([&, r] {
      ContextConfig c;
      c.switch_address = "127.0.0.1:" + std::to_string(sw.value()->control_port());
      c.job_name = "scraped";
      c.rank = r;
      c.world_size = 2;
      c.threads = 2;
      contexts[r] = std::move(Context::Start(c)).value();
    });
  }
  for (auto& t : ranks) t.join();
  std::vector<std::thread> reduce;
  for (auto& c : contexts) {
    reduce.emplace_back([&c] {
      std::vector<int32_t> mine(100000, 1);
      ASSERT_TRUE(c->AllReduce(mine.data(), mine.data(), mine.size(), DType::kInt32).ok());
    });
  }
  for (auto& t : reduce) t.join();

  out.during_text = Scrape(sw.value()->metrics_port());
  EXPECT_EQ(CheckExposition(out.during_text, &out.during), "") << out.during_text;
  // switchml-ctl's text is the same, and as strict.
  std::map<std::string, double> ctl;
  EXPECT_EQ(CheckExposition(sw.value()->PrometheusText(), &ctl), "");

  for (auto& c : contexts) c->Stop();
  for (int i = 0; i < 100; ++i) {  // the switch ends the job as the ranks leave
    out.after.clear();
    out.after_text = Scrape(sw.value()->metrics_port());
    EXPECT_EQ(CheckExposition(out.after_text, &out.after), "") << out.after_text;
    if (out.after["switchml_jobs"] == 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(out.after["switchml_jobs"], 0) << out.after_text;
  return out;
}

TEST(SwitchMetrics, ServedOverHttpInStrictExpositionFormatAndTotalsOutliveJobs) {
  SwitchConfig config = ControlOnlyConfig();
  config.data_threads = 2;
  const Scrapes s = ScrapeAroundAJob(config);
  ASSERT_FALSE(s.during.empty());
  const double total = s.during.at("switchml_contributions_total");
  EXPECT_GT(total, 0) << s.during_text;
  const auto during = JobSeries(s.during, "scraped");
  EXPECT_EQ(during.at("switchml_job_contributions_total"), total) << s.during_text;
  EXPECT_EQ(during.at("switchml_job_active"), 1);
  EXPECT_EQ(during.at("switchml_job_ended"), 0);
  // Both data threads carried the job; their shares add up to the totals.
  EXPECT_GT(s.during.at("switchml_shard_contributions_total{shard=\"0\"}"), 0) << s.during_text;
  EXPECT_GT(s.during.at("switchml_shard_contributions_total{shard=\"1\"}"), 0) << s.during_text;
  EXPECT_EQ(SumOverShards(s.during, "switchml_shard_contributions_total"), total);
  EXPECT_EQ(SumOverShards(s.during, "switchml_shard_packets_sent_total"),
            s.during.at("switchml_packets_sent_total"));
  // Kernel UDP parses the headers: no frame reached the switch malformed.
  EXPECT_EQ(s.during.at("switchml_transport_drops_total"), 0) << s.during_text;
  EXPECT_EQ(s.during.at("switchml_transport_kernel_path_total"), 0) << s.during_text;
  EXPECT_EQ(s.during.at("switchml_transport_off_queue_total"), 0) << s.during_text;

  // The totals count on after the job's end, and within the grace period
  // (300 s by default) its series stay, with its last counts, as ended.
  EXPECT_EQ(s.after.at("switchml_contributions_total"), total);
  const auto after = JobSeries(s.after, "scraped");
  EXPECT_EQ(after.at("switchml_job_contributions_total"), total) << s.after_text;
  EXPECT_EQ(after.at("switchml_job_active"), 0) << s.after_text;
  EXPECT_EQ(after.at("switchml_job_ended"), 1) << s.after_text;
}

TEST(SwitchMetrics, AnEndedJobsSeriesGoAfterItsGracePeriod) {
  SwitchConfig config = ControlOnlyConfig();
  config.job_stats_grace_s = 0;
  const Scrapes s = ScrapeAroundAJob(config);
  ASSERT_FALSE(s.during.empty());
  EXPECT_FALSE(JobSeries(s.during, "scraped").empty()) << s.during_text;
  EXPECT_TRUE(JobSeries(s.after, "scraped").empty()) << s.after_text;
  EXPECT_EQ(s.after.at("switchml_contributions_total"),
            s.during.at("switchml_contributions_total"));
}

TEST(SwitchMetrics, RefusesAGracePeriodOverADay) {
  SwitchConfig config = ControlOnlyConfig();
  config.job_stats_grace_s = SwitchConfig::kMaxJobStatsGraceS + 1;
  const Status s = config.Validate();
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("job_stats_grace_s=86401"), std::string::npos) << s.message();
}

TEST(SwitchTreeConfig, RefusesABadUpstreamAndAnUpstreamOnAnotherDataPlane) {
  SwitchConfig config = ControlOnlyConfig();
  config.upstream = "300.1.2.3";
  Status s = config.Validate();
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("upstream='300.1.2.3'"), std::string::npos) << s.message();
  config.upstream = "10.0.0.1:48800";
  EXPECT_TRUE(config.Validate().ok());
  s = config.ValidateWithoutSoftwareDataPlane();
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("only the software data plane"), std::string::npos) << s.message();
}

// A rack switch's forwarded join names the rack in via_switch: a dotted quad
// with a port, like every address from the network.
TEST(SwitchTreeConfig, AForwardedJoinNamesItsRackSwitchByNumericAddress) {
  control::v1::JoinRequest r;
  r.set_protocol_version(kWireVersion);
  r.set_job_name("j");
  r.set_world_size(2);
  r.add_data_addresses("10.0.0.1:4000");
  r.set_pool_slots(8);
  r.set_via_switch("rack-a:48800");
  EXPECT_NE(ParseJoinRequest(r).status().message().find("via_switch 'rack-a:48800'"),
            std::string::npos);
  r.set_via_switch("10.0.0.9:48800");
  auto parsed = ParseJoinRequest(r);
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_EQ(parsed.value().via_switch, "10.0.0.9:48800");
}

}  // namespace
}  // namespace switchml
