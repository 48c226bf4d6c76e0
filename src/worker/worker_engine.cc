#include "worker/worker_engine.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

#include "quantize/quantize.h"
#include "worker/op_descriptor.h"

namespace switchml {
namespace {

// Chunk ids are a serial-number space; keep one operation's span well inside
// half of it.
constexpr uint64_t kMaxChunksPerOp = uint64_t{1} << 30;

// An operation uses at least 1/kDescriptorShare of its chunk count as slots,
// whatever the agreed number: the descriptor round sends one packet per slot,
// so it costs at most this share of a large operation's packets.
constexpr uint32_t kDescriptorShare = 32;

// Outputs of at least this size are written with non-temporal stores:
// larger than the caches, so storing them through the caches costs a read of
// each line and evicts the packet buffers.
constexpr uint64_t kStreamingOutputBytes = 8u << 20;

// What a packet's framing adds on the wire, about: Ethernet (with its
// preamble and gap), IPv4 and UDP headers. Only the share of a header in a
// whole packet's link time uses it (HeadersWorthCopying()).
constexpr size_t kFramingBytes = 66;

// A slot that the switch says waits for other ranks is asked about again
// after a round trip this many times, then after twice the wait each time
// (a late rank rather than a recovery).
constexpr uint32_t kProbesBeforeBackoff = 3;

// Whole milliseconds, as the configuration's *_ms fields give them.
std::string WholeMillis(Nanos d) {
  return std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(d).count());
}

std::string Millis(Nanos d) { return WholeMillis(d) + " ms"; }

}  // namespace

struct WorkerEngine::Op {
  OpId id = 0;
  const uint8_t* in = nullptr;
  uint8_t* out = nullptr;
  size_t count = 0;
  DType dtype = DType::kInt32;
  OpCallback done;
  OpDescriptor desc;
  uint32_t chunks = 0;      // C
  uint16_t window = 0;      // w
  uint32_t chunk_base = 0;  // chunk id of round 0, slot 0
  uint16_t slots_done = 0;
  // The first slots whose exponent-only packets go twice
  // (AgreedRedundantHeaders, HeadersWorthCopying()); 0: none.
  uint16_t copied_headers = 0;
  // Its last packet goes twice (after a loss, like the headers): no later
  // packet of this rank shows the switch that it was lost.
  bool last_packet_twice = false;
  // First chunk whose agreed exponent said "NaN/Inf somewhere", and whether
  // this worker's own input had one.
  int64_t non_finite_chunk = -1;
  int64_t local_non_finite_chunk = -1;
};

struct WorkerEngine::Slot {
  uint8_t version = 0;  // pool version of the next packet; persists across ops
  bool outstanding = false;
  // Its packet counts against the window: a whole packet not shown to wait
  // on a loss recovery (see LeaveWindow()).
  bool in_window = false;
  uint32_t round = 0;
  int16_t scale = 0;  // exponent agreed for the chunk of `round`
  uint32_t attempts = 0;
  // The switch answered a resend with kPending naming this rank present:
  // the resend was needless, and the result still times the first send.
  bool needless_resend = false;
  Nanos sent_at{0};    // of the round's first transmission
  Nanos resent_at{0};  // of its latest transmission
  // By when the switch has that transmission, or this rank a NACK or
  // result that it sent after: PathTimeout() from then.
  Nanos answer_due{0};
  Nanos probed_at{0};              // of its latest probe (0: none this round)
  uint32_t probes = 0;             // this round
  uint32_t unanswered_probes = 0;  // since the switch last answered about it
  bool recovering = false;         // shown to wait on a loss recovery
  // Its latest probe went after its latest transmission (on a link that
  // keeps order, so the answer tells whether that transmission arrived).
  // Not a comparison of the two times: both may go in the same nanosecond.
  bool probed_since_sent = false;
  // The switch answers this slot's next packet or probe with the result:
  // it holds it (a later result named it lost, CheckPrevious()), or it
  // waits on this rank alone (a pending reply said so).
  bool due_at_once = false;
  Nanos deadline{0};
  uint64_t delivered_at_send = 0;  // whole_results_ when it was sent
  uint64_t send_order = 0;         // of the round's first transmission, counting up
  uint64_t last_order = 0;         // of its latest transmission or probe
  uint64_t probe_order = 0;        // of its latest probe
};

Status WorkerEngineConfig::Validate() const {
  if (world_size == 0 || world_size == kAllRanks) {
    return InvalidArgument("world_size=" + std::to_string(world_size) +
                           " is out of range; use 1.." + std::to_string(kMaxWorldSize));
  }
  if (rank.value() >= world_size) {
    return InvalidArgument("rank=" + std::to_string(rank.value()) +
                           " is out of range for world_size=" + std::to_string(world_size) +
                           "; ranks are 0..world_size-1");
  }
  if (elements_per_packet < kMinElementsPerPacket || elements_per_packet > kMaxElementsPerPacket) {
    return InvalidArgument("elements_per_packet=" + std::to_string(elements_per_packet) +
                           " is out of range; use " + std::to_string(kMinElementsPerPacket) + ".." +
                           std::to_string(kMaxElementsPerPacket) +
                           " (64, 256 or 1024 are typical)");
  }
  if (pool_slots == 0) return InvalidArgument("pool_slots must be at least 1");
  if (window > pool_slots) {
    return InvalidArgument(
        "window=" + std::to_string(window) + " exceeds pool_slots=" + std::to_string(pool_slots) +
        "; use 1..pool_slots, or 0 to size it " + "from the measured round trip");
  }
  if (uint32_t(slot_offset) + pool_slots > 65536) {
    return InvalidArgument("slot_offset + pool_slots exceeds 65536 slots");
  }
  if (retransmit_timeout <= Nanos(0) || max_retransmit_timeout < retransmit_timeout ||
      min_retransmit_timeout <= Nanos(0) || max_retransmit_timeout < min_retransmit_timeout) {
    return InvalidArgument(
        "retransmit_timeout and min_retransmit_timeout must be positive and at most "
        "max_retransmit_timeout");
  }
  if (operation_timeout <= Nanos(0)) {
    return InvalidArgument("operation_timeout (" + Millis(operation_timeout) +
                           ") must be positive");
  }
  if (pacing_bits_per_second != 0 && pacing_bits_per_second < kMinPacingBitsPerSecond) {
    return InvalidArgument("pacing_bits_per_second=" + std::to_string(pacing_bits_per_second) +
                           " is below 1 Mbit/s; use the worker's link rate, or 0 for no pacing");
  }
  if (failure_timeout <= max_retransmit_timeout) {
    return InvalidArgument("failure_timeout (" + Millis(failure_timeout) +
                           ") must exceed max_retransmit_timeout (" +
                           Millis(max_retransmit_timeout) + ")");
  }
  return Status::Ok();
}

