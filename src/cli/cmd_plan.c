/*
** cmd_plan.c: `osdp plan`: finds the per-operator plan and micro-batch with the highest
** predicted throughput whose peak memory fits the limit, prints it beside the best uniform
** ddp / zero2 / zero3 plans (and, on several hosts, the hybrid zero2 / zero3 plans sharded
** within each host), and writes it for `osdp train --plan FILE`.
*/
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/plan_svg.h"
#include "cli/plan_table.h"
#include "cli/profile_cache.h"
#include "cli/setup.h"
#include "comm/comm.h"
#include "core/output.h"
#include "core/util.h"
#include "planner/cost.h"
#include "planner/device.h"
#include "planner/search.h"
#include "planner/trial.h"

static const OptionSpec plan_device_options[] = {
    {"devices", "FILE", NULL, "the device file of `osdp profile` (or one written by hand for hardware\n"
                              "you do not have); or, instead, the six flags below"},
    {"ranks", "N", NULL, "ranks to plan for (without --devices)"},
    {"mem-limit", "SIZE", NULL, "memory limit per rank (without --devices; with it: replaces the file's)"},
    {"flops", "F", NULL, "matrix-product FLOP/s of one rank (without --devices)"},
    {"bandwidth", "B", "1.25e10", "bytes per second of a collective within a host: a full buffer of b\n"
                                  "bytes takes latency + b / bandwidth"},
    {"latency", "S", "2e-5", "seconds per collective within a host"},
    {"threads", "N", "1", "kernel threads per rank"},
    {"ranks-per-host", "H", "all N: one host", "consecutive ranks per host (replaces the device file's)"},
    {"inter-bandwidth", "B", "--bandwidth", "bytes per second of a collective between hosts, over N/H\n"
                                            "ranks, one per host"},
    {"inter-latency", "S", "--latency", "seconds per collective between hosts"},
    {"precision", "fp32|bf16", "fp32",
     "the storage plans are for (bf16: bf16 activations and weight copies; with\n"
     "--devices: the one its op times were measured in)"},
    {NULL, NULL, NULL, NULL}};

static const OptionSpec plan_search_options[] = {
    {"load", "FILE", NULL, "take the model's shape from an llm.c checkpoint or safetensors file"},
    {"seq", "T", "the profiled one, else the model's max", "sequence length"},
    {"max-batch", "B", "512", "the largest micro-batch to consider"},
    {"global-batch", "G", NULL, "sequences per optimizer step: plans N ranks x micro-batch B x K\n"
                                "micro-steps = G (gradient accumulation) for the least time per step\n"
                                "(without it: the most samples/s, K = 1)"},
    {"reduce-dtype", "T", "fp32", "gradient reductions in fp32, bf16 (half the bytes), or auto (bf16\n"
                                  "where it makes the step at least 1% faster)"},
    {"shard-group", "G", NULL, "every sharded op shards within groups of G ranks (without it the\n"
                               "planner chooses per op: within a host, or all N)"},
    {"recompute", "N|all", NULL, "exactly N layers (all: every layer) recompute their activations in\n"
                                 "backward; without it the planner chooses"},
    {"keep-whole", "K", "grad+weight", "what the planner may let an op's sharded slices keep whole across\n"
                                       "an optimizer step (grad: a gradient reduced once; weight: a zero3\n"
                                       "weight gathered once; grad+weight; none)"},
    {"trial", NULL, NULL, "train each candidate plan a few steps here and keep the measured fastest"},
    {"trial-steps", "N", "6", "steps per candidate in the trial"},
    {"out", "FILE", NULL, "write the chosen plan (for osdp train --plan FILE)"},
    {"svg", "FILE", NULL, "draw the chosen plan's memory over a step and its strategies (SVG)"},
    {"json", NULL, NULL, "print the plan, the candidates and the uniform plans as one JSON object"},
    {NULL, NULL, NULL, NULL}};

static const CommandSpec plan_spec = {
    "plan", "[mpirun -np N] osdp plan [options]\n"
    "         (--devices device.json | --ranks N --mem-limit SIZE --flops F)",
    "  finds the per-operator plan (strategy per slice, slices, shard groups, recomputed layers,\n"
    "  micro-batch) with the highest predicted samples/s whose peak fits the memory limit, and\n"
    "  prints it beside the best uniform plans (ddp / zero2 / zero3 over all ranks; on several\n"
    "  hosts also zero2 / zero3 sharded within each host).",
    {setup_model_options, plan_device_options, plan_search_options, NULL},
    NULL};

