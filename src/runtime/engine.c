/* engine.c: the training runtime for one rank; see engine.h. */
#include "runtime/engine.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"

void train_options_default(TrainOptions* o) {
  memset(o, 0, sizeof *o);
  o->lr = 1e-3;
  o->beta1 = 0.9;
  o->beta2 = 0.95;
  o->eps = 1e-8;
  o->weight_decay = 0.1;
  o->grad_clip = 1.0;
  o->lr_min_ratio = 0.1;
  o->seed = 1337;
  o->threads = 1;
  o->bucket_bytes = PLAN_BUCKET_BYTES;
}

/* ---- Parameter hooks: where the model's slices come from ---------------------------- */

/* A transient buffer of `bytes` in the arena, without zeroing (every caller writes all of it
** before reading); out of arena memory aborts the job: the plan was checked against the
** memory prediction, so this is a bug. */
static void* transient_bytes(Engine* e, size_t bytes, const char* what) {
  void* p = arena_alloc_uninit(&e->arena, bytes, MEM_GATHER, what);
  if (!p) { fprintf(stderr, "osdp: error: %s\n", osdp_last_error()); comm_abort(3); }
  return p;
}

/* A transient buffer of n floats (transient_bytes). */
static float* transient_floats(Engine* e, size_t n, const char* what) {
  return transient_bytes(e, n * sizeof(float), what);
}

/* Starts (request r) or makes (r NULL) the all-gather of zero3 slice s's weight into `into`, or
** when NULL a new transient buffer, which it returns: the fp32 shards, or under bf16 storage the
** shards' bf16 compute copies (half the bytes). */
static void* gather_weight(Engine* e, SliceState* s, void* into, CommRequest* r, const char* what) {
  if (!s->wc) {
    float* full = into ? into : transient_floats(e, s->n_pad, what);
    if (r) comm_iallgather_into_f32(s->group, s->w, full, s->shard, r);
    else comm_allgather_into_f32(s->group, s->w, full, s->shard);
    return full;
  }
  osdp_bf16* full = into ? into : transient_bytes(e, s->n_pad * sizeof(osdp_bf16), what);
  if (r) comm_iallgather_into_bf16(s->group, s->wc, full, s->shard, r);
  else comm_allgather_into_bf16(s->group, s->wc, full, s->shard);
  return full;
}

/* Waits for every collective the step started: the dp buckets' all-reduces and the hybrid
** shards' all-reduces across groups. */
static void wait_all(Engine* e) {
  for (int b = 0; b < e->nbuckets; b++) comm_wait(&e->buckets[b].req);
  for (int opi = 0; opi < e->d->nops; opi++)
    for (int i = 0; e->slices[opi] && i < e->slice_counts[opi]; i++)
      comm_wait(&e->slices[opi][i].across_req);
}

/* Does what the step walk decides for a parameter use (step_walk.h), with the arena's buffers
** and the slice's communicators. A gathered weight or full gradient is allocated without
** zeroing: a gather writes all n_pad elements, and a fresh gradient use writes all n (only the
** padding, which no kernel writes but the reduce-scatter reads, is zeroed here). What a slice
** keeps across the step (arg WALK_KEPT) is its own buffer: gathered into, reduced, never freed. */
static void engine_action(void* ctx, WalkAction a, const GptParamUse* u, int arg) {
  Engine* e = ctx;
  SliceState* s = u ? &e->slices[u->owner][u->slice] : NULL;
  switch (a) {
    case WALK_GATHER:
      s->gathered = gather_weight(e, s, arg & WALK_KEPT ? s->kept_w : NULL, NULL, "gathered weight");
      break;
    case WALK_PREFETCH:
      e->pending_buf = gather_weight(e, s, NULL, &e->pending_req, "prefetched weight");
      break;
    case WALK_TAKE_PREFETCH:
      comm_wait(&e->pending_req);
      s->gathered = e->pending_buf;
      e->pending_buf = NULL;
      break;
    case WALK_FREE_WEIGHT:
      arena_free(&e->arena, s->gathered);
      s->gathered = NULL;
      break;
    case WALK_ALLOC_GRAD:
      s->gfull = transient_floats(e, s->n_pad, "full gradient");
      if (s->n_pad > s->n) e->bk->zero(s->gfull + s->n, (s->n_pad - s->n) * sizeof(float));
      break;
    case WALK_REDUCE:
      comm_reduce_scatter_f32(s->group, s->gfull, s->g, s->shard, e->reduce_dtype, arg & 1);
      if (arg & WALK_KEPT) break;
      arena_free(&e->arena, s->gfull);
      s->gfull = NULL;
      break;
    case WALK_REDUCE_START: /* the request owns this use's full gradient now (the slice's next
                            ** use gets its own; a kept one is the last use of the step) */
      comm_ireduce_scatter_f32(s->group, s->gfull, s->g, s->shard, e->reduce_dtype, arg & 1,
                               &e->reducing_req);
      if (arg & WALK_KEPT) break;
      e->reducing_buf = s->gfull;
      s->gfull = NULL;
      break;
    case WALK_REDUCE_WAIT:
      comm_wait(&e->reducing_req);
      if (arg & WALK_KEPT) break;
      arena_free(&e->arena, e->reducing_buf);
      e->reducing_buf = NULL;
      break;
    case WALK_ACROSS_START:
      comm_iallreduce_f32(s->across, s->g, s->shard, e->reduce_dtype, &s->across_req);
      break;
    case WALK_BUCKET_START:
      comm_iallreduce_f32(comm_world(), e->buckets[arg].buf, e->buckets[arg].n, e->reduce_dtype,
                          &e->buckets[arg].req);
      break;
    case WALK_WAIT_ALL:
      wait_all(e);
      break;
  }
}

