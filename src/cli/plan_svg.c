/*
** plan_svg.c: draws a plan's memory over one training step and its per-slice strategies as
** plain SVG (see plan_svg.h). Every number comes from plan_predict_memory and
** plan_transient_timeline, the same replay the memory prediction uses, so the picture and
** `osdp describe` agree to the byte.
*/
#include "cli/plan_svg.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/svg_out.h"
#include "core/output.h"
#include "core/util.h"
#include "model/gpt_step.h"

/* Page geometry (pixels): the three panels share the plot's left and right edges. */
#define SVG_W 1200.0
#define SVG_H 820.0
#define PX0 95.0     /* plot left */
#define PX1 985.0    /* plot right; the legends live to its right */
#define MEM_TOP 105.0
#define MEM_BOT 425.0
#define TR_TOP 505.0
#define TR_BOT 585.0
#define GRID_TOP 635.0
#define GRID_BOT 731.0
#define LEG_X (PX1 + 22.0)

/* Memory categories, bottom of the stack first, and their colours. */
enum { CAT_PARAMS, CAT_GRADS, CAT_OPTIM, CAT_ACTS, CAT_SCRATCH, CAT_TRANSIENT, CAT_N };
static const char* cat_names[CAT_N] = {"params", "grads", "optimizer", "activations", "scratch",
                                       "transient"};
static const char* cat_colors[CAT_N] = {"#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f",
                                        "#edc948"};
static const char* strat_colors[STRAT_COUNT] = {"#c6dbef", "#fd8d3c", "#6a51a3"};
static const char* strat_text_colors[STRAT_COUNT] = {"#1f3b57", "#3d1f00", "#ffffff"};
#define LIMIT_COLOR "#d62728"
#define TRANSIENT_STROKE "#a07c00"

/* One training step as the picture needs it: its parameter uses, the op making each use,
** the transient bytes live during each, and where the backward pass and the peak are. */
typedef struct SvgStep {
  int n;               /* parameter uses */
  GptParamUse* u;      /* n uses, gpt_param_schedule order */
  int* op;             /* n: the op making use i (lm_head for the tied wte's later uses) */
  size_t* live;        /* n: transient bytes live during use i */
  int bwd;             /* index of the first backward use (n if none) */
  int peak_use;        /* first use with the largest transient */
  size_t max_live;     /* live[peak_use] */
} SvgStep;

/* Characters (not bytes) of a UTF-8 string, to estimate a label's width. */
static size_t utf8_len(const char* s) {
  size_t n = 0;
  for (; *s; s++) n += ((unsigned char)*s & 0xC0) != 0x80;
  return n;
}

/* A label placed on the plot: where its text is anchored and the box it covers. */
typedef struct SvgLabel {
  double x, y;          /* text anchor point (baseline) */
  const char* anchor;   /* "start" or "end" */
  double left, right;   /* the box it covers, estimated from the text */
  int size;             /* font size */
} SvgLabel;

/* Places text s of font size `size` at (x, y) anchored at "start" or "end", moved inside
** the plot's left and right edges if it would stick out. */
static SvgLabel label_place(double x, double y, const char* anchor, int size, const char* s) {
  SvgLabel l = {x, y, anchor, 0, 0, size};
  double w = 0.6 * size * (double)utf8_len(s);
  if (strcmp(anchor, "end") == 0 && x - w < PX0 + 3) { l.x = PX0 + 3; l.anchor = "start"; }
  if (strcmp(l.anchor, "start") == 0 && l.x + w > PX1 - 3) { l.x = PX1 - 3; l.anchor = "end"; }
  l.left = strcmp(l.anchor, "end") == 0 ? l.x - w : l.x;
  l.right = l.left + w;
  return l;
}

/* Whether two placed labels' boxes overlap. */
static int labels_overlap(const SvgLabel* a, const SvgLabel* b) {
  return a->left < b->right + 4 && b->left < a->right + 4 && a->y - a->size < b->y + 5 &&
         b->y - b->size < a->y + 5;
}

/* Writes a placed label on a white box, so it stays readable over bands, curves and lines. */
static void emit_boxed_label(SvgOut* o, const SvgLabel* l, const char* attrs, const char* s) {
  svg_emit(o, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%d\" rx=\"2\" fill=\"#fff\" "
           "fill-opacity=\"0.88\"/>\n", l->left - 3, l->y - l->size, l->right - l->left + 6,
           l->size + 5);
  svg_text(o, l->x, l->y, l->anchor, attrs, s);
}

