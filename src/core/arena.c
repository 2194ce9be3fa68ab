/* arena.c: first-fit arena over one reserved address range; see arena.h. */
#include "core/arena.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"

#define ARENA_ALIGN 64
#define ARENA_MAX_BLOCKS 65536

static const char* category_names[MEM_CATEGORY_COUNT] = {
    "params", "grads", "optim", "acts", "scratch", "gather"};

const char* mem_category_name(MemCategory c) {
  return (c >= 0 && c < MEM_CATEGORY_COUNT) ? category_names[c] : "?";
}

/* The bytes to reserve for a capacity (see arena_init). */
static size_t reserve_bytes(size_t capacity, size_t available) {
  const size_t MiB = (size_t)1 << 20;
  if (!available) return capacity ? capacity * 2 + 64 * MiB : ((size_t)1 << 40);
  size_t want = capacity ? capacity + capacity / 16 + 64 * MiB
                         : (available > 512 * MiB ? available - 256 * MiB : available / 2);
  return want < available ? want : available;
}

int arena_init(Arena* a, size_t capacity, const ArenaMemory* mem) {
  memset(a, 0, sizeof *a);
  a->mem = *mem;
  a->capacity = capacity;
  size_t available = mem->available ? mem->available() : 0;
  if (available && capacity > available) {
    char cap[32], av[32];
    return osdp_fail("--mem-limit: %s is more than the %s the device has free; lower --mem-limit",
                     format_bytes((double)capacity, cap), format_bytes((double)available, av));
  }
  size_t want = reserve_bytes(capacity, available);
  void* p = mem->reserve(want);
  if (!p) return -1;
  /* The arena holds the range only once it can track it: a failed init holds nothing, so
  ** arena_destroy after it releases nothing twice. */
  a->blocks = calloc(ARENA_MAX_BLOCKS, sizeof *a->blocks);
  if (!a->blocks) { mem->release(p, want, 0); return osdp_fail("arena: out of host memory"); }
  a->base = p;
  a->reserved = want;
  a->maxblocks = ARENA_MAX_BLOCKS;
  a->blocks[0] = (ArenaBlock){.offset = 0, .size = want, .used = 0};
  a->nblocks = 1;
  return 0;
}

void arena_destroy(Arena* a) {
  if (a->base) a->mem.release(a->base, a->reserved, a->untouched);
  free(a->blocks);
  memset(a, 0, sizeof *a);
}

void arena_describe(const Arena* a, char* buf, size_t n) {
  size_t off = 0;
  char tmp[32];
  for (int c = 0; c < MEM_CATEGORY_COUNT && off < n; c++)
    off += (size_t)snprintf(buf + off, n - off, "%s %s, ", category_names[c],
                            format_bytes((double)a->cur[c], tmp));
  if (off < n) snprintf(buf + off, n - off, "total %s", format_bytes((double)a->cur_total, tmp));
}

/* Inserts a block record at index i, shifting the rest up. */
static int insert_block(Arena* a, int i, ArenaBlock b) {
  if (a->nblocks >= a->maxblocks) return osdp_fail("arena: more than %d live blocks", a->maxblocks);
  memmove(&a->blocks[i + 1], &a->blocks[i], (size_t)(a->nblocks - i) * sizeof b);
  a->blocks[i] = b;
  a->nblocks++;
  return 0;
}

/* Removes the block record at index i. */
static void remove_block(Arena* a, int i) {
  memmove(&a->blocks[i], &a->blocks[i + 1], (size_t)(a->nblocks - i - 1) * sizeof a->blocks[0]);
  a->nblocks--;
}

/* Updates current and peak bytes for an allocation (+bytes) or a free (-bytes). */
static void account(Arena* a, MemCategory cat, size_t bytes, int sign) {
  if (sign > 0) { a->cur[cat] += bytes; a->cur_total += bytes; }
  else { a->cur[cat] -= bytes; a->cur_total -= bytes; }
  if (a->cur[cat] > a->peak[cat]) a->peak[cat] = a->cur[cat];
  if (a->cur_total > a->peak_total) {
    a->peak_total = a->cur_total;
    memcpy(a->peak_at, a->cur, sizeof a->cur);
  }
}

void* arena_alloc_uninit(Arena* a, size_t bytes, MemCategory cat, const char* what) {
  if (a->capacity && a->cur_total + bytes > a->capacity) {
    char have[32], need[32], lim[32], brk[400];
    arena_describe(a, brk, sizeof brk);
    osdp_fail("memory limit %s exceeded allocating %s for %s (need %s in all); in use: %s",
              format_bytes((double)a->capacity, lim), format_bytes((double)bytes, need), what,
              format_bytes((double)(a->cur_total + bytes), have), brk);
    return NULL;
  }
  size_t size = (bytes + ARENA_ALIGN - 1) / ARENA_ALIGN * ARENA_ALIGN;
  if (size == 0) size = ARENA_ALIGN;
  for (int i = 0; i < a->nblocks; i++) {
    ArenaBlock* b = &a->blocks[i];
    if (b->used || b->size < size) continue;
    if (b->size > size) {
      ArenaBlock rest = {.offset = b->offset + size, .size = b->size - size, .used = 0};
      if (insert_block(a, i + 1, rest)) return NULL;
      b = &a->blocks[i];
      b->size = size;
    }
    b->used = 1;
    b->bytes = bytes;
    b->cat = cat;
    account(a, cat, bytes, +1);
    a->last_fresh = b->offset >= a->untouched;
    if (b->offset + b->size > a->untouched) a->untouched = b->offset + b->size;
    return a->base + b->offset;
  }
  osdp_fail("arena: address space exhausted allocating %zu bytes for %s", bytes, what);
  return NULL;
}

void* arena_alloc(Arena* a, size_t bytes, MemCategory cat, const char* what) {
  void* p = arena_alloc_uninit(a, bytes, cat, what);
  /* Memory never handed out is still the reservation's zeros where the backend says so: the
  ** fill would only touch every page now instead of at first use. */
  if (p && !(a->mem.reserved_zero && a->last_fresh)) a->mem.zero(p, bytes);
  return p;
}

/* Finds the index of the used block starting at p, or -1 (binary search by offset). */
static int find_block(const Arena* a, const void* p) {
  size_t off = (size_t)((const char*)p - a->base);
  int lo = 0, hi = a->nblocks - 1;
  while (lo <= hi) {
    int mid = (lo + hi) / 2;
    if (a->blocks[mid].offset == off) return a->blocks[mid].used ? mid : -1;
    if (a->blocks[mid].offset < off) lo = mid + 1; else hi = mid - 1;
  }
  return -1;
}

void arena_free(Arena* a, void* p) {
  if (!p) return;
  int i = find_block(a, p);
  if (i < 0) { fprintf(stderr, "osdp: internal error: arena_free of unknown block\n"); abort(); }
  account(a, a->blocks[i].cat, a->blocks[i].bytes, -1);
  a->blocks[i].used = 0;
  a->blocks[i].bytes = 0;
  if (i + 1 < a->nblocks && !a->blocks[i + 1].used) {
    a->blocks[i].size += a->blocks[i + 1].size;
    remove_block(a, i + 1);
  }
  if (i > 0 && !a->blocks[i - 1].used) {
    a->blocks[i - 1].size += a->blocks[i].size;
    remove_block(a, i);
  }
}

void arena_reset_peak(Arena* a) {
  memcpy(a->peak, a->cur, sizeof a->cur);
  memcpy(a->peak_at, a->cur, sizeof a->cur);
  a->peak_total = a->cur_total;
}
