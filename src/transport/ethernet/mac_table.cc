#include "transport/ethernet/mac_table.h"

#include <algorithm>

namespace switchml::transport::ethernet {

void MacTable::Learn(uint32_t address, const Mac& mac) {
  if (address == 0) return;
  const size_t bucket = Bucket(address);
  const std::span<Entry> set(&learned_[bucket * kWays], kWays);
  Entry* e = Search(set, address);
  if (e == nullptr) e = Search(set, 0u);
  if (e == nullptr) {
    e = &set[next_way_[bucket]];
    next_way_[bucket] = uint8_t((next_way_[bucket] + 1) % kWays);
  }
  e->address = address;
  e->mac = mac;
}

bool MacTable::Pin(uint32_t address, const Mac& mac) {
  if (address == 0) return true;
  Entry* e = Search(std::span<Entry>(pinned_.data(), pinned_count_), address);
  if (e == nullptr) {
    if (pinned_count_ == kMaxPinned) return false;
    e = &pinned_[pinned_count_++];
  }
  e->address = address;
  e->mac = mac;
  return true;
}

void MacTable::Resolved(uint32_t address, const Mac& mac) {
  if (address == 0) return;
  Entry* e = Search(std::span<Entry>(resolved_), address);
  if (e == nullptr) {
    e = &resolved_[next_resolved_];
    next_resolved_ = (next_resolved_ + 1) % kMaxResolved;
  }
  e->address = address;
  e->mac = mac;
}

const Mac* MacTable::Find(uint32_t address) const {
  if (address == 0) return nullptr;
  const Entry* e =
      Search(std::span<const Entry>(&learned_[Bucket(address) * kWays], kWays), address);
  if (e == nullptr) e = Search(std::span<const Entry>(pinned_.data(), pinned_count_), address);
  if (e == nullptr) e = Search(std::span<const Entry>(resolved_), address);
  return e != nullptr ? &e->mac : nullptr;
}

void MacTable::Miss(uint32_t address) {
  if (address == 0 || miss_count_ == kMaxMisses) return;
  if (std::find(misses_.begin(), misses_.begin() + miss_count_, address) !=
      misses_.begin() + miss_count_) {
    return;
  }
  misses_[miss_count_++] = address;
}

}  // namespace switchml::transport::ethernet
