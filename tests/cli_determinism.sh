#!/usr/bin/env bash
# cli_determinism.sh OSDP [MPIRUN...]: training is reproducible. Two runs with the same seed log
# byte-identical per-step losses (--log, the "loss" fields only: timings differ); another --seed
# gives other losses; --threads 2 twice gives identical losses too. With MPIRUN, two runs on two
# ranks also agree with each other.
set -u
OSDP=${1:?usage: cli_determinism.sh OSDP [MPIRUN...]}
shift
MPIRUN=("$@")
source "${BASH_SOURCE%/*}/cli_common.sh"

STEPS=5
LAUNCH=()
# train NAME ARGS...: trains STEPS steps (under ${LAUNCH[@]}) logging to NAME.log and extracts
# the per-step losses, one "step loss" line each, into NAME.loss.
train() {
  local name=$1; shift
  if ! "${LAUNCH[@]}" "$OSDP" train --model tiny --data addition --steps $STEPS --batch 4 --seq 64 \
       --quiet --log "$name.log" "$@" >"$name.out" 2>"$name.err"; then
    bad "$name: training failed: $*"; sed 's/^/    /' "$name.err" | head -n 20
    : >"$name.loss"; return 1
  fi
  sed -n 's/^{"step":\([0-9]*\),"loss":\([^,]*\),.*/\1 \2/p' "$name.log" >"$name.loss"
  local n
  n=$(wc -l <"$name.loss")
  if [ "$n" -ne $STEPS ]; then bad "$name: $n step lines with a loss in the log, want $STEPS"; return 1; fi
  ok
}

# same A B: the loss files are identical.
same() {
  if cmp -s "$1.loss" "$2.loss" && [ -s "$1.loss" ]; then ok
  else bad "$1 vs $2: losses differ"; paste "$1.loss" "$2.loss" | sed 's/^/    /'; fi
}

train a
train b
same a b
train c --seed 4242
if [ -s c.loss ] && [ -s a.loss ] && ! cmp -s a.loss c.loss; then ok
else bad "--seed 4242 gives the same losses as the default seed (or a run failed)"; fi
# The losses must be losses: finite numbers (a NaN would compare equal to itself as text).
if awk '{ if ($2 !~ /^[0-9]+\.[0-9]+$/) exit 1 }' a.loss c.loss && [ -s a.loss ]; then ok
else bad "a loss is not a finite positive number:"; cat a.loss c.loss | sed 's/^/    /'; fi

train t1 --threads 2
train t2 --threads 2
same t1 t2

if [ ${#MPIRUN[@]} -gt 0 ]; then
  LAUNCH=("${MPIRUN[@]}" -np 2)
  train m1
  train m2
  same m1 m2
fi

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
