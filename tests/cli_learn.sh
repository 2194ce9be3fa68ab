#!/usr/bin/env bash
# cli_learn.sh OSDP: the tiny model learns 2-digit addition. A run of `osdp train --json` must
# print a summary line in which the training loss falls below half its first value, the held-out
# loss falls below the plateau of a model that knows only the answer format, and held-out
# exact-match accuracy (whole answers right, on problems never trained on) is far above chance.
#
# Settings and thresholds were measured. The loss first falls to a plateau near 1.15 (the answer
# format learned, the digits not) and stays there for a chaotic number of steps before falling
# further: with the settings below (about 45 s on one core) the fall came between steps ~300 and
# ~1000 in the seeds tried, but a rounding change in a kernel moves it like a change of seed, and
# some runs are still on the plateau at the end (held-out loss ~1.15, accuracy 0.00-0.03; chance
# is about 0.005): 3 of 16 runs (seeds 1-7 and 1337 on two builds; 1337, 3 and 7 on the later).
# Runs that left it reached accuracy 0.18-0.89 and held-out loss 0.09-0.71. So a run that ends
# on the plateau is retried with the next seed of SEEDS (up to 3 runs, so 45-140 s); a run that
# fails any other way fails at once. Seeds 2 and 1 come first because they left the plateau on
# both builds (step ~300-850). The LEARN_* variables override the settings.
set -u
OSDP=${1:?usage: cli_learn.sh OSDP}
source "${BASH_SOURCE%/*}/cli_common.sh"

STEPS=${LEARN_STEPS:-1250}
BATCH=${LEARN_BATCH:-16}
LR=${LEARN_LR:-1e-2}
WARMUP=${LEARN_WARMUP:-100}
SEEDS=${LEARN_SEEDS:-2 1 1337}
MIN_ACC=${LEARN_MIN_ACC:-0.10}
MAX_VAL_LOSS=${LEARN_MAX_VAL_LOSS:-0.9}

# field NAME: the number after "NAME": in summary.json.
field() { sed -n "s/.*\"$1\":\(-\{0,1\}[0-9][0-9.eE+-]*\).*/\1/p" summary.json; }
# num X: X is a plain decimal number (a missing field or "nan" is not).
num() { [[ "$1" =~ ^[0-9]+(\.[0-9]+)?([eE][-+]?[0-9]+)?$ ]]; }

set -- $SEEDS
while [ $# -gt 0 ]; do
  seed=$1; shift
  start=$(date +%s)
  "$OSDP" train --model tiny --data addition:2 --steps "$STEPS" --batch "$BATCH" --seq 64 --lr "$LR" \
    --warmup "$WARMUP" --seed "$seed" --json --quiet >out.txt 2>err.txt
  rc=$?
  secs=$(($(date +%s) - start))
  grep '"summary":true' out.txt >summary.json
  first=$(field first_loss)
  final=$(field final_loss)
  val=$(field val_loss)
  acc=$(field val_accuracy)
  nprob=$(field val_problems)
  echo "addition:2, $STEPS steps x batch $BATCH, lr $LR, warmup $WARMUP, seed $seed: loss $first ->" \
    "$final, held-out loss $val, accuracy $acc of $nprob problems (${secs}s)"
  # A run on the plateau, with more seeds to try: retry. Everything else is judged below.
  if [ $# -gt 0 ] && [ "$rc" -eq 0 ] && num "$val" && num "$acc" &&
     awk -v b="$val" -v a="$acc" -v m="$MAX_VAL_LOSS" -v n="$MIN_ACC" 'BEGIN { exit !(b >= m || a < n) }'; then
    echo "  seed $seed ended on the plateau; retrying with seed $1"
    continue
  fi
  break
done

if [ "$rc" -eq 0 ] && [ "$(wc -l <summary.json)" -eq 1 ]; then ok
else bad "osdp train exited $rc, or printed no single JSON summary line"; sed 's/^/    /' err.txt out.txt | head -n 20; fi
if num "$first" && num "$final" && num "$val" && num "$acc" && num "$nprob"; then ok
else bad "summary lacks numeric first_loss/final_loss/val_loss/val_accuracy/val_problems: $(cat summary.json)"; fi
# Untrained, the loss is about ln(256) = 5.5 (uniform over the tiny model's vocabulary).
if num "$first" && awk -v f="$first" 'BEGIN { exit !(f > 4.5 && f < 6.5) }'; then ok
else bad "first_loss $first is not near ln(256) = 5.55 for an untrained model"; fi
if num "$first" && num "$final" && awk -v a="$first" -v b="$final" 'BEGIN { exit !(b < 0.5 * a) }'; then ok
else bad "final_loss $final is not below half of first_loss $first"; fi
# The held-out loss falls below the plateau (~1.15) where only the answer format is known: the
# model has learned digits, on problems it never trained on.
if num "$val" && awk -v b="$val" -v m="$MAX_VAL_LOSS" 'BEGIN { exit !(b < m) }'; then ok
else bad "val_loss $val is not below $MAX_VAL_LOSS (still on the plateau near 1.15)"; fi
if num "$nprob" && [ "${nprob%.*}" -ge 100 ]; then ok
else bad "only '$nprob' held-out problems evaluated; want at least 100"; fi
# Chance of a whole answer (3 digits and the end mark) is about 1/200; MIN_ACC is far above.
if num "$acc" && awk -v a="$acc" -v m="$MIN_ACC" 'BEGIN { exit !(a >= m && a <= 1) }'; then ok
else bad "held-out accuracy $acc is below $MIN_ACC"; fi

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
