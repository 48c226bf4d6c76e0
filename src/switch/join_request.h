// Validation of a worker's JoinRequest, apart from the RPC so that it can be
// tested and fuzzed on its own. Everything in a request is untrusted.
#pragma once

#include <netinet/in.h>

#include <chrono>
#include <vector>

#include "control/job_registry.h"
#include "switchml/control.pb.h"
#include "switchml/status.h"

namespace switchml {

struct ParsedJoin {
  JobRequest request;                  // for the JobRegistry
  std::vector<sockaddr_in> addresses;  // one per worker thread
  std::chrono::milliseconds join_timeout;
  std::string auth_key;  // empty, or kAuthKeyBytes of job secret
  bool accept_result_multicast = false;
  // A rack switch's forwarded join (JoinRequest.via_switch): its control
  // address; empty for a worker's own join.
  std::string via_switch;
};

// Checks the protocol version, ranges, and the data addresses (numeric IPv4
// with a port: the switch never resolves names a worker sends).
StatusOr<ParsedJoin> ParseJoinRequest(const control::v1::JoinRequest& request);

}  // namespace switchml
