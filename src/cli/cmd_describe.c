/*
** cmd_describe.c: `osdp describe`: the operator list of a model with parameters, FLOPs,
** activation bytes and splittability, and the exact per-rank memory a plan would need.
*/
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/plan_svg.h"
#include "cli/setup.h"
#include "comm/comm.h"
#include "core/output.h"
#include "core/util.h"

static const OptionSpec describe_options[] = {
    {"load", "FILE", NULL, "take the model's shape from an llm.c checkpoint or safetensors file"},
    {"batch", "B", "1", "micro-batch per rank the memory is predicted for"},
    {"seq", "T", "the model's max", "sequence length"},
    {"plan", "P", "ddp", "ddp | zero2 | zero3 | plan.json"},
    {"ranks", "N", "the ranks running", "ranks a uniform plan is made for"},
    {"threads", "N", "1", "kernel threads per rank (their scratch counts in the memory)"},
    {"mem-limit", "SIZE", NULL, "with --svg: draw the limit as a line"},
    {"svg", "FILE", NULL, "draw the memory over one step and each operator's strategies (SVG)"},
    {"device", "D", "cpu", "cpu or cuda: the device named in the memory table (the same on both)"},
    {"precision", "fp32|bf16", "fp32",
     "the storage the memory is for (bf16: bf16 activations and a bf16 copy of\n"
     "the weights beside the fp32 ones)"},
    {"json", NULL, NULL, "print the operators and the memory as one JSON object"},
    {NULL, NULL, NULL, NULL}};

static const CommandSpec describe_spec = {
    "describe", "osdp describe [options]",
    "  prints every operator (parameters, forward FLOPs per token, activation bytes per sample,\n"
    "  splittable) with totals, and the per-rank memory the plan needs at that batch and\n"
    "  sequence. --svg FILE draws that memory over one training step (persistent bands, the\n"
    "  transient at each parameter use, the peak) and each operator's strategy per slice, as an\n"
    "  SVG picture for a browser. The memory is the same on every --device (a GPU's arena holds\n"
    "  the same blocks); describe needs no GPU.",
    {setup_model_options, describe_options, setup_plan_switches, NULL},
    NULL};

/* Prints the operator table and totals for people. */
static void describe_table(const GptDesc* d, int T) {
  char ab[32], sum[256];
  printf("model %s: %s\n", d->cfg.name, gpt_config_summary(&d->cfg, sum, sizeof sum));
  printf("%4s  %-12s %-9s %12s %14s %14s  %s\n", "#", "operator", "kind", "params",
         "MFLOP/token", "acts/sample", "split");
  double flops = 0;
  size_t acts = 0;
  for (int i = 0; i < d->nops; i++) {
    const GptOp* op = &d->ops[i];
    double f = gpt_op_flops_per_token(d, op, T);
    size_t a = gpt_op_act_bytes(d, op, 1, T, PRECISION_FP32);
    flops += f; acts += a;
    char split[48];
    if (op->owner >= 0 && op->owner != i) snprintf(split, sizeof split, "tied to %s", d->ops[op->owner].name);
    else snprintf(split, sizeof split, "%s", op->splittable ? "yes" : "no");
    printf("%4d  %-12s %-9s %12zu %14.3f %14s  %s\n", i, op->name, gpt_op_kind_name(op->kind),
           op->n_params, f / 1e6, format_bytes((double)a, ab), split);
  }
  printf("total: %zu parameters (%s fp32), %.3f MFLOP/token forward (x3 for a training step), "
         "%s of activations per sample at seq %d\n", d->n_params,
         format_bytes(4.0 * (double)d->n_params, ab), flops / 1e6,
         format_bytes((double)acts, (char[32]){0}), T);
}

/* Prints the memory prediction of a plan. */
static void describe_memory(const MemPrediction* m, const Plan* p, const char* name,
                            const char* device) {
  char b[6][32];
  printf("memory per rank for plan %s on %d rank(s), micro-batch %d, seq %d, %s (device %s):\n",
         name, p->world, p->micro_batch, p->seq, precision_name(p->precision), device);
  printf("  params %s, grads %s, optimizer %s, activations %s, scratch %s, transient %s\n",
         format_bytes((double)m->params, b[0]), format_bytes((double)m->grads, b[1]),
         format_bytes((double)m->optim, b[2]), format_bytes((double)m->acts, b[3]),
         format_bytes((double)m->scratch, b[4]), format_bytes((double)m->transient, b[5]));
  int R = plan_recompute_count(p);
  if (R)
    printf("  recompute: %d of %d layers keep only their output; activations include the %s "
           "buffer they share\n", R, p->nlayers, format_bytes((double)m->recompute, b[0]));
  printf("  peak %zu bytes (%s)\n", m->peak, format_bytes((double)m->peak, b[0]));
}

