// Parser states shared by the v1model and TNA parsers, from Ethernet on.
// Include inside a parser body whose `pkt` is the packet_in and `hdr` the
// headers_t; the architecture-specific start state transitions to
// parse_ethernet.
//
// Aggregation packets are IPv4 (no options, not fragmented) / UDP to a port
// in SWITCHML_UDP_PORT_BASE &&& SWITCHML_UDP_PORT_MASK. The first SWITCHML_K
// payload words are extracted only when element_count is
// SWITCHML_PACKET_ELEMENTS (SWITCHML_K unless the program processes larger
// packets in several passes, as the TNA one can); ingress validates every
// other field and counts what it drops. A packet too short for the switchml
// header leaves a parser error that ingress counts as malformed. Define
// SWITCHML_PARSE_HEADERS_ONLY to stop after the switchml header.

state parse_ethernet {
    pkt.extract(hdr.ethernet);
    transition select(hdr.ethernet.ether_type) {
        ETHERTYPE_IPV4: parse_ipv4;
        ETHERTYPE_ARP: parse_arp;
        default: accept;
    }
}

state parse_arp {
    pkt.extract(hdr.arp);
    transition accept;
}

state parse_ipv4 {
    pkt.extract(hdr.ipv4);
    transition select(hdr.ipv4.ihl, hdr.ipv4.frag_offset, hdr.ipv4.protocol) {
        (4w5, 13w0, IP_PROTOCOL_UDP): parse_udp;
        default: accept;
    }
}

state parse_udp {
    pkt.extract(hdr.udp);
    transition select(hdr.udp.dst_port) {
        SWITCHML_UDP_PORT_BASE &&& SWITCHML_UDP_PORT_MASK: parse_switchml;
        default: accept;
    }
}

#ifdef SWITCHML_PARSE_HEADERS_ONLY
// A parser that only rewrites headers (TNA egress) leaves the values as
// payload: Tofino 1's egress parser reaches 160 bytes into a packet.
state parse_switchml {
    pkt.extract(hdr.switchml);
    transition accept;
}
#else
state parse_switchml {
    pkt.extract(hdr.switchml);
    transition select(hdr.switchml.element_count) {
        SWITCHML_PACKET_ELEMENTS: parse_data;
        default: accept;
    }
}

state parse_data {
    pkt.extract(hdr.data);
    transition accept;
}
#endif
