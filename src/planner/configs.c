/*
** configs.c: enumeration of one operator's configurations (step 1 of the method described
** at the top of search.c): strategy counts per group of equal slices, for k = 1, 2, 4, 8, and
** for each one with a sharded slice every candidate shard group, pruned to the non-dominated
** ones; also the search options' defaults and the candidate shard groups.
*/
#include "planner/search_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"

void planner_default_options(SearchOptions* o, int seq) {
  memset(o, 0, sizeof *o);
  o->seq = seq;
  o->max_batch = 512;
  o->max_slices = GPT_MAX_SLICES;
  o->max_recompute = -1;
  o->reduce_dtype = REDUCE_FP32;
  for (int s = 0; s < STRAT_COUNT; s++) o->allow[s] = 1;
}

/* Orders ints ascending, for qsort. */
static int cmp_int(const void* a, const void* b) {
  int x = *(const int*)a, y = *(const int*)b;
  return x < y ? -1 : x > y;
}

int planner_accum(const SearchOptions* o, const DeviceInfo* dev, int B) {
  if (o->global_batch <= 0) return 1;
  long per = (long)dev->ranks * B;
  return o->global_batch % per ? 0 : (int)(o->global_batch / per);
}

int planner_shard_groups(const DeviceInfo* dev, const SearchOptions* o, int* out) {
  int N = dev->ranks, H = device_ranks_per_host(dev), n = 0;
  if (o->shard_group > 0 && o->shard_group <= N && N % o->shard_group == 0) {
    out[0] = o->shard_group;
    return 1;
  }
  /* The divisors of N (< 2^31: at most 1600), found in pairs (i, N / i) up to the square root,
  ** kept when G > 1 (N on one rank) and within a host or spanning whole hosts. */
  int all[2048];
  for (int i = 1; (long)i * i <= N; i++) {
    if (N % i) continue;
    int pair[2] = {i, N / i};
    for (int j = 0; j < (pair[0] == pair[1] ? 1 : 2); j++) {
      int G = pair[j];
      if ((G > 1 || N == 1) && ((G <= H && H % G == 0) || G % H == 0)) all[n++] = G;
    }
  }
  qsort(all, (size_t)n, sizeof *all, cmp_int);
  int first = n > PLANNER_MAX_GROUPS ? n - PLANNER_MAX_GROUPS : 0; /* the largest ones */
  if (first > 0 && H > 1 && H < all[first]) all[first] = H; /* H always, in the smallest one's place */
  for (int i = first; i < n; i++) out[i - first] = all[i];
  return n - first;
}

/* The options with defaults filled in (seq: the model's max_seq; max_recompute: a count from
** 0 to the number of layers; min_recompute: from 0 to max_recompute). */
SearchOptions normalized_options(const GptDesc* d, const SearchOptions* in) {
  SearchOptions o = *in;
  if (o.seq <= 0) o.seq = d->cfg.max_seq;
  if (o.max_recompute < 0 || o.max_recompute > d->cfg.n_layer) o.max_recompute = d->cfg.n_layer;
  if (o.min_recompute < 0) o.min_recompute = 0;
  if (o.min_recompute > o.max_recompute) o.min_recompute = o.max_recompute;
  if (o.max_batch <= 0) o.max_batch = 512;
  if (o.global_batch < 0) o.global_batch = 0;
  if (o.min_batch <= 0) o.min_batch = 1;
  if (o.min_batch > o.max_batch) o.min_batch = o.max_batch;
  if (o.max_slices <= 0) o.max_slices = GPT_MAX_SLICES;
  if (o.shard_group < 0) o.shard_group = 0;
  o.keep_off &= KEEP_ALL;
  if (o.reduce_dtype != REDUCE_BF16 && o.reduce_dtype != SEARCH_REDUCE_AUTO) o.reduce_dtype = REDUCE_FP32;
  int any = 0;
  for (int s = 0; s < STRAT_COUNT; s++) any |= o.allow[s];
  for (int s = 0; s < STRAT_COUNT; s++) o.allow[s] = any ? (o.allow[s] != 0) : 1;
  return o;
}

int planner_cap_batch(const GptDesc* d, const DeviceInfo* dev, SearchOptions* o) {
  SearchOptions n = normalized_options(d, o); /* the defaults of seq and max_batch filled in */
  if (!device_measured_for(dev, d, n.seq) || dev->compute_max_batch <= 0) return 0;
  int cap = PLANNER_EXTRAPOLATE * dev->compute_max_batch;
  if (cap >= n.max_batch || cost_largest_batch(d, dev, n.seq, cap + 1) <= cap)
    return 0; /* no bound needed, or nothing larger fits anyway */
  o->max_batch = cap;
  if (o->min_batch > cap) o->min_batch = cap;
  return cap;
}

