/*
** cmd_bench.c: `osdp bench`: times training steps on synthetic tokens and prints ms/step,
** tokens/s, achieved GFLOP/s and, beside it, the sgemm rate OpenBLAS reaches on this machine
** at the model's largest matrix shape, with per-operator times.
**
** FLOPs are counted as 3x the forward matrix-product FLOPs: 2*K*OC per token for every linear
** and the LM head (over the whole padded vocabulary), and for attention's two products 4*NH*hs
** per token and key, over the (T + 1) / 2 keys a causal query meets on average (the useful
** half of the T x T square; the kernels skip the tiles above the diagonal). Elementwise work
** is not counted.
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/setup.h"
#include "comm/comm.h"
#include "core/util.h"
#include "kernels/cpu_dnnl.h"
#include "kernels/cpu_kernels.h"
#include "runtime/engine.h"

static const OptionSpec bench_options[] = {
    {"load", "FILE", NULL, "take the model (shape and weights) from an llm.c checkpoint or safetensors"},
    {"batch", "B", "4", "micro-batch per rank"},
    {"seq", "T", "the model's max, at most 256", "sequence length"},
    {"steps", "N", "5", "timed steps (after one warm-up step)"},
    {"plan", "P", "ddp", "ddp | zero2 | zero3 | plan.json"},
    {"json", NULL, NULL, "print the figures as one JSON object"},
    {NULL, NULL, NULL, NULL}};

static const CommandSpec bench_spec = {
    "bench", "[mpirun -np N] osdp bench [options]",
    "  times N training steps (after one warm-up step) on random tokens. GFLOP/s count the\n"
    "  model's useful work (gpt_step_useful_flops: causal attention's half of the T x T\n"
    "  products): a recomputed forward is not counted again.",
    {setup_model_options, bench_options, setup_plan_switches, setup_optimizer_options,
     setup_rank_options, setup_device_options, NULL},
    NULL};

/* Gives the engine a micro-batch of random tokens with next-token targets (this rank's, step's). */
static void random_batch(Engine* e, const GptDesc* d, const Plan* p, long step) {
  Rng r;
  rng_seed(&r, 0x5eed + (uint64_t)step * 7919 + (uint64_t)comm_rank());
  int BT = p->micro_batch * p->seq;
  int* tok = malloc((size_t)BT * sizeof *tok);
  int* tg = malloc((size_t)BT * sizeof *tg);
  if (!tok || !tg) { fprintf(stderr, "osdp: error: out of host memory\n"); comm_abort(2); }
  for (int i = 0; i < BT; i++) tok[i] = (int)rng_below(&r, (uint64_t)d->cfg.vocab_size);
  for (int i = 0; i < BT; i++) tg[i] = (i + 1) % p->seq ? tok[i + 1] : (int)rng_below(&r, (uint64_t)d->cfg.vocab_size);
  engine_set_batch(e, tok, tg);
  free(tok);
  free(tg);
}

/* Prints each communicator's time and payload per step (rank 0's counters): for people a line
** per communicator, with --json one array member each. */
static void print_comms(int json, long steps) {
  Comm* comms[32];
  int n = comm_list(comms, 32);
  if (n > 32) n = 32;
  static const char* kinds[COMM_KINDS] = {"allreduce", "allgather", "reduce_scatter"};
  if (json) printf(",\"comms\":[");
  else printf("  communication per communicator (rank 0, per step):\n");
  int first = 1;
  for (int i = 0; i < n; i++) {
    CommStats st = comm_stats_of(comms[i]);
    long calls = 0;
    for (int k = 0; k < COMM_KINDS; k++) calls += st.calls[k];
    if (comm_size_of(comms[i]) == 1 || (!json && !calls)) continue;
    if (json) {
      printf("%s{\"name\":\"%s\",\"ranks\":%d", first ? "" : ",", comm_name(comms[i]),
             comm_size_of(comms[i]));
      for (int k = 0; k < COMM_KINDS; k++)
        printf(",\"%s\":{\"s\":%.5f,\"bytes\":%.0f,\"calls\":%.1f}", kinds[k],
               st.seconds[k] / (double)steps, st.bytes[k] / (double)steps,
               (double)st.calls[k] / (double)steps);
      printf("}");
    } else {
      printf("    %-22s %2d ranks:", comm_name(comms[i]), comm_size_of(comms[i]));
      for (int k = 0; k < COMM_KINDS; k++)
        if (st.calls[k])
          printf("  %s %.1f ms %.1f MB", kinds[k], 1e3 * st.seconds[k] / (double)steps,
                 st.bytes[k] / (double)steps / 1e6);
      printf("\n");
    }
    first = 0;
  }
  if (json) printf("]");
}

/* The matrix product a bench step is compared with, at the LM head's shape: its rate, what it
** is ("sgemm", "bf16 matmul", "matmul") and which library or backend ran it. */
typedef struct BenchRef {
  double gflops;
  const char* kind;
  char name[128];
} BenchRef;

