// A rack switch's connection to its upstream switch (a tree of switches,
// docs/design.md §10): it forwards each of its workers' joins upstream as a
// join of the same rank through this switch (JoinRequest.via_switch), so the
// upstream switch learns the job's rank -> rack map, and it relays the
// upstream's events back. One call per forwarded rank, so the upstream sees
// every rank's life (a rank lost anywhere ends the job everywhere).
//
// Thread safety: Join() and Leave() may run concurrently; one
// UpstreamCall is used by one reader, and Cancel() may come from any thread.
#pragma once

#include <grpcpp/grpcpp.h>
#include <netinet/in.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "switchml/control.grpc.pb.h"
#include "switchml/status.h"

namespace switchml {

// One forwarded rank's Join stream.
class UpstreamCall {
 public:
  // The next event after the assignment; false once the stream ended.
  bool Read(control::v1::JobEvent* event) { return reader_->Read(event); }
  // Why the stream ended (after Read returned false).
  Status Finish();
  // Ends the stream from this side: the upstream switch then ends the job,
  // naming the rank. Safe from any thread, also before or after the end.
  void Cancel() { context_->TryCancel(); }

 private:
  friend class UpstreamClient;
  std::unique_ptr<grpc::ClientContext> context_;
  std::unique_ptr<grpc::ClientReader<control::v1::JobEvent>> reader_;
};

class UpstreamClient {
 public:
  // `upstream` is "HOST[:PORT]"; `data_ports` are this switch's data
  // threads' ports and `control_port` its control port. Resolves the
  // upstream host and finds the local address that reaches it (no packet is
  // sent), which names this switch's sockets to the upstream.
  static StatusOr<std::unique_ptr<UpstreamClient>> Create(const std::string& upstream,
                                                          uint16_t control_port,
                                                          std::vector<uint16_t> data_ports);

  // Forwards a worker's join: the same job and rank, with this switch's data
  // sockets (one per worker thread t: data port t % shards), this switch's
  // packet-size limit, and via_switch. Blocks until the upstream's
  // assignment comes, which it returns in `assignment`. Errors name the
  // upstream switch. The call ends with the worker's (`worker_call`): gRPC
  // propagates its cancellation.
  StatusOr<std::unique_ptr<UpstreamCall>> Join(const grpc::ServerContext& worker_call,
                                               const control::v1::JoinRequest& worker,
                                               uint32_t max_elements_per_packet,
                                               control::v1::Assignment* assignment);
  // A forwarded rank leaves on purpose (`reason`: LeaveRequest.reason).
  Status Leave(const std::string& job_name, uint32_t rank, uint64_t token,
               const std::string& reason);

  // Where the upstream's data threads listen for `assignment`: one address
  // per worker thread of `threads`.
  StatusOr<std::vector<sockaddr_in>> DataAddresses(const control::v1::Assignment& assignment,
                                                   uint16_t threads) const;
  // "upstream switch HOST:PORT", for messages.
  const std::string& name() const { return name_; }
  // This switch's control address as the upstream sees it ("ip:port"),
  // which names this switch there: its port once the server is bound.
  std::string via() const;
  void SetControlPort(uint16_t port) { control_port_.store(port); }

 private:
  UpstreamClient() = default;
  sockaddr_in control_{};  // the upstream's control address
  sockaddr_in local_{};    // this host's address toward it
  std::vector<uint16_t> data_ports_;
  std::string name_;
  std::atomic<uint16_t> control_port_{0};
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<control::v1::Control::Stub> stub_;
};

}  // namespace switchml
