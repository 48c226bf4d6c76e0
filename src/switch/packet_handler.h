// What the software switch does with one received datagram, without I/O:
// check its size against the data plane's largest packet, decode, check the sender against the
// job's address book (and its MAC when the job has a key), run the data plane, and hand each reply
// to a sink.
//
// A job's address book is installed whole (Install) after the data plane
// registered the job, and removed (Remove) before the data plane forgets it.
// Until its book is installed a job is unknown here: its packets are dropped
// as `unknown_job` before they reach the data plane, so no packet ever skips
// the source or MAC check (docs/security.md: every packet is checked
// against the registered address of its rank, and its MAC where the job has a key).
//
// Thread safety: none; the data thread that owns the DataPlane owns this.
#pragma once

#include <netinet/in.h>

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "dataplane/data_plane.h"
#include "net/packet_auth.h"
#include "switchml/types.h"

namespace switchml {

// Where the handler's replies go. `datagram` stays valid until the caller
// of Handle() reuses the `out` buffer it passed.
class ReplySink {
 public:
  virtual ~ReplySink() = default;
  virtual void Send(std::span<const uint8_t> datagram, const sockaddr_in& to) = 0;
};

// Where a job's partial sums go in a tree of switches (docs/design.md §10):
// the upstream switch's socket for each worker thread t (the upstream data
// thread that serves t), and the upstream registration's authenticator
// (this switch signs as that job's member; the upstream's results verify
// under the same key).
struct UpstreamRoute {
  JobId job;                           // the upstream switch's id of the job
  std::vector<sockaddr_in> addresses;  // per worker thread
  std::optional<net::PacketAuthenticator> auth;
};

class PacketHandler {
 public:
  // Serves shard `shard` of `shards`: the worker threads t with
  // t % shards == shard. `data_plane` must outlive the handler.
  PacketHandler(DataPlane* data_plane, uint16_t shard = 0, uint16_t shards = 1);

  // Binds job `id` to its workers' addresses: addresses[rank * threads + t]
  // is rank's socket for thread t, which owns slots [t*S/T, (t+1)*S/T).
  // With `auth`, the job's packets must carry a valid MAC, and replies are
  // signed. With `result_groups` (one per thread), a result for all ranks is
  // one datagram to thread t's group instead of one per rank.
  // REQUIRES: addresses.size() == world_size * threads.
  void Install(JobId id, uint16_t world_size, uint16_t pool_slots, uint16_t threads,
               std::vector<sockaddr_in> addresses,
               const std::optional<net::PacketAuthenticator>& auth,
               std::vector<sockaddr_in> result_groups = {},
               std::optional<UpstreamRoute> upstream = std::nullopt);
  void Remove(JobId id);
  bool Installed(JobId id) const;

  // Hot path. Handles one datagram from `source`; any reply is written into
  // `out` (at least MaxPacketBytes(max_elements_per_packet) bytes) and given
  // to `sink`. Returns true if it did, i.e. `out` must stay untouched until
  // the sink has sent it.
  bool Handle(std::span<const uint8_t> packet, const sockaddr_in& source, std::span<uint8_t> out,
              ReplySink& sink);
  // Hot path. Writes the next packet a timer sends at `now` (a NACK to the
  // ranks missing from a stalled slot, or an overdue upstream contribution)
  // into `out` and gives it to `sink`; false when none is due. True with
  // nothing sent where the job's book is gone: call again.
  bool SendTimerPacket(Nanos now, std::span<uint8_t> out, ReplySink& sink);

 private:
  struct Book {
    bool active = false;
    uint32_t id = 0;
    uint16_t world_size = 0;
    uint16_t threads = 1;
    std::vector<uint16_t> thread_of_slot;
    std::vector<sockaddr_in> addresses;
    std::vector<sockaddr_in> result_groups;
    std::optional<net::PacketAuthenticator> auth;
    std::optional<UpstreamRoute> upstream;
  };
  // The book of the job whose upstream switch calls it `upstream_job`.
  Book* FindByUpstream(uint32_t upstream_job);
  // Signs and sends the data plane's verdict `v` for thread `thread` of `book`.
  void Deliver(Book& book, uint16_t thread, const Verdict& v, const sockaddr_in* sender,
               std::span<uint8_t> out, ReplySink& sink);

  DataPlane* data_plane_;
  uint16_t shard_;
  uint16_t shards_;
  std::vector<Book> books_;             // indexed like the data plane's job table
  std::vector<size_t> upstream_books_;  // indexes of the books with an upstream
};

}  // namespace switchml
