#include "switch/join_request.h"

#include "net/address.h"
#include "wire/wire_format.h"

namespace switchml {
namespace {

constexpr auto kDefaultJoinTimeout = std::chrono::seconds(60);

// "a.b.c.d:port" with a nonzero port; no name resolution.
StatusOr<sockaddr_in> ParseNumericAddress(const std::string& text) {
  auto a = net::ParseAddress(text, 0, net::HostNames::kRefuse);
  if (!a.ok() || a.value().sin_port == 0) {
    return InvalidArgument("data address '" + text.substr(0, 64) +
                           "' is not IPv4ADDRESS:PORT with a nonzero port");
  }
  return a;
}

}  // namespace

StatusOr<ParsedJoin> ParseJoinRequest(const control::v1::JoinRequest& req) {
  if (req.protocol_version() != kWireVersion) {
    return FailedPrecondition("the worker speaks wire version " +
                              std::to_string(req.protocol_version()) + ", this switch " +
                              std::to_string(kWireVersion) +
                              "; run the same switchml release on workers and switch");
  }
  if (req.job_name().empty() || req.job_name().size() > 256) {
    return InvalidArgument("job_name must have 1..256 characters");
  }
  if (req.data_addresses_size() == 0 || uint32_t(req.data_addresses_size()) > kMaxThreads) {
    return InvalidArgument("a worker needs 1.." + std::to_string(kMaxThreads) +
                           " data addresses (one per thread)");
  }
  if (req.world_size() == 0 || req.world_size() > kMaxWorldSize || req.rank() >= req.world_size() ||
      req.elements_per_packet() > 65535 || req.path_elements_per_packet() > 65535 ||
      req.pool_slots() == 0 || req.pool_slots() > 65535) {
    return InvalidArgument(
        "rank=" + std::to_string(req.rank()) + ", world_size=" + std::to_string(req.world_size()) +
        ", elements_per_packet=" + std::to_string(req.elements_per_packet()) +
        " or pool_slots=" + std::to_string(req.pool_slots()) + " is out of range");
  }
  if (!req.auth_key().empty() && req.auth_key().size() != 32) {
    return InvalidArgument("auth_key must be empty or 32 bytes, not " +
                           std::to_string(req.auth_key().size()));
  }
  ParsedJoin join;
  if (!req.via_switch().empty()) {
    auto via = net::ParseAddress(req.via_switch(), 0, net::HostNames::kRefuse);
    if (!via.ok() || via.value().sin_port == 0) {
      return InvalidArgument("via_switch '" + req.via_switch().substr(0, 64) +
                             "' is not IPv4ADDRESS:PORT with a nonzero port");
    }
    join.via_switch = net::FormatAddress(via.value());
  }
  join.auth_key = req.auth_key();
  join.accept_result_multicast = req.accept_result_multicast();
  const size_t threads = size_t(req.data_addresses_size());
  if (threads > req.pool_slots()) {
    return InvalidArgument("rank " + std::to_string(req.rank()) + " has " +
                           std::to_string(threads) + " threads but asks for only " +
                           std::to_string(req.pool_slots()) +
                           " pool slots; every thread needs at least one slot");
  }
  for (const std::string& text : req.data_addresses()) {
    auto a = ParseNumericAddress(text);
    if (!a.ok()) return a.status();
    join.addresses.push_back(a.value());
  }
  join.request = JobRequest{req.job_name(),
                            uint16_t(req.rank()),
                            uint16_t(req.world_size()),
                            uint16_t(req.elements_per_packet()),
                            uint16_t(req.pool_slots()),
                            uint16_t(req.path_elements_per_packet())};
  join.join_timeout = req.join_timeout_ms() ? std::chrono::milliseconds(req.join_timeout_ms())
                                            : std::chrono::milliseconds(kDefaultJoinTimeout);
  return join;
}

}  // namespace switchml
