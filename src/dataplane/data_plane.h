// The aggregation data plane ("the switch"): docs/design.md §2 as one class.
//
// A fixed pool of slots, each holding two versions (the shadow copy) of k
// int32 accumulators, a bitmap of the workers that contributed, a countdown of
// missing contributions, the chunk id and the exponents. All arrays are
// allocated once in the constructor; Process() never allocates, never throws,
// and does bounded work per packet — what a switch ASIC could do.
//
// Jobs own disjoint segments of the pool. Registering a job resets its
// segment, so nothing of an earlier job leaks into a later one; every packet
// carries the job id, and the table entry remembers the full id, so packets
// of an ended job are dropped even when its table entry is reused.
//
// In a tree of switches (docs/design.md §10) a job's registration names the
// ranks served here and an upstream link: a slot complete here goes upstream
// as one contribution (the int32 partial sum, the maximum next exponent), and
// the upstream's result becomes the slot's result. Until it arrives the slot
// "awaits" and NextTimerPacket() resends it on a timer, so a lost upstream
// packet is recovered without the workers.
//
// A slot that stalls (some ranks contributed, others did not within the
// job's usual spread of arrivals) is NACKed: NextTimerPacket() names the
// missing ranks, so that only they resend (docs/wire-format.md, "Loss
// recovery"). The delay adapts to the spread it measures per job. A
// worker's probe (kProbe, no values) for a slot is answered with the result,
// or with a pending reply that says whether the slot still lacks the
// prober's own contribution.
//
// No I/O: the caller hands in packet bytes and sends what Process() returns.
// Thread safety: none. One thread owns a DataPlane (shard the pool across
// threads by giving each its own DataPlane).
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "common/thread_split.h"
#include "switchml/data_plane_config.h"
#include "switchml/status.h"
#include "switchml/types.h"
#include "wire/wire_format.h"

