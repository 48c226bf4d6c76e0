// switchml-switch-pps: packets per second per core of the software switch's
// real UDP path, against a plain UDP echo server with the same batching
// (recvmmsg/sendmmsg of 64), side by side in one run on loopback.
//
// One load generator thread plays `--workers` workers: for each of `--slots`
// slots it sends every worker's contribution, waits until each worker got
// its answer (a result from the switch, the echo from the echo server), then
// sends the slot's next chunk. The servers' work is measured in CPU time of
// the server thread, so the figure is "packets per core-second" even where
// the generator, not the server, sets the pace. Prints one JSON object.
//
// --udp-offload (default true) lets the switch and the generator use UDP
// segmentation and coalescing, as they do by default; the echo server stays
// a plain recvmmsg/sendmmsg loop, the kernel's per-datagram baseline.
//
// --transport af_xdp measures the switch over AF_XDP beside the switch over
// kernel UDP and the echo server, each side in its own network namespace
// (bench/netns_pps builds them: a veth pair, MTU 1500).
//
// --shards N runs N servers of each kind at once, as the sharded switch
// (--data-threads N) does: each with its own socket and pool and its own
// generator thread; the figures are summed over the shards. Packets per
// core-second that hold from 1 to N shards mean nothing is shared; packets
// per wall second grow with N only where 2N cores are free.
#include <arpa/inet.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <time.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "control/job_registry.h"
#include "switch/data_thread.h"
#include "switchml/version.h"
#include "transport/transport.h"
#include "transport/udp/udp_socket.h"
#include "transport/udp/udp_transport.h"
#include "wire/wire_format.h"

namespace {

using namespace switchml;
namespace udp = switchml::transport::udp;
using Clock = std::chrono::steady_clock;
constexpr size_t kBatch = 64;  // the switch's batch (src/switch/data_thread.cc)

double ThreadCpuSeconds(clockid_t clock) {
  timespec ts{};
  clock_gettime(clock, &ts);
  return double(ts.tv_sec) + double(ts.tv_nsec) * 1e-9;
}

// Where the servers and the generator's sockets live: loopback by default;
// with --server-netns / --generator-netns, two network namespaces (a veth
// between them), entered by the main thread before it opens each side.
struct Placement {
  std::string server_netns, generator_netns;
  sockaddr_in server{}, generator{};
};
Placement g_place;

void EnterNetns(const std::string& name) {
  if (name.empty()) return;
  const int fd = open(("/var/run/netns/" + name).c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0 || setns(fd, CLONE_NEWNET) != 0) {
    std::fprintf(stderr, "cannot enter network namespace %s: %s\n", name.c_str(),
                 std::strerror(errno));
    std::exit(2);
  }
  close(fd);
}
sockaddr_in ServerSide() {
  EnterNetns(g_place.server_netns);
  return g_place.server;
}
sockaddr_in GeneratorSide() {
  EnterNetns(g_place.generator_netns);
  return g_place.generator;
}

// The echo server: what the switch would cost with no aggregation at all.
class EchoServer {
 public:
  explicit EchoServer(size_t packet_bytes)
      : socket_(udp::UdpSocket::Bind(ServerSide(), 8 << 20).value()),
        recv_(kBatch, packet_bytes + 1),
        send_(kBatch, 0) {}
  void Start() {
    thread_ = std::thread([this] {
      pthread_getcpuclockid(pthread_self(), &clock_);
      ready_.store(true);
      pollfd fd{socket_.fd(), POLLIN, 0};
      while (!stop_.load(std::memory_order_relaxed)) {
        poll(&fd, 1, 100);
        for (int round = 0; round < 64; ++round) {
          const int n = recv_.Receive(socket_.fd());
          if (n == 0) break;
          for (int i = 0; i < n; ++i) send_.AddRef(socket_.fd(), recv_.packet(i), recv_.source(i));
          send_.Flush(socket_.fd());
        }
      }
    });
    while (!ready_.load()) std::this_thread::yield();
  }
  void Stop() {
    stop_.store(true);
    thread_.join();
  }
  sockaddr_in address() const { return socket_.LocalAddress(); }
  double cpu_seconds() const { return ThreadCpuSeconds(clock_); }

