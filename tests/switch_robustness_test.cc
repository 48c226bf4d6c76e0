// The switch daemon under abuse: thousands of jobs, and hostile packets sprayed
// at a running job.
#include <arpa/inet.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fstream>
#include <functional>
#include <random>
#include <regex>
#include <sstream>

#include "net/packet_auth.h"
#include "net_test_util.h"
#include "switch/control_service.h"
#include "switchml/control.grpc.pb.h"
#include "wire/wire_format.h"

namespace switchml {
namespace {

using testing::Configs;
using testing::ForEachRank;
using testing::StartAll;
using testing::StartSwitch;
using testing::WorkerConfig;

size_t ResidentBytes() {
  std::ifstream statm("/proc/self/statm");
  size_t pages = 0, resident = 0;
  statm >> pages >> resident;
  return resident * size_t(sysconf(_SC_PAGESIZE));
}

// The value of one Prometheus sample (a line "NAME VALUE"), or -1.
int64_t Metric(const std::string& text, const std::string& name) {
  const size_t at = ("\n" + text).find("\n" + name + " ");
  return at == std::string::npos ? -1 : std::stoll(text.substr(at + name.size() + 1));
}

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif

TEST(SwitchResources, TenThousandJobsKeepMemoryFlat) {
  if (kSanitized) {
    GTEST_SKIP() << "sanitizers hold freed memory in quarantine; resident memory is measured in "
                    "the optimized build (and LeakSanitizer checks for leaks here)";
  }
  auto sw = StartSwitch(/*pool_slots=*/256);
  ASSERT_NE(sw, nullptr);
  auto stub = control::v1::Control::NewStub(grpc::CreateChannel(
      "127.0.0.1:" + std::to_string(sw->control_port()), grpc::InsecureChannelCredentials()));
  auto one_job = [&](int i) {
    control::v1::JoinRequest join;
    join.set_protocol_version(kWireVersion);
    join.set_job_name("job-" + std::to_string(i));
    join.set_world_size(1);
    join.add_data_addresses("127.0.0.1:9");
    join.set_elements_per_packet(256);
    join.set_pool_slots(uint32_t(1 + i % 200));
    grpc::ClientContext context;
    auto reader = stub->Join(&context, join);
    control::v1::JobEvent event;
    ASSERT_TRUE(reader->Read(&event));
    ASSERT_TRUE(event.has_assignment());
    control::v1::LeaveRequest leave;
    leave.set_job_name(join.job_name());
    leave.set_token(event.assignment().token());
    grpc::ClientContext leave_context;
    control::v1::LeaveReply reply;
    ASSERT_TRUE(stub->Leave(&leave_context, leave, &reply).ok());
    reader->Finish();
  };
  for (int i = 0; i < 1000; ++i) one_job(i);  // warm up allocators and gRPC
  const size_t before = ResidentBytes();
  for (int i = 1000; i < 11000; ++i) one_job(i);
  const size_t after = ResidentBytes();
  EXPECT_LT(after, before + (8u << 20))
      << "resident memory grew from " << before << " to " << after;
  const std::string stats = sw->PrometheusText();
  EXPECT_EQ(Metric(stats, "switchml_pool_free_slots"), 256) << stats;
  EXPECT_EQ(Metric(stats, "switchml_jobs"), 0) << "jobs left over";
  EXPECT_NE(stats.find("switchml_job_ended{job=\"job-10999\",id=\""), std::string::npos)
      << "the last job's series, kept for the grace period";
  // Of the ended jobs, only the newest kMaxEndedJobs are kept.
  size_t ended = 0;
  for (size_t at = 0; (at = stats.find("\nswitchml_job_ended{", at)) != std::string::npos; ++at) {
    ++ended;
  }
  EXPECT_EQ(ended, ControlService::kMaxEndedJobs);
  EXPECT_EQ(stats.find("{job=\"job-10000\","), std::string::npos);
}

TEST(SwitchResources, JobThatDoesNotFitIsRefusedClearly) {
  auto sw = StartSwitch(/*pool_slots=*/16);
  auto config = WorkerConfig(*sw, "big", 0, 1);
  config.pool_slots = 17;
  auto c = Context::Start(config);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(c.status().message().find("no free segment of 17 slots (16 of 16 free)"),
            std::string::npos)
      << c.status().message();
}

// Regression: gRPC's default SO_REUSEPORT let a second daemon
// start on a busy control port; jobs then split between the two and hung.
TEST(SwitchStartup, BusyControlPortIsAnError) {
  auto first = StartSwitch();
  ASSERT_NE(first, nullptr);
  SwitchConfig config;
  config.bind_address = "127.0.0.1";
  config.control_port = first->control_port();
  config.data_port = 0;
  auto second = SwitchServer::Start(config);
  ASSERT_FALSE(second.ok());
  EXPECT_NE(second.status().message().find(std::to_string(first->control_port())),
            std::string::npos)
      << second.status().message();
  EXPECT_NE(second.status().message().find("--control-port"), std::string::npos);
}

// Datagrams the kernel dropped because a UDP socket's receive buffer was
// full (this network namespace, all sockets).
int64_t UdpReceiveBufferErrors() {
  std::ifstream snmp("/proc/net/snmp");
  std::string header, values;
  while (std::getline(snmp, header) && std::getline(snmp, values)) {
    if (header.rfind("Udp:", 0) != 0) continue;
    std::istringstream names(header), numbers(values);
    std::string name, number;
    while (names >> name && numbers >> number) {
      if (name == "RcvbufErrors") return std::stoll(number);
    }
  }
  return 0;
}

// Sends hostile datagrams to the switch from a socket no job registered.
class Sprayer {
 public:
  explicit Sprayer(uint16_t port) : fd_(socket(AF_INET, SOCK_DGRAM, 0)) {
    to_.sin_family = AF_INET;
    to_.sin_port = htons(port);
    inet_pton(AF_INET, "127.0.0.1", &to_.sin_addr);
  }
  ~Sprayer() { close(fd_); }
  void Send(const std::vector<uint8_t>& bytes) {
    sendto(fd_, bytes.data(), bytes.size(), 0, reinterpret_cast<sockaddr*>(&to_), sizeof(to_));
    if (++sent_ % 64 == 0) usleep(200);  // stay below the socket buffer's capacity
  }