namespace switchml {

// A job's link to the switch above this one in a tree (docs/design.md §10).
struct UpstreamLink {
  JobId job;          // the upstream switch's id of the job
  uint16_t rank = 0;  // this switch's member index in that job
  // An upstream contribution without a result is resent after this, doubling
  // per try up to 64 times it.
  Nanos retransmit_timeout{std::chrono::milliseconds(1)};
};

// What the control plane tells the data plane about a job.
struct JobRegistration {
  JobId id;
  uint16_t world_size = 0;
  uint16_t elements_per_packet = 0;  // k: every packet of the job has exactly k words
  uint32_t pool_base = 0;            // first pool slot of the job's segment
  uint16_t pool_slots = 0;           // segment length; packets address slots 0..pool_slots-1
  // The ranks this data plane aggregates, ascending; empty: all of
  // 0..world_size-1. In a tree each rack switch serves a share of the ranks
  // and packets of the others are dropped here as rank_out_of_range.
  std::vector<uint16_t> local_ranks = {};
  // Set: a slot complete here goes upstream, and the result comes from there.
  std::optional<UpstreamLink> upstream = std::nullopt;
  // I/O threads per rank: thread t sends the chunks of its slots,
  // ThreadShare(pool_slots, t, threads), in order; the threads of a rank do
  // not keep order among each other.
  uint16_t threads = 1;
};

enum class Action : uint8_t {
  kDrop,             // send nothing (reason kNone: a contribution was absorbed)
  kReplyToSender,    // send the result in `out` to the contributing rank only
  kSendToAll,        // send the result in `out` to every rank of the job
  kPendingToSender,  // send the kPending packet in `out` to the contributing rank
  kSendUpstream,     // send the contribution in `out` to the job's upstream switch
  kNackToMissing     // send the kNack packet in `out` to each rank its payload
                     // bitmaps name (in a tree's root: each rack switch)
};

// Why a packet was dropped. Each has a counter.
enum class DropReason : uint8_t {
  kNone = 0,
  kMalformed,         // failed DecodePacket (see the per-DecodeError counters)
  kNotContribution,   // a result or pending packet sent to the switch
  kUnknownJob,        // no registered job with this id (includes ended jobs)
  kRankOutOfRange,    // rank >= the job's world size
  kSlotOutOfRange,    // slot >= the job's segment length
  kElementCount,      // element_count != the job's elements per packet
  kBadExponent,       // an exponent field outside the valid range
  kStaleChunk,        // a late packet for a chunk this slot already finished
  kChunkMismatch,     // a newer chunk while the slot still aggregates another
  kExponentMismatch,  // scaled with another exponent than the slot's first packet
  kSourceMismatch,    // (transport) sender address not registered for this rank
  kBadMac,            // (transport) the job has a key and the packet's MAC is missing or wrong
  kVersionConflict,   // a new contribution to one version while the slot's other version
                      // still aggregates: never legitimate (a worker moves a slot to the
                      // other version only after it holds that version's result)
};
inline constexpr int kNumDropReasons = 14;
const char* DropReasonName(DropReason r);

struct Verdict {
  Action action = Action::kDrop;
  DropReason reason = DropReason::kNone;
  uint16_t rank = 0;        // the contributing rank (destination for *ToSender)
  uint16_t world_size = 0;  // destinations 0..world_size-1 for kSendToAll
  size_t out_bytes = 0;     // bytes written to `out` (0 for kDrop)
  uint32_t job = 0;         // kSendUpstream, kNack*: the job (its local id)
  uint16_t slot = 0;        // kSendUpstream, kNack*: the job slot (whose worker
                            // thread's route it takes)
  // kSendToAll: how often to send the result to each rank. 2 for a result
  // whose contributions came twice (the workers saw loss: a lost header
  // holds up its slot's data, docs/design.md §3), and for one of the last
  // of a burst with many resends (docs/design.md §2).
  uint8_t copies = 1;
};

struct DataPlaneCounters {
  uint64_t packets = 0;          // every packet handed to Process()
  uint64_t contributions = 0;    // new contributions added into a slot
  uint64_t slots_completed = 0;  // results sent to all workers
  uint64_t results_resent = 0;   // results re-sent to one worker
  uint64_t pending_replies = 0;  // retransmissions answered with kPending
  // In a tree: partial sums sent upstream, resent on the timer, and upstream
  // results taken (each also counts in slots_completed).
  uint64_t upstream_sent = 0;
  uint64_t upstream_resent = 0;
  uint64_t upstream_results = 0;
  // Stalled slots whose missing ranks were sent a kNack (each NACK counts once,
  // however many ranks it names).
  uint64_t nacks_sent = 0;
  // Second copies of a counted contribution, sent with the first (flagged
  // kFlagCopy, or unflagged exponent-only ones; never a resend): workers send
  // the descriptor round twice after a loss (docs/design.md §3). Ignored.
  // Not an event counter of the control protocol.
  uint64_t header_copies = 0;
  // Results sent twice to every rank as the last of a burst with many
  // resends (docs/design.md §2). Not an event counter either.
  uint64_t tail_result_copies = 0;
  std::array<uint64_t, kNumDropReasons> drops{};
  std::array<uint64_t, kNumDecodeErrors> decode_errors{};

  uint64_t TotalDrops() const;
  DataPlaneCounters& operator+=(const DataPlaneCounters& other);
};

// The event counters of DataPlaneCounters in one list: each under the name
// the control protocol (control.v1.Counters) and the metrics give it, with
// the metrics' help text, in the order of the P4 programs' EVENT_* indexes
// (p4/common/constants.p4).
struct EventCounter {
  const char* name;
  uint64_t DataPlaneCounters::*field;
  const char* help;
};
inline constexpr EventCounter kEventCounters[] = {
    {"packets", &DataPlaneCounters::packets, "packets the data plane processed"},
    {"contributions", &DataPlaneCounters::contributions, "contributions added into a slot"},
    {"slots_completed", &DataPlaneCounters::slots_completed,
     "aggregations completed (results sent to every worker)"},
    {"results_resent", &DataPlaneCounters::results_resent,
     "results sent again to one worker (its retransmission)"},
    {"pending_replies", &DataPlaneCounters::pending_replies,
     "retransmissions answered with 'pending'"},
    {"upstream_sent", &DataPlaneCounters::upstream_sent,
     "partial sums sent to the upstream switch (a tree of switches)"},
    {"upstream_resent", &DataPlaneCounters::upstream_resent,
     "partial sums sent again to the upstream switch (its result was overdue)"},
    {"upstream_results", &DataPlaneCounters::upstream_results,
     "results taken from the upstream switch"},
    {"nacks_sent", &DataPlaneCounters::nacks_sent,
     "stalled slots whose missing ranks were told to resend (kNack)"},
};

class DataPlane {
 public:
  // REQUIRES: config.Validate().ok(); Create() checks it for callers with
  // untrusted configuration.
  explicit DataPlane(const DataPlaneConfig& config);
  static StatusOr<std::unique_ptr<DataPlane>> Create(const DataPlaneConfig& config);
  DataPlane(const DataPlane&) = delete;
  DataPlane& operator=(const DataPlane&) = delete;

