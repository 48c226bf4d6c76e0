// The worker engine: docs/design.md §3's per-worker protocol as a state machine
// without I/O.
//
// The engine is fed received packets and the current time and emits packets
// through a PacketSink; the caller owns sockets and clocks. One engine serves
// one worker rank of one registered job and runs that job's all-reduce
// operations one after the other, in submission order (every rank must submit
// the same sequence of operations, as with any collective library).
//
// Protocol per operation of C chunks (k elements each, the last one padded
// with zeros) over w = min(pool_slots, max(C, 1), max(A, C/32)) slots, where
// A is the mean of the slot counts the ranks proposed in the previous
// operation's descriptor round (16 for the first operation); each proposes
// kRecoveryBdps / kGain of its window (window_sizer.h), room for the slots
// that wait on loss recovery while the others keep the link busy:
//   round 0 (descriptor round): every slot i carries the operation descriptor
//     (see src/worker/op_descriptor.h) and the block exponent of chunk i;
//   round r >= 1: slot i carries chunk (r-1)*w + i, scaled with the exponent
//     agreed in round r-1, and the exponent of chunk r*w + i (look-ahead).
// A result for slot i is the credit to send slot i's next round, into the
// other pool version. The version bit and the chunk-id sequence of every slot
// persist across operations, so the switch sees one continuous stream.
//
// Sending order and window: packets go out in chunk-id order (round-major),
// at most `window` of them unanswered. The window is this worker's own
// choice (see src/worker/window_sizer.h) and needs no agreement: a slot
// whose packet one worker holds back just waits at the switch, so the job
// runs at the smallest window of its workers. A slot that a later packet's
// result shows waiting on a loss recovery, or that was resent, leaves the
// window (LeaveWindow()), as TCP counts a lost packet out of the pipe.
// Where the worker's link rate is known (config.pacing_bits_per_second),
// the engine paces instead: a packet goes once the link is nearly free of
// the ones before it, and the pool bounds the packets in flight. Under loss
// at scale most slots wait on some rank's recovery, which a measured window
// counts as in flight (it then cannot grow), while a queue in front of the
// resends, which pacing avoids, is what a window exists to prevent.
//
// Loss: the software switch NACKs the ranks missing from a slot that
// stalls. A missing rank resends at once when the switch saw a newer packet
// of it (links deliver in order, so this one was lost), or when a packet it
// sent later already got its result. A lost result is found by the next
// result, which names the one the switch sent before it (links keep order:
// one this rank still waits for in that version was lost), and asked for at
// once. A NACK for a chunk it has not sent yet finds a lost result too: for the next round of a
// slot it waits on, that slot's; for its next operation, every one it waits for (the others
// finished this one); else the oldest unanswered packet, as above.
// Otherwise, with a switch that answers probes (config.switch_answers_probes,
// the software switch), the engine asks: a header-only kProbe, answered with
// the result or a pending reply that tells whether this rank's packet is
// missing (resend it) or others' (ask again later). It probes a slot when
// the path's round trip passed without its result (PathTimeout(): the least
// round trip plus the packets queued ahead, not the wait for other ranks;
// the answer time, ResultTimeout(), where the switch answers with
// the result at once: a result named it lost, or a pending reply lacked
// this rank alone; of several slots that nothing but that timer speaks for,
// overdue together, the oldest alone: one stall, one probe, as TCP's timeout
// resends the first segment only), when a later packet's result came first (the switch
// completes slots in chunk order) and its own has not come within the
// answer time since (WatchGaps()), when a later packet's result or a later
// probe's pending reply shows a probe or resend lost (Recheck()), when the slot holds up the next
// packet in chunk order and was shown to wait on a recovery, and when a NACK does not prove its
// packet lost. Unpaced, a resend goes with a probe right behind it on the same link: a pending
// reply that still lacks this rank proves the resend lost a round trip later, where a NACK cannot
// (it may predate the resend). Without probes (a P4 switch) a slot's timeout resends it: the
// smoothed round trip plus four deviations (RFC 6298), at least twice the round trip, floored in
// microseconds, and a NACK without proof resends after two smoothed round trips. Only a timeout
// with no answer from the switch at all backs off: a random loss is not congestion. Loss-free
// in-order links resend nothing; reordering can cost a resend (it breaks the in-order witness).
//
// Exponent-only packets: with a switch that takes them
// (config.switch_accepts_exponent_only), round 0 of every slot but slot 0 is
// a header alone (its next_exponent); those take no room in the window.
// Once a rank resent anything, the next descriptor round agrees that every
// rank sends the operation after it such headers, and slot 0's descriptor,
// twice (the copy flagged kFlagCopy): a lost one holds up its slot's data
// and, as ranks send in chunk order, all their data after it (the
// descriptor's: every rank's). Only the first slots' go twice, those whose
// data would go before a lost header's recovery came back, and only where
// their copies take less link time than a round trip.
// That operation's last packet goes twice too, whatever the copies' link
// time: nothing after it shows the switch that it was lost.
//
// Failures: a timeout without progress fails the running operation with
// DEADLINE_EXCEEDED naming the missing ranks (reported by the switch) or the
// silent switch, and breaks the engine: the job must be registered again
// (with a fresh engine). A descriptor disagreement does the same. NaN/Inf in
// a float input makes the chunks holding it NaN on every rank; with
// non_finite_error it also fails that operation with DATA_LOSS, keeping the
// job usable.
//
// Thread safety: none; one thread drives an engine. Buffers passed to
// Submit() must stay valid until that operation's completion callback ran.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "switchml/status.h"
#include "switchml/types.h"
#include "wire/wire_format.h"
#include "worker/window_sizer.h"