/* Frees what svg_step_load allocated. */
static void svg_step_free(SvgStep* s) {
  free(s->u);
  free(s->op);
  free(s->live);
  memset(s, 0, sizeof *s);
}

/* Replays plan p's step: the parameter uses, who makes them and the transient timeline.
** Returns 0, or -1 with an error when out of memory. */
static int svg_step_load(SvgStep* s, const GptDesc* d, const Plan* p) {
  memset(s, 0, sizeof *s);
  int* slices = malloc((size_t)d->nops * sizeof *slices);
  if (!slices) return osdp_fail("--svg: out of memory");
  plan_slice_counts(p, slices);
  int n = 0;
  s->u = gpt_param_schedule_alloc(d, slices, p->recompute, &n);
  s->op = malloc((size_t)(n > 0 ? n : 1) * sizeof *s->op);
  s->live = malloc((size_t)(n > 0 ? n : 1) * sizeof *s->live);
  if (!s->u || !s->op || !s->live) {
    free(slices);
    svg_step_free(s);
    return osdp_fail("--svg: out of memory");
  }
  free(slices);
  if (plan_transient_timeline(d, p, s->live) != n) {
    svg_step_free(s);
    return osdp_fail("--svg: the transient timeline does not match the step's schedule");
  }
  s->n = n;
  /* A tied weight (GPT-2's wte) is used by its owner first in forward and by the logits op
  ** after the layers; in backward the logits op's use needs the weight and the owner's does
  ** not. */
  int lm = d->head_op, tied = d->ops[lm].owner != lm ? d->ops[lm].owner : -1, seen_other = 0;
  s->bwd = n;
  for (int i = 0; i < n; i++) {
    const GptParamUse* u = &s->u[i];
    s->op[i] = u->owner;
    if (u->owner == tied && u->phase == GPT_FORWARD && seen_other) s->op[i] = lm;
    if (u->owner == tied && u->phase == GPT_BACKWARD && u->weight) s->op[i] = lm;
    if (u->owner != tied) seen_other = 1;
    if (u->phase == GPT_BACKWARD && s->bwd == n) s->bwd = i;
    if (s->live[i] > s->max_live) { s->max_live = s->live[i]; s->peak_use = i; }
  }
  return 0;
}

/* The name of use i: its op, with the slice when the op has several. */
static void use_name(const GptDesc* d, const Plan* p, const SvgStep* s, int i, char* buf,
                     size_t n) {
  const GptParamUse* u = &s->u[i];
  int k = p->ops[u->owner].k;
  if (k > 1) snprintf(buf, n, "%s[%d]", d->ops[s->op[i]].name, u->slice);
  else snprintf(buf, n, "%s", d->ops[s->op[i]].name);
}

/* X coordinate of the start of use i (uses share the plot's width equally). */
static double use_x(const SvgStep* s, double i) {
  return PX0 + (PX1 - PX0) * i / (s->n > 0 ? s->n : 1);
}

/* Y coordinate of b bytes on a panel running from 0 at bot to top_bytes at top. */
static double bytes_y(double b, double top_bytes, double top, double bot) {
  return bot - (bot - top) * b / (top_bytes > 0 ? top_bytes : 1);
}

/* Draws the transient timeline as a filled step curve standing on `base` bytes. */
static void emit_timeline(SvgOut* o, const SvgStep* s, size_t base, double top_bytes,
                          double top, double bot) {
  double yb = bytes_y((double)base, top_bytes, top, bot);
  svg_emit(o, "<path fill=\"%s\" stroke=\"%s\" stroke-width=\"0.8\" stroke-linejoin=\"round\" d=\"M%.2f %.2f",
           cat_colors[CAT_TRANSIENT], TRANSIENT_STROKE, PX0, yb);
  for (int i = 0; i < s->n; i++) {
    if (i > 0 && s->live[i] == s->live[i - 1]) continue;
    double y = bytes_y((double)(base + s->live[i]), top_bytes, top, bot);
    int j = i;
    while (j + 1 < s->n && s->live[j + 1] == s->live[i]) j++;
    svg_emit(o, " L%.2f %.2f L%.2f %.2f", use_x(s, i), y, use_x(s, j + 1), y);
  }
  svg_emit(o, " L%.2f %.2f Z\"/>\n", PX1, yb);
}