StatusOr<std::unique_ptr<WorkerEngine>> WorkerEngine::Create(const WorkerEngineConfig& config) {
  if (Status s = config.Validate(); !s.ok()) return s;
  return std::make_unique<WorkerEngine>(config);
}

WorkerEngine::WorkerEngine(const WorkerEngineConfig& config)
    : config_(config),
      slots_(config.pool_slots),
      missing_((config.world_size + 31) / 32),
      sizer_(config.pool_slots),
      recheck_(config.switch_answers_probes ? 2 * size_t(config.pool_slots) : 0),
      rto_(config.retransmit_timeout) {
  if (pacing()) {
    pacing_slack_ = kPacingBurst * WireTime(PacketBytes(config.elements_per_packet));
  }
}

WorkerEngine::~WorkerEngine() = default;

bool WorkerEngine::idle() const { return queue_.empty(); }

uint16_t WorkerEngine::Window() const {
  if (config_.window != 0) return config_.window;
  return pacing() ? config_.pool_slots : sizer_.window();
}

WorkerEngineCounters WorkerEngine::counters() const {
  WorkerEngineCounters c = counters_;
  c.window = Window();
  c.min_rtt_ns = sizer_.min_rtt() == Nanos::max() ? 0 : sizer_.min_rtt().count();
  c.delivery_rate = sizer_.max_rate_per_second();
  return c;
}

StatusOr<OpId> WorkerEngine::Submit(const void* in, void* out, size_t count, DType dtype,
                                    OpCallback done) {
  if (broken()) {
    return FailedPrecondition("this job can no longer run all-reduces after an earlier failure (" +
                              broken_reason_ + "); register the job again");
  }
  if (!IsValidDType(uint8_t(dtype))) {
    return InvalidArgument("dtype=" + std::to_string(int(dtype)) + " is not int32 or float32");
  }
  const uint64_t chunks = (count + config_.elements_per_packet - 1) / config_.elements_per_packet;
  if (chunks > kMaxChunksPerOp) {
    return InvalidArgument("count=" + std::to_string(count) +
                           " is too large for one all-reduce; "
                           "split it into pieces of at most " +
                           std::to_string(kMaxChunksPerOp * config_.elements_per_packet) +
                           " elements");
  }
  if (count > 0 && (in == nullptr || out == nullptr)) {
    return InvalidArgument("in and out must not be null for count=" + std::to_string(count));
  }
  Op op;
  op.id = next_op_id_++;
  op.in = static_cast<const uint8_t*>(in);
  op.out = static_cast<uint8_t*>(out);
  op.count = count;
  op.dtype = dtype;
  op.done = std::move(done);
  op.desc = OpDescriptor{count, dtype, config_.elements_per_packet};
  op.chunks = uint32_t(chunks);
  queue_.push_back(std::move(op));
  return queue_.back().id;
}

uint32_t WorkerEngine::ChunkId(uint32_t round, uint16_t index) const {
  const Op& op = queue_.front();
  return op.chunk_base + round * uint32_t(op.window) + index;
}

uint32_t WorkerEngine::RoundsOf(uint16_t index) const {
  const Op& op = queue_.front();
  return op.chunks > index ? (op.chunks - index + op.window - 1) / op.window : 0;
}

void WorkerEngine::StartNextOp(Nanos now, PacketSink& sink) {
  if (running_ || broken() || queue_.empty()) return;
  running_ = true;
  Op& op = queue_.front();
  // The slots every rank uses, from what they all know alone: the chunk
  // count, the pool and the number agreed in the previous descriptor round.
  const uint32_t share = (op.chunks + kDescriptorShare - 1) / kDescriptorShare;
  op.window = uint16_t(std::min<uint32_t>({config_.pool_slots, std::max<uint32_t>(op.chunks, 1),
                                           std::max<uint32_t>(agreed_slots_, share)}));
  // The slots the next operation needs: the window, plus room for the slots
  // that wait on loss recovery while the others keep the link busy.
  op.desc.proposed_slots = uint16_t(std::min<double>(
      config_.pool_slots, std::ceil(Window() * kRecoveryBdps / WindowSizer::kGain)));
  op.desc.saw_loss = saw_loss_;
  saw_loss_ = false;
  op.copied_headers = redundant_headers_ ? HeadersWorthCopying(op.window) : 0;
  op.last_packet_twice = redundant_headers_;
  op.chunk_base = next_chunk_base_;
  next_chunk_base_ += (RoundsOf(0) + 1) * uint32_t(op.window);
  last_progress_ = now;
  for (uint16_t i = 0; i < op.window; ++i) {
    slots_[i].round = 0;
    slots_[i].scale = 0;
  }
  send_cursor_ = 0;
  gap_cursor_ = 0;
  recheck_head_ = recheck_size_ = 0;
  sizer_.OnOperationStart();
  SendInOrder(now, sink);
}

// Sends the next packets in chunk-id order while the window allows. The
// packet at the cursor is round cursor / w of slot cursor % w; it may go once
// that slot's previous round has its result.
void WorkerEngine::SendInOrder(Nanos now, PacketSink& sink) {
  const Op& op = queue_.front();
  const uint64_t w = op.window;
  const uint64_t end = SendEnd();
  const uint16_t window = Window();
  // Packets sent back to back leave the link one after the other: the k-th
  // of a burst (the window at an operation's start) is on the wire k packet
  // times later, which its timeout must allow for.
  const double rate = sizer_.max_rate_per_second();
  const Nanos packet_time = rate > 0 ? Nanos(int64_t(1e9 / rate)) : Nanos(0);
  // Exponent-only packets (a header each) take no room in the window.
  for (Nanos queued{0}; send_cursor_ < end;) {
    const auto index = uint16_t(send_cursor_ % w);
    Slot& slot = slots_[index];
    if (slot.outstanding || slot.round != send_cursor_ / w) {
      // The slot's next round waits for a result that is overdue: everything
      // after it waits too, so ask the switch now.
      if (config_.switch_answers_probes && slot.outstanding && slot.recovering &&
          now >= slot.answer_due && now - slot.probed_at >= PathTimeout() / 2) {
        Probe(slot, index, now, sink);
      }
      break;
    }
    const bool whole = WordsOf(slot, index) != 0;
    if (whole && in_flight_ >= window) break;
    if (link_free_ > now + pacing_slack_) {  // paced: the link is busy
      pace_at_ = link_free_ - pacing_slack_;
      break;
    }
    SendRound(slot, index, now, queued, sink);
    if (whole) {
      ++in_flight_;
      slot.in_window = true;
      queued += packet_time;
    }
    // All sent: the tail's slots are probed sooner (ScanTimers()).
    if (++send_cursor_ == end && config_.switch_answers_probes) next_scan_ = now;
  }
}

