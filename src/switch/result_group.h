// Where the software switch multicasts a job's results (host-local): one
// group per (job-table entry, worker thread), on the result port of the
// shard that serves the thread. The switch holds that port bound on
// 127.0.0.1, so switches on one host never share it, and it is not the data
// port, which a switch listening on 0.0.0.0 holds for every address.
#pragma once

#include <netinet/in.h>

#include <cstdint>

namespace switchml {

// Worker threads per job that can get their own group.
constexpr uint32_t kMaxResultGroupThreads = 64;

// 239/8 is administratively scoped, and the switch sends with TTL 0, so
// the datagrams never leave the host. Distinct for every (entry < 65536,
// thread < kMaxResultGroupThreads) of one switch.
inline sockaddr_in ResultGroup(uint32_t entry, uint32_t thread, uint16_t port) {
  sockaddr_in group{};
  group.sin_family = AF_INET;
  group.sin_addr.s_addr = htonl(0xEF000000u | (entry & 0xFFFFu) << 6 | thread);
  group.sin_port = htons(port);
  return group;
}

}  // namespace switchml
