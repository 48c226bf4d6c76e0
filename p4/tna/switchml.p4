// switchml aggregation switch for Intel Tofino (P4_16, TNA).
//
// The pipeline of p4/v1model/switchml.p4 within Tofino's constraints: every
// register is touched at most once per pass, by one RegisterAction chosen
// from what earlier stages decided. Headers, constants and parser states are
// shared with the v1model program (p4/common/). With p4c's Tofino backend
// it fits Tofino 2 at 64 or 32 elements per pass and Tofino 1 at 16;
// p4/README.md, "Through the Tofino compiler", has each build's resources
// and where its stages go.
//
// Build (p4c's Tofino backend; tests/p4/tna_compile does the same):
//   p4c-barefoot --target tofino2 --arch t2na --no-clot \
//       -I p4/common -o build/switchml_tna p4/tna/switchml.p4
//   bfas -o build/switchml_tna build/switchml_tna/pipe/switchml.bfa
//
// Larger packets: -DSWITCHML_PASS_BITS=b makes a packet SWITCHML_K * 2^b
// elements, aggregated in 2^b passes through the pipe (recirculation):
//   consume passes g = 0 .. P-1: the parser extracts the K words at the
//     front, the pass aggregates them into register bank g of the slot and
//     drops them, and the rest recirculates. The last pass decides as a
//     one-pass program would (absorb, pending reply, result to all or to the
//     sender); a result holds bank P-1's sums.
//   read-out passes g = P-2 .. 0 (results only): the parser stops after the
//     switchml header; the pass reads bank g and emits it in front of the
//     sums already in the packet, so the result is rebuilt back to front.
// A worker's packet counts in bank g only after banks 0..g-1 (in order, on
// the same packet or an earlier copy), so when the last bank completes every
// bank has: the read-out never sees a partial sum. A recirculation header in
// front of Ethernet carries the pass between passes; ingress accepts it only
// on SWITCHML_RECIRC_PORT.
#include <core.p4>
#if __TARGET_TOFINO__ == 2
#include <t2na.p4>
#else
#include <tna.p4>
#endif

#include "headers.p4"

// The ranks a seen-bitmap holds (a job of at most 32 workers).
#define SWITCHML_FOR_EACH_RANK(M) \
    M(0) M(1) M(2) M(3) M(4) M(5) M(6) M(7) M(8) M(9) M(10) M(11) M(12) M(13) M(14) M(15) \
    M(16) M(17) M(18) M(19) M(20) M(21) M(22) M(23) M(24) M(25) M(26) M(27) M(28) M(29) \
    M(30) M(31)

// Register entries: two versions of every slot, one bank per pass.
#define POOL_ENTRIES (2 * SWITCHML_POOL_SLOTS * SWITCHML_PASSES)
#define LAST_GROUP ((bit<8>)(SWITCHML_PASSES - 1))
// Register indices: POOL_ENTRIES <= 2 * 512 slots * 16 passes.
typedef bit<16> slot_index_t;

// Accumulators two elements to a 64-bit register on Tofino 2, whose stateful
// ALUs return both halves: a stage sums 8 elements (Tofino 1: 4).
#if __TARGET_TOFINO__ >= 2
#define SWITCHML_PAIRED_ACCUMULATORS 1
#else
#define SWITCHML_PAIRED_ACCUMULATORS 0
#endif

// NACKs of a packet its rank's next chunk overtook (p4/README.md, "Limits"):
// Tofino 2 has the stages for them; Tofino 1 uses all 12 without them.
#if __TARGET_TOFINO__ >= 2
#define SWITCHML_TNA_NACKS 1
#else
#define SWITCHML_TNA_NACKS 0
#endif

// The recirculation port of the pipe that serves the workers (Tofino 1
// pipe 0: 68; check the SDE's port map for others). Used only when
// SWITCHML_PASS_BITS > 0.
#ifndef SWITCHML_RECIRC_PORT
#define SWITCHML_RECIRC_PORT 68
#endif
#define RECIRC_CONSUME 8w1
#define RECIRC_READOUT 8w2

// In front of Ethernet while a packet recirculates between passes.
header switchml_recirc_h {
    bit<8>  phase;         // RECIRC_CONSUME or RECIRC_READOUT
    bit<8>  group;         // the register bank this pass handles
    bit<8>  to_all;        // read-out: 1 multicast to result_group, 0 back to the sender
    bit<8>  reserved;
    bit<16> result_group;
    bit<16> sender_port;   // the port the packet first came in on
}

struct tna_headers_t {
    switchml_recirc_h recirc;
    SWITCHML_HEADER_FIELDS
    switchml_nack_h nack;  // a NACK's two bitmaps (emitted, never parsed)
}

// What the slot-state stages decided; selects each register's action.
#define ACC_NONE 2w0
#define ACC_WRITE 2w1   // first contribution: store
#define ACC_ADD 2w2     // later contribution: add, return the sum
#define ACC_READ 2w3    // retransmission or read-out pass: return the sums

// The decode flags are set by tests side by side in the first stage: one
// container each, as two tables cannot write one container in one stage.
@pa_solitary("ingress", "md.bad_parse")
@pa_solitary("ingress", "md.bad_version")
@pa_solitary("ingress", "md.bad_type")
@pa_solitary("ingress", "md.bad_flags")
@pa_solitary("ingress", "md.not_contribution")
@pa_solitary("ingress", "md.exponent_finite")
@pa_solitary("ingress", "md.next_exponent_finite")
struct metadata_t {
    bit<8> drop_reason;
    bit<1> for_switch;            // the aggregation endpoint's address and port
    bit<1> readout;               // a read-out pass: read bank `group` into hdr.data
    bit<1> go;                    // the checks passed: the slot-state stages act
    bit<1> job_known;
    bit<1> sender_ok;
    bit<16> world_size;
    slot_index_t pool_base;
    bit<16> pool_slots;
    bit<16> slot_lo;
    bit<16> slot_hi;
    bit<16> result_group;
    bit<48> switch_mac;
    slot_index_t index;           // register index: the job's base for (version, bank) + slot
    bit<32> rank_bit;
    bit<32> seen_before;          // the slot's bitmap before this packet
    bit<1> rank_seen;             // the rank's bit was set: a retransmission
    bit<32> stale;                // 1: the chunk is older than the slot's
    bit<16> remaining_before;
    bit<2> acc_op;
    bit<32> seen_after;           // the slot's bitmap after a counted packet
    slot_index_t segment_start;   // the job's first slot: register index of the copies
    bit<16> next_slot;            // slot + 1
    bit<16> next_vs_hi;           // 0: the slot is its thread's last
    bit<16> before_slot;          // the slot before among the thread's slots
    bit<32> before_chunk;         // chunk - 1
    slot_index_t copy_index;      // the copies' index of this slot
    slot_index_t copy_next_index; // ... and of the next slot among the thread's
    bit<32> before_seen_0;        // the slot before's bitmap in version 0, 1
    bit<32> before_seen_1;
    bit<32> before_holds_0;       // 1: that version aggregates before_chunk
    bit<32> before_holds_1;
    bit<1> nack;                  // this rank's packet of before_chunk was lost
    bit<8> nack_version;
    bit<8> group;                 // register bank of this pass (0 without recirculation)
    bit<16> sender_port;
    bit<1> bad_parse;             // decode checks, one flag per test
    bit<1> bad_version;
    bit<1> bad_type;
    bit<1> bad_flags;
    bit<1> not_contribution;
    bit<1> exponent_finite;       // exponent != the non-finite marker
    bit<1> next_exponent_finite;
    bit<16> udp_payload;          // UDP length - headers (and tag)
    bit<16> value_bytes;          // element_count * 4
    bit<16> length_error;         // udp_payload - value_bytes: 0 when consistent
    bit<16> exponent_biased;      // exponent + 126
    bit<16> next_exponent_biased;
    bit<16> count_excess;         // sign bit: element_count > SWITCHML_MAX_ELEMENTS
    bit<16> exponent_excess;      // sign bit: exponent + 126 > 254
    bit<16> next_exponent_excess;
    bit<16> rank_vs_world;        // sign bit: rank < world size
    bit<16> slot_vs_pool;         // sign bit: slot < pool slots
    bit<16> slot_vs_lo;           // sign bit: slot < the sender's first slot
    bit<16> slot_vs_hi;           // sign bit: slot < the sender's end slot
}

