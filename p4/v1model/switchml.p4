// switchml aggregation switch for BMv2 simple_switch (P4_16, v1model).
//
// docs/design.md §2 exactly as the software data plane (src/dataplane/data_plane.cc)
// implements it: the same wire format, the same validation order and drop
// reasons, the same answers (absorb, result to the sender, result to all,
// pending to the sender, to contributions and probes), with every other
// packet switched or routed as an ordinary switch would. Of the software
// switch's NACKs it sends the one that needs no timer: for a packet its
// rank's next chunk overtook. p4/README.md maps each part onto the design.
//
// Build: p4c --target bmv2 --arch v1model -I p4/common p4/v1model/switchml.p4
// Tables and multicast groups are programmed by
// `switchml-switch --dataplane bmv2` (src/switch/bmv2/).
#include <core.p4>
#include <v1model.p4>

#include "headers.p4"

#if SWITCHML_PASS_BITS != 0
#error "BMv2 aggregates a packet in one pass: SWITCHML_PASS_BITS must be 0 (raise SWITCHML_K instead)"
#endif

// Multicast group 1 floods (broadcast and unknown unicast); the control plane
// allocates result groups from 2 up.
#define FLOOD_GROUP 16w1
#define POOL_ENTRIES (2 * SWITCHML_POOL_SLOTS)
// A NACK leaves as an ingress clone of the contribution that showed a loss,
// through mirror session NACK_SESSION_BASE + its ingress port (one per host
// port, which the control plane adds), with the metadata of NACK_FIELDS.
#define NACK_SESSION_BASE 32w1
#define NACK_FIELDS 8w1
#define PKT_INSTANCE_TYPE_INGRESS_CLONE 32w1

struct metadata_t {
    bit<8>  drop_reason;    // DROP_*; DROP_NONE when nothing is wrong
    bit<1>  absorbed;       // a contribution was counted; nothing to send
    bit<1>  result_to_all;  // egress rewrites each replica's destination
    bit<1>  flood;          // egress prunes the ingress port
    bit<48> switch_mac;     // the aggregation endpoint's MAC
    bit<1>  job_known;
    bit<16> world_size;
    bit<32> pool_base;
    bit<16> pool_slots;
    bit<16> slot_lo;        // the sender socket owns slots [slot_lo, slot_hi)
    bit<16> slot_hi;
    bit<16> result_group;   // multicast group of (job, sender's thread)
    // The NACK an ingress clone carries to the sender (egress writes it).
    @field_list(NACK_FIELDS) bit<48> nack_switch_mac;
    @field_list(NACK_FIELDS) bit<32> nack_chunk;
    @field_list(NACK_FIELDS) bit<16> nack_slot;
    @field_list(NACK_FIELDS) bit<8>  nack_version;
    @field_list(NACK_FIELDS) bit<32> nack_lost;
}

parser SwitchmlParser(packet_in pkt, out headers_t hdr, inout metadata_t meta,
                      inout standard_metadata_t sm) {
    state start {
        transition parse_ethernet;
    }
#include "parser_states.p4"
}

control SwitchmlVerifyChecksum(inout headers_t hdr, inout metadata_t meta) {
    apply {
        verify_checksum(hdr.ipv4.isValid(),
            { hdr.ipv4.version, hdr.ipv4.ihl, hdr.ipv4.diffserv, hdr.ipv4.total_len,
              hdr.ipv4.identification, hdr.ipv4.flags, hdr.ipv4.frag_offset, hdr.ipv4.ttl,
              hdr.ipv4.protocol, hdr.ipv4.src_addr, hdr.ipv4.dst_addr },
            hdr.ipv4.hdr_checksum, HashAlgorithm.csum16);
    }
}