/* A number flag (default def) that must lie in [lo, hi] (the ranges of a device file's figures,
** planner/device.h); -1 with an error naming the flag, its value, the range and what it means
** (`what`). */
static int link_flag(const Args* a, const char* key, double def, double lo, double hi, const char* what,
                     double* out) {
  if (args_double(a, key, def, out)) return -1;
  if (isfinite(*out) && *out >= lo && *out <= hi) return 0;
  return osdp_fail("osdp plan: --%s %g must be from %g to %g (%s)", key, *out, lo, hi, what);
}

/* --ranks-per-host and the inter-host level of --inter-bandwidth / --inter-latency (each
** defaulting to the intra-host level's figures of the same kind) applied to dev, when given. */
static int inter_host_from_args(const Args* a, DeviceInfo* dev) {
  long H = dev->ranks_per_host;
  if (args_int(a, "ranks-per-host", H, 1, 1 << 20, &H)) return -1;
  if (args_has(a, "ranks-per-host") && dev->ranks % H)
    return osdp_fail("osdp plan: --ranks-per-host %ld must divide the %d ranks (the ranks on each "
                     "host, consecutive world ranks)", H, dev->ranks);
  dev->ranks_per_host = (int)H;
  if (!args_has(a, "inter-bandwidth") && !args_has(a, "inter-latency")) return 0;
  for (int k = 0; k < COLL_COUNT; k++) {
    double bw = dev->coll[k].bandwidth_Bps, lat = dev->coll[k].latency_s;
    if (link_flag(a, "inter-bandwidth", bw, DEVICE_MIN_BANDWIDTH, DEVICE_MAX_BANDWIDTH,
                  "bytes per second between hosts, e.g. 1.25e10", &bw) ||
        link_flag(a, "inter-latency", lat, 0, DEVICE_MAX_SECONDS,
                  "seconds per collective between hosts, e.g. 3e-5", &lat))
      return -1;
    dev->inter[k] = (CollectiveModel){.latency_s = lat, .bandwidth_Bps = bw};
    dev->inter_given[k] = 1;
  }
  dev->inter_ranks = 0; /* ranks / H: one rank per host */
  return 0;
}

/* Device information from --devices, or from the flags that stand in for a file. */
static int device_from_args(const Args* a, DeviceInfo* dev) {
  memset(dev, 0, sizeof *dev);
  const char* path = args_get(a, "devices", NULL);
  Precision prec = PRECISION_FP32;
  if (setup_precision(a, &prec)) return -1;
  if (path) {
    /* A --mem-limit (or a host layout) given beside the file overrides the file's. */
    if (device_load(dev, path) || args_size(a, "mem-limit", dev->mem_limit, &dev->mem_limit) ||
        inter_host_from_args(a, dev))
      return -1;
    if (args_has(a, "precision") && prec != dev->precision)
      return osdp_fail("--precision %s: %s measured %s steps; profile in %s (osdp profile "
                       "--precision %s) or drop --precision", precision_name(prec), path,
                       precision_name(dev->precision), precision_name(prec), precision_name(prec));
    return device_validate(dev, path);
  }
  dev->precision = prec;
  long ranks, threads;
  double flops, bw, lat;
  if (!args_has(a, "ranks") || !args_has(a, "mem-limit") || !args_has(a, "flops"))
    return osdp_fail("osdp plan: give --devices device.json, or --ranks N --mem-limit SIZE --flops F "
                     "[--bandwidth BYTES_PER_S --latency SECONDS]");
  if (args_int(a, "ranks", 1, 1, 1 << 20, &ranks) || args_size(a, "mem-limit", 0, &dev->mem_limit) ||
      link_flag(a, "flops", 0, DEVICE_MIN_FLOPS, DEVICE_MAX_FLOPS, "FLOP/s of one rank, e.g. 9.4e10",
                &flops) ||
      link_flag(a, "bandwidth", 1.25e10, DEVICE_MIN_BANDWIDTH, DEVICE_MAX_BANDWIDTH,
                "bytes per second within a host, e.g. 1.5e11", &bw) ||
      link_flag(a, "latency", 2e-5, 0, DEVICE_MAX_SECONDS, "seconds per collective within a host, e.g. 1e-5",
                &lat) ||
      args_int(a, "threads", 1, 1, 256, &threads))
    return -1;
  dev->ranks = (int)ranks;
  dev->threads = (int)threads;
  dev->flops = flops;
  for (int k = 0; k < COLL_COUNT; k++) dev->coll[k] = (CollectiveModel){.latency_s = lat, .bandwidth_Bps = bw};
  if (inter_host_from_args(a, dev)) return -1;
  return device_validate(dev, "flags");
}

