// How a job's work splits among its I/O threads: thread t of T owns the
// items [t*N/T, (t+1)*N/T) of N (slots of the job's pool, chunks of a
// tensor, packets of a fixed window). Every rank, the software switch and
// the P4 driver must split alike, so they all use these two functions.
#pragma once

#include <cstdint>

namespace switchml {

struct ThreadRange {
  uint64_t begin;
  uint64_t end;  // one past the last
  uint64_t size() const { return end - begin; }
};

// REQUIRES: threads > 0, t < threads.
constexpr ThreadRange ThreadShare(uint64_t items, uint32_t t, uint32_t threads) {
  return {t * items / threads, (t + 1) * items / threads};
}

// The thread whose ThreadShare holds item `i`. REQUIRES: i < items.
constexpr uint32_t ThreadOf(uint64_t i, uint64_t items, uint32_t threads) {
  return uint32_t(((i + 1) * threads - 1) / items);
}

}  // namespace switchml