 private:
  int fd_;
  sockaddr_in to_{};
  uint64_t sent_ = 0;
};

std::vector<uint8_t> Contribution(uint32_t job, uint16_t rank, uint16_t slot, uint32_t chunk,
                                  uint16_t count) {
  PacketHeader h;
  h.job = job;
  h.rank = rank;
  h.slot = slot;
  h.chunk = chunk;
  h.element_count = count;
  std::vector<uint8_t> b(PacketBytes(count), 0x5A);
  EncodeHeader(h, b);
  return b;
}

TEST(SwitchSecurity, SprayDuringAJobChangesNothingAndEveryDropIsCounted) {
  auto sw = StartSwitch();
  ASSERT_NE(sw, nullptr);
  constexpr uint32_t kWorld = 3;
  auto contexts = StartAll(Configs(*sw, "victim", kWorld));
  for (auto& c : contexts) ASSERT_NE(c, nullptr);
  std::smatch m;
  const std::string before = sw->PrometheusText();
  ASSERT_TRUE(std::regex_search(before, m, std::regex("job=\"victim\",id=\"(\\d+)\"")));
  const uint32_t job = uint32_t(std::stoul(m[1]));

  const size_t n = 2'000'000;
  std::vector<std::vector<float>> in(kWorld, std::vector<float>(n));
  for (uint32_t r = 0; r < kWorld; ++r) {
    for (size_t i = 0; i < n; ++i) in[r][i] = float((i * 7 + r * 13) % 1000) * 0.001f - 0.5f;
  }
  auto run = [&] {
    std::vector<std::vector<float>> out(kWorld, std::vector<float>(n));
    ForEachRank(kWorld, [&](size_t r) {
      EXPECT_TRUE(contexts[r]->AllReduce(in[r].data(), out[r].data(), n, DType::kFloat32).ok());
    });
    return out;
  };
  const auto clean = run();

  // Every kind of bad packet, with the counter it must land in.
  std::map<std::string, int64_t> expected;
  std::mt19937_64 rng(7);
  std::atomic<bool> spraying{true};
  const int64_t kernel_drops_before = UdpReceiveBufferErrors();
  std::thread sprayer([&] {
    Sprayer s(sw->data_port());
    for (int i = 0; spraying.load() || i < 20000; ++i) {
      const uint16_t k = 256;
      switch (i % 8) {
        case 0: {  // random bytes
          std::vector<uint8_t> b(rng() % 200);
          for (auto& x : b) x = uint8_t(rng());
          if (b.size() >= 2 && b[0] == 0x53 && b[1] == 0x4D) b[0] = 0;
          s.Send(b);
          ++expected["malformed"];
          break;
        }
        case 1: {  // truncated
          auto b = Contribution(job, 0, 0, 0, k);
          b.resize(rng() % b.size());
          s.Send(b);
          ++expected["malformed"];
          break;
        }
        case 2:  // oversized: more elements than the switch accepts
          s.Send(Contribution(job, 0, 0, 0, 8192));
          ++expected["malformed"];
          break;
        case 3:  // wrong job
          s.Send(Contribution(job + 1, 0, 0, 0, k));
          ++expected["unknown_job"];
          break;
        case 4:  // wrong rank
          s.Send(Contribution(job, uint16_t(kWorld + rng() % 100), 0, 0, k));
          ++expected["rank_out_of_range"];
          break;
        case 5:  // out-of-range slot
          s.Send(Contribution(job, 0, uint16_t(32 + rng() % 1000), 0, k));
          ++expected["slot_out_of_range"];
          break;
        default:  // a replayed or forged contribution of a real rank and slot
          s.Send(Contribution(job, uint16_t(rng() % kWorld), uint16_t(rng() % 32),
                              uint32_t(rng() % 64), k));
          ++expected["source_mismatch"];
          break;
      }
    }
  });
  std::vector<std::vector<float>> attacked;
  for (int rep = 0; rep < 3; ++rep) attacked = run();
  spraying.store(false);
  sprayer.join();
  // A last run flushes every sprayed packet through the switch before we count.
  attacked = run();
  for (uint32_t r = 0; r < kWorld; ++r) EXPECT_EQ(attacked[r], clean[r]) << "rank " << r;

  // Every sprayed datagram that reached the switch is counted under its own
  // reason. A slow switch (e.g. under ThreadSanitizer) can let the kernel drop
  // some at a full socket buffer before the switch sees them; those show in
  // the kernel's counter, and only they may be missing.
  const std::string stats = sw->PrometheusText();
  const int64_t kernel_drops = UdpReceiveBufferErrors() - kernel_drops_before;
  int64_t missing = 0;
  for (const auto& [reason, count] : expected) {
    const int64_t counted = Metric(stats, "switchml_drops_total{reason=\"" + reason + "\"}");
    EXPECT_LE(counted, count) << reason << "\n" << stats;
    EXPECT_GE(counted, 0) << reason;
    missing += count - std::max<int64_t>(counted, 0);
  }
  EXPECT_LE(missing, kernel_drops) << "sprayed packets neither counted nor dropped by the kernel\n"
                                   << stats;
}

constexpr const char* kKeyHex = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f";

TEST(SwitchAuthentication, KeyedJobsWorkEndToEnd) {
  auto sw = StartSwitch();
  std::vector<ContextConfig> configs = Configs(*sw, "keyed", 3, /*threads=*/2);
  for (auto& c : configs) c.auth_key = kKeyHex;
  auto contexts = StartAll(configs);
  std::vector<std::vector<int32_t>> v(3, std::vector<int32_t>(100001, 5));
  ForEachRank(3, [&](size_t r) {
    ASSERT_NE(contexts[r], nullptr);
    EXPECT_TRUE(contexts[r]->AllReduce(v[r].data(), v[r].data(), v[r].size(), DType::kInt32).ok());
    // Signed once by the switch, verified by every rank on its group.
    EXPECT_GT(contexts[r]->counters().multicast_received, 0u);
    EXPECT_EQ(contexts[r]->counters().invalid, 0u);
  });
  for (auto& x : v) EXPECT_EQ(x, std::vector<int32_t>(100001, 15));
  EXPECT_EQ(Metric(sw->PrometheusText(), "switchml_drops_total{reason=\"bad_mac\"}"), -1);
}

TEST(SwitchAuthentication, RanksWithDifferentKeysCannotFormAJob) {
  auto sw = StartSwitch();
  auto a = WorkerConfig(*sw, "keyed", 0, 2), b = WorkerConfig(*sw, "keyed", 1, 2);
  a.auth_key = kKeyHex;
  a.join_timeout_ms = b.join_timeout_ms = 1000;
  std::vector<Status> errors;
  StartAll({a, b}, &errors);
  const Status& refused = errors[0].code() == StatusCode::kInvalidArgument ? errors[0] : errors[1];
  EXPECT_NE(refused.message().find("auth_key differs"), std::string::npos) << refused.message();
}

// Regression: a rank that joins with other settings, or as a
// duplicate, used to fail alone while the registered ranks waited out the
// join timeout and then blamed "missing rank(s)". Now every rank fails at
// once with the same message, naming the field and both values. (The join
// timeout is long, so the old behaviour shows as the wrong message.)
struct Misconfiguration {
  const char* name;
  std::function<void(ContextConfig&)> change;  // applied to rank 1
  const char* message;
};

class MisconfiguredRank : public ::testing::TestWithParam<Misconfiguration> {};

TEST_P(MisconfiguredRank, FailsEveryRankWithTheSameMessage) {
  auto sw = StartSwitch();
  std::vector<ContextConfig> configs = Configs(*sw, "mixed", 3);
  for (auto& c : configs) c.join_timeout_ms = 30000;
  GetParam().change(configs[1]);
  // Ranks 0 and 2 register first, so the job holds their settings.
  std::vector<Status> errors(3);
  std::vector<std::unique_ptr<Context>> contexts(3);
  auto start = [&](size_t r) {
    auto c = Context::Start(configs[r]);
    if (c.ok())
      contexts[r] = std::move(c).value();
    else
      errors[r] = c.status();
  };
  std::thread first(start, 0), third(start, 2);
  while (Metric(sw->PrometheusText(), "switchml_job_ranks_joined{job=\"mixed\",id=\"0\"}") != 2) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  start(1);
  first.join();
  third.join();
  for (size_t r = 0; r < configs.size(); ++r) {
    SCOPED_TRACE(r);
    EXPECT_EQ(contexts[r], nullptr);
    EXPECT_NE(errors[r].message().find(GetParam().message), std::string::npos)
        << errors[r].message();
    EXPECT_EQ(errors[r].message().find("missing rank"), std::string::npos) << errors[r].message();
  }
  // The switch forgot the job: the same ranks, configured alike, run.
  auto again = StartAll(Configs(*sw, "mixed", 2));
  EXPECT_NE(again[0], nullptr);
  EXPECT_NE(again[1], nullptr);
}

INSTANTIATE_TEST_SUITE_P(
    Field, MisconfiguredRank,
    ::testing::Values(Misconfiguration{"world_size", [](ContextConfig& c) { c.world_size = 4; },
                                       "world_size 4 differs from the job's 3"},
                      Misconfiguration{"elements_per_packet",
                                       [](ContextConfig& c) { c.elements_per_packet = 512; },
                                       "elements_per_packet 512 differs from the job's 256"},
                      Misconfiguration{"pool_slots", [](ContextConfig& c) { c.pool_slots = 64; },
                                       "pool_slots 64 differs from the job's 32"},
                      Misconfiguration{"threads", [](ContextConfig& c) { c.threads = 2; },
                                       "threads 2 differs from the job's 1"},
                      Misconfiguration{"auth_key", [](ContextConfig& c) { c.auth_key = kKeyHex; },
                                       "auth_key differs from the job's"},
                      Misconfiguration{"duplicate_rank", [](ContextConfig& c) { c.rank = 0; },
                                       "rank 0 is already registered"}),
    [](const auto& info) { return std::string(info.param.name); });

// A hand-made worker (raw gRPC and UDP) sends unsigned, tampered and
// correctly signed packets to a keyed job of one rank.
TEST(SwitchAuthentication, SwitchDropsBadMacsAndSignsResults) {
  auto sw = StartSwitch();
  const int fd = socket(AF_INET, SOCK_DGRAM, 0);
  sockaddr_in me{};
  me.sin_family = AF_INET;
  inet_pton(AF_INET, "127.0.0.1", &me.sin_addr);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&me), sizeof(me)), 0);
  socklen_t len = sizeof(me);
  getsockname(fd, reinterpret_cast<sockaddr*>(&me), &len);
  timeval tv{2, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));

  const net::AuthKey secret = net::ParseAuthKey(kKeyHex).value();
  auto stub = control::v1::Control::NewStub(grpc::CreateChannel(
      "127.0.0.1:" + std::to_string(sw->control_port()), grpc::InsecureChannelCredentials()));
  control::v1::JoinRequest join;
  join.set_protocol_version(kWireVersion);
  join.set_job_name("keyed");
  join.set_world_size(1);
  join.add_data_addresses("127.0.0.1:" + std::to_string(ntohs(me.sin_port)));
  join.set_elements_per_packet(32);
  join.set_pool_slots(4);
  join.set_auth_key(std::string(secret.begin(), secret.end()));
  grpc::ClientContext context;
  auto reader = stub->Join(&context, join);
  control::v1::JobEvent event;
  ASSERT_TRUE(reader->Read(&event));
  const auto& a = event.assignment();
  net::PacketAuthenticator auth(secret, a.auth_salt(), a.job_id(), net::WorkerSenderId(0, 0));

  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(uint16_t(a.data_port()));
  inet_pton(AF_INET, "127.0.0.1", &to.sin_addr);
  auto send = [&](const std::vector<uint8_t>& b) {
    sendto(fd, b.data(), b.size(), 0, reinterpret_cast<sockaddr*>(&to), sizeof(to));
  };
  PacketHeader h;
  h.job = a.job_id();
  h.element_count = 32;
  std::vector<uint8_t> packet(MaxPacketBytes(32));
  EncodeHeader(h, packet);
  StoreBe32(&packet[kHeaderBytes], 42);
  send(std::vector<uint8_t>(packet.begin(), packet.begin() + PacketBytes(32)));  // unsigned
  std::vector<uint8_t> tampered = packet;
  auth.Sign(tampered.data(), PacketBytes(32));
  tampered[kHeaderBytes + 3] ^= 1;
  send(tampered);
  auth.Sign(packet.data(), PacketBytes(32));
  send(packet);

  std::vector<uint8_t> reply(MaxPacketBytes(32) + 1);
  const ssize_t n = recv(fd, reply.data(), reply.size(), 0);
  ASSERT_EQ(n, ssize_t(MaxPacketBytes(32)));
  reply.resize(size_t(n));
  EXPECT_TRUE(auth.Verify(reply));
  PacketView view;
  ASSERT_EQ(DecodePacket(reply, &view), DecodeError::kOk);
  EXPECT_EQ(view.header.type, MessageType::kResult);
  EXPECT_EQ(LoadBe32(view.payload), 42u);
  EXPECT_EQ(Metric(sw->PrometheusText(), "switchml_drops_total{reason=\"bad_mac\"}"), 2);
  context.TryCancel();
  reader->Finish();
  close(fd);
}

}  // namespace
}  // namespace switchml
