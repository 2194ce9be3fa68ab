#!/usr/bin/env bash
# cli_resume.sh OSDP PLAN_TOOL MPIRUN...: checkpoints during training and --resume.
#  - Same ranks and plan: a run stopped at step 10 and resumed to 30 saves weights
#    byte-identical to an uninterrupted 30-step run (cosine schedule, warm-up 5), in one process
#    (ddp) and on 2 ranks (zero3).
#  - Resharding: written by 2 ranks under zero3 at micro-batch 4, resumed by 4 ranks under ddp
#    at micro-batch 2: steps 11..30 within 1e-5 of one process on the same global batch; written
#    by 5 zero3 ranks (some owning empty shards), resumed by one process: within 1e-5 of the
#    uninterrupted 5-rank run; written by 4 ranks sharding zero3 in 2 groups of 2, resumed by
#    2 zero2 ranks: within 1e-5 of one process; resumed with gradient accumulation (1 process x 2
#    x 4 micro-steps, 2 zero3 ranks x 1 x 4) within 1e-5 of one process x 8; 3 ranks, which do
#    not divide the global batch of 8, refused naming the rank counts that do.
#  - A rank killed (SIGKILL) while a 2-rank run checkpoints every 5 steps: the job exits
#    non-zero within 30 s, and resuming from the newest complete checkpoint runs its next steps.
#  - A rank stopped (SIGSTOP): the watchdog (--watchdog 3) names rank 1 and ends the job.
#  - Export of a checkpoint directory equals --save of the same state.
#  - A damaged newest checkpoint is skipped for the previous one; a NaN loss stops the run
#    naming the step (or is skipped with --on-nonfinite skip); every bad option fails with one
#    line before training, including a --save path that cannot be written and a plan larger
#    than the host's memory without --mem-limit.
set -u
OSDP=$1; tool=$(cd "${2%/*}" && pwd)/${2##*/}; shift 2; mpirun=("$@")
source "${BASH_SOURCE%/*}/cli_common.sh"
osdp=$OSDP
C=(train --steps 30 --lr-schedule cosine --warmup 5 --quiet --json --eval-batches 0)

# 1. Same ranks, same plan: bit-identical.
"$osdp" "${C[@]}" --save full1.bin >/dev/null 2>&1
"$osdp" "${C[@]}" --checkpoint d1 --checkpoint-every 10 --stop-after 10 >/dev/null 2>err.txt
"$osdp" "${C[@]}" --resume d1 --save res1.bin >/dev/null 2>>err.txt
if cmp -s full1.bin res1.bin; then ok; else bad "1 process: resumed weights differ: $(head -2 err.txt)"; fi
"${mpirun[@]}" -np 2 "$osdp" "${C[@]}" --plan zero3 --batch 4 --save full2.bin >/dev/null 2>&1
"${mpirun[@]}" -np 2 "$osdp" "${C[@]}" --plan zero3 --batch 4 --checkpoint d2 --checkpoint-every 5 \
  --stop-after 10 >/dev/null 2>err.txt
if [ -f d2/step-10/manifest.json ] && [ -f d2/step-10/rank-00001.bin ] && [ -f d2/step-5/manifest.json ]; then ok
else bad "2 ranks: checkpoints step-5 and step-10 not written: $(ls d2 2>&1; head -2 err.txt)"; fi
"${mpirun[@]}" -np 2 "$osdp" "${C[@]}" --plan zero3 --batch 4 --resume d2 --save res2.bin >/dev/null 2>err.txt
if cmp -s full2.bin res2.bin; then ok; else bad "2 ranks zero3: resumed weights differ: $(head -2 err.txt)"; fi

# Export of a checkpoint directory: the same weights as --save of the same run (byte-identical
# llm.c file), from the directory (its newest) and from the step directory.
"${mpirun[@]}" -np 2 "$osdp" train --steps 10 --quiet --plan zero3 --batch 4 --eval-batches 0 --checkpoint dx \
  --save x.bin >/dev/null 2>&1
if "$osdp" export dx --format llmc ex.bin --quiet 2>err.txt && cmp -s x.bin ex.bin &&
   "$osdp" export dx/step-10 --format safetensors ex.st --quiet 2>>err.txt &&
   "$osdp" export ex.st --format llmc ex2.bin --quiet 2>>err.txt && cmp -s x.bin ex2.bin; then ok
else bad "export of a checkpoint directory differs from --save: $(head -2 err.txt)"; fi

# 2. Resharding: 2 ranks zero3 x 4 -> 4 ranks ddp x 2, against one process x 8.
"$osdp" "${C[@]}" --batch 8 --log one.jsonl >/dev/null 2>&1
awk -F'"step":' 'NF > 1 { split($2, a, ","); if (a[1] + 0 >= 11) print }' one.jsonl > one11.jsonl
if "${mpirun[@]}" -np 4 "$osdp" "${C[@]}" --plan ddp --batch 2 --resume d2 --log four.jsonl >/dev/null 2>err.txt &&
   out=$("$tool" losses one11.jsonl four.jsonl 1e-5); then ok
else bad "resharded 2 x zero3 -> 4 x ddp: ${out:-} $(head -2 err.txt)"; fi
# Hybrid: 4 ranks zero3 sharded in 2 groups of 2 (each shard held twice: written once) x 2
# -> 2 ranks zero2 x 4, against one process x 8.
"${mpirun[@]}" -np 4 "$osdp" "${C[@]}" --plan zero3 --shard-group 2 --batch 2 --checkpoint dh \
  --stop-after 10 >/dev/null 2>err.txt
if "${mpirun[@]}" -np 2 "$osdp" "${C[@]}" --plan zero2 --batch 4 --resume dh --log hyb.jsonl >/dev/null 2>>err.txt &&
   out=$("$tool" losses one11.jsonl hyb.jsonl 1e-5); then ok
else bad "resharded 4 x zero3 in groups of 2 -> 2 x zero2: ${out:-} $(head -2 err.txt)"; fi
# 5 ranks zero3 (ranks owning empty shards of small slices) -> 1 process: every parameter read.
# Against the uninterrupted 5-rank run (the same state at step 10; a wrong read shows at once).
"${mpirun[@]}" -np 5 "$osdp" "${C[@]}" --plan zero3 --batch 1 --checkpoint d5 --stop-after 10 >/dev/null 2>err.txt
"${mpirun[@]}" -np 5 "$osdp" "${C[@]}" --plan zero3 --batch 1 --log five.jsonl >/dev/null 2>&1
awk -F'"step":' 'NF > 1 { split($2, a, ","); if (a[1] + 0 >= 11) print }' five.jsonl > one5-11.jsonl
if "$osdp" "${C[@]}" --batch 5 --resume d5 --log from5.jsonl >/dev/null 2>>err.txt &&
   out=$("$tool" losses one5-11.jsonl from5.jsonl 1e-5); then ok
else bad "resharded 5 x zero3 -> 1 process: ${out:-} $(head -2 err.txt)"; fi
# Gradient accumulation: resumed in one process as 4 micro-steps of 2 (global batch 8), and on 2
# zero3 ranks as 4 micro-steps of 1, against one process x 8.
if "$osdp" "${C[@]}" --batch 2 --global-batch 8 --resume d2 --log acc1.jsonl >/dev/null 2>err.txt &&
   out=$("$tool" losses one11.jsonl acc1.jsonl 1e-5) &&
   "${mpirun[@]}" -np 2 "$osdp" "${C[@]}" --plan zero3 --batch 1 --accum 4 --resume d2 --log acc2.jsonl \
     >/dev/null 2>>err.txt && out=$("$tool" losses one11.jsonl acc2.jsonl 1e-5); then ok
else bad "resumed with accumulation: ${out:-} $(head -2 err.txt)"; fi
check_error "resume on a rank count that does not divide the global batch" \
  "is not a multiple of the 3 ranks; use a multiple of 3, or run on a rank count that divides 8 (1, 2, 4, 8)" -- \
  "${mpirun[@]}" -np 3 "$osdp" "${C[@]}" --global-batch 8 --resume d2
first=$(head -n 1 four.jsonl)
if [[ "$first" == '{"step":11,'* ]]; then ok; else bad "resumed run did not start at step 11: $first"; fi

# 3. SIGKILL of a rank while checkpointing every 5 steps.
"${mpirun[@]}" -np 2 "$osdp" train --steps 100000000 --quiet --batch 4 --plan zero3 --checkpoint dk \
  --checkpoint-every 5 --eval-batches 0 >kill.out 2>&1 &
job=$!
for _ in $(seq 600); do [ -f dk/step-15/manifest.json ] && break; kill -0 "$job" 2>/dev/null || break; sleep 0.1; done
victim=$(pgrep -f "osdp train --steps 100000000" | grep -v "^$job\$" | while read -r p; do
  [ "$(ps -o comm= -p "$p")" = osdp ] && echo "$p"; done | tail -n 1)
if [ -z "$victim" ]; then bad "kill: no rank process found"; kill "$job" 2>/dev/null
else
  t0=$(date +%s)
  kill -9 "$victim"
  rc=0; wait "$job" || rc=$?
  dt=$(( $(date +%s) - t0 ))
  if [ "$rc" -ne 0 ] && [ "$dt" -le 30 ]; then ok; else bad "kill: exit $rc after ${dt}s (want non-zero within 30 s)"; fi
  newest=$(ls dk | sed -n 's/^step-\([0-9]*\)$/\1/p' | sort -n | tail -n 1)
  if [ -n "$newest" ] && "${mpirun[@]}" -np 2 "$osdp" train --steps $((newest + 2)) --quiet --batch 4 --plan zero3 \
       --resume dk --eval-batches 0 --log after.jsonl >/dev/null 2>err.txt &&
     grep -q "\"step\":$((newest + 1))," after.jsonl && grep -q "\"step\":$((newest + 2))," after.jsonl &&
     [ "$(grep -c '"step":' after.jsonl)" -eq 2 ]; then ok
  else bad "kill: resuming from step-$newest did not run steps $((newest + 1)), $((newest + 2)): $(head -2 err.txt)"; fi
fi

# 3b. A rank that stops answering (SIGSTOP): the watchdog names it and ends the job.
# The rank is stopped once training runs (its first step logged, at most 60 s): a rank stopped
# while MPI starts up, before any watchdog exists, is not what this checks.
"${mpirun[@]}" -np 2 "$osdp" train --steps 100000000 --quiet --batch 4 --watchdog 3 --eval-batches 0 \
  --log stop.jsonl >stop.out 2>&1 &
job=$!
for _ in $(seq 600); do grep -q '"step":1,' stop.jsonl 2>/dev/null && break; sleep 0.1; done
victim=$(pgrep -f "osdp train --steps 100000000" | while read -r p; do
  [ "$(ps -o comm= -p "$p")" = osdp ] && echo "$p"; done | tail -n 1)
if [ -z "$victim" ]; then bad "watchdog: no rank process found"; kill "$job" 2>/dev/null
else
  t0=$(date +%s)
  kill -STOP "$victim"
  rc=0; wait "$job" || rc=$?
  dt=$(( $(date +%s) - t0 ))
  kill -CONT "$victim" 2>/dev/null; kill -9 "$victim" 2>/dev/null
  if [ "$rc" -ne 0 ] && [ "$dt" -le 20 ] && grep -q "osdp: error: rank 1 on host .* has not answered for" stop.out; then ok
  else bad "watchdog: exit $rc after ${dt}s: $(grep -m1 error stop.out)"; fi
fi

# 4. A damaged newest checkpoint: skipped (with a note) for the previous complete one.
cp -r d2 d3
printf 'X' | dd of=d3/step-10/rank-00000.bin bs=1 seek=100 conv=notrunc 2>/dev/null
if "${mpirun[@]}" -np 2 "$osdp" "${C[@]}" --plan zero3 --batch 4 --resume d3 --log d3.jsonl >/dev/null 2>err.txt &&
   grep -q "skipping .*step-10.*checksum" err.txt && [[ "$(head -n 1 d3.jsonl)" == '{"step":6,'* ]]; then ok
else bad "damaged checkpoint not skipped for step-5: $(head -3 err.txt)"; fi

# 5. Non-finite: weights with a NaN (the last LayerNorm bias) make step 1's loss NaN.
"$osdp" train --steps 1 --quiet --save good.bin >/dev/null 2>&1
cp good.bin nan.bin
size=$(stat -c %s nan.bin)
printf '\xff\xff\xff\xff' | dd of=nan.bin bs=1 seek=$((size - 4)) conv=notrunc 2>/dev/null
"$osdp" train --steps 5 --quiet --load nan.bin --eval-batches 0 --save after-nan.bin >out.txt 2>err.txt; rc=$?
if [ $rc -ne 0 ] && grep -q "^osdp: error: step 1: loss nan.*not finite" err.txt && [ ! -e after-nan.bin ]; then ok
else bad "NaN loss: exit $rc, $(head -2 err.txt)"; fi
"$osdp" train --steps 3 --quiet --load nan.bin --eval-batches 0 --on-nonfinite skip >out.txt 2>err.txt; rc=$?
if [ $rc -eq 0 ] && [ "$(grep -c 'its update skipped' err.txt)" -eq 3 ]; then ok
else bad "--on-nonfinite skip: exit $rc, $(head -2 err.txt)"; fi

# 6. Bad input: one line, non-zero, before training.
check_error() { # NAME PATTERN -- CMD...
  local name=$1 pat=$2; shift 3
  "$@" >out.txt 2>err.txt; local rc=$?
  if [ $rc -ne 0 ] && [ $rc -lt 128 ] && [ "$(wc -l <err.txt)" -eq 1 ] && grep -q "^osdp: error: .*$pat" err.txt; then ok
  else bad "$name: exit $rc, stderr: $(head -3 err.txt)"; fi
}
check_error "resume from a missing directory" "--resume: nowhere" -- "$osdp" "${C[@]}" --resume nowhere
mkdir empty
check_error "resume from a directory without checkpoints" "no complete checkpoint in empty" -- "$osdp" "${C[@]}" --resume empty
check_error "resume with another seq" "seq 64, this run has 32" -- "$osdp" "${C[@]}" --resume d1 --seq 32
check_error "resume with another global batch" "global batch of 16 sequences, this run has 3; resume with --global-batch 16" -- "$osdp" "${C[@]}" --resume d1 --batch 3
check_error "resume past --steps" "past --steps 5" -- "$osdp" train --steps 5 --lr-schedule cosine --warmup 5 --resume d1 --quiet
check_error "checkpoint in an unwritable place" "--checkpoint" -- "$osdp" "${C[@]}" --checkpoint /proc/osdp-ckpt
check_error "checkpoint-every without a directory" "--checkpoint DIR" -- "$osdp" "${C[@]}" --checkpoint-every 5
check_error "--load with --resume" "give one" -- "$osdp" "${C[@]}" --resume d1 --load good.bin
check_error "--on-nonfinite not a policy" "--on-nonfinite" -- "$osdp" "${C[@]}" --on-nonfinite maybe
check_error "--save to a missing directory, before training" "--save: cannot write 'nowhere/x.bin'" -- "$osdp" train --steps 100000 --save nowhere/x.bin
# llm.c headers claiming huge shapes: refused at once (sizes checked before allocating).
cp good.bin bigc.bin; printf '\x00\x00\x01\x00' | dd of=bigc.bin bs=1 seek=24 conv=notrunc 2>/dev/null
cp good.bin bigv.bin; printf '\x00\x00\x00\x01' | dd of=bigv.bin bs=1 seek=12 conv=notrunc 2>/dev/null
printf '\x00\x00\x00\x01' | dd of=bigv.bin bs=1 seek=28 conv=notrunc 2>/dev/null
check_error "checkpoint header with C=65536" "bigc.bin' is truncated" -- timeout 20 "$osdp" train --load bigc.bin --steps 1
check_error "checkpoint header with V=16777216" "bigv.bin' is truncated" -- timeout 20 "$osdp" train --load bigv.bin --steps 1
check_error "no --mem-limit: more than the host has" "the host has" -- "$osdp" train --steps 3 --batch 100000 --seq 256
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