namespace switchml {

// Where an engine's outgoing packets go. The engine writes each packet
// straight into a buffer the sink lends (Claim) and hands it back (Send); it
// keeps no copy: a retransmission writes the same bytes again from the
// operation's input. So a batching sink sends without copying, from a few
// buffers that stay warm in cache.
class PacketSink {
 public:
  virtual ~PacketSink() = default;
  // A buffer of at least `bytes` for the next packet, valid until Send().
  // This default lends one buffer of its own (allocated at the first packet).
  virtual std::span<uint8_t> Claim(size_t bytes) {
    if (scratch_.size() < bytes) scratch_.resize(bytes);
    return {scratch_.data(), bytes};
  }
  // Sends `packet`, the first bytes of the buffer the last Claim() lent.
  virtual void Send(std::span<const uint8_t> packet) = 0;

 private:
  std::vector<uint8_t> scratch_;
};

struct WorkerEngineConfig {
  JobId job;                           // assigned by the switch at registration
  Rank rank;                           // this worker, 0..world_size-1
  uint16_t world_size = 1;             // workers in the job
  uint16_t elements_per_packet = 256;  // k, the same for every rank (min 32)
  uint16_t pool_slots = 128;           // slots this engine uses; the window's upper bound
  // Packets in flight: 0 sizes the window from the measured round trip and
  // delivery rate; N fixes it (at most pool_slots).
  uint16_t window = 0;
  uint16_t slot_offset = 0;  // first of them in the job's pool segment (an engine
                             // per thread owns slots [offset, offset + pool_slots))
  // The retransmission timeout starts at retransmit_timeout, then adapts to
  // the measured round trip (max(SRTT + 4 RTTVAR, 2 SRTT), RFC 6298) between
  // min_ and max_retransmit_timeout, and doubles while nothing progresses.
  Nanos retransmit_timeout{std::chrono::milliseconds(1)};        // before the first sample
  Nanos min_retransmit_timeout{std::chrono::microseconds(20)};   // floor once measured
  Nanos max_retransmit_timeout{std::chrono::milliseconds(100)};  // back-off cap
  // No progress for failure_timeout fails the job when the switch went
  // quiet (or never named the ranks it misses); ranks it names as missing
  // are alive (a rank that left is the control plane's news, Fail()) and are
  // waited for up to operation_timeout, as torch's group timeout asks.
  Nanos failure_timeout{std::chrono::seconds(10)};
  Nanos operation_timeout{std::chrono::minutes(30)};
  // NaN/Inf in a float input: the chunks holding it come back NaN on every
  // rank either way; true also fails the operation with DATA_LOSS.
  bool non_finite_error = false;
  // The switch answers kProbe packets (the software switch does; the P4
  // programs do not): a timeout then asks it for the slot's state instead of
  // resending the values, and only a rank whose packet is missing resends.
  bool switch_answers_probes = false;
  // The switch takes exponent-only contributions (no values; the software
  // switch does, the P4 programs do not): the descriptor round then sends
  // only slot 0's descriptor as values, and every other slot's packet is a
  // header that agrees its first exponent (docs/wire-format.md).
  bool switch_accepts_exponent_only = false;
  // This worker's link rate (bits per second, of this engine's share), where
  // it is known: the engine then paces its packets at it, each leaving once
  // the link would have sent all but kPacingBurst of the packets before it,
  // so that no queue builds up in front of its resends and probes; and the
  // pool, not the measured window, bounds the packets in flight (a slot
  // that waits on another rank's recovery holds no link time). 0: no
  // pacing; the window (window_sizer.h) bounds them and keeps the queue
  // short. Only the simulator sets it (switchml-sim --pacing): on a real
  // path, which queues where the simulator models no queue, the pool in
  // flight drew probe storms (docs/performance.md, "Pacing in the
  // simulator").
  uint64_t pacing_bits_per_second = 0;

