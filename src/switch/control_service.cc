#include "switch/control_service.h"

#include <netinet/in.h>
#include <sodium.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <thread>

#include "net/address.h"
#include "net/packet_auth.h"
#include "rpc/grpc_status.h"
#include "wire/wire_format.h"

namespace switchml {
namespace {

using control::v1::JobEvent;
using namespace std::chrono_literals;

// How long a job outlives a rank that left on purpose while others still run.
constexpr auto kLeaveGrace = 2s;
// The synchronous gRPC API tells a handler that its caller left only when
// asked: how often a waiting handler asks.
constexpr auto kCancelPoll = 50ms;

void FillCounters(const DataPlaneCounters& c, control::v1::Counters* out) {
  // Each event counter goes to the proto field of its name (a test checks
  // that every one has its field).
  const google::protobuf::Descriptor* fields = out->GetDescriptor();
  for (const EventCounter& e : kEventCounters) {
    out->GetReflection()->SetUInt64(out, fields->FindFieldByName(e.name), c.*e.field);
  }
  for (int r = 1; r < kNumDropReasons; ++r) {
    if (c.drops[r] != 0) (*out->mutable_drops())[DropReasonName(DropReason(r))] = c.drops[r];
  }
}

// A worker's text for other workers' messages and the log: at most 1024
// bytes, control characters replaced.
std::string Printable(const std::string& text) {
  std::string out = text.substr(0, 1024);
  for (char& c : out) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
  }
  return out;
}

bool AllOnLoopback(const std::vector<sockaddr_in>& addresses) {
  return std::all_of(addresses.begin(), addresses.end(), [](const sockaddr_in& a) {
    return (ntohl(a.sin_addr.s_addr) >> 24) == IN_LOOPBACKNET;  // 127/8
  });
}

}  // namespace

ControlService::ControlService(DataPlaneTarget* target, bool result_multicast,
                               std::chrono::seconds job_stats_grace,
                               std::unique_ptr<UpstreamClient> upstream)
    : target_(target),
      result_multicast_(result_multicast),
      job_stats_grace_(job_stats_grace),
      registry_(target->limits()),
      token_source_(std::random_device{}()),
      relay_(upstream ? std::make_unique<UpstreamRelay>(std::move(upstream)) : nullptr) {}

grpc::Status ControlService::Join(grpc::ServerContext* context, const control::v1::JoinRequest* req,
                                  grpc::ServerWriter<JobEvent>* writer) {
  auto parsed = ParseJoinRequest(*req);
  if (!parsed.ok()) return ToGrpc(parsed.status());
  const ParsedJoin& join = parsed.value();
  if (Status s = target_->CheckJoin(join); !s.ok()) return ToGrpc(s);
  if (relay_ && !join.via_switch.empty()) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        "this switch has an upstream switch itself; a tree has two levels: "
                        "point the rack switch " +
                            join.via_switch + " at the root");
  }
  Lock lock(mu_);
  auto admitted = AdmitLocked(join);
  if (!admitted.ok()) return ToGrpc(admitted.status());
  const std::shared_ptr<JobRecord> job = std::move(admitted).value();
  const uint16_t rank = join.request.rank;
  spdlog::info("job '{}': rank {} joined from {}{}", job->name, rank, req->data_addresses(0),
               relay_ ? "; forwarding it to the " + relay_->name() : "");
  if (relay_) return RelayJoinLocked(lock, job, *req, rank, context, writer);
  return RunJoinLocked(lock, job, join, context, writer);
}

grpc::Status ControlService::RunJoinLocked(Lock& lock, const std::shared_ptr<JobRecord>& job,
                                           const ParsedJoin& join, grpc::ServerContext* context,
                                           grpc::ServerWriter<JobEvent>* writer) {
  const uint16_t rank = join.request.rank;
  if (auto assignment = registry_.Assignment(job->name); assignment && !job->assignment) {
    if (Status s = StartLocked(*job, *assignment); !s.ok()) {
      EndLocked(job, -1, s.message());
      return ToGrpc(s);
    }
  }
  if (grpc::Status s = AwaitStartLocked(lock, job, rank, join.join_timeout, context); !s.ok()) {
    return s;
  }
  return StreamLocked(lock, job, rank, context, writer);
}

