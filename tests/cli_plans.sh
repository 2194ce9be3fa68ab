#!/usr/bin/env bash
# cli_plans.sh OSDP MPIRUN...: `osdp train --plan FILE` runs the plan it is given. Plan files
# written here by hand for 2 ranks (ddp, zero2, zero3, zero3 with linears and embed in 4 slices, the
# same with "prefetch": true, a mixed plan) are each described (`osdp describe --plan FILE
# --json`) and trained for 2 steps on 2 ranks; for each, the measured per-rank peak equals the
# predicted one to the byte, on every rank. Since every plan gives the same losses, the
# predictions must also differ the way the strategies say, so a plan field that the loader,
# the predictor or the runtime dropped shows up:
#   persistent bytes (params+grads+optim): zero3 < mixed < ddp and zero3 < zero2 < ddp;
#   transient: ddp none, unsplit zero3 = weight + gradient of the largest block, split zero3 <
#   unsplit zero3 (only one slice's gather is live);
#   peak: split zero3 with prefetch > without (two gathered weights live), and --prefetch on
#   the command line (describe and train) gives the prefetch plan's peak.
# Recomputation: the split plan with both layers recomputed (a plan file's "layers", and
# --recompute all on the command line) predicts and measures a lower peak, exactly. osdp plan
# chooses recomputation under a limit only it meets, and --recompute 0 there finds nothing.
# All plans train the same model on the same global batch, so their final losses agree (1e-5).
# osdp plan --global-batch G plans N x B x K = G (gradient accumulation) and train keeps it.
set -u
OSDP=${1:?usage: cli_plans.sh OSDP MPIRUN...}
shift
mpirun=("$@")
source "${BASH_SOURCE%/*}/cli_common.sh"

# The operators of tiny that own parameters, with their kinds, from describe itself.
if ! "$OSDP" describe --model tiny --json >tiny.json 2>err.txt; then
  bad "osdp describe --model tiny --json failed: $(cat err.txt)"
fi
mapfile -t op_rows < <(grep -o '"name":"[^"]*","kind":"[^"]*","params":[0-9]*' tiny.json |
  sed 's/"name":"\([^"]*\)","kind":"\([^"]*\)","params":\([0-9]*\)/\1 \2 \3/' | awk '$3 > 0')
nlin=$(printf '%s\n' "${op_rows[@]}" | awk '$2 == "linear"' | wc -l)
if [ "${#op_rows[@]}" -eq 14 ] && [ "$nlin" -eq 8 ]; then ok
else bad "tiny should have 14 operators with parameters (8 linears), describe lists ${#op_rows[@]} ($nlin)"; fi

