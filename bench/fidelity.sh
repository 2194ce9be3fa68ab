#!/usr/bin/env bash
# How well osdp's planner predicts what training then measures. Profiles the ranks once, then
# for every memory limit plans (osdp plan --trial --json: the candidates trained a few steps, the
# measured fastest chosen, as `train --plan auto` does; TRIAL=0: the prediction alone) and trains
# the chosen plan and each best uniform plan that fits (the plan's uniform candidates: ddp /
# zero2 / zero3 over all ranks and, on several hosts, zero2 / zero3 sharded within each host
# ("zero2 G=2"), each at its best fitting micro-batch with the recomputation, prefetch, overlapped
# reductions and reduce dtype the planner gave it), REPEAT times each, in rounds (every plan once
# per round; the median of a plan's runs' median step times counts, so neither a step nor a
# minute slowed by another process decides), and prints per
# run the predicted and measured step time and peak memory, per limit the auto plan's measured
# samples/s against the best uniform plan over all ranks and the best hybrid one (won: within 3%
# of, or above, the best of all), and over all runs the mean and largest |measured/predicted - 1|
# of the step time, the spread (max/min) of measured/predicted, and whether every predicted peak
# was exact to the byte. bench/hosts.sh runs it across hosts.
# usage: bench/fidelity.sh [BUILD_DIR]
#   environment: MODEL (small), SEQ (64), RANKS (2), LIMITS ("64MiB 96MiB 160MiB"), STEPS (25),
#                REPEAT (3), TRIAL (1), TRIAL_STEPS (6), JSON=1 to end with one JSON object
#                holding every figure; MPIRUN (the launch command for RANKS ranks: "mpirun
#                --oversubscribe --bind-to none -np RANKS"), PLAN_ARGS (more `osdp plan`
#                arguments, e.g. "--reduce-dtype auto"), DEVICES (a device.json of these ranks
#                and SEQ to use instead of profiling), GLOBAL_BATCH (G: every plan trains G
#                sequences per optimizer step, accumulating over micro-steps; the uniform zero2 /
#                zero3 plans that keep their gradients and weights whole across the micro-steps,
#                "zero2 keep" / "zero3 keep", are trained too).
# Exit status: 0 when every profile / plan / train run ran (a uniform plan that does not fit is a
# result, not a failure), 1 when any failed (its error is shown in place of its figures), 2 on bad
# usage. Arithmetic is awk; nothing beyond bash, coreutils, grep, sed, awk and mpirun is needed.
set -u
build=${1:-build}
osdp=$build/osdp
model=${MODEL:-small}
seq=${SEQ:-64}
ranks=${RANKS:-2}
limits=${LIMITS:-"64MiB 96MiB 160MiB"}
steps=${STEPS:-25}
repeat=${REPEAT:-3}
trial=${TRIAL:-1}
trial_steps=${TRIAL_STEPS:-6}
json=${JSON:-0}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
read -ra mpirun <<<"${MPIRUN:-mpirun --oversubscribe --bind-to none -np $ranks}"
read -ra plan_args <<<"${PLAN_ARGS:-}"
global=${GLOBAL_BATCH:-}
case "$global" in *[!0-9]*) echo "fidelity.sh: GLOBAL_BATCH must be a whole number" >&2; exit 2 ;; esac
gb_args=(); [ -n "$global" ] && gb_args=(--global-batch "$global")
devices=${DEVICES:-}
[ -z "$devices" ] || [ -s "$devices" ] || { echo "fidelity.sh: DEVICES '$devices' is not a readable device.json (unset it to profile)" >&2; exit 2; }
[ -x "$osdp" ] || { echo "fidelity.sh: $osdp not found or not executable (build first, or pass BUILD_DIR)" >&2; exit 2; }
case "$ranks$steps$seq$repeat$trial$trial_steps" in *[!0-9]*) echo "fidelity.sh: RANKS, STEPS, SEQ, REPEAT, TRIAL and TRIAL_STEPS must be whole numbers" >&2; exit 2 ;; esac
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
rows=$work/rows.tsv; : > "$rows"
failed=0

