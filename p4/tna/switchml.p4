// switchml aggregation switch for Intel Tofino (P4_16, TNA).
//
// The pipeline of p4/v1model/switchml.p4 within Tofino's constraints: every
// register is touched at most once per pass, by one RegisterAction chosen
// from what earlier stages decided. Headers, constants and parser states are
// shared with the v1model program (p4/common/). This program cannot be
// compiled without Intel's SDE (bf-p4c); p4/README.md lists how to build it,
// the stage budget, and where it differs from the software data plane.
//
// Build (SDE 9.x): bf-p4c --target tofino2 --arch t2na -I p4/common \
//                  -o build/switchml_tna p4/tna/switchml.p4
// Tofino 1 (12 stages) fits 32 elements per pass: add -DSWITCHML_K=32.
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

// Register entries: two versions of every slot, one bank per pass.
#define POOL_ENTRIES (2 * SWITCHML_POOL_SLOTS * SWITCHML_PASSES)
#define LAST_GROUP ((bit<8>)(SWITCHML_PASSES - 1))

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
}

// What the slot-state stages decided; selects each register's action.
#define ACC_NONE 2w0
#define ACC_WRITE 2w1   // first contribution: store
#define ACC_ADD 2w2     // later contribution: add, return the sum
#define ACC_READ 2w3    // retransmission to a complete slot: return the result

// The contribute register's answer for a chunk older than the slot's.
#define SEEN_STALE 32w0xFFFFFFFF

struct metadata_t {
    bit<8>  drop_reason;
    bit<1>  job_known;
    bit<1>  sender_ok;
    bit<16> world_size;
    bit<32> pool_base;
    bit<16> pool_slots;
    bit<16> slot_lo;
    bit<16> slot_hi;
    bit<16> result_group;
    bit<48> switch_mac;
    bit<32> index;          // register index: version * POOL + pool slot
    bit<32> rank_bit;
    bit<32> seen_before;    // the slot's bitmap before this packet
    bit<16> remaining_before;
    bit<2>  acc_op;
    bit<16> auth_bytes;
    bit<16> expected_udp_length;
    bit<8>  group;          // register bank of this pass (0 without recirculation)
    bit<1>  readout;        // a read-out pass: read bank `group` into hdr.data
    bit<16> sender_port;
}

// One 64-bit register entry: a slot version's chunk id and seen-bitmap.
struct chunk_seen_t {
    bit<32> chunk;
    bit<32> seen;
}

// ----------------------------------------------------------------------------
// Ingress

#define METADATA_INIT {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, ACC_NONE, 0, 0, 0, 0, 0}

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
        transition select(hdr.recirc.phase) {
            RECIRC_READOUT: parse_readout;
            default: parse_ethernet;
        }
    }
    // The sums already rebuilt stay payload, behind the bank this pass adds.
    state parse_readout {
        pkt.extract(hdr.ethernet);
        pkt.extract(hdr.ipv4);
        pkt.extract(hdr.udp);
        pkt.extract(hdr.switchml);
        transition accept;
    }
#include "parser_states.p4"
}

