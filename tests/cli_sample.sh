#!/usr/bin/env bash
# cli_sample.sh OSDP: `osdp sample` on every model family (GPT-2 tiny, llama-tiny, qwen-tiny),
# from a weights file (--load, safetensors) and from a checkpoint (--resume):
#   - greedy output (temperature 0) over the KV cache equals the full forward's (--no-cache),
#     token for token, for a prompt given as text and as token ids;
#   - one seed gives one output at temperature 1, and --top-k 1 is greedy;
#   - the JSON carries the prompt's and the new tokens, which --tokens bounds;
#   - bad input is one error line and a non-zero exit: no weights, both --load and --resume, a
#     prompt character outside the task, token ids outside the vocabulary, a negative
#     temperature, a missing checkpoint, a prompt longer than the context, an unknown flag.
# (That trained weights answer addition problems is tests/cli_learn.sh's.)
set -u
OSDP=${1:?usage: cli_sample.sh OSDP}
TEXT=$(cd "${BASH_SOURCE%/*}" && pwd)/${BASH_SOURCE##*/}  # this script: the text data
source "${BASH_SOURCE%/*}/cli_common.sh"

# tokens FILE: the "tokens" array of a sample --json output, as "1,2,3".
tokens() { grep -o '"tokens":\[[0-9,]*\]' "$1" | sed 's/.*\[\(.*\)\]/\1/'; }

for model in tiny llama-tiny qwen-tiny; do
  # Briefly trained weights (text of this script, so the continuation is not all one token).
  if ! "$OSDP" train --model "$model" --data "text:$TEXT" --seq 32 --batch 4 --steps 30 \
       --save "$model.safetensors" --quiet --eval-batches 0 --problems 0 >/dev/null 2>err.txt; then
    bad "$model: train --save failed: $(cat err.txt)"; continue
  fi
  for prompt in "--prompt osdp" "--prompt-tokens 1,2,3,250"; do
    args=(sample --load "$model.safetensors" --data "text:$TEXT" $prompt --tokens 40 --json)
    "$OSDP" "${args[@]}" --temperature 0 >cache.json 2>err.txt || bad "$model $prompt: $(cat err.txt)"
    "$OSDP" "${args[@]}" --temperature 0 --no-cache >full.json 2>err.txt || bad "$model $prompt --no-cache: $(cat err.txt)"
    a=$(tokens cache.json) b=$(tokens full.json)
    if [ -n "$a" ] && [ "$a" = "$b" ]; then ok
    else bad "$model $prompt: greedy tokens with the KV cache '$a' differ from the full forward's '$b'"; fi
    if [ "$(echo "$a" | tr ',' '\n' | wc -l)" -eq 40 ]; then ok
    else bad "$model $prompt: --tokens 40 gave '$a'"; fi
    "$OSDP" "${args[@]}" --temperature 1 --top-k 1 >k1.json 2>err.txt
    if [ "$(tokens k1.json)" = "$a" ]; then ok; else bad "$model $prompt: --top-k 1 is not greedy"; fi
    "$OSDP" "${args[@]}" --temperature 1 --seed 4 >s1.json 2>/dev/null
    "$OSDP" "${args[@]}" --temperature 1 --seed 4 >s2.json 2>/dev/null
    if [ -n "$(tokens s1.json)" ] && [ "$(tokens s1.json)" = "$(tokens s2.json)" ]; then ok
    else bad "$model $prompt: --seed 4 twice gave different tokens"; fi
  done
done
grep -q '"prompt_tokens":\[1,2,3,250\]' cache.json && ok || bad "the JSON lacks the prompt's tokens: $(head -c 200 cache.json)"

# From a checkpoint directory: the run's data (text) is the tokenizer without --data.
if "$OSDP" train --model tiny --data "text:$TEXT" --seq 32 --batch 4 --steps 5 --checkpoint ck \
     --quiet --eval-batches 0 >/dev/null 2>err.txt; then ok; else bad "train --checkpoint: $(cat err.txt)"; fi
"$OSDP" sample --resume ck --prompt "set -u" --tokens 8 --temperature 0 >out.txt 2>err.txt
if [ "$(wc -l <out.txt)" -eq 2 ] && grep -q '^set -u' out.txt && grep -q '8 new tokens' out.txt; then ok
else bad "sample --resume ck --prompt: $(cat out.txt err.txt)"; fi

W8=tiny.safetensors
refused "no weights" "--load FILE or --resume PATH" -- "$OSDP" sample --prompt 1+1=
refused "both inputs" "--load FILE or --resume PATH" -- "$OSDP" sample --load $W8 --resume ck --prompt 1
refused "a character outside addition" "'x'" "--prompt" -- "$OSDP" sample --load $W8 --prompt "12x"
refused "ids outside the vocabulary" "--prompt-tokens" "256" -- "$OSDP" sample --load $W8 --prompt-tokens 1,256
refused "ids that are no list" "--prompt-tokens" -- "$OSDP" sample --load $W8 --prompt-tokens 1,,2
refused "negative temperature" "--temperature" -- "$OSDP" sample --load $W8 --prompt 1 --temperature -1
refused "missing checkpoint" "--resume" "nothing-here" -- "$OSDP" sample --resume nothing-here --prompt 1
refused "a file for --resume" "--resume" "--load" -- "$OSDP" sample --resume $W8 --prompt 1
refused "prompt and prompt-tokens" "--prompt and --prompt-tokens" -- "$OSDP" sample --load $W8 --prompt 1 --prompt-tokens 1
long=$(printf '1%.0s' $(seq 300))
refused "prompt past the context" "context" -- "$OSDP" sample --load $W8 --prompt "$long"
refused "no prompt on text" "--prompt" -- "$OSDP" sample --load $W8 --data "text:$TEXT"
refused "unknown flag" "--temperatur" "--temperature" -- "$OSDP" sample --load $W8 --prompt 1 --temperatur 0

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
