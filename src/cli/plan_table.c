/*
** plan_table.c: the table of a plan that `osdp plan` prints; see plan_table.h. A gpt2-1.5b
** plan has 290 ops with parameters; grouping the identical layers keeps the table to a screen
** while the plan JSON keeps every op.
*/
#include "cli/plan_table.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"
#include "planner/cost.h"

/* Appends printf-style text at *off in buf of n bytes, never past its end. */
static void append(char* buf, size_t n, size_t* off, const char* fmt, ...) {
  if (*off >= n) return;
  va_list ap;
  va_start(ap, fmt);
  int w = vsnprintf(buf + *off, n - *off, fmt, ap);
  va_end(ap);
  if (w > 0) *off = *off + (size_t)w < n ? *off + (size_t)w : n - 1;
}

void plan_slices_text(const OpPlan* o, char* buf, size_t n) {
  size_t off = 0;
  if (!n) return;
  buf[0] = 0;
  for (int s = 0, r; s < o->k; s = r) {
    for (r = s; r < o->k && o->strat[r] == o->strat[s]; r++) {}
    const char* name = strategy_name(o->strat[s]);
    if (r - s == 1) append(buf, n, &off, "%s%s", s ? " + " : "", name);
    else append(buf, n, &off, "%s%d x %s", s ? " + " : "", r - s, name);
  }
}

/* One op's figures in the table: what its slices keep, their largest transient, the search
** model's seconds (communication + optimizer of each slice, plus the extra compute of k
** slices: what the search minimised), and whether any slice is sharded. */
typedef struct OpRow {
  size_t kept, transient;
  double time_s;
  int sharded;
} OpRow;

/* The figures of op i of plan p; base holds p's reduce dtype and the exposures at its
** micro-batch (cost_exposures). */
static OpRow op_row(const GptDesc* d, const DeviceInfo* dev, const Plan* p, int i,
                    const SliceContext* base) {
  const OpPlan* o = &p->ops[i];
  OpRow r = {0};
  SliceContext x = *base;
  x.uses = cost_op_uses(d, i, p->recompute);
  x.group = o->group > 0 ? o->group : dev->ranks;
  x.keep = o->keep;
  r.time_s = plan_accum(p) * cost_split_extra_s(d, dev, i, o->k, p->micro_batch, p->seq, p->recompute);
  for (int s = 0; s < o->k; s++) {
    size_t n = gpt_slice_params(&d->ops[i], o->k, s);
    r.kept += cost_slice_persistent(n, o->strat[s], x.group, p->precision, o->keep);
    r.time_s += cost_slice_search_s(dev, &x, n, o->strat[s]);
    r.sharded |= o->strat[s] != STRAT_DP;
  }
  r.transient = cost_op_transient(d, i, o, x.group, p->precision, x.uses);
  return r;
}

/* Seconds as "0.00 ms" below a second, else "1.234 s". */
static void time_text(double s, char buf[32]) {
  if (s < 1) snprintf(buf, 32, "%.2f ms", 1e3 * s);
  else snprintf(buf, 32, "%.3f s", s);
}

/* Prints one row; no trailing blanks when there is no "why". */
static void print_row(FILE* f, const char* name, const char* slices, size_t kept, size_t tr,
                      double time_s, const char* why) {
  char kb[32], tb[32], ts[32];
  time_text(time_s, ts);
  fprintf(f, "%-19s %-24s %10s %10s %9s%s%s\n", name, slices, format_bytes((double)kept, kb),
          format_bytes((double)tr, tb), ts, why[0] ? "  " : "", why);
}

/* Prints op i as one row named `name`, with planner_explain's words when it is sharded (for a
** block of layers, i is its first layer's op: every layer of the block has the same plan). A
** sharded op whose shard group is not the world says so after its slices: "zero2 G=8". */
static void print_op(FILE* f, const GptDesc* d, const DeviceInfo* dev, const SearchOptions* so,
                     const Plan* p, int i, const char* name, const SliceContext* base) {
  OpRow r = op_row(d, dev, p, i, base);
  char sl[160], why[160] = "";
  plan_slices_text(&p->ops[i], sl, sizeof sl);
  if (r.sharded && p->ops[i].group > 0 && p->ops[i].group < dev->ranks) {
    size_t off = strlen(sl);
    snprintf(sl + off, sizeof sl - off, " G=%d", p->ops[i].group);
  }
  if (p->ops[i].keep) { /* what it keeps whole across micro-steps */
    size_t off = strlen(sl);
    snprintf(sl + off, sizeof sl - off, " keep %s", keep_name(p->ops[i].keep));
  }
  if (r.sharded) planner_explain(d, dev, so, p, i, why, sizeof why);
  print_row(f, name, sl, r.kept, r.transient, r.time_s, why);
}

/* The layers of class c (cls[l] == c), as ranges in model order: "h0-h2,h11,h20-h46". */
static void layer_list(const int* cls, int nl, int c, char* buf, size_t n) {
  size_t off = 0;
  buf[0] = 0;
  for (int l = 0, r; l < nl; l = r) {
    if (cls[l] != c) { r = l + 1; continue; }
    for (r = l; r < nl && cls[r] == c; r++) {}
    if (r - l == 1) append(buf, n, &off, "%sh%d", off ? "," : "", l);
    else append(buf, n, &off, "%sh%d-h%d", off ? "," : "", l, r - 1);
  }
}