# The first "KEY":number in the JSON text on stdin (the CLI prints compact one-line JSON).
num() { grep -o "\"$1\":[[:space:]]*[-0-9.eE+]*" | head -1 | sed 's/.*:[[:space:]]*//'; }
# One line saying why a run failed: osdp's own error line if there is one, else the last line.
why() { # stderr-file stdout-text rc
  local l
  l=$(grep -m1 -E '^osdp[^:]*: ' "$1")
  [ -n "$l" ] || l=$(printf '%s\n' "$2" | grep -v '^[[:space:]]*$' | tail -1)
  [ -n "$l" ] || l=$(grep -v -e '^[[:space:]]*$' -e '^---' "$1" | head -1)
  printf '%s' "${l:-exit status $3}" | tr '\t\r' '  ' | cut -c1-300
}
# Appends one row: limit plan batch options status pred_step meas_step pred_peak meas_peak pred_sps
# meas_micro_batch message ranks_off shard_group pred_comm_s (status: ok | fail | nofit; options:
# prefetch, overlap_reduce, bf16 joined by commas; shard_group: 0 for auto, RANKS over all ranks).
row() { local IFS=$'\t'; printf '%s\n' "$*" >> "$rows"; }
hdr_fmt='%-8s %-10s %5s %-8s %10s %10s %9s %12s %12s  %s\n'
show_last() { # prints the last row of $rows as a table line
  tail -1 "$rows" | awk -F'\t' -v fmt="$hdr_fmt" '{
    o = $4; gsub(/prefetch/, "pf", o); gsub(/overlap_reduce/, "ov", o); if (o == "") o = "-"
    if ($5 == "nofit") { printf "%-8s %-10s %5s  does not fit (osdp plan)\n", $1, $2, "-"; exit }
    if ($5 == "fail")  { printf "%-8s %-10s %5s  FAILED: %s\n", $1, $2, ($3 == "" ? "-" : $3), $12; exit }
    eq = ($8 + 0 == $9 + 0) ? "exact" : sprintf("DIFFERS by %+d", $9 - $8)
    if ($11 != "" && $11 != $3) eq = eq sprintf(" (trained micro-batch %s)", $11)
    if ($13 + 0 > 0) eq = eq sprintf(" (%d rank(s) off their own prediction)", $13)
    printf fmt, $1, $2, $3, o, sprintf("%.4f", $6), sprintf("%.4f", $7), sprintf("%.3f", $7 / $6), $8, $9, eq }'
}
# The plans of one limit are queued (queue_plan), then trained in rounds (run_queue): each
# round trains every queued plan once, in order, so that a slow minute of the machine falls on
# one run of several plans rather than on all the runs of one; a plan's figure is the median of
# its rounds' median step times.
# Queues one plan: limit name plan-arg batch options pred_step pred_peak pred_sps shard_group
# pred_comm_s [train arguments...] (a uniform plan's micro-batch, shard group, recomputation and
# options; auto's come with its plan file).
nq=0
queue_plan() {
  Q_HEAD[nq]=$(printf '%s\036' "${@:1:10}")
  local a=("${@:11}")
  Q_ARGS[nq]=$( ((${#a[@]})) && printf '%s\037' "${a[@]}")
  Q_RUNS[nq]=""; Q_SUM[nq]=""; Q_ERR[nq]=""
  nq=$((nq + 1))
}
# Trains queued plan i once; appends its median step time to Q_RUNS[i], or sets Q_ERR[i].
run_once() {
  local i=$1 lim name plan b extra=() out rc sum st
  IFS=$'\036' read -r lim name plan b _ <<<"${Q_HEAD[i]}"
  [ -n "${Q_ARGS[i]}" ] && IFS=$'\037' read -ra extra <<<"${Q_ARGS[i]%$'\037'}"
  out=$("${mpirun[@]}" "$osdp" train --model "$model" --seq "$seq" --plan "$plan" "${extra[@]}" "${gb_args[@]}" \
        --steps "$steps" --mem-limit "$lim" --json --quiet --eval-batches 0 2>"$work/err")
  rc=$?
  sum=$(printf '%s\n' "$out" | grep '"summary":true' | tail -1)
  st=$(printf '%s' "$sum" | num median_step_s)
  if [ "$rc" -ne 0 ] || [ -z "$sum" ]; then Q_ERR[i]=$(why "$work/err" "$out" "$rc"); return; fi
  if [ -z "$st" ] || ! awk -v s="$st" 'BEGIN{exit !(s > 0)}'; then
    Q_ERR[i]="no positive step_s in the summary: $(printf '%s' "$sum" | cut -c1-200)"; return
  fi
  Q_RUNS[i]="${Q_RUNS[i]} $st"; Q_SUM[i]=$sum
}
# Trains every queued plan REPEAT times in rounds, then appends and shows each plan's row, and
# empties the queue. A plan that failed once is not run again.
run_queue() {
  local r i
  for ((r = 1; r <= repeat; r++)); do
    for ((i = 0; i < nq; i++)); do
      [ -z "${Q_ERR[i]}" ] || continue
      [ "$repeat" -gt 1 ] && printf '  round %d/%d: %s\n' "$r" "$repeat" "$(cut -d$'\036' -f2 <<<"${Q_HEAD[i]}")" >&2
      run_once "$i"
    done
  done
  for ((i = 0; i < nq; i++)); do
    local lim name plan b opts pst ppk psps grp pcomm sum="${Q_SUM[i]}" mst mpk mb off
    IFS=$'\036' read -r lim name plan b opts pst ppk psps grp pcomm _ <<<"${Q_HEAD[i]}"
    if [ "${Q_ERR[i]}" = nofit ]; then
      row "$lim" "$name" "" "" nofit "" "" "" "" "" "" "" "" "$grp" ""
    elif [ -n "${Q_ERR[i]}" ]; then
      row "$lim" "$name" "$b" "$opts" fail "$pst" "" "$ppk" "" "$psps" "" "${Q_ERR[i]}" "" "$grp" "$pcomm"
      failed=1
    else
      mst=$(printf '%s\n' ${Q_RUNS[i]} | sort -g | awk '{v[NR] = $1} END {if (NR) print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2)}')
      mpk=$(printf '%s' "$sum" | num peak_bytes)
      mb=$(printf '%s' "$sum" | num micro_batch); off=$(printf '%s' "$sum" | num ranks_off_prediction)
      row "$lim" "$name" "$b" "$opts" ok "$pst" "$mst" "$ppk" "$mpk" "$psps" "$mb" "" "$off" "$grp" "$pcomm"
    fi
    show_last
  done
  nq=0
}

echo "# $model, seq $seq, $ranks rank(s), $steps steps per run (the first is not timed), median of $repeat run(s)," \
  "auto = $([ "$trial" = 1 ] && echo "the trial's choice ($trial_steps steps per candidate)" || echo "the prediction's choice"), build $build"
# shellcheck disable=SC2059
printf "$hdr_fmt" limit plan batch options "pred s" "meas s" meas/pred "pred peak" "meas peak" "peak equal?"
# The options text of a plan or candidate JSON (prefetch, overlap_reduce, bf16, joined by commas).
options_of() {
  local t o=()
  t=$(tr -d ' \t\n')
  case "$t" in *'"prefetch":true'*) o+=(prefetch) ;; esac
  case "$t" in *'"overlap_reduce":true'*) o+=(overlap_reduce) ;; esac
  case "$t" in *'"reduce_dtype":"bf16"'*) o+=(bf16) ;; esac
  (IFS=,; printf '%s' "${o[*]}")
}
# Trains the uniform candidate of strategy $2 sharded over groups of $3 ranks from the plan's
# JSON $4 (a nofit row when the plan has none: it does not fit under the limit); with $5 = keep,
# the one that keeps gradients (zero2) and weights (zero3) whole across micro-steps.
uniform() {
  local lim=$1 s=$2 g=$3 pj=$4 keep=${5:-} name=$2 e b st pk sps cm rec opts args=() what
  [ "$g" -lt "$ranks" ] && name="$s G=$g"
  what='\( G=[0-9]*\)\?'
  [ -n "$keep" ] && { name="$s keep"; what=' keep'; }
  e=$(printf '%s' "$pj" | grep -o '{"origin":"'"$s$what"'\( R=[0-9]*\)\?","prefetch":[a-z]*,"overlap_reduce":[a-z]*,"reduce_dtype":"[a-z0-9]*","uniform_shard_group":'"$g"',"recompute_layers":[0-9]*,"predicted":{[^{}]*}' | head -1)
  if [ -z "$e" ]; then queue_plan "$lim" "$name" "" "" "" "" "" "" "$g" ""; Q_ERR[nq - 1]=nofit; return; fi
  b=$(printf '%s' "$e" | num micro_batch); st=$(printf '%s' "$e" | num step_s)
  pk=$(printf '%s' "$e" | num peak_bytes); sps=$(printf '%s' "$e" | num samples_per_s)
  cm=$(printf '%s' "$e" | num comm_s); rec=$(printf '%s' "$e" | num recompute_layers)
  opts=$(printf '%s' "$e" | options_of)
  [ "$g" -lt "$ranks" ] && args+=(--shard-group "$g")
  [ "${rec:-0}" -gt 0 ] && args+=(--recompute "$rec")
  [ -n "$keep" ] && args+=(--keep-whole "$([ "$s" = zero3 ] && echo grad+weight || echo grad)")
  case ",$opts," in *,prefetch,*) args+=(--prefetch) ;; esac
  case ",$opts," in *,overlap_reduce,*) args+=(--overlap-reduce) ;; esac
  case ",$opts," in *,bf16,*) args+=(--reduce-dtype bf16) ;; esac
  queue_plan "$lim" "$name" "$s" "$b" "$opts" "$st" "$pk" "$sps" "$g" "$cm" --batch "$b" "${args[@]}"
}
prc=0
if [ -n "$devices" ]; then cp "$devices" "$work/dev.json"
else
  "${mpirun[@]}" "$osdp" profile --model "$model" --seq "$seq" --out "$work/dev.json" --quiet \
    >"$work/prof.out" 2>"$work/err"
  prc=$?