/* Draws horizontal grid lines and byte labels every `step` bytes up to top_bytes. */
static void emit_y_axis(SvgOut* o, double top_bytes, double step, double top, double bot) {
  char b[32];
  for (double t = 0; t <= top_bytes * 1.0000001; t += step) {
    double y = bytes_y(t, top_bytes, top, bot);
    svg_emit(o, "<line x1=\"%.1f\" y1=\"%.2f\" x2=\"%.1f\" y2=\"%.2f\" stroke=\"#000\" "
             "stroke-opacity=\"0.12\"/>\n", PX0, y, PX1, y);
    svg_text(o, PX0 - 6, y + 4, "end", "font-size=\"11\" fill=\"#333\"", svg_axis_bytes(t, b));
  }
}

/* Draws the forward/backward boundary across the two step panels and names the halves. */
static void emit_phases(SvgOut* o, const SvgStep* s) {
  double xb = use_x(s, s->bwd);
  svg_emit(o, "<line x1=\"%.2f\" y1=\"%.1f\" x2=\"%.2f\" y2=\"%.1f\" stroke=\"#333\" "
           "stroke-width=\"1\" stroke-dasharray=\"5 3\"/>\n", xb, MEM_TOP - 14, xb, TR_BOT);
  const char* a = "font-size=\"12\" font-weight=\"bold\" fill=\"#333\"";
  if (s->bwd > 0) svg_text(o, (PX0 + xb) / 2, MEM_TOP - 5, "middle", a, "forward \u2192");
  if (s->bwd < s->n) svg_text(o, (xb + PX1) / 2, MEM_TOP - 5, "middle", a, "backward \u2192");
}

/* Draws op names under the memory panel at evenly spaced uses. */
static void emit_use_labels(SvgOut* o, const GptDesc* d, const Plan* p, const SvgStep* s) {
  int nl = (int)((PX1 - PX0) / 110);
  if (nl > s->n) nl = s->n;
  for (int j = 0; j < nl; j++) {
    int i = (int)(((double)j + 0.5) * s->n / nl);
    double x = use_x(s, i + 0.5);
    char name[64];
    use_name(d, p, s, i, name, sizeof name);
    svg_emit(o, "<line x1=\"%.2f\" y1=\"%.1f\" x2=\"%.2f\" y2=\"%.1f\" stroke=\"#333\"/>\n", x,
             MEM_BOT, x, MEM_BOT + 4);
    svg_text(o, x, MEM_BOT + 16, "middle", "font-size=\"10\" fill=\"#333\"", name);
  }
}

