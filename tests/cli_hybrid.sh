#!/bin/bash
# cli_hybrid.sh: `osdp plan` for hardware of several hosts (hybrid sharding).
#  - the issue's acceptance command: gpt2-1.5b, seq 1024, 16 ranks of which 8 per host, fast links
#    within hosts and slow ones between: the plan shards some operators within a host only
#    (shard_group 8), predicts more samples/s than every uniform plan over all 16 ranks (ddp,
#    zero2, zero3, which the output lists), and the table and the plan file say so;
#  - --reduce-dtype auto chooses bf16 where it pays; bad flags give one line naming the flag;
#  - a device file with an inter_host level plans the same as the flags describing it;
#  - a hybrid plan for 4 ranks on 2 "hosts" trains on 4 ranks with the predicted peak.
set -u
OSDP=${1:?usage: cli_hybrid.sh OSDP MPIRUN...}; shift
mpirun=("$@")
source "${BASH_SOURCE%/*}/cli_common.sh"
# first KEY.FIELD of an object field in a JSON line: pick KEY FIELD <file
pick() { grep -o "\"$1\":{[^}]*}" | head -1 | sed -n "s/.*\"$2\":\([-0-9.e+]*\).*/\1/p"; }

accept=(--model gpt2-1.5b --seq 1024 --ranks 16 --ranks-per-host 8 --mem-limit 16GiB --flops 4e14
        --bandwidth 1.5e11 --latency 1e-5 --inter-bandwidth 1.25e10 --inter-latency 3e-5)
if "$OSDP" plan "${accept[@]}" --json --out p.json >p.out 2>err.txt; then ok
else bad "acceptance plan failed: $(cat err.txt)"; fi
sps=$(pick predicted samples_per_s <p.out)
grouped=$(grep -c '"shard_group":[[:space:]]*8' p.json)
if [ "$grouped" -gt 0 ]; then ok; else bad "the plan shards nothing within a host: $(head -c 400 p.json)"; fi
if ! grep -q '"shard_group":[[:space:]]*16' p.json; then ok; else bad "shard_group 16 (the world) written out"; fi
for s in ddp zero2 zero3; do
  if grep -q "\"$s\":" p.out; then ok; else bad "the output does not list the uniform $s plan"; fi
  u=$(pick $s samples_per_s <p.out)
  if [ -n "$sps" ] && { [ -z "$u" ] || awk -v a="$sps" -v u="$u" 'BEGIN{exit !(a > u)}'; }; then ok
  else bad "plan ($sps samples/s) not faster than the uniform $s plan over all 16 ranks ($u)"; fi
done
for s in hybrid_zero2 hybrid_zero3; do
  if [ -n "$(pick $s samples_per_s <p.out)" ]; then ok; else bad "no uniform $s plan listed"; fi
done
if grep -q '"ranks_per_host":8' p.out; then ok; else bad "--json lacks ranks_per_host"; fi
search_s=$(sed -n 's/.*"search_s":\([-0-9.e+]*\).*/\1/p' p.out)
echo "acceptance: $grouped ops with shard_group 8, $sps samples/s (ddp $(pick ddp samples_per_s <p.out)," \
     "zero2 $(pick zero2 samples_per_s <p.out), zero3 $(pick zero3 samples_per_s <p.out)), search $search_s s"
if awk -v s="$search_s" 'BEGIN{exit !(s != "" && s < 30)}'; then ok; else bad "search took '$search_s' s"; fi

# The table: shard groups shown, the uniform plans of both kinds.
"$OSDP" plan "${accept[@]}" >p.txt 2>err.txt
for want in "G=8" "(8 per host)" "zero2 G=8  micro-batch" "zero3      micro-batch" "ddp        does not fit"; do
  if grep -qF -- "$want" p.txt; then ok; else bad "plan table lacks '$want'"; fi
done

# --reduce-dtype: auto picks bf16 here (gradient reductions dominate the links between hosts).
if "$OSDP" plan "${accept[@]}" --reduce-dtype auto --json --out auto.json >auto.out 2>err.txt \
   && grep -q '"reduce_dtype":[[:space:]]*"bf16"' auto.json; then ok
