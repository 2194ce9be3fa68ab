#!/usr/bin/env bash
# Activation recomputation as a planned dimension, measured. Profiles the ranks once, prints the
# smallest limit that fits with no layer recomputed and with every layer recomputed, then, for
# every memory limit, plans three ways (osdp plan --trial: candidates trained a few steps, the
# measured fastest kept, as train --plan auto does):
#   auto  the planner chooses how many layers recompute (with strategies, slices, micro-batch);
#   R=0   --recompute 0: no layer recomputes (so the micro-batch is what fits without);
#   all   --recompute all: every layer recomputes;
# trains each chosen plan REPEAT times and prints a table: micro-batch, recomputed layers,
# predicted and measured step time, measured tokens/s, measured peak = predicted, and per limit
# whether auto's measured tokens/s beats (or is within 3% of) the other two.
# usage: bench/recompute.sh [BUILD_DIR]
#   environment: MODEL (small), SEQ (512), RANKS (2), LIMITS (default: one limit between the two
#                minima, where only recomputation fits, and one 15% above the no-recompute
#                minimum), STEPS (8), REPEAT (3), TRIAL_STEPS (6), THREADS (1).
# Exit status: 0 when every run ran (a mode that does not fit is a result), 1 when one failed,
# 2 on bad usage. Needs bash, coreutils, grep, sed, awk and mpirun.
set -u
build=${1:-build}
osdp=$build/osdp
model=${MODEL:-small}
seq=${SEQ:-512}
ranks=${RANKS:-2}
steps=${STEPS:-8}
repeat=${REPEAT:-3}
trial_steps=${TRIAL_STEPS:-6}
threads=${THREADS:-1}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mpirun=(mpirun --oversubscribe --bind-to none -np "$ranks")
[ -x "$osdp" ] || { echo "recompute.sh: $osdp not found or not executable (build first, or pass BUILD_DIR)" >&2; exit 2; }
case "$ranks$steps$seq$repeat$trial_steps$threads" in *[!0-9]*) echo "recompute.sh: RANKS, STEPS, SEQ, REPEAT, TRIAL_STEPS and THREADS must be whole numbers" >&2; exit 2 ;; esac
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
failed=0

# The first "KEY":number in the JSON text on stdin.
num() { grep -o "\"$1\":[[:space:]]*[-0-9.eE+]*" | head -1 | sed 's/.*:[[:space:]]*//'; }
# osdp's one-line error from a stderr file, or the file's last line.
why() { local l; l=$(grep -m1 -E '^osdp[^:]*: ' "$1"); [ -n "$l" ] || l=$(tail -1 "$1"); printf '%s' "${l:-failed}" | cut -c1-200; }
# The recompute flag of a mode.
mode_flag() { case $1 in auto) ;; R=0) echo "--recompute 0" ;; all) echo "--recompute all" ;; esac; }

echo "# $model, seq $seq, $ranks rank(s), $threads thread(s), $steps steps per run, median of $repeat run(s), trial $trial_steps steps per candidate"
"${mpirun[@]}" "$osdp" profile --model "$model" --seq "$seq" --threads "$threads" --out "$work/dev.json" --quiet \
  >"$work/prof.out" 2>"$work/err" || { echo "profile FAILED: $(why "$work/err")"; exit 1; }
# Smallest limits: osdp plan --json says {"fits":false,...,"min_bytes":N} under a tiny limit.
min_of() { "$osdp" plan --model "$model" --devices "$work/dev.json" --seq "$seq" --mem-limit 1KiB --json $(mode_flag "$1") 2>/dev/null | num min_bytes; }
min_none=$(min_of R=0); min_all=$(min_of all)
[ -n "$min_none" ] && [ -n "$min_all" ] || { echo "recompute.sh: osdp plan did not report the smallest limits"; exit 1; }
echo "smallest limit: $min_none bytes with no layer recomputed, $min_all with every layer recomputed"
limits=${LIMITS:-"$(( (min_none + min_all) / 2 )) $(( min_none * 115 / 100 ))"}