/* Slices of one op with the same parameter count: interchangeable for every cost. */
typedef struct SliceGroup {
  size_t n;                     /* parameters of each slice */
  int count;                    /* how many slices */
  int slot[GPT_MAX_SLICES];     /* their indices */
} SliceGroup;

/* What the enumeration of one op at one slice count needs. */
typedef struct Enumerator {
  const GptDesc* d;
  const DeviceInfo* dev;
  const SearchOptions* o;
  int op, k, ngroups;
  SliceContext x;                 /* the op's uses, the reduce dtype, the exposures */
  int shard[PLANNER_MAX_GROUPS];  /* the candidate shard groups */
  int nshard;
  double split_s;                 /* extra compute of k slices at this micro-batch */
  SliceGroup g[GPT_MAX_SLICES];
  size_t n[GPT_MAX_SLICES];       /* parameters of each slice */
  Strategy strat[GPT_MAX_SLICES]; /* the assignment being enumerated */
  ConfigList* out;
} Enumerator;

/* Appends a configuration; -1 when out of memory. */
static int config_push(ConfigList* l, const OpConfig* c) {
  if (l->n == l->cap) {
    int cap = l->cap ? 2 * l->cap : 64;
    OpConfig* v = realloc(l->v, (size_t)cap * sizeof *v);
    if (!v) return osdp_fail("out of memory");
    l->v = v;
    l->cap = cap;
  }
  l->v[l->n++] = *c;
  return 0;
}

/* Splits op's k slices into groups of equal size. Returns the number of groups. */
static int slice_groups(const GptOp* op, int k, SliceGroup* g) {
  int ng = 0;
  for (int s = 0; s < k; s++) {
    size_t n = gpt_slice_params(op, k, s);
    int j = 0;
    while (j < ng && g[j].n != n) j++;
    if (j == ng) g[ng++] = (SliceGroup){.n = n};
    g[j].slot[g[j].count++] = s;
  }
  return ng;
}

/* Costs the assignment in e->strat with shard group G (the world: group 0 in the plan) and what
** it keeps across the step (KEEP_* bits), and appends it. */
static int enum_evaluate_keep(Enumerator* e, int G, int keep) {
  OpConfig c;
  memset(&c, 0, sizeof c);
  c.plan.k = e->k;
  c.plan.group = G == e->dev->ranks ? 0 : G;
  c.plan.keep = keep;
  c.time_s = e->split_s;
  SliceContext x = e->x;
  x.group = G;
  x.keep = keep;
  for (int s = 0; s < e->k; s++) {
    c.plan.strat[s] = e->strat[s];
    c.mem += cost_slice_persistent(e->n[s], e->strat[s], G, e->dev->precision, keep);
    c.time_s += cost_slice_search_s(e->dev, &x, e->n[s], e->strat[s]);
  }
  c.transient = cost_op_transient(e->d, e->op, &c.plan, G, e->dev->precision, x.uses);
  return config_push(e->out, &c);
}

/* The KEEP_* bits worth offering for an op with these uses at K micro-steps whose slices allow
** `allowed` (op_keep_allowed): a gradient reduced more than once per step, a weight gathered
** more than once. Keeping only moves bytes from the transient to what is held, which never
** lowers the peak (the sum of what is held plus the largest transient), so where it saves no
** communication it is never better and is not offered. */
static int keep_worth(const SliceContext* x, int allowed) {
  int K = x->accum > 1 ? x->accum : 1, keep = 0;
  if ((allowed & KEEP_GRAD) && K * x->uses.bwd_grad > 1) keep |= KEEP_GRAD;
  if ((allowed & KEEP_WEIGHT) && K * (x->uses.fwd_weight + x->uses.bwd_weight) > 1)
    keep |= KEEP_WEIGHT;
  return keep;
}

/* Costs the assignment in e->strat with shard group G, keeping nothing and each combination of
** the KEEP_* bits worth offering (keep_worth) that the options allow. */
static int enum_evaluate_group(Enumerator* e, int G) {
  OpPlan o = {.k = e->k};
  memcpy(o.strat, e->strat, sizeof o.strat);
  int worth = keep_worth(&e->x, op_keep_allowed(&o)) & ~e->o->keep_off;
  for (int keep = 0; keep <= KEEP_ALL; keep++)
    if ((keep & ~worth) == 0 && enum_evaluate_keep(e, G, keep)) return -1;
  return 0;
}

