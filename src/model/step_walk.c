/* step_walk.c: the consequences of a plan's parameter uses, decided once for the engine and the
** two replays; see step_walk.h. */
#include "model/step_walk.h"

#include <stdlib.h>

#include "core/util.h"

/* What the walk counts per parameter slice. */
typedef struct WalkSlice {
  int grad_uses;   /* gradient uses per step */
  int grad_done;   /* of which done this step */
  int landed;      /* sharded: of which the reduce-scatter has landed in the shard */
  int bucket;      /* dp: its bucket (plan_dp_buckets); else -1 */
  int gathered;    /* a kept weight (plan_keeps_weight): gathered in this optimizer step */
} WalkSlice;

/* A use begun and not yet ended: which parts of it are open. */
typedef struct OpenUse {
  int use;             /* its index in the schedule */
  int weight;          /* its weight is acquired and not released */
  int grad;            /* its gradient is acquired and not released */
  int grad_to_begin;   /* it has a gradient the step has not acquired yet */
} OpenUse;

struct StepWalk {
  const Plan* p;       /* the plan walked (the caller's) */
  WalkFn fn;
  void* ctx;
  GptParamUse* u;      /* the step's schedule (gpt_param_schedule) */
  int n;
  int* next_zero3;     /* per use: the next use after it with a zero3 weight (what prefetch
                       ** gathers), or -1 */
  WalkSlice* slices;   /* [owner * GPT_MAX_SLICES + slice] */
  int nkeys;           /* their count: nops * GPT_MAX_SLICES */
  int nbuckets;
  int* members;        /* per bucket: its slices */
  int* members_left;   /* per bucket: of which not final yet this step */
  size_t* bucket_params; /* per bucket: its parameters */
  int next;            /* the next use to begin */
  OpenUse open[GPT_MAX_SLICES + 1]; /* the uses begun and not ended, oldest first (more than
                       ** one only inside a run of held uses) */
  int nopen;
  int prefetched;      /* the use whose weight is being prefetched, or -1 */
  int reducing;        /* the use whose reduce-scatter is in flight (overlap_reduce), or -1 */
  int first_micro;     /* this pass is the first micro-step of the optimizer step: gradients
                       ** start fresh (walk_set_micro) */
  int last_micro;      /* and the last: dp buckets and across-group shards are all-reduced */
  int in_step;         /* between walk_set_micro and the last micro-step's walk_backward_end:
                       ** kept weights stay gathered across passes */
};

/* The counts of use u's slice. */
static WalkSlice* slice_of(const StepWalk* w, const GptParamUse* u) {
  return &w->slices[u->owner * GPT_MAX_SLICES + u->slice];
}

/* The strategy of use u's slice. */
static Strategy strategy_of(const StepWalk* w, const GptParamUse* u) {
  return w->p->ops[u->owner].strat[u->slice];
}

/* Whether use u's slice keeps its gathered weight / its full gradient across the step. */
static int keeps_weight(const StepWalk* w, const GptParamUse* u) {
  return plan_keeps_weight(w->p, u->owner, u->slice);
}
static int keeps_grad(const StepWalk* w, const GptParamUse* u) {
  return plan_keeps_grad(w->p, u->owner, u->slice);
}

/* Tells the user to do action a for use i (-1: none). */
static void act(StepWalk* w, WalkAction a, int i, int arg) {
  w->fn(w->ctx, a, i >= 0 ? &w->u[i] : NULL, arg);
}

/* Fills what the walk derives from the schedule once: the prefetch targets, each slice's
** gradient uses and bucket, and the dp buckets' members and parameters. */
static void walk_derive(StepWalk* w, const GptDesc* d, const int* bucket_map) {
  int next = -1;
  for (int i = w->n - 1; i >= 0; i--) {
    w->next_zero3[i] = next;
    if (w->u[i].weight && strategy_of(w, &w->u[i]) == STRAT_ZERO3 && !keeps_weight(w, &w->u[i]))
      next = i; /* a kept weight is gathered once, never prefetched */
  }
  for (int key = 0; key < w->nkeys; key++) w->slices[key] = (WalkSlice){.bucket = bucket_map[key]};
  for (int i = 0; i < w->n; i++)
    if (w->u[i].grad) slice_of(w, &w->u[i])->grad_uses++;
  for (int op = 0; op < d->nops; op++)
    for (int s = 0; d->ops[op].n_params && s < w->p->ops[op].k; s++) {
      int b = bucket_map[op * GPT_MAX_SLICES + s];
      if (b < 0) continue;
      w->members[b]++;
      w->bucket_params[b] += gpt_slice_params(&d->ops[op], w->p->ops[op].k, s);
    }
}

