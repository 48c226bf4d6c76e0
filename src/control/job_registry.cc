#include "control/job_registry.h"

#include <algorithm>

#include "switchml/limits.h"

namespace switchml {
namespace {

std::string Quote(const std::string& s) { return "'" + s + "'"; }

// Names the first parameter in which `b` differs from `a`, or "".
std::string FirstDifference(const JobRequest& a, const JobRequest& b) {
  auto diff = [](const char* name, int x, int y) {
    return std::string(name) + " " + std::to_string(y) + " differs from the job's " +
           std::to_string(x);
  };
  if (a.world_size != b.world_size) return diff("world_size", a.world_size, b.world_size);
  if (a.elements_per_packet != b.elements_per_packet) {
    return diff("elements_per_packet", a.elements_per_packet, b.elements_per_packet);
  }
  if (a.pool_slots != b.pool_slots) return diff("pool_slots", a.pool_slots, b.pool_slots);
  return "";
}

}  // namespace

JobRegistry::JobRegistry(const DataPlaneConfig& limits) : limits_(limits) {}

Status JobRegistry::Join(const JobRequest& r) {
  const DataPlaneConfig& limits = limits_;
  const std::string who = "job " + Quote(r.job_name);
  if (r.job_name.empty()) return InvalidArgument("job_name must not be empty");
  if (r.world_size == 0 || r.world_size > limits.max_workers) {
    return InvalidArgument(who + ": world_size=" + std::to_string(r.world_size) +
                           " is out of range; this switch accepts 1.." +
                           std::to_string(limits.max_workers));
  }
  if (r.rank >= r.world_size) {
    return InvalidArgument(who + ": rank=" + std::to_string(r.rank) +
                           " is out of range for world_size=" + std::to_string(r.world_size));
  }
  if (r.elements_per_packet != 0 && (r.elements_per_packet < kMinElementsPerPacket ||
                                     r.elements_per_packet > limits.max_elements_per_packet)) {
    return InvalidArgument(
        who + ": elements_per_packet=" + std::to_string(r.elements_per_packet) +
        " is out of range; this switch accepts " + std::to_string(kMinElementsPerPacket) + ".." +
        std::to_string(limits.max_elements_per_packet) + " (or 0 to let it choose)");
  }
  if (r.elements_per_packet == 0 && limits.max_elements_per_packet < kMinElementsPerPacket) {
    return InvalidArgument(who + ": this switch carries at most " +
                           std::to_string(limits.max_elements_per_packet) +
                           " elements per packet, fewer than the " +
                           std::to_string(kMinElementsPerPacket) + " a job needs");
  }
  if (r.pool_slots == 0) return InvalidArgument(who + ": pool_slots must be at least 1");

  auto [it, inserted] = jobs_.try_emplace(r.job_name);
  Entry& j = it->second;
  if (inserted) {
    j.params = r;
    j.joined.assign(r.world_size, false);
  } else if (std::string d = FirstDifference(j.params, r); !d.empty()) {
    return InvalidArgument(who + ": rank " + std::to_string(r.rank) + "'s " + d +
                           "; every rank must use the same value");
  }
  if (j.joined[r.rank]) {
    return {StatusCode::kAlreadyExists,
            who + ": rank " + std::to_string(r.rank) +
                " is already registered; each rank must be unique (end the job to re-register)"};
  }
  const uint16_t path_before = j.path_elements;
  const uint16_t path =
      r.path_elements_per_packet ? r.path_elements_per_packet : kUnknownPathElementsPerPacket;
  j.path_elements = std::min(j.path_elements, path);
  if (!j.assignment && j.joined_count + 1 == r.world_size) {
    if (Status s = Install(j); !s.ok()) {
      j.path_elements = path_before;
      if (j.joined_count == 0) jobs_.erase(it);
      return s;
    }
  }
  j.joined[r.rank] = true;
  ++j.joined_count;
  return Status::Ok();
}

uint16_t JobRegistry::ElementsPerPacket(const Entry& j) const {
  if (j.params.elements_per_packet != 0) return j.params.elements_per_packet;
  // The largest power of two within every rank's path and the data plane.
  const uint16_t limit = std::min(j.path_elements, limits_.max_elements_per_packet);
  uint16_t k = kMinElementsPerPacket;
  while (uint32_t(k) * 2 <= limit) k *= 2;
  return k;
}

std::optional<uint32_t> JobRegistry::AllocateSegment(uint16_t slots) const {
  std::vector<std::pair<uint32_t, uint32_t>> used;  // [begin, end)
  for (const auto& [name, job] : jobs_) {
    if (job.assignment)
      used.emplace_back(job.assignment->pool_base,
                        job.assignment->pool_base + job.assignment->pool_slots);
  }
  std::sort(used.begin(), used.end());
  uint32_t cursor = 0;
  for (const auto& [begin, end] : used) {
    if (begin - cursor >= slots) return cursor;
    cursor = std::max(cursor, end);
  }
  if (limits_.pool_slots - cursor >= slots) return cursor;
  return std::nullopt;
}

uint32_t JobRegistry::free_slots() const {
  uint32_t used = 0;
  for (const auto& [name, job] : jobs_) used += job.assignment ? job.assignment->pool_slots : 0;
  return limits_.pool_slots - used;
}

Status JobRegistry::Install(Entry& j) {
  const std::string who = "job " + Quote(j.params.job_name);
  const std::optional<uint32_t> base = AllocateSegment(j.params.pool_slots);
  if (!base) {
    return ResourceExhausted(
        who + ": the switch's pool has no free segment of " + std::to_string(j.params.pool_slots) +
        " slots (" + std::to_string(free_slots()) + " of " + std::to_string(limits_.pool_slots) +
        " free); end other jobs or ask for fewer slots");
  }
  // A job table entry no active job uses.
  const uint16_t entries = limits_.max_jobs;
  std::vector<bool> taken(entries, false);
  for (const auto& [name, other] : jobs_) {
    if (other.assignment) taken[other.assignment->id.value() % entries] = true;
  }
  const auto free_entry = std::find(taken.begin(), taken.end(), false);
  if (free_entry == taken.end()) {
    return ResourceExhausted(who + ": the switch already runs its maximum of " +
                             std::to_string(entries) + " jobs; end one first");
  }
  const JobId id(generation_++ * entries + uint32_t(free_entry - taken.begin()));
  j.assignment =
      JobAssignment{id, j.params.world_size, ElementsPerPacket(j), j.params.pool_slots, *base};
  return Status::Ok();
}

Status JobRegistry::InstallShare(const std::string& job_name, uint16_t elements_per_packet) {
  const auto it = jobs_.find(job_name);
  if (it == jobs_.end()) {
    return {StatusCode::kNotFound, "job " + Quote(job_name) + " is not registered"};
  }
  Entry& j = it->second;
  if (elements_per_packet < kMinElementsPerPacket ||
      elements_per_packet > limits_.max_elements_per_packet) {
    return InvalidArgument("job " + Quote(job_name) + ": the upstream switch chose " +
                           std::to_string(elements_per_packet) +
                           " elements per packet; this switch carries " +
                           std::to_string(kMinElementsPerPacket) + ".." +
                           std::to_string(limits_.max_elements_per_packet));
  }
  if (j.assignment) {
    // Every rank joined here (a tree of one rack): the registry chose already.
    if (j.assignment->elements_per_packet == elements_per_packet) return Status::Ok();
    return InvalidArgument("job " + Quote(job_name) + ": the upstream switch chose " +
                           std::to_string(elements_per_packet) + " elements per packet, this one " +
                           std::to_string(j.assignment->elements_per_packet) +
                           "; set elements_per_packet on the workers");
  }
  j.params.elements_per_packet = elements_per_packet;
  return Install(j);
}

std::optional<JobAssignment> JobRegistry::Assignment(const std::string& job_name) const {
  const auto it = jobs_.find(job_name);
  return it == jobs_.end() ? std::nullopt : it->second.assignment;
}

std::vector<uint16_t> JobRegistry::MissingRanks(const std::string& job_name) const {
  std::vector<uint16_t> missing;
  const auto it = jobs_.find(job_name);
  if (it == jobs_.end()) return missing;
  for (size_t r = 0; r < it->second.joined.size(); ++r) {
    if (!it->second.joined[r]) missing.push_back(uint16_t(r));
  }
  return missing;
}

Status JobRegistry::End(const std::string& job_name) {
  const auto it = jobs_.find(job_name);
  if (it == jobs_.end()) {
    return {StatusCode::kNotFound, "job " + Quote(job_name) + " is not registered"};
  }
  jobs_.erase(it);
  return Status::Ok();
}

}  // namespace switchml