/* Prints the chosen plan as a table: layers with identical plans as one block, per op kind
** its slices, the bytes it keeps between steps, its largest transient, its time under the
** search model and why it is sharded (see cli/plan_table.h; --json lists every op). */
static void print_plan_table(const GptDesc* d, const DeviceInfo* dev, const SearchOptions* so,
                             const Plan* p) {
  plan_table_print(stdout, d, dev, so, p);
}

/* Prints one uniform plan's figures for the comparison (with the layers it recomputes). */
static void uniform_text(const char* name, int ok, const PlanCost* c, int recompute) {
  char pk[32];
  if (!ok) { printf("  %-10s does not fit\n", name); return; }
  char bk[32];
  if (c->accum > 1) snprintf(bk, sizeof bk, "%d x %d", c->micro_batch, c->accum);
  else snprintf(bk, sizeof bk, "%d", c->micro_batch);
  printf("  %-10s micro-batch %9s  %10.2f samples/s  step %.4f s  peak %s", name, bk,
         c->samples_per_s, c->step_s, format_bytes((double)c->mem.peak, pk));
  if (recompute > 0) printf("  %d layers recomputed", recompute);
  printf("\n");
}

/* Adds one plan's figures under `name` to a JSON object (null when it does not fit). */
static cJSON* cost_json(cJSON* parent, const char* name, int ok, const PlanCost* c) {
  if (!ok) { cJSON_AddNullToObject(parent, name); return NULL; }
  cJSON* o = cJSON_AddObjectToObject(parent, name);
  cJSON_AddNumberToObject(o, "micro_batch", c->micro_batch);
  cJSON_AddNumberToObject(o, "grad_accum", c->accum);
  cJSON_AddNumberToObject(o, "samples_per_s", c->samples_per_s);
  cJSON_AddNumberToObject(o, "step_s", c->step_s);
  cJSON_AddNumberToObject(o, "peak_bytes", (double)c->mem.peak);
  cJSON_AddNumberToObject(o, "compute_s", c->compute_s);
  cJSON_AddNumberToObject(o, "comm_s", c->comm_s);
  cJSON_AddNumberToObject(o, "hidden_s", c->hidden_s);
  cJSON_AddNumberToObject(o, "optim_s", c->optim_s);
  cJSON_AddNumberToObject(o, "overhead_s", c->overhead_s);
  return o;
}

/* The options a plan switches on, for the candidates table: "prefetch", "overlap_reduce",
** "bf16", and what ops keep whole across micro-steps ("keep grad x12,weight x4": how many ops
** keep their gradients, their weights), joined by commas; "no" when none. */
static void options_text(const Plan* p, char* buf, size_t n) {
  snprintf(buf, n, "%s%s%s%s%s", p->prefetch ? "prefetch" : "",
           p->prefetch && p->overlap_reduce ? "," : "", p->overlap_reduce ? "overlap_reduce" : "",
           (p->prefetch || p->overlap_reduce) && p->reduce_dtype == REDUCE_BF16 ? "," : "",
           p->reduce_dtype == REDUCE_BF16 ? "bf16" : "");
  int grads = plan_keep_ops(p, KEEP_GRAD), weights = plan_keep_ops(p, KEEP_WEIGHT);
  size_t off = strlen(buf);
  if (grads || weights)
    snprintf(buf + off, n - off, "%skeep %s%.0d%s%s%.0d", off ? "," : "", grads ? "grad x" : "",
             grads, grads && weights ? ",weight x" : "", !grads && weights ? "weight x" : "", weights);
  if (!buf[0]) snprintf(buf, n, "no");
}

