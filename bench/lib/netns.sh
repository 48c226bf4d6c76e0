# Shared by the network-namespace benchmarks (bench/netns_*) and tests: a
# private network of hosts on one bridge, 10.99.0.x addresses that exist only
# inside the namespaces. Source it, call netns_init TAG, then netns_host NAME
# ADDR for each host. Everything is removed on exit. A script that builds its
# own topology calls netns_begin TAG instead and names its namespaces TAG-*.
#
# Needs root, iproute2; the caller checks and exits 77 (skipped) otherwise.

# netns_begin TAG: on exit, stop $NETNS_PIDS and everything still running in
# the namespaces TAG-*, delete them, and eval $NETNS_CLEANUP_EXTRA.
netns_begin() {
  NETNS_TAG=$1
  NETNS_PIDS=()
  trap netns_cleanup EXIT
}

netns_init() {
  netns_begin "$1"
  NETNS_BRIDGE=$NETNS_TAG-br
  ip netns add "$NETNS_BRIDGE" 2>/dev/null || { echo "SKIPPED: cannot create network namespaces" >&2; exit 77; }
  ip netns exec "$NETNS_BRIDGE" ip link add br0 type bridge
  ip netns exec "$NETNS_BRIDGE" ip link set br0 up
}

# netns_host NAME ADDRESS [MTU] [QUEUES]: namespace $NETNS_TAG-NAME with eth0
# at ADDRESS/24 on the bridge, with QUEUES (default 1) transmit and receive
# queues on both ends of its link. The bridge side of it is $NETNS_TAG-NAMEb.
netns_host() {
  local name=$1 addr=$2 mtu=${3:-9000} queues=${4:-1} ns=$NETNS_TAG-$1
  ip netns add "$ns"
  ip link add "$NETNS_TAG-$name" numtxqueues "$queues" numrxqueues "$queues" type veth \
    peer name "$NETNS_TAG-${name}b" numtxqueues "$queues" numrxqueues "$queues"
  ip link set "$NETNS_TAG-$name" netns "$ns"
  ip link set "$NETNS_TAG-${name}b" netns "$NETNS_BRIDGE"
  ip netns exec "$NETNS_BRIDGE" ip link set "$NETNS_TAG-${name}b" master br0 mtu "$mtu" up
  ip netns exec "$ns" ip link set lo up
  ip netns exec "$ns" ip link set "$NETNS_TAG-$name" name eth0
  ip netns exec "$ns" ip link set eth0 mtu "$mtu" up
  ip netns exec "$ns" ip addr add "$addr/24" dev eth0
}

# netns_steer NAME QUEUE: frames to host NAME (made with QUEUES > QUEUE) leave
# the bridge by transmit queue QUEUE of its link, from every CPU (XPS), so they
# arrive on receive queue QUEUE of its eth0 (QUEUE - 1 where its XDP program
# runs in generic mode, which counts from the recorded queue).
netns_steer() {
  local name=$1 queue=$2 cpus
  cpus=$(python3 -c 'import os; h = format((1 << os.cpu_count()) - 1, "x")
print(",".join(h[max(0, i - 8):i] for i in reversed(range(len(h), 0, -8))))')
  ip netns exec "$NETNS_BRIDGE" sh -c "echo $cpus > /sys/class/net/$NETNS_TAG-${name}b/queues/tx-$queue/xps_cpus"
}

# netns_shape NAME RATE: limits host NAME's link to RATE (tc syntax, e.g.
# 200mbit) in both directions, with a token bucket on each end of its veth.
netns_shape() {
  local name=$1 rate=$2
  ip netns exec "$NETNS_TAG-$name" tc qdisc replace dev eth0 root tbf rate "$rate" burst 256kb latency 200ms
  ip netns exec "$NETNS_BRIDGE" tc qdisc replace dev "$NETNS_TAG-${name}b" root tbf rate "$rate" burst 256kb latency 200ms
}

# netns_background NAME COMMAND...: runs COMMAND in host NAME, stopped on exit.
netns_background() {
  local name=$1
  shift
  ip netns exec "$NETNS_TAG-$name" "$@" &
  NETNS_PIDS+=($!)
}

# netns_wait_listening NAME ADDRESS PORT: waits (up to 10 s) until a TCP
# server listens at ADDRESS:PORT, as seen from host NAME.
netns_wait_listening() {
  local ns=$NETNS_TAG-$1 i
  for ((i = 0; i < 1000; i++)); do
    ip netns exec "$ns" bash -c "exec 3<>/dev/tcp/$2/$3" 2>/dev/null && return 0
    sleep 0.01
  done
  echo "nothing listens at $2:$3 after 10 s" >&2
  return 1
}

netns_cleanup() {
  for pid in "${NETNS_PIDS[@]}"; do { kill "$pid" && wait "$pid"; } 2>/dev/null || true; done
  # Anything still running inside our namespaces (e.g. MPI daemons) is ours.
  for ns in $(ip netns list | awk '{print $1}' | grep "^$NETNS_TAG-"); do
    ip netns pids "$ns" | xargs -r kill 2>/dev/null || true
    ip netns del "$ns"
  done
  [[ -n ${NETNS_CLEANUP_EXTRA:-} ]] && eval "$NETNS_CLEANUP_EXTRA"
  return 0
}
