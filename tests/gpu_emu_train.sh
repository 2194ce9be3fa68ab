#!/usr/bin/env bash
# gpu_emu_train.sh: training with --device cuda on the CPU emulation of CUDA (tools/cuda-emu,
# CTest gpu_emu_train, label gpu-emu) is training on the CPU: 3 steps in full fp32 (--matmul
# fp32) of the tiny GPT-2 under ddp and zero3 (sharded gradient norm and AdamW parts) and of
# llama-tiny (RMSNorm, RoPE, SwiGLU, grouped-query attention) reproduce the CPU's losses and
# gradient norms within 1e-4 relative, and each run's measured arena peak equals the
# prediction; tiny with TF32 on (--tf32 on, the GPU's default), within 1e-3 and visibly not
# fp32; tiny with --matmul bf16 (matmuls and attention on bf16 tensor cores), within 3e-3 and
# visibly neither fp32 nor TF32; tiny and llama-tiny with --precision bf16 (bf16 activations
# and weight copies, fp32 master weights, gradients and AdamW), within 1e-3 (norms 3e-3), with a
# peak below the fp32 run's (the activations take half the bytes) and equal to the prediction;
# and tiny on 2 ranks under zero3 with prefetch and bf16 storage (each rank gathers the bf16
# copies of the shards) against the CPU's one process on the same global batch; the CPU's own
# bf16 table against the emulated CUDA one (two implementations of the bf16 contract).
# The engine's whole GPU path (device memory, copies, every kernel of a step, the one-pass
# gradient norm and AdamW) on a machine without a GPU; about 5 s a run. gpu_train.sh is the
# full version on a real GPU.
# usage: gpu_emu_train.sh OSDP OSDP_EMU PLAN_TOOL MPIRUN...
set -u
osdp=$1; emu=$2; tool=$3; shift 3; mpirun=("$@")
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
pass=0; fail=0
check() { local what=$1; shift; if out=$("$@" 2>&1); then pass=$((pass+1)); else fail=$((fail+1)); echo "FAIL $what: $out"; fi; }
# Every step's gradient norm of two logs agrees within $3 relative (the losses of 3 warm-up
# steps barely move: the norm is what shows a wrong gradient or norm directly).
norms() { grep -o '"grad_norm":[^,}]*' "$1" | cut -d: -f2; }
same_norms() {
  paste <(norms "$1") <(norms "$2") | awk -v n="$(norms "$1" | wc -l)" -v tol="$3" '
    { d = $1 - $2; if (d < 0) d = -d; if (d > tol * ($1 < 0 ? -$1 : $1)) { print "step " NR ": " $1 " vs " $2; bad = 1 } }
    END { if (NR != n || NR == 0) { print NR " steps"; bad = 1 }; exit bad }'
}
# The first step's gradient norms of two logs differ (TF32 or bf16 products are not fp32's).
norms_differ() { [ "$(norms "$1" | head -n 1)" != "$(norms "$2" | head -n 1)" ] || { echo "step 1: the same norm"; return 1; }; }

common=(--data addition:2 --seq 32 --batch 2 --steps 3 --lr 3e-3 --quiet --json)
for model in tiny llama-tiny; do
  if ! "$osdp" train --model $model "${common[@]}" --tf32 off --device cpu --log "$work/$model-cpu.jsonl" \
       > "$work/$model-cpu.sum" 2>&1; then
    echo "FAIL the CPU reference of $model: $(tail -2 "$work/$model-cpu.sum")"; exit 1
  fi