/* Lets outstanding gradient all-reduces progress while compute goes on: the dp buckets' and
** the hybrid shards' across groups. MPI moves a non-blocking collective only inside MPI calls,
** so without this a shard's all-reduce between hosts waited for the step's end unless other
** collectives (zero3's gathers) happened to drive it: small's zero2 within hosts at 150 Mbit/s
** measured 1.8x its prediction, zero3 within hosts 1.07x. */
static void progress_reductions(Engine* e) {
  for (int b = 0; b < e->nbuckets; b++)
    if (e->buckets[b].req.active) comm_test(&e->buckets[b].req);
  for (int opi = 0; opi < e->d->nops; opi++)
    for (int i = 0; e->slices[opi] && i < e->slice_counts[opi]; i++)
      if (e->slices[opi][i].across_req.active) comm_test(&e->slices[opi][i].across_req);
}

/* A use the step makes that is not the schedule's next (gpt_param_schedule is the step's own
** order, checked by the tests): a bug. */
static void schedule_error(void) {
  fprintf(stderr, "osdp: internal error: parameter use out of schedule\n");
  comm_abort(4);
}

/* Returns the full weights of a slice: the local weight, or for a fully sharded slice the one
** the walk has gathered (or taken from the prefetch started at the previous zero3 use). */
static void* hook_acquire_weight(void* ctx, int owner, int slice, GptPhase phase) {
  Engine* e = ctx;
  SliceState* s = &e->slices[owner][slice];
  progress_reductions(e);
  if (walk_weight_begin(e->walk, owner, slice, phase)) schedule_error();
  if (s->strat == STRAT_ZERO3) return s->gathered;
  return s->wc ? s->wc : s->w;
}

/* The weight of the use is done with (a gathered one is freed). */
static void hook_release_weight(void* ctx, int owner, int slice, GptPhase phase) {
  Engine* e = ctx;
  (void)phase;
  if (walk_weight_end(e->walk, owner, slice)) schedule_error();
}

/* Returns the buffer a slice's gradient goes into: the persistent full gradient for dp and the
** kept one of a sharded slice (fresh at its first use of the step: nothing zeroes it, the step
** overwrites it), the transient full one the walk allocated for the other sharded slices
** (always fresh). */
static void* hook_acquire_grad(void* ctx, int owner, int slice, int* fresh) {
  Engine* e = ctx;
  SliceState* s = &e->slices[owner][slice];
  int first = walk_grad_begin(e->walk, owner, slice);
  if (first < 0) schedule_error();
  *fresh = (s->strat != STRAT_DP && !s->kept_g) || first;
  return s->strat == STRAT_DP ? s->g : s->gfull;
}

/* A use of a slice's gradient is complete: the walk reduces it (sharded: reduce-scatter into
** the shard; dp: its bucket's all-reduce once every member is final). */
static void hook_release_grad(void* ctx, int owner, int slice) {
  Engine* e = ctx;
  if (walk_grad_end(e->walk, owner, slice)) schedule_error();
}

/* ---- Construction -------------------------------------------------------------------- */

/* Fills a slice's sizes and communicators from its op and plan entry: a sharded slice is
** sharded over its op's group (comm_group, made here on first use: every rank creates the same
** groups in the same order) and holds the shard of its index in that group. */
static void slice_geometry(const GptDesc* d, const Plan* p, int opi, int i, SliceState* s) {
  const GptOp* op = &d->ops[opi];
  int k = p->ops[opi].k, G = plan_op_group(p, opi);
  s->strat = p->ops[opi].strat[i];
  s->n = gpt_slice_params(op, k, i);
  s->group = s->strat == STRAT_DP ? comm_world() : comm_group(G);
  s->across = s->strat == STRAT_DP ? NULL : comm_across(G);
  s->n_pad = slice_padded(s->n, s->strat, G, p->precision);
  s->shard = slice_shard(s->n, s->strat, G, p->precision);
  s->off = s->strat == STRAT_DP ? 0 : (size_t)comm_rank_in(s->group) * s->shard;
  size_t r0 = gpt_slice_row0(op->rows, k, i), r1 = gpt_slice_row0(op->rows, k, i + 1);
  s->rows_n = (r1 - r0) * op->width;
  s->tail_decay = op->tail_decay;
}

