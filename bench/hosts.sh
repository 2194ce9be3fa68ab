#!/usr/bin/env bash
# Plans across hosts, measured: bench/fidelity.sh's table on HOSTS hosts of PER_HOST ranks each,
# over a real, shaped link. Makes the hosts with scripts/hosts.sh (network namespaces of its own,
# osdp-b0.., on 10.231.9.0/24, removed at the end), profiles the ranks across them (showing what
# the profile measured between hosts against the shaped rate), then plans (osdp plan --trial:
# the candidates trained a few steps, the fastest measured chosen, as `train --plan auto` does)
# and trains the chosen plan, ddp / zero2 / zero3 over all ranks and zero2 / zero3 sharded within
# each host (G = PER_HOST), each with the options the planner gave it, and prints predicted vs
# measured step time, samples/s and peak per plan, the chosen plan's samples/s against the best
# uniform plan over all ranks and the best hybrid one, and flat zero3's predicted share of
# communication (the link should carry at least a third of its step for hybrid plans to pay).
#
# The default, small at seq 128 under a 192 MiB limit with links of 150 Mbit/s, every plan
# trained in 3 rounds (about 25 minutes), is chosen for this 2-core machine, where 4 ranks
# share 2 cores and compute is slow: there flat zero3 spends about 60% of its step on the link.
# On faster machines raise RATE (1gbit) and the model.
#
# usage: bench/hosts.sh [BUILD_DIR]
#   environment: HOSTS (2), PER_HOST (2), RATE (150mbit), MODEL (small), SEQ (128), LIMITS
#                (192MiB), STEPS (8), REPEAT (3), TRIAL (1), TRIAL_STEPS (4), PLAN_ARGS
#                ("--reduce-dtype auto"), GLOBAL_BATCH (G sequences per optimizer step, see
#                fidelity.sh), JSON=1 (end with fidelity.sh's JSON object), KEEP
#                (a directory to copy the profile, dev.json, and its log, prof.out, into).
# Exit status: fidelity.sh's (0: every run ran, 1: one failed), 2 on bad usage, 77 when network
# namespaces cannot be made here (the reason is printed). Needs root, iproute2 and OpenMPI.
set -u
here=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-build}
hosts=${HOSTS:-2}
per_host=${PER_HOST:-2}
rate=${RATE:-150mbit}
case "$hosts$per_host" in *[!0-9]*|"") echo "hosts.sh: HOSTS and PER_HOST must be whole numbers" >&2; exit 2 ;; esac
[ "$hosts" -ge 2 ] && [ "$per_host" -ge 1 ] || { echo "hosts.sh: HOSTS must be at least 2 and PER_HOST at least 1" >&2; exit 2; }
[ -x "$build/osdp" ] || { echo "hosts.sh: $build/osdp not found or not executable (build first, or pass BUILD_DIR)" >&2; exit 2; }
ranks=$((hosts * per_host))
model=${MODEL:-small}
seq=${SEQ:-128}
work=$(mktemp -d)
# Hosts of this bench's own (names, subnet, state), so that a user's `scripts/hosts.sh up` is
# left alone; removed on every exit.
export HOSTS_PREFIX=osdp-b HOSTS_SUBNET=10.231.9 HOSTS_STATE=$work/hosts
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
cleanup() { "$here/scripts/hosts.sh" down >/dev/null 2>&1; rm -rf "$work"; }
trap cleanup EXIT
trap 'exit 130' INT TERM
"$here/scripts/hosts.sh" up "$hosts" --rate "$rate" >"$work/up.out" 2>&1
urc=$?
if [ "$urc" -ne 0 ]; then cat "$work/up.out" >&2; exit "$urc"; fi
cat "$work/up.out"
launch="$here/scripts/hosts.sh mpirun -np $ranks --map-by ppr:$per_host:node"
read -ra mpirun <<<"$launch"

echo "# profile across $hosts hosts x $per_host ranks, links shaped to $rate"
"${mpirun[@]}" "$build/osdp" profile --model "$model" --seq "$seq" --out "$work/dev.json" \
  >"$work/prof.out" 2>&1
prc=$?
grep -E 'between hosts|within hosts|over the world' "$work/prof.out" | grep -v 'bf16' | sed 's/^profile: /  /'
if [ "$prc" -ne 0 ] || [ ! -s "$work/dev.json" ]; then
  echo "hosts.sh: profile FAILED (exit $prc): $(tail -3 "$work/prof.out" | tr '\n' ' ')" >&2
  exit 1
fi
if [ -n "${KEEP:-}" ]; then
  mkdir -p "$KEEP" && cp "$work/dev.json" "$work/prof.out" "$KEEP/" || { echo "hosts.sh: cannot copy the profile into KEEP=$KEEP" >&2; exit 2; }
fi
echo
MPIRUN=$launch RANKS=$ranks MODEL=$model SEQ=$seq DEVICES=$work/dev.json LIMITS=${LIMITS:-192MiB} \
  STEPS=${STEPS:-8} REPEAT=${REPEAT:-3} TRIAL=${TRIAL:-1} TRIAL_STEPS=${TRIAL_STEPS:-4} \
  PLAN_ARGS=${PLAN_ARGS:---reduce-dtype auto} "$here/bench/fidelity.sh" "$build"
