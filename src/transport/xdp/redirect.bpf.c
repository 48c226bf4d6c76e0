// The XDP program of the AF_XDP transport: redirects switchml's data traffic
// (UDP to a port in `ports`, on the address stored with it, 0 for any) to the
// AF_XDP socket of the receive queue it arrived on, when that queue belongs
// to the port's endpoint (queue % stride == first); and passes everything
// else to the kernel: ARP, ICMP, the gRPC control connection, other UDP, and
// a port's frames that came on a sibling endpoint's queue (no flow steering),
// which reach the endpoint through its kernel socket. A queue without a
// socket passes too. Attached by a BPF link the process holds, so the kernel
// removes it when the process exits, however it exits.
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/udp.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

struct {
  __uint(type, BPF_MAP_TYPE_XSKMAP);
  __uint(max_entries, 256);  // receive queues: kMaxQueues
  __type(key, __u32);
  __type(value, __u32);
} switchml_xsks SEC(".maps");

// One endpoint's port: its IPv4 address (network order; 0: any) and its
// queues. The same layout as PortEntry in af_xdp_transport.cc.
struct port_entry {
  __u32 address;
  __u32 stride;  // the endpoint's siblings on the interface, >= 1
  __u32 first;   // its queues: q % stride == first
};

// UDP port (network order) -> its endpoint.
struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __uint(max_entries, 256);
  __type(key, __u16);
  __type(value, struct port_entry);
} switchml_ports SEC(".maps");

SEC("xdp")
int switchml_redirect(struct xdp_md* ctx) {
  void* data = (void*)(long)ctx->data;
  void* end = (void*)(long)ctx->data_end;
  struct ethhdr* eth = data;
  if ((void*)(eth + 1) > end || eth->h_proto != bpf_htons(ETH_P_IP)) return XDP_PASS;
  struct iphdr* ip = (void*)(eth + 1);
  if ((void*)(ip + 1) > end || ip->ihl != 5 || ip->protocol != IPPROTO_UDP) return XDP_PASS;
  if (ip->frag_off & bpf_htons(0x3FFF)) return XDP_PASS;  // fragments: the kernel's
  struct udphdr* udp = (void*)(ip + 1);
  if ((void*)(udp + 1) > end) return XDP_PASS;
  __u16 port = udp->dest;
  struct port_entry* entry = bpf_map_lookup_elem(&switchml_ports, &port);
  if (!entry || (entry->address != 0 && entry->address != ip->daddr)) return XDP_PASS;
  if (entry->stride == 0 || ctx->rx_queue_index % entry->stride != entry->first) return XDP_PASS;
  return bpf_redirect_map(&switchml_xsks, ctx->rx_queue_index, XDP_PASS);
}

char _license[] SEC("license") = "GPL";