/* Draws the limit line and the peak marker with their labels: the limit's label on the
** other half of the plot from the peak, and above the peak's label should they still meet.
** A limit not drawn (more than 3x the peak) is named at the top of the plot instead. */
static void emit_limit_and_peak(SvgOut* o, const GptDesc* d, const Plan* p, const SvgStep* s,
                                const MemPrediction* m, size_t limit, int limit_drawn,
                                double top_bytes) {
  char b[32], b2[32], name[64], ptxt[200], ltxt[64];
  double xp = use_x(s, s->peak_use + 0.5), yp = bytes_y((double)m->peak, top_bytes, MEM_TOP, MEM_BOT);
  int peak_right = xp > (PX0 + PX1) / 2, over = limit && m->peak > limit;
  use_name(d, p, s, s->peak_use, name, sizeof name);
  if (s->max_live == 0)
    snprintf(ptxt, sizeof ptxt, "peak %s (no transient: constant over the step)",
             format_bytes((double)m->peak, b));
  else
    snprintf(ptxt, sizeof ptxt, "peak %s at %s (%s)", format_bytes((double)m->peak, b), name,
             s->peak_use >= s->bwd ? "backward" : "forward");
  if (over) {
    size_t l = strlen(ptxt);
    snprintf(ptxt + l, sizeof ptxt - l, ", %s over the limit",
             format_bytes((double)(m->peak - limit), b2));
  }
  SvgLabel pl = label_place(peak_right ? xp + 4 : xp - 4, yp - 12, peak_right ? "end" : "start",
                            12, ptxt);
  if (limit && !limit_drawn) {
    snprintf(ltxt, sizeof ltxt, "limit %s: far above, off the scale", format_bytes((double)limit, b));
    SvgLabel ll = label_place(peak_right ? PX0 + 6 : PX1 - 6, MEM_TOP + 16,
                              peak_right ? "start" : "end", 12, ltxt);
    if (labels_overlap(&ll, &pl)) ll.y = pl.y + 22;
    emit_boxed_label(o, &ll, "font-size=\"12\" font-weight=\"bold\" fill=\"" LIMIT_COLOR "\"", ltxt);
  } else if (limit) {
    double yl = bytes_y((double)limit, top_bytes, MEM_TOP, MEM_BOT);
    svg_emit(o, "<line x1=\"%.1f\" y1=\"%.2f\" x2=\"%.1f\" y2=\"%.2f\" stroke=\"%s\" "
             "stroke-width=\"2\" stroke-dasharray=\"8 4\"/>\n", PX0, yl, PX1, yl, LIMIT_COLOR);
    snprintf(ltxt, sizeof ltxt, "limit %s", format_bytes((double)limit, b));
    /* Below the line when the peak (and its label) is above it, else above the line. */
    SvgLabel ll = label_place(peak_right ? PX0 + 6 : PX1 - 6, over ? yl + 15 : yl - 5,
                              peak_right ? "start" : "end", 12, ltxt);
    if (labels_overlap(&ll, &pl)) ll.y = pl.y - pl.size - 6;
    emit_boxed_label(o, &ll, "font-size=\"12\" font-weight=\"bold\" fill=\"" LIMIT_COLOR "\"", ltxt);
  }
  svg_emit(o, "<path d=\"M%.2f %.2f l-5 -8 h10 z\" fill=\"%s\" stroke=\"#fff\" stroke-width=\"0.8\"/>\n",
           xp, yp, over ? LIMIT_COLOR : "#222");
  emit_boxed_label(o, &pl,
                   over ? "font-size=\"12\" font-weight=\"bold\" fill=\"" LIMIT_COLOR "\""
                        : "font-size=\"12\" font-weight=\"bold\" fill=\"#222\"", ptxt);
}

/* Draws the legend of the memory panel: each category with its bytes, then the peak. */
static void emit_memory_legend(SvgOut* o, const MemPrediction* m, size_t limit) {
  size_t v[CAT_N] = {m->params, m->grads, m->optim, m->acts, m->scratch, m->transient};
  char b[32], txt[80];
  double y = MEM_TOP + 4;
  svg_text(o, LEG_X, y, "start", "font-size=\"12\" font-weight=\"bold\" fill=\"#222\"",
           "per rank, at the peak");
  for (int c = CAT_N - 1; c >= 0; c--) {
    y += 20;
    svg_emit(o, "<rect x=\"%.1f\" y=\"%.1f\" width=\"14\" height=\"12\" fill=\"%s\"%s/>\n", LEG_X,
             y - 10, cat_colors[c], c == CAT_TRANSIENT ? " stroke=\"" TRANSIENT_STROKE "\"" : "");
    snprintf(txt, sizeof txt, "%s%s", cat_names[c], c == CAT_TRANSIENT ? " (max)" : "");
    svg_text(o, LEG_X + 20, y, "start", "font-size=\"11\" fill=\"#222\"", txt);
    svg_text(o, SVG_W - 8, y, "end", "font-size=\"11\" fill=\"#222\"",
             format_bytes((double)v[c], b));
  }
  y += 24;
  svg_text(o, LEG_X + 20, y, "start", "font-size=\"11\" font-weight=\"bold\" fill=\"#222\"", "peak");
  svg_text(o, SVG_W - 8, y, "end", "font-size=\"11\" font-weight=\"bold\" fill=\"#222\"",
           format_bytes((double)m->peak, b));
  if (limit) {
    y += 20;
    svg_emit(o, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" stroke-width=\"2\" "
             "stroke-dasharray=\"5 3\"/>\n", LEG_X, y - 4, LEG_X + 14, y - 4, LIMIT_COLOR);
    svg_text(o, LEG_X + 20, y, "start", "font-size=\"11\" fill=\"" LIMIT_COLOR "\"", "limit");
    svg_text(o, SVG_W - 8, y, "end", "font-size=\"11\" fill=\"" LIMIT_COLOR "\"",
             format_bytes((double)limit, b));
  }
  y += 26;
  svg_text(o, LEG_X, y, "start", "font-size=\"10\" fill=\"#555\"", "bands below the curve are");
  svg_text(o, LEG_X, y + 13, "start", "font-size=\"10\" fill=\"#555\"", "allocated at start-up;");
  svg_text(o, LEG_X, y + 26, "start", "font-size=\"10\" fill=\"#555\"", "the curve is what each");
  svg_text(o, LEG_X, y + 39, "start", "font-size=\"10\" fill=\"#555\"", "parameter use adds");
}