done
# The emulation reports 16 GiB free: --mem-limit makes the arena what the plan needs.
# Whether the run of summary $2 peaked lower than that of summary $1.
peak() { grep -o '"peak_bytes":[0-9]*' "$1" | tail -n 1 | cut -d: -f2; }
lower_peak() { [ "$(peak "$2")" -lt "$(peak "$1")" ] || { echo "peak $(peak "$2") not below $(peak "$1")"; return 1; }; }
for case in tiny:ddp tiny:zero3 tiny:tf32 tiny:bf16 llama-tiny:ddp tiny:bf16-storage \
            llama-tiny:bf16-storage; do
  model=${case%%:*}; plan=${case#*:}
  run=$work/emu-$model-$plan; ref=$work/$model-cpu.jsonl
  case $plan in
    tf32) args=(--plan ddp --tf32 on) ;;
    bf16) args=(--plan ddp --matmul bf16) ;;
    bf16-storage) args=(--plan ddp --precision bf16) ;;
    *) args=(--plan $plan --matmul fp32) ;;
  esac
  if ! "$emu" train --model $model "${common[@]}" "${args[@]}" --device cuda --mem-limit 256M \
       --log "$run.jsonl" > "$run.sum" 2> "$run.err"; then
    fail=$((fail+1)); echo "FAIL $case on the emulated GPU: $(tail -3 "$run.err")"; continue
  fi
  if [ $plan = tf32 ]; then
    # The emulated cuBLAS rounds every product's inputs to TF32 (measured: 5e-5 on the norms,
    # 2e-6 on the losses).
    check "losses $case" "$tool" losses "$ref" "$run.jsonl" 1e-3
    check "gradient norms $case" same_norms "$ref" "$run.jsonl" 1e-3
    check "TF32 in effect" norms_differ "$ref" "$run.jsonl"
  elif [ $plan = bf16-storage ]; then
    # Activations and weights stored in bf16 (every kernel's output rounded once), products on
    # bf16 operands with fp32 sums (measured: 1.3e-5 / 4e-5 on the losses, 4.5e-4 / 7e-4 on the
    # norms of tiny / llama-tiny).
    check "losses $case" "$tool" losses "$ref" "$run.jsonl" 1e-3
    check "gradient norms $case" same_norms "$ref" "$run.jsonl" 3e-3
    check "bf16 storage in effect (peak below fp32's)" lower_peak "$work/emu-$model-ddp.sum" "$run.sum"
  elif [ $plan = bf16 ]; then
    # Every product's inputs rounded to bf16, the attention's tiles, P and dS too (measured:
    # 3.5e-4 on the norms, 2e-5 on the losses).
    check "losses $case" "$tool" losses "$ref" "$run.jsonl" 1e-3
    check "gradient norms $case" same_norms "$ref" "$run.jsonl" 3e-3
    check "bf16 in effect (not fp32)" norms_differ "$ref" "$run.jsonl"
    check "bf16 in effect (not TF32)" norms_differ "$work/emu-tiny-tf32.jsonl" "$run.jsonl"
  else
    check "losses $case" "$tool" losses "$ref" "$run.jsonl" 1e-4
    check "gradient norms $case" same_norms "$ref" "$run.jsonl" 1e-4
  fi
  check "memory $case" "$tool" memory "$run.sum"
done
# Two implementations of one bf16 contract: the CPU's bf16 table (its products emulated where the
# CPU lacks bf16: OSDP_CPU_BF16_EMULATE) against the emulated CUDA bf16 table, on the same runs
# (measured: 2.7e-5 / 3.6e-5 on the losses, 2.2e-4 on the norms of tiny / llama-tiny).
for model in tiny llama-tiny; do
  run=$work/cpu-$model-bf16
  if OSDP_CPU_BF16_EMULATE=1 "$osdp" train --model $model "${common[@]}" --plan ddp --precision bf16 \
       --log "$run.jsonl" > "$run.sum" 2> "$run.err"; then
    check "CPU bf16 against CUDA bf16 losses $model" "$tool" losses "$work/emu-$model-bf16-storage.jsonl" "$run.jsonl" 1e-4
    check "CPU bf16 against CUDA bf16 norms $model" same_norms "$work/emu-$model-bf16-storage.jsonl" "$run.jsonl" 1e-3
  else
    fail=$((fail+1)); echo "FAIL $model bf16 on the CPU: $(tail -3 "$run.err")"
  fi
done
# 2 ranks, zero3 with prefetch, bf16 storage: the same global batch as one CPU process.
run=$work/emu-tiny-zero3-bf16-2ranks
if "$osdp" train --model tiny "${common[@]}" --batch 4 --tf32 off --device cpu --log "$work/tiny-cpu-b4.jsonl" \
     > /dev/null 2>&1 &&
   "${mpirun[@]}" -np 2 "$emu" train --model tiny "${common[@]}" --plan zero3 --prefetch --precision bf16 \
     --device cuda --mem-limit 256M --log "$run.jsonl" > "$run.sum" 2> "$run.err"; then
  check "losses tiny zero3 bf16 2 ranks" "$tool" losses "$work/tiny-cpu-b4.jsonl" "$run.jsonl" 1e-3
  check "gradient norms tiny zero3 bf16 2 ranks" same_norms "$work/tiny-cpu-b4.jsonl" "$run.jsonl" 3e-3
  check "memory tiny zero3 bf16 2 ranks" "$tool" memory "$run.sum"
else
  fail=$((fail+1)); echo "FAIL tiny zero3 bf16 on 2 emulated ranks: $(grep -v '^emu' "$run.err" | tail -3)"
fi
# The same global batch in 2 micro-steps of 1, every zero3 weight kept gathered (bf16, in its own
# buffer) and every gradient kept whole across them (reduce-scattered once a step).
run=$work/emu-tiny-zero3-bf16-keep
if "${mpirun[@]}" -np 2 "$emu" train --model tiny "${common[@]}" --plan zero3 --keep-whole grad+weight \
     --precision bf16 --batch 1 --accum 2 --device cuda --mem-limit 256M --log "$run.jsonl" > "$run.sum" 2> "$run.err"; then
  check "losses tiny zero3 bf16 kept whole" "$tool" losses "$work/tiny-cpu-b4.jsonl" "$run.jsonl" 1e-3
  check "memory tiny zero3 bf16 kept whole" "$tool" memory "$run.sum"
else
  fail=$((fail+1)); echo "FAIL tiny zero3 bf16 kept whole on 2 emulated ranks: $(grep -v '^emu' "$run.err" | tail -3)"
fi
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
