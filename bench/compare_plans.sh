#!/usr/bin/env bash
# Compares the uniform plans ddp, zero2 and zero3 on 2 and 4 ranks for a few models, printing
# one table of ms/step, global tokens/s and per-rank peak memory (measured and predicted).
# usage: bench/compare_plans.sh [BUILD_DIR]   (environment: MODELS, RANKS, STEPS, BATCH, SEQ)
set -u
build=${1:-build}
osdp=$build/osdp
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
models=${MODELS:-"tiny small"}
ranks=${RANKS:-"2 4"}
steps=${STEPS:-3}
batch=${BATCH:-4}
seq=${SEQ:-256}
field() { sed -n "s/.*\"$1\":\([-0-9.e+]*\).*/\1/p"; }
printf "%-10s %5s %-6s %10s %12s %14s %14s %10s\n" model ranks plan ms/step tokens/s "peak MiB" "predicted MiB" "comm ms"
for m in $models; do
  for n in $ranks; do
    for p in ddp zero2 zero3; do
      out=$(mpirun --oversubscribe --bind-to none -np "$n" "$osdp" bench --model "$m" --plan "$p" \
            --batch "$batch" --seq "$seq" --steps "$steps" --json 2>&1 | tail -1)
      ms=$(echo "$out" | field ms_per_step); tps=$(echo "$out" | field tokens_per_s)
      pk=$(echo "$out" | field peak_bytes); pr=$(echo "$out" | field predicted_peak_bytes)
      cm=$(echo "$out" | field comm_s_per_step)
      if [ -z "$ms" ]; then echo "$m $n $p: failed: $out"; continue; fi
      awk -v m="$m" -v n="$n" -v p="$p" -v ms="$ms" -v t="$tps" -v pk="$pk" -v pr="$pr" -v cm="$cm" \
        'BEGIN { printf "%-10s %5s %-6s %10.1f %12.1f %14.2f %14.2f %10.1f\n", m, n, p, ms, t, pk/1048576, pr/1048576, cm*1000 }'
    done
  done
done
cat <<'REF'
For comparison (../shared/osdp-method.md section 6, same machine, PyTorch 1.13 with gloo, 2 ranks x
1 thread): small (4 layers, hidden 256, vocab 8192), micro-batch 4: DDP 4084 tokens/s, FULL_SHARD
3590. gpt2-124m, micro-batch 2, seq 256: DDP 149, FULL_SHARD 150, SHARD_GRAD_OP 154; llm.c 47.
(MODELS=gpt2-124m BATCH=2 bench/compare_plans.sh measures osdp on the latter.)
REF
