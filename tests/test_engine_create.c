/*
** test_engine_create.c: engine_create fails cleanly at each of its failure points. A failed
** create returns -1 with an error message and leaves nothing behind: every host block it
** allocated freed, the arena's reservation released, the Engine zeroed (so engine_destroy on
** it, which some callers still do, is a no-op).
**  1. The checks before anything is allocated or reserved: a plan for another world size, a
**     slice count the op does not allow, a memory limit one byte below the predicted peak, a
**     plan larger than the host's memory without a limit, and a backend that cannot reserve
**     the arena.
**  2. Every allocation engine_create makes: for n = 0, 1, 2, ... the n-th call to malloc,
**     calloc, realloc, arena_alloc or arena_alloc_uninit from the library fails, until a create
**     makes fewer than n calls. The link wraps those functions (-Wl,--wrap, tests/runtime.cmake)
**     to count and fail them and to count the host blocks live; the arena's reservation is
**     counted by the test's backend. An allocation whose failure has a fallback (the memory
**     prediction's bound when its replay cannot be allocated) may let the create succeed; the
**     engine is then destroyed and must leave nothing either.
** Both run for a plan that has every kind of state (dp, zero2 and zero3 slices of split ops, a
** recomputed layer, prefetch, overlapped reduce-scatters, several dp buckets) on the CPU backend
** and on the staged one (device memory: weights initialised through host buffers).
*/
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "comm/comm.h"
#include "core/arena.h"
#include "core/util.h"
#include "kernels/backend.h"
#include "model/gpt.h"
#include "model/plan.h"
#include "runtime/engine.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/lsan_interface.h>
#endif

/* ---- The library's allocations, counted and failed on demand (the link wraps them) --------- */

void* __real_malloc(size_t n);
void* __real_calloc(size_t n, size_t size);
void* __real_realloc(void* p, size_t n);
void __real_free(void* p);
void* __real_arena_alloc(Arena* a, size_t bytes, MemCategory cat, const char* what);
void* __real_arena_alloc_uninit(Arena* a, size_t bytes, MemCategory cat, const char* what);

static long g_live;          /* host blocks the library has allocated and not freed */
static long g_calls;         /* allocation calls since the count was armed */
static long g_fail_at = -1;  /* the call (counted from 0) that fails; -1: none */
static int g_failed;         /* the armed failure happened */

/* Whether this allocation call is the one that fails. */
static int inject(void) {
  if (g_fail_at < 0 || g_calls++ != g_fail_at) return 0;
  g_failed = 1;
  return 1;
}

/* Wrapped malloc: counted, failing when armed. */
void* __wrap_malloc(size_t n) {
  void* p = inject() ? NULL : __real_malloc(n);
  if (p) g_live++;
  return p;
}

/* Wrapped calloc: counted, failing when armed. */
void* __wrap_calloc(size_t n, size_t size) {
  void* p = inject() ? NULL : __real_calloc(n, size);
  if (p) g_live++;
  return p;
}

/* Wrapped realloc: a new block when p is NULL; failing when armed (p then stays allocated). */
void* __wrap_realloc(void* p, size_t n) {
  void* q = inject() ? NULL : __real_realloc(p, n);
  if (q && !p) g_live++;
  return q;
}

/* Wrapped free: counted. */
void __wrap_free(void* p) {
  if (p) g_live--;
  __real_free(p);
}

/* Wrapped arena allocations: failing when armed, with the error the arena gives when full. */
void* __wrap_arena_alloc(Arena* a, size_t bytes, MemCategory cat, const char* what) {
  if (inject()) { osdp_fail("test: arena allocation for %s refused", what); return NULL; }
  return __real_arena_alloc(a, bytes, cat, what);
}
void* __wrap_arena_alloc_uninit(Arena* a, size_t bytes, MemCategory cat, const char* what) {
  if (inject()) { osdp_fail("test: arena allocation for %s refused", what); return NULL; }
  return __real_arena_alloc_uninit(a, bytes, cat, what);
}

/* ---- A backend whose arena reservations are counted ---------------------------------------- */

static const Backend* g_base;  /* the backend it wraps */
static Backend g_backend;      /* g_base with counted reserve / release */
static int g_reserved;         /* reservations not released */
static int g_refuse;           /* 1: reserve fails */

