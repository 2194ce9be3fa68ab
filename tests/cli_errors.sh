#!/usr/bin/env bash
# cli_errors.sh OSDP [MPIRUN...]: bad input to `osdp` is refused with exactly one line on stderr,
# "osdp: error: ...", that names the offending field or value, a non-zero exit status and no
# crash (no signal, so the status is below 128). With MPIRUN, the same holds on two ranks: one
# error line (rank 0 prints it), not one per rank.
set -u
OSDP=${1:?usage: cli_errors.sh OSDP [MPIRUN...]}
shift
MPIRUN=("$@")
source "${BASH_SOURCE%/*}/cli_common.sh"

# expect_error NAME PATTERN... -- CMD...: CMD fails cleanly with one stderr line that starts with
# "osdp: error:" and contains every (fixed-string) PATTERN.
expect_error() {
  local name=$1; shift
  local pats=()
  while [ "$1" != "--" ]; do pats+=("$1"); shift; done
  shift
  "$@" >out.txt 2>err.txt
  local rc=$?
  local lines
  lines=$(wc -l <err.txt)
  local first
  first=$(head -n 1 err.txt)
  local why=""
  if [ "$rc" -eq 0 ]; then why="exit status 0"
  elif [ "$rc" -ge 128 ]; then why="exit status $rc (killed by a signal: crash)"
  elif [ "$lines" -ne 1 ]; then why="stderr has $lines lines, want 1"
  elif [[ "$first" != "osdp: error: "* ]]; then why="stderr does not start with 'osdp: error: '"
  else
    local p
    for p in "${pats[@]}"; do
      if ! grep -qF -- "$p" err.txt; then why="error does not mention '$p'"; break; fi
    done
  fi
  if [ -z "$why" ]; then ok
  else
    bad "$name: $why; command: $*"
    sed 's/^/    stderr: /' err.txt | head -n 20
  fi
}

printf '{"n_layer": 2,' >bad.json
printf '{"n_layer": 2, "n_embd": 64, "n_head": 4, "vocab_size": 256}\n' >missing.json
printf '{"n_layer": 2, "n_embd": 64, "n_head": 5, "vocab_size": 256, "max_seq": 128}\n' >heads.json
printf '{"model": {"n_layer": 2, "n_embd": 64,' >badplan.json
# A valid plan for the tiny preset (checked below as a control), and the same plan claiming a
# model of hidden size 256.
printf '%s\n' '{"model": {"n_layer": 2, "n_embd": 64, "n_head": 4, "vocab_size": 256, "max_seq": 256},' \
  ' "world_size": 1, "micro_batch": 4, "seq_len": 64, "ops": [{"name": "embed", "slices": ["zero3"]}]}' >tinyplan.json
sed 's/"n_embd": 64/"n_embd": 256/' tinyplan.json >otherplan.json
head -c 4096 /dev/urandom >corrupt.bin
# A random file could start with the checkpoint magic by chance; make sure it does not.
printf '\x01\x02\x03\x04' | dd of=corrupt.bin conv=notrunc status=none

T=("$OSDP" train --steps 1 --quiet)
expect_error "malformed JSON model" "bad.json" "malformed JSON" -- "${T[@]}" --model bad.json
# One meaning per JSON document: a key twice in one object (in a small object and in one of 20
# keys, which is sorted to check), content after the document, a Hugging Face config naming its
# model_type twice, a plan with a second document after it.
printf '{"n_layer": 2, "n_layer": 1000000000, "n_embd": 64, "n_head": 4, "vocab_size": 256, "max_seq": 64}\n' >dupkey.json
printf '{"a1":1,"a2":1,"a3":1,"a4":1,"a5":1,"a6":1,"a7":1,"a8":1,"a9":1,"b1":1,"b2":1,"b3":1,"b4":1,"b5":1,"b6":1,"b7":1,"b8":1,"b9":1,"c1":1,"b4":2}\n' >dupwide.json
printf '{"n_layer": 2, "n_embd": 64, "n_head": 4, "vocab_size": 256, "max_seq": 64}\n{"n_layer": 3}\n' >trailing.json
mkdir -p duphf && printf '{"model_type": "gpt2", "model_type": "llama", "n_layer": 2, "n_embd": 64, "n_head": 4, "vocab_size": 256, "n_positions": 64}\n' >duphf/config.json
expect_error "a key twice in a model JSON" "dupkey.json" "\"n_layer\" appears twice" -- "${T[@]}" --model dupkey.json
expect_error "a key twice in a wide object" "dupwide.json" "\"b4\" appears twice" -- "${T[@]}" --model dupwide.json
expect_error "content after a model JSON" "trailing.json" "content after the JSON document" "byte 76" -- \
  "${T[@]}" --model trailing.json