# write_plan FILE PREFETCH LINEAR OTHER [OP=SLICES...]: a 2-rank plan for tiny at micro-batch 2,
# seq 16. LINEAR and OTHER are comma-separated slice strategies for the linears and for the
# other operators (embed, LayerNorms); OP=SLICES overrides one operator.
write_plan() {
  local f=$1 pf=$2 lin=$3 oth=$4 sep="" row op kind s kv
  shift 4
  {
    printf '{"model":{"name":"tiny","n_layer":2,"n_embd":64,"n_head":4,"vocab_size":256,"max_seq":256},\n'
    printf ' "world_size":2,"micro_batch":2,"seq_len":16,"prefetch":%s,\n "ops":[' "$pf"
    for row in "${op_rows[@]}"; do
      read -r op kind _ <<<"$row"
      s=$oth; [ "$kind" = linear ] && s=$lin
      for kv in "$@"; do [ "${kv%%=*}" = "$op" ] && s=${kv#*=}; done
      printf '%s\n  {"name":"%s","slices":[%s]}' "$sep" "$op" "$(sed 's/[^,][^,]*/"&"/g' <<<"$s")"
      sep=,
    done
    printf ']}\n'
  } >"$f"
}
write_plan ddp.json false dp dp
write_plan zero2.json false zero2 zero2
write_plan zero3.json false zero3 zero3
# embed (wte + wpe) is tiny's largest block, so it is split too, or it alone would set the transient.
write_plan split.json false zero3,zero3,zero3,zero3 zero3 embed=zero3,zero3,zero3,zero3
write_plan prefetch.json true zero3,zero3,zero3,zero3 zero3 embed=zero3,zero3,zero3,zero3
write_plan mixed.json false dp,zero3 zero2 embed=zero3,dp,zero2 h1.fc=zero3,zero3,zero3,zero3 \
  h0.qkv=dp h1.ln2=dp h0.proj=zero2,zero3,dp

# field NAME FILE: the integer value of the first "NAME": in FILE.
field() { grep -o "\"$1\":[0-9]*" "$2" | head -1 | cut -d: -f2; }
# mem NAME FILE: the integer NAME of the "memory" object of a describe --json output.
mem() { grep -o '"memory":{[^}]*}' "$2" | grep -o "\"$1\":[0-9]*" | cut -d: -f2; }

declare -A peak persist transient loss
# run_plan NAME EXTRA...: describe and train plan NAME.json (EXTRA: more options for both).
run_plan() {
  local n=$1 key=$1
  shift
  [ $# -gt 0 ] && key="$n$(printf %s "$@")"
  if ! "$OSDP" describe --plan "$n.json" --ranks 2 --json "$@" >"$key.desc" 2>err.txt; then
    bad "describe --plan $n.json $*: $(cat err.txt)"; return
  fi
  if ! "${mpirun[@]}" -np 2 "$OSDP" train --plan "$n.json" --steps 2 --json --quiet "$@" \
       >"$key.sum" 2>err.txt; then
    bad "train --plan $n.json $* on 2 ranks failed: $(tail -3 err.txt)"; return
  fi
  local pred meas mpred off
  pred=$(mem peak "$key.desc"); meas=$(field peak_bytes "$key.sum")
  mpred=$(field predicted_peak_bytes "$key.sum"); off=$(field ranks_off_prediction "$key.sum")
  if [ -n "$pred" ] && [ "$pred" -gt 0 ] && [ "$meas" = "$pred" ] && [ "$mpred" = "$pred" ] && [ "$off" = 0 ]; then ok
  else bad "plan $n $*: describe predicts peak '$pred', train measured '$meas' (its prediction '$mpred', ranks off '$off')"; fi
  peak[$key]=$pred
  local pa gr op
  pa=$(mem params "$key.desc"); gr=$(mem grads "$key.desc"); op=$(mem optim "$key.desc")
  persist[$key]=$(( ${pa:-0} + ${gr:-0} + ${op:-0} ))  # (a missing object fails the peak check)
  transient[$key]=$(mem transient "$key.desc")
  loss[$key]=$(grep -o '"final_loss":[-0-9.e+]*' "$key.sum" | cut -d: -f2)
}
sed 's/]}$/],"layers":[{"layer":0,"recompute":true},{"layer":1,"recompute":true}]}/' split.json >recomp.json
for n in ddp zero2 zero3 split prefetch mixed recomp; do run_plan $n; done
run_plan split --prefetch
run_plan split --recompute all

# lt A B WHAT: checks A < B (both set).
lt() { if [ -n "$1" ] && [ -n "$2" ] && [ "$1" -lt "$2" ]; then ok; else bad "$3: want '$1' < '$2'"; fi; }
lt "${persist[zero3]:-}" "${persist[zero2]:-}" "persistent bytes zero3 < zero2"
lt "${persist[zero2]:-}" "${persist[ddp]:-}" "persistent bytes zero2 < ddp"
lt "${persist[zero3]:-}" "${persist[mixed]:-}" "persistent bytes zero3 < mixed"
lt "${persist[mixed]:-}" "${persist[ddp]:-}" "persistent bytes mixed < ddp"
if [ "${transient[ddp]:-x}" = 0 ]; then ok; else bad "ddp transient '${transient[ddp]:-}', want 0"; fi
# Unsplit zero3 on 2 ranks: the largest live transient is the gathered weight and the full
# gradient of the largest block (padded to a multiple of 2), 4 bytes each.
big=$(printf '%s\n' "${op_rows[@]}" | awk '{ n = $3 + $3 % 2; if (n > m) m = n } END { print 8 * m }')
if [ "${transient[zero3]:-x}" = "$big" ]; then ok
else bad "zero3 transient '${transient[zero3]:-}', want weight + gradient of the largest block $big"; fi
# Split zero3: no more than unsplit (the fused LM head holds all of embed's slices at once, and
# embed is tiny's largest block, so here they are equal; test_model checks the exact figure).
le() { if [ -n "$1" ] && [ -n "$2" ] && [ "$1" -le "$2" ]; then ok; else bad "$3: want '$1' <= '$2'"; fi; }
le "${transient[split]:-}" "${transient[zero3]:-}" "transient split zero3 <= unsplit zero3"
lt "${peak[split]:-}" "${peak[prefetch]:-}" "peak split zero3 without prefetch < with"
if [ -n "${peak[prefetch]:-}" ] && [ "${peak[split--prefetch]:-}" = "${peak[prefetch]}" ]; then ok
else bad "--prefetch on split.json: peak '${peak[split--prefetch]:-}', want the prefetch plan's '${peak[prefetch]:-}'"; fi
lt "${peak[recomp]:-}" "${peak[split]:-}" "peak with both layers recomputed < without"
if [ -n "${peak[recomp]:-}" ] && [ "${peak[split--recomputeall]:-}" = "${peak[recomp]}" ]; then ok
else bad "--recompute all on split.json: peak '${peak[split--recomputeall]:-}', want the recomputing plan's '${peak[recomp]:-}'"; fi
dev=(--model tiny --ranks 2 --flops 1e11 --seq 256)
n0=$("$OSDP" plan "${dev[@]}" --mem-limit 1KiB --json --recompute 0 2>/dev/null | grep -o '"min_bytes":[0-9]*' | cut -d: -f2)
na=$("$OSDP" plan "${dev[@]}" --mem-limit 1KiB --json --recompute all 2>/dev/null | grep -o '"min_bytes":[0-9]*' | cut -d: -f2)
if [ -n "$n0" ] && [ -n "$na" ] && [ "$na" -lt "$n0" ]; then
  mid=$(( (n0 + na) / 2 ))
  if "$OSDP" plan "${dev[@]}" --mem-limit "$mid" --out mid.json >mid.txt 2>err.txt &&
     grep -q '"recompute":[[:space:]]*true' mid.json && grep -q 'layers recomputed' mid.txt; then ok
  else bad "plan at $mid bytes (between the minima $na and $n0) does not recompute: $(cat err.txt)"; fi
  if "$OSDP" plan "${dev[@]}" --mem-limit "$mid" --json --recompute 0 >r0.txt 2>err.txt; then
    bad "plan --recompute 0 at $mid bytes found a plan below its minimum $n0"
  elif grep -q '"fits":false' r0.txt; then ok
  else bad "plan --recompute 0 at $mid bytes: $(cat err.txt)"; fi
else bad "plan minima: no recompute '$n0', all '$na' (want all < none)"; fi
# Plans for bf16 storage (activations and weight copies in bf16): the plan file says so, its
# predicted peak is describe's for that file, and at the same limit its micro-batch is larger.
b16=(--model small --ranks 2 --flops 1e11 --seq 256 --mem-limit 160MiB --recompute 0)
# field FILE EXPR: a value of osdp plan --json's object d.
field() { python3 -c "import json, sys; d = json.load(open(sys.argv[1])); print($2)" "$1" 2>/dev/null; }
if "$OSDP" plan "${b16[@]}" --precision bf16 --out b16.json --json >b16.txt 2>err.txt &&
   "$OSDP" plan "${b16[@]}" --json >b32.txt 2>>err.txt; then
  want=$(field b16.txt 'd["predicted"]["peak_bytes"]')
  got=$("$OSDP" describe --model small --plan b16.json | sed -n 's/^ *peak \([0-9][0-9]*\) bytes.*/\1/p')
  mb16=$(field b16.txt 'd["micro_batch"]')
  mb32=$(field b32.txt 'd["micro_batch"]')
  if grep -q '"precision":[[:space:]]*"bf16"' b16.json && [ -n "$want" ] && [ "$want" = "$got" ] &&
     [ -n "$mb16" ] && [ -n "$mb32" ] && [ "$mb16" -gt "$mb32" ]; then ok
  else bad "plan --precision bf16: precision in file? peak '$want' vs describe '$got'; micro-batch bf16 '$mb16' fp32 '$mb32'"; fi
else bad "plan --precision bf16: $(cat err.txt)"; fi

# Every plan trains the same model: the same loss after 2 steps.
ref=${loss[ddp]:-}
for key in zero2 zero3 split prefetch mixed split--prefetch recomp split--recomputeall; do
  l=${loss[$key]:-}
  if [ -n "$ref" ] && [ -n "$l" ] && awk -v a="$ref" -v b="$l" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= 1e-5 * a) }'; then ok
  else bad "plan $key: loss '$l' differs from ddp's '$ref'"; fi
