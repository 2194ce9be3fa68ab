/*
** cmd_plan.c: `osdp plan`: finds the per-operator plan and micro-batch with the highest
** predicted throughput whose peak memory fits the limit, prints it beside the best uniform
** ddp / zero2 / zero3 plans, and writes it for `osdp train --plan FILE`.
*/
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/setup.h"
#include "comm/comm.h"
#include "core/util.h"
#include "planner/cost.h"
#include "planner/device.h"
#include "planner/search.h"

static const char* plan_help =
    "usage: osdp plan [--model M] (--devices device.json | --ranks N --mem-limit SIZE --flops F\n"
    "                 --bandwidth BYTES_PER_S --latency SECONDS [--threads N]) [--seq T]\n"
    "                 [--max-batch B] [--out plan.json] [--json]\n"
    "  device.json comes from `osdp profile` or is written by hand for hardware you do not have.\n";

/* Device information from --devices, or from the flags that stand in for a file. */
static int device_from_args(const Args* a, DeviceInfo* dev) {
  memset(dev, 0, sizeof *dev);
  const char* path = args_get(a, "devices", NULL);
  if (path) {
    /* A --mem-limit given beside the file overrides the file's limit. */
    if (device_load(dev, path) || args_size(a, "mem-limit", dev->mem_limit, &dev->mem_limit)) return -1;
    return device_validate(dev, path);
  }
  long ranks, threads;
  double flops, bw, lat;
  if (!args_has(a, "ranks") || !args_has(a, "mem-limit") || !args_has(a, "flops"))
    return osdp_fail("osdp plan: give --devices device.json, or --ranks N --mem-limit SIZE --flops F "
                     "[--bandwidth BYTES_PER_S --latency SECONDS]");
  if (args_int(a, "ranks", 1, 1, 1 << 20, &ranks) || args_size(a, "mem-limit", 0, &dev->mem_limit) ||
      args_double(a, "flops", 0, &flops) || args_double(a, "bandwidth", 1.25e10, &bw) ||
      args_double(a, "latency", 2e-5, &lat) || args_int(a, "threads", 1, 1, 256, &threads))
    return -1;
  dev->ranks = (int)ranks;
  dev->threads = (int)threads;
  dev->flops = flops;
  for (int k = 0; k < COLL_COUNT; k++) dev->coll[k] = (CollectiveModel){lat, bw};
  return device_validate(dev, "flags");
}

/* Compact description of an op's slices, e.g. "zero3 zero3 dp dp" or "dp". */
static void slices_text(const OpPlan* o, char* buf, size_t n) {
  size_t off = 0;
  buf[0] = 0;
  for (int s = 0; s < o->k && off < n; s++)
    off += (size_t)snprintf(buf + off, n - off, "%s%s", s ? " " : "", strategy_name(o->strat[s]));
}

/* Prints the chosen plan per operator: its slices, the bytes it keeps between steps, its
** largest transient, its communication + optimizer time per step, and why it is sharded. */
static void print_plan_table(const GptDesc* d, const DeviceInfo* dev, const SearchOptions* so,
                             const Plan* p) {
  printf("%-12s %-40s %12s %12s %9s  %s\n", "operator", "slices", "kept", "transient", "comm+opt",
         "why");
  for (int i = 0; i < d->nops; i++) {
    if (!d->ops[i].n_params) continue;
    const OpPlan* o = &p->ops[i];
    size_t kept = 0, tr = 0;
    double time_s = 0;
    int sharded = 0;
    for (int s = 0; s < o->k; s++) {
      size_t n = gpt_slice_params(&d->ops[i], o->k, s), t = cost_slice_transient(n, o->strat[s], p->world);
      kept += cost_slice_persistent(n, o->strat[s], p->world);
      if (t > tr) tr = t;
      time_s += cost_slice_comm_s(dev, i, n, o->strat[s]) + cost_slice_optim_s(dev, n, o->strat[s]);
      sharded |= o->strat[s] != STRAT_DP;
    }
    char sl[200], kb[32], tb[32], why[256] = "";
    slices_text(o, sl, sizeof sl);
    if (sharded) planner_explain(d, dev, so, p, i, why, sizeof why);
    printf("%-12s %-40s %12s %12s %6.2f ms  %s\n", d->ops[i].name, sl, format_bytes((double)kept, kb),
           format_bytes((double)tr, tb), 1e3 * time_s, why);
  }
}

/* Prints one uniform plan's figures for the comparison. */
static void uniform_text(const char* name, int ok, const PlanCost* c) {
  char pk[32];
  if (!ok) { printf("  %-6s does not fit\n", name); return; }
  printf("  %-6s micro-batch %4d  %10.2f samples/s  step %.4f s  peak %s\n", name, c->micro_batch,
         c->samples_per_s, c->step_s, format_bytes((double)c->mem.peak, pk));
}

