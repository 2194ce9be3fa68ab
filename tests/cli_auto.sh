#!/usr/bin/env bash
# cli_auto.sh OSDP MPIRUN...: the planning path end to end on 2 ranks.
#  - `osdp profile` writes a device file that `osdp plan` accepts;
#  - `osdp plan --json` gives a plan whose predicted peak fits the limit, is never slower than the
#    best uniform plan, and `--out` writes a plan `osdp train --plan FILE` runs;
#  - `osdp train --plan auto` measures exactly the predicted peak on every rank, within the limit;
#  - a limit so tight that only sharded, split plans fit: the plan found from the profile is
#    sharded and split, and train runs it with exactly the predicted peak;
#  - `osdp plan --trial` measures every candidate and chooses the measured fastest;
#  - `train --plan auto` trials its candidates and leaves no trace: its first loss equals that
#    of a plain run with the same micro-batch (same initial weights, same data position);
#  - profiles and trials are cached and reused (same plan as a fresh one), --reprofile, --devices FILE and
#    --profile-cache off|DIR do what they say;
#  - a limit too small for any plan gives one error line naming the smallest limit that fits,
#    and planning at exactly that limit succeeds.
set -u
OSDP=${1:?usage: cli_auto.sh OSDP MPIRUN...}; shift
mpirun=("$@")
source "${BASH_SOURCE%/*}/cli_common.sh"
num() { sed -n "s/.*\"$1\":\([-0-9.e+]*\).*/\1/p" | head -1; }
# first KEY.FIELD of an object field in a JSON line: pick KEY FIELD <file
pick() { grep -o "\"$1\":{[^}]*}" | head -1 | sed -n "s/.*\"$2\":\([-0-9.e+]*\).*/\1/p"; }
limit=12582912   # 12 MiB

if "${mpirun[@]}" -np 2 "$OSDP" profile --model tiny --seq 64 --mem-limit $limit --out dev.json --quiet 2>err.txt \
   && [ -s dev.json ]; then ok; else bad "profile failed: $(cat err.txt)"; fi
# One host: the host level measured over both ranks, no inter-host level.
if grep -q '"ranks_per_host":[[:space:]]*2' dev.json && grep -q '"measured_ranks":[[:space:]]*2' dev.json \
   && ! grep -q '"inter_host"' dev.json; then ok; else bad "profile on one host: $(head -c 300 dev.json)"; fi
if "$OSDP" plan --model tiny --devices dev.json --seq 64 --out plan.json --json >plan.out 2>err.txt; then ok
else bad "plan failed: $(cat err.txt)"; fi
peak=$(pick predicted peak_bytes <plan.out)
sps=$(pick predicted samples_per_s <plan.out)
if [ -n "$peak" ] && awk -v p="$peak" -v l=$limit 'BEGIN{exit !(p <= l)}'; then ok
else bad "predicted peak '$peak' is not within the limit $limit"; fi
for s in ddp zero2 zero3; do
  u=$(pick $s samples_per_s <plan.out)
  if [ -z "$u" ] || awk -v a="$sps" -v u="$u" 'BEGIN{exit !(a >= u * (1 - 1e-12))}'; then ok
  else bad "auto plan ($sps samples/s) predicted slower than uniform $s ($u)"; fi
done
for key in '"plan":' '"micro_batch":' '"search_s":' '"uniform":'; do
  if grep -q "$key" plan.out; then ok; else bad "plan --json lacks $key"; fi
done
if "${mpirun[@]}" -np 2 "$OSDP" train --plan plan.json --steps 2 --mem-limit $limit --json --quiet --eval-batches 1 >run.out 2>err.txt \
   && [ "$(echo "$(num peak_bytes <run.out)" | awk '{printf "%.0f", $1}')" = "$(awk -v p="$peak" 'BEGIN{printf "%.0f", p}')" ]; then ok
else bad "train --plan plan.json: peak $(num peak_bytes <run.out) vs predicted $peak: $(cat err.txt)"; fi

