#!/usr/bin/env bash
# The planner's promise on the models people train: every preset at its max_seq x memory limits
# x rank counts x precisions, planned for described hardware (osdp plan --json; 8 ranks a host,
# --flops 4e14 --bandwidth 1.5e11 --latency 1e-5, between hosts 1.25e10 / 3e-5). Prints a table:
# the chosen plan's micro-batch, recomputed layers, predicted samples/s and peak against the
# limit ("fits", "OVER" if ever over), or the smallest limit that fits when none does; then a
# count. The search's own peak is checked against the prediction inside osdp (an internal error
# otherwise), so every "fits" row is also a row whose prediction is the search's sum.
# usage: bench/plan_limits.sh [BUILD_DIR]
#   environment: MODELS (every preset), LIMITS ("8GiB 16GiB 80GiB"), RANKS ("8 64"),
#                PRECISIONS ("fp32 bf16"), MAX_BATCH (512).
# Exit status: 0 when no plan is over its limit, 1 when one is, 2 on bad usage. Needs bash,
# python3 (to read the JSON).
set -u
build=${1:-build}
osdp=$build/osdp
[ -x "$osdp" ] || { echo "plan_limits.sh: $osdp not found (build first, or pass BUILD_DIR)" >&2; exit 2; }
models=${MODELS:-"tiny:256 small:512 gpt2-124m:1024 gpt2-350m:1024 gpt2-774m:1024 gpt2-1.5b:1024 llama-tiny:256 qwen-tiny:256 llama-small:512 smollm2-135m:8192 tinyllama-1.1b:2048 llama3.2-1b:131072 llama3-8b:8192 qwen2.5-0.5b:32768"}
limits=${LIMITS:-"8GiB 16GiB 80GiB"}
ranks_list=${RANKS:-"8 64"}
precisions=${PRECISIONS:-"fp32 bf16"}
max_batch=${MAX_BATCH:-512}
over=0 fit=0 none=0
printf '%-15s %7s %6s %5s %5s %5s %4s %12s %12s  %s\n' model seq limit ranks prec B R samples/s peak_GiB result
for ms in $models; do
  m=${ms%%:*} seq=${ms##*:}
  for lim in $limits; do
    for n in $ranks_list; do
      for prec in $precisions; do
        out=$("$osdp" plan --model "$m" --seq "$seq" --ranks "$n" --ranks-per-host 8 --mem-limit "$lim" \
          --flops 4e14 --bandwidth 1.5e11 --latency 1e-5 --inter-bandwidth 1.25e10 --inter-latency 3e-5 \
          --precision "$prec" --max-batch "$max_batch" --json 2>&1)
        row=$(LIM="$lim" python3 -c '
import json, os, re, sys
t = sys.stdin.read()
units = {"KiB": 2**10, "MiB": 2**20, "GiB": 2**30}
m = re.match(r"([0-9.]+)(\w+)", os.environ["LIM"]); limit = float(m.group(1)) * units[m.group(2)]
try:
    d = json.loads(t)
except ValueError:
    s = re.search(r"smallest limit that fits is ([0-9.]+ \w+)", t)
    print("- - - - none", "needs", s.group(1).replace(" ", "") if s else t.strip()[:60]); sys.exit()
p = d["predicted"]; c = d["candidates"][d["chosen"]]
print(p["micro_batch"], c["recompute_layers"], "%.2f" % p["samples_per_s"],
      "%.2f" % (p["peak_bytes"] / 2**30), "fits" if p["peak_bytes"] <= limit else "OVER")
' <<<"$out")
        set -- $row
        case "$5" in fits) fit=$((fit + 1));; OVER) over=$((over + 1));; *) none=$((none + 1));; esac
        printf '%-15s %7s %6s %5s %5s %5s %4s %12s %12s  %s\n' "$m" "$seq" "$lim" "$n" "$prec" "$1" "$2" "$3" "$4" "${*:5}"
      done
    done
  done
done
echo "plans that fit: $fit, over the limit: $over, no plan fits: $none"
[ "$over" -eq 0 ]