expect_error "model_type twice in a Hugging Face config" "duphf/config.json" "\"model_type\" appears twice" -- \
  "${T[@]}" --model duphf
cp tinyplan.json trailplan.json && printf '[]\n' >>trailplan.json
expect_error "content after a plan" "trailplan.json" "content after the JSON document" -- "${T[@]}" --plan trailplan.json
expect_error "JSON model missing a field" "missing.json" "max_seq" -- "${T[@]}" --model missing.json
expect_error "unknown preset" "gpt5" -- "${T[@]}" --model gpt5
expect_error "heads not dividing hidden" "n_head=5" "64" -- "${T[@]}" --model heads.json
# Global batches (gradient accumulation): zero, not a multiple of the micro-batch, micro-steps that
# do not share it evenly, a micro-batch that contradicts it, more sequences than the data holds,
# --accum with --plan auto.
head -c 3000 /dev/urandom | base64 >small.txt
expect_error "zero global batch" "--global-batch" "'0'" -- "${T[@]}" --global-batch 0
expect_error "global batch not a multiple of the micro-batch" "--global-batch 7" "micro-batch 2" \
  "a --batch that divides 7" -- "${T[@]}" --global-batch 7 --batch 2
expect_error "micro-steps not sharing the global batch" "--accum 3" "use an --accum that divides 8" -- \
  "${T[@]}" --global-batch 8 --accum 3
expect_error "micro-batch against global batch and micro-steps" "micro-batch 4 x --accum 2" \
  "the micro-batch is 3" -- "${T[@]}" --global-batch 8 --accum 2 --batch 3
expect_error "global batch larger than the data" "--global-batch 100" "training sequences of 64 tokens" \
  "use a global batch of at most" -- "${T[@]}" --data text:small.txt --seq 64 --global-batch 100
expect_error "--accum with --plan auto" "--accum with --plan auto" "--global-batch G" -- \
  "${T[@]}" --plan auto --accum 2 --mem-limit 64MiB
