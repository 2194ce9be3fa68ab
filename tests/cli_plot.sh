#!/usr/bin/env bash
# cli_plot.sh OSDP: `osdp plot LOG... --svg FILE` draws real training logs as well-formed SVG
# whose numbers (data-runs, each run's data-steps and data-last-loss) are the logs'; a
# hand-written log with a skipped step (loss null) and held-out lines is drawn with a gap and
# held-out markers; --json's numbers are the logs'; labels and titles are escaped; a bad log, an
# output that is an input and an unwritable output are one error line with nothing written;
# `osdp train --plot FILE` draws the run it trains the same way.
set -u
OSDP=${1:?usage: cli_plot.sh OSDP}
source "${BASH_SOURCE%/*}/cli_common.sh"
if ! command -v xmllint >/dev/null; then
  echo "cli_plot: xmllint not found (apt-get install libxml2-utils; see scripts/deps.sh)"
  exit 1
fi

# svg_root FILE NAME: the root element's attribute NAME ("" when absent).
svg_root() { xmllint --xpath "string(/*/@$2)" "$1" 2>/dev/null; }
# svg_run FILE LABEL NAME: attribute NAME of the run group labelled LABEL.
svg_run() { xmllint --xpath "string(//*[local-name()='g'][@class='run'][@data-label='$2']/@$3)" "$1" 2>/dev/null; }
# svg_count FILE XPATH: how many nodes XPATH selects.
svg_count() { xmllint --xpath "count($2)" "$1" 2>/dev/null; }
# same A B: whether numbers A and B agree to 1e-9 (relative); both empty or "null" also agree.
same() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == b) exit 0; if (a == "" || b == "" || a == "null" || b == "null") exit 1;
  d = a - b; if (d < 0) d = -d; m = (a < 0 ? -a : a); exit !(d <= 1e-9 * (m > 1 ? m : 1)) }'; }
