// Declarations of the TNA externs and intrinsic metadata that
// p4/tna/switchml.p4 uses, written from Intel's public TNA documentation, so
// that p4c's open frontend and midend (p4test) can check the program where
// the SDE's tna.p4 is not installed. Not for building: bf-p4c uses the real one.
#include <core.p4>
typedef bit<9> PortId_t;
const bit<32> PORT_METADATA_SIZE = 64;
enum CounterType_t { PACKETS, BYTES, PACKETS_AND_BYTES }
header ingress_intrinsic_metadata_t { bit<1> resubmit_flag; bit<1> _pad1; bit<2> packet_version; bit<3> _pad2; PortId_t ingress_port; bit<48> ingress_mac_tstamp; }
struct ingress_intrinsic_metadata_from_parser_t { bit<48> global_tstamp; bit<32> global_ver; bit<16> parser_err; }
struct ingress_intrinsic_metadata_for_deparser_t { bit<3> drop_ctl; bit<3> digest_type; bit<3> resubmit_type; bit<3> mirror_type; }
struct ingress_intrinsic_metadata_for_tm_t { PortId_t ucast_egress_port; bit<1> bypass_egress; bit<1> deflect_on_drop; bit<3> ingress_cos; bit<5> qid; bit<3> icos_for_copy_to_cpu; bit<1> copy_to_cpu; bit<2> packet_color; bit<1> disable_ucast_cutthru; bit<1> enable_mcast_cutthru; bit<16> mcast_grp_a; bit<16> mcast_grp_b; bit<13> level1_mcast_hash; bit<13> level2_mcast_hash; bit<16> level1_exclusion_id; bit<9> level2_exclusion_id; bit<16> rid; }
header egress_intrinsic_metadata_t { bit<7> _pad0; PortId_t egress_port; bit<16> egress_rid; }
struct egress_intrinsic_metadata_from_parser_t { bit<48> global_tstamp; bit<32> global_ver; bit<16> parser_err; }
struct egress_intrinsic_metadata_for_deparser_t { bit<3> drop_ctl; bit<3> mirror_type; }
struct egress_intrinsic_metadata_for_output_port_t { bit<1> capture_tstamp_on_tx; }
extern Checksum { Checksum(); bit<16> update<T>(in T data); }
extern Counter<W, I> { Counter(bit<32> size, CounterType_t type); void count(in I index); }
extern Register<T, I> { Register(bit<32> size); }
extern RegisterAction<T, I, U> { RegisterAction(Register<T, I> reg); U execute(in I index); abstract void apply(inout T value, @optional out U rv); U predicate(@optional in bool cmplo, @optional in bool cmphi); }
parser IngressParserT<H, M>(packet_in pkt, out H hdr, out M md, out ingress_intrinsic_metadata_t ig_intr_md);
control IngressT<H, M>(inout H hdr, inout M md, in ingress_intrinsic_metadata_t ig_intr_md, in ingress_intrinsic_metadata_from_parser_t ig_prsr_md, inout ingress_intrinsic_metadata_for_deparser_t ig_dprsr_md, inout ingress_intrinsic_metadata_for_tm_t ig_tm_md);
control IngressDeparserT<H, M>(packet_out pkt, inout H hdr, in M md, in ingress_intrinsic_metadata_for_deparser_t ig_dprsr_md);
parser EgressParserT<H, M>(packet_in pkt, out H hdr, out M md, out egress_intrinsic_metadata_t eg_intr_md);
control EgressT<H, M>(inout H hdr, inout M md, in egress_intrinsic_metadata_t eg_intr_md, in egress_intrinsic_metadata_from_parser_t eg_prsr_md, inout egress_intrinsic_metadata_for_deparser_t eg_dprsr_md, inout egress_intrinsic_metadata_for_output_port_t eg_oport_md);
control EgressDeparserT<H, M>(packet_out pkt, inout H hdr, in M md, in egress_intrinsic_metadata_for_deparser_t eg_dprsr_md);
package Pipeline<IH, IM, EH, EM>(IngressParserT<IH, IM> ingress_parser, IngressT<IH, IM> ingress, IngressDeparserT<IH, IM> ingress_deparser, EgressParserT<EH, EM> egress_parser, EgressT<EH, EM> egress, EgressDeparserT<EH, EM> egress_deparser);
package Switch<IH0, IM0, EH0, EM0>(Pipeline<IH0, IM0, EH0, EM0> pipe0);
