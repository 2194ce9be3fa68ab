/*
** tok_load.c: reads a Hugging Face tokenizer.json into a Tokenizer (tokenizer.h says what is
** supported). Every key of the typed objects (model, pre-tokenizer steps, decoder, added
** tokens) is known or refused, so a file that asks for something osdp does not do fails in one
** line naming the field and its value instead of tokenizing differently.
*/
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/files.h"
#include "core/util.h"
#include "tokenizer/tok_internal.h"

/* The largest tokenizer.json read (Llama 3's is 9 MB, Qwen2's 7 MB). */
#define TOK_FILE_MAX ((size_t)512 << 20)

/* ---- small JSON helpers ------------------------------------------------------------------- */

/* s quoted for a message: control bytes as \xNN, cut at 40 bytes ("..." after). Returns buf. */
static const char* tok_quote(const char* s, char buf[200]) {
  size_t k = 0, i = 0;
  buf[k++] = '"';
  for (; s[i] && i < 40; i++) {
    unsigned char c = (unsigned char)s[i];
    if (c < 0x20 || c == 0x7f) k += (size_t)snprintf(buf + k, 8, "\\x%02x", c);
    else buf[k++] = (char)c;
  }
  if (s[i]) k += (size_t)snprintf(buf + k, 8, "...");
  buf[k++] = '"';
  buf[k] = 0;
  return buf;
}

/* What JSON value v is, for messages: its text when short ("Unigram", 3, true), else its kind. */
static const char* tok_json_value(const cJSON* v, char buf[200]) {
  if (cJSON_IsString(v)) return tok_quote(v->valuestring, buf);
  if (cJSON_IsNumber(v)) snprintf(buf, 200, "%.15g", v->valuedouble);
  else if (cJSON_IsBool(v)) snprintf(buf, 200, "%s", cJSON_IsTrue(v) ? "true" : "false");
  else snprintf(buf, 200, "%s", !v ? "missing" : cJSON_IsNull(v) ? "null"
                                : cJSON_IsArray(v) ? "an array" : "an object");
  return buf;
}

/* Refuses a key of object o (named `field`) that is not in allowed (NULL-terminated): a setting
** osdp does not know might change the tokenisation. */
static int tok_check_keys(const Tokenizer* t, const cJSON* o, const char* field,
                          const char* const* allowed) {
  for (const cJSON* c = o->child; c; c = c->next) {
    int known = 0;
    for (const char* const* a = allowed; *a && !known; a++) known = strcmp(*a, c->string) == 0;
    if (!known)
      return osdp_fail("%s: %s%s\"%s\" is a setting osdp does not know; it reads Hugging Face "
                       "tokenizers' own keys only (is the file from a newer version?)", t->path,
                       field, *field ? "." : "", c->string);
  }
  return 0;
}

/* Reads boolean key of o (absent or null: def) into *out; -1 naming field.key otherwise. */
static int tok_bool(const Tokenizer* t, const cJSON* o, const char* field, const char* key, int def,
                    int* out) {
  const cJSON* v = cJSON_GetObjectItemCaseSensitive(o, key);
  char b[200];
  *out = def;
  if (!v || cJSON_IsNull(v)) return 0;
  if (!cJSON_IsBool(v))
    return osdp_fail("%s: %s.%s is %s; it must be true or false", t->path, field, key,
                     tok_json_value(v, b));
  *out = cJSON_IsTrue(v);
  return 0;
}

/* Requires boolean key of o to be `want` (absent or null counts as def). */
static int tok_bool_is(const Tokenizer* t, const cJSON* o, const char* field, const char* key,
                       int def, int want, const char* why) {
  int v;
  if (tok_bool(t, o, field, key, def, &v)) return -1;
  if (v != want)
    return osdp_fail("%s: %s.%s is %s, which osdp does not support (%s)", t->path, field, key,
                     v ? "true" : "false", why);
  return 0;
}

/* The string "type" of object o (named field); NULL with an error naming field.type. */
static const char* tok_type(const Tokenizer* t, const cJSON* o, const char* field) {
  const cJSON* v = cJSON_GetObjectItemCaseSensitive(o, "type");
  char b[200];
  if (cJSON_IsString(v)) return v->valuestring;
  if (!cJSON_IsObject(o))
    osdp_fail("%s: %s is %s; it must be an object with a \"type\"", t->path, field,
              tok_json_value(o, b));
  else
    osdp_fail("%s: %s.type is %s; it must be a string such as \"ByteLevel\"", t->path, field,
              tok_json_value(v, b));
  return NULL;
}