done

# A fixed global batch (--global-batch G): the plan's ranks x micro-batch x micro-steps is G
# (JSON and the plan file agree), training with that plan keeps it (the summary's global batch)
# and its peak is the prediction; a G the ranks do not divide is one error line.
# jnum FILE KEY: the number after "KEY": in a JSON file (the first one; 1 when absent).
jnum() { local v; v=$(grep -o "\"$2\":[[:space:]]*[0-9]*" "$1" | head -1 | grep -o '[0-9]*$'); echo "${v:-1}"; }
if "$OSDP" plan --model tiny --ranks 2 --flops 1e10 --seq 16 --mem-limit 3MiB --global-batch 24 \
     --out acc.json --json >acc.out 2>err.txt &&
   [ $(( $(jnum acc.json world_size) * $(jnum acc.json micro_batch) * $(jnum acc.json grad_accum) )) -eq 24 ] &&
   grep -q '"global_batch":24' acc.out; then ok
else bad "osdp plan --global-batch 24: $(head -3 err.txt) $(cat acc.json 2>/dev/null | head -5)"; fi
if "${mpirun[@]}" -np 2 "$OSDP" train --model tiny --plan acc.json --steps 2 --quiet --json --eval-batches 0 \
     >acc.sum 2>err.txt && grep -q '"global_batch":24' acc.sum &&
   [ "$(jnum acc.sum peak_bytes)" = "$(jnum acc.sum predicted_peak_bytes)" ]; then ok