void WorkerEngine::SendRound(Slot& slot, uint16_t index, Nanos now, Nanos queued,
                             PacketSink& sink) {
  EmitPacket(slot, index, now, sink, Transmission::kFirst);
  if (slot.round == 0 && index < queue_.front().copied_headers) {
    // After a loss: a lost header holds up its slot's data and this rank's
    // data after it, a lost descriptor every rank's data (they wait for slot
    // 0's result), and a second copy costs a header (docs/design.md §3).
    EmitPacket(slot, index, now, sink, Transmission::kCopy);
    ++counters_.redundant_headers;
  } else if (queue_.front().last_packet_twice && send_cursor_ + 1 == SendEnd()) {
    // After a loss: a rank's later packets reveal a lost one to the switch
    // at once (its NACK), but nothing follows the operation's last, whose
    // loss only a probe a path timeout later finds; nearly every operation's
    // last packets include a loss at hundreds of ranks (docs/design.md §3).
    EmitPacket(slot, index, now, sink, Transmission::kCopy);
    ++counters_.last_packet_copies;
  }
  slot.outstanding = true;
  slot.attempts = 0;
  slot.probes = 0;
  slot.unanswered_probes = 0;
  slot.recovering = false;
  slot.probed_at = Nanos(0);
  slot.needless_resend = false;
  slot.due_at_once = false;
  slot.sent_at = now;
  slot.delivered_at_send = whole_results_;
  slot.send_order = ++sends_;
  slot.last_order = slot.send_order;
  slot.deadline = now + queued + SlotTimeout();
  next_scan_ = std::min(next_scan_, slot.deadline);
}

uint16_t WorkerEngine::WordsOf(const Slot& slot, uint16_t index) const {
  const bool exponent_only = config_.switch_accepts_exponent_only && slot.round == 0 && index != 0;
  return exponent_only ? 0 : config_.elements_per_packet;
}

void WorkerEngine::EmitPacket(Slot& slot, uint16_t index, Nanos now, PacketSink& sink,
                              Transmission how) {
  const size_t bytes = PacketBytes(WordsOf(slot, index));
  const std::span<uint8_t> buf = sink.Claim(bytes);
  WritePacket(slot, index, buf.data(), how);
  sink.Send(buf.first(bytes));
  Paced(bytes, now);
  ++counters_.packets_sent;
  slot.resent_at = now;
  slot.probed_since_sent = false;
  slot.answer_due = now + PathTimeout();
}

void WorkerEngine::Paced(size_t bytes, Nanos now) {
  if (!pacing()) return;
  link_free_ = std::max(link_free_, now) + WireTime(bytes);
}

Nanos WorkerEngine::WireTime(size_t bytes) const {
  const double seconds = double(bytes + kFramingBytes) * 8 / double(config_.pacing_bits_per_second);
  return Nanos(int64_t(seconds * 1e9));
}

void WorkerEngine::Retransmit(Slot& slot, uint16_t index, Nanos now, PacketSink& sink) {
  EmitPacket(slot, index, now, sink, Transmission::kResend);
  ++counters_.retransmissions;
  saw_loss_ = true;
  ++slot.attempts;
  LeaveWindow(slot);
  slot.last_order = ++sends_;
  PushRecheck(index, slot.last_order, false);
}

PacketHeader WorkerEngine::SlotHeader(const Slot& slot, uint16_t index, MessageType type) const {
  PacketHeader h;
  h.type = type;
  h.job = config_.job.value();
  h.chunk = ChunkId(slot.round, index);
  h.rank = config_.rank.value();
  h.slot = uint16_t(config_.slot_offset + index);
  h.version = slot.version;
  return h;
}

void WorkerEngine::Probe(Slot& slot, uint16_t index, Nanos now, PacketSink& sink, int copies) {
  for (int c = 0; c < copies; ++c) {  // the same bytes each time
    const std::span<uint8_t> buf = sink.Claim(kHeaderBytes);
    EncodeHeader(SlotHeader(slot, index, MessageType::kProbe), buf);  // element_count 0
    sink.Send(buf.first(kHeaderBytes));
    Paced(kHeaderBytes, now);
    ++counters_.probes_sent;
  }
  ++slot.probes;
  ++slot.unanswered_probes;
  // The switch sent this rank something since the slot's previous probe,
  // which went unanswered: that probe or its answer was lost, a random loss
  // and no sign of an overloaded switch. (Paced engines keep their measured
  // timers: without the doubling, 256 paced workers at 1% loss drew probe
  // storms, tests/sim_pacing_test.)
  const bool switch_answers =
      !pacing() && slot.unanswered_probes > 1 && last_heard_ > slot.probed_at;
  slot.probed_at = now;
  slot.probed_since_sent = true;
  slot.last_order = ++sends_;
  slot.probe_order = slot.last_order;
  PushRecheck(index, slot.last_order, true);
  // The switch answers a probe at once: ask again if no answer comes
  // within the path's round trip, doubling only while the switch is silent
  // (at an operation's end no later result shows a probe lost, Recheck(),
  // and each doubling would cost the whole job that wait).
  const Nanos round_trip = slot.due_at_once ? ResultTimeout() : PathTimeout();
  const uint32_t doublings =
      switch_answers ? 0 : std::min<uint32_t>(slot.unanswered_probes - 1, 16);
  const Nanos again = round_trip * (int64_t{1} << doublings);
  slot.deadline = now + std::min(again, config_.max_retransmit_timeout);
  next_scan_ = std::min(next_scan_, slot.deadline);
}

