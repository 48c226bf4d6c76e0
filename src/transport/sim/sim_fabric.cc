#include "transport/sim/sim_fabric.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "net/address.h"

namespace switchml::transport::sim {
namespace {

uint64_t Key(const Address& a) {
  return uint64_t(ntohl(a.sin_addr.s_addr)) << 16 | ntohs(a.sin_port);
}

Address WithPort(in_addr_t address, uint16_t port) {
  Address a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = address;
  a.sin_port = htons(port);
  return a;
}

}  // namespace

// One endpoint's inbox: a ring of datagrams and an eventfd that is readable
// while the ring holds any (both changed under the lock).
class SimFabric::Queue {
 public:
  Queue(size_t capacity, size_t slot_bytes)
      : slots_(capacity), slot_bytes_(slot_bytes), fd_(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {}
  ~Queue() {
    if (fd_ >= 0) close(fd_);
  }
  int fd() const { return fd_; }
  void set_slot_bytes(size_t bytes) {
    std::lock_guard lock(mu_);
    slot_bytes_ = bytes;
  }

  // False when full. A datagram longer than a slot is cut to the slot.
  bool Push(const Address& source, std::span<const uint8_t> bytes) {
    std::lock_guard lock(mu_);
    if (count_ == slots_.size()) return false;
    Slot& s = slots_[(head_ + count_) % slots_.size()];
    s.bytes.resize(std::min(bytes.size(), slot_bytes_));  // keeps its capacity once grown
    std::memcpy(s.bytes.data(), bytes.data(), s.bytes.size());
    s.source = source;
    ++count_;
    const uint64_t one = 1;
    [[maybe_unused]] ssize_t n = write(fd_, &one, sizeof(one));
    return true;
  }

  // Moves up to `max` datagrams out: fn(source, bytes) for each.
  template <typename Fn>
  void Pop(size_t max, Fn&& fn) {
    std::lock_guard lock(mu_);
    for (; count_ > 0 && max > 0; --count_, --max) {
      Slot& s = slots_[head_];
      fn(s.source, std::span<const uint8_t>(s.bytes));
      head_ = (head_ + 1) % slots_.size();
    }
    if (count_ == 0) {
      uint64_t value;
      [[maybe_unused]] ssize_t n = read(fd_, &value, sizeof(value));
    }
  }

 private:
  struct Slot {
    std::vector<uint8_t> bytes;
    Address source;
  };
  std::mutex mu_;
  std::vector<Slot> slots_;
  size_t slot_bytes_;
  size_t head_ = 0, count_ = 0;
  int fd_;
};

class SimFabric::SimEndpoint final : public Endpoint {
 public:
  SimEndpoint(std::shared_ptr<SimFabric> fabric, const Address& local, const EndpointOptions& o,
              size_t queue_datagrams)
      : fabric_(std::move(fabric)), local_(local), queue_(queue_datagrams, 0) {
    Reconfigure(o);
  }
  ~SimEndpoint() override { fabric_->Unbind(Key(local_), &queue_); }

  void Reconfigure(const EndpointOptions& o) override {
    max_bytes_ = o.max_datagram_bytes;
    queue_.set_slot_bytes(slot_bytes());
    claim_buffers_.assign(o.claim_buffers ? o.send_queue * max_bytes_ : 0, 0);
    pending_.assign(o.send_queue, Pending{});
    count_ = 0;
    receive_buffers_.assign(o.receive_batch * slot_bytes(), 0);
    sources_.assign(o.receive_batch, Address{});
    received_.assign(o.receive_batch, Datagram{});
  }

  Queue* queue() { return &queue_; }

  Address local_address() const override { return local_; }
  Status Connect(const Address& peer) override {
    peer_ = peer;
    connected_ = true;
    return Status::Ok();
  }
  Status SetHostLocalMulticast() override { return Status::Ok(); }  // the fabric is one host
  std::vector<int> wait_fds() const override { return {queue_.fd()}; }
  size_t receive_capacity() const override { return received_.size(); }
  std::string description() const override { return "off"; }

  std::span<uint8_t> Claim() override {
    if (count_ == pending_.size()) Flush();
    return {&claim_buffers_[count_ * max_bytes_], max_bytes_};
  }
  void Commit(size_t bytes, const Address* dest) override {
    Enqueue({&claim_buffers_[count_ * max_bytes_], bytes}, dest ? *dest : peer_);
  }
  void SendRef(std::span<const uint8_t> bytes, const Address& dest) override {
    if (count_ == pending_.size()) Flush();
    Enqueue(bytes, dest);
  }
  void Flush() override {
    // Sent from the address a peer would see: a wildcard bind sends from loopback.
    Address source = local_;
    if (source.sin_addr.s_addr == htonl(INADDR_ANY))
      source.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    for (size_t i = 0; i < count_; ++i) fabric_->Send(source, pending_[i].dest, pending_[i].bytes);
    counters_.sent += count_;
    count_ = 0;
  }

  std::span<const Datagram> Receive() override {
    size_t n = 0;
    queue_.Pop(received_.size(), [&](const Address& source, std::span<const uint8_t> bytes) {
      if (connected_ && !net::SameAddress(source, peer_)) return;  // as a connected socket
      uint8_t* buffer = &receive_buffers_[n * slot_bytes()];
      std::memcpy(buffer, bytes.data(), bytes.size());
      sources_[n] = source;
      received_[n] = {{buffer, bytes.size()}, &sources_[n]};
      ++n;
    });
    counters_.received += n;
    return {received_.data(), n};
  }

  EndpointCounters counters() const override { return counters_; }