/* Costs the assignment in e->strat: once (over the world) when every slice is dp, else once
** per candidate shard group. */
static int enum_evaluate(Enumerator* e) {
  int sharded = 0;
  for (int s = 0; s < e->k; s++) sharded |= e->strat[s] != STRAT_DP;
  if (!sharded) return enum_evaluate_group(e, e->dev->ranks);
  for (int i = 0; i < e->nshard; i++)
    if (enum_evaluate_group(e, e->shard[i])) return -1;
  return 0;
}

/* Enumerates strategy counts (dp, zero2, zero3) for group gi and the groups after it;
** within a group the dp slices come first, then zero2, then zero3. */
static int enum_group(Enumerator* e, int gi) {
  if (gi == e->ngroups) return enum_evaluate(e);
  const SliceGroup* g = &e->g[gi];
  for (int a = g->count; a >= 0; a--)
    for (int b = g->count - a; b >= 0; b--) {
      int c = g->count - a - b;
      if ((a && !e->o->allow[STRAT_DP]) || (b && !e->o->allow[STRAT_ZERO2]) ||
          (c && !e->o->allow[STRAT_ZERO3]))
        continue;
      for (int j = 0; j < g->count; j++)
        e->strat[g->slot[j]] = j < a ? STRAT_DP : j < a + b ? STRAT_ZERO2 : STRAT_ZERO3;
      if (enum_group(e, gi + 1)) return -1;
    }
  return 0;
}

/* Whether time a is no worse than time b (equal within 1e-13 relative counts as equal:
** sums of the same slices in another order). */
static int time_le(double a, double b) { return a <= b + 1e-13 * fabs(b); }

/* Whether configuration a is at least as good as b in memory, transient and time. */
static int config_covers(const OpConfig* a, const OpConfig* b) {
  return a->mem <= b->mem && a->transient <= b->transient && time_le(a->time_s, b->time_s);
}

/* Drops dominated configurations; of equivalent ones keeps the first (fewest slices, most
** replicated). */
static void config_prune(ConfigList* l) {
  int w = 0;
  for (int i = 0; i < l->n; i++) {
    int dominated = 0;
    for (int j = 0; j < l->n && !dominated; j++) {
      if (j == i || !config_covers(&l->v[j], &l->v[i])) continue;
      dominated = j < i || !config_covers(&l->v[i], &l->v[j]);
    }
    if (!dominated) l->v[w++] = l->v[i];
  }
  l->n = w;
}

/* Enumerates and prunes op's configurations at micro-batch B into l; base holds the reduce
** dtype and the exposures at B (cost_exposures), recompute the per-layer flags (NULL: none). */
int op_configs(const GptDesc* d, const DeviceInfo* dev, const SearchOptions* o, int op, int B,
               const SliceContext* base, const int* recompute, ConfigList* l) {
  const GptOp* g = &d->ops[op];
  static const int ks[] = {1, 2, 4, 8};
  SliceContext x = *base;
  x.uses = cost_op_uses(d, op, recompute);
  int K = planner_accum(o, dev, B); /* 0: B does not divide the global batch */
  x.accum = K > 0 ? K : 1;
  int shard[PLANNER_MAX_GROUPS], nshard = planner_shard_groups(dev, o, shard);
  for (int i = 0; i < 4; i++) {
    int k = ks[i];
    if (k > 1 && (!g->splittable || (size_t)k > g->rows || k > o->max_slices)) continue;
    Enumerator e = {.d = d, .dev = dev, .o = o, .op = op, .k = k, .out = l,
                    .x = x, .nshard = nshard,
                    .split_s = x.accum * cost_split_extra_s(d, dev, op, k, B, o->seq, recompute)};
    memcpy(e.shard, shard, (size_t)nshard * sizeof *shard);
    e.ngroups = slice_groups(g, k, e.g);
    for (int s = 0; s < k; s++) e.n[s] = gpt_slice_params(g, k, s);
    if (enum_group(&e, 0)) return -1;
  }
  config_prune(l);
  return 0;
}

int planner_op_configs(const GptDesc* d, const DeviceInfo* dev, const SearchOptions* o, int op,
                       int B, const int* recompute, OpConfig** out) {
  *out = NULL;
  if (!d->ops[op].n_params) return 0;
  SearchOptions so = normalized_options(d, o);
  ConfigList l = {0};
  SliceContext base = {.reduce = so.reduce_dtype == REDUCE_BF16 ? REDUCE_BF16 : REDUCE_FP32};
  cost_exposures(d, dev, B, so.seq, base.reduce, &base.dp_exposure, &base.across_exposure);
  if (op_configs(d, dev, &so, op, B, &base, recompute, &l)) { free(l.v); return -1; }
  *out = l.v;
  return l.n;
}
