/*
** classes.c: the operator classes (identical operators share one configuration list) of one
** micro-batch, for every recompute count; the transient caps; and building / freeing the
** Search of one (micro-batch, recompute count) from them. See the method at the top of search.c.
*/
#include "planner/search_internal.h"

#include <stdlib.h>
#include <string.h>

#include "core/util.h"
#include "model/gpt_step.h"

/* Whether two use counts are the same. */
static int same_uses(OpUses a, OpUses b) {
  return a.fwd_weight == b.fwd_weight && a.bwd_weight == b.bwd_weight && a.bwd_grad == b.bwd_grad;
}

/* Whether op i, with uses u and recomputed or not, has the configurations of class c: the same
** block, the same uses in the step's schedule (cost_ops_uses, so embed's tied weight is told
** apart by its schedule, not by its index), alike in being recomputed (its extra compute of
** splitting then counts in the recomputed forward too) and in holding all of its slices at once
** (gpt_op_held: an untied LM head has the block and the uses of the embedding beside it, but
** its slices' gathered weights and full gradients are all live together). */
static int same_class(const GptDesc* d, const OpClass* c, int i, OpUses u, int recomputed) {
  const GptOp *a = &d->ops[c->rep], *b = &d->ops[i];
  return a->rows == b->rows && a->width == b->width && a->tail == b->tail &&
         a->splittable == b->splittable && same_uses(c->uses, u) && c->recomputed == recomputed &&
         gpt_op_held(d, c->rep) == gpt_op_held(d, i);
}

void pool_free(ClassPool* p) {
  for (int c = 0; c < p->ncls; c++) free(p->cls[c].cfg);
  free(p->cls);
  free(p->plain);
  free(p->recomputed);
  memset(p, 0, sizeof *p);
}

/* The class of op i with uses u under recompute flags `flags` (NULL: none): an existing one,
** or a new one whose configurations are enumerated now. Returns its index, or -1. */
static int pool_class(ClassPool* p, int i, OpUses u, const int* flags) {
  int rec = gpt_op_recomputes(p->d, flags, i);
  for (int c = 0; c < p->ncls; c++)
    if (same_class(p->d, &p->cls[c], i, u, rec)) return c;
  ConfigList l = {0};
  if (op_configs(p->d, p->dev, &p->o, i, p->B, &p->base, flags, &l)) { free(l.v); return -1; }
  p->cls[p->ncls] = (OpClass){.rep = i, .uses = u, .recomputed = rec, .cfg = l.v, .ncfg = l.n};
  return p->ncls++;
}

/* Fills every op's two classes (as it is, and in a recomputed layer); uses from the step's
** schedule without recomputation and with every layer recomputed. */
static int pool_classes(ClassPool* p, const int* all) {
  const GptDesc* d = p->d;
  OpUses* plain = malloc((size_t)d->nops * sizeof *plain);
  OpUses* rec = malloc((size_t)d->nops * sizeof *rec);
  int rc = plain && rec ? 0 : osdp_fail("out of memory");
  if (!rc) {
    cost_ops_uses(d, NULL, plain);
    cost_ops_uses(d, all, rec);
  }
  for (int i = 0; !rc && i < d->nops; i++) {
    p->plain[i] = p->recomputed[i] = -1;
    if (!d->ops[i].n_params) continue;
    p->plain[i] = pool_class(p, i, plain[i], NULL);
    p->recomputed[i] = p->plain[i] < 0 ? -1 : pool_class(p, i, rec[i], all);
    if (p->recomputed[i] < 0) rc = -1;
  }
  free(plain);
  free(rec);
  return rc;
}

int pool_build(ClassPool* p, const GptDesc* d, const DeviceInfo* dev, const SearchOptions* o, int B) {
  memset(p, 0, sizeof *p);
  p->d = d;
  p->dev = dev;
  p->o = normalized_options(d, o);
  p->B = B;
  p->base.reduce = p->o.reduce_dtype == REDUCE_BF16 ? REDUCE_BF16 : REDUCE_FP32;
  cost_exposures(d, dev, B, p->o.seq, p->base.reduce, &p->base.dp_exposure, &p->base.across_exposure);
  p->cls = calloc(2 * (size_t)d->nops, sizeof *p->cls);
  p->plain = malloc((size_t)d->nops * sizeof *p->plain);
  p->recomputed = malloc((size_t)d->nops * sizeof *p->recomputed);
  int* all = malloc((size_t)(d->cfg.n_layer > 0 ? d->cfg.n_layer : 1) * sizeof *all);
  int rc = p->cls && p->plain && p->recomputed && all ? 0 : osdp_fail("out of memory");
  for (int l = 0; !rc && l < d->cfg.n_layer; l++) all[l] = 1;
  if (!rc) rc = pool_classes(p, all);
  free(all);
  if (last_stats.classes < p->ncls) last_stats.classes = p->ncls;
  int configs = 0;
  for (int c = 0; c < p->ncls; c++) configs += p->cls[c].ncfg;
  if (last_stats.configs < configs) last_stats.configs = configs;
  return rc;
}