void WorkerEngine::WritePacket(const Slot& slot, uint16_t index, uint8_t* buf, Transmission how) {
  Op& op = queue_.front();
  const uint32_t k = config_.elements_per_packet;
  const bool is_float = op.dtype == DType::kFloat32;
  uint8_t* payload = buf + kHeaderBytes;

  // The chunk whose exponent this packet announces: the next one in this slot.
  const uint64_t ahead = uint64_t(slot.round) * op.window + index;
  int16_t next_exponent = 0;
  if (is_float) {
    next_exponent = kMinExponent;
    if (ahead < op.chunks) {
      const uint64_t begin = ahead * k;
      const auto* x = reinterpret_cast<const float*>(op.in) + begin;
      next_exponent = BlockExponent(x, std::min<uint64_t>(k, op.count - begin));
      if (next_exponent == kNonFiniteExponent &&
          (op.local_non_finite_chunk < 0 || int64_t(ahead) < op.local_non_finite_chunk)) {
        op.local_non_finite_chunk = int64_t(ahead);
      }
    }
  }

  const uint16_t words = WordsOf(slot, index);
  size_t filled = 0;
  if (words == 0) {
    // Exponent-only: the header alone.
  } else if (slot.round == 0) {
    EncodeDescriptor(op.desc, payload);
    filled = kDescriptorWords;
  } else {
    const uint64_t chunk = uint64_t(slot.round - 1) * op.window + index;
    const uint64_t begin = chunk * k;
    filled = size_t(std::min<uint64_t>(k, op.count - begin));
    if (!is_float) {
      Int32ToBigEndian(reinterpret_cast<const int32_t*>(op.in) + begin, filled, payload);
    } else if (slot.scale == kNonFiniteExponent) {
      filled = 0;  // some worker has NaN/Inf here: send zeros, the result is NaN anyway
    } else {
      QuantizeToBigEndian(reinterpret_cast<const float*>(op.in) + begin, filled,
                          MakeBlockScale(slot.scale, config_.world_size), payload);
    }
  }
  std::memset(payload + 4 * filled, 0, 4 * (words - filled));

  PacketHeader h = SlotHeader(slot, index, MessageType::kContribution);
  h.element_count = words;
  h.exponent = (is_float && slot.round > 0) ? slot.scale : 0;
  h.next_exponent = next_exponent;
  h.resend = how == Transmission::kResend;
  h.copy = how == Transmission::kCopy;
  EncodeHeader(h, std::span<uint8_t>(buf, kHeaderBytes));
}

int WorkerEngine::SlotOf(std::span<const uint8_t> packet, PacketView* p) {
  if (DecodePacket(packet, p) != DecodeError::kOk) {
    ++counters_.malformed;
    return -1;
  }
  const PacketHeader& h = p->header;
  // (A result that names the previous one holds that one's slot as its rank.)
  const bool to_me = h.rank == config_.rank.value() || h.rank == kAllRanks ||
                     (h.type == MessageType::kResult && h.names_previous);
  if (h.job != config_.job.value() || !to_me) {
    ++counters_.wrong_job_or_rank;
    return -1;
  }
  if (h.type == MessageType::kContribution) {
    ++counters_.invalid;
    return -1;
  }
  if (h.slot < config_.slot_offset || h.slot - config_.slot_offset >= config_.pool_slots) {
    ++counters_.invalid;  // another engine's slot
    return -1;
  }
  const auto index = uint16_t(h.slot - config_.slot_offset);
  if (!running_ || index >= queue_.front().window) {
    ++counters_.duplicates;  // late packets of a finished operation
    return -1;
  }
  return index;
}

void WorkerEngine::OnNackAhead(Slot& slot, uint16_t index, uint32_t chunk, Nanos now,
                               PacketSink& sink) {
  ++counters_.nacks_received;
  if (slot.outstanding) {
    // They sent this slot's next round, so they had its result, and the
    // switch sent this rank's before this NACK (links keep order): lost.
    ResendLostResult(slot, index, now, sink);
  } else if (!ChunkBefore(chunk, next_chunk_base_)) {
    // They are in the next operation: every slot of this one completed,
    // and each result this rank still waits for was lost.
    for (uint16_t i = 0; i < queue_.front().window; ++i) {
      if (slots_[i].outstanding) ResendLostResult(slots_[i], i, now, sink);
    }
  } else {
    ResendOverdue(now, sink);
  }
}

void WorkerEngine::OnPacket(std::span<const uint8_t> packet, Nanos now, PacketSink& sink) {
  PacketView p;
  const int found = SlotOf(packet, &p);
  if (found < 0) return;
  const auto index = uint16_t(found);
  const PacketHeader& h = p.header;
  Slot& slot = slots_[index];
  const uint32_t expected_chunk = ChunkId(slot.round, index);
  const size_t report_words =
      (h.type == MessageType::kNack ? 2 : 1) * missing_.size();  // bitmaps' words
  if (h.type == MessageType::kNack && h.element_count == report_words &&
      ChunkBefore(expected_chunk, h.chunk) &&
      NackNames({p.payload - kHeaderBytes, PacketBytes(h.element_count)}, config_.rank.value())) {
    // The switch misses this rank in a chunk it has not sent yet: the others
    // moved on, so what holds this rank back (a lost result) is overdue.
    OnNackAhead(slot, index, h.chunk, now, sink);
    return;
  }
  if (h.type == MessageType::kResult && h.names_previous) {
    CheckPrevious(h.rank, h.previous_version, now, sink);
  }
  if (!slot.outstanding || h.version != slot.version || h.chunk != expected_chunk) {
    ++counters_.duplicates;
    return;
  }
  unanswered_ = 0;
  last_heard_ = now;
  if (h.type == MessageType::kPending || h.type == MessageType::kNack) {
    if (h.element_count != report_words) {
      ++counters_.invalid;
      return;
    }
    OnStallReport(slot, index, p, now, sink);
    return;
  }
  // A result for the round this slot waits for.
  const bool is_float = queue_.front().dtype == DType::kFloat32;
  const int16_t expected_scale = (is_float && slot.round > 0) ? slot.scale : 0;
  if (h.element_count != WordsOf(slot, index) || h.exponent != expected_scale ||
      (is_float && !IsValidExponent(h.next_exponent))) {
    ++counters_.invalid;
    return;
  }
  AcceptResult(slot, index, p, now, sink);
}

void WorkerEngine::CheckPrevious(uint16_t job_slot, uint8_t version, Nanos now, PacketSink& sink) {
  if (job_slot < config_.slot_offset || job_slot - config_.slot_offset >= queue_.front().window) {
    return;  // another engine's slot, or one this operation does not use
  }
  const auto index = uint16_t(job_slot - config_.slot_offset);
  Slot& slot = slots_[index];
  // The switch sent that result before this one and the link keeps order:
  // a slot that still waits for it in that version lost it. (In the other
  // version it waits for a later result; a result of that version two
  // rounds back came before the one it got since.)
  if (!slot.outstanding || slot.version != version) return;
  ++counters_.results_named_lost;
  // Paced, the engine's own timers recover it: acting on the name (and
  // the answer time below) drew probe storms there (docs/performance.md,
  // "Each result names the previous one").
  if (pacing()) return;
  // (An earlier probe may predate the result; one sent for an earlier name
  // is answered with it.)
  const bool asked = slot.due_at_once && now - slot.probed_at < ResultTimeout();
  slot.due_at_once = true;
  LeaveWindow(slot);
  if (!config_.switch_answers_probes) {
    ResendLostResult(slot, index, now, sink);
  } else if (!asked) {
    // The switch answers with the result. After a loss, ask twice, as the
    // headers go twice: this rank's next round of the slot waits for it,
    // and the probe or its answer is lost as often as any packet; then only
    // a timer asks again, a round trip later (docs/performance.md, "A result
    // named lost asked for twice").
    Probe(slot, index, now, sink, queue_.front().copied_headers > 0 ? 2 : 1);
  }
}