// One 64-bit register entry: a slot version's chunk id and seen-bitmap.
struct chunk_seen_t {
    bit<32> chunk;
    bit<32> seen;
}

// One 64-bit accumulator entry: two elements' sums.
struct element_pair_t {
    bit<32> lo;
    bit<32> hi;
}

// ----------------------------------------------------------------------------
// Ingress

#define METADATA_INIT {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, \
                       ACC_NONE, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, \
                       0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, \
                       0, 0, 0}

parser SwitchmlIngressParser(packet_in pkt, out tna_headers_t hdr, out metadata_t md,
                             out ingress_intrinsic_metadata_t ig_intr_md) {
    state start {
        pkt.extract(ig_intr_md);
        pkt.advance(PORT_METADATA_SIZE);
        md = METADATA_INIT;
#if SWITCHML_PASS_BITS > 0
        transition select(ig_intr_md.ingress_port) {
            SWITCHML_RECIRC_PORT: parse_recirc;
            default: parse_ethernet;
        }
#else
        transition parse_ethernet;
#endif
    }
    state parse_recirc {
        pkt.extract(hdr.recirc);
        md.group = hdr.recirc.group;
        md.result_group = hdr.recirc.result_group;
        transition select(hdr.recirc.phase) {
            RECIRC_READOUT: parse_readout;
            default: parse_ethernet;
        }
    }
    // The sums already rebuilt stay payload, behind the bank this pass adds.
    state parse_readout {
        md.readout = 1;
        pkt.extract(hdr.ethernet);
        pkt.extract(hdr.ipv4);
        pkt.extract(hdr.udp);
        pkt.extract(hdr.switchml);
        transition accept;
    }
#include "parser_states.p4"
}

