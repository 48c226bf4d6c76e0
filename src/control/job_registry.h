// Job setup (the control plane's logic, without any RPC): workers register
// for a named job; when all ranks have registered with identical parameters
// the job gets an id and a segment of the switch's pool. The registry only
// allocates: its owner installs the assignment in the data plane(s)
// (ToRegistration) and ends the job here if that fails. A job that asks for elements_per_packet 0
// gets the largest power of two that every rank's path and the data plane carry. Transports (gRPC
// in the switch daemon, direct calls in the simulation) wrap this class.
//
// Job ids are generation * max_jobs + table entry, so an id is never reused
// while packets of its previous holder may still be in flight.
//
// Thread safety: none; callers serialize access (the daemon holds a mutex).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "dataplane/data_plane.h"
#include "switchml/status.h"
#include "switchml/types.h"

namespace switchml {

// What one worker asks for. Every rank of a job must send the same values
// except `rank`.
struct JobRequest {
  std::string job_name;
  uint16_t rank = 0;
  uint16_t world_size = 0;
  uint16_t elements_per_packet = 0;  // 0: chosen at install (see below)
  uint16_t pool_slots = 0;           // slots the job wants (its window's upper bound)
  // The largest elements_per_packet this rank's path carries (0: unknown,
  // taken as kUnknownPathElementsPerPacket). May differ between ranks.
  uint16_t path_elements_per_packet = 0;
};

// What every worker of a complete job gets back.
struct JobAssignment {
  JobId id;
  uint16_t world_size = 0;
  uint16_t elements_per_packet = 0;
  uint16_t pool_slots = 0;
  uint32_t pool_base = 0;  // first slot of the job's segment of the switch's pool
};

// What a data plane needs to run an assigned job.
inline JobRegistration ToRegistration(const JobAssignment& a) {
  return JobRegistration{a.id, a.world_size, a.elements_per_packet, a.pool_base, a.pool_slots};
}

class JobRegistry {
 public:
  // Allocates within `limits`: the data plane's pool, job table, largest
  // world size and packet (every data plane the owner installs jobs in must
  // have at least these).
  explicit JobRegistry(const DataPlaneConfig& limits);

  // Adds one rank. Errors name the mismatching value and the ranks involved;
  // a rejected request leaves the job's other registrations in place. When
  // the last rank joins, the job gets its id and segment, and Assignment()
  // answers.
  Status Join(const JobRequest& request);
  // A rack switch's share of a job in a tree (docs/design.md §10): the other
  // ranks joined other switches, and the upstream switch chose
  // `elements_per_packet` for all. Installs the job with the ranks joined
  // here (which must all be there) and the slots they asked for.
  Status InstallShare(const std::string& job_name, uint16_t elements_per_packet);
  // The assignment of a complete job; nullopt while ranks are missing.
  std::optional<JobAssignment> Assignment(const std::string& job_name) const;
  // Ranks that have not registered yet (for error messages and barriers).
  std::vector<uint16_t> MissingRanks(const std::string& job_name) const;
  // Ends the job (complete or not): frees its pool segment and job id.
  // The owner removes it from the data plane(s) first.
  Status End(const std::string& job_name);

  size_t job_count() const { return jobs_.size(); }
  uint32_t free_slots() const;

 private:
  struct Entry {
    JobRequest params;  // the first registrant's values (rank ignored)
    std::vector<bool> joined;
    uint16_t joined_count = 0;
    uint16_t path_elements = UINT16_MAX;  // smallest path_elements_per_packet so far
    std::optional<JobAssignment> assignment;
  };
  Status Install(Entry& job);
  uint16_t ElementsPerPacket(const Entry& job) const;
  std::optional<uint32_t> AllocateSegment(uint16_t slots) const;

  DataPlaneConfig limits_;
  std::map<std::string, Entry> jobs_;
  uint32_t generation_ = 1;
};

}  // namespace switchml
