/*
** search.c: the exact OSDP search; see search.h. This file is the driver: per micro-batch and
** recompute count it bounds every cap, solves the promising ones exactly and writes the plan;
** the method of the whole search is described here.
**
** The problem. Every operator i that owns parameters gets a configuration x_i (a slice count
** and a strategy per slice) with persistent bytes m(x), largest transient tr(x) and time t(x)
** (the search model of cost.h: communication + optimizer + the extra compute of its slices, at
** micro-batch B); and the first R layers recompute their activations in backward. In the
** search model the layers are alike, so which R layers recompute changes neither memory nor
** time: only R matters (tested). For a micro-batch B and a recompute count R,
**   peak = sum_i m(x_i) + max_i tr(x_i) + batch_bytes(B, R),
**   samples/s = N B / (compute(B) + recompute(B, R) + sum_i t_{B,R}(x_i)),
** where batch_bytes(B, R) is the activations as gpt_acts_layout places them plus scratch,
** recompute(B, R) the recomputed forwards (cost_recompute_s), and an op of a recomputed layer
** has its own configuration times t_{B,R}: a zero3 slice gathers once more for the recomputed
** forward, and the extra compute of splitting counts 1 + its forward share times (about 4/3).
** We want the (x, B, R) with the highest samples/s and peak <= limit.
**
** Micro-batches and recompute counts. Each (B, R) is its own problem. Micro-batches are
** searched largest first; one whose bound N B / (compute(B) + recompute(B, R_min) + least
** extra) cannot beat the best so far is skipped. At a micro-batch only the counts R whose
** batch bytes are below those of every smaller count are worth it (more recomputation adds
** time to every plan: one recomputed layer saves nothing, its blocks just move into the shared
** buffer), and only where the least plan fits. Their problems are bounded (the best
** relaxation bound and rounding over their caps, step 3) and solved best bound first while
** the bound can beat both the best plan found and the best rounding of any count.
**
** The method for one (B, R).
**  1. Configurations. Slices of equal size are interchangeable, so per op we enumerate
**     counts of strategies per group of equal slices (not 3^k assignments) and drop the
**     dominated ones (no less memory, transient and time). Operators with the same block and
**     the same uses in the step's schedule (cost_ops_uses; a recomputed layer's ops have one
**     more forward use) form one class and share the list; the classes of a micro-batch are
**     built once for every R (ClassPool), and R only sets how many ops each class has.
**  2. The max over transients: for every distinct transient cap tau, restrict each op to
**     configurations with tr <= tau; a plan then fits iff
**       sum_i m(x_i) <= b = limit - batch_bytes(B, R) - tau.
**     Every plan is found under the cap equal to its own largest transient, so maximising
**     over tau is exact.
**  3. For each tau what remains is a multiple-choice knapsack: minimise sum t(x_i)
**     subject to sum m(x_i) <= b. Its linear relaxation (greedy over the convex hulls of the
**     classes' (m, t) frontiers, merged by slope) gives a lower bound LB on the time, hence an
**     upper bound on samples/s; rounding it gives a feasible plan. All caps are bounded
**     (cheap), then solved exactly in order of decreasing bound until no bound can beat the
**     best exact answer.
**  4. Exact solve of one cap, given a time T that a plan must not exceed to matter: a
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
** caps, the problem of one (B, R)), relax.c (steps 2-3: options under a cap, relaxation),
** exact.c (step 4), search.c (the driver, below), candidates.c (the candidates and uniform
** baselines), explain.c (planner_explain).
*/
#include "planner/search_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"

_Thread_local PlannerStats last_stats;

PlannerStats planner_last_stats(void) { return last_stats; }

/* ---- One (micro-batch, recompute count) problem: its caps, bounds and exact solves ------- */

/* One cap of a problem and the best samples/s it could reach. */
typedef struct Pair {
  int tau;
  double bound;       /* samples/s upper bound */
} Pair;

/* Orders pairs by decreasing bound, then smaller cap. */
static int cmp_pair(const void* a, const void* b) {
  const Pair *x = a, *y = b;
  if (x->bound != y->bound) return x->bound > y->bound ? -1 : 1;
  return x->tau - y->tau;
}