  Status Validate() const;
};

// With pacing: how many whole packets an engine may have on its link ahead
// of the one it sends (packets that leave back to back keep the link busy
// between the engine's wake-ups).
inline constexpr uint32_t kPacingBurst = 2;
// With pacing: the most least round trips that a probe's timeout counts as
// the smoothed round trip (WorkerEngine::PathTimeout()). Measured over
// seeds 1-3 at 64 and 256 workers (docs/performance.md): 4, 8 and 16 end
// the loop that an uncapped one enters; 16 was the fastest.
inline constexpr int64_t kPacedRoundTrips = 16;
// The least pacing rate: 1 Mbit/s.
inline constexpr uint64_t kMinPacingBitsPerSecond = 1'000'000;

// kMinElementsPerPacket (limits.h): the descriptor round needs 24 words.
static_assert(kMinElementsPerPacket >= 24);

// Receive-side and send-side counters of one engine.
struct WorkerEngineCounters {
  uint64_t packets_sent = 0;
  uint64_t retransmissions = 0;  // all resent packets, fast ones included
  uint64_t results_accepted = 0;
  uint64_t pending_received = 0;      // kPending answers to retransmissions
  uint64_t duplicates = 0;            // results for rounds already done (or not started)
  uint64_t malformed = 0;             // failed DecodePacket
  uint64_t wrong_job_or_rank = 0;     // well-formed but not for this worker
  uint64_t invalid = 0;               // wrong type, slot, size or exponent for this job
  uint64_t timeout_backoffs = 0;      // times a timeout without progress doubled it
  uint64_t probes_sent = 0;           // kProbe packets (no values) for overdue slots
  uint64_t fast_retransmissions = 0;  // of them, sent before the timeout (the switch's NACK)
  uint64_t nacks_received = 0;        // kNack packets for an outstanding slot
  uint64_t nacks_ignored = 0;         // of them, naming a packet not (yet) proven lost
  // Results a later one named (kFlagNamesPrevious) while this worker still
  // waited for them: lost on the way, asked for again at once.
  uint64_t results_named_lost = 0;
  // Descriptor-round packets sent a second time (kFlagCopy): after a loss
  // anywhere in the job slot 0's descriptor and the first slots' headers go
  // twice (docs/design.md §3).
  uint64_t redundant_headers = 0;
  // Last packets of an operation sent a second time (kFlagCopy), after a
  // loss anywhere in the job like the descriptor round's copies: nothing
  // after it shows the switch that it was lost.
  uint64_t last_packet_copies = 0;
  uint16_t window = 0;       // packets in flight allowed now
  int64_t min_rtt_ns = 0;    // measured (window sizing); 0 before the first sample
  double delivery_rate = 0;  // results per second, measured (window sizing)
};

using OpId = uint64_t;
using OpCallback = std::function<void(OpId, const Status&)>;

class WorkerEngine {
 public:
  static StatusOr<std::unique_ptr<WorkerEngine>> Create(const WorkerEngineConfig& config);
  explicit WorkerEngine(const WorkerEngineConfig& config);  // REQUIRES: config.Validate().ok()
  ~WorkerEngine();
  WorkerEngine(const WorkerEngine&) = delete;
  WorkerEngine& operator=(const WorkerEngine&) = delete;

  const WorkerEngineConfig& config() const { return config_; }

