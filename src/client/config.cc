#include "switchml/config.h"

#include <toml++/toml.h>

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "client/switch_hosts.h"
#include "net/packet_auth.h"
#include "transport/transport.h"

namespace switchml {
namespace {

// The one table of configuration fields: name, documentation, member, range.
struct Field {
  const char* name;
  const char* help;
  std::string ContextConfig::*text = nullptr;
  uint32_t ContextConfig::*number = nullptr;
  uint32_t min = 0;
  uint32_t max = UINT32_MAX;
  bool ContextConfig::*flag = nullptr;  // a boolean field (then text and number are null)
};

constexpr uint32_t kMaxMs = 24 * 3600 * 1000;
const Field kFields[] = {
    {"switch_address",
     "control plane of the switch, HOST[:PORT]; several, comma-separated, spread the job's slots "
     "over them (thread t to host t % hosts)",
     &ContextConfig::switch_address},
    {"job_name", "ranks that use the same name form one job", &ContextConfig::job_name},
    {"local_address", "IPv4 address to send from (empty: the route to the switch decides)",
     &ContextConfig::local_address},
    {"rank", "this worker's rank, 0..world_size-1", nullptr, &ContextConfig::rank, 0,
     kMaxWorldSize - 1},
    {"world_size", "number of workers in the job", nullptr, &ContextConfig::world_size, 1,
     kMaxWorldSize},
    {"threads", "I/O threads, each with its own socket and slice of the pool", nullptr,
     &ContextConfig::threads, 1, kMaxThreads},
    {"elements_per_packet",
     "int32 values per packet, 32..8192; 0: the largest that fits the path MTU and the switch",
     nullptr, &ContextConfig::elements_per_packet, 0, kMaxElementsPerPacket},
    {"pool_slots", "switch slots reserved for this job: the most packets in flight", nullptr,
     &ContextConfig::pool_slots, 1, 65535},
    {"window_slots",
     "packets in flight; 0: twice the measured bandwidth-delay product (at most pool_slots)",
     nullptr, &ContextConfig::window_slots, 0, 65535},
    {"retransmit_timeout_us",
     "retransmission timeout before a round trip was measured (microseconds)", nullptr,
     &ContextConfig::retransmit_timeout_us, 10, kMaxMs},
    {"min_retransmit_timeout_us",
     "floor of the retransmission timeout measured from the round trip (microseconds)", nullptr,
     &ContextConfig::min_retransmit_timeout_us, 1, kMaxMs},
    {"max_retransmit_timeout_us", "retransmission back-off cap (microseconds)", nullptr,
     &ContextConfig::max_retransmit_timeout_us, 10, kMaxMs},
    {"failure_timeout_ms",
     "no progress for this long fails the job when the switch went quiet (milliseconds)", nullptr,
     &ContextConfig::failure_timeout_ms, 1, kMaxMs},
    {"operation_timeout_ms",
     "an all-reduce that waits this long without progress on ranks the switch still misses "
     "fails, naming them (milliseconds; torch: the group's timeout)",
     nullptr, &ContextConfig::operation_timeout_ms, 1, kMaxMs},
    {"join_timeout_ms", "how long to wait for every rank to join (milliseconds)", nullptr,
     &ContextConfig::join_timeout_ms, 1, kMaxMs},
    {"socket_buffer_bytes", "UDP socket send and receive buffer size", nullptr,
     &ContextConfig::socket_buffer_bytes, 65536, 1u << 30},
    {"auth_key", "job secret, 64 hex digits: authenticate every packet (empty: off)",
     &ContextConfig::auth_key},
    {"result_multicast",
     "accept results by host-local multicast when every rank is on the switch's host", nullptr,
     nullptr, 0, 0, &ContextConfig::result_multicast},
    {"busy_poll_us",
     "out of packets, poll this long (microseconds, yielding the CPU) before sleeping; 0: off",
     nullptr, &ContextConfig::busy_poll_us, 0, kMaxBusyPollUs},
    {"non_finite_error",
     "an all-reduce whose float inputs hold NaN or Inf fails with DATA_LOSS (false: it "
     "succeeds, and the chunks holding them are NaN on every rank, as with Gloo)",
     nullptr, nullptr, 0, 0, &ContextConfig::non_finite_error},
    {"udp_offload",
     "send runs of packets as segmented super-datagrams and receive coalesced ones (UDP GSO/GRO) "
     "where the kernel has them",
     nullptr, nullptr, 0, 0, &ContextConfig::udp_offload},
    {"transport",
     "how data packets travel: udp (kernel UDP sockets), af_xdp (AF_XDP sockets, kernel "
     "bypass) or dpdk (a DPDK poll-mode port)",
     &ContextConfig::transport},
    {"interface", "af_xdp: the network interface (empty: the one facing the switch)",
     &ContextConfig::interface},
    {"dpdk_eal_args", "dpdk: the EAL arguments, separated by spaces",
     &ContextConfig::dpdk_eal_args},
    {"dpdk_port", "dpdk: the port's device name (empty: the only one)", &ContextConfig::dpdk_port},
    {"dpdk_address", "dpdk: the port's IPv4 address (empty: the kernel route's)",
     &ContextConfig::dpdk_address},
};

// A TOML basic string.
std::string Quoted(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (uint8_t(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\u%04x", c);
      out += buf;
      continue;
    }
    out += c;
  }
  return out + "\"";
}

const Field* FindField(const std::string& name) {
  for (const Field& f : kFields) {
    if (name == f.name) return &f;
  }
  return nullptr;
}

Status UnknownField(const std::string& name) {
  std::string known;
  for (const Field& f : kFields) known += std::string(known.empty() ? "" : ", ") + f.name;
  return InvalidArgument("unknown configuration key '" + name + "'; known keys: " + known);
}

// Every number within its field's range.
Status CheckRanges(const ContextConfig& c) {
  for (const Field& f : kFields) {
    if (f.number == nullptr) continue;
    const uint32_t v = c.*f.number;
    if (v < f.min || v > f.max) {
      return InvalidArgument(std::string(f.name) + "=" + std::to_string(v) + " is out of range " +
                             std::to_string(f.min) + ".." + std::to_string(f.max) + " (" + f.help +
                             ")");
    }
  }
  return Status::Ok();
}

// The switch's hosts, the job, the transport, the key and the rank.
Status CheckPeers(const ContextConfig& c) {
  if (c.switch_address.empty()) return InvalidArgument("switch_address must not be empty");
  if (Status s = CheckSwitchHosts(c.switch_address); !s.ok()) return s;
  const std::vector<std::string> hosts = SplitSwitchHosts(c.switch_address);
  if (c.threads < hosts.size()) {
    return InvalidArgument("threads=" + std::to_string(c.threads) + " is fewer than the " +
                           std::to_string(hosts.size()) +
                           " switch hosts in switch_address: every host needs an I/O thread of "
                           "its own; set threads to " +
                           std::to_string(hosts.size()) + " or more");
  }
  if (c.job_name.empty()) return InvalidArgument("job_name must not be empty");
  if (Status s = transport::CheckTransportName(c.transport, "transport"); !s.ok()) return s;
  if (!c.auth_key.empty()) {
    if (Status s = net::ParseAuthKey(c.auth_key).status(); !s.ok()) return s;
  }
  if (c.rank >= c.world_size) {
    return InvalidArgument("rank=" + std::to_string(c.rank) +
                           " must be less than world_size=" + std::to_string(c.world_size));
  }
  return Status::Ok();
}

// Packet size, window, threads and pool against each other.
Status CheckPacketsAndSlots(const ContextConfig& c) {
  if (Status s = transport::CheckElementsPerPacket(c.transport, c.elements_per_packet,
                                                   "elements_per_packet", " (or 0: chosen)");
      !s.ok()) {
    return s;
  }
  if (c.elements_per_packet != 0 && c.elements_per_packet < kMinElementsPerPacket) {
    return InvalidArgument("elements_per_packet=" + std::to_string(c.elements_per_packet) +
                           " is out of range " + std::to_string(kMinElementsPerPacket) + ".." +
                           std::to_string(kMaxElementsPerPacket) + " (or 0 to fit the path MTU)");
  }
  if (c.window_slots > c.pool_slots) {
    return InvalidArgument("window_slots=" + std::to_string(c.window_slots) +
                           " exceeds pool_slots=" + std::to_string(c.pool_slots) +
                           "; raise pool_slots or use 0 (measured)");
  }
  if (c.window_slots != 0 && c.window_slots < c.threads) {
    return InvalidArgument("window_slots=" + std::to_string(c.window_slots) +
                           " is less than threads=" + std::to_string(c.threads) +
                           "; every thread needs a packet in flight");
  }
  if (c.threads > c.pool_slots) {
    return InvalidArgument("threads=" + std::to_string(c.threads) + " exceeds pool_slots=" +
                           std::to_string(c.pool_slots) + "; every thread needs a slot");
  }
  return Status::Ok();
}

// The timeouts in the order they nest.
Status CheckTimeouts(const ContextConfig& c) {
  if (c.retransmit_timeout_us > c.max_retransmit_timeout_us) {
    return InvalidArgument(
        "retransmit_timeout_us=" + std::to_string(c.retransmit_timeout_us) +
        " exceeds max_retransmit_timeout_us=" + std::to_string(c.max_retransmit_timeout_us));
  }
  if (c.min_retransmit_timeout_us > c.max_retransmit_timeout_us) {
    return InvalidArgument(
        "min_retransmit_timeout_us=" + std::to_string(c.min_retransmit_timeout_us) +
        " exceeds max_retransmit_timeout_us=" + std::to_string(c.max_retransmit_timeout_us));
  }
  if (uint64_t(c.failure_timeout_ms) * 1000 <= c.max_retransmit_timeout_us) {
    return InvalidArgument("failure_timeout_ms=" + std::to_string(c.failure_timeout_ms) +
                           " must exceed max_retransmit_timeout_us=" +
                           std::to_string(c.max_retransmit_timeout_us) + " (in milliseconds)");
  }
  return Status::Ok();
}

}  // namespace

Status ContextConfig::Validate() const {
  for (Status (*check)(const ContextConfig&) :
       {CheckRanges, CheckPeers, CheckPacketsAndSlots, CheckTimeouts}) {
    if (Status s = check(*this); !s.ok()) return s;
  }
  return Status::Ok();
}

Status ContextConfig::Set(const std::string& name, const std::string& value) {
  const Field* f = FindField(name);
  if (f == nullptr) return UnknownField(name);
  if (f->text != nullptr) {
    this->*f->text = value;
    return Status::Ok();
  }
  if (f->flag != nullptr) {
    if (value != "true" && value != "false") {
      return InvalidArgument(name + "='" + value + "' is not true or false (" + f->help + ")");
    }
    this->*f->flag = value == "true";
    return Status::Ok();
  }
  char* end = nullptr;
  const unsigned long long v = std::strtoull(value.c_str(), &end, 10);
  if (value.empty() || *end != '\0' || value[0] == '-' || v > UINT32_MAX) {
    return InvalidArgument(name + "='" + value + "' is not a non-negative integer (" + f->help +
                           ")");
  }
  this->*f->number = uint32_t(v);
  return Status::Ok();
}

StatusOr<ContextConfig> ContextConfig::FromTomlString(const std::string& text,
                                                      const ContextConfig& defaults) {
  toml::table table;
  try {
    table = toml::parse(text);
  } catch (const toml::parse_error& e) {
    std::ostringstream where;
    where << e.source().begin;
    return InvalidArgument(std::string("configuration is not valid TOML at ") + where.str() + ": " +
                           std::string(e.description()));
  }
  ContextConfig config = defaults;
  for (auto&& [key, node] : table) {
    const std::string name(key.str());
    const Field* f = FindField(name);
    if (f == nullptr) return UnknownField(name);
    if (f->text != nullptr) {
      if (!node.is_string()) return InvalidArgument("'" + name + "' must be a string");
      config.*f->text = *node.value<std::string>();
    } else if (f->flag != nullptr) {
      if (!node.is_boolean()) return InvalidArgument("'" + name + "' must be true or false");
      config.*f->flag = *node.value<bool>();
    } else {
      const std::optional<int64_t> v = node.value<int64_t>();
      if (!node.is_integer() || !v || *v < 0 || *v > int64_t(UINT32_MAX)) {
        return InvalidArgument("'" + name + "' must be a non-negative integer (" + f->help + ")");
      }
      config.*f->number = uint32_t(*v);
    }
  }
  return config;
}

StatusOr<ContextConfig> ContextConfig::FromTomlFile(const std::string& path,
                                                    const ContextConfig& defaults) {
  std::ifstream in(path);
  if (!in) return InvalidArgument("cannot read configuration file '" + path + "'");
  std::stringstream text;
  text << in.rdbuf();
  auto config = FromTomlString(text.str(), defaults);
  if (!config.ok()) return InvalidArgument(path + ": " + config.status().message());
  return config;
}

StatusOr<ContextConfig> ContextConfig::FromTomlFile(const std::string& path) {
  return FromTomlFile(path, ContextConfig{});
}

StatusOr<ContextConfig> ContextConfig::FromTomlString(const std::string& text) {
  return FromTomlString(text, ContextConfig{});
}

Status ContextConfig::ApplyEnvironment() {
  for (const Field& f : kFields) {
    std::string variable = "SWITCHML_";
    for (const char* c = f.name; *c != '\0'; ++c) variable += char(std::toupper(uint8_t(*c)));
    if (const char* value = std::getenv(variable.c_str())) {
      if (Status s = Set(f.name, value); !s.ok())
        return InvalidArgument(variable + ": " + s.message());
    }
  }
  return Status::Ok();
}

std::vector<std::string> ContextConfig::FieldNames() {
  std::vector<std::string> names;
  for (const Field& f : kFields) names.push_back(f.name);
  return names;
}

std::string ContextConfig::ToToml() const {
  std::string out;
  for (const Field& f : kFields) {
    out += std::string("# ") + f.help + "\n" + f.name + " = ";
    if (f.text != nullptr) {
      out += Quoted(this->*f.text) + "\n";
    } else if (f.flag != nullptr) {
      out += std::string(this->*f.flag ? "true" : "false") + "\n";
    } else {
      out += std::to_string(this->*f.number) + "\n";
    }
  }
  return out;
}

}  // namespace switchml
