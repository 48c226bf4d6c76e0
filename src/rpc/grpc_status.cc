#include "rpc/grpc_status.h"

namespace switchml {
namespace {

struct CodePair {
  StatusCode ours;
  grpc::StatusCode theirs;
};
constexpr CodePair kCodes[] = {
    {StatusCode::kInvalidArgument, grpc::StatusCode::INVALID_ARGUMENT},
    {StatusCode::kFailedPrecondition, grpc::StatusCode::FAILED_PRECONDITION},
    {StatusCode::kResourceExhausted, grpc::StatusCode::RESOURCE_EXHAUSTED},
    {StatusCode::kAlreadyExists, grpc::StatusCode::ALREADY_EXISTS},
    {StatusCode::kNotFound, grpc::StatusCode::NOT_FOUND},
    {StatusCode::kDeadlineExceeded, grpc::StatusCode::DEADLINE_EXCEEDED},
    {StatusCode::kDataLoss, grpc::StatusCode::DATA_LOSS},
    {StatusCode::kAborted, grpc::StatusCode::ABORTED},
    {StatusCode::kInternal, grpc::StatusCode::INTERNAL},
};

}  // namespace

grpc::Status ToGrpc(const Status& s) {
  if (s.ok()) return grpc::Status::OK;
  for (const CodePair& c : kCodes) {
    if (c.ours == s.code()) return grpc::Status(c.theirs, s.message());
  }
  return grpc::Status(grpc::StatusCode::INTERNAL, s.message());
}

Status FromGrpc(const grpc::Status& s) {
  if (s.ok()) return Status::Ok();
  if (s.error_code() == grpc::StatusCode::UNAVAILABLE) {
    return Status(StatusCode::kDeadlineExceeded, s.error_message());
  }
  for (const CodePair& c : kCodes) {
    if (c.theirs == s.error_code()) return Status(c.ours, s.error_message());
  }
  return Status(StatusCode::kAborted, s.error_message());
}

}  // namespace switchml