fi
if [ "$prc" -ne 0 ] || [ ! -s "$work/dev.json" ]; then
  msg=$(why "$work/err" "$(cat "$work/prof.out")" "$prc")
  echo "profile FAILED: $msg"
  for lim in $limits; do row "$lim" auto "" "" fail "" "" "" "" "" "" "profile failed: $msg" "" 0 ""; done
  failed=1
else
  for lim in $limits; do
    pfile=$work/plan-$lim.json
    targs=(); [ "$trial" = 1 ] && targs=(--trial --trial-steps "$trial_steps")
    pj=$("${mpirun[@]}" "$osdp" plan --model "$model" --devices "$work/dev.json" --mem-limit "$lim" \
         --seq "$seq" "${targs[@]}" "${plan_args[@]}" "${gb_args[@]}" --json --out "$pfile" 2>"$work/err" | grep '^{')
    prc=$?
    pred=$(printf '%s' "$pj" | grep -o '"predicted":{[^{}]*}' | head -1)
    if [ "$prc" -ne 0 ] || [ -z "$pred" ] || [ ! -s "$pfile" ]; then
      row "$lim" auto "" "" fail "" "" "" "" "" "" "plan: $(why "$work/err" "$pj" "$prc")" "" 0 ""
      show_last; failed=1; continue
    fi
    queue_plan "$lim" auto "$pfile" "$(printf '%s' "$pred" | num micro_batch)" "$(options_of <"$pfile")" \
      "$(printf '%s' "$pred" | num step_s)" "$(printf '%s' "$pred" | num peak_bytes)" \
      "$(printf '%s' "$pred" | num samples_per_s)" 0 "$(printf '%s' "$pred" | num comm_s)"
    hpr=$(printf '%s' "$pj" | num ranks_per_host)
    for s in ddp zero2 zero3; do uniform "$lim" "$s" "$ranks" "$pj"; done
    if [ -n "$hpr" ] && [ "$hpr" -gt 1 ] && [ "$hpr" -lt "$ranks" ]; then
      for s in zero2 zero3; do uniform "$lim" "$s" "$hpr" "$pj"; done
    fi
    if [ -n "$global" ]; then for s in zero2 zero3; do uniform "$lim" "$s" "$ranks" "$pj" keep; done; fi
    run_queue
  done