/* Places the activation blocks as gpt_acts_layout says: each op's own block, and one buffer
** shared by the layers that recompute. */
static int alloc_activations(Engine* e) {
  const GptDesc* d = e->d;
  const Plan* p = &e->plan;
  size_t* own = malloc((size_t)d->nops * sizeof *own);
  size_t* off = malloc((size_t)d->nops * sizeof *off);
  size_t shared = 0;
  if (!own || !off) { free(own); free(off); return osdp_fail("out of memory"); }
  gpt_acts_layout(d, p->micro_batch, p->seq, p->precision, p->recompute, own, off, &shared);
  char* buf = shared ? arena_alloc(&e->arena, shared, MEM_ACTS, "recompute buffer") : NULL;
  int rc = shared && !buf ? -1 : 0;
  for (int opi = 0; !rc && opi < d->nops; opi++) {
    if (off[opi] != (size_t)-1) { e->act_ptrs[opi] = buf + off[opi]; continue; }
    e->act_ptrs[opi] = arena_alloc(&e->arena, own[opi], MEM_ACTS, d->ops[opi].name);
    if (!e->act_ptrs[opi]) rc = -1;
  }
  free(own);
  free(off);
  return rc;
}

/* Groups the dp gradients into the walk's buckets (plan_dp_buckets: the order backward finishes
** them, last op first, embed last) and allocates each bucket as one block, so a bucket is
** all-reduced in one call. */
static int build_buckets(Engine* e) {
  const GptDesc* d = e->d;
  e->nbuckets = walk_bucket_count(e->walk);
  e->buckets = calloc((size_t)(e->nbuckets ? e->nbuckets : 1), sizeof *e->buckets);
  if (!e->buckets) return osdp_fail("out of memory");
  for (int pass = 0; pass < 2; pass++) {
    /* Pass 0 sizes the buckets; pass 1 gives each member its view, in the same order. */
    for (int opi = d->nops - 1; opi >= 0; opi--) {
      for (int i = 0; e->slices[opi] && i < e->slice_counts[opi]; i++) {
        SliceState* s = &e->slices[opi][i];
        int b = walk_bucket_of(e->walk, opi, i);
        if (b < 0) continue;
        GradBucket* g = &e->buckets[b];
        if (pass == 1) s->g = g->buf + g->n;
        g->n += s->n;
      }
    }
    for (int b = 0; pass == 0 && b < e->nbuckets; b++) {
      e->buckets[b].buf = arena_alloc(&e->arena, e->buckets[b].n * sizeof(float), MEM_GRADS,
                                      "dp gradient bucket");
      if (!e->buckets[b].buf) return -1;
      e->buckets[b].n = 0; /* refilled in pass 1 as the members' offsets are assigned */
    }
  }
  return 0;
}

/* The elements of a slice's bf16 compute copy: the shard a zero3 rank holds (gathered before
** each use), the n weights the step reads otherwise. */
static size_t compute_copy_count(const SliceState* s) {
  return s->strat == STRAT_ZERO3 ? s->shard : s->n;
}

/* Allocates what slice i of op opi keeps whole across the step (plan_keeps_weight/_grad,
** slice_kept_bytes): its gathered weight, in the elements the step reads, and its full gradient,
** zeroed (the padding is never written, and the reduce-scatter reads it). */
static int alloc_kept(Engine* e, int opi, int i, SliceState* s) {
  if (plan_keeps_weight(&e->plan, opi, i)) {
    size_t elem = precision_elems(e->plan.precision).wt;
    s->kept_w = arena_alloc(&e->arena, s->n_pad * elem, MEM_PARAMS, "kept gathered weight");
    if (!s->kept_w) return -1;
    s->gathered = s->kept_w;
  }
  if (plan_keeps_grad(&e->plan, opi, i)) {
    s->kept_g = arena_alloc(&e->arena, s->n_pad * sizeof(float), MEM_GRADS, "kept full gradient");
    if (!s->kept_g) return -1;
    s->gfull = s->kept_g;
  }
  return 0;
}

