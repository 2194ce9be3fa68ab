/*
** search.c: the exact OSDP search; see search.h.
**
** The problem. Every operator i that owns parameters gets a configuration x_i (a slice count
** and a strategy per slice) with persistent bytes m(x), largest transient tr(x) and time t(x)
** (communication + optimizer, independent of the micro-batch B). For a micro-batch B,
**   peak = sum_i m(x_i) + max_i tr(x_i) + batch_bytes(B),
**   samples/s = N B / (compute(B) + sum_i t(x_i)).
** We want the (x, B) with the highest samples/s and peak <= limit.
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
*/
#include "planner/search.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"

static _Thread_local PlannerStats last_stats;

PlannerStats planner_last_stats(void) { return last_stats; }

void planner_default_options(SearchOptions* o, int seq) {
  memset(o, 0, sizeof *o);
  o->seq = seq;
  o->max_batch = 512;
  o->max_slices = GPT_MAX_SLICES;
  for (int s = 0; s < STRAT_COUNT; s++) o->allow[s] = 1;
}

/* The options with defaults filled in (seq: the model's max_seq). */
static SearchOptions normalized_options(const GptDesc* d, const SearchOptions* in) {
  SearchOptions o = *in;
  if (o.seq <= 0) o.seq = d->cfg.max_seq;
  if (o.max_batch <= 0) o.max_batch = 512;
  if (o.max_slices <= 0) o.max_slices = GPT_MAX_SLICES;
  int any = 0;
  for (int s = 0; s < STRAT_COUNT; s++) any |= o.allow[s];
  for (int s = 0; s < STRAT_COUNT; s++) o.allow[s] = any ? (o.allow[s] != 0) : 1;
  return o;
}

/* ---- 1. Configurations of one operator ------------------------------------------------ */

/* Slices of one op with the same parameter count: interchangeable for every cost. */
typedef struct SliceGroup {
  size_t n;                     /* parameters of each slice */
  int count;                    /* how many slices */
  int slot[GPT_MAX_SLICES];     /* their indices */
} SliceGroup;

/* A growable list of configurations. */
typedef struct ConfigList {
  OpConfig* v;
  int n, cap;
} ConfigList;