else bad "training the --global-batch plan: $(head -3 err.txt) $(tail -1 acc.sum)"; fi
# What ops keep whole across micro-steps: on a slow link where ddp does not fit, the planner keeps
# gradients whole (one reduction a step instead of 12); --keep-whole none forbids it and its
# plan is predicted slower; the kept plan trains on 2 ranks with peak = prediction.
kp=("$OSDP" plan --model tiny --ranks 2 --flops 1e10 --bandwidth 1e7 --seq 16 --mem-limit 2.1MiB --global-batch 24)
# pred_sps FILE: the chosen plan's predicted samples/s in an `osdp plan --json` report, whole.
pred_sps() { grep -o '"predicted":{[^{}]*}' "$1" | head -1 | grep -o '"samples_per_s":[0-9]*' | grep -o '[0-9]*$'; }
if "${kp[@]}" --out keep.json --json >keep.out 2>err.txt && grep -q '"keep_whole"' keep.json &&
   "${kp[@]}" --keep-whole none --out nokeep.json --json >nokeep.out 2>>err.txt &&
   ! grep -q '"keep_whole"' nokeep.json && [ "$(pred_sps keep.out)" -gt "$(pred_sps nokeep.out)" ]; then ok
else bad "osdp plan keeping whole: $(head -3 err.txt) $(grep -c keep_whole keep.json nokeep.json 2>&1 | tr '\n' ' ') samples/s $(pred_sps keep.out) vs $(pred_sps nokeep.out)"; fi
if "${mpirun[@]}" -np 2 "$OSDP" train --model tiny --plan keep.json --steps 2 --quiet --json --eval-batches 0 \
     >keep.sum 2>err.txt && [ "$(jnum keep.sum keep_grad_ops)" -gt 0 ] &&
   [ "$(jnum keep.sum peak_bytes)" = "$(jnum keep.sum predicted_peak_bytes)" ]; then ok
else bad "training a plan that keeps whole: $(head -3 err.txt) $(tail -1 keep.sum)"; fi
"$OSDP" plan --model tiny --ranks 2 --flops 1e10 --seq 16 --mem-limit 3MiB --global-batch 7 >out.txt 2>err.txt
if [ $? -ne 0 ] && [ "$(wc -l <err.txt)" -eq 1 ] && grep -q "global-batch 7 is not a multiple of the 2 ranks" err.txt; then ok
else bad "--global-batch 7 on 2 ranks: $(head -3 err.txt)"; fi

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
