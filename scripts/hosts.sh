#!/usr/bin/env bash
# hosts.sh: several "hosts" on this one machine, for running osdp across a real, shaped network.
#
#   scripts/hosts.sh up N [--rate R] [--burst B]   N network namespaces osdp-h0 .. osdp-h<N-1>
#   scripts/hosts.sh down                          remove everything `up` made
#   scripts/hosts.sh mpirun ARGS...                mpirun across them (ARGS as for mpirun: -np ...)
#   scripts/hosts.sh run -- CMD...                 CMD with $HOSTS_MPIRUN set to that mpirun
#   scripts/hosts.sh status                        what exists now
#
# Each host is a network namespace with loopback up and one address on 10.231.7.0/24, a private
# subnet that exists only inside this machine: host i is 10.231.7.(i+1), linked by a veth pair to
# the bridge osdp-hbr (in the root namespace, without an address there). mpirun runs in one more
# namespace, osdp-hhead (10.231.7.254, its link unshaped), so that the root namespace has no
# address on the subnet and TCP there is left as it is. Each host's link is
# shaped by tbf in both directions (its egress inside the namespace, its ingress as the bridge
# side's egress) to --rate (default 1gbit). OpenMPI starts its daemons in the namespaces through a
# launch agent (plm_rsh_agent: `ip netns exec osdp-hI ...`), keeps TCP on the subnet
# (oob/btl_tcp_if_include) and uses shared memory only between ranks of one host: the hostfile
# names hosts by address, so OpenMPI sees N nodes. Its daemons' TCP keepalive is short (5 s
# idle, 3 probes 2 s apart; OpenMPI's default is 8 minutes), so that when a link is cut the job
# ends soon after osdp's watchdog aborts it, instead of mpirun waiting for a daemon it can no
# longer reach. The hosts share this machine's cores, so a rank waiting on the network yields its
# core (mpi_yield_when_idle) instead of spinning on it while another host's rank computes.
# Files: /tmp/osdp-hosts/ (hostfile, agent).
#
# Idempotent: `up` first removes what an earlier `up` left; a failed `up` removes what it made.
# Where namespaces cannot be made (not root, no `ip`) it says why in one line and exits 77, so
# tests can skip. Nothing is sent anywhere but between these namespaces.
set -u
# Names, subnet and state directory; tests set their own (HOSTS_PREFIX=osdp-t, HOSTS_SUBNET=
# 10.231.8, HOSTS_STATE=their temporary directory) so that they never touch a user's hosts.
PREFIX=${HOSTS_PREFIX:-osdp-h}
BRIDGE=${PREFIX}br
SUBNET=${HOSTS_SUBNET:-10.231.7}
STATE=${HOSTS_STATE:-/tmp/osdp-hosts}

die() { echo "hosts.sh: $*" >&2; exit 1; }

# Why namespaces cannot be made here, or nothing.
cannot() {
  [ "$(id -u)" = 0 ] || { echo "not root (network namespaces need root)"; return; }
  command -v ip >/dev/null || { echo "no 'ip' command (apt-get install iproute2)"; return; }
  command -v tc >/dev/null || { echo "no 'tc' command (apt-get install iproute2)"; return; }
  ip netns add "${PREFIX}-probe" 2>/dev/null || { echo "cannot create a network namespace here"; return; }
  ip netns del "${PREFIX}-probe"
}

