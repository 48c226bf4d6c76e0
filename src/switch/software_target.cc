#include "switch/software_target.h"

#include <sodium.h>
#include <spdlog/spdlog.h>

#include <algorithm>

#include "net/address.h"
#include "switch/result_group.h"

namespace switchml {
namespace {

// Sets `data` up to send host-local multicast and reserves the port of its
// result groups: an endpoint bound to it on 127.0.0.1. Not the data port:
// workers bind the groups' port, which a data endpoint on 0.0.0.0 forbids.
StatusOr<std::unique_ptr<transport::Endpoint>> ReserveResultPort(transport::Transport& transport,
                                                                 transport::Endpoint& data) {
  if (Status s = data.SetHostLocalMulticast(); !s.ok()) return s;
  sockaddr_in loopback{};
  loopback.sin_family = AF_INET;
  loopback.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  transport::EndpointOptions holder;
  holder.max_datagram_bytes = 64;
  holder.receive_batch = 1;
  holder.send_queue = 1;
  holder.udp.socket_buffer_bytes = 4096;
  holder.udp.offload = false;
  return transport.Open(loopback, holder);
}

}  // namespace

StatusOr<std::unique_ptr<SoftwareTarget>> SoftwareTarget::Open(const SwitchConfig& config,
                                                               transport::Transport& transport) {
  auto bind = net::ParseAddress(config.bind_address, config.data_port);
  if (!bind.ok()) return bind.status();
  std::unique_ptr<SoftwareTarget> target(new SoftwareTarget());
  bool multicast = config.result_multicast;
  for (uint16_t s = 0; s < config.data_threads; ++s) {
    sockaddr_in local = bind.value();
    if (config.data_port != 0) local.sin_port = htons(uint16_t(config.data_port + s));
    transport::EndpointOptions options = DataThread::EndpointOptions(
        config.data_plane, config.socket_buffer_bytes, config.udp_offload);
    options.shard = s;
    options.shards = config.data_threads;
    auto endpoint = transport.Open(local, options);
    if (!endpoint.ok()) return endpoint.status();
    if (multicast) {
      auto holder = ReserveResultPort(transport, *endpoint.value());
      if (holder.ok()) {
        target->result_ports_.push_back(ntohs(holder.value()->local_address().sin_port));
        target->result_port_holders_.push_back(std::move(holder).value());
      } else {
        // Without a working loopback (a network namespace whose lo is down)
        // no worker can be on loopback either: results go by unicast.
        spdlog::warn("results go by unicast only: {}", holder.status().message());
        multicast = false;
        target->result_ports_.clear();
        target->result_port_holders_.clear();
      }
    }
    target->data_ports_.push_back(ntohs(endpoint.value()->local_address().sin_port));
    target->shards_.push_back(std::make_unique<DataThread>(
        config.data_plane, std::move(endpoint).value(), s, config.data_threads,
        std::chrono::microseconds(config.busy_poll_us)));
  }
  return target;
}

SoftwareTarget::~SoftwareTarget() { Stop(); }

void SoftwareTarget::Start() {
  for (auto& shard : shards_) shard->Start();
}

void SoftwareTarget::Stop() {
  for (auto& shard : shards_) shard->Stop();
}

std::vector<sockaddr_in> SoftwareTarget::ResultGroups(const JobAssignment& job,
                                                      uint16_t threads) const {
  std::vector<sockaddr_in> groups;
  if (result_ports_.empty() || threads > kMaxResultGroupThreads) return groups;
  const uint32_t entry = job.id.value() % limits().max_jobs;
  for (uint16_t t = 0; t < threads; ++t) {
    groups.push_back(ResultGroup(entry, t, result_ports_[t % result_ports_.size()]));
  }
  return groups;
}

Status SoftwareTarget::Install(const JobInstall& job) {
  std::vector<sockaddr_in> book;  // [rank * threads + t]
  for (const auto& per_rank : job.addresses) {
    // A rank served by another switch of a tree has no sockets here: its
    // entries stay unset and match no sender.
    if (per_rank.empty()) book.resize(book.size() + job.threads, sockaddr_in{});
    book.insert(book.end(), per_rank.begin(), per_rank.end());
  }
  JobRegistration registration = ToRegistration(job.assignment);
  registration.local_ranks = job.local_ranks;
  registration.threads = job.threads;
  if (job.upstream) registration.upstream = UpstreamLink{job.upstream->job, job.upstream->member};
  for (size_t s = 0; s < shards_.size(); ++s) {
    std::optional<UpstreamRoute> route;
    if (job.upstream) {
      route.emplace(UpstreamRoute{job.upstream->job, job.upstream->addresses, std::nullopt});
      if (!job.upstream->auth_key.empty()) {
        // Each shard signs as its own sender under the upstream's key.
        net::AuthKey secret;
        std::copy(job.upstream->auth_key.begin(), job.upstream->auth_key.end(), secret.begin());
        route->auth.emplace(secret, job.upstream->auth_salt, job.upstream->job.value(),
                            net::WorkerSenderId(job.upstream->member, uint16_t(s)));
        sodium_memzero(secret.data(), secret.size());
      }
    }
    Status installed = shards_[s]->InstallJob(registration, job.threads, book, job.auth,
                                              job.result_groups, std::move(route));
    if (!installed.ok()) {
      for (size_t undo = 0; undo < s; ++undo) shards_[undo]->RemoveJob(job.assignment.id);
      return installed;
    }
  }
  return Status::Ok();
}

void SoftwareTarget::Remove(JobId id) {
  for (auto& shard : shards_) shard->RemoveJob(id);
}

StatusOr<TargetCounters> SoftwareTarget::Counters(const std::vector<JobId>& jobs) {
  TargetCounters out;
  for (auto& shard : shards_) {
    const DataThread::Counters c = shard->ReadCounters(jobs);
    out.total += c.total;
    for (size_t j = 0; j < jobs.size(); ++j) out.per_job[jobs[j].value()] += c.per_job[j];
    out.packets_sent += c.io.sent;
    out.send_errors += c.io.send_dropped;
    out.transport_drops += c.io.malformed;
    out.transport_off_queue += c.io.off_queue;
    out.shards.push_back({c.total, c.io.sent, c.io.send_dropped});
  }
  return out;
}

}  // namespace switchml