 private:
  udp::UdpSocket socket_;
  udp::RecvBatch recv_;
  udp::SendBatch send_;
  std::atomic<bool> stop_{false}, ready_{false};
  clockid_t clock_{};
  std::thread thread_;
};

// Plays the workers; returns the answers received in `seconds`. Each worker
// sends the contributions that one receive batch's answers released as one
// batch, with UDP segmentation and coalescing when `offload`.
uint64_t Generate(std::vector<udp::UdpSocket>& workers, const sockaddr_in& server, uint32_t job,
                  uint16_t slots, uint16_t k, double seconds, bool offload) {
  const size_t n = workers.size();
  std::vector<uint8_t> packet(PacketBytes(k), 0);
  std::vector<uint32_t> chunk(slots);
  std::vector<uint16_t> answered(slots, 0);
  for (uint16_t s = 0; s < slots; ++s) chunk[s] = s;
  std::vector<udp::SendBatch> sends;
  bool coalesced = offload;
  for (auto& w : workers) {
    sends.emplace_back(kBatch, packet.size());
    sends.back().set_segmentation(offload && udp::SegmentationSupported(w.fd()));
    coalesced = coalesced && udp::EnableReceiveCoalescing(w.fd());
  }
  udp::RecvBatch recv(coalesced ? 4 : kBatch, MaxPacketBytes(k) + 1, coalesced);
  auto contribute = [&](uint16_t s) {
    for (size_t w = 0; w < n; ++w) {
      PacketHeader h;
      h.job = job;
      h.chunk = chunk[s];
      h.rank = uint16_t(w);
      h.slot = s;
      h.element_count = k;
      h.version = uint8_t((chunk[s] / slots) % 2);
      EncodeHeader(h, packet);
      sends[w].Add(workers[w].fd(), packet, &server);
    }
  };
  auto flush = [&] {
    for (size_t w = 0; w < n; ++w) sends[w].Flush(workers[w].fd());
  };
  for (uint16_t s = 0; s < slots; ++s) contribute(s);
  flush();
  std::vector<pollfd> fds;
  for (auto& w : workers) fds.push_back({w.fd(), POLLIN, 0});
  uint64_t answers = 0;
  const auto end = Clock::now() + std::chrono::duration<double>(seconds);
  while (Clock::now() < end) {
    if (poll(fds.data(), fds.size(), 200) <= 0) {
      for (uint16_t s = 0; s < slots; ++s) contribute(s);  // a lost packet: go again
      flush();
      continue;
    }
    for (size_t w = 0; w < n; ++w) {
      while (const int got = recv.Receive(workers[w].fd())) {
        for (int i = 0; i < got; ++i) {
          PacketView view;
          if (DecodePacket(recv.packet(i), &view) != DecodeError::kOk) continue;
          const uint16_t s = view.header.slot;
          if (s >= slots || view.header.chunk != chunk[s]) continue;
          ++answers;
          if (++answered[s] == n) {
            answered[s] = 0;
            chunk[s] += slots;
            contribute(s);
          }
        }
        flush();
      }
    }
  }
  return answers;
}

struct Result {
  double pps_per_core = 0;  // answers per second of the servers' CPU time, all shards
  double cpu_load = 0;      // servers' CPU seconds per second
  double pps = 0;           // answers per second of wall time, all shards
};

std::vector<udp::UdpSocket> WorkerSockets(int n) {
  std::vector<udp::UdpSocket> sockets;
  const sockaddr_in local = GeneratorSide();
  for (int w = 0; w < n; ++w) sockets.push_back(udp::UdpSocket::Bind(local, 8 << 20).value());
  return sockets;
}

// One generator thread per server (shard), each with its own worker sockets,
// all at once; the servers' CPU time from `cpu_seconds`.
template <typename CpuSeconds>
Result Drive(const std::vector<sockaddr_in>& servers, const std::vector<uint32_t>& jobs,
             std::vector<std::vector<udp::UdpSocket>>& workers, uint16_t slots, uint16_t k,
             double seconds, bool offload, CpuSeconds cpu_seconds) {
  std::vector<uint64_t> answers(servers.size());
  const double cpu0 = cpu_seconds();
  const auto t0 = Clock::now();
  std::vector<std::thread> generators;
  for (size_t g = 0; g < servers.size(); ++g) {
    generators.emplace_back([&, g] {
      answers[g] = Generate(workers[g], servers[g], jobs[g], slots, k, seconds, offload);
    });
  }
  for (auto& t : generators) t.join();
  const double wall = std::chrono::duration<double>(Clock::now() - t0).count();
  const double cpu = cpu_seconds() - cpu0;
  uint64_t total = 0;
  for (uint64_t a : answers) total += a;
  return {double(total) / cpu, cpu / wall, double(total) / wall};
}

// The echo server stays plain (no offloads): the kernel's per-datagram cost.
Result RunEcho(int n, int shards, uint16_t slots, uint16_t k, double seconds, bool offload) {
  std::vector<std::unique_ptr<EchoServer>> echo;
  std::vector<sockaddr_in> servers;
  std::vector<std::vector<udp::UdpSocket>> workers;
  for (int i = 0; i < shards; ++i) {
    echo.push_back(std::make_unique<EchoServer>(PacketBytes(k)));
    echo.back()->Start();
    servers.push_back(echo.back()->address());
    workers.push_back(WorkerSockets(n));
  }
  const Result r = Drive(servers, std::vector<uint32_t>(size_t(shards), 1), workers, slots, k,
                         seconds, offload, [&] {
                           double cpu = 0;
                           for (auto& e : echo) cpu += e->cpu_seconds();
                           return cpu;
                         });
  for (auto& e : echo) e->Stop();
  return r;
}

// `shards` data threads as the sharded switch runs them: each its own socket
// and pool, nothing shared.
Result RunSwitch(int n, int shards, uint16_t slots, uint16_t k, double seconds, bool offload,
                 const std::string& transport_name) {
  DataPlaneConfig config;
  config.pool_slots = slots;
  config.max_elements_per_packet = k;
  config.max_workers = uint16_t(n);
  std::vector<std::unique_ptr<DataThread>> data;
  std::vector<sockaddr_in> servers;
  std::vector<uint32_t> jobs;
  std::vector<clockid_t> clocks(static_cast<size_t>(shards));
  std::vector<std::vector<udp::UdpSocket>> workers;
  std::shared_ptr<transport::Transport> transport =
      transport::MakeTransport(transport_name).value();
  // An AF_XDP switch sees frames as the wire carries them: the generator
  // sends each datagram on its own (veth would pass a super-datagram whole).
  const bool generator_offload = offload && transport_name == "udp";
  for (int i = 0; i < shards; ++i) {
    auto opened =
        transport->Open(ServerSide(), DataThread::EndpointOptions(config, 8 << 20, offload));
    if (!opened.ok()) {
      std::fprintf(stderr, "%s\n", opened.status().ToString().c_str());
      std::exit(2);
    }
    auto endpoint = std::move(opened).value();
    servers.push_back(endpoint->local_address());
    data.push_back(std::make_unique<DataThread>(config, std::move(endpoint), 0, 1,
                                                std::chrono::microseconds(0)));
    workers.push_back(WorkerSockets(n));
    DataThread& shard = *data.back();
    shard.Start();
    JobRegistry registry(config);
    for (int r = 0; r < n; ++r) {
      (void)registry.Join(JobRequest{"pps", uint16_t(r), uint16_t(n), k, slots});
    }
    const JobAssignment assignment = *registry.Assignment("pps");
    const JobId id = assignment.id;
    std::vector<sockaddr_in> book;
    for (auto& w : workers.back()) book.push_back(w.LocalAddress());
    if (Status s = shard.InstallJob(ToRegistration(assignment), 1, book, std::nullopt); !s.ok()) {
      std::fprintf(stderr, "%s\n", s.ToString().c_str());
      std::exit(1);
    }
    clocks[size_t(i)] = shard.cpu_clock();
    jobs.push_back(id.value());
  }
  // Each result answers one contribution: one packet in, one out, as echo.
  const Result r = Drive(servers, jobs, workers, slots, k, seconds, generator_offload, [&] {
    double cpu = 0;
    for (clockid_t c : clocks) cpu += ThreadCpuSeconds(c);
    return cpu;
  });
  for (auto& d : data) d->Stop();
  // The AF_XDP endpoints detach their XDP program in the namespace it is in.
  (void)ServerSide();
  data.clear();
  return r;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "switchml-switch-pps: the switch's packets per core-second against a UDP echo server"};
  app.set_version_flag("--version", std::string("switchml-switch-pps ") + SWITCHML_VERSION);
  app.option_defaults()->always_capture_default();  // --help shows every default
  int workers = 2, rounds = 3, shards = 1;
  uint16_t slots = 64, k = 256;
  double seconds = 2;
  bool offload = true;
  app.add_option("--workers", workers, "workers the generator plays")->check(CLI::Range(1, 64));
  app.add_option("--slots", slots, "slots in flight")->check(CLI::Range(1, 4096));
  app.add_option("--elements-per-packet", k, "int32 values per packet")->check(CLI::Range(1, 8192));
  app.add_option("--seconds", seconds, "length of each measurement");
  app.add_option("--rounds", rounds, "alternating measurements of each server")
      ->check(CLI::Range(1, 100));
  app.add_option("--shards", shards,
                 "server threads, each with its own socket, pool and generator thread")
      ->check(CLI::Range(1, 64));
  app.add_option("--udp-offload", offload,
                 "the switch and the generator use UDP segmentation and coalescing (the echo "
                 "server never does)");
  std::string transport_name = "udp", server_address = "127.0.0.1", generator_address = "127.0.0.1";
  app.add_option("--transport", transport_name,
                 "the switch's transport: udp, or af_xdp (then measured beside the switch over "
                 "udp; needs --server-netns etc.: bench/netns_pps sets them up)")
      ->check(CLI::IsMember(transport::TransportNames()));
  app.add_option("--server-netns", g_place.server_netns, "network namespace of the servers");
  app.add_option("--generator-netns", g_place.generator_netns,
                 "network namespace of the load generator");
  app.add_option("--server-address", server_address, "the servers' IPv4 address");
  app.add_option("--generator-address", generator_address, "the generator's IPv4 address");
  CLI11_PARSE(app, argc, argv);
  for (auto [text, address] : {std::pair{&server_address, &g_place.server},
                               std::pair{&generator_address, &g_place.generator}}) {
    address->sin_family = AF_INET;
    if (inet_pton(AF_INET, text->c_str(), &address->sin_addr) != 1) {
      std::fprintf(stderr, "'%s' is not a numeric IPv4 address\n", text->c_str());
      return 2;
    }
  }
  if (shards > 1 && transport_name == "af_xdp") {
    std::fprintf(stderr, "--transport af_xdp serves one shard per interface; use --shards 1\n");
    return 2;
  }