/* Reserves through the wrapped backend, or refuses when g_refuse is set. */
static void* counted_reserve(size_t bytes) {
  if (g_refuse) { osdp_fail("test: reservation of %zu bytes refused", bytes); return NULL; }
  void* p = g_base->reserve(bytes);
  if (p) g_reserved++;
  return p;
}

/* Releases through the wrapped backend. */
static void counted_release(void* base, size_t bytes, size_t written) {
  g_reserved--;
  g_base->release(base, bytes, written);
}

/* Makes g_backend the backend `base` with counted reservations. */
static const Backend* counted_backend(const Backend* base) {
  g_base = base;
  g_backend = *base;
  g_backend.reserve = counted_reserve;
  g_backend.release = counted_release;
  return &g_backend;
}

/* ---- The checks ------------------------------------------------------------------------------ */

/* A small model where no size is a power of two, a padded vocabulary. */
static const GptConfig test_cfg = {.name = "odd", .n_layer = 2, .n_embd = 18, .n_head = 3,
                                   .vocab_size = 37, .padded_vocab = 128, .max_seq = 16};

/* The plan with every kind of state: every splittable op in 3 slices cycling through dp, zero2
** and zero3, layer 0 recomputed, prefetch, overlapped reduce-scatters. */
static void make_plan(Plan* p, const GptDesc* d) {
  CHECK(plan_uniform(p, d, STRAT_DP, 1, 2, 7) == 0);
  for (int i = 0; i < d->nops; i++)
    if (d->ops[i].splittable) {
      p->ops[i].k = 3;
      for (int j = 0; j < 3; j++) p->ops[i].strat[j] = (Strategy)((i + j) % STRAT_COUNT);
    }
  plan_set_recompute(p, 1);
  p->prefetch = 1;
  p->overlap_reduce = 1;
}

/* Checks what a failed create must leave: -1, an error, no host block or reservation left
** since live0, e zeroed; then engine_destroy on it (a no-op). */
static void check_left_clean(const char* what, long n, int rc, Engine* e, long live0) {
  Engine zero;
  memset(&zero, 0, sizeof zero);
  CHECK_MSG(rc == -1, "%s %ld: engine_create returned %d", what, n, rc);
  CHECK_MSG(osdp_last_error()[0] != 0, "%s %ld: failed without an error", what, n);
  CHECK_MSG(g_live == live0, "%s %ld: %ld host blocks left allocated", what, n, g_live - live0);
  CHECK_MSG(g_reserved == 0, "%s %ld: the arena is still reserved", what, n);
  CHECK_MSG(memcmp(e, &zero, sizeof *e) == 0, "%s %ld: the engine is not left zeroed", what, n);
  engine_destroy(e);
}

/* engine_create of plan p with options o must fail cleanly (check 1). */
static void expect_failure(const char* what, const GptDesc* d, const Plan* p, const TrainOptions* o) {
  Engine e;
  long live0 = g_live;
  osdp_clear_error();
  int rc = engine_create(&e, d, p, o);
  check_left_clean(what, 0, rc, &e, live0);
}

/* The checks before anything is allocated or reserved (check 1). */
static void check_early_failures(const GptDesc* d, const Plan* good, const TrainOptions* o0) {
  Plan p;
  TrainOptions o = *o0;
  CHECK(plan_copy(&p, good) == 0);
  p.world = 2; /* this test runs on one rank */
  expect_failure("plan for 2 ranks", d, &p, &o);
  p.world = 1;
  int op = 1;
  while (!d->ops[op].splittable) op++;
  p.ops[op].k = GPT_MAX_SLICES + 1;
  expect_failure("too many slices", d, &p, &o);
  plan_free(&p);
  MemPrediction m;
  plan_predict_memory(d, good, o.threads, &m);
  o.mem_limit = m.peak - 1;
  expect_failure("memory limit below the peak", d, good, &o);
  o.mem_limit = 0;
  /* Without a limit the plan must fit the host's available memory: a micro-batch so large that
  ** its activations do not. */
  CHECK(plan_copy(&p, good) == 0);
  size_t avail = host_available_bytes();
  for (p.micro_batch = 1 << 10; avail && p.micro_batch < (1 << 28); p.micro_batch *= 2) {
    plan_predict_memory(d, &p, o.threads, &m);
    if (m.peak > avail) break;
  }
  CHECK_MSG(!avail || m.peak > avail, "no micro-batch up to %d exceeds the host", p.micro_batch);
  if (avail && m.peak > avail) expect_failure("larger than the host", d, &p, &o);
  plan_free(&p);
  g_refuse = 1;
  expect_failure("arena not reserved", d, good, &o);
  g_refuse = 0;
}