# A model with more layers than a profile needs is timed on a copy with 4 (identical layers share
# their times): the device file still times every op of the model, the copy's layer ops standing
# for all layers, and plans from it.
printf '{"name": "six", "n_layer": 6, "n_embd": 64, "n_head": 4, "vocab_size": 4096, "max_seq": 128}\n' >six.json
if "${mpirun[@]}" -np 2 "$OSDP" profile --model six.json --seq 64 --mem-limit 16MiB --out six-dev.json >six.out 2>err.txt \
   && grep -q "copy with 4 of the 6 layers" six.out; then ok; else bad "profile of a 6-layer model: $(cat err.txt) $(head -3 six.out)"; fi
# Its progress lines say how long the rest should take, from the second on (the first step
# times are what the estimate scales).
eta=$(grep -c "s so far, about [0-9]* s left)" six.out); lines=$(grep -c "s so far" six.out)
if [ "$lines" -ge 3 ] && [ "$eta" = $((lines - 1)) ]; then ok
else bad "profile progress lines without 'about N s left' ($eta of $lines): $(grep 'so far' six.out | head -3)"; fi
# op_entry NAME <dev.json: the lines of op NAME's entry after its name, up to the next name
op_entry() { awk -v n="\"$1\"" '/"name":/ {on = index($0, n) > 0; next} on'; }
copied=1
for n in embed lnf lm_head overhead h5.ln1 h5.qkv h5.attn h5.proj h5.ln2 h5.fc h5.fcproj; do
  grep -q "\"name\":[[:space:]]*\"$n\"" six-dev.json || copied=0
done
for op in qkv attn fc; do
  for l in 1 4 5; do
    [ -n "$(op_entry h0.$op <six-dev.json)" ] && [ "$(op_entry h$l.$op <six-dev.json)" = "$(op_entry h0.$op <six-dev.json)" ] || copied=0
  done
done
# The passes are timed apart: every op with a backward has its forward's share of its time, the
# head (all forward) none.
share() { op_entry "$1" | awk -v k="\"$2\":" '$1 == k {gsub(/,/, "", $2); print $2 + 0; exit}'; }
shares=1
for op in h0.ln1 h0.qkv h0.attn h0.proj h0.fc h0.fcproj embed lnf; do
  awk -v s="$(share $op forward_share <dev.json)" 'BEGIN{exit !(s > 0 && s < 1)}' || shares=0
done
[ -z "$(share lm_head forward_share <dev.json)" ] || shares=0
if [ $shares = 1 ]; then ok; else bad "the profile's forward shares: $(op_entry h0.qkv <dev.json | head -5)"; fi
# Every op keeps the micro-batches it was timed at (the planner interpolates between them);
# the step's overhead, a fit of what the ops leave, none.
kept=1
for op in h0.qkv h0.attn h0.fc embed lm_head; do op_entry $op <dev.json | grep -q '"points":' || kept=0; done
! op_entry overhead <dev.json | grep -q '"points":' || kept=0
if [ $kept = 1 ]; then ok; else bad "the profile's op points: $(op_entry h0.qkv <dev.json | head -12)"; fi
# Prefetched gathers are priced no faster per byte than blocking ones (what prefetch gains is
# the overlap): their in-step factor, where the profile fitted one, is at least the blocking one.
factors() { awk -v k="\"$1\":" '$1 == k {on = 1} on && $1 == "\"in_step\":" {i = $2} on && $1 == "\"async_in_step\":" {a = $2}
  on && /^[[:space:]]*}/ {exit} END {gsub(/,/, "", i); gsub(/,/, "", a); print i, a}'; }
for f in dev.json six-dev.json; do
  read -r ins asy < <(factors allgather <$f)
  if [ -n "$ins" ] && { [ -z "$asy" ] || awk -v i="$ins" -v a="$asy" 'BEGIN{exit !(a >= i)}'; }; then ok
  else bad "$f: prefetched all-gathers at x'$asy' against blocking x'$ins'"; fi