/* Allocates the walker's arrays: the schedule of w->p, and its dp buckets (into bucket_map,
** nkeys entries). Returns 0, or -1 when out of memory (what was allocated is in w). */
static int walk_alloc(StepWalk* w, const GptDesc* d, size_t bucket_bytes, int* bucket_map) {
  int* slices = malloc((size_t)d->nops * sizeof *slices);
  if (!slices) return -1;
  plan_slice_counts(w->p, slices);
  /* Counted, then filled: either call fails (-1) when out of memory, so the fill is checked
  ** against the count. */
  w->n = gpt_param_schedule(d, slices, w->p->recompute, NULL);
  w->u = w->n >= 0 ? malloc((size_t)(w->n > 0 ? w->n : 1) * sizeof *w->u) : NULL;
  int filled = w->u ? gpt_param_schedule(d, slices, w->p->recompute, w->u) : -1;
  free(slices);
  if (filled < 0 || filled != w->n) return -1;
  w->nbuckets = plan_dp_buckets(d, w->p, bucket_bytes, bucket_map);
  w->next_zero3 = malloc((size_t)(w->n > 0 ? w->n : 1) * sizeof *w->next_zero3);
  w->slices = malloc((size_t)w->nkeys * sizeof *w->slices);
  w->members = calloc((size_t)w->nbuckets + 1, sizeof *w->members);
  w->members_left = calloc((size_t)w->nbuckets + 1, sizeof *w->members_left);
  w->bucket_params = calloc((size_t)w->nbuckets + 1, sizeof *w->bucket_params);
  return w->next_zero3 && w->slices && w->members && w->members_left && w->bucket_params ? 0 : -1;
}

StepWalk* walk_create(const GptDesc* d, const Plan* p, size_t bucket_bytes, WalkFn fn, void* ctx) {
  int nkeys = d->nops * GPT_MAX_SLICES;
  StepWalk* w = calloc(1, sizeof *w);
  int* bucket_map = malloc((size_t)nkeys * sizeof *bucket_map);
  if (w)
    *w = (StepWalk){.p = p, .fn = fn, .ctx = ctx, .nkeys = nkeys, .prefetched = -1, .reducing = -1,
                    .first_micro = 1, .last_micro = 1};
  if (!w || !bucket_map || walk_alloc(w, d, bucket_bytes, bucket_map)) {
    free(bucket_map);
    walk_destroy(w);
    osdp_fail("out of memory");
    return NULL;
  }
  walk_derive(w, d, bucket_map);
  free(bucket_map);
  walk_reset(w);
  return w;
}

void walk_destroy(StepWalk* w) {
  if (!w) return;
  free(w->u);
  free(w->next_zero3);
  free(w->slices);
  free(w->members);
  free(w->members_left);
  free(w->bucket_params);
  free(w);
}

void walk_reset(StepWalk* w) {
  if (w->prefetched >= 0) { /* gathered for a backward that did not come: done with */
    act(w, WALK_TAKE_PREFETCH, w->prefetched, 0);
    act(w, WALK_FREE_WEIGHT, w->prefetched, 0);
  }
  for (int key = 0; key < w->nkeys; key++) {
    w->slices[key].grad_done = w->slices[key].landed = 0;
    if (!w->in_step) w->slices[key].gathered = 0;
  }
  for (int b = 0; b < w->nbuckets; b++) w->members_left[b] = w->members[b];
  w->next = 0;
  w->nopen = 0;
  w->prefetched = -1;
  w->reducing = -1;
}

void walk_set_micro(StepWalk* w, int k) {
  w->first_micro = k == 0;
  w->last_micro = k == plan_accum(w->p) - 1;
  w->in_step = 1;
}

/* ---- One use ------------------------------------------------------------------------------ */

/* Use i's weight is needed: a zero3 weight is gathered now or taken from the prefetch, and with
** prefetch the next zero3 weight starts gathering, so it is in flight while this one computes. */
static void weight_begin(StepWalk* w, int i) {
  if (strategy_of(w, &w->u[i]) != STRAT_ZERO3) return;
  if (keeps_weight(w, &w->u[i])) { /* gathered once per step, into its own buffer */
    WalkSlice* s = slice_of(w, &w->u[i]);
    if (!s->gathered) act(w, WALK_GATHER, i, WALK_KEPT);
    s->gathered = 1;
    return;
  }
  act(w, w->prefetched == i ? WALK_TAKE_PREFETCH : WALK_GATHER, i, 0);
  w->prefetched = -1;
  if (w->p->prefetch && w->next_zero3[i] >= 0) {
    w->prefetched = w->next_zero3[i];
    act(w, WALK_PREFETCH, w->prefetched, 0);
  }
}