/* Prints everything as one JSON object. */
static void describe_json(const GptDesc* d, int T, const Plan* p, const MemPrediction* m,
                          const char* device) {
  printf("{\"device\":\"%s\",\"model\":{\"name\":\"%s\",\"n_layer\":%d,\"n_embd\":%d,\"n_head\":%d,\"vocab_size\":%d,"
         "\"padded_vocab\":%d,\"max_seq\":%d},\"n_params\":%zu,\"seq\":%d,\"ops\":[",
         device, d->cfg.name, d->cfg.n_layer, d->cfg.n_embd, d->cfg.n_head, d->cfg.vocab_size,
         d->cfg.padded_vocab, d->cfg.max_seq, d->n_params, T);
  for (int i = 0; i < d->nops; i++) {
    const GptOp* op = &d->ops[i];
    printf("%s{\"name\":\"%s\",\"kind\":\"%s\",\"params\":%zu,\"flops_per_token\":%.0f,"
           "\"act_bytes_per_sample\":%zu,\"splittable\":%s,\"uses_params_of\":\"%s\"}",
           i ? "," : "", op->name, gpt_op_kind_name(op->kind), op->n_params,
           gpt_op_flops_per_token(d, op, T), gpt_op_act_bytes(d, op, 1, T, PRECISION_FP32),
           op->splittable ? "true" : "false", op->owner >= 0 ? d->ops[op->owner].name : "");
  }
  printf("]");
  if (m)
    printf(",\"memory\":{\"params\":%zu,\"grads\":%zu,\"optim\":%zu,\"acts\":%zu,\"scratch\":%zu,"
           "\"transient\":%zu,\"peak\":%zu,\"recompute_buffer\":%zu},\"recompute_layers\":%d,"
           "\"precision\":\"%s\"",
           m->params, m->grads, m->optim, m->acts, m->scratch, m->transient, m->peak, m->recompute,
           plan_recompute_count(p), precision_name(p->precision));
  printf("}\n");
}

/* A plan file's ranks, micro-batch and sequence against --ranks, --batch and --seq where they
** were given: describing a plan for another shape than it was made for is an error, not a
** silent use of the file's (ranks, B and T are those options' values). Frees the plan on a
** mismatch. */
static int describe_plan_matches(const Args* a, Plan* p, const char* pname, long ranks, long B,
                                 long T) {
  int rc = 0;
  if (args_has(a, "ranks") && p->world != ranks)
    rc = osdp_fail("--ranks %ld differs from the %d rank(s) of plan %s; drop --ranks or re-plan for "
                   "%ld ranks (mpirun -np %ld osdp plan ...)", ranks, p->world, pname, ranks, ranks);
  else if (args_has(a, "batch") && p->micro_batch != B)
    rc = osdp_fail("--batch %ld differs from micro_batch=%d of plan %s; drop --batch or re-plan", B,
                   p->micro_batch, pname);
  else if (args_has(a, "seq") && p->seq != T)
    rc = osdp_fail("--seq %ld differs from seq_len=%d of plan %s; drop --seq or re-plan", T, p->seq,
                   pname);
  if (rc) plan_free(p);
  return rc;
}

int cmd_describe(int argc, char** argv) {
  if (args_help(&describe_spec, argc, argv)) return 0;
  Args a;
  GptDesc d;
  long B, T, ranks, threads;
  size_t limit = 0;
  static const char* const outputs[] = {"svg", NULL};
  if (args_parse(&a, &describe_spec, argc, argv) || setup_claim_files(&a, outputs) ||
      setup_model(&a, "tiny", &d))
    return cli_report_error();
  if (args_int(&a, "batch", 1, 1, 1 << 20, &B) ||
      args_int(&a, "seq", d.cfg.max_seq, 1, d.cfg.max_seq, &T) ||
      args_int(&a, "ranks", comm_size(), 1, 1 << 20, &ranks) ||
      args_int(&a, "threads", 1, 1, 256, &threads) || args_size(&a, "mem-limit", 0, &limit))
    return cli_report_error();
  const char* device = args_get(&a, "device", "cpu");
  if (strcmp(device, "cpu") && strcmp(device, "cuda")) {
    osdp_fail("--device: unknown device '%s': use cpu or cuda", device);
    return cli_report_error();
  }
  Plan p;
  MemPrediction m;
  const char* pname = args_get(&a, "plan", "ddp");
  int s = strategy_parse(strcmp(pname, "ddp") == 0 ? "dp" : pname);
  int rc = s >= 0 ? plan_uniform(&p, &d, (Strategy)s, (int)ranks, (int)B, (int)T)
                  : plan_load(&p, &d, pname);
  if (!rc && s < 0) rc = describe_plan_matches(&a, &p, pname, ranks, B, T);
  if (rc || plan_validate(&p, &d, p.world)) {
    if (!rc) plan_free(&p);
    return cli_report_error();
  }
  if (setup_plan_options(&a, &d, &p) || plan_validate(&p, &d, p.world)) {
    plan_free(&p);
    return cli_report_error();
  }
  plan_predict_memory(&d, &p, (int)threads, &m);
  const char* svg = args_get(&a, "svg", NULL);
  rc = 0;
  if (comm_rank() == 0) {
    if (args_has(&a, "json")) describe_json(&d, p.seq, &p, &m, device);
    else { describe_table(&d, p.seq); describe_memory(&m, &p, pname, device); }
    char title[300];
    snprintf(title, sizeof title, "osdp describe: plan %s for %s", pname, d.cfg.name);
    if (svg) rc = plan_svg_write(svg, &d, &p, (int)threads, limit, title);
  }
  plan_free(&p);
  gpt_desc_free(&d);
  return rc ? cli_report_error() : 0;
}
