// The transport interface: how the worker's I/O threads and the switch's
// data threads move datagrams, whatever carries them.
//
//   Transport   opens endpoints (and knows routes); chosen by name
//               (MakeTransport: "udp", "af_xdp", "dpdk"), or built by a test (SimFabric).
//   Endpoint    one local address: batched send (Claim/Commit or SendRef,
//               then Flush) and batched receive, and readiness: descriptors
//               to poll for "Receive() may have datagrams", or none and
//               Ready() for a poll-mode endpoint.
//
// Implementations: transport/udp (kernel UDP sockets: recvmmsg/sendmmsg,
// UDP GSO/GRO), transport/xdp (AF_XDP sockets fed by an XDP program, headers
// built in user space), transport/dpdk (a DPDK poll-mode port, headers and
// ARP in user space) and transport/sim (an in-process network with seeded
// loss and duplication, for tests). The worker engine and the data plane never see
// this layer; WorkerThread and DataThread see only this header.
//
// Addresses are IPv4 socket addresses (every implementation speaks IPv4/UDP
// on the wire). Thread safety: a Transport may be used from any thread; an
// Endpoint belongs to one thread at a time.
#pragma once

#include <netinet/in.h>
#include <poll.h>

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "net/busy_poll.h"
#include "switchml/status.h"

namespace switchml::transport {

using Address = sockaddr_in;

// One received datagram. Both spans stay valid until the next Receive() on
// the same endpoint.
struct Datagram {
  std::span<const uint8_t> bytes;
  const Address* source;
};

// What only kernel UDP sockets take: the UDP transport's endpoints, and the
// kernel socket that holds an AF_XDP or DPDK endpoint's port.
struct UdpEndpointOptions {
  // Kernel socket buffers, each direction.
  int socket_buffer_bytes = 8 << 20;
  // Batching offloads where the kernel has them: send runs of datagrams to
  // one destination as one segmented super-datagram (UDP GSO), receive
  // coalesced ones (UDP GRO).
  bool offload = true;
  // With offload, buffers for coalesced super-datagrams per Receive() call
  // (each holds up to udp::kMaxSegments); 0: receive_batch / 8, at least 1.
  size_t coalesced_buffers = 0;
};

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
  // Datagrams per Receive() call (without UDP coalescing).
  size_t receive_batch = 64;
  // Datagrams this endpoint may have in flight each way (a worker thread's
  // share of the job's slots), from which a transport with buffer memory of
  // its own (AF_XDP frames, DPDK mbufs) sizes it; 0: unknown (its default).
  size_t window = 0;
  // This endpoint is shard `shard` of the `shards` that one process opens on
  // one address, one per thread (a switch's data threads, a worker's I/O
  // threads). A transport with receive queues gives each shard its own: AF_XDP
  // the interface's queues q with q % shards == shard, DPDK its port's queue
  // `shard`.
  uint32_t shard = 0;
  uint32_t shards = 1;
  UdpEndpointOptions udp;
};

