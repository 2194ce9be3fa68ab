/*
** tok_internal.h: PRIVATE header of the tokenizer module (nothing outside src/tokenizer may
** include it): the Tokenizer's layout and what its files share. tok_load.c reads tokenizer.json
** into it, tok_pretok.c compiles the pre-tokenizer's steps and splits text, tok_bpe.c merges a
** word's bytes into ids, tok_encode.c drives encoding and decoding.
*/
#ifndef OSDP_TOK_INTERNAL_H
#define OSDP_TOK_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "tokenizer/tokenizer.h"

/* The largest id a tokenizer may use (ids below it): the largest vocabulary osdp builds. */
#define TOK_MAX_ID (1 << 24)
/* Pre-tokenizer steps at most (a Sequence's Split/Digits steps and ByteLevel's regex). */
#define TOK_MAX_STEPS 8
/* The word cache: entries (a power of 2), longest word and most ids an entry keeps. */
#define TOK_CACHE_SLOTS 16384
#define TOK_CACHE_WORD 46
#define TOK_CACHE_IDS 12

/* Bytes held in a pool: [off, off + len). */
typedef struct TokSpan {
  uint32_t off, len;
} TokSpan;

/* One merge: the pair's rank (position in model.merges) and the id it makes. */
typedef struct TokMerge {
  uint64_t pair; /* left id << 32 | right id; TOK_EMPTY_PAIR in an empty slot */
  uint32_t rank;
  int32_t id;
} TokMerge;
#define TOK_EMPTY_PAIR UINT64_MAX

/* What an id is (Tokenizer.kind). */
enum {
  TOK_NONE = 0,      /* no token has this id */
  TOK_MODEL = 1,     /* model.vocab's, in ByteLevel's byte alphabet (BPE can make it) */
  TOK_MODEL_RAW = 2, /* model.vocab's, with characters outside that alphabet (BPE never makes it) */
  TOK_ADDED = 3,     /* an added token's */
};

/* A byte string -> id hash map (open addressing; keys are spans of the tokenizer's pool). */
typedef struct TokStrMap {
  int32_t* slot; /* ids, -1 empty */
  size_t cap;    /* a power of 2 */
} TokStrMap;

/* The added tokens of one pass (normalized false, or true), for leftmost-longest matching. */
typedef struct TokAddedSet {
  int n;
  int* ids;          /* by first byte, then longest first */
  TokSpan* text;     /* their contents in the pool */
  int first[257];    /* ids/text index range [first[b], first[b+1]) of tokens starting with b */
} TokAddedSet;

/* One pre-tokenizer step: a regex whose matches, and the text between them, become pieces
** (Split's "Isolated"; Digits and ByteLevel's use_regex are such regexes too). */
typedef struct TokStep {
  void* code;       /* pcre2_code_8 */
  void* match;      /* pcre2_match_data_8 */
  int jit;          /* JIT-compiled: matched with pcre2_jit_match */
  int cut;          /* tok_safe_cut's rules: 2 a word pattern they hold for, 1 Digits', 0 not known */
  char what[64];    /* the JSON field it came from, for messages */
} TokStep;

/* One cached word: its bytes and ids. */
typedef struct TokCacheEntry {
  uint64_t hash;     /* 0: empty */
  uint8_t len, nids;
  char word[TOK_CACHE_WORD];
  int32_t ids[TOK_CACHE_IDS];
} TokCacheEntry;

