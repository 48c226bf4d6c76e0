#include "switch/upstream_relay.h"

#include <spdlog/spdlog.h>

#include <cstdint>

namespace switchml {

StatusOr<JobInstall> UpstreamRelay::Share(const std::string& job_name,
                                          const std::vector<bool>& joined_here, uint16_t threads,
                                          const control::v1::Assignment& up) const {
  const std::string where = "job '" + job_name + "' (" + name() + ")";
  if (up.members() == 0 || up.member() >= up.members() || up.member_ranks_size() == 0) {
    return Status(StatusCode::kInternal, where + ": the assignment names no member");
  }
  if (up.elements_per_packet() > UINT16_MAX) {
    return Status(StatusCode::kInternal, where + ": invalid elements_per_packet");
  }
  JobInstall install;
  for (uint32_t r : up.member_ranks()) {
    if (r >= joined_here.size() || !joined_here[r]) {
      return Status(StatusCode::kInternal, where + ": it lists rank " + std::to_string(r) +
                                               ", which did not join this switch");
    }
    install.local_ranks.push_back(uint16_t(r));
  }
  auto addresses = client_->DataAddresses(up, threads);
  if (!addresses.ok()) return addresses.status();
  install.upstream = JobInstall::Upstream{JobId(up.job_id()), uint16_t(up.member()),
                                          std::move(addresses).value(), "", up.auth_salt()};
  return install;
}

Status UpstreamRelay::Relay(UpstreamCall& call,
                            const std::function<void(int, const std::string&)>& on_end) const {
  control::v1::JobEvent event;
  while (call.Read(&event)) {
    if (!event.has_rank_lost()) continue;
    const uint32_t lost = event.rank_lost().rank();
    on_end(lost == ~0u ? -1 : int(lost),
           "the " + name() + " ended the job: " + event.rank_lost().reason());
  }
  return call.Finish();
}

void UpstreamRelay::Leave(const std::string& job_name, uint32_t rank, uint64_t token,
                          const std::string& reason) {
  if (Status s = client_->Leave(job_name, rank, token, reason); !s.ok()) {
    spdlog::warn("job '{}': forwarding rank {}'s leave: {}", job_name, rank, s.message());
  }
}

}  // namespace switchml