/* Allocates a slice's weight, shard gradient and optimizer state and initialises the
** weights this rank holds. */
static int alloc_slice(Engine* e, int opi, int i, SliceState* s) {
  size_t held_w = s->strat == STRAT_ZERO3 ? s->shard : s->n_pad;
  s->w = arena_alloc(&e->arena, held_w * sizeof(float), MEM_PARAMS, e->d->ops[opi].name);
  if (!s->w) return -1;
  if (s->strat != STRAT_DP) {
    s->g = arena_alloc(&e->arena, s->shard * sizeof(float), MEM_GRADS, e->d->ops[opi].name);
    if (!s->g) return -1;
  }
  s->m = arena_alloc(&e->arena, s->shard * sizeof(float), MEM_OPTIM, e->d->ops[opi].name);
  s->v = s->m ? arena_alloc(&e->arena, s->shard * sizeof(float), MEM_OPTIM, e->d->ops[opi].name) : NULL;
  if (!s->v) return -1;
  size_t base = gpt_slice_offset(&e->d->ops[opi], e->slice_counts[opi], i);
  size_t first = s->strat == STRAT_ZERO3 ? s->off : 0;
  size_t count = first < s->n ? s->n - first : 0;
  if (count > held_w) count = held_w;
  /* Initialised on the host, then copied in (in place on the CPU). */
  float* host = e->bk->device_memory ? malloc((count ? count : 1) * sizeof(float)) : s->w;
  if (!host) return osdp_fail("out of host memory initialising %s", e->d->ops[opi].name);
  if (e->opt.timing_only) {
    gpt_init_range_fast(e->d, opi, base + first, count, e->opt.seed, host);
  } else {
#pragma omp parallel for schedule(static)
    for (long j = 0; j < (long)count; j++)
      host[j] = gpt_init_value(e->d, opi, base + first + (size_t)j, e->opt.seed);
  }
  if (host != s->w) {
    e->bk->to_device(s->w, host, count * sizeof(float));
    free(host);
  }
  if (e->plan.precision == PRECISION_BF16) { /* the compute copy of what the rank holds */
    size_t held = compute_copy_count(s);
    s->wc = arena_alloc(&e->arena, held * sizeof(osdp_bf16), MEM_PARAMS, e->d->ops[opi].name);
    if (!s->wc) return -1;
    e->bk->bf16->compute_copy(s->wc, s->w, held);
  }
  return alloc_kept(e, opi, i, s);
}

/* Rounds every slice's master weights into its compute copy (bf16 storage; nothing in fp32):
** after each update and wherever the master weights are set. */
static void refresh_compute_copies(Engine* e) {
  for (int opi = 0; opi < e->d->nops; opi++)
    for (int i = 0; e->slices[opi] && i < e->slice_counts[opi]; i++) {
      SliceState* s = &e->slices[opi][i];
      if (s->wc) e->bk->bf16->compute_copy(s->wc, s->w, compute_copy_count(s));
    }
}

/* Says why a plan does not fit the memory limit, with the least memory it needs. */
static int memory_limit_error(const Engine* e) {
  char need[32], lim[32], pa[32], ac[32], tr[32];
  const MemPrediction* m = &e->predicted;
  return osdp_fail("--mem-limit: %s is too small: this plan needs %s per rank at micro-batch %d, "
                   "seq %d (states %s, activations %s, transient %s); raise --mem-limit to at "
                   "least %s, or lower --batch / --seq, or shard more",
                   format_bytes((double)e->opt.mem_limit, lim), format_bytes((double)m->peak, need),
                   e->plan.micro_batch, e->plan.seq,
                   format_bytes((double)(m->params + m->grads + m->optim), pa),
                   format_bytes((double)(m->acts + m->scratch), ac),
                   format_bytes((double)m->transient, tr), need);
}

/* Without --mem-limit on the CPU: the plan must fit the memory this host has available, shared by
** the ranks on it (comm_host), or it fails now with what it needs instead of being killed by the
** kernel minutes later. */
static int host_memory_error(const Engine* e) {
  size_t avail = host_available_bytes();
  long ranks = comm_size_of(comm_host());
  if (!avail || e->predicted.peak <= avail / (size_t)ranks) return 0;
  char need[32], have[32];
  return osdp_fail("memory: this plan needs %s per rank at micro-batch %d, seq %d, but the host has "
                   "%s available for %ld rank(s); lower --batch or --seq, shard more (--plan zero3), or "
                   "recompute (--recompute all)", format_bytes((double)e->predicted.peak, need),
                   e->plan.micro_batch, e->plan.seq, format_bytes((double)avail, have), ranks);
}

