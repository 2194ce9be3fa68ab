#!/usr/bin/env bash
# How much two profiles of one machine disagree: profiles the ranks twice, back to back, then
# plans under each limit with each profile (osdp plan --devices, no trial) and prints, for every
# plan both lists hold at the same micro-batch (the search's candidates and the uniform plans),
# the two predicted step times and their difference, and the largest difference over the plans
# bench/fidelity.sh trains (the chosen plan and ddp / zero2 / zero3). Run it on an idle machine.
# The machine's own speed drifts too (a fixed dp step here moves 5-13% over minutes), so a fixed
# workload, the reference (REF_STEPS dp steps of the model at micro-batch REF_BATCH on the same
# ranks, their median), runs before, between and after the profiles; each profile's speed is
# taken as the geometric mean of the references around it, and every difference is also shown
# with the machine's drift between the profiles divided out ("adjusted"): what is left is the
# profiler's own disagreement.
# usage: bench/profiles.sh [BUILD_DIR]
#   environment: MODEL (small), SEQ (64), RANKS (2), LIMITS ("64MiB 96MiB 160MiB"), MPIRUN (the
#                launch command: "mpirun --oversubscribe --bind-to none -np RANKS"), KEEP (a
#                directory to keep p1.json, p2.json in), PROFILE_ARGS (more `osdp profile`
#                arguments, e.g. "--profile-steps 9": longer windows of timed steps), REF (1;
#                0: no reference runs), REF_STEPS (40), REF_BATCH (8).
# Exit status: 0, 1 when a profile or plan failed, 2 on bad usage. Needs python3 for the JSON.
set -u
build=${1:-build}
osdp=$build/osdp
model=${MODEL:-small}
seq=${SEQ:-64}
ranks=${RANKS:-2}
limits=${LIMITS:-"64MiB 96MiB 160MiB"}
[ -x "$osdp" ] || { echo "profiles.sh: $osdp not found or not executable (build first, or pass BUILD_DIR)" >&2; exit 2; }
command -v python3 >/dev/null || { echo "profiles.sh: python3 is needed to read the plans' JSON" >&2; exit 2; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
read -ra mpirun <<<"${MPIRUN:-mpirun --oversubscribe --bind-to none -np $ranks}"
read -ra profile_args <<<"${PROFILE_ARGS:-}"
ref=${REF:-1}
ref_steps=${REF_STEPS:-40}
ref_batch=${REF_BATCH:-8}
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
# reference I: the median step time of REF_STEPS dp steps (the run's summary line, median_step_s)
# into $work/ref.I
reference() {
  if ! "${mpirun[@]}" "$osdp" train --model "$model" --seq "$seq" --batch "$ref_batch" --steps "$ref_steps" \
       --problems 0 --eval-batches 1 --log "$work/ref$1.jsonl" >"$work/ref$1.out" 2>&1; then
    echo "profiles.sh: reference run $1 FAILED: $(tail -2 "$work/ref$1.out" | tr '\n' ' ')" >&2; exit 1
  fi
  sed -n 's/.*"median_step_s":\([0-9.e+-]*\).*/\1/p' "$work/ref$1.jsonl" | tail -1 >"$work/ref.$1"
  printf "reference %s: %.4f s a step (dp, micro-batch %s)\n" "$1" "$(cat "$work/ref.$1")" "$ref_batch"
}
[ "$ref" = 1 ] && reference 0
for i in 1 2; do
  t0=$(date +%s)
  if ! "${mpirun[@]}" "$osdp" profile --model "$model" --seq "$seq" "${profile_args[@]}" --out "$work/p$i.json" >"$work/prof$i.out" 2>&1; then
    echo "profiles.sh: profile $i FAILED: $(tail -2 "$work/prof$i.out" | tr '\n' ' ')" >&2; exit 1
  fi
  echo "profile $i: $(($(date +%s) - t0)) s; $(grep 'inside steps' "$work/prof$i.out" | sed 's/^profile: //')"
  [ "$ref" = 1 ] && reference "$i"
done
for lim in $limits; do
  for i in 1 2; do
    if ! "$osdp" plan --model "$model" --seq "$seq" --devices "$work/p$i.json" --mem-limit "$lim" --json \
         2>"$work/err" | grep '^{' >"$work/plan$i-$lim.json"; then
      echo "profiles.sh: plan under $lim with profile $i FAILED: $(head -1 "$work/err")" >&2; exit 1
    fi
  done
done
if [ -n "${KEEP:-}" ]; then mkdir -p "$KEEP" && cp "$work"/p[12].json "$work"/plan*.json "$KEEP/"; fi
python3 - "$work" "$ref" $limits <<'PY'
import json, math, os, sys
work, ref, limits = sys.argv[1], sys.argv[2] == "1", sys.argv[3:]
# The machine's drift from profile 1 to profile 2: each profile's speed is the geometric mean of
# the reference steps before and after it.
drift = 1.0
if ref:
    r = [float(open(os.path.join(work, f"ref.{i}")).read()) for i in range(3)]
    drift = math.sqrt(r[1] * r[2]) / math.sqrt(r[0] * r[1])
    print(f"machine drift from profile 1 to profile 2 (reference steps): {100 * (drift - 1):+.1f}%")
worst, worst_at, worst_adj, worst_adj_at = 0.0, "", 0.0, ""
print(f"{'limit':8s} {'plan':22s} {'batch':>5s} {'pred s (1)':>10s} {'pred s (2)':>10s} {'diff':>7s}"
      + (f" {'adjusted':>8s}" if ref else ""))
for lim in limits:
    runs = [json.load(open(f"{work}/plan{i}-{lim}.json"))["candidates"] for i in (1, 2)]
    # A candidate's name without its " R=N" suffix; the first candidate is what osdp plan chooses.
    name = lambda c: c["origin"].split(" R=")[0]
    second = {name(c): c["predicted"] for c in runs[1]}
    for k, c in enumerate(runs[0]):
        a, b = c["predicted"], second.get(name(c))
        if b is None or a["micro_batch"] != b["micro_batch"]:
            continue
        d = b["step_s"] / a["step_s"] - 1
        adj = b["step_s"] / a["step_s"] / drift - 1
        trained = k == 0 or name(c) in ("ddp", "zero2", "zero3")
        print(f"{lim:8s} {name(c) + (' (chosen)' if k == 0 else ''):22s} {a['micro_batch']:5d} "
              f"{a['step_s']:10.4f} {b['step_s']:10.4f} {100 * d:+6.1f}%" + (f" {100 * adj:+7.1f}%" if ref else ""))
        if trained and abs(d) > worst:
            worst, worst_at = abs(d), f"{lim} {name(c)}"
        if trained and abs(adj) > worst_adj:
            worst_adj, worst_adj_at = abs(adj), f"{lim} {name(c)}"
print(f"largest difference over the chosen and uniform plans: {100 * worst:.1f}% ({worst_at})")
if ref:
    print(f"largest difference with the machine's drift divided out: {100 * worst_adj:.1f}% ({worst_adj_at})")
PY
