/*
** run_plot.c: training runs read from `osdp train --log` files (or added step by step) and
** drawn as plain SVG: loss, tokens/s and peak memory against step (see run_plot.h).
*/
#include "cli/run_plot.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli/svg_out.h"
#include "core/output.h"
#include "core/files.h"
#include "core/util.h"

/* ---- runs ---------------------------------------------------------------------------- */

/* Copies src into dst (room for cap bytes), whole characters only, bytes that are not UTF-8
** and control characters as '?': a name that is safe in XML and JSON. */
static void label_copy(char* dst, const char* src, size_t cap) {
  size_t o = 0;
  const unsigned char* s = (const unsigned char*)src;
  while (*s) {
    int n = svg_utf8_seq(s);
    int bad = n == 0 || *s < 0x20 || *s == 0x7F;
    size_t w = bad ? 1 : (size_t)n;
    if (o + w >= cap) break;
    if (bad) dst[o] = '?';
    else memcpy(dst + o, s, w);
    o += w;
    s += bad ? 1 : n;
  }
  dst[o] = 0;
}

void plot_run_init(PlotRun* r, const char* label) {
  memset(r, 0, sizeof *r);
  label_copy(r->label, label ? label : "", sizeof r->label);
}

void plot_run_free(PlotRun* r) {
  free(r->step);
  free(r->loss);
  free(r->tps);
  free(r->peak);
  free(r->val_step);
  free(r->val_loss);
  char label[PLOT_LABEL_MAX];
  memcpy(label, r->label, sizeof label);
  memset(r, 0, sizeof *r);
  memcpy(r->label, label, sizeof label);
}

/* Makes *p hold cap longs (realloc); 0, or -1 leaving *p as it was. */
static int grow_long(long** p, int cap) {
  long* q = realloc(*p, (size_t)cap * sizeof *q);
  if (!q) return -1;
  *p = q;
  return 0;
}

/* Makes *p hold cap doubles (realloc); 0, or -1 leaving *p as it was. */
static int grow_double(double** p, int cap) {
  double* q = realloc(*p, (size_t)cap * sizeof *q);
  if (!q) return -1;
  *p = q;
  return 0;
}

int plot_run_add_step(PlotRun* r, long step, double loss, double tokens_per_s, double peak_bytes) {
  if (r->n == r->cap) {
    if (r->cap > (1 << 28)) return osdp_fail("plot: run '%s' has too many steps", r->label);
    int cap = r->cap ? 2 * r->cap : 256;
    if (grow_long(&r->step, cap) || grow_double(&r->loss, cap) || grow_double(&r->tps, cap) ||
        grow_double(&r->peak, cap))
      return osdp_fail("plot: out of host memory for the steps of run '%s'", r->label);
    r->cap = cap;
  }
  r->step[r->n] = step;
  r->loss[r->n] = isfinite(loss) ? loss : NAN;
  r->tps[r->n] = isfinite(tokens_per_s) && tokens_per_s >= 0 ? tokens_per_s : NAN;
  r->peak[r->n] = isfinite(peak_bytes) && peak_bytes >= 0 ? peak_bytes : NAN;
  r->n++;
  return 0;
}

int plot_run_add_eval(PlotRun* r, long step, double val_loss) {
  if (!isfinite(val_loss)) return 0;
  if (r->nval == r->valcap) {
    if (r->valcap > (1 << 28)) return osdp_fail("plot: run '%s' has too many evaluations", r->label);
    int cap = r->valcap ? 2 * r->valcap : 16;
    if (grow_long(&r->val_step, cap) || grow_double(&r->val_loss, cap))
      return osdp_fail("plot: out of host memory for the evaluations of run '%s'", r->label);
    r->valcap = cap;
  }
  r->val_step[r->nval] = step;
  r->val_loss[r->nval] = val_loss;
  r->nval++;
  return 0;
}

void plot_label_from_path(const char* path, char label[PLOT_LABEL_MAX]) {
  const char* base = strrchr(path, '/');
  base = base && base[1] ? base + 1 : path;
  char buf[OUT_PATH_MAX];
  snprintf(buf, sizeof buf, "%s", base);
  static const char* exts[] = {".jsonl", ".json", ".log"};
  for (size_t i = 0; i < sizeof exts / sizeof exts[0]; i++) {
    size_t n = strlen(buf), e = strlen(exts[i]);
    if (n > e && strcmp(buf + n - e, exts[i]) == 0) { buf[n - e] = 0; break; }
  }
  label_copy(label, buf, PLOT_LABEL_MAX);
}