  // Setup path: queues an all-reduce (sum) of `count` elements of `dtype`.
  // `in` and `out` may be the same buffer. `done` runs on the driving thread
  // from inside OnPacket()/OnTimer() when the operation ends. Returns an error
  // (and does not queue) for bad arguments or a broken engine.
  StatusOr<OpId> Submit(const void* in, void* out, size_t count, DType dtype, OpCallback done);

  // Hot path: one received packet (anything: it is validated and counted).
  void OnPacket(std::span<const uint8_t> packet, Nanos now, PacketSink& sink);
  // Hot path: starts queued operations, retransmits expired slots and fails
  // the job when it made no progress for too long (failure_timeout,
  // operation_timeout: see WorkerEngineConfig). Call it at
  // NextDeadline() (calling it earlier or more often is harmless).
  void OnTimer(Nanos now, PacketSink& sink);
  // When OnTimer() next has work; Nanos::max() when idle.
  Nanos NextDeadline() const;

  // Fails the running and queued operations with `status` and breaks the
  // engine (e.g. the control plane reported that a rank left the job).
  void Fail(Status status) { Break(std::move(status)); }

  bool idle() const;  // no operation running or queued
  bool broken() const { return !broken_reason_.empty(); }
  // Broken because the switch went quiet: it sent nothing for
  // min(2 max_retransmit_timeout, failure_timeout / 2), or nothing that named
  // missing ranks since the last progress (as opposed to reporting them).
  bool switch_silent() const { return switch_silent_; }
  // Broken because an operation waited operation_timeout without progress
  // (its message starts with "Timed out").
  bool timed_out() const { return timed_out_; }
  // Why the engine broke ("" while it is not).
  const std::string& broken_reason() const { return broken_reason_; }
  WorkerEngineCounters counters() const;

 private:
  struct Op;
  struct Slot;