/* Use i's weight is done with: a gathered one is freed (a kept one stays). */
static void weight_end(StepWalk* w, int i) {
  if (strategy_of(w, &w->u[i]) == STRAT_ZERO3 && !keeps_weight(w, &w->u[i]))
    act(w, WALK_FREE_WEIGHT, i, 0);
}

/* Use i's gradient is needed: a sharded slice gets a full gradient (a kept one has its own).
** Returns 1 when this is the slice's first gradient use of the optimizer step (of its first
** micro-step). */
static int grad_begin(StepWalk* w, int i) {
  if (strategy_of(w, &w->u[i]) != STRAT_DP && !keeps_grad(w, &w->u[i]))
    act(w, WALK_ALLOC_GRAD, i, 0);
  return w->first_micro && slice_of(w, &w->u[i])->grad_done == 0;
}

/* Use i's reduce-scatter has landed in the shard: after the slice's last one of the last
** micro-step (counted by landings: with overlap_reduce the last use can be done while an earlier
** one is still adding into the shard) a hybrid slice starts its all-reduce across the groups. */
static void landed(StepWalk* w, int i) {
  WalkSlice* s = slice_of(w, &w->u[i]);
  s->landed = keeps_grad(w, &w->u[i]) ? s->grad_uses : s->landed + 1; /* a kept one: all at once */
  if (s->landed == s->grad_uses && w->last_micro &&
      w->p->world / plan_op_group(w->p, w->u[i].owner) > 1)
    act(w, WALK_ACROSS_START, i, 0);
}

/* overlap_reduce: waits for the reduce-scatter in flight, if any, and lands it. */
static void finish_reducing(StepWalk* w) {
  int i = w->reducing;
  if (i < 0) return;
  w->reducing = -1;
  act(w, WALK_REDUCE_WAIT, i, keeps_grad(w, &w->u[i]) ? WALK_KEPT : 0);
  landed(w, i);
}

/* Use i's gradient is complete. A sharded slice reduce-scatters it into the shard (the first
** use of the optimizer step overwrites the shard, later ones and later micro-steps add): now, or
** with overlap_reduce started now, after the one in flight lands, so one is in flight while the
** next gradient computes (a group of one sends nothing: done at once). A dp slice's last use of
** the last micro-step may complete its bucket (earlier micro-steps add into the gradient). A
** kept gradient adds up in its buffer until its last use of the last micro-step, and is then
** reduce-scattered once, overwriting the shard. */
static void grad_end(StepWalk* w, int i) {
  const GptParamUse* u = &w->u[i];
  WalkSlice* s = slice_of(w, u);
  int arg = s->grad_done++ > 0 || !w->first_micro; /* add to the shard */
  if (strategy_of(w, u) == STRAT_DP) {
    if (s->grad_done == s->grad_uses && s->bucket >= 0 && --w->members_left[s->bucket] == 0 &&
        w->last_micro)
      act(w, WALK_BUCKET_START, i, s->bucket);
    return;
  }
  if (keeps_grad(w, u)) {
    if (s->grad_done < s->grad_uses || !w->last_micro) { /* it adds up where it is */
      if (w->p->overlap_reduce) finish_reducing(w); /* where the last use lands the one in
                                                    ** flight: the bytes of every pass alike */
      return;
    }
    arg = WALK_KEPT;
  }
  if (!w->p->overlap_reduce) {
    act(w, WALK_REDUCE, i, arg);
    landed(w, i);
    return;
  }
  finish_reducing(w);
  act(w, WALK_REDUCE_START, i, arg);
  w->reducing = i;
  if (plan_op_group(w->p, u->owner) <= 1) finish_reducing(w);
}

/* ---- The open uses ------------------------------------------------------------------------ */

/* Opens use i (its weight or gradient acquired now). Returns its entry, or NULL when more uses
** are open than a held run can have (a bug in the caller). */
static OpenUse* open_use(StepWalk* w, int i) {
  if (w->nopen == GPT_MAX_SLICES + 1) return NULL;
  OpenUse* o = &w->open[w->nopen++];
  *o = (OpenUse){.use = i};
  return o;
}

/* The open use of slice (owner, slice) whose weight (part 0) or gradient (part 1) is acquired,
** or NULL. */
static OpenUse* find_open(StepWalk* w, int owner, int slice, int part) {
  for (int j = 0; j < w->nopen; j++) {
    const GptParamUse* u = &w->u[w->open[j].use];
    if (u->owner == owner && u->slice == slice && (part ? w->open[j].grad : w->open[j].weight))
      return &w->open[j];
  }
  return NULL;
}

