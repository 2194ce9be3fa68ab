/*
** search.c: the exact OSDP search; see search.h. This file is the driver: it bounds every
** (cap, micro-batch) pair, solves the promising ones exactly and writes the plan; the method
** of the whole search is described here.
**
** The problem. Every operator i that owns parameters gets a configuration x_i (a slice count
** and a strategy per slice) with persistent bytes m(x), largest transient tr(x) and time t(x)
** (the search model of cost.h: communication + optimizer + the extra compute of its slices, at
** micro-batch B). For a micro-batch B,
**   peak = sum_i m(x_i) + max_i tr(x_i) + batch_bytes(B),
**   samples/s = N B / (compute(B) + sum_i t_B(x_i)).
** We want the (x, B) with the highest samples/s and peak <= limit. Each micro-batch is its own
** problem (its configurations are costed at B); micro-batches are searched largest first, and
** one whose bound N B / (compute(B) + least extra) cannot beat the best so far is skipped.
**
** The method.
**  1. Configurations. Slices of equal size are interchangeable, so per op we enumerate
**     counts of strategies per group of equal slices (not 3^k assignments) and drop the
**     dominated ones (no less memory, transient and time). Identical operators (the same
**     block in every layer) form one class and share the list.
**  2. The max over transients: for every distinct transient cap tau, restrict each op to
**     configurations with tr <= tau; a plan then fits at B iff
**       sum_i m(x_i) <= b = limit - batch_bytes(B) - tau.
**     Every plan is found under the cap equal to its own largest transient, so maximising
**     over tau is exact.
**  3. For each (tau, B) what remains is a multiple-choice knapsack: minimise sum t(x_i)
**     subject to sum m(x_i) <= b. Its linear relaxation (greedy over the convex hulls of the
**     classes' (m, t) frontiers, merged by slope) gives a lower bound LB on the time, hence an
**     upper bound on samples/s; rounding it gives a feasible plan. All (tau, B) pairs are
**     bounded (cheap), then solved exactly in order of decreasing bound until no bound can
**     beat the best exact answer.
**  4. Exact solve of one pair, given a time T that a plan must not exceed to matter: a
**     dynamic program over the ops keeps the exact Pareto list of (memory, time) partial
**     plans. A partial plan survives only if its time plus the linear relaxation of the ops
**     still to come (with the memory left) is <= T, and only options with reduced cost
**     t(x) + lambda m(x) - min_y (t(y) + lambda m(y)) <= T - LB are considered (Lagrangian
**     duality: time >= LB + the sum of the reduced costs). A first pass keeping only the 256
**     best partial plans per op finds a good plan quickly, which lowers T for the exact pass.
**     Ops are visited class by class, largest blocks first, so the small ops come last and
**     fill the memory that is left.
** Memory is exact integer bytes throughout; times are doubles, compared with a tolerance
** of ~1e-13 relative only where floating-point summation order could matter.
**
** Files (shared declarations in search_internal.h): configs.c (step 1), classes.c (classes,
** caps, micro-batches), relax.c (steps 2-3: options under a cap, relaxation), exact.c (step 4),
** search.c (the driver, below), explain.c (planner_explain).
*/
#include "planner/search_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"

_Thread_local PlannerStats last_stats;

PlannerStats planner_last_stats(void) { return last_stats; }

/* ---- The search over caps and micro-batches ---------------------------------------------- */

/* One (cap, micro-batch) pair and the best samples/s it could reach. */
typedef struct Pair {
  int tau, B;
  double bound;       /* samples/s upper bound */
} Pair;

/* Orders pairs by decreasing bound, then smaller cap, then smaller B. */
static int cmp_pair(const void* a, const void* b) {
  const Pair *x = a, *y = b;
  if (x->bound != y->bound) return x->bound > y->bound ? -1 : 1;
  if (x->tau != y->tau) return x->tau - y->tau;
  return x->B - y->B;
}

/* The best plan found so far. */
typedef struct Best {
  double sps;         /* samples/s (0: none) */
  size_t peak;
  int B;
  int* choice;        /* configuration per parameter op (param order) */
} Best;

/* Memory and largest transient of the choices of v (param order). */
static void choice_memory(const Search* s, const int* choice, size_t* mem, size_t* tr) {
  *mem = 0;
  *tr = 0;
  for (int i = 0; i < s->nparam; i++) {
    const OpConfig* c = &s->cls[s->op_class[s->param_op[i]]].cfg[choice[i]];
    *mem += c->mem;
    if (c->transient > *tr) *tr = c->transient;
  }
}