// The slot pool. Unlike v1model, a slot's seen-bitmap lives with its chunk
// id in one 64-bit register (one access decides retransmission, staleness
// and a new aggregation); a new chunk resets the bitmap instead of clearing
// the sender's bit in the other version. The two are equivalent for workers
// that follow the protocol (p4/README.md, "TNA differences").
control SwitchmlSlots(inout tna_headers_t hdr, inout metadata_t md) {
    Register<chunk_seen_t, bit<32>>(POOL_ENTRIES) slot_chunk_seen;
    RegisterAction<chunk_seen_t, bit<32>, bit<32>>(slot_chunk_seen) contribute = {
        void apply(inout chunk_seen_t value, out bit<32> seen_before) {
            if (value.chunk == hdr.switchml.chunk) {
                seen_before = value.seen;
                value.seen = value.seen | md.rank_bit;
            } else if ((int<32>)(hdr.switchml.chunk - value.chunk) > 0) {
                seen_before = 0;  // a newer chunk starts a new aggregation
                value.chunk = hdr.switchml.chunk;
                value.seen = md.rank_bit;
            } else {
                seen_before = SEEN_STALE;
            }
        }
    };

    // Contributions still missing; 0 = idle or complete.
    Register<bit<16>, bit<32>>(POOL_ENTRIES) slot_remaining;
    RegisterAction<bit<16>, bit<32>, bit<16>>(slot_remaining) count = {
        void apply(inout bit<16> value, out bit<16> before) {
            before = value;
            if (value == 0) {
                value = md.world_size - 1;
            } else {
                value = value - 1;
            }
        }
    };
    RegisterAction<bit<16>, bit<32>, bit<16>>(slot_remaining) peek = {
        void apply(inout bit<16> value, out bit<16> before) {
            before = value;
        }
    };

    Register<bit<16>, bit<32>>(POOL_ENTRIES) slot_max_next_exponent;
    RegisterAction<bit<16>, bit<32>, bit<16>>(slot_max_next_exponent) exponent_first = {
        void apply(inout bit<16> value, out bit<16> result) {
            value = hdr.switchml.next_exponent;
            result = value;
        }
    };
    RegisterAction<bit<16>, bit<32>, bit<16>>(slot_max_next_exponent) exponent_max = {
        void apply(inout bit<16> value, out bit<16> result) {
            if ((int<16>)hdr.switchml.next_exponent > (int<16>)value) {
                value = hdr.switchml.next_exponent;
            }
            result = value;
        }
    };
    RegisterAction<bit<16>, bit<32>, bit<16>>(slot_max_next_exponent) exponent_read = {
        void apply(inout bit<16> value, out bit<16> result) {
            result = value;
        }
    };

    // One register per element: SWITCHML_K / 4 stages of stateful ALUs.
#define ACC(i)                                                                    \
    Register<bit<32>, bit<32>>(POOL_ENTRIES) acc_##i;                             \
    RegisterAction<bit<32>, bit<32>, bit<32>>(acc_##i) acc_write_##i = {          \
        void apply(inout bit<32> value, out bit<32> result) {                     \
            value = hdr.data.d##i;                                                \
            result = value;                                                       \
        }                                                                         \
    };                                                                            \
    RegisterAction<bit<32>, bit<32>, bit<32>>(acc_##i) acc_add_##i = {            \
        void apply(inout bit<32> value, out bit<32> result) {                     \
            value = value + hdr.data.d##i;                                        \
            result = value;                                                       \
        }                                                                         \
    };                                                                            \
    RegisterAction<bit<32>, bit<32>, bit<32>>(acc_##i) acc_read_##i = {           \
        void apply(inout bit<32> value, out bit<32> result) {                     \
            result = value;                                                       \
        }                                                                         \
    };
    SWITCHML_FOR_EACH_ELEMENT(ACC)
#undef ACC

    apply {
        if (md.readout == 1) {
            md.acc_op = ACC_READ;  // a read-out pass touches the accumulators only
        } else {
            md.seen_before = contribute.execute(md.index);
            if (md.seen_before == SEEN_STALE) {
                md.drop_reason = DROP_STALE_CHUNK;
            } else if ((md.seen_before & md.rank_bit) != 0) {
                // A retransmission: answer it, count nothing.
                md.remaining_before = peek.execute(md.index);
                if (md.remaining_before == 0) {
                    md.acc_op = ACC_READ;
                    hdr.switchml.next_exponent = exponent_read.execute(md.index);
                }
            } else {
                md.remaining_before = count.execute(md.index);
                if (md.remaining_before == 0) {
                    md.acc_op = ACC_WRITE;
                    hdr.switchml.next_exponent = exponent_first.execute(md.index);
                } else {
                    md.acc_op = ACC_ADD;
                    hdr.switchml.next_exponent = exponent_max.execute(md.index);
                }
            }
        }
#define ACC_APPLY(i)                                                              \
        if (md.acc_op == ACC_WRITE) {                                             \
            hdr.data.d##i = acc_write_##i.execute(md.index);                      \
        } else if (md.acc_op == ACC_ADD) {                                        \
            hdr.data.d##i = acc_add_##i.execute(md.index);                        \
        } else if (md.acc_op == ACC_READ) {                                       \
            hdr.data.d##i = acc_read_##i.execute(md.index);                       \
        }
        SWITCHML_FOR_EACH_ELEMENT(ACC_APPLY)
#undef ACC_APPLY
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
    SwitchmlSlots() slots;

    action drop() {
        ig_dprsr_md.drop_ctl = 1;
    }

    action set_endpoint(bit<48> switch_mac) {
        md.switch_mac = switch_mac;
    }
    table switchml_endpoint {
        key = { hdr.ipv4.dst_addr: exact; }
        actions = { set_endpoint; NoAction; }
        default_action = NoAction();
        size = 16;
    }

    action set_job(bit<16> world_size, bit<32> pool_base, bit<16> pool_slots) {
        md.job_known = 1;
        md.world_size = world_size;
        md.pool_base = pool_base;
        md.pool_slots = pool_slots;
    }
    table switchml_jobs {
        key = { hdr.switchml.job: exact; }
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
    action send_result(bit<8> to_all) {
        hdr.switchml.msg_type = SWITCHML_TYPE_RESULT;
        if (to_all == 1) {
            hdr.switchml.rank = SWITCHML_ALL_RANKS;
            ig_tm_md.mcast_grp_a = md.result_group;
        } else {
            ig_tm_md.ucast_egress_port = (PortId_t)md.sender_port;
        }
        answer_from_endpoint();
    }

    // Table lookups shared by every pass of an aggregation packet.
    action index_of_slot() {
        md.index = md.pool_base + (bit<32>)hdr.switchml.slot;
        if ((hdr.switchml.flags & SWITCHML_FLAG_VERSION) != 0) {
            md.index = md.index + SWITCHML_POOL_SLOTS;
        }
        md.index = (md.index << SWITCHML_PASS_BITS) + (bit<32>)md.group;
    }

    apply {
        if (hdr.recirc.isValid()) {
            md.group = hdr.recirc.group;
            md.sender_port = hdr.recirc.sender_port;
            md.result_group = hdr.recirc.result_group;
        } else {
            md.sender_port = (bit<16>)ig_intr_md.ingress_port;
        }
        if (hdr.recirc.isValid() && hdr.recirc.phase == RECIRC_READOUT) {
            // Rebuild a result: bank `group` in front of the banks after it.
            switchml_endpoint.apply();
            switchml_jobs.apply();
            if (md.job_known == 0) {
                switchml_drops.count((bit<32>)DROP_UNKNOWN_JOB);  // ended meanwhile
                drop();
                return;
            }
            index_of_slot();
            md.readout = 1;
            hdr.data.setValid();
            slots.apply(hdr, md);
            if (md.group == 0) {
                send_result(hdr.recirc.to_all);
            } else {
                recirculate(RECIRC_READOUT, md.group - 1, hdr.recirc.to_all);
            }
            return;
        }
        if (hdr.udp.isValid() &&
            (hdr.udp.dst_port & SWITCHML_UDP_PORT_MASK) == SWITCHML_UDP_PORT_BASE &&
            switchml_endpoint.apply().hit) {
            // Later consume passes see the same headers (only payload words
            // were dropped) and repeat the checks; the packet counts once.
            if (md.group == 0) {
                switchml_packets.count(0);
            }
            if (hdr.switchml.isValid() &&
                (hdr.switchml.flags & SWITCHML_FLAG_AUTHENTICATED) != 0) {
                md.auth_bytes = SWITCHML_AUTH_TAG_BYTES;
            }
            md.expected_udp_length = 8 + SWITCHML_HEADER_BYTES + md.auth_bytes +
                                     (hdr.switchml.element_count << 2);
            if (ig_prsr_md.parser_err != 0 || !hdr.switchml.isValid() ||
                hdr.switchml.magic != SWITCHML_MAGIC ||
                hdr.switchml.wire_version != SWITCHML_WIRE_VERSION ||
                hdr.switchml.msg_type == 0 || hdr.switchml.msg_type > SWITCHML_TYPE_NACK ||
                hdr.switchml.element_count > SWITCHML_MAX_ELEMENTS ||
                hdr.udp.length != md.expected_udp_length ||
                (hdr.switchml.flags & 0xFC) != 0 || hdr.switchml.reserved != 0) {
                md.drop_reason = DROP_MALFORMED;
            } else {
                switchml_jobs.apply();
                switchml_senders.apply();
                rank_bits.apply();
                if (md.job_known == 1 && hdr.switchml.rank < md.world_size &&
                    hdr.switchml.slot < md.pool_slots) {
                    if (md.sender_ok == 0 || hdr.switchml.slot < md.slot_lo ||
                        hdr.switchml.slot >= md.slot_hi) {
                        md.drop_reason = DROP_SOURCE_MISMATCH;
                    } else if (md.auth_bytes != 0) {
                        md.drop_reason = DROP_BAD_MAC;
                    }
                }
                if (md.drop_reason != DROP_NONE) {
                    // counted below
                } else if (hdr.switchml.msg_type != SWITCHML_TYPE_CONTRIBUTION) {
                    md.drop_reason = DROP_NOT_CONTRIBUTION;
                } else if (md.job_known == 0) {
                    md.drop_reason = DROP_UNKNOWN_JOB;
                } else if (hdr.switchml.rank >= md.world_size) {
                    md.drop_reason = DROP_RANK_OUT_OF_RANGE;
                } else if (hdr.switchml.slot >= md.pool_slots) {
                    md.drop_reason = DROP_SLOT_OUT_OF_RANGE;
                } else if (!hdr.data.isValid()) {
                    md.drop_reason = DROP_ELEMENT_COUNT;
                } else if ((hdr.switchml.exponent + 126 > 254 &&
                            hdr.switchml.exponent != SWITCHML_EXPONENT_NONFINITE) ||
                           (hdr.switchml.next_exponent + 126 > 254 &&
                            hdr.switchml.next_exponent != SWITCHML_EXPONENT_NONFINITE)) {
                    md.drop_reason = DROP_BAD_EXPONENT;
                } else {
                    index_of_slot();
                    slots.apply(hdr, md);
                }
            }

            if (md.drop_reason != DROP_NONE) {
                switchml_drops.count((bit<32>)md.drop_reason);
                drop();
            } else if (md.group != LAST_GROUP) {
                // Bank `group` took its words: the rest goes round again.
                hdr.data.setInvalid();
                recirculate(RECIRC_CONSUME, md.group + 1, 0);
            } else if (md.acc_op == ACC_NONE && (md.seen_before & md.rank_bit) != 0) {
                // Retransmission to an incomplete slot: tell who contributed.
                hdr.switchml.msg_type = SWITCHML_TYPE_PENDING;
                hdr.switchml.element_count = 1;
                hdr.switchml.exponent = 0;
                hdr.switchml.next_exponent = 0;
                hdr.data.setInvalid();
                hdr.pending.setValid();
                hdr.pending.bitmap = md.seen_before;
                hdr.udp.length = 8 + SWITCHML_HEADER_BYTES + 4;
                hdr.ipv4.total_len = 20 + 8 + SWITCHML_HEADER_BYTES + 4;
                ig_tm_md.ucast_egress_port = (PortId_t)md.sender_port;
                answer_from_endpoint();
                switchml_events.count(EVENT_PENDING_REPLIES);
            } else if (md.acc_op == ACC_READ) {
                // A worker lost the result: hdr.data holds the last bank's.
                switchml_events.count(EVENT_RESULTS_RESENT);
                if (LAST_GROUP == 0) {
                    send_result(0);
                } else {
                    recirculate(RECIRC_READOUT, LAST_GROUP - 1, 0);
                }
            } else if (md.remaining_before == 1 ||
                       (md.remaining_before == 0 && md.world_size == 1)) {
                // The n-th contribution: hdr.data holds the sum; multicast it.
                switchml_events.count(EVENT_SLOTS_COMPLETED);
                if (LAST_GROUP == 0) {
                    send_result(1);
                } else {
                    recirculate(RECIRC_READOUT, LAST_GROUP - 1, 1);
                }
            } else {
                switchml_events.count(EVENT_CONTRIBUTIONS);
                drop();  // absorbed
            }
            return;
        }

        if (hdr.arp.isValid() && hdr.arp.opcode == 1 && arp_responder.apply().hit) {
            return;
        }
        if (hdr.ipv4.isValid() && router_macs.apply().hit) {
            if (hdr.ipv4.ttl <= 1) {
                drop();
            } else {
                ipv4_routes.apply();
            }
            return;
        }
        l2_hosts.apply();
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
#include "parser_states.p4"
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
