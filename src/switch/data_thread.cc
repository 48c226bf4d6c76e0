#include "switch/data_thread.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <future>

#include "net/address.h"
#include "net/busy_poll.h"

namespace switchml {
namespace {
constexpr size_t kBatch = 64;
}  // namespace

DataThread::DataThread(const DataPlaneConfig& config, net::UdpSocket socket, uint16_t shard,
                       uint16_t shards, std::chrono::microseconds busy_poll)
    : data_plane_(config),
      registry_(&data_plane_),
      shard_(shard),
      shards_(shards),
      busy_poll_(busy_poll),
      socket_(std::move(socket)),
      // One extra byte tells a datagram that is too long from one that fits.
      recv_(kBatch, MaxPacketBytes(config.max_elements_per_packet) + 1),
      send_(kBatch * config.max_workers, 0),
      out_(kBatch * MaxPacketBytes(config.max_elements_per_packet)),
      books_(config.max_jobs),
      wake_fd_(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {}

DataThread::~DataThread() {
  Stop();
  if (wake_fd_ >= 0) close(wake_fd_);
}

void DataThread::Start() { thread_ = std::thread([this] { Run(); }); }

void DataThread::Stop() {
  stop_.store(true);
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t n = write(wake_fd_, &one, sizeof(one));
  if (thread_.joinable()) thread_.join();
  std::lock_guard lock(commands_mu_);
  stopped_ = true;
  for (auto& fn : commands_) fn();
  commands_.clear();
}

void DataThread::Execute(const std::function<void()>& fn) {
  std::promise<void> done;
  {
    std::lock_guard lock(commands_mu_);
    if (stopped_) {
      fn();
      return;
    }
    commands_.push_back([&] {
      fn();
      done.set_value();
    });
    pending_.store(true, std::memory_order_release);
  }
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t n = write(wake_fd_, &one, sizeof(one));
  done.get_future().wait();
}

void DataThread::RunCommands() {
  std::vector<std::function<void()>> batch;
  {
    std::lock_guard lock(commands_mu_);
    batch.swap(commands_);
    pending_.store(false, std::memory_order_relaxed);
  }
  for (auto& fn : batch) fn();
}

void DataThread::InstallAddresses(JobId id, uint16_t world_size, uint16_t pool_slots,
                                  uint16_t threads, std::vector<sockaddr_in> addresses,
                                  const std::optional<net::PacketAuthenticator>& auth,
                                  std::vector<sockaddr_in> result_groups) {
  Book& b = books_[id.value() % books_.size()];
  b.active = true;
  b.id = id.value();
  b.world_size = world_size;
  b.threads = threads;
  b.thread_of_slot.resize(pool_slots);
  for (uint32_t s = 0; s < pool_slots; ++s) {
    b.thread_of_slot[s] = uint16_t(((s + 1) * uint32_t(threads) - 1) / pool_slots);
  }
  b.addresses = std::move(addresses);
  b.auth = auth;
  b.result_groups = std::move(result_groups);
}

void DataThread::RemoveAddresses(JobId id) {
  Book& b = books_[id.value() % books_.size()];
  if (b.id == id.value()) b.active = false;
}

void DataThread::Run() {
  pollfd fds[2] = {{socket_.fd(), POLLIN, 0}, {wake_fd_, POLLIN, 0}};
  while (!stop_.load(std::memory_order_relaxed)) {
    net::SpinThenPoll(fds, 2, busy_poll_, std::chrono::milliseconds(500));
    if (fds[1].revents & POLLIN) {
      uint64_t value;
      [[maybe_unused]] ssize_t n = read(wake_fd_, &value, sizeof(value));
    }
    if (pending_.load(std::memory_order_acquire)) RunCommands();
    // A bounded number of batches, so commands never wait long under load.
    for (int round = 0; round < 64; ++round) {
      const int n = recv_.Receive(socket_.fd());
      if (n == 0) break;
      out_used_ = 0;
      for (int i = 0; i < n; ++i) Handle(recv_.packet(i), recv_.source(i));
      send_.Flush(socket_.fd());
    }
  }
}

void DataThread::Handle(std::span<const uint8_t> packet, const sockaddr_in& source) {
  PacketView view;
  if (const DecodeError e = DecodePacket(packet, &view); e != DecodeError::kOk) {
    data_plane_.CountDecodeError(e);
    return;
  }
  const PacketHeader& h = view.header;
  Book& book = books_[h.job % books_.size()];
  const bool known = book.active && book.id == h.job && h.rank < book.world_size &&
                     h.slot < book.thread_of_slot.size();
  // Only the registered socket of (rank, thread owning the slot) may speak
  // for that rank; everything else is counted and dropped.
  const uint16_t thread = known ? book.thread_of_slot[h.slot] : 0;
  const sockaddr_in* rank_address =
      known ? &book.addresses[size_t(h.rank) * book.threads + thread] : nullptr;
  // ... and only to the shard that serves that thread.
  if (known && (!net::SameAddress(*rank_address, source) || thread % shards_ != shard_)) {
    data_plane_.CountDroppedPacket(h.job, DropReason::kSourceMismatch);
    return;
  }
  if (known && book.auth && !book.auth->Verify(packet)) {
    data_plane_.CountDroppedPacket(h.job, DropReason::kBadMac);
    return;
  }
  const size_t out_bytes = MaxPacketBytes(data_plane_.config().max_elements_per_packet);
  const std::span<uint8_t> out(&out_[out_used_ * out_bytes], out_bytes);
  const Verdict v = data_plane_.ProcessDecoded(view, out);
  if (v.action == Action::kDrop || !known) return;
  ++out_used_;
  const size_t length = book.auth ? book.auth->Sign(out.data(), v.out_bytes) : v.out_bytes;
  const std::span<const uint8_t> result(out.data(), length);
  if (v.action == Action::kSendToAll && !book.result_groups.empty()) {
    send_.AddRef(socket_.fd(), result, book.result_groups[thread]);
  } else if (v.action == Action::kSendToAll) {
    for (uint16_t r = 0; r < v.world_size; ++r) {
      send_.AddRef(socket_.fd(), result, book.addresses[size_t(r) * book.threads + thread]);
    }
  } else {
    send_.AddRef(socket_.fd(), result, *rank_address);
  }
}

}  // namespace switchml
