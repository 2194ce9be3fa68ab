#!/usr/bin/env bash
# hosts.sh OSDP PLAN_TOOL: osdp across 2 "hosts" (network namespaces made by scripts/hosts.sh,
# with their own names and subnet, never a user's), 2 ranks each, over a link shaped to 1 Gbit/s:
#  - OpenMPI puts ranks 0,1 on one host and 2,3 on the other, and osdp sees 2 ranks per host;
#  - a hybrid run (zero3 sharded within each host, replicated across) reproduces the losses of
#    one process on the same global batch within 1e-5, every rank's peak equal to the prediction;
#  - faults over the network, each ending the job non-zero within 60 s naming the host: the link
#    of one host cut (`ip link set eth0 down` inside it) mid-run, one host's ranks killed, one
#    host's ranks stopped (SIGSTOP); the newest checkpoint of the cut run resumes on one host
#    (4 ranks -> 2, resharded to zero2) within 1e-5 of one process's losses;
#  - `hosts.sh down` leaves no namespace, link or bridge behind.
# Skipped (exit 77, with the reason) where namespaces cannot be made.
set -u
OSDP=${1:?usage: hosts.sh OSDP PLAN_TOOL}; tool=$(cd "${2%/*}" && pwd)/${2##*/}
here=$(cd "${BASH_SOURCE%/*}/.." && pwd)
source "${BASH_SOURCE%/*}/cli_common.sh"
export HOSTS_PREFIX=osdp-t HOSTS_SUBNET=10.231.8 HOSTS_STATE="$W/hosts"
H="$here/scripts/hosts.sh"
bash "$H" up 2 --rate 1gbit >up.txt 2>&1
rc=$?
if [ "$rc" -eq 77 ]; then cat up.txt; echo "skipped"; exit 77; fi
trap 'bash "$H" down >/dev/null 2>&1; rm -rf "$W"' EXIT
if [ "$rc" -eq 0 ]; then ok; else bad "hosts.sh up 2: $(cat up.txt)"; exit 1; fi

# Where the ranks are.
bash "$H" mpirun -np 4 --map-by ppr:2:node sh -c \
  'echo "$OMPI_COMM_WORLD_RANK $(ip -o -4 addr show eth0 | awk "{print \$4}")"' 2>err.txt | sort >where.txt
if [ "$(cat where.txt)" = "$(printf '0 10.231.8.1/24\n1 10.231.8.1/24\n2 10.231.8.2/24\n3 10.231.8.2/24')" ]; then ok
else bad "ranks not placed 2 per host: $(cat where.txt) $(head -2 err.txt)"; fi

# A hybrid run across the hosts against one process.
C=(train --model tiny --seq 32 --steps 8 --quiet --json --eval-batches 0)
"$OSDP" "${C[@]}" --batch 8 --log one.jsonl >/dev/null 2>&1
if bash "$H" mpirun -np 4 --map-by ppr:2:node "$OSDP" "${C[@]}" --plan zero3 --shard-group 2 --batch 2 \
     --log four.jsonl >four.out 2>err.txt && out=$("$tool" losses one.jsonl four.jsonl 1e-5); then ok
else bad "hybrid run across 2 hosts: ${out:-} $(grep -m2 . err.txt)"; fi
pk=$(grep -o '"peak_bytes":[0-9]*' four.out | cut -d: -f2)
pp=$(grep -o '"predicted_peak_bytes":[0-9]*' four.out | cut -d: -f2)
off=$(grep -o '"ranks_off_prediction":[0-9]*' four.out | cut -d: -f2)
if [ -n "$pk" ] && [ "$pk" = "$pp" ] && [ "$off" = 0 ]; then ok
else bad "peaks across hosts: measured ${pk:-?}, predicted ${pp:-?}, ranks off ${off:-?}"; fi
if grep -q '"ranks_per_host":2,' four.out; then ok
else bad "osdp did not see 2 ranks per host: $(grep -o '"ranks_per_host":[0-9]*' four.out)"; fi

# fault NAME PATTERN ACTION: a 2 x 2 hybrid run checkpointing every 5 steps; once a checkpoint
# of step 10 or later is written, ACTION (a command) hits host 1; the job must end non-zero
# within 60 s with PATTERN.
fault() {
  local name=$1 pat=$2 action=$3 d="ck-$1"
  local start; start=$(date +%s)
  bash "$H" mpirun -np 4 --map-by ppr:2:node "$OSDP" train --model tiny --seq 32 --batch 2 --plan zero3 \
    --shard-group 2 --steps 100000 --checkpoint "$d" --checkpoint-every 5 --watchdog 5 --quiet \
    --eval-batches 0 >"$name.out" 2>&1 &
  local job=$!
  # Any checkpoint from step 10 on: --keep 2 prunes step-10 itself 10 steps later, a few
  # milliseconds for tiny, which a poll can miss (the run then trained on for the whole wait).
  for _ in $(seq 600); do
    ls "$d" 2>/dev/null | grep -Eq '^step-[1-9][0-9]+$' && break
    kill -0 "$job" 2>/dev/null || break
    sleep 0.1
  done
  local hit; hit=$(date +%s)
  eval "$action"
  for _ in $(seq 90); do kill -0 "$job" 2>/dev/null || break; sleep 1; done
  kill -0 "$job" 2>/dev/null && kill -9 "$job"
  wait "$job"
  local rc=$? took=$(( $(date +%s) - hit ))
  echo "  $name: exit $rc, ${took} s after the fault: $(grep -m1 -E "$pat" "$name.out" | cut -c1-120)"
  if [ "$rc" -ne 0 ] && [ "$took" -le 60 ] && grep -Eq "$pat" "$name.out"; then ok
  else bad "$name: exit $rc ${took}s after the fault: $(grep -m2 -E 'error|noticed' "$name.out")"; fi
}
rank_pids() { ip netns pids osdp-t1 | while read -r p; do [ "$(cat /proc/"$p"/comm)" = osdp ] && echo "$p"; done; }
fault cut "rank [23] on host osdp-t1 has not answered" "ip netns exec osdp-t1 ip link set eth0 down"
ip netns exec osdp-t1 ip link set eth0 up
fault killed "osdp-t1|10\.231\.8\.2" 'kill -9 $(rank_pids)'
fault stopped "rank [23] on host osdp-t1 has not answered" 'kill -STOP $(rank_pids)'
for p in $(rank_pids); do kill -CONT "$p"; kill -9 "$p"; done 2>/dev/null

# The cut run's newest checkpoint resumes on one host: 2 ranks, zero2 at micro-batch 4, against
# one process at batch 8 from the same step.
newest=$(ls ck-cut | sed -n 's/^step-\([0-9]*\)$/\1/p' | sort -n | tail -n 1)
end=$((newest + 4))
R=(train --model tiny --seq 32 --steps "$end" --quiet --eval-batches 0)
"$OSDP" "${R[@]}" --batch 8 --log solo.jsonl >/dev/null 2>&1
awk -v from="$newest" -F'"step":' 'NF > 1 { split($2, a, ","); if (a[1] + 0 > from) print }' solo.jsonl >solo-tail.jsonl
if [ -n "$newest" ] && bash "$H" mpirun -np 2 --map-by ppr:2:node "$OSDP" "${R[@]}" --plan zero2 --batch 4 \
     --resume ck-cut --log res.jsonl >/dev/null 2>err.txt && [ "$(wc -l <solo-tail.jsonl)" -eq 4 ] &&
   out=$("$tool" losses solo-tail.jsonl res.jsonl 1e-5); then ok
else bad "the cut run's step-${newest:-?} resumed on one host: ${out:-} $(grep -m2 . err.txt)"; fi

# down leaves nothing.
bash "$H" down >/dev/null 2>&1
left=$(ip netns list | grep -E '^osdp-t([0-9]|head)'; ip -o link show | grep -E 'osdp-t')
if [ -z "$left" ]; then ok; else bad "hosts.sh down left: $left"; fi

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