/* What the enumeration of one op at one slice count needs. */
typedef struct Enumerator {
  const DeviceInfo* dev;
  const SearchOptions* o;
  int op, k, ngroups;
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

/* Costs the assignment in e->strat and appends it. */
static int enum_evaluate(Enumerator* e) {
  OpConfig c;
  memset(&c, 0, sizeof c);
  c.plan.k = e->k;
  int N = e->dev->ranks;
  for (int s = 0; s < e->k; s++) {
    size_t n = e->n[s], tr = cost_slice_transient(n, e->strat[s], N);
    c.plan.strat[s] = e->strat[s];
    c.mem += cost_slice_persistent(n, e->strat[s], N);
    if (tr > c.transient) c.transient = tr;
    c.time_s += cost_slice_comm_s(e->dev, e->op, n, e->strat[s]) +
                cost_slice_optim_s(e->dev, n, e->strat[s]);
  }
  return config_push(e->out, &c);
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

/* Enumerates and prunes op's configurations into l. */
static int op_configs(const GptDesc* d, const DeviceInfo* dev, const SearchOptions* o, int op,
                      ConfigList* l) {
  const GptOp* g = &d->ops[op];
  static const int ks[] = {1, 2, 4, 8};
  for (int i = 0; i < 4; i++) {
    int k = ks[i];
    if (k > 1 && (!g->splittable || (size_t)k > g->rows || k > o->max_slices)) continue;
    Enumerator e = {.dev = dev, .o = o, .op = op, .k = k, .out = l};
    e.ngroups = slice_groups(g, k, e.g);
    for (int s = 0; s < k; s++) e.n[s] = gpt_slice_params(g, k, s);
    if (enum_group(&e, 0)) return -1;
  }
  config_prune(l);
  return 0;
}

int planner_op_configs(const GptDesc* d, const DeviceInfo* dev, const SearchOptions* o, int op,
                       OpConfig** out) {
  *out = NULL;
  if (!d->ops[op].n_params) return 0;
  SearchOptions so = normalized_options(d, o);
  ConfigList l = {0};
  if (op_configs(d, dev, &so, op, &l)) { free(l.v); return -1; }
  *out = l.v;
  return l.n;
}

/* ---- Classes of identical operators ----------------------------------------------------- */

/* Operators with the same block and the same uses, hence the same configurations. */
typedef struct OpClass {
  int rep;            /* first op of the class */
  int count;          /* ops in it */
  OpConfig* cfg;      /* its non-dominated configurations */
  int ncfg;
} OpClass;

/* Whether ops i and j have identical configurations. */
static int same_class(const GptDesc* d, int i, int j) {
  const GptOp *a = &d->ops[i], *b = &d->ops[j];
  return a->rows == b->rows && a->width == b->width && a->tail == b->tail &&
         a->splittable == b->splittable && (i == 0) == (j == 0);
}

/* Everything the search works from. */
typedef struct Search {
  const GptDesc* d;
  const DeviceInfo* dev;
  SearchOptions o;
  int nparam;           /* ops with parameters */
  int* param_op;        /* their indices, grouped by class */
  int* op_class;        /* class of each op (-1 without parameters) */
  OpClass* cls;
  int ncls;
  size_t* taus;         /* distinct feasible transient caps, ascending */
  int ntaus;
  int nbatch;           /* micro-batches whose batch bytes fit the limit */
  size_t* batch_bytes;  /* [nbatch + 1], by B */
  double* compute_s;    /* [nbatch + 1], by B */
} Search;

/* Frees what search_build allocated. */
static void search_free(Search* s) {
  for (int c = 0; c < s->ncls; c++) free(s->cls[c].cfg);
  free(s->cls);
  free(s->param_op);
  free(s->op_class);
  free(s->taus);
  free(s->batch_bytes);
  free(s->compute_s);
  memset(s, 0, sizeof *s);
}

/* Parameters of one op of class c. */
static size_t class_params(const Search* s, int c) { return s->d->ops[s->cls[c].rep].n_params; }

/* Groups the ops into classes and enumerates each class's configurations once. */
static int build_classes(Search* s) {
  const GptDesc* d = s->d;
  s->op_class = malloc((size_t)d->nops * sizeof *s->op_class);
  s->cls = calloc((size_t)d->nops, sizeof *s->cls);
  s->param_op = malloc((size_t)d->nops * sizeof *s->param_op);
  if (!s->op_class || !s->cls || !s->param_op) return osdp_fail("out of memory");
  for (int i = 0; i < d->nops; i++) {
    s->op_class[i] = -1;
    if (!d->ops[i].n_params) continue;
    int c = 0;
    while (c < s->ncls && !same_class(d, s->cls[c].rep, i)) c++;
    if (c == s->ncls) {
      ConfigList l = {0};
      s->cls[c].rep = i;
      if (op_configs(d, s->dev, &s->o, i, &l)) { free(l.v); return -1; }
      s->cls[c].cfg = l.v;
      s->cls[c].ncfg = l.n;
      s->ncls++;
    }
    s->cls[c].count++;
    s->op_class[i] = c;
  }
  /* The exact program visits the ops class by class, largest blocks first, so that the
  ** small ops come last and fine-tune the memory. */
  int* order = malloc((size_t)(s->ncls ? s->ncls : 1) * sizeof *order);
  if (!order) return osdp_fail("out of memory");
  for (int c = 0; c < s->ncls; c++) order[c] = c;
  for (int a = 1; a < s->ncls; a++) /* insertion sort by block size, descending */
    for (int b = a; b > 0 && class_params(s, order[b]) > class_params(s, order[b - 1]); b--) {
      int x = order[b];
      order[b] = order[b - 1];
      order[b - 1] = x;
    }
  for (int k = 0; k < s->ncls; k++)
    for (int i = 0; i < d->nops; i++) if (s->op_class[i] == order[k]) s->param_op[s->nparam++] = i;
  free(order);
  return 0;
}

/* Compares sizes for qsort. */
static int cmp_size(const void* a, const void* b) {
  size_t x = *(const size_t*)a, y = *(const size_t*)b;
  return x < y ? -1 : x > y;
}

/* The distinct transients of all configurations, from the smallest cap under which every
** class still has a configuration. */
static int build_taus(Search* s) {
  size_t total = 0, floor_tau = 0;
  for (int c = 0; c < s->ncls; c++) {
    total += (size_t)s->cls[c].ncfg;
    size_t lo = (size_t)-1;
    for (int j = 0; j < s->cls[c].ncfg; j++)
      if (s->cls[c].cfg[j].transient < lo) lo = s->cls[c].cfg[j].transient;
    if (lo > floor_tau) floor_tau = lo;
  }
  s->taus = malloc((total + 1) * sizeof *s->taus);
  if (!s->taus) return osdp_fail("out of memory");
  s->taus[0] = floor_tau;
  int n = 1;
  for (int c = 0; c < s->ncls; c++)
    for (int j = 0; j < s->cls[c].ncfg; j++)
      if (s->cls[c].cfg[j].transient > floor_tau) s->taus[n++] = s->cls[c].cfg[j].transient;
  qsort(s->taus, (size_t)n, sizeof *s->taus, cmp_size);
  int w = 0;
  for (int i = 0; i < n; i++) if (w == 0 || s->taus[w - 1] != s->taus[i]) s->taus[w++] = s->taus[i];
  s->ntaus = w;
  return 0;
}

/* Batch bytes and compute time for every micro-batch whose batch bytes fit the limit. */
static int build_batches(Search* s) {
  int T = s->o.seq, maxb = s->o.max_batch;
  s->batch_bytes = malloc(((size_t)maxb + 1) * sizeof *s->batch_bytes);
  s->compute_s = malloc(((size_t)maxb + 1) * sizeof *s->compute_s);
  if (!s->batch_bytes || !s->compute_s) return osdp_fail("out of memory");
  s->batch_bytes[0] = 0;
  s->compute_s[0] = 0;
  s->nbatch = 0;
  for (int B = 1; B <= maxb; B++) {
    s->batch_bytes[B] = cost_batch_bytes(s->d, s->dev, B, T);
    s->compute_s[B] = cost_compute_s(s->d, s->dev, B, T);
    if (s->batch_bytes[B] > s->dev->mem_limit) break;
    s->nbatch = B;
  }
  return 0;
}

/* Builds everything the search needs. */
static int search_build(Search* s, const GptDesc* d, const DeviceInfo* dev, const SearchOptions* o) {
  memset(s, 0, sizeof *s);
  s->d = d;
  s->dev = dev;
  s->o = normalized_options(d, o);
  if (device_validate(dev, "device")) return -1;
  if (s->o.seq > d->cfg.max_seq)
    return osdp_fail("planner: seq %d exceeds the model's max_seq %d; lower --seq", s->o.seq,
                     d->cfg.max_seq);
  if (build_classes(s) || build_taus(s) || build_batches(s)) return -1;
  last_stats.classes = s->ncls;
  for (int c = 0; c < s->ncls; c++) last_stats.configs += s->cls[c].ncfg;
  last_stats.taus = s->ntaus;
  return 0;
}

/* ---- 2./3. One transient cap: options per class and the linear relaxation --------------- */

/* A class's option under a cap: one configuration on its (memory, time) Pareto frontier. */
typedef struct Option {
  size_t m;
  double t;
  int cfg;            /* index into the class's configurations */
} Option;

/* One step along a class's lower convex hull (from its fastest option towards its smallest),
** available `count` times (once per op of the class). */
typedef struct Segment {
  double slope;       /* seconds per byte saved */
  size_t dm;          /* bytes saved by one op */
  double dt;          /* seconds added by one op */
  int count;          /* ops of the class (in the solver: the class) */
} Segment;

/* The problem restricted to configurations with transient <= tau. */
typedef struct CapProblem {
  size_t tau;
  Option* opt;        /* per class: opt[off[c] .. off[c] + nopt[c]), memory ascending */
  int *off, *nopt;
  size_t M0;          /* memory with every op at its fastest option */
  double T0;          /* and the time */
  size_t minmem;      /* smallest memory of all ops */
  Segment* seg;       /* all hull steps, slope ascending */
  int nseg;
  size_t* cum_dm;     /* [nseg + 1] prefix sums of count * dm */
  double* cum_dt;     /* [nseg + 1] prefix sums of count * dt */
} CapProblem;

/* Frees a cap problem. */
static void cap_free(CapProblem* p) {
  free(p->opt);
  free(p->off);
  free(p->nopt);
  free(p->seg);
  free(p->cum_dm);
  free(p->cum_dt);
  memset(p, 0, sizeof *p);
}

/* Orders options by memory, then time. */
static int cmp_option(const void* a, const void* b) {
  const Option *x = a, *y = b;
  if (x->m != y->m) return x->m < y->m ? -1 : 1;
  return x->t < y->t ? -1 : x->t > y->t ? 1 : x->cfg - y->cfg;
}

/* Orders hull segments by slope. */
static int cmp_segment(const void* a, const void* b) {
  const Segment *x = a, *y = b;
  return x->slope < y->slope ? -1 : x->slope > y->slope;
}

/* Fills o with class c's Pareto options under cap tau (memory ascending, time descending);
** returns their count. */
static int class_options(const OpClass* c, size_t tau, Option* o) {
  int n = 0;
  for (int j = 0; j < c->ncfg; j++)
    if (c->cfg[j].transient <= tau) o[n++] = (Option){c->cfg[j].mem, c->cfg[j].time_s, j};
  qsort(o, (size_t)n, sizeof *o, cmp_option);
  int w = 0;
  for (int i = 0; i < n; i++)
    if (w == 0 || o[i].t < o[w - 1].t) o[w++] = o[i];
  return w;
}

/* Appends the lower convex hull steps of options o[0..n) (memory ascending) to seg, walking
** from the fastest (last) option towards the smallest; returns the new segment count. `hull`
** is scratch space for n indices. */
static int class_hull(const Option* o, int n, int count, Segment* seg, int nseg, int* hull) {
  int h = 0;
  for (int i = n - 1; i >= 0; i--) {
    while (h >= 2) {
      const Option *a = &o[hull[h - 2]], *b = &o[hull[h - 1]];
      double s1 = (b->t - a->t) / (double)(a->m - b->m);
      double s2 = (o[i].t - b->t) / (double)(b->m - o[i].m);
      if (s2 > s1) break;
      h--;
    }
    hull[h++] = i;
  }
  for (int j = 1; j < h; j++) {
    const Option *a = &o[hull[j - 1]], *b = &o[hull[j]];
    size_t dm = a->m - b->m;
    double dt = b->t - a->t;
    seg[nseg++] = (Segment){dt / (double)dm, dm, dt, count};
  }
  return nseg;
}

/* Builds the options, the relaxation's hull steps and their prefix sums under cap tau. */
static int cap_build(const Search* s, size_t tau, CapProblem* p) {
  memset(p, 0, sizeof *p);
  p->tau = tau;
  int total = 0;
  for (int c = 0; c < s->ncls; c++) total += s->cls[c].ncfg;
  p->opt = malloc((size_t)total * sizeof *p->opt);
  p->off = malloc((size_t)s->ncls * sizeof *p->off);
  p->nopt = malloc((size_t)s->ncls * sizeof *p->nopt);
  p->seg = malloc((size_t)total * sizeof *p->seg);
  p->cum_dm = malloc(((size_t)total + 1) * sizeof *p->cum_dm);
  p->cum_dt = malloc(((size_t)total + 1) * sizeof *p->cum_dt);
  int* hull = malloc((size_t)total * sizeof *hull);
  if (!p->opt || !p->off || !p->nopt || !p->seg || !p->cum_dm || !p->cum_dt || !hull) {
    free(hull);
    return osdp_fail("out of memory");
  }
  int used = 0;
  for (int c = 0; c < s->ncls; c++) {
    const OpClass* k = &s->cls[c];
    Option* o = p->opt + used;
    int n = class_options(k, tau, o);
    p->off[c] = used;
    p->nopt[c] = n;
    used += n;
    p->M0 += (size_t)k->count * o[n - 1].m;
    p->T0 += k->count * o[n - 1].t;
    p->minmem += (size_t)k->count * o[0].m;
    p->nseg = class_hull(o, n, k->count, p->seg, p->nseg, hull);
  }
  free(hull);
  qsort(p->seg, (size_t)p->nseg, sizeof *p->seg, cmp_segment);
  p->cum_dm[0] = 0;
  p->cum_dt[0] = 0;
  for (int j = 0; j < p->nseg; j++) {
    p->cum_dm[j + 1] = p->cum_dm[j] + (size_t)p->seg[j].count * p->seg[j].dm;
    p->cum_dt[j + 1] = p->cum_dt[j] + p->seg[j].count * p->seg[j].dt;
  }
  return 0;
}

/* Bounds of the least time at memory budget b (>= p->minmem): *lb from the relaxation,
** *ub of a feasible rounding (all hull steps before the break, and as many copies of the
** break step as needed), *lambda the relaxation's price of a byte. */
static void cap_bounds(const CapProblem* p, size_t b, double* lb, double* ub, double* lambda) {
  if (b >= p->M0) { *lb = *ub = p->T0; *lambda = 0; return; }
  size_t need = p->M0 - b;
  int lo = 0, hi = p->nseg - 1; /* first j with cum_dm[j + 1] >= need */
  while (lo < hi) {
    int mid = (lo + hi) / 2;
    if (p->cum_dm[mid + 1] >= need) hi = mid; else lo = mid + 1;
  }
  const Segment* g = &p->seg[lo];
  size_t rest = need - p->cum_dm[lo];
  size_t copies = (rest + g->dm - 1) / g->dm;
  *lb = p->T0 + p->cum_dt[lo] + (double)rest * g->slope;
  *ub = p->T0 + p->cum_dt[lo] + (double)copies * g->dt;
  *lambda = g->slope;
}

/* ---- 4. Exact solve of one (cap, budget) pair -------------------------------------------- */

/* A partial plan in the dynamic program: memory and time of the multi-candidate ops so far.
** Only the current and the previous level keep these. */
typedef struct DpNode {
  size_t m;
  double t;
} DpNode;

/* How a node was reached: kept for every level, to rebuild the plan. */
typedef struct DpLink {
  int prev;           /* link of the node it extends (-1: the root) */
  int cand;           /* candidate chosen for this level's op */
} DpLink;

/* One shifted copy of a level during the merge: candidate j added to the level's nodes
** from position pos on. */
typedef struct MergeHead {
  size_t m;           /* memory of the node at pos plus the candidate's */
  double t;
  long pos;
  int j;
  int step;           /* rest_time's hint for this copy */
} MergeHead;

/* Working memory of the exact solver, reused across solves. */
typedef struct Solver {
  DpNode* level[2];   /* previous and current level */
  long cap_level;
  DpLink* link;       /* every level's links, level after level */
  long nlink, cap_link;
  double *key, *sorted; /* [cap_level] scratch of the beam */
  MergeHead* heap;    /* merge heads, one per candidate */
  int* cand_off;      /* per class: first candidate in cand[] */
  int* ncand;         /* per class */
  Option* cand;       /* candidates of all classes, memory ascending per class */
  Segment* seg;       /* hull steps of the multi-candidate classes, slope ascending */
  int nseg;
  int* hull;          /* scratch for class_hull */
  int* remain;        /* scratch: ops left per class */
  size_t* cum_dm;     /* [(nparam + 1) * (nseg + 1)]: per level L, prefix sums of the hull */
  double* cum_dt;     /* steps of the multi-candidate ops from L on */
  size_t* min_rest;   /* [nparam + 1] least memory of the multi-candidate ops from L on */
  size_t* max_rest;   /* [nparam + 1] most memory of the multi-candidate ops from L on */
  double* tmin_rest;  /* [nparam + 1] their time at the most memory */
  int* choice;        /* result: configuration index per parameter op (in param order) */
} Solver;

/* Frees a solver. */
static void solver_free(Solver* v) {
  void* p[] = {v->level[0], v->level[1], v->link, v->key, v->sorted, v->heap, v->cand_off,
               v->ncand, v->cand, v->seg, v->hull, v->remain, v->cum_dm, v->cum_dt,
               v->min_rest, v->max_rest, v->tmin_rest, v->choice};
  for (size_t i = 0; i < sizeof p / sizeof p[0]; i++) free(p[i]);
  memset(v, 0, sizeof *v);
}

/* Allocates a solver for search s. */
static int solver_init(Solver* v, const Search* s) {
  memset(v, 0, sizeof *v);
  size_t total = 0, levels = (size_t)s->nparam + 1;
  for (int c = 0; c < s->ncls; c++) total += (size_t)s->cls[c].ncfg;
  v->heap = malloc(total * sizeof *v->heap);
  v->cand_off = malloc((size_t)s->ncls * sizeof *v->cand_off);
  v->ncand = malloc((size_t)s->ncls * sizeof *v->ncand);
  v->cand = malloc(total * sizeof *v->cand);
  v->seg = malloc(total * sizeof *v->seg);
  v->hull = malloc(total * sizeof *v->hull);
  v->remain = malloc((size_t)s->ncls * sizeof *v->remain);
  v->cum_dm = malloc(levels * (total + 1) * sizeof *v->cum_dm);
  v->cum_dt = malloc(levels * (total + 1) * sizeof *v->cum_dt);
  v->min_rest = malloc(levels * sizeof *v->min_rest);
  v->max_rest = malloc(levels * sizeof *v->max_rest);
  v->tmin_rest = malloc(levels * sizeof *v->tmin_rest);
  v->choice = malloc(levels * sizeof *v->choice);
  if (!v->heap || !v->cand_off || !v->ncand || !v->cand || !v->seg || !v->hull || !v->remain ||
      !v->cum_dm || !v->cum_dt || !v->min_rest || !v->max_rest || !v->tmin_rest || !v->choice)
    return osdp_fail("out of memory");
  return 0;
}

/* Grows *p (elements of `size` bytes, capacity *cap) to hold at least `need`. */
static int grow(void** p, long* cap, long need, size_t size) {
  if (need <= *cap) return 0;
  long c = *cap ? *cap : 1024;
  while (c < need) c *= 2;
  void* q = realloc(*p, (size_t)c * size);
  if (!q) return osdp_fail("out of memory");
  *p = q;
  *cap = c;
  return 0;
}

/* Makes room for a level of n nodes (both level buffers, the beam's scratch, the links). */
static int solver_reserve(Solver* v, long n) {
  if (v->nlink + n > 0x7fffffffL) return osdp_fail("planner: the search grew too large");
  long cap = v->cap_level, c1 = cap, c2 = cap, c3 = cap;
  if (grow((void**)&v->level[0], &cap, n, sizeof(DpNode)) ||
      grow((void**)&v->level[1], &c1, n, sizeof(DpNode)) ||
      grow((void**)&v->key, &c2, n, sizeof(double)) ||
      grow((void**)&v->sorted, &c3, n, sizeof(double)))
    return -1;
  v->cap_level = cap;
  return grow((void**)&v->link, &v->cap_link, v->nlink + n, sizeof(DpLink));
}

/* One query: cap problem p, memory budget b, the relaxation's price lambda, and the time a
** plan must not exceed (t_limit); options whose reduced cost exceeds g are left out. */
typedef struct Query {
  const CapProblem* p;
  size_t b;
  double lambda, g, tol, t_limit;
  size_t fixed_m;     /* memory of the ops with a single candidate */
  double fixed_t;
} Query;

/* Chooses the candidates of every class: options with reduced cost t + lambda m - min(..)
** <= g (+ tol); a plan with time <= LB + g uses no other (Lagrangian duality). */
static void select_candidates(Solver* v, const Search* s, const Query* q) {
  const CapProblem* p = q->p;
  int used = 0;
  for (int c = 0; c < s->ncls; c++) {
    const Option* o = p->opt + p->off[c];
    double phi = INFINITY;
    for (int j = 0; j < p->nopt[c]; j++) phi = fmin(phi, o[j].t + q->lambda * (double)o[j].m);
    v->cand_off[c] = used;
    for (int j = 0; j < p->nopt[c]; j++)
      if (o[j].t + q->lambda * (double)o[j].m - phi <= q->g + q->tol) v->cand[used++] = o[j];
    v->ncand[c] = used - v->cand_off[c];
  }
}

/* Sums the single-candidate ops into q->fixed_*, and the least / most memory (and the time
** at the most) of the multi-candidate ops from each level on. */
static void rest_sums(Solver* v, const Search* s, Query* q) {
  q->fixed_m = 0;
  q->fixed_t = 0;
  int L = s->nparam;
  v->min_rest[L] = v->max_rest[L] = 0;
  v->tmin_rest[L] = 0;
  for (int i = L - 1; i >= 0; i--) {
    int c = s->op_class[s->param_op[i]], multi = v->ncand[c] > 1;
    const Option *lo = &v->cand[v->cand_off[c]], *hi = lo + v->ncand[c] - 1;
    v->min_rest[i] = v->min_rest[i + 1] + (multi ? lo->m : 0);
    v->max_rest[i] = v->max_rest[i + 1] + (multi ? hi->m : 0);
    v->tmin_rest[i] = v->tmin_rest[i + 1] + (multi ? hi->t : 0);
    if (!multi) {
      q->fixed_m += lo->m;
      q->fixed_t += lo->t;
    }
  }
}

/* Builds, for every level L, the linear relaxation of the multi-candidate ops from L on:
** their candidates' hull steps (slope ascending, tagged with the class in `count`) with
** prefix sums weighted by how many ops of each class remain. */
static void rest_relaxation(Solver* v, const Search* s) {
  v->nseg = 0;
  for (int c = 0; c < s->ncls; c++) {
    v->remain[c] = 0;
    if (v->ncand[c] > 1)
      v->nseg = class_hull(v->cand + v->cand_off[c], v->ncand[c], c, v->seg, v->nseg, v->hull);
  }
  qsort(v->seg, (size_t)v->nseg, sizeof *v->seg, cmp_segment);
  int S = v->nseg;
  for (int L = s->nparam; L >= 0; L--) {
    if (L < s->nparam) v->remain[s->op_class[s->param_op[L]]]++;
    size_t* dm = v->cum_dm + (size_t)L * (size_t)(S + 1);
    double* dt = v->cum_dt + (size_t)L * (size_t)(S + 1);
    dm[0] = 0;
    dt[0] = 0;
    for (int j = 0; j < S; j++) {
      int k = v->remain[v->seg[j].count];
      dm[j + 1] = dm[j] + (size_t)k * v->seg[j].dm;
      dt[j + 1] = dt[j] + k * v->seg[j].dt;
    }
  }
}

/* Least time of the multi-candidate ops from level L on with r bytes, relaxed (a lower bound
** on any choice of their candidates). *k is a hint: the hull step where the last call with
** at least as many bytes ended; calls with fewer and fewer bytes only move it forward. */
static double rest_time(const Solver* v, int L, size_t r, int* k) {
  if (r >= v->max_rest[L]) return v->tmin_rest[L];
  size_t need = v->max_rest[L] - r;
  const size_t* dm = v->cum_dm + (size_t)L * (size_t)(v->nseg + 1);
  const double* dt = v->cum_dt + (size_t)L * (size_t)(v->nseg + 1);
  if (need > dm[v->nseg]) return INFINITY;
  int j = *k;
  while (dm[j + 1] < need) j++; /* the first step that covers `need` */
  *k = j;
  return v->tmin_rest[L] + dt[j] + (double)(need - dm[j]) * v->seg[j].slope;
}

/* Whether merge head a comes before b: less memory, then less time. */
static int head_before(const MergeHead* a, const MergeHead* b) {
  return a->m < b->m || (a->m == b->m && a->t < b->t);
}

/* Restores the min-heap property below position i. */
static void heap_down(MergeHead* h, int n, int i) {
  for (;;) {
    int l = 2 * i + 1, r = l + 1, m = i;
    if (l < n && head_before(&h[l], &h[m])) m = l;
    if (r < n && head_before(&h[r], &h[m])) m = r;
    if (m == i) return;
    MergeHead x = h[i];
    h[i] = h[m];
    h[m] = x;
    i = m;
  }
}

/* What the merge of one level needs to judge a node. */
typedef struct LevelCtx {
  const Solver* v;
  const DpNode* prev; /* the previous level: memory ascending, time descending */
  long nfrom;
  const Option* cand; /* this op's candidates */
  int next;           /* the level after this op */
  size_t left;        /* budget left for the multi-candidate ops */
  size_t room;        /* most memory a node may have (the rest at its least still fits) */
  double base_t;      /* time of the single-candidate ops */
  double t_limit;
} LevelCtx;

/* Lower bound on the time of every plan completing a node of memory m and time t (step:
** rest_time's hint). */
static double node_bound(const LevelCtx* x, size_t m, double t, int* step) {
  return x->base_t + t + rest_time(x->v, x->next, x->left - m, step);
}

/* Moves head h to the first node at or after h->pos that could join the new level: faster
** than `best` (the fastest node emitted so far, which has no more memory: nodes that are not
** faster are dominated), within the capacity, and whose bound does not exceed the time
** limit. Returns 0 when the copy is exhausted. The level is time-descending, so the first
** faster node is found by bisection. */
static int head_advance(MergeHead* h, const LevelCtx* x, double best) {
  const Option* c = &x->cand[h->j];
  const DpNode* prev = x->prev;
  long lo = h->pos, hi = x->nfrom;
  if (lo < hi && prev[lo].t + c->t < best) hi = lo;
  while (lo < hi) {
    long mid = lo + (hi - lo) / 2;
    if (prev[mid].t + c->t < best) hi = mid; else lo = mid + 1;
  }
  for (h->pos = lo; h->pos < x->nfrom; h->pos++) {
    size_t m = prev[h->pos].m + c->m;
    double t = prev[h->pos].t + c->t;
    if (m > x->room) return 0; /* memory only grows along the level */
    if (node_bound(x, m, t, &h->step) > x->t_limit) continue;
    h->m = m;
    h->t = t;
    return 1;
  }
  return 0;
}

/* Extends the previous level (nfrom nodes in v->level[0], their links from link index
** `from`) by op i's candidates into v->level[1]: a heap merge of the shifted copies of the
** level, one per candidate, keeping the Pareto nodes that pass head_advance. Appends their
** links. Returns the new level's size, or -1. */
static long dp_level(Solver* v, const Search* s, const Query* q, int i, long from, long nfrom) {
  int c = s->op_class[s->param_op[i]], nc = v->ncand[c], nh = 0;
  if (solver_reserve(v, nfrom * nc)) return -1;
  size_t left = q->b - q->fixed_m; /* >= min_rest[0] */
  LevelCtx x = {v, v->level[0], nfrom, v->cand + v->cand_off[c], i + 1, left,
                left - v->min_rest[i + 1], q->fixed_t, q->t_limit};
  DpNode* out = v->level[1];
  DpLink* link = v->link + v->nlink;
  double best = INFINITY;
  MergeHead* h = v->heap;
  for (int j = 0; j < nc; j++) {
    h[nh] = (MergeHead){0, 0, 0, j, 0};
    nh += head_advance(&h[nh], &x, best);
  }
  for (int k = nh / 2 - 1; k >= 0; k--) heap_down(h, nh, k);
  long w = 0;
  while (nh > 0) {
    MergeHead* top = &h[0];
    if (top->t < best) {
      best = top->t;
      link[w] = (DpLink){(int)(from + top->pos), top->j};
      out[w++] = (DpNode){top->m, top->t};
    }
    top->pos++;
    if (!head_advance(top, &x, best)) h[0] = h[--nh];
    heap_down(h, nh, 0);
  }
  v->nlink += w;
  return w;
}

/* Orders doubles for qsort. */
static int cmp_double(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return x < y ? -1 : x > y;
}

/* Keeps the `beam` nodes of the new level (n nodes in v->level[1], links ending at
** v->nlink) with the smallest bounds, in order. Returns the new level size. A heuristic,
** to find a good plan fast. */
static long dp_thin(Solver* v, const Query* q, int i, long n, long beam) {
  if (n <= beam) return n;
  LevelCtx x = {.v = v, .next = i + 1, .left = q->b - q->fixed_m, .base_t = q->fixed_t};
  DpNode* d = v->level[1];
  DpLink* link = v->link + v->nlink - n;
  int step = 0;
  for (long a = 0; a < n; a++) v->key[a] = v->sorted[a] = node_bound(&x, d[a].m, d[a].t, &step);
  qsort(v->sorted, (size_t)n, sizeof *v->sorted, cmp_double);
  double cut = v->sorted[beam - 1];
  long w = 0;
  for (long a = 0; a < n && w < beam; a++)
    if (v->key[a] <= cut) {
      d[w] = d[a];
      link[w++] = link[a];
    }
  v->nlink -= n - w;
  return w;
}

/* Rebuilds the choices (v->choice) from the last node of the last level (link index k). */
static void dp_trace(Solver* v, const Search* s, int k) {
  for (int i = s->nparam - 1; i >= 0; i--) {
    int c = s->op_class[s->param_op[i]];
    if (v->ncand[c] == 1) { v->choice[i] = v->cand[v->cand_off[c]].cfg; continue; }
    v->choice[i] = v->cand[v->cand_off[c] + v->link[k].cand].cfg;
    k = v->link[k].prev;
  }
}

/* Runs the dynamic program of query q: exact when beam is 0, else keeping at most beam
** nodes per level (a fast heuristic). Returns the least time found (INFINITY if none) and
** fills v->choice; NAN on allocation failure. */
static double dp_run(Solver* v, const Search* s, Query* q, long beam) {
  select_candidates(v, s, q);
  rest_sums(v, s, q);
  if (q->fixed_m + v->min_rest[0] > q->b) return INFINITY;
  rest_relaxation(v, s);
  v->nlink = 0;
  if (solver_reserve(v, 1)) return NAN;
  v->level[0][0] = (DpNode){0, 0};
  v->link[v->nlink++] = (DpLink){-1, 0};
  long from = 0, nfrom = 1;
  for (int i = 0; i < s->nparam; i++) {
    if (v->ncand[s->op_class[s->param_op[i]]] == 1) continue;
    long start = v->nlink, n = dp_level(v, s, q, i, from, nfrom);
    if (n < 0) return NAN;
    if (beam > 0) n = dp_thin(v, q, i, n, beam);
    last_stats.states_total += n;
    if (n > last_stats.states_max) last_stats.states_max = n;
    if (n == 0) return INFINITY;
    DpNode* x = v->level[0];
    v->level[0] = v->level[1];
    v->level[1] = x;
    from = start;
    nfrom = n;
  }
  dp_trace(v, s, (int)(from + nfrom - 1)); /* Pareto: the last node is the fastest */
  return q->fixed_t + v->level[0][nfrom - 1].t;
}

/* Sum over classes of count * min_x (t(x) + lambda m(x)) - lambda b: a lower bound on the
** time of every plan within budget b (Lagrangian duality). */
static double lagrangian_bound(const Search* s, const CapProblem* p, size_t b, double lambda) {
  double lb = -lambda * (double)b;
  for (int c = 0; c < s->ncls; c++) {
    double phi = INFINITY;
    const Option* o = p->opt + p->off[c];
    for (int j = 0; j < p->nopt[c]; j++) phi = fmin(phi, o[j].t + lambda * (double)o[j].m);
    lb += s->cls[c].count * phi;
  }
  return lb;
}

/* Nodes per level of the heuristic pass. */
#define BEAM_WIDTH 256

/* The least time of any plan under cap p within budget b, if it is <= t_cap: returns 1 and
** the time in *t (choices in v->choice); 0 when no plan is that fast; -1 on failure.
** A beam pass first finds a good plan fast (time h); then the exact program keeps every
** partial plan whose bound is <= min(h, t_cap, ub), which every better plan respects. */
static int solve_exact(Solver* v, const Search* s, const CapProblem* p, size_t b, double t_cap,
                       double* t) {
  double lb_lp, ub, lambda;
  cap_bounds(p, b, &lb_lp, &ub, &lambda);
  Query q = {.p = p, .b = b, .lambda = lambda};
  double lb = lagrangian_bound(s, p, b, lambda);
  q.tol = 1e-13 * (fabs(p->T0) + fabs(ub) + lambda * (double)p->M0) + 1e-300;
  double cap = fmin(ub, t_cap);
  if (lb > cap + q.tol) return 0;
  q.g = fmax(cap - lb, 0);
  q.t_limit = cap + q.tol;
  double h = dp_run(v, s, &q, BEAM_WIDTH);
  if (isnan(h)) return -1;
  cap = fmin(h, cap);
  q.g = fmax(cap - lb, 0);
  q.t_limit = cap + q.tol;
  last_stats.exact_solves++;
  double best = dp_run(v, s, &q, 0);
  if (isnan(best)) return -1;
  if (isinf(best)) return 0; /* nothing with time <= cap */
  *t = best;
  return best <= t_cap + q.tol ? 1 : 0;
}

/* ---- The search over caps and micro-batches ---------------------------------------------- */

/* One (cap, micro-batch) pair and the best samples/s it could reach. */
typedef struct Candidate {
  int tau, B;
  double bound;       /* samples/s upper bound */
} Candidate;

/* Orders candidates by decreasing bound, then smaller cap, then smaller B. */
static int cmp_candidate(const void* a, const void* b) {
  const Candidate *x = a, *y = b;
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
    for (int B = 1; B <= s->nbatch; B++) {
      size_t fixed = s->batch_bytes[B] + caps[k].tau;
      if (fixed > s->dev->mem_limit || s->dev->mem_limit - fixed < caps[k].minmem) break;
      double lb, ub, lambda;
      cap_bounds(&caps[k], s->dev->mem_limit - fixed, &lb, &ub, &lambda);
      visit(ctx, k, B, (double)N * B / (s->compute_s[B] + lb), (double)N * B / (s->compute_s[B] + ub));
    }
}

/* The candidates being collected. */
typedef struct CandidateList {
  Candidate* v;
  long n, cap;
  double floor_sps;   /* best samples/s of a real plan seen (the roundings) */
  int failed;
} CandidateList;

/* First pass: the best rounding. */
static void visit_floor(void* ctx, int k, int B, double bound, double feasible) {
  CandidateList* l = ctx;
  if (feasible > l->floor_sps) l->floor_sps = feasible;
  last_stats.pairs++;
  (void)k, (void)B, (void)bound;
}

/* Second pass: keeps the pairs whose bound reaches the best rounding. */
static void visit_keep(void* ctx, int k, int B, double bound, double feasible) {
  CandidateList* l = ctx;
  if (l->failed || bound < l->floor_sps * (1 - 1e-13)) return;
  if (l->n == l->cap) {
    long cap = l->cap ? 2 * l->cap : 256;
    Candidate* g = realloc(l->v, (size_t)cap * sizeof *g);
    if (!g) { l->failed = osdp_fail("out of memory"); return; }
    l->v = g;
    l->cap = cap;
  }
  l->v[l->n++] = (Candidate){k, B, bound};
  (void)feasible;
}

/* Bounds every (cap, B) pair that fits and keeps, sorted by bound, those that could beat the
** best rounding. Returns their number (or -1); the list is in *out, the best rounding's
** samples/s in *floor_sps. */
static long collect_candidates(const Search* s, const CapProblem* caps, Candidate** out,
                               double* floor_sps) {
  CandidateList l = {0};
  for_each_pair(s, caps, visit_floor, &l);
  for_each_pair(s, caps, visit_keep, &l);
  *out = l.v;
  *floor_sps = l.floor_sps;
  if (l.failed) return -1;
  if (l.n) qsort(l.v, (size_t)l.n, sizeof *l.v, cmp_candidate);
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
static int solve_candidates(const Search* s, const CapProblem* caps, const Candidate* c, long n,
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

/* Solves the built search: bounds, exact solves, the plan. */
static int search_run(Search* s, Plan* out, PlanCost* cost, size_t* min_bytes) {
  CapProblem* caps = calloc((size_t)s->ntaus, sizeof *caps);
  Candidate* cand = NULL;
  Best best = {0};
  best.choice = malloc((size_t)(s->nparam ? s->nparam : 1) * sizeof *best.choice);
  int rc = (!caps || !best.choice) ? osdp_fail("out of memory") : 0;
  for (int k = 0; k < s->ntaus && !rc; k++) rc = cap_build(s, s->taus[k], &caps[k]);
  size_t need = rc ? 0 : smallest_limit(s, caps);
  if (min_bytes) *min_bytes = need;
  if (!rc && need > s->dev->mem_limit) rc = no_fit_error(s, need);
  double floor_sps = 0;
  long n = rc ? 0 : collect_candidates(s, caps, &cand, &floor_sps);
  if (n < 0) rc = -1;
  if (!rc) rc = solve_candidates(s, caps, cand, n, floor_sps, &best);
  if (!rc && best.sps == 0) rc = no_fit_error(s, need); /* max_batch 0 cannot happen; safety */
  if (!rc) rc = best_to_plan(s, &best, out);
  if (!rc) plan_cost(s->d, s->dev, out, cost);
  for (int k = 0; caps && k < s->ntaus; k++) cap_free(&caps[k]);
  free(caps);
  free(cand);
  free(best.choice);
  return rc;
}

int planner_search(const GptDesc* d, const DeviceInfo* dev, const SearchOptions* o, Plan* out,
                   PlanCost* cost, size_t* min_bytes, double* search_s) {
  double t0 = now_seconds();
  memset(&last_stats, 0, sizeof last_stats);
  memset(out, 0, sizeof *out);
  PlanCost scratch;
  Search s;
  int rc = search_build(&s, d, dev, o);
  if (!rc) rc = search_run(&s, out, cost ? cost : &scratch, min_bytes);
  search_free(&s);
  if (search_s) *search_s = now_seconds() - t0;
  return rc;
}

/* ---- Uniform plans and explanations ------------------------------------------------------ */

int planner_best_uniform(const GptDesc* d, const DeviceInfo* dev, const SearchOptions* o,
                         Strategy s, Plan* out, PlanCost* cost) {
  SearchOptions so = normalized_options(d, o);
  Plan p;
  PlanCost c, best = {0};
  if (plan_uniform(&p, d, s, dev->ranks, 1, so.seq)) return -1;
  for (int B = 1; B <= so.max_batch; B++) {
    p.micro_batch = B;
    plan_cost(d, dev, &p, &c);
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

/* Persistent bytes of op's slices in plan p. */
static size_t op_kept_bytes(const GptDesc* d, const Plan* p, int op, int world) {
  size_t m = 0;
  for (int s = 0; s < p->ops[op].k; s++)
    m += cost_slice_persistent(gpt_slice_params(&d->ops[op], p->ops[op].k, s), p->ops[op].strat[s],
                               world);
  return m;
}

/* The largest micro-batch <= B at which plan q fits, or 0; fills *c with its cost. */
static int largest_fitting_batch(const GptDesc* d, const DeviceInfo* dev, Plan* q, int B, PlanCost* c) {
  for (int b = B; b >= 1; b--) {
    q->micro_batch = b;
    plan_cost(d, dev, q, c);
    if (c->mem.peak <= dev->mem_limit) return b;
  }
  return 0;
}

void planner_explain(const GptDesc* d, const DeviceInfo* dev, const SearchOptions* o,
                     const Plan* p, int op, char* buf, size_t n) {
  Plan q;
  PlanCost cp, cq, cb;
  char saved[32], over[32], cost[48];
  if (n) buf[0] = 0;
  if (!d->ops[op].n_params || plan_copy(&q, p)) return;
  q.ops[op].k = 1; /* the same plan with only this op replicated */
  q.ops[op].strat[0] = STRAT_DP;
  plan_cost(d, dev, p, &cp);
  plan_cost(d, dev, &q, &cq);
  size_t mine = op_kept_bytes(d, p, op, dev->ranks), dp = op_kept_bytes(d, &q, op, dev->ranks);
  format_bytes((double)(dp > mine ? dp - mine : 0), saved);
  double dt = (cp.comm_s + cp.optim_s) - (cq.comm_s + cq.optim_s);
  if (dt >= 0) snprintf(cost, sizeof cost, "costs %.3g ms per step", 1e3 * dt);
  else snprintf(cost, sizeof cost, "and is %.3g ms per step faster", -1e3 * dt);
  if (cq.mem.peak <= dev->mem_limit) {
    snprintf(buf, n, "saves %s %s than replicating it (which would also fit)", saved,
             dt >= 0 ? "but is slower" : "and is faster");
  } else {
    format_bytes((double)(cq.mem.peak - dev->mem_limit), over);
    int b = largest_fitting_batch(d, dev, &q, p->micro_batch - 1, &cb);
    if (b > 0)
      snprintf(buf, n, "saves %s (%s); replicated, micro-batch %d would exceed the limit by %s "
               "and micro-batch %d would give %.5g instead of %.5g samples/s", saved, cost,
               p->micro_batch, over, b, cb.samples_per_s, cp.samples_per_s);
    else
      snprintf(buf, n, "saves %s (%s); replicated, the plan would exceed the limit by %s at "
               "every micro-batch", saved, cost, over);
  }
  plan_free(&q);
  (void)o;
}