/* Smallest limit for which anything fits: min over caps of (least memory + cap), plus the
** batch bytes of micro-batch 1. */
static size_t smallest_limit(const Search* s, const CapProblem* caps) {
  size_t best = (size_t)-1;
  for (int k = 0; k < s->ntaus; k++) {
    size_t need = caps[k].minmem + caps[k].tau;
    if (need < best) best = need;
  }
  return best + cost_batch_bytes(s->d, s->dev, 1, s->o.seq);
}

/* Calls visit(ctx, cap k, B, bound, feasible) for every (cap, B) pair that fits, with the
** samples/s bound of the relaxation and that of its rounding (a real plan). */
static void for_each_pair(const Search* s, const CapProblem* caps,
                          void (*visit)(void*, int, int, double, double), void* ctx) {
  int N = s->dev->ranks;
  for (int k = 0; k < s->ntaus; k++)
    for (int B = s->B; B <= s->nbatch && B == s->B; B++) {
      size_t fixed = s->batch_bytes[B] + caps[k].tau;
      if (fixed > s->dev->mem_limit || s->dev->mem_limit - fixed < caps[k].minmem) break;
      double lb, ub, lambda;
      cap_bounds(&caps[k], s->dev->mem_limit - fixed, &lb, &ub, &lambda);
      visit(ctx, k, B, (double)N * B / (s->compute_s[B] + lb), (double)N * B / (s->compute_s[B] + ub));
    }
}

/* The candidates being collected. */
typedef struct PairList {
  Pair* v;
  long n, cap;
  double floor_sps;   /* best samples/s of a real plan seen (the roundings) */
  int failed;
} PairList;

/* First pass: the best rounding. */
static void visit_floor(void* ctx, int k, int B, double bound, double feasible) {
  PairList* l = ctx;
  if (feasible > l->floor_sps) l->floor_sps = feasible;
  last_stats.pairs++;
  (void)k, (void)B, (void)bound;
}

/* Second pass: keeps the pairs whose bound reaches the best rounding. */
static void visit_keep(void* ctx, int k, int B, double bound, double feasible) {
  PairList* l = ctx;
  if (l->failed || bound < l->floor_sps * (1 - 1e-13)) return;
  if (l->n == l->cap) {
    long cap = l->cap ? 2 * l->cap : 256;
    Pair* g = realloc(l->v, (size_t)cap * sizeof *g);
    if (!g) { l->failed = osdp_fail("out of memory"); return; }
    l->v = g;
    l->cap = cap;
  }
  l->v[l->n++] = (Pair){k, B, bound};
  (void)feasible;
}

/* Bounds every (cap, B) pair that fits and keeps, sorted by bound, those that could beat the
** best rounding. Returns their number (or -1); the list is in *out, the best rounding's
** samples/s in *floor_sps. */
static long collect_candidates(const Search* s, const CapProblem* caps, Pair** out,
                               double* floor_sps) {
  PairList l = {0};
  for_each_pair(s, caps, visit_floor, &l);
  for_each_pair(s, caps, visit_keep, &l);
  *out = l.v;
  *floor_sps = l.floor_sps;
  if (l.failed) return -1;
  if (l.n) qsort(l.v, (size_t)l.n, sizeof *l.v, cmp_pair);
  last_stats.candidates = l.n;
  return l.n;
}

/* Whether (sps, peak) beats the best so far: faster, or as fast (1e-13) with less memory. */
static int better(const Best* b, double sps, size_t peak) {
  if (b->sps == 0) return 1;
  if (sps > b->sps * (1 + 1e-13)) return 1;
  return sps >= b->sps * (1 - 1e-13) && peak < b->peak;
}

/* Solves the candidates exactly in order of bound until none can beat the best. */
static int solve_candidates(const Search* s, const CapProblem* caps, const Pair* c, long n,
                            double floor_sps, Best* best) {
  Solver v;
  if (solver_init(&v, s)) { solver_free(&v); return -1; }
  int N = s->dev->ranks, rc = 0;
  for (long i = 0; i < n && rc == 0; i++) {
    if (best->sps > 0 && c[i].bound < best->sps * (1 - 1e-13)) break; /* sorted: none can */
    const CapProblem* p = &caps[c[i].tau];
    int B = c[i].B;
    double target = fmax(best->sps, floor_sps) * (1 - 1e-13);
    double t_cap = target > 0 ? (double)N * B / target - s->compute_s[B] : INFINITY;
    size_t budget = s->dev->mem_limit - s->batch_bytes[B] - p->tau;
    double t;
    int r = solve_exact(&v, s, p, budget, t_cap, &t);
    if (r < 0) { rc = -1; break; }
    if (r == 0) continue;
    size_t mem, tr;
    choice_memory(s, v.choice, &mem, &tr);
    double sps = (double)N * B / (s->compute_s[B] + t);
    size_t peak = mem + tr + s->batch_bytes[B];
    if (!better(best, sps, peak)) continue;
    *best = (Best){sps, peak, B, best->choice};
    memcpy(best->choice, v.choice, (size_t)s->nparam * sizeof *v.choice);
  }
  solver_free(&v);
  return rc;
}