done
# op_time NAME B <dev.json: op NAME's unsplit seconds at micro-batch B
op_time() { op_entry "$1" | awk -v B="$2" '/"fixed_s":/ && !f {f = $2 + 0} /"per_sample_s":/ && !p {p = $2 + 0} END {print f + B * p}'; }
# The head (64 x 4096 per token) after the layers is the copy's head, not a layer op in its place.
awk -v h="$(op_time lm_head 8 <six-dev.json)" -v f="$(op_time h5.fc 8 <six-dev.json)" 'BEGIN{exit !(h > 4 * f)}' || copied=0
if [ $copied = 1 ]; then ok; else bad "the 6-layer profile does not time every op from the copy: $(head -c 400 six-dev.json)"; fi
if "$OSDP" plan --model six.json --seq 64 --devices six-dev.json --mem-limit 16MiB --json >six-plan.out 2>err.txt \
   && grep -q '"plan":' six-plan.out; then ok; else bad "plan from the 6-layer profile: $(cat err.txt)"; fi
# The search does not extrapolate the op times past twice the largest micro-batch they were
# measured at, unless --max-batch asks it to (checked on the ops' fitted lines, their measured
# points dropped: on a line a larger micro-batch always amortizes the fixed part further, while
# the points may make a middle one the cheapest per sample).
mb=$(grep -o '"max_batch":[[:space:]]*[0-9]*' six-dev.json | grep -o '[0-9]*$')
awk '/"compute":/ {c = 1} c {sub(/"points":/, "\"dropped_points\":")} {print}' six-dev.json >six-lines.json
"$OSDP" plan --model six.json --seq 64 --devices six-dev.json --mem-limit 4GiB >cap.out 2>err.txt
B=$(sed -n 's/^osdp *micro-batch *\([0-9]*\).*/\1/p' cap.out)
if [ -n "$mb" ] && [ -n "$B" ] && [ "$B" -le $((2 * mb)) ] && grep -q "^plan: micro-batches up to $((2 * mb))," cap.out; then ok
else bad "plan from a profile measured to micro-batch '$mb' chose '$B': $(head -2 cap.out) $(cat err.txt)"; fi
"$OSDP" plan --model six.json --seq 64 --devices six-lines.json --mem-limit 4GiB --max-batch $((4 * mb)) >cap.out 2>err.txt
B=$(sed -n 's/^osdp *micro-batch *\([0-9]*\).*/\1/p' cap.out)
if [ -n "$B" ] && [ "$B" -gt $((2 * mb)) ] && ! grep -q "^plan: micro-batches up to" cap.out; then ok
else bad "--max-batch $((4 * mb)) did not search past the profiled micro-batches: B '$B' $(head -2 cap.out) $(cat err.txt)"; fi

# The smallest limit any plan fits (from the error message for a far too small limit): only a
# fully sharded plan with split operators fits there.
"$OSDP" plan --model tiny --devices dev.json --seq 64 --mem-limit 100000 >/dev/null 2>err.txt
tight=$(grep -o '([0-9]* bytes' err.txt | grep -o '[0-9]*' | head -1)
if [ -n "$tight" ] && "$OSDP" plan --model tiny --devices dev.json --seq 64 --mem-limit "$tight" --out tight.json --json >tight.out 2>err.txt; then ok
else bad "plan at the smallest limit '$tight' failed: $(cat err.txt)"; fi
if grep -q '"zero3",' tight.json && ! grep -q '"dp"' tight.json; then ok
else bad "the tightest plan is not sharded and split: $(tr -d ' \t\n' <tight.json | head -c 600)"; fi
tpk=$(pick predicted peak_bytes <tight.out)
if "${mpirun[@]}" -np 2 "$OSDP" train --plan tight.json --steps 2 --mem-limit "$tight" --json --quiet --eval-batches 1 >tight.run 2>err.txt \
   && [ "$(num peak_bytes <tight.run)" = "$(awk -v p="$tpk" 'BEGIN{printf "%.0f", p}')" ] \
   && [ "$(num ranks_off_prediction <tight.run)" = 0 ]; then ok
else bad "train --plan tight.json: peak $(num peak_bytes <tight.run) vs predicted $tpk: $(cat err.txt)"; fi

