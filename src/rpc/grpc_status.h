// switchml Status <-> gRPC status, one mapping both ways for the control
// plane's server (switch) and client (Context, switchml-ctl).
#pragma once

#include <grpcpp/support/status.h>

#include "switchml/status.h"

namespace switchml {

grpc::Status ToGrpc(const Status& s);
// The inverse of ToGrpc for its codes; other gRPC codes become kAborted
// (UNAVAILABLE: kDeadlineExceeded, the peer cannot be reached). The
// message is the gRPC message.
Status FromGrpc(const grpc::Status& s);

}  // namespace switchml
