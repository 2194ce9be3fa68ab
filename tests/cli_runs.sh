#!/usr/bin/env bash
# cli_runs.sh OSDP MPIRUN...: a run owns what it writes and checks what it continues (issue 22).
#  - A checkpoint directory belongs to one run: another run's checkpoints are refused (nothing
#    changes), continued with --resume, or deleted first with --checkpoint-overwrite, after which
#    the new run's own checkpoints are kept and resume (they used to be pruned as older than the
#    other run's step-10); checkpoints of this run newer than the resumed step are refused.
#  - Two runs on one directory: the second fails at start naming the first (the lock).
#  - Links and foreign files named step-N are never followed or deleted; --keep leaves a
#    checkpoint holding a user's file in place, with the file.
#  - --resume DIR/step-N resumes that checkpoint; a manifest whose step disagrees with its
#    directory's name is refused; a changed data file is refused unless --resume-data-changed ok.
#  - text: data goes through a tokenizer.json (--tokenizer FILE, or a --model directory's);
#    bytes for a 50257-token model are refused, naming --tokenizer.
#  - Ranks agree: ranks started with different arguments, or with different model or data files
#    under one name (mpirun -wdir per rank), fail naming the difference.
#  - The watchdog and checkpoints: a checkpoint slower than --watchdog (a slow disk, simulated by
#    OSDP_TEST_SLOW_CHECKPOINT) completes; one past its bound ends the job naming the checkpoint;
#    --watchdog below 1 s is refused.
#  - Silent failures: plan --trial with a profile of another rank count, describe --plan for
#    another rank count.
set -u
OSDP=${1:?usage: cli_runs.sh OSDP MPIRUN...}; shift; mpirun=("$@")
repo=$(cd "${BASH_SOURCE%/*}/.." && pwd)
source "${BASH_SOURCE%/*}/cli_common.sh"
osdp=$OSDP
SNAP_DEPTH=3
T=(train --model tiny --steps 4 --batch 2 --seq 16 --quiet --eval-batches 0)

# 1. Another run's checkpoints.
"$osdp" train --model tiny --steps 10 --batch 2 --seq 16 --quiet --eval-batches 0 --checkpoint old \
  --checkpoint-every 5 >/dev/null 2>&1
refused "a new run into another run's directory" "--checkpoint: old holds checkpoints of another run" \
  "--resume old" "--checkpoint-overwrite" -- "$osdp" "${T[@]}" --checkpoint old --checkpoint-every 1
cp -r old old2
if "$osdp" "${T[@]}" --checkpoint old2 --checkpoint-every 1 --checkpoint-overwrite >/dev/null 2>err.txt &&
   [ "$(ls old2)" = "$(printf 'step-3\nstep-4')" ] && grep -q "removed old2/step-10 (another run's)" err.txt &&
   "$osdp" train --model tiny --steps 6 --batch 2 --seq 16 --quiet --eval-batches 0 --resume old2 \
     --checkpoint old2 >/dev/null 2>>err.txt && [ -d old2/step-6 ]; then ok
else bad "--checkpoint-overwrite: $(ls old2 | tr '\n' ' ') $(head -3 err.txt)"; fi
# Continuing the same run (--resume DIR --checkpoint DIR) is its own; a resume from an older
# step of it, with newer ones there, is refused.
if "$osdp" train --model tiny --steps 12 --batch 2 --seq 16 --quiet --eval-batches 0 --resume old \
     --checkpoint old --checkpoint-every 1 --keep 3 >/dev/null 2>err.txt &&
   [ "$(ls old)" = "$(printf 'step-10\nstep-11\nstep-12')" ]; then ok
else bad "continuing a run into its directory: $(ls old | tr '\n' ' ') $(head -2 err.txt)"; fi
refused "a resume from an older step with newer ones in the directory" "newer than step 10" \
  "--checkpoint-overwrite" -- "$osdp" train --model tiny --steps 12 --batch 2 --seq 16 --quiet \
  --eval-batches 0 --resume old/step-10 --checkpoint old

