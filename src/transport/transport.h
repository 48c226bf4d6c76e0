// The transport interface: how the worker's I/O threads and the switch's
// data threads move datagrams, whatever carries them.
//
//   Transport   opens endpoints (and knows routes); chosen by name
//               (MakeTransport: "udp", "af_xdp"), or built by a test (SimFabric).
//   Endpoint    one local address: batched send (Claim/Commit or SendRef,
//               then Flush) and batched receive, and a file descriptor to
//               poll for "Receive() may have datagrams".
//
// Implementations: transport/udp (kernel UDP sockets: recvmmsg/sendmmsg,
// UDP GSO/GRO), transport/xdp (AF_XDP sockets fed by an XDP program, headers
// built in user space) and transport/sim (an in-process network with seeded loss and
// duplication, for tests). The worker engine and the data plane never see
// this layer; WorkerThread and DataThread see only this header.
//
// Addresses are IPv4 socket addresses (every implementation speaks IPv4/UDP
// on the wire). Thread safety: a Transport may be used from any thread; an
// Endpoint belongs to one thread at a time.
#pragma once

#include <netinet/in.h>

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "switchml/status.h"

namespace switchml::transport {

using Address = sockaddr_in;

// One received datagram. Both spans stay valid until the next Receive() on
// the same endpoint.
struct Datagram {
  std::span<const uint8_t> bytes;
  const Address* source;
};

// The most datagrams one coalesced receive buffer holds.
inline constexpr size_t kMaxCoalescedDatagrams = 64;

struct EndpointOptions {
  // The largest datagram this endpoint sends or receives. A longer received
  // one is delivered whole or cut, but at least max_datagram_bytes + 1 bytes
  // long, so that a length check rejects it.
  size_t max_datagram_bytes = 0;
  // The endpoint owns send_queue buffers of max_datagram_bytes for Claim();
  // false for an endpoint that only sends with SendRef().
  bool claim_buffers = false;
  // Datagrams queued (Commit, SendRef) before a Flush is forced.
  size_t send_queue = 64;
  // Datagrams per Receive() call without coalescing.
  size_t receive_batch = 64;
  // With offloads, buffers for coalesced super-datagrams per Receive() call
  // (each holds up to kMaxCoalescedDatagrams); 0: receive_batch / 8, at least 1.
  size_t coalesced_buffers = 0;
  // Kernel socket buffers (the UDP transport), each direction.
  int socket_buffer_bytes = 8 << 20;
  // Datagrams this endpoint may have in flight each way (a worker thread's
  // slice of the job's pool), from which the AF_XDP transport sizes its frame
  // memory; 0: unknown (its default).
  size_t window = 0;
  // Use the transport's batching offloads where it has them (UDP GSO/GRO).
  bool offload = true;
  // This endpoint is number `sibling` of the `siblings` that one process
  // opens on one interface, one per thread (a switch's data threads, a
  // worker's I/O threads). The AF_XDP transport gives each the interface's
  // receive queues q with q % siblings == sibling.
  uint32_t sibling = 0;
  uint32_t siblings = 1;
};

// Counters of one endpoint, in datagrams.
struct EndpointCounters {
  uint64_t sent = 0;
  uint64_t send_dropped = 0;     // queued but not sent (buffers full, errors)
  uint64_t super_datagrams = 0;  // sends that carried 2 or more datagrams
  uint64_t received = 0;
  uint64_t coalesced = 0;  // receives that carried 2 or more datagrams
  // Frames received but not delivered: malformed Ethernet/IPv4/UDP headers,
  // or for another port or peer (a transport that parses headers itself).
  uint64_t malformed = 0;
  // Datagrams that reached an AF_XDP endpoint through the kernel's UDP
  // stack instead of its own queues: from this host (loopback), or arrived
  // on a sibling's queue (no flow steering to this endpoint's queue).
  uint64_t kernel_path = 0;
};

class Endpoint {
 public:
  virtual ~Endpoint() = default;