/* Frees what search_build allocated (the configurations belong to the pool). */
void search_free(Search* s) {
  free(s->cls);
  free(s->param_op);
  free(s->op_class);
  free(s->taus);
  memset(s, 0, sizeof *s);
}

/* Parameters of one op of class c. */
static size_t class_params(const Search* s, int c) { return s->d->ops[s->cls[c].rep].n_params; }

/* The classes present with the first R layers recomputed (the pool's, renumbered, with their
** counts), and the parameter ops grouped by class, largest blocks first: the exact program
** visits the ops in that order, so that the small ops come last and fine-tune the memory. */
static int build_classes(Search* s, const ClassPool* p) {
  const GptDesc* d = s->d;
  s->op_class = malloc((size_t)d->nops * sizeof *s->op_class);
  s->cls = calloc((size_t)(p->ncls ? p->ncls : 1), sizeof *s->cls);
  s->param_op = malloc((size_t)d->nops * sizeof *s->param_op);
  int* local = malloc((size_t)(p->ncls ? p->ncls : 1) * sizeof *local);
  int* order = malloc((size_t)(p->ncls ? p->ncls : 1) * sizeof *order);
  if (!s->op_class || !s->cls || !s->param_op || !local || !order) {
    free(local);
    free(order);
    return osdp_fail("out of memory");
  }
  for (int c = 0; c < p->ncls; c++) local[c] = -1;
  for (int i = 0; i < d->nops; i++) {
    int l = d->ops[i].layer, pc = l >= 0 && l < s->R ? p->recomputed[i] : p->plain[i];
    s->op_class[i] = -1;
    if (pc < 0) continue;
    if (local[pc] < 0) {
      local[pc] = s->ncls;
      s->cls[s->ncls] = p->cls[pc];
      s->cls[s->ncls++].count = 0;
    }
    s->cls[local[pc]].count++;
    s->op_class[i] = local[pc];
  }
  for (int c = 0; c < s->ncls; c++) order[c] = c;
  for (int a = 1; a < s->ncls; a++) /* insertion sort by block size, descending */
    for (int b = a; b > 0 && class_params(s, order[b]) > class_params(s, order[b - 1]); b--) {
      int x = order[b];
      order[b] = order[b - 1];
      order[b - 1] = x;
    }
  for (int k = 0; k < s->ncls; k++)
    for (int i = 0; i < d->nops; i++) if (s->op_class[i] == order[k]) s->param_op[s->nparam++] = i;
  free(local);
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

/* Batch bytes and compute time of micro-batch B with the first R layers recomputed. */
static int batch_figures(Search* s) {
  const GptDesc* d = s->d;
  int* flags = malloc((size_t)(d->cfg.n_layer > 0 ? d->cfg.n_layer : 1) * sizeof *flags);
  if (!flags) return osdp_fail("out of memory");
  for (int l = 0; l < d->cfg.n_layer; l++) flags[l] = l < s->R;
  int B = s->B, T = s->o.seq;
  s->batch_bytes = cost_batch_bytes(d, s->dev, B, T, flags);
  int K = planner_accum(&s->o, s->dev, B); /* 0: B does not divide the global batch */
  s->K = K > 0 ? K : 1;
  s->samples = (double)s->dev->ranks * B * s->K;
  s->compute_s = s->K * (cost_compute_s(d, s->dev, B, T) + cost_recompute_s(d, s->dev, B, T, flags)) +
                 device_step_collective_s(s->dev, COLL_ALLREDUCE, 16);
  free(flags);
  return 0;
}

int search_build(Search* s, const ClassPool* p, int R) {
  memset(s, 0, sizeof *s);
  s->d = p->d;
  s->dev = p->dev;
  s->o = p->o;
  s->B = p->B;
  s->R = R;
  if (batch_figures(s) || build_classes(s, p) || build_taus(s)) return -1;
  if (last_stats.taus < s->ntaus) last_stats.taus = s->ntaus;
  last_stats.problems++;
  return 0;
}