struct Tokenizer {
  char path[512];            /* the tokenizer.json read, for messages */
  int vocab_size;            /* largest id + 1 */
  char* pool;                /* every token's text and bytes */
  size_t pool_len, pool_cap;
  TokSpan* text;             /* [vocab_size] each id's text as the file spells it (len 0: none) */
  TokSpan* bytes;            /* [vocab_size] each id's bytes when decoded */
  uint8_t* kind;             /* [vocab_size] TOK_NONE, TOK_MODEL, TOK_MODEL_RAW or TOK_ADDED */
  int byte_id[256];          /* the id of each single byte's token */
  int16_t byte_of_char[324]; /* ByteLevel's alphabet backwards: the byte character c stands
                             ** for (-1: none), for the characters below U+0144 */
  TokMerge* merges;          /* hash table of merges by pair */
  size_t merge_cap;          /* a power of 2 */
  int ignore_merges;         /* a word that is a token is that token (Llama 3) */
  TokStrMap word_ids;        /* a word's bytes -> id (vocab), for ignore_merges */
  TokAddedSet added[2];      /* added tokens: [0] normalized false, [1] true, matched in order */
  int eot;                   /* tok_eot_id */
  TokStep step[TOK_MAX_STEPS];
  int nsteps;
  int cut_known;             /* tok_safe_cut's rules hold for these steps and added tokens */
  TokCacheEntry* cache;      /* [TOK_CACHE_SLOTS] */
  /* scratch of one word's BPE, grown as needed */
  int32_t* sym_id;
  int32_t* sym_prev;
  int32_t* sym_next;
  uint64_t* heap;
  size_t scratch_cap;
};

/* ---- tok_load.c ---------------------------------------------------------------------- */

/* Appends n bytes to t's pool; their span in *s. -1 with an error when out of memory or when
** the pool would pass 4 GiB. */
int tok_pool_add(Tokenizer* t, const void* p, size_t n, TokSpan* s);

/* ---- tok_bpe.c ----------------------------------------------------------------------- */

/* The merge of (left, right), or NULL. */
const TokMerge* tok_merge_find(const Tokenizer* t, int32_t left, int32_t right);
/* Adds the merge (left, right) -> id of the given rank; a pair given twice keeps the later
** rank, as `tokenizers` does. -1 when out of memory. */
int tok_merge_add(Tokenizer* t, int32_t left, int32_t right, uint32_t rank, int32_t id);
/* Makes the merge table for n merges; -1 when out of memory. */
int tok_merges_init(Tokenizer* t, size_t n);
/* Appends the ids of the pre-tokenized word w[0..n) (n >= 1) to out; -1 when out of memory. */
int tok_bpe_word(Tokenizer* t, const unsigned char* w, size_t n, TokIds* out);
/* Builds map m from the ids whose kind is in `kinds` (a mask of 1 << TOK_MODEL, ...) to find
** them by key[id], their span of t->pool (text or bytes); -1 when out of memory. */
int tok_map_build(const Tokenizer* t, TokStrMap* m, const TokSpan* key, unsigned kinds);
/* The id of m whose key is w[0..n), or -1; key as given to tok_map_build. */
int tok_map_find(const Tokenizer* t, const TokStrMap* m, const TokSpan* key, const void* w, size_t n);
/* Frees m's table. */
void tok_map_free(TokStrMap* m);

/* ---- tok_encode.c -------------------------------------------------------------------- */

/* Decodes the UTF-8 character at s[0..n) (n >= 1) into *cp: its length, or 0 when it is not
** valid UTF-8 (overlong, a surrogate, past U+10FFFF, cut short). */
size_t tok_utf8_char(const unsigned char* s, size_t n, uint32_t* cp);

/* ---- tok_pretok.c -------------------------------------------------------------------- */

/* Compiles regex pattern (Oniguruma syntax as tokenizer.json holds it; literal when `literal`)
** as step t->step[t->nsteps++]; what names the JSON field for messages. -1 with an error naming
** what and the pattern when PCRE2 refuses it or it uses a class PCRE2 reads differently. */
int tok_step_add(Tokenizer* t, const char* pattern, int literal, const char* what);
/* Frees the compiled steps. */
void tok_steps_free(Tokenizer* t);
/* Pre-tokenizes text[0..n) (valid UTF-8, no added tokens in it) through the steps from `first`
** on and BPE-merges each piece into out. -1 when out of memory or a regex fails. */
int tok_pretok_encode(Tokenizer* t, int first, const char* text, size_t n, TokIds* out);
/* Whether tok_safe_cut's rules hold for t's steps: each is a pattern they are known for
** (GPT-2's, Llama 3's, Qwen2's, Digits'), and one of them splits words. */
int tok_steps_cut_known(const Tokenizer* t);
/* GPT-2's split pattern (ByteLevel's use_regex). */
extern const char* const tok_gpt2_pattern;

#endif
