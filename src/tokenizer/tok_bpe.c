/*
** tok_bpe.c: byte-pair merging of one pre-tokenized word, as `tokenizers`' BPE model does it: the
** word's bytes start as one symbol each (their byte tokens); the adjacent pair of lowest merge
** rank (the leftmost among equals) is merged, again and again, until no adjacent pair has a
** merge. The symbols are a linked list and the candidate pairs a binary heap keyed by (rank,
** position), so a word of n bytes costs O(n log n); a popped pair that a merge made stale is
** recognised and dropped. Also the merge table, the word -> id map of ignore_merges, and the
** cache of recent words.
*/
#include <stdlib.h>
#include <string.h>

#include "core/util.h"
#include "tokenizer/tok_internal.h"

/* splitmix64's finaliser: spreads every input bit over the whole hash. */
static uint64_t tok_mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

/* A 64-bit hash of n bytes, 8 at a time (words and tokens are short; FNV-1a's byte loop costs
** more here). Never 0, which marks an empty cache slot. */
static uint64_t tok_hash_bytes(const unsigned char* p, size_t n) {
  uint64_t h = 0x6a09e667f3bcc909ULL ^ (uint64_t)n;
  while (n >= 8) {
    uint64_t v;
    memcpy(&v, p, 8);
    h = tok_mix64(h ^ v);
    p += 8;
    n -= 8;
  }
  uint64_t v = 0;
  memcpy(&v, p, n);
  h = tok_mix64(h ^ v ^ ((uint64_t)n << 59));
  return h ? h : 1;
}

/* The smallest power of 2 that is at least 2n and at least 16: a table that stays at most half
** full. */
static size_t tok_table_cap(size_t n) {
  size_t cap = 16;
  while (cap < 2 * n) cap *= 2;
  return cap;
}

int tok_merges_init(Tokenizer* t, size_t n) {
  t->merge_cap = tok_table_cap(n);
  t->merges = malloc(t->merge_cap * sizeof *t->merges);
  if (!t->merges) return osdp_fail("tokenizer: out of memory for %zu merges", n);
  for (size_t i = 0; i < t->merge_cap; i++) t->merges[i].pair = TOK_EMPTY_PAIR;
  return 0;
}

/* The slot of pair in t's merge table: where it is, or the empty slot where it would go. */
static TokMerge* tok_merge_slot(const Tokenizer* t, uint64_t pair) {
  size_t mask = t->merge_cap - 1, i = tok_mix64(pair) & mask;
  while (t->merges[i].pair != TOK_EMPTY_PAIR && t->merges[i].pair != pair) i = (i + 1) & mask;
  return &t->merges[i];
}

int tok_merge_add(Tokenizer* t, int32_t left, int32_t right, uint32_t rank, int32_t id) {
  uint64_t pair = (uint64_t)(uint32_t)left << 32 | (uint32_t)right;
  TokMerge* m = tok_merge_slot(t, pair);
  m->pair = pair;
  m->rank = rank;
  m->id = id;
  return 0;
}

const TokMerge* tok_merge_find(const Tokenizer* t, int32_t left, int32_t right) {
  const TokMerge* m = tok_merge_slot(t, (uint64_t)(uint32_t)left << 32 | (uint32_t)right);
  return m->pair == TOK_EMPTY_PAIR ? NULL : m;
}

int tok_map_build(const Tokenizer* t, TokStrMap* m, const TokSpan* key, unsigned kinds) {
  size_t n = 0;
  for (int id = 0; id < t->vocab_size; id++) n += kinds >> t->kind[id] & 1;
  m->cap = tok_table_cap(n);
  m->slot = malloc(m->cap * sizeof *m->slot);
  if (!m->slot) return osdp_fail("tokenizer: out of memory for a map of %zu tokens", n);
  for (size_t i = 0; i < m->cap; i++) m->slot[i] = -1;
  size_t mask = m->cap - 1;
  for (int id = 0; id < t->vocab_size; id++) {
    if (!(kinds >> t->kind[id] & 1)) continue;
    size_t i = tok_hash_bytes((const unsigned char*)t->pool + key[id].off, key[id].len) & mask;
    while (m->slot[i] >= 0) i = (i + 1) & mask;
    m->slot[i] = id; /* two ids with one key: the lower one is found first */
  }
  return 0;
}

int tok_map_find(const Tokenizer* t, const TokStrMap* m, const TokSpan* key, const void* w,
                 size_t n) {
  size_t mask = m->cap - 1, i = tok_hash_bytes(w, n) & mask;
  for (int32_t id; (id = m->slot[i]) >= 0; i = (i + 1) & mask)
    if (key[id].len == n && memcmp(t->pool + key[id].off, w, n) == 0) return id;
  return -1;
}

void tok_map_free(TokStrMap* m) {
  free(m->slot);
  m->slot = NULL;
  m->cap = 0;
}

