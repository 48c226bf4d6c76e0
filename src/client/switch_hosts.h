// A job's switch hosts: ContextConfig::switch_address is one control
// address, HOST[:PORT], or several separated by commas, over which the job's
// slots are spread (each host aggregates the share of the worker threads
// that talk to it: thread t to host t % hosts).
#pragma once

#include <netinet/in.h>

#include <string>
#include <vector>

#include "switchml/status.h"

namespace switchml {

// The most switch hosts one job may span.
inline constexpr size_t kMaxSwitchHosts = 16;

// The entries of `list`, trimmed of blanks; empty entries included (so that
// callers can refuse them).
std::vector<std::string> SplitSwitchHosts(const std::string& list);

// Refuses an empty entry and more than kMaxSwitchHosts (no name lookups).
Status CheckSwitchHosts(const std::string& list);

// Parses every entry (resolving names: setup path only). Errors name the
// entry and the field; the same address twice is refused.
StatusOr<std::vector<sockaddr_in>> ParseSwitchHosts(const std::string& list);

}  // namespace switchml