/* What a log's summary line says about the held-out evaluation. */
typedef struct LogSummary {
  double val_loss; /* NAN: none */
  long steps;      /* -1: not given */
} LogSummary;

/* Where a log line is, for messages. */
typedef struct LogPos {
  const char* path;
  long line;
} LogPos;

/* The number under key of object o into *out: NAN when absent or null. -1 with an error naming
** the file, line and key when it is something else. */
static int log_number(const cJSON* o, const char* key, const LogPos* at, double* out) {
  const cJSON* v = cJSON_GetObjectItemCaseSensitive(o, key);
  *out = NAN;
  if (!v || cJSON_IsNull(v)) return 0;
  if (cJSON_IsNumber(v)) { *out = v->valuedouble; return 0; }
  return osdp_fail("log '%s', line %ld: \"%s\" is not a number or null; a training log's lines "
                   "are written by osdp train --log (docs/FORMATS.md section 5)", at->path,
                   at->line, key);
}

/* The step number under "step" of o into *out; -1 with an error when it is not a whole number
** from 0 to 1e15. */
static int log_step(const cJSON* o, const LogPos* at, long* out) {
  double s;
  if (log_number(o, "step", at, &s)) return -1;
  if (!(s >= 0 && s <= 1e15 && s == floor(s)))
    return osdp_fail("log '%s', line %ld: \"step\" must be a whole number from 0 (got %s)",
                     at->path, at->line, isnan(s) ? "null" : "a fraction or out of range");
  *out = (long)s;
  return 0;
}

/* Adds one parsed log object to r: a step line (it has "loss"), a held-out line ("step" and
** "val_loss", no "loss"), or the summary (remembered in sum); anything else is ignored. */
static int log_object(PlotRun* r, const cJSON* o, const LogPos* at, LogSummary* sum) {
  double loss, tps, peak, val, steps;
  long step = 0;
  if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, "summary"))) {
    if (log_number(o, "val_loss", at, &sum->val_loss) || log_number(o, "steps", at, &steps)) return -1;
    sum->steps = steps >= 0 && steps <= 1e15 ? (long)steps : -1;
    return 0;
  }
  if (!cJSON_GetObjectItemCaseSensitive(o, "step")) return 0;
  if (log_step(o, at, &step) || log_number(o, "val_loss", at, &val)) return -1;
  if (!cJSON_GetObjectItemCaseSensitive(o, "loss")) return plot_run_add_eval(r, step, val);
  if (log_number(o, "loss", at, &loss) || log_number(o, "tokens_per_s", at, &tps) ||
      log_number(o, "peak_bytes", at, &peak))
    return -1;
  if (plot_run_add_step(r, step, loss, tps, peak)) return -1;
  return plot_run_add_eval(r, step, val); /* a step line with val_loss too (NAN: nothing) */
}

/* Parses one line of a log (a blank line is skipped) and adds what it holds to r. */
static int log_line(PlotRun* r, const char* line, size_t len, const LogPos* at, LogSummary* sum) {
  if (strlen(line) != len)
    return osdp_fail("log '%s', line %ld: holds a NUL byte; give a text log written by osdp train "
                     "--log FILE", at->path, at->line);
  if (line[strspn(line, " \t\r\n")] == 0) return 0;
  cJSON* o = cJSON_ParseWithOpts(line, NULL, 1);
  int rc = 0;
  if (!cJSON_IsObject(o))
    rc = osdp_fail("log '%s', line %ld: not a JSON object; each line of a training log is one "
                   "object, as osdp train --log FILE writes them (docs/FORMATS.md section 5)",
                   at->path, at->line);
  else
    rc = log_object(r, o, at, sum);
  cJSON_Delete(o);
  return rc;
}

