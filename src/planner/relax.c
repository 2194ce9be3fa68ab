/*
** relax.c: the problem under one transient cap (each class's Pareto options) and its linear
** relaxation: convex hull steps merged by slope, the bounds they give and the Lagrangian
** bound (steps 2 and 3 of the method at the top of search.c).
*/
#include "planner/search_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"

/* Frees a cap problem. */
void cap_free(CapProblem* p) {
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
int cmp_segment(const void* a, const void* b) {
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
int class_hull(const Option* o, int n, int count, Segment* seg, int nseg, int* hull) {
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
int cap_build(const Search* s, size_t tau, CapProblem* p) {
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
void cap_bounds(const CapProblem* p, size_t b, double* lb, double* ub, double* lambda) {
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

/* Sum over classes of count * min_x (t(x) + lambda m(x)) - lambda b: a lower bound on the
** time of every plan within budget b (Lagrangian duality). */
double lagrangian_bound(const Search* s, const CapProblem* p, size_t b, double lambda) {
  double lb = -lambda * (double)b;
  for (int c = 0; c < s->ncls; c++) {
    double phi = INFINITY;
    const Option* o = p->opt + p->off[c];
    for (int j = 0; j < p->nopt[c]; j++) phi = fmin(phi, o[j].t + lambda * (double)o[j].m);
    lb += s->cls[c].count * phi;
  }
  return lb;
}