void WorkerEngine::OnStallReport(Slot& slot, uint16_t index, const PacketView& p, Nanos now,
                                 PacketSink& sink) {
  const PacketHeader& h = p.header;
  const bool nack = h.type == MessageType::kNack;
  const size_t words = missing_.size();
  const uint16_t me = config_.rank.value();
  // Both name the missing ranks: a pending reply lists the ranks that
  // contributed, a NACK those whose packet was lost, then the others.
  auto missing_word = [&](size_t w) {
    const uint32_t valid =
        (w + 1) * 32 <= config_.world_size ? ~0u : (1u << (config_.world_size % 32)) - 1;
    const uint32_t word = nack ? LoadBe32(p.payload + 4 * w) | LoadBe32(p.payload + 4 * (words + w))
                               : ~LoadBe32(p.payload + 4 * w);
    return word & valid;
  };
  // Keep the report on the oldest chunk; a newer one's says less.
  const bool stale = missing_reported_at_ < last_progress_;
  if (stale || !ChunkBefore(missing_chunk_, h.chunk)) {
    for (size_t w = 0; w < words; ++w) missing_[w] = missing_word(w);
    missing_chunk_ = h.chunk;
    missing_reported_at_ = now;
  }
  const bool named = (missing_word(me / 32) >> (me % 32)) & 1;
  if (!nack) {
    ++counters_.pending_received;
    // The answer to the slot's one unanswered probe (or to a resend sent
    // right before it): the switch answers on arrival, so its answers to
    // everything this rank sent before that probe came first or were lost.
    const bool answers_probe = slot.unanswered_probes == 1;
    if (answers_probe) probe_answered_ = std::max(probe_answered_, slot.probe_order);
    slot.unanswered_probes = 0;
    // Only this rank missing: the switch completes the slot as this rank's
    // packet arrives, so its result is due a round trip after the packet.
    size_t missing_ranks = 0;
    for (size_t w = 0; named && !pacing() && w < words; ++w) {
      missing_ranks += size_t(std::popcount(missing_word(w)));
    }
    slot.due_at_once = missing_ranks == 1;
    if (!named) {
      // Others are missing: ask again later, less often the longer it takes
      // (their recovery, or a late rank). The operation's last slot asks
      // sooner: no later result will name its result if that is lost, and
      // one slot's probes cost little.
      slot.needless_resend = true;
      if (config_.switch_answers_probes) {
        const uint32_t doublings =
            slot.probes > kProbesBeforeBackoff ? slot.probes - kProbesBeforeBackoff : 0;
        const Nanos again = LastSlot() && !pacing() ? ResultTimeout() : PathTimeout() / 2;
        const Nanos wait = again * (int64_t{1} << std::min<uint32_t>(doublings, 16));
        slot.deadline = now + std::min(wait, config_.max_retransmit_timeout);
      } else {
        slot.deadline = std::max(slot.deadline, now + rto_);
      }
      next_scan_ = std::min(next_scan_, slot.deadline);
    } else if (slot.probed_since_sent) {
      // The switch lacks this rank's packet, which went before the probe on
      // the same link: lost.
      ResendBeforeTimeout(slot, index, now, sink);
    } else if (slot.due_at_once) {
      // A resend is on its way, and it completes the slot.
      slot.deadline = std::min(slot.deadline, slot.resent_at + ResultTimeout());
      next_scan_ = std::min(next_scan_, slot.deadline);
    }
    if (answers_probe && config_.switch_answers_probes) Recheck(now, sink);
    return;
  }
  ++counters_.nacks_received;
  if (!named) {
    // Another rank is missing: this one's contribution is in, its result
    // will come; no timer needs to fire before the NACKed rank resends.
    slot.deadline = std::max(slot.deadline, now + rto_);
    next_scan_ = std::min(next_scan_, slot.deadline);
    return;
  }
  // Named in the first bitmap, the switch saw a newer packet of this rank:
  // a link delivers in order, so this one was lost (unless it is a resend
  // the NACK predates). In the second, it may be on its way.
  const bool lost = (LoadBe32(p.payload + 4 * (me / 32)) >> (me % 32)) & 1;
  const bool witnessed = lost && slot.attempts == 0;
  if (!witnessed && !Overdue(slot, now)) {
    ++counters_.nacks_ignored;  // the switch NACKs again if it is lost
    AskIfUnsure(slot, index, now, sink);
    return;
  }
  ResendBeforeTimeout(slot, index, now, sink);
}

void WorkerEngine::ResendLostResult(Slot& slot, uint16_t index, Nanos now, PacketSink& sink) {
  // A resend may still be answered.
  if (slot.attempts > 0 && !Overdue(slot, now)) {
    ++counters_.nacks_ignored;
    AskIfUnsure(slot, index, now, sink);
    return;
  }
  ResendBeforeTimeout(slot, index, now, sink);
}

void WorkerEngine::AskIfUnsure(Slot& slot, uint16_t index, Nanos now, PacketSink& sink) {
  // A probe follows the packet on the same link: its answer says for sure
  // whether the switch has it (or its result), once the path's round trip
  // allows for the packet to have arrived.
  if (config_.switch_answers_probes && !slot.probed_since_sent && now >= slot.answer_due) {
    Probe(slot, index, now, sink);
  }
}

void WorkerEngine::ResendBeforeTimeout(Slot& slot, uint16_t index, Nanos now, PacketSink& sink) {
  Retransmit(slot, index, now, sink);
  ++counters_.fast_retransmissions;
  // A probe right behind the resend, on the same link: a pending reply that
  // still lacks this rank proves the resend lost a round trip later
  // (OnStallReport), where a NACK cannot (it may predate the resend).
  // (Paced engines keep their measured timers.)
  if (config_.switch_answers_probes && !pacing()) Probe(slot, index, now, sink);
  slot.deadline = now + (slot.due_at_once ? ResultTimeout() : SlotTimeout());
  next_scan_ = std::min(next_scan_, slot.deadline);
}

bool WorkerEngine::Overdue(const Slot& slot, Nanos now) const {
  if (slot.attempts == 0 && slot.send_order <= answered_) return true;
  // Without that witness (a resend, whose NACK may predate it; or no later
  // result yet, as when every slot waits at scale) a switch that answers
  // probes is asked (AskIfUnsure()); else twice the smoothed round trip must
  // have passed: longer than a packet takes, even queued.
  return !config_.switch_answers_probes && now - slot.resent_at >= 2 * SmoothedRoundTrip();
}