expect_error "seq longer than max_seq" "300" "256" -- "${T[@]}" --seq 300
expect_error "memory limit too small" "mem-limit" "at least" -- "${T[@]}" --mem-limit 1MiB
expect_error "unknown option" "--bogus" -- "${T[@]}" --bogus
expect_error "option without its value" "--steps" -- "$OSDP" train --steps
expect_error "non-numeric --steps" "--steps" "abc" -- "$OSDP" train --quiet --steps abc
expect_error "negative --batch" "--batch" -- "${T[@]}" --batch -3
expect_error "unknown data source" "foo" -- "${T[@]}" --data foo
expect_error "missing text file" "/nonexistent" -- "${T[@]}" --data text:/nonexistent
expect_error "missing checkpoint" "nonexistent.bin" -- "${T[@]}" --load "$W/nonexistent.bin"
expect_error "corrupt checkpoint" "corrupt.bin" -- "${T[@]}" --load corrupt.bin
expect_error "malformed plan" "badplan.json" -- "${T[@]}" --plan badplan.json
expect_error "plan for another model" "otherplan.json" "n_embd" -- "${T[@]}" --plan otherplan.json
# Recomputed layers in a plan file: a layer the model lacks, a flag that is not a boolean.
sed 's/]}$/], "layers": [{"layer": 2, "recompute": true}]}/' tinyplan.json >layerplan.json
sed 's/]}$/], "layers": [{"layer": 0, "recompute": 1}]}/' tinyplan.json >flagplan.json
expect_error "plan recomputing a missing layer" "layerplan.json" "layer=2" "0..1" -- "${T[@]}" --plan layerplan.json
expect_error "plan with a non-boolean recompute" "flagplan.json" "recompute" "true or false" -- "${T[@]}" --plan flagplan.json
sed 's/"slices": \["zero3"\]/"slices": ["zero3"], "shard_group": 3/' tinyplan.json >groupplan.json
sed 's/"seq_len": 64,/"seq_len": 64, "reduce_dtype": "fp16",/' tinyplan.json >dtypeplan.json
sed 's/"seq_len": 64,/"seq_len": 64, "overlap_reduce": "yes",/' tinyplan.json >ovplan.json
expect_error "plan with a shard group not dividing the world" "groupplan.json" "shard_group" "world_size=1" -- "${T[@]}" --plan groupplan.json
expect_error "plan with an unknown reduce dtype" "dtypeplan.json" "reduce_dtype" "bf16" -- "${T[@]}" --plan dtypeplan.json
expect_error "plan with a non-boolean overlap_reduce" "ovplan.json" "overlap_reduce" "true or false" -- "${T[@]}" --plan ovplan.json
# What an op keeps whole across micro-steps: an unknown value, and a weight kept by an op with no
# zero3 slice (in the file, and from --keep-whole for a plan with nothing to keep).
sed 's/"slices": \["zero3"\]/"slices": ["zero3"], "keep_whole": "all"/' tinyplan.json >keepplan.json
sed 's/"slices": \["zero3"\]/"slices": ["zero2"], "keep_whole": "weight"/' tinyplan.json >keepz2plan.json
expect_error "plan with an unknown keep_whole" "keepplan.json" "keep_whole" "grad+weight" -- "${T[@]}" --plan keepplan.json
expect_error "plan keeping a weight it does not gather" "embed" "keep_whole \"weight\"" "no zero3 slice" -- \
  "${T[@]}" --plan keepz2plan.json
expect_error "unknown --keep-whole" "--keep-whole" "'both'" "grad+weight" -- "${T[@]}" --plan zero3 --keep-whole both
expect_error "--keep-whole for a plan with nothing to keep" "--keep-whole grad" "no zero2 or zero3 slice" -- \
  "${T[@]}" --plan ddp --keep-whole grad
sed 's/"ops": \[{"name": "embed", "slices": \["zero3"\]}\]/"ops": [{"name": "embed", "slices": ["zero3"]}, {"name": "embed", "slices": ["dp"]}]/' tinyplan.json >dupplan.json
expect_error "plan naming an operator twice" "dupplan.json" "embed" "twice" -- "${T[@]}" --plan dupplan.json
sed 's/]}$/], "layers": [{"layer": 1, "recompute": true}, {"layer": 1, "recompute": false}]}/' tinyplan.json >duplayers.json
expect_error "plan naming a layer twice" "duplayers.json" "layer 1" "twice" -- "${T[@]}" --plan duplayers.json
sed 's/"seq_len": 64,/"seq_len": 64, "head_rows": 0,/' tinyplan.json >rowsplan.json
expect_error "plan with head_rows 0" "rowsplan.json" "head_rows" ">= 1" -- "${T[@]}" --plan rowsplan.json
expect_error "--head-rows not positive" "--head-rows" "0" -- "${T[@]}" --head-rows 0
expect_error "--head-rows not a number" "--head-rows" "'many'" -- "${T[@]}" --head-rows many
expect_error "--shard-group not dividing the ranks" "--shard-group" "'2'" "divide" -- "${T[@]}" --plan zero3 --shard-group 2
expect_error "--shard-group not a number" "--shard-group" "'x'" -- "${T[@]}" --plan zero3 --shard-group x
expect_error "--reduce-dtype unknown" "--reduce-dtype" "'fp16'" "bf16" -- "${T[@]}" --reduce-dtype fp16
expect_error "describe --shard-group not dividing --ranks" "--shard-group" "'3'" "4 ranks" -- "$OSDP" describe --plan zero3 --ranks 4 --shard-group 3
expect_error "--recompute not a count" "--recompute" "'two'" "0..2" -- "${T[@]}" --recompute two
expect_error "--device not a device" "--device" "'gpu'" "cpu or cuda" -- "${T[@]}" --device gpu
expect_error "describe --device not a device" "--device" "'tpu'" -- "$OSDP" describe --device tpu
expect_error "--tf32 not on/off" "--tf32" "'maybe'" -- "${T[@]}" --tf32 maybe
expect_error "--matmul not a mode" "--matmul" "'fp16'" "fp32, tf32 or bf16" -- "${T[@]}" --matmul fp16
expect_error "--matmul and --tf32 disagree" "--matmul bf16" "--tf32 on" "disagree" -- "${T[@]}" --matmul bf16 --tf32 on
expect_error "bench: --matmul and --tf32 disagree" "--matmul tf32" "--tf32 off" -- "$OSDP" bench --steps 1 --matmul tf32 --tf32 off
expect_error "--precision not a precision" "--precision" "'fp16'" "fp32 or bf16" -- "${T[@]}" --precision fp16
# A CPU without native bf16 products (AVX512_BF16 or AMX) refuses it, naming what it lacks.
if "$OSDP" --version | grep -q "precision bf16 on the CPU: unavailable"; then
  expect_error "--precision bf16 on the CPU" "--precision bf16" "lacks" "--precision fp32" -- "${T[@]}" --precision bf16
