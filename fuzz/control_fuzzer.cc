// libFuzzer target: the control plane's request handling. The input is a
// sequence of serialized JoinRequests (each prefixed by a one-byte length
// tag), validated and applied to a JobRegistry, with some jobs ended in
// between, as the switch's Join handler does.
#include <cstdlib>

#include "control/job_registry.h"
#include "switch/join_request.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace switchml;
  DataPlaneConfig config;
  config.pool_slots = 64;
  config.max_elements_per_packet = 1024;
  config.max_workers = 16;
  config.max_jobs = 4;
  JobRegistry registry(config);

  size_t at = 0;
  while (at < size) {
    const size_t length = std::min<size_t>(data[at], size - at - 1);
    const uint8_t* message = data + at + 1;
    at += 1 + length;
    control::v1::JoinRequest request;
    if (!request.ParseFromArray(message, int(length))) continue;
    auto parsed = ParseJoinRequest(request);
    if (!parsed.ok()) {
      if (parsed.status().message().empty()) std::abort();  // every refusal explains itself
      continue;
    }
    const Status joined = registry.Join(parsed.value().request);
    if (!joined.ok() && joined.message().empty()) std::abort();
    if (length % 5 == 0) (void)registry.End(parsed.value().request.job_name);
    if (registry.free_slots() > config.pool_slots) std::abort();
  }
  return 0;
}
