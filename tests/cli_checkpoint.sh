#!/usr/bin/env bash
# cli_checkpoint.sh OSDP [MPIRUN...]: --save / --load round trip through the CLI. A checkpoint
# loaded without --model (the model comes from the checkpoint) and saved again after 0 steps is
# byte-identical; loading it into a model of another shape is refused with one error line. With
# MPIRUN, the round trip also holds on two ranks under zero3 (gather on save, broadcast on load).
set -u
OSDP=${1:?usage: cli_checkpoint.sh OSDP [MPIRUN...]}
shift
MPIRUN=("$@")
source "${BASH_SOURCE%/*}/cli_common.sh"

# run CMD...: runs CMD, failing the check (and showing stderr) when it exits non-zero.
run() {
  if "$@" >out.txt 2>err.txt; then ok; return 0; fi
  bad "exit status $?: $*"; sed 's/^/    /' err.txt | head -n 20; return 1
}

# A JSON model with max_seq 128 (not a preset), so that "the model comes from the checkpoint"
# is visible: the default model (tiny, max_seq 256) would not reproduce a.bin.
printf '{"n_layer": 2, "n_embd": 32, "n_head": 2, "vocab_size": 64, "max_seq": 128}\n' >m.json

run "$OSDP" train --model m.json --steps 3 --batch 4 --seq 32 --quiet --save a.bin
run "$OSDP" train --load a.bin --steps 0 --batch 4 --seq 32 --quiet --save b.bin
if [ -s a.bin ] && cmp a.bin b.bin; then ok; else bad "b.bin (load a.bin, 0 steps, save) differs from a.bin"; fi

# The checkpoint holds trained weights: a fresh model saved after 0 steps differs from it.
run "$OSDP" train --model m.json --steps 0 --batch 4 --seq 32 --quiet --save fresh.bin
if [ -s fresh.bin ] && ! cmp -s a.bin fresh.bin; then ok; else bad "3 trained steps left the weights as initialised (a.bin = fresh.bin)"; fi

# Continuing from a checkpoint changes it (the loaded weights are trained, and saved).
run "$OSDP" train --load a.bin --steps 1 --batch 4 --seq 32 --quiet --save c.bin
if [ -s c.bin ] && ! cmp -s a.bin c.bin && [ "$(wc -c <a.bin)" -eq "$(wc -c <c.bin)" ]; then ok
else bad "c.bin (a.bin + 1 step) is identical to a.bin or has another size"; fi

# --load with a --model of another shape is refused with one line naming the checkpoint.
"$OSDP" train --load a.bin --model tiny --steps 0 --quiet >out.txt 2>err.txt
rc=$?
if [ "$rc" -ne 0 ] && [ "$rc" -lt 128 ] && [ "$(wc -l <err.txt)" -eq 1 ] &&
   grep -q '^osdp: error: .*a\.bin' err.txt; then ok
else bad "--load a.bin --model tiny: exit $rc, want a one-line error naming a.bin"; sed 's/^/    /' err.txt | head -n 20; fi
# ... while the same --model as the checkpoint's is accepted.
run "$OSDP" train --load a.bin --model m.json --steps 0 --batch 4 --seq 32 --quiet --save d.bin
if [ -s d.bin ] && cmp -s a.bin d.bin; then ok; else bad "--load a.bin --model m.json --save d.bin: d.bin differs from a.bin"; fi

if [ ${#MPIRUN[@]} -gt 0 ]; then
  run "${MPIRUN[@]}" -np 2 "$OSDP" train --load a.bin --plan zero3 --steps 0 --batch 4 --seq 32 --quiet --save z.bin
  if [ -s z.bin ] && cmp -s a.bin z.bin; then ok; else bad "2 ranks, zero3: load a.bin and save again differs from a.bin"; fi
fi

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