fi
expect_error "profile --precision bf16" "--precision bf16" "fp32" -- "$OSDP" profile --precision bf16
# Without a GPU (this machine, CI), --device cuda says why in one line, built with CUDA or not.
if ! nvidia-smi -L >/dev/null 2>&1; then
  expect_error "--device cuda without a GPU" "--device cuda" "--device cpu" -- "${T[@]}" --device cuda
  expect_error "bench --device cuda without a GPU" "--device cuda" -- "$OSDP" bench --steps 1 --device cuda
  expect_error "profile --device cuda without a GPU" "--device cuda" -- "$OSDP" profile --device cuda --out d.json
fi
expect_error "unknown command" "frobnicate" -- "$OSDP" frobnicate
expect_error "describe: unknown preset" "gpt5" -- "$OSDP" describe --model gpt5
expect_error "bench: malformed JSON model" "bad.json" -- "$OSDP" bench --model bad.json --steps 1

# Controls: the same commands with good input succeed, so the failures above are about the input.
if "$OSDP" train --steps 2 --quiet >out.txt 2>err.txt && [ ! -s err.txt ]; then ok
else bad "control: osdp train --steps 2 --quiet failed or wrote to stderr"; sed 's/^/    /' err.txt; fi
printf '{"n_layer": 2, "n_embd": 64, "n_head": 4, "vocab_size": 256, "max_seq": 128}\n' >good.json
if "$OSDP" train --model good.json --steps 1 --quiet >out.txt 2>err.txt; then ok
else bad "control: a complete JSON model is refused"; sed 's/^/    /' err.txt; fi
if "$OSDP" train --plan tinyplan.json --steps 1 --quiet >out.txt 2>err.txt; then ok
else bad "control: a plan file for the tiny model is refused"; sed 's/^/    /' err.txt; fi

# Under MPI: every rank meets the error, rank 0 alone reports it (mpirun adds its own lines, so
# count ours).
if [ ${#MPIRUN[@]} -gt 0 ]; then
  "${MPIRUN[@]}" -np 2 "$OSDP" train --model gpt5 --steps 1 --quiet >out.txt 2>err.txt
  rc=$?
  n=$(grep -c '^osdp: error: ' err.txt)
  if [ "$rc" -ne 0 ] && [ "$n" -eq 1 ] && grep -q "gpt5" err.txt; then ok
  else bad "2 ranks, unknown preset: exit $rc, $n 'osdp: error:' lines (want non-zero, 1)"; sed 's/^/    /' err.txt | head -n 20; fi
fi

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
