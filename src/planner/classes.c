/*
** classes.c: the operator classes (identical operators share one configuration list), the
** transient caps, the micro-batches, and building / freeing the Search they form. See the
** method at the top of search.c.
*/
#include "planner/search_internal.h"

#include <stdlib.h>
#include <string.h>

#include "core/util.h"

/* Whether ops i and j have identical configurations. */
static int same_class(const GptDesc* d, int i, int j) {
  const GptOp *a = &d->ops[i], *b = &d->ops[j];
  return a->rows == b->rows && a->width == b->width && a->tail == b->tail &&
         a->splittable == b->splittable && (i == 0) == (j == 0);
}

/* Frees what search_build allocated. */
void search_free(Search* s) {
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
      if (op_configs(d, s->dev, &s->o, i, s->B, s->exposure, &l)) { free(l.v); return -1; }
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
    s->compute_s[B] = cost_compute_s(s->d, s->dev, B, T) +
                      device_step_collective_s(s->dev, COLL_ALLREDUCE, 16); /* the norm */
    if (s->batch_bytes[B] > s->dev->mem_limit) break;
    s->nbatch = B;
  }
  return 0;
}

/* Builds everything the search at micro-batch B needs. */
int search_build(Search* s, const GptDesc* d, const DeviceInfo* dev, const SearchOptions* o, int B) {
  memset(s, 0, sizeof *s);
  s->d = d;
  s->dev = dev;
  s->o = normalized_options(d, o);
  s->B = B;
  if (device_validate(dev, "device")) return -1;
  if (s->o.seq > d->cfg.max_seq)
    return osdp_fail("planner: seq %d exceeds the model's max_seq %d; lower --seq", s->o.seq,
                     d->cfg.max_seq);
  s->exposure = cost_dp_exposure(d, dev, B, s->o.seq);
  if (build_batches(s) || build_classes(s) || build_taus(s)) return -1;
  last_stats.classes = s->ncls;
  for (int c = 0; c < s->ncls; c++) last_stats.configs += s->cls[c].ncfg;
  last_stats.taus = s->ntaus;
  return 0;
}