/* Reads JSON number v as an id in [0, TOK_MAX_ID) into *id; -1 naming field otherwise. */
static int tok_id(const Tokenizer* t, const cJSON* v, const char* field, int* id) {
  char b[200];
  if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || v->valuedouble < 0 ||
      v->valuedouble >= TOK_MAX_ID)
    return osdp_fail("%s: %s is %s; a token id is an integer in [0, %d)", t->path, field,
                     tok_json_value(v, b), TOK_MAX_ID);
  *id = (int)v->valuedouble;
  return 0;
}

/* ---- the pool and ByteLevel's byte alphabet ----------------------------------------------- */

int tok_pool_add(Tokenizer* t, const void* p, size_t n, TokSpan* s) {
  if (t->pool_len + n > UINT32_MAX) return osdp_fail("%s: its tokens pass 4 GiB", t->path);
  if (t->pool_len + n > t->pool_cap) {
    size_t cap = t->pool_cap ? t->pool_cap : 1 << 20;
    while (cap < t->pool_len + n) cap *= 2;
    char* pool = realloc(t->pool, cap);
    if (!pool) return osdp_fail("%s: out of memory for its tokens", t->path);
    t->pool = pool;
    t->pool_cap = cap;
  }
  memcpy(t->pool + t->pool_len, p, n);
  s->off = (uint32_t)t->pool_len;
  s->len = (uint32_t)n;
  t->pool_len += n;
  return 0;
}

/* GPT-2's bytes_to_unicode: byte b is written as the character cp[b] (printable Latin-1 bytes
** as themselves, the others as U+0100 + their order). */
static void tok_byte_chars(uint32_t cp[256]) {
  uint32_t extra = 0;
  for (int b = 0; b < 256; b++) {
    int printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    cp[b] = printable ? (uint32_t)b : 256 + extra++;
  }
}

/* Sets t->byte_of_char, the inverse of tok_byte_chars. */
static void tok_byte_inverse(Tokenizer* t) {
  uint32_t cp[256];
  tok_byte_chars(cp);
  for (int i = 0; i < 324; i++) t->byte_of_char[i] = -1;
  for (int b = 0; b < 256; b++) t->byte_of_char[cp[b]] = (int16_t)b;
}

/* The bytes token text s stands for under ByteLevel's alphabet, into out (room for strlen(s)
** bytes); its length, or -1 when a character of s is not in the alphabet. */
static long tok_unbyte(const Tokenizer* t, const char* s, unsigned char* out) {
  const int16_t* byte_of = t->byte_of_char;
  size_t n = strlen(s), k = 0;
  for (size_t i = 0; i < n;) {
    uint32_t c;
    size_t len = tok_utf8_char((const unsigned char*)s + i, n - i, &c);
    if (!len || c >= 324 || byte_of[c] < 0) return -1;
    out[k++] = (unsigned char)byte_of[c];
    i += len;
  }
  return (long)k;
}

/* Sets id's text to s and its bytes to what the ByteLevel decoder makes of it (its alphabet
** mapped back; s itself where a character is outside it); the kind it gets is TOK_MODEL for
** a model token in the alphabet, else raw_kind. */
static int tok_set_token(Tokenizer* t, int id, const char* s, int raw_kind) {
  size_t n = strlen(s);
  unsigned char* tmp = malloc(n + 1);
  if (!tmp) return osdp_fail("%s: out of memory", t->path);
  long k = tok_unbyte(t, s, tmp);
  int rc = tok_pool_add(t, s, n, &t->text[id]);
  if (!rc && k >= 0) rc = tok_pool_add(t, tmp, (size_t)k, &t->bytes[id]);
  else if (!rc) t->bytes[id] = t->text[id];
  free(tmp);
  t->kind[id] = (uint8_t)(k >= 0 && raw_kind == TOK_MODEL_RAW ? TOK_MODEL : raw_kind);
  return rc;
}

/* ---- model ------------------------------------------------------------------------------- */