/* The best uniform candidate by predicted samples/s, or -1. */
static int best_uniform(const Candidate* c, int n) {
  int u = -1;
  for (int i = 0; i < n; i++)
    if (c[i].uniform >= 0 && (u < 0 || c[i].cost.samples_per_s > c[u].cost.samples_per_s)) u = i;
  return u;
}

/* What the chosen plan gains over the best uniform plan, predicted, and whether that is within
** the model's error (PLANNER_MODEL_ERROR): whether the mix is worth running. */
static void print_uniform_gain(const Candidate* c, int n, int chosen) {
  int u = best_uniform(c, n);
  if (c[chosen].uniform >= 0) { printf("  the chosen plan is the uniform %s\n", c[chosen].origin); return; }
  if (u < 0) { printf("  no uniform plan fits: only a per-operator plan does\n"); return; }
  double gain = c[chosen].cost.samples_per_s / c[u].cost.samples_per_s - 1;
  const char* verdict = gain >= PLANNER_MODEL_ERROR ? "beyond the model's error"
                        : gain > -PLANNER_MODEL_ERROR ? "within the model's error"
                                                      : "below it: chosen by what the trial measured";
  printf("  predicted %+.1f%% over the best uniform plan (%s): %s (%.0f%%)\n", 100 * gain,
         c[u].origin, verdict, 100 * PLANNER_MODEL_ERROR);
}

/* Prints the candidates, predicted and (after a trial) measured, marking the chosen one. */
static void print_candidates(const GptDesc* d, const Candidate* c, int n, const TrialResult* r,
                             int chosen) {
  char pk[32], opt[64];
  printf("candidates (predicted by the step replay%s):\n", r ? "; measured by a trial" : "");
  printf("  %-2s %-19s %5s %3s %8s %11s %11s", "#", "plan", "B", "K", "prefetch", "pred s/step",
         "pred samp/s");
  if (r) printf(" %11s %11s %9s", "meas s/step", "meas samp/s", "meas/pred");
  printf(" %12s%s\n", "peak", r ? "  measured peak" : "  options");
  for (int i = 0; i < n; i++) {
    options_text(&c[i].plan, opt, sizeof opt);
    printf("%s %-2d %-19s %5d %3d %8s %11.4f %11.2f", i == chosen ? "*" : " ", i + 1, c[i].origin,
           c[i].plan.micro_batch, plan_accum(&c[i].plan), c[i].plan.prefetch ? "yes" : "no", c[i].cost.step_s,
           c[i].cost.samples_per_s);
    if (r && r[i].ok)
      printf(" %11.4f %11.2f %9.3f", r[i].step_s, r[i].samples_per_s, r[i].step_s / c[i].cost.step_s);
    else if (r)
      printf(" %11s %11s %9s", "failed", "-", "-");
    printf(" %12s", format_bytes((double)c[i].cost.mem.peak, pk));
    if (r && r[i].ok && r[i].peak == c[i].cost.mem.peak) printf("  exact");
    else if (r && r[i].ok) printf("  %+lld bytes", (long long)r[i].peak - (long long)c[i].cost.mem.peak);
    if (!r) printf("  %s", opt);
    printf("\n");
  }
  int fastest = 0;
  for (int i = 1; i < n; i++) if (c[i].cost.samples_per_s > c[fastest].cost.samples_per_s) fastest = i;
  if (r)
    printf("* chosen: %s (fastest when measured)\n", c[chosen].origin);
  else if (fastest == chosen)
    printf("* chosen: %s (fastest predicted; --trial measures the candidates)\n", c[chosen].origin);
  else {
    int g = plan_layer_groups(d, &c[chosen].plan);
    printf("* chosen: %s (the simplest predicted within the model's %.0f%% of the fastest, %s: %d "
           "layer plan%s against %d; --trial measures the candidates)\n", c[chosen].origin,
           100 * PLANNER_MODEL_ERROR, c[fastest].origin, g, g == 1 ? "" : "s",
           plan_layer_groups(d, &c[fastest].plan));
  }
  print_uniform_gain(c, n, chosen);
}