std::shared_ptr<ControlService::JobRecord> ControlService::NewJob(const ParsedJoin& join,
                                                                  bool relayed) {
  auto job = std::make_shared<JobRecord>();
  const uint16_t world = join.request.world_size;
  job->name = join.request.job_name;
  job->threads = uint16_t(join.addresses.size());
  job->addresses.resize(world);
  job->events.resize(world);
  job->tokens.resize(world);
  job->departed.resize(world);
  job->auth_key = join.auth_key;
  if (!join.via_switch.empty()) job->members.emplace().via.resize(world);
  if (relayed) {
    JobRecord::Relay& relay = job->relay.emplace();
    relay.calls.resize(world);
    relay.tokens.resize(world);
    relay.done.resize(world);
  }
  return job;
}

Status ControlService::CheckFitsJob(const JobRecord& job, const ParsedJoin& join) {
  const std::string who = "job '" + job.name + "': rank " + std::to_string(join.request.rank);
  const auto threads = uint16_t(join.addresses.size());
  if (job.threads != threads) {
    return InvalidArgument(who + "'s threads " + std::to_string(threads) +
                           " differs from the job's " + std::to_string(job.threads) +
                           "; every rank must use the same value");
  }
  // Constant-time: a guess's timing reveals nothing about the secret.
  if (job.auth_key.size() != join.auth_key.size() ||
      (!join.auth_key.empty() &&
       sodium_memcmp(job.auth_key.data(), join.auth_key.data(), join.auth_key.size()) != 0)) {
    return InvalidArgument(who +
                           "'s auth_key differs from the job's (or only some ranks have one)");
  }
  if (job.members.has_value() != !join.via_switch.empty()) {
    return InvalidArgument(who +
                           (job.members ? " joined directly, its other ranks through rack switches"
                                        : " joined through the rack switch " + join.via_switch +
                                              ", its other ranks directly") +
                           "; every rank of a job joins through a rack switch or none does");
  }
  return Status::Ok();
}

StatusOr<std::shared_ptr<ControlService::JobRecord>> ControlService::AdmitLocked(
    const ParsedJoin& join) {
  const std::string& name = join.request.job_name;
  const uint16_t rank = join.request.rank;
  std::shared_ptr<JobRecord>& entry = jobs_[name];
  const bool created = entry == nullptr;
  if (created) entry = NewJob(join, relay_ != nullptr);
  const std::shared_ptr<JobRecord> job = entry;
  Status status = CheckFitsJob(*job, join);
  if (status.ok()) status = registry_.Join(join.request);
  if (!status.ok()) {
    // A refused join: a job this call created is forgotten; one whose other
    // ranks wait at the barrier ends, and they fail at once with the same
    // message (a misconfigured rank never leaves the others waiting for the
    // join timeout). A running job is left alone.
    spdlog::warn("join of rank {} to job '{}' refused: {}", rank, name, status.message());
    if (created) {
      jobs_.erase(name);
    } else if (!job->assignment) {
      EndLocked(job, -1, status.message());
    }
    return status;
  }
  job->addresses[rank] = join.addresses;
  if (job->members) job->members->via[rank] = join.via_switch;
  // A tree's members are rack switches, which take results by unicast.
  if (!join.accept_result_multicast || !AllOnLoopback(join.addresses) || job->members) {
    job->unicast_only = true;
  }
  job->tokens[rank] = token_source_();
  return job;
}

Status ControlService::GroupMembersLocked(JobRecord& job, JobInstall& install) {
  // Members in the order of their lowest rank; a member's ranks must all
  // have given its same data sockets.
  JobRecord::Members& m = *job.members;
  std::map<std::string, uint16_t> index;
  m.member_of.assign(job.world_size(), 0);
  m.of_member.clear();
  install.addresses.clear();
  for (uint16_t r = 0; r < job.world_size(); ++r) {
    const auto [it, added] = index.try_emplace(m.via[r], uint16_t(index.size()));
    if (added) {
      m.of_member.emplace_back();
      install.addresses.push_back(job.addresses[r]);
    } else if (!std::equal(job.addresses[r].begin(), job.addresses[r].end(),
                           install.addresses[it->second].begin(), net::SameAddress)) {
      return InvalidArgument("job '" + job.name + "': rank " + std::to_string(r) +
                             " came through switch " + m.via[r] +
                             " with other data sockets than that switch's other ranks");
    }
    m.member_of[r] = it->second;
    m.of_member[it->second].push_back(r);
  }
  install.assignment.world_size = uint16_t(m.of_member.size());
  if (install.assignment.world_size > target_->limits().max_workers) {
    return InvalidArgument("job '" + job.name +
                           "': " + std::to_string(install.assignment.world_size) +
                           " rack switches exceed this switch's max_workers");
  }
  return Status::Ok();
}

