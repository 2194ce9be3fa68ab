#!/usr/bin/env bash
# Plan invariance: with 1..4 and 6 ranks (the Llama family on 1, 2 and 4), the uniform plans (zero3 also with prefetch, and with every
# layer recomputed; hybrid: sharded within groups of 2 ranks, replicated across them, with and
# without overlapped reduce-scatters) and random mixed plans (random slices, strategies, shard
# groups, prefetch, overlap and recomputed layers) reproduce the
# single-process loss curve of the same global batch over 20 steps (1e-5 relative), end with
# the same weights (6e-6 absolute, see wtol), and each rank's peak memory equals the
# prediction to the byte. With gradient accumulation (K micro-steps of a smaller micro-batch) the
# same, on the same global batch.
# usage: plan_invariance.sh OSDP PLAN_TOOL MPIRUN...
set -u
osdp=$1; tool=$2; shift 2; mpirun=("$@")
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
pass=0; fail=0
check() { local what=$1; shift; if out=$("$@" 2>&1); then pass=$((pass+1)); else fail=$((fail+1)); echo "FAIL $what: $out"; fi; }
# train_and_check WHAT N REF EXT RUN -- TRAIN_ARGS...: trains on N ranks (the log to RUN.jsonl,
# the weights to RUN.EXT), then checks the losses (1e-5) and final weights (wtol) against the
# reference run REF's, and every rank's peak against the prediction.
train_and_check() {
  local what=$1 N=$2 ref=$3 ext=$4 run=$5; shift 6
  if ! "${mpirun[@]}" -np "$N" "$osdp" train "$@" --log "$run.jsonl" --save "$run.$ext" > "$run.sum" 2> "$run.err"; then
    fail=$((fail+1)); echo "FAIL $what: $(tail -3 "$run.err")"; return
  fi
  check "losses $what" "$tool" losses "$ref.jsonl" "$run.jsonl" 1e-5
  check "weights $what" "$tool" weights "$ref.$ext" "$run.$ext" "$wtol"
  check "memory $what" "$tool" memory "$run.sum"
}
# An odd model: no parameter count divides evenly by 3 or 4, several heads.
cat > "$work/odd.json" <<'JSON'
{"name":"odd","n_layer":2,"n_embd":36,"n_head":3,"vocab_size":61,"max_seq":32}
JSON
model=$work/odd.json
common=(--model "$model" --data addition:2 --seq 20 --steps 20 --lr 3e-3 --quiet --json)
B=2
# Final-weight tolerance (absolute). Measured over every run below (run with tolerance 0):
# the worst difference from the single-process run was 1.34e-6 (N=1, random plan 2; all
# others 4.1e-7 .. 8.8e-7). 6e-6 is about 4.5x that. A weight-decay slip is larger: decay
# moves a weight by lr*wd*|w| per step, here sum(lr) * 0.1 * |w| = 6.3e-4 * |w| over the 20
# steps (lr warms up to 3e-3 over 100 steps), so 1.3e-5 .. 5.7e-5 for |w| ~ 0.02 .. 0.09 (init
# std 0.02) and 6.3e-4 for a LayerNorm scale of 1; the old 1e-4 saw only the last. (Tried:
# an engine that skipped decay on zero3 slices ended 3.9e-5 .. 5.3e-5 off in every plan with
# zero3 slices, which passed 1e-4 and fails 6e-6.)
# To re-measure, run with OSDP_WEIGHT_TOL=0: every weights check then fails and prints its
# worst difference.
wtol=${OSDP_WEIGHT_TOL:-6e-6}
# A plan is a name or file, then ':' and the options that go with it.
for N in 1 2 3 4 6; do
  ref=$work/ref$N
  "$osdp" train "${common[@]}" --batch $((N * B)) --log "$ref.jsonl" --save "$ref.bin" > "$ref.sum" 2>&1 \
    || { fail=$((fail+1)); echo "FAIL reference N=$N: $(cat "$ref.sum")"; continue; }
  plans=(ddp zero2 zero3 "zero3:--prefetch" "zero3:--recompute all --prefetch")
  [ $N = 6 ] && plans=()
  # Hybrid: 4 ranks as 2 groups of 2, 6 ranks as 3 groups of 2.
  [ $N = 4 ] || [ $N = 6 ] && plans+=("zero3:--shard-group 2" "zero2:--shard-group 2 --overlap-reduce"
                                      "zero3:--shard-group 2 --overlap-reduce --prefetch")
  # The tied wte's two gradient uses back to back among sharded uses (every other op dp), in
  # flight one after the other with overlap_reduce.
  if [ $N = 4 ]; then
    printf '{"model": {"name": "odd", "n_layer": 2, "n_embd": 36, "n_head": 3, "vocab_size": 61, "max_seq": 32}, "world_size": 4, "micro_batch": %d, "seq_len": 20, "overlap_reduce": true, "ops": [{"name": "embed", "slices": ["zero3"], "shard_group": 2}]}\n' $B > "$work/tied4.json"
    plans+=("$work/tied4.json")
  fi
  for s in 1 2; do
    "$tool" random "$model" $N $B 20 $((N * 10 + s)) "$work/rand$N-$s.json" && plans+=("$work/rand$N-$s.json")
  done
  for spec in "${plans[@]}"; do
    plan=${spec%%:*}; extra=()
    [ "$plan" != "$spec" ] && read -r -a extra <<< "${spec#*:}"
    run=$work/run$N-$(basename "$plan" .json)-$(echo "${extra[*]}" | tr -dc 'a-z0-9')
    train_and_check "N=$N $spec" $N "$ref" bin "$run" -- "${common[@]}" --plan "$plan" "${extra[@]}" --batch $B
  done
