#include "switch/control_service.h"

#include <netinet/in.h>
#include <sodium.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>

#include "net/address.h"
#include "net/packet_auth.h"
#include "rpc/grpc_status.h"
#include "switch/join_request.h"
#include "switch/result_group.h"
#include "switchml/wire_format.h"

namespace switchml {
namespace {

using control::v1::JobEvent;
using namespace std::chrono_literals;

// How long a job outlives a rank that left on purpose while others still run.
constexpr auto kLeaveGrace = 2s;

void FillCounters(const DataPlaneCounters& c, control::v1::Counters* out) {
  out->set_packets(c.packets);
  out->set_contributions(c.contributions);
  out->set_slots_completed(c.slots_completed);
  out->set_results_resent(c.results_resent);
  out->set_pending_replies(c.pending_replies);
  for (int r = 1; r < kNumDropReasons; ++r) {
    if (c.drops[r] != 0) (*out->mutable_drops())[DropReasonName(DropReason(r))] = c.drops[r];
  }
}

void Accumulate(DataPlaneCounters& total, const DataPlaneCounters& c) {
  total.packets += c.packets;
  total.contributions += c.contributions;
  total.slots_completed += c.slots_completed;
  total.results_resent += c.results_resent;
  total.pending_replies += c.pending_replies;
  for (size_t i = 0; i < c.drops.size(); ++i) total.drops[i] += c.drops[i];
  for (size_t i = 0; i < c.decode_errors.size(); ++i) total.decode_errors[i] += c.decode_errors[i];
}

bool AllOnLoopback(const std::vector<sockaddr_in>& addresses) {
  return std::all_of(addresses.begin(), addresses.end(), [](const sockaddr_in& a) {
    return (ntohl(a.sin_addr.s_addr) >> 24) == IN_LOOPBACKNET;  // 127/8
  });
}

}  // namespace

ControlService::ControlService(std::vector<DataThread*> shards, std::vector<uint16_t> data_ports,
                               ExternalDataPlane* external, std::vector<uint16_t> result_ports)
    : shards_(std::move(shards)),
      data_ports_(std::move(data_ports)),
      external_(external),
      result_ports_(external == nullptr ? std::move(result_ports) : std::vector<uint16_t>{}),
      token_source_(std::random_device{}()) {}

void ControlService::ForEachShard(const std::function<void(DataThread&)>& fn) {
  for (DataThread* shard : shards_) shard->Execute([&] { fn(*shard); });
}

grpc::Status ControlService::Join(grpc::ServerContext* context, const control::v1::JoinRequest* req,
                                  grpc::ServerWriter<JobEvent>* writer) {
  auto parsed = ParseJoinRequest(*req);
  if (!parsed.ok()) return ToGrpc(parsed.status());
  const ParsedJoin& join = parsed.value();
  if (external_ != nullptr) {
    if (Status s = external_->CheckJoin(join); !s.ok()) return ToGrpc(s);
  }
  const std::string& name = join.request.job_name;
  const auto threads = uint16_t(join.addresses.size());
  const std::vector<sockaddr_in>& addresses = join.addresses;
  const auto rank = uint16_t(req->rank());

  std::unique_lock lock(mu_);
  std::shared_ptr<Job>& entry = jobs_[name];
  const bool created = entry == nullptr;
  if (created) {
    entry = std::make_shared<Job>();
    entry->name = name;
    entry->world_size = uint16_t(req->world_size());
    entry->threads = threads;
    entry->addresses.resize(entry->world_size);
    entry->events.resize(entry->world_size);
    entry->tokens.resize(entry->world_size);
    entry->departed.resize(entry->world_size);
    entry->auth_key = join.auth_key;
  }
  const std::shared_ptr<Job> job = entry;
  // A refused join: a job this call created is forgotten; one whose other
  // ranks wait at the barrier ends, and they fail at once with the same
  // message (a misconfigured rank never leaves the others waiting for the
  // join timeout). A running job is left alone.
  auto refuse = [&](const grpc::Status& status) {
    spdlog::warn("join of rank {} to job '{}' refused: {}", rank, name, status.error_message());
    if (created) {
      jobs_.erase(name);
    } else if (!job->assignment) {
      EndLocked(job, -1, status.error_message());
    }
    return status;
  };
  if (job->threads != threads) {
    return refuse(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                               "job '" + name + "': rank " + std::to_string(rank) + "'s threads " +
                                   std::to_string(threads) + " differs from the job's " +
                                   std::to_string(job->threads) +
                                   "; every rank must use the same value"));
  }
  // Constant-time: a guess's timing reveals nothing about the secret.
  if (job->auth_key.size() != join.auth_key.size() ||
      (!join.auth_key.empty() &&
       sodium_memcmp(job->auth_key.data(), join.auth_key.data(), join.auth_key.size()) != 0)) {
    return refuse(
        grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                     "job '" + name + "': rank " + std::to_string(rank) +
                         "'s auth_key differs from the job's (or only some ranks have one)"));
  }
  Status joined;
  std::optional<JobAssignment> assignment;
  // The first shard decides; the others repeat its decision (their
  // registries see the same calls in the same order, so they agree).
  shards_[0]->Execute([&] {
    joined = shards_[0]->registry().Join(join.request);
    if (joined.ok()) assignment = shards_[0]->registry().Assignment(name);
  });
  for (size_t s = 1; s < shards_.size() && joined.ok(); ++s) {
    shards_[s]->Execute([&] { (void)shards_[s]->registry().Join(join.request); });
  }
  if (!joined.ok()) return refuse(ToGrpc(joined));
  job->addresses[rank] = addresses;
  if (!join.accept_result_multicast || !AllOnLoopback(addresses)) job->unicast_only = true;
  job->tokens[rank] = token_source_();
  spdlog::info("job '{}': rank {} joined from {}", name, rank, req->data_addresses(0));
  if (assignment) {
    std::vector<sockaddr_in> book;
    for (const auto& per_rank : job->addresses)
      book.insert(book.end(), per_rank.begin(), per_rank.end());
    std::optional<net::PacketAuthenticator> auth;
    if (!job->auth_key.empty()) {
      job->auth_salt = net::RandomSalt();
      net::AuthKey secret;
      std::copy(job->auth_key.begin(), job->auth_key.end(), secret.begin());
      auth.emplace(secret, job->auth_salt, assignment->id.value(), net::kSwitchSenderId);
      sodium_memzero(secret.data(), secret.size());
    }
    if (!result_ports_.empty() && !job->unicast_only && job->threads <= kMaxResultGroupThreads) {
      const uint32_t entry = assignment->id.value() % shards_[0]->data_plane().config().max_jobs;
      for (uint16_t t = 0; t < job->threads; ++t) {
        job->result_groups.push_back(
            ResultGroup(entry, t, result_ports_[t % result_ports_.size()]));
      }
    }
    ForEachShard([&](DataThread& shard) {
      shard.InstallAddresses(assignment->id, assignment->world_size, assignment->pool_slots,
                             job->threads, book, auth, job->result_groups);
    });
    if (external_ != nullptr) {
      if (Status s = external_->Install(*assignment, job->addresses); !s.ok()) {
        spdlog::error("job '{}': {}", name, s.message());
        ForEachShard([&](DataThread& shard) { shard.RemoveAddresses(assignment->id); });
        EndLocked(job, -1, s.message());
        return ToGrpc(s);
      }
    }
    job->assignment = assignment;
    spdlog::info(
        "job '{}' started: id {}, {} ranks, {} slots, {} elements per packet, results by {}", name,
        assignment->id.value(), assignment->world_size, assignment->pool_slots,
        assignment->elements_per_packet, job->result_groups.empty() ? "unicast" : "multicast");
    changed_.notify_all();
  }

  // The barrier: wait for every rank, the job's end, or this caller leaving.
  const auto timeout = join.join_timeout;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!job->assignment && !job->ended) {
    if (context->IsCancelled()) {
      EndLocked(job, rank, "rank " + std::to_string(rank) + " left before all ranks joined");
      return grpc::Status(grpc::StatusCode::CANCELLED, "join cancelled");
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      std::vector<uint16_t> missing;
      shards_[0]->Execute([&] { missing = shards_[0]->registry().MissingRanks(name); });
      std::string list;
      for (size_t i = 0; i < missing.size() && i < 16; ++i) {
        list += (i ? ", " : "") + std::to_string(missing[i]);
      }
      const std::string reason = "job '" + name + "': only " +
                                 std::to_string(job->world_size - missing.size()) + " of " +
                                 std::to_string(job->world_size) + " ranks joined within " +
                                 std::to_string(timeout.count()) + " ms; missing rank(s) " + list;
      EndLocked(job, -1, reason);
      return grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, reason);
    }
    changed_.wait_for(lock, 50ms);
  }
  if (!job->assignment) return grpc::Status(grpc::StatusCode::ABORTED, job->end_reason);

  JobEvent first;
  auto* a = first.mutable_assignment();
  a->set_job_id(job->assignment->id.value());
  a->set_world_size(job->assignment->world_size);
  a->set_elements_per_packet(job->assignment->elements_per_packet);
  a->set_pool_slots(job->assignment->pool_slots);
  if (external_ != nullptr) {
    a->set_data_port(external_->data_port());
    a->set_data_address(external_->data_address());
  } else {
    a->set_data_port(data_ports_[0]);
    if (data_ports_.size() > 1) {
      for (uint16_t port : data_ports_) a->add_data_ports(port);
    }
  }
  for (const sockaddr_in& group : job->result_groups)
    a->add_result_groups(net::FormatAddress(group));
  a->set_token(job->tokens[rank]);
  a->set_auth_salt(job->auth_salt);
  std::deque<JobEvent> outgoing{first};
  // Stream events until the job ends or this worker goes away.
  const std::string gone = "rank " + std::to_string(rank) +
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
    if (job->end_at && std::chrono::steady_clock::now() >= *job->end_at) {
      EndLocked(job, job->end_rank, job->end_at_reason);
      continue;  // deliver this rank's own event
    }
    changed_.wait_for(lock, 50ms);
  }
}