  const DataPlaneConfig& config() const { return config_; }

  // Setup path. Installs the job in table entry id % max_jobs and resets its
  // pool segment. Fails if the entry is taken, the segment overlaps another
  // job's or leaves the pool, or a size exceeds this data plane's limits.
  Status RegisterJob(const JobRegistration& job);
  // Removes the job; its later packets count as kUnknownJob.
  Status UnregisterJob(JobId id);
  bool HasJob(JobId id) const;
  // Counters of one job (zero for an unknown job); global ones below.
  DataPlaneCounters JobCounters(JobId id) const;
  const DataPlaneCounters& counters() const { return counters_; }

  // The time that stamps the slots a batch starts and the contributions it
  // sends upstream. Transports call it before each batch; it never goes back.
  void AdvanceClock(Nanos now) { now_ = std::max(now_, now); }

  // Hot path: the next packet a timer sends at `now`, written into `out`: a
  // kNack for a stalled slot, to the missing ranks it names (see NextNack()),
  // or an overdue upstream contribution (kSendUpstream); kDrop when none is
  // due.
  // Call until kDrop, at NextTimer() or later (earlier is harmless).
  Verdict NextTimerPacket(Nanos now, std::span<uint8_t> out);
  // When NextTimerPacket() next has work; Nanos::max() when nothing waits.
  Nanos NextTimer() const;

  // Hot path. Processes one received packet; writes any packet to send into
  // `out`. REQUIRES: out.size() >= PacketBytes(config().max_elements_per_packet).
  Verdict Process(std::span<const uint8_t> packet, std::span<uint8_t> out);
  // Same for a packet the caller already decoded (a transport that checked
  // the sender's address first); counts as one packet.
  Verdict ProcessDecoded(const PacketView& packet, std::span<uint8_t> out);

  // Counts a packet that the transport dropped before Process (e.g.
  // kSourceMismatch), as a packet and a drop, under the job if it is known.
  void CountDroppedPacket(uint32_t job, DropReason reason);
  // Counts a packet that failed DecodePacket (for transports that decode
  // first and call ProcessDecoded).
  void CountDecodeError(DecodeError error);