/* Fails each allocation of engine_create in turn (check 2). Returns how many failed it; *fallbacks
** receives how many it survived. */
static int check_every_allocation(const char* what, const GptDesc* d, const Plan* p,
                                  const TrainOptions* o, int* fallbacks) {
  int failures = 0;
  *fallbacks = 0;
  for (long n = 0;; n++) {
    Engine e;
    long live0 = g_live;
    osdp_clear_error();
    g_calls = 0;
    g_failed = 0;
    g_fail_at = n;
    int rc = engine_create(&e, d, p, o);
    g_fail_at = -1;
    if (rc == 0) { /* no failure, or one with a fallback: the engine must work and let go */
      StepResult sr;
      int* batch = calloc(2 * 7 * 2, sizeof *batch);
      CHECK(batch != NULL);
      if (batch) engine_set_batch(&e, batch, batch + 2 * 7);
      free(batch);
      engine_step(&e, 2 * 7, NULL, NULL, &sr);
      CHECK_MSG(isfinite(sr.loss), "%s %ld: the engine's step is not finite", what, n);
      engine_destroy(&e);
      CHECK_MSG(g_live == live0 && g_reserved == 0, "%s %ld: destroy left %ld blocks, %d reservations",
                what, n, g_live - live0, g_reserved);
      if (!g_failed) break; /* a create with fewer than n + 1 allocations: every one was failed */
      ++*fallbacks;
      continue;
    }
    CHECK_MSG(g_failed, "%s %ld: failed without an injected failure: %s", what, n, osdp_last_error());
    check_left_clean(what, n, rc, &e, live0);
    failures++;
  }
  return failures;
}

/* Runs every check on one rank and prints "N passed, M failed". */
int main(int argc, char** argv) {
  /* What MPI_Init allocates is Open MPI's: not counted as leaks (some of it comes from
  ** components unloaded by then, which lsan_mpi.supp cannot name). */
#if defined(__SANITIZE_ADDRESS__)
  __lsan_disable();
#endif
  comm_init(&argc, &argv);
#if defined(__SANITIZE_ADDRESS__)
  __lsan_enable();
#endif
  GptDesc d;
  CHECK(gpt_desc_build(&d, &test_cfg) == 0);
  Plan p;
  make_plan(&p, &d);
  TrainOptions o;
  train_options_default(&o);
  o.threads = 1;
  o.bucket_bytes = 2048; /* several dp buckets */
  const Backend* bases[2] = {backend_cpu(), backend_cpu_staged()};
  for (int b = 0; b < 2; b++) {
    o.backend = counted_backend(bases[b]);
    check_early_failures(&d, &p, &o);
    int fallbacks;
    int failures = check_every_allocation(bases[b]->name, &d, &p, &o, &fallbacks);
    /* Host blocks, arena blocks: dozens of each (per op, per slice, per bucket). */
    CHECK_MSG(failures > 50, "%s: only %d failure points", bases[b]->name, failures);
    printf("%s: engine_create failed cleanly at %d allocations (and survived %d with a "
           "fallback)\n", bases[b]->name, failures, fallbacks);
  }
  plan_free(&p);
  gpt_desc_free(&d);
#if defined(__SANITIZE_ADDRESS__)
  /* Under ASan with detect_leaks=1 (tests/runtime.cmake sets it; MPI's own blocks are still
  ** reachable before comm_finalize, and the check at exit is off): nothing is unreachable. */
  CHECK_MSG(__lsan_do_recoverable_leak_check() == 0, "LeakSanitizer found leaks (above)");
#endif
  int rc = check_summary();
  comm_finalize();
  return rc;
}