/* Builds what engine_create promises into e (zeroed, with d, opt, bk, rank and world set), in
** the order the memory prediction counts it. Returns 0, or -1 with an error, leaving whatever
** it built for engine_destroy. */
static int engine_build(Engine* e, const GptDesc* d, const Plan* p, const TrainOptions* opt) {
  if (plan_validate(p, d, e->world) || backend_check_precision(e->bk, p->precision) ||
      plan_copy(&e->plan, p))
    return -1;
  e->bk->set_threads(opt->threads);
  comm_use_backend(e->bk);
  e->reduce_dtype = p->reduce_dtype == REDUCE_BF16 ? COMM_BF16 : COMM_FP32;
  plan_predict_memory(d, p, opt->threads, &e->predicted);
  if (opt->mem_limit && e->predicted.peak > opt->mem_limit) return memory_limit_error(e);
  if (!opt->mem_limit && !e->bk->available() && host_memory_error(e)) return -1;
  ArenaMemory mem = {e->bk->reserve, e->bk->release, e->bk->zero, e->bk->available,
                     e->bk->reserve_zeroed};
  if (arena_init(&e->arena, opt->mem_limit, &mem)) return -1;
  e->slices = calloc((size_t)d->nops, sizeof *e->slices);
  e->slice_counts = calloc((size_t)d->nops, sizeof *e->slice_counts);
  e->act_ptrs = calloc((size_t)d->nops, sizeof *e->act_ptrs);
  if (!e->slices || !e->slice_counts || !e->act_ptrs) return osdp_fail("out of memory");
  plan_slice_counts(p, e->slice_counts);
  for (int opi = 0; opi < d->nops; opi++) {
    if (!d->ops[opi].n_params) continue;
    e->slices[opi] = calloc((size_t)e->slice_counts[opi], sizeof(SliceState));
    if (!e->slices[opi]) return osdp_fail("out of memory");
    for (int i = 0; i < e->slice_counts[opi]; i++) {
      slice_geometry(d, p, opi, i, &e->slices[opi][i]);
      if (alloc_slice(e, opi, i, &e->slices[opi][i])) return -1;
    }
  }
  size_t parts = 1; /* two per slice, and never a zero-sized malloc */
  for (int opi = 0; opi < d->nops; opi++) parts += 2 * (size_t)e->slice_counts[opi];
  SliceLists* l = &e->lists;
  l->w = malloc(parts * sizeof *l->w);
  l->g = malloc(parts * sizeof *l->g);
  l->m = malloc(parts * sizeof *l->m);
  l->v = malloc(parts * sizeof *l->v);
  l->n = malloc(parts * sizeof *l->n);
  l->wd = malloc(parts * sizeof *l->wd);
  if (!l->w || !l->g || !l->m || !l->v || !l->n || !l->wd) return osdp_fail("out of memory");
  e->walk = walk_create(d, &e->plan, opt->bucket_bytes, engine_action, e);
  if (!e->walk || build_buckets(e)) return -1;
  e->acts = (GptActs){.B = p->micro_batch, .T = p->seq, .precision = p->precision,
                      .backend = e->bk, .op_acts = e->act_ptrs, .recompute = e->plan.recompute,
                      .head_rows = p->head_rows};
  e->host_targets = calloc((size_t)p->micro_batch * p->seq, sizeof(int));
  if (!e->host_targets) return osdp_fail("out of memory");
  if (alloc_activations(e)) return -1;
  e->acts.scratch = arena_alloc(&e->arena,
                                gpt_scratch_bytes(d, p->micro_batch, p->seq, p->precision,
                                                  opt->threads, p->head_rows),
                                MEM_SCRATCH, "backward scratch");
  if (!e->acts.scratch) return -1;
  e->hooks = (GptParamHooks){e, hook_acquire_weight, hook_release_weight, hook_acquire_grad,
                             hook_release_grad};
  arena_reset_peak(&e->arena);
  return 0;
}

int engine_create(Engine* e, const GptDesc* d, const Plan* p, const TrainOptions* opt) {
  memset(e, 0, sizeof *e);
  e->d = d;
  e->opt = *opt;
  e->bk = opt->backend ? opt->backend : backend_cpu();
  e->rank = comm_rank();
  e->world = comm_size();
  if (engine_build(e, d, p, opt) == 0) return 0;
  engine_destroy(e); /* all that was built; the error stays osdp_last_error's */
  return -1;
}

void engine_destroy(Engine* e) {
  if (e->slices)
    for (int i = 0; i < e->d->nops; i++) free(e->slices[i]);
  free(e->slices);
  free(e->slice_counts);
  free(e->act_ptrs);
  free(e->buckets);
  walk_destroy(e->walk);
  free(e->host_targets);
  free(e->lists.w);
  free(e->lists.g);
  free(e->lists.m);
  free(e->lists.v);
  free(e->lists.n);
  free(e->lists.wd);
  arena_destroy(&e->arena);
  plan_free(&e->plan);
  memset(e, 0, sizeof *e);
}

void engine_time_ops(Engine* e, double* op_seconds, double* op_phase_seconds) {
  e->acts.op_seconds = op_seconds;
  e->acts.op_phase_seconds = op_seconds ? op_phase_seconds : NULL;
  e->acts.exclude_clock = op_seconds ? comm_clock() : NULL;
}

void engine_set_batch(Engine* e, const int* tokens, const int* targets) {
  size_t bytes = (size_t)e->acts.B * e->acts.T * sizeof(int);
  e->bk->to_device(gpt_acts_tokens(e->d, &e->acts), tokens, bytes);
  e->bk->to_device(gpt_acts_targets(e->d, &e->acts), targets, bytes);
  memcpy(e->host_targets, targets, bytes);
}

size_t engine_peak_bytes(const Engine* e, size_t* at_peak) {
  if (at_peak) memcpy(at_peak, e->arena.peak_at, sizeof e->arena.peak_at);
  return e->arena.peak_total;
}

/* ---- The training step ------------------------------------------------------------- */

/* Zeroes the gradient of any slice the schedule never gives a gradient use (no GPT op has
** one). The others need no zeroing: the first gradient use of each slice in the step (the
** walk's count, hook_acquire_grad, and the first reduce-scatter into a shard) overwrites them. */
static void zero_unused_grads(Engine* e) {
  for (int opi = 0; opi < e->d->nops; opi++)
    for (int i = 0; e->slices[opi] && i < e->slice_counts[opi]; i++) {
      SliceState* s = &e->slices[opi][i];
      if (walk_grad_uses(e->walk, opi, i) == 0)
        e->bk->zero(s->g, (s->strat == STRAT_DP ? s->n : s->shard) * sizeof(float));
    }
}