// The slot pool: docs/design.md §2. Register index = version * SWITCHML_POOL_SLOTS
// + pool slot. simple_switch runs ingress on one thread, so each packet's
// read-modify-write of a slot is atomic with respect to the others.
control SwitchmlAggregate(inout headers_t hdr, inout metadata_t meta,
                          inout standard_metadata_t sm,
                          counter events) {
    // The job id that last wrote the entry. A slot written by another job
    // (an earlier holder of the pool segment) reads as idle and unused:
    // the data plane resets a segment lazily instead of the control plane
    // writing every register at registration.
    register<bit<32>>(POOL_ENTRIES) slot_owner;
    register<bit<32>>(POOL_ENTRIES) slot_seen;       // bit r: rank r contributed
    register<bit<16>>(POOL_ENTRIES) slot_remaining;  // 0 = idle or complete
    register<bit<8>>(POOL_ENTRIES)  slot_used;       // held a chunk since reset
    register<bit<32>>(POOL_ENTRIES) slot_chunk;
    register<bit<16>>(POOL_ENTRIES) slot_exponent;
    register<bit<16>>(POOL_ENTRIES) slot_max_next_exponent;
#define ACC_REGISTER(i) register<bit<32>>(POOL_ENTRIES) acc_##i;
    SWITCHML_FOR_EACH_ELEMENT(ACC_REGISTER)
#undef ACC_REGISTER

    // The stored result of register entry `entry`, to the sender only (a
    // retransmission's, or a probe's, which carries no values).
    action result_to_sender(bit<32> entry, bit<16> exponent, bit<16> max_next) {
        hdr.data.setValid();
#define READ_RESULT(i) acc_##i.read(hdr.data.d##i, entry);
        SWITCHML_FOR_EACH_ELEMENT(READ_RESULT)
#undef READ_RESULT
        hdr.switchml.msg_type = SWITCHML_TYPE_RESULT;
        hdr.switchml.element_count = SWITCHML_K;
        hdr.switchml.flags = hdr.switchml.flags & ~SWITCHML_FLAG_RESEND;
        hdr.switchml.exponent = exponent;
        hdr.switchml.next_exponent = max_next;
        hdr.udp.length = 8 + SWITCHML_HEADER_BYTES + 4 * SWITCHML_K;
        hdr.ipv4.total_len = 20 + 8 + SWITCHML_HEADER_BYTES + 4 * SWITCHML_K;
        events.count(EVENT_RESULTS_RESENT);
    }
    // A pending reply to the sender: the slot's contributors, `bitmap`.
    action pending_to_sender(bit<32> bitmap) {
        hdr.switchml.msg_type = SWITCHML_TYPE_PENDING;
        hdr.switchml.element_count = 1;
        hdr.switchml.exponent = 0;
        hdr.switchml.next_exponent = 0;
        hdr.switchml.flags = hdr.switchml.flags & SWITCHML_FLAG_VERSION;
        hdr.data.setInvalid();
        hdr.pending.setValid();
        hdr.pending.bitmap = bitmap;
        hdr.udp.length = 8 + SWITCHML_HEADER_BYTES + 4;
        hdr.ipv4.total_len = 20 + 8 + SWITCHML_HEADER_BYTES + 4;
        events.count(EVENT_PENDING_REPLIES);
    }
    // Register entry `entry` aggregates `chunk` for this job without `rank_bit`.
    action lacks_chunk(in bit<32> entry, in bit<32> chunk, in bit<32> rank_bit, out bool lacks) {
        bit<32> owner;
        bit<16> remaining;
        bit<32> entry_chunk;
        bit<32> seen;
        slot_owner.read(owner, entry);
        slot_remaining.read(remaining, entry);
        slot_chunk.read(entry_chunk, entry);
        slot_seen.read(seen, entry);
        lacks = owner == hdr.switchml.job && remaining != 0 && entry_chunk == chunk &&
                (seen & rank_bit) == 0;
    }
    // A NACK of (chunk, job slot, version) naming `rank_bit` in bitmap 1, to
    // the sender: an ingress clone of this packet that egress rewrites.
    action nack_lost(bit<32> chunk, bit<16> job_slot, bit<8> version, bit<32> rank_bit) {
        meta.nack_switch_mac = meta.switch_mac;
        meta.nack_chunk = chunk;
        meta.nack_slot = job_slot;
        meta.nack_version = version;
        meta.nack_lost = rank_bit;
        clone_preserving_field_list(CloneType.I2E, NACK_SESSION_BASE + (bit<32>)sm.ingress_port,
                                    NACK_FIELDS);
        events.count(EVENT_NACKS_SENT);
    }

    apply {
        // Ingress applies this only to probes and packets that carry k words.
        bool probe = hdr.switchml.msg_type == SWITCHML_TYPE_PROBE;
        if (hdr.data.isValid() || probe) {
            bit<32> pool_slot = meta.pool_base + (bit<32>)hdr.switchml.slot;
            bit<32> index = pool_slot;
            bit<32> other = pool_slot + SWITCHML_POOL_SLOTS;
            if ((hdr.switchml.flags & SWITCHML_FLAG_VERSION) != 0) {
                index = pool_slot + SWITCHML_POOL_SLOTS;
                other = pool_slot;
            }
            bit<32> rank_bit = 32w1 << (bit<8>)hdr.switchml.rank;

            bit<32> owner;
            bit<32> seen;
            bit<16> remaining;
            bit<8> used;
            bit<32> chunk;
            bit<16> exponent;
            bit<16> max_next;
            slot_owner.read(owner, index);
            slot_seen.read(seen, index);
            slot_remaining.read(remaining, index);
            slot_used.read(used, index);
            slot_chunk.read(chunk, index);
            slot_exponent.read(exponent, index);
            slot_max_next_exponent.read(max_next, index);
            if (owner != hdr.switchml.job) {
                seen = 0;
                remaining = 0;
                used = 0;
                chunk = 0;
            }

            bool holds_chunk = used != 0 && chunk == hdr.switchml.chunk;
            if (probe) {
                // A probe (docs/wire-format.md, "The probe"): the slot's state
                // for the sender, never counted in.
                if ((seen & rank_bit) != 0) {
                    if (!holds_chunk) {
                        meta.drop_reason = DROP_STALE_CHUNK;
                    } else if (remaining == 0) {
                        result_to_sender(index, exponent, max_next);  // its result was lost
                    } else {
                        pending_to_sender(seen);
                    }
                } else if (used != 0 && ((hdr.switchml.chunk - chunk) & 0x80000000) != 0) {
                    meta.drop_reason = DROP_STALE_CHUNK;  // the slot moved on: the rank had its result
                } else if (holds_chunk && remaining == 0) {
                    meta.drop_reason = DROP_STALE_CHUNK;  // complete, and the rank moved on since
                } else if (holds_chunk) {
                    pending_to_sender(seen);  // without the rank: its contribution was lost
                } else {
                    pending_to_sender(0);  // the slot has not started this chunk
                }
            } else if ((seen & rank_bit) != 0) {
                // A retransmission: this rank already counted in (version, slot).
                if (hdr.switchml.chunk != chunk) {
                    meta.drop_reason = DROP_STALE_CHUNK;
                } else if (remaining == 0) {
                    result_to_sender(index, exponent, max_next);
                } else {
                    pending_to_sender(seen);  // not counted again
                }
            } else {
                bool first = remaining == 0;
                if (first) {
                    // Only a chunk newer than the last one this slot finished may
                    // start it (serial-number order, RFC 1982).
                    if (used != 0 && ((chunk - hdr.switchml.chunk) & 0x80000000) == 0) {
                        meta.drop_reason = DROP_STALE_CHUNK;
                    }
                } else if (hdr.switchml.chunk != chunk) {
                    if (((hdr.switchml.chunk - chunk) & 0x80000000) != 0) {
                        meta.drop_reason = DROP_STALE_CHUNK;
                    } else {
                        meta.drop_reason = DROP_CHUNK_MISMATCH;
                    }
                } else if (hdr.switchml.exponent != exponent) {
                    meta.drop_reason = DROP_EXPONENT_MISMATCH;
                }
                // A worker sends into one version only once it holds the other
                // version's result: a contribution while the other version still
                // aggregates is a corrupted or forged copy (data_plane.cc).
                bit<32> other_owner;
                bit<16> other_remaining;
                slot_owner.read(other_owner, other);
                slot_remaining.read(other_remaining, other);
                if (meta.drop_reason == DROP_NONE && other_owner == hdr.switchml.job &&
                    other_remaining != 0) {
                    meta.drop_reason = DROP_VERSION_CONFLICT;
                }
                if (meta.drop_reason == DROP_NONE) {
                    // A new contribution: count it, recycle the other version lazily.
                    slot_owner.write(index, hdr.switchml.job);
                    slot_seen.write(index, seen | rank_bit);
                    if (other_owner == hdr.switchml.job) {
                        bit<32> other_seen;
                        slot_seen.read(other_seen, other);
                        slot_seen.write(other, other_seen & ~rank_bit);
                    }
                    if (first) {
#define STORE(i) acc_##i.write(index, hdr.data.d##i);
                        SWITCHML_FOR_EACH_ELEMENT(STORE)
#undef STORE
                        slot_used.write(index, 1);
                        slot_chunk.write(index, hdr.switchml.chunk);
                        slot_exponent.write(index, hdr.switchml.exponent);
                        max_next = hdr.switchml.next_exponent;
                        remaining = meta.world_size - 1;
                    } else {
                        // int32 sums wrap (two's complement), as in software.
#define ADD(i)                                      \
                        {                                       \
                            bit<32> sum_##i;                    \
                            acc_##i.read(sum_##i, index);       \
                            sum_##i = sum_##i + hdr.data.d##i;  \
                            acc_##i.write(index, sum_##i);      \
                            hdr.data.d##i = sum_##i;            \
                        }
                        SWITCHML_FOR_EACH_ELEMENT(ADD)
#undef ADD
                        if ((int<16>)hdr.switchml.next_exponent > (int<16>)max_next) {
                            max_next = hdr.switchml.next_exponent;
                        }
                        remaining = remaining - 1;
                    }
                    slot_max_next_exponent.write(index, max_next);
                    slot_remaining.write(index, remaining);
                    events.count(EVENT_CONTRIBUTIONS);

                    // A rank sends its chunks in order, chunk c into the slot
                    // after chunk c - 1's among its thread's slots, over a link
                    // that keeps order. So where that slot (either version)
                    // still aggregates chunk c - 1 without this rank, its packet
                    // was lost: NACK it to the rank now rather than leave the
                    // slot to its timer (docs/wire-format.md, "Loss recovery";
                    // in software DataPlane::WatchChunkBefore).
                    bit<16> before_slot = (hdr.switchml.slot == meta.slot_lo ? meta.slot_hi
                                                                            : hdr.switchml.slot) - 1;
                    bit<32> before = meta.pool_base + (bit<32>)before_slot;
                    bit<32> before_chunk = hdr.switchml.chunk - 1;
                    bool lacks_0;
                    bool lacks_1;
                    lacks_chunk(before, before_chunk, rank_bit, lacks_0);
                    lacks_chunk(before + SWITCHML_POOL_SLOTS, before_chunk, rank_bit, lacks_1);
                    if (lacks_0) {
                        nack_lost(before_chunk, before_slot, 0, rank_bit);
                    } else if (lacks_1) {
                        nack_lost(before_chunk, before_slot, 1, rank_bit);
                    }

                    if (remaining != 0) {
                        meta.absorbed = 1;
                    } else {
                        // The n-th contribution: hdr.data holds the sum; to all.
                        hdr.switchml.msg_type = SWITCHML_TYPE_RESULT;
                        hdr.switchml.flags = hdr.switchml.flags & ~SWITCHML_FLAG_RESEND;
                        hdr.switchml.rank = SWITCHML_ALL_RANKS;
                        hdr.switchml.next_exponent = max_next;
                        meta.result_to_all = 1;
                        events.count(EVENT_SLOTS_COMPLETED);
                    }
                }
            }
        }
    }
}

