#!/usr/bin/env bash
# safetensors_torch.sh OSDP: what osdp's safetensors files MEAN, checked outside osdp. A python3
# with torch (the Debian python3-torch at /usr/bin/python3 counts) reads a.st with its own
# parser (the format's rules), compares it with the llm.c checkpoint it came from, and runs a
# GPT-2 written the way transformers' modeling_gpt2 computes it (Conv1D weights [in, out], wte
# tied to the LM head, gelu_new, LayerNorm eps 1e-5) on the tokens osdp trained on: the loss
# osdp reports for its first step must be one of the reference's (one per window phase). With
# the safetensors package it also reads the file with safetensors.torch.load_file; with
# transformers it loads it through GPT2LMHeadModel.from_pretrained. Exit 77 (skipped) without
# a python3 that has torch.
set -u
OSDP=${1:?usage: safetensors_torch.sh OSDP}
HERE=$(cd "${BASH_SOURCE%/*}" && pwd)
source "$HERE/cli_common.sh"

PY=""
for py in python3 /usr/bin/python3; do
  if command -v "$py" >/dev/null 2>&1 && "$py" -c "import torch" >/dev/null 2>&1; then PY=$py; break; fi
done
if [ -z "$PY" ]; then echo "skipped: no python3 with torch"; exit 77; fi

printf '{"n_layer": 2, "n_embd": 32, "n_head": 4, "vocab_size": 64, "max_seq": 128}\n' >m.json
# A token file of period 7: every training window is one of 7 phases of the same sequence.
"$PY" - <<'PY'
import struct
period = [5, 17, 63, 0, 42, 33, 8]
toks = [period[i % len(period)] for i in range(700)]
with open("per.bin", "wb") as f:
    f.write(struct.pack("<256i", 20240520, 1, len(toks), *([0] * 253)))
    f.write(struct.pack("<%dH" % len(toks), *toks))
PY
T=16
if ! "$OSDP" train --model m.json --steps 20 --batch 4 --seq 32 --quiet --save a.bin >out.txt 2>err.txt ||
   ! "$OSDP" export a.bin --format safetensors a.st --quiet >>out.txt 2>>err.txt ||
   ! "$OSDP" train --load a.st --data tokens:per.bin --steps 1 --batch 1 --seq $T --eval-batches 0 \
       --json --quiet >out.txt 2>>err.txt; then
  echo "FAIL: osdp failed"; cat err.txt; echo "0 passed, 1 failed"; exit 1
fi
loss=$(grep -o '"first_loss":[^,}]*' out.txt | cut -d: -f2)
"$PY" "$HERE/safetensors_torch.py" a.st a.bin per.bin "$T" "$loss"