/* Measures the reference of a step of precision prec on backend bk (rank 0): the CPU in fp32 the
** linear layers' sgemm, in bf16 oneDNN's bf16 product; another backend its own matmul in its
** mode. */
static void bench_reference(const Backend* bk, Precision prec, MatmulMode mode, int M, int N, int K,
                            BenchRef* r) {
  if (bk == backend_cpu() && prec == PRECISION_BF16) {
    r->gflops = dnnl_bf16_gflops(M, N, K);
    r->kind = "bf16 matmul";
    snprintf(r->name, sizeof r->name, "%s", dnnl_describe());
  } else if (bk == backend_cpu()) {
    r->gflops = backend_matmul_gflops(bk, M, N, K);
    r->kind = "sgemm";
    snprintf(r->name, sizeof r->name, "%s", cpu_sgemm_name());
  } else {
    r->gflops = backend_matmul_gflops(bk, M, N, K);
    r->kind = "matmul";
    snprintf(r->name, sizeof r->name, "%s, %s", bk->name, matmul_mode_name(mode));
  }
}

/* The plan's hybrid and reduction settings in words ("" when all are the defaults). */
static void plan_extras(const Plan* p, char* out, size_t cap) {
  int g = 0;
  for (int i = 0; i < p->nops; i++) if (p->ops[i].group) g = p->ops[i].group;
  char groups[48] = "";
  if (g) snprintf(groups, sizeof groups, ", shard groups of %d", g);
  snprintf(out, cap, "%s%s%s%s", groups, p->overlap_reduce ? ", overlapped reduce-scatters" : "",
           p->reduce_dtype == REDUCE_BF16 ? ", bf16 reductions" : "", p->prefetch ? ", prefetch" : "");
}