/* Checks the BPE model's options: only those that leave plain byte-level BPE. */
static int tok_model_options(Tokenizer* t, const cJSON* m) {
  static const char* const keys[] = {"type", "dropout", "unk_token", "continuing_subword_prefix",
                                     "end_of_word_suffix", "fuse_unk", "byte_fallback",
                                     "ignore_merges", "vocab", "merges", NULL};
  if (tok_check_keys(t, m, "model", keys)) return -1;
  const cJSON* v = cJSON_GetObjectItemCaseSensitive(m, "dropout");
  char b[200];
  if (v && !cJSON_IsNull(v) && !(cJSON_IsNumber(v) && v->valuedouble == 0))
    return osdp_fail("%s: model.dropout is %s; BPE dropout makes tokenisation random: use null",
                     t->path, tok_json_value(v, b));
  const char* affix[] = {"continuing_subword_prefix", "end_of_word_suffix"};
  for (int i = 0; i < 2; i++) {
    v = cJSON_GetObjectItemCaseSensitive(m, affix[i]);
    if (v && !cJSON_IsNull(v) && !(cJSON_IsString(v) && !v->valuestring[0]))
      return osdp_fail("%s: model.%s is %s; osdp's BPE has no subword affixes (use null)", t->path,
                       affix[i], tok_json_value(v, b));
  }
  int fuse;
  if (tok_bool(t, m, "model", "fuse_unk", 0, &fuse) ||
      tok_bool_is(t, m, "model", "byte_fallback", 0, 0,
                  "SentencePiece-style byte fallback is not implemented yet") ||
      tok_bool(t, m, "model", "ignore_merges", 0, &t->ignore_merges))
    return -1;
  v = cJSON_GetObjectItemCaseSensitive(m, "unk_token");
  if (v && !cJSON_IsNull(v) && !cJSON_IsString(v))
    return osdp_fail("%s: model.unk_token is %s; it must be a string or null", t->path,
                     tok_json_value(v, b));
  return 0;
}

/* The added_tokens array (NULL when absent or null); -1 in *bad when it is something else. */
static const cJSON* tok_added_array(const Tokenizer* t, const cJSON* root, int* bad) {
  const cJSON* a = cJSON_GetObjectItemCaseSensitive(root, "added_tokens");
  char b[200];
  *bad = 0;
  if (!a || cJSON_IsNull(a)) return NULL;
  if (!cJSON_IsArray(a)) *bad = osdp_fail("%s: added_tokens is %s; it must be an array", t->path,
                                          tok_json_value(a, b));
  return a;
}

/* Finds the largest id of vocab and added_tokens and allocates the per-id arrays for it. */
static int tok_alloc_ids(Tokenizer* t, const cJSON* vocab, const cJSON* added) {
  int max = -1, id = 0, i = 0;
  char field[300];
  for (const cJSON* c = vocab->child; c; c = c->next) {
    snprintf(field, sizeof field, "model.vocab[\"%.200s\"]", c->string);
    if (tok_id(t, c, field, &id)) return -1;
    if (id > max) max = id;
  }
  for (const cJSON* c = added ? added->child : NULL; c; c = c->next, i++) {
    snprintf(field, sizeof field, "added_tokens[%d].id", i);
    if (!cJSON_IsObject(c))
      return osdp_fail("%s: added_tokens[%d] is not an object with id and content", t->path, i);
    if (tok_id(t, cJSON_GetObjectItemCaseSensitive(c, "id"), field, &id)) return -1;
    if (id > max) max = id;
  }
  if (max < 0) return osdp_fail("%s: model.vocab is empty; a tokenizer needs tokens", t->path);
  t->vocab_size = max + 1;
  t->text = calloc((size_t)t->vocab_size, sizeof *t->text);
  t->bytes = calloc((size_t)t->vocab_size, sizeof *t->bytes);
  t->kind = calloc((size_t)t->vocab_size, 1);
  if (!t->text || !t->bytes || !t->kind)
    return osdp_fail("%s: out of memory for %d ids", t->path, t->vocab_size);
  return 0;
}

/* Reads model.vocab: every token string with its id, each id once. */
static int tok_read_vocab(Tokenizer* t, const cJSON* vocab) {
  char a[200], b[200];
  for (const cJSON* c = vocab->child; c; c = c->next) {
    int id = (int)c->valuedouble;
    if (t->kind[id] != TOK_NONE) {
      char first[4096];
      snprintf(first, sizeof first, "%.*s", (int)t->text[id].len, t->pool + t->text[id].off);
      return osdp_fail("%s: model.vocab gives id %d to both %s and %s; each id names one token",
                       t->path, id, tok_quote(first, a), tok_quote(c->string, b));
    }
    if (!c->string[0]) return osdp_fail("%s: model.vocab has an empty token (id %d)", t->path, id);
    if (tok_set_token(t, id, c->string, TOK_MODEL_RAW)) return -1;
  }
  return 0;
}

/* Sets byte_id from the vocabulary: ByteLevel's 256 single-character tokens must all exist. */
static int tok_read_bytes(Tokenizer* t, const TokStrMap* by_text) {
  uint32_t cp[256];
  tok_byte_chars(cp);
  for (int b = 0; b < 256; b++) {
    char s[4];
    size_t n = cp[b] < 0x80 ? 1 : 2; /* every character of the alphabet is below U+0800 */
    if (n == 1) s[0] = (char)cp[b];
    else {
      s[0] = (char)(0xC0 | cp[b] >> 6);
      s[1] = (char)(0x80 | (cp[b] & 0x3F));
    }
    t->byte_id[b] = tok_map_find(t, by_text, t->text, s, n);
    if (t->byte_id[b] < 0)
      return osdp_fail("%s: model.vocab has no token \"%.*s\" for byte 0x%02x; a byte-level "
                       "vocabulary holds all 256 bytes", t->path, (int)n, s, b);
  }
  return 0;
}

