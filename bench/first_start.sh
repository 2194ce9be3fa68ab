#!/usr/bin/env bash
# How long `train --plan auto` takes before its first step, and what the fast profile costs in
# plan quality. Part 1: a first start (fresh profile cache: profile, plan, trial) and a second
# start (the kept profile and trial), each line of their output timestamped; prints the time of
# the profile, the trial and step 1 of each, the chosen plan and the trial's chosen/best-uniform
# ratio. Part 2 (COMPARE=1): the plan chosen from the default profile (a copy with 4 layers)
# against the one chosen from a profile of every layer (--profile-layers = the model's layers):
# each profiled, planned with a trial (osdp plan --trial --trial-steps 2: two steps per candidate, train's default one), then both plans and the best uniform
# one trained in rounds (every plan once per round, STEPS steps; the median over rounds of each
# run's median step counts) and compared. Run it on an idle machine.
# usage: bench/first_start.sh [BUILD_DIR]
#   environment: MODEL (gpt2-124m), SEQ (128), RANKS (2), LIMIT (1.6GiB), LAYERS (12: the
#                model's layer count, for part 2), COMPARE (1), ROUNDS (3), STEPS (4), DATA
#                (a text file to train on; default: the repository's docs), FIRST (1; 0 skips
#                part 1), KEEP (a directory to keep part 1's timestamped logs in: first.txt,
#                second.txt), MPIRUN (the launch
#                command: "mpirun --oversubscribe --bind-to none -np RANKS").
# Exit status: 0, 1 when a run failed (its error is shown), 2 on bad usage.
set -u
build=${1:-build}
osdp=$build/osdp
model=${MODEL:-gpt2-124m}
seq=${SEQ:-128}
ranks=${RANKS:-2}
limit=${LIMIT:-1.6GiB}
layers=${LAYERS:-12}
compare=${COMPARE:-1}
rounds=${ROUNDS:-3}
steps=${STEPS:-4}
[ -x "$osdp" ] || { echo "first_start.sh: $osdp not found or not executable (build first, or pass BUILD_DIR)" >&2; exit 2; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
read -ra mpirun <<<"${MPIRUN:-mpirun --oversubscribe --bind-to none -np $ranks}"
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
data=${DATA:-}
if [ -z "$data" ]; then
  cat "$(dirname "$0")"/../docs/*.md "$(dirname "$0")"/../README.md >"$work/text.txt"; data=$work/text.txt
fi
common=(--model "$model" --seq "$seq" --mem-limit "$limit")

# stamp FILE: copies stdin to FILE, each line prefixed by the seconds since the call began
stamp() {
  local t0; t0=$(date +%s.%N)
  while IFS= read -r l; do printf '%7.1f %s\n' "$(echo "$(date +%s.%N) - $t0" | bc)" "$l"; done >"$1"
}
# at PATTERN FILE: the timestamp of FILE's first line matching PATTERN ("-" when none)
at() { grep -m1 -E "$2" "$1" | awk '{print $1}' | grep . || echo -; }
# last PATTERN FILE: the timestamp of FILE's last line matching PATTERN ("-" when none)
last() { grep -E "$2" "$1" | tail -1 | awk '{print $1}' | grep . || echo -; }

failed=0
if [ "${FIRST:-1}" = 1 ]; then
echo "== train --plan auto: $model, seq $seq, $ranks ranks, limit $limit"
printf '%-8s %9s %9s %9s  %s\n' start profile trial "step 1" "chosen (trial's ratio to the best uniform)"
for run in first second; do
  "${mpirun[@]}" stdbuf -oL "$osdp" train "${common[@]}" --plan auto --steps 2 --data "text:$data" --tokenizer bytes \
    --profile-cache "$work/cache" 2>&1 | stamp "$work/$run.txt"
  if ! grep -q "^ *[0-9.]* done:" "$work/$run.txt"; then
    echo "first_start.sh: the $run start FAILED: $(tail -2 "$work/$run.txt" | tr '\n' ' ')" >&2; failed=1; continue
  fi
  prof=$(at "$work/$run.txt" "profile: [0-9.]+ s;|profile: reusing")
  trial=$(last "$work/$run.txt" "trial [0-9]+/[0-9]+:.*left|trial: reusing")
  step=$(at "$work/$run.txt" "step +1/")
  chosen=$(sed -n 's/.*\* chosen: \(.*\) (.*/\1/p' "$work/$run.txt" | head -1)
  ratio=$(sed -n 's/.*the chosen plan is \([0-9.]*x\) the best uniform plan.*/\1/p' "$work/$run.txt" | head -1)
  printf '%-8s %9s %9s %9s  %s (%s)\n' "$run" "$prof" "$trial" "$step" "${chosen:-?}" "${ratio:-?}"
  [ -z "${KEEP:-}" ] || { mkdir -p "$KEEP" && cp "$work/$run.txt" "$KEEP/$run.txt"; }
done
echo "(seconds from launch at which the profile was kept or reused, the trial's last candidate ran"
echo " or the trial was reused, and step 1 was done)"
fi
[ "$compare" = 1 ] || exit $failed

echo "== the chosen plan from a profile of a 4-layer copy against one from every layer ($layers)"
command -v python3 >/dev/null || { echo "first_start.sh: python3 is needed to read the plans' JSON (COMPARE=0 skips part 2)" >&2; exit 2; }
for p in copy full; do
  extra=(); [ $p = full ] && extra=(--profile-layers "$layers")
  t0=$SECONDS
  if ! "${mpirun[@]}" "$osdp" profile "${common[@]}" "${extra[@]}" --out "$work/$p-dev.json" >"$work/$p-prof.txt" 2>&1 ||
     ! "${mpirun[@]}" "$osdp" plan --model "$model" --seq "$seq" --devices "$work/$p-dev.json" --trial \
         --trial-steps 2 --json \
         >"$work/$p-plan.txt" 2>"$work/err"; then
    echo "first_start.sh: profile or plan ($p) FAILED: $(tail -2 "$work/$p-prof.txt" "$work/err" | tr '\n' ' ')" >&2
    exit 1
  fi
  # The chosen plan and, of the full profile's candidates, the uniform one measured fastest.
  printf '%s: ' "$p"
  python3 - "$work/$p-plan.txt" "$work/$p" <<'PY' || exit 1
import json, sys
doc = next(json.loads(l) for l in open(sys.argv[1]) if l.startswith("{"))
json.dump(doc["plan"], open(sys.argv[2] + "-plan.json", "w"))
uni = [c for c in doc["candidates"] if "uniform_shard_group" in c and "measured" in c]
if uni:
    best = max(uni, key=lambda c: c["measured"]["samples_per_s"])
    json.dump(best["plan"], open(sys.argv[2] + "-uniform-plan.json", "w"))
chosen = [c for c in doc["candidates"] if c["plan"] == doc["plan"]]
print(f"chose {chosen[0]['origin'] if chosen else '?'}; best uniform by the trial: "
      f"{best['origin'] if uni else 'none'}")
PY
  echo "$p: profile and planning with a trial $((SECONDS - t0)) s"
done
plans=(copy full)
same=0
if cmp -s "$work/copy-plan.json" "$work/full-plan.json"; then
  echo "the two profiles chose the same plan (byte for byte): it is trained once, as copy"; plans=(copy); same=1
fi
[ -s "$work/full-uniform-plan.json" ] && cp "$work/full-uniform-plan.json" "$work/uniform-plan.json" && plans+=(uniform)
for p in "${plans[@]}"; do : >"$work/$p.times"; done
for r in $(seq 1 "$rounds"); do
  for p in "${plans[@]}"; do
    if "${mpirun[@]}" "$osdp" train "${common[@]}" --plan "$work/$p-plan.json" --steps "$steps" \
         --data "text:$data" --tokenizer bytes --json --quiet --eval-batches 0 >"$work/$p-run.json" 2>"$work/err"; then
      sed -n 's/.*"median_step_s":\([0-9.e+-]*\).*/\1/p' "$work/$p-run.json" | tail -1 >>"$work/$p.times"
    else
      echo "first_start.sh: training the $p plan FAILED: $(head -2 "$work/err")" >&2; failed=1
    fi
  done
done
median() { sort -g | awk '{v[NR] = $1} END {if (NR) print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2)}'; }
printf '%-8s %11s %14s %10s\n' plan micro-batch "median s/step" samples/s
sps_copy=0 sps_full=0 sps_uniform=0
for p in "${plans[@]}"; do
  B=$(grep -o '"micro_batch":[[:space:]]*[0-9]*' "$work/$p-plan.json" | head -1 | grep -o '[0-9]*$')
  m=$(median <"$work/$p.times")
  [ -n "$m" ] || continue
  sps=$(awk -v b="$B" -v n="$ranks" -v s="$m" 'BEGIN{print b * n / s}')
  printf '%-8s %11s %14.4f %10.3f\n' "$p" "$B" "$m" "$sps"
  printf -v "sps_$p" '%s' "$sps"
done
awk -v c="$sps_copy" -v f="$sps_full" -v u="$sps_uniform" -v same=$same 'BEGIN{
  if (c > 0 && f == 0 && same) printf "copy-profile plan / full-profile plan: 1.000x (the same plan)\n"
  if (c > 0 && f > 0) printf "copy-profile plan / full-profile plan: %.3fx (the issue asks >= 0.97x)\n", c / f
  if (c > 0 && u > 0) printf "copy-profile plan / best uniform plan: %.3fx\n", c / u }'
exit $failed
