// A data plane outside this process — a P4 switch — that serves the jobs the
// control service registers. The control service keeps doing everything else
// (the barrier, pool allocation, job ids, failure detection); an external
// data plane only turns a started job into switch state and back.
#pragma once

#include <netinet/in.h>

#include <string>
#include <vector>

#include "switch/join_request.h"
#include "switchml/data_plane.h"
#include "switchml/job_registry.h"
#include "switchml/status.h"

namespace switchml {

class ExternalDataPlane {
 public:
  virtual ~ExternalDataPlane() = default;

  // Where workers send their packets (the Assignment tells them).
  virtual std::string data_address() const = 0;  // numeric IPv4
  virtual uint16_t data_port() const = 0;

  // Refuses, before it joins, a rank whose request the target cannot serve
  // (its fixed elements per packet, its largest world size, job keys).
  virtual Status CheckJoin(const ParsedJoin& join) const = 0;

  // Installs a job whose ranks have all joined. addresses[rank][thread] is
  // the socket of each worker thread; thread t owns the slots
  // [t*S/T, (t+1)*S/T) of the job's S slots.
  virtual Status Install(const JobAssignment& job,
                         const std::vector<std::vector<sockaddr_in>>& addresses) = 0;
  // Removes everything Install() added (unknown ids are ignored).
  virtual void Remove(JobId id) = 0;

  // The switch's counters, summed over all jobs.
  virtual StatusOr<DataPlaneCounters> Counters() = 0;
};

}  // namespace switchml