/* The two token strings of merge m (model.merges[i]): "a b" or ["a", "b"], into a and b
** (pointers into m or into buf). */
static int tok_merge_parts(const Tokenizer* t, const cJSON* m, int i, char* buf, size_t cap,
                           const char** a, const char** b) {
  char q[200];
  if (cJSON_IsArray(m) && cJSON_GetArraySize(m) == 2 && cJSON_IsString(m->child) &&
      cJSON_IsString(m->child->next)) {
    *a = m->child->valuestring;
    *b = m->child->next->valuestring;
    return 0;
  }
  if (!cJSON_IsString(m))
    return osdp_fail("%s: model.merges[%d] is %s; a merge is \"a b\" or [\"a\", \"b\"]", t->path, i,
                     tok_json_value(m, q));
  const char* s = m->valuestring;
  const char* sp = strchr(s, ' ');
  if (!sp || sp == s || !sp[1] || strchr(sp + 1, ' ') || (size_t)(sp - s) >= cap)
    return osdp_fail("%s: model.merges[%d] is %s; a merge string is two tokens separated by one "
                     "space", t->path, i, tok_quote(s, q));
  memcpy(buf, s, (size_t)(sp - s));
  buf[sp - s] = 0;
  *a = buf;
  *b = sp + 1;
  return 0;
}

/* The id of token string s for merge i (part `what`), or -1 with an error. */
static int tok_merge_token(const Tokenizer* t, const TokStrMap* by_text, const char* s, size_t n,
                           int i, const char* what) {
  int id = tok_map_find(t, by_text, t->text, s, n);
  char q[200], tmp[4096];
  if (id < 0) {
    snprintf(tmp, sizeof tmp, "%.*s", (int)(n < 4000 ? n : 4000), s);
    osdp_fail("%s: model.merges[%d]: its %s %s is not in model.vocab; every merge's parts and "
              "result must be tokens", t->path, i, what, tok_quote(tmp, q));
  }
  return id;
}

/* Reads model.merges (rank = position) into the merge table. */
static int tok_read_merges(Tokenizer* t, const cJSON* merges, const TokStrMap* by_text) {
  char q[200], buf[4096], cat[8192];
  if (!cJSON_IsArray(merges))
    return osdp_fail("%s: model.merges is %s; it must be an array of merges", t->path,
                     tok_json_value(merges, q));
  if (tok_merges_init(t, (size_t)cJSON_GetArraySize(merges))) return -1;
  int i = 0;
  for (const cJSON* m = merges->child; m; m = m->next, i++) {
    const char *a = NULL, *b = NULL;
    if (tok_merge_parts(t, m, i, buf, sizeof buf, &a, &b)) return -1;
    size_t na = strlen(a), nb = strlen(b);
    if (na + nb >= sizeof cat)
      return osdp_fail("%s: model.merges[%d] makes a token of %zu bytes; at most %zu", t->path, i,
                       na + nb, sizeof cat - 1);
    memcpy(cat, a, na);
    memcpy(cat + na, b, nb);
    int ia = tok_merge_token(t, by_text, a, na, i, "first part");
    int ib = ia < 0 ? -1 : tok_merge_token(t, by_text, b, nb, i, "second part");
    int ic = ib < 0 ? -1 : tok_merge_token(t, by_text, cat, na + nb, i, "result");
    if (ic < 0) return -1;
    tok_merge_add(t, ia, ib, (uint32_t)i, ic);
  }
  return 0;
}

/* What reading added_tokens needs of the model: its token -> id map and its size, and the
** largest id given to an added token so far (-1: none). */
typedef struct TokAddedState {
  TokStrMap by_text;
  int vocab_len;
  int max_added;
} TokAddedState;

