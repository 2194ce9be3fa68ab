/*
** exact.c: the exact solve of one (cap, budget) pair: a dynamic program over the ops keeping
** the exact Pareto list of (memory, time) partial plans, pruned by the relaxation of the ops
** still to come and by Lagrangian reduced costs, after a beam pass (step 4 of the method at
** the top of search.c).
*/
#include "planner/search_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"

/* A partial plan in the dynamic program: memory and time of the multi-candidate ops so far.
** Only the current and the previous level keep these. */
struct DpNode {
  size_t m;
  double t;
};

/* How a node was reached: kept for every level, to rebuild the plan. */
struct DpLink {
  int prev;           /* link of the node it extends (-1: the root) */
  int cand;           /* candidate chosen for this level's op */
};

/* One shifted copy of a level during the merge: candidate j added to the level's nodes
** from position pos on. */
struct MergeHead {
  size_t m;           /* memory of the node at pos plus the candidate's */
  double t;
  long pos;
  int j;
  int step;           /* rest_time's hint for this copy */
};

/* Frees a solver. */
void solver_free(Solver* v) {
  void* p[] = {v->level[0], v->level[1], v->link, v->key, v->sorted, v->heap, v->cand_off,
               v->ncand, v->cand, v->seg, v->hull, v->remain, v->cum_dm, v->cum_dt,
               v->min_rest, v->max_rest, v->tmin_rest, v->choice};
  for (size_t i = 0; i < sizeof p / sizeof p[0]; i++) free(p[i]);
  memset(v, 0, sizeof *v);
}

/* Allocates a solver for search s. */
int solver_init(Solver* v, const Search* s) {
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

/* Nodes per level of the heuristic pass. */
#define BEAM_WIDTH 256

/* The least time of any plan under cap p within budget b, if it is <= t_cap: returns 1 and
** the time in *t (choices in v->choice); 0 when no plan is that fast; -1 on failure.
** A beam pass first finds a good plan fast (time h); then the exact program keeps every
** partial plan whose bound is <= min(h, t_cap, ub), which every better plan respects. */
int solve_exact(Solver* v, const Search* s, const CapProblem* p, size_t b, double t_cap,
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
