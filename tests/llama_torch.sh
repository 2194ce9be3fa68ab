#!/usr/bin/env bash
# llama_torch.sh LLAMA_GRADS: osdp's Llama step against a Llama written in PyTorch the way
# transformers' modeling_llama / modeling_qwen2 compute it (tests/llama_torch.py), on the same
# safetensors file: the loss and every parameter's gradient of osdp's fp64 pass within 1e-5
# relative (and to ~1e-14 with osdp's own rotary frequencies), the fp32 pass's loss within 1e-5
# and its gradients within 1e-4 of each tensor's largest. LLAMA_GRADS (tests/llama_grads.c) runs
# osdp's passes and writes the files. Two configs:
#   gqa:  untied lm_head, grouped-query attention (4 query heads on 2 K/V heads), head_dim 16
#         != n_embd / n_head = 12, llama3 rope scaling with original_max_position_embeddings 64,
#         so that at T = 20 the frequencies fall in all three bands (kept, interpolated, scaled);
#   qwen: tied head, QKV bias (Qwen2), 1 K/V head for 4 query heads, rope_theta 1e6, eps 1e-6.
# Both have vocabularies that are not multiples of 128 (padded columns are not in the files; the
# tool checks that their gradients are 0). Exit 77 (skipped) without a python3 that has torch
# (the Debian python3-torch at /usr/bin/python3 counts).
set -u
TOOL=${1:?usage: llama_torch.sh LLAMA_GRADS}
HERE=$(cd "${BASH_SOURCE%/*}" && pwd)
[[ "$TOOL" == */* ]] && TOOL="$(cd "${TOOL%/*}" && pwd)/${TOOL##*/}"

PY=""
for py in python3 /usr/bin/python3; do
  if command -v "$py" >/dev/null 2>&1 && "$py" -c "import torch" >/dev/null 2>&1; then PY=$py; break; fi
done
if [ -z "$PY" ]; then echo "skipped: no python3 with torch"; exit 77; fi

W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
cd "$W" || exit 1

cat >gqa.json <<'JSON'
{"name": "llama-gqa-test", "family": "llama", "n_layer": 2, "n_embd": 48, "n_head": 4,
 "vocab_size": 200, "max_seq": 64, "n_kv_head": 2, "head_dim": 16, "ffn_dim": 80,
 "tied_head": 0, "qkv_bias": 0, "norm_eps": 1e-5, "rope_theta": 10000, "rope_factor": 8,
 "rope_low_freq_factor": 1, "rope_high_freq_factor": 4, "rope_original_max": 64}
JSON
cat >qwen.json <<'JSON'
{"name": "qwen-bias-test", "family": "llama", "n_layer": 2, "n_embd": 64, "n_head": 4,
 "vocab_size": 300, "max_seq": 64, "n_kv_head": 1, "head_dim": 16, "ffn_dim": 96,
 "tied_head": 1, "qkv_bias": 1, "norm_eps": 1e-6, "rope_theta": 1000000, "rope_factor": 0,
 "rope_low_freq_factor": 0, "rope_high_freq_factor": 0, "rope_original_max": 0}
JSON

status=0
for run in "gqa 2 20 11" "qwen 2 17 12"; do
  set -- $run
  mkdir "$1"
  echo "== $1: B=$2 T=$3 seed $4"
  if ! "$TOOL" "$1.json" "$2" "$3" "$4" "$1"; then
    echo "FAIL: llama_grads failed on $1"; echo "0 passed, 1 failed"; status=1; continue
  fi
  "$PY" "$HERE/llama_torch.py" "$1" || status=1
done
exit $status
