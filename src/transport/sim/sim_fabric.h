// An in-process network behind the transport interface: endpoints in one
// process exchange datagrams through per-endpoint queues, in real time, with
// seeded loss and duplication. It runs the real switch (SwitchServer, its
// data threads) and real workers (Context, its I/O threads) without kernel
// sockets, so the threaded system can be tested under loss without network
// namespaces, and it shows that a transport plugs in without touching the
// worker engine or the data plane. (SimNetwork, in virtual time, drives the
// engines directly and is the deterministic counterpart.)
//
// Addressing follows UDP: an endpoint binds an IPv4 address and port (port
// 0: a free one; address 0.0.0.0: any address), a datagram goes to the
// endpoint bound to its destination (or to 0.0.0.0 and its port), and one to
// a multicast group reaches every endpoint that joined it. A datagram to no
// endpoint, or to a full queue, is dropped and counted.
//
// It is a test transport: sends lock the fabric and the receiving queue
// (real transports never lock on the hot path). Which transmissions are
// lost depends on the threads' interleaving; results never do.
//
// Thread safety: every method may be called from any thread.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <vector>

#include "transport/transport.h"

namespace switchml::transport::sim {

struct SimFabricOptions {
  uint64_t seed = 1;
  double loss = 0.0;              // probability that a datagram is lost
  double duplicate = 0.0;         // probability that a datagram arrives twice
  int mtu = 0;                    // what RouteToward reports (0: unknown)
  size_t queue_datagrams = 4096;  // per endpoint; more waiting are dropped
};

struct SimFabricCounters {
  uint64_t sent = 0;  // datagrams handed to the fabric
  uint64_t lost = 0;  // of them, lost on purpose
  uint64_t duplicated = 0;
  uint64_t unroutable = 0;  // to no endpoint
  uint64_t queue_full = 0;  // to a full queue
  uint64_t delivered = 0;
};

class SimFabric final : public Transport, public std::enable_shared_from_this<SimFabric> {
 public:
  // REQUIRES: owned by a std::shared_ptr (endpoints keep the fabric alive).
  static std::shared_ptr<SimFabric> Create(const SimFabricOptions& options);
  ~SimFabric() override;

  std::string name() const override { return "sim"; }
  StatusOr<std::unique_ptr<Endpoint>> Open(const Address& local,
                                           const EndpointOptions& options) override;
  StatusOr<std::unique_ptr<Endpoint>> JoinGroup(const Address& group, in_addr interface,
                                                const EndpointOptions& options) override;
  // Every endpoint is local: 127.0.0.1, options.mtu.
  StatusOr<Route> RouteToward(const Address& peer) override;

  // Changes the loss and duplication of datagrams sent from now on.
  void SetLoss(double loss, double duplicate);
  SimFabricCounters counters() const;

  class Queue;  // one endpoint's inbox (sim_fabric.cc)

 private:
  explicit SimFabric(const SimFabricOptions& options);
  class SimEndpoint;
  // Hands one datagram from `source` to `dest`'s queue(s).
  void Send(const Address& source, const Address& dest, std::span<const uint8_t> bytes);
  void Unbind(uint64_t key, Queue* queue);

  mutable std::mutex mu_;
  SimFabricOptions options_;
  std::mt19937_64 rng_;
  std::map<uint64_t, Queue*> bound_;                // (address, port) -> unicast endpoint
  std::map<uint64_t, std::vector<Queue*>> groups_;  // (group, port) -> members
  uint16_t next_port_ = 40000;
  SimFabricCounters counters_;
};

}  // namespace switchml::transport::sim