// Addresses a packet that came from a worker back to it, from the switch's
// aggregation endpoint (the packet's destination).
control SwitchmlReplyAddresses(inout headers_t hdr, in bit<48> switch_mac) {
    apply {
        bit<32> endpoint_ip = hdr.ipv4.dst_addr;
        bit<16> endpoint_port = hdr.udp.dst_port;
        hdr.ipv4.dst_addr = hdr.ipv4.src_addr;
        hdr.ipv4.src_addr = endpoint_ip;
        hdr.ipv4.ttl = 64;
        hdr.udp.dst_port = hdr.udp.src_port;
        hdr.udp.src_port = endpoint_port;
        hdr.udp.checksum = 0;  // optional in IPv4; the payload changed
        hdr.ethernet.dst_addr = hdr.ethernet.src_addr;
        hdr.ethernet.src_addr = switch_mac;
    }
}

control SwitchmlIngress(inout headers_t hdr, inout metadata_t meta,
                        inout standard_metadata_t sm) {
    SwitchmlReplyAddresses() reply_addresses;
    counter(SWITCHML_NUM_DROP_REASONS, CounterType.packets) switchml_drops;
    counter(SWITCHML_NUM_EVENTS, CounterType.packets) switchml_events;
    SwitchmlAggregate() aggregate;

    action drop() {
        mark_to_drop(sm);
    }

    // ---- The aggregation endpoint and its jobs.
    action set_endpoint(bit<48> switch_mac) {
        meta.switch_mac = switch_mac;
    }
    // The switch's own aggregation address(es).
    table switchml_endpoint {
        key = { hdr.ipv4.dst_addr: exact; }
        actions = { set_endpoint; NoAction; }
        default_action = NoAction();
        size = 16;
    }

    action set_job(bit<16> world_size, bit<32> pool_base, bit<16> pool_slots) {
        meta.job_known = 1;
        meta.world_size = world_size;
        meta.pool_base = pool_base;
        meta.pool_slots = pool_slots;
    }
    table switchml_jobs {
        key = { hdr.switchml.job: exact; }
        actions = { set_job; NoAction; }
        default_action = NoAction();
        size = SWITCHML_MAX_JOBS;
    }

    action set_sender(bit<16> slot_lo, bit<16> slot_hi, bit<16> result_group) {
        meta.slot_lo = slot_lo;
        meta.slot_hi = slot_hi;
        meta.result_group = result_group;
    }
    // Only the registered socket of (job, rank) may speak for that rank.
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

    // ---- Ordinary switching and routing for everything else.
    action l2_forward(bit<9> port) {
        sm.egress_spec = port;
    }
    action flood() {
        sm.mcast_grp = FLOOD_GROUP;
        meta.flood = 1;
    }
    table l2_hosts {
        key = { hdr.ethernet.dst_addr: exact; }
        actions = { l2_forward; flood; drop; }
        default_action = flood();
        size = 1024;
    }

    // Packets addressed to the switch's MAC are routed.
    table router_macs {
        key = { hdr.ethernet.dst_addr: exact; }
        actions = { NoAction; }
        size = 16;
    }
    action route(bit<9> port, bit<48> next_hop_mac) {
        sm.egress_spec = port;
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

    // Answers ARP requests for the switch's own addresses.
    action answer_arp(bit<48> mac) {
        bit<32> asked = hdr.arp.target_ip;
        hdr.arp.opcode = 2;
        hdr.arp.target_hw = hdr.arp.sender_hw;
        hdr.arp.target_ip = hdr.arp.sender_ip;
        hdr.arp.sender_hw = mac;
        hdr.arp.sender_ip = asked;
        hdr.ethernet.dst_addr = hdr.ethernet.src_addr;
        hdr.ethernet.src_addr = mac;
        sm.egress_spec = sm.ingress_port;
    }
    table arp_responder {
        key = { hdr.arp.target_ip: exact; }
        actions = { answer_arp; NoAction; }
        default_action = NoAction();
        size = 16;
    }

    // Checks in the order of the software switch (DecodePacket, then the
    // transport's source check, then DataPlane::ProcessDecoded).
    action malformed() {
        meta.drop_reason = DROP_MALFORMED;
    }

    apply {
        if (hdr.udp.isValid() &&
            (hdr.udp.dst_port & SWITCHML_UDP_PORT_MASK) == SWITCHML_UDP_PORT_BASE &&
            switchml_endpoint.apply().hit) {
            switchml_events.count(EVENT_PACKETS);
            bit<16> auth_bytes = 0;
            if (hdr.switchml.isValid() &&
                (hdr.switchml.flags & SWITCHML_FLAG_AUTHENTICATED) != 0) {
                auth_bytes = SWITCHML_AUTH_TAG_BYTES;
            }
            if (sm.parser_error != error.NoError || sm.checksum_error == 1 ||
                !hdr.switchml.isValid() ||
                hdr.switchml.magic != SWITCHML_MAGIC ||
                hdr.switchml.wire_version != SWITCHML_WIRE_VERSION ||
                hdr.switchml.msg_type == 0 || hdr.switchml.msg_type > SWITCHML_TYPE_PROBE ||
                hdr.switchml.element_count > SWITCHML_MAX_ELEMENTS ||
                hdr.udp.length != 8 + SWITCHML_HEADER_BYTES +
                                  (hdr.switchml.element_count << 2) + auth_bytes ||
                hdr.ipv4.total_len != 20 + hdr.udp.length ||
                (hdr.switchml.flags & SWITCHML_FLAGS_RESERVED) != 0 ||
                hdr.switchml.reserved != 0) {
                malformed();
            } else {
                switchml_jobs.apply();
                bool in_range = meta.job_known == 1 &&
                                hdr.switchml.rank < meta.world_size &&
                                hdr.switchml.slot < meta.pool_slots;
                if (in_range) {
                    if (!switchml_senders.apply().hit ||
                        hdr.switchml.slot < meta.slot_lo || hdr.switchml.slot >= meta.slot_hi) {
                        meta.drop_reason = DROP_SOURCE_MISMATCH;
                    } else if (auth_bytes != 0) {
                        // P4 switches hold no job keys (p4/README.md, "Limits").
                        meta.drop_reason = DROP_BAD_MAC;
                    }
                }
                if (meta.drop_reason != DROP_NONE) {
                    // counted below
                } else if (hdr.switchml.msg_type != SWITCHML_TYPE_CONTRIBUTION &&
                           hdr.switchml.msg_type != SWITCHML_TYPE_PROBE) {
                    meta.drop_reason = DROP_NOT_CONTRIBUTION;
                } else if (meta.job_known == 0) {
                    meta.drop_reason = DROP_UNKNOWN_JOB;
                } else if (hdr.switchml.rank >= meta.world_size) {
                    meta.drop_reason = DROP_RANK_OUT_OF_RANGE;
                } else if (hdr.switchml.slot >= meta.pool_slots) {
                    meta.drop_reason = DROP_SLOT_OUT_OF_RANGE;
                } else if (hdr.switchml.msg_type == SWITCHML_TYPE_PROBE
                               ? hdr.switchml.element_count != 0 : !hdr.data.isValid()) {
                    meta.drop_reason = DROP_ELEMENT_COUNT;  // a probe carries no values
                } else if ((hdr.switchml.exponent + 126 > 254 &&
                            hdr.switchml.exponent != SWITCHML_EXPONENT_NONFINITE) ||
                           (hdr.switchml.next_exponent + 126 > 254 &&
                            hdr.switchml.next_exponent != SWITCHML_EXPONENT_NONFINITE)) {
                    meta.drop_reason = DROP_BAD_EXPONENT;
                } else {
                    aggregate.apply(hdr, meta, sm, switchml_events);
                }
            }
            if (meta.drop_reason != DROP_NONE) {
                switchml_drops.count((bit<32>)meta.drop_reason);
                mark_to_drop(sm);
            } else if (meta.absorbed == 1) {
                mark_to_drop(sm);
            } else {
                // A result or pending reply, from the endpoint's address.
                reply_addresses.apply(hdr, meta.switch_mac);
                if (meta.result_to_all == 1) {
                    sm.mcast_grp = meta.result_group;  // egress sets each destination
                } else {
                    sm.egress_spec = sm.ingress_port;
                }
            }
            return;
        }

        if (hdr.arp.isValid() && hdr.arp.opcode == 1 && arp_responder.apply().hit) {
            return;
        }
        if (hdr.ipv4.isValid() && router_macs.apply().hit) {
            if (sm.checksum_error == 1 || hdr.ipv4.ttl <= 1) {
                drop();
            } else {
                ipv4_routes.apply();
            }
            return;
        }
        l2_hosts.apply();
    }
}

control SwitchmlEgress(inout headers_t hdr, inout metadata_t meta,
                       inout standard_metadata_t sm) {
    action to_worker(bit<48> mac, bit<32> ip, bit<16> port) {
        hdr.ethernet.dst_addr = mac;
        hdr.ipv4.dst_addr = ip;
        hdr.udp.dst_port = port;
    }
    action drop() {
        mark_to_drop(sm);
    }
    // One entry per replica of a result group: replica id -> worker socket.
    table result_replicas {
        key = { sm.egress_rid: exact; }
        actions = { to_worker; drop; }
        default_action = drop();
        size = SWITCHML_MAX_SENDERS;
    }
    SwitchmlReplyAddresses() reply_addresses;
    apply {
        if (sm.instance_type == PKT_INSTANCE_TYPE_INGRESS_CLONE) {
            // The NACK ingress asked for (nack_lost): header and two bitmaps.
            reply_addresses.apply(hdr, meta.nack_switch_mac);
            hdr.switchml.msg_type = SWITCHML_TYPE_NACK;
            hdr.switchml.chunk = meta.nack_chunk;
            hdr.switchml.rank = SWITCHML_ALL_RANKS;
            hdr.switchml.slot = meta.nack_slot;
            hdr.switchml.element_count = 2;
            hdr.switchml.flags = meta.nack_version;
            hdr.switchml.exponent = 0;
            hdr.switchml.next_exponent = 0;
            hdr.data.setInvalid();
            hdr.nack.setValid();
            hdr.nack.lost = meta.nack_lost;
            hdr.nack.missing = 0;
            hdr.udp.length = 8 + SWITCHML_HEADER_BYTES + 8;
            hdr.ipv4.total_len = 20 + 8 + SWITCHML_HEADER_BYTES + 8;
        } else if (meta.flood == 1 && sm.egress_port == sm.ingress_port) {
            drop();
        } else if (meta.result_to_all == 1) {
            result_replicas.apply();
        }
    }
}

control SwitchmlComputeChecksum(inout headers_t hdr, inout metadata_t meta) {
    apply {
        update_checksum(hdr.ipv4.isValid(),
            { hdr.ipv4.version, hdr.ipv4.ihl, hdr.ipv4.diffserv, hdr.ipv4.total_len,
              hdr.ipv4.identification, hdr.ipv4.flags, hdr.ipv4.frag_offset, hdr.ipv4.ttl,
              hdr.ipv4.protocol, hdr.ipv4.src_addr, hdr.ipv4.dst_addr },
            hdr.ipv4.hdr_checksum, HashAlgorithm.csum16);
    }
}

control SwitchmlDeparser(packet_out pkt, in headers_t hdr) {
    apply {
        pkt.emit(hdr.ethernet);
        pkt.emit(hdr.arp);
        pkt.emit(hdr.ipv4);
        pkt.emit(hdr.udp);
        pkt.emit(hdr.switchml);
        pkt.emit(hdr.pending);
        pkt.emit(hdr.nack);
        pkt.emit(hdr.data);
    }
}

V1Switch(SwitchmlParser(), SwitchmlVerifyChecksum(), SwitchmlIngress(), SwitchmlEgress(),
         SwitchmlComputeChecksum(), SwitchmlDeparser()) main;