 private:
  struct JobEntry {
    bool active = false;
    JobRegistration reg;
    DataPlaneCounters counters;
    uint16_t expected = 0;             // contributions that complete a slot here
    std::vector<uint64_t> local_mask;  // bitmap of reg.local_ranks; empty: every rank
    // The spread of a slot's arrivals (first contribution to completion) in
    // slots that needed no NACK: its mean and mean deviation, as RFC 6298
    // smooths a round trip. A slot incomplete for longer is stalled.
    Nanos spread{0};
    Nanos spread_dev{0};
    // Per rank and thread (index rank * threads + thread): the newest chunk
    // id it sent (where sent_any). A rank's thread sends its slots' chunks in
    // order over a FIFO link, so one whose newer chunk came lost the stalled
    // one; one that sent nothing newer may only be behind (another thread's
    // chunks say nothing: the threads do not keep order among each other).
    std::vector<uint32_t> newest_chunk;
    std::vector<uint8_t> sent_any;
    // Per rank and thread: when its newest chunk came; and the shortest gap
    // between one sender's consecutive packets (its link's packet time at
    // most; max: none yet), which floors the NACK delay.
    std::vector<Nanos> newest_at;
    // Per rank: when a NACK last named it in bitmap 2 (missing, not known
    // lost); min: never.
    std::vector<Nanos> waiting_named_at;
    Nanos min_gap = Nanos::max();
    // Reordering (a multipath fabric): the shortest time a rank took to
    // answer a result (its next contribution to the slot; max: none yet),
    // about what a resend after a NACK takes; and how long a missing packet
    // whose rank's next chunk came may still arrive before the switch calls
    // it lost: the lateness of first transmissions seen overtaken (not
    // flagged kFlagResend), at most that turnaround (RACK's reordering
    // window, RFC 8985). 0 until a packet is overtaken.
    Nanos min_turnaround = Nanos::max();
    Nanos reorder_window{0};
    // Per rank thread: the slot (SlotIndexOf) of the last result sent to
    // every rank, which the next one names (kNoSlot: none yet).
    std::vector<uint32_t> last_result;
    // The tail of a burst (CopyTailResult): the aggregations in progress,
    // eight times their mean as each completes, and the resends counted in
    // and results sent since the job last had none in progress.
    uint32_t aggregating = 0;
    uint32_t aggregating_mean8 = 0;
    uint64_t burst_resends = 0;
    uint64_t burst_results = 0;
    // The rank's thread that owns job slot `slot`.
    uint32_t ThreadOfSlot(uint16_t slot) const {
      return reg.threads == 1 ? 0 : ThreadOf(slot, reg.pool_slots, reg.threads);
    }
    // The entry of (rank, thread) in the per-sender vectors above.
    size_t Sender(uint16_t rank, uint32_t thread) const {
      return size_t(rank) * reg.threads + thread;
    }
    bool SentNewer(size_t sender, uint32_t chunk) const {
      return sent_any[sender] && ChunkBefore(chunk, newest_chunk[sender]);
    }
    // The sender sent nothing after `t`.
    bool SilentSince(size_t sender, Nanos t) const {
      return !sent_any[sender] || newest_at[sender] <= t;
    }