/* Writes the chosen configurations into a plan. */
static int best_to_plan(const Search* s, const Best* b, Plan* out) {
  if (plan_uniform(out, s->d, STRAT_DP, s->dev->ranks, b->B, s->o.seq)) return -1;
  for (int i = 0; i < s->nparam; i++) {
    int op = s->param_op[i];
    out->ops[op] = s->cls[s->op_class[op]].cfg[b->choice[i]].plan;
  }
  return 0;
}

/* Records that nothing fits. */
static int no_fit_error(const Search* s, size_t min_bytes) {
  char lim[32], need[32];
  return osdp_fail("no plan fits in %s per rank for %s on %d rank(s) at seq %d; the smallest "
                   "limit that fits is %s (%zu bytes, at micro-batch 1 with everything "
                   "sharded as far as the options allow); raise the limit, lower --seq or add ranks",
                   format_bytes((double)s->dev->mem_limit, lim), s->d->cfg.name, s->dev->ranks,
                   s->o.seq, format_bytes((double)min_bytes, need), min_bytes);
}

/* Solves the search built for micro-batch s->B: bounds, exact solves; the best plan in *best
** (sps 0 when nothing fits at this B). *min_bytes: the smallest limit any plan fits. */
static int search_run(Search* s, Best* best, size_t* min_bytes) {
  CapProblem* caps = calloc((size_t)s->ntaus, sizeof *caps);
  Pair* cand = NULL;
  int rc = !caps ? osdp_fail("out of memory") : 0;
  for (int k = 0; k < s->ntaus && !rc; k++) rc = cap_build(s, s->taus[k], &caps[k]);
  if (!rc) *min_bytes = smallest_limit(s, caps);
  double floor_sps = 0;
  long n = rc || *min_bytes > s->dev->mem_limit ? 0 : collect_candidates(s, caps, &cand, &floor_sps);
  if (n < 0) rc = -1;
  if (!rc && n > 0) rc = solve_candidates(s, caps, cand, n, floor_sps, best);
  for (int k = 0; caps && k < s->ntaus; k++) cap_free(&caps[k]);
  free(caps);
  free(cand);
  return rc;
}

/* The best plan of one micro-batch under the search model. */
typedef struct BatchBest {
  int B;
  double sps;
  size_t peak;
  Plan plan;
} BatchBest;

/* Least extra compute any configuration of the model's ops can add at micro-batch B (splitting
** may be measured faster than not): sum over parameter ops of min(0, min_k extra). */
static double least_split_extra(const GptDesc* d, const DeviceInfo* dev, const SearchOptions* o, int B) {
  double t = 0;
  for (int i = 0; i < d->nops; i++) {
    if (!d->ops[i].n_params || !d->ops[i].splittable) continue;
    double m = 0;
    for (int k = 2; k <= o->max_slices && (size_t)k <= d->ops[i].rows; k *= 2)
      m = fmin(m, cost_split_extra_s(d, dev, i, k, B, o->seq));
    t += m;
  }
  return t;
}