/* Panel 1: the persistent bands, the transient on top, axes, limit and peak. */
static void emit_memory_panel(SvgOut* o, const GptDesc* d, const Plan* p, const SvgStep* s,
                              const MemPrediction* m, size_t limit) {
  /* A limit far above the peak would squash the bands: it is then named, not drawn. */
  int limit_drawn = limit && limit <= 3 * m->peak;
  double hi = (double)(limit_drawn && limit > m->peak ? limit : m->peak) * 1.1;
  double step = svg_nice_bytes(hi, 5);
  double top_bytes = step * (double)(size_t)(hi / step + 0.999999);
  size_t v[CAT_TRANSIENT] = {m->params, m->grads, m->optim, m->acts, m->scratch};
  size_t cum = 0;
  emit_y_axis(o, top_bytes, step, MEM_TOP, MEM_BOT);
  svg_emit(o, "<g shape-rendering=\"crispEdges\">\n");
  for (int c = 0; c < CAT_TRANSIENT; c++) {
    if (!v[c]) continue;
    double y0 = bytes_y((double)cum, top_bytes, MEM_TOP, MEM_BOT);
    double y1 = bytes_y((double)(cum + v[c]), top_bytes, MEM_TOP, MEM_BOT);
    svg_emit(o, "<rect x=\"%.1f\" y=\"%.2f\" width=\"%.1f\" height=\"%.2f\" fill=\"%s\"/>\n", PX0, y1,
             PX1 - PX0, y0 - y1, cat_colors[c]);
    cum += v[c];
  }
  svg_emit(o, "</g>\n");
  if (s->max_live) emit_timeline(o, s, cum, top_bytes, MEM_TOP, MEM_BOT);
  svg_emit(o, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"none\" stroke=\"#666\"/>\n",
           PX0, MEM_TOP, PX1 - PX0, MEM_BOT - MEM_TOP);
  emit_use_labels(o, d, p, s);
  char t[160];
  snprintf(t, sizeof t, "parameter uses of one training step, in order (%d uses: %d forward, %d backward)",
           s->n, s->bwd, s->n - s->bwd);
  svg_text(o, (PX0 + PX1) / 2, MEM_BOT + 34, "middle", "font-size=\"11\" fill=\"#333\"", t);
  svg_text(o, 18, (MEM_TOP + MEM_BOT) / 2, "middle",
           "font-size=\"11\" fill=\"#333\" transform=\"rotate(-90 18 265)\"", "bytes per rank");
  emit_limit_and_peak(o, d, p, s, m, limit, limit_drawn, top_bytes);
  emit_memory_legend(o, m, limit);
}