// The slot pool: what the packet does to its slot, once the checks passed.
// Each register is touched by one RegisterAction per pass, chosen by what
// the stages before decided: the chunk id and seen-bitmap (retransmission,
// staleness, a new aggregation), the missing contributions, the exponent
// maximum, then the accumulators. A new chunk resets the bitmap instead of
// clearing the sender's bit in the other version; for workers that follow
// the protocol the two are the same (p4/README.md, "TNA differences").
control SwitchmlSlots(inout tna_headers_t hdr, inout metadata_t md) {
#if __TARGET_TOFINO__ >= 2
    // Tofino 2: one access to a 64-bit entry (chunk id, bitmap) returns the
    // old bitmap and the staleness on two outputs.
    Register<chunk_seen_t, slot_index_t>(POOL_ENTRIES) slot_chunk_seen;
    RegisterAction<chunk_seen_t, slot_index_t, bit<32>>(slot_chunk_seen) contribute = {
        void apply(inout chunk_seen_t value, out bit<32> seen_before, out bit<32> stale) {
            if (value.chunk == hdr.switchml.chunk) {
                seen_before = value.seen;
                value.seen = value.seen | md.rank_bit;
            } else if ((int<32>)(hdr.switchml.chunk - value.chunk) > 0) {
                value.chunk = hdr.switchml.chunk;  // a newer chunk starts a new aggregation
                value.seen = md.rank_bit;
            } else {
                stale = 1;
            }
        }
    };
#else
    // Tofino 1 returns one value per access: the chunk id's register says
    // which case holds (one-hot: 1 stale, 2 same chunk, 4 newer chunk), and
    // the next stage's bitmap register acts on it.
    Register<bit<32>, slot_index_t>(POOL_ENTRIES) slot_chunk;
    RegisterAction<bit<32>, slot_index_t, bit<32>>(slot_chunk) classify_chunk = {
        void apply(inout bit<32> value, out bit<32> which) {
            which = this.predicate(value == hdr.switchml.chunk,
                                   (int<32>)(hdr.switchml.chunk - value) > 0);
            if ((int<32>)(hdr.switchml.chunk - value) > 0) {
                value = hdr.switchml.chunk;
            }
        }
    };
    Register<bit<32>, slot_index_t>(POOL_ENTRIES) slot_seen;
    RegisterAction<bit<32>, slot_index_t, bit<32>>(slot_seen) seen_add = {
        void apply(inout bit<32> value, out bit<32> seen_before) {
            seen_before = value;
            value = value | md.rank_bit;
        }
    };
    RegisterAction<bit<32>, slot_index_t, bit<32>>(slot_seen) seen_start = {
        void apply(inout bit<32> value) {
            value = md.rank_bit;
        }
    };
#endif

    // What the packet does to its slot, from the slot state alone: a read-out
    // pass or a retransmission (the rank's bit was set) reads, a stale chunk
    // is dropped, the first contribution stores and the others add. A
    // ternary table tests the rank's bit (one entry per rank: Tofino shifts
    // and masks only by constants), so that the counter, the exponent and
    // the accumulators all act one stage later, side by side.
    action first() {
        md.acc_op = ACC_WRITE;
        md.seen_after = md.rank_bit;
    }
    action later() {
        md.acc_op = ACC_ADD;
        md.seen_after = md.seen_before | md.rank_bit;
    }
    action retransmission() {
        md.acc_op = ACC_READ;
        md.rank_seen = 1;
        hdr.data.setValid();
    }
    action read_bank() {
        md.acc_op = ACC_READ;
        hdr.data.setValid();
    }
    action stale_chunk() {
        md.drop_reason = DROP_STALE_CHUNK;
    }
#define RANK_SEEN_ENTRY(r) (0, 0, r, 32w1 << r &&& 32w1 << r): retransmission();
    table slot_case {
        key = {
            md.readout: ternary;
            md.stale[0:0]: ternary @name("stale");
            hdr.switchml.rank[4:0]: ternary @name("rank");
            md.seen_before: ternary;
        }
        actions = { first; later; retransmission; read_bank; stale_chunk; NoAction; }
        // Columns: readout, stale, rank, the slot's bitmap before.
        const entries = {
            (1, _, _, _): read_bank();
            (0, 1, _, _): stale_chunk();
            SWITCHML_FOR_EACH_RANK(RANK_SEEN_ENTRY)
            (0, 0, _, 0): first();
            (0, 0, _, _): later();
        }
        const default_action = NoAction();
        size = 40;
    }
#undef RANK_SEEN_ENTRY

    // Contributions still missing; 0 = idle or complete.
    Register<bit<16>, slot_index_t>(POOL_ENTRIES) slot_remaining;
    RegisterAction<bit<16>, slot_index_t, bit<16>>(slot_remaining) count = {
        void apply(inout bit<16> value, out bit<16> before) {
            before = value;
            if (value == 0) {
                value = md.world_size - 1;
            } else {
                value = value - 1;
            }
        }
    };
    RegisterAction<bit<16>, slot_index_t, bit<16>>(slot_remaining) peek = {
        void apply(inout bit<16> value, out bit<16> before) {
            before = value;
        }
    };

    Register<bit<16>, slot_index_t>(POOL_ENTRIES) slot_max_next_exponent;
    RegisterAction<bit<16>, slot_index_t, bit<16>>(slot_max_next_exponent) exponent_first = {
        void apply(inout bit<16> value, out bit<16> result) {
            value = hdr.switchml.next_exponent;
            result = value;
        }
    };
    RegisterAction<bit<16>, slot_index_t, bit<16>>(slot_max_next_exponent) exponent_max = {
        void apply(inout bit<16> value, out bit<16> result) {
            if ((int<16>)hdr.switchml.next_exponent > (int<16>)value) {
                value = hdr.switchml.next_exponent;
            }
            result = value;
        }
    };
    RegisterAction<bit<16>, slot_index_t, bit<16>>(slot_max_next_exponent) exponent_read = {
        void apply(inout bit<16> value, out bit<16> result) {
            result = value;
        }
    };

#define ACC_TABLE_OF(i)                                                            \
    table accumulate_##i {                                                         \
        key = { md.acc_op: exact; }                                                \
        actions = { write_##i; add_##i; read_##i; NoAction; }                      \
        const entries = {                                                          \
            ACC_WRITE: write_##i();                                                \
            ACC_ADD: add_##i();                                                    \
            ACC_READ: read_##i();                                                  \
        }                                                                          \
        const default_action = NoAction();                                         \
        size = 4;                                                                  \
    }
#define ACC_APPLY_TABLE(i) accumulate_##i.apply();
#if SWITCHML_TNA_NACKS
    // NACKs: a counted packet of chunk c whose rank's packet of c - 1 was lost
    // (the slot before, among its thread's slots, still aggregates c - 1
    // without the rank) turns into a NACK of that packet, as the v1model
    // program's does. The slot before's state is another register entry, so
    // each counted packet leaves a copy of its slot's (chunk, bitmap) for the
    // next slot's packets: one in an even slot writes copies_a (of its
    // version) at the next slot and reads copies_b (both versions) at its
    // own; one in an odd slot the other way round. Each array is touched once
    // per packet; a thread's slots must start at an even slot and be even in
    // number, so that its last slot (odd) hands over to its first (even).
#define COPIES(name)                                                               \
    Register<chunk_seen_t, slot_index_t>(SWITCHML_POOL_SLOTS) name;                \
    RegisterAction<chunk_seen_t, slot_index_t, bit<32>>(name) leave_##name = {     \
        void apply(inout chunk_seen_t value) {                                     \
            value.chunk = hdr.switchml.chunk;                                      \
            value.seen = md.seen_after;                                            \
        }                                                                          \
    };                                                                             \
    RegisterAction<chunk_seen_t, slot_index_t, bit<32>>(name) before_##name = {    \
        void apply(inout chunk_seen_t value, out bit<32> seen, out bit<32> holds) { \
            if (hdr.switchml.chunk - value.chunk == 1 && value.seen != 0) {        \
                seen = value.seen;                                                 \
                holds = 1;                                                         \
            }                                                                      \
        }                                                                          \
    };
    COPIES(copies_a0)
    COPIES(copies_a1)
    COPIES(copies_b0)
    COPIES(copies_b1)
#undef COPIES

    action nack_lost(bit<8> version) {
        md.nack = 1;
        md.nack_version = version;
    }
    // The slot before aggregates the chunk before in either version, and
    // the rank's bit is clear in its bitmap.
#define NACK_ENTRIES(r)                                                            \
    (r, 1, 32w0 &&& 32w1 << r, _, _): nack_lost(0);                                \
    (r, _, _, 1, 32w0 &&& 32w1 << r): nack_lost(1);
    table nack_case {
        key = {
            hdr.switchml.rank[4:0]: ternary @name("rank");
            md.before_holds_0[0:0]: ternary @name("holds_0");
            md.before_seen_0: ternary;
            md.before_holds_1[0:0]: ternary @name("holds_1");
            md.before_seen_1: ternary;
        }
        actions = { nack_lost; NoAction; }
        const entries = {
            SWITCHML_FOR_EACH_RANK(NACK_ENTRIES)
        }
        const default_action = NoAction();
        size = 64;
    }
#undef NACK_ENTRIES
#endif

    // The accumulators: three RegisterActions each (store, add, read), chosen
    // by acc_op, so that a stateful ALU's input is the packet's values alone.
#if SWITCHML_PAIRED_ACCUMULATORS
    // Two elements per 64-bit entry: a Tofino 2 stateful ALU returns both
    // halves, so a stage's four ALUs sum 8 elements.