/* Closes open use o once nothing of it is acquired: its gradient is released, or it never will
** be acquired (a forward-only pass of a use that has one). */
static void close_if_done(StepWalk* w, OpenUse* o) {
  if (o->weight || o->grad) return;
  int j = (int)(o - w->open);
  for (; j + 1 < w->nopen; j++) w->open[j] = w->open[j + 1];
  w->nopen--;
}

/* ---- The engine's side: one call per hook -------------------------------------------------- */

/* Whether the next use of the schedule is (owner, slice) with a weight in this phase (weight
** 1), or with a gradient alone (weight 0). */
static int next_is(const StepWalk* w, int owner, int slice, int weight, GptPhase phase) {
  if (w->next >= w->n) return 0;
  const GptParamUse* u = &w->u[w->next];
  return u->owner == owner && u->slice == slice && u->weight == weight &&
         (weight ? u->phase == phase : u->grad);
}

int walk_weight_begin(StepWalk* w, int owner, int slice, GptPhase phase) {
  if (!next_is(w, owner, slice, 1, phase)) return -1;
  OpenUse* o = open_use(w, w->next);
  if (!o) return -1;
  int i = w->next++;
  o->weight = 1;
  o->grad_to_begin = w->u[i].grad;
  weight_begin(w, i);
  return 0;
}

/* Ends part (0: the weight, 1: the gradient) of the open use of slice (owner, slice); the use
** closes once nothing of it is acquired. -1 when no such part is open. */
static int end_part(StepWalk* w, int owner, int slice, int part) {
  OpenUse* o = find_open(w, owner, slice, part);
  if (!o) return -1;
  if (part) grad_end(w, o->use);
  else weight_end(w, o->use);
  *(part ? &o->grad : &o->weight) = 0;
  close_if_done(w, o);
  return 0;
}

int walk_weight_end(StepWalk* w, int owner, int slice) { return end_part(w, owner, slice, 0); }

int walk_grad_begin(StepWalk* w, int owner, int slice) {
  OpenUse* o = w->nopen ? &w->open[w->nopen - 1] : NULL;
  if (o && o->grad_to_begin) { /* the use whose weight was just acquired */
    const GptParamUse* u = &w->u[o->use];
    if (u->owner != owner || u->slice != slice) return -1;
  } else {                     /* a use of the gradient alone: the next one */
    if (!next_is(w, owner, slice, 0, GPT_BACKWARD) || !(o = open_use(w, w->next))) return -1;
    w->next++;
  }
  o->grad_to_begin = 0;
  o->grad = 1;
  return grad_begin(w, o->use);
}

int walk_grad_end(StepWalk* w, int owner, int slice) { return end_part(w, owner, slice, 1); }

void walk_backward_end(StepWalk* w) {
  finish_reducing(w);
  act(w, WALK_WAIT_ALL, -1, 0);
  if (w->last_micro) w->in_step = 0; /* the step is over: the optimizer changes the weights */
}

/* ---- The replays' side --------------------------------------------------------------------- */

int walk_use_begin(StepWalk* w) {
  if (w->next >= w->n) return -1;
  OpenUse* o = open_use(w, w->next);
  if (!o) return -1;
  int i = w->next++;
  o->weight = w->u[i].weight;
  o->grad = w->u[i].grad;
  if (o->weight) weight_begin(w, i);
  if (o->grad) grad_begin(w, i);
  return i;
}

void walk_use_end(StepWalk* w) {
  if (!w->nopen) return;
  OpenUse* o = &w->open[0];
  if (o->weight) weight_end(w, o->use);
  if (o->grad) grad_end(w, o->use);
  o->weight = o->grad = 0;
  close_if_done(w, o);
}

int walk_run_begin(StepWalk* w, int* n) {
  int first = walk_use_begin(w);
  *n = first >= 0;
  while (first >= 0 && w->u[first + *n - 1].held && walk_use_begin(w) >= 0) ++*n;
  return first;
}

void walk_run_end(StepWalk* w, int n) {
  while (n-- > 0) walk_use_end(w);
}

const GptParamUse* walk_use(const StepWalk* w, int i) { return &w->u[i]; }

/* ---- What the walk knows ------------------------------------------------------------------- */

int walk_use_count(const StepWalk* w) { return w->n; }

int walk_grad_uses(const StepWalk* w, int owner, int slice) {
  return w->slices[owner * GPT_MAX_SLICES + slice].grad_uses;
}

int walk_bucket_count(const StepWalk* w) { return w->nbuckets; }

int walk_bucket_of(const StepWalk* w, int owner, int slice) {
  return w->slices[owner * GPT_MAX_SLICES + slice].bucket;
}

size_t walk_bucket_params(const StepWalk* w, int bucket) { return w->bucket_params[bucket]; }
