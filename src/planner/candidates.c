/*
** candidates.c: the plans worth running (planner_candidates): the search's best plan of each of
** its best micro-batches, the best unsplit plan and the best without recomputation, and the
** uniform baselines: ddp / zero2 / zero3 over the world and, on several hosts, zero2 / zero3
** sharded within each host (planner_best_uniform_group, each at the fewest recomputed layers
** that let it fit); each with zero3 prefetch, overlap_reduce (and with auto the reduce dtype)
** decided and re-priced by the step replay. The search itself is search.c.
*/
#include "planner/search_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"

/* The best of one reduce dtype found by decide_options. */
typedef struct Choice {
  int prefetch, overlap_reduce, found;
  PlanCost cost;
  double judged_s; /* the step time it was chosen by (prefetch's margin added) */
} Choice;

/* Decides c's prefetch (when it has zero3 slices) and overlap_reduce (when it has sharded
** slices): of the combinations that fit under the limit, the fastest by the replay (ties: the
** fewer switched on), a prefetching one counted PLANNER_PREFETCH_MIN_GAIN slower than it is;
** with rd == SEARCH_REDUCE_AUTO for each reduce dtype, bf16 kept only when its best is
** REDUCE_BF16_MIN_GAIN faster than fp32's. Sets c's plan and cost. */
static int decide_options(const GptDesc* d, const DeviceInfo* dev, int rd, Candidate* c) {
  int z3 = 0, sharded = 0;
  for (int i = 0; i < d->nops; i++)
    for (int s = 0; d->ops[i].n_params && s < c->plan.ops[i].k; s++) {
      z3 |= c->plan.ops[i].strat[s] == STRAT_ZERO3;
      sharded |= c->plan.ops[i].strat[s] != STRAT_DP;
    }
  ReduceDtype dts[2] = {c->plan.reduce_dtype, REDUCE_BF16};
  if (rd == SEARCH_REDUCE_AUTO) dts[0] = REDUCE_FP32;
  int ndt = rd == SEARCH_REDUCE_AUTO ? 2 : 1;
  Choice best[2] = {{0}, {0}};
  for (int t = 0; t < ndt; t++)
    for (int pf = 0; pf <= z3; pf++)
      for (int ov = 0; ov <= sharded; ov++) {
        PlanCost k;
        c->plan.reduce_dtype = dts[t];
        c->plan.prefetch = pf;
        c->plan.overlap_reduce = ov;
        if (plan_cost(d, dev, &c->plan, &k)) return -1;
        if (k.mem.peak > dev->mem_limit) continue;
        double judged = k.step_s * (pf ? 1 + PLANNER_PREFETCH_MIN_GAIN : 1);
        if (best[t].found && judged >= best[t].judged_s * (1 - 1e-12)) continue;
        best[t] = (Choice){pf, ov, 1, k, judged};
      }
  int t = ndt == 2 && best[1].found &&
          (!best[0].found || best[1].cost.step_s < best[0].cost.step_s * (1 - REDUCE_BF16_MIN_GAIN));
  if (!best[t].found) { /* nothing fits (not for a plan the search found): leave all off */
    c->plan.prefetch = c->plan.overlap_reduce = 0;
    c->plan.reduce_dtype = dts[0];
    return plan_cost(d, dev, &c->plan, &c->cost);
  }
  c->plan.reduce_dtype = dts[t];
  c->plan.prefetch = best[t].prefetch;
  c->plan.overlap_reduce = best[t].overlap_reduce;
  c->cost = best[t].cost;
  return 0;
}

