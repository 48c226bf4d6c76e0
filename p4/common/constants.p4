// switchml P4 programs: compile-time constants shared by the v1model and TNA
// programs. Each can be overridden with -D at compile time; the control plane
// (switchml-switch --dataplane bmv2) must be started with matching values.
#ifndef SWITCHML_COMMON_CONSTANTS_P4_
#define SWITCHML_COMMON_CONSTANTS_P4_

// Elements (32-bit words) per packet: one register array per element. The
// software switch accepts any k; a P4 switch accepts exactly this one, and
// the control plane refuses jobs that ask for another (p4/README.md, "Limits").
#ifndef SWITCHML_K
#define SWITCHML_K 64
#endif
// Elements per packet: SWITCHML_K times the passes a packet takes through
// the pipeline (the TNA program's SWITCHML_PASS_BITS; one pass elsewhere).
#ifndef SWITCHML_PASS_BITS
#define SWITCHML_PASS_BITS 0
#endif
#define SWITCHML_PASSES (1 << SWITCHML_PASS_BITS)
#define SWITCHML_PACKET_ELEMENTS (SWITCHML_K * SWITCHML_PASSES)

// Slots in the pool shared by all jobs; every register array holds
// 2 * SWITCHML_POOL_SLOTS entries (the two versions of each slot).
#ifndef SWITCHML_POOL_SLOTS
#define SWITCHML_POOL_SLOTS 512
#endif

// Entries of the job and sender tables.
#ifndef SWITCHML_MAX_JOBS
#define SWITCHML_MAX_JOBS 64
#endif
#ifndef SWITCHML_MAX_SENDERS
#define SWITCHML_MAX_SENDERS 1024
#endif

// UDP destination ports that carry aggregation packets: base &&& mask, i.e.
// 48864..48879. Workers send to the base port; the others let an operator
// steer traffic (e.g. one port per worker thread) without reprogramming.
#define SWITCHML_UDP_PORT_BASE 16w0xBEE0
#define SWITCHML_UDP_PORT_MASK 16w0xFFF0

// The wire format (src/wire/wire_format.h, docs/wire-format.md).
#define SWITCHML_MAGIC 16w0x534D
#define SWITCHML_WIRE_VERSION 8w1
#define SWITCHML_TYPE_CONTRIBUTION 8w1
#define SWITCHML_TYPE_RESULT 8w2
#define SWITCHML_TYPE_PENDING 8w3
#define SWITCHML_TYPE_NACK 8w4
#define SWITCHML_TYPE_PROBE 8w5
#define SWITCHML_FLAG_VERSION 8w0x01
#define SWITCHML_FLAG_AUTHENTICATED 8w0x02
#define SWITCHML_FLAG_RESEND 8w0x04
// Flag bits no sender may set: a packet with one is malformed.
#define SWITCHML_FLAGS_RESERVED 8w0xF8
#define SWITCHML_ALL_RANKS 16w0xFFFF
#define SWITCHML_MAX_ELEMENTS 16w8192
#define SWITCHML_HEADER_BYTES 24
#define SWITCHML_AUTH_TAG_BYTES 28
// Valid exponents: -126..128, and 0x7FFF ("NaN or Inf in this chunk").
#define SWITCHML_EXPONENT_NONFINITE 16w0x7FFF

// Drop reasons: the numbering of switchml::DropReason (data_plane.h), so the
// control plane reports P4 counters under the same names.
#define DROP_NONE 8w0
#define DROP_MALFORMED 8w1
#define DROP_NOT_CONTRIBUTION 8w2
#define DROP_UNKNOWN_JOB 8w3
#define DROP_RANK_OUT_OF_RANGE 8w4
#define DROP_SLOT_OUT_OF_RANGE 8w5
#define DROP_ELEMENT_COUNT 8w6
#define DROP_BAD_EXPONENT 8w7
#define DROP_STALE_CHUNK 8w8
#define DROP_CHUNK_MISMATCH 8w9
#define DROP_EXPONENT_MISMATCH 8w10
#define DROP_SOURCE_MISMATCH 8w11
#define DROP_BAD_MAC 8w12
#define DROP_VERSION_CONFLICT 8w13
#define SWITCHML_NUM_DROP_REASONS 16

// Event counters (indexes of the switchml_events counter): the fields of
// switchml::DataPlaneCounters.
#define EVENT_PACKETS 0
#define EVENT_CONTRIBUTIONS 1
#define EVENT_SLOTS_COMPLETED 2
#define EVENT_RESULTS_RESENT 3
#define EVENT_PENDING_REPLIES 4
// Counted by the software switch in a tree of switches only (the P4 programs
// do not forward upstream; docs/design.md §10).
#define EVENT_UPSTREAM_SENT 5
#define EVENT_UPSTREAM_RESENT 6
#define EVENT_UPSTREAM_RESULTS 7
// NACKs sent: the software switch's for stalled slots, the v1model program's
// for packets its rank's next chunk overtook (TNA on Tofino 2 counts its own in
// switchml_nacks_sent; Tofino 1 sends none).
#define EVENT_NACKS_SENT 8
#define SWITCHML_NUM_EVENTS 9

#define ETHERTYPE_IPV4 16w0x0800
#define ETHERTYPE_ARP 16w0x0806
#define IP_PROTOCOL_UDP 8w17

#endif  // SWITCHML_COMMON_CONSTANTS_P4_
