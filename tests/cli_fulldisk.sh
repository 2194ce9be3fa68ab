#!/usr/bin/env bash
# cli_fulldisk.sh OSDP: every output on a full disk fails non-zero with one line, leaves the
# previous file (or checkpoint) as it was and no partial file behind: plan --out, profile --out,
# train --log, --save and --checkpoint. The full disk is an 8 MiB tmpfs filled to the last
# byte; mounting one needs root (CI and the development machine run as root): without it the
# test says so and is skipped (exit 77).
set -u
OSDP=$1
source "${BASH_SOURCE%/*}/cli_common.sh"
disk=$W/disk
mkdir -p "$disk"
if ! mount -t tmpfs -o size=8m tmpfs "$disk" 2>/dev/null; then
  echo "cli_fulldisk: SKIP: cannot mount a small tmpfs here (needs root)"; exit 77
fi
trap 'umount "$W/disk" 2>/dev/null; rm -rf "$W"' EXIT
fill() { dd if=/dev/zero of="$disk/filler" bs=4k 2>/dev/null; sync; }   # fills the disk
unfill() { rm -f "$disk/filler"; }
# expect_clean NAME FIELD FILE -- CMD...: CMD fails with one 'osdp: error:' line naming FIELD,
# and no temporary file beside FILE remains.
expect_clean() {
  local name=$1 field=$2 file=$3; shift 4
  "$@" >out.txt 2>err.txt; local rc=$?
  if [ $rc -ne 0 ] && [ $rc -lt 128 ] && [ "$(wc -l <err.txt)" -eq 1 ] && grep -q "^osdp: error: .*$field" err.txt &&
     [ -z "$(ls "$(dirname "$file")" | grep -F "$(basename "$file")." )" ]; then ok
  else bad "$name: exit $rc, stderr: $(head -3 err.txt); files: $(ls "$(dirname "$file")" | tr '\n' ' ')"; fi
}
PLAN=(plan --model gpt2-124m --seq 256 --ranks 2 --mem-limit 4GiB --flops 1e11 --bandwidth 1e9 --latency 1e-5)

# plan --out: the previous plan survives a full disk.
"$OSDP" "${PLAN[@]}" --out "$disk/p.json" >/dev/null 2>&1 && cp "$disk/p.json" p0.json
fill
expect_clean "plan --out on a full disk" "--out" "$disk/p.json" -- "$OSDP" "${PLAN[@]}" --mem-limit 3GiB --out "$disk/p.json"
if cmp -s "$disk/p.json" p0.json; then ok; else bad "plan --out: the previous plan file changed"; fi
unfill

# profile --out: the same.
"$OSDP" profile --model tiny --seq 16 --profile-steps 1 --quiet --out "$disk/dev.json" >/dev/null 2>&1 && cp "$disk/dev.json" dev0.json
fill
expect_clean "profile --out on a full disk" "--out" "$disk/dev.json" -- "$OSDP" profile --model tiny --seq 16 --profile-steps 1 --quiet --out "$disk/dev.json"
if cmp -s "$disk/dev.json" dev0.json; then ok; else bad "profile --out: the previous device file changed"; fi
unfill

# train --log: stops non-zero (not exit 0 with an empty log).
fill
expect_clean "train --log on a full disk" "--log" "$disk/l.jsonl" -- "$OSDP" train --steps 3000 --quiet --log "$disk/l.jsonl"
unfill

# train --save: fails at the end, no partial checkpoint file.
fill
expect_clean "train --save on a full disk" "checkpoint" "$disk/s.bin" -- "$OSDP" train --steps 3 --quiet --save "$disk/s.bin"
if [ ! -e "$disk/s.bin" ]; then ok; else bad "train --save: a partial $disk/s.bin remains"; fi
unfill

# --checkpoint: the previous checkpoint stays complete and resumable.
"$OSDP" train --steps 4 --quiet --checkpoint "$disk/ck" --checkpoint-every 2 >/dev/null 2>&1
fill
expect_clean "train --checkpoint on a full disk" "--checkpoint" "$disk/ck/x" -- "$OSDP" train --steps 8 --quiet --resume "$disk/ck" --checkpoint "$disk/ck" --checkpoint-every 2 --eval-batches 0
unfill
if [ -z "$(ls -A "$disk/ck" | grep tmp)" ] && "$OSDP" train --steps 5 --quiet --resume "$disk/ck" --eval-batches 0 --log r.jsonl >/dev/null 2>err.txt &&
   [[ "$(head -n 1 r.jsonl)" == '{"step":5,'* ]]; then ok
else bad "after a failed checkpoint: $(ls -A "$disk/ck" | tr '\n' ' '); $(head -2 err.txt)"; fi
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
