#!/usr/bin/env bash
# hosts.sh OSDP PLAN_TOOL: osdp across 2 "hosts" (network namespaces made by scripts/hosts.sh,
# with their own names and subnet, never a user's), 2 ranks each, over a link shaped to 1 Gbit/s:
#  - OpenMPI puts ranks 0,1 on one host and 2,3 on the other, and osdp sees 2 ranks per host;
#  - a hybrid run (zero3 sharded within each host, replicated across) reproduces the losses of
#    one process on the same global batch within 1e-5, every rank's peak equal to the prediction;
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

# down leaves nothing.
bash "$H" down >/dev/null 2>&1
left=$(ip netns list | grep -E '^osdp-t[0-9]'; ip -o link show | grep -E 'osdp-t')
if [ -z "$left" ]; then ok; else bad "hosts.sh down left: $left"; fi

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
