/*
** plan_api.c: planning GPT-2 124M through osdp's C API (include/osdp/osdp.h).
**
** Plans gpt2-124m at sequence length 128 under 1.6 GiB per rank, prints the chosen plan (its
** micro-batch, every operator's strategies, the predicted peak against the limit and the
** predicted step time), writes it to OUT.json, reads it back and checks that the plan read
** predicts the same memory and time.
**
**   plan_api OUT.json              2 ranks of 1e11 FLOP/s on one host (the figures below)
**   plan_api OUT.json DEVICES.json the ranks a device file describes (osdp profile --out), its
**                                  limit replaced by 1.6 GiB
**
** The same plan, byte for byte, as
**   osdp plan --model gpt2-124m --ranks 2 --flops 1e11 --mem-limit 1.6GiB --seq 128 --out OUT.json
**   osdp plan --model gpt2-124m --devices DEVICES.json --mem-limit 1.6GiB --seq 128 --out OUT.json
** Build against an installed osdp:
**   cc plan_api.c -o plan_api $(pkg-config --cflags --libs --static osdp)
** Exits 0, or 1 with osdp's one-line error on stderr.
*/
#include <osdp/osdp.h>
#include <stdio.h>
#include <string.h>

/* Prints osdp's message for the failed step `what` (osdp_last_error: one line). */
static void report(const char* what) { fprintf(stderr, "plan_api: %s: %s\n", what, osdp_last_error()); }

/* Prints the operators that own parameters, one line per layer ("h3  ln1 dp | qkv zero3 |
** proj zero2,dp | ...": each op's slices' strategies), so a layer reads at a glance; ops outside
** the layers (embed, lnf) get a line each. An op "LAYER.OP" is in a layer. A sharded op whose
** shard group is smaller than the world shows it: "zero3@4". */
static int print_ops(const OsdpModel* model, const OsdpPlan* plan, const OsdpPlanSummary* s) {
  char layer[32] = "";
  int lines = 0;
  for (int i = 0; i < s->ops; i++) {
    OsdpOpPlan op;
    if (osdp_plan_op(model, plan, i, &op)) return -1;
    if (op.params == 0) continue; /* nothing to plan (attention, gelu; the tied LM head) */
    char* dot = strchr(op.name, '.');
    const char* name = op.name;
    if (dot) {
      *dot = 0; /* op.name is now the layer, dot + 1 the op within it */
      name = dot + 1;
    }
    if (dot && strcmp(layer, op.name) == 0) {
      printf(" |");
    } else {
      printf("%s  %-4s", lines++ ? "\n" : "", dot ? op.name : "");
      snprintf(layer, sizeof layer, "%s", dot ? op.name : "");
    }
    printf(" %s %s", name, op.strategies);
    if (strchr(op.strategies, 'z') && op.shard_group < s->world) printf("@%d", op.shard_group);
  }
  printf("\n");
  return 0;
}

/* Whether two predictions are equal in every figure. */
static int same_prediction(const OsdpPrediction* a, const OsdpPrediction* b) {
  return a->params == b->params && a->grads == b->grads && a->optim == b->optim &&
         a->acts == b->acts && a->scratch == b->scratch && a->transient == b->transient &&
         a->peak == b->peak && a->step_s == b->step_s && a->samples_per_s == b->samples_per_s;
}

int main(int argc, char** argv) {
  if (argc < 2 || argc > 3) {
    fprintf(stderr, "usage: plan_api OUT.json [DEVICES.json]\n");
    return 2;
  }
  const char* out_path = argv[1];
  const char* devices_path = argc > 2 ? argv[2] : NULL;
  /* Every handle starts NULL and is freed at the end (the *_free functions accept NULL), so a
  ** failure at any step jumps there. */
  OsdpModel* model = NULL;
  OsdpDevices* devices = NULL;
  OsdpPlan *plan = NULL, *back = NULL;
  int rc = 1;

  /* The model: a preset name (a model JSON, a config.json or a weights file would do too). */
  if (osdp_model_load("gpt2-124m", &model)) { report("model"); goto done; }
  OsdpModelInfo mi;
  osdp_model_info(model, &mi);

  /* The ranks: a device file, or 2 ranks of 1e11 FLOP/s with the flags' default links. */
  size_t limit = 0;
  if (osdp_parse_size("1.6GiB", &limit)) { report("limit"); goto done; }
  if (devices_path) {
    if (osdp_devices_load(devices_path, &devices)) { report("devices"); goto done; }
  } else {
    OsdpDeviceSpec spec;
    osdp_device_spec_init(&spec);
    spec.ranks = 2;
    spec.flops = 1e11;
    spec.mem_limit = limit;
    if (osdp_devices_new(&spec, &devices)) { report("devices"); goto done; }
  }
  OsdpDeviceSpec ds;
  osdp_devices_describe(devices, &ds);

  /* The search: seq 128 under the limit (replacing a device file's). */
  OsdpSearchOptions so;
  osdp_search_options_init(&so);
  so.seq = 128;
  so.mem_limit = limit;
  printf("osdp %s: planning %s (%zu parameters, %d layers) on %d rank(s), %d per host, seq %d, "
         "limit %zu bytes (%.2f GiB) per rank\n", osdp_version(), mi.name, mi.params, mi.layers,
         ds.ranks, ds.ranks_per_host, so.seq, limit, limit / 1073741824.0);
  if (osdp_plan_search(model, devices, &so, &plan)) { report("search"); goto done; }

  /* What was chosen, and what it costs. */
  OsdpPlanSummary s;
  OsdpPrediction pred;
  osdp_plan_summary(plan, &s);
  if (osdp_plan_predict(model, devices, plan, &pred)) { report("predict"); goto done; }
  printf("plan: micro-batch %d, %d layer(s) recomputed, %s gradient reductions, prefetch %s, "
         "overlap_reduce %s\n", s.micro_batch, s.recompute_layers, s.reduce_dtype,
         s.prefetch ? "on" : "off", s.overlap_reduce ? "on" : "off");
  if (print_ops(model, plan, &s)) { report("operators"); goto done; }
  printf("predicted: peak %zu bytes (%.2f GiB, %.2f%% of the limit), step %.6f s, %.2f samples/s\n",
         pred.peak, pred.peak / 1073741824.0, 100.0 * (double)pred.peak / (double)limit, pred.step_s,
         pred.samples_per_s);
  printf("  params %zu + grads %zu + optimizer %zu + activations %zu + scratch %zu + transient %zu\n",
         pred.params, pred.grads, pred.optim, pred.acts, pred.scratch, pred.transient);

  /* Written, read back, predicted again: the file holds the whole plan. */
  OsdpPrediction again;
  if (osdp_plan_write(model, plan, out_path)) { report("write"); goto done; }
  if (osdp_plan_read(model, out_path, &back)) { report("read"); goto done; }
  if (osdp_plan_predict(model, devices, back, &again)) { report("predict"); goto done; }
  int same = same_prediction(&pred, &again);
  printf("wrote %s; read back: peak %zu bytes, step %.6f s: %s\n", out_path, again.peak,
         again.step_s, same ? "the same prediction" : "A DIFFERENT PREDICTION");
  rc = same ? 0 : 1;

done:
  osdp_plan_free(back);
  osdp_plan_free(plan);
  osdp_devices_free(devices);
  osdp_model_free(model);
  return rc;
}
