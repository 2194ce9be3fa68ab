#!/usr/bin/env bash
# The code-layout rules of docs/ARCHITECTURE.md that a script can check, so they cannot drift:
#   1. nothing in src/planner, src/runtime or src/cli names an op, op index or layer layout of a
#      particular model family (GPT-2's op constants, its layer index function, its header);
#   2. no function name is made by token pasting: no KN(name) (the old generated kernels);
#   3. no C function is longer than MAX_LINES lines (default 120);
#   4. every osdp_fail call says something: its format is a string literal with words in it, not
#      empty, not a bare "%s" (a failure must never print "osdp: error: " and nothing else).
# usage: check_layout.sh [SRC_DIR]   (prints "N passed, M failed")
set -u
src=${1:-$(cd "$(dirname "$0")/.." && pwd)/src}
max=${MAX_LINES:-120}
pass=0; fail=0
rule() { if [ -z "$2" ]; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL $1:"; echo "$2"; fi; }

family=$(grep -rnE 'GPT_(FCPROJ|FC|QKV|PROJ|LN1|LN2|ATTN|GELU|OPS_PER_LAYER)\b|gpt_op_layer|gpt_op_(lnf|lmhead|loss)\b|model/gpt2\.h' \
  "$src/planner" "$src/runtime" "$src/cli" 2>/dev/null)
rule "family-specific names outside src/model" "$family"

pasted=$(grep -rnE '\bKN\(' "$src" --include='*.c' --include='*.h' --include='*.inc' --include='*.cu' --include='*.cuh' 2>/dev/null)
rule "token-pasted names" "$pasted"

# A function: a line starting a definition at column 0 ("type name(...) {" or its signature
# continued), ending at the first "}" at column 0.
long=$(find "$src" -name '*.c' -o -name '*.cu' | sort | while read -r f; do
  awk -v max="$max" -v file="$f" '
    /^[A-Za-z_].*\(/ && !/;[[:space:]]*$/ && !/^(typedef|static const|const|struct|enum|#)/ { name = $0; start = NR }
    /^\}/ && start { if (NR - start + 1 > max) printf "%s:%d: %d lines: %s\n", file, start, NR - start + 1, name; start = 0 }
  ' "$f"
done)
rule "functions over $max lines" "$long"

# Every call in the sources (comments and the declaration in core/util excluded: a call is
# "osdp_fail(" followed by a literal or an expression; the literal, its format directives
# removed, must hold a letter).
silent=$(find "$src" \( -name '*.c' -o -name '*.h' -o -name '*.cu' \) ! -path '*/core/util.[ch]' | sort | xargs perl -0777 -ne '
  s{/\*.*?\*/}{}gs;
  while (/\bosdp_fail\(\s*("(?:[^"\\]|\\.)*"|[^,)]*)/g) {
    my $a = $1; (my $t = $a) =~ s/%[-+ #0-9.*]*[hlzjt]*[a-zA-Z%]//g;
    print "$ARGV: osdp_fail($a ...)\n" if $a !~ /^"/ || $t !~ /[A-Za-z]/;
  }')
rule "osdp_fail calls without a message" "$silent"

echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