/* Reads the model: BPE with its vocab and merges, and the byte tokens; st gets the model's
** token -> id map (the caller frees it) and its size. */
static int tok_read_model(Tokenizer* t, const cJSON* root, const cJSON* added, TokAddedState* st) {
  const cJSON* m = cJSON_GetObjectItemCaseSensitive(root, "model");
  const char* type = tok_type(t, m, "model");
  char q[200];
  if (!type) return -1;
  if (strcmp(type, "BPE") != 0)
    return osdp_fail("%s: model.type %s is not supported; osdp reads byte-level BPE tokenizers "
                     "(GPT-2, Llama 3, Qwen2, SmolLM2)", t->path, tok_quote(type, q));
  if (tok_model_options(t, m)) return -1;
  const cJSON* vocab = cJSON_GetObjectItemCaseSensitive(m, "vocab");
  if (!cJSON_IsObject(vocab))
    return osdp_fail("%s: model.vocab is %s; it must be an object of token: id", t->path,
                     tok_json_value(vocab, q));
  if (tok_alloc_ids(t, vocab, added) || tok_read_vocab(t, vocab)) return -1;
  st->vocab_len = cJSON_GetArraySize(vocab);
  int rc = tok_map_build(t, &st->by_text, t->text, 1u << TOK_MODEL | 1u << TOK_MODEL_RAW);
  if (!rc) rc = tok_read_bytes(t, &st->by_text);
  if (!rc) rc = tok_read_merges(t, cJSON_GetObjectItemCaseSensitive(m, "merges"), &st->by_text);
  if (!rc && t->ignore_merges) rc = tok_map_build(t, &t->word_ids, t->bytes, 1u << TOK_MODEL);
  return rc;
}

/* ---- added tokens ------------------------------------------------------------------------- */

/* Orders added tokens (indices into t->text via ids) by first byte, then longest first. */
static const Tokenizer* g_sort_tok;
static int tok_added_cmp(const void* x, const void* y) {
  const TokSpan* a = &g_sort_tok->text[*(const int*)x];
  const TokSpan* b = &g_sort_tok->text[*(const int*)y];
  unsigned char fa = (unsigned char)g_sort_tok->pool[a->off];
  unsigned char fb = (unsigned char)g_sort_tok->pool[b->off];
  if (fa != fb) return fa < fb ? -1 : 1;
  return a->len != b->len ? (a->len > b->len ? -1 : 1) : 0;
}

/* Makes set s of the n added token ids: sorted by first byte, longest first, with each first
** byte's range. (qsort's comparison needs the tokenizer: loading is single-threaded.) */
static void tok_added_index(Tokenizer* t, TokAddedSet* s) {
  g_sort_tok = t;
  qsort(s->ids, (size_t)s->n, sizeof *s->ids, tok_added_cmp);
  for (int i = 0; i < s->n; i++) s->text[i] = t->text[s->ids[i]];
  int k = 0;
  for (int b = 0; b <= 256; b++) {
    while (k < s->n && (unsigned char)t->pool[s->text[k].off] < b) k++;
    s->first[b] = k;
  }
}

/* The id `tokenizers` gives an added token of text s, whatever the file says: model.vocab's
** when it has s, else the next after the vocabulary's size and the added tokens before (its
** AddedVocabulary::add_tokens). */
static int tok_added_expected(const Tokenizer* t, const TokAddedState* st, const char* s) {
  int vid = tok_map_find(t, &st->by_text, t->text, s, strlen(s));
  if (vid >= 0) return vid;
  return st->max_added + 1 > st->vocab_len ? st->max_added + 1 : st->vocab_len;
}

/* Checks added token i (object c) and records its id, text and which pass matches it. */
static int tok_read_added_one(Tokenizer* t, const cJSON* c, int i, TokAddedState* st, int* pass) {
  static const char* const keys[] = {"id", "content", "single_word", "lstrip", "rstrip",
                                     "normalized", "special", NULL};
  char field[64], q[200], r[200];
  snprintf(field, sizeof field, "added_tokens[%d]", i);
  const cJSON* content = cJSON_GetObjectItemCaseSensitive(c, "content");
  int id = (int)cJSON_GetObjectItemCaseSensitive(c, "id")->valuedouble, special, normalized;
  const char* why = "an added token matched only with its exact text is supported";
  if (tok_check_keys(t, c, field, keys) || tok_bool(t, c, field, "special", 0, &special) ||
      tok_bool(t, c, field, "normalized", !special, &normalized) ||
      tok_bool_is(t, c, field, "single_word", 0, 0, why) ||
      tok_bool_is(t, c, field, "lstrip", 0, 0, why) || tok_bool_is(t, c, field, "rstrip", 0, 0, why))
    return -1;
  if (!cJSON_IsString(content) || !content->valuestring[0])
    return osdp_fail("%s: %s.content is %s; it must be the token's text", t->path, field,
                     tok_json_value(content, q));
  *pass = normalized;
  int want = tok_added_expected(t, st, content->valuestring);
  int in_vocab = t->kind[want] == TOK_MODEL || t->kind[want] == TOK_MODEL_RAW;
  if (id != want)
    return osdp_fail("%s: %s gives %s id %d, but tokenizers gives it id %d (%s); osdp needs the "
                     "file's ids to be those", t->path, field, tok_quote(content->valuestring, q), id,
                     want, in_vocab ? "model.vocab's" : "the next after the vocabulary and the added "
                                                        "tokens before");
  if (id > st->max_added) st->max_added = id;
  if (t->kind[id] == TOK_MODEL || t->kind[id] == TOK_MODEL_RAW) {
    const TokSpan* s = &t->text[id];
    if (s->len == strlen(content->valuestring) &&
        memcmp(t->pool + s->off, content->valuestring, s->len) == 0) {
      t->kind[id] = TOK_ADDED;
      return 0;
    }
    char vocab_text[4096];
    snprintf(vocab_text, sizeof vocab_text, "%.*s", (int)(s->len < 4000 ? s->len : 4000),
             t->pool + s->off);
    return osdp_fail("%s: %s gives id %d to %s, which model.vocab gives to %s; osdp needs one text "
                     "per id", t->path, field, id, tok_quote(content->valuestring, q),
                     tok_quote(vocab_text, r));
  }
  if (t->kind[id] == TOK_ADDED)
    return osdp_fail("%s: %s repeats id %d of an earlier added token", t->path, field, id);
  return tok_set_token(t, id, content->valuestring, TOK_ADDED);
}

