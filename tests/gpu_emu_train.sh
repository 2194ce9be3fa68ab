#!/usr/bin/env bash
# gpu_emu_train.sh: training with --device cuda on the CPU emulation of CUDA (tools/cuda-emu,
# CTest gpu_emu_train, label gpu-emu) is training on the CPU: the tiny model, 3 steps in full
# fp32 (--tf32 off), under ddp and zero3 (sharded gradient norm and AdamW parts), reproduces the
# CPU's losses and gradient norms within 1e-4 relative, and each run's measured arena peak
# equals the prediction.
# The engine's whole GPU path (device memory, copies, every kernel of a step, the one-pass
# gradient norm and AdamW) on a machine without a GPU; about 5 s a run. gpu_train.sh is the
# full version on a real GPU.
# usage: gpu_emu_train.sh OSDP OSDP_EMU PLAN_TOOL
set -u
osdp=$1; emu=$2; tool=$3
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
pass=0; fail=0
check() { local what=$1; shift; if out=$("$@" 2>&1); then pass=$((pass+1)); else fail=$((fail+1)); echo "FAIL $what: $out"; fi; }
# Every step's gradient norm of two logs agrees within 1e-4 relative (the losses of 3 warm-up
# steps barely move: the norm is what shows a wrong gradient or norm directly).
norms() { grep -o '"grad_norm":[^,}]*' "$1" | cut -d: -f2; }
same_norms() {
  paste <(norms "$1") <(norms "$2") | awk -v n="$(norms "$1" | wc -l)" '
    { d = $1 - $2; if (d < 0) d = -d; if (d > 1e-4 * ($1 < 0 ? -$1 : $1)) { print "step " NR ": " $1 " vs " $2; bad = 1 } }
    END { if (NR != n || NR == 0) { print NR " steps"; bad = 1 }; exit bad }'
}

common=(--model tiny --data addition:2 --seq 32 --batch 2 --steps 3 --lr 3e-3 --quiet --json --tf32 off)
if ! "$osdp" train "${common[@]}" --device cpu --log "$work/cpu.jsonl" > "$work/cpu.sum" 2>&1; then
  echo "FAIL the CPU reference: $(tail -2 "$work/cpu.sum")"; exit 1
fi
for plan in ddp zero3; do
  run=$work/emu-$plan
  # The emulation reports 16 GiB free: the arena takes what the plan needs, not what is free.
  if ! "$emu" train "${common[@]}" --device cuda --plan $plan --mem-limit 256M --log "$run.jsonl" \
       > "$run.sum" 2> "$run.err"; then
    fail=$((fail+1)); echo "FAIL $plan on the emulated GPU: $(tail -3 "$run.err")"; continue
  fi
  check "losses $plan" "$tool" losses "$work/cpu.jsonl" "$run.jsonl" 1e-4
  check "gradient norms $plan" same_norms "$work/cpu.jsonl" "$run.jsonl"
  check "memory $plan" "$tool" memory "$run.sum"
done
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