/* Panel 2: the transient alone, on its own scale. */
static void emit_transient_panel(SvgOut* o, const GptDesc* d, const Plan* p, const SvgStep* s) {
  char b[32], name[64], t[200];
  svg_text(o, PX0, TR_TOP - 8, "start", "font-size=\"12\" font-weight=\"bold\" fill=\"#222\"",
           "transient bytes at each use, own scale (gathered zero3 weights, prefetched weights, "
           "full gradients of sharded slices)");
  if (s->max_live == 0) {
    svg_emit(o, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"none\" stroke=\"#666\"/>\n",
             PX0, TR_TOP, PX1 - PX0, TR_BOT - TR_TOP);
    svg_text(o, PX0 + 12, (TR_TOP + TR_BOT) / 2 + 4, "start",
             "font-size=\"12\" fill=\"#555\"", "none: every slice is dp, nothing is gathered");
    return;
  }
  double step = svg_nice_bytes((double)s->max_live * 1.15, 2);
  double top_bytes = step * (double)(size_t)((double)s->max_live * 1.15 / step + 0.999999);
  emit_y_axis(o, top_bytes, step, TR_TOP, TR_BOT);
  emit_timeline(o, s, 0, top_bytes, TR_TOP, TR_BOT);
  svg_emit(o, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"none\" stroke=\"#666\"/>\n",
           PX0, TR_TOP, PX1 - PX0, TR_BOT - TR_TOP);
  use_name(d, p, s, s->peak_use, name, sizeof name);
  snprintf(t, sizeof t, "max %s at %s", format_bytes((double)s->max_live, b), name);
  double xp = use_x(s, s->peak_use + 0.5);
  int right = xp > (PX0 + PX1) / 2;
  SvgLabel l = label_place(right ? xp - 6 : xp + 6, TR_TOP + 14, right ? "end" : "start", 11, t);
  emit_boxed_label(o, &l, "font-size=\"11\" fill=\"#222\"", t);
}

/* Draws the op labels under the strategy grid. Wide columns: every op's name, level; middle
** widths: every name, slanted; narrow columns: the first op of some layers ("h<l>"), with
** embed and lnf named beside the grid's ends. Labels that would overlap are skipped. */
static void emit_grid_labels(SvgOut* o, const GptDesc* d, const int* pops, int np, double cw) {
  const char* a = "font-size=\"10\" fill=\"#333\"";
  double next_free = 0, y = GRID_BOT + 15;
  int wide = cw >= 58, slant = !wide && cw >= 11;
  if (!wide && !slant && np > 0) {
    svg_text(o, PX0 - 4, y, "end", a, d->ops[pops[0]].name);
    svg_text(o, PX0 + np * cw + 4, y, "start", a, d->ops[pops[np - 1]].name);
  }
  for (int j = 0; j < np; j++) {
    const GptOp* op = &d->ops[pops[j]];
    char name[32];
    double x = PX0 + (j + 0.5) * cw, w = 5.6 * (double)strlen(op->name);
    if (wide || slant) {
      snprintf(name, sizeof name, "%s", op->name);
      if (wide && x - w / 2 < next_free) continue;
      if (wide) next_free = x + w / 2 + 6;
    } else {
      if (op->layer < 0 || pops[j] != gpt_layer_op(d, op->layer, 0)) continue;
      snprintf(name, sizeof name, "h%d", op->layer);
      x = PX0 + j * cw;
      w = 5.6 * (double)strlen(name);
      if (x < next_free) continue;
      next_free = x + w + 8;
    }
    svg_emit(o, "<line x1=\"%.2f\" y1=\"%.1f\" x2=\"%.2f\" y2=\"%.1f\" stroke=\"#333\"/>\n", x,
             GRID_BOT, x, GRID_BOT + 4);
    if (slant) {
      char at[96];
      snprintf(at, sizeof at, "%s transform=\"rotate(-40 %.2f %.1f)\"", a, x + 3, y - 4);
      svg_text(o, x + 3, y - 4, "end", at, name);
    } else {
      svg_text(o, x, y, wide ? "middle" : "start", a, name);
    }
  }
}

