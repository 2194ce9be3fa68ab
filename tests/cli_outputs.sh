#!/usr/bin/env bash
# cli_outputs.sh OSDP: outputs never destroy what they should not (issue 22, the output layer).
# Device nodes (made here with mknod, in the work directory: never the machine's own) stay
# device nodes; a symlink stays a link and its target is written; an output that is the same
# file as an input or another output is refused before any work, one line naming both, with
# every file in the directory unchanged (checksums before and after); output to a full device
# exits non-zero; an unwritable plan/profile --out fails before the work.
set -u
OSDP=${1:?usage: cli_outputs.sh OSDP}
source "${BASH_SOURCE%/*}/cli_common.sh"

T=(train --model tiny --data addition --steps 2 --batch 2 --seq 16 --quiet)

# Device nodes of our own: a null device and a full device.
if ! mknod nulldev c 1 3 2>/dev/null || ! mknod fulldev c 1 7 2>/dev/null; then
  echo "cannot mknod here (not root?): skipped"; exit 77
fi

# ---- Special files are written, never replaced -------------------------------------------
"$OSDP" "${T[@]}" --save nulldev --log nulldev >/dev/null 2>err.txt
if [ $? -eq 0 ] && [ -c nulldev ]; then ok; else bad "--save/--log to a null device: rc or it is no longer a device ($(cat err.txt))"; fi
"$OSDP" describe --model tiny --svg nulldev >/dev/null 2>err.txt
if [ $? -eq 0 ] && [ -c nulldev ]; then ok; else bad "describe --svg to a null device ($(cat err.txt))"; fi
"$OSDP" plan --model tiny --ranks 2 --mem-limit 1GiB --flops 1e10 --out nulldev >/dev/null 2>err.txt
if [ $? -eq 0 ] && [ -c nulldev ]; then ok; else bad "plan --out to a null device ($(cat err.txt))"; fi
"$OSDP" "${T[@]}" --save fulldev >/dev/null 2>err.txt
rc=$?
if [ $rc -ne 0 ] && [ $rc -lt 128 ] && [ -c fulldev ] && grep -q "fulldev" err.txt; then ok
else bad "--save to a full device: rc $rc, $(cat err.txt)"; fi
"$OSDP" describe --model tiny --json >fulldev 2>err.txt
rc=$?
if [ $rc -ne 0 ] && [ $rc -lt 128 ] && grep -q "standard output" err.txt; then ok
else bad "describe --json to a full stdout: rc $rc, $(cat err.txt)"; fi

mkfifo pipe
cat pipe >piped.json &
reader=$!
"$OSDP" plan --model tiny --ranks 2 --mem-limit 1GiB --flops 1e10 --out pipe >/dev/null 2>err.txt
rc=$?
wait $reader
if [ $rc -eq 0 ] && [ -p pipe ] && grep -q '"world_size"' piped.json; then ok; else bad "plan --out into a fifo: rc $rc, $(cat err.txt)"; fi
rm -f pipe piped.json

# ---- Symlinks are written through ------------------------------------------------------------
mkdir -p store
"$OSDP" "${T[@]}" --save store/w.bin >/dev/null 2>&1
ln -s store/w.bin latest.bin
old=$(sha256sum store/w.bin | cut -d' ' -f1)
"$OSDP" "${T[@]}" --seed 7 --save latest.bin >/dev/null 2>err.txt
new=$(sha256sum store/w.bin | cut -d' ' -f1)
if [ -L latest.bin ] && [ "$(readlink latest.bin)" = store/w.bin ] && [ "$old" != "$new" ] && ! ls store | grep -q tmp; then ok
else bad "--save through a symlink: link $(ls -l latest.bin), target changed: $([ "$old" != "$new" ] && echo yes || echo no) ($(cat err.txt))"; fi
ln -s store/fresh.json dangling.json
"$OSDP" plan --model tiny --ranks 2 --mem-limit 1GiB --flops 1e10 --out dangling.json >/dev/null 2>err.txt
if [ -L dangling.json ] && [ -s store/fresh.json ]; then ok; else bad "plan --out through a dangling symlink ($(cat err.txt))"; fi

# ---- Outputs that are inputs or each other are refused ---------------------------------------
"$OSDP" "${T[@]}" --save w.bin >/dev/null 2>&1
printf 'hello world, a text to train on\n' >data.txt
cp dangling.json plan.json
echo '{"not": "a profile"}' >dev.json
refused "--log onto the --load weights" "--log" "--load" "w.bin" -- "$OSDP" "${T[@]}" --load w.bin --log w.bin
refused "--save onto the data file" "--save" "--data" "data.txt" -- "$OSDP" "${T[@]}" --data text:data.txt --save data.txt
refused "--log onto the plan" "--log" "--plan" -- "$OSDP" "${T[@]}" --plan plan.json --log plan.json
ln -s plan.json planlink.json
refused "--log onto the plan through a link" "--log" "--plan" -- "$OSDP" "${T[@]}" --plan plan.json --log planlink.json
refused "--save and --log the same file" "--save" "--log" -- "$OSDP" "${T[@]}" --save out.bin --log out.bin
refused "plan --out onto its --devices" "--out" "--devices" "dev.json" -- "$OSDP" plan --model tiny --devices dev.json --out dev.json
refused "describe --svg onto its --plan" "--svg" "--plan" -- "$OSDP" describe --model tiny --plan plan.json --svg plan.json
refused "export onto its input" "export OUT" "export IN" -- "$OSDP" export w.bin w.bin --format llmc
refused "plan --out into a missing directory" "--out" "nodir/p.json" -- "$OSDP" plan --model tiny --ranks 2 --mem-limit 1GiB --flops 1e10 --out nodir/p.json
refused "profile --out into a missing directory" "--out" "nodir/d.json" -- "$OSDP" profile --model tiny --out nodir/d.json
refused "--save to a directory" "--save" "store" -- "$OSDP" "${T[@]}" --save store

# ---- Failures say so ---------------------------------------------------------------------------
refused "--stop-after without --checkpoint" "--stop-after" "--checkpoint" -- "$OSDP" "${T[@]}" --stop-after 1 --save s.bin
# A run that fails at step 1 (its --log is a full device): an error, no "done" line, and the
# summary on stdout marked failed with the error and the steps done.
"$OSDP" train --model tiny --data addition --steps 5 --batch 2 --seq 16 --log fulldev --json >out.txt 2>err.txt
rc=$?
sum=$(grep '"summary"' out.txt)
if [ $rc -ne 0 ] && [ $rc -lt 128 ] && ! grep -q '^done' out.txt && grep -q 'fulldev' err.txt &&
   [[ "$sum" == *'"steps":1,"failed":true,"error":"--log: '* ]] && [[ "$sum" == *'"val_loss":null'* ]]; then ok
else bad "a failed run: rc $rc, $(grep -c '^done' out.txt) done lines, summary: ${sum:0:300}"; fi
"$OSDP" "${T[@]}" --log good.jsonl >/dev/null 2>&1
if grep '"summary"' good.jsonl | grep -q '"steps":2,"failed":false'; then ok; else bad "a good run's summary: $(grep summary good.jsonl | head -c 300)"; fi

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