# 2. --resume DIR/step-N resumes that step (and writes elsewhere).
if "$osdp" train --model tiny --steps 12 --batch 2 --seq 16 --quiet --eval-batches 0 --resume old/step-11 \
     --log r11.jsonl >/dev/null 2>err.txt && [[ "$(head -n 1 r11.jsonl)" == '{"step":12,'* ]]; then ok
else bad "--resume DIR/step-11: $(head -2 err.txt) $(head -c 100 r11.jsonl)"; fi
cp -r old/step-11 old/step-13
refused "a manifest whose step is not its directory's" "says step 11 but its directory is step-13" -- \
  "$osdp" train --model tiny --steps 20 --batch 2 --seq 16 --quiet --eval-batches 0 --resume old/step-13
rm -rf old/step-13

# 3. The lock: a second run into a directory in use fails at once naming the first.
"$osdp" train --model tiny --steps 100000 --batch 2 --seq 16 --quiet --eval-batches 0 --checkpoint busy \
  --checkpoint-every 1000000 >/dev/null 2>&1 &
first=$!
for _ in $(seq 100); do grep -q "^pid $first " busy/.osdp-lock 2>/dev/null && break; sleep 0.1; done
refused "a second run into a directory in use" "busy is in use by another osdp run (pid $first on host" -- \
  "$osdp" "${T[@]}" --checkpoint busy
if kill -0 "$first" 2>/dev/null; then ok; else bad "the first run did not survive the second's start"; fi
kill "$first" 2>/dev/null; wait "$first" 2>/dev/null

# 4. Links and foreign entries: never followed, never deleted (but a link may be unlinked on
# request); pruning leaves a checkpoint holding a user's file, with the file.
"$osdp" "${T[@]}" --checkpoint mine >/dev/null 2>&1
"$osdp" "${T[@]}" --checkpoint theirs >/dev/null 2>&1
ln -s ../theirs/step-4 mine/step-9
refused "a link named step-N" "mine/step-9 is a symbolic link" -- "$osdp" "${T[@]}" --steps 6 \
  --resume mine/step-4 --checkpoint mine