/* Panel 3: one column per operator with parameters (model order), cut into its k slices,
** each coloured by its strategy; and its legend with slice counts. */
static int emit_strategy_panel(SvgOut* o, const GptDesc* d, const Plan* p) {
  int* pops = malloc((size_t)d->nops * sizeof *pops);
  if (!pops) return osdp_fail("--svg: out of memory");
  int np = 0, count[STRAT_COUNT] = {0};
  for (int i = 0; i < d->nops; i++) if (d->ops[i].n_params) pops[np++] = i;
  double cw = (PX1 - PX0) / (np > 0 ? np : 1);
  if (cw > 90) cw = 90;
  svg_text(o, PX0, GRID_TOP - 8, "start", "font-size=\"12\" font-weight=\"bold\" fill=\"#222\"",
           "strategy of each slice (operators with parameters in model order; an operator run as "
           "k slices has k cells, slice 0 on top)");
  svg_emit(o, "<g shape-rendering=\"crispEdges\">\n");
  double gap = cw >= 5 ? 1 : 0; /* white gaps between columns and slices where they fit */
  for (int j = 0; j < np; j++) {
    const OpPlan* op = &p->ops[pops[j]];
    double ch = (GRID_BOT - GRID_TOP) / op->k;
    for (int s = 0; s < op->k; s++) {
      Strategy st = op->strat[s];
      count[st]++;
      svg_emit(o, "<rect x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%.2f\" fill=\"%s\"><title>",
               PX0 + j * cw, GRID_TOP + s * ch, cw - gap, ch - (op->k > 1 ? 1 : 0), strat_colors[st]);
      svg_escaped(o, d->ops[pops[j]].name, 0);
      svg_emit(o, " slice %d/%d: %s", s, op->k, strategy_name(st));
      if (st != STRAT_DP && op->group > 0 && op->group < p->world)
        svg_emit(o, " within groups of %d ranks", op->group);
      svg_emit(o, "</title></rect>\n");
      if (cw >= 26 && ch >= 11) {
        char a[40];
        snprintf(a, sizeof a, "font-size=\"%d\" fill=\"%s\"", ch >= 14 ? 10 : 8, strat_text_colors[st]);
        svg_text(o, PX0 + (j + 0.5) * cw, GRID_TOP + (s + 0.5) * ch + 3.5, "middle", a,
                 cw >= 38 ? strategy_name(st) : (st == STRAT_DP ? "dp" : st == STRAT_ZERO2 ? "z2" : "z3"));
      }
    }
  }
  svg_emit(o, "</g>\n");
  svg_emit(o, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.2f\" height=\"%.1f\" fill=\"none\" stroke=\"#666\"/>\n",
           PX0, GRID_TOP, cw * np, GRID_BOT - GRID_TOP);
  emit_grid_labels(o, d, pops, np, cw);
  char t[80];
  snprintf(t, sizeof t, "%d operators with parameters, in model order", np);
  int slant = cw < 58 && cw >= 11; /* as emit_grid_labels draws them */
  svg_text(o, (PX0 + PX1) / 2, GRID_BOT + (slant ? 72 : 34), "middle", "font-size=\"11\" fill=\"#333\"", t);
  double y = GRID_TOP + 4;
  svg_text(o, LEG_X, y, "start", "font-size=\"12\" font-weight=\"bold\" fill=\"#222\"", "strategy");
  for (int s = 0; s < STRAT_COUNT; s++) {
    y += 20;
    svg_emit(o, "<rect x=\"%.1f\" y=\"%.1f\" width=\"14\" height=\"12\" fill=\"%s\" stroke=\"#999\" "
             "stroke-width=\"0.5\"/>\n", LEG_X, y - 10, strat_colors[s]);
    svg_text(o, LEG_X + 20, y, "start", "font-size=\"11\" fill=\"#222\"", strategy_name((Strategy)s));
    snprintf(t, sizeof t, "%d slice%s", count[s], count[s] == 1 ? "" : "s");
    svg_text(o, SVG_W - 8, y, "end", "font-size=\"11\" fill=\"#222\"", t);
  }
  free(pops);
  return 0;
}