/* Searches every micro-batch that fits, largest first, skipping those whose bound cannot
** reach the keep-th best found. Writes the found ones into out[0..*nout) (fastest first by
** the search model); *min_bytes as planner_search. */
static int search_batches(const GptDesc* d, const DeviceInfo* dev, const SearchOptions* o, int keep,
                          BatchBest** out, int* nout, size_t* min_bytes) {
  SearchOptions so = normalized_options(d, o);
  *out = NULL;
  *nout = 0;
  *min_bytes = (size_t)-1;
  if (device_validate(dev, "device")) return -1;
  if (so.seq > d->cfg.max_seq)
    return osdp_fail("planner: seq %d exceeds the model's max_seq %d; lower --seq", so.seq,
                     d->cfg.max_seq);
  int nb = 0;
  while (nb < so.max_batch && cost_batch_bytes(d, dev, nb + 1, so.seq) <= dev->mem_limit) nb++;
  BatchBest* v = calloc((size_t)(nb > 0 ? nb : 1), sizeof *v);
  if (!v) return osdp_fail("out of memory");
  int n = 0, rc = 0, N = dev->ranks;
  for (int B = nb > 0 ? nb : 1; B >= 1 && !rc; B--) {
    double comp = cost_compute_s(d, dev, B, so.seq) + device_step_collective_s(dev, COLL_ALLREDUCE, 16);
    double bound = (double)N * B / (comp + least_split_extra(d, dev, &so, B));
    double bar = n >= keep ? v[keep - 1].sps : 0;
    if (nb > 0 && bound < bar * (1 - 1e-13) && B > 1) continue;
    Search s;
    Best best = {0};
    size_t need = 0;
    rc = search_build(&s, d, dev, &so, B);
    best.choice = rc ? NULL : malloc((size_t)(s.nparam ? s.nparam : 1) * sizeof *best.choice);
    if (!rc && !best.choice) rc = osdp_fail("out of memory");
    if (!rc) rc = search_run(&s, &best, &need);
    if (need < *min_bytes) *min_bytes = need;
    if (!rc && best.sps > 0 && nb > 0) {
      BatchBest x = {B, best.sps, best.peak, {0}};
      rc = best_to_plan(&s, &best, &x.plan);
      int at = n;
      while (!rc && at > 0 && (x.sps > v[at - 1].sps * (1 + 1e-13) ||
                               (x.sps >= v[at - 1].sps * (1 - 1e-13) && x.peak < v[at - 1].peak))) {
        v[at] = v[at - 1];
        at--;
      }
      if (!rc) { v[at] = x; n++; }
    }
    free(best.choice);
    search_free(&s);
  }
  *out = v;
  *nout = n;
  if (!rc && n == 0) {
    Search s = {.d = d, .dev = dev, .o = so};
    rc = no_fit_error(&s, *min_bytes);
  }
  return rc;
}

/* Frees the plans of a BatchBest list and the list. */
static void batches_free(BatchBest* v, int n) {
  for (int i = 0; i < n; i++) plan_free(&v[i].plan);
  free(v);
}

int planner_search(const GptDesc* d, const DeviceInfo* dev, const SearchOptions* o, Plan* out,
                   PlanCost* cost, size_t* min_bytes, double* search_s) {
  double t0 = now_seconds();
  memset(&last_stats, 0, sizeof last_stats);
  memset(out, 0, sizeof *out);
  BatchBest* v = NULL;
  int n = 0;
  size_t need = 0;
  int rc = search_batches(d, dev, o, 1, &v, &n, &need);
  if (min_bytes) *min_bytes = need;
  if (!rc) {
    *out = v[0].plan;
    v[0].plan = (Plan){0};
    PlanCost scratch;
    rc = plan_cost(d, dev, out, cost ? cost : &scratch);
    if (rc) plan_free(out);
  }
  batches_free(v, n);
  if (search_s) *search_s = now_seconds() - t0;
  return rc;
}

/* Turns zero3 prefetch on in c's plan when it fits under the limit and the replay says the
** step is faster; re-prices it. */
static int decide_prefetch(const GptDesc* d, const DeviceInfo* dev, Candidate* c) {
  int any = 0;
  for (int i = 0; i < d->nops; i++)
    for (int s = 0; d->ops[i].n_params && s < c->plan.ops[i].k; s++)
      any |= c->plan.ops[i].strat[s] == STRAT_ZERO3;
  if (!any) return 0;
  PlanCost with;
  c->plan.prefetch = 1;
  if (plan_cost(d, dev, &c->plan, &with)) return -1;
  if (with.mem.peak <= dev->mem_limit && with.step_s < c->cost.step_s) c->cost = with;
  else c->plan.prefetch = 0;
  return 0;
}

/* Whether two plans are the same (micro-batch, prefetch, every op's slices). */
static int same_plan(const Plan* a, const Plan* b) {
  if (a->micro_batch != b->micro_batch || a->prefetch != b->prefetch || a->nops != b->nops) return 0;
  for (int i = 0; i < a->nops; i++) {
    if (a->ops[i].k != b->ops[i].k) return 0;
    for (int s = 0; s < a->ops[i].k; s++) if (a->ops[i].strat[s] != b->ops[i].strat[s]) return 0;
  }
  return 1;
}