Status ControlService::StartLocked(JobRecord& job, const JobAssignment& assignment,
                                   JobInstall install) {
  install.assignment = assignment;
  install.threads = job.threads;
  install.addresses = job.addresses;
  if (job.members) {
    if (Status s = GroupMembersLocked(job, install); !s.ok()) return s;
  }
  if (install.upstream) install.upstream->auth_key = job.auth_key;
  if (!job.auth_key.empty()) {
    job.auth_salt = net::RandomSalt();
    net::AuthKey secret;
    std::copy(job.auth_key.begin(), job.auth_key.end(), secret.begin());
    install.auth.emplace(secret, job.auth_salt, assignment.id.value(), net::kSwitchSenderId);
    sodium_memzero(secret.data(), secret.size());
  }
  if (result_multicast_ && !job.unicast_only) {
    install.result_groups = target_->ResultGroups(assignment, job.threads);
  }
  const Status installed = target_->Install(install);
  if (install.upstream && !install.upstream->auth_key.empty()) {
    std::string& key = install.upstream->auth_key;  // the target keeps its own copies
    sodium_memzero(key.data(), key.size());
  }
  if (!installed.ok()) {
    spdlog::error("job '{}': {}", job.name, installed.message());
    return installed;
  }
  job.result_groups = std::move(install.result_groups);
  job.assignment = assignment;
  spdlog::info(
      "job '{}' started on the {} data plane: id {}, {} ranks{}, {} slots, {} elements "
      "per packet, results by {}",
      job.name, target_->name(), assignment.id.value(), assignment.world_size,
      job.members ? " through " + std::to_string(job.members->of_member.size()) + " rack switches"
      : relay_
          ? ", " + std::to_string(install.local_ranks.size()) + " here under the " + relay_->name()
          : "",
      assignment.pool_slots, assignment.elements_per_packet,
      job.result_groups.empty() ? "unicast" : "multicast");
  changed_.notify_all();
  return Status::Ok();
}

grpc::Status ControlService::AwaitStartLocked(Lock& lock, const std::shared_ptr<JobRecord>& job,
                                              uint16_t rank, std::chrono::milliseconds timeout,
                                              grpc::ServerContext* context) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!job->assignment && !job->ended) {
    if (context->IsCancelled()) {
      EndLocked(job, rank, "rank " + std::to_string(rank) + " left before all ranks joined");
      return grpc::Status(grpc::StatusCode::CANCELLED, "join cancelled");
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      const std::vector<uint16_t> missing = registry_.MissingRanks(job->name);
      std::string list;
      for (size_t i = 0; i < missing.size() && i < 16; ++i) {
        list += (i ? ", " : "") + std::to_string(missing[i]);
      }
      const std::string reason = "job '" + job->name + "': only " +
                                 std::to_string(job->world_size() - missing.size()) + " of " +
                                 std::to_string(job->world_size()) + " ranks joined within " +
                                 std::to_string(timeout.count()) + " ms; missing rank(s) " + list;
      EndLocked(job, -1, reason);
      return grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, reason);
    }
    changed_.wait_until(lock, std::min(deadline, std::chrono::steady_clock::now() + kCancelPoll));
  }
  if (!job->assignment) return grpc::Status(grpc::StatusCode::ABORTED, job->end_reason);
  return grpc::Status::OK;
}

JobEvent ControlService::AssignmentEvent(const JobRecord& job, uint16_t rank) const {
  JobEvent first;
  auto* a = first.mutable_assignment();
  a->set_job_id(job.assignment->id.value());
  a->set_world_size(job.assignment->world_size);
  a->set_elements_per_packet(job.assignment->elements_per_packet);
  a->set_pool_slots(job.assignment->pool_slots);
  const std::vector<uint16_t> ports = target_->data_ports();
  a->set_data_port(ports[0]);
  a->set_data_address(target_->data_address());
  a->set_answers_probes(target_->answers_probes());
  a->set_exponent_only_packets(target_->exponent_only_packets());
  if (ports.size() > 1) {
    for (uint16_t port : ports) a->add_data_ports(port);
  }
  for (const sockaddr_in& group : job.result_groups)
    a->add_result_groups(net::FormatAddress(group));
  a->set_token(job.tokens[rank]);
  a->set_auth_salt(job.auth_salt);
  if (job.members) {
    const JobRecord::Members& m = *job.members;
    a->set_member(m.member_of[rank]);
    a->set_members(uint32_t(m.of_member.size()));
    for (uint16_t r : m.of_member[m.member_of[rank]]) a->add_member_ranks(r);
  }
  return first;
}

