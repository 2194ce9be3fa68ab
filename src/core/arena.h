/*
** arena.h: the one memory arena that owns every tensor of a rank.
**
** The arena reserves one block of memory once (on the CPU address space whose pages are
** committed on first touch; on a GPU one cudaMalloc) through the ArenaMemory of its backend,
** and hands out blocks from it with a first-fit free list, so a training step never allocates.
** The bookkeeping lives on the host; the memory may not be host-addressable.
** It accounts the exact bytes requested per category, current and peak; the capacity is
** the device memory limit, checked against those exact bytes. The planner predicts the
** same numbers from the model description, so the two can be compared to the byte.
*/
#ifndef OSDP_ARENA_H
#define OSDP_ARENA_H

#include <stddef.h>

typedef enum MemCategory {
  MEM_PARAMS = 0,  /* weights a rank keeps between steps (full or its shard) */
  MEM_GRADS,       /* gradients a rank keeps between steps (full or its shard) */
  MEM_OPTIM,       /* AdamW m and v */
  MEM_ACTS,        /* activations kept from forward for backward */
  MEM_SCRATCH,     /* per-step working buffers reused across operators (activation grads) */
  MEM_GATHER,      /* transient: gathered full weights and full gradients of sharded slices */
  MEM_CATEGORY_COUNT
} MemCategory;

/* Short lowercase name of a category ("params", "grads", ...). */
const char* mem_category_name(MemCategory c);

/* Where the arena's block comes from (a backend's memory functions; see kernels/backend.h). */
typedef struct ArenaMemory {
  void* (*reserve)(size_t bytes);           /* NULL with an error when it cannot */
  void (*release)(void* base, size_t bytes, size_t written); /* written: the prefix used */
  void (*zero)(void* p, size_t bytes);
  size_t (*available)(void);                /* bytes reserve can still give; 0 = not bounded */
  int reserved_zero;                        /* 1: freshly reserved memory reads as zeros (the
                                            ** CPU's anonymous mappings), so a block never
                                            ** handed out before needs no zero fill */
} ArenaMemory;

typedef struct ArenaBlock { size_t offset, size, bytes; int used; MemCategory cat; } ArenaBlock;

typedef struct Arena {
  ArenaMemory mem;
  char* base;              /* start of the reserved address range */
  size_t reserved;         /* bytes of address space reserved */
  size_t capacity;         /* limit on live bytes; 0 = unlimited */
  ArenaBlock* blocks;      /* blocks sorted by offset, covering [0, reserved) */
  int nblocks, maxblocks;
  size_t cur[MEM_CATEGORY_COUNT], peak[MEM_CATEGORY_COUNT];
  size_t cur_total, peak_total;
  size_t peak_at[MEM_CATEGORY_COUNT]; /* per-category bytes at the moment of the total peak */
  size_t untouched;        /* bytes from here to the end were never handed out */
  int last_fresh;          /* the last block allocated lay wholly in the untouched range */
} Arena;

/* Reserves the arena from mem. capacity = limit on live bytes (0: unlimited). Where mem is
** bounded (available() > 0: a GPU), the block is the capacity plus room for alignment and
** fragmentation (capacity / 16 + 64 MiB), at most what is available; unlimited takes what is
** available less 256 MiB. Unbounded memory (the CPU) reserves twice the capacity plus 64 MiB of
** address space, or 1 TiB when unlimited. Returns 0, or -1 with an error (then it holds
** nothing: arena_destroy on it does nothing). */
int arena_init(Arena* a, size_t capacity, const ArenaMemory* mem);
/* Releases the arena and everything in it. */
void arena_destroy(Arena* a);
/* Allocates `bytes` (64-byte aligned, zero-filled) in category `cat`; `what` names the
** tensor in the error message. Returns NULL with an error showing the breakdown when the
** capacity would be exceeded. */
void* arena_alloc(Arena* a, size_t bytes, MemCategory cat, const char* what);
/* arena_alloc without the zero fill, for a block whose every byte the caller writes before
** reading it (a gathered weight, an overwritten gradient): its contents are undefined. */
void* arena_alloc_uninit(Arena* a, size_t bytes, MemCategory cat, const char* what);
/* Returns a block to the arena. p may be NULL. */
void arena_free(Arena* a, void* p);
/* Forgets the peaks (so a fresh measurement can start from the current state). */
void arena_reset_peak(Arena* a);
/* Writes a one-line breakdown "params 1.2 MiB, grads ..., total ..." of current bytes. */
void arena_describe(const Arena* a, char* buf, size_t n);

#endif