  void StartNextOp(Nanos now, PacketSink& sink);
  void SendInOrder(Nanos now, PacketSink& sink);
  // `queued`: how long the packets sent just before it in the same burst
  // keep it from the wire.
  void SendRound(Slot& slot, uint16_t index, Nanos now, Nanos queued, PacketSink& sink);
  // How a packet goes: first, as a copy sent right after it (kFlagCopy), or
  // again (kFlagResend).
  enum class Transmission : uint8_t { kFirst, kCopy, kResend };
  // Writes slot `index`'s packet for its current round into a buffer of
  // `sink` and sends it.
  void EmitPacket(Slot& slot, uint16_t index, Nanos now, PacketSink& sink, Transmission how);
  // Sends it again (a timeout or a NACK), counted as a retransmission.
  void Retransmit(Slot& slot, uint16_t index, Nanos now, PacketSink& sink);
  // The header fields every packet of this slot's current round shares.
  PacketHeader SlotHeader(const Slot& slot, uint16_t index, MessageType type) const;
  // Asks the switch for the slot's state (a kProbe: its result, or which
  // ranks it misses), and again if no answer comes within the path's round
  // trip (doubling that wait only while the switch sends nothing). `copies`
  // probes go back to back, one ask: each is answered.
  void Probe(Slot& slot, uint16_t index, Nanos now, PacketSink& sink, int copies = 1);
  // How long the switch takes to answer this rank at most: twice the least
  // round trip plus the packets queued ahead (the results due, at the
  // largest delivery rate, at most the window per smoothed round trip), the
  // slot round trip before any sample. Unlike the smoothed round trip it
  // leaves out most of the wait for the other ranks' contributions.
  Nanos PathTimeout() const;
  // How long the switch's answer to a packet or probe that it answers at
  // once with the result takes at most: twice the least round trip plus the
  // results due at the largest delivery rate. Unlike PathTimeout() it
  // counts no wait for other ranks (nor a rate that such waits depress).
  Nanos ResultTimeout() const;
  // Twice the least round trip plus the unanswered packets drained at
  // `rate` (per second; none at 0), at least min_retransmit_timeout: both
  // timeouts above, at their rates.
  Nanos RoundTripAt(double rate) const;
  // Every packet of the running operation is sent, and one slot still
  // waits for its result.
  bool LastSlot() const;
  // The running operation's send cursor once every packet of it is sent.
  uint64_t SendEnd() const;
  // The engine paces its packets (config.pacing_bits_per_second).
  bool pacing() const { return config_.pacing_bits_per_second != 0; }
  // How long a slot waits for its result before it asks (a probe: the
  // switch answers at once, and asking costs a header) or resends (the
  // retransmission timeout, which allows for the other ranks' waits).
  Nanos SlotTimeout() const;
  // How many of a descriptor round's `window` slots send their packet twice
  // after a loss (slot 0's whole packet and the others' headers): the slots
  // whose data would go before a lost header's recovery came back (later
  // ones lose nothing to it), where those copies take less link time than a
  // round trip, which a lost one costs its slot's data (and every rank's
  // data after it) at least; 0 otherwise.
  uint16_t HeadersWorthCopying(uint16_t window) const;
  // Once every packet of the operation is sent, how long a slot may wait
  // before a probe: twice the least round trip plus the results due
  // (Nanos::max() when not in the tail, or nothing is measured yet).
  Nanos TailProbeTimeout() const;
  // A result came for send position `position`: the earlier slots still
  // waiting leave the window, and are probed if their results do not come
  // within the answer time (paced: at once; see the .cc).
  void WatchGaps(uint64_t position, Nanos now, PacketSink& sink);
  // A later packet's result shows the slot waits on a loss recovery (of its
  // packet, its result or another rank's packet), or it was resent: its
  // packet no longer counts against the window, so the others keep the link
  // busy meanwhile (as TCP's fast recovery counts a lost packet out of the
  // pipe).
  void LeaveWindow(Slot& slot);
  // The slot's packet no longer counts against the window (it was answered,
  // or LeaveWindow()).
  void ReleaseWindow(Slot& slot);
  // Remembers a resend or probe (of transmission `order`) for Recheck().
  void PushRecheck(uint16_t index, uint64_t order, bool probe);
  // Probes the slots whose resend or probe a later packet's result, or a
  // later probe's pending reply, shows lost (see the .cc).
  void Recheck(Nanos now, PacketSink& sink);
  // The slot index of a received packet for this engine's running
  // operation; -1 (counted) for anything else.
  int SlotOf(std::span<const uint8_t> packet, PacketView* p);
  // A NACK naming this rank for a chunk of `slot` it has not sent yet: the
  // others moved on, so a result this rank waits for was lost.
  void OnNackAhead(Slot& slot, uint16_t index, uint32_t chunk, Nanos now, PacketSink& sink);
  // A result named the one the switch sent before it, of job slot
  // `job_slot` in pool version `version`: if this worker still waits for
  // that one, it was lost, and the engine asks for it again.
  void CheckPrevious(uint16_t job_slot, uint8_t version, Nanos now, PacketSink& sink);
  // A kNack or kPending: remembers the missing ranks it names; a NACK that
  // names this rank resends the slot's packet.
  void OnStallReport(Slot& slot, uint16_t index, const PacketView& p, Nanos now, PacketSink& sink);
  // Whether the slot's unanswered packet (or its result) must have been
  // lost, as a NACK says: see the .cc.
  bool Overdue(const Slot& slot, Nanos now) const;
  // Resends the oldest unanswered transmission if it is Overdue(): the
  // switch NACKed this rank for a chunk it has not sent.
  void ResendOverdue(Nanos now, PacketSink& sink);
  // Resends the slot's packet, whose result the switch must have sent and
  // the link lost (a NACK says the others moved past it), unless it was
  // resent less than a round trip ago.
  void ResendLostResult(Slot& slot, uint16_t index, Nanos now, PacketSink& sink);
  // A NACK names this rank, but its latest transmission may still be on the
  // way: probes once after it (a switch that answers probes), once the
  // path's round trip has passed.
  void AskIfUnsure(Slot& slot, uint16_t index, Nanos now, PacketSink& sink);
  // A resend a NACK called for, before the slot's timeout (counted in
  // fast_retransmissions); the timeout restarts.
  void ResendBeforeTimeout(Slot& slot, uint16_t index, Nanos now, PacketSink& sink);
  // Words of the slot's packet (and result) this round: 0 for an
  // exponent-only packet, else elements_per_packet.
  uint16_t WordsOf(const Slot& slot, uint16_t index) const;
  // Writes that packet into `buf` (PacketBytes(WordsOf())): the same bytes
  // every time until the slot moves on, but for the copy and resend flags.
  void WritePacket(const Slot& slot, uint16_t index, uint8_t* buf, Transmission how);
  void AcceptResult(Slot& slot, uint16_t index, const PacketView& p, Nanos now, PacketSink& sink);
  void FinishOp(Status status);
  void Break(Status status);
  void ScanTimers(Nanos now, PacketSink& sink);
  // Whether only the path's timer speaks for this slot this round: never
  // probed, resent or shown to wait on a recovery, its result not known to be
  // held by the switch.
  static bool OnlyTimerSpeaksFor(const Slot& slot);
  void SampleRoundTrip(Nanos sample);
  // The smoothed round trip; the timeout until the first sample.
  Nanos SmoothedRoundTrip() const { return srtt_ > Nanos(0) ? srtt_ : rto_; }
  // From when on the switch counts as quiet: it sent nothing for
  // min(2 max_retransmit_timeout, failure_timeout / 2), or nothing that
  // named missing ranks since the last progress.
  Nanos QuietAt() const;
  std::string DescribeStall(Nanos now) const;  // after switch_silent_ and timed_out_ are set
  uint32_t ChunkId(uint32_t round, uint16_t index) const;
  uint32_t RoundsOf(uint16_t index) const;
  uint16_t Window() const;  // packets in flight allowed now: fixed, the pool (pacing) or measured
  // Pacing: a packet of `bytes` went on the link at `now`.
  void Paced(size_t bytes, Nanos now);
  // Pacing: how long a packet of `bytes` (and its framing) takes on the link.
  Nanos WireTime(size_t bytes) const;

