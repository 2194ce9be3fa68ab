#!/usr/bin/env bash
# cli_bounds.sh OSDP: absurd but well-formed input (issue 42, item 5) is refused in one line that
# names the field or option, its value and the range, with a non-zero exit status and every file
# as it was; or, where the input has a meaning, gives the right numbers: device files with link
# costs or FLOP/s beyond physical ranges, a plot of a loss of 1e308 (no inf or nan in the SVG),
# --grad-clip and --weight-decay out of range, the --plan auto options checked without --plan
# auto, --steps 0, a safetensors header of 70,000 tensors, a plan's micro_batch of 1e9 and a
# config.json number beyond a double's range.
set -u
OSDP=${1:?usage: cli_bounds.sh OSDP}
source "${BASH_SOURCE%/*}/cli_common.sh"

# device_file FILE FLOPS BANDWIDTH LATENCY: a device file for 2 ranks with these figures.
device_file() {
  local c="{\"latency_s\": $4, \"bandwidth_Bps\": $3}"
  printf '{"ranks": 2, "mem_limit": "8GiB", "flops": %s, "collectives": {"allreduce": %s, "allgather": %s, "reduce_scatter": %s}}\n' \
    "$2" "$c" "$c" "$c" >"$1"
}

# 1. Link costs beyond physical ranges: named with the value and the range, not "no plan fits".
device_file slow.json 9.4e10 1e-300 2e-5
device_file late.json 9.4e10 3e8 1e300
refused "bandwidth 1e-300" '"collectives.allreduce.bandwidth_Bps" = 1e-300' "from 1 to 1e+15 B/s" -- \
  "$OSDP" plan --devices slow.json --model tiny
refused "latency 1e300" '"collectives.allreduce.latency_s" = 1e+300' "from 0 to 1000 s" -- \
  "$OSDP" plan --devices late.json --model tiny
refused "train --plan auto --devices, bandwidth 1e-300" "slow.json" "bandwidth_Bps" "1e-300" -- \
  "$OSDP" train --plan auto --devices slow.json --steps 1 --quiet
refused "--bandwidth 1e-300" "--bandwidth 1e-300" "from 1 to 1e+15" -- \
  "$OSDP" plan --model tiny --ranks 2 --mem-limit 1GiB --flops 1e10 --bandwidth 1e-300

# 2. FLOP/s of 1e-300 (a 300-digit step time before): refused, in the file and as a flag.
device_file crawl.json 1e-300 3e8 2e-5
refused "flops 1e-300" '"flops" = 1e-300' "from 1000 to 1e+19 FLOP/s" -- "$OSDP" plan --devices crawl.json --model tiny
refused "--flops 1e-300" "--flops 1e-300" "from 1000 to 1e+19" -- \
  "$OSDP" plan --model tiny --ranks 2 --mem-limit 1GiB --flops 1e-300
# A control: the same file with sensible figures plans, with a short step time.
device_file good.json 9.4e10 3e8 2e-5
if "$OSDP" plan --devices good.json --model tiny >out.txt 2>err.txt &&
   step=$(grep -o 'step [0-9.]* s' out.txt | head -1) && [ "${#step}" -lt 20 ]; then ok
else bad "control: plan --devices good.json: rc or step time wrong: $(head -c 300 err.txt) ${step:-}"; fi

# 3. A loss of 1e308 in a log: drawn without inf or nan, the value left out and counted.
printf '{"step":1,"loss":3.5,"tokens_per_s":100,"peak_bytes":1000}\n{"step":2,"loss":1e308,"tokens_per_s":100,"peak_bytes":1000}\n{"step":3,"loss":2.5,"tokens_per_s":1e300,"peak_bytes":-1e300}\n' >huge.jsonl
if "$OSDP" plot huge.jsonl --svg huge.svg >out.txt 2>err.txt; then ok; else bad "plot huge.jsonl: $(cat err.txt)"; fi
if [ -s huge.svg ] && ! grep -qiE 'inf|nan' huge.svg; then ok
else bad "huge.svg holds inf or nan: $(grep -oiE '[a-z0-9-]+="[^"]*(inf|nan)[^"]*"' huge.svg | head -3)"; fi
grep -q 'value beyond 1e+30 in magnitude not drawn' huge.svg && ok || bad "huge.svg does not say a value was left out"