grpc::Status ControlService::StreamLocked(Lock& lock, const std::shared_ptr<JobRecord>& job,
                                          uint16_t rank, grpc::ServerContext* context,
                                          grpc::ServerWriter<JobEvent>* writer) {
  std::deque<JobEvent> outgoing{AssignmentEvent(*job, rank)};
  const std::string gone =
      job->members
          ? "rank " + std::to_string(rank) + " (through switch " + job->members->via[rank] +
                ") disconnected (the rank or its rack switch exited, or that switch "
                "lost its connection to this one)"
          : "rank " + std::to_string(rank) +
                " disconnected (its process exited or lost its control connection)";
  while (true) {
    while (!outgoing.empty()) {
      lock.unlock();
      const bool written = writer->Write(outgoing.front());
      lock.lock();
      outgoing.pop_front();
      if (!written) {
        // A rank that left on purpose closes its stream next; that is no crash.
        if (!job->departed[rank]) EndLocked(job, rank, gone);
        return grpc::Status(grpc::StatusCode::CANCELLED, "worker left");
      }
    }
    outgoing.swap(job->events[rank]);
    if (!outgoing.empty()) continue;
    if (job->ended) return grpc::Status::OK;
    if (context->IsCancelled()) {
      if (!job->departed[rank]) EndLocked(job, rank, gone);
      return grpc::Status(grpc::StatusCode::CANCELLED, "worker left");
    }
    const auto now = std::chrono::steady_clock::now();
    if (job->end_at && now >= *job->end_at) {
      EndLocked(job, job->end_rank, job->end_at_reason);
      continue;  // deliver this rank's own event
    }
    changed_.wait_until(
        lock, job->end_at ? std::min(*job->end_at, now + kCancelPoll) : now + kCancelPoll);
  }
}

grpc::Status ControlService::Leave(grpc::ServerContext*, const control::v1::LeaveRequest* req,
                                   control::v1::LeaveReply*) {
  uint64_t upstream_token = 0;
  {
    std::lock_guard lock(mu_);
    const auto it = jobs_.find(req->job_name());
    if (it == jobs_.end()) {
      return grpc::Status(grpc::StatusCode::NOT_FOUND,
                          "no job '" + req->job_name().substr(0, 64) + "'");
    }
    const std::shared_ptr<JobRecord> job = it->second;
    if (req->rank() >= job->tokens.size() || job->tokens[req->rank()] != req->token() ||
        req->token() == 0) {
      return grpc::Status(grpc::StatusCode::PERMISSION_DENIED,
                          "rank " + std::to_string(req->rank()) + " of job '" + job->name +
                              "' did not present its token");
    }
    const std::string rank = std::to_string(req->rank());
    const std::string reason = req->reason().empty()
                                   ? "rank " + rank + " stopped (left the job)"
                                   : "rank " + rank + " left the job: " + Printable(req->reason());
    if (!job->departed[req->rank()]) {
      job->departed[req->rank()] = true;
      ++job->departed_count;
    }
    if (job->relay) upstream_token = job->relay->tokens[req->rank()];
    // A rack switch's share of a job: its own ranks only.
    if (job->departed_count == job->joined() || !job->assignment) {
      if (upstream_token != 0) job->relay->ended_upstream = true;  // the Leave below ends it there
      EndLocked(job, int(req->rank()), reason);
    } else if (!job->end_at) {
      // Others may still be fetching results of the operations this rank
      // completed; operations that need its contributions fail at the end
      // of the grace period, naming it.
      job->end_at = std::chrono::steady_clock::now() + kLeaveGrace;
      job->end_rank = int(req->rank());
      job->end_at_reason = reason;
      changed_.notify_all();
    }
  }
  // The upstream switch learns it too (a tree), outside the lock.
  if (relay_ && upstream_token != 0) {
    relay_->Leave(req->job_name(), req->rank(), upstream_token, req->reason());
  }
  return grpc::Status::OK;
}