void WorkerEngine::ResendOverdue(Nanos now, PacketSink& sink) {
  // The oldest transmission still unanswered, if it is Overdue().
  const uint16_t window = queue_.front().window;
  int oldest = -1;
  for (uint16_t i = 0; i < window; ++i) {
    const Slot& slot = slots_[i];
    if (slot.outstanding && (oldest < 0 || slot.resent_at < slots_[size_t(oldest)].resent_at)) {
      oldest = i;
    }
  }
  if (oldest < 0) return;
  Slot& slot = slots_[size_t(oldest)];
  if (!Overdue(slot, now)) {  // this rank merely lags, its window smaller than the others'
    ++counters_.nacks_ignored;
    AskIfUnsure(slot, uint16_t(oldest), now, sink);
    return;
  }
  ResendBeforeTimeout(slot, uint16_t(oldest), now, sink);
}

void WorkerEngine::AcceptResult(Slot& slot, uint16_t index, const PacketView& p, Nanos now,
                                PacketSink& sink) {
  Op& op = queue_.front();
  const uint32_t k = config_.elements_per_packet;
  ++counters_.results_accepted;
  // An exponent-only packet's round trip and rate say little about a whole
  // packet's: only whole ones are sampled.
  const bool whole = WordsOf(slot, index) != 0;
  if (whole) ++whole_results_;
  if (slot.round == 0) {
    // An exponent-only packet carries no descriptor; slot 0's always does,
    // and no operation completes without it.
    if (whole) {
      const std::string disagreement = CheckDescriptorSums(op.desc, p.payload, config_.world_size);
      if (!disagreement.empty()) {
        Break(InvalidArgument(disagreement));
        return;
      }
    }
    // Slot 0's sums, the same on every rank, set the next operation's slots.
    if (index == 0) {
      agreed_slots_ = AgreedSlots(p.payload, config_.world_size);
      redundant_headers_ =
          config_.switch_accepts_exponent_only && AgreedRedundantHeaders(p.payload);
    }
  } else {
    const uint64_t chunk = uint64_t(slot.round - 1) * op.window + index;
    const uint64_t begin = chunk * k;
    const size_t n = size_t(std::min<uint64_t>(k, op.count - begin));
    // A large output goes past the caches (it would only evict what the
    // next packets need); a small one stays for the caller to read.
    const bool stream = op.count * 4 >= kStreamingOutputBytes;
    if (op.dtype == DType::kInt32) {
      int32_t* out = reinterpret_cast<int32_t*>(op.out) + begin;
      stream ? Int32FromBigEndianStreaming(p.payload, n, out)
             : Int32FromBigEndian(p.payload, n, out);
    } else if (slot.scale == kNonFiniteExponent) {
      std::fill_n(reinterpret_cast<float*>(op.out) + begin, n,
                  std::numeric_limits<float>::quiet_NaN());
      if (op.non_finite_chunk < 0 || int64_t(chunk) < op.non_finite_chunk) {
        op.non_finite_chunk = int64_t(chunk);
      }
    } else {
      const BlockScale scale = MakeBlockScale(slot.scale, config_.world_size);
      float* out = reinterpret_cast<float*>(op.out) + begin;
      stream ? DequantizeFromBigEndianStreaming(p.payload, n, scale, out)
             : DequantizeFromBigEndian(p.payload, n, scale, out);
    }
  }
  slot.scale = op.dtype == DType::kFloat32 ? p.header.next_exponent : 0;
  last_progress_ = now;
  // Reports on missing ranks predate this progress, even one that came in
  // the same instant (a probe's answer may trail the result it asked for).
  missing_reported_at_ = Nanos(-1);
  // Whichever transmission this result answers came after the first.
  answered_ = std::max(answered_, slot.send_order);
  // Karn: a resent packet's round trip is ambiguous, unless the switch said
  // the resend was needless (then leaving the sample out would keep the
  // timeout below the waits that other ranks' losses cause).
  if (slot.attempts == 0 || slot.needless_resend) {
    if (whole) {
      SampleRoundTrip(now - slot.sent_at);
      sizer_.OnSample(now - slot.sent_at, whole_results_ - slot.delivered_at_send);
    }
  }
  if (config_.switch_answers_probes) WatchGaps(uint64_t(slot.round) * op.window + index, now, sink);
  slot.version ^= 1;
  slot.outstanding = false;
  ReleaseWindow(slot);
  if (config_.switch_answers_probes) Recheck(now, sink);
  const bool slot_done = ++slot.round > RoundsOf(index);
  if (!slot_done || ++op.slots_done < op.window) {
    SendInOrder(now, sink);
    return;
  }

  Status status;
  if (op.non_finite_chunk >= 0 && config_.non_finite_error) {
    const uint64_t begin = uint64_t(op.non_finite_chunk) * k;
    const std::string where = "elements [" + std::to_string(begin) + ", " +
                              std::to_string(std::min<uint64_t>(begin + k, op.count)) + ")";
    status = Status(StatusCode::kDataLoss, op.local_non_finite_chunk == op.non_finite_chunk
                                               ? "this worker's input contains NaN or Inf in " +
                                                     where + "; the output is NaN there"
                                               : "another worker's input contains NaN or Inf in " +
                                                     where + "; the output is NaN there");
  }
  FinishOp(std::move(status));
  StartNextOp(now, sink);
}

void WorkerEngine::SampleRoundTrip(Nanos sample) {
  // Jacobson/Karels (RFC 6298). The round trip of a slot includes waiting for
  // the slowest worker, which is exactly what a timeout must allow for.
  if (srtt_ == Nanos(0)) {
    srtt_ = sample;
    rttvar_ = sample / 2;
  } else {
    const Nanos error = srtt_ > sample ? srtt_ - sample : sample - srtt_;
    rttvar_ = (rttvar_ * 3 + error) / 4;
    srtt_ = (srtt_ * 7 + sample) / 8;
  }
  // At least twice the smoothed round trip: behind a rate limit the round
  // trip is mostly queueing, its variance is small, and a timeout just above
  // it fires on every hiccup; each spurious resend lengthens the queue and so
  // the next round trip (measured: 40% resends at 200 Mbit/s without this).
  rto_ = std::clamp(std::max(srtt_ + 4 * rttvar_, 2 * srtt_), config_.min_retransmit_timeout,
                    config_.max_retransmit_timeout);
}

void WorkerEngine::FinishOp(Status status) {
  Op op = std::move(queue_.front());
  queue_.pop_front();
  running_ = false;
  next_scan_ = Nanos::max();
  pace_at_ = Nanos::max();
  in_flight_ = 0;
  if (op.done) op.done(op.id, status);
}