#define ACC(a, b)                                                                  \
    Register<element_pair_t, slot_index_t>(POOL_ENTRIES) acc_##a;                  \
    RegisterAction<element_pair_t, slot_index_t, bit<32>>(acc_##a) acc_write_##a = { \
        void apply(inout element_pair_t value, out bit<32> sum_a, out bit<32> sum_b) { \
            value.lo = hdr.data.d##a;                                              \
            value.hi = hdr.data.d##b;                                              \
            sum_a = value.lo;                                                      \
            sum_b = value.hi;                                                      \
        }                                                                          \
    };                                                                             \
    RegisterAction<element_pair_t, slot_index_t, bit<32>>(acc_##a) acc_add_##a = { \
        void apply(inout element_pair_t value, out bit<32> sum_a, out bit<32> sum_b) { \
            value.lo = value.lo + hdr.data.d##a;                                   \
            value.hi = value.hi + hdr.data.d##b;                                   \
            sum_a = value.lo;                                                      \
            sum_b = value.hi;                                                      \
        }                                                                          \
    };                                                                             \
    RegisterAction<element_pair_t, slot_index_t, bit<32>>(acc_##a) acc_read_##a = { \
        void apply(inout element_pair_t value, out bit<32> sum_a, out bit<32> sum_b) { \
            sum_a = value.lo;                                                      \
            sum_b = value.hi;                                                      \
        }                                                                          \
    };
    SWITCHML_FOR_EACH_PAIR(ACC)
#undef ACC
// One table per register: its action, chosen by acc_op, executes one of the
// register's three RegisterActions.
#define ACC_TABLE(a, b)                                                            \
    action write_##a() { hdr.data.d##a = acc_write_##a.execute(md.index, hdr.data.d##b); } \
    action add_##a() { hdr.data.d##a = acc_add_##a.execute(md.index, hdr.data.d##b); } \
    action read_##a() { hdr.data.d##a = acc_read_##a.execute(md.index, hdr.data.d##b); } \
    ACC_TABLE_OF(a)
    SWITCHML_FOR_EACH_PAIR(ACC_TABLE)
#define ACC_APPLY(a, b) ACC_APPLY_TABLE(a)
#define ACC_FOR_EACH SWITCHML_FOR_EACH_PAIR
#else
    // One element per register (Tofino 1 returns one word per access).
#define ACC(i)                                                                     \
    Register<bit<32>, slot_index_t>(POOL_ENTRIES) acc_##i;                         \
    RegisterAction<bit<32>, slot_index_t, bit<32>>(acc_##i) acc_write_##i = {      \
        void apply(inout bit<32> value, out bit<32> sum) {                         \
            value = hdr.data.d##i;                                                 \
            sum = value;                                                           \
        }                                                                          \
    };                                                                             \
    RegisterAction<bit<32>, slot_index_t, bit<32>>(acc_##i) acc_add_##i = {        \
        void apply(inout bit<32> value, out bit<32> sum) {                         \
            value = value + hdr.data.d##i;                                         \
            sum = value;                                                           \
        }                                                                          \
    };                                                                             \
    RegisterAction<bit<32>, slot_index_t, bit<32>>(acc_##i) acc_read_##i = {       \
        void apply(inout bit<32> value, out bit<32> sum) {                         \
            sum = value;                                                           \
        }                                                                          \
    };
    SWITCHML_FOR_EACH_ELEMENT(ACC)
#undef ACC
#define ACC_TABLE(i)                                                               \
    action write_##i() { hdr.data.d##i = acc_write_##i.execute(md.index); }        \
    action add_##i() { hdr.data.d##i = acc_add_##i.execute(md.index); }            \
    action read_##i() { hdr.data.d##i = acc_read_##i.execute(md.index); }          \
    ACC_TABLE_OF(i)
    SWITCHML_FOR_EACH_ELEMENT(ACC_TABLE)
#define ACC_APPLY(i) ACC_APPLY_TABLE(i)
#define ACC_FOR_EACH SWITCHML_FOR_EACH_ELEMENT
#endif
#undef ACC_TABLE
#undef ACC_TABLE_OF

    apply {
        if (md.readout == 0) {
#if __TARGET_TOFINO__ >= 2
            md.seen_before = contribute.execute(md.index, md.stale);
#else
            bit<32> which = classify_chunk.execute(md.index);
            if (which == 1) {
                md.stale = 1;
            } else if (which == 2) {
                md.seen_before = seen_add.execute(md.index);
            } else {
                seen_start.execute(md.index);
            }
#endif
        }
        slot_case.apply();
        // The counter and the exponent (a read-out pass touches neither).
        if (md.readout == 0) {
            if (md.acc_op == ACC_READ) {
                md.remaining_before = peek.execute(md.index);
                hdr.switchml.next_exponent = exponent_read.execute(md.index);
            } else if (md.acc_op == ACC_WRITE) {
                md.remaining_before = count.execute(md.index);
                hdr.switchml.next_exponent = exponent_first.execute(md.index);
            } else if (md.acc_op == ACC_ADD) {
                md.remaining_before = count.execute(md.index);
                hdr.switchml.next_exponent = exponent_max.execute(md.index);
            }
        }
        ACC_FOR_EACH(ACC_APPLY)
#if SWITCHML_TNA_NACKS
        // A counted packet, on its last pass: leave its slot's state for the
        // next slot, read the slot before's.
        if (md.readout == 0 && md.group == LAST_GROUP &&
            (md.acc_op == ACC_WRITE || md.acc_op == ACC_ADD)) {
            if (hdr.switchml.slot[0:0] == 0) {
                md.before_seen_0 = before_copies_b0.execute(md.copy_index, md.before_holds_0);
                md.before_seen_1 = before_copies_b1.execute(md.copy_index, md.before_holds_1);
                if (hdr.switchml.flags[0:0] == 0) {
                    leave_copies_a0.execute(md.copy_next_index);
                } else {
                    leave_copies_a1.execute(md.copy_next_index);
                }
            } else {
                md.before_seen_0 = before_copies_a0.execute(md.copy_index, md.before_holds_0);
                md.before_seen_1 = before_copies_a1.execute(md.copy_index, md.before_holds_1);
                if (hdr.switchml.flags[0:0] == 0) {
                    leave_copies_b0.execute(md.copy_next_index);
                } else {
                    leave_copies_b1.execute(md.copy_next_index);
                }
            }
            nack_case.apply();
        }
#endif
#undef ACC_APPLY
#undef ACC_APPLY_TABLE
#undef ACC_FOR_EACH
    }
}