grpc::Status ControlService::RelayJoinLocked(Lock& lock, const std::shared_ptr<JobRecord>& job,
                                             const control::v1::JoinRequest& request, uint16_t rank,
                                             grpc::ServerContext* context,
                                             grpc::ServerWriter<JobEvent>* writer) {
  // The upstream's barrier is the job's: its assignment comes once every
  // rank of every rack switch has joined.
  lock.unlock();
  control::v1::Assignment up;
  auto forwarded =
      relay_->Forward(*context, request, target_->limits().max_elements_per_packet, &up);
  lock.lock();
  if (!forwarded.ok()) {
    EndLocked(job, rank, forwarded.status().message());
    return ToGrpc(forwarded.status());
  }
  const std::shared_ptr<UpstreamCall> call = std::move(forwarded).value();
  job->relay->calls[rank] = call;
  job->relay->tokens[rank] = up.token();
  if (job->ended) {
    call->Cancel();
    return grpc::Status(grpc::StatusCode::ABORTED, job->end_reason);
  }
  if (!job->assignment) {
    if (Status s = StartShareLocked(*job, up); !s.ok()) {
      EndLocked(job, -1, s.message());
      return ToGrpc(s);
    }
  }
  std::thread relay([this, job, rank, call] { RelayUpstream(job, rank, call); });
  grpc::Status status = StreamLocked(lock, job, rank, context, writer);
  // The upstream ends its streams once the job ended there; a rank that
  // outlives it here (its worker left) gives it a moment before it leaves.
  changed_.wait_for(lock, 2s, [&] { return bool(job->relay->done[rank]); });
  lock.unlock();
  call->Cancel();
  relay.join();
  return status;
}

Status ControlService::StartShareLocked(JobRecord& job, const control::v1::Assignment& up) {
  std::vector<bool> joined_here(job.world_size());
  for (uint16_t r = 0; r < job.world_size(); ++r) joined_here[r] = !job.addresses[r].empty();
  auto share = relay_->Share(job.name, joined_here, job.threads, up);
  if (!share.ok()) return share.status();
  if (Status s = registry_.InstallShare(job.name, uint16_t(up.elements_per_packet())); !s.ok()) {
    return s;
  }
  const JobAssignment assignment = *registry_.Assignment(job.name);
  if (assignment.pool_slots != up.pool_slots()) {
    return Status(StatusCode::kInternal, "job '" + job.name + "' (" + relay_->name() +
                                             "): it assigned " + std::to_string(up.pool_slots()) +
                                             " slots, this " +
                                             std::to_string(assignment.pool_slots));
  }
  return StartLocked(job, assignment, std::move(share).value());
}

void ControlService::RelayUpstream(std::shared_ptr<JobRecord> job, uint16_t rank,
                                   std::shared_ptr<UpstreamCall> call) {
  const Status end = relay_->Relay(*call, [&](int lost_rank, const std::string& reason) {
    Lock lock(mu_);
    job->relay->ended_upstream = true;
    EndLocked(job, lost_rank, reason);
  });
  Lock lock(mu_);
  job->relay->done[rank] = true;
  // A rank that left on purpose ends its own upstream call (its worker closes
  // its stream and gRPC propagates that); the upstream already has its Leave,
  // and its rack-mates may still be fetching their last results.
  if (!job->ended && !job->departed[rank]) {
    job->relay->ended_upstream = true;
    EndLocked(job, -1, "lost the " + relay_->name() + ": " + end.message());
  }
  changed_.notify_all();
}

void ControlService::EndLocked(const std::shared_ptr<JobRecord>& job, int lost_rank,
                               const std::string& reason) {
  if (job->ended) return;
  job->ended = true;
  job->end_reason = reason;
  // A rack switch's job that ends here ends upstream too: a lost rank's own
  // call goes with its worker's (gRPC propagates the cancellation); for any
  // other cause every forwarded rank leaves.
  if (job->relay && !job->relay->ended_upstream && lost_rank < 0) {
    for (const auto& call : job->relay->calls) {
      if (call) call->Cancel();
    }
  }
  if (job->assignment) {
    KeepEndedLocked(*job);
    target_->Remove(job->assignment->id);
  }
  (void)registry_.End(job->name);  // NotFound: a job refused at its first rank
  for (size_t r = 0; r < job->events.size(); ++r) {
    if (int(r) == lost_rank) continue;
    JobEvent e;
    e.mutable_rank_lost()->set_rank(lost_rank >= 0 ? uint32_t(lost_rank) : ~0u);
    e.mutable_rank_lost()->set_reason(reason);
    job->events[r].push_back(std::move(e));
  }
  if (auto it = jobs_.find(job->name); it != jobs_.end() && it->second == job) jobs_.erase(it);
  if (!job->auth_key.empty()) sodium_memzero(job->auth_key.data(), job->auth_key.size());
  spdlog::info("job '{}' ended: {}", job->name, reason);
  changed_.notify_all();
}

