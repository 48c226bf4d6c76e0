// Starting a Context over a transport object instead of config.transport's
// (the in-process SimFabric of the tests). Internal: the transport interface
// is not installed.
#pragma once

#include <memory>

#include "switchml/context.h"
#include "transport/transport.h"

namespace switchml {

// Context::Start over `transport`.
StatusOr<std::unique_ptr<Context>> StartContext(const ContextConfig& config,
                                                std::shared_ptr<transport::Transport> transport);

}  // namespace switchml