# The namespaces, veths and bridge that exist now (ours only: by name).
ours_ns() { ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^${PREFIX}([0-9]+|head)$"; }
ours_links() { ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | sed 's/@.*//' | grep -E "^(${PREFIX}v([0-9]+|head)|${BRIDGE})$"; }

# net NS ADDR V: namespace NS with loopback, and eth0 at ADDR linked as V to the bridge. TCP gives
# up on an unanswered peer after ~13 s (tcp_retries2 5, this namespace only; the default, 15,
# waits a quarter of an hour), so a cut link ends connections, and with them the job.
net() {
  ip netns add "$1"
  ip link add "$3" type veth peer name eth0 netns "$1"
  ip link set "$3" master "$BRIDGE" up
  ip netns exec "$1" ip link set lo up
  ip netns exec "$1" ip addr add "$2/24" dev eth0
  ip netns exec "$1" ip link set eth0 up
  ip netns exec "$1" sysctl -q -w net.ipv4.tcp_retries2=5
}

down() {
  for ns in $(ours_ns); do ip netns del "$ns" 2>/dev/null; done   # takes its veth end along
  for l in $(ours_links); do ip link del "$l" 2>/dev/null; done
  rm -rf "$STATE"
}

# shape DEV RATE BURST [NS]: tbf on DEV's egress (inside namespace NS when given).
shape() {
  local pre=(); [ $# -ge 4 ] && pre=(ip netns exec "$4")
  "${pre[@]}" tc qdisc replace dev "$1" root tbf rate "$2" burst "$3" latency 100ms
}

up() {
  local n=$1 rate=$2 burst=$3
  local why; why=$(cannot)
  if [ -n "$why" ]; then echo "hosts.sh: cannot make hosts: $why" >&2; exit 77; fi
  down
  trap 'down; exit 1' ERR
  set -E
  ip link add "$BRIDGE" type bridge
  ip link set "$BRIDGE" up
  net "${PREFIX}head" "$SUBNET.254" "${PREFIX}vhead"
  mkdir -p "$STATE"
  : >"$STATE/hostfile"
  for i in $(seq 0 $((n - 1))); do
    local ns="$PREFIX$i" v="${PREFIX}v$i" addr="$SUBNET.$((i + 1))"
    net "$ns" "$addr" "$v"
    shape eth0 "$rate" "$burst" "$ns"   # host -> bridge
    shape "$v" "$rate" "$burst"         # bridge -> host
    echo "$addr slots=64" >>"$STATE/hostfile"
  done
  # The launch agent: OpenMPI calls it as `agent HOST COMMAND...` (as it would call ssh).
  # Each host also gets its own host name (a UTS namespace): OpenMPI names its session directory
  # and shared-memory segments by host name, and two hosts called alike would share them.
  # It also plays ssh's keepalive (ServerAliveInterval 2, ServerAliveCountMax 5): while the
  # daemon runs it looks at the host's link every 2 s, and when the link has been down for 10 s
  # it ends the daemon and exits 255, as ssh does when its connection is lost; mpirun then
  # knows the host is gone and ends the job (a daemon behind a cut link would otherwise keep
  # mpirun waiting for its TCP retransmissions, a quarter of an hour).
  cat >"$STATE/agent" <<EOF
#!/bin/sh
host=\$1; shift
i=\${host##$SUBNET.}; i=\$((i - 1)); ns=$PREFIX\$i
ip netns exec \$ns unshare --uts sh -c "hostname \$ns && \$*" &
daemon=\$!
down=0
while kill -0 \$daemon 2>/dev/null; do
  sleep 2
  if ip netns exec \$ns cat /sys/class/net/eth0/operstate 2>/dev/null | grep -q '^up\$'; then down=0
  else down=\$((down + 1)); fi
  if [ \$down -ge 5 ]; then
    echo "hosts.sh agent: the link of host \$ns has been down for 10 s: its daemon is lost" >&2
    ip netns pids \$ns | xargs -r kill -9 2>/dev/null
    exit 255
  fi
done
wait \$daemon
EOF
  chmod +x "$STATE/agent"
  echo "$rate" >"$STATE/rate"
  trap - ERR
  echo "hosts.sh: $n hosts ${PREFIX}0..${PREFIX}$((n - 1)) on $SUBNET.0/24, links shaped to $rate (burst $burst)"
}

# The mpirun command line across the hosts, one word per line.
mpirun_words() {
  [ -f "$STATE/hostfile" ] || die "no hosts: run 'scripts/hosts.sh up N' first"
  printf '%s\n' ip netns exec "${PREFIX}head" mpirun --hostfile "$STATE/hostfile" --mca plm_rsh_agent "$STATE/agent" \
    --mca oob_tcp_if_include "$SUBNET.0/24" --mca btl_tcp_if_include "$SUBNET.0/24" \
    --mca btl self,vader,tcp --oversubscribe -x OMPI_ALLOW_RUN_AS_ROOT -x OMPI_ALLOW_RUN_AS_ROOT_CONFIRM \
    --mca oob_tcp_keepalive_time 5 --mca oob_tcp_keepalive_intvl 2 --mca oob_tcp_keepalive_probes 3 \
    --mca mpi_yield_when_idle 1
}

cmd=${1:-}; shift || true
case "$cmd" in
  up)
    n=${1:?usage: hosts.sh up N [--rate R] [--burst B]}; shift
    [[ "$n" =~ ^[1-9][0-9]?$ ]] || die "up: N '$n' must be 1..99"
    rate=1gbit; burst=1mb
    while [ $# -gt 0 ]; do
      case "$1" in
        --rate) rate=${2:?--rate needs a value, e.g. 1gbit}; shift 2 ;;
        --burst) burst=${2:?--burst needs a value, e.g. 1mb}; shift 2 ;;
        *) die "up: unknown option '$1' (use --rate R, --burst B)" ;;
      esac
    done
    up "$n" "$rate" "$burst" ;;
  down) down; echo "hosts.sh: removed" ;;
  mpirun)
    mapfile -t words < <(mpirun_words) || exit 1
    [ ${#words[@]} -gt 0 ] || exit 1
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    exec "${words[@]}" "$@" ;;
  run)
    [ "${1:-}" = "--" ] && shift
    [ $# -gt 0 ] || die "run: give a command: hosts.sh run -- CMD..."
    HOSTS_MPIRUN=$(mpirun_words | tr '\n' ' ') || exit 1
    export HOSTS_MPIRUN OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    exec "$@" ;;
  status)
    echo "namespaces: $(ours_ns | tr '\n' ' ')"
    echo "links: $(ours_links | tr '\n' ' ')"
    for ns in $(ours_ns); do ip netns exec "$ns" tc qdisc show dev eth0 2>/dev/null | sed "s/^/$ns: /"; done ;;
  *) echo "usage: hosts.sh up N [--rate R] [--burst B] | down | mpirun ARGS... | run -- CMD... | status" >&2; exit 2 ;;
esac