/* The candidates as a JSON array (with the trial's measurements when r is not NULL). */
static cJSON* candidates_json(const GptDesc* d, const Candidate* c, int n, const TrialResult* r) {
  cJSON* arr = cJSON_CreateArray();
  for (int i = 0; i < n; i++) {
    cJSON* o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "origin", c[i].origin);
    cJSON_AddBoolToObject(o, "prefetch", c[i].plan.prefetch);
    cJSON_AddBoolToObject(o, "overlap_reduce", c[i].plan.overlap_reduce);
    cJSON_AddStringToObject(o, "reduce_dtype", reduce_dtype_name(c[i].plan.reduce_dtype));
    if (c[i].uniform >= 0) cJSON_AddNumberToObject(o, "uniform_shard_group",
                                                   c[i].uniform_group ? c[i].uniform_group : (double)c[i].plan.world);
    cJSON_AddNumberToObject(o, "recompute_layers", plan_recompute_count(&c[i].plan));
    cost_json(o, "predicted", 1, &c[i].cost);
    if (r && r[i].ok) {
      cJSON* m = cJSON_AddObjectToObject(o, "measured");
      cJSON_AddNumberToObject(m, "step_s", r[i].step_s);
      cJSON_AddNumberToObject(m, "samples_per_s", r[i].samples_per_s);
      cJSON_AddNumberToObject(m, "peak_bytes", (double)r[i].peak);
    }
    char* ptxt = plan_to_json(&c[i].plan, d);
    cJSON_AddItemToObject(o, "plan", cJSON_Parse(ptxt));
    free(ptxt);
    cJSON_AddItemToArray(arr, o);
  }
  return arr;
}

/* How many candidates planning keeps (and a trial runs), plus the hybrid uniform baselines on
** several hosts and the uniform ones keeping whole across micro-steps with a global batch. */
#define PLAN_CANDIDATES 6
#define PLAN_CANDIDATES_MAX (PLAN_CANDIDATES + 4)

/* The ranks per host of dev, as words for the plan's heading: "" on one host, else
** " (8 per host)". */
static void hosts_text(const DeviceInfo* dev, char* buf, size_t n) {
  int H = device_ranks_per_host(dev);
  if (H < dev->ranks) snprintf(buf, n, " (%d per host)", H);
  else if (n) buf[0] = 0;
}

/* Adds the host layout and the search's reduce dtype to the JSON report. */
static void layout_json(cJSON* root, const DeviceInfo* dev, const SearchOptions* so) {
  cJSON_AddNumberToObject(root, "ranks", dev->ranks);
  cJSON_AddNumberToObject(root, "ranks_per_host", device_ranks_per_host(dev));
  cJSON_AddStringToObject(root, "reduce_dtype_option",
                          so->reduce_dtype == SEARCH_REDUCE_AUTO ? "auto" : reduce_dtype_name(so->reduce_dtype));
}