/* Adds candidate c to list l (n entries, room for cap) unless an equal plan is there; takes
** ownership of c's plan. */
static void add_candidate(Candidate* l, int* n, int cap, Candidate* c) {
  for (int i = 0; i < *n; i++)
    if (same_plan(&l[i].plan, &c->plan)) { plan_free(&c->plan); return; }
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

/* How many of the search's micro-batches are re-priced by the replay. */
#define CANDIDATE_BATCHES 6

int planner_candidates(const GptDesc* d, const DeviceInfo* dev, const SearchOptions* o,
                       Candidate* out, int max, size_t* min_bytes, double* search_s) {
  double t0 = now_seconds();
  memset(&last_stats, 0, sizeof last_stats);
  BatchBest* v = NULL;
  int nv = 0, n = 0, cap = CANDIDATE_BATCHES + 4;
  size_t need = 0;
  Candidate* all = calloc((size_t)cap, sizeof *all);
  int rc = all ? search_batches(d, dev, o, CANDIDATE_BATCHES, &v, &nv, &need) : osdp_fail("out of memory");
  if (min_bytes) *min_bytes = need;
  for (int i = 0; !rc && i < nv && i < CANDIDATE_BATCHES; i++) {
    Candidate c = {.plan = v[i].plan, .uniform = -1};
    v[i].plan = (Plan){0};
    snprintf(c.origin, sizeof c.origin, "search B=%d", c.plan.micro_batch);
    rc = plan_cost(d, dev, &c.plan, &c.cost) || decide_prefetch(d, dev, &c);
    if (rc) plan_free(&c.plan);
    else add_candidate(all, &n, cap, &c);
  }
  SearchOptions unsplit = normalized_options(d, o);
  unsplit.max_slices = 1;
  Plan up;
  PlanCost uc;
  if (!rc && o->max_slices != 1 && planner_search(d, dev, &unsplit, &up, &uc, NULL, NULL) == 0) {
    Candidate c = {.plan = up, .cost = uc, .uniform = -1};
    snprintf(c.origin, sizeof c.origin, "search unsplit");
    rc = decide_prefetch(d, dev, &c);
    add_candidate(all, &n, cap, &c);
  }
  static const char* names[] = {"ddp", "zero2", "zero3"};
  for (int s = 0; !rc && s < STRAT_COUNT; s++) {
    SearchOptions so = normalized_options(d, o);
    if (!so.allow[s]) continue;
    if (planner_best_uniform(d, dev, o, (Strategy)s, &up, &uc) != 0) { osdp_clear_error(); continue; }
    Candidate c = {.plan = up, .cost = uc, .uniform = s};
    snprintf(c.origin, sizeof c.origin, "%s", names[s]);
    rc = decide_prefetch(d, dev, &c);
    add_candidate(all, &n, cap, &c);
  }
  /* Keep every uniform plan that fits (the baselines a trial must beat) and fill the rest
  ** with the fastest of the others. */
  if (!rc) qsort(all, (size_t)n, sizeof *all, cmp_candidate);
  int nuni = 0;
  for (int i = 0; i < n; i++) nuni += is_uniform(&all[i]);
  int quota = max - nuni < 1 ? 1 : max - nuni, w = 0;
  for (int i = 0; !rc && i < n; i++) {
    int take = w < max && (is_uniform(&all[i]) ? 1 : quota > 0);
    if (take && !is_uniform(&all[i])) quota--;
    if (take) out[w++] = all[i];
    else plan_free(&all[i].plan);
  }
  for (int i = 0; rc && i < n; i++) plan_free(&all[i].plan);
  if (rc) w = -1;
  free(all);
  batches_free(v, nv);
  if (search_s) *search_s = now_seconds() - t0;
  return w;
}

/* ---- Uniform plans ----------------------------------------------------------------------- */

int planner_best_uniform(const GptDesc* d, const DeviceInfo* dev, const SearchOptions* o,
                         Strategy s, Plan* out, PlanCost* cost) {
  SearchOptions so = normalized_options(d, o);
  Plan p;
  PlanCost c, best = {0};
  if (plan_uniform(&p, d, s, dev->ranks, 1, so.seq)) return -1;
  for (int B = 1; B <= so.max_batch; B++) {
    p.micro_batch = B;
    if (plan_cost(d, dev, &p, &c)) { plan_free(&p); return -1; }
    if (c.mem.peak > dev->mem_limit) break;
    if (c.samples_per_s > best.samples_per_s) best = c;
  }
  if (best.micro_batch == 0) {
    plan_free(&p);
    char lim[32];
    return osdp_fail("the uniform %s plan fits in %s per rank at no micro-batch", strategy_name(s),
                     format_bytes((double)dev->mem_limit, lim));
  }
  p.micro_batch = best.micro_batch;
  *out = p;
  *cost = best;
  return 0;
}
