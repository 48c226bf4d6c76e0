#include "dataplane/data_plane.h"

#include <algorithm>
#include <string>

#include "quantize/quantize.h"

namespace switchml {
namespace {

// A stalled slot's first NACK comes after the job's arrival spread, at least
// this long (a spread of 0 would NACK packets still on the wire) ...
constexpr Nanos kNackMinDelay = std::chrono::nanoseconds(500);
// ... and further ones after twice the previous wait, this many times, then
// after an eighth of the stall's age, at most kNackMaxDelay.
constexpr int kNackDoublings = 6;
constexpr Nanos kNackMaxDelay = std::chrono::milliseconds(100);
// ... and at least this many of the shortest gaps between a rank's packets
// (a packet's time on its link): ranks drift apart by a few packets, and a
// packet takes 90 ns on a 100 Gbit/s link but 9 µs on a 1 Gbit/s one.
constexpr int kGapsPerNackDelay = 2;
// A watch falls due; the slot is NACKed at once if a missing rank sent a
// newer chunk (links keep order: its packet was lost). Ranks that sent
// nothing newer may only be behind: they are NACKed from this many watches
// on (at 2^(n+1) - 1 times the delay), and the silent watches leave the
// slot's spread sample in (Karn's rule leaves NACKed slots out).
constexpr int kSilentWatches = 3;

}  // namespace

const char* DropReasonName(DropReason r) {
  switch (r) {
    case DropReason::kNone:
      return "none";
    case DropReason::kMalformed:
      return "malformed";
    case DropReason::kNotContribution:
      return "not_contribution";
    case DropReason::kUnknownJob:
      return "unknown_job";
    case DropReason::kRankOutOfRange:
      return "rank_out_of_range";
    case DropReason::kSlotOutOfRange:
      return "slot_out_of_range";
    case DropReason::kElementCount:
      return "element_count";
    case DropReason::kBadExponent:
      return "bad_exponent";
    case DropReason::kStaleChunk:
      return "stale_chunk";
    case DropReason::kChunkMismatch:
      return "chunk_mismatch";
    case DropReason::kExponentMismatch:
      return "exponent_mismatch";
    case DropReason::kSourceMismatch:
      return "source_mismatch";
    case DropReason::kBadMac:
      return "bad_mac";
    case DropReason::kVersionConflict:
      return "version_conflict";
  }
  return "unknown";
}

uint64_t DataPlaneCounters::TotalDrops() const {
  uint64_t total = 0;
  for (uint64_t d : drops) total += d;
  return total;
}

DataPlaneCounters& DataPlaneCounters::operator+=(const DataPlaneCounters& other) {
  for (const EventCounter& e : kEventCounters) this->*e.field += other.*e.field;
  header_copies += other.header_copies;
  tail_result_copies += other.tail_result_copies;
  for (size_t i = 0; i < drops.size(); ++i) drops[i] += other.drops[i];
  for (size_t i = 0; i < decode_errors.size(); ++i) decode_errors[i] += other.decode_errors[i];
  return *this;
}

Status DataPlaneConfig::Validate() const {
  if (pool_slots == 0 || pool_slots > (1u << 24)) {
    return InvalidArgument("pool_slots=" + std::to_string(pool_slots) +
                           " is out of range; use 1..16777216");
  }
  if (max_elements_per_packet < kMinElementsPerPacket ||
      max_elements_per_packet > kMaxElementsPerPacket) {
    return InvalidArgument("max_elements_per_packet=" + std::to_string(max_elements_per_packet) +
                           " is out of range; use " + std::to_string(kMinElementsPerPacket) + ".." +
                           std::to_string(kMaxElementsPerPacket));
  }
  if (max_workers == 0 || max_workers > kMaxWorldSize) {
    return InvalidArgument("max_workers=" + std::to_string(max_workers) +
                           " is out of range; use 1.." + std::to_string(kMaxWorldSize));
  }
  if (max_jobs == 0) return InvalidArgument("max_jobs must be at least 1");
  const double bytes = 2.0 * pool_slots * max_elements_per_packet * 4.0;
  if (bytes > 16.0 * (1ull << 30)) {
    return InvalidArgument("pool_slots * max_elements_per_packet needs " +
                           std::to_string(uint64_t(bytes)) +
                           " bytes of accumulators; the limit is 16 GiB — use fewer slots");
  }
  return Status::Ok();
}

StatusOr<std::unique_ptr<DataPlane>> DataPlane::Create(const DataPlaneConfig& config) {
  if (Status s = config.Validate(); !s.ok()) return s;
  return std::make_unique<DataPlane>(config);
}

DataPlane::DataPlane(const DataPlaneConfig& config)
    : config_(config), bitmap_words_((config.max_workers + 63) / 64) {
  const size_t slots = 2 * size_t(config.pool_slots);
  acc_.assign(slots * config.max_elements_per_packet, 0);
  seen_.assign(slots * bitmap_words_, 0);
  remaining_.assign(slots, 0);
  used_.assign(slots, 0);
  words_.assign(slots, 0);
  chunk_.assign(slots, 0);
  exponent_.assign(slots, 0);
  max_next_exponent_.assign(slots, 0);
  awaits_upstream_.assign(slots, 0);
  upstream_tries_.assign(slots, 0);
  upstream_sent_at_.assign(slots, Nanos(0));
  first_at_.assign(slots, Nanos(0));
  late_since_.assign(slots, Nanos::max());
  result_at_.assign(slots, Nanos(0));
  previous_.assign(slots, kNoSlot);
  nack_tries_.assign(slots, 0);
  nacked_.assign(slots, 0);
  copied_.assign(slots, 0);
  nack_asked_.assign(slots, 0);
  nack_repeats_.assign(slots, 0);
  nack_fresh_.assign(slots, 0);
  nack_due_.assign(slots, Nanos(0));
  // Each aggregation is watched once at a time, and a watch outlives its
  // aggregation until it falls due: twice the slots covers both.
  stalls_.reserve(2 * slots);
  jobs_.resize(config.max_jobs);
}

Nanos DataPlane::JobEntry::NackDelay() const {
  const Nanos floor = min_gap == Nanos::max()
                          ? kNackMinDelay
                          : std::max(kNackMinDelay, kGapsPerNackDelay * min_gap);
  return std::min(std::max(spread + 4 * spread_dev, floor), kNackMaxDelay);
}

void DataPlane::WatchStall(JobEntry& job, size_t slot, Nanos delay) {
  // Full: the workers' timers still recover it (a push would reallocate).
  if (stalls_.size() == stalls_.capacity()) return;
  nack_due_[slot] = now_ + delay;  // supersedes any earlier watch of the slot
  stalls_.push_back({nack_due_[slot], uint32_t(slot), chunk_[slot], uint32_t(&job - jobs_.data())});
  std::push_heap(stalls_.begin(), stalls_.end(), std::greater<>());
}

void DataPlane::SampleSpread(JobEntry& job, size_t slot) {
  // Karn's rule: a NACKed slot's completion measures the recovery, not the
  // spread.
  if (nacked_[slot] != 0) return;
  const Nanos sample = now_ - first_at_[slot];
  if (job.spread == Nanos(0) && job.spread_dev == Nanos(0)) {
    job.spread = sample;
    job.spread_dev = sample / 2;
    return;
  }
  const Nanos error = job.spread > sample ? job.spread - sample : sample - job.spread;
  job.spread_dev = (job.spread_dev * 3 + error) / 4;
  job.spread = (job.spread * 7 + sample) / 8;
}

size_t DataPlane::WriteNack(JobEntry& job, size_t slot, uint8_t version, uint16_t job_slot,
                            NackScope scope, std::span<uint8_t> out, bool* names_lost) {
  // Payload: two bitmaps of the missing ranks (of those served here) as
  // 32-bit words, rank r in word r/32, bit r%32: first those whose newer
  // chunk came (this one was lost), then the others (behind, or lost too;
  // only those `scope` names).
  const uint16_t words = uint16_t((job.reg.world_size + 31) / 32);
  EncodeHeader(
      SlotHeader(job, slot, MessageType::kNack, kAllRanks, version, job_slot, uint16_t(2 * words)),
      out);
  const uint64_t* seen = &seen_[slot * bitmap_words_];
  // Ranks counted in the other version's completed aggregation (the chunk
  // before this one in the slot) wait for its result, which went out before
  // the others could start this one.
  const size_t other = OtherVersionOf(slot);
  const bool other_done = Completed(other);
  const uint64_t* counted_before = &seen_[other * bitmap_words_];
  uint8_t* dst = out.data() + kHeaderBytes;
  uint32_t named = 0;
  // A newer chunk proves a loss once the reordering window has passed.
  const bool overtaken = !WithinReorderWindow(job, slot);
  // Every missing rank (the late watches' scope): a rank named in bitmap 2
  // is named there again, for this slot or another, only after the job's
  // shortest turnaround. It cannot have answered sooner, and a rank merely
  // behind would draw a NACK from each slot it is missing from. (A watch a
  // retransmission asked for names them all: that worker's timers, not
  // NACKs, pace its recovery.)
  const bool once_per_turnaround = scope == NackScope::kAll && job.min_turnaround != Nanos::max();
  const uint32_t thread = job.ThreadOfSlot(job_slot);  // whose chunk order tells a loss
  for (uint16_t w = 0; w < words; ++w) {
    const uint16_t first_rank = uint16_t(32 * w);
    const uint16_t ranks = uint16_t(std::min(32, job.reg.world_size - first_rank));
    uint32_t served = ranks == 32 ? ~0u : (1u << ranks) - 1;
    if (!job.local_mask.empty()) served &= uint32_t(job.local_mask[w / 2] >> (32 * (w % 2)));
    const uint32_t missing = ~uint32_t(seen[w / 2] >> (32 * (w % 2))) & served;
    uint32_t lost = 0, stopped = 0, recent = 0;
    for (uint32_t bits = missing; bits != 0; bits &= bits - 1) {
      const int b = __builtin_ctz(bits);
      const size_t sender = job.Sender(uint16_t(first_rank + b), thread);
      if (overtaken && job.SentNewer(sender, chunk_[slot])) lost |= 1u << b;
      if (scope == NackScope::kLostOrWaiting && job.SilentSince(sender, first_at_[slot])) {
        stopped |= 1u << b;
      }
      const Nanos named_at = job.waiting_named_at[first_rank + b];
      if (once_per_turnaround && named_at != Nanos::min() && now_ - named_at < job.min_turnaround) {
        recent |= 1u << b;
      }
    }
    uint32_t others = missing & ~lost;
    if (scope == NackScope::kLost) {
      others = 0;
    } else if (scope == NackScope::kLostOrWaiting) {
      // Only ranks that sent nothing since this chunk's first contribution:
      // one still sending earlier chunks is behind, and a NACK per slot
      // would only crowd its link.
      others &= other_done ? uint32_t(counted_before[w / 2] >> (32 * (w % 2))) & stopped : 0;
    }
    others &= ~recent;
    for (uint32_t bits = others; bits != 0; bits &= bits - 1) {
      job.waiting_named_at[first_rank + __builtin_ctz(bits)] = now_;
    }
    StoreBe32(dst + 4 * w, lost);
    StoreBe32(dst + 4 * (words + w), others);
    named |= lost | others;
    *names_lost |= lost != 0;
  }
  return named != 0 ? PacketBytes(uint16_t(2 * words)) : 0;
}

Verdict DataPlane::NextNack(std::span<uint8_t> out) {
  while (!stalls_.empty() && stalls_.front().due <= now_) {
    std::pop_heap(stalls_.begin(), stalls_.end(), std::greater<>());
    const StallWatch w = stalls_.back();
    stalls_.pop_back();
    JobEntry& job = jobs_[w.job];
    const size_t slot = w.slot;
    // Watches superseded, or of slots that completed, moved on or left with
    // their job.
    if (w.due != nack_due_[slot] || !job.active || remaining_[slot] == 0 ||
        chunk_[slot] != w.chunk) {
      continue;
    }
    const uint32_t pool_slot = uint32_t(slot % config_.pool_slots);
    if (pool_slot < job.reg.pool_base || pool_slot >= job.reg.pool_base + job.reg.pool_slots) {
      continue;  // the table entry now holds another job
    }
    const auto version = uint8_t(slot / config_.pool_slots);
    const auto job_slot = uint16_t(pool_slot - job.reg.pool_base);
    // Again after twice the wait, a few times; a slot stalled for longer (a
    // rank that is late rather than lost: paused, or not started yet) after
    // an eighth of its age, so such a rank gets a NACK per slot a number of
    // times that grows with the log of its delay, never more than every
    // kNackMaxDelay.
    // A repeat (below) names the lost ranks again and leaves the schedule
    // as it was.
    const uint8_t repeat = nack_repeats_[slot];
    const NackScope scope = nack_asked_[slot]                       ? NackScope::kAllAsked
                            : repeat != 0 || nack_tries_[slot] == 0 ? NackScope::kLost
                            : nack_tries_[slot] < kSilentWatches    ? NackScope::kLostOrWaiting
                                                                    : NackScope::kAll;
    nack_asked_[slot] = 0;
    if (repeat == 0 && nack_tries_[slot] < kNackDoublings) ++nack_tries_[slot];
    const Nanos age = now_ - first_at_[slot];
    Nanos again = std::min(std::max(job.NackDelay() * (int64_t{1} << nack_tries_[slot]), age / 8),
                           kNackMaxDelay);
    // A packet overtaken within the reordering window is not named lost yet:
    // look again when the window has passed.
    if (WithinReorderWindow(job, slot)) {
      again = std::min(again, late_since_[slot] + 2 * job.reorder_window - now_);
    }
    bool names_lost = false;
    const size_t bytes = WriteNack(job, slot, version, job_slot, scope, out, &names_lost);
    // A NACK is lost as often as any packet, and then nothing tells its rank
    // of the loss before the rank's own timers or this slot's next watch,
    // both far longer than a resend takes: name the lost ranks again once
    // the resend is overdue, twice the job's shortest turnaround after this
    // NACK, doubling per repeat. (A turnaround measured within one receive
    // batch may be 0: at least kNackMinDelay.) A rank named for the first
    // time starts the doubling over: the NACK that first named it may be
    // the one lost.
    const uint8_t step = nack_fresh_[slot] ? 0 : repeat;
    nack_fresh_[slot] = 0;
    nack_repeats_[slot] = 0;
    if (names_lost && job.min_turnaround != Nanos::max()) {
      const Nanos overdue = std::max(job.min_turnaround, kNackMinDelay) *
                            (int64_t{2} << std::min(int{step}, kNackDoublings));
      if (overdue < again) {
        again = overdue;
        nack_repeats_[slot] = uint8_t(std::min(step + 1, 255));
      }
    }
    WatchStall(job, slot, again);
    if (bytes == 0) continue;  // none lost yet: the missing ranks may be behind
    // The slot's completion then times a recovery, not the spread (unless
    // the NACK only woke ranks that may have lost the previous result).
    if (names_lost || scope >= NackScope::kAll) nacked_[slot] = 1;
    // A packet the window waited for in vain: lost. Waiting costs each such
    // recovery, so the window shrinks unless overtaken packets keep it.
    if (names_lost && repeat == 0) job.reorder_window -= job.reorder_window / 16;
    ++counters_.nacks_sent;
    ++job.counters.nacks_sent;
    return Verdict{Action::kNackToMissing, DropReason::kNone, kAllRanks, job.reg.world_size, bytes,
                   job.reg.id.value(),     job_slot};
  }
  return Verdict{};
}

Verdict DataPlane::NextTimerPacket(Nanos now, std::span<uint8_t> out) {
  AdvanceClock(now);
  const Verdict nack = NextNack(out);
  if (nack.action != Action::kDrop) return nack;
  return NextUpstreamResend(now, out);
}

Nanos DataPlane::NextTimer() const {
  const Nanos nack = stalls_.empty() ? Nanos::max() : stalls_.front().due;
  return std::min(nack, NextUpstreamScan());
}

void DataPlane::ResetSegment(uint32_t base, uint32_t count) {
  for (uint8_t v = 0; v < 2; ++v) {
    const size_t first = SlotIndexOf(v, base);
    std::fill_n(seen_.begin() + first * bitmap_words_, count * bitmap_words_, 0);
    std::fill_n(remaining_.begin() + first, count, 0);
    std::fill_n(used_.begin() + first, count, 0);
    std::fill_n(chunk_.begin() + first, count, 0);
    std::fill_n(previous_.begin() + first, count, kNoSlot);
    for (size_t i = first; i < first + count; ++i) {
      awaiting_ -= awaits_upstream_[i];
      awaits_upstream_[i] = 0;
    }
  }
}

Status DataPlane::CheckRegistration(const JobRegistration& job) const {
  const std::string id = std::to_string(job.id.value());
  if (job.world_size == 0 || job.world_size > config_.max_workers) {
    return InvalidArgument("job " + id + ": world_size=" + std::to_string(job.world_size) +
                           " is out of range; this switch accepts 1.." +
                           std::to_string(config_.max_workers) + " workers per job");
  }
  if (job.elements_per_packet == 0 || job.elements_per_packet > config_.max_elements_per_packet) {
    return InvalidArgument("job " + id +
                           ": elements_per_packet=" + std::to_string(job.elements_per_packet) +
                           " is out of range; this switch accepts 1.." +
                           std::to_string(config_.max_elements_per_packet));
  }
  if (job.pool_slots == 0 || uint64_t(job.pool_base) + job.pool_slots > config_.pool_slots) {
    return ResourceExhausted("job " + id + ": pool segment [" + std::to_string(job.pool_base) +
                             ", " + std::to_string(uint64_t(job.pool_base) + job.pool_slots) +
                             ") does not fit a pool of " + std::to_string(config_.pool_slots) +
                             " slots");
  }
  for (size_t i = 0; i < job.local_ranks.size(); ++i) {
    if (job.local_ranks[i] >= job.world_size ||
        (i > 0 && job.local_ranks[i] <= job.local_ranks[i - 1])) {
      return InvalidArgument("job " + id + ": local_ranks must ascend within 0.." +
                             std::to_string(job.world_size - 1) + "; " +
                             std::to_string(job.local_ranks[i]) + " does not");
    }
  }
  if (job.threads == 0 || job.threads > job.pool_slots) {
    return InvalidArgument("job " + id + ": threads=" + std::to_string(job.threads) +
                           " is out of range; a job of " + std::to_string(job.pool_slots) +
                           " slots has 1.." + std::to_string(job.pool_slots) +
                           " threads per rank (each owns at least one slot)");
  }
  if (job.upstream && job.upstream->retransmit_timeout <= Nanos(0)) {
    return InvalidArgument("job " + id + ": the upstream retransmit_timeout must be positive");
  }
  return Status::Ok();
}

Status DataPlane::CheckNoConflict(const JobRegistration& job, const JobEntry& entry) {
  const std::string id = std::to_string(job.id.value());
  if (job.upstream && FindByUpstream(job.upstream->job.value()) != nullptr) {
    return {StatusCode::kAlreadyExists, "job " + id +
                                            ": another job here already has upstream job " +
                                            std::to_string(job.upstream->job.value())};
  }
  if (entry.active) {
    return {StatusCode::kAlreadyExists, "job " + id + ": job table entry is taken by job " +
                                            std::to_string(entry.reg.id.value()) +
                                            "; unregister it or pick another id"};
  }
  for (const JobEntry& other : jobs_) {
    if (!other.active) continue;
    const uint64_t a0 = job.pool_base, a1 = a0 + job.pool_slots;
    const uint64_t b0 = other.reg.pool_base, b1 = b0 + other.reg.pool_slots;
    if (a0 < b1 && b0 < a1) {
      return {StatusCode::kAlreadyExists,
              "job " + id + ": pool segment overlaps job " + std::to_string(other.reg.id.value())};
    }
  }
  return Status::Ok();
}

Status DataPlane::RegisterJob(const JobRegistration& job) {
  if (Status s = CheckRegistration(job); !s.ok()) return s;
  JobEntry& entry = jobs_[job.id.value() % config_.max_jobs];
  if (Status s = CheckNoConflict(job, entry); !s.ok()) return s;
  ResetSegment(job.pool_base, job.pool_slots);
  entry.active = true;
  entry.reg = job;
  entry.counters = DataPlaneCounters{};
  entry.expected = job.local_ranks.empty() ? job.world_size : uint16_t(job.local_ranks.size());
  entry.spread = entry.spread_dev = Nanos(0);
  entry.min_gap = Nanos::max();
  entry.min_turnaround = Nanos::max();
  entry.reorder_window = Nanos(0);
  entry.last_result.assign(job.threads, kNoSlot);
  entry.aggregating = 0;
  entry.aggregating_mean8 = 0;
  entry.burst_resends = entry.burst_results = 0;
  const size_t senders = size_t(job.world_size) * job.threads;
  entry.newest_chunk.assign(senders, 0);
  entry.sent_any.assign(senders, 0);
  entry.newest_at.assign(senders, Nanos(0));
  entry.waiting_named_at.assign(job.world_size, Nanos::min());
  entry.local_mask.clear();
  if (!job.local_ranks.empty()) {
    entry.local_mask.assign(bitmap_words_, 0);
    for (uint16_t r : job.local_ranks) entry.local_mask[r / 64] |= uint64_t{1} << (r % 64);
  }
  if (job.upstream) {
    upstream_jobs_.push_back(size_t(&entry - jobs_.data()));
    scan_job_ = SIZE_MAX;  // restart any scan: the list changed
  }
  return Status::Ok();
}

Status DataPlane::UnregisterJob(JobId id) {
  JobEntry* entry = FindJob(id.value());
  if (entry == nullptr) {
    return {StatusCode::kNotFound, "job " + std::to_string(id.value()) + " is not registered"};
  }
  entry->active = false;
  ResetSegment(entry->reg.pool_base, entry->reg.pool_slots);  // nothing awaits any more
  const size_t index = size_t(entry - jobs_.data());
  upstream_jobs_.erase(std::remove(upstream_jobs_.begin(), upstream_jobs_.end(), index),
                       upstream_jobs_.end());
  scan_job_ = SIZE_MAX;
  return Status::Ok();
}

bool DataPlane::HasJob(JobId id) const {
  const JobEntry& e = jobs_[id.value() % config_.max_jobs];
  return e.active && e.reg.id == id;
}

DataPlaneCounters DataPlane::JobCounters(JobId id) const {
  return HasJob(id) ? jobs_[id.value() % config_.max_jobs].counters : DataPlaneCounters{};
}

DataPlane::JobEntry* DataPlane::FindJob(uint32_t job) {
  JobEntry& e = jobs_[job % config_.max_jobs];
  return (e.active && e.reg.id.value() == job) ? &e : nullptr;
}

DataPlane::JobEntry* DataPlane::FindByUpstream(uint32_t upstream_job) {
  for (size_t index : upstream_jobs_) {
    JobEntry& e = jobs_[index];
    if (e.active && e.reg.upstream->job.value() == upstream_job) return &e;
  }
  return nullptr;
}

Verdict DataPlane::Drop(JobEntry* job, DropReason reason) {
  ++counters_.drops[size_t(reason)];
  if (job != nullptr) ++job->counters.drops[size_t(reason)];
  return Verdict{Action::kDrop, reason, 0, 0, 0};
}

void DataPlane::CountDroppedPacket(uint32_t job, DropReason reason) {
  ++counters_.packets;
  JobEntry* entry = FindJob(job);
  if (entry != nullptr) ++entry->counters.packets;
  Drop(entry, reason);
}

void DataPlane::CountDecodeError(DecodeError error) {
  ++counters_.packets;
  ++counters_.decode_errors[size_t(error)];
  Drop(nullptr, DropReason::kMalformed);
}

Verdict DataPlane::Process(std::span<const uint8_t> packet, std::span<uint8_t> out) {
  PacketView view;
  const DecodeError err = DecodePacket(packet, &view);
  if (err != DecodeError::kOk) {
    CountDecodeError(err);
    return Verdict{Action::kDrop, DropReason::kMalformed, 0, 0, 0};
  }
  return ProcessDecoded(view, out);
}

PacketHeader DataPlane::SlotHeader(const JobEntry& job, size_t slot, MessageType type,
                                   uint16_t rank, uint8_t version, uint16_t job_slot,
                                   uint16_t element_count) const {
  PacketHeader h;
  h.type = type;
  h.job = job.reg.id.value();
  h.chunk = chunk_[slot];
  h.rank = rank;
  h.slot = job_slot;
  h.element_count = element_count;
  h.version = version;
  return h;
}

size_t DataPlane::WriteResult(const JobEntry& job, size_t slot, uint16_t rank, uint8_t version,
                              uint16_t job_slot, std::span<uint8_t> out, bool to_workers,
                              int words) const {
  const auto k = uint16_t(words < 0 ? words_[slot] : words);
  PacketHeader h = SlotHeader(job, slot, MessageType::kResult, rank, version, job_slot, k);
  h.exponent = exponent_[slot];
  h.next_exponent = max_next_exponent_[slot];
  if (to_workers && previous_[slot] != kNoSlot && config_.name_previous_results) {
    h.names_previous = true;
    h.previous_version = uint8_t(previous_[slot] / config_.pool_slots);
    h.rank = uint16_t(previous_[slot] % config_.pool_slots - job.reg.pool_base);
  }
  EncodeHeader(h, out);
  const uint32_t* acc = &acc_[slot * config_.max_elements_per_packet];
  uint8_t* dst = out.data() + kHeaderBytes;
  Int32ToBigEndian(reinterpret_cast<const int32_t*>(acc), k, dst);
  return PacketBytes(k);
}

size_t DataPlane::WritePending(const JobEntry& job, size_t slot, const PacketHeader& in,
                               std::span<uint8_t> out, bool holds_chunk) const {
  // Payload: the seen-bitmap as 32-bit words, rank r in word r/32, bit r%32;
  // no rank for a chunk the slot has not started.
  const uint16_t words = uint16_t((job.reg.world_size + 31) / 32);
  PacketHeader h = in;
  h.type = MessageType::kPending;
  h.authenticated = false;  // the transport signs what it sends
  h.copy = false;           // only a contribution is a copy
  h.chunk = holds_chunk ? chunk_[slot] : in.chunk;
  h.element_count = words;
  h.exponent = 0;
  h.next_exponent = 0;
  EncodeHeader(h, out);
  const uint64_t* seen = &seen_[slot * bitmap_words_];
  uint8_t* dst = out.data() + kHeaderBytes;
  for (uint16_t w = 0; w < words; ++w) {
    StoreBe32(dst + 4 * w, holds_chunk ? uint32_t(seen[w / 2] >> (32 * (w % 2))) : 0);
  }
  return PacketBytes(words);
}

Verdict DataPlane::WriteUpstream(JobEntry& job, size_t slot, uint8_t version, uint16_t job_slot,
                                 std::span<uint8_t> out) {
  // The slot's state as one member's contribution: the partial sum is not
  // re-quantized, and the workers' scale already counts every rank of the job.
  // Always whole packets (zeros for exponent-only ones): what any upstream
  // switch takes.
  const size_t bytes = WriteResult(job, slot, job.reg.upstream->rank, version, job_slot, out, false,
                                   job.reg.elements_per_packet);
  PacketHeader h;
  h.type = MessageType::kContribution;
  h.job = job.reg.upstream->job.value();
  h.chunk = chunk_[slot];
  h.rank = job.reg.upstream->rank;
  h.slot = job_slot;
  h.element_count = job.reg.elements_per_packet;
  h.version = version;
  h.exponent = exponent_[slot];
  h.next_exponent = max_next_exponent_[slot];
  h.resend = upstream_tries_[slot] > 0;
  EncodeHeader(h, out);
  upstream_sent_at_[slot] = now_;
  return Verdict{Action::kSendUpstream, DropReason::kNone, h.rank, 0, bytes,
                 job.reg.id.value(),    job_slot};
}

Verdict DataPlane::ProcessFromUpstream(JobEntry& job, const PacketView& packet,
                                       std::span<uint8_t> out) {
  const PacketHeader& h = packet.header;
  // A pending reply: the upstream still waits for other members; the timer
  // keeps asking.
  if (h.type == MessageType::kPending) return Verdict{};
  const JobRegistration& reg = job.reg;
  if (h.type == MessageType::kNack) {
    // The upstream misses this switch's partial sum: send it again now, if
    // it is the one that awaits (else the NACK is stale or forged).
    if (h.slot >= reg.pool_slots) return Drop(&job, DropReason::kSlotOutOfRange);
    const size_t slot = SlotIndexOf(h.version, reg.pool_base + h.slot);
    if (!awaits_upstream_[slot] || h.chunk != chunk_[slot]) {
      return Drop(&job, DropReason::kStaleChunk);
    }
    if (upstream_tries_[slot] < 255) ++upstream_tries_[slot];
    ++counters_.upstream_resent;
    ++job.counters.upstream_resent;
    return WriteUpstream(job, slot, h.version, h.slot, out);
  }
  // (A result that names a previous one holds its slot in the rank field;
  // this switch's own results name its own previous ones.)
  if (!h.names_previous && h.rank != kAllRanks && h.rank != reg.upstream->rank) {
    return Drop(&job, DropReason::kRankOutOfRange);
  }
  if (h.slot >= reg.pool_slots) return Drop(&job, DropReason::kSlotOutOfRange);
  if (h.element_count != reg.elements_per_packet) return Drop(&job, DropReason::kElementCount);
  if (!IsValidExponent(h.exponent) || !IsValidExponent(h.next_exponent)) {
    return Drop(&job, DropReason::kBadExponent);
  }
  const size_t slot = SlotIndexOf(h.version, reg.pool_base + h.slot);
  // Only the result of what this slot sent up, once: anything else is a
  // duplicate or a late copy.
  if (!awaits_upstream_[slot] || h.chunk != chunk_[slot]) {
    return Drop(&job, DropReason::kStaleChunk);
  }
  if (h.exponent != exponent_[slot]) return Drop(&job, DropReason::kExponentMismatch);
  awaits_upstream_[slot] = 0;
  --awaiting_;
  // (An exponent-only slot's result to its workers stays exponent-only.)
  Int32FromBigEndian(packet.payload, reg.elements_per_packet,
                     reinterpret_cast<int32_t*>(&acc_[slot * config_.max_elements_per_packet]));
  max_next_exponent_[slot] = h.next_exponent;
  ++counters_.upstream_results;
  ++job.counters.upstream_results;
  ++counters_.slots_completed;
  ++job.counters.slots_completed;
  return ResultToAll(job, slot, 0, h, out);
}

Verdict DataPlane::NextUpstreamResend(Nanos now, std::span<uint8_t> out) {
  AdvanceClock(now);
  if (awaiting_ == 0) return Verdict{};
  if (scan_job_ == SIZE_MAX) {
    if (now_ < next_scan_) return Verdict{};
    scan_job_ = 0;
    scan_pos_ = 0;
  }
  for (; scan_job_ < upstream_jobs_.size(); ++scan_job_, scan_pos_ = 0) {
    JobEntry& job = jobs_[upstream_jobs_[scan_job_]];
    const Nanos timeout = job.reg.upstream->retransmit_timeout;
    while (scan_pos_ < 2u * job.reg.pool_slots) {
      const auto version = uint8_t(scan_pos_ / job.reg.pool_slots);
      const auto job_slot = uint16_t(scan_pos_ % job.reg.pool_slots);
      ++scan_pos_;
      const size_t slot = SlotIndexOf(version, job.reg.pool_base + job_slot);
      if (!awaits_upstream_[slot]) continue;
      const Nanos wait = timeout * (int64_t{1} << std::min<int>(upstream_tries_[slot], 6));
      if (now_ - upstream_sent_at_[slot] < wait) continue;
      if (upstream_tries_[slot] < 255) ++upstream_tries_[slot];
      ++counters_.upstream_resent;
      ++job.counters.upstream_resent;
      return WriteUpstream(job, slot, version, job_slot, out);
    }
  }
  // The next scan after a quarter of the shortest timeout (awaiting_ > 0:
  // some job has an upstream).
  scan_job_ = SIZE_MAX;
  Nanos shortest = Nanos::max();
  for (size_t index : upstream_jobs_) {
    shortest = std::min(shortest, jobs_[index].reg.upstream->retransmit_timeout);
  }
  next_scan_ = now_ + std::max(Nanos(1), shortest / 4);
  return Verdict{};
}

Verdict DataPlane::ProcessDecoded(const PacketView& packet, std::span<uint8_t> out) {
  ++counters_.packets;
  const PacketHeader& h = packet.header;
  JobEntry* job = FindJob(h.job);
  if (job != nullptr) ++job->counters.packets;
  const bool probe = h.type == MessageType::kProbe;
  if (h.type != MessageType::kContribution && !probe) {
    if (job == nullptr && !upstream_jobs_.empty()) {
      if (JobEntry* below = FindByUpstream(h.job)) {
        ++below->counters.packets;
        return ProcessFromUpstream(*below, packet, out);
      }
    }
    return Drop(job, DropReason::kNotContribution);
  }
  if (job == nullptr) return Drop(nullptr, DropReason::kUnknownJob);
  if (const DropReason bad = CheckContribution(*job, h); bad != DropReason::kNone) {
    return Drop(job, bad);
  }
  const size_t slot = SlotIndexOf(h.version, job->reg.pool_base + h.slot);
  const bool counted = Counted(slot, h.rank);
  if (probe) return OnProbe(*job, h, slot, counted, out);
  const uint32_t thread = job->ThreadOfSlot(h.slot);
  NoteNewestChunk(*job, h, thread);
  const size_t other = SlotIndexOf(h.version ^ 1, job->reg.pool_base + h.slot);
  if (counted && IsCopy(h, slot)) return OnCopy(*job, slot);
  if (counted) return OnRetransmission(*job, h, slot, out);
  if (const DropReason bad = CheckJoin(h, slot, other); bad != DropReason::kNone) {
    return Drop(job, bad);
  }
  WatchChunkBefore(*job, h, thread);
  NoteArrival(*job, h, thread, slot, other);
  return CountIn(*job, packet, slot, other, out);
}

void DataPlane::WatchChunkBefore(JobEntry& job, const PacketHeader& h, uint32_t thread) {
  // A rank's thread sends its chunks in order, chunk c into the slot after
  // chunk c - 1's among its own slots, over a link that keeps order. If
  // that slot aggregates chunk c - 1 without this rank, its packet was lost:
  // waiting for the stall's watch (the ranks' spread and more) would hold
  // the slot for nothing. Where the previous chunk is not there (an
  // operation using fewer slots, or it completed), the watch stays as it
  // was. Another thread's slots say nothing: threads do not keep order.
  const ThreadRange own = ThreadShare(job.reg.pool_slots, thread, job.reg.threads);
  const uint32_t pool_slot =
      job.reg.pool_base + uint32_t(h.slot == own.begin ? own.end : h.slot) - 1;
  for (uint8_t version = 0; version < 2; ++version) {
    const size_t slot = SlotIndexOf(version, pool_slot);
    if (!used_[slot] || remaining_[slot] == 0 || awaits_upstream_[slot] ||
        chunk_[slot] != h.chunk - 1) {
      continue;
    }
    if (Counted(slot, h.rank)) return;
    nack_fresh_[slot] = 1;
    // Unless the fabric reorders: then it may still come, as overtaken
    // packets did.
    if (late_since_[slot] == Nanos::max()) late_since_[slot] = now_;
    if (nack_due_[slot] > now_ + job.reorder_window) WatchStall(job, slot, job.reorder_window);
    return;
  }
}

void DataPlane::NoteArrival(JobEntry& job, const PacketHeader& h, uint32_t thread, size_t slot,
                            size_t other) {
  // The rank sends into this version only once it holds the other's result.
  if (Completed(other)) {
    job.min_turnaround = std::min(job.min_turnaround, now_ - result_at_[other]);
  }
  // A first transmission overtaken by the rank's next chunk: the fabric
  // reordered it. Wait as long, and a quarter more, before calling the next
  // overtaken packet lost; but no longer than an answer to a NACK takes.
  if (h.resend || remaining_[slot] == 0 || late_since_[slot] == Nanos::max() ||
      !job.SentNewer(job.Sender(h.rank, thread), h.chunk) || job.min_turnaround == Nanos::max()) {
    return;
  }
  const Nanos late = now_ - late_since_[slot];
  job.reorder_window = std::min(std::max(job.reorder_window, late + late / 4), job.min_turnaround);
}

DropReason DataPlane::CheckContribution(const JobEntry& job, const PacketHeader& h) const {
  const JobRegistration& reg = job.reg;
  if (h.rank >= reg.world_size || !job.IsLocal(h.rank)) return DropReason::kRankOutOfRange;
  if (h.slot >= reg.pool_slots) return DropReason::kSlotOutOfRange;
  // A probe carries no values; a contribution a whole packet of them, or
  // none (an exponent-only packet: docs/wire-format.md).
  const bool words_ok = h.element_count == 0 || (h.type != MessageType::kProbe &&
                                                 h.element_count == reg.elements_per_packet);
  if (!words_ok) return DropReason::kElementCount;
  if (!IsValidExponent(h.exponent) || !IsValidExponent(h.next_exponent)) {
    return DropReason::kBadExponent;
  }
  return DropReason::kNone;
}

void DataPlane::NoteNewestChunk(JobEntry& job, const PacketHeader& h, uint32_t thread) {
  const size_t sender = job.Sender(h.rank, thread);
  if (job.sent_any[sender] && !ChunkBefore(job.newest_chunk[sender], h.chunk)) return;
  if (job.sent_any[sender]) job.min_gap = std::min(job.min_gap, now_ - job.newest_at[sender]);
  job.newest_chunk[sender] = h.chunk;
  job.newest_at[sender] = now_;
  job.sent_any[sender] = 1;
}

Verdict DataPlane::ResendResult(JobEntry& job, const PacketHeader& h, size_t slot,
                                std::span<uint8_t> out) {
  ++counters_.results_resent;
  ++job.counters.results_resent;
  // The rank lost this result, so the other version's aggregation (the
  // slot's next chunk, which the others started) waited for a recovery: its
  // completion does not time the spread.
  const size_t other = OtherVersionOf(slot);
  if (remaining_[other] != 0) nacked_[other] = 1;
  return Verdict{Action::kReplyToSender, DropReason::kNone, h.rank, job.reg.world_size,
                 WriteResult(job, slot, h.rank, h.version, h.slot, out, true)};
}

// A second copy of a counted contribution, sent with the first: flagged
// kFlagCopy, or (as workers before the flag sent them) an unflagged
// exponent-only one. Not a resend: its sender did not time out; a copy of an
// earlier chunk is stale, as any other packet. Unlike a retransmission it
// says nothing about a stall, and it needs no answer: the result goes to
// every rank anyway, twice where copies came while the slot aggregated.
bool DataPlane::IsCopy(const PacketHeader& h, size_t slot) const {
  return (h.copy || h.element_count == 0) && !h.resend && h.chunk == chunk_[slot];
}

Verdict DataPlane::OnCopy(JobEntry& job, size_t slot) {
  ++counters_.header_copies;
  ++job.counters.header_copies;
  if (remaining_[slot] != 0) copied_[slot] = 1;
  return Verdict{};
}

// A retransmission: this rank already counted in (v, slot).
Verdict DataPlane::OnRetransmission(JobEntry& job, const PacketHeader& h, size_t slot,
                                    std::span<uint8_t> out) {
  if (h.chunk != chunk_[slot]) return Drop(&job, DropReason::kStaleChunk);
  const uint16_t world = job.reg.world_size;
  if (remaining_[slot] == 0 && !awaits_upstream_[slot]) return ResendResult(job, h, slot, out);
  // The sender's timer fired: the slot stalled. NACK its missing ranks at the
  // next timer, unless it awaits the upstream (which has its own).
  if (!awaits_upstream_[slot] && nack_due_[slot] > now_) {
    nack_tries_[slot] = std::max<uint8_t>(nack_tries_[slot], kSilentWatches);
    nack_asked_[slot] = 1;
    nack_repeats_[slot] = 0;
    WatchStall(job, slot, Nanos(0));
  }
  ++counters_.pending_replies;
  ++job.counters.pending_replies;
  return Verdict{Action::kPendingToSender, DropReason::kNone, h.rank, world,
                 WritePending(job, slot, h, out)};
}

// A probe (docs/wire-format.md): the rank asks for the state of (v, slot) at
// its chunk. `counted`: its contribution is in.
Verdict DataPlane::OnProbe(JobEntry& job, const PacketHeader& h, size_t slot, bool counted,
                           std::span<uint8_t> out) {
  const uint16_t world = job.reg.world_size;
  const bool holds_chunk = used_[slot] && h.chunk == chunk_[slot];
  if (counted) {
    if (!holds_chunk) return Drop(&job, DropReason::kStaleChunk);
    if (remaining_[slot] == 0 && !awaits_upstream_[slot]) {  // its result was lost
      return ResendResult(job, h, slot, out);
    }
  } else if (used_[slot] && ChunkBefore(h.chunk, chunk_[slot])) {
    return Drop(&job, DropReason::kStaleChunk);  // the slot moved on: the rank had its result
  } else if (holds_chunk && remaining_[slot] == 0) {
    return Drop(&job, DropReason::kStaleChunk);  // complete, and the rank moved to 1-v since
  }
  // Waiting on others (or on the upstream), or the rank's own contribution
  // was lost (the probe came after it on the same link): the pending reply
  // says which. Unlike a retransmission it does not call the slot stalled:
  // the switch's own watch does that.
  ++counters_.pending_replies;
  ++job.counters.pending_replies;
  const bool aggregating = holds_chunk && (counted || remaining_[slot] != 0);
  // The reply tells the rank to resend: the slot's spread is a recovery's.
  if (aggregating && !counted) nacked_[slot] = 1;
  return Verdict{Action::kPendingToSender, DropReason::kNone, h.rank, world,
                 WritePending(job, slot, h, out, aggregating)};
}

DropReason DataPlane::CheckJoin(const PacketHeader& h, size_t slot, size_t other) const {
  if (remaining_[slot] == 0) {
    // Only a chunk newer than the last one this slot finished may start it;
    // anything else is a late duplicate that would overwrite a result some
    // worker may still need.
    if (used_[slot] && !ChunkBefore(chunk_[slot], h.chunk)) return DropReason::kStaleChunk;
  } else if (h.chunk != chunk_[slot]) {
    return ChunkBefore(h.chunk, chunk_[slot]) ? DropReason::kStaleChunk
                                              : DropReason::kChunkMismatch;
  } else if (h.exponent != exponent_[slot]) {
    return DropReason::kExponentMismatch;
  } else if (h.element_count != words_[slot]) {
    return DropReason::kElementCount;  // exponent-only and whole packets do not mix
  }
  // A worker sends into version v only once it holds the result of version
  // 1-v, so while 1-v still aggregates this cannot be one of its packets
  // (a corrupted or forged copy, e.g. with the version bit flipped).
  // Accepting it would clear the sender's bit in 1-v and let the sender's
  // retransmission count twice there.
  if (remaining_[other] != 0 || awaits_upstream_[other]) return DropReason::kVersionConflict;
  return DropReason::kNone;
}

// A new contribution: count it here and recycle the other version lazily.
Verdict DataPlane::CountIn(JobEntry& job, const PacketView& packet, size_t slot, size_t other,
                           std::span<uint8_t> out) {
  const PacketHeader& h = packet.header;
  const JobRegistration& reg = job.reg;
  const uint64_t bit = uint64_t{1} << (h.rank % 64);
  seen_[slot * bitmap_words_ + h.rank / 64] |= bit;
  seen_[other * bitmap_words_ + h.rank / 64] &= ~bit;
  uint32_t* acc = &acc_[slot * config_.max_elements_per_packet];
  const uint16_t k = h.element_count;
  if (remaining_[slot] == 0) {  // the first
    Int32FromBigEndian(packet.payload, k, reinterpret_cast<int32_t*>(acc));
    // An exponent-only aggregation's sum is zeros (if it goes upstream).
    std::fill_n(acc + k, reg.elements_per_packet - k, 0u);
    words_[slot] = k;
    used_[slot] = 1;
    chunk_[slot] = h.chunk;
    exponent_[slot] = h.exponent;
    max_next_exponent_[slot] = h.next_exponent;
    remaining_[slot] = uint16_t(job.expected - 1);
    first_at_[slot] = now_;
    late_since_[slot] = Nanos::max();
    nack_tries_[slot] = 0;
    nacked_[slot] = 0;
    nack_asked_[slot] = 0;
    nack_repeats_[slot] = 0;
    nack_fresh_[slot] = 0;
    copied_[slot] = 0;
    if (remaining_[slot] != 0) {
      ++job.aggregating;
      WatchStall(job, slot, job.NackDelay());
    }
  } else {
    // Unsigned adds: int32 sums wrap like two's complement, without UB.
    AddBigEndian(packet.payload, k, acc);
    max_next_exponent_[slot] = std::max(max_next_exponent_[slot], h.next_exponent);
    if (--remaining_[slot] == 0) --job.aggregating;
  }
  ++counters_.contributions;
  ++job.counters.contributions;
  if (h.resend) ++job.burst_resends;  // its first was lost (CopyTailResult)
  if (remaining_[slot] != 0) return Verdict{Action::kDrop, DropReason::kNone, h.rank, 0, 0};
  SampleSpread(job, slot);
  if (reg.upstream) {
    awaits_upstream_[slot] = 1;
    upstream_tries_[slot] = 0;
    ++awaiting_;
    ++counters_.upstream_sent;
    ++job.counters.upstream_sent;
    return WriteUpstream(job, slot, h.version, h.slot, out);
  }
  ++counters_.slots_completed;
  ++job.counters.slots_completed;
  return ResultToAll(job, slot, h.rank, h, out);
}

Verdict DataPlane::ResultToAll(JobEntry& job, size_t slot, uint16_t rank, const PacketHeader& h,
                               std::span<uint8_t> out) {
  result_at_[slot] = now_;
  // Each result names the one its rank thread got before (the link keeps
  // their order), so a worker learns of a lost result from the next one.
  uint32_t& last = job.last_result[job.ThreadOfSlot(h.slot)];
  previous_[slot] = last;
  last = uint32_t(slot);
  Verdict v{Action::kSendToAll, DropReason::kNone, rank, job.reg.world_size,
            WriteResult(job, slot, kAllRanks, h.version, h.slot, out, true)};
  const bool tail_copy = CopyTailResult(job);  // (called for every result: it follows the burst)
  v.copies = copied_[slot] != 0 || tail_copy ? 2 : 1;
  return v;
}

// A rank that lost a result learns it from the next one, which names it; the
// last results of a burst (the end of an operation) have none after them, so a
// rank that lost one waits for its probe's timeout, and with a thousand ranks
// at 0.1% loss some rank loses one of them in most operations. Where loss is
// that likely, those go twice, the copy right after the first: the results
// completed while at most a quarter of the job's usual aggregations (their
// mean as each completes), and at most kMaxTailCopies, are in progress, in a
// burst (since the job last had none in progress) whose resends came to at
// least one per kResultsPerResend results. The share of slots that needed a
// resend is about the chance that some rank loses a given result (the same
// loss on both links). A copy delays the results behind it by a packet time:
// a loss-free job sends none, and at 256 workers and 0.01% copies after any
// resend cost 3% (docs/performance.md, "The last results of a burst twice").
bool DataPlane::CopyTailResult(JobEntry& job) {
  constexpr uint32_t kMaxTailCopies = 64;
  constexpr uint64_t kResultsPerResend = 8;
  const uint32_t in_progress = job.aggregating + 1;  // this one's too
  const bool tail = in_progress <= kMaxTailCopies && in_progress * 4 * 8 <= job.aggregating_mean8;
  job.aggregating_mean8 = job.aggregating_mean8 + in_progress - job.aggregating_mean8 / 8;
  ++job.burst_results;
  // (The P4 programs neither name results nor copy them; so neither does their model.)
  const bool copy = tail && config_.name_previous_results &&
                    job.burst_resends * kResultsPerResend >= job.burst_results;
  if (job.aggregating == 0) job.burst_resends = job.burst_results = 0;  // the burst is over
  if (copy) {
    ++counters_.tail_result_copies;
    ++job.counters.tail_result_copies;
  }
  return copy;
}

}  // namespace switchml