/* The best uniform plans at their best fitting micro-batch, printed (when text) and added to
** uni: over the world ddp, zero2, zero3; on several hosts also zero2 and zero3 sharded within
** each host ("zero2 G=8"; JSON "hybrid_zero2" with its shard_group); with a global batch also
** zero2 and zero3 keeping whole across micro-steps what the options allow ("zero3 keep"; JSON
** "zero3_keep" with its keep_whole). */
static void report_uniform(const GptDesc* d, const DeviceInfo* dev, const SearchOptions* so,
                           int text, cJSON* uni) {
  int H = device_ranks_per_host(dev), keep_bits = KEEP_ALL & ~so->keep_off;
  static const char* names[] = {"ddp", "zero2", "zero3"};
  static const char* hybrid_names[] = {"", "hybrid_zero2", "hybrid_zero3"};
  static const char* keep_names[] = {"", "zero2_keep", "zero3_keep"};
  for (int u = 0; u < 3 * STRAT_COUNT; u++) {
    int s = u % STRAT_COUNT, G = u < STRAT_COUNT || u >= 2 * STRAT_COUNT ? dev->ranks : H;
    int keep = u >= 2 * STRAT_COUNT ? keep_bits & (s == STRAT_ZERO3 ? KEEP_ALL : KEEP_GRAD) : 0;
    if (u >= STRAT_COUNT && u < 2 * STRAT_COUNT && (s == STRAT_DP || H <= 1 || H >= dev->ranks)) continue;
    if (u >= 2 * STRAT_COUNT && (s == STRAT_DP || !so->global_batch || !keep)) continue;
    Plan up;
    PlanCost uc;
    int ok = planner_best_uniform_group(d, dev, so, (Strategy)s, G, keep, &up, &uc) == 0;
    int rec = ok ? plan_recompute_count(&up) : 0;
    char label[32];
    if (G < dev->ranks) snprintf(label, sizeof label, "%s G=%d", names[s], G);
    else snprintf(label, sizeof label, "%s%s", names[s], keep ? " keep" : "");
    if (text) uniform_text(label, ok, &uc, rec);
    cJSON* o = cost_json(uni, keep ? keep_names[s] : G < dev->ranks ? hybrid_names[s] : names[s],
                         ok, &uc);
    if (o && keep) cJSON_AddStringToObject(o, "keep_whole", keep_name(keep));
    if (o) cJSON_AddBoolToObject(o, "prefetch", 0);
    if (o) cJSON_AddNumberToObject(o, "recompute_layers", rec);
    if (o) cJSON_AddNumberToObject(o, "shard_group", G);
    if (ok) plan_free(&up);
  }
}

/* The trial of candidates c: the one kept in ro->trial_cache when it measured exactly these
** (and ro->reuse_trial), else a new one (planner_trial), then kept there. The index of the
** trial's choice (planner_trial's), or -1 with an error. */
static int trial_or_kept(const GptDesc* d, const DeviceInfo* dev, const Candidate* c, int n,
                         const PlanReport* ro, int verbose, TrialResult* tr) {
  int chosen = ro->trial_cache[0] && ro->reuse_trial ? trial_cache_find(ro->trial_cache, d, c, n, tr) : -1;
  if (chosen >= 0) {
    if (verbose)
      printf("trial: reusing %s (these candidates measured before on this profile; --reprofile "
             "measures anew)\n", ro->trial_cache);
    return chosen;
  }
  if (verbose)
    printf("trial: training each of %d candidate plans for %d step%s (at least %.1f s)\n", n, ro->trial_steps,
           ro->trial_steps == 1 ? "" : "s", ro->trial_steps * PLANNER_TRIAL_STEP_S);
  const Backend* bk = backend_by_name(dev->backend[0] ? dev->backend : "cpu", "device");
  chosen = bk ? planner_trial(d, c, n, bk, dev->threads, dev->mem_limit, ro->trial_steps, verbose, tr)
              : -1;
  if (chosen >= 0 && ro->trial_cache[0] && comm_rank() == 0 &&
      trial_cache_store(ro->trial_cache, d, c, n, tr, chosen))
    fprintf(stderr, "osdp: note: the trial was not kept (%s); the next start trials again\n",
            osdp_last_error());
  return chosen;
}

