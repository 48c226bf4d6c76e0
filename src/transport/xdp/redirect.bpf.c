// The XDP program of the AF_XDP transport: redirects switchml's data traffic
// (UDP to a port in `ports`, on the address stored with it, 0 for any) to the
// AF_XDP socket of the receive queue it arrived on, and passes everything
// else (ARP, ICMP, the gRPC control connection, other UDP) to the kernel.
// A queue without a socket passes too. Attached by a BPF link the process
// holds, so the kernel removes it when the process exits, however it exits.
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

// UDP port (network order) -> IPv4 address (network order; 0: any).
struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __uint(max_entries, 256);
  __type(key, __u16);
  __type(value, __u32);
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
  __u32* address = bpf_map_lookup_elem(&switchml_ports, &port);
  if (!address || (*address != 0 && *address != ip->daddr)) return XDP_PASS;
  return bpf_redirect_map(&switchml_xsks, ctx->rx_queue_index, XDP_PASS);
}

char _license[] SEC("license") = "GPL";