/* The part [*first, *first + *count) of slice s's n elements this rank holds: all of a dp
** slice, the shard (less padding) of a sharded one. */
static void held_part(const SliceState* s, size_t* first, size_t* count) {
  if (s->strat == STRAT_DP) { *first = 0; *count = s->n; return; }
  *first = s->off < s->n ? s->off : s->n;
  *count = s->n - *first < s->shard ? s->n - *first : s->shard;
}

/* The part of slice s this rank accounts for, so that over the ranks every element is counted
** once: the held part split evenly over the ranks that hold it too (all ranks for dp, one per
** group for a hybrid shard). Used for the gradient norm and the checkpoint's owned ranges. */
static void owned_part(const Engine* e, const SliceState* s, size_t* first, size_t* count) {
  size_t f, c;
  held_part(s, &f, &c);
  int n = s->strat == STRAT_DP ? e->world : comm_size_of(s->across);
  int r = s->strat == STRAT_DP ? e->rank : comm_rank_in(s->across);
  *first = f + c * (size_t)r / (size_t)n;
  *count = f + c * (size_t)(r + 1) / (size_t)n - *first;
}

/* Sum of squares of the gradient elements this rank accounts for (owned_part), so the global
** sum counts each element once: the parts of all slices in one call of the backend, summed in
** slice order (one wait on a GPU). */
static double owned_grad_sumsq(Engine* e) {
  int parts = 0;
  for (int opi = 0; opi < e->d->nops; opi++)
    for (int i = 0; e->slices[opi] && i < e->slice_counts[opi]; i++) {
      SliceState* s = &e->slices[opi][i];
      size_t first, count;
      owned_part(e, s, &first, &count);
      /* A dp gradient is the whole slice; a sharded one starts at the shard. */
      size_t at = s->strat == STRAT_DP ? first : first - s->off;
      if (count) {
        e->lists.g[parts] = s->g + at;
        e->lists.n[parts++] = count;
      }
    }
  return e->bk->f32->sum_squares_multi(e->lists.g, e->lists.n, parts);
}

/* Appends AdamW part k of the lists: n elements from offset `at` of w and of s's g, m, v. */
static int add_adamw_part(SliceLists* l, int k, float* w, const SliceState* s, size_t at,
                          size_t n, float wd) {
  l->w[k] = w + at;
  l->g[k] = s->g + at;
  l->m[k] = s->m + at;
  l->v[k] = s->v + at;
  l->n[k] = n;
  l->wd[k] = wd;
  return k + 1;
}

/* Appends to the AdamW lists, from part k on, the part of a slice this rank owns: with weight
** decay on the rows part and on the tail only where the op says so. Returns the next part. */
static int add_slice_update(Engine* e, const SliceState* s, int k) {
  size_t first, count;
  held_part(s, &first, &count);
  float* w = s->strat == STRAT_ZERO3 ? s->w : s->w + first;
  float wd = (float)e->opt.weight_decay;
  size_t split = s->rows_n > first ? s->rows_n - first : 0;
  if (split > count) split = count;
  if (split) k = add_adamw_part(&e->lists, k, w, s, 0, split, wd);
  if (count > split)
    k = add_adamw_part(&e->lists, k, w, s, split, count - split, s->tail_decay ? wd : 0.0f);
  return k;
}

/* AdamW on every slice's owned part in one call of the backend (parts in slice order), then
** the zero2 slices share their updated shards, in slice order. */
static void update_slices(Engine* e, float lr, float scale) {
  int parts = 0;
  for (int opi = 0; opi < e->d->nops; opi++)
    for (int i = 0; e->slices[opi] && i < e->slice_counts[opi]; i++)
      parts = add_slice_update(e, &e->slices[opi][i], parts);
  SliceLists* l = &e->lists;
  e->bk->f32->adamw_update_multi(l->w, l->g, l->m, l->v, l->n, l->wd, parts, lr,
                                 (float)e->opt.beta1, (float)e->opt.beta2, (float)e->opt.eps,
                                 (int)e->step, scale);
  for (int opi = 0; opi < e->d->nops; opi++)
    for (int i = 0; e->slices[opi] && i < e->slice_counts[opi]; i++) {
      SliceState* s = &e->slices[opi][i];
      if (s->strat == STRAT_ZERO2) comm_allgather_f32(s->group, s->w, s->shard);
    }
  refresh_compute_copies(e);
}

/* The learning rate of (1-based) step t: linear warmup, then constant or cosine decay from lr
** to lr_min_ratio * lr at decay_steps. */
static double learning_rate(const TrainOptions* o, long t) {
  if (o->warmup > 0 && t <= o->warmup) return o->lr * (double)t / o->warmup;
  if (o->decay_steps <= o->warmup) return o->lr;
  double progress = (double)(t - o->warmup) / (double)(o->decay_steps - o->warmup);
  if (progress > 1) progress = 1;
  double cosine = 0.5 * (1.0 + cos(M_PI * progress));
  return o->lr * (o->lr_min_ratio + (1.0 - o->lr_min_ratio) * cosine);
}