int plan_and_report(const GptDesc* d, const DeviceInfo* dev, const SearchOptions* so,
                    PlanReport* ro, Plan* p, PlanCost* c) {
  size_t min_bytes = 0;
  double search_s = 0;
  Candidate cand[PLAN_CANDIDATES_MAX];
  TrialResult tr[PLAN_CANDIDATES_MAX];
  int H = device_ranks_per_host(dev);
  int ncand = PLAN_CANDIDATES + (H > 1 && H < dev->ranks ? 2 : 0) + (so->global_batch ? 2 : 0);
  int n = planner_candidates(d, dev, so, cand, ncand, &min_bytes, &search_s);
  if (n < 0) {
    if (ro->json && comm_rank() == 0 && min_bytes > 0 && min_bytes != (size_t)-1) {
      /* For programs: that nothing fits, and the smallest limit that would (the error line
      ** follows on stderr as for every failure). */
      printf("{\"fits\":false,\"limit_bytes\":%zu,\"min_bytes\":%zu}\n", dev->mem_limit, min_bytes);
      fflush(stdout);
    }
    return -1;
  }
  int show = comm_rank() == 0 && !ro->quiet, chosen = 0, rc = 0;
  char lim[32], pk[32], hosts[32];
  hosts_text(dev, hosts, sizeof hosts);
  if (ro->trial_steps > 0) {
    if (comm_size() != dev->ranks)
      rc = osdp_fail("--trial: the device file describes %d rank(s) but this run has %d; run "
                     "under mpirun -np %d", dev->ranks, comm_size(), dev->ranks);
    if (!rc) {
      chosen = trial_or_kept(d, dev, cand, n, ro, show && !ro->json, tr);
      if (chosen < 0) rc = -1;
    }
  }
  const TrialResult* meas = ro->trial_steps > 0 && !rc ? tr : NULL;
  for (int i = 0; meas && i < n; i++) {
    if (i == chosen) {
      snprintf(ro->chosen, sizeof ro->chosen, "%s", cand[i].origin);
      ro->chosen_sps = tr[i].samples_per_s;
      ro->chosen_uniform = cand[i].uniform;
    }
    if (cand[i].uniform >= 0 && !cand[i].uniform_group && tr[i].ok)
      ro->uniform_sps[cand[i].uniform] = tr[i].samples_per_s;
    if (cand[i].uniform >= 0 && tr[i].ok && tr[i].samples_per_s > ro->best_uniform_sps) {
      snprintf(ro->best_uniform, sizeof ro->best_uniform, "%s", cand[i].origin);
      ro->best_uniform_sps = tr[i].samples_per_s;
    }
  }
  if (!rc && show && !ro->json) {
    printf("plan for %s on %d rank(s)%s, limit %s per rank, seq %d (search %.3f s)\n", d->cfg.name,
           dev->ranks, hosts, format_bytes((double)dev->mem_limit, lim), so->seq, search_s);
    print_plan_table(d, dev, so, &cand[chosen].plan);
    const PlanCost* k = &cand[chosen].cost;
    int rec = plan_recompute_count(&cand[chosen].plan);
    const Plan* cp = &cand[chosen].plan;
    printf("osdp   micro-batch %4d x %d micro-step%s = global batch %ld  %10.2f samples/s  step %.4f s  "
           "peak %s (%zu bytes)%s%s%s", k->micro_batch, k->accum, k->accum == 1 ? "" : "s",
           plan_global_batch(cp), k->samples_per_s, k->step_s, format_bytes((double)k->mem.peak, pk),
           k->mem.peak, cp->prefetch ? ", zero3 prefetch on" : "",
           cp->overlap_reduce ? ", overlap_reduce on" : "",
           cp->reduce_dtype == REDUCE_BF16 ? ", bf16 gradient reductions" : "");
    if (rec > 0) printf(", %d layers recomputed", rec);
    printf("\n");
    printf("  step = compute %.4f + communication waited %.4f (hidden %.4f) + optimizer %.4f + "
           "other %.4f s\n", k->compute_s, k->comm_s, k->hidden_s, k->optim_s, k->overhead_s);
    print_candidates(d, cand, n, meas, chosen);
    printf("uniform plans at their best fitting micro-batch:\n");
  }
  cJSON* root = cJSON_CreateObject();
  if (!rc) { /* a uniform plan that does not fit is reported in the table, not an error */
    report_uniform(d, dev, so, show && !ro->json, cJSON_AddObjectToObject(root, "uniform"));
    osdp_clear_error();
  }
  layout_json(root, dev, so);
  if (!rc && show && ro->json) {
    char* ptxt = plan_to_json(&cand[chosen].plan, d);
    cJSON_AddItemToObject(root, "plan", cJSON_Parse(ptxt));
    free(ptxt);
    cJSON_AddNumberToObject(root, "micro_batch", cand[chosen].cost.micro_batch);
    cJSON_AddNumberToObject(root, "grad_accum", cand[chosen].cost.accum);
    cJSON_AddNumberToObject(root, "global_batch", (double)plan_global_batch(&cand[chosen].plan));
    cost_json(root, "predicted", 1, &cand[chosen].cost);
    if (meas) {
      cJSON* m = cJSON_AddObjectToObject(root, "measured");
      cJSON_AddNumberToObject(m, "step_s", tr[chosen].step_s);
      cJSON_AddNumberToObject(m, "samples_per_s", tr[chosen].samples_per_s);
      cJSON_AddNumberToObject(m, "peak_bytes", (double)tr[chosen].peak);
    }
    cJSON_AddNumberToObject(root, "chosen", chosen);
    cJSON_AddNumberToObject(root, "layer_plans", plan_layer_groups(d, &cand[chosen].plan));
    int u = best_uniform(cand, n);
    if (u >= 0) {
      double gain = cand[chosen].cost.samples_per_s / cand[u].cost.samples_per_s - 1;
      cJSON_AddNumberToObject(root, "predicted_gain_over_uniform", gain);
      cJSON_AddBoolToObject(root, "gain_within_model_error", gain < PLANNER_MODEL_ERROR);
    }
    cJSON_AddItemToObject(root, "candidates", candidates_json(d, cand, n, meas));
    cJSON_AddNumberToObject(root, "search_s", search_s);
    char* s = cJSON_PrintUnformatted(root);
    printf("%s\n", s);
    free(s);
  }
  cJSON_Delete(root);
  for (int i = 0; i < n; i++) {
    if (i == chosen && !rc) {
      *p = cand[i].plan;
      *c = cand[i].cost;
    } else {
      plan_free(&cand[i].plan);
    }
  }
  return rc;
}