/* Reads added_tokens into the two matching passes. */
static int tok_read_added(Tokenizer* t, const cJSON* added, TokAddedState* st) {
  int n = added ? cJSON_GetArraySize(added) : 0, i = 0;
  for (int p = 0; p < 2; p++) {
    t->added[p].ids = malloc(((size_t)n + 1) * sizeof *t->added[p].ids);
    t->added[p].text = malloc(((size_t)n + 1) * sizeof *t->added[p].text);
    if (!t->added[p].ids || !t->added[p].text) return osdp_fail("%s: out of memory", t->path);
  }
  for (const cJSON* c = added ? added->child : NULL; c; c = c->next, i++) {
    int pass;
    if (tok_read_added_one(t, c, i, st, &pass)) return -1;
    TokAddedSet* s = &t->added[pass];
    s->ids[s->n++] = (int)cJSON_GetObjectItemCaseSensitive(c, "id")->valuedouble;
  }
  for (int p = 0; p < 2; p++) tok_added_index(t, &t->added[p]);
  return 0;
}

/* ---- pre-tokenizer and decoder ---------------------------------------------------------- */

/* Reads a Split step (field names it): a Regex or String pattern, "Isolated", not inverted. */
static int tok_read_split(Tokenizer* t, const cJSON* o, const char* field) {
  static const char* const keys[] = {"type", "pattern", "behavior", "invert", NULL};
  const cJSON* p = cJSON_GetObjectItemCaseSensitive(o, "pattern");
  const cJSON* re = cJSON_GetObjectItemCaseSensitive(p, "Regex");
  const cJSON* str = cJSON_GetObjectItemCaseSensitive(p, "String");
  const cJSON* beh = cJSON_GetObjectItemCaseSensitive(o, "behavior");
  char q[200], what[64];
  if (tok_check_keys(t, o, field, keys) ||
      tok_bool_is(t, o, field, "invert", 0, 0, "only the pattern's matches split"))
    return -1;
  if (!cJSON_IsObject(p) || cJSON_GetArraySize(p) != 1 ||
      (!cJSON_IsString(re) && !cJSON_IsString(str)))
    return osdp_fail("%s: %s.pattern is %s; it must be {\"Regex\": \"...\"} or {\"String\": "
                     "\"...\"}", t->path, field, tok_json_value(p, q));
  if (!cJSON_IsString(beh) || strcmp(beh->valuestring, "Isolated") != 0)
    return osdp_fail("%s: %s.behavior is %s; only \"Isolated\" is supported", t->path, field,
                     tok_json_value(beh, q));
  snprintf(what, sizeof what, "%s.pattern", field);
  return tok_step_add(t, re ? re->valuestring : str->valuestring, !re, what);
}

/* Reads a Digits step: digits (Unicode N) split off one by one or in runs. */
static int tok_read_digits(Tokenizer* t, const cJSON* o, const char* field) {
  static const char* const keys[] = {"type", "individual_digits", NULL};
  int one;
  char what[64];
  if (tok_check_keys(t, o, field, keys) || tok_bool(t, o, field, "individual_digits", 0, &one))
    return -1;
  snprintf(what, sizeof what, "%s (Digits)", field);
  return tok_step_add(t, one ? "\\p{N}" : "\\p{N}+", 0, what);
}

/* Reads the ByteLevel step (last): no prefix space; use_regex adds GPT-2's split. */
static int tok_read_bytelevel(Tokenizer* t, const cJSON* o, const char* field) {
  static const char* const keys[] = {"type", "add_prefix_space", "trim_offsets", "use_regex", NULL};
  int trim, regex;
  char what[64];
  if (tok_check_keys(t, o, field, keys) ||
      tok_bool_is(t, o, field, "add_prefix_space", 1, 0, "it puts a space before every piece") ||
      tok_bool(t, o, field, "trim_offsets", 1, &trim) ||
      tok_bool(t, o, field, "use_regex", 1, &regex))
    return -1;
  snprintf(what, sizeof what, "%s (ByteLevel's GPT-2 pattern)", field);
  return regex ? tok_step_add(t, tok_gpt2_pattern, 0, what) : 0;
}

