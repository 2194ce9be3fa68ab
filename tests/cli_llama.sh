#!/usr/bin/env bash
# cli_llama.sh OSDP MPIRUN...: the Llama family end to end on the command line. A Qwen2-style
# model (tied head, QKV biases, one K/V head) trains with checkpoints on one rank; resumed on 2
# ranks under zero3 and on 4 under zero2 it ends with the losses of the uninterrupted run; its
# checkpoint directory exports to safetensors with transformers' names, which --load reads back
# to the same weights; --save writes safetensors for it whatever the name; llm.c files refuse it
# with one line; describe and plan print its GQA shape; llama3-8b at seq 8192 on 8 ranks plans in
# seconds within 80 GiB and, on 64 ranks with slow links between hosts of 8, shards within hosts.
set -u
OSDP=${1:?usage: cli_llama.sh OSDP MPIRUN...}; shift
MPIRUN=("$@")
HERE=$(cd "${BASH_SOURCE%/*}" && pwd)
source "$HERE/cli_common.sh"

loss_at() { grep "\"step\":$2," "$1" | grep -o '"loss":[^,]*' | cut -d: -f2; }
common=(--model qwen-tiny --batch 4 --steps 10 --seq 32 --quiet)
"$OSDP" train "${common[@]}" --log full.jsonl >/dev/null 2>err.txt || bad "uninterrupted run: $(cat err.txt)"
"$OSDP" train "${common[@]}" --stop-after 5 --checkpoint ck --checkpoint-every 5 >/dev/null 2>err.txt ||
  bad "first half: $(cat err.txt)"
want=$(loss_at full.jsonl 10)
for spec in "2 zero3 2" "4 zero2 1"; do
  read -r n plan b <<< "$spec"
  if "${MPIRUN[@]}" -np "$n" "$OSDP" train "${common[@]}" --batch "$b" --plan "$plan" --resume ck \
       --log "res$n.jsonl" >/dev/null 2>err.txt; then
    got=$(loss_at "res$n.jsonl" 10)
    [ -n "$want" ] && [ "$got" = "$want" ] && ok || bad "resumed on $n ranks ($plan): loss $got, uninterrupted $want"
  else bad "resume on $n ranks: $(tail -2 err.txt)"; fi
done

# Export the checkpoint directory; the file has transformers' names and no lm_head (tied).
if "$OSDP" export ck --format safetensors w.safetensors --quiet 2>err.txt; then
  hdr=$(head -c 200000 w.safetensors | tr -c '[:print:]' ' ')
  for name in model.embed_tokens.weight model.layers.1.self_attn.k_proj.bias \
              model.layers.0.mlp.gate_proj.weight model.layers.1.post_attention_layernorm.weight model.norm.weight; do
    [[ "$hdr" == *"\"$name\""* ]] && ok || bad "export lacks $name"
  done
  [[ "$hdr" != *'"lm_head.weight"'* ]] && ok || bad "a tied model's export holds lm_head.weight"
else bad "export: $(cat err.txt)"; fi
# --save of a Llama model is safetensors whatever its name.
"$OSDP" train --model llama-tiny --steps 2 --seq 16 --save m.bin --quiet >/dev/null 2>err.txt || bad "save: $(cat err.txt)"
[ "$(head -c 9 m.bin | tail -c 1)" = "{" ] && ok || bad "--save m.bin of a Llama model is not safetensors"
# llm.c files refuse it in one line.
"$OSDP" export m.bin --format llmc m.llmc --model llama-tiny --quiet >/dev/null 2>err.txt && bad "llmc export of a Llama model succeeded"
grep -q "llm.c checkpoints hold GPT-2 models only" err.txt && [ "$(wc -l < err.txt)" = 1 ] && ok ||
  bad "llmc export error: $(cat err.txt)"

# describe and plan.
"$OSDP" describe --model smollm2-135m --seq 256 > d.txt 2>&1 || bad "describe: $(cat d.txt)"
grep -q "9 heads (3 K/V) of 64, ffn 1536, tied head" d.txt && grep -q "^total: 134515008 parameters" d.txt && ok ||
  bad "describe smollm2-135m: $(head -1 d.txt)"
start=$(date +%s)
"$OSDP" plan --model llama3-8b --seq 8192 --ranks 8 --mem-limit 80GiB --flops 4e14 --bandwidth 1.5e11 \
  --latency 1e-5 --out p8.json > p8.txt 2>err.txt || bad "plan llama3-8b on 8 ranks: $(cat err.txt)"
[ $(( $(date +%s) - start )) -le 5 ] && ok || bad "plan llama3-8b took more than 5 s"
grep -q "^osdp   micro-batch .* peak [0-9.]* GiB" p8.txt && [ -s p8.json ] && ok ||
  bad "llama3-8b on 8 ranks: no plan within 80 GiB: $(head -3 p8.txt)"
"$OSDP" plan --model llama3-8b --seq 8192 --ranks 64 --ranks-per-host 8 --mem-limit 80GiB --flops 4e14 \
  --bandwidth 1.5e11 --latency 1e-5 --inter-bandwidth 1.25e10 --inter-latency 2e-5 --out p64.json \
  > p64.txt 2>err.txt || bad "plan llama3-8b on 64 ranks: $(cat err.txt)"
grep -q '"shard_group":[[:space:]]*8' p64.json && ok ||
  bad "llama3-8b on 64 ranks, 8 per host: no op sharded within hosts"
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