# plan --trial: every candidate measured, the chosen one the fastest measured.
if "${mpirun[@]}" -np 2 "$OSDP" plan --model tiny --devices dev.json --seq 64 --trial --trial-steps 2 --json >trial.out 2>err.txt; then ok
else bad "plan --trial failed: $(cat err.txt)"; fi
nc=$(grep -o '"origin":' trial.out | wc -l); nm=$(grep -o '"measured":{' trial.out | wc -l)
if [ "$nc" -ge 3 ] && [ "$nm" = $((nc + 1)) ]; then ok else bad "plan --trial: $nc candidates, $nm measured"; fi
# Every candidate's measured peak equals its prediction (prefetch included).
offpk=$(grep -o '"predicted":{[^}]*},"measured":{[^}]*}' trial.out | awk '{
  p = $0; sub(/.*"predicted":{[^}]*"peak_bytes":/, "", p); sub(/[,}].*/, "", p)
  m = $0; sub(/.*"measured":{[^}]*"peak_bytes":/, "", m); sub(/[,}].*/, "", m)
  if (p + 0 != m + 0) n++ } END { print n + 0 }')
if [ "$offpk" = 0 ]; then ok else bad "plan --trial: $offpk candidates measured a peak other than predicted"; fi
best=$(grep -o '"measured":{"step_s":[0-9.e+-]*,"samples_per_s":[0-9.e+-]*' trial.out | sed 's/.*samples_per_s"://' | sort -g | tail -1)
chosen=$(sed -n 's/.*"measured":{"step_s":[0-9.e+-]*,"samples_per_s":\([0-9.e+-]*\).*"chosen".*/\1/p' trial.out | head -1)
if [ -n "$best" ] && [ "$best" = "$chosen" ]; then ok else bad "plan --trial chose $chosen samples/s, the best measured is $best"; fi

"${mpirun[@]}" -np 2 "$OSDP" train --plan auto --mem-limit $limit --steps 3 --trial-steps 2 --json --quiet --eval-batches 1 >auto.out 2>err.txt
pk=$(num peak_bytes <auto.out); pr=$(num predicted_peak_bytes <auto.out); off=$(num ranks_off_prediction <auto.out)
pst=$(num predicted_step_s <auto.out)
if [ -n "$pk" ] && [ "$pk" = "$pr" ] && [ "$off" = 0 ] && [ "$pk" -le $limit ]; then ok
else bad "train --plan auto: peak '$pk' predicted '$pr' ranks off '$off' (limit $limit): $(cat err.txt)"; fi
if [ -n "$pst" ] && awk -v p="$pst" 'BEGIN{exit !(p > 0)}'; then ok; else bad "auto run reports no predicted step time"; fi
if grep -q '"trial_best_uniform":"[a-z0-9]' auto.out; then ok; else bad "auto run reports no trial: $(cat auto.out)"; fi
ab=$(num micro_batch <auto.out); af=$(num first_loss <auto.out)
"${mpirun[@]}" -np 2 "$OSDP" train --plan ddp --batch "$ab" --steps 1 --json --quiet --eval-batches 1 >plain.out 2>err.txt
pf=$(num first_loss <plain.out)
if [ -n "$af" ] && [ -n "$pf" ] && awk -v a="$af" -v b="$pf" 'BEGIN{d=a-b; if(d<0)d=-d; exit !(d <= 1e-5*b)}'; then ok
else bad "after the trial the first loss is $af, a plain run's is $pf (micro-batch $ab)"; fi