/* Prints the layers of class c (identical plans; c is the first of them) as a block: a
** heading naming them, with the block's totals (kept and time summed over its layers, the
** largest transient), then one row per op kind with parameters, with one layer's figures. A
** list of layers too long for the operator column goes on a line of its own. */
static void print_layers(FILE* f, const GptDesc* d, const DeviceInfo* dev, const SearchOptions* so,
                         const Plan* p, const int* cls, int c, const SliceContext* base) {
  int nl = d->cfg.n_layer, L = 0;
  for (int l = 0; l < nl; l++) L += cls[l] == c;
  size_t kept = 0, tr = 0;
  double t = 0;
  for (int j = 0; j < d->ops_per_layer; j++) {
    int i = gpt_layer_op(d, c, j);
    if (!d->ops[i].n_params) continue;
    OpRow r = op_row(d, dev, p, i, base);
    kept += r.kept;
    if (r.transient > tr) tr = r.transient;
    t += r.time_s;
  }
  char list[1024], head[1100], what[32];
  layer_list(cls, nl, c, list, sizeof list);
  snprintf(head, sizeof head, "%s (%d layer%s%s)", list, L, L == 1 ? "" : "s",
           p->recompute[c] ? ", recomputed" : "");
  if (L == 1) snprintf(what, sizeof what, "sum of the rows below");
  else snprintf(what, sizeof what, "%d x the rows below", L);
  if (strlen(head) > 19) { fprintf(f, "%s\n", head); head[0] = 0; }
  print_row(f, head, what, (size_t)L * kept, tr, L * t, "");
  for (int j = 0; j < d->ops_per_layer; j++) {
    int i = gpt_layer_op(d, c, j);
    if (!d->ops[i].n_params) continue;
    const char* dot = strchr(d->ops[i].name, '.');
    char name[32];
    snprintf(name, sizeof name, "  %s", dot ? dot + 1 : d->ops[i].name);
    print_op(f, d, dev, so, p, i, name, base);
  }
}

/* Prints the transformer layers, grouped by plan: layers with identical plans are
** interchangeable (the search only chooses how many of them get each plan, not which), so one
** block per distinct plan, in the order of its first layer, reads best. */
static void print_all_layers(FILE* f, const GptDesc* d, const DeviceInfo* dev,
                             const SearchOptions* so, const Plan* p, const SliceContext* base) {
  int nl = d->cfg.n_layer;
  int* cls = malloc((size_t)nl * sizeof *cls);
  if (!cls) return;
  for (int l = 0; l < nl; l++) {
    cls[l] = l;
    for (int m = 0; m < l; m++)
      if (cls[m] == m && plan_same_layer(d, p, m, l)) { cls[l] = m; break; }
  }
  for (int l = 0; l < nl; l++)
    if (cls[l] == l) print_layers(f, d, dev, so, p, cls, l, base);
  free(cls);
}

/* Whether any sharded op of plan p shards over fewer ranks than the world. */
static int plan_has_groups(const DeviceInfo* dev, const Plan* p) {
  for (int i = 0; i < p->nops; i++)
    for (int s = 0; p->ops[i].group > 0 && p->ops[i].group < dev->ranks && s < p->ops[i].k; s++)
      if (p->ops[i].strat[s] != STRAT_DP) return 1;
  return 0;
}

void plan_table_print(FILE* f, const GptDesc* d, const DeviceInfo* dev, const SearchOptions* so,
                      const Plan* p) {
  SliceContext base = {.reduce = p->reduce_dtype, .accum = plan_accum(p)};
  cost_exposures(d, dev, p->micro_batch, p->seq, p->reduce_dtype, &base.dp_exposure, &base.across_exposure);
  fprintf(f, "%-19s %-24s %10s %10s %9s  %s\n", "operator", "slices", "kept", "transient", "time",
          "why");
  int first = gpt_layer_op(d, 0, 0), last = gpt_layer_op(d, d->cfg.n_layer - 1, d->ops_per_layer - 1);
  for (int i = 0; i < d->nops; i++) {
    if (i == first) print_all_layers(f, d, dev, so, p, &base);
    if (i >= first && i <= last) continue;
    if (d->ops[i].n_params) print_op(f, d, dev, so, p, i, d->ops[i].name, &base); /* the ops outside the layers */
  }
  int faster = 0; /* whether some op's slices measured faster than the whole op */
  for (int i = 0; i < d->nops; i++)
    faster |= d->ops[i].n_params && op_row(d, dev, p, i, &base).time_s < 0;
  int keeps = plan_keep_ops(p, KEEP_ALL) > 0; /* some op keeps slices whole across the step */
  fprintf(f, "(kept: bytes per rank between steps; time: communication + optimizer + slicing per "
             "step, search model%s%s%s)\n", faster ? ", below 0 where the k slices measured faster than "
             "the whole op" : "", plan_has_groups(dev, p) ? "; G=g: sharded within groups of g "
             "ranks, replicated across them" : "", keeps ? "; keep grad/weight: the full gradient "
             "(reduced once a step) / the gathered weight (gathered once) held for the whole step, "
             "in kept" : "");
}
