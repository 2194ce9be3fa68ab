#!/usr/bin/env bash
# cli_help.sh OSDP: the help cannot drift from the parser. Every command's help (osdp CMD --help,
# osdp help CMD) comes from the flags the parser accepts; this checks it from the outside: each
# flag the help lists is accepted, as taking a value exactly when the help names one; a mistyped
# flag names the nearest one; the commands run on their defaults (a numeric default the help
# shows is checked against the code's by the parser itself); `osdp --version` names the version,
# the commit and the build.
set -u
OSDP=${1:?usage: cli_help.sh OSDP}
source "${BASH_SOURCE%/*}/cli_common.sh"

commands=$("$OSDP" help | awk '/^commands:/ {on = 1; next} on && /^  [a-z]/ {print $1}' | grep -v '^help$')
[ "$(echo "$commands" | wc -w)" -ge 6 ] && ok || bad "osdp help lists $(echo "$commands" | wc -w) commands: $commands"

for c in $commands; do
  "$OSDP" "$c" --help >help.txt 2>err.txt
  rc=$?
  if [ "$rc" -ne 0 ] || ! head -1 help.txt | grep -q "^usage: .*osdp $c" || [ -s err.txt ]; then
    bad "osdp $c --help: exit $rc, first line '$(head -1 help.txt)', stderr '$(head -c 200 err.txt)'"
    continue
  fi
  "$OSDP" help "$c" >help2.txt 2>&1
  cmp -s help.txt help2.txt && ok || bad "osdp help $c differs from osdp $c --help"
  long=$(awk 'length > 100' help.txt | head -1)
  [ -z "$long" ] && ok || bad "osdp $c --help has a line over 100 columns: $long"
  # Each listed flag: "  --name VALUE  meaning" (or "  --name  meaning" for a switch).
  grep -E '^  --[a-z0-9-]+' help.txt | sed -E 's/^  --([a-z0-9-]+)( ([^ ]+))?.*/\1 \3/' >flags.txt
  n=$(wc -l <flags.txt)
  pos=(); [ "$c" = export ] && pos=(in.bin out.bin) # its FILE and OUT come before any flag check
  [ "$n" -ge 2 ] && ok || bad "osdp $c --help lists $n flags"
  # The flags with a value, all in one run (each osdp start costs MPI's start-up), each given
  # "v": a flag the parser took for a switch would leave "v" as an unexpected argument, one it
  # does not know stops it; when all are accepted it goes on to the unknown last flag.
  valued=() args=()
  while read -r name value; do
    if [ -n "$value" ] && [[ "$value" != [a-z]* || "$value" == *"|"* || "$value" == ok ]]; then
      valued+=("$name"); args+=(--"$name" v)
    else
      # A switch, one run each (a switch taken for a flag with a value would swallow the next
      # flag): accepted, so the parser goes on to complain about the unknown one after it.
      "$OSDP" "$c" "${pos[@]}" --"$name" --zz-not-a-flag >out.txt 2>err.txt
      grep -q -- "unknown option --zz-not-a-flag" err.txt && ok ||
        bad "osdp $c --$name (listed as a switch): $(head -c 200 err.txt)"
    fi
  done <flags.txt
  if [ ${#valued[@]} -gt 0 ]; then
    "$OSDP" "$c" "${pos[@]}" "${args[@]}" --zz-not-a-flag >out.txt 2>err.txt
    grep -q -- "unknown option --zz-not-a-flag" err.txt && ok ||
      bad "osdp $c ${valued[*]} (listed with values): $(head -c 200 err.txt)"
    # Given last without its value, a flag with one says it needs one.
    last=${valued[${#valued[@]}-1]}
    "$OSDP" "$c" "${pos[@]}" --"$last" >out.txt 2>err.txt
    grep -q -- "--$last needs a value" err.txt && ok || bad "osdp $c --$last without a value: $(head -c 200 err.txt)"
  fi
done

# Help lines wrap at the help column: a flag's meaning never starts at column 0.
"$OSDP" train --help | grep -E '^[a-z]' | grep -v '^usage:' | head -1 >stray.txt
[ -s stray.txt ] && bad "osdp train --help has a line at column 0: $(cat stray.txt)" || ok

# A mistyped flag names the nearest one; a far one names none.
"$OSDP" train --mem-limt 1MiB >out.txt 2>err.txt
grep -q "unknown option --mem-limt; did you mean --mem-limit?" err.txt && ok || bad "typo: $(cat err.txt)"
"$OSDP" plan --tral >out.txt 2>err.txt
grep -q "did you mean --trial?" err.txt && ok || bad "typo: $(cat err.txt)"
"$OSDP" train --qqqqqqqq >out.txt 2>err.txt
grep -q "unknown option --qqqqqqqq (see osdp train --help)" err.txt && ok || bad "far: $(cat err.txt)"
"$OSDP" help nosuch >out.txt 2>err.txt
[ $? -eq 2 ] && grep -q "unknown command 'nosuch'" err.txt && ok || bad "help nosuch: $(cat err.txt)"

# The commands run on their defaults: the parser refuses a default that differs from its help's.
"$OSDP" describe >out.txt 2>err.txt && ok || bad "describe on defaults: $(cat err.txt)"
"$OSDP" train --steps 2 --eval-batches 1 --quiet >out.txt 2>err.txt && ok || bad "train on defaults: $(cat err.txt)"
"$OSDP" bench --steps 1 --json >out.txt 2>err.txt && ok || bad "bench on defaults: $(cat err.txt)"
grep -q '"matmul":"tf32","tf32":"on"' out.txt && ok || bad "bench's default matmul mode: $(grep -o '"matmul[^,]*,[^,]*' out.txt)"
"$OSDP" plan --ranks 2 --mem-limit 64MiB --flops 1e10 >out.txt 2>err.txt && ok || bad "plan on defaults: $(cat err.txt)"

# --matmul and its older spelling --tf32 reach bench's record (the CPU computes in fp32 in every
# mode; a GPU run records the mode its products ran in).
for flags in "--matmul bf16|bf16|off" "--tf32 off|fp32|off" "--tf32 on --matmul tf32|tf32|on"; do
  IFS='|' read -r given mode tf32 <<<"$flags"
  # shellcheck disable=SC2086  # the flags are words
  "$OSDP" bench --steps 1 --json $given >out.txt 2>err.txt
  grep -q "\"matmul\":\"$mode\",\"tf32\":\"$tf32\"" out.txt && ok ||
    bad "bench $given: $(grep -o '"matmul[^,]*,[^,]*' out.txt) $(head -c 200 err.txt)"
done

# A listed flag does what it says: train --plan auto keeps to --max-batch (it once parsed it and
# searched up to 512 anyway).
"$OSDP" train --plan auto --max-batch 3 --steps 2 --trial-steps 0 --eval-batches 0 --quiet --json >out.txt 2>err.txt
grep -q '"micro_batch":[123],' out.txt && ok || bad "train --plan auto --max-batch 3: $(grep -o '"micro_batch":[0-9]*' out.txt) $(head -c 200 err.txt)"

# The version: "osdp X.Y.Z (commit C)", the build, the BLAS.
"$OSDP" --version >out.txt 2>err.txt
if grep -Eq '^osdp [0-9]+\.[0-9]+\.[0-9]+ \(commit ([0-9a-f]{12}(\+changes)?|unknown)\)$' out.txt &&
   grep -Eq '^build: .*CUDA backend (built|not built); MPI ' out.txt && grep -q '^BLAS: ' out.txt; then ok
else bad "osdp --version: $(cat out.txt err.txt)"; fi

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
