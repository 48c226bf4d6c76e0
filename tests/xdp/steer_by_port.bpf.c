// Flow steering for tests/xdp/af_xdp_end_to_end, as an ntuple rule does it
// on a NIC: on the egress of a bridge port (tc, direct action), UDP to
// (BY_DEST) or from (else) port BASE + t, t < THREADS, leaves by the queue
// that brings it to receive queue FIRST_QUEUE + t of the host's veth. Built
// by the test: clang -target bpf -DBASE=.. -DTHREADS=.. -DFIRST_QUEUE=..
// -DBY_DEST=0|1.
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/pkt_cls.h>
#include <linux/udp.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

SEC("tc")
int steer_by_port(struct __sk_buff* skb) {
  void* data = (void*)(long)skb->data;
  void* end = (void*)(long)skb->data_end;
  struct ethhdr* eth = data;
  if ((void*)(eth + 1) > end || eth->h_proto != bpf_htons(ETH_P_IP)) return TC_ACT_OK;
  struct iphdr* ip = (void*)(eth + 1);
  if ((void*)(ip + 1) > end || ip->ihl != 5 || ip->protocol != IPPROTO_UDP) return TC_ACT_OK;
  struct udphdr* udp = (void*)(ip + 1);
  if ((void*)(udp + 1) > end) return TC_ACT_OK;
  const __u16 port = bpf_ntohs(BY_DEST ? udp->dest : udp->source);
  // The kernel takes a set queue_mapping as the receive queue recorded plus
  // one, and a bridge port without XPS transmits on the recorded queue
  // (skb_tx_hash), which veth delivers on the peer's queue of that number.
  if (port >= BASE && port < BASE + THREADS) skb->queue_mapping = FIRST_QUEUE + (port - BASE) + 1;
  return TC_ACT_OK;
}

char _license[] SEC("license") = "GPL";