/* Search options from the flags (--seq defaults to the sequence the device's op times were
** measured at for this model, else the model's maximum; --reduce-dtype fp32, bf16 or auto). */
static int search_options_from_args(const Args* a, const GptDesc* d, const DeviceInfo* dev,
                                    SearchOptions* so) {
  long T, maxb;
  int def_T = dev->n_op_times && strcmp(dev->compute_model, d->cfg.name) == 0 ? dev->compute_seq
                                                                             : d->cfg.max_seq;
  if (args_int(a, "seq", def_T, 1, d->cfg.max_seq, &T) || args_int(a, "max-batch", 512, 1, 1 << 20, &maxb))
    return -1;
  planner_default_options(so, (int)T);
  so->max_batch = (int)maxb;
  if (setup_search_options(a, d, dev->ranks, so)) return -1;
  setup_cap_batch(a, d, dev, so, args_has(a, "json") || args_has(a, "quiet"));
  return 0;
}

int cmd_plan(int argc, char** argv) {
  if (args_help(&plan_spec, argc, argv)) return 0;
  Args a;
  GptDesc d;
  DeviceInfo dev;
  SearchOptions so;
  Plan p;
  PlanCost c;
  PlanReport ro = {0};
  long trial_steps = 0;
  static const char* const outputs[] = {"out", "svg", NULL};
  if (args_parse(&a, &plan_spec, argc, argv) || setup_claim_files(&a, outputs) ||
      (args_get(&a, "out", NULL) && comm_rank() == 0 && check_writable(args_get(&a, "out", NULL), "--out")) ||
      (args_get(&a, "svg", NULL) && comm_rank() == 0 && check_writable(args_get(&a, "svg", NULL), "--svg")) ||
      setup_model(&a, "tiny", &d) ||
      device_from_args(&a, &dev) || search_options_from_args(&a, &d, &dev, &so) ||
      args_int(&a, "trial-steps", 6, 1, 1000, &trial_steps))
    return cli_report_error();
  ro.json = args_has(&a, "json");
  ro.trial_steps = args_has(&a, "trial") ? (int)trial_steps : 0;
  if (plan_and_report(&d, &dev, &so, &ro, &p, &c)) return cli_report_error();
  const char* out = args_get(&a, "out", NULL);
  int rc = out && comm_rank() == 0 ? plan_save(&p, &d, out, "--out") : 0;
  /* --svg: the chosen plan's memory over a step against the limit, and its strategies. */
  const char* svg = args_get(&a, "svg", NULL);
  if (!rc && svg && comm_rank() == 0) {
    char title[200], lim[32];
    snprintf(title, sizeof title, "osdp plan: %s on %d rank(s) under %s", d.cfg.name, dev.ranks,
             format_bytes((double)dev.mem_limit, lim));
    rc = plan_svg_write(svg, &d, &p, dev.threads, dev.mem_limit, title);
  }
  plan_free(&p);
  device_free(&dev);
  gpt_desc_free(&d);
  return rc ? cli_report_error() : 0;
}