/* The root element with the machine-checkable numbers, the title and the plan's figures. */
static void emit_header(SvgOut* o, const GptDesc* d, const Plan* p, const SvgStep* s,
                        const MemPrediction* m, int threads, size_t limit, const char* title) {
  svg_emit(o, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
  svg_emit(o, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
           "viewBox=\"0 0 %.0f %.0f\" font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\"\n",
           SVG_W, SVG_H, SVG_W, SVG_H);
  svg_emit(o, "     data-peak-bytes=\"%zu\" data-params-bytes=\"%zu\" data-grads-bytes=\"%zu\" "
           "data-optim-bytes=\"%zu\"\n     data-acts-bytes=\"%zu\" data-scratch-bytes=\"%zu\" "
           "data-transient-bytes=\"%zu\"", m->peak, m->params, m->grads, m->optim, m->acts,
           m->scratch, m->transient);
  if (limit) svg_emit(o, " data-limit-bytes=\"%zu\" data-fits=\"%s\"", limit, m->peak <= limit ? "true" : "false");
  svg_emit(o, "\n     data-uses=\"%d\" data-backward-from=\"%d\" data-peak-use=\"%d\" data-ranks=\"%d\" "
           "data-micro-batch=\"%d\" data-seq=\"%d\" data-threads=\"%d\" data-prefetch=\"%s\"\n     "
           "data-overlap-reduce=\"%s\" data-reduce-dtype=\"%s\" data-model=\"",
           s->n, s->bwd, s->peak_use, p->world, p->micro_batch, p->seq, threads,
           p->prefetch ? "true" : "false", p->overlap_reduce ? "true" : "false",
           reduce_dtype_name(p->reduce_dtype));
  svg_escaped(o, d->cfg.name, 0);
  svg_emit(o, "\">\n<title>");
  svg_escaped(o, title, 0);
  svg_emit(o, "</title>\n<rect width=\"100%%\" height=\"100%%\" fill=\"#fff\"/>\n");
  svg_text(o, 16, 30, "start", "font-size=\"19\" font-weight=\"bold\" fill=\"#111\"", title);
  char t[300], b[32], b2[32];
  snprintf(t, sizeof t, "model %s (%zu parameters)  \u00b7  %d rank%s  \u00b7  micro-batch %d  \u00b7  "
           "seq %d  \u00b7  %d thread%s  \u00b7  prefetch %s%s%s", d->cfg.name, d->n_params, p->world,
           p->world == 1 ? "" : "s", p->micro_batch, p->seq, threads, threads == 1 ? "" : "s",
           p->prefetch ? "on" : "off", p->overlap_reduce ? "  \u00b7  overlap_reduce on" : "",
           p->reduce_dtype == REDUCE_BF16 ? "  \u00b7  bf16 reductions" : "");
  svg_text(o, 16, 52, "start", "font-size=\"13\" fill=\"#333\"", t);
  if (!limit)
    snprintf(t, sizeof t, "predicted peak %s (%zu bytes) per rank; no memory limit given",
             format_bytes((double)m->peak, b), m->peak);
  else if (m->peak <= limit)
    snprintf(t, sizeof t, "predicted peak %s (%zu bytes) per rank: fits the %s limit, %s to spare",
             format_bytes((double)m->peak, b), m->peak, format_bytes((double)limit, b2),
             format_bytes((double)(limit - m->peak), (char[32]){0}));
  else
    snprintf(t, sizeof t, "predicted peak %s (%zu bytes) per rank: does NOT fit the %s limit "
             "(%s over)", format_bytes((double)m->peak, b), m->peak,
             format_bytes((double)limit, b2), format_bytes((double)(m->peak - limit), (char[32]){0}));
  svg_text(o, 16, 72, "start",
           limit && m->peak > limit ? "font-size=\"13\" font-weight=\"bold\" fill=\"" LIMIT_COLOR "\""
                                    : "font-size=\"13\" fill=\"#333\"", t);
}

/* Writes the whole picture to o. Returns 0, or -1 with an error. */
static int emit_svg(SvgOut* o, const GptDesc* d, const Plan* p, int threads, size_t limit,
                    const char* title) {
  MemPrediction m;
  SvgStep s;
  plan_predict_memory(d, p, threads, &m);
  if (svg_step_load(&s, d, p)) return -1;
  size_t base = m.params + m.grads + m.optim + m.acts + m.scratch;
  if (base + s.max_live != m.peak) {
    svg_step_free(&s);
    return osdp_fail("--svg: internal error: the timeline's peak %zu differs from the predicted %zu",
                     base + s.max_live, m.peak);
  }
  emit_header(o, d, p, &s, &m, threads, limit, title);
  emit_memory_panel(o, d, p, &s, &m, limit);
  emit_phases(o, &s);
  emit_transient_panel(o, d, p, &s);
  int rc = emit_strategy_panel(o, d, p);
  svg_emit(o, "</svg>\n");
  svg_step_free(&s);
  return rc;
}

int plan_svg_write(const char* path, const GptDesc* d, const Plan* p, int threads,
                   size_t mem_limit, const char* title) {
  OutFile out;
  if (out_open(&out, path, "--svg", "w")) return -1;
  SvgOut o = {out.f, 0, SVG_KEEP_TAB_NL_DEL};
  int rc = emit_svg(&o, d, p, threads, mem_limit, title);
  return svg_finish(&o, &out, "--svg", path, rc);
}