/* Whether two plans are the same (micro-batch, prefetch, overlap_reduce, reduce dtype,
** recomputed layers, every op's slices, shard group and what it keeps whole). */
static int same_plan(const Plan* a, const Plan* b) {
  if (a->micro_batch != b->micro_batch || a->prefetch != b->prefetch || a->nops != b->nops) return 0;
  if (a->overlap_reduce != b->overlap_reduce || a->reduce_dtype != b->reduce_dtype) return 0;
  if (a->nlayers != b->nlayers) return 0;
  for (int l = 0; l < a->nlayers; l++) if ((a->recompute[l] != 0) != (b->recompute[l] != 0)) return 0;
  for (int i = 0; i < a->nops; i++) {
    if (a->ops[i].k != b->ops[i].k || plan_op_group(a, i) != plan_op_group(b, i) ||
        a->ops[i].keep != b->ops[i].keep)
      return 0;
    for (int s = 0; s < a->ops[i].k; s++) if (a->ops[i].strat[s] != b->ops[i].strat[s]) return 0;
  }
  return 1;
}

/* Adds candidate c to list l (n entries, room for cap) unless an equal plan is there; takes
** ownership of c's plan. A uniform baseline equal to a plan the search found names that plan
** (so reports call an all-dp search plan "ddp", and count it among the uniform plans). */
static void add_candidate(Candidate* l, int* n, int cap, Candidate* c) {
  for (int i = 0; i < *n; i++)
    if (same_plan(&l[i].plan, &c->plan)) {
      if (c->uniform >= 0 && l[i].uniform < 0) {
        l[i].uniform = c->uniform;
        l[i].uniform_group = c->uniform_group;
        l[i].uniform_keep = c->uniform_keep;
        memcpy(l[i].origin, c->origin, sizeof l[i].origin);
      }
      plan_free(&c->plan);
      return;
    }
  if (*n < cap) l[(*n)++] = *c;
  else plan_free(&c->plan);
}

/* Orders candidates by replayed samples/s, fastest first (ties: less memory). */
static int cmp_candidate(const void* a, const void* b) {
  const Candidate *x = a, *y = b;
  if (x->cost.samples_per_s != y->cost.samples_per_s)
    return x->cost.samples_per_s > y->cost.samples_per_s ? -1 : 1;
  return x->cost.mem.peak < y->cost.mem.peak ? -1 : x->cost.mem.peak > y->cost.mem.peak;
}

/* Whether a candidate is one of the uniform ddp / zero2 / zero3 baselines. */
static int is_uniform(const Candidate* c) { return c->uniform >= 0; }

/* The name of the search's best plan without recomputation (add_searched). */
#define NO_RECOMPUTE_ORIGIN "search R=0"

/* Whether a candidate keeps its place whatever its predicted rank: the uniform baselines (what
** a trial must beat) and the best plan without recomputation (see planner_candidates). */
static int is_kept(const Candidate* c) {
  return is_uniform(c) || strcmp(c->origin, NO_RECOMPUTE_ORIGIN) == 0;
}

/* How many of the search's micro-batches are re-priced by the replay. */
#define CANDIDATE_BATCHES 6

/* Names candidate c: `what`, then " R=n" when its plan recomputes n > 0 layers. */
static void name_candidate(Candidate* c, const char* what) {
  int R = plan_recompute_count(&c->plan);
  if (R > 0) snprintf(c->origin, sizeof c->origin, "%.16s R=%d", what, R);
  else snprintf(c->origin, sizeof c->origin, "%s", what);
}

/* Adds the best plan of a search with options so (its replayed cost, options decided) as a
** candidate named `what`, if any plan fits under them. */
static int add_searched(const GptDesc* d, const DeviceInfo* dev, const SearchOptions* so,
                        const char* what, Candidate* all, int* n, int cap) {
  Candidate c = {.uniform = -1};
  if (planner_search(d, dev, so, &c.plan, &c.cost, NULL, NULL) != 0) { osdp_clear_error(); return 0; }
  name_candidate(&c, what);
  int rc = decide_options(d, dev, so->reduce_dtype, &c);
  add_candidate(all, n, cap, &c);
  return rc;
}

