#!/usr/bin/env bash
# cli_export.sh OSDP [MPIRUN...]: interop through the command line. `osdp export` converts an
# llm.c checkpoint to safetensors and back byte-identically; `train --load` reads either format
# (by content, whatever the name) with the same result; a file that does not record its number
# of heads needs --model; corrupt or truncated files are refused with one error line; failed
# exports leave no temporary file and an existing OUT as it was; a directory without checkpoints is refused
# (not supported yet). llm.c token files need a vocabulary of their largest id + 1. With
# MPIRUN, export and --load of a safetensors file also work on two ranks.
set -u
OSDP=${1:?usage: cli_export.sh OSDP [MPIRUN...]}
shift
MPIRUN=("$@")
source "${BASH_SOURCE%/*}/cli_common.sh"

# run CMD...: runs CMD, failing the check (and showing stderr) when it exits non-zero.
run() {
  if "$@" >out.txt 2>err.txt; then ok; return 0; fi
  bad "exit status $?: $*"; sed 's/^/    /' err.txt | head -n 20; return 1
}

# expect_error NAME PATTERN... -- CMD...: CMD fails cleanly (exit status 1..127) with exactly one
# stderr line "osdp: error: ..." containing every fixed-string PATTERN.
expect_error() {
  local name=$1; shift
  local pats=()
  while [ "$1" != "--" ]; do pats+=("$1"); shift; done
  shift
  "$@" >out.txt 2>err.txt
  local rc=$? why=""
  if [ "$rc" -eq 0 ]; then why="exit status 0"
  elif [ "$rc" -ge 128 ]; then why="exit status $rc (killed by a signal: crash)"
  elif [ "$(wc -l <err.txt)" -ne 1 ]; then why="stderr has $(wc -l <err.txt) lines, want 1"
  elif ! grep -q '^osdp: error: ' err.txt; then why="stderr does not start with 'osdp: error: '"
  else
    local p
    for p in "${pats[@]}"; do grep -qF -- "$p" err.txt || { why="error does not mention '$p'"; break; }; done
  fi
  if [ -z "$why" ]; then ok; else bad "$name: $why; command: $*"; sed 's/^/    stderr: /' err.txt | head -n 5; fi
}

# json_field NAME FILE: the value of "NAME": in the one-line JSON summary in FILE.
json_field() { grep -o "\"$1\":[^,}]*" "$2" | head -n 1 | cut -d: -f2; }

# A JSON model whose vocabulary (64) is padded (to 128) and whose max_seq is not a preset's.
printf '{"n_layer": 2, "n_embd": 32, "n_head": 2, "vocab_size": 64, "max_seq": 128}\n' >m.json
TR=(--batch 4 --seq 32 --quiet)

# --- llm.c -> safetensors -> llm.c is byte-identical; safetensors -> safetensors too ----------
run "$OSDP" train --model m.json --steps 3 "${TR[@]}" --save a.bin
run "$OSDP" export a.bin --format safetensors a.st
grep -q 'a.bin (llmc) -> a.st (safetensors' out.txt && ok || bad "export printed no summary line: $(cat out.txt)"
run "$OSDP" export a.st --format llmc b.bin
if [ -s a.bin ] && cmp -s a.bin b.bin; then ok; else bad "a.bin -> a.st -> b.bin: b.bin differs from a.bin"; fi
run "$OSDP" export a.st --quiet --format safetensors a2.st
if [ -s a2.st ] && cmp -s a.st a2.st && [ ! -s out.txt ]; then ok; else bad "a.st -> a2.st (--quiet) differs or printed"; fi
run "$OSDP" export a.bin --format llmc a3.bin
if cmp -s a.bin a3.bin; then ok; else bad "a.bin -> a3.bin (llmc to llmc) differs"; fi
# The header starts with an 8-byte size and '{' and the buffer is 8-byte aligned.
n=$(od -An -tu8 -N8 a.st | tr -d ' ')
if [ "$(dd if=a.st bs=1 skip=8 count=1 status=none)" = "{" ] && [ $(((8 + n) % 8)) -eq 0 ]; then ok
else bad "a.st: header size $n, byte 8 is not '{' or the buffer is not 8-byte aligned"; fi
# Hugging Face's names, without the prefix and without lm_head.
hdr=$(dd if=a.st bs=1 skip=8 count="$n" status=none)
for name in wte.weight wpe.weight h.0.ln_1.weight h.1.attn.c_attn.weight h.1.attn.c_proj.bias \
            h.0.mlp.c_fc.weight h.1.mlp.c_proj.weight ln_f.bias; do
  [[ "$hdr" == *"\"$name\":{\"dtype\":\"F32\""* ]] || { bad "a.st has no F32 tensor $name"; continue; }; ok