/* Grows the BPE scratch arrays to hold a word of n bytes; -1 when out of memory. */
static int tok_scratch_reserve(Tokenizer* t, size_t n) {
  if (n <= t->scratch_cap) return 0;
  size_t cap = n < 256 ? 256 : n + n / 2;
  int32_t* id = realloc(t->sym_id, cap * sizeof *id);
  if (id) t->sym_id = id;
  int32_t* prev = id ? realloc(t->sym_prev, cap * sizeof *prev) : NULL;
  if (prev) t->sym_prev = prev;
  int32_t* next = prev ? realloc(t->sym_next, cap * sizeof *next) : NULL;
  if (next) t->sym_next = next;
  uint64_t* heap = next ? realloc(t->heap, cap * sizeof *heap) : NULL;
  if (heap) t->heap = heap;
  if (!heap) return osdp_fail("tokenizer: out of memory for a word of %zu bytes", n);
  t->scratch_cap = cap;
  return 0;
}

/* Pushes key onto the min-heap h of *n entries. */
static void tok_heap_push(uint64_t* h, size_t* n, uint64_t key) {
  size_t i = (*n)++;
  while (i > 0 && h[(i - 1) / 2] > key) {
    h[i] = h[(i - 1) / 2];
    i = (i - 1) / 2;
  }
  h[i] = key;
}

/* Removes and returns the smallest key of the min-heap h of *n > 0 entries. */
static uint64_t tok_heap_pop(uint64_t* h, size_t* n) {
  uint64_t top = h[0], last = h[--*n];
  size_t i = 0, m = *n;
  for (;;) {
    size_t c = 2 * i + 1;
    if (c >= m) break;
    if (c + 1 < m && h[c + 1] < h[c]) c++;
    if (h[c] >= last) break;
    h[i] = h[c];
    i = c;
  }
  if (m) h[i] = last;
  return top;
}

/* Pushes the pair starting at symbol pos (with its next symbol) when it has a merge: the key
** is rank << 32 | pos, so the heap pops the lowest rank, then the leftmost position. */
static void tok_push_pair(Tokenizer* t, size_t* nheap, int32_t pos) {
  int32_t r = pos < 0 ? -1 : t->sym_next[pos];
  if (r < 0) return;
  const TokMerge* m = tok_merge_find(t, t->sym_id[pos], t->sym_id[r]);
  if (m) tok_heap_push(t->heap, nheap, (uint64_t)m->rank << 32 | (uint32_t)pos);
}

/* Runs the merges on the n symbols in t's scratch (ids set, linked in order) until no
** adjacent pair has one. A popped pair is stale when its left symbol was merged away or its
** pair now has another rank (a neighbour changed); such entries are dropped. */
static void tok_merge_symbols(Tokenizer* t, size_t n) {
  size_t nheap = 0;
  for (size_t i = 0; i + 1 < n; i++) tok_push_pair(t, &nheap, (int32_t)i);
  while (nheap) {
    uint64_t key = tok_heap_pop(t->heap, &nheap);
    int32_t pos = (int32_t)(uint32_t)key, r = t->sym_next[pos];
    if (t->sym_id[pos] < 0 || r < 0) continue;
    const TokMerge* m = tok_merge_find(t, t->sym_id[pos], t->sym_id[r]);
    if (!m || m->rank != (uint32_t)(key >> 32)) continue;
    t->sym_id[pos] = m->id;
    t->sym_id[r] = -1;
    t->sym_next[pos] = t->sym_next[r];
    if (t->sym_next[r] >= 0) t->sym_prev[t->sym_next[r]] = pos;
    tok_push_pair(t, &nheap, t->sym_prev[pos]);
    tok_push_pair(t, &nheap, pos);
  }
}

/* Keeps word w[0..n) and its ids in cache entry e when they fit. */
static void tok_cache_store(TokCacheEntry* e, uint64_t h, const unsigned char* w, size_t n,
                            const int* ids, size_t nids) {
  if (nids > TOK_CACHE_IDS) return;
  e->hash = h;
  e->len = (uint8_t)n;
  e->nids = (uint8_t)nids;
  memcpy(e->word, w, n);
  for (size_t i = 0; i < nids; i++) e->ids[i] = ids[i];
}

int tok_bpe_word(Tokenizer* t, const unsigned char* w, size_t n, TokIds* out) {
  if (n == 1) return tok_ids_push(out, t->byte_id[w[0]]);
  if (t->ignore_merges) {
    int id = tok_map_find(t, &t->word_ids, t->bytes, w, n);
    if (id >= 0) return tok_ids_push(out, id);
  }
  TokCacheEntry* e = NULL;
  uint64_t h = 0;
  if (n <= TOK_CACHE_WORD) {
    h = tok_hash_bytes(w, n);
    e = &t->cache[h & (TOK_CACHE_SLOTS - 1)];
    if (e->hash == h && e->len == n && memcmp(e->word, w, n) == 0) {
      for (int i = 0; i < e->nids; i++)
        if (tok_ids_push(out, e->ids[i])) return -1;
      return 0;
    }
  }
  if (tok_scratch_reserve(t, n)) return -1;
  for (size_t i = 0; i < n; i++) {
    t->sym_id[i] = t->byte_id[w[i]];
    t->sym_prev[i] = (int32_t)i - 1;
    t->sym_next[i] = i + 1 < n ? (int32_t)i + 1 : -1;
  }
  tok_merge_symbols(t, n);
  size_t start = out->n;
  for (int32_t i = 0; i >= 0; i = t->sym_next[i])
    if (tok_ids_push(out, t->sym_id[i])) return -1;
  if (e) tok_cache_store(e, h, w, n, out->ids + start, out->n - start);
  return 0;
}