fi

# Per limit and overall figures, and the JSON object, all from the rows.
awk -F'\t' -v ranks="$ranks" -v global="${global:-0}" -v json="$json" -v model="$model" -v seq="$seq" -v steps="$steps" \
    -v build="$build" -v failed="$failed" '
function jstr(s) { gsub(/\\/, "\\\\", s); gsub(/"/, "\\\"", s); return "\"" s "\"" }
function jnum(x) { return x == "" ? "null" : x + 0 }
function abs(x) { return x < 0 ? -x : x }
{
  lim = $1
  if (!(lim in seen)) { seen[lim] = 1; order[++nl] = lim; lmin[lim] = ""; lmax[lim] = "" }
  nr++; R[nr] = $0
  if ($2 != "auto" && $5 != "nofit") ufit[lim]++
  if ($5 != "ok") { if ($5 == "fail") { nfail++; lfail[lim]++ }; next }
  r = $7 / $6; e = abs(r - 1); nok++; sum_e += e; if (e > max_e) max_e = e
  if (gmin == "" || r < gmin) gmin = r; if (gmax == "" || r > gmax) gmax = r
  if (lmin[lim] == "" || r < lmin[lim]) lmin[lim] = r; if (lmax[lim] == "" || r > lmax[lim]) lmax[lim] = r
  if ($8 + 0 != $9 + 0 || $13 + 0 > 0) { peak_off++ }
  sps = (global > 0 ? global : ranks * $3) / $7 # sequences per step: G, or N x B without one
  if ($2 == "auto") { asps[lim] = sps; apred[lim] = $10 }
  else if (!(lim in usps) || sps > usps[lim]) { usps[lim] = sps; uname[lim] = $2 }
  if ($2 != "auto" && $14 + 0 == ranks && (!(lim in fsps) || sps > fsps[lim])) { fsps[lim] = sps; fname[lim] = $2 }
  if ($2 != "auto" && $14 + 0 > 0 && $14 + 0 < ranks && (!(lim in hsps) || sps > hsps[lim])) { hsps[lim] = sps; hname[lim] = $2 }
  if ($2 == "zero3" && $14 + 0 == ranks && $15 != "" && $6 > 0) z3comm[lim] = $15 / $6
  if ($2 != "auto" && (!(lim in upred) || $10 > upred[lim])) { upred[lim] = $10; upname[lim] = $2 }
}
END {
  print ""
  for (i = 1; i <= nl; i++) {
    l = order[i]
    if (!(l in asps)) verdict[l] = "auto did not run"
    else if (!(l in usps)) verdict[l] = ufit[l] ? "auto ran; no uniform plan that fits ran" : "auto only: no uniform plan fits"
    else {
      vr[l] = asps[l] / usps[l]; won[l] = vr[l] >= 0.97
      verdict[l] = sprintf("%s: auto %.2f samples/s vs best uniform %s %.2f (x%.3f)", won[l] ? "auto won" : "auto LOST",
                           asps[l], uname[l], usps[l], vr[l])
    }
    pv = ""
    if ((l in apred) && (l in upred) && upred[l] > 0)
      pv = sprintf("; planner predicted auto x%.3f of %s", apred[l] / upred[l], upname[l])
    sp = lmin[l] != "" ? sprintf("; meas/pred spread %.3f (%.3f..%.3f)", lmax[l] / lmin[l], lmin[l], lmax[l]) : ""
    printf "%-8s %s%s%s\n", l, verdict[l], pv, sp
    fh = ""
    if ((l in asps) && (l in fsps)) fh = sprintf("auto x%.3f of the best plan over all ranks (%s)", asps[l] / fsps[l], fname[l])
    if ((l in asps) && (l in hsps))
      fh = fh (fh == "" ? "" : ", ") sprintf("x%.3f of the best hybrid plan (%s)", asps[l] / hsps[l], hname[l])
    if (l in z3comm) fh = fh (fh == "" ? "" : "; ") sprintf("flat zero3 predicted %.0f%% communication", 100 * z3comm[l])
    if (fh != "" && (l in hsps)) printf "%-8s %s\n", "", fh
  }
  if (nok) {
    printf "overall: %d run(s) measured, |meas/pred - 1| mean %.3f max %.3f; meas/pred %.3f..%.3f (spread %.3f); peaks %s\n",
           nok, sum_e / nok, max_e, gmin, gmax, gmax / gmin, peak_off ? sprintf("DIFFER in %d run(s)", peak_off) : "all exact"
  } else print "overall: nothing measured"
  if (nfail) printf "%d run(s) FAILED\n", nfail
  if (json != 1) exit
  printf "{\"model\":%s,\"seq\":%d,\"ranks\":%d,\"steps\":%d,\"build\":%s,\"rows\":[", jstr(model), seq, ranks, steps, jstr(build)
  for (k = 1; k <= nr; k++) {
    split(R[k], f, "\t")
    printf "%s{\"limit\":%s,\"plan\":%s,\"status\":%s,\"micro_batch\":%s,\"prefetch\":%s", (k > 1 ? "," : ""),
           jstr(f[1]), jstr(f[2]), jstr(f[5]), jnum(f[3]), index(f[4], "prefetch") ? "true" : "false"
    printf ",\"options\":%s,\"shard_group\":%s,\"predicted_comm_s\":%s", jstr(f[4]),
           (f[14] + 0 > 0 ? f[14] + 0 : "null"), jnum(f[15])
    printf ",\"predicted_step_s\":%s,\"measured_step_s\":%s,\"ratio\":%s", jnum(f[6]), jnum(f[7]),
           f[5] == "ok" ? sprintf("%.6g", f[7] / f[6]) : "null"
    printf ",\"predicted_peak_bytes\":%s,\"measured_peak_bytes\":%s,\"peak_exact\":%s", jnum(f[8]), jnum(f[9]),
           f[5] == "ok" ? (f[8] + 0 == f[9] + 0 && f[13] + 0 == 0 ? "true" : "false") : "null"
    printf ",\"predicted_samples_per_s\":%s,\"measured_samples_per_s\":%s,\"error\":%s}", jnum(f[10]),
           f[5] == "ok" ? sprintf("%.6g", ranks * f[3] / f[7]) : "null", f[5] == "fail" ? jstr(f[12]) : "null"
  }
  printf "],\"limits\":["
  for (i = 1; i <= nl; i++) {
    l = order[i]
    printf "%s{\"limit\":%s,\"auto_samples_per_s\":%s,\"best_uniform\":%s,\"best_uniform_samples_per_s\":%s", (i > 1 ? "," : ""),
           jstr(l), (l in asps) ? sprintf("%.6g", asps[l]) : "null", (l in usps) ? jstr(uname[l]) : "null",
           (l in usps) ? sprintf("%.6g", usps[l]) : "null"
    printf ",\"uniform_plans_fitting\":%d,\"auto_vs_best_uniform\":%s,\"auto_won\":%s", ufit[l], (l in vr) ? sprintf("%.6g", vr[l]) : "null",
           (l in vr) ? (won[l] ? "true" : "false") : "null"
    printf ",\"predicted_auto_vs_best_uniform\":%s", ((l in apred) && (l in upred) && upred[l] > 0) ? sprintf("%.6g", apred[l] / upred[l]) : "null"
    printf ",\"best_flat\":%s,\"auto_vs_best_flat\":%s", (l in fsps) ? jstr(fname[l]) : "null",
           ((l in fsps) && (l in asps)) ? sprintf("%.6g", asps[l] / fsps[l]) : "null"
    printf ",\"best_hybrid\":%s,\"auto_vs_best_hybrid\":%s", (l in hsps) ? jstr(hname[l]) : "null",
           ((l in hsps) && (l in asps)) ? sprintf("%.6g", asps[l] / hsps[l]) : "null"
    printf ",\"flat_zero3_predicted_comm_share\":%s", (l in z3comm) ? sprintf("%.6g", z3comm[l]) : "null"
    printf ",\"ratio_min\":%s,\"ratio_max\":%s,\"ratio_spread\":%s,\"failures\":%d}", jnum(lmin[l]), jnum(lmax[l]),
           lmin[l] != "" ? sprintf("%.6g", lmax[l] / lmin[l]) : "null", lfail[l]
  }
  printf "],\"overall\":{\"measured_runs\":%d,\"failures\":%d,\"mean_abs_ratio_error\":%s,\"max_abs_ratio_error\":%s", nok, nfail,
         nok ? sprintf("%.6g", sum_e / nok) : "null", nok ? sprintf("%.6g", max_e) : "null"
  printf ",\"ratio_min\":%s,\"ratio_max\":%s,\"ratio_spread\":%s,\"peaks_exact\":%s}}\n", jnum(gmin), jnum(gmax),
         nok ? sprintf("%.6g", gmax / gmin) : "null", nok ? (peak_off ? "false" : "true") : "null"
}' "$rows" || failed=1
exit "$failed"