/* Opens path for reading; NULL with an error when it cannot be opened or is not a regular file
** (a fifo is refused, never waited on). */
static FILE* log_open(const char* path) {
  FILE* f = file_open_read(path, "plot LOG", FILE_FOLLOW);
  if (!f) {
    char why[400];
    snprintf(why, sizeof why, "%s", osdp_last_error());
    osdp_fail("%s (a file written by osdp train --log FILE)", why);
  }
  return f;
}

int plot_run_read_log(PlotRun* r, const char* path) {
  FILE* f = log_open(path);
  if (!f) return -1;
  LogSummary sum = {NAN, -1};
  LogPos at = {path, 0};
  char* line = NULL;
  size_t cap = 0;
  ssize_t len;
  int rc = 0;
  errno = 0;
  while (rc == 0 && (len = getline(&line, &cap, f)) >= 0) {
    at.line++;
    rc = log_line(r, line, (size_t)len, &at, &sum);
  }
  if (rc == 0 && ferror(f))
    rc = osdp_fail("log '%s': read error after line %ld: %s", path, at.line, strerror(errno ? errno : EIO));
  free(line);
  fclose(f);
  if (rc) return rc;
  if (r->n == 0)
    return osdp_fail("log '%s' has no step lines ({\"step\":N,\"loss\":...}); give a log written "
                     "by osdp train --log FILE after at least one step", path);
  /* The summary's val_loss is the evaluation at the end, which train logs no line for. */
  long end = sum.steps >= 0 ? sum.steps : r->step[r->n - 1];
  if (isfinite(sum.val_loss) && (r->nval == 0 || r->val_step[r->nval - 1] < end))
    return plot_run_add_eval(r, end, sum.val_loss);
  return 0;
}

/* The median of the finite values of v[0..n) (NAN when there are none, or out of memory). */
static double finite_median(const double* v, int n) {
  double* c = malloc((size_t)(n > 0 ? n : 1) * sizeof *c);
  int m = 0;
  if (!c) return NAN;
  for (int i = 0; i < n; i++)
    if (isfinite(v[i])) c[m++] = v[i];
  double med = m ? median_of(c, m) : NAN;
  free(c);
  return med;
}

void plot_run_stats(const PlotRun* r, PlotStats* s) {
  s->steps = r->n;
  s->first_step = r->n ? r->step[0] : 0;
  s->last_step = r->n ? r->step[r->n - 1] : 0;
  s->first_loss = s->last_loss = s->min_loss = s->max_peak = NAN;
  for (int i = 0; i < r->n; i++) {
    double l = r->loss[i];
    if (isfinite(l) && isnan(s->first_loss)) s->first_loss = l;
    if (isfinite(l)) s->last_loss = l;
    if (isfinite(l) && !(s->min_loss <= l)) s->min_loss = l;
    if (isfinite(r->peak[i]) && !(s->max_peak >= r->peak[i])) s->max_peak = r->peak[i];
  }
  s->last_val_loss = r->nval ? r->val_loss[r->nval - 1] : NAN;
  s->median_tps = finite_median(r->tps, r->n);
}

/* ---- drawing ------------------------------------------------------------------------- */

/* Page geometry (pixels): the three panels share the plot's left and right edges and the
** step axis; the legend lives to their right. */
#define SVG_W 1140.0
#define SVG_H 850.0
#define PX0 90.0
#define PX1 800.0
#define LEG_X (PX1 + 28.0)
#define LEG_LABEL_CHARS 34 /* legend label characters shown (the whole one is in data-label) */
#define MAX_POINTS 4000    /* points drawn per series; more are thinned evenly */
#define MAX_MARKERS 200    /* held-out markers drawn per run */
/* The largest magnitude drawn. A finite value beyond it (a loss of 1e308) would stretch its
** panel past what a double's arithmetic holds (coordinates of -inf); it is left out, as a gap,
** and the panel says how many were. */
#define PLOT_MAX_ABS 1e30

/* What a panel's axis holds, for its tick labels. */
typedef enum { AXIS_PLAIN, AXIS_RATE, AXIS_BYTES } AxisKind;

/* One panel: where it is on the page and the values its bottom and top stand for. */
typedef struct Panel {
  double top, bot;      /* pixels */
  double lo, hi, tick;  /* value range and tick spacing */
  AxisKind kind;
  const char* title;    /* axis label */
  int empty;            /* no values to draw */
  long clipped;         /* finite values beyond PLOT_MAX_ABS, not drawn */
} Panel;