  std::vector<double> sw, echo, sw_load, echo_load, sw_pps, echo_pps, udp_sw;
  for (int r = 0; r < rounds; ++r) {
    const Result e = RunEcho(workers, shards, slots, k, seconds, offload);
    const Result s = RunSwitch(workers, shards, slots, k, seconds, offload, transport_name);
    if (transport_name != "udp") {
      udp_sw.push_back(RunSwitch(workers, shards, slots, k, seconds, offload, "udp").pps_per_core);
      std::fprintf(stderr, "round %d/%d: the switch over udp %.0f pkt/core-s\n", r + 1, rounds,
                   udp_sw.back());
    }
    echo.push_back(e.pps_per_core);
    echo_load.push_back(e.cpu_load);
    echo_pps.push_back(e.pps);
    sw.push_back(s.pps_per_core);
    sw_load.push_back(s.cpu_load);
    sw_pps.push_back(s.pps);
    std::fprintf(stderr,
                 "round %d/%d: switch %.0f pkt/core-s, %.0f pkt/s (load %.2f); "
                 "echo %.0f pkt/core-s, %.0f pkt/s (load %.2f)\n",
                 r + 1, rounds, s.pps_per_core, s.pps, s.cpu_load, e.pps_per_core, e.pps,
                 e.cpu_load);
  }
  nlohmann::json j;
  j["benchmark"] = "switch_pps";
  j["workers"] = workers;
  j["shards"] = shards;
  j["slots"] = slots;
  j["elements_per_packet"] = k;
  j["udp_offload"] = offload;
  j["packet_bytes"] = PacketBytes(k);
  j["switch_packets_per_core_second"] = Median(sw);
  j["echo_packets_per_core_second"] = Median(echo);
  j["switch_packets_per_second"] = Median(sw_pps);
  j["echo_packets_per_second"] = Median(echo_pps);
  j["switch_server_cpu_load"] = Median(sw_load);
  j["echo_server_cpu_load"] = Median(echo_load);
  j["ratio_switch_to_echo"] = Median(sw) / Median(echo);
  j["transport"] = transport_name;
  if (!udp_sw.empty()) {
    j["udp_switch_packets_per_core_second"] = Median(udp_sw);
    j["ratio_switch_to_udp_switch"] = Median(sw) / Median(udp_sw);
  }
  std::printf("%s\n", j.dump().c_str());
  return 0;
}