  WorkerEngineConfig config_;
  std::vector<Slot> slots_;
  // Ranks the switch reported missing (bitmap) in its pending answers for
  // missing_chunk_, the oldest unanswered chunk it reported on since the last
  // progress. Every live rank sends chunks in id order, so at the oldest one
  // only the ranks that really stopped are missing; at a later chunk a live
  // rank may merely be held back by its window.
  std::vector<uint32_t> missing_;
  uint32_t missing_chunk_ = 0;
  Nanos missing_reported_at_{-1};
  bool switch_silent_ = false;
  bool timed_out_ = false;
  std::deque<Op> queue_;  // queue_.front() runs
  bool running_ = false;
  OpId next_op_id_ = 1;
  uint32_t next_chunk_base_ = 0;  // chunk-id sequence, continuous across ops
  uint64_t send_cursor_ = 0;      // next (round * w + slot) of the running op to send
  uint64_t gap_cursor_ = 0;       // positions before it were answered or probed
  uint16_t in_flight_ = 0;        // whole packets waiting for a result
  uint16_t agreed_slots_ = WindowSizer::kInitialWindow;  // agreed in the last descriptor round
  bool redundant_headers_ = false;  // likewise: send the next operation's headers twice
  bool saw_loss_ = false;           // this rank resent a packet in the running operation
  WindowSizer sizer_;
  // Resends and probes in the order sent, a ring (allocated once).
  struct RecheckEntry {
    uint16_t index;
    bool probe;
    uint64_t order;
  };
  std::vector<RecheckEntry> recheck_;
  size_t recheck_head_ = 0;
  size_t recheck_size_ = 0;
  // Pacing (config.pacing_bits_per_second): when the link has sent every
  // packet so far, how early before that the next may go, and when
  // SendInOrder() may send again (Nanos::max(): not waiting).
  Nanos link_free_{0};
  Nanos pacing_slack_{0};
  Nanos pace_at_ = Nanos::max();
  Nanos rto_;           // current retransmission timeout
  Nanos srtt_{0};       // smoothed round trip; 0 before the first sample
  Nanos rttvar_{0};     // its mean deviation
  uint64_t sends_ = 0;  // transmissions and probes so far (their order)
  // The latest first transmission of a slot whose result came: every packet
  // sent before it reached the switch or was lost, and the switch's answers
  // to them came or were lost.
  uint64_t answered_ = 0;
  // The latest probe a pending reply answered: the switch's answers to
  // everything sent before it came or were lost (Recheck()).
  uint64_t probe_answered_ = 0;
  uint64_t whole_results_ = 0;  // results accepted but exponent-only ones
  Nanos last_progress_{0};
  Nanos next_scan_ = Nanos::max();
  uint64_t unanswered_ = 0;  // retransmissions since the last packet from the switch
  Nanos last_heard_{0};      // when the last packet from the switch came
  std::string broken_reason_;
  WorkerEngineCounters counters_;
};

}  // namespace switchml
