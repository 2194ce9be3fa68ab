/*
** run_plot.h: training runs drawn as a plain SVG picture (`osdp plot LOG... --svg FILE`, and
** `osdp train --plot FILE` from the steps it has in memory).
**
** A run is a series of steps, each with its training loss (NAN for a step skipped under
** --on-nonfinite skip), tokens/s and rank 0's arena peak, and a series of held-out evaluations
** (step, val_loss). The picture has three panels sharing the step axis:
**   1. loss: training loss as a solid line (a gap at a skipped step), held-out loss as a dashed
**      line with markers, one colour per run;
**   2. tokens/s, linear from 0;
**   3. peak memory, from 0, in binary units (KiB, MiB, GiB).
** The legend names each run (and its last losses). The root <svg> element carries data-runs=N
** and each run is one <g class="run" data-label=".." data-steps=".." data-last-loss="..">, so
** tests can check the picture against the logs.
*/
#ifndef OSDP_RUN_PLOT_H
#define OSDP_RUN_PLOT_H

#define PLOT_LABEL_MAX 64

/* One training run as the picture needs it. Steps are kept in the order they were added. */
typedef struct PlotRun {
  char label[PLOT_LABEL_MAX]; /* legend name: valid UTF-8 without control characters */
  int n, cap;                 /* step points added, room for */
  long* step;                 /* n: step numbers */
  double* loss;               /* n: training loss; NAN: skipped step (a gap) */
  double* tps;                /* n: tokens/s; NAN: not known */
  double* peak;               /* n: peak bytes so far; NAN: not known */
  int nval, valcap;           /* held-out points added, room for */
  long* val_step;             /* nval: step of each evaluation */
  double* val_loss;           /* nval: its held-out loss */
} PlotRun;

/* What --json prints per run: counts and the curves' landmarks (NAN where there is none). */
typedef struct PlotStats {
  int steps;          /* step points */
  long first_step, last_step;
  double first_loss, last_loss, min_loss; /* over the finite training losses */
  double last_val_loss;                   /* the last held-out loss, NAN: none */
  double median_tps;                      /* median of the known tokens/s */
  double max_peak;                        /* largest known peak bytes */
} PlotStats;

/* Makes r an empty run named label (cut to PLOT_LABEL_MAX - 1 bytes at a character boundary;
** bytes that are not UTF-8 and control characters become '?', so the name is safe in XML). */
void plot_run_init(PlotRun* r, const char* label);
/* Appends one step: loss NAN for a skipped step, tokens_per_s and peak_bytes NAN when not
** known. Returns 0, or -1 with an error when out of memory. */
int plot_run_add_step(PlotRun* r, long step, double loss, double tokens_per_s, double peak_bytes);
/* Appends one held-out evaluation at step. Returns 0, or -1 with an error when out of memory. */
int plot_run_add_eval(PlotRun* r, long step, double val_loss);
/* Reads an `osdp train --log` file (docs/FORMATS.md sections 5 and 6) into r (made by
** plot_run_init): its step lines, its held-out lines {"step":N,"val_loss":x} and the summary
** line's val_loss (the evaluation at the end) at the summary's steps, unless a held-out line is
** already there or later. Unknown keys and other objects are ignored. Returns 0, or -1 with a one-line error naming the file (and the line and key) when
** it cannot be read, a line is not a JSON object, a key has the wrong type, or it has no step
** lines; r then holds what was read before (plot_run_free it). */
int plot_run_read_log(PlotRun* r, const char* path);
/* Frees r's arrays (r can be made again with plot_run_init). */
void plot_run_free(PlotRun* r);

/* The legend name of a log path: its file name without directories and without ".jsonl" (or
** ".json", ".log"), as plot_run_init would cut it. */
void plot_label_from_path(const char* path, char label[PLOT_LABEL_MAX]);
/* r's numbers for --json. */
void plot_run_stats(const PlotRun* r, PlotStats* s);

/* Draws runs[0..n) to path as SVG, with title as its heading (NULL: the runs' labels). path is
** written through core/output.h (atomically; a device or a symlink's target written as such),
** so it is the whole picture or untouched. field names the option in errors ("--svg",
** "--plot"). Returns 0, or -1 with a one-line error naming field (and the path). */
int plot_svg_write_runs(const char* path, const char* field, const PlotRun* runs, int n,
                        const char* title);

#endif