# 4. --grad-clip below 0 (acted as 0 before).
refused "--grad-clip -1" "--grad-clip: -1 must be 0 (off) or positive" -- "$OSDP" train --steps 1 --quiet --grad-clip -1

# 5. --weight-decay with lr x weight_decay >= 1, or below 0: both named, with the bound.
refused "--weight-decay 1e99" "--weight-decay 1e+99 with --lr 0.01" "below 1" "below 100" -- \
  "$OSDP" train --steps 1 --quiet --weight-decay 1e99
refused "--weight-decay -1" "--weight-decay -1" ">= 0" -- "$OSDP" train --steps 1 --quiet --weight-decay -1

# 6. The --plan auto options are checked without --plan auto too.
refused "--max-batch 0" "--max-batch" "'0'" -- "$OSDP" train --steps 1 --quiet --max-batch 0
refused "--trial-steps 5000" "--trial-steps" "'5000'" -- "$OSDP" train --steps 1 --quiet --trial-steps 5000
refused "--profile-steps 0" "--profile-steps" "'0'" -- "$OSDP" train --steps 1 --quiet --profile-steps 0
refused "--profile-layers 0" "--profile-layers" "'0'" -- "$OSDP" train --steps 1 --quiet --profile-layers 0

# 7. --steps 0 means no training (a model loaded, evaluated and saved as it is): said so, with
# no losses it never computed.
Z=("$OSDP" train --steps 0 --eval-batches 0 --problems 0)
if "${Z[@]}" >out.txt 2>err.txt && grep -q '^done: 0 steps (no step ran here: nothing trained)' out.txt &&
   ! grep -q 'loss 0.0000' out.txt; then ok
else bad "--steps 0: rc or report wrong: $(cat out.txt err.txt | head -c 400)"; fi
if "${Z[@]}" --json >out.txt 2>err.txt && grep -q '"first_loss":null,"final_loss":null' out.txt; then ok
else bad "--steps 0 --json: first_loss and final_loss are not null: $(head -c 400 out.txt)"; fi

# 8. A safetensors header of 70,000 empty tensors: refused from its text, before it is parsed.
{ printf '{'; seq -f '"t%06g":{"dtype":"F32","shape":[0],"data_offsets":[0,0]},' 1 69999
  printf '"t070000":{"dtype":"F32","shape":[0],"data_offsets":[0,0]}}'; } >header.txt
N=$(stat -c %s header.txt)
{ for i in 0 1 2 3 4 5 6 7; do printf "\\x$(printf %02x $(( (N >> (8 * i)) & 255 )))"; done
  cat header.txt; } >many.safetensors
rm header.txt
refused "70000 tensors" "many.safetensors" "70000 entries" "65536 tensors" -- \
  "$OSDP" train --load many.safetensors --steps 0 --quiet

# 9. A plan's micro_batch of 1e9: the field named with its range, not "out of host memory".
printf '%s\n' '{"model": {"n_layer": 2, "n_embd": 64, "n_head": 4, "vocab_size": 256, "max_seq": 256},' \
  ' "world_size": 1, "micro_batch": 1000000000, "seq_len": 64, "ops": [{"name": "embed", "slices": ["zero3"]}]}' >bigplan.json
refused "plan micro_batch 1e9" "bigplan.json" '"micro_batch"=1000000000' "from 1 to 1048576" -- \
  "$OSDP" train --plan bigplan.json --steps 1 --quiet

# 10. 1e999 in a config.json: beyond a double's range, not "null".
mkdir -p hf && printf '{"model_type": "gpt2", "n_layer": 2, "n_embd": 1e999, "n_head": 4, "vocab_size": 256, "n_positions": 64}\n' >hf/config.json
refused "config.json 1e999" '"n_embd"' "beyond the range of a double" -- "$OSDP" train --model hf --steps 1 --quiet
if grep -q null err.txt; then bad "config.json 1e999: the error still says null: $(cat err.txt)"; else ok; fi

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
