#!/usr/bin/env bash
# Measures ddp, zero2, zero3 (each at the largest micro-batch that fits) and osdp's auto plan
# side by side, for several (model, memory limit) cases on 2 and 4 ranks, and prints one table:
# measured tokens/s and peak memory per rank, and for auto its predicted step time and peak.
# usage: bench/auto_vs_uniform.sh [BUILD_DIR]  (environment: CASES="model:limit ...", RANKS, STEPS, SEQ)
set -u
build=${1:-build}
osdp=$build/osdp
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
cases=${CASES:-"tiny:12MiB tiny:24MiB small:96MiB small:200MiB"}
ranks=${RANKS:-"2 4"}
steps=${STEPS:-6}
seq=${SEQ:-64}
mpirun=(mpirun --oversubscribe --bind-to none)
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
num() { sed -n "s/.*\"$1\":\([-0-9.e+]*\).*/\1/p" | head -1; }
uniform_batch() { sed -n "s/.*\"$1\":{\"micro_batch\":\([0-9]*\).*/\1/p" | head -1; }
run_train() { # ranks plan batch limit -> "tokens/s peak step_s predicted_step_s"
  local out
  out=$("${mpirun[@]}" -np "$1" "$osdp" train --model "$model" --data addition --seq "$seq" \
        --steps "$steps" --plan "$2" ${3:+--batch "$3"} --mem-limit "$4" --json --quiet --eval-batches 0 2>/dev/null | tail -1)
  echo "$(echo "$out" | num tokens_per_s) $(echo "$out" | num peak_bytes) $(echo "$out" | num step_s)"
}
printf "%-6s %-8s %5s | %-22s | %-22s | %-22s | %-22s | %s\n" model limit ranks "ddp tok/s (B, MiB)" \
  "zero2 tok/s (B, MiB)" "zero3 tok/s (B, MiB)" "auto tok/s (B, MiB)" "auto predicted vs measured step"
for c in $cases; do
  model=${c%%:*}; limit=${c#*:}
  for n in $ranks; do
    dev=$work/dev-$model-$n.json; plan=$work/plan-$model-$n.json
    "${mpirun[@]}" -np "$n" "$osdp" profile --model "$model" --seq "$seq" --mem-limit "$limit" --out "$dev" --quiet >/dev/null 2>&1 \
      || { echo "$model $limit $n: profile failed"; continue; }
    pj=$("$osdp" plan --model "$model" --devices "$dev" --seq "$seq" --out "$plan" --json 2>&1)
    row=$(printf "%-6s %-8s %5s" "$model" "$limit" "$n")
    for s in ddp zero2 zero3; do
      b=$(echo "$pj" | uniform_batch "$s")
      if [ -z "$b" ]; then row="$row | $(printf '%-22s' 'does not fit')"; continue; fi
      read -r tps pk st <<< "$(run_train "$n" "$s" "$b" "$limit")"
      row="$row | $(printf '%8.0f (%3s, %6.1f)' "${tps:-0}" "$b" "$(awk -v p="${pk:-0}" 'BEGIN{print p/1048576}')")"
    done
    if [ -f "$plan" ]; then
      b=$(echo "$pj" | num micro_batch); pst=$(echo "$pj" | sed -n 's/.*"predicted":{[^}]*"step_s":\([-0-9.e+]*\).*/\1/p')
      ppk=$(echo "$pj" | sed -n 's/.*"predicted":{[^}]*"peak_bytes":\([-0-9.e+]*\).*/\1/p')
      read -r tps pk st <<< "$(run_train "$n" "$plan" "" "$limit")"
      row="$row | $(printf '%8.0f (%3s, %6.1f)' "${tps:-0}" "$b" "$(awk -v p="${pk:-0}" 'BEGIN{print p/1048576}')")"
      row="$row | $(awk -v p="$pst" -v m="${st:-0}" -v pp="$ppk" -v mp="${pk:-0}" 'BEGIN{printf "%.4f vs %.4f s (%+.1f%%), peak %s", p, m, (m>0?100*(m-p)/p:0), (pp==mp?"exact":"DIFFERS")}')"
    else
      row="$row | $(printf '%-22s' 'nothing fits')"
    fi
    echo "$row"
  done
done