/* Adds the best uniform plan of strategy s with shard group G (N: over the world) keeping the
** KEEP_* bits `keep` as a candidate, if it fits at any micro-batch. */
static int add_uniform(const GptDesc* d, const DeviceInfo* dev, const SearchOptions* o, Strategy s,
                       int G, int keep, Candidate* all, int* n, int cap) {
  static const char* names[] = {"ddp", "zero2", "zero3"};
  Candidate c = {.uniform = s, .uniform_group = G == dev->ranks ? 0 : G, .uniform_keep = keep};
  if (planner_best_uniform_group(d, dev, o, s, G, keep, &c.plan, &c.cost) != 0) {
    osdp_clear_error();
    return 0;
  }
  char what[24];
  if (c.uniform_group) snprintf(what, sizeof what, "%s G=%d", names[s], G);
  else snprintf(what, sizeof what, "%s%s", names[s], keep ? " keep" : "");
  name_candidate(&c, what);
  int rc = decide_options(d, dev, normalized_options(d, o).reduce_dtype, &c);
  add_candidate(all, n, cap, &c);
  return rc;
}

/* How many plans besides the search's micro-batches: unsplit, without recomputation, one layer
** plan, 3 uniform over the world, 2 hybrid uniform and 2 uniform keeping whole. */
#define CANDIDATE_OTHERS 10

/* Most layer plans of the fastest search plan add_simple tries on every layer. */
#define SIMPLE_TRIES 4

/* Adds the fastest of plan p with every layer's ops planned as one of p's layers (each distinct
** one, up to SIMPLE_TRIES; each layer keeps whether it recomputes), options decided, that fits;
** none when p's layers are alike already. */
static int add_simple(const GptDesc* d, const DeviceInfo* dev, int rd, const Plan* p,
                      Candidate* all, int* n, int cap) {
  Candidate best = {.uniform = -1};
  int tried = 0, rc = 0, mixed = plan_layer_groups(d, p) > 1;
  for (int m = 0; mixed && m < d->cfg.n_layer && tried < SIMPLE_TRIES && !rc; m++) {
    int first = 1;
    for (int l = 0; l < m && first; l++) first = !plan_same_layer(d, p, l, m);
    if (!first) continue;
    tried++;
    Candidate c = {.uniform = -1};
    if (plan_copy(&c.plan, p)) return -1;
    for (int l = 0; l < d->cfg.n_layer; l++)
      for (int j = 0; j < d->ops_per_layer; j++)
        c.plan.ops[gpt_layer_op(d, l, j)] = p->ops[gpt_layer_op(d, m, j)];
    rc = decide_options(d, dev, rd, &c);
    if (!rc && c.cost.mem.peak <= dev->mem_limit && c.cost.samples_per_s > best.cost.samples_per_s) {
      plan_free(&best.plan);
      best = c;
    } else {
      plan_free(&c.plan);
    }
  }
  if (rc || !best.plan.ops) { plan_free(&best.plan); return rc; }
  char what[24];
  snprintf(what, sizeof what, "simple B=%d", best.plan.micro_batch);
  name_candidate(&best, what);
  add_candidate(all, n, cap, &best);
  return 0;
}

/* Whether plan a is simpler than b: fewer distinct layer plans, then fewer strategy kinds. */
static int simpler(const GptDesc* d, const Plan* a, const Plan* b) {
  int ga = plan_layer_groups(d, a), gb = plan_layer_groups(d, b);
  if (ga != gb) return ga < gb;
  return plan_strategy_kinds(d, a) < plan_strategy_kinds(d, b);
}

/* Moves the simplest of the candidates within PLANNER_MODEL_ERROR of the fastest (all[0], the
** list sorted fastest first) to the front, the others keeping their order. */
static void simplest_first(const GptDesc* d, Candidate* all, int n) {
  int pick = 0;
  for (int i = 1; i < n; i++)
    if (all[i].cost.samples_per_s >= all[0].cost.samples_per_s * (1 - PLANNER_MODEL_ERROR) &&
        simpler(d, &all[i].plan, &all[pick].plan))
      pick = i;
  Candidate c = all[pick];
  memmove(all + 1, all, (size_t)pick * sizeof *all);
  all[0] = c;
}