void WorkerEngine::Break(Status status) {
  if (broken()) return;
  broken_reason_ = status.message();
  std::deque<Op> ops;
  ops.swap(queue_);
  running_ = false;
  next_scan_ = Nanos::max();
  for (size_t i = 0; i < ops.size(); ++i) {
    if (!ops[i].done) continue;
    if (i == 0) {
      ops[i].done(ops[i].id, status);
    } else {
      ops[i].done(ops[i].id, Status(StatusCode::kAborted,
                                    "an earlier all-reduce of this job failed: " + broken_reason_));
    }
  }
}

std::string WorkerEngine::DescribeStall(Nanos now) const {
  const std::string rank = " at rank " + std::to_string(config_.rank.value()) + ": ";
  // "Timed out" is what torch users (and its tests) look for.
  const std::string what =
      timed_out_
          ? "Timed out after " + Millis(now - last_progress_) +
                " without progress (operation_timeout_ms = " +
                WholeMillis(config_.operation_timeout) + ") in all-reduce " +
                std::to_string(queue_.front().id) + " of job " +
                std::to_string(config_.job.value()) + rank
          : "all-reduce of job " + std::to_string(config_.job.value()) + " made no progress for " +
                Millis(now - last_progress_) +
                " (failure_timeout_ms = " + WholeMillis(config_.failure_timeout) + ")" + rank;
  if (!switch_silent_) {
    std::string ranks;
    int listed = 0, total = 0;
    for (size_t r = 0; r < config_.world_size; ++r) {
      if (!(missing_[r / 32] >> (r % 32) & 1)) continue;
      if (++total <= 16) ranks += (listed++ ? ", " : "") + std::to_string(r);
    }
    if (total > 16) ranks += " and " + std::to_string(total - 16) + " more";
    return what + "the switch has no contribution from rank" + (total == 1 ? " " : "s ") + ranks +
           " (late, hung or cut off from the switch?)";
  }
  return what + "no answer from the switch to " + std::to_string(unanswered_) +
         " retransmissions (is the switch running and reachable?)";
}

Nanos WorkerEngine::QuietAt() const {
  if (missing_reported_at_ < last_progress_) return last_progress_;
  // A live switch answers every retransmission (a pending reply at the
  // latest), and a stuck slot goes again at least every
  // max_retransmit_timeout.
  const Nanos quiet = std::min(2 * config_.max_retransmit_timeout, config_.failure_timeout / 2);
  return last_heard_ + quiet + Nanos(1);
}

void WorkerEngine::OnTimer(Nanos now, PacketSink& sink) {
  if (!running_) {
    StartNextOp(now, sink);
    return;
  }
  // A switch that went quiet (or never said which ranks are missing) is the
  // cause after failure_timeout; ranks it names are late but alive (one
  // that left is the control plane's news) and are waited for up to
  // operation_timeout.
  const Nanos waited = now - last_progress_;
  const bool quiet = now >= QuietAt();
  if (waited >= config_.operation_timeout || (waited >= config_.failure_timeout && quiet)) {
    switch_silent_ = quiet;
    timed_out_ = waited >= config_.operation_timeout;
    Break(Status(StatusCode::kDeadlineExceeded, DescribeStall(now)));
    return;
  }
  if (now >= pace_at_) {  // the link has room for the next packets
    pace_at_ = Nanos::max();
    SendInOrder(now, sink);
  }
  if (now < next_scan_) return;
  ScanTimers(now, sink);
}

void WorkerEngine::ScanTimers(Nanos now, PacketSink& sink) {
  const Op& op = queue_.front();
  Nanos next = Nanos::max();
  bool expired = false;
  const bool unanswered = unanswered_ > 0;  // earlier resends drew no reply at all
  const bool probing = config_.switch_answers_probes;
  const Nanos tail = probing ? TailProbeTimeout() : Nanos::max();
  const bool in_tail = tail != Nanos::max();
  // Slots that only the path's timer speaks for and that it finds overdue
  // together wait on one stall (a late or paused rank, a switch or worker
  // that the scheduler held back, another rank's burst of losses): only the
  // oldest is asked about, as TCP's timeout resends only the first segment
  // it lacks, and the others' timers start again. Its answer says whether
  // the switch lacks this rank; a later slot's own loss is NACKed as this
  // rank's next packet arrives (or by the switch's stall watch), a lost
  // result named by the next one. Probing each drew one probe per slot and
  // stall from every rank (docs/performance.md, "One timer probe per stall").
  // (Paced engines, a switch without probes and the tail keep every timer.)
  const bool one_per_stall = probing && !pacing() && !in_tail;
  uint64_t oldest = ~uint64_t{0};
  for (uint16_t i = 0; one_per_stall && i < op.window; ++i) {
    const Slot& slot = slots_[i];
    if (slot.outstanding && now >= slot.deadline && OnlyTimerSpeaksFor(slot)) {
      oldest = std::min(oldest, slot.send_order);
    }
  }
  for (uint16_t i = 0; i < op.window; ++i) {
    Slot& slot = slots_[i];
    if (!slot.outstanding) continue;
    if (one_per_stall && now >= slot.deadline && slot.send_order > oldest &&
        OnlyTimerSpeaksFor(slot)) {
      slot.deadline = now + PathTimeout();
      next = std::min(next, slot.deadline);
      continue;
    }
    if (in_tail) {
      const Nanos last = std::max(slot.resent_at, slot.probed_at);
      const Nanos wait = tail * (int64_t{1} << std::min<uint32_t>(slot.probes, 16));
      slot.deadline = std::min(slot.deadline, last + wait);
    }
    if (now >= slot.deadline) {
      // Ask the switch, or resend the packet unchanged: same slot, version
      // and values.
      ++unanswered_;
      expired = true;
      if (probing) {
        Probe(slot, i, now, sink);  // sets the deadline
      } else {
        Retransmit(slot, i, now, sink);
        const Nanos backoff = rto_ * (int64_t{1} << std::min<uint32_t>(slot.attempts, 16));
        slot.deadline = now + std::min(backoff, config_.max_retransmit_timeout);
      }
    }
    next = std::min(next, slot.deadline);
  }
  // Nothing at all came from the switch for a whole timeout: it or the path
  // is overloaded (or gone), so slow down. A random loss is no reason to,
  // nor a slot that waits on another rank while the switch answers; the
  // next round trip sample resets it.
  if (expired && unanswered && now - last_heard_ >= rto_) {
    rto_ = std::min(rto_ * 2, config_.max_retransmit_timeout);
    ++counters_.timeout_backoffs;
  }
  next_scan_ = next;
}

bool WorkerEngine::OnlyTimerSpeaksFor(const Slot& slot) {
  return slot.probes == 0 && slot.attempts == 0 && !slot.recovering && !slot.due_at_once;
}

void WorkerEngine::LeaveWindow(Slot& slot) {
  slot.recovering = true;
  ReleaseWindow(slot);
}

