// Packet headers of the switchml P4 programs (shared by v1model and TNA).
// The switchml header mirrors src/wire/wire_format.h field by field.
#ifndef SWITCHML_COMMON_HEADERS_P4_
#define SWITCHML_COMMON_HEADERS_P4_

#include "constants.p4"
#include "elements.p4"

header ethernet_h {
    bit<48> dst_addr;
    bit<48> src_addr;
    bit<16> ether_type;
}

header arp_h {
    bit<16> hw_type;
    bit<16> proto_type;
    bit<8>  hw_len;
    bit<8>  proto_len;
    bit<16> opcode;
    bit<48> sender_hw;
    bit<32> sender_ip;
    bit<48> target_hw;
    bit<32> target_ip;
}

header ipv4_h {
    bit<4>  version;
    bit<4>  ihl;
    bit<8>  diffserv;
    bit<16> total_len;
    bit<16> identification;
    bit<3>  flags;
    bit<13> frag_offset;
    bit<8>  ttl;
    bit<8>  protocol;
    bit<16> hdr_checksum;
    bit<32> src_addr;
    bit<32> dst_addr;
}

header udp_h {
    bit<16> src_port;
    bit<16> dst_port;
    bit<16> length;
    bit<16> checksum;
}

// 24 bytes; see docs/wire-format.md for each field's meaning.
header switchml_h {
    bit<16> magic;
    bit<8>  wire_version;
    bit<8>  msg_type;
    bit<32> job;
    bit<32> chunk;
    bit<16> rank;
    bit<16> slot;
    bit<16> element_count;
    bit<8>  flags;          // bit 0: pool version; bit 1: a MAC follows
    bit<8>  reserved;
    bit<16> exponent;       // int16
    bit<16> next_exponent;  // int16
}

// The payload of a pending reply: the seen-bitmap of the slot (one word: the
// P4 programs support up to 32 workers per job). Emitted, never parsed.
header switchml_pending_h {
    bit<32> bitmap;
}

// The payload of a NACK (docs/wire-format.md, "Loss recovery"): its two
// bitmaps of one word each (up to 32 workers). Emitted, never parsed.
header switchml_nack_h {
    bit<32> lost;     // bitmap 1: the named ranks' packet was overtaken, so lost
    bit<32> missing;  // bitmap 2: the other missing ranks named
}

// The k payload words (int32, network order), one field per element.
#define SWITCHML_DATA_FIELD(i) bit<32> d##i;
header switchml_data_h {
    SWITCHML_FOR_EACH_ELEMENT(SWITCHML_DATA_FIELD)
}
#undef SWITCHML_DATA_FIELD

// The headers every program parses and emits, in wire order (a macro, so an
// architecture's own struct can put headers of its own in front).
#define SWITCHML_HEADER_FIELDS      \
    ethernet_h         ethernet;    \
    arp_h              arp;         \
    ipv4_h             ipv4;        \
    udp_h              udp;         \
    switchml_h         switchml;    \
    switchml_pending_h pending;     \
    switchml_data_h    data;

struct headers_t {
    SWITCHML_HEADER_FIELDS
    switchml_nack_h nack;  // v1model: the NACKs it sends (emitted after `pending`)
}

#endif  // SWITCHML_COMMON_HEADERS_P4_