    Nanos NackDelay() const;
    bool IsLocal(uint16_t rank) const {
      return local_mask.empty() || (local_mask[rank / 64] >> (rank % 64) & 1) != 0;
    }
  };
  // Index of (version, pool slot) into the per-slot arrays.
  size_t SlotIndexOf(uint8_t version, uint32_t pool_slot) const {
    return size_t(version) * config_.pool_slots + pool_slot;
  }
  // The same pool slot's index under the other version.
  size_t OtherVersionOf(size_t slot) const {
    return (slot + config_.pool_slots) % (2 * size_t(config_.pool_slots));
  }
  // `rank` counted in the slot's current (or last) aggregation.
  bool Counted(size_t slot, uint16_t rank) const {
    return (seen_[slot * bitmap_words_ + rank / 64] >> (rank % 64)) & 1;
  }
  // The slot's aggregation completed here and its result went to the workers.
  bool Completed(size_t slot) const {
    return used_[slot] && remaining_[slot] == 0 && !awaits_upstream_[slot];
  }
  // A missing packet of the slot was overtaken by its rank's next chunk less
  // than the job's reordering window ago: it may still come.
  bool WithinReorderWindow(const JobEntry& job, size_t slot) const {
    return late_since_[slot] != Nanos::max() && now_ - late_since_[slot] < job.reorder_window;
  }
  // RegisterJob's checks: the registration against this switch's limits,
  // then against the jobs it holds (`entry`: the table entry it would take).
  Status CheckRegistration(const JobRegistration& job) const;
  Status CheckNoConflict(const JobRegistration& job, const JobEntry& entry);
  JobEntry* FindJob(uint32_t job);
  // The job whose upstream switch calls it `upstream_job`.
  JobEntry* FindByUpstream(uint32_t upstream_job);
  // An upstream switch's result or pending reply for one of its jobs here.
  Verdict ProcessFromUpstream(JobEntry& job, const PacketView& packet, std::span<uint8_t> out);
  // The upstream contribution of (version, job slot), from the slot's state.
  Verdict WriteUpstream(JobEntry& job, size_t slot, uint8_t version, uint16_t job_slot,
                        std::span<uint8_t> out);
  Verdict Drop(JobEntry* job, DropReason reason);
  // The steps of ProcessDecoded for a contribution of `job`: the header's
  // fields against the job (kNone: valid); the sender's newest chunk; a
  // retransmission into (v, slot), where the sender already counted; whether
  // a new contribution may join (v, slot), `other` being (1-v, slot); and
  // counting it in, which may complete the slot. `thread`: the rank's
  // thread that owns h.slot (JobEntry::ThreadOfSlot).
  DropReason CheckContribution(const JobEntry& job, const PacketHeader& h) const;
  void NoteNewestChunk(JobEntry& job, const PacketHeader& h, uint32_t thread);
  // The rank's previous chunk is still missing from the slot aggregating
  // it: that packet was lost; NACK it at the next timer.
  void WatchChunkBefore(JobEntry& job, const PacketHeader& h, uint32_t thread);
  // Measures the job's turnaround and reordering from a new contribution to
  // (v, slot) (see JobEntry::reorder_window).
  void NoteArrival(JobEntry& job, const PacketHeader& h, uint32_t thread, size_t slot,
                   size_t other);
  Verdict OnProbe(JobEntry& job, const PacketHeader& h, size_t slot, bool counted,
                  std::span<uint8_t> out);
  bool IsCopy(const PacketHeader& h, size_t slot) const;
  Verdict OnCopy(JobEntry& job, size_t slot);
  // The completed slot's result to every rank (as often as Verdict::copies).
  Verdict ResultToAll(JobEntry& job, size_t slot, uint16_t rank, const PacketHeader& h,
                      std::span<uint8_t> out);
  // Whether the result completed now goes out twice as one of the last of
  // a burst with many resends (docs/design.md §2): nothing after it names
  // it to a rank that lost it.
  bool CopyTailResult(JobEntry& job);
  Verdict OnRetransmission(JobEntry& job, const PacketHeader& h, size_t slot,
                           std::span<uint8_t> out);
  DropReason CheckJoin(const PacketHeader& h, size_t slot, size_t other) const;
  Verdict CountIn(JobEntry& job, const PacketView& packet, size_t slot, size_t other,
                  std::span<uint8_t> out);
  // The header of a packet the switch sends about (version, job slot):
  // the slot's chunk id, exponents zero.
  PacketHeader SlotHeader(const JobEntry& job, size_t slot, MessageType type, uint16_t rank,
                          uint8_t version, uint16_t job_slot, uint16_t element_count) const;
  // The slot's result with its words_ (`words`: that many instead).
  // `to_workers`: it names the result sent before it (kFlagNamesPrevious)
  // where there was one; an upstream contribution does not.
  size_t WriteResult(const JobEntry& job, size_t slot, uint16_t rank, uint8_t version,
                     uint16_t job_slot, std::span<uint8_t> out, bool to_workers,
                     int words = -1) const;
  size_t WritePending(const JobEntry& job, size_t slot, const PacketHeader& in,
                      std::span<uint8_t> out, bool holds_chunk = true) const;
  void ResetSegment(uint32_t base, uint32_t count);
  // The next upstream contribution whose result is overdue at `now`, written
  // into `out` (kSendUpstream) and re-stamped; kDrop when none is. It scans
  // at most every retransmit_timeout / 4.
  Verdict NextUpstreamResend(Nanos now, std::span<uint8_t> out);
  // When NextUpstreamResend() next has work to look at; Nanos::max() while
  // no slot awaits an upstream result.
  Nanos NextUpstreamScan() const { return awaiting_ == 0 ? Nanos::max() : next_scan_; }
  // A slot started aggregating (or was found stalled again): its NACK falls
  // due after `delay`.
  void WatchStall(JobEntry& job, size_t slot, Nanos delay);
  void SampleSpread(JobEntry& job, size_t slot);
  // The complete slot's result again, to rank h.rank, which lost it.
  Verdict ResendResult(JobEntry& job, const PacketHeader& h, size_t slot, std::span<uint8_t> out);
  // The next due NACK, or kDrop.
  Verdict NextNack(std::span<uint8_t> out);
  // Which missing ranks a NACK names: those whose packet must have been
  // lost; also those that wait for the slot's previous result (lost, or the
  // rank is slow); all but those named within a turnaround (docs/design.md
  // §2); or all, at a retransmission's request.
  enum class NackScope { kLost, kLostOrWaiting, kAll, kAllAsked };
  // The slot's kNack naming its missing ranks in `scope`; 0 bytes when it
  // names none.
  size_t WriteNack(JobEntry& job, size_t slot, uint8_t version, uint16_t job_slot, NackScope scope,
                   std::span<uint8_t> out, bool* names_lost);