done
[[ "$hdr" != *lm_head* && "$hdr" != *transformer.* ]] && ok || bad "a.st names lm_head or uses the transformer. prefix"
[[ "$hdr" == *'"wte.weight":{"dtype":"F32","shape":[64,32]'* ]] && ok || bad "a.st: wte.weight is not [V=64, C=32]"

# --- train --load reads safetensors like the llm.c file (by content, whatever the name) -------
cp a.st weights.bin   # a safetensors file with an llm.c-like name
run "$OSDP" train --load a.bin --steps 2 "${TR[@]}" --json --save from_bin.bin
cp out.txt from_bin.json
run "$OSDP" train --load weights.bin --steps 2 "${TR[@]}" --json --save from_st.bin
cp out.txt from_st.json
for f in first_loss final_loss val_loss; do
  a=$(json_field $f from_bin.json); b=$(json_field $f from_st.json)
  if [ -n "$a" ] && [ "$a" = "$b" ]; then ok; else bad "$f: --load a.bin $a, --load a.st $b"; fi
done
if [ -s from_bin.bin ] && cmp -s from_bin.bin from_st.bin; then ok; else bad "2 steps from a.bin and from a.st saved different weights"; fi
run "$OSDP" train --load a.st --steps 0 "${TR[@]}" --save c.bin
if cmp -s a.bin c.bin; then ok; else bad "--load a.st --steps 0 --save c.bin: c.bin differs from a.bin"; fi
run "$OSDP" train --load a.st --model m.json --steps 0 "${TR[@]}" --save d.bin
if cmp -s a.bin d.bin; then ok; else bad "--load a.st --model m.json: d.bin differs from a.bin"; fi
expect_error "--load a.st --model tiny" "a.st" "L=2 C=32" -- "$OSDP" train --load a.st --model tiny --steps 0 --quiet

# --- a file without n_head (as the Hub's files): --model supplies it ---------------------------
# Same-length edit of the header: the metadata key n_head becomes n_hexx, so offsets stay valid.
LC_ALL=C sed 's/"n_head":"2"/"n_hexx":"2"/' a.st >nohead.st
if [ "$(wc -c <nohead.st)" -eq "$(wc -c <a.st)" ] && ! cmp -s a.st nohead.st; then ok; else bad "could not make nohead.st"; fi
expect_error "--load without n_head" "nohead.st" "n_head" "--model" -- "$OSDP" train --load nohead.st --steps 0 --quiet
expect_error "export without n_head" "nohead.st" "n_head" "--model" -- "$OSDP" export nohead.st --format llmc nh.bin
run "$OSDP" train --load nohead.st --model m.json --steps 0 "${TR[@]}" --save nh1.bin
if cmp -s a.bin nh1.bin; then ok; else bad "--load nohead.st --model m.json: weights differ from a.bin"; fi
run "$OSDP" export nohead.st --model m.json --format llmc nh2.bin
if cmp -s a.bin nh2.bin; then ok; else bad "export nohead.st --model m.json: nh2.bin differs from a.bin"; fi
expect_error "export --model of another shape" "nohead.st" "tiny" -- "$OSDP" export nohead.st --model tiny --format llmc nh3.bin

# --- corrupt and truncated safetensors files are refused with one line -----------------------
size=$(wc -c <a.st)
head -c $((size - 4)) a.st >trunc.st
expect_error "truncated .st (--load)" "trunc.st" "past the end" -- "$OSDP" train --load trunc.st --steps 0 --quiet
expect_error "truncated .st (export)" "trunc.st" "past the end" -- "$OSDP" export trunc.st --format llmc t.bin
[ ! -e t.bin ] && ! ls -d t.bin.tmp* >/dev/null 2>&1 && ok || bad "a refused export left t.bin or t.bin.tmp"
head -c 100 a.st >short.st
expect_error "header cut short" "short.st" "header size" -- "$OSDP" export short.st --format llmc t.bin
{ printf '\xff\xff\xff\xff\xff\xff\x00\x00'; tail -c +9 a.st; } >huge.st
expect_error "huge header size" "huge.st" "header size" -- "$OSDP" train --load huge.st --steps 0 --quiet
LC_ALL=C sed 's/"dtype":"F32","shape":\[64,32\]/"dtype":"F16","shape":[64,32]/' a.st >f16.st
expect_error "wrong dtype" "f16.st" "wte.weight" "F16" -- "$OSDP" export f16.st --format llmc t.bin
LC_ALL=C sed 's/"shape":\[32,96\]/"shape":[96,32]/' a.st >shape.st
expect_error "wrong shape" "shape.st" "h.0.attn.c_attn.weight" "[96, 32]" -- "$OSDP" train --load shape.st --steps 0 --quiet
head -c 4096 /dev/urandom >noise.st
printf 'xxxxxxxxx' | dd of=noise.st conv=notrunc status=none  # neither magic nor '{' at byte 8
expect_error "neither format" "noise.st" "neither an llm.c checkpoint" -- "$OSDP" export noise.st --format llmc t.bin
expect_error "missing input" "missing.st" -- "$OSDP" export missing.st --format llmc t.bin
expect_error "directory input without checkpoints" "no complete checkpoint" -- "$OSDP" export "$W" --format llmc t.bin
expect_error "bad --format" "--format" "gguf" -- "$OSDP" export a.bin --format gguf t.gguf
expect_error "no --format" "--format" -- "$OSDP" export a.bin t.st
expect_error "one positional argument" "FILE and OUT" -- "$OSDP" export a.bin --format llmc
[ ! -e t.bin ] && ! ls -d t.bin.tmp* >/dev/null 2>&1 && [ ! -e t.st ] && ok || bad "refused exports left files behind"