printf '%-12s %-5s %5s %4s %10s %10s %10s %12s  %s\n' limit mode B R "pred s" "meas s" "tokens/s" "peak" "peak = predicted?"
rows=$work/rows.tsv; : > "$rows"
for lim in $limits; do
  for mode in auto R=0 all; do
    pfile=$work/plan.json
    pj=$("${mpirun[@]}" "$osdp" plan --model "$model" --devices "$work/dev.json" --mem-limit "$lim" --seq "$seq" \
         --trial --trial-steps "$trial_steps" --json --out "$pfile" $(mode_flag "$mode") 2>"$work/err" | grep '^{')
    if printf '%s' "$pj" | grep -q '"fits":false'; then
      printf '%-12s %-5s %5s %4s  does not fit\n' "$lim" "$mode" - -; printf '%s\t%s\tnofit\n' "$lim" "$mode" >> "$rows"; continue
    fi
    pred=$(printf '%s' "$pj" | grep -o '"predicted":{[^{}]*}' | head -1)
    if [ -z "$pred" ] || [ ! -s "$pfile" ]; then
      printf '%-12s %-5s  plan FAILED: %s\n' "$lim" "$mode" "$(why "$work/err")"; failed=1; continue
    fi
    b=$(printf '%s' "$pred" | num micro_batch); pst=$(printf '%s' "$pred" | num step_s)
    times=(); sum=""
    for ((r = 0; r < repeat; r++)); do
      sum=$("${mpirun[@]}" "$osdp" train --model "$model" --seq "$seq" --plan "$pfile" --threads "$threads" \
            --steps "$steps" --mem-limit "$lim" --json --quiet --eval-batches 0 2>"$work/err" | grep '"summary":true' | tail -1)
      [ -n "$sum" ] || break
      times+=("$(printf '%s' "$sum" | num median_step_s)")
    done
    if [ -z "$sum" ]; then printf '%-12s %-5s  train FAILED: %s\n' "$lim" "$mode" "$(why "$work/err")"; failed=1; continue; fi
    mst=$(printf '%s\n' "${times[@]}" | sort -g | awk '{v[NR] = $1} END {print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2)}')
    rc=$(printf '%s' "$sum" | num recompute_layers); pk=$(printf '%s' "$sum" | num peak_bytes)
    ppk=$(printf '%s' "$sum" | num predicted_peak_bytes); off=$(printf '%s' "$sum" | num ranks_off_prediction)
    tps=$(awk -v r="$ranks" -v b="$b" -v t="$seq" -v s="$mst" 'BEGIN {printf "%.0f", r * b * t / s}')
    eq=$([ "$pk" = "$ppk" ] && [ "${off:-0}" = 0 ] && echo exact || echo "DIFFERS (predicted $ppk)")
    printf '%-12s %-5s %5s %4s %10.4f %10.4f %10s %12s  %s\n' "$lim" "$mode" "$b" "$rc" "$pst" "$mst" "$tps" "$pk" "$eq"
    printf '%s\t%s\tok\t%s\n' "$lim" "$mode" "$tps" >> "$rows"
  done
done
echo
awk -F'\t' '
{ if (!($1 in seen)) { seen[$1] = 1; order[++n] = $1 } st[$1, $2] = $3; tps[$1, $2] = $4 }
END {
  for (i = 1; i <= n; i++) {
    l = order[i]; line = ""
    if (st[l, "auto"] != "ok") { printf "%s: auto did not run\n", l; continue }
    verdict = "auto wins"
    for (m = 0; m < 2; m++) {
      o = m ? "all" : "R=0"
      if (st[l, o] == "nofit") { line = line sprintf("; %s does not fit", o); continue }
      if (st[l, o] != "ok") { line = line sprintf("; %s did not run", o); continue }
      r = tps[l, "auto"] / tps[l, o]
      if (r < 0.97) verdict = "auto LOSES"
      line = line sprintf("; x%.3f of %s", r, o)
    }
    printf "%s: %s (auto %s tokens/s%s)\n", l, verdict, tps[l, "auto"], line
  }
}' "$rows"
exit $failed