/* Adds one plan's figures under `name` to a JSON object (null when it does not fit). */
static void cost_json(cJSON* parent, const char* name, int ok, const PlanCost* c) {
  if (!ok) { cJSON_AddNullToObject(parent, name); return; }
  cJSON* o = cJSON_AddObjectToObject(parent, name);
  cJSON_AddNumberToObject(o, "micro_batch", c->micro_batch);
  cJSON_AddNumberToObject(o, "samples_per_s", c->samples_per_s);
  cJSON_AddNumberToObject(o, "step_s", c->step_s);
  cJSON_AddNumberToObject(o, "peak_bytes", (double)c->mem.peak);
}

int plan_and_report(const GptDesc* d, const DeviceInfo* dev, const SearchOptions* so, int json,
                    int quiet, Plan* p, PlanCost* c) {
  size_t min_bytes = 0;
  double search_s = 0;
  if (planner_search(d, dev, so, p, c, &min_bytes, &search_s)) return -1;
  cJSON* root = cJSON_CreateObject();
  cJSON* uni = cJSON_CreateObject();
  char lim[32], pk[32];
  int show = comm_rank() == 0 && !quiet;
  if (show && !json) {
    printf("plan for %s on %d rank(s), limit %s per rank, seq %d (search %.3f s)\n", d->cfg.name,
           dev->ranks, format_bytes((double)dev->mem_limit, lim), so->seq, search_s);
    print_plan_table(d, dev, so, p);
    printf("osdp   micro-batch %4d  %10.2f samples/s  step %.4f s  peak %s (%zu bytes)\n",
           c->micro_batch, c->samples_per_s, c->step_s, format_bytes((double)c->mem.peak, pk),
           c->mem.peak);
    printf("uniform plans at their best fitting micro-batch:\n");
  }
  static const char* names[] = {"ddp", "zero2", "zero3"};
  for (int s = 0; s < STRAT_COUNT; s++) {
    Plan up;
    PlanCost uc;
    int ok = planner_best_uniform(d, dev, so, (Strategy)s, &up, &uc) == 0;
    if (show && !json) uniform_text(names[s], ok, &uc);
    cost_json(uni, names[s], ok, &uc);
    if (ok) plan_free(&up);
  }
  if (show && json) {
    char* ptxt = plan_to_json(p, d);
    cJSON_AddItemToObject(root, "plan", cJSON_Parse(ptxt));
    free(ptxt);
    cJSON_AddNumberToObject(root, "micro_batch", c->micro_batch);
    cost_json(root, "predicted", 1, c);
    cJSON_AddItemToObject(root, "uniform", uni);
    uni = NULL;
    cJSON_AddNumberToObject(root, "search_s", search_s);
    char* s = cJSON_PrintUnformatted(root);
    printf("%s\n", s);
    free(s);
  }
  cJSON_Delete(uni);
  cJSON_Delete(root);
  return 0;
}

/* Search options from the flags (--seq defaults to the sequence the device's op times were
** measured at for this model, else the model's maximum). */
static int search_options_from_args(const Args* a, const GptDesc* d, const DeviceInfo* dev,
                                    SearchOptions* so) {
  long T, maxb;
  int def_T = dev->n_op_times && strcmp(dev->compute_model, d->cfg.name) == 0 ? dev->compute_seq
                                                                             : d->cfg.max_seq;
  if (args_int(a, "seq", def_T, 1, d->cfg.max_seq, &T) || args_int(a, "max-batch", 512, 1, 1 << 20, &maxb))
    return -1;
  planner_default_options(so, (int)T);
  so->max_batch = (int)maxb;
  return 0;
}

int cmd_plan(int argc, char** argv) {
  if (argc > 0 && strcmp(argv[0], "--help") == 0) { fputs(plan_help, stdout); return 0; }
  static const char* const opts[] = {"model", "devices", "ranks", "mem-limit", "flops", "bandwidth",
                                     "latency", "threads", "seq", "max-batch", "out", "load", NULL};
  static const char* const sws[] = {"json", NULL};
  Args a;
  GptDesc d;
  DeviceInfo dev;
  SearchOptions so;
  Plan p;
  PlanCost c;
  if (args_parse(&a, "plan", argc, argv, opts, sws) || setup_model(&a, "tiny", &d) ||
      device_from_args(&a, &dev) || search_options_from_args(&a, &d, &dev, &so) ||
      plan_and_report(&d, &dev, &so, args_has(&a, "json"), 0, &p, &c))
    return cli_report_error();
  const char* out = args_get(&a, "out", NULL);
  int rc = out && comm_rank() == 0 ? plan_save(&p, &d, out) : 0;
  plan_free(&p);
  device_free(&dev);
  gpt_desc_free(&d);
  return rc ? cli_report_error() : 0;
}
