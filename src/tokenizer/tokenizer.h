/*
** tokenizer.h: Hugging Face `tokenizer.json` tokenizers: text to token ids and back, the way the
** `tokenizers` library computes them, for the byte-level BPE models of GPT-2, Llama 3.x,
** Qwen2 / Qwen2.5-style Split patterns and SmolLM2.
**
** What a file may hold (anything else is a one-line error naming the JSON field and its value,
** never a silently different tokenisation):
**   model           type "BPE": vocab (token -> id), merges as "a b" strings or ["a", "b"]
**                   pairs (rank = position; every part and every result must be in vocab),
**                   ignore_merges (a word that is itself a token is that token: Llama 3),
**                   dropout null or 0, byte_fallback false, no continuing_subword_prefix or
**                   end_of_word_suffix; unk_token and fuse_unk are accepted (a byte-level
**                   vocabulary has every byte, so they never apply).
**   normalizer      null (NFC and the others are refused: not implemented).
**   pre_tokenizer   ByteLevel (add_prefix_space false; use_regex true splits with GPT-2's
**                   pattern), or a Sequence of Split (a Regex or String pattern, behavior
**                   "Isolated", invert false) and Digits steps ending in ByteLevel: Llama 3
**                   and Qwen2 (Split + ByteLevel with use_regex false), SmolLM2 (Digits +
**                   ByteLevel). Regexes run in PCRE2 (UTF, Unicode properties, JIT where
**                   available) with Oniguruma's meaning of \s and \S (White_Space: U+0085 too);
**                   \w, \W, \b and \B, whose classes differ between the two, are refused.
**   decoder         ByteLevel (or a Sequence holding only ByteLevel).
**   added_tokens    special and not, with lstrip, rstrip and single_word false: matched in the
**                   text before pre-tokenization, those with normalized false first, then the
**                   others (as `tokenizers` does), the longest at the leftmost position; never
**                   split. An added token's id that is also vocab's must have the same text.
**   post_processor  not applied: tok_encode adds no special tokens (add_special_tokens=False);
**                   callers add the end-of-text token themselves (tok_eot_id).
** Text must be valid UTF-8 (the library takes Rust strings): invalid bytes are an error naming
** their offset. Decoding gives each token's bytes (ByteLevel's byte alphabet mapped back, or a
** token's own text where it is not in that alphabet), concatenated, without the U+FFFD that
** `tokenizers` puts in place of an incomplete UTF-8 sequence.
**
** The BPE runs per pre-tokenized word over a linked list of symbols with a binary heap of
** adjacent pairs by merge rank (ties: the leftmost), so a word of n bytes costs O(n log n); a
** direct-mapped cache of recent words (up to 46 bytes) keeps their ids.
**
** Errors: functions that can fail return -1 (or NULL) after osdp_fail (core/util.h); nothing
** prints or exits.
*/
#ifndef OSDP_TOKENIZER_H
#define OSDP_TOKENIZER_H

#include <stddef.h>

typedef struct Tokenizer Tokenizer;

/* A growable array of token ids; start from {0} and free with tok_ids_free. */
typedef struct TokIds {
  int* ids;
  size_t n, cap;
} TokIds;

/* Reads a tokenizer from path: a tokenizer.json file, or a model directory holding one.
** Returns 0 and a new tokenizer in *t, or -1 with an error naming the file, the field and its
** value (see above for what is supported). */
int tok_load(Tokenizer** t, const char* path);

/* Frees t (NULL is fine). */
void tok_free(Tokenizer* t);

/* Appends the ids of text[0..n) to out (added tokens recognised, no special tokens added).
** Not safe to call on one tokenizer from two threads at once: it keeps a word cache and regex
** match state. Returns 0, or -1 with an error (invalid UTF-8, naming the byte offset; out of
** memory), out then holding what it held before. */
int tok_encode(Tokenizer* t, const char* text, size_t n, TokIds* out);

/* The bytes of ids[0..n) as a NUL-terminated heap string (its length, without the NUL, in
** *len) the caller frees; NULL with an error naming an id outside the vocabulary and its
** position. */
char* tok_decode(const Tokenizer* t, const int* ids, size_t n, size_t* len);

/* Number of ids: the largest id of vocab and added_tokens, plus 1. */
int tok_vocab_size(const Tokenizer* t);

/* The id of the end-of-text token among the added tokens, the first of "<|endoftext|>",
** "<|end_of_text|>", "</s>" that exists; -1 when none does. */
int tok_eot_id(const Tokenizer* t);

/* The text of token id as the file spells it ("Ġthe"), *len bytes, not NUL-terminated; NULL
** when no token has that id. */
const char* tok_token_text(const Tokenizer* t, int id, size_t* len);

/* Where text[0..n) may be cut so that encoding the two parts one after the other gives the ids
** of encoding it whole: the largest such cut c with 0 < c < n found among the places every
** supported split pattern breaks at (after a '\n' between two printable ASCII characters, or
** before a space between two ASCII letters), looking at what follows it within text. 0 when
** there is none, or when the tokenizer's pattern is not one this is known for (then callers
** keep the text whole). For streaming a file through tok_encode in pieces. */
size_t tok_safe_cut(const Tokenizer* t, const char* text, size_t n);

/* The offset of the first byte of text[0..n) that does not start valid UTF-8 (tok_encode's
** check), or n when all of it is valid. */
size_t tok_utf8_check(const char* text, size_t n);

/* Appends id to out; -1 with an error when out of memory. */
int tok_ids_push(TokIds* out, int id);

/* Frees out's array and empties it. */
void tok_ids_free(TokIds* out);

#endif