grpc::Status ControlService::Leave(grpc::ServerContext*, const control::v1::LeaveRequest* req,
                                   control::v1::LeaveReply*) {
  std::lock_guard lock(mu_);
  const auto it = jobs_.find(req->job_name());
  if (it == jobs_.end()) {
    return grpc::Status(grpc::StatusCode::NOT_FOUND,
                        "no job '" + req->job_name().substr(0, 64) + "'");
  }
  const std::shared_ptr<Job> job = it->second;
  if (req->rank() >= job->tokens.size() || job->tokens[req->rank()] != req->token() ||
      req->token() == 0) {
    return grpc::Status(grpc::StatusCode::PERMISSION_DENIED, "rank " + std::to_string(req->rank()) +
                                                                 " of job '" + job->name +
                                                                 "' did not present its token");
  }
  const std::string rank = std::to_string(req->rank());
  const std::string reason = "rank " + rank + " stopped (left the job)";
  if (!job->departed[req->rank()]) {
    job->departed[req->rank()] = true;
    ++job->departed_count;
  }
  if (job->departed_count == job->world_size || !job->assignment) {
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
  return grpc::Status::OK;
}

void ControlService::EndLocked(const std::shared_ptr<Job>& job, int lost_rank,
                               const std::string& reason) {
  if (job->ended) return;
  job->ended = true;
  job->end_reason = reason;
  if (external_ != nullptr && job->assignment) external_->Remove(job->assignment->id);
  ForEachShard([&](DataThread& shard) {
    if (job->assignment) shard.RemoveAddresses(job->assignment->id);
    (void)shard.registry().End(job->name);
  });
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
  std::vector<std::shared_ptr<Job>> all;
  for (auto& [name, job] : jobs_) all.push_back(job);
  for (auto& job : all) EndLocked(job, -1, reason);
}

control::v1::StatsReply ControlService::CollectStats() {
  control::v1::StatsReply reply;
  std::lock_guard lock(mu_);
  if (external_ != nullptr) {
    // The P4 switch counts for all jobs together; its per-job counters
    // below stay zero.
    auto counters = external_->Counters();
    if (counters.ok()) {
      FillCounters(counters.value(), reply.mutable_total());
    } else {
      spdlog::warn("reading the P4 switch's counters: {}", counters.status().message());
    }
  }
  DataPlaneCounters total;
  std::map<uint32_t, DataPlaneCounters> per_job;
  uint64_t packets_sent = 0, send_errors = 0;
  uint32_t pool_slots = 0, free_slots = 0;
  ForEachShard([&](DataThread& shard) {
    const DataPlane& dp = shard.data_plane();
    Accumulate(total, dp.counters());
    for (const auto& [name, job] : jobs_) {
      if (job->assignment)
        Accumulate(per_job[job->assignment->id.value()], dp.JobCounters(job->assignment->id));
    }
    const transport::EndpointCounters io = shard.endpoint_counters();
    packets_sent += io.sent;
    send_errors += io.send_dropped;
    pool_slots = dp.config().pool_slots;  // every shard holds the whole pool
    free_slots = shard.registry().free_slots();
  });
  if (external_ == nullptr) FillCounters(total, reply.mutable_total());
  for (int e = 1; e < kNumDecodeErrors; ++e) {
    if (uint64_t n = total.decode_errors[e]) {
      (*reply.mutable_decode_errors())[DecodeErrorName(DecodeError(e))] = n;
    }
  }
  reply.set_packets_sent(packets_sent);
  reply.set_send_errors(send_errors);
  reply.set_pool_slots(pool_slots);
  reply.set_free_slots(free_slots);
  for (const auto& [name, job] : jobs_) {
    auto* j = reply.add_jobs();
    j->set_job_name(name);
    j->set_world_size(job->world_size);
    uint32_t joined = 0;
    for (const auto& a : job->addresses) joined += a.empty() ? 0 : 1;
    j->set_joined(joined);
    j->set_active(job->assignment.has_value());
    if (job->assignment) {
      j->set_job_id(job->assignment->id.value());
      j->set_pool_slots(job->assignment->pool_slots);
      j->set_result_multicast(!job->result_groups.empty());
      FillCounters(per_job[job->assignment->id.value()], j->mutable_counters());
    }
  }
  return reply;
}

grpc::Status ControlService::Stats(grpc::ServerContext*, const control::v1::StatsRequest*,
                                   control::v1::StatsReply* reply) {
  *reply = CollectStats();
  return grpc::Status::OK;
}

}  // namespace switchml