else bad "--reduce-dtype auto did not choose bf16: $(cat err.txt) $(head -c 300 auto.json)"; fi
asps=$(pick predicted samples_per_s <auto.out)
if awk -v a="$asps" -v f="$sps" 'BEGIN{exit !(a >= f * 1.01)}'; then ok; else bad "auto ($asps) not 1% faster than fp32 ($sps)"; fi

# One-line errors naming the flag.
expect_plan_error() { # expect_plan_error WHAT NEEDLE -- ARGS...
  local what=$1 needle=$2; shift 3
  if "$OSDP" plan "$@" >/dev/null 2>err.txt; then bad "$what: accepted"; return; fi
  if [ "$(wc -l <err.txt)" = 1 ] && grep -qF -- "$needle" err.txt; then ok
  else bad "$what: '$(cat err.txt)' should be one line naming $needle"; fi
}
base=(--model tiny --ranks 16 --mem-limit 1GiB --flops 1e12)
expect_plan_error "ranks per host not dividing" "--ranks-per-host 3" -- "${base[@]}" --ranks-per-host 3
expect_plan_error "ranks per host not a number" "--ranks-per-host" -- "${base[@]}" --ranks-per-host eight
expect_plan_error "negative inter-host bandwidth" "--inter-bandwidth -1" -- "${base[@]}" --ranks-per-host 8 --inter-bandwidth -1
expect_plan_error "negative inter-host latency" "--inter-latency -1" -- "${base[@]}" --ranks-per-host 8 --inter-latency -1
expect_plan_error "unknown reduce dtype" "--reduce-dtype: 'fp16'" -- "${base[@]}" --reduce-dtype fp16
expect_plan_error "shard group not dividing the ranks" "--shard-group: '3'" -- "${base[@]}" --shard-group 3

# A device file with the two levels plans as the flags do.
cat >dev.json <<'EOF'
{"ranks": 16, "ranks_per_host": 8, "mem_limit": "16GiB", "flops": 4e14,
 "collectives": {"allreduce": {"latency_s": 1e-5, "bandwidth_Bps": 1.5e11},
                 "allgather": {"latency_s": 1e-5, "bandwidth_Bps": 1.5e11},
                 "reduce_scatter": {"latency_s": 1e-5, "bandwidth_Bps": 1.5e11}},
 "inter_host": {"allreduce": {"latency_s": 3e-5, "bandwidth_Bps": 1.25e10},
                "allgather": {"latency_s": 3e-5, "bandwidth_Bps": 1.25e10},
                "reduce_scatter": {"latency_s": 3e-5, "bandwidth_Bps": 1.25e10}}}
EOF
if "$OSDP" plan --model gpt2-1.5b --seq 1024 --devices dev.json --json --out file.json >file.out 2>err.txt \
   && cmp -s file.json p.json; then ok
else bad "the device file plans differently from the flags: $(cat err.txt)"; fi

# A hybrid plan for 4 ranks, 2 per host, trains on 4 ranks with exactly the predicted peak.
small=(--model tiny --seq 64 --ranks 4 --ranks-per-host 2 --mem-limit 6MiB --flops 1e9 --bandwidth 1e9
       --latency 1e-5 --inter-bandwidth 2e7 --max-batch 8)
if "$OSDP" plan "${small[@]}" --json --out h4.json --svg h4.svg >h4.out 2>err.txt && grep -q '"shard_group":[[:space:]]*2' h4.json; then ok
else bad "no hybrid plan for 4 ranks: $(cat err.txt)"; fi
if grep -q "within groups of 2 ranks" h4.svg; then ok; else bad "the plan's picture does not show its shard groups"; fi
pk=$(pick predicted peak_bytes <h4.out)
if "${mpirun[@]}" -np 4 "$OSDP" train --plan h4.json --steps 2 --mem-limit 6MiB --json --quiet --eval-batches 1 >h4.run 2>err.txt \
   && grep -q "\"peak_bytes\":$pk," h4.run; then ok
else bad "train --plan h4.json on 4 ranks: peak vs predicted $pk: $(cat err.txt) $(tail -c 300 h4.run)"; fi

echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
