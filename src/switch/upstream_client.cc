#include "switch/upstream_client.h"

#include <arpa/inet.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "net/address.h"
#include "rpc/assignment.h"
#include "rpc/grpc_status.h"
#include "switchml/limits.h"

namespace switchml {

Status UpstreamCall::Finish() { return FromGrpc(reader_->Finish()); }

namespace {

// The local address the kernel would send from toward `to`: a connected UDP
// socket's name (connect() on UDP sends nothing).
StatusOr<sockaddr_in> LocalAddressToward(const sockaddr_in& to) {
  const int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return Status(StatusCode::kInternal, std::string("socket: ") + strerror(errno));
  sockaddr_in local{};
  socklen_t len = sizeof(local);
  const bool ok = connect(fd, reinterpret_cast<const sockaddr*>(&to), sizeof(to)) == 0 &&
                  getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0;
  const int error = errno;
  close(fd);
  if (!ok) {
    return Status(
        StatusCode::kFailedPrecondition,
        "no route to the upstream switch " + net::FormatAddress(to) + ": " + strerror(error));
  }
  local.sin_port = 0;
  return local;
}

}  // namespace

StatusOr<std::unique_ptr<UpstreamClient>> UpstreamClient::Create(const std::string& upstream,
                                                                 uint16_t control_port,
                                                                 std::vector<uint16_t> data_ports) {
  auto control = net::ParseAddress(upstream, kDefaultControlPort);
  if (!control.ok()) {
    return InvalidArgument("upstream '" + upstream + "': " + control.status().message() +
                           "; use HOST[:PORT] of the upstream switch's control plane");
  }
  auto local = LocalAddressToward(control.value());
  if (!local.ok()) return local.status();
  std::unique_ptr<UpstreamClient> c(new UpstreamClient());
  c->control_ = control.value();
  c->local_ = local.value();
  c->data_ports_ = std::move(data_ports);
  c->name_ = "upstream switch " + net::FormatAddress(c->control_);
  c->control_port_.store(control_port);
  grpc::ChannelArguments args;
  // A rack switch gone must be noticed within seconds, as a worker's would.
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 2000);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 2000);
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  c->channel_ = grpc::CreateCustomChannel(net::FormatAddress(c->control_),
                                          grpc::InsecureChannelCredentials(), args);
  c->stub_ = control::v1::Control::NewStub(c->channel_);
  return c;
}

StatusOr<std::unique_ptr<UpstreamCall>> UpstreamClient::Join(const grpc::ServerContext& worker_call,
                                                             const control::v1::JoinRequest& worker,
                                                             uint32_t max_elements_per_packet,
                                                             control::v1::Assignment* assignment) {
  control::v1::JoinRequest request = worker;
  request.clear_data_addresses();
  for (int t = 0; t < worker.data_addresses_size(); ++t) {
    sockaddr_in data = local_;
    data.sin_port = htons(data_ports_[size_t(t) % data_ports_.size()]);
    request.add_data_addresses(net::FormatAddress(data));
  }
  // Packets cross both links: the worker's path and this switch's limit.
  const uint32_t path = worker.path_elements_per_packet() ? worker.path_elements_per_packet()
                                                          : kUnknownPathElementsPerPacket;
  request.set_path_elements_per_packet(std::min(path, max_elements_per_packet));
  request.set_accept_result_multicast(false);
  request.set_via_switch(via());
  auto call = std::make_unique<UpstreamCall>();
  call->context_ = grpc::ClientContext::FromServerContext(worker_call);
  call->reader_ = stub_->Join(call->context_.get(), request);
  control::v1::JobEvent first;
  if (!call->reader_->Read(&first)) {
    const Status s = call->Finish();
    return Status(s.code() == StatusCode::kOk ? StatusCode::kAborted : s.code(),
                  name_ + ": " + s.message());
  }
  if (!first.has_assignment()) {
    call->Cancel();
    return Status(StatusCode::kInternal, name_ + " sent no assignment");
  }
  *assignment = first.assignment();
  return call;
}

std::string UpstreamClient::via() const {
  sockaddr_in via = local_;
  via.sin_port = htons(control_port_.load());
  return net::FormatAddress(via);
}

Status UpstreamClient::Leave(const std::string& job_name, uint32_t rank, uint64_t token,
                             const std::string& reason) {
  control::v1::LeaveRequest request;
  request.set_job_name(job_name);
  request.set_rank(rank);
  request.set_token(token);
  request.set_reason(reason);
  control::v1::LeaveReply reply;
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  const Status s = FromGrpc(stub_->Leave(&context, request, &reply));
  return s.ok() ? s : Status(s.code(), name_ + ": " + s.message());
}

StatusOr<std::vector<sockaddr_in>> UpstreamClient::DataAddresses(const control::v1::Assignment& a,
                                                                 uint16_t threads) const {
  auto data = AssignedData(a, control_);
  if (!data.ok()) return Status(data.status().code(), name_ + ": " + data.status().message());
  std::vector<sockaddr_in> out(threads, data.value().address);
  for (uint16_t t = 0; t < threads; ++t) {
    out[t].sin_port = htons(data.value().ports[t % data.value().ports.size()]);
  }
  return out;
}

}  // namespace switchml