control SwitchmlIngress(inout tna_headers_t hdr, inout metadata_t md,
                        in ingress_intrinsic_metadata_t ig_intr_md,
                        in ingress_intrinsic_metadata_from_parser_t ig_prsr_md,
                        inout ingress_intrinsic_metadata_for_deparser_t ig_dprsr_md,
                        inout ingress_intrinsic_metadata_for_tm_t ig_tm_md) {
    Counter<bit<64>, bit<32>>(SWITCHML_NUM_DROP_REASONS, CounterType_t.PACKETS) switchml_drops;
    // One access per counter per pass: packets are counted apart, and each
    // packet counts one event (contributions = CONTRIBUTIONS + SLOTS_COMPLETED).
    Counter<bit<64>, bit<32>>(1, CounterType_t.PACKETS) switchml_packets;
    Counter<bit<64>, bit<32>>(SWITCHML_NUM_EVENTS, CounterType_t.PACKETS) switchml_events;
#if SWITCHML_TNA_NACKS
    // NACKs sent (the software switch's nacks_sent event): a NACK is also a
    // contribution's event, so it has a counter of its own.
    Counter<bit<64>, bit<32>>(1, CounterType_t.PACKETS) switchml_nacks_sent;
#endif
    SwitchmlSlots() slots;

    action drop() {
        ig_dprsr_md.drop_ctl = 1;
    }

    action set_endpoint(bit<48> switch_mac) {
        md.for_switch = 1;
        md.switch_mac = switch_mac;
    }
    table switchml_endpoint {
        key = { hdr.ipv4.dst_addr: exact; }
        actions = { set_endpoint; NoAction; }
        default_action = NoAction();
        size = 16;
    }

    action set_job(bit<16> world_size, slot_index_t pool_base, bit<16> pool_slots,
                   slot_index_t segment_start) {
        md.job_known = 1;
        md.segment_start = segment_start;
        md.world_size = world_size;
        md.pool_base = pool_base;
        md.pool_slots = pool_slots;
    }
    // One entry per (job, slot version, register bank): pool_base is the
    // register index of that version's and bank's first slot of the job's
    // pool segment, so that a slot's index takes one addition.
    table switchml_jobs {
        key = {
            hdr.switchml.job: exact;
            hdr.switchml.flags[0:0]: exact @name("version");
#if SWITCHML_PASS_BITS > 0
            md.group: exact @name("bank");
#endif
        }
        actions = { set_job; NoAction; }
        default_action = NoAction();
        size = SWITCHML_MAX_JOBS;
    }

    action set_sender(bit<16> slot_lo, bit<16> slot_hi, bit<16> result_group) {
        md.sender_ok = 1;
        md.slot_lo = slot_lo;
        md.slot_hi = slot_hi;
        md.result_group = result_group;
    }
    table switchml_senders {
        key = {
            hdr.switchml.job: exact;
            hdr.switchml.rank: exact;
            hdr.ipv4.src_addr: exact;
            hdr.udp.src_port: exact;
        }
        actions = { set_sender; NoAction; }
        default_action = NoAction();
        size = SWITCHML_MAX_SENDERS;
    }

    // rank -> its bit in the seen-bitmap (a table: Tofino shifts only by
    // constants). Filled once by the control plane with ranks 0..31.
    action set_rank_bit(bit<32> rank_bit) {
        md.rank_bit = rank_bit;
    }
    table rank_bits {
        key = { hdr.switchml.rank: exact; }
        actions = { set_rank_bit; NoAction; }
        default_action = NoAction();
        size = 32;
    }

    action l2_forward(PortId_t port) {
        ig_tm_md.ucast_egress_port = port;
    }
    action flood() {
        ig_tm_md.mcast_grp_a = 1;
        // The control plane maps each port to an exclusion id of its own.
        ig_tm_md.level2_exclusion_id = (bit<9>)ig_intr_md.ingress_port;
    }
    table l2_hosts {
        key = { hdr.ethernet.dst_addr: exact; }
        actions = { l2_forward; flood; drop; }
        default_action = flood();
        size = 1024;
    }
    table router_macs {
        key = { hdr.ethernet.dst_addr: exact; }
        actions = { NoAction; }
        size = 16;
    }
    action route(PortId_t port, bit<48> next_hop_mac) {
        ig_tm_md.ucast_egress_port = port;
        hdr.ethernet.src_addr = hdr.ethernet.dst_addr;
        hdr.ethernet.dst_addr = next_hop_mac;
        hdr.ipv4.ttl = hdr.ipv4.ttl - 1;
    }
    table ipv4_routes {
        key = { hdr.ipv4.dst_addr: lpm; }
        actions = { route; drop; }
        default_action = drop();
        size = 1024;
    }
    action answer_arp(bit<48> mac) {
        bit<32> asked = hdr.arp.target_ip;
        hdr.arp.opcode = 2;
        hdr.arp.target_hw = hdr.arp.sender_hw;
        hdr.arp.target_ip = hdr.arp.sender_ip;
        hdr.arp.sender_hw = mac;
        hdr.arp.sender_ip = asked;
        hdr.ethernet.dst_addr = hdr.ethernet.src_addr;
        hdr.ethernet.src_addr = mac;
        ig_tm_md.ucast_egress_port = ig_intr_md.ingress_port;
    }
    table arp_responder {
        key = { hdr.arp.target_ip: exact; }
        actions = { answer_arp; NoAction; }
        default_action = NoAction();
        size = 16;
    }

    // Replies come from the endpoint (egress sets multicast destinations per
    // replica).
    action answer_from_endpoint() {
        bit<32> endpoint_ip = hdr.ipv4.dst_addr;
        bit<16> endpoint_port = hdr.udp.dst_port;
        hdr.ipv4.dst_addr = hdr.ipv4.src_addr;
        hdr.ipv4.src_addr = endpoint_ip;
        hdr.udp.dst_port = hdr.udp.src_port;
        hdr.udp.src_port = endpoint_port;
        hdr.udp.checksum = 0;
        hdr.ipv4.ttl = 64;
        hdr.ethernet.dst_addr = hdr.ethernet.src_addr;
        hdr.ethernet.src_addr = md.switch_mac;
        hdr.recirc.setInvalid();
    }
    // A header-only report back to the sender (a pending reply or a NACK):
    // `words` bitmap words replace the values.
    action report_to_sender(bit<8> msg_type, bit<16> words, bit<16> udp_length,
                            bit<16> ip_length) {
        hdr.switchml.msg_type = msg_type;
        hdr.switchml.element_count = words;
        hdr.switchml.exponent = 0;
        hdr.switchml.next_exponent = 0;
        hdr.data.setInvalid();
        hdr.udp.length = udp_length;
        hdr.ipv4.total_len = ip_length;
        ig_tm_md.ucast_egress_port = (PortId_t)md.sender_port;
        answer_from_endpoint();
    }
    // The next pass of a multi-pass packet: through the recirculation port.
    action recirculate(bit<8> phase, bit<8> group, bit<8> to_all) {
        hdr.recirc.setValid();
        hdr.recirc.phase = phase;
        hdr.recirc.group = group;
        hdr.recirc.to_all = to_all;
        hdr.recirc.reserved = 0;
        hdr.recirc.result_group = md.result_group;
        hdr.recirc.sender_port = md.sender_port;
        ig_tm_md.ucast_egress_port = SWITCHML_RECIRC_PORT;
    }
    // A result leaves: to every worker (the group's replicas) or to the sender.
    // (Tofino actions branch on nothing but action data: one action each.)
    action send_result_to_all() {
        hdr.switchml.msg_type = SWITCHML_TYPE_RESULT;
        hdr.switchml.rank = SWITCHML_ALL_RANKS;
        ig_tm_md.mcast_grp_a = md.result_group;
        answer_from_endpoint();
    }
    action send_result_to_sender() {
        hdr.switchml.msg_type = SWITCHML_TYPE_RESULT;
        ig_tm_md.ucast_egress_port = (PortId_t)md.sender_port;
        answer_from_endpoint();
    }

    // The arithmetic the checks compare, in tables of one action each: a
    // Tofino action does one operation per field, a gateway only compares,
    // and a table keeps the midend from folding a result back into the
    // comparison (or into a register's address, which a stateful ALU takes
    // from a field or a hash, not from a sum).
    // minus_header_bytes: the UDP, switchml (and tag) header bytes, negated
    // (a subtraction takes its second operand from the packet or metadata).
    action header_sums(bit<16> minus_header_bytes) {
        md.udp_payload = hdr.udp.length + minus_header_bytes;
        md.value_bytes = hdr.switchml.element_count << 2;
        md.count_excess = SWITCHML_MAX_ELEMENTS - hdr.switchml.element_count;
        md.exponent_biased = hdr.switchml.exponent + 126;
        md.next_exponent_biased = hdr.switchml.next_exponent + 126;
#if SWITCHML_TNA_NACKS
        md.next_slot = hdr.switchml.slot + 1;
        md.before_chunk = hdr.switchml.chunk + 0xFFFFFFFF;
#endif
    }
    table header_arithmetic {
        key = { hdr.switchml.flags[1:1]: exact @name("authenticated"); }
        actions = { header_sums; }
        const entries = {
            0: header_sums(16w0 - (8 + SWITCHML_HEADER_BYTES));
            1: header_sums(16w0 - (8 + SWITCHML_HEADER_BYTES + SWITCHML_AUTH_TAG_BYTES));
        }
        size = 2;
    }
    // Differences whose sign bit (15) is a range test, exact where both
    // values are below 2^15: the checks test the operands' top bits too.
    action job_differences() {
        md.length_error = md.udp_payload - md.value_bytes;
        md.exponent_excess = 254 - md.exponent_biased;
        md.next_exponent_excess = 254 - md.next_exponent_biased;
        md.rank_vs_world = hdr.switchml.rank - md.world_size;
        md.slot_vs_pool = hdr.switchml.slot - md.pool_slots;
        md.slot_vs_lo = hdr.switchml.slot - md.slot_lo;
        md.slot_vs_hi = hdr.switchml.slot - md.slot_hi;
        md.index = md.pool_base + (slot_index_t)hdr.switchml.slot;
#if SWITCHML_TNA_NACKS
        md.next_vs_hi = md.next_slot - md.slot_hi;
        md.copy_index = md.segment_start + (slot_index_t)hdr.switchml.slot;
#endif
    }
#if SWITCHML_TNA_NACKS
    // The slot after and the slot before among the sender's thread's slots
    // (wrapping), for the NACKs' copies.
    action next_is_first() {
        md.copy_next_index = md.segment_start + (slot_index_t)md.slot_lo;
    }
    action next_follows() {
        md.copy_next_index = md.copy_index + 1;
    }
    action before_is_last() {
        md.before_slot = md.slot_hi + 0xFFFF;
    }
    action before_precedes() {
        md.before_slot = hdr.switchml.slot + 0xFFFF;
    }
#endif
    table job_arithmetic {
        actions = { job_differences; }
        const default_action = job_differences();
        size = 1;
    }

    // Every check of docs/wire-format.md in one lookup: the first entry that
    // matches names the drop reason, in the software data plane's order; a
    // packet that matches none is well formed (the default: the slot stages
    // act). An entry is one TCAM row, so the checks cost one stage.
    action reject(bit<8> reason) {
        md.drop_reason = reason;
    }
    action accept() {
        md.go = 1;
    }
    // A difference's sign bit: 1 when the first operand is smaller.
    table switchml_checks {
        key = {
            md.readout: ternary @name("readout");
            md.bad_parse: ternary;
            md.bad_version: ternary;
            md.bad_type: ternary;
            md.bad_flags: ternary;
            hdr.switchml.element_count[15:15]: ternary @name("count_top_bit");
            md.count_excess[15:15]: ternary @name("count_excess_sign");
            md.length_error: ternary;
            md.job_known: ternary;
            hdr.switchml.rank[15:15]: ternary @name("rank_top_bit");
            md.rank_vs_world[15:15]: ternary @name("rank_vs_world_sign");
            hdr.switchml.slot[15:15]: ternary @name("slot_top_bit");
            md.slot_vs_pool[15:15]: ternary @name("slot_vs_pool_sign");
            md.sender_ok: ternary;
            md.slot_vs_lo[15:15]: ternary @name("slot_vs_lo_sign");
            md.slot_vs_hi[15:15]: ternary @name("slot_vs_hi_sign");
            hdr.switchml.flags[1:1]: ternary @name("authenticated");
            md.not_contribution: ternary;
            hdr.data.isValid(): ternary;
            md.exponent_biased[15:15]: ternary @name("exponent_top_bit");
            md.exponent_excess[15:15]: ternary @name("exponent_excess_sign");
            md.exponent_finite: ternary;
            md.next_exponent_biased[15:15]: ternary @name("next_exponent_top_bit");
            md.next_exponent_excess[15:15]: ternary @name("next_exponent_excess_sign");
            md.next_exponent_finite: ternary;
        }
        actions = { reject; accept; }
        // The first matching entry wins.
        // Columns: readout, parse, version, type, flags, count_top, count, length, job,
        // rank_top, rank, slot_top, slot, sender, lo, hi, auth, notc, data, exp_top,
        // exp, exp_fin, nexp_top, nexp, nexp_fin; _ = any.
        const entries = {
            // A read-out pass: only the job may have ended meanwhile.
            (1, _, _, _, _, _, _, _, 0, _, _, _, _, _, _, _, _, _, _, _, _, _, _, _, _): reject(DROP_UNKNOWN_JOB);
            (1, _, _, _, _, _, _, _, _, _, _, _, _, _, _, _, _, _, _, _, _, _, _, _, _): accept();
            // Decode checks: malformed (and, by the default action, a length
            // that does not match the element count).
            (0, 1, _, _, _, _, _, _, _, _, _, _, _, _, _, _, _, _, _, _, _, _, _, _, _): reject(DROP_MALFORMED);
            (0, _, 1, _, _, _, _, _, _, _, _, _, _, _, _, _, _, _, _, _, _, _, _, _, _): reject(DROP_MALFORMED);
            (0, _, _, 1, _, _, _, _, _, _, _, _, _, _, _, _, _, _, _, _, _, _, _, _, _): reject(DROP_MALFORMED);
            (0, _, _, _, 1, _, _, _, _, _, _, _, _, _, _, _, _, _, _, _, _, _, _, _, _): reject(DROP_MALFORMED);
            (0, _, _, _, _, 1, _, _, _, _, _, _, _, _, _, _, _, _, _, _, _, _, _, _, _): reject(DROP_MALFORMED);
            (0, _, _, _, _, _, 1, _, _, _, _, _, _, _, _, _, _, _, _, _, _, _, _, _, _): reject(DROP_MALFORMED);
            // The source check (transport): a registered worker's socket and slot range.
            (0, _, _, _, _, _, _, 0, 1, 0, 1, 0, 1, 0, _, _, _, _, _, _, _, _, _, _, _): reject(DROP_SOURCE_MISMATCH);
            (0, _, _, _, _, _, _, 0, 1, 0, 1, 0, 1, _, 1, _, _, _, _, _, _, _, _, _, _): reject(DROP_SOURCE_MISMATCH);
            (0, _, _, _, _, _, _, 0, 1, 0, 1, 0, 1, _, _, 0, _, _, _, _, _, _, _, _, _): reject(DROP_SOURCE_MISMATCH);
            (0, _, _, _, _, _, _, 0, 1, 0, 1, 0, 1, _, _, _, 1, _, _, _, _, _, _, _, _): reject(DROP_BAD_MAC);
            // The data plane's checks, in its order.
            (0, _, _, _, _, _, _, 0, _, _, _, _, _, _, _, _, _, 1, _, _, _, _, _, _, _): reject(DROP_NOT_CONTRIBUTION);
            (0, _, _, _, _, _, _, 0, 0, _, _, _, _, _, _, _, _, _, _, _, _, _, _, _, _): reject(DROP_UNKNOWN_JOB);
            (0, _, _, _, _, _, _, 0, _, 1, _, _, _, _, _, _, _, _, _, _, _, _, _, _, _): reject(DROP_RANK_OUT_OF_RANGE);
            (0, _, _, _, _, _, _, 0, _, _, 0, _, _, _, _, _, _, _, _, _, _, _, _, _, _): reject(DROP_RANK_OUT_OF_RANGE);
            (0, _, _, _, _, _, _, 0, _, _, _, 1, _, _, _, _, _, _, _, _, _, _, _, _, _): reject(DROP_SLOT_OUT_OF_RANGE);
            (0, _, _, _, _, _, _, 0, _, _, _, _, 0, _, _, _, _, _, _, _, _, _, _, _, _): reject(DROP_SLOT_OUT_OF_RANGE);
            (0, _, _, _, _, _, _, 0, _, _, _, _, _, _, _, _, _, _, false, _, _, _, _, _, _): reject(DROP_ELEMENT_COUNT);
            (0, _, _, _, _, _, _, 0, _, _, _, _, _, _, _, _, _, _, _, 1, _, 1, _, _, _): reject(DROP_BAD_EXPONENT);
            (0, _, _, _, _, _, _, 0, _, _, _, _, _, _, _, _, _, _, _, _, 1, 1, _, _, _): reject(DROP_BAD_EXPONENT);
            (0, _, _, _, _, _, _, 0, _, _, _, _, _, _, _, _, _, _, _, _, _, _, 1, _, 1): reject(DROP_BAD_EXPONENT);
            (0, _, _, _, _, _, _, 0, _, _, _, _, _, _, _, _, _, _, _, _, _, _, _, 1, 1): reject(DROP_BAD_EXPONENT);
            (0, _, _, _, _, _, _, 0, _, _, _, _, _, _, _, _, _, _, _, _, _, _, _, _, _): accept();
        }
        const default_action = reject(DROP_MALFORMED);
        size = 32;
    }

    apply {
        // What the packet and the tables say: lookups and tests that depend
        // on nothing else, so that they share the first stage. (They only
        // set metadata: for a packet not to the endpoint, nothing reads it.)
        // The parser set the pass's bank and read-out flag.
        if (hdr.recirc.isValid()) {
            md.sender_port = hdr.recirc.sender_port;
        } else {
            md.sender_port = (bit<16>)ig_intr_md.ingress_port;
        }
        if (hdr.switchml.isValid()) {
            switchml_jobs.apply();
            switchml_senders.apply();
            rank_bits.apply();
            header_arithmetic.apply();
        }
        // The decode checks, one flag each: a gateway reads at most 4 bytes
        // and 12 bits, and flags of their own keep the tests independent.
        if (ig_prsr_md.parser_err != 0 || !hdr.switchml.isValid()) {
            md.bad_parse = 1;
        }
        if (hdr.switchml.magic != SWITCHML_MAGIC ||
            hdr.switchml.wire_version != SWITCHML_WIRE_VERSION) {
            md.bad_version = 1;
        }
        if (hdr.switchml.msg_type == 0 || hdr.switchml.msg_type > SWITCHML_TYPE_PROBE) {
            md.bad_type = 1;
        }
        if ((hdr.switchml.flags & SWITCHML_FLAGS_RESERVED) != 0 || hdr.switchml.reserved != 0) {
            md.bad_flags = 1;
        }
        if (hdr.switchml.msg_type != SWITCHML_TYPE_CONTRIBUTION) {
            md.not_contribution = 1;
        }
        if (hdr.switchml.exponent != SWITCHML_EXPONENT_NONFINITE) {
            md.exponent_finite = 1;
        }
        if (hdr.switchml.next_exponent != SWITCHML_EXPONENT_NONFINITE) {
            md.next_exponent_finite = 1;
        }
        if (hdr.udp.isValid() && (hdr.udp.dst_port & SWITCHML_UDP_PORT_MASK) ==
                                     SWITCHML_UDP_PORT_BASE) {
            switchml_endpoint.apply();
        }
        if (md.for_switch == 0) {
            // Tofino 2's compiler takes `t.apply().hit` in no larger condition.
            if (hdr.arp.isValid() && hdr.arp.opcode == 1) {
                if (arp_responder.apply().hit) {
                    return;
                }
            }
            if (hdr.ipv4.isValid()) {
                if (router_macs.apply().hit) {
                    if (hdr.ipv4.ttl <= 1) {
                        drop();
                    } else {
                        ipv4_routes.apply();
                    }
                    return;
                }
            }
            l2_hosts.apply();
            return;
        }

        job_arithmetic.apply();
#if SWITCHML_TNA_NACKS
        if (md.next_vs_hi == 0) {
            next_is_first();
        } else {
            next_follows();
        }
        if (md.slot_vs_lo == 0) {
            before_is_last();
        } else {
            before_precedes();
        }
#endif
        switchml_checks.apply();
        // Later consume passes see the same headers (only payload words were
        // dropped) and repeat the checks; the packet counts once.
        if (md.readout == 0 && md.group == 0) {
            switchml_packets.count(0);
        }
        if (md.go == 1) {
            slots.apply(hdr, md);
        }

        if (md.drop_reason != DROP_NONE) {
            switchml_drops.count((bit<32>)md.drop_reason);
            drop();
        } else if (md.readout == 1) {
            if (md.group != 0) {
                recirculate(RECIRC_READOUT, md.group - 1, hdr.recirc.to_all);
            } else if (hdr.recirc.to_all == 1) {
                send_result_to_all();
            } else {
                send_result_to_sender();
            }
        } else if (md.group != LAST_GROUP) {
            // Bank `group` took its words: the rest goes round again.
            hdr.data.setInvalid();
            recirculate(RECIRC_CONSUME, md.group + 1, 0);
        } else if (md.rank_seen == 1 && md.remaining_before != 0) {
            // Retransmission to an incomplete slot: tell who contributed.
            report_to_sender(SWITCHML_TYPE_PENDING, 1, 8 + SWITCHML_HEADER_BYTES + 4,
                             20 + 8 + SWITCHML_HEADER_BYTES + 4);
            hdr.pending.setValid();
            hdr.pending.bitmap = md.seen_before;
            switchml_events.count(EVENT_PENDING_REPLIES);
        } else if (md.rank_seen == 1) {
            // A worker lost the result: hdr.data holds the last bank's.
            switchml_events.count(EVENT_RESULTS_RESENT);
            if (LAST_GROUP == 0) {
                send_result_to_sender();
            } else {
                recirculate(RECIRC_READOUT, LAST_GROUP - 1, 0);
            }
        } else if (md.remaining_before == 1 ||
                   (md.remaining_before == 0 && md.world_size == 1)) {
            // The n-th contribution: hdr.data holds the sum; multicast it.
            switchml_events.count(EVENT_SLOTS_COMPLETED);
            if (LAST_GROUP == 0) {
                send_result_to_all();
            } else {
                recirculate(RECIRC_READOUT, LAST_GROUP - 1, 1);
            }
        } else {
            switchml_events.count(EVENT_CONTRIBUTIONS);
#if SWITCHML_TNA_NACKS
            if (md.nack == 1) {
                // Absorbed, and its rank's packet of the chunk before was
                // lost: back to the sender as the NACK of that packet.
                report_to_sender(SWITCHML_TYPE_NACK, 2, 8 + SWITCHML_HEADER_BYTES + 8,
                                 20 + 8 + SWITCHML_HEADER_BYTES + 8);
                hdr.switchml.chunk = md.before_chunk;
                hdr.switchml.rank = SWITCHML_ALL_RANKS;
                hdr.switchml.slot = md.before_slot;
                hdr.switchml.flags = md.nack_version;
                hdr.nack.setValid();
                hdr.nack.lost = md.rank_bit;
                hdr.nack.missing = 0;
                switchml_nacks_sent.count(0);
            } else {
                drop();  // absorbed
            }
#else
            drop();  // absorbed
#endif
        }
    }
}

