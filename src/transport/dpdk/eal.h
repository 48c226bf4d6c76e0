// DPDK's environment abstraction layer (EAL), started once per process.
#pragma once

#include <string>

#include "switchml/status.h"

namespace switchml::transport::dpdk {

// Starts the EAL with `args` (separated by white space) the first time; later
// calls must pass the same arguments and get the first call's result. The
// EAL's own log goes to spdlog at debug level (errors at warn); a
// failure is one line naming the arguments, what the EAL said last, and what
// to check (root, hugepages or --no-huge, the device). The calling thread
// keeps its CPUs (the EAL would pin it to its first lcore).
Status StartEal(const std::string& args);

// The last line the EAL logged (for errors that follow a DPDK call).
std::string LastEalLogLine();

}  // namespace switchml::transport::dpdk
