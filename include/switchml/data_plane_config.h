// The software data plane's limits: how large a pool the switch allocates at
// start, and the largest job it serves (SwitchConfig::data_plane).
#pragma once

#include <cstdint>

#include "switchml/status.h"

namespace switchml {

struct DataPlaneConfig {
  uint32_t pool_slots = 4096;               // slots in the shared pool (all jobs)
  uint16_t max_elements_per_packet = 1024;  // accumulator words per slot
  uint16_t max_workers = 64;                // largest world size of any job
  uint16_t max_jobs = 64;                   // entries in the job table
  // Each result names the one sent before it (docs/wire-format.md, "The
  // previous result"), so a worker finds a lost result at the next one, and
  // the last results of a burst with many resends, which none names, go
  // twice. The P4 programs do neither; a model of them (tests/p4) turns it
  // off.
  bool name_previous_results = true;

  // Errors name the field, its range and the fix.
  Status Validate() const;
};

}  // namespace switchml