  DataPlaneConfig config_;
  size_t bitmap_words_;  // 64-bit words per seen-bitmap

  // Per (version, pool slot); see SlotIndexOf().
  std::vector<uint32_t> acc_;        // accumulators, stride max_elements_per_packet
  std::vector<uint64_t> seen_;       // bitmaps, stride bitmap_words_
  std::vector<uint16_t> remaining_;  // contributions still missing; 0 = idle or complete
  std::vector<uint8_t> used_;        // the slot has held a chunk since its reset
  // Words of the aggregation's contributions: the job's elements_per_packet,
  // or 0 for exponent-only packets (set by the first contribution).
  std::vector<uint16_t> words_;
  std::vector<uint32_t> chunk_;    // chunk id of the current or last aggregation
  std::vector<int16_t> exponent_;  // scale exponent of the current aggregation
  std::vector<int16_t> max_next_exponent_;
  // In a tree: the slot is complete here and waits for the upstream result.
  std::vector<uint8_t> awaits_upstream_;
  std::vector<uint8_t> upstream_tries_;
  std::vector<Nanos> upstream_sent_at_;
  std::vector<Nanos> first_at_;    // when the current aggregation's first contribution came
  std::vector<Nanos> late_since_;  // when a missing rank's next chunk came first (max: none)
  std::vector<Nanos> result_at_;   // when the aggregation's result went to the workers
  // The result its rank thread got before this aggregation's (SlotIndexOf;
  // kNoSlot: none): what this one's result names, resent too.
  std::vector<uint32_t> previous_;
  static constexpr uint32_t kNoSlot = UINT32_MAX;
  std::vector<uint8_t> nack_tries_;  // watches fallen due for the current aggregation
  std::vector<uint8_t> nacked_;      // of them, those that sent a NACK
  std::vector<uint8_t> nack_asked_;  // a retransmission made the next watch due
  // The live watch repeats a NACK that named lost ranks (the how-many-th).
  std::vector<uint8_t> nack_repeats_;
  // A rank was shown lost since the slot's last NACK: the next NACK names it
  // for the first time, and its repeats start over.
  std::vector<uint8_t> nack_fresh_;
  // An exponent-only aggregation whose contributions came twice: its result
  // goes out twice too (Verdict::copies).
  std::vector<uint8_t> copied_;
  std::vector<Nanos> nack_due_;  // when the slot's live watch falls due
  // Aggregations that may stall, a min-heap by due time (never reallocated:
  // reserved at construction; a full heap watches no more until it drains).
  struct StallWatch {
    Nanos due;
    uint32_t slot;   // SlotIndexOf(version, pool slot)
    uint32_t chunk;  // the aggregation it watches; stale once the slot moved on
    uint32_t job;    // table entry
    bool operator>(const StallWatch& o) const { return due > o.due; }
  };
  std::vector<StallWatch> stalls_;
  uint32_t awaiting_ = 0;  // slots that await, over all jobs
  Nanos now_{0};
  Nanos next_scan_{0};
  // Where NextUpstreamResend() is in its scan: an index into upstream_jobs_
  // and a (version, job slot) position; scan_job_ == SIZE_MAX between scans.
  size_t scan_job_ = SIZE_MAX;
  uint32_t scan_pos_ = 0;
  std::vector<size_t> upstream_jobs_;  // table entries of the jobs with an upstream

  std::vector<JobEntry> jobs_;
  DataPlaneCounters counters_;
};

}  // namespace switchml
