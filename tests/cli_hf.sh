#!/usr/bin/env bash
# cli_hf.sh OSDP: Hugging Face checkpoints on the command line. A Llama model trained by osdp
# exports to a directory transformers loads (model.safetensors + config.json); --load DIR and
# --model DIR read it back; a Hub-style checkpoint (two BF16 shards, their index, config.json,
# written by tests/hf_make.py with the standard library) loads to exactly the values of the same
# weights as one F32 file; llm.c version 2 token files (uint32) train it, and ids beyond its
# vocabulary are refused naming the largest id and the model's vocab_size; a config.json with a
# key osdp cannot honour, a directory without weights, a missing shard each give one error line.
# Exit 77 (skipped) without python3.
set -u
OSDP=${1:?usage: cli_hf.sh OSDP}
HERE=$(cd "${BASH_SOURCE%/*}" && pwd)
command -v python3 >/dev/null || { echo "no python3: skipped"; exit 77; }
source "$HERE/cli_common.sh"

# expect_error NAME PATTERN... -- CMD...: CMD fails with one stderr line "osdp: error: ..." that
# contains every PATTERN, and no crash.
expect_error() {
  local name=$1; shift
  local pats=()
  while [ "$1" != "--" ]; do pats+=("$1"); shift; done
  shift
  "$@" >out.txt 2>err.txt
  local rc=$? why="" p
  if [ "$rc" -eq 0 ] || [ "$rc" -ge 128 ]; then why="exit status $rc"
  elif [ "$(wc -l <err.txt)" -ne 1 ] || ! grep -q '^osdp: error: ' err.txt; then why="not one error line"
  else for p in "${pats[@]}"; do grep -qF -- "$p" err.txt || { why="no '$p'"; break; }; done; fi
  if [ -z "$why" ]; then ok; else bad "$name: $why: $(head -3 err.txt)"; fi
}

T=(--steps 1 --seq 16 --batch 2 --quiet --eval-batches 0)
"$OSDP" train --model llama-tiny --steps 3 --seq 16 --batch 2 --quiet --save m.safetensors >/dev/null 2>err.txt ||
  bad "train llama-tiny: $(cat err.txt)"
# Export to a directory: the same file, and a config.json transformers reads.
"$OSDP" export m.safetensors --format safetensors out/ --quiet 2>err.txt || bad "export to out/: $(cat err.txt)"
cmp -s m.safetensors out/model.safetensors && ok || bad "out/model.safetensors differs from m.safetensors"
python3 - out/config.json <<'PY' && ok || bad "out/config.json is not LlamaForCausalLM's"
import json, sys
c = json.load(open(sys.argv[1]))
want = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "num_hidden_layers": 2, "hidden_size": 64,
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "intermediate_size": 128,
        "vocab_size": 256, "tie_word_embeddings": False, "hidden_act": "silu"}
sys.exit(0 if all(c.get(k) == v for k, v in want.items()) else 1)
PY
"$OSDP" train --load out "${T[@]}" >/dev/null 2>err.txt && ok || bad "--load out: $(cat err.txt)"
"$OSDP" train --model out --load out "${T[@]}" >/dev/null 2>err.txt && ok || bad "--model out --load out: $(cat err.txt)"
"$OSDP" describe --model out >d.txt 2>&1 && grep -q "Llama-family, 2 layers, hidden 64, 4 heads (2 K/V)" d.txt && ok ||
  bad "describe --model out: $(head -2 d.txt)"
expect_error "--model of another shape" "--load: out" "qwen-tiny" "n_kv_head: 1, the file's 2" -- \
  "$OSDP" train --model qwen-tiny --load out "${T[@]}"

# A Hub-style checkpoint: BF16 shards + index; loads as the same values in one F32 file.
python3 "$HERE/hf_make.py" shard m.safetensors out/config.json hub exact || bad "hf_make.py shard failed"
"$OSDP" export hub --format safetensors hub.st --quiet 2>err.txt || bad "export hub: $(cat err.txt)"
"$OSDP" export exact --format safetensors exact.st --quiet 2>err.txt || bad "export exact: $(cat err.txt)"
[ -s hub.st ] && cmp -s hub.st exact.st && ok || bad "the BF16 shards do not load as their F32 values"
"$OSDP" train --load hub/model.safetensors.index.json "${T[@]}" >/dev/null 2>err.txt && ok ||
  bad "--load hub's index: $(cat err.txt)"
mv hub/model-00002-of-00002.safetensors gone.st
expect_error "a missing shard" "hub/model.safetensors.index.json" "model-00002-of-00002.safetensors" "missing" -- \
  "$OSDP" train --load hub "${T[@]}"
mv gone.st hub/model-00002-of-00002.safetensors
mkdir empty
expect_error "--load a directory without weights" "empty" "without model.safetensors" -- "$OSDP" train --load empty "${T[@]}"
expect_error "--model a directory without config.json" "empty" "without config.json" -- "$OSDP" train --model empty "${T[@]}"

# config.json keys osdp cannot honour: one line naming the file, the key and the value.
mkdir bad
sed 's/"hidden_act":[[:space:]]*"silu"/"hidden_act": "gelu"/' out/config.json >bad/config.json
expect_error "hidden_act gelu" "bad/config.json" '"hidden_act" is "gelu"' -- "$OSDP" train --model bad "${T[@]}"
sed 's/"rope_scaling":[[:space:]]*null/"rope_scaling": {"rope_type": "yarn", "factor": 4}/' out/config.json >bad/config.json
expect_error "rope_scaling yarn" "bad/config.json" '"rope_scaling.rope_type" is "yarn"' -- \
  "$OSDP" describe --model bad/config.json
sed 's/"num_hidden_layers":[[:space:]]*2,//' out/config.json >bad/config.json
expect_error "no num_hidden_layers" "bad/config.json" 'missing key "num_hidden_layers"' -- "$OSDP" train --model bad "${T[@]}"

# llm.c version 2 token files (uint32 ids).
python3 "$HERE/hf_make.py" tokens32 t32.bin 4000 255
"$OSDP" train --model out --data tokens:t32.bin "${T[@]}" >/dev/null 2>err.txt && ok || bad "tokens v2: $(cat err.txt)"
python3 "$HERE/hf_make.py" tokens32 big.bin 4000 300
expect_error "tokens beyond the vocabulary" "big.bin" "token ids up to 300" "vocab_size 256" "vocab_size >= 301" -- \
  "$OSDP" train --model out --data tokens:big.bin "${T[@]}"
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