# log_losses LOG: the step lines' losses, one a line ("null" for a skipped step).
log_losses() { grep -o '^{"step":[0-9]*,"loss":[^,]*' "$1" | sed 's/.*"loss"://'; }
# log_key LOG KEY: KEY's values in the step lines, one a line.
log_key() { grep '^{"step":[0-9]*,"loss":' "$1" | grep -o "\"$2\":[^,}]*" | sed 's/.*://'; }
# json_run FILE N KEY: KEY of the N-th run (from 1) of plot --json's output.
json_run() { sed 's/},{/}\n{/g' "$1" | sed -n "$2p" | grep -o "\"$3\":[^,}]*" | head -1 | sed 's/^[^:]*://; s/"//g'; }
# median: the median of the numbers on stdin.
median() { sort -g | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else printf "%.17g\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

# Two real runs: the defaults, and another learning rate and seed.
"$OSDP" train --model tiny --steps 30 --log a.jsonl --quiet >train.txt 2>err.txt &&
  mkdir -p logs && "$OSDP" train --model tiny --steps 30 --lr 3e-3 --seed 7 --log logs/run-b.jsonl --quiet >>train.txt 2>>err.txt &&
  ok || { bad "osdp train --log failed"; sed 's/^/    /' err.txt; }

if "$OSDP" plot a.jsonl logs/run-b.jsonl --svg ab.svg --json >ab.json 2>err.txt && [ ! -s err.txt ]; then ok
else bad "osdp plot a.jsonl logs/run-b.jsonl failed"; sed 's/^/    /' err.txt; fi
if xmllint --noout ab.svg 2>err.txt; then ok; else bad "ab.svg is not well-formed XML"; head -n 3 err.txt; fi
[ "$(svg_root ab.svg data-runs)" = 2 ] && ok || bad "ab.svg: data-runs '$(svg_root ab.svg data-runs)', want 2"

# Each run: labelled by its file name, as many steps as its log has step lines, its last loss.
n=1
for pair in a:a.jsonl run-b:logs/run-b.jsonl; do
  label=${pair%%:*} log=${pair#*:}
  want_steps=$(log_losses "$log" | wc -l)
  want_last=$(log_losses "$log" | grep -v null | tail -1)
  got_steps=$(svg_run ab.svg "$label" data-steps) got_last=$(svg_run ab.svg "$label" data-last-loss)
  if [ "$want_steps" -eq 30 ] && [ "$got_steps" = "$want_steps" ] && same "$got_last" "$want_last"; then ok
  else bad "$label: data-steps '$got_steps' data-last-loss '$got_last', log has $want_steps steps, last loss $want_last"; fi
  # The summary's val_loss is one held-out point.
  [ "$(svg_run ab.svg "$label" data-heldout-points)" = 1 ] &&
    [ "$(svg_count ab.svg "//*[local-name()='g'][@data-label='$label']/*[local-name()='circle'][@class='heldout']")" = 1 ] &&
    ok || bad "$label: want one held-out marker (the summary's val_loss)"
  # --json: the log's numbers.
  first=$(log_losses "$log" | head -1) min=$(log_losses "$log" | grep -v null | sort -g | head -1)
  val=$(grep -o '"summary":true.*' "$log" | grep -o '"val_loss":[^,]*' | sed 's/.*://')
  peak=$(log_key "$log" peak_bytes | sort -g | tail -1) tps=$(log_key "$log" tokens_per_s | median)
  mism=""
  [ "$(json_run ab.json $n label)" = "$label" ] || mism="$mism label '$(json_run ab.json $n label)';"
  [ "$(json_run ab.json $n steps)" = "$want_steps" ] || mism="$mism steps;"
  for kv in first_loss:$first last_loss:$want_last min_loss:$min val_loss:$val peak_bytes:$peak \
            median_tokens_per_s:$tps; do
    same "$(json_run ab.json $n "${kv%%:*}")" "${kv#*:}" || mism="$mism ${kv%%:*} '$(json_run ab.json $n "${kv%%:*}")' want '${kv#*:}';"
  done
  [ -z "$mism" ] && ok || bad "$label --json:$mism"
  n=$((n + 1))
done

# A hand-written log: a skipped step (a gap in the loss line), held-out lines (they win over the
# summary's val_loss), unknown keys and a blank line; labels and title escaped.
cat >h.jsonl <<'EOF'
{"step":1,"loss":4.0,"step_ms":1.0,"tokens_per_s":1000.0,"peak_bytes":1048576,"grad_norm":1.0,"lr":0.001}
{"step":2,"loss":null,"step_ms":1.0,"tokens_per_s":1100.0,"peak_bytes":1048576,"grad_norm":null,"lr":0.001}
{"step":3,"loss":3.0,"step_ms":1.0,"tokens_per_s":1200.0,"peak_bytes":2097152,"grad_norm":1.0,"lr":0.001,"new_key":[1,{"x":2}]}
{"step":3,"val_loss":3.5,"val_accuracy":0.1}
{"step":4,"loss":2.5,"step_ms":1.0,"tokens_per_s":900.0,"peak_bytes":2097152,"grad_norm":1.0,"lr":0.001}

{"step":4,"val_loss":2.75,"val_accuracy":0.2}
{"summary":true,"model":"tiny","steps":4,"val_loss":2.9,"final_loss":2.5}
EOF
if "$OSDP" plot h.jsonl a.jsonl --label 'h<&>"x,plain' --title 'T & <b>' --svg h.svg --json >h.json 2>err.txt &&
   xmllint --noout h.svg 2>>err.txt; then ok
else bad "plot of the hand-written log failed"; sed 's/^/    /' err.txt; fi
hl='h<&>"x'
got=$(xmllint --xpath "string(//*[local-name()='g'][@class='run'][1]/@data-label)" h.svg 2>/dev/null)
[ "$got" = "$hl" ] && grep -q 'T &amp; &lt;b&gt;' h.svg && grep -q 'h&lt;&amp;&gt;&quot;x' h.svg && ok ||
  bad "labels/title not escaped: first label '$got'"
g="//*[local-name()='g'][@class='run'][1]"
d=$(xmllint --xpath "string($g/*[local-name()='path'][1]/@d)" h.svg 2>/dev/null)
if [ "$(xmllint --xpath "string($g/@data-steps)" h.svg)" = 4 ] && same "$(xmllint --xpath "string($g/@data-last-loss)" h.svg)" 2.5 &&
   [ "$(xmllint --xpath "string($g/@data-heldout-points)" h.svg)" = 2 ] &&
   same "$(xmllint --xpath "string($g/@data-last-val-loss)" h.svg)" 2.75 &&
   [ "$(svg_count h.svg "$g/*[local-name()='circle'][@class='heldout']")" = 2 ] &&
   [ "$(svg_count h.svg "$g/*[local-name()='circle'][@class='lone']")" = 1 ] &&
   [ "$(echo "$d" | grep -o M | wc -l)" = 2 ] && [ "$(echo "$d" | grep -o L | wc -l)" = 1 ]; then ok
else bad "hand-written log: steps, last loss, held-out points or the gap wrong (loss path '$d')"; fi
mism=""
for kv in steps:4 first_loss:4 last_loss:2.5 min_loss:2.5 val_loss:2.75 heldout_points:2 \
          median_tokens_per_s:1050 peak_bytes:2097152 first_step:1 last_step:4; do
  same "$(json_run h.json 1 "${kv%%:*}")" "${kv#*:}" || mism="$mism ${kv%%:*} '$(json_run h.json 1 "${kv%%:*}")' want '${kv#*:}';"
done
[ "$(json_run h.json 2 label)" = plain ] || mism="$mism second label '$(json_run h.json 2 label)';"
[ -z "$mism" ] && ok || bad "hand-written log --json:$mism"
# Held-out lines before the end (train --eval-every) and the summary's evaluation at the end:
# all three points, in step order.
{ grep -v val_loss h.jsonl; echo '{"step":2,"val_loss":3.8}'; echo '{"step":3,"val_loss":3.4}'
  echo '{"summary":true,"steps":4,"val_loss":2.6}'; } >ev.jsonl
"$OSDP" plot ev.jsonl --svg ev.svg --json >ev.json 2>err.txt &&
  [ "$(svg_run ev.svg ev data-heldout-points)" = 3 ] && same "$(svg_run ev.svg ev data-last-val-loss)" 2.6 &&
  same "$(json_run ev.json 1 val_loss)" 2.6 && ok || bad "held-out lines and the summary: $(cat ev.json err.txt)"
# Without held-out lines and with a null summary val_loss: no held-out point.
grep -v val_loss h.jsonl >nv.jsonl
echo '{"summary":true,"steps":4,"val_loss":null}' >>nv.jsonl
"$OSDP" plot nv.jsonl --json >nv.json 2>err.txt && [ "$(json_run nv.json 1 heldout_points)" = 0 ] &&
  [ "$(json_run nv.json 1 val_loss)" = null ] && ok || bad "no held-out data: $(cat nv.json err.txt)"

# A long log is thinned to at most ~4000 points a line, its step count kept.
awk 'BEGIN { for (i = 1; i <= 10000; i++) printf "{\"step\":%d,\"loss\":%.6f,\"tokens_per_s\":%d,\"peak_bytes\":%d}\n", i, 5 / (1 + i / 100), 1000 + i % 7, 1048576 * (1 + i / 5000) }' >long.jsonl
if "$OSDP" plot long.jsonl --svg long.svg 2>err.txt && xmllint --noout long.svg 2>>err.txt &&
   [ "$(svg_run long.svg long data-steps)" = 10000 ] && same "$(svg_run long.svg long data-last-loss)" "$(log_losses long.jsonl | tail -1)"; then
  pts=$(xmllint --xpath "string(//*[local-name()='g'][@class='run']/*[local-name()='path'][1]/@d)" long.svg | grep -o '[ML]' | wc -l)
  [ "$pts" -le 4001 ] && [ "$pts" -ge 3000 ] && ok || bad "long log: $pts points drawn"
else bad "long log failed"; sed 's/^/    /' err.txt; fi

# A symlinked output is written through (the link stays); an existing file is replaced whole.
ln -s target.svg link.svg
"$OSDP" plot h.jsonl --svg link.svg 2>err.txt && [ -L link.svg ] && xmllint --noout target.svg 2>/dev/null &&
  ok || bad "--svg through a symlink: $(cat err.txt)"
"$OSDP" plot a.jsonl --svg ab.svg 2>err.txt && [ "$(svg_root ab.svg data-runs)" = 1 ] && ok ||
  bad "replacing ab.svg: $(cat err.txt)"

# Bad input: one error line naming the file (and line, key or option), nothing written; the
# picture already there (ab.svg) stays as it was.
printf '%s\n' '{"step":1,"loss":4.0}' 'step 2 loss 3.9' >notjson.jsonl
printf '%s\n' '{"step":1,"loss":"4.0"}' >badkey.jsonl
: >empty.jsonl
echo '{"summary":true,"steps":0,"val_loss":null}' >summary-only.jsonl
refused missing nosuch.jsonl -- "$OSDP" plot a.jsonl nosuch.jsonl --svg ab.svg
refused notjson notjson.jsonl 'line 2' -- "$OSDP" plot notjson.jsonl --svg ab.svg
refused badkey badkey.jsonl 'line 1' '"loss"' -- "$OSDP" plot badkey.jsonl --svg ab.svg
refused empty empty.jsonl 'no step lines' -- "$OSDP" plot empty.jsonl --svg ab.svg
refused summary-only summary-only.jsonl 'no step lines' -- "$OSDP" plot summary-only.jsonl --json
refused directory logs 'directory' -- "$OSDP" plot logs --svg ab.svg
refused svg-is-input --svg a.jsonl -- "$OSDP" plot a.jsonl --svg a.jsonl
refused svg-unwritable --svg /nonexistent-dir/x.svg -- "$OSDP" plot a.jsonl --svg /nonexistent-dir/x.svg
[ ! -e /nonexistent-dir ] && ok || bad "/nonexistent-dir was created"
refused labels --label '1 name for 2 logs' -- "$OSDP" plot a.jsonl h.jsonl --label x --svg ab.svg
refused no-logs LOG -- "$OSDP" plot --svg ab.svg
refused nothing-to-do --svg --json -- "$OSDP" plot a.jsonl
refused unknown-flag --zz -- "$OSDP" plot a.jsonl --zz

# train --plot draws the run it trains: its steps and last loss are its log's, its held-out
# points (--eval-every, and the end's evaluation) are there; an unwritable --plot fails at start.
if "$OSDP" train --steps 40 --seq 13 --batch 16 --eval-every 10 --eval-batches 1 --problems 0 --quiet \
     --log t.jsonl --plot t.svg >/dev/null 2>err.txt && xmllint --noout t.svg 2>>err.txt; then ok
else bad "train --plot: $(cat err.txt)"; fi
# (the log rounds losses to 6 decimals; the picture has them from memory)
if [ "$(svg_run t.svg tiny data-steps)" = 40 ] && awk -v a="$(svg_run t.svg tiny data-last-loss)" \
     -v b="$(log_losses t.jsonl | tail -1)" 'BEGIN { d = a - b; exit !(a != "" && d < 1e-6 && d > -1e-6) }'; then ok
else bad "train --plot: steps '$(svg_run t.svg tiny data-steps)', last loss '$(svg_run t.svg tiny data-last-loss)' against the log's"; fi
if [ "$(grep -c '"val_loss":[0-9]' t.jsonl)" = 4 ]; then ok; else bad "train --eval-every 10 over 40 steps: $(grep -c val_loss t.jsonl) held-out lines"; fi
refused train-plot-unwritable --plot /nonexistent-dir/t.svg -- "$OSDP" train --steps 2 --plot /nonexistent-dir/t.svg

# The command is listed and has its help.
"$OSDP" help | grep -q '^  plot ' && "$OSDP" plot --help | head -1 | grep -q '^usage: osdp plot LOG' && ok ||
  bad "osdp plot is not in osdp help, or its --help is wrong"

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
