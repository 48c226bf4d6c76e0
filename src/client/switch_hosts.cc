#include "client/switch_hosts.h"

#include "net/address.h"
#include "switchml/limits.h"

namespace switchml {

std::vector<std::string> SplitSwitchHosts(const std::string& list) {
  std::vector<std::string> hosts;
  size_t begin = 0;
  while (true) {
    const size_t comma = list.find(',', begin);
    std::string entry = list.substr(begin, comma == std::string::npos ? comma : comma - begin);
    const size_t first = entry.find_first_not_of(" \t");
    const size_t last = entry.find_last_not_of(" \t");
    hosts.push_back(first == std::string::npos ? "" : entry.substr(first, last - first + 1));
    if (comma == std::string::npos) return hosts;
    begin = comma + 1;
  }
}

Status CheckSwitchHosts(const std::string& list) {
  const std::vector<std::string> entries = SplitSwitchHosts(list);
  for (const std::string& entry : entries) {
    if (entry.empty()) {
      return InvalidArgument("switch_address='" + list +
                             "' has an empty entry; give HOST[:PORT] or a comma-separated list");
    }
  }
  if (entries.size() > kMaxSwitchHosts) {
    return InvalidArgument("switch_address lists " + std::to_string(entries.size()) +
                           " switch hosts; a job spans at most " + std::to_string(kMaxSwitchHosts));
  }
  return Status::Ok();
}

StatusOr<std::vector<sockaddr_in>> ParseSwitchHosts(const std::string& list) {
  if (Status s = CheckSwitchHosts(list); !s.ok()) return s;
  std::vector<sockaddr_in> hosts;
  for (const std::string& entry : SplitSwitchHosts(list)) {
    auto parsed = net::ParseAddress(entry, kDefaultControlPort);
    if (!parsed.ok()) {
      return Status(parsed.status().code(),
                    "switch_address entry '" + entry + "': " + parsed.status().message());
    }
    for (const sockaddr_in& other : hosts) {
      if (net::SameAddress(other, parsed.value())) {
        return InvalidArgument("switch_address lists " + net::FormatAddress(other) +
                               " twice; each switch host once");
      }
    }
    hosts.push_back(parsed.value());
  }
  return hosts;
}

}  // namespace switchml
