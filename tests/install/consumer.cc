// A program outside the switchml tree, built against an installed switchml:
// an embedded switch and one rank on loopback all-reduce a small tensor.
#include <cstdio>
#include <vector>

#include "switchml/context.h"
#include "switchml/switch_server.h"
#include "switchml/version.h"

int main() {
  switchml::SwitchConfig sw;
  sw.bind_address = "127.0.0.1";
  sw.control_port = 0;
  sw.data_port = 0;
  auto server = switchml::SwitchServer::Start(sw);
  if (!server.ok()) {
    std::fprintf(stderr, "%s\n", server.status().ToString().c_str());
    return 1;
  }
  switchml::ContextConfig config;
  config.switch_address = "127.0.0.1:" + std::to_string(server.value()->control_port());
  auto context = switchml::Context::Start(config);
  if (!context.ok()) {
    std::fprintf(stderr, "%s\n", context.status().ToString().c_str());
    return 1;
  }
  std::vector<int32_t> data = {1, -2, 3, 40000};
  const switchml::Status s =
      context.value()->AllReduce(data.data(), data.data(), data.size(), switchml::DType::kInt32);
  if (!s.ok() || data != std::vector<int32_t>{1, -2, 3, 40000}) {
    std::fprintf(stderr, "all-reduce: %s\n", s.ToString().c_str());
    return 1;
  }
  std::printf("switchml %s: all-reduce ok\n", switchml::kVersion);
  return 0;
}