void WorkerEngine::ReleaseWindow(Slot& slot) {
  if (!slot.in_window) return;
  slot.in_window = false;
  --in_flight_;
}

void WorkerEngine::PushRecheck(uint16_t index, uint64_t order, bool probe) {
  if (recheck_.empty()) return;
  if (recheck_size_ == recheck_.size()) {  // full: the oldest is left to the timers
    recheck_head_ = (recheck_head_ + 1) % recheck_.size();
    --recheck_size_;
  }
  recheck_[(recheck_head_ + recheck_size_++) % recheck_.size()] = {index, probe, order};
}

void WorkerEngine::Recheck(Nanos now, PacketSink& sink) {
  // Links keep order, and the switch answers a probe (or counts a resend)
  // when it arrives: once a result or a pending reply answers a packet or
  // probe sent after them, a probe still unanswered or a resend whose slot
  // still waits was lost, or its answer or result was. Ask again.
  const uint64_t witness = std::max(answered_, probe_answered_);
  while (recheck_size_ > 0 && recheck_[recheck_head_].order < witness) {
    const RecheckEntry e = recheck_[recheck_head_];
    recheck_head_ = (recheck_head_ + 1) % recheck_.size();
    --recheck_size_;
    Slot& slot = slots_[e.index];
    if (!slot.outstanding || slot.last_order != e.order) continue;  // answered, or asked since
    if (e.probe && slot.unanswered_probes == 0) continue;
    Probe(slot, e.index, now, sink);
  }
}

void WorkerEngine::WatchGaps(uint64_t position, Nanos now, PacketSink& sink) {
  // Every rank sends in chunk order over a link that keeps order, so the
  // switch completes slots in that order and a result for this position
  // means each earlier one completed too, or lacks a lost contribution:
  // mostly another rank's, whose resend the switch's NACK brings. (This
  // rank's own lost packet is NACKed as its next chunk arrives, and its lost
  // result named by the next result.) So the gap leaves the window now but
  // is asked about only if its result has not come within the answer time:
  // a probe at once drew one from every rank that had contributed, each
  // answered "others missing" (40x the probes at 256 workers, and slower:
  // docs/performance.md, "Gap probes after the answer time"). Paced engines
  // (the simulator's) still probe at once: measured that way.
  const uint64_t w = queue_.front().window;
  for (; gap_cursor_ < position; ++gap_cursor_) {
    const auto index = uint16_t(gap_cursor_ % w);
    Slot& slot = slots_[index];
    if (slot.outstanding && slot.round == gap_cursor_ / w && slot.probes == 0) {
      LeaveWindow(slot);
      if (pacing()) {
        Probe(slot, index, now, sink);
      } else {
        slot.deadline = std::min(slot.deadline, now + ResultTimeout());
        next_scan_ = std::min(next_scan_, slot.deadline);
      }
    }
  }
  gap_cursor_ = std::max(gap_cursor_, position + 1);
}

Nanos WorkerEngine::SlotTimeout() const {
  return config_.switch_answers_probes ? PathTimeout() : rto_;
}

Nanos WorkerEngine::PathTimeout() const {
  if (sizer_.min_rtt() == Nanos::max()) return rto_;
  // The queue drains at most at the largest delivery rate measured, and at
  // most at the window per smoothed round trip: results that arrive in
  // batches (a receive batch, an interrupt) overstate the first. Waits for
  // other ranks understate the second, so it counts down to an eighth of
  // the first only.
  // Paced, the window is the whole pool and does not shrink with the rate:
  // a smoothed round trip that slots waiting on other ranks' recovery
  // lengthen would lengthen every probe's wait and so those recoveries, a
  // loop (measured: 773 µs against a least round trip of 10 µs, 6.3x the
  // loss-free time). The pacing path counts it at most kPacedRoundTrips
  // least round trips.
  Nanos round_trip = SmoothedRoundTrip();
  if (pacing()) {
    round_trip = std::min(round_trip, kPacedRoundTrips * sizer_.min_rtt());
  }
  const double max_rate = sizer_.max_rate_per_second();
  const double rate = std::max(
      max_rate / 8, std::min(max_rate, double(Window()) * 1e9 / double(round_trip.count())));
  return RoundTripAt(rate);
}

Nanos WorkerEngine::RoundTripAt(double rate) const {
  const Nanos queue = rate > 0 ? Nanos(int64_t(in_flight_ * 1e9 / rate)) : Nanos(0);
  return std::max(config_.min_retransmit_timeout, 2 * (sizer_.min_rtt() + queue));
}

bool WorkerEngine::LastSlot() const {
  const Op& op = queue_.front();
  return send_cursor_ == SendEnd() && op.slots_done + 1 == op.window;
}

uint64_t WorkerEngine::SendEnd() const {
  const Op& op = queue_.front();
  return uint64_t(op.chunks) + op.window;  // every slot's last round is a data round
}

Nanos WorkerEngine::ResultTimeout() const {
  if (sizer_.min_rtt() == Nanos::max()) return rto_;
  return RoundTripAt(sizer_.max_rate_per_second());
}

uint16_t WorkerEngine::HeadersWorthCopying(uint16_t window) const {
  const double rate = sizer_.max_rate_per_second();  // whole packets per second
  if (rate <= 0 || sizer_.min_rtt() == Nanos::max()) return 0;
  const double rtt_s = double(sizer_.min_rtt().count()) * 1e-9;
  // A header sent once and lost is back at its slot's result about two round
  // trips plus this rank's queue (a window of whole packets) after the
  // operation's start; slot i's data goes about a round trip plus (i -
  // window) packet times after it. Later slots' data goes after their lost
  // header's recovery: a copy would only take link time.
  const double stalling = std::ceil(rtt_s * rate + 2.0 * Window());
  const auto copied = uint16_t(std::min<double>(window, stalling));
  const double header_s = double(kHeaderBytes + kFramingBytes) /
                          double(PacketBytes(config_.elements_per_packet) + kFramingBytes) / rate;
  const double copies_s = 1 / rate + double(copied - 1) * header_s;
  return copies_s < rtt_s ? copied : 0;
}

Nanos WorkerEngine::TailProbeTimeout() const {
  if (send_cursor_ < SendEnd() || sizer_.min_rtt() == Nanos::max()) {
    return Nanos::max();
  }
  return PathTimeout();
}

Nanos WorkerEngine::NextDeadline() const {
  if (broken() || queue_.empty()) return Nanos::max();
  if (!running_) return Nanos(0);
  const Nanos failure = std::max(last_progress_ + config_.failure_timeout, QuietAt());
  return std::min({next_scan_, pace_at_, failure, last_progress_ + config_.operation_timeout});
}

}  // namespace switchml