# Profiles are kept (tests/cli_common.sh points the cache into this directory): the run above
# stored its profile (and its trial beside it); a second start with the same setting reuses it and, without a trial,
# plans exactly what a fresh profile of the first start planned; --reprofile measures anew,
# --devices FILE plans from the file, --profile-cache off keeps nothing.
cached=$(ls .cache/osdp/*.key 2>/dev/null | wc -l)
if [ "$cached" = 1 ] && [ "$(ls .cache/osdp/*.json | wc -l)" = 2 ] && [ "$(ls .cache/osdp/*.trial.json | wc -l)" = 1 ]; then ok
else bad "train --plan auto left $cached profiles in the cache: $(ls -a .cache/osdp 2>&1)"; fi
run_auto() { "${mpirun[@]}" -np 2 "$OSDP" train --plan auto --mem-limit $limit --steps 1 --trial-steps 0 --eval-batches 0 "$@"; }
run_auto --reprofile >fresh.txt 2>err.txt || bad "train --plan auto --reprofile: $(cat err.txt)"
run_auto >again.txt 2>err.txt || bad "train --plan auto, second start: $(cat err.txt)"
if grep -q "^profile: reusing .*/.cache/osdp/" again.txt && ! grep -q "profile: timing" again.txt; then ok
else bad "the second start did not reuse the cached profile: $(grep '^profile' again.txt | head -3)"; fi
if grep -q "profile: timing" fresh.txt && ! grep -q "reusing" fresh.txt; then ok
else bad "--reprofile did not profile anew: $(grep '^profile' fresh.txt | head -3)"; fi
plan_of() { sed -n '/^plan for /,/^osdp  *micro-batch/p' "$1" | sed 's/(search [0-9.]* s)//'; }
if [ -n "$(plan_of fresh.txt)" ] && [ "$(plan_of fresh.txt)" = "$(plan_of again.txt)" ]; then ok
else bad "the plan from the cached profile differs from the fresh profile's: $(diff <(plan_of fresh.txt) <(plan_of again.txt) | head -6)"; fi
if [ "$(ls .cache/osdp/*.key | wc -l)" = 1 ]; then ok; else bad "--reprofile added a second cache entry"; fi
# A trial is kept beside its profile: a second start with the same candidates reuses it.
for t in 1 2; do
  "${mpirun[@]}" -np 2 "$OSDP" train --plan auto --mem-limit $limit --steps 1 --trial-steps 2 --eval-batches 0 \
    >trial$t.txt 2>err.txt || bad "train --plan auto with a trial ($t): $(cat err.txt)"
done
if grep -q "^trial: reusing .*\.trial\.json" trial2.txt && ! grep -q "^trial round" trial2.txt &&
   [ -n "$(grep '^\* chosen:' trial1.txt)" ] && [ "$(grep '^\* chosen:' trial1.txt)" = "$(grep '^\* chosen:' trial2.txt)" ]; then ok
else bad "the second start did not reuse the kept trial: $(grep -E '^(trial|\* chosen)' trial2.txt | head -4)"; fi
run_auto --devices dev.json >devs.txt 2>err.txt || bad "train --plan auto --devices: $(cat err.txt)"
if grep -q "planning with the device file dev.json" devs.txt && ! grep -q "profile: timing" devs.txt; then ok
else bad "--devices dev.json still profiled: $(grep '^profile' devs.txt | head -3)"; fi
run_auto --profile-cache off --seq 32 >off.txt 2>err.txt || bad "--profile-cache off: $(cat err.txt)"
if [ "$(ls .cache/osdp/*.key | wc -l)" = 1 ] && ! grep -q "kept in" off.txt; then ok
else bad "--profile-cache off stored a profile"; fi
run_auto --profile-cache mine --seq 32 >mine.txt 2>err.txt || bad "--profile-cache mine: $(cat err.txt)"
if [ "$(ls mine/*.key 2>/dev/null | wc -l)" = 1 ] && grep -q "kept in mine/" mine.txt; then ok
else bad "--profile-cache mine: $(ls -a mine 2>&1) $(grep '^profile' mine.txt | tail -1)"; fi
refused "devices of other ranks" "--devices" "2 rank(s)" -- "$OSDP" train --plan auto --devices dev.json --steps 1

# Far too little memory: one line naming the smallest limit that fits; that limit then works.
if "$OSDP" plan --model tiny --devices dev.json --seq 64 --mem-limit 100000 >/dev/null 2>err.txt; then
  bad "plan with a 100000-byte limit succeeded"
else
  if [ "$(wc -l <err.txt)" = 1 ] && grep -q "smallest limit" err.txt; then ok; else bad "too-small limit message: $(cat err.txt)"; fi
  min=$(grep -o '([0-9]* bytes' err.txt | grep -o '[0-9]*' | head -1)
  if [ -n "$min" ] && "$OSDP" plan --model tiny --devices dev.json --seq 64 --mem-limit "$min" >/dev/null 2>&1; then ok
  else bad "planning at the reported minimum '$min' failed: $(cat err.txt)"; fi
fi
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