int planner_candidates(const GptDesc* d, const DeviceInfo* dev, const SearchOptions* o,
                       Candidate* out, int max, size_t* min_bytes, double* search_s) {
  double t0 = now_seconds();
  memset(&last_stats, 0, sizeof last_stats);
  BatchBest* v = NULL;
  int nv = 0, n = 0, cap = CANDIDATE_BATCHES + CANDIDATE_OTHERS;
  size_t need = 0;
  Candidate* all = calloc((size_t)cap, sizeof *all);
  int rc = all ? search_batches(d, dev, o, CANDIDATE_BATCHES, &v, &nv, &need) : osdp_fail("out of memory");
  PlannerStats stats = last_stats; /* the main search's, not the variants' below */
  if (nv > 0) stats.peak = v[0].peak;
  if (min_bytes) *min_bytes = need;
  for (int i = 0; !rc && i < nv && i < CANDIDATE_BATCHES; i++) {
    Candidate c = {.plan = v[i].plan, .uniform = -1};
    v[i].plan = (Plan){0};
    char what[24];
    snprintf(what, sizeof what, "search B=%d", c.plan.micro_batch);
    name_candidate(&c, what);
    rc = decide_options(d, dev, normalized_options(d, o).reduce_dtype, &c);
    if (rc) plan_free(&c.plan);
    else add_candidate(all, &n, cap, &c);
  }
  if (!rc && n > 0) { /* the fastest search plan so far, with one plan for every layer */
    int f = 0;
    for (int i = 1; i < n; i++) if (all[i].cost.samples_per_s > all[f].cost.samples_per_s) f = i;
    rc = add_simple(d, dev, normalized_options(d, o).reduce_dtype, &all[f].plan, all, &n, cap);
  }
  SearchOptions variant = normalized_options(d, o);
  variant.max_slices = 1;
  if (!rc && variant.max_slices != normalized_options(d, o).max_slices)
    rc = add_searched(d, dev, &variant, "search unsplit", all, &n, cap);
  variant = normalized_options(d, o);
  variant.max_recompute = 0;
  if (!rc && normalized_options(d, o).max_recompute > 0 && normalized_options(d, o).min_recompute == 0)
    rc = add_searched(d, dev, &variant, NO_RECOMPUTE_ORIGIN, all, &n, cap);
  SearchOptions so = normalized_options(d, o);
  int H = device_ranks_per_host(dev);
  for (int s = 0; !rc && s < STRAT_COUNT; s++)
    if (so.allow[s]) rc = add_uniform(d, dev, o, (Strategy)s, dev->ranks, 0, all, &n, cap);
  for (int s = STRAT_ZERO2; !rc && H < dev->ranks && H > 1 && s < STRAT_COUNT; s++)
    if (so.allow[s]) rc = add_uniform(d, dev, o, (Strategy)s, H, 0, all, &n, cap);
  int keep = KEEP_ALL & ~so.keep_off; /* accumulating whole, where there is accumulation */
  for (int s = STRAT_ZERO2; !rc && so.global_batch && keep && s < STRAT_COUNT; s++)
    if (so.allow[s] && (s == STRAT_ZERO3 || (keep & KEEP_GRAD)))
      rc = add_uniform(d, dev, o, (Strategy)s, dev->ranks, keep, all, &n, cap);
  /* Keep every uniform plan that fits (the baselines a trial must beat) and the best one
  ** without recomputation, and fill the rest with the fastest of the others. */
  if (!rc) qsort(all, (size_t)n, sizeof *all, cmp_candidate);
  if (!rc && n > 0) simplest_first(d, all, n);
  int nkept = 0;
  for (int i = 0; i < n; i++) nkept += is_kept(&all[i]);
  int quota = max - nkept < 1 ? 1 : max - nkept, w = 0;
  for (int i = 0; !rc && i < n; i++) {
    int take = w < max && (is_kept(&all[i]) ? 1 : quota > 0);
    if (take && !is_kept(&all[i])) quota--;
    if (take) out[w++] = all[i];
    else plan_free(&all[i].plan);
  }
  for (int i = 0; rc && i < n; i++) plan_free(&all[i].plan);
  for (int i = 0; !rc && i < w; i++) /* the search checks its own; the others are fitted here */
    if (out[i].cost.mem.peak > dev->mem_limit)
      rc = osdp_fail("internal error: candidate %s needs %zu bytes a rank, over the limit of %zu; "
                     "please report it with this command line", out[i].origin,
                     out[i].cost.mem.peak, dev->mem_limit);
  for (int i = 0; rc && i < w; i++) plan_free(&out[i].plan);
  if (rc) w = -1;
  free(all);
  batches_free(v, nv);
  last_stats = stats;
  if (search_s) *search_s = now_seconds() - t0;
  return w;
}

