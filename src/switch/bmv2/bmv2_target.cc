#include "switch/bmv2/bmv2_target.h"

#include <arpa/inet.h>
#include <spdlog/spdlog.h>
#include <toml++/toml.h>

#include <fstream>
#include <regex>
#include <set>
#include <sstream>

#include "common/thread_split.h"
#include "net/address.h"

namespace switchml::bmv2 {
namespace {

// Names in the compiled program (p4/v1model/switchml.p4).
constexpr const char* kEndpoint = "SwitchmlIngress.switchml_endpoint";
constexpr const char* kJobs = "SwitchmlIngress.switchml_jobs";
constexpr const char* kSenders = "SwitchmlIngress.switchml_senders";
constexpr const char* kL2 = "SwitchmlIngress.l2_hosts";
constexpr const char* kRouterMacs = "SwitchmlIngress.router_macs";
constexpr const char* kRoutes = "SwitchmlIngress.ipv4_routes";
constexpr const char* kArp = "SwitchmlIngress.arp_responder";
// The indexes into kEventCounters of the events the program counts.
constexpr size_t kProgramEvents[] = {0, 1, 2, 3, 4, 8};
constexpr const char* kReplicas = "SwitchmlEgress.result_replicas";
constexpr const char* kDrops = "SwitchmlIngress.switchml_drops";
constexpr const char* kEvents = "SwitchmlIngress.switchml_events";

bool IsMac(const std::string& mac) {
  static const std::regex pattern("^([0-9a-fA-F]{2}:){5}[0-9a-fA-F]{2}$");
  return std::regex_match(mac, pattern);
}

// The lowest free id in [first, used.size()), marked used; 0 when none.
uint32_t Allocate(std::vector<bool>& used, uint32_t first) {
  for (uint32_t id = first; id < used.size(); ++id) {
    if (!used[id]) {
      used[id] = true;
      return id;
    }
  }
  return 0;
}

}  // namespace

StatusOr<std::vector<Host>> ParseHosts(const std::string& toml_text, const std::string& origin) {
  toml::table table;
  try {
    table = toml::parse(toml_text);
  } catch (const toml::parse_error& e) {
    return InvalidArgument(origin + ": " + std::string(e.description()));
  }
  const toml::array* list = table["host"].as_array();
  if (list == nullptr || list->empty()) {
    return InvalidArgument(origin +
                           ": no [[host]] entries; list every host behind the switch "
                           "with its ip, mac and port");
  }
  std::vector<Host> hosts;
  std::set<uint32_t> seen_ips;
  for (size_t i = 0; i < list->size(); ++i) {
    const std::string where = origin + ": host " + std::to_string(i + 1);
    const toml::table* t = (*list)[i].as_table();
    if (t == nullptr) return InvalidArgument(where + " is not a table");
    const auto ip = (*t)["ip"].value<std::string>();
    const auto mac = (*t)["mac"].value<std::string>();
    const auto port = (*t)["port"].value<int64_t>();
    Host h;
    if (!ip || inet_pton(AF_INET, ip->c_str(), &h.ip) != 1) {
      return InvalidArgument(where + ": ip must be a numeric IPv4 address");
    }
    if (!mac || !IsMac(*mac))
      return InvalidArgument(where + ": mac must look like 02:00:00:00:00:01");
    if (!port || *port < 0 || *port > 510) {
      return InvalidArgument(where + ": port must be a simple_switch port number, 0..510");
    }
    if (!seen_ips.insert(h.ip.s_addr).second)
      return InvalidArgument(where + ": ip " + *ip + " is listed twice");
    h.mac = *mac;
    h.port = uint16_t(*port);
    hosts.push_back(h);
  }
  return hosts;
}

StatusOr<std::vector<Host>> LoadHosts(const std::string& path) {
  std::ifstream in(path);
  if (!in) return InvalidArgument("cannot read the bmv2 hosts file '" + path + "'");
  std::stringstream text;
  text << in.rdbuf();
  return ParseHosts(text.str(), path);
}

namespace {

// The number captured by `pattern`'s group `group` in a CLI answer; `what`
// names it in the error when the answer has none.
StatusOr<uint64_t> FindNumber(const std::string& answer, const std::regex& pattern, int group,
                              const char* what) {
  std::smatch m;
  if (!std::regex_search(answer, m, pattern)) {
    return Status(StatusCode::kFailedPrecondition,
                  std::string("bmv2 gave no ") + what + ": " + answer.substr(0, 300));
  }
  return uint64_t(std::stoull(m[size_t(group)].str()));
}

}  // namespace

StatusOr<uint32_t> ParseHandle(const std::string& answer) {
  static const std::regex pattern("with handle ([0-9]+)");
  auto handle = FindNumber(answer, pattern, 1, "handle");
  if (!handle.ok()) return handle.status();
  return uint32_t(handle.value());
}

StatusOr<uint64_t> ParseCounterPackets(const std::string& answer) {
  static const std::regex pattern("\\(([0-9]+) bytes, ([0-9]+) packets\\)");
  return FindNumber(answer, pattern, 2, "counter");
}

Status Validate(const Bmv2Config& config) {
  in_addr ip{};
  if (inet_pton(AF_INET, config.switch_ip.c_str(), &ip) != 1) {
    return InvalidArgument("bmv2 switch ip '" + config.switch_ip +
                           "' is not a numeric IPv4 address (set --bmv2-switch-ip)");
  }
  if (!IsMac(config.switch_mac)) {
    return InvalidArgument(
        "bmv2 switch mac '" + config.switch_mac +
        "' is not a MAC address (set --bmv2-switch-mac, e.g. 02:00:00:00:00:fe)");
  }
  if (config.cli.empty()) return InvalidArgument("the bmv2 runtime CLI command is empty");
  DataPlaneConfig program;  // what the compiled program must fit
  program.pool_slots = config.pool_slots;
  program.max_elements_per_packet = config.elements_per_packet;
  if (Status s = program.Validate(); !s.ok()) {
    return InvalidArgument("bmv2 program (--bmv2-pool-slots " + std::to_string(config.pool_slots) +
                           ", --bmv2-elements-per-packet " +
                           std::to_string(config.elements_per_packet) + "): " + s.message());
  }
  return Status::Ok();
}

StatusOr<std::unique_ptr<Bmv2Target>> ConnectBmv2(const Bmv2Config& config) {
  if (Status s = Validate(config); !s.ok()) return s;
  auto hosts = LoadHosts(config.hosts_file);
  if (!hosts.ok()) return hosts.status();
  std::vector<std::string> argv = config.cli;
  argv.push_back("--thrift-port");
  argv.push_back(std::to_string(config.thrift_port));
  auto cli = RuntimeCli::Start(argv, std::chrono::seconds(20));
  if (!cli.ok()) return cli.status();
  return Bmv2Target::Create(config, std::move(hosts).value(), std::move(cli).value());
}

StatusOr<std::unique_ptr<Bmv2Target>> Bmv2Target::Create(const Bmv2Config& config,
                                                         std::vector<Host> hosts,
                                                         std::unique_ptr<CommandRunner> cli) {
  if (Status s = Validate(config); !s.ok()) return s;
  std::unique_ptr<Bmv2Target> plane(new Bmv2Target(config, std::move(hosts), std::move(cli)));
  if (Status s = plane->Setup(); !s.ok()) return s;
  return plane;
}

Bmv2Target::Bmv2Target(const Bmv2Config& config, std::vector<Host> hosts,
                       std::unique_ptr<CommandRunner> cli)
    : config_(config),
      hosts_(std::move(hosts)),
      cli_(std::move(cli)),
      group_used_(65536, false),
      replica_used_(65536, false) {}

std::string Bmv2Target::data_address() const { return config_.switch_ip; }

DataPlaneConfig Bmv2Target::limits() const {
  DataPlaneConfig limits;
  limits.pool_slots = config_.pool_slots;
  limits.max_elements_per_packet = config_.elements_per_packet;
  limits.max_workers = kMaxWorkers;
  limits.max_jobs = kMaxJobs;
  return limits;
}

StatusOr<uint32_t> Bmv2Target::AddEntry(const std::string& table, const std::string& action,
                                        const std::string& keys, const std::string& params,
                                        Installed* installed) {
  auto answer = cli_->Run("table_add " + table + " " + action + " " + keys + " => " + params);
  if (!answer.ok()) return answer.status();
  auto handle = ParseHandle(answer.value());
  if (handle.ok() && installed != nullptr) installed->entries.emplace_back(table, handle.value());
  return handle;
}

Status Bmv2Target::Setup() {
  // This daemon owns the switch: nothing of an earlier run may linger.
  if (auto r = cli_->Run("reset_state"); !r.ok()) return r.status();
  const std::string mac = config_.switch_mac;
  for (auto [table, action, key, params] :
       {std::tuple{kEndpoint, "SwitchmlIngress.set_endpoint", config_.switch_ip, mac},
        std::tuple{kArp, "SwitchmlIngress.answer_arp", config_.switch_ip, mac},
        std::tuple{kRouterMacs, "NoAction", mac, std::string()}}) {
    if (auto h = AddEntry(table, action, key, params, nullptr); !h.ok()) return h.status();
  }
  std::set<uint16_t> ports;
  for (const Host& h : hosts_) {
    const std::string port = std::to_string(h.port);
    if (auto e = AddEntry(kL2, "SwitchmlIngress.l2_forward", h.mac, port, nullptr); !e.ok()) {
      return e.status();
    }
    if (auto e = AddEntry(kRoutes, "SwitchmlIngress.route", net::FormatIp(h.ip) + "/32",
                          port + " " + h.mac, nullptr);
        !e.ok()) {
      return e.status();
    }
    ports.insert(h.port);
  }
  // Broadcast and unknown unicast go to every port (egress prunes the
  // ingress port).
  group_used_[0] = group_used_[kFloodGroup] = true;
  replica_used_[0] = true;
  if (auto r = cli_->Run("mc_mgrp_create " + std::to_string(kFloodGroup)); !r.ok())
    return r.status();
  std::string port_list;
  for (uint16_t p : ports) port_list += " " + std::to_string(p);
  auto node = cli_->Run("mc_node_create 0" + port_list);
  if (!node.ok()) return node.status();
  auto handle = ParseHandle(node.value());
  if (!handle.ok()) return handle.status();
  if (auto r = cli_->Run("mc_node_associate " + std::to_string(kFloodGroup) + " " +
                         std::to_string(handle.value()));
      !r.ok()) {
    return r.status();
  }
  // A NACK goes back out of the port its contribution came in on, as an
  // ingress clone through that port's mirror session.
  for (uint16_t p : ports) {
    if (auto r = cli_->Run("mirroring_add " + std::to_string(kNackSessionBase + p) + " " +
                           std::to_string(p));
        !r.ok()) {
      return r.status();
    }
  }
  spdlog::info("bmv2 data plane ready: endpoint {} ({}), UDP port {}, {} hosts on {} ports",
               config_.switch_ip, mac, kUdpPort, hosts_.size(), ports.size());
  return Status::Ok();
}

Status Bmv2Target::CheckJoin(const ParsedJoin& join) const {
  const JobRequest& r = join.request;
  if (r.elements_per_packet != config_.elements_per_packet) {
    return InvalidArgument(
        "this switch's P4 data plane aggregates exactly " +
        std::to_string(config_.elements_per_packet) + " elements per packet, not " +
        std::to_string(r.elements_per_packet) +
        "; set elements_per_packet = " + std::to_string(config_.elements_per_packet));
  }
  if (r.world_size > kMaxWorkers) {
    return InvalidArgument("world_size=" + std::to_string(r.world_size) +
                           " is more than the P4 data plane's " + std::to_string(kMaxWorkers) +
                           " workers per job");
  }
  if (!join.auth_key.empty()) {
    return InvalidArgument(
        "the P4 data plane cannot check per-job MACs; leave auth_key empty "
        "(see docs/security.md, 'On a hardware (P4) switch')");
  }
  for (const sockaddr_in& a : join.addresses) {
    if (FindHost(a.sin_addr) == nullptr) {
      return InvalidArgument("worker address " + net::FormatAddress(a) +
                             " is not behind the switch: add it to the bmv2 hosts file");
    }
  }
  return Status::Ok();
}

const Host* Bmv2Target::FindHost(in_addr ip) const {
  for (const Host& h : hosts_) {
    if (h.ip.s_addr == ip.s_addr) return &h;
  }
  return nullptr;
}

Status Bmv2Target::Install(const JobInstall& install) {
  if (install.upstream || !install.local_ranks.empty()) {
    return FailedPrecondition(
        "the bmv2 program aggregates one level only: it does not forward to an upstream switch "
        "(docs/design.md §10); run the software switch as a rack switch");
  }
  const JobAssignment& job = install.assignment;
  const std::vector<std::vector<sockaddr_in>>& addresses = install.addresses;
  const uint32_t id = job.id.value();
  const std::string job_key = std::to_string(id);
  Installed installed;
  auto fail = [&](const Status& s) {
    Undo(installed);
    return Status(s.code(), "installing job " + job_key + " on bmv2: " + s.message());
  };
  auto entry = AddEntry(kJobs, "SwitchmlIngress.set_job", job_key,
                        std::to_string(job.world_size) + " " + std::to_string(job.pool_base) + " " +
                            std::to_string(job.pool_slots),
                        &installed);
  if (!entry.ok()) return fail(entry.status());

  const uint32_t slots = job.pool_slots;
  const uint32_t threads = addresses.empty() ? 0 : uint32_t(addresses[0].size());
  for (uint32_t t = 0; t < threads; ++t) {
    const uint32_t group = Allocate(group_used_, 2);
    if (group == 0) return fail(ResourceExhausted("no free multicast group id"));
    installed.groups.push_back(uint16_t(group));
    if (auto r = cli_->Run("mc_mgrp_create " + std::to_string(group)); !r.ok())
      return fail(r.status());
    const ThreadRange share = ThreadShare(slots, t, threads);
    const std::string lo = std::to_string(share.begin);
    const std::string hi = std::to_string(share.end);
    for (uint32_t rank = 0; rank < addresses.size(); ++rank) {
      const SenderRow row{job_key, rank, addresses[rank][t], lo + " " + hi, group};
      if (Status s = AddSender(row, installed); !s.ok()) return fail(s);
    }
  }
  jobs_[id] = std::move(installed);
  return Status::Ok();
}

Status Bmv2Target::AddSender(const SenderRow& row, Installed& installed) {
  const sockaddr_in& a = row.address;
  const Host* host = FindHost(a.sin_addr);
  if (host == nullptr) {
    return InvalidArgument(net::FormatAddress(a) + " is not in the bmv2 hosts file");
  }
  const std::string ip = net::FormatIp(a.sin_addr), port = std::to_string(ntohs(a.sin_port));
  auto sender = AddEntry(kSenders, "SwitchmlIngress.set_sender",
                         row.job_key + " " + std::to_string(row.rank) + " " + ip + " " + port,
                         row.slots + " " + std::to_string(row.group), &installed);
  if (!sender.ok()) return sender.status();
  const uint32_t replica = Allocate(replica_used_, 1);
  if (replica == 0) return ResourceExhausted("no free replica id");
  installed.replica_ids.push_back(uint16_t(replica));
  auto rewrite = AddEntry(kReplicas, "SwitchmlEgress.to_worker", std::to_string(replica),
                          host->mac + " " + ip + " " + port, &installed);
  if (!rewrite.ok()) return rewrite.status();
  auto node =
      cli_->Run("mc_node_create " + std::to_string(replica) + " " + std::to_string(host->port));
  if (!node.ok()) return node.status();
  auto handle = ParseHandle(node.value());
  if (!handle.ok()) return handle.status();
  installed.nodes.push_back(handle.value());
  auto associated = cli_->Run("mc_node_associate " + std::to_string(row.group) + " " +
                              std::to_string(handle.value()));
  return associated.ok() ? Status::Ok() : associated.status();
}

void Bmv2Target::Undo(Installed& installed) {
  // Best effort: a command that fails here leaves an entry no packet can use
  // (its job id is never reused).
  // Nodes first: BMv2 dissociates a node it destroys from its group, but
  // destroying the group first leaves the node pointing at nothing.
  for (uint32_t node : installed.nodes) {
    if (auto r = cli_->Run("mc_node_destroy " + std::to_string(node)); !r.ok()) {
      spdlog::warn("{}", r.status().message());
    }
  }
  for (uint16_t group : installed.groups) {
    if (auto r = cli_->Run("mc_mgrp_destroy " + std::to_string(group)); !r.ok()) {
      spdlog::warn("{}", r.status().message());
    }
    group_used_[group] = false;
  }
  for (uint16_t replica : installed.replica_ids) replica_used_[replica] = false;
  for (auto it = installed.entries.rbegin(); it != installed.entries.rend(); ++it) {
    if (auto r = cli_->Run("table_delete " + it->first + " " + std::to_string(it->second));
        !r.ok()) {
      spdlog::warn("{}", r.status().message());
    }
  }
  installed = Installed{};
}

void Bmv2Target::Remove(JobId id) {
  const auto it = jobs_.find(id.value());
  if (it == jobs_.end()) return;
  Undo(it->second);
  jobs_.erase(it);
}

StatusOr<TargetCounters> Bmv2Target::Counters(const std::vector<JobId>&) {
  TargetCounters counters;
  DataPlaneCounters& c = counters.total;
  auto read = [&](const char* counter, int index) -> StatusOr<uint64_t> {
    auto answer = cli_->Run(std::string("counter_read ") + counter + " " + std::to_string(index));
    if (!answer.ok()) return answer.status();
    return ParseCounterPackets(answer.value());
  };
  // The program's EVENT_* indexes follow kEventCounters; it counts all but
  // the upstream ones (it has no upstream).
  for (size_t index : kProgramEvents) {
    auto value = read(kEvents, int(index));
    if (!value.ok()) return value.status();
    c.*kEventCounters[index].field = value.value();
  }
  for (int reason = 1; reason < kNumDropReasons; ++reason) {
    auto value = read(kDrops, reason);
    if (!value.ok()) return value.status();
    c.drops[size_t(reason)] = value.value();
  }
  return counters;
}

}  // namespace switchml::bmv2