  // ---- setup
  virtual Address local_address() const = 0;
  // Restricts the endpoint to one peer: only its datagrams are received, and
  // Commit() may pass no destination.
  virtual Status Connect(const Address& peer) = 0;
  // Announces a destination this endpoint will send to before it has heard
  // from it (a rack switch's upstream, docs/design.md §10). The kernel path
  // needs nothing; a transport that builds its own frames resolves the next
  // hop now (and may wait for the kernel to), so the packet path never has to.
  virtual Status AddPeer(const Address& peer) {
    (void)peer;
    return Status::Ok();
  }
  // Datagrams this endpoint sends to multicast groups stay on this host.
  virtual Status SetHostLocalMulticast() = 0;
  // Readable (POLLIN) when Receive() may return datagrams, as is
  // extra_poll_fd() where it is not -1 (af_xdp: its kernel socket, beside
  // the AF_XDP socket, whose poll also drives its sends).
  virtual int poll_fd() const = 0;
  virtual int extra_poll_fd() const { return -1; }
  // Replaces the buffers' options (all but socket_buffer_bytes), e.g. once
  // the packet size is known. Setup path: allocates; nothing may be queued.
  virtual void Reconfigure(const EndpointOptions& options) = 0;
  // What the offloads in effect are, for logs: "segmentation and
  // coalescing", "coalescing only", "segmentation only", "off".
  virtual std::string offload() const = 0;

  // ---- send path (no allocation, no exceptions)
  // A buffer of max_datagram_bytes for the next datagram, to write in place;
  // Commit() queues it. Flushes first when the queue is full.
  // REQUIRES: claim_buffers.
  virtual std::span<uint8_t> Claim() = 0;
  // Queues the first `bytes` of the buffer the last Claim() returned, to
  // `dest` (null: the connected peer).
  // REQUIRES: bytes <= max_datagram_bytes, and no other send call since.
  virtual void Commit(size_t bytes, const Address* dest) = 0;
  // Queues `bytes` without copying: they must stay valid until Flush().
  virtual void SendRef(std::span<const uint8_t> bytes, const Address& dest) = 0;
  // Sends everything queued; datagrams to one destination keep their order.
  // What cannot be sent within about a millisecond is dropped and counted
  // (the protocol retransmits).
  virtual void Flush() = 0;

  // ---- receive path (no allocation, no exceptions)
  // The datagrams waiting now, up to one batch; empty when none is.
  virtual std::span<const Datagram> Receive() = 0;

  virtual EndpointCounters counters() const = 0;
};

// What the route to a peer says: the local address packets leave from and
// the path MTU (0: unknown).
struct Route {
  in_addr local{};
  int mtu = 0;
};

class Transport {
 public:
  virtual ~Transport() = default;
  virtual std::string name() const = 0;
  // An endpoint bound to `local` (port 0: a free one). Errors name the
  // address and say what to check.
  virtual StatusOr<std::unique_ptr<Endpoint>> Open(const Address& local,
                                                   const EndpointOptions& options) = 0;
  // A receive-only endpoint for the datagrams sent to multicast `group` on
  // the interface with address `interface`; several may join one group.
  virtual StatusOr<std::unique_ptr<Endpoint>> JoinGroup(const Address& group, in_addr interface,
                                                        const EndpointOptions& options) = 0;
  virtual StatusOr<Route> RouteToward(const Address& peer) = 0;
};

// What MakeTransport passes on to the transport it makes.
struct TransportOptions {
  // af_xdp: the network interface (empty: the one holding the address an
  // endpoint is opened on).
  std::string interface;
};

// The transports a configuration may name ("udp", and "af_xdp" where the
// build has libxdp).
std::vector<std::string> TransportNames();
// The transport called `name`; an unknown name is an error listing the known ones.
StatusOr<std::shared_ptr<Transport>> MakeTransport(const std::string& name,
                                                   const TransportOptions& options = {});
// OK if MakeTransport(name) would succeed; `field` names the setting in the message.
Status CheckTransportName(const std::string& name, const std::string& field);

}  // namespace switchml::transport