# --- failed exports: no temporary file, an existing OUT untouched -----------------------------
printf 'x' >plainfile
expect_error "OUT under a regular file" "plainfile/x.st" -- "$OSDP" export a.bin --format safetensors plainfile/x.st
mkdir ro
chmod 555 ro
if ! touch ro/probe 2>/dev/null; then  # root writes anywhere: then this check cannot run
  expect_error "unwritable directory" "ro/x.st" -- "$OSDP" export a.bin --format safetensors ro/x.st
  [ -z "$(ls -A ro)" ] && ok || bad "a failed export into ro/ left $(ls -A ro)"
fi
chmod 755 ro
cp a.st old.st
"$OSDP" train --model m.json --steps 0 "${TR[@]}" --save fresh.bin >/dev/null 2>&1
# A full device as OUT (a node made here): an error, the device stays a device. (A disk filling
# up mid-write, the old file kept, is cli_fulldisk's; outputs onto inputs are cli_outputs'.)
if mknod fulldev c 1 7 2>/dev/null; then
  for fmt in safetensors llmc; do
    expect_error "full device ($fmt)" "fulldev" "writing" -- "$OSDP" export fresh.bin --format $fmt fulldev
    [ -c fulldev ] && ok || bad "export to a full device ($fmt) replaced the device"
  done
  rm -f fulldev
fi
# Exporting over an existing file works (atomically replaced).
run "$OSDP" export fresh.bin --format safetensors old.st
! cmp -s a.st old.st && ! ls | grep -q 'old.st.tmp' && ok || bad "export over old.st did not replace it"

# --- llm.c token files: the vocabulary is the largest id + 1 ----------------------------------
# 400 tokens, ids 0..199 and one 300: a model needs vocab_size >= 301.
{ printf '\x88\xd8\x34\x01\x01\x00\x00\x00\x90\x01\x00\x00'; head -c 1012 /dev/zero
  for i in $(seq 0 399); do
    if [ "$i" -eq 150 ]; then t=300; else t=$((i % 200)); fi
    printf "\\x$(printf %02x $((t & 255)))\\x$(printf %02x $((t >> 8)))"
  done; } >tok.bin
if [ "$(wc -c <tok.bin)" -eq 1824 ]; then ok; else bad "tok.bin is $(wc -c <tok.bin) bytes, want 1824"; fi
printf '{"n_layer": 1, "n_embd": 16, "n_head": 2, "vocab_size": 301, "max_seq": 32}\n' >v301.json
run "$OSDP" train --model v301.json --data tokens:tok.bin --steps 2 --batch 2 --seq 16 --quiet
expect_error "vocab 256 < 301" "tok.bin" "301" "vocab_size >= 301" -- "$OSDP" train --model tiny --data tokens:tok.bin --steps 1 --batch 2 --seq 16 --quiet

# --- two ranks: export on rank 0 only, --load of safetensors broadcast -------------------------
if [ ${#MPIRUN[@]} -gt 0 ]; then
  run "${MPIRUN[@]}" -np 2 "$OSDP" export a.bin --format safetensors mpi.st --quiet
  if cmp -s a.st mpi.st && ! ls -d mpi.st.tmp* >/dev/null 2>&1; then ok; else bad "2 ranks: export differs from one rank's"; fi
  run "${MPIRUN[@]}" -np 2 "$OSDP" train --load a.st --plan zero3 --steps 0 "${TR[@]}" --save z.bin
  if cmp -s a.bin z.bin; then ok; else bad "2 ranks, zero3: --load a.st and save differs from a.bin"; fi
  # One "osdp: error:" line (rank 0's; mpirun adds its own lines), a non-zero exit status.
  "${MPIRUN[@]}" -np 2 "$OSDP" export trunc.st --format llmc t.bin >out.txt 2>err.txt
  rc=$?
  n=$(grep -c '^osdp: error: ' err.txt)
  if [ "$rc" -ne 0 ] && [ "$n" -eq 1 ] && grep -q "trunc.st" err.txt && [ ! -e t.bin ]; then ok
  else bad "2 ranks, truncated .st: exit $rc, $n 'osdp: error:' lines (want non-zero, 1)"; sed 's/^/    /' err.txt | head -n 20; fi
fi

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
