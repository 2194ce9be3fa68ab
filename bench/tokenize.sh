#!/usr/bin/env bash
# Speed of `osdp tokenize` (one thread) with GPT-2's vocabulary against js-tiktoken's GPT-2
# encoding (and Hugging Face tokenizers' Rust library, where installed) on the same text, in one
# run: MB/s of each (best of REPEATS), and whether the ids agree. The text (MB megabytes of valid
# UTF-8) is Debian's package changelogs (prose, names, accents) followed by Python's standard
# library (code), else this repository's files repeated.
# usage: bench/tokenize.sh [BUILD_DIR] [MB]   (environment: REPEATS, default 3; NPMDIR, the
#        references' install, default BUILD_DIR/npm-ref as tests/cli_tokenize.sh leaves it)
set -eu
build=${1:-build}
mb=${2:-20}
repeats=${REPEATS:-3}
here=$(cd "$(dirname "$0")/.." && pwd)
osdp=$(cd "$build" && pwd)/osdp
npmdir=${NPMDIR:-$(cd "$build" && pwd)/npm-ref}
export NODE_PATH=$npmdir/node_modules OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
[ -d "$NODE_PATH/js-tiktoken" ] || {
  echo "no js-tiktoken under $npmdir: run tests/cli_tokenize.sh (ctest -R cli_tokenize) first" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
bytes=$((mb * 1000000))
{
  find /usr/share/doc -name 'changelog*.gz' 2>/dev/null | sort | xargs -r zcat 2>/dev/null | head -c $((bytes * 6 / 10)) || true
  find /usr/lib/python3* -name '*.py' 2>/dev/null | sort | xargs -r cat 2>/dev/null | head -c $((bytes * 4 / 10)) || true
} | iconv -f utf-8 -t utf-8 -c >"$work/text.txt" || true
while [ "$(stat -c %s "$work/text.txt")" -lt $((bytes / 2)) ]; do
  cat "$here"/docs/*.md "$here"/src/*/*.c >>"$work/text.txt"
done
head -c "$bytes" "$work/text.txt" | iconv -f utf-8 -t utf-8 -c >"$work/bench.txt"
node "$here/tests/tokenizer_ref.js" make-gpt2 "$work/gpt2"
echo "text: $(stat -c %s "$work/bench.txt") bytes; $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)"
best=0
for i in $(seq "$repeats"); do
  out=$("$osdp" tokenize --tokenizer "$work/gpt2" "$work/bench.txt" --out "$work/osdp.bin" --json)
  r=$(echo "$out" | sed -n 's/.*"mb_per_s":\([0-9.]*\).*/\1/p')
  best=$(echo "$r $best" | awk '{print ($1 > $2) ? $1 : $2}')
done
echo "osdp tokenize:  $best MB/s (best of $repeats; tokenizer load, reading and writing included): $out"
node "$here/tests/tokenizer_ref.js" bench "$work/bench.txt" "$repeats" | sed 's/^/js-tiktoken:    /'
if [ -d "$NODE_PATH/tokenizers" ]; then # the Rust library: one text is one thread's work
  node "$here/tests/tokenizer_ref.js" hf-bench "$work/bench.txt" "$repeats" "$work/gpt2" | sed 's/^/tokenizers:     /'
fi
node "$here/tests/tokenizer_ref.js" encode gpt2 "$work/ref.bin" "$work/bench.txt"
cmp -s "$work/osdp.bin" "$work/ref.bin" && echo "ids: identical" || echo "ids: DIFFER"