int cmd_bench(int argc, char** argv) {
  if (args_help(&bench_spec, argc, argv)) return 0;
  Args a;
  GptDesc d;
  Plan p;
  TrainOptions opt;
  Engine e;
  long B, T, steps;
  MatmulMode matmul;
  if (args_parse(&a, &bench_spec, argc, argv) || setup_matmul_mode(&a, &matmul) ||
      setup_model(&a, "tiny", &d) ||
      args_int(&a, "batch", 4, 1, 1 << 20, &B) || args_int(&a, "seq", d.cfg.max_seq < 256 ? d.cfg.max_seq : 256, 1, d.cfg.max_seq, &T) ||
      args_int(&a, "steps", 5, 1, 1 << 20, &steps) || setup_train_options(&a, &opt) ||
      setup_plan(&a, &d, (int)B, (int)T, args_has(&a, "batch"), args_has(&a, "seq"), &p) ||
      engine_create(&e, &d, &p, &opt))
    return cli_report_error();
  double* op_s = calloc((size_t)d.nops, sizeof(double));
  StepResult sr;
  random_batch(&e, &d, &p, 0);
  engine_step(&e, plan_global_batch(&p) * p.seq, NULL, NULL, &sr); /* warm-up */
  /* On the CPU the per-op clock costs nothing and every timed step feeds the breakdown; on a GPU
  ** reading it waits for the device after each op, so the timed steps run untouched and one
  ** extra step gives the breakdown. */
  int sync_clock = opt.backend && opt.backend->device_memory;
  if (!sync_clock) engine_time_ops(&e, op_s, NULL);
  comm_reset_stats();
  double total = 0, worst = 0, optim = 0;
  double* times = calloc((size_t)steps, sizeof(double));
  if (!times) { osdp_fail("out of memory"); return cli_report_error(); }
  for (long s = 1; s <= steps; s++) {
    random_batch(&e, &d, &p, s);
    comm_barrier(comm_world());
    engine_step(&e, plan_global_batch(&p) * p.seq, NULL, NULL, &sr);
    double t = comm_allreduce_max_f64(comm_world(), sr.seconds);
    total += t;
    times[s - 1] = t;
    optim += sr.optim_seconds;
    if (t > worst) worst = t;
  }
  double median_ms = 1e3 * median_of(times, (int)steps);
  free(times);
  CommStats cs = comm_stats();
  if (sync_clock) {
    engine_time_ops(&e, op_s, NULL);
    engine_step(&e, plan_global_batch(&p) * p.seq, NULL, NULL, &sr);
    for (int i = 0; i < d.nops; i++) op_s[i] *= (double)steps; /* per step below */
  }
  double ms = 1e3 * total / (double)steps;
  double tokens = (double)plan_global_batch(&p) * p.seq;
  double flops = gpt_step_useful_flops(&d, p.micro_batch, p.seq);
  double gflops = flops / (total / steps) / 1e9; /* per rank */
  int BT = p.micro_batch * p.seq;
  const Backend* bk = opt.backend ? opt.backend : backend_cpu();
  BenchRef rf = {0};
  if (comm_rank() == 0) bench_reference(bk, p.precision, matmul, BT, d.cfg.padded_vocab, d.cfg.n_embd, &rf);
  double ref = rf.gflops;
  double peak_max = comm_allreduce_max_f64(comm_world(), (double)engine_peak_bytes(&e, NULL));
  double comm_s = cs.seconds[0] + cs.seconds[1] + cs.seconds[2];
  if (comm_rank() == 0) {
    char pk[32], pr[32];
    if (args_has(&a, "json")) {
      printf("{\"model\":\"%s\",\"plan\":\"%s\",\"ranks\":%d,\"micro_batch\":%d,\"seq\":%d,"
             "\"threads\":%d,\"ms_per_step\":%.3f,\"tokens_per_s\":%.1f,\"gflops_per_rank\":%.2f,"
             "\"sgemm_gflops\":%.2f,\"reference_matmul\":\"%s\",\"ratio\":%.4f,\"peak_bytes\":%.0f,\"predicted_peak_bytes\":%zu,"
             "\"comm_s_per_step\":%.4f,\"recompute_layers\":%d,\"device\":\"%s\",\"matmul\":\"%s\","
             "\"tf32\":\"%s\",\"precision\":\"%s\",\"flops_per_token\":%.0f,"
             "\"reduce_dtype\":\"%s\","
             "\"overlap_reduce\":%s,\"prefetch\":%s,\"median_ms_per_step\":%.3f,"
             "\"median_tokens_per_s\":%.1f,\"optimizer_ms_per_step\":%.3f",
             d.cfg.name, args_get(&a, "plan", "ddp"), comm_size(), p.micro_batch, p.seq, opt.threads,
             ms, tokens / (ms / 1e3), gflops, ref,
             rf.name,
             ref > 0 ? gflops / ref : 0, peak_max, e.predicted.peak,
             comm_s / steps, plan_recompute_count(&p), bk->name, matmul_mode_name(matmul),
             matmul == MATMUL_TF32 ? "on" : "off", precision_name(p.precision),
             flops / (double)BT, reduce_dtype_name(p.reduce_dtype), p.overlap_reduce ? "true" : "false",
             p.prefetch ? "true" : "false", median_ms, tokens / (median_ms / 1e3), 1e3 * optim / steps);
      print_comms(1, steps);
      printf("}\n");
    } else {
      char extras[200];
      plan_extras(&p, extras, sizeof extras);
      printf("osdp bench: %s, plan %s%s, %d rank(s) x micro-batch %d x seq %d, %d thread(s) per rank, "
             "%d of %d layers recompute\n", d.cfg.name, args_get(&a, "plan", "ddp"), extras, comm_size(),
             p.micro_batch, p.seq, opt.threads, plan_recompute_count(&p), p.nlayers);
      printf("  %.1f ms/step (median %.1f, slowest %.1f), %.1f tokens/s global, %.1f GFLOP/s per rank\n",
             ms, median_ms, 1e3 * worst, tokens / (ms / 1e3), gflops);
      printf("  %s at %d x %d x %d (%s): %.1f GFLOP/s -> step reaches %.0f%% of it\n", rf.kind, BT,
             d.cfg.padded_vocab, d.cfg.n_embd, rf.name, ref, ref > 0 ? 100 * gflops / ref : 0);
      printf("  peak memory %s per rank (predicted %s), communication %.1f ms/step (rank 0, blocking part)\n",
             format_bytes(peak_max, pk), format_bytes((double)e.predicted.peak, pr), 1e3 * comm_s / steps);
      if (comm_size() > 1) print_comms(0, steps);
      printf("  time per operator kind (rank 0, forward+backward, ms/step):\n");
      double per_kind[OP_KIND_COUNT] = {0};
      for (int i = 0; i < d.nops; i++) per_kind[d.ops[i].kind] += op_s[i];
      double accounted = 0;
      for (int k = 0; k < OP_KIND_COUNT; k++) accounted += per_kind[k];
      for (int k = 0; k < OP_KIND_COUNT; k++)
        if (per_kind[k] > 0) printf("    %-10s %8.1f\n", gpt_op_kind_name((OpKind)k), 1e3 * per_kind[k] / steps);
      /* rank 0's AdamW (and zero2's gathers of updated shards), then the rest: the wait for the
      ** gradient all-reduces, the gradient norm, zeroing and the step's bookkeeping */
      printf("    %-10s %8.1f (AdamW, zero2's gathers of the updated shards)\n", "optimizer",
             1e3 * optim / steps);
      printf("    %-10s %8.1f (gradient sync, norm, zeroing)\n", "other",
             ms - 1e3 * (accounted + optim) / steps);
    }
  }
  free(op_s);
  engine_destroy(&e);
  plan_free(&p);
  gpt_desc_free(&d);
  return 0;
}
