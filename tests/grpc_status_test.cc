#include "rpc/grpc_status.h"

#include <gtest/gtest.h>

namespace switchml {
namespace {

// What the switch sends, the worker reads back as the same code and message.
TEST(GrpcStatus, EveryCodeSurvivesTheRoundTrip) {
  for (StatusCode code :
       {StatusCode::kOk, StatusCode::kInvalidArgument, StatusCode::kFailedPrecondition,
        StatusCode::kResourceExhausted, StatusCode::kAlreadyExists, StatusCode::kNotFound,
        StatusCode::kDeadlineExceeded, StatusCode::kDataLoss, StatusCode::kAborted,
        StatusCode::kInternal}) {
    const Status sent(code, code == StatusCode::kOk ? "" : "why");
    const Status got = FromGrpc(ToGrpc(sent));
    EXPECT_EQ(got.code(), code) << StatusCodeName(code);
    EXPECT_EQ(got.message(), sent.message());
  }
}

TEST(GrpcStatus, AnUnreachablePeerIsADeadlineAndOtherCodesAnAbort) {
  EXPECT_EQ(FromGrpc(grpc::Status(grpc::StatusCode::UNAVAILABLE, "x")).code(),
            StatusCode::kDeadlineExceeded);
  EXPECT_EQ(FromGrpc(grpc::Status(grpc::StatusCode::CANCELLED, "x")).code(), StatusCode::kAborted);
  EXPECT_EQ(FromGrpc(grpc::Status(grpc::StatusCode::UNKNOWN, "x")).code(), StatusCode::kAborted);
}

}  // namespace
}  // namespace switchml
