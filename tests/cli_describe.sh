#!/usr/bin/env bash
# cli_describe.sh OSDP: `osdp describe` reports the right parameter counts (GPT-2 124M: 124475904
# with llm.c's vocabulary padded to 50304, worked out below from the shapes), in JSON and in the
# table (whose rows add up to its totals line), and a memory breakdown in which sharding lowers
# the peak: zero3 < zero2 < ddp on 4 ranks.
set -u
OSDP=${1:?usage: cli_describe.sh OSDP}
source "${BASH_SOURCE%/*}/cli_common.sh"

# GPT-2 parameters from the shapes: wte Vp*C + wpe T*C + L * (ln1 2C + qkv C*3C+3C + proj C*C+C
# + ln2 2C + fc C*4C+4C + fcproj 4C*C+C) + final layernorm 2C; the LM head is tied to wte.
gpt2_params() {  # L C Vp maxT
  awk -v L="$1" -v C="$2" -v V="$3" -v T="$4" 'BEGIN {
    layer = 2*C + (C*3*C + 3*C) + (C*C + C) + 2*C + (C*4*C + 4*C) + (4*C*C + C)
    printf "%.0f\n", V*C + T*C + L*layer + 2*C }'
}
want124=$(gpt2_params 12 768 50304 1024)
if [ "$want124" = 124475904 ]; then ok; else bad "formula gives $want124 for GPT-2 124M, not 124475904"; fi
want_tiny=$(gpt2_params 2 64 256 256)

if "$OSDP" describe --model gpt2-124m --json >g.json 2>err.txt; then ok
else bad "osdp describe --model gpt2-124m --json failed"; sed 's/^/    /' err.txt; fi
if grep -q "\"n_params\":${want124}[,}]" g.json; then ok
else bad "describe --json for gpt2-124m: $(grep -o '"n_params":[0-9]*' g.json), want \"n_params\":$want124"; fi
if [ "$(wc -l <g.json)" -eq 1 ] && grep -q '^{.*}$' g.json && grep -q '"padded_vocab":50304' g.json; then ok
else bad "describe --json is not one JSON object line with padded_vocab 50304"; head -c 300 g.json; echo; fi
# The per-operator "params" add up to n_params.
sum=$(grep -o '"params":[0-9]*' g.json | head -n -1 | awk -F: '{ s += $2 } END { printf "%.0f", s }')
# (head -n -1 drops the memory object's "params", which is the per-rank byte count.)
if [ "$sum" = "$want124" ]; then ok; else bad "describe --json: operator params add up to $sum, want $want124"; fi

# The table: its rows add up to the totals line, which carries the same count.
for m in gpt2-124m tiny; do
  want=$want124; [ $m = tiny ] && want=$want_tiny
  if ! "$OSDP" describe --model $m >t.txt 2>err.txt; then bad "osdp describe --model $m failed"; sed 's/^/    /' err.txt; continue; fi
  if grep -q "^total: $want parameters" t.txt; then ok
  else bad "describe --model $m: no 'total: $want parameters' line"; grep -i total t.txt | sed 's/^/    /'; fi
  rows=$(awk '$1 ~ /^[0-9]+$/ && NF >= 6 { s += $4; n++ } END { printf "%.0f %d", s, n }' t.txt)
  if [ "${rows% *}" = "$want" ] && [ "${rows#* }" -gt 3 ]; then ok
  else bad "describe --model $m: table rows (count, sum) = (${rows#* }, ${rows% *}), want their params to add up to $want"; fi
done

