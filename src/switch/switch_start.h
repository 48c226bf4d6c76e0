// Starting a SwitchServer over what the public API does not offer: a
// transport object (the in-process SimFabric of the tests) or a data-plane
// target outside this process (a P4 switch; `switchml-switch --dataplane
// bmv2` builds one). Internal: neither type is installed.
#pragma once

#include <memory>

#include "switch/data_plane_target.h"
#include "switchml/switch_server.h"
#include "transport/transport.h"

namespace switchml {

// SwitchServer::Start over `transport` instead of config.transport's.
StatusOr<std::unique_ptr<SwitchServer>> StartSwitchServer(
    const SwitchConfig& config, std::shared_ptr<transport::Transport> transport);
// Only the control plane, over `target`. The settings of the software data
// plane (data_threads, data_plane) must keep their defaults: the target has
// its own limits.
StatusOr<std::unique_ptr<SwitchServer>> StartSwitchServer(const SwitchConfig& config,
                                                          std::unique_ptr<DataPlaneTarget> target);

}  // namespace switchml