done
# The Llama family (grouped-query attention with n_head * head_dim != n_embd, an untied head,
# RoPE with Llama 3's scaling bent at these positions): the same checks on 1, 2 and 4 ranks,
# uniform, recomputed, hybrid and random plans; weights saved as safetensors.
cat > "$work/llama.json" <<'JSON'
{"name":"llama-odd","family":"llama","n_layer":2,"n_embd":36,"n_head":4,"vocab_size":61,"max_seq":32,"n_kv_head":2,"head_dim":10,"ffn_dim":50,"tied_head":0,"qkv_bias":0,"norm_eps":1e-5,"rope_theta":10000,"rope_factor":8,"rope_low_freq_factor":1,"rope_high_freq_factor":4,"rope_original_max":8}
JSON
lcommon=(--model "$work/llama.json" --data addition:2 --seq 20 --steps 20 --lr 3e-3 --quiet --json)
for N in 1 2 4; do
  ref=$work/lref$N
  "$osdp" train "${lcommon[@]}" --batch $((N * B)) --log "$ref.jsonl" --save "$ref.safetensors" > "$ref.sum" 2>&1 \
    || { fail=$((fail+1)); echo "FAIL llama reference N=$N: $(cat "$ref.sum")"; continue; }
  plans=(ddp zero3 "zero3:--recompute all --prefetch")
  [ $N = 4 ] && plans+=(zero2 "zero3:--shard-group 2 --overlap-reduce --prefetch")
  "$tool" random "$work/llama.json" $N $B 20 $((N * 10 + 7)) "$work/lrand$N.json" && plans+=("$work/lrand$N.json")
  for spec in "${plans[@]}"; do
    plan=${spec%%:*}; extra=()
    [ "$plan" != "$spec" ] && read -r -a extra <<< "${spec#*:}"
    run=$work/lrun$N-$(basename "$plan" .json)-$(echo "${extra[*]}" | tr -dc 'a-z0-9')
    train_and_check "llama N=$N $spec" $N "$ref" safetensors "$run" -- "${lcommon[@]}" --plan "$plan" \
      "${extra[@]}" --batch $B
  done
