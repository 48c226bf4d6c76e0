#include "p4/bmv2_harness.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <linux/if_packet.h>
#include <net/ethernet.h>
#include <net/if.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <thread>

namespace switchml::p4test {
namespace {

bool Run(const std::string& command) {
  return std::system((command + " >/dev/null 2>&1").c_str()) == 0;
}

uint16_t IpChecksum(const uint8_t* p, size_t n) {
  uint32_t sum = 0;
  for (size_t i = 0; i + 1 < n; i += 2) sum += uint32_t(p[i] << 8 | p[i + 1]);
  while (sum >> 16) sum = (sum & 0xFFFF) + (sum >> 16);
  return uint16_t(~sum);
}

void Put16(uint8_t* p, uint16_t v) {
  p[0] = uint8_t(v >> 8);
  p[1] = uint8_t(v);
}
uint16_t Get16(const uint8_t* p) { return uint16_t(p[0] << 8 | p[1]); }

std::string MacText(const std::array<uint8_t, 6>& m) {
  char text[18];
  std::snprintf(text, sizeof(text), "%02x:%02x:%02x:%02x:%02x:%02x", m[0], m[1], m[2], m[3], m[4],
                m[5]);
  return text;
}

}  // namespace

Endpoint Bmv2Harness::Host(int i, uint16_t port_offset) {
  Endpoint e;
  e.mac = {0x02, 0, 0, 0, 0x01, uint8_t(i)};
  e.ip.s_addr = htonl((10u << 24) | (200u << 16) | uint32_t(i + 1));
  e.port = uint16_t(5000 + i + port_offset);
  return e;
}

Endpoint Bmv2Harness::SwitchEndpoint(uint16_t port) {
  Endpoint e;
  e.mac = {0x02, 0, 0, 0, 0x01, 0xfe};
  e.ip.s_addr = htonl((10u << 24) | (200u << 16) | 254u);
  e.port = port;
  return e;
}

std::string Bmv2Harness::Unavailable() {
  if (std::string(SWITCHML_P4_JSON).empty()) {
    return "p4c, simple_switch or simple_switch_CLI not found when configuring (see p4/README.md)";
  }
  if (geteuid() != 0) return "needs root for network namespaces and raw sockets";
  if (!Run("ip netns list")) return "iproute2 cannot manage network namespaces here";
  return "";
}

std::unique_ptr<Bmv2Harness> Bmv2Harness::Start(std::string* error) {
  std::unique_ptr<Bmv2Harness> h(new Bmv2Harness());
  h->ns_ = "swml-p4t-" + std::to_string(getpid());
  if (!Run("ip netns add " + h->ns_)) {
    *error = "cannot create network namespace " + h->ns_;
    return nullptr;
  }
  // From here on this thread (and what it starts) lives in the namespace.
  h->original_ns_ = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
  const int fd = open(("/run/netns/" + h->ns_).c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0 || setns(fd, CLONE_NEWNET) != 0) {
    *error = "cannot enter network namespace " + h->ns_;
    if (fd >= 0) close(fd);
    return nullptr;
  }
  close(fd);
  Run("sysctl -w net.ipv6.conf.all.disable_ipv6=1");
  Run("sysctl -w net.ipv6.conf.default.disable_ipv6=1");
  Run("ip link set lo up");
  std::string hosts_toml;
  for (int i = 0; i < kHosts; ++i) {
    const std::string host = "h" + std::to_string(i), sw = "s" + std::to_string(i);
    const Endpoint e = Host(i);
    if (!Run("ip link add " + host + " type veth peer name " + sw) ||
        !Run("ip link set " + host + " address " + MacText(e.mac)) ||
        !Run("ip link set " + host + " up") || !Run("ip link set " + sw + " up")) {
      *error = "cannot create the veth pair " + host + "/" + sw;
      return nullptr;
    }
    hosts_toml += "[[host]]\nip = \"" + std::string(inet_ntoa(e.ip)) + "\"\nmac = \"" +
                  MacText(e.mac) + "\"\nport = " + std::to_string(i) + "\n";
  }

  const pid_t pid = fork();
  if (pid == 0) {
    const int null = open("/dev/null", O_WRONLY);
    dup2(null, 1);
    dup2(null, 2);
    execl(SWITCHML_SIMPLE_SWITCH, SWITCHML_SIMPLE_SWITCH, "--thrift-port", "9090", "-i", "0@s0",
          "-i", "1@s1", "-i", "2@s2", "-i", "3@s3", SWITCHML_P4_JSON, nullptr);
    _exit(127);
  }
  h->switch_pid_ = pid;

  for (int i = 0; i < kHosts; ++i) {
    const int s = socket(AF_PACKET, SOCK_RAW | SOCK_CLOEXEC, htons(ETH_P_ALL));
    sockaddr_ll ll{};
    ll.sll_family = AF_PACKET;
    ll.sll_protocol = htons(ETH_P_ALL);
    ll.sll_ifindex = int(if_nametoindex(("h" + std::to_string(i)).c_str()));
    if (s < 0 || bind(s, reinterpret_cast<sockaddr*>(&ll), sizeof(ll)) != 0) {
      *error = "cannot open a raw socket on h" + std::to_string(i);
      if (s >= 0) close(s);
      return nullptr;
    }
    h->sockets_[size_t(i)] = s;
  }

  bmv2::Bmv2Config config;
  config.switch_ip = inet_ntoa(SwitchEndpoint().ip);
  config.switch_mac = MacText(SwitchEndpoint().mac);
  auto hosts = bmv2::ParseHosts(hosts_toml, "test hosts");
  if (!hosts.ok()) {
    *error = hosts.status().ToString();
    return nullptr;
  }
  // The CLI's Python modules (bm_runtime) live with BMv2.
  if (std::string(SWITCHML_BMV2_PYTHONPATH).size() > 0)
    setenv("PYTHONPATH", SWITCHML_BMV2_PYTHONPATH, 1);
  // simple_switch opens its Thrift port a moment after it starts.
  Status last;
  for (int attempt = 0; attempt < 100; ++attempt) {
    auto cli = bmv2::RuntimeCli::Start(
        {SWITCHML_BMV2_PYTHON, SWITCHML_SIMPLE_SWITCH_CLI, "--thrift-port", "9090"},
        std::chrono::seconds(20));
    if (cli.ok()) {
      auto plane = bmv2::Bmv2Target::Create(config, hosts.value(), std::move(cli).value());
      if (!plane.ok()) {
        *error = plane.status().ToString();
        return nullptr;
      }
      h->plane_ = std::move(plane).value();
      return h;
    }
    last = cli.status();
    if (waitpid(pid, nullptr, WNOHANG) == pid) {
      h->switch_pid_ = -1;
      *error = "simple_switch exited at start";
      return nullptr;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  *error = "cannot reach simple_switch: " + last.ToString();
  return nullptr;
}

Bmv2Harness::~Bmv2Harness() {
  plane_.reset();  // ends the CLI first
  for (int s : sockets_) {
    if (s >= 0) close(s);
  }
  if (switch_pid_ > 0) {
    kill(switch_pid_, SIGTERM);
    waitpid(switch_pid_, nullptr, 0);
  }
  if (original_ns_ >= 0) {
    setns(original_ns_, CLONE_NEWNET);
    close(original_ns_);
  }
  if (!ns_.empty()) Run("ip netns del " + ns_);
}

void Bmv2Harness::SendRaw(int host, const std::vector<uint8_t>& frame) {
  [[maybe_unused]] ssize_t n = send(sockets_[size_t(host)], frame.data(), frame.size(), 0);
}

void Bmv2Harness::SendUdp(int host, const Endpoint& src, const Endpoint& dst,
                          const std::vector<uint8_t>& payload) {
  SendRaw(host, UdpFrame(src, dst, payload));
}

std::optional<std::vector<uint8_t>> Bmv2Harness::ReceiveRaw(
    int host, std::chrono::steady_clock::time_point deadline) {
  while (true) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    pollfd fd{sockets_[size_t(host)], POLLIN, 0};
    if (poll(&fd, 1, int(std::max<int64_t>(left.count(), 0))) <= 0) return std::nullopt;
    std::vector<uint8_t> buffer(16384);
    sockaddr_ll from{};
    socklen_t from_len = sizeof(from);
    const ssize_t n = recvfrom(fd.fd, buffer.data(), buffer.size(), 0,
                               reinterpret_cast<sockaddr*>(&from), &from_len);
    // Our own transmissions show up as PACKET_OUTGOING.
    if (n < 14 || from.sll_pkttype == PACKET_OUTGOING) continue;
    buffer.resize(size_t(n));
    return buffer;
  }
}

std::optional<std::vector<uint8_t>> Bmv2Harness::ReceiveEtherType(
    int host, uint16_t ether_type, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (auto frame = ReceiveRaw(host, deadline)) {
    if (Get16(frame->data() + 12) == ether_type) return frame;
  }
  return std::nullopt;
}

std::optional<Frame> Bmv2Harness::Receive(int host, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (auto raw = ReceiveRaw(host, deadline)) {
    const std::vector<uint8_t>& buffer = *raw;
    const size_t n = buffer.size();
    // IPv4 (no options) / UDP only.
    if (n < 42 || Get16(buffer.data() + 12) != 0x0800 || buffer[14] != 0x45 ||
        buffer[14 + 9] != 17) {
      continue;
    }
    Frame f;
    f.bytes = buffer;
    std::memcpy(f.dst.mac.data(), buffer.data(), 6);
    std::memcpy(f.src.mac.data(), buffer.data() + 6, 6);
    std::memcpy(&f.src.ip, buffer.data() + 14 + 12, 4);
    std::memcpy(&f.dst.ip, buffer.data() + 14 + 16, 4);
    const uint8_t* udp = buffer.data() + 14 + 20;
    f.src.port = Get16(udp);
    f.dst.port = Get16(udp + 2);
    const size_t udp_length = Get16(udp + 4);
    if (udp_length < 8 || 14 + 20 + udp_length > n) continue;
    f.udp_payload.assign(udp + 8, udp + udp_length);
    PacketView view;
    if (DecodePacket(f.udp_payload, &view) == DecodeError::kOk) {
      f.is_switchml = true;
      f.header = view.header;
      for (uint16_t j = 0; j < view.header.element_count; ++j) {
        f.words.push_back(LoadBe32(view.payload + 4 * j));
      }
    }
    return f;
  }
  return std::nullopt;
}

void Bmv2Harness::Drain() {
  for (int i = 0; i < kHosts; ++i) {
    while (ReceiveRaw(i, std::chrono::steady_clock::now())) {
    }
  }
}

std::vector<uint8_t> SwitchmlPayload(const PacketHeader& h, const std::vector<uint32_t>& words) {
  std::vector<uint8_t> p(kHeaderBytes + 4 * words.size());
  EncodeHeader(h, p);
  for (size_t j = 0; j < words.size(); ++j) StoreBe32(p.data() + kHeaderBytes + 4 * j, words[j]);
  return p;
}

std::vector<uint8_t> UdpFrame(const Endpoint& src, const Endpoint& dst,
                              const std::vector<uint8_t>& payload) {
  std::vector<uint8_t> f(14 + 20 + 8 + payload.size());
  std::memcpy(f.data(), dst.mac.data(), 6);
  std::memcpy(f.data() + 6, src.mac.data(), 6);
  Put16(f.data() + 12, 0x0800);
  uint8_t* ip = f.data() + 14;
  ip[0] = 0x45;
  Put16(ip + 2, uint16_t(20 + 8 + payload.size()));
  ip[8] = 64;
  ip[9] = 17;
  std::memcpy(ip + 12, &src.ip, 4);
  std::memcpy(ip + 16, &dst.ip, 4);
  Put16(ip + 10, IpChecksum(ip, 20));
  uint8_t* udp = ip + 20;
  Put16(udp, src.port);
  Put16(udp + 2, dst.port);
  Put16(udp + 4, uint16_t(8 + payload.size()));
  std::memcpy(udp + 8, payload.data(), payload.size());
  return f;
}

}  // namespace switchml::p4test