void engine_step(Engine* e, long global_targets, EngineBatchFn batch, void* ctx, StepResult* r) {
  double t0 = e->bk->clock();
  zero_unused_grads(e);
  double scale = 1.0 / (double)(global_targets > 0 ? global_targets : 1), loss = 0;
  for (int k = 0; k < plan_accum(&e->plan); k++) { /* the micro-steps: gradients add up */
    if (batch) batch(ctx, e, k);
    walk_reset(e->walk);
    walk_set_micro(e->walk, k);
    loss += gpt_forward(e->d, &e->acts, &e->hooks, e->slice_counts, GPT_TRAIN, scale, NULL);
    gpt_backward(e->d, &e->acts, &e->hooks, e->slice_counts);
    walk_backward_end(e->walk); /* the last reduce-scatter lands; every collective is waited for */
  }
  double sums[2] = {loss, owned_grad_sumsq(e)};
  comm_allreduce_f64_array(comm_world(), sums, 2);
  double norm = sqrt(sums[1]);
  r->nonfinite = !isfinite(sums[0]) || !isfinite(norm);
  if (r->nonfinite) { /* never apply such an update: the weights stay as they were */
    r->optim_seconds = 0;
    r->loss = sums[0] * scale;
    r->grad_norm = norm;
    r->lr = learning_rate(&e->opt, e->step + 1);
    r->seconds = e->bk->clock() - t0;
    return;
  }
  float clip = 1.0f;
  if (e->opt.grad_clip > 0 && norm > e->opt.grad_clip) clip = (float)(e->opt.grad_clip / norm);
  e->step++;
  double lr = learning_rate(&e->opt, e->step);
  double t_opt = e->bk->clock();
  update_slices(e, (float)lr, clip);
  r->optim_seconds = e->bk->clock() - t_opt;
  r->loss = sums[0] * scale;
  r->grad_norm = norm;
  r->lr = lr;
  r->seconds = e->bk->clock() - t0;
}

double engine_eval(Engine* e, const int* problem, long* problems_total, long* problems_ok) {
  int BT = e->acts.B * e->acts.T;
  int* argmax = (int*)((char*)e->acts.scratch +
                       gpt_scratch_bytes(e->d, e->acts.B, e->acts.T, e->acts.precision,
                                         e->opt.threads, e->acts.head_rows) -
                       2 * (size_t)BT * sizeof(int));
  walk_reset(e->walk);
  double loss = gpt_forward(e->d, &e->acts, &e->hooks, e->slice_counts, GPT_EVAL, 1.0,
                                problem ? argmax : NULL);
  walk_reset(e->walk); /* frees the prefetch of the first backward use, which does not come */
  double sums[3] = {loss, 0, 0};
  int* pred = problem ? malloc((size_t)BT * sizeof *pred) : NULL;
  if (problem && !pred) { fprintf(stderr, "osdp: error: out of host memory\n"); comm_abort(2); }
  if (problem) {
    e->bk->to_host(pred, argmax, (size_t)BT * sizeof *pred);
    /* A problem is right when all of its answer positions are; ids are contiguous runs. */
    const int* tg = e->host_targets;
    for (int i = 0; i < BT;) {
      if (problem[i] < 0) { i++; continue; }
      int id = problem[i], ok = 1;
      for (; i < BT && problem[i] == id; i++) ok &= pred[i] == tg[i];
      sums[1] += 1;
      sums[2] += ok;
    }
  }
  free(pred);
  comm_allreduce_f64_array(comm_world(), sums, 3);
  if (problems_total) *problems_total = (long)sums[1];
  if (problems_ok) *problems_ok = (long)sums[2];
  return sums[0];
}

void engine_get_params(Engine* e, float* full) {
  size_t base = 0;
  for (int opi = 0; opi < e->d->nops; opi++) {
    for (int i = 0; e->slices[opi] && i < e->slice_counts[opi]; i++) {
      SliceState* s = &e->slices[opi][i];
      float* dst = full + base + gpt_slice_offset(&e->d->ops[opi], e->slice_counts[opi], i);
      if (s->strat != STRAT_ZERO3) { e->bk->to_host(dst, s->w, s->n * sizeof(float)); continue; }
      /* Between steps the step's transients are free, and the step's own full (fp32) gradient of
      ** this slice is as big, so the peak does not grow (the master weights are gathered: under
      ** bf16 storage the step gathers only their bf16 copies); a gradient kept across the step
      ** is that buffer, reduced already, so it is used (its padding zeroed again after). */
      float* tmp = s->kept_g ? s->kept_g : transient_floats(e, s->n_pad, "gathered weight (copy out)");
      comm_allgather_into_f32(s->group, s->w, tmp, s->shard);
      e->bk->to_host(dst, tmp, s->n * sizeof(float));
      if (s->kept_g) e->bk->zero(s->kept_g + s->n, (s->n_pad - s->n) * sizeof(float));
      else arena_free(&e->arena, tmp);
    }
    base += e->d->ops[opi].n_params;
  }
}