control SwitchmlIngressDeparser(packet_out pkt, inout tna_headers_t hdr, in metadata_t md,
                                in ingress_intrinsic_metadata_for_deparser_t ig_dprsr_md) {
    Checksum() ipv4_checksum;
    apply {
        if (hdr.ipv4.isValid()) {
            hdr.ipv4.hdr_checksum = ipv4_checksum.update({
                hdr.ipv4.version, hdr.ipv4.ihl, hdr.ipv4.diffserv, hdr.ipv4.total_len,
                hdr.ipv4.identification, hdr.ipv4.flags, hdr.ipv4.frag_offset,
                hdr.ipv4.ttl, hdr.ipv4.protocol, hdr.ipv4.src_addr, hdr.ipv4.dst_addr });
        }
        pkt.emit(hdr);
    }
}

// ----------------------------------------------------------------------------
// Egress: rewrite each replica of a result to its worker's socket.

parser SwitchmlEgressParser(packet_in pkt, out tna_headers_t hdr, out metadata_t md,
                            out egress_intrinsic_metadata_t eg_intr_md) {
    state start {
        pkt.extract(eg_intr_md);
        md = METADATA_INIT;
#if SWITCHML_PASS_BITS > 0
        transition select(eg_intr_md.egress_port) {
            SWITCHML_RECIRC_PORT: parse_recirc;
            default: parse_ethernet;
        }
#else
        transition parse_ethernet;
#endif
    }
    // A packet between passes: everything after its recirculation header
    // passes through untouched.
    state parse_recirc {
        pkt.extract(hdr.recirc);
        transition accept;
    }
#define SWITCHML_PARSE_HEADERS_ONLY
#include "parser_states.p4"
#undef SWITCHML_PARSE_HEADERS_ONLY
}

