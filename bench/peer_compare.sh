#!/usr/bin/env bash
# osdp against PyTorch (../shared/peer/torch_peer.py: DDP and FSDP FULL_SHARD / SHARD_GRAD_OP on
# gloo) on the same model, micro-batch, sequence, ranks and threads, in one run: ROUNDS rounds,
# each running every PyTorch mode and every osdp plan once (interleaved, so a noisy minute hurts
# both sides alike), then each configuration's median tokens/s over the rounds (each run's own
# figure is already the median of its steps), and osdp's best against PyTorch's best.
# usage: bench/peer_compare.sh [BUILD_DIR]
# environment: MODEL (gpt2-124m), SEQ (256), BATCH (2), RANKS (2), THREADS (1), STEPS (4),
#   ROUNDS (2), PEER (../shared/peer/torch_peer.py), TORCH_MODES (ddp fsdp_full),
#   PLANS ("ddp|ddp --reduce-dtype bf16|zero2 --overlap-reduce|..." : osdp bench plan options)
set -u
build=${1:-build}
osdp=$build/osdp
here=$(cd "$(dirname "$0")/.." && pwd)
peer=${PEER:-$here/../shared/peer/torch_peer.py}
model=${MODEL:-gpt2-124m}; seq=${SEQ:-256}; batch=${BATCH:-2}; ranks=${RANKS:-2}
threads=${THREADS:-1}; steps=${STEPS:-4}; rounds=${ROUNDS:-2}
torch_modes=${TORCH_MODES:-"ddp fsdp_full"}
plans=${PLANS:-"ddp|ddp --reduce-dtype bf16|zero2 --overlap-reduce|zero2 --overlap-reduce --reduce-dtype bf16|zero3 --overlap-reduce --prefetch --reduce-dtype bf16"}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
[ -x "$osdp" ] || { echo "peer_compare: $osdp not built (cmake --build $build)" >&2; exit 1; }
[ -f "$peer" ] || { echo "peer_compare: $peer not found (set PEER)" >&2; exit 1; }
# The model's shape for PyTorch, from osdp's own description.
shape=$("$osdp" describe --model "$model" --json | head -c 400)
get() { echo "$shape" | sed -n "s/.*\"$1\":\([0-9]*\).*/\1/p" | head -1; }
L=$(get n_layer); C=$(get n_embd); H=$(get n_head); V=$(get padded_vocab)
[ -n "$L" ] && [ -n "$V" ] || { echo "peer_compare: cannot read model $model's shape" >&2; exit 1; }
field() { sed -n "s/.*\"$1\":\([-0-9.e+]*\).*/\1/p" | head -1; }
results=$(mktemp); trap 'rm -f "$results"' EXIT
IFS='|' read -r -a plan_list <<< "$plans"
echo "peer_compare: $model seq $seq, micro-batch $batch, $ranks ranks x $threads thread(s), $rounds rounds of $steps steps"
for r in $(seq 1 "$rounds"); do
  for m in $torch_modes; do
    out=$(/usr/bin/python3 "$peer" --mode "$m" --nproc "$ranks" --threads "$threads" --layers "$L" \
          --hidden "$C" --heads "$H" --vocab "$V" --seq "$seq" --micro-batch "$batch" --warmup 1 \
          --steps "$steps" 2>/dev/null | grep '^{' | tail -1)
    t=$(echo "$out" | field tokens_per_s)
    echo "  round $r  pytorch $m: ${t:-failed} tokens/s"
    [ -n "$t" ] && echo "pytorch|$m|$t" >> "$results"
  done
  for p in "${plan_list[@]}"; do
    # shellcheck disable=SC2086
    out=$(mpirun --oversubscribe --bind-to none -np "$ranks" "$osdp" bench --model "$model" --seq "$seq" \
          --batch "$batch" --threads "$threads" --steps "$steps" --plan $p --json 2>&1 | grep '^{' | tail -1)
    t=$(echo "$out" | field median_tokens_per_s)
    echo "  round $r  osdp $p: ${t:-failed} tokens/s"
    [ -n "$t" ] && echo "osdp|$p|$t" >> "$results"
  done
done
# Medians per configuration, the table, and best against best.
python3 - "$results" <<'PY'
import sys, statistics
rows = {}
for line in open(sys.argv[1]):
    side, conf, t = line.rstrip("\n").split("|")
    rows.setdefault((side, conf), []).append(float(t))
med = {k: statistics.median(v) for k, v in rows.items()}
best = {s: max((v, c) for (side, c), v in med.items() if side == s) for s in ("pytorch", "osdp")
        if any(side == s for side, _ in med)}
print("\n| side | configuration | tokens/s (median of rounds) | runs |")
print("|---|---|---|---|")
for (side, c), v in sorted(med.items(), key=lambda kv: (kv[0][0] != "pytorch", -kv[1])):
    print(f"| {side} | {c} | {v:.1f} | {len(rows[(side, c)])} |")
if "pytorch" in best and "osdp" in best:
    (tp, cp), (to, co) = best["pytorch"], best["osdp"]
    print(f"\nosdp best ({co}) {to:.1f} tokens/s vs PyTorch best ({cp}) {tp:.1f}: {to / tp:.3f}x")
PY