void ControlService::EndAll(const std::string& reason) {
  std::lock_guard lock(mu_);
  std::vector<std::shared_ptr<JobRecord>> all;
  for (auto& [name, job] : jobs_) all.push_back(job);
  for (auto& job : all) EndLocked(job, -1, reason);
}

control::v1::JobStats ControlService::JobStatsLocked(const JobRecord& job,
                                                     const DataPlaneCounters& counters) const {
  control::v1::JobStats j;
  j.set_job_name(job.name);
  j.set_world_size(job.world_size());
  j.set_joined(job.joined());
  j.set_active(job.assignment.has_value() && !job.ended);
  if (job.assignment) {
    j.set_job_id(job.assignment->id.value());
    j.set_pool_slots(job.assignment->pool_slots);
    j.set_result_multicast(!job.result_groups.empty());
    FillCounters(counters, j.mutable_counters());
  }
  j.set_ended(job.ended);
  j.set_end_reason(job.end_reason);
  return j;
}

void ControlService::KeepEndedLocked(const JobRecord& job) {
  if (job_stats_grace_.count() <= 0) return;
  // Its last counters, before the target forgets the job. A target that
  // counts all jobs together (a P4 switch) has none to keep.
  DataPlaneCounters last;
  if (target_->counts_per_job()) {
    auto c = target_->Counters({job.assignment->id});
    if (c.ok()) {
      const auto it = c.value().per_job.find(job.assignment->id.value());
      if (it != c.value().per_job.end()) last = it->second;
    }
  }
  const auto now = std::chrono::steady_clock::now();
  ended_.push_back({JobStatsLocked(job, last), now + job_stats_grace_});
  while (ended_.size() > kMaxEndedJobs) ended_.pop_front();
}

control::v1::StatsReply ControlService::CollectStats() {
  control::v1::StatsReply reply;
  std::lock_guard lock(mu_);
  std::vector<JobId> ids;
  for (const auto& [name, job] : jobs_) {
    if (job->assignment) ids.push_back(job->assignment->id);
  }
  auto counters = target_->Counters(ids);
  if (!counters.ok()) {
    spdlog::warn("reading the {} data plane's counters: {}", target_->name(),
                 counters.status().message());
    counters = TargetCounters{};
  }
  const TargetCounters& c = counters.value();
  FillCounters(c.total, reply.mutable_total());
  for (int e = 1; e < kNumDecodeErrors; ++e) {
    if (uint64_t n = c.total.decode_errors[e]) {
      (*reply.mutable_decode_errors())[DecodeErrorName(DecodeError(e))] = n;
    }
  }
  reply.set_packets_sent(c.packets_sent);
  reply.set_send_errors(c.send_errors);
  reply.set_transport_drops(c.transport_drops);
  reply.set_transport_off_queue(c.transport_off_queue);
  reply.set_transport_kernel_path(c.transport_off_queue);  // deprecated alias
  reply.set_pool_slots(target_->limits().pool_slots);
  reply.set_free_slots(registry_.free_slots());
  for (size_t i = 0; i < c.shards.size(); ++i) {
    auto* shard = reply.add_shards();
    shard->set_shard(uint32_t(i));
    FillCounters(c.shards[i].counters, shard->mutable_counters());
    shard->set_packets_sent(c.shards[i].packets_sent);
    shard->set_send_errors(c.shards[i].send_errors);
  }
  for (const auto& [name, job] : jobs_) {
    // A target that counts all jobs together (a P4 switch) leaves these zero.
    const auto it = job->assignment ? c.per_job.find(job->assignment->id.value()) : c.per_job.end();
    *reply.add_jobs() =
        JobStatsLocked(*job, it != c.per_job.end() ? it->second : DataPlaneCounters{});
  }
  const auto now = std::chrono::steady_clock::now();
  while (!ended_.empty() && ended_.front().until <= now) ended_.pop_front();
  for (const auto& e : ended_) *reply.add_ended_jobs() = e.stats;
  return reply;
}

grpc::Status ControlService::Stats(grpc::ServerContext*, const control::v1::StatsRequest*,
                                   control::v1::StatsReply* reply) {
  *reply = CollectStats();
  return grpc::Status::OK;
}

}  // namespace switchml
