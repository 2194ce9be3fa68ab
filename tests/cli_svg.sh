#!/usr/bin/env bash
# cli_svg.sh OSDP: `osdp describe --svg` and `osdp plan --svg` write well-formed SVG whose numbers
# (the data-*-bytes attributes of the root element) are describe --json's predicted bytes, for
# uniform, split and prefetching plans; the limit line is there only with a limit, and the
# picture says whether the peak fits it; a file that cannot be written is one error line, a
# non-zero exit and no file left behind.
set -u
OSDP=${1:?usage: cli_svg.sh OSDP}
source "${BASH_SOURCE%/*}/cli_common.sh"
if ! command -v xmllint >/dev/null; then
  echo "cli_svg: xmllint not found (apt-get install libxml2-utils; see scripts/deps.sh)"
  exit 1
fi

# svg_attr FILE NAME: the value of the root element's attribute NAME ("" when absent).
svg_attr() { xmllint --xpath "string(/*/@$2)" "$1" 2>/dev/null; }
# json_mem FILE KEY: the integer KEY of describe --json's "memory" object.
json_mem() { grep -o '"memory":{[^}]*}' "$1" | grep -o "\"$2\":[0-9]*" | cut -d: -f2; }

# check_describe NAME ARGS...: describe ARGS with --json and --svg NAME.svg; the SVG parses and
# each predicted byte count equals the JSON's.
check_describe() {
  local name=$1; shift
  if ! "$OSDP" describe "$@" --json --svg "$name.svg" >"$name.describe.json" 2>err.txt; then
    bad "$name: osdp describe $* --svg failed"; sed 's/^/    /' err.txt; return
  fi
  if xmllint --noout "$name.svg" 2>err.txt; then ok
  else bad "$name: $name.svg is not well-formed XML"; head -n 3 err.txt | sed 's/^/    /'; return; fi
  local k want got mism=""
  for k in params grads optim acts scratch transient peak; do
    want=$(json_mem "$name.describe.json" $k)
    got=$(svg_attr "$name.svg" "data-$k-bytes")
    [ -n "$want" ] && [ "$want" = "$got" ] || mism="$mism $k: svg '$got' json '$want';"
  done
  if [ -z "$mism" ]; then ok; else bad "$name: SVG numbers differ from describe --json:$mism"; fi
  # The parts add up to the peak, and the step has a forward and a backward half.
  local sum uses bwd
  sum=$(( $(svg_attr "$name.svg" data-params-bytes) + $(svg_attr "$name.svg" data-grads-bytes) +
          $(svg_attr "$name.svg" data-optim-bytes) + $(svg_attr "$name.svg" data-acts-bytes) +
          $(svg_attr "$name.svg" data-scratch-bytes) + $(svg_attr "$name.svg" data-transient-bytes) ))
  uses=$(svg_attr "$name.svg" data-uses); bwd=$(svg_attr "$name.svg" data-backward-from)
  if [ "$sum" = "$(svg_attr "$name.svg" data-peak-bytes)" ] && [ "$uses" -gt 0 ] &&
     [ "$bwd" -gt 0 ] && [ "$bwd" -lt "$uses" ]; then ok
  else bad "$name: parts add up to $sum, peak $(svg_attr "$name.svg" data-peak-bytes); uses '$uses', backward from '$bwd'"; fi
}

check_describe ddp --model tiny --plan ddp --ranks 1 --batch 2 --seq 64
check_describe zero3 --model tiny --plan zero3 --ranks 2 --batch 2 --seq 64
check_describe z3_124m --model gpt2-124m --plan zero3 --ranks 4 --batch 1 --seq 128

# A plan with split, mixed slices and prefetch (its name has XML's special characters, which
# the title shows), and the same plan without prefetch: prefetching needs more transient.
cat >'split&<prefetch>.json' <<'EOF'
{"model": {"name": "small", "n_layer": 4, "n_embd": 256, "n_head": 4, "vocab_size": 8192, "max_seq": 512},
 "world_size": 2, "micro_batch": 2, "seq_len": 64, "prefetch": true,
 "ops": [{"name": "embed", "slices": ["zero3", "zero3", "zero3", "dp"]},
         {"name": "h0.qkv", "slices": ["zero3", "zero3"]},
         {"name": "h0.fc", "slices": ["zero2", "zero3", "dp", "zero3"]},
         {"name": "h1.fc", "slices": ["zero3", "zero3", "zero3", "zero3", "zero3", "zero3", "zero3", "zero3"]},
         {"name": "h1.fcproj", "slices": ["zero2"]},
         {"name": "h2.proj", "slices": ["zero3", "dp"]},
         {"name": "h3.fcproj", "slices": ["zero3", "zero3", "zero3"]},
         {"name": "lnf", "slices": ["zero3"]}]}