control SwitchmlEgress(inout tna_headers_t hdr, inout metadata_t md,
                       in egress_intrinsic_metadata_t eg_intr_md,
                       in egress_intrinsic_metadata_from_parser_t eg_prsr_md,
                       inout egress_intrinsic_metadata_for_deparser_t eg_dprsr_md,
                       inout egress_intrinsic_metadata_for_output_port_t eg_oport_md) {
    action to_worker(bit<48> mac, bit<32> ip, bit<16> port) {
        hdr.ethernet.dst_addr = mac;
        hdr.ipv4.dst_addr = ip;
        hdr.udp.dst_port = port;
    }
    action drop() {
        eg_dprsr_md.drop_ctl = 1;
    }
    table result_replicas {
        key = { eg_intr_md.egress_rid: exact; }
        actions = { to_worker; drop; }
        default_action = drop();
        size = SWITCHML_MAX_SENDERS;
    }
    apply {
        if (hdr.switchml.isValid() && hdr.switchml.msg_type == SWITCHML_TYPE_RESULT &&
            hdr.switchml.rank == SWITCHML_ALL_RANKS) {
            result_replicas.apply();
        }
    }
}

control SwitchmlEgressDeparser(packet_out pkt, inout tna_headers_t hdr, in metadata_t md,
                               in egress_intrinsic_metadata_for_deparser_t eg_dprsr_md) {
    Checksum() ipv4_checksum;
    apply {
        if (hdr.ipv4.isValid()) {
            hdr.ipv4.hdr_checksum = ipv4_checksum.update({
                hdr.ipv4.version, hdr.ipv4.ihl, hdr.ipv4.diffserv, hdr.ipv4.total_len,
                hdr.ipv4.identification, hdr.ipv4.flags, hdr.ipv4.frag_offset,
                hdr.ipv4.ttl, hdr.ipv4.protocol, hdr.ipv4.src_addr, hdr.ipv4.dst_addr });
        }
        pkt.emit(hdr);
    }
}

Pipeline(SwitchmlIngressParser(), SwitchmlIngress(), SwitchmlIngressDeparser(),
         SwitchmlEgressParser(), SwitchmlEgress(), SwitchmlEgressDeparser()) pipe;

Switch(pipe) main;
