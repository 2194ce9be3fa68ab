/*
** cmd_plot.c: `osdp plot LOG [LOG ...] --svg FILE`: training logs (`osdp train --log`) drawn as
** one SVG picture (loss, held-out loss, tokens/s and peak memory against step, one colour per
** run; run_plot.h), and with --json their landmarks as numbers. Rank 0 does the work; under
** mpirun the other ranks only wait for its result.
*/
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/run_plot.h"
#include "comm/comm.h"
#include "core/output.h"
#include "core/util.h"

static const OptionSpec plot_options[] = {
    {"svg", "FILE", NULL, "draw loss (training solid, held-out dashed), tokens/s and peak memory\n"
                          "against step, one colour per log (SVG)"},
    {"label", "A,B,...", "each file's name less .jsonl",
     "the logs' names in the legend, comma-separated, one per log\nin order"},
    {"title", "TEXT", "the labels", "the picture's heading"},
    {"json", NULL, NULL, "print per log its label, steps, first/last/min loss, last held-out\n"
                         "loss, median tokens/s and largest peak bytes as one JSON object"},
    {NULL, NULL, NULL, NULL}};

static const CommandSpec plot_spec = {
    "plot", "osdp plot LOG [LOG ...] [--svg FILE] [--json] [options]",
    "  reads training logs written by osdp train --log (one JSON object per step, held-out\n"
    "  lines {\"step\":N,\"val_loss\":x}, the summary line) and draws them over one step axis in\n"
    "  three panels: loss (a gap at a skipped step; held-out loss dashed with markers, or the\n"
    "  summary's val_loss as one point), tokens/s from 0, and rank 0's peak memory.",
    {plot_options, NULL},
    "  FILE is written to a temporary file beside it and renamed, so a failed plot leaves an\n"
    "  existing FILE as it was; a FILE that is one of the LOGs is refused."};

/* Fills labels[0..n) from --label (comma-separated, exactly n non-empty names that fit) or
** from the logs' file names. -1 with an error naming --label otherwise. */
static int plot_labels(const char* spec, char** logs, int n, char (*labels)[PLOT_LABEL_MAX]) {
  if (!spec) {
    for (int i = 0; i < n; i++) plot_label_from_path(logs[i], labels[i]);
    return 0;
  }
  int k = 0;
  for (const char* s = spec;; k++) {
    size_t len = strcspn(s, ",");
    if (k < n && len == 0)
      return osdp_fail("--label: name %d of '%s' is empty; give one name per log, e.g. --label a,b", k + 1, spec);
    if (k < n && len >= PLOT_LABEL_MAX)
      return osdp_fail("--label: '%.*s' is longer than %d bytes; give a shorter name", (int)len, s,
                       PLOT_LABEL_MAX - 1);
    if (k < n) snprintf(labels[k], PLOT_LABEL_MAX, "%.*s", (int)len, s);
    if (!s[len]) break;
    s += len + 1;
  }
  if (k + 1 != n)
    return osdp_fail("--label gives %d name%s for %d log%s; give one name per log, comma-separated, "
                     "in the order of the logs", k + 1, k ? "s" : "", n, n == 1 ? "" : "s");
  return 0;
}

/* Adds v under key to o: a number, or null when it is not finite. */
static void json_number(cJSON* o, const char* key, double v) {
  if (isfinite(v)) cJSON_AddNumberToObject(o, key, v);
  else cJSON_AddNullToObject(o, key);
}

/* Prints {"runs":[...]} with each run's file, label and landmarks on stdout. */
static int plot_json(const PlotRun* runs, char** logs, int n) {
  cJSON* root = cJSON_CreateObject();
  cJSON* arr = root ? cJSON_AddArrayToObject(root, "runs") : NULL;
  for (int i = 0; arr && i < n; i++) {
    PlotStats s;
    cJSON* r = cJSON_CreateObject();
    if (!r || !cJSON_AddItemToArray(arr, r)) { cJSON_Delete(r); arr = NULL; break; }
    plot_run_stats(&runs[i], &s);
    cJSON_AddStringToObject(r, "file", logs[i]);
    cJSON_AddStringToObject(r, "label", runs[i].label);
    cJSON_AddNumberToObject(r, "steps", s.steps);
    cJSON_AddNumberToObject(r, "first_step", (double)s.first_step);
    cJSON_AddNumberToObject(r, "last_step", (double)s.last_step);
    json_number(r, "first_loss", s.first_loss);
    json_number(r, "last_loss", s.last_loss);
    json_number(r, "min_loss", s.min_loss);
    json_number(r, "val_loss", s.last_val_loss);
    cJSON_AddNumberToObject(r, "heldout_points", runs[i].nval);
    json_number(r, "median_tokens_per_s", s.median_tps);
    json_number(r, "peak_bytes", s.max_peak);
  }
  char* text = arr ? cJSON_PrintUnformatted(root) : NULL;
  cJSON_Delete(root);
  if (!text) return osdp_fail("plot --json: out of host memory");
  printf("%s\n", text);
  free(text);
  return 0;
}