EOF
sed 's/"prefetch": true/"prefetch": false/' 'split&<prefetch>.json' >split.json
check_describe split_prefetch --model small --plan 'split&<prefetch>.json'
check_describe split --model small --plan split.json
tp=$(svg_attr split_prefetch.svg data-transient-bytes); tn=$(svg_attr split.svg data-transient-bytes)
if [ "$(svg_attr split_prefetch.svg data-prefetch)" = true ] && [ -n "$tp" ] && [ -n "$tn" ] &&
   [ "$tn" -gt 0 ] && [ "$tp" -gt "$tn" ]; then ok
else bad "split plan: transient with prefetch '$tp' is not above without '$tn'"; fi
if grep -q 'split&amp;&lt;prefetch&gt;.json' split_prefetch.svg; then ok
else bad "split plan: the plan's file name is not in the title, escaped"; fi

# The limit: no line without one; with one, the picture says whether the peak fits.
if [ -z "$(svg_attr ddp.svg data-limit-bytes)" ] && ! grep -q '>limit ' ddp.svg; then ok
else bad "ddp without --mem-limit: the SVG has a limit"; fi
peak=$(svg_attr ddp.svg data-peak-bytes)
for lim in 4MiB 64MiB; do
  if ! "$OSDP" describe --model tiny --plan ddp --ranks 1 --batch 2 --seq 64 --mem-limit $lim \
       --svg lim.svg >/dev/null 2>err.txt; then bad "describe --mem-limit $lim --svg failed"; sed 's/^/    /' err.txt; continue; fi
  l=$(svg_attr lim.svg data-limit-bytes); fits=$(svg_attr lim.svg data-fits)
  want=true; [ "$peak" -gt "${l:-0}" ] && want=false
  if [ -n "$l" ] && [ "$(svg_attr lim.svg data-peak-bytes)" = "$peak" ] && [ "$fits" = $want ] &&
     grep -q ">limit " lim.svg && { [ $want = true ] || grep -q 'does NOT fit' lim.svg; }; then ok
  else bad "--mem-limit $lim: limit '$l', fits '$fits', want $want (peak $peak)"; fi
done
if [ "$(svg_attr lim.svg data-fits)" = true ] && [ "$peak" -le 67108864 ]; then ok
else bad "tiny ddp's peak $peak should fit 64 MiB"; fi

# osdp plan --svg draws the plan it found, against the device's limit: it fits, and its numbers
# are describe --json's for the plan file it wrote (and its peak is the one plan --json reports).
if "$OSDP" plan --model tiny --ranks 2 --mem-limit 12MiB --flops 1e11 --seq 64 --json \
     --out found.json --svg plan.svg >plan.json 2>err.txt && xmllint --noout plan.svg 2>>err.txt &&
   "$OSDP" describe --model tiny --plan found.json --json >found.describe.json 2>>err.txt; then
  mism=""
  for k in params grads optim acts scratch transient peak; do
    want=$(json_mem found.describe.json $k); got=$(svg_attr plan.svg "data-$k-bytes")
    [ -n "$want" ] && [ "$want" = "$got" ] || mism="$mism $k: svg '$got' describe '$want';"
  done
  got=$(svg_attr plan.svg data-peak-bytes)
  if [ -z "$mism" ] && grep -q "\"peak_bytes\":$got[,}]" plan.json &&
     [ "$(svg_attr plan.svg data-fits)" = true ] && [ "$(svg_attr plan.svg data-limit-bytes)" = 12582912 ]; then ok
  else bad "plan --svg:$mism peak '$got' (in plan --json: $(grep -c "\"peak_bytes\":$got[,}]" plan.json)), fits '$(svg_attr plan.svg data-fits)'"; fi
else bad "osdp plan --svg failed"; sed 's/^/    /' err.txt; fi

# Unwritable paths: one error line naming --svg and the path, non-zero exit, nothing left.
if "$OSDP" describe --svg /nonexistent/x.svg >/dev/null 2>err.txt; then
  bad "describe --svg /nonexistent/x.svg succeeded"
elif [ "$(wc -l <err.txt)" -eq 1 ] && grep -q -- '--svg.*/nonexistent/x.svg' err.txt &&
     [ ! -e /nonexistent/x.svg ] && ! ls -d /nonexistent/x.svg.tmp* >/dev/null 2>&1; then ok
else bad "describe --svg /nonexistent/x.svg: want one error line naming --svg and the path"; sed 's/^/    /' err.txt; fi
# A directory in the way: the picture is written to d.tmp, the rename fails, d.tmp is removed.
mkdir d
if "$OSDP" describe --svg d >/dev/null 2>err.txt; then bad "describe --svg onto a directory succeeded"
elif [ "$(wc -l <err.txt)" -eq 1 ] && grep -q -- '--svg' err.txt && ! ls -d d.tmp* >/dev/null 2>&1 && [ -d d ]; then ok
else bad "describe --svg onto a directory: want one error line and no d.tmp left"; sed 's/^/    /' err.txt; fi

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