sha256sum theirs/step-4/* >theirs.sum
if "$osdp" "${T[@]}" --steps 6 --resume mine/step-4 --checkpoint mine --checkpoint-overwrite >/dev/null 2>err.txt &&
   [ ! -e mine/step-9 ] && sha256sum -c --quiet theirs.sum && [ -d mine/step-6 ]; then ok
else bad "--checkpoint-overwrite of a link: $(ls mine | tr '\n' ' ') $(head -2 err.txt)"; fi
echo "not a checkpoint" >mine/step-20
refused "a file named step-N, even with --checkpoint-overwrite" "mine/step-20 is not an osdp checkpoint" -- \
  "$osdp" "${T[@]}" --steps 8 --resume mine/step-6 --checkpoint mine --checkpoint-overwrite
rm mine/step-20
echo "my notes" >mine/step-6/notes.txt
if "$osdp" "${T[@]}" --steps 8 --resume mine --checkpoint mine --checkpoint-every 1 --keep 1 >/dev/null 2>err.txt &&
   [ "$(cat mine/step-6/notes.txt)" = "my notes" ] && [ -d mine/step-8 ] && [ ! -e mine/step-7 ] &&
   [ -f mine/step-6/manifest.json ] && grep -q "left mine/step-6 in place: it holds 1 file(s) osdp did not write" err.txt; then ok
else bad "--keep with a user's file in a checkpoint: $(ls mine mine/step-6 | tr '\n' ' ') $(head -2 err.txt)"; fi

# 5. The data file changed since the checkpoint.
head -c 20000 /dev/urandom | base64 >data.txt
D=(train --model tiny --data text:data.txt --batch 2 --seq 16 --quiet --eval-batches 0)
"$osdp" "${D[@]}" --steps 2 --checkpoint dc >/dev/null 2>&1
echo "one more line" >>data.txt
refused "resuming on a changed data file" "the data text:data.txt changed since dc/step-2" \
  "--resume-data-changed ok" -- "$osdp" "${D[@]}" --steps 4 --resume dc --checkpoint dc
if "$osdp" "${D[@]}" --steps 4 --resume dc --checkpoint dc --resume-data-changed ok >/dev/null 2>err.txt &&
   grep -q "note: --resume-data-changed ok" err.txt && [ -d dc/step-4 ]; then ok
else bad "--resume-data-changed ok: $(head -2 err.txt)"; fi

# 6. Ranks agree.
expect_error() { # NAME PATTERN CMD...: CMD exits 1 and its stderr has PATTERN
  local name=$1 pat=$2; shift 2
  "$@" >out.txt 2>err.txt
  local rc=$?
  if [ "$rc" -ne 0 ] && [ "$rc" -lt 128 ] && grep -qF -- "$pat" err.txt; then ok
  else bad "$name: exit $rc, $(grep -m2 . err.txt)"; fi
}
expect_error "ranks with different arguments" "rank 0 has --batch 2, rank 1 has --batch 4" \
  "${mpirun[@]}" -np 1 "$osdp" "${T[@]}" --batch 2 : -np 1 "$osdp" "${T[@]}" --batch 4
mkdir -p hostA hostB
echo '{"n_layer":2,"n_head":2,"n_embd":32,"vocab_size":14,"max_seq":64}' >hostA/m.json
echo '{"n_layer":2,"n_head":2,"n_embd":32,"vocab_size":14,"max_seq":128}' >hostB/m.json
expect_error "ranks with different model files" "the ranks disagree on the model (--model)" \
  "${mpirun[@]}" -np 1 -wdir hostA "$osdp" "${T[@]}" --model m.json : -np 1 -wdir hostB "$osdp" "${T[@]}" --model m.json
cp data.txt hostA/d.txt; cp data.txt hostB/d.txt; echo x >>hostB/d.txt
expect_error "ranks with different data files" "the ranks disagree on the data file (--data)" \
  "${mpirun[@]}" -np 1 -wdir hostA "$osdp" "${T[@]}" --data text:d.txt : -np 1 -wdir hostB "$osdp" "${T[@]}" --data text:d.txt

# 7. The watchdog and checkpoints. A model of 3.3 M parameters (40 MB of state): a first
# checkpoint's bound is --watchdog 1 + 4 x 40 MB / 20 MB/s, about 9 s.
echo '{"n_layer":2,"n_head":2,"n_embd":64,"vocab_size":50257,"max_seq":64}' >wm.json
W=(train --model wm.json --seq 16 --batch 2 --steps 6 --checkpoint-every 3 --watchdog 1 --quiet --eval-batches 0)
if OSDP_TEST_SLOW_CHECKPOINT=3 "${mpirun[@]}" -np 2 -x OSDP_TEST_SLOW_CHECKPOINT "$osdp" "${W[@]}" \
     --checkpoint slow >out.txt 2>err.txt && [ -d slow/step-6 ]; then ok
else bad "a 3 s checkpoint under --watchdog 1 was not let finish: $(grep -m1 error err.txt)"; fi
start=$(date +%s)
OSDP_TEST_SLOW_CHECKPOINT=120 "${mpirun[@]}" -np 2 -x OSDP_TEST_SLOW_CHECKPOINT "$osdp" "${W[@]}" \
  --checkpoint hung >out.txt 2>err.txt
rc=$? took=$(( $(date +%s) - start ))
if [ "$rc" -ne 0 ] && [ "$took" -lt 60 ] && grep -q "writing a checkpoint has made no progress" err.txt &&
   [ ! -e hung/step-3 ]; then ok
else bad "a hung checkpoint: exit $rc after ${took}s: $(grep -m1 error err.txt)"; fi
refused "--watchdog below a second" "--watchdog: 0.5 must be 0 (off) or at least 1 second" -- \
  "$osdp" "${T[@]}" --watchdog 0.5

# 8. Failures that said nothing.
"$osdp" profile --out dev1.json --model tiny --seq 16 --quiet >/dev/null 2>&1
expect_error "plan --trial with a profile of another rank count" \
  "--trial: the device file describes 1 rank(s) but this run has 2" \
  "${mpirun[@]}" -np 2 "$osdp" plan --model tiny --seq 16 --devices dev1.json --trial
"$osdp" plan --model tiny --seq 16 --devices dev1.json --out p1.json >/dev/null 2>&1
refused "describe --plan for another rank count" "--ranks 4 differs from the 1 rank(s) of plan p1.json" -- \
  "$osdp" describe --model tiny --plan p1.json --ranks 4

# ---- text: data through a tokenizer (issue 45) -----------------------------------------------
# A byte-level BPE tokenizer.json (the fuzz corpus's: 256 bytes, 5 merges, <|endoftext|>: 262 ids)
# and a model of its vocabulary: --tokenizer FILE, or the tokenizer.json of a --model directory.
tokjson="$repo/fuzz/corpus/tokenizer/seed-gpt2.json"
printf 'Hello world, hello words of the world.\n%.0s' $(seq 400) >tok.txt
echo '{"name":"tok262","n_layer":1,"n_embd":32,"n_head":2,"vocab_size":262,"max_seq":32}' >tok262.json
"$osdp" train --model tok262.json --tokenizer "$tokjson" --data text:tok.txt --seq 16 --batch 2 --steps 3 \
  --json --quiet >tok.sum 2>err.txt
if grep -q '"data":"text file tok.txt ([0-9]* bytes, [0-9]* tokens of' tok.sum; then ok
else bad "train --tokenizer: $(cat err.txt) $(head -c 300 tok.sum)"; fi
mkdir -p hf && cp "$tokjson" hf/tokenizer.json
echo '{"model_type":"llama","hidden_size":32,"num_hidden_layers":1,"num_attention_heads":2,
  "num_key_value_heads":2,"intermediate_size":64,"vocab_size":262,"max_position_embeddings":32,
  "rms_norm_eps":1e-5,"rope_theta":10000,"tie_word_embeddings":true,"hidden_act":"silu"}' >hf/config.json
"$osdp" train --model hf --data text:tok.txt --seq 16 --batch 2 --steps 3 --json --quiet >hf.sum 2>err.txt
if grep -q '"data":"text file tok.txt ([0-9]* bytes, [0-9]* tokens of hf/tokenizer.json)' hf.sum; then ok
else bad "train --model DIR with its tokenizer.json: $(cat err.txt) $(head -c 300 hf.sum)"; fi
# sample through the tokenizer: words in, words out (only the text on stdout), ids in --json.
"$osdp" train --model hf --data text:tok.txt --seq 16 --batch 2 --steps 3 --quiet --save hf/model.safetensors \
  >/dev/null 2>err.txt || bad "train --save into the model directory: $(cat err.txt)"
"$osdp" sample --load hf --prompt "Hello world" --temperature 0 --tokens 6 >words.txt 2>err.txt
if [ "$(wc -l <words.txt)" -eq 1 ] && grep -q "^Hello world" words.txt && grep -q "new tokens" err.txt; then ok
else bad "sample --load DIR with its tokenizer: $(cat words.txt) / $(cat err.txt)"; fi
"$osdp" sample --load hf/model.safetensors --tokenizer "$tokjson" --prompt "Hello" --temperature 0 \
  --tokens 4 --json >words.json 2>err.txt
if grep -q '"prompt_tokens":\[260,108,108,111\]' words.json && grep -q '"prompt":"Hello","text":' words.json; then ok
else bad "sample --tokenizer --json: $(cat words.json) $(cat err.txt)"; fi
refused "text: bytes for a 50257-token model" "--tokenizer PATH" "vocab_size 50257" "--tokenizer bytes" -- \
  "$osdp" train --model gpt2-124m --data text:tok.txt --steps 1 --seq 16 --batch 1

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