/* Reads one step of the pre-tokenizer; ByteLevel must come last (`last`: it is the last). */
static int tok_read_step(Tokenizer* t, const cJSON* o, const char* field, int last) {
  const char* type = tok_type(t, o, field);
  char q[200];
  if (!type) return -1;
  int bytelevel = strcmp(type, "ByteLevel") == 0, split = strcmp(type, "Split") == 0;
  int digits = strcmp(type, "Digits") == 0;
  if (!bytelevel && !split && !digits)
    return osdp_fail("%s: %s.type %s is not supported; osdp reads Split, Digits and ByteLevel "
                     "pre-tokenizers%s", t->path, field, tok_quote(type, q),
                     strcmp(type, "Metaspace") == 0 ? " (SentencePiece-style tokenizers are not "
                                                      "supported yet)" : "");
  if (bytelevel != last)
    return osdp_fail("%s: %s.type is %s; osdp needs ByteLevel as the last step and only there (a "
                     "byte-level BPE tokenizer)", t->path, field, tok_quote(type, q));
  if (bytelevel) return tok_read_bytelevel(t, o, field);
  return split ? tok_read_split(t, o, field) : tok_read_digits(t, o, field);
}

/* Reads pre_tokenizer: ByteLevel, or a Sequence ending in ByteLevel. */
static int tok_read_pretok(Tokenizer* t, const cJSON* root) {
  const cJSON* p = cJSON_GetObjectItemCaseSensitive(root, "pre_tokenizer");
  char q[200], field[64];
  if (!p || cJSON_IsNull(p))
    return osdp_fail("%s: pre_tokenizer is null; osdp reads byte-level BPE tokenizers (a "
                     "ByteLevel pre-tokenizer)", t->path);
  const char* type = tok_type(t, p, "pre_tokenizer");
  if (!type) return -1;
  if (strcmp(type, "Sequence") != 0) return tok_read_step(t, p, "pre_tokenizer", 1);
  const cJSON* steps = cJSON_GetObjectItemCaseSensitive(p, "pretokenizers");
  static const char* const keys[] = {"type", "pretokenizers", NULL};
  if (tok_check_keys(t, p, "pre_tokenizer", keys)) return -1;
  int n = cJSON_GetArraySize(steps), i = 0;
  if (!cJSON_IsArray(steps) || n == 0)
    return osdp_fail("%s: pre_tokenizer.pretokenizers is %s; it must be a list of steps", t->path,
                     tok_json_value(steps, q));
  for (const cJSON* s = steps->child; s; s = s->next, i++) {
    snprintf(field, sizeof field, "pre_tokenizer.pretokenizers[%d]", i);
    if (tok_read_step(t, s, field, i == n - 1)) return -1;
  }
  return 0;
}

/* Checks that the decoder is ByteLevel (alone or the only member of a Sequence). */
static int tok_read_decoder(Tokenizer* t, const cJSON* root) {
  const cJSON* d = cJSON_GetObjectItemCaseSensitive(root, "decoder");
  const char* field = "decoder";
  char q[200];
  if (!d || cJSON_IsNull(d))
    return osdp_fail("%s: decoder is null; a byte-level tokenizer needs the ByteLevel decoder",
                     t->path);
  const char* type = tok_type(t, d, field);
  if (type && strcmp(type, "Sequence") == 0) {
    const cJSON* list = cJSON_GetObjectItemCaseSensitive(d, "decoders");
    if (!cJSON_IsArray(list) || cJSON_GetArraySize(list) != 1)
      return osdp_fail("%s: decoder.decoders is %s; osdp supports a Sequence of ByteLevel alone",
                       t->path, tok_json_value(list, q));
    d = list->child;
    field = "decoder.decoders[0]";
    type = tok_type(t, d, field);
  }
  if (!type) return -1;
  if (strcmp(type, "ByteLevel") != 0)
    return osdp_fail("%s: %s.type %s is not supported; osdp decodes with ByteLevel", t->path, field,
                     tok_quote(type, q));
  static const char* const keys[] = {"type", "add_prefix_space", "trim_offsets", "use_regex", NULL};
  return tok_check_keys(t, d, field, keys);
}