/* ---- Uniform plans ----------------------------------------------------------------------- */

/* Whether plan p fits on dev (its predicted peak within the limit). */
static int fits(const GptDesc* d, const DeviceInfo* dev, const Plan* p) {
  MemPrediction m;
  plan_predict_memory(d, p, dev->threads, &m);
  return m.peak <= dev->mem_limit;
}

/* The fewest recomputed layers (the first ones, from Rmin to Rmax) with which p fits, or -1;
** leaves p with them. One layer saves nothing (its blocks move into the shared buffer); from two
** on, every further layer only takes its own blocks away, so a bisection finds the fewest. */
static int fewest_recompute(const GptDesc* d, const DeviceInfo* dev, Plan* p, int Rmin, int Rmax) {
  plan_set_recompute(p, Rmin);
  if (fits(d, dev, p)) return Rmin;
  plan_set_recompute(p, Rmax);
  if (Rmax == Rmin || !fits(d, dev, p)) return -1;
  int lo = Rmin + 1, hi = Rmax; /* fits at hi */
  while (lo < hi) {
    int mid = lo + (hi - lo) / 2;
    plan_set_recompute(p, mid);
    if (fits(d, dev, p)) hi = mid; else lo = mid + 1;
  }
  plan_set_recompute(p, hi);
  return hi;
}

int planner_best_uniform(const GptDesc* d, const DeviceInfo* dev, const SearchOptions* o,
                         Strategy s, Plan* out, PlanCost* cost) {
  return planner_best_uniform_group(d, dev, o, s, dev->ranks, 0, out, cost);
}

int planner_best_uniform_group(const GptDesc* d, const DeviceInfo* dev, const SearchOptions* o,
                               Strategy s, int G, int keep, Plan* out, PlanCost* cost) {
  SearchOptions so = normalized_options(d, o);
  Plan p;
  PlanCost c, best = {0};
  int best_R = 0;
  if (G < 1 || G > dev->ranks || dev->ranks % G)
    return osdp_fail("planner: shard group %d must divide the %d ranks", G, dev->ranks);
  if (plan_uniform(&p, d, s, dev->ranks, 1, so.seq)) return -1;
  plan_set_group(&p, G);
  plan_set_keep(&p, keep);
  p.reduce_dtype = so.reduce_dtype == REDUCE_BF16 ? REDUCE_BF16 : REDUCE_FP32;
  p.precision = dev->precision;
  for (int B = so.min_batch; B <= so.max_batch; B++) {
    if (planner_accum(&so, dev, B) == 0) continue; /* N B does not divide the global batch */
    p.micro_batch = B;
    p.accum = planner_accum(&so, dev, B);
    int R = fewest_recompute(d, dev, &p, so.min_recompute, so.max_recompute);
    if (R < 0) break;
    if (plan_cost(d, dev, &p, &c)) { plan_free(&p); return -1; }
    if (c.samples_per_s > best.samples_per_s) { best = c; best_R = R; }
  }
  if (best.micro_batch == 0) {
    plan_free(&p);
    char lim[32];
    char grp[32] = "";
    if (G < dev->ranks) snprintf(grp, sizeof grp, " (shard group %d)", G);
    return osdp_fail("the uniform %s plan%s fits in %s per rank at no micro-batch", strategy_name(s),
                     grp, format_bytes((double)dev->mem_limit, lim));
  }
  p.micro_batch = best.micro_batch;
  p.accum = planner_accum(&so, dev, best.micro_batch);
  plan_set_recompute(&p, best_R);
  *out = p;
  *cost = best;
  return 0;
}