/* Claims the logs as inputs and --svg as the output (refused when it is one of the logs) and
** checks that --svg can be written, before anything is read. */
static int plot_claims(char** logs, int n, const char* svg) {
  for (int i = 0; i < n; i++)
    if (out_claim_input(logs[i], "plot LOG")) return -1;
  if (!svg) return 0;
  if (out_claim_output(svg, "--svg")) return -1;
  return out_check_writable(svg, "--svg");
}

/* Reads the n logs into runs (each made with its label). -1 with the first log's error. */
static int plot_read(PlotRun* runs, char** logs, int n, char (*labels)[PLOT_LABEL_MAX]) {
  for (int i = 0; i < n; i++) {
    plot_run_init(&runs[i], labels[i]);
    if (plot_run_read_log(&runs[i], logs[i])) return -1;
  }
  return 0;
}

/* Rank 0's work: checks the arguments, reads the logs, writes the picture, prints --json. */
static int plot_run(const Args* a, char** logs, int n) {
  const char* svg = args_get(a, "svg", NULL);
  int json = args_has(a, "json");
  if (n == 0)
    return osdp_fail("osdp plot: give at least one LOG (written by osdp train --log FILE); usage: "
                     "osdp plot LOG [LOG ...] --svg FILE");
  if (!svg && !json)
    return osdp_fail("osdp plot: nothing to do; give --svg FILE for the picture and/or --json for "
                     "the numbers");
  char (*labels)[PLOT_LABEL_MAX] = calloc((size_t)n, sizeof *labels);
  PlotRun* runs = calloc((size_t)n, sizeof *runs);
  int rc = !labels || !runs ? osdp_fail("osdp plot: out of host memory") : 0;
  if (!rc) rc = plot_labels(args_get(a, "label", NULL), logs, n, labels);
  if (!rc) rc = plot_claims(logs, n, svg);
  if (!rc) rc = plot_read(runs, logs, n, labels);
  if (!rc && svg) rc = plot_svg_write_runs(svg, "--svg", runs, n, args_get(a, "title", NULL));
  if (!rc && json) rc = plot_json(runs, logs, n);
  for (int i = 0; runs && i < n; i++) plot_run_free(&runs[i]);
  free(runs);
  free(labels);
  return rc;
}

/* `osdp plot`: parses the logs and the options, plots on rank 0 and agrees on the outcome
** with every rank (so under mpirun all ranks exit alike). */
int cmd_plot(int argc, char** argv) {
  if (args_help(&plot_spec, argc, argv)) return 0;
  char** pos = malloc(((size_t)argc + 1) * sizeof *pos);
  char** opt = malloc(((size_t)argc + 1) * sizeof *opt);
  Args a;
  int npos = 0, nopt = 0, rc = -1;
  if (!pos || !opt) {
    osdp_fail("osdp plot: out of host memory");
  } else {
    args_split(&plot_spec, argc, argv, pos, &npos, opt, &nopt);
    if (args_parse(&a, &plot_spec, nopt, opt) == 0) {
      rc = comm_rank() == 0 ? plot_run(&a, pos, npos) : 0;
      double failed = comm_allreduce_f64(comm_world(), rc ? 1.0 : 0.0); /* every rank got here */
      if (failed != 0 && comm_rank() != 0) osdp_fail("plot: rank 0 failed");
      rc = failed != 0 ? -1 : 0;
    }
  }
  free(pos);
  free(opt);
  return rc ? cli_report_error() : 0;
}