/* Checks the normalizer: none. */
static int tok_read_normalizer(Tokenizer* t, const cJSON* root) {
  const cJSON* n = cJSON_GetObjectItemCaseSensitive(root, "normalizer");
  char q[200];
  if (!n || cJSON_IsNull(n)) return 0;
  const char* type = tok_type(t, n, "normalizer");
  if (!type) return -1;
  return osdp_fail("%s: normalizer.type %s is not supported; osdp tokenizes without a normalizer "
                   "(null)", t->path, tok_quote(type, q));
}

/* ---- the whole file ----------------------------------------------------------------------- */

/* The end-of-text token: the first of the usual names that an added token has. */
static int tok_find_eot(const Tokenizer* t) {
  static const char* const names[] = {"<|endoftext|>", "<|end_of_text|>", "</s>"};
  for (int k = 0; k < 3; k++)
    for (int p = 0; p < 2; p++)
      for (int i = 0; i < t->added[p].n; i++) {
        const TokSpan* s = &t->added[p].text[i];
        if (s->len == strlen(names[k]) && memcmp(t->pool + s->off, names[k], s->len) == 0)
          return t->added[p].ids[i];
      }
  return -1;
}

/* Whether an added token holds a space or a newline (tok_safe_cut's cuts could fall inside). */
static int tok_added_spans_cuts(const Tokenizer* t) {
  for (int p = 0; p < 2; p++)
    for (int i = 0; i < t->added[p].n; i++) {
      const TokSpan* s = &t->added[p].text[i];
      if (memchr(t->pool + s->off, ' ', s->len) || memchr(t->pool + s->off, '\n', s->len)) return 1;
    }
  return 0;
}

/* Fills t from the parsed file root. */
static int tok_read(Tokenizer* t, const cJSON* root) {
  static const char* const keys[] = {"version", "truncation", "padding", "added_tokens", "normalizer",
                                     "pre_tokenizer", "post_processor", "decoder", "model", NULL};
  int bad;
  TokAddedState st = {.max_added = -1};
  tok_byte_inverse(t);
  const cJSON* added = tok_added_array(t, root, &bad);
  bad = bad || tok_check_keys(t, root, "", keys) || tok_read_model(t, root, added, &st) ||
        tok_read_added(t, added, &st);
  tok_map_free(&st.by_text);
  if (bad || tok_read_normalizer(t, root)) return -1;
  if (tok_read_pretok(t, root) || tok_read_decoder(t, root)) return -1;
  t->cut_known = !tok_added_spans_cuts(t) && tok_steps_cut_known(t);
  t->eot = tok_find_eot(t);
  t->cache = calloc(TOK_CACHE_SLOTS, sizeof *t->cache);
  if (!t->cache) return osdp_fail("%s: out of memory for the word cache", t->path);
  return 0;
}

/* The tokenizer.json that path names: path itself, or path/tokenizer.json for a directory. */
static int tok_resolve(const char* path, char* file, size_t cap) {
  struct stat st;
  if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
    snprintf(file, cap, "%s/tokenizer.json", path);
    if (stat(file, &st) != 0)
      return osdp_fail("--tokenizer: directory '%s' holds no tokenizer.json; give a Hugging Face "
                       "model directory or its tokenizer.json", path);
  } else {
    snprintf(file, cap, "%s", path);
  }
  return 0;
}

int tok_load(Tokenizer** out, const char* path) {
  *out = NULL;
  Tokenizer* t = calloc(1, sizeof *t);
  if (!t) return osdp_fail("tokenizer: out of memory");
  if (tok_resolve(path, t->path, sizeof t->path)) {
    free(t);
    return -1;
  }
  char* text = file_read_text(t->path, TOK_FILE_MAX, "--tokenizer", "is it a tokenizer.json?",
                              FILE_FOLLOW);
  const char* end = NULL;
  cJSON* root = text ? cJSON_ParseWithOpts(text, &end, 0) : NULL;
  int rc = -1;
  if (text && !cJSON_IsObject(root))
    osdp_fail("%s: malformed JSON; a tokenizer.json is an object with model, pre_tokenizer, "
              "decoder and added_tokens", t->path);
  else if (text && json_check_one_meaning(root, text, end, t->path) == 0)
    rc = tok_read(t, root);
  cJSON_Delete(root);
  free(text);
  if (rc) {
    tok_free(t);
    return -1;
  }
  *out = t;
  return 0;
}

void tok_free(Tokenizer* t) {
  if (!t) return;
  tok_steps_free(t);
  for (int p = 0; p < 2; p++) {
    free(t->added[p].ids);
    free(t->added[p].text);
  }
  tok_map_free(&t->word_ids);
  free(t->merges);
  free(t->pool);
  free(t->text);
  free(t->bytes);
  free(t->kind);
  free(t->cache);
  free(t->sym_id);
  free(t->sym_prev);
  free(t->sym_next);
  free(t->heap);
  free(t);
}