// Counters of one endpoint, in datagrams.
struct EndpointCounters {
  uint64_t sent = 0;
  uint64_t send_dropped = 0;  // queued but not sent (buffers full, errors, no next hop)
  uint64_t sent_batches = 0;  // sends that carried 2 or more datagrams (UDP GSO)
  uint64_t received = 0;
  uint64_t received_batches = 0;  // receives that carried 2 or more datagrams (UDP GRO)
  // Frames received but not delivered: malformed Ethernet/IPv4/UDP headers,
  // or for another port or peer (a transport that parses headers itself).
  uint64_t malformed = 0;
  // Datagrams that reached this endpoint other than through its own receive
  // queue: AF_XDP's through the kernel's UDP stack (from this host, or that
  // arrived on another shard's queue), DPDK's handed over by the shard on
  // whose queue they arrived. Flow steering to each shard's queue keeps it 0.
  uint64_t off_queue = 0;
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
  // Readiness. The descriptors that become readable (POLLIN) when Receive()
  // may return datagrams (af_xdp: its AF_XDP socket, whose poll also drives
  // its sends, and its kernel socket). None for a poll-mode endpoint (dpdk),
  // whose thread asks Ready() instead, between polls of its other descriptors.
  virtual std::vector<int> wait_fds() const = 0;
  // A poll-mode endpoint: true when Receive() has datagrams now (it may fetch
  // them into the next batch). Never blocks; no allocation. An endpoint with
  // descriptors: false (its descriptors say it).
  virtual bool Ready() { return false; }
  bool poll_mode() const { return wait_fds().empty(); }
  // Replaces the buffers' options (all but udp.socket_buffer_bytes), e.g. once
  // the packet size is known. Setup path: allocates; nothing may be queued.
  virtual void Reconfigure(const EndpointOptions& options) = 0;
  // How this endpoint moves datagrams, for logs. udp: its offloads,
  // "segmentation and coalescing", "coalescing only", "segmentation only" or
  // "off"; af_xdp and dpdk: the mode and the queues.
  virtual std::string description() const = 0;
  // The most datagrams one Receive() returns, with the options in effect.
  virtual size_t receive_capacity() const = 0;

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

// The most datagrams one Receive() of an endpoint opened with `options` can
// return, whatever the transport (with UDP coalescing, a batch of
// super-datagrams holds many).
size_t MostDatagramsPerReceive(const EndpointOptions& options);

// How a thread waits on its endpoints (setup path builds both):
// WaitDescriptors: `first` (its command queue's descriptor), then every
// descriptor of the endpoints; PolledEndpoints: those without descriptors,
// which its BusyPoller polls instead.
std::vector<pollfd> WaitDescriptors(int first, std::initializer_list<const Endpoint*> endpoints);
class PolledEndpoints final : public net::PolledSource {
 public:
  explicit PolledEndpoints(std::initializer_list<Endpoint*> endpoints);
  // Null when every endpoint has descriptors (the wait is then a plain poll).
  net::PolledSource* source() { return endpoints_.empty() ? nullptr : this; }
  bool Ready() override;

 private:
  std::vector<Endpoint*> endpoints_;
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

// What MakeTransport passes on to the transport it makes: each back end's
// own options.
struct AfXdpOptions {
  // The network interface (empty: the one holding the address an endpoint is
  // opened on).
  std::string interface;
};
struct DpdkOptions {
  // The arguments of DPDK's environment abstraction layer (EAL), separated by
  // white space, e.g. "-l 0 --no-huge -m 512 --vdev=net_af_packet0,iface=eth0"
  // or "-l 2 -a 0000:3b:00.0". One process initializes the EAL once: every
  // dpdk transport in it must pass the same arguments.
  std::string eal_args;
  // The DPDK port's device name (net_af_packet0, 0000:3b:00.0); empty: the
  // only port the EAL found.
  std::string port;
  // The port's IPv4 address; empty: the address of the kernel's route toward
  // the peer (right where the port is a kernel interface driven through
  // net_af_packet or net_af_xdp).
  std::string address;
};
struct TransportOptions {
  AfXdpOptions af_xdp;
  DpdkOptions dpdk;
};

// The largest elements per packet the af_xdp transport carries (one packet
// per 4 KiB frame).
inline constexpr uint16_t kMaxAfXdpElementsPerPacket = 512;
// OK if packets of `elements` fit the transport called `name` (af_xdp: at most
// kMaxAfXdpElementsPerPacket); else an error naming `field` and, after the
// limit, `hint`.
Status CheckElementsPerPacket(const std::string& name, uint32_t elements, const std::string& field,
                              const std::string& hint);

// The transports a configuration may name ("udp", "af_xdp" where the build
// has libxdp, "dpdk" where it has DPDK).
std::vector<std::string> TransportNames();
// The transport called `name`; an unknown name is an error listing the known ones.
StatusOr<std::shared_ptr<Transport>> MakeTransport(const std::string& name,
                                                   const TransportOptions& options = {});
// OK if MakeTransport(name) would succeed; `field` names the setting in the message.
Status CheckTransportName(const std::string& name, const std::string& field);

}  // namespace switchml::transport