/* The step axis: the value range and tick spacing. */
typedef struct StepAxis {
  double lo, hi, tick;
} StepAxis;

/* Series colours, one per run (cycled past ten). */
static const char* run_colors[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd",
                                   "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};
#define NCOLORS ((int)(sizeof run_colors / sizeof run_colors[0]))

/* Whether v is drawn: finite and within PLOT_MAX_ABS. */
static int drawable(double v) { return isfinite(v) && fabs(v) <= PLOT_MAX_ABS; }

/* A round tick spacing (1, 2 or 5 times a power of ten) that cuts span into about target
** intervals. */
static double nice_decimal(double span, int target) {
  double raw = span / target, p = pow(10, floor(log10(raw)));
  static const double c[] = {1, 2, 5, 10};
  for (int i = 0; i < 4; i++)
    if (c[i] * p >= raw * (1 - 1e-9)) return c[i] * p;
  return 10 * p;
}

/* The label of tick value v on an axis of kind k whose ticks are `tick` apart. */
static char* tick_label(AxisKind k, double v, double tick, char buf[32]) {
  if (fabs(v) < tick * 1e-6) v = 0;
  if (fabs(v) >= 1e15) { /* past the units' range: "2e+22", or "5.5e+19 B" */
    snprintf(buf, 32, k == AXIS_BYTES ? "%.3g B" : "%.3g", v);
  } else if (k == AXIS_BYTES) {
    svg_axis_bytes(v, buf);
  } else if (k == AXIS_RATE && fabs(v) >= 1e6) {
    snprintf(buf, 32, "%gM", v / 1e6);
  } else if (k == AXIS_RATE && fabs(v) >= 1e3) {
    snprintf(buf, 32, "%gk", v / 1e3);
  } else if (fabs(v) >= 1e7) {
    snprintf(buf, 32, "%.6g", v); /* "2e+29", never 30 digits cut at the buffer's end */
  } else {
    int dec = tick >= 1 ? 0 : (int)ceil(-log10(tick) - 1e-9);
    snprintf(buf, 32, "%.*f", dec, v);
  }
  return buf;
}

/* Sets p's range and ticks to cover [lo, hi] (from 0 when from_zero) in round numbers; an
** empty range (no values: lo > hi) becomes 0..1 and the panel says it has nothing. */
static void panel_fit(Panel* p, double lo, double hi, int from_zero) {
  p->empty = !(lo <= hi);
  if (p->empty) { lo = 0; hi = 1; }
  if (from_zero) lo = 0;
  if (hi - lo <= 0) {
    double pad = fabs(hi) > 0 ? fabs(hi) * 0.05 : 1;
    lo = from_zero ? 0 : lo - pad;
    hi += pad;
  }
  p->tick = p->kind == AXIS_BYTES ? svg_nice_bytes(hi - lo, 4) : nice_decimal(hi - lo, 5);
  p->lo = floor(lo / p->tick + 1e-9) * p->tick;
  p->hi = ceil(hi / p->tick - 1e-9) * p->tick;
  if (p->hi <= p->lo) p->hi = p->lo + p->tick;
}

/* The smallest and largest drawable value of v[0..n) into *lo and *hi (left as they are when
** there is none); the finite values that are not drawable are added to *clipped. */
static void widen(const double* v, int n, double* lo, double* hi, long* clipped) {
  for (int i = 0; i < n; i++)
    if (drawable(v[i])) {
      if (v[i] < *lo) *lo = v[i];
      if (v[i] > *hi) *hi = v[i];
    } else if (isfinite(v[i])) {
      (*clipped)++;
    }
}

/* Fits the step axis to every run's steps and held-out steps. */
static void step_axis_fit(StepAxis* x, const PlotRun* runs, int n) {
  double lo = INFINITY, hi = -INFINITY;
  for (int r = 0; r < n; r++) {
    for (int i = 0; i < runs[r].n; i++) {
      lo = fmin(lo, (double)runs[r].step[i]);
      hi = fmax(hi, (double)runs[r].step[i]);
    }
    for (int i = 0; i < runs[r].nval; i++) {
      lo = fmin(lo, (double)runs[r].val_step[i]);
      hi = fmax(hi, (double)runs[r].val_step[i]);
    }
  }
  if (!(lo <= hi)) { lo = 0; hi = 1; }
  if (hi - lo < 2) { lo = fmax(0, lo - 1); hi = lo + 2; }
  x->tick = fmax(1, nice_decimal(hi - lo, 8));
  x->lo = floor(lo / x->tick) * x->tick;
  x->hi = ceil(hi / x->tick) * x->tick;
}

/* Fits the three panels (loss, tokens/s, peak memory) to every run's values. */
static void panels_fit(Panel p[3], const PlotRun* runs, int n) {
  double lo[3] = {INFINITY, INFINITY, INFINITY}, hi[3] = {-INFINITY, -INFINITY, -INFINITY};
  long cut[3] = {0, 0, 0};
  for (int r = 0; r < n; r++) {
    widen(runs[r].loss, runs[r].n, &lo[0], &hi[0], &cut[0]);
    widen(runs[r].val_loss, runs[r].nval, &lo[0], &hi[0], &cut[0]);
    widen(runs[r].tps, runs[r].n, &lo[1], &hi[1], &cut[1]);
    widen(runs[r].peak, runs[r].n, &lo[2], &hi[2], &cut[2]);
  }
  p[0] = (Panel){80, 340, 0, 0, 0, AXIS_PLAIN, "loss", 0, 0};
  p[1] = (Panel){385, 565, 0, 0, 0, AXIS_RATE, "tokens/s", 0, 0};
  p[2] = (Panel){610, 770, 0, 0, 0, AXIS_BYTES, "peak memory", 0, 0};
  for (int i = 0; i < 3; i++) {
    panel_fit(&p[i], lo[i], hi[i], i > 0);
    p[i].clipped = cut[i];
  }
}

/* The page x of step s (the share of the axis first: no product of pixels and values). */
static double step_px(const StepAxis* x, double s) {
  return PX0 + (PX1 - PX0) * ((s - x->lo) / (x->hi - x->lo));
}

/* The page y of drawable value v on panel p (the share of the range first, as step_px). */
static double value_py(const Panel* p, double v) {
  return p->bot - (p->bot - p->top) * ((v - p->lo) / (p->hi - p->lo));
}

/* Draws panel p's frame, its horizontal grid and value ticks, the vertical grid at the step
** ticks, and its axis label (turned, left of the ticks). */
static void emit_panel_frame(SvgOut* o, const Panel* p, const StepAxis* x) {
  char b[32];
  svg_emit(o, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"#fafafa\" "
           "stroke=\"#999\" stroke-width=\"0.8\"/>\n", PX0, p->top, PX1 - PX0, p->bot - p->top);
  int nt = (int)floor((p->hi - p->lo) / p->tick + 0.5);
  for (int i = 0; i <= nt; i++) {
    double v = p->lo + i * p->tick, y = value_py(p, v);
    svg_emit(o, "<line x1=\"%.1f\" y1=\"%.2f\" x2=\"%.1f\" y2=\"%.2f\" stroke=\"#000\" "
             "stroke-opacity=\"0.10\"/>\n", PX0, y, PX1, y);
    svg_text(o, PX0 - 6, y + 4, "end", "font-size=\"11\" fill=\"#333\"", tick_label(p->kind, v, p->tick, b));
  }
  int ns = (int)floor((x->hi - x->lo) / x->tick + 0.5);
  for (int i = 1; i < ns; i++) {
    double px = step_px(x, x->lo + i * x->tick);
    svg_emit(o, "<line x1=\"%.2f\" y1=\"%.1f\" x2=\"%.2f\" y2=\"%.1f\" stroke=\"#000\" "
             "stroke-opacity=\"0.10\"/>\n", px, p->top, px, p->bot);
  }
  double cy = (p->top + p->bot) / 2;
  svg_emit(o, "<text x=\"22\" y=\"%.1f\" text-anchor=\"middle\" font-size=\"13\" font-weight=\"bold\" "
           "fill=\"#222\" transform=\"rotate(-90 22 %.1f)\">%s</text>\n", cy, cy, p->title);
  if (p->empty)
    svg_text(o, (PX0 + PX1) / 2, cy, "middle", "font-size=\"12\" fill=\"#777\"",
             p->clipped ? "no value small enough to draw" : "not in the logs");
  if (p->clipped) {
    char t[96];
    snprintf(t, sizeof t, "%ld value%s beyond %g in magnitude not drawn", p->clipped,
             p->clipped == 1 ? "" : "s", PLOT_MAX_ABS);
    svg_text(o, PX1 - 6, p->top + 14, "end", "class=\"clipped\" font-size=\"11\" fill=\"#a00\"", t);
  }
}

/* Draws the step ticks and the axis label under the bottom panel. */
static void emit_step_axis(SvgOut* o, const StepAxis* x, const Panel* bottom) {
  int ns = (int)floor((x->hi - x->lo) / x->tick + 0.5);
  for (int i = 0; i <= ns; i++) {
    double s = x->lo + i * x->tick, px = step_px(x, s);
    char b[32];
    snprintf(b, sizeof b, "%.0f", s);
    svg_emit(o, "<line x1=\"%.2f\" y1=\"%.1f\" x2=\"%.2f\" y2=\"%.1f\" stroke=\"#333\"/>\n", px,
             bottom->bot, px, bottom->bot + 4);
    svg_text(o, px, bottom->bot + 17, "middle", "font-size=\"11\" fill=\"#333\"", b);
  }
  svg_text(o, (PX0 + PX1) / 2, bottom->bot + 40, "middle",
           "font-size=\"13\" font-weight=\"bold\" fill=\"#222\"", "step");
}

/* The index of the j-th of m points sampled from n every k-th (the last point always kept). */
static int sample_index(int j, int k, int n) { return j * k < n ? j * k : n - 1; }

/* Draws the points (step[i], v[i]) of one series on panel p as a path, broken at every NAN;
** a point alone between gaps is drawn as a dot. More than MAX_POINTS are thinned to every
** k-th, the last kept. attrs: the stroke's colour and dashes; color: the dots' fill. */
static void emit_series(SvgOut* o, const StepAxis* x, const Panel* p, const long* step,
                        const double* v, int n, const char* attrs, const char* color) {
  int k = n > MAX_POINTS ? (n + MAX_POINTS - 1) / MAX_POINTS : 1, pen = 0, drawn = 0;
  int m = n > 0 ? (n - 1) / k + 1 + ((n - 1) % k != 0) : 0; /* sampled points */
  for (int j = 0; j < m; j++) {
    int i = sample_index(j, k, n);
    if (!drawable(v[i])) { pen = 0; continue; }
    if (!drawn) svg_emit(o, "<path fill=\"none\" stroke-width=\"1.6\" stroke-linejoin=\"round\" "
                         "stroke-linecap=\"round\" %s d=\"", attrs);
    svg_emit(o, "%s%.2f %.2f", pen ? " L" : (drawn ? " M" : "M"), step_px(x, (double)step[i]),
             value_py(p, v[i]));
    pen = drawn = 1;
  }
  if (drawn) svg_emit(o, "\"/>\n");
  for (int j = 0; j < m; j++) {
    int i = sample_index(j, k, n);
    int before = j > 0 && drawable(v[sample_index(j - 1, k, n)]);
    int after = j + 1 < m && drawable(v[sample_index(j + 1, k, n)]);
    if (drawable(v[i]) && !before && !after)
      svg_emit(o, "<circle class=\"lone\" cx=\"%.2f\" cy=\"%.2f\" r=\"2.2\" fill=\"%s\"/>\n",
               step_px(x, (double)step[i]), value_py(p, v[i]), color);
  }
}

/* Draws run r's held-out losses on the loss panel: a dashed line and a marker per point. */
static void emit_heldout(SvgOut* o, const StepAxis* x, const Panel* p, const PlotRun* r,
                         const char* color) {
  char attrs[96];
  snprintf(attrs, sizeof attrs, "stroke=\"%s\" stroke-dasharray=\"6 4\"", color);
  if (r->nval > 1) emit_series(o, x, p, r->val_step, r->val_loss, r->nval, attrs, color);
  int k = r->nval > MAX_MARKERS ? (r->nval + MAX_MARKERS - 1) / MAX_MARKERS : 1;
  for (int i = 0; i < r->nval; i += k)
    if (drawable(r->val_loss[i]))
      svg_emit(o, "<circle class=\"heldout\" cx=\"%.2f\" cy=\"%.2f\" r=\"3.5\" fill=\"#fff\" "
               "stroke=\"%s\" stroke-width=\"1.6\"/>\n", step_px(x, (double)r->val_step[i]),
               value_py(p, r->val_loss[i]), color);
}

/* Writes v for a data-* attribute: %.9g, or "null" when it is not finite. */
static void emit_attr_number(SvgOut* o, const char* name, double v) {
  if (isfinite(v)) svg_emit(o, " %s=\"%.9g\"", name, v);
  else svg_emit(o, " %s=\"null\"", name);
}

/* Draws run r (index i: its colour) in all three panels as one <g class="run"> group whose
** data-* attributes carry its label, step count and last losses. */
static void emit_run(SvgOut* o, const StepAxis* x, const Panel p[3], const PlotRun* r, int i) {
  const char* color = run_colors[i % NCOLORS];
  PlotStats s;
  plot_run_stats(r, &s);
  svg_emit(o, "<g class=\"run\" data-label=\"");
  svg_escaped(o, r->label, 0);
  svg_emit(o, "\" data-color=\"%s\" data-steps=\"%d\" data-first-step=\"%ld\" data-last-step=\"%ld\"",
           color, r->n, s.first_step, s.last_step);
  emit_attr_number(o, "data-last-loss", s.last_loss);
  svg_emit(o, " data-heldout-points=\"%d\"", r->nval);
  emit_attr_number(o, "data-last-val-loss", s.last_val_loss);
  svg_emit(o, ">\n");
  char attrs[64];
  snprintf(attrs, sizeof attrs, "stroke=\"%s\"", color);
  emit_series(o, x, &p[0], r->step, r->loss, r->n, attrs, color);
  emit_heldout(o, x, &p[0], r, color);
  emit_series(o, x, &p[1], r->step, r->tps, r->n, attrs, color);
  emit_series(o, x, &p[2], r->step, r->peak, r->n, attrs, color);
  svg_emit(o, "</g>\n");
}

/* The legend's key of line styles: training (solid) and held-out (dashed, markers). */
static void emit_style_key(SvgOut* o, double y) {
  svg_emit(o, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#444\" "
           "stroke-width=\"1.6\"/>\n", LEG_X, y - 4, LEG_X + 26, y - 4);
  svg_text(o, LEG_X + 34, y, "start", "font-size=\"11\" fill=\"#222\"", "training loss");
  y += 18;
  svg_emit(o, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#444\" "
           "stroke-width=\"1.6\" stroke-dasharray=\"6 4\"/>\n<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3.5\" "
           "fill=\"#fff\" stroke=\"#444\" stroke-width=\"1.6\"/>\n", LEG_X, y - 4, LEG_X + 26, y - 4,
           LEG_X + 13, y - 4);
  svg_text(o, LEG_X + 34, y, "start", "font-size=\"11\" fill=\"#222\"", "held-out loss");
}

/* One legend entry: run r's colour and label, and under it its steps and last losses. */
static void emit_legend_entry(SvgOut* o, const PlotRun* r, int i, double y) {
  const char* color = run_colors[i % NCOLORS];
  PlotStats s;
  plot_run_stats(r, &s);
  svg_emit(o, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" "
           "stroke-width=\"3\"/>\n", LEG_X, y - 4, LEG_X + 26, y - 4, color);
  svg_emit(o, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"start\" font-size=\"12\" font-weight=\"bold\" "
           "fill=\"#222\">", LEG_X + 34, y);
  svg_escaped(o, r->label, LEG_LABEL_CHARS);
  svg_emit(o, "</text>\n");
  char t[160], v[48] = "";
  if (isfinite(s.last_val_loss)) snprintf(v, sizeof v, ", held-out %.4g", s.last_val_loss);
  if (isfinite(s.last_loss))
    snprintf(t, sizeof t, "%d steps, last loss %.4g%s", s.steps, s.last_loss, v);
  else
    snprintf(t, sizeof t, "%d steps, no finite loss%s", s.steps, v);
  svg_text(o, LEG_X + 34, y + 15, "start", "font-size=\"10.5\" fill=\"#555\"", t);
}

/* Draws the legend right of the panels: the line styles, then one entry per run (as many as
** fit; the rest counted). */
static void emit_legend(SvgOut* o, const PlotRun* runs, int n) {
  double y = 92;
  emit_style_key(o, y);
  y += 48;
  for (int i = 0; i < n; i++, y += 36) {
    if (y > SVG_H - 50 && i < n - 1) {
      char t[64];
      snprintf(t, sizeof t, "... and %d more run%s", n - i, n - i == 1 ? "" : "s");
      svg_text(o, LEG_X, y, "start", "font-size=\"11\" fill=\"#555\"", t);
      return;
    }
    emit_legend_entry(o, &runs[i], i, y);
  }
}

/* The default heading: the runs' labels, comma-separated (cut when long). */
static void default_title(const PlotRun* runs, int n, char* t, size_t cap) {
  size_t len = (size_t)snprintf(t, cap, "training runs: ");
  for (int i = 0; i < n; i++) {
    if (len + strlen(runs[i].label) + 8 >= cap) {
      snprintf(t + len, cap - len, "%s...", i ? ", " : "");
      return;
    }
    len += (size_t)snprintf(t + len, cap - len, "%s%s", i ? ", " : "", runs[i].label);
  }
}

/* The XML declaration, the root element with data-runs and the step range, the title and
** the white page. */
static void emit_header(SvgOut* o, const StepAxis* x, int n, const PlotRun* runs, const char* title) {
  long first = runs[0].n ? runs[0].step[0] : 0, last = first;
  for (int r = 0; r < n; r++)
    for (int i = 0; i < runs[r].n; i++) {
      if (runs[r].step[i] < first) first = runs[r].step[i];
      if (runs[r].step[i] > last) last = runs[r].step[i];
    }
  svg_emit(o, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
  svg_emit(o, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
           "viewBox=\"0 0 %.0f %.0f\" font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\"\n"
           "     data-runs=\"%d\" data-first-step=\"%ld\" data-last-step=\"%ld\" data-step-axis=\"%.0f %.0f\">\n",
           SVG_W, SVG_H, SVG_W, SVG_H, n, first, last, x->lo, x->hi);
  svg_emit(o, "<title>");
  svg_escaped(o, title, 0);
  svg_emit(o, "</title>\n<rect width=\"100%%\" height=\"100%%\" fill=\"#fff\"/>\n");
  svg_emit(o, "<text x=\"16\" y=\"30\" text-anchor=\"start\" font-size=\"18\" font-weight=\"bold\" "
           "fill=\"#111\">");
  svg_escaped(o, title, 110);
  svg_emit(o, "</text>\n");
  char t[160];
  snprintf(t, sizeof t, "%d run%s, steps %ld to %ld: loss, tokens/s and rank 0's peak memory", n,
           n == 1 ? "" : "s", first, last);
  svg_text(o, 16, 52, "start", "font-size=\"12\" fill=\"#444\"", t);
}

/* Writes the whole picture of runs[0..n) to o. */
static void emit_plot(SvgOut* o, const PlotRun* runs, int n, const char* title) {
  StepAxis x;
  Panel p[3];
  char def[256];
  step_axis_fit(&x, runs, n);
  panels_fit(p, runs, n);
  if (!title) default_title(runs, n, def, sizeof def);
  emit_header(o, &x, n, runs, title ? title : def);
  for (int i = 0; i < 3; i++) emit_panel_frame(o, &p[i], &x);
  emit_step_axis(o, &x, &p[2]);
  for (int r = 0; r < n; r++) emit_run(o, &x, p, &runs[r], r);
  emit_legend(o, runs, n);
  svg_emit(o, "</svg>\n");
}

int plot_svg_write_runs(const char* path, const char* field, const PlotRun* runs, int n,
                        const char* title) {
  if (n <= 0) return osdp_fail("%s: no runs to plot", field);
  for (int i = 0; i < n; i++)
    if (runs[i].n == 0)
      return osdp_fail("%s: run '%s' has no steps to plot; train at least one step", field,
                       runs[i].label);
  OutFile out;
  if (out_open(&out, path, field, "w")) return -1;
  SvgOut o = {out.f, 0, 0};
  emit_plot(&o, runs, n, title);
  return svg_finish(&o, &out, field, path, 0);
}
