/*
** tok_encode.c: text to ids (added tokens first, then the pre-tokenizer and BPE of the text
** between them), ids to text, and the places where a text may be cut for streaming.
*/
#include <stdlib.h>
#include <string.h>

#include "core/util.h"
#include "tokenizer/tok_internal.h"

int tok_ids_push(TokIds* out, int id) {
  if (out->n == out->cap) {
    size_t cap = out->cap ? 2 * out->cap : 1024;
    int* ids = realloc(out->ids, cap * sizeof *ids);
    if (!ids) return osdp_fail("tokenizer: out of memory for %zu token ids", cap);
    out->ids = ids;
    out->cap = cap;
  }
  out->ids[out->n++] = id;
  return 0;
}

void tok_ids_free(TokIds* out) {
  free(out->ids);
  out->ids = NULL;
  out->n = out->cap = 0;
}

size_t tok_utf8_char(const unsigned char* s, size_t n, uint32_t* cp) {
  unsigned char c = s[0];
  size_t len = c < 0x80 ? 1 : c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3
             : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
  if (len == 0 || len > n) return 0;
  uint32_t v = len == 1 ? c : len == 2 ? c & 0x1Fu : len == 3 ? c & 0x0Fu : c & 0x07u;
  for (size_t i = 1; i < len; i++) {
    if ((s[i] & 0xC0) != 0x80) return 0;
    v = v << 6 | (s[i] & 0x3Fu);
  }
  static const uint32_t least[5] = {0, 0, 0x80, 0x800, 0x10000};
  if (v < least[len] || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return 0;
  *cp = v;
  return len;
}

/* ASCII, most of most text, is skipped 8 bytes at a time. */
size_t tok_utf8_check(const char* text, size_t n) {
  const unsigned char* s = (const unsigned char*)text;
  size_t i = 0;
  while (i < n) {
    uint64_t w;
    if (i + 8 <= n && (memcpy(&w, s + i, 8), (w & 0x8080808080808080ULL) == 0)) {
      i += 8;
      continue;
    }
    uint32_t cp;
    size_t len = tok_utf8_char(s + i, n - i, &cp);
    if (!len) return i;
    i += len;
  }
  return n;
}

/* The leftmost-longest occurrence in text[0..n) of an added token of set s: its offset (n when
** there is none), with its length in *len and id in *id. */
static size_t tok_added_find(const Tokenizer* t, const TokAddedSet* s, const char* text, size_t n,
                             size_t* len, int* id) {
  for (size_t i = 0; s->n && i < n; i++) {
    unsigned char b = (unsigned char)text[i];
    for (int j = s->first[b]; j < s->first[b + 1]; j++) {
      const TokSpan* x = &s->text[j];
      if (x->len <= n - i && memcmp(text + i, t->pool + x->off, x->len) == 0) {
        *len = x->len;
        *id = s->ids[j];
        return i;
      }
    }
  }
  return n;
}

/* Encodes text[0..n) with the added tokens of pass p and later passes split out first, then the
** pre-tokenizer and BPE on what lies between them. */
static int tok_encode_pass(Tokenizer* t, int p, const char* text, size_t n, TokIds* out) {
  if (p == 2) return tok_pretok_encode(t, 0, text, n, out);
  size_t at = 0;
  while (at < n) {
    size_t len = 0;
    int id = -1;
    size_t hit = at + tok_added_find(t, &t->added[p], text + at, n - at, &len, &id);
    if (tok_encode_pass(t, p + 1, text + at, hit - at, out)) return -1;
    if (hit == n) break;
    if (tok_ids_push(out, id)) return -1;
    at = hit + len;
  }
  return 0;
}

int tok_encode(Tokenizer* t, const char* text, size_t n, TokIds* out) {
  size_t bad = tok_utf8_check(text, n), before = out->n;
  if (bad < n)
    return osdp_fail("tokenizer: the text is not valid UTF-8 at byte %zu (0x%02x); tokenizers read "
                     "UTF-8 text", bad, (unsigned char)text[bad]);
  if (tok_encode_pass(t, 0, text, n, out)) {
    out->n = before;
    return -1;
  }
  return 0;
}

char* tok_decode(const Tokenizer* t, const int* ids, size_t n, size_t* len) {
  size_t total = 0;
  for (size_t i = 0; i < n; i++) {
    if (ids[i] < 0 || ids[i] >= t->vocab_size || t->kind[ids[i]] == TOK_NONE) {
      osdp_fail("tokenizer: id %d at position %zu is not a token of %s (%d ids)", ids[i], i,
                t->path, t->vocab_size);
      return NULL;
    }
    total += t->bytes[ids[i]].len;
  }
  char* s = malloc(total + 1);
  if (!s) {
    osdp_fail("tokenizer: out of memory decoding %zu ids", n);
    return NULL;
  }
  size_t k = 0;
  for (size_t i = 0; i < n; i++) {
    memcpy(s + k, t->pool + t->bytes[ids[i]].off, t->bytes[ids[i]].len);
    k += t->bytes[ids[i]].len;
  }
  s[k] = 0;
  *len = k;
  return s;
}

int tok_vocab_size(const Tokenizer* t) { return t->vocab_size; }

int tok_eot_id(const Tokenizer* t) { return t->eot; }

const char* tok_token_text(const Tokenizer* t, int id, size_t* len) {
  if (id < 0 || id >= t->vocab_size || t->kind[id] == TOK_NONE) return NULL;
  *len = t->text[id].len;
  return t->pool + t->text[id].off;
}

/* Whether c is printable ASCII other than the space (0x21 .. 0x7e). */
static int tok_visible(unsigned char c) { return c > 0x20 && c < 0x7f; }

/* Whether c is an ASCII letter. */
static int tok_letter(unsigned char c) { return (c | 0x20) >= 'a' && (c | 0x20) <= 'z'; }

size_t tok_safe_cut(const Tokenizer* t, const char* text, size_t n) {
  if (!t->cut_known || n < 3) return 0;
  const unsigned char* s = (const unsigned char*)text;
  for (size_t c = n - 1; c >= 2; c--) {
    if (s[c - 1] == '\n' && tok_visible(s[c - 2]) && tok_visible(s[c])) return c;
    if (s[c] == ' ' && c + 1 < n && tok_letter(s[c - 1]) && tok_letter(s[c + 1])) return c;
  }
  return 0;
}