void engine_set_params(Engine* e, const float* full) {
  size_t base = 0;
  for (int opi = 0; opi < e->d->nops; opi++) {
    for (int i = 0; e->slices[opi] && i < e->slice_counts[opi]; i++) {
      SliceState* s = &e->slices[opi][i];
      const float* src = full + base + gpt_slice_offset(&e->d->ops[opi], e->slice_counts[opi], i);
      if (s->strat != STRAT_ZERO3) e->bk->to_device(s->w, src, s->n * sizeof(float));
      else {
        size_t first = s->off < s->n ? s->off : s->n;
        size_t cnt = s->n - first < s->shard ? s->n - first : s->shard;
        e->bk->zero(s->w, s->shard * sizeof(float));
        e->bk->to_device(s->w, src + first, cnt * sizeof(float));
      }
      e->bk->zero(s->m, s->shard * sizeof(float));
      e->bk->zero(s->v, s->shard * sizeof(float));
    }
    base += e->d->ops[opi].n_params;
  }
  refresh_compute_copies(e);
  e->step = 0;
}

/* ---- Training state ------------------------------------------------------------------ */

/* Where slice (opi, i) starts in the op-block order. */
static size_t slice_base(const Engine* e, int opi, int i) {
  size_t base = 0;
  for (int o = 0; o < opi; o++) base += e->d->ops[o].n_params;
  return base + gpt_slice_offset(&e->d->ops[opi], e->slice_counts[opi], i);
}

int engine_owned_ranges(const Engine* e, ParamRange* out) {
  int k = 0;
  for (int opi = 0; opi < e->d->nops; opi++)
    for (int i = 0; e->slices[opi] && i < e->slice_counts[opi]; i++) {
      size_t first, count;
      owned_part(e, &e->slices[opi][i], &first, &count);
      if (out) out[k] = (ParamRange){slice_base(e, opi, i) + first, count};
      k++;
    }
  return k;
}

void engine_read_owned(Engine* e, int index, float* w, float* m, float* v) {
  int k = 0;
  for (int opi = 0; opi < e->d->nops; opi++)
    for (int i = 0; e->slices[opi] && i < e->slice_counts[opi]; i++, k++) {
      if (k != index) continue;
      SliceState* s = &e->slices[opi][i];
      size_t first, count;
      owned_part(e, s, &first, &count);
      /* dp holds everything (its moments too); zero2 the full weight and its shard's moments;
      ** zero3 only its shard. */
      size_t wo = s->strat == STRAT_ZERO3 ? first - s->off : first;
      size_t mo = s->strat == STRAT_DP ? first : first - s->off;
      size_t bytes = count * sizeof(float);
      e->bk->to_host(w, s->w + wo, bytes);
      e->bk->to_host(m, s->m + mo, bytes);
      e->bk->to_host(v, s->v + mo, bytes);
      return;
    }
}

/* Loads n elements at global offset into backend memory dst (NULL: skipped) through a host
** buffer; 0 or -1. */
static int load_part(Engine* e, StateReadFn read, void* ctx, size_t offset, size_t n, float* dw,
                     float* dm, float* dv, float* host) {
  if (!n) return 0;
  float* hw = dw ? host : NULL;
  float* hm = dm ? host + n : NULL;
  float* hv = dv ? host + 2 * n : NULL;
  if (read(ctx, offset, n, hw, hm, hv)) return -1;
  if (dw) e->bk->to_device(dw, hw, n * sizeof(float));
  if (dm) e->bk->to_device(dm, hm, n * sizeof(float));
  if (dv) e->bk->to_device(dv, hv, n * sizeof(float));
  return 0;
}

int engine_load_state(Engine* e, StateReadFn read, void* ctx, long step) {
  int rc = 0;
  for (int opi = 0; !rc && opi < e->d->nops; opi++)
    for (int i = 0; !rc && e->slices[opi] && i < e->slice_counts[opi]; i++) {
      SliceState* s = &e->slices[opi][i];
      size_t base = slice_base(e, opi, i), first, count;
      held_part(s, &first, &count);
      float* host = malloc(3 * (s->n ? s->n : 1) * sizeof(float));
      if (!host) return osdp_fail("out of host memory loading the training state");
      if (s->strat == STRAT_ZERO3) e->bk->zero(s->w, s->shard * sizeof(float)); /* the padding */
      if (s->strat == STRAT_DP) {
        rc = load_part(e, read, ctx, base, s->n, s->w, s->m, s->v, host);
      } else {
        e->bk->zero(s->m, s->shard * sizeof(float));
        e->bk->zero(s->v, s->shard * sizeof(float));
        if (s->strat == STRAT_ZERO2) {
          rc = load_part(e, read, ctx, base, s->n, s->w, NULL, NULL, host) ||
               load_part(e, read, ctx, base + first, count, NULL, s->m, s->v, host);
        } else {
          rc = load_part(e, read, ctx, base + first, count, s->w, s->m, s->v, host);
        }
      }
      free(host);
    }
  if (!rc) refresh_compute_copies(e);
  if (!rc) e->step = step;
  return rc;
}

long engine_steps_taken(const Engine* e) { return e->step; }