 private:
  struct Pending {
    std::span<const uint8_t> bytes;
    Address dest;
  };
  // One extra byte tells a datagram that is too long from one that fits.
  size_t slot_bytes() const { return max_bytes_ + 1; }
  void Enqueue(std::span<const uint8_t> bytes, const Address& dest) {
    pending_[count_++] = {bytes, dest};
  }

  std::shared_ptr<SimFabric> fabric_;
  Address local_;
  SimFabric::Queue queue_;
  std::vector<uint8_t> claim_buffers_;
  size_t max_bytes_ = 0;
  std::vector<Pending> pending_;
  size_t count_ = 0;
  std::vector<uint8_t> receive_buffers_;
  std::vector<Address> sources_;
  std::vector<Datagram> received_;
  Address peer_{};
  bool connected_ = false;
  EndpointCounters counters_;
};

std::shared_ptr<SimFabric> SimFabric::Create(const SimFabricOptions& options) {
  return std::shared_ptr<SimFabric>(new SimFabric(options));
}

SimFabric::SimFabric(const SimFabricOptions& options) : options_(options), rng_(options.seed) {}

SimFabric::~SimFabric() = default;

StatusOr<std::unique_ptr<Endpoint>> SimFabric::Open(const Address& local,
                                                    const EndpointOptions& options) {
  std::lock_guard lock(mu_);
  Address bound = local;
  bound.sin_family = AF_INET;
  auto in_use = [&](uint16_t port) {
    const in_addr_t ip = bound.sin_addr.s_addr;
    if (bound_.count(Key(WithPort(ip, port))) || bound_.count(Key(WithPort(INADDR_ANY, port)))) {
      return true;
    }
    if (ip != htonl(INADDR_ANY)) return false;
    // A wildcard bind conflicts with any bind of the port.
    for (const auto& [key, queue] : bound_) {
      if ((key & 0xFFFF) == port) return true;
    }
    return false;
  };
  if (bound.sin_port == 0) {
    uint16_t port = 0;
    for (int tries = 0; tries < 20000 && port == 0; ++tries) {
      const uint16_t candidate = next_port_;
      next_port_ = next_port_ >= 60000 ? 40000 : uint16_t(next_port_ + 1);
      if (!in_use(candidate)) port = candidate;
    }
    if (port == 0) return ResourceExhausted("the simulated network has no free port left");
    bound.sin_port = htons(port);
  } else if (in_use(ntohs(bound.sin_port))) {
    return InvalidArgument("cannot bind " + net::FormatAddress(bound) +
                           " on the simulated network: the port is in use");
  }
  auto endpoint =
      std::make_unique<SimEndpoint>(shared_from_this(), bound, options, options_.queue_datagrams);
  bound_[Key(bound)] = endpoint->queue();
  return std::unique_ptr<Endpoint>(std::move(endpoint));
}

StatusOr<std::unique_ptr<Endpoint>> SimFabric::JoinGroup(const Address& group, in_addr,
                                                         const EndpointOptions& options) {
  if (!IN_MULTICAST(ntohl(group.sin_addr.s_addr))) {
    return InvalidArgument(net::FormatAddress(group) + " is not a multicast group address");
  }
  std::lock_guard lock(mu_);
  auto endpoint =
      std::make_unique<SimEndpoint>(shared_from_this(), group, options, options_.queue_datagrams);
  groups_[Key(group)].push_back(endpoint->queue());
  return std::unique_ptr<Endpoint>(std::move(endpoint));
}

StatusOr<Route> SimFabric::RouteToward(const Address&) {
  std::lock_guard lock(mu_);
  return Route{in_addr{htonl(INADDR_LOOPBACK)}, options_.mtu};
}

void SimFabric::SetLoss(double loss, double duplicate) {
  std::lock_guard lock(mu_);
  options_.loss = loss;
  options_.duplicate = duplicate;
}

SimFabricCounters SimFabric::counters() const {
  std::lock_guard lock(mu_);
  return counters_;
}

void SimFabric::Unbind(uint64_t key, Queue* queue) {
  std::lock_guard lock(mu_);
  if (auto it = bound_.find(key); it != bound_.end() && it->second == queue) bound_.erase(it);
  if (auto it = groups_.find(key); it != groups_.end()) {
    std::erase(it->second, queue);
    if (it->second.empty()) groups_.erase(it);
  }
}

void SimFabric::Send(const Address& source, const Address& dest, std::span<const uint8_t> bytes) {
  std::lock_guard lock(mu_);
  ++counters_.sent;
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  if (options_.loss > 0 && uniform(rng_) < options_.loss) {
    ++counters_.lost;
    return;
  }
  int copies = 1;
  if (options_.duplicate > 0 && uniform(rng_) < options_.duplicate) {
    ++counters_.duplicated;
    copies = 2;
  }
  auto deliver = [&](Queue* q) {
    for (int c = 0; c < copies; ++c) {
      if (q->Push(source, bytes)) {
        ++counters_.delivered;
      } else {
        ++counters_.queue_full;
      }
    }
  };
  if (IN_MULTICAST(ntohl(dest.sin_addr.s_addr))) {
    auto it = groups_.find(Key(dest));
    if (it == groups_.end()) {
      ++counters_.unroutable;
      return;
    }
    for (Queue* q : it->second) deliver(q);
    return;
  }
  auto it = bound_.find(Key(dest));
  if (it == bound_.end()) it = bound_.find(Key(WithPort(INADDR_ANY, ntohs(dest.sin_port))));
  if (it == bound_.end()) {
    ++counters_.unroutable;
    return;
  }
  deliver(it->second);
}

}  // namespace switchml::transport::sim