done
# Gradient accumulation (--accum K): K micro-steps of micro-batch b per optimizer step on N
# ranks reproduce one process on the same global batch N*b*K (the references above: ref1 is
# 2 sequences, ref2 4, ref4 8), for every strategy, hybrid groups, prefetch, overlapped
# reduce-scatters, recomputation and a random mixed plan; the Llama family too. Each spec:
# ranks, reference, micro-batch, accumulation, plan, options.
# What sharded slices keep whole across the micro-steps (--keep-whole: a gradient reduced once
# per step, a zero3 weight gathered once) changes no loss either, with or without accumulating.
acc_specs=("1 ref1 1 2 ddp" "1 ref4 2 4 zero3 --prefetch" "2 ref2 1 2 zero2"
           "2 ref4 1 4 zero3 --prefetch --overlap-reduce" "2 ref4 1 4 RANDOM"
           "4 ref4 1 2 zero2 --shard-group 2 --overlap-reduce"
           "4 ref4 1 2 zero3 --shard-group 2 --prefetch --recompute all" "2 lref2 1 2 zero3 --prefetch"
           "2 ref4 1 4 zero3 --keep-whole grad+weight --prefetch --overlap-reduce"
           "2 ref4 1 4 zero2 --keep-whole grad" "1 ref4 2 4 zero3 --keep-whole weight --recompute all"
           "4 ref4 1 2 zero3 --shard-group 2 --keep-whole grad --overlap-reduce --prefetch"
           "2 ref2 2 1 zero3 --keep-whole grad+weight" "2 ref4 1 4 RANDOM2"
           "2 lref2 1 2 zero3 --keep-whole grad+weight --recompute all")
for spec in "${acc_specs[@]}"; do
  read -r N refn b K plan extra <<< "$spec"
  read -r -a extra <<< "${extra:-}"
  mc=("${common[@]}"); ext=bin
  [ "${refn:0:1}" = l ] && { mc=("${lcommon[@]}"); ext=safetensors; }
  if [ "${plan:0:6}" = RANDOM ]; then
    "$tool" random "$model" $N $b 20 "77${plan:6}" "$work/a$plan.json"; plan=$work/a$plan.json
  fi
  run=$work/acc-$(echo "$spec" | tr -dc 'a-z0-9')
  train_and_check "accumulation $spec" $N "$work/$refn" $ext "$run" -- "${mc[@]}" --plan "$plan" \
    "${extra[@]}" --batch $b --accum $K
done
# bf16 gradient reductions (--reduce-dtype bf16): each rank's gradient is rounded to bf16 (8
# significant bits, relative error <= 2^-9) before it travels; sums are fp32. So the losses are
# no longer those of one process to 1e-5 but stay within BF16_TOL (measured below: see docs/GUIDE.md),
# and must differ from the same plan's fp32 run (a bf16 path that silently sent fp32 fails).
bf16_tol=${OSDP_BF16_TOL:-1e-4}
for spec in "ddp:--reduce-dtype bf16" "zero3:--shard-group 2 --reduce-dtype bf16 --overlap-reduce" \
            "zero2:--reduce-dtype bf16"; do
  plan=${spec%%:*}; read -r -a extra <<< "${spec#*:}"; N=4
  run=$work/bf16-$(echo "$spec" | tr -dc 'a-z0-9')
  if ! "${mpirun[@]}" -np $N "$osdp" train "${common[@]}" --plan "$plan" "${extra[@]}" --batch $B \
       --log "$run.jsonl" > "$run.sum" 2> "$run.err"; then
    fail=$((fail+1)); echo "FAIL bf16 $spec: $(tail -3 "$run.err")"; continue
  fi
  check "bf16 losses $spec" "$tool" losses "$work/ref$N.jsonl" "$run.jsonl" "$bf16_tol"
  check "memory bf16 $spec" "$tool" memory "$run.sum"
  "${mpirun[@]}" -np $N "$osdp" train "${common[@]}" --plan "$plan" "${extra[@]/bf16/fp32}" \
    --batch $B --log "$run-fp32.jsonl" > /dev/null 2>&1
  if "$tool" losses "$run-fp32.jsonl" "$run.jsonl" 0 > /dev/null; then
    fail=$((fail+1)); echo "FAIL bf16 $spec: losses equal the fp32 reference exactly"
  else pass=$((pass+1)); fi
done
# A plan written for 3 ranks, launched on 2: refused with a clear error, no hang.
"$tool" random "$model" 3 $B 20 5 "$work/three.json"
if "${mpirun[@]}" -np 2 "$osdp" train "${common[@]}" --plan "$work/three.json" > "$work/mm.out" 2> "$work/mm.err"; then
  fail=$((fail+1)); echo "FAIL: a 3-rank plan ran on 2 ranks"
elif grep -q "world_size=3 but running on 2 ranks" "$work/mm.err"; then pass=$((pass+1))
else fail=$((fail+1)); echo "FAIL: rank-count error message: $(cat "$work/mm.err")"; fi
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