# peak_of ARGS...: the N of the "peak N bytes" line of `osdp describe ARGS`.
peak_of() {
  "$OSDP" describe "$@" 2>err.txt | sed -n 's/^ *peak \([0-9][0-9]*\) bytes.*/\1/p'
}
for m in tiny gpt2-124m; do
  z3=$(peak_of --model $m --plan zero3 --ranks 4 --batch 2 --seq 128)
  z2=$(peak_of --model $m --plan zero2 --ranks 4 --batch 2 --seq 128)
  dp=$(peak_of --model $m --plan ddp --ranks 4 --batch 2 --seq 128)
  dp1=$(peak_of --model $m --plan ddp --ranks 1 --batch 2 --seq 128)
  dpb=$(peak_of --model $m --plan ddp --ranks 4 --batch 4 --seq 128)
  if [ -n "$z3" ] && [ -n "$z2" ] && [ -n "$dp" ] && [ "$z3" -gt 0 ] && [ "$z3" -lt "$z2" ] && [ "$z2" -lt "$dp" ]; then ok
  else bad "$m, 4 ranks, micro-batch 2, seq 128: peaks zero3 '$z3' zero2 '$z2' ddp '$dp', want 0 < zero3 < zero2 < ddp"; sed 's/^/    /' err.txt; fi
  # ddp replicates everything: its peak does not depend on the rank count; more batch needs more.
  if [ -n "$dp1" ] && [ "$dp1" = "$dp" ]; then ok; else bad "$m: ddp peak on 1 rank '$dp1' differs from 4 ranks '$dp'"; fi
  if [ -n "$dpb" ] && [ -n "$dp" ] && [ "$dpb" -gt "$dp" ]; then ok; else bad "$m: ddp peak at batch 4 '$dpb' is not above batch 2 '$dp'"; fi
done
# The memory breakdown names its parts, and the JSON peak matches the text.
"$OSDP" describe --plan zero3 --ranks 4 --batch 2 --seq 128 >m.txt 2>err.txt
if grep -q 'memory per rank for plan zero3 on 4 rank(s), micro-batch 2, seq 128' m.txt &&
   grep -q 'params .*grads .*optimizer .*activations ' m.txt; then ok
else bad "describe --plan zero3: no memory breakdown"; sed 's/^/    /' m.txt | tail -n 4; fi
z3=$(sed -n 's/^ *peak \([0-9][0-9]*\) bytes.*/\1/p' m.txt)
if [ -n "$z3" ] && "$OSDP" describe --plan zero3 --ranks 4 --batch 2 --seq 128 --json | grep -q "\"peak\":$z3[,}]"; then ok
else bad "describe --json memory peak differs from the text peak '$z3'"; fi
# Recomputing every layer of small at seq 256 keeps far less: only each layer's output and one
# shared layer's worth; the text says how many layers recompute; a bad count is refused.
"$OSDP" describe --model small --plan zero3 --ranks 2 --batch 2 --seq 256 --json >r0.json 2>err.txt
"$OSDP" describe --model small --plan zero3 --ranks 2 --batch 2 --seq 256 --recompute all --json >ra.json 2>>err.txt
a0=$(grep -o '"acts":[0-9]*' r0.json | head -1 | cut -d: -f2); aa=$(grep -o '"acts":[0-9]*' ra.json | head -1 | cut -d: -f2)
if [ -n "$a0" ] && [ -n "$aa" ] && [ "$aa" -lt $((a0 * 6 / 10)) ] && grep -q '"recompute_layers":4' ra.json &&
   grep -q '"recompute_layers":0' r0.json; then ok
else bad "describe --recompute all: activations $aa vs $a0 without"; fi
if "$OSDP" describe --model small --recompute all --batch 2 --seq 256 | grep -q 'recompute: 4 of 4 layers'; then ok
else bad "describe --recompute all: the text does not say which layers recompute"; fi
if ! "$OSDP" describe --model small --recompute 5 >/dev/null 2>err.txt &&
   grep -q -- "--recompute: '5' is not a layer count; give 0..4" err.txt; then ok
else bad "describe --recompute 5 on a 4-layer model: $(cat err.txt)"; fi

# Hybrid: zero3 sharded within groups of 2 of 4 ranks needs more than zero3 over all 4 and less
# than ddp; gpt2-124m at seq 256, micro-batch 2 (the states dominate).
peak() { "$OSDP" describe --model gpt2-124m --batch 2 --seq 256 --ranks 4 "$@" | sed -n 's/^ *peak \([0-9][0-9]*\) bytes.*/\1/p'; }
pd=$(peak --plan ddp); p3=$(peak --plan zero3); ph=$(peak --plan zero3 --shard-group 2)
if [ -n "$pd" ] && [ -n "$p3" ] && [ -n "$ph" ] && [ "$p3" -lt "$ph" ] && [ "$ph" -lt "$pd" ]; then ok
else bad "describe --shard-group 2: peak $ph not between zero3 $p3 and ddp $pd"; fi

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