/* The best choice found so far in one problem. */
typedef struct Best {
  double sps;         /* samples/s (0: none) */
  size_t peak;
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

/* Least persistent + transient bytes of any plan of search s: the minimum over caps of the
** least memory under the cap plus the cap. The same for every micro-batch and recompute count
** (configurations differ only in time there). */
static size_t least_fixed_bytes(const Search* s) {
  size_t best = (size_t)-1;
  for (int k = 0; k < s->ntaus; k++) {
    size_t need = s->taus[k];
    for (int c = 0; c < s->ncls; c++) {
      size_t lo = (size_t)-1;
      for (int j = 0; j < s->cls[c].ncfg; j++)
        if (s->cls[c].cfg[j].transient <= s->taus[k] && s->cls[c].cfg[j].mem < lo) lo = s->cls[c].cfg[j].mem;
      need += (size_t)s->cls[c].count * lo;
    }
    if (need < best) best = need;
  }
  return best;
}

/* Calls visit(ctx, cap k, bound, feasible) for every cap under which something fits, with the
** samples/s bound of the relaxation and that of its rounding (a real plan). */
static void for_each_pair(const Search* s, const CapProblem* caps,
                          void (*visit)(void*, int, double, double), void* ctx) {
  for (int k = 0; k < s->ntaus; k++) {
    size_t fixed = s->batch_bytes + caps[k].tau;
    if (fixed > s->dev->mem_limit || s->dev->mem_limit - fixed < caps[k].minmem) continue;
    double lb, ub, lambda;
    cap_bounds(&caps[k], s->dev->mem_limit - fixed, &lb, &ub, &lambda);
    visit(ctx, k, s->samples / (s->compute_s + lb), s->samples / (s->compute_s + ub));
  }
}

/* The candidates being collected. */
typedef struct PairList {
  Pair* v;
  long n, cap;
  double floor_sps;   /* best samples/s of a real plan seen (the roundings) */
  double bar;         /* samples/s a plan must reach to matter (found elsewhere) */
  int failed;
} PairList;

/* First pass: the best rounding. */
static void visit_floor(void* ctx, int k, double bound, double feasible) {
  PairList* l = ctx;
  if (feasible > l->floor_sps) l->floor_sps = feasible;
  (void)k, (void)bound;
}

/* Second pass: keeps the pairs whose bound reaches the best rounding and the bar. */
static void visit_keep(void* ctx, int k, double bound, double feasible) {
  PairList* l = ctx;
  if (l->failed || bound < fmax(l->floor_sps, l->bar) * (1 - 1e-13)) return;
  if (l->n == l->cap) {
    long cap = l->cap ? 2 * l->cap : 256;
    Pair* g = realloc(l->v, (size_t)cap * sizeof *g);
    if (!g) { l->failed = osdp_fail("out of memory"); return; }
    l->v = g;
    l->cap = cap;
  }
  l->v[l->n++] = (Pair){k, bound};
  (void)feasible;
}

/* Bounds every cap under which something fits and keeps, sorted by bound, those that could
** beat the best rounding and reach `bar`. Returns their number (or -1); the list is in *out,
** the best rounding's samples/s in *floor_sps. */
static long collect_candidates(const Search* s, const CapProblem* caps, double bar, Pair** out,
                               double* floor_sps) {
  PairList l = {.bar = bar};
  for_each_pair(s, caps, visit_floor, &l);
  for_each_pair(s, caps, visit_keep, &l);
  *out = l.v;
  *floor_sps = l.floor_sps;
  if (l.failed) return -1;
  if (l.n) qsort(l.v, (size_t)l.n, sizeof *l.v, cmp_pair);
  last_stats.candidates += l.n;
  return l.n;
}

/* Whether (sps, peak) beats (best_sps, best_peak): faster, or as fast (1e-13) with less memory. */
static int better(double best_sps, size_t best_peak, double sps, size_t peak) {
  if (best_sps == 0) return 1;
  if (sps > best_sps * (1 + 1e-13)) return 1;
  return sps >= best_sps * (1 - 1e-13) && peak < best_peak;
}

/* Solves the candidates exactly in order of bound until none can beat the best or the bar. */
static int solve_candidates(const Search* s, const CapProblem* caps, const Pair* c, long n,
                            double floor_sps, double bar, Best* best) {
  Solver v;
  if (solver_init(&v, s)) { solver_free(&v); return -1; }
  int rc = 0;
  for (long i = 0; i < n && rc == 0; i++) {
    double need = fmax(best->sps, bar);
    if (need > 0 && c[i].bound < need * (1 - 1e-13)) break; /* sorted: none can */
    const CapProblem* p = &caps[c[i].tau];
    double target = fmax(need, floor_sps) * (1 - 1e-13);
    double t_cap = target > 0 ? s->samples / target - s->compute_s : INFINITY;
    size_t budget = s->dev->mem_limit - s->batch_bytes - p->tau;
    double t;
    int r = solve_exact(&v, s, p, budget, t_cap, &t);
    if (r < 0) { rc = -1; break; }
    if (r == 0) continue;
    size_t mem, tr;
    choice_memory(s, v.choice, &mem, &tr);
    double sps = s->samples / (s->compute_s + t);
    size_t peak = mem + tr + s->batch_bytes;
    if (!better(best->sps, best->peak, sps, peak)) continue;
    best->sps = sps;
    best->peak = peak;
    memcpy(best->choice, v.choice, (size_t)s->nparam * sizeof *v.choice);
  }
  solver_free(&v);
  return rc;
}

/* Solves search s: bounds, exact solves; the best plan reaching `bar` samples/s (within
** 1e-13) in *best (sps 0 when none). */
static int search_run(const Search* s, double bar, Best* best) {
  CapProblem* caps = calloc((size_t)s->ntaus, sizeof *caps);
  Pair* cand = NULL;
  int rc = !caps ? osdp_fail("out of memory") : 0;
  for (int k = 0; k < s->ntaus && !rc; k++) rc = cap_build(s, s->taus[k], &caps[k]);
  double floor_sps = 0;
  long n = rc ? 0 : collect_candidates(s, caps, bar, &cand, &floor_sps);
  if (n < 0) rc = -1;
  if (!rc && n > 0) rc = solve_candidates(s, caps, cand, n, floor_sps, bar, best);
  for (int k = 0; caps && k < s->ntaus; k++) cap_free(&caps[k]);
  free(caps);
  free(cand);
  return rc;
}

/* Bound of one cap: the best relaxation bound and rounding over the caps so far. */
typedef struct Bounds {
  double bound, feasible;
} Bounds;

/* Keeps the best bound and rounding; counts the pair. */
static void visit_bounds(void* ctx, int k, double bound, double feasible) {
  Bounds* b = ctx;
  b->bound = fmax(b->bound, bound);
  b->feasible = fmax(b->feasible, feasible);
  last_stats.pairs++;
  (void)k;
}

/* The samples/s bounds of search s over all its caps: *ub no plan exceeds (the relaxation),
** *feasible a real plan reaches (the best rounding); both 0 when nothing fits. */
static int search_bounds(const Search* s, double* ub, double* feasible) {
  CapProblem* caps = calloc((size_t)s->ntaus, sizeof *caps);
  int rc = !caps ? osdp_fail("out of memory") : 0;
  for (int k = 0; k < s->ntaus && !rc; k++) rc = cap_build(s, s->taus[k], &caps[k]);
  Bounds b = {0, 0};
  if (!rc) for_each_pair(s, caps, visit_bounds, &b);
  for (int k = 0; caps && k < s->ntaus; k++) cap_free(&caps[k]);
  free(caps);
  *ub = b.bound;
  *feasible = b.feasible;
  return rc;
}

/* Writes the chosen configurations and the recompute count into a plan. */
static int best_to_plan(const Search* s, const Best* b, Plan* out) {
  if (plan_uniform(out, s->d, STRAT_DP, s->dev->ranks, s->B, s->o.seq)) return -1;
  for (int i = 0; i < s->nparam; i++) {
    int op = s->param_op[i];
    out->ops[op] = s->cls[s->op_class[op]].cfg[b->choice[i]].plan;
  }
  plan_set_recompute(out, s->R);
  out->accum = s->K;
  out->reduce_dtype = s->o.reduce_dtype == REDUCE_BF16 ? REDUCE_BF16 : REDUCE_FP32;
  out->precision = s->dev->precision;
  return 0;
}

/* ---- The search over micro-batches and recompute counts ---------------------------------- */

/* What the search over micro-batches shares. */
typedef struct Driver {
  const GptDesc* d;
  const DeviceInfo* dev;
  SearchOptions o;    /* normalized */
  int* flags;         /* scratch: per-layer recompute flags */
  size_t fixed;       /* least persistent + transient bytes of any plan (least_fixed_bytes) */
} Driver;

/* The flags of the first R layers, in x's scratch. */
static const int* first_layers(const Driver* x, int R) {
  for (int l = 0; l < x->d->cfg.n_layer; l++) x->flags[l] = l < R;
  return x->flags;
}

/* Batch bytes at micro-batch B with the first R layers recomputed. */
static size_t batch_bytes_at(const Driver* x, int B, int R) {
  return cost_batch_bytes(x->d, x->dev, B, x->o.seq, first_layers(x, R));
}

/* The recompute counts worth searching at micro-batch B, ascending, into rs: those from
** o.min_recompute up to o.max_recompute whose batch bytes are below those of every smaller count (a count that saves
** nothing more is only slower: recomputation adds time to every plan) and under which the
** least plan fits. Returns how many. */
static int recompute_counts(const Driver* x, int B, int* rs) {
  int n = 0;
  size_t least = (size_t)-1;
  for (int R = x->o.min_recompute; R <= x->o.max_recompute; R++) {
    size_t bytes = batch_bytes_at(x, B, R);
    if (bytes >= least) continue;
    least = bytes;
    if (x->fixed + bytes <= x->dev->mem_limit) rs[n++] = R;
  }
  return n;
}

/* Least extra compute any configuration can add at micro-batch B with any allowed recompute
** count (splitting may be measured faster than not): sum over parameter ops of min(0, min_k
** extra), with the most layers recomputed (which scales a negative extra the most). */
static double least_split_extra(const Driver* x, int B) {
  const GptDesc* d = x->d;
  const int* flags = first_layers(x, x->o.max_recompute);
  double t = 0;
  for (int i = 0; i < d->nops; i++) {
    if (!d->ops[i].n_params || !d->ops[i].splittable) continue;
    double m = 0;
    for (int k = 2; k <= x->o.max_slices && (size_t)k <= d->ops[i].rows; k *= 2)
      m = fmin(m, cost_split_extra_s(d, x->dev, i, k, B, x->o.seq, flags));
    t += m;
  }
  return t;
}

/* An upper bound on the samples/s of micro-batch B (K micro-steps) with at least R0 recomputed
** layers: its unsplit compute, the recomputed forwards of R0 layers and the least extra, K times,
** no communication. */
static double batch_bound(const Driver* x, int B, int R0) {
  int T = x->o.seq, K = planner_accum(&x->o, x->dev, B);
  double t = K * (cost_compute_s(x->d, x->dev, B, T) +
                  cost_recompute_s(x->d, x->dev, B, T, first_layers(x, R0)) + least_split_extra(x, B)) +
             device_step_collective_s(x->dev, COLL_ALLREDUCE, 16);
  return (double)x->dev->ranks * B * K / t;
}

/* A problem's index and its bound. */
typedef struct Ranked {
  int i;
  double bound;
} Ranked;

/* Orders problems by decreasing bound, then index. */
static int cmp_ranked(const void* a, const void* b) {
  const Ranked *x = a, *y = b;
  if (x->bound != y->bound) return x->bound > y->bound ? -1 : 1;
  return x->i - y->i;
}

/* Solves the problems of pool's micro-batch for the recompute counts rs[0..nr), best first by
** the relaxation's bound (search_bounds), each only while its bound can reach the bar: the
** most of `bar`, the best plan found and the best rounding of any count (a real plan). The best
** reaching `bar` into *out (sps 0 when none). */
static int search_counts(const ClassPool* pool, const int* rs, int nr, double bar, BatchBest* out) {
  Search* sv = calloc((size_t)nr, sizeof *sv);
  Ranked* order = malloc((size_t)nr * sizeof *order);
  int rc = sv && order ? 0 : osdp_fail("out of memory"), built = 0;
  double floor_sps = 0;
  for (; !rc && built < nr; built++) {
    double ub = 0, feasible = 0;
    rc = search_build(&sv[built], pool, rs[built]);
    if (!rc) rc = search_bounds(&sv[built], &ub, &feasible);
    order[built] = (Ranked){built, ub};
    floor_sps = fmax(floor_sps, feasible);
  }
  if (!rc) qsort(order, (size_t)nr, sizeof *order, cmp_ranked);
  for (int j = 0; !rc && j < nr; j++) {
    double need = fmax(fmax(out->sps, bar), floor_sps);
    if (order[j].bound < need * (1 - 1e-13)) break; /* sorted: none can */
    const Search* s = &sv[order[j].i];
    Best b = {.choice = malloc((size_t)(s->nparam ? s->nparam : 1) * sizeof(int))};
    rc = b.choice ? search_run(s, need, &b) : osdp_fail("out of memory");
    if (!rc && b.sps > 0 && better(out->sps, out->peak, b.sps, b.peak)) {
      plan_free(&out->plan);
      *out = (BatchBest){s->B, s->R, b.sps, b.peak, {0}};
      rc = best_to_plan(s, &b, &out->plan);
    }
    free(b.choice);
  }
  for (int j = 0; sv && j < built; j++) search_free(&sv[j]);
  free(sv);
  free(order);
  return rc;
}

/* Least persistent + transient bytes of any plan (built from micro-batch 1's classes). */
static int fixed_bytes(Driver* x) {
  ClassPool pool;
  Search s = {0};
  int rc = pool_build(&pool, x->d, x->dev, &x->o, 1);
  if (!rc) rc = search_build(&s, &pool, 0);
  if (!rc) x->fixed = least_fixed_bytes(&s);
  search_free(&s);
  pool_free(&pool);
  return rc;
}

/* Records that nothing fits: the smallest limit is min_bytes, with R layers recomputed. */
static int no_fit_error(const Driver* x, size_t min_bytes, int R) {
  char lim[32], need[32], rec[64] = "";
  if (R > 0) snprintf(rec, sizeof rec, ", %d layer%s recomputed", R, R == 1 ? "" : "s");
  return osdp_fail("no plan fits in %s per rank for %s on %d rank(s) at seq %d; the smallest "
                   "limit that fits is %s (%zu bytes, at micro-batch 1 with everything "
                   "sharded as far as the options allow%s); raise the limit, lower --seq or add ranks",
                   format_bytes((double)x->dev->mem_limit, lim), x->d->cfg.name, x->dev->ranks,
                   x->o.seq, format_bytes((double)min_bytes, need), min_bytes, rec);
}

/* Records why nothing was found when memory is not the reason (the smallest plan, min_bytes,
** fits): a device whose figures are out of their ranges gives times that overflow to infinity
** or NaN, which no plan can beat; otherwise the usual no_fit_error. */
static int no_plan_error(const Driver* x, size_t min_bytes, int R) {
  if (min_bytes > x->dev->mem_limit || !device_check_ranges(x->dev, "device")) {
    osdp_clear_error();
    return no_fit_error(x, min_bytes, R);
  }
  char why[512], need[32];
  snprintf(why, sizeof why, "%s", osdp_last_error());
  return osdp_fail("no plan for %s on %d rank(s) has a finite predicted step time (memory is not "
                   "the problem: the smallest plan needs %s); %s", x->d->cfg.name, x->dev->ranks,
                   format_bytes((double)min_bytes, need), why);
}

/* The error for a smallest micro-batch (min_batch) larger than the largest that fits (nb). */
static int batch_fit_error(const Driver* x, int nb) {
  char lim[32];
  return osdp_fail("no plan fits micro-batch %d of %s in %s per rank on %d rank(s) at seq %d (the "
                   "largest that fits is %d); lower --batch, raise the limit or add ranks",
                   x->o.min_batch, x->d->cfg.name, format_bytes((double)x->dev->mem_limit, lim),
                   x->dev->ranks, x->o.seq, nb);
}

/* The smallest limit any plan fits (micro-batch 1, the allowed recompute count with the fewest
** batch bytes, which goes to *R). */
static size_t smallest_limit(const Driver* x, int* R) {
  size_t best = (size_t)-1;
  for (int r = x->o.min_recompute; r <= x->o.max_recompute; r++) {
    size_t need = x->fixed + batch_bytes_at(x, 1, r);
    if (need < best) { best = need; *R = r; }
  }
  return best;
}

/* Inserts b into v (n entries, fastest first by the search model; ties: less memory). */
static void insert_batch(BatchBest* v, int* n, const BatchBest* b) {
  int at = *n;
  while (at > 0 && better(v[at - 1].sps, v[at - 1].peak, b->sps, b->peak)) {
    v[at] = v[at - 1];
    at--;
  }
  v[at] = *b;
  (*n)++;
}

/* The search's promise, kept for every plan it returns: its own sum of the plan's peak (the
** configurations' bytes, the largest transient, the batch bytes) is plan_predict_memory's to
** the byte, and within the limit. A break is a bug in the search, reported as an internal error
** naming both numbers, never a plan that would not fit. */
static int check_promise(const GptDesc* d, const DeviceInfo* dev, const BatchBest* b) {
  MemPrediction m;
  plan_predict_memory(d, &b->plan, dev->threads, &m);
  if (m.peak == b->peak && m.peak <= dev->mem_limit) return 0;
  return osdp_fail("internal error: the search priced its plan for %s (micro-batch %d, %d layers "
                   "recomputed) at %zu bytes a rank, but it needs %zu (plan_predict_memory) under a "
                   "limit of %zu; please report it with this command line",
                   d->cfg.name, b->B, b->R, b->peak, m.peak, dev->mem_limit);
}

/* Searches every micro-batch that fits with one reduce dtype (o's, not auto), largest first,
** skipping those whose bound cannot reach the keep-th best found; per micro-batch every
** recompute count worth it (see search_counts). Writes the found ones into out[0..*nout)
** (fastest first by the search model); *min_bytes as planner_search. */
static int search_batches_of(const GptDesc* d, const DeviceInfo* dev, const SearchOptions* o,
                             int keep, BatchBest** out, int* nout, size_t* min_bytes) {
  Driver x = {.d = d, .dev = dev, .o = normalized_options(d, o)};
  *out = NULL;
  *nout = 0;
  *min_bytes = (size_t)-1;
  x.flags = malloc((size_t)(d->cfg.n_layer > 0 ? d->cfg.n_layer : 1) * sizeof *x.flags);
  int* rs = malloc(((size_t)x.o.max_recompute + 1) * sizeof *rs);
  int rc = x.flags && rs ? fixed_bytes(&x) : osdp_fail("out of memory"), Rmin = 0;
  if (!rc) *min_bytes = smallest_limit(&x, &Rmin);
  if (!rc && *min_bytes > dev->mem_limit) rc = no_fit_error(&x, *min_bytes, Rmin);
  int nb = 0, n = 0;
  while (!rc && nb < x.o.max_batch && recompute_counts(&x, nb + 1, rs) > 0) nb++;
  BatchBest* v = rc ? NULL : calloc((size_t)(nb > 0 ? nb : 1), sizeof *v);
  if (!rc && !v) rc = osdp_fail("out of memory");
  for (int B = nb; B >= x.o.min_batch && !rc; B--) {
    if (planner_accum(&x.o, dev, B) == 0) continue; /* N B does not divide the global batch */
    int nr = recompute_counts(&x, B, rs);
    double bar = n >= keep ? v[keep - 1].sps : 0;
    if (nr == 0 || batch_bound(&x, B, rs[0]) < bar * (1 - 1e-13)) continue;
    ClassPool pool;
    BatchBest b = {0};
    rc = pool_build(&pool, d, dev, &x.o, B);
    if (!rc) rc = search_counts(&pool, rs, nr, bar, &b);
    if (!rc && b.sps > 0) rc = check_promise(d, dev, &b);
    pool_free(&pool);
    if (!rc && b.sps > 0) insert_batch(v, &n, &b);
    else plan_free(&b.plan);
  }
  if (!rc && n == 0 && nb < x.o.min_batch) rc = batch_fit_error(&x, nb);
  if (!rc && n == 0) rc = no_plan_error(&x, *min_bytes, Rmin);
  *out = v;
  *nout = n;
  free(rs);
  free(x.flags);
  return rc;
}

/* The search model's samples/s of b as auto compares plans: bf16 plans count
** REDUCE_BF16_MIN_GAIN slower (they must gain that much to be chosen). */
static double handicapped_sps(const BatchBest* b) {
  return b->plan.reduce_dtype == REDUCE_BF16 ? b->sps / (1 + REDUCE_BF16_MIN_GAIN) : b->sps;
}

/* Orders BatchBest entries by handicapped_sps, fastest first (ties: less memory). */
static int cmp_batch(const void* a, const void* b) {
  const BatchBest *x = a, *y = b;
  double sx = handicapped_sps(x), sy = handicapped_sps(y);
  if (sx != sy) return sx > sy ? -1 : 1;
  return x->peak < y->peak ? -1 : x->peak > y->peak;
}

/* Whether some micro-batch of o's range makes whole micro-steps of its global batch. */
static int any_accum_batch(const SearchOptions* o, const DeviceInfo* dev) {
  for (int B = o->min_batch; B <= o->max_batch; B++)
    if (planner_accum(o, dev, B)) return 1;
  return 0;
}

int search_batches(const GptDesc* d, const DeviceInfo* dev, const SearchOptions* o, int keep,
                   BatchBest** out, int* nout, size_t* min_bytes) {
  *out = NULL;
  *nout = 0;
  *min_bytes = (size_t)-1;
  if (device_validate(dev, "device")) return -1;
  SearchOptions so = normalized_options(d, o);
  if (so.seq > d->cfg.max_seq)
    return osdp_fail("planner: seq %d exceeds the model's max_seq %d; lower --seq", so.seq,
                     d->cfg.max_seq);
  if (so.global_batch > 0 && so.global_batch % dev->ranks)
    return osdp_fail("planner: a global batch of %ld sequences is not a multiple of the %d ranks; "
                     "use a multiple of %d", so.global_batch, dev->ranks, dev->ranks);
  if (so.global_batch > 0 && !any_accum_batch(&so, dev))
    return osdp_fail("planner: a global batch of %ld sequences on %d ranks is %ld a rank, which no "
                     "micro-batch from %d to %d divides; allow a micro-batch that divides %ld (--batch "
                     "or --max-batch) or choose another global batch", so.global_batch, dev->ranks,
                     so.global_batch / dev->ranks, so.min_batch, so.max_batch,
                     so.global_batch / dev->ranks);
  if (so.shard_group > 0 && (so.shard_group > dev->ranks || dev->ranks % so.shard_group))
    return osdp_fail("planner: shard group %d must divide the %d ranks (the ranks a sharded "
                     "slice is sharded over, e.g. the ranks per host)", so.shard_group, dev->ranks);
  if (so.reduce_dtype != SEARCH_REDUCE_AUTO) return search_batches_of(d, dev, &so, keep, out, nout, min_bytes);
  /* auto: both dtypes, merged; a bf16 plan must be REDUCE_BF16_MIN_GAIN faster to come first. */
  BatchBest *v32 = NULL, *v16 = NULL;
  int n32 = 0, n16 = 0;
  so.reduce_dtype = REDUCE_FP32;
  int rc = search_batches_of(d, dev, &so, keep, &v32, &n32, min_bytes);
  so.reduce_dtype = REDUCE_BF16;
  size_t m16;
  if (!rc) rc = search_batches_of(d, dev, &so, keep, &v16, &n16, &m16);
  BatchBest* v = rc ? NULL : malloc((size_t)(n32 + n16 + 1) * sizeof *v);
  if (!rc && !v) rc = osdp_fail("out of memory");
  if (!rc) {
    memcpy(v, v32, (size_t)n32 * sizeof *v);
    memcpy(v + n32, v16, (size_t)n16 * sizeof *v);
    qsort(v, (size_t)(n32 + n16), sizeof *v, cmp_batch);
    *out = v;
    *nout = n32 + n16;
    free(v32);
    free(v16);
  } else {
    batches_free(v32, n32);
    batches_free(v16, n16);
  }
  return rc;
}

/* Frees the plans of a BatchBest list and the list. */
void batches_free(BatchBest* v, int n) {
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
    last_stats.peak = v[0].peak;
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
