/* profile.c: measuring device information on the real ranks; see profile.h.
**
** What is measured, and how it is kept apart:
**  - collectives: each kind alone, from 1 KiB to 16 MiB, the slowest rank's best of several
**    runs; fitted by least squares on RELATIVE error, so small messages (latency) are as right
**    as large ones (bandwidth); the largest relative residual is kept in the device file;
**  - compute: every op's forward+backward time with plain local parameter hooks (no arena, no
**    communication inside the timers), at micro-batch 1, 2, 4, ... and, for the splittable
**    ops, at k = 2, 4, 8 slices; fitted as fixed + per-sample seconds;
**  - the rest of a step ("overhead") and the optimizer: a real dp engine step minus its op
**    compute, optimizer and communication waits;
**  - overlap: the share of a non-blocking collective that proceeds beside compute, fitted so
**    that the cost model's replay of a real dp step (all-reduce buckets) and of a real zero3
**    step with prefetch (all-gathers) waits as long as the measured step did.
*/
#include "planner/profile.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm/comm.h"
#include "core/util.h"
#include "kernels/cpu_kernels.h"
#include "model/gpt_step.h"
#include "model/plan.h"
#include "planner/cost.h"
#include "runtime/engine.h"

/* ---- Collectives ------------------------------------------------------------------------- */

/* Seconds of one collective of kind on a full buffer of n floats: the slowest rank's best of
** reps runs (after a warm-up). */
static double time_collective(int kind, float* buf, float* shard, size_t n, int reps) {
  int N = comm_size();
  size_t sh = n / (size_t)N;
  double best = 1e30;
  for (int r = 0; r <= reps; r++) {
    comm_barrier();
    double t0 = now_seconds();
    if (kind == COLL_ALLREDUCE) comm_allreduce_f32(buf, n);
    else if (kind == COLL_ALLGATHER) comm_allgather_into_f32(shard, buf, sh);
    else comm_reduce_scatter_add_f32(buf, shard, sh);
    double t = comm_allreduce_max_f64(now_seconds() - t0);
    if (r > 0 && t < best) best = t;
  }
  return best;
}

/* Fit of t = latency + bytes / bandwidth minimising the sum of squared RELATIVE errors
** (weights 1 / t^2), so that every size counts alike; the largest relative residual too. */
static CollectiveModel fit_alpha_beta(const double* x, const double* t, int n) {
  double s0 = 0, s1 = 0, s2 = 0, r0 = 0, r1 = 0;
  for (int i = 0; i < n; i++) {
    double w = 1.0 / (t[i] * t[i]);
    s0 += w; s1 += w * x[i]; s2 += w * x[i] * x[i]; r0 += w * t[i]; r1 += w * x[i] * t[i];
  }
  double den = s0 * s2 - s1 * s1;
  double slope = den > 0 ? (s0 * r1 - s1 * r0) / den : t[n - 1] / x[n - 1];
  double icept = (r0 - slope * s1) / s0;
  if (slope <= 0) { slope = t[n - 1] / x[n - 1]; icept = 0; }
  if (icept < 0) { icept = 0; slope = r1 / s2; } /* through the origin */
  CollectiveModel c = {.latency_s = icept, .bandwidth_Bps = 1.0 / slope};
  for (int i = 0; i < n; i++) {
    double e = (icept + slope * x[i] - t[i]) / t[i];
    if (e < 0) e = -e;
    if (e > c.residual) c.residual = e;
  }
  return c;
}

/* Measures the three collectives at sizes from 1 KiB to 16 MiB. */
static int profile_collectives(DeviceInfo* dev, int verbose) {
  if (comm_size() == 1) {
    for (int k = 0; k < COLL_COUNT; k++) dev->coll[k] = (CollectiveModel){0, 1e15, 0, 0};
    return 0;
  }
  static const size_t sizes[] = {256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304};
  enum { NS = sizeof sizes / sizeof sizes[0] };
  size_t maxn = sizes[NS - 1];
  float* buf = calloc(maxn, sizeof(float));
  float* shard = calloc(maxn, sizeof(float));
  if (!buf || !shard) { free(buf); free(shard); return osdp_fail("out of host memory"); }
  static const char* names[] = {"all-reduce", "all-gather", "reduce-scatter"};
  for (int k = 0; k < COLL_COUNT; k++) {
    double bytes[NS], t[NS];
    for (int i = 0; i < NS; i++) {
      size_t n = sizes[i] / (size_t)comm_size() * (size_t)comm_size();
      bytes[i] = 4.0 * (double)n;
      t[i] = time_collective(k, buf, shard, n, n <= 65536 ? 9 : 3);
    }
    dev->coll[k] = fit_alpha_beta(bytes, t, NS);
    if (verbose && comm_rank() == 0)
      printf("profile: %-14s latency %6.1f us, bandwidth %6.3f GB/s (fit within %.0f%% from 1 KiB "
             "to 16 MiB)\n", names[k], 1e6 * dev->coll[k].latency_s, dev->coll[k].bandwidth_Bps / 1e9,
             100 * dev->coll[k].residual);
  }
  free(buf);
  free(shard);
  return 0;
}

/* sgemm GFLOP/s at the model's MLP shape on the slowest rank (a stand-in FLOP rate for
** unmeasured ops). */
static double profile_sgemm(const GptDesc* d, int T) {
  int M = T < 256 ? 256 : T, K = d->cfg.n_embd, N = 4 * d->cfg.n_embd;
  return -comm_allreduce_max_f64(-kernels_sgemm_gflops(M, N, K));
}

/* ---- Compute: the model with plain local parameters -------------------------------------- */

/* Every parameter block and gradient in host memory, and one micro-batch's buffers: the
** step's math with nothing else in the timers. */
typedef struct Bench {
  const GptDesc* d;
  int* slices;
  float** w;
  float** g;
  GptActs a;
} Bench;

/* The hooks: slices are views into the local blocks. */
static void* bench_weight(void* ctx, int owner, int slice, GptPhase ph) {
  Bench* b = ctx;
  (void)ph;
  return b->w[owner] + gpt_slice_offset(&b->d->ops[owner], b->slices[owner], slice);
}
static void bench_release(void* ctx, int owner, int slice, GptPhase ph) { (void)ctx, (void)owner, (void)slice, (void)ph; }
static void* bench_grad(void* ctx, int owner, int slice) {
  Bench* b = ctx;
  return b->g[owner] + gpt_slice_offset(&b->d->ops[owner], b->slices[owner], slice);
}
static void bench_release_grad(void* ctx, int owner, int slice) { (void)ctx, (void)owner, (void)slice; }

/* Frees a bench. */
static void bench_free(Bench* b) {
  for (int i = 0; b->d && i < b->d->nops; i++) {
    if (b->w) free(b->w[i]);
    if (b->g) free(b->g[i]);
    if (b->a.op_acts) free(b->a.op_acts[i]);
  }
  free(b->w);
  free(b->g);
  free(b->a.op_acts);
  free(b->a.scratch);
  free(b->slices);
  memset(b, 0, sizeof *b);
}

/* Builds a bench for micro-batch B: weights at the model's initial values, random tokens. */
static int bench_init(Bench* b, const GptDesc* d, int B, int T, int threads) {
  memset(b, 0, sizeof *b);
  b->d = d;
  int n = d->nops;
  b->slices = calloc((size_t)n, sizeof *b->slices);
  b->w = calloc((size_t)n, sizeof *b->w);
  b->g = calloc((size_t)n, sizeof *b->g);
  b->a = (GptActs){.B = B, .T = T, .elem = sizeof(float)};
  b->a.op_acts = calloc((size_t)n, sizeof *b->a.op_acts);
  b->a.scratch = malloc(gpt_scratch_bytes(d, B, T, sizeof(float), threads));
  int ok = b->slices && b->w && b->g && b->a.op_acts && b->a.scratch;
  for (int i = 0; ok && i < n; i++) {
    b->slices[i] = 1;
    b->a.op_acts[i] = calloc(1, gpt_op_act_bytes(d, &d->ops[i], B, T, sizeof(float)) + 64);
    ok = b->a.op_acts[i] != NULL;
    if (!ok || !d->ops[i].n_params) continue;
    b->w[i] = malloc(d->ops[i].n_params * sizeof(float));
    b->g[i] = calloc(d->ops[i].n_params, sizeof(float));
    ok = b->w[i] && b->g[i];
    for (size_t j = 0; ok && j < d->ops[i].n_params; j++) b->w[i][j] = gpt_init_value(d, i, j, 1337);
  }
  if (!ok) { bench_free(b); return osdp_fail("out of host memory"); }
  Rng r;
  rng_seed(&r, 99 + (uint64_t)comm_rank());
  for (int i = 0; i < B * T; i++) {
    gpt_acts_tokens(d, &b->a)[i] = (int)rng_below(&r, (uint64_t)d->cfg.vocab_size);
    gpt_acts_targets(d, &b->a)[i] = (int)rng_below(&r, (uint64_t)d->cfg.vocab_size);
  }
  return 0;
}

/* Splits every splittable op into k slices (as far as its rows allow). */
static void bench_set_slices(Bench* b, int k) {
  for (int i = 0; i < b->d->nops; i++) {
    const GptOp* op = &b->d->ops[i];
    int kk = op->splittable ? k : 1;
    if ((size_t)kk > op->rows) kk = (int)op->rows;
    b->slices[i] = kk < 1 ? 1 : kk;
  }
}

/* Mean forward+backward seconds per op over `steps` steps (after one warm-up), the slowest
** rank's, into op_s[nops]. */
static void bench_time(Bench* b, int steps, double* op_s) {
  const GptDesc* d = b->d;
  GptParamHooks h = {b, bench_weight, bench_release, bench_grad, bench_release_grad};
  for (int s = 0; s <= steps; s++) {
    b->a.op_seconds = s > 0 ? op_s : NULL;
    if (s == 1) memset(op_s, 0, (size_t)d->nops * sizeof(double));
    gpt_forward_f32(d, &b->a, &h, b->slices, 1e-3, NULL);
    gpt_backward_f32(d, &b->a, &h, b->slices);
  }
  b->a.op_seconds = NULL;
  for (int i = 0; i < d->nops; i++) op_s[i] = comm_allreduce_max_f64(op_s[i] / steps);
}

/* ---- Engine steps: optimizer, overhead, overlap ---------------------------------------- */

/* What a few real engine steps of one plan measured (slowest rank, means per step). */
typedef struct EngineMeasure {
  double step, optim, comm, wait[COMM_KINDS];
} EngineMeasure;

/* Runs `steps` steps (after one warm-up) of plan p on a fresh engine. */
static int measure_engine(const GptDesc* d, const Plan* p, int threads, int steps, EngineMeasure* m) {
  TrainOptions opt;
  Engine e;
  train_options_default(&opt);
  opt.threads = threads;
  if (engine_create(&e, d, p, &opt)) { engine_destroy(&e); return -1; }
  Rng r;
  rng_seed(&r, 99 + (uint64_t)comm_rank());
  int BT = p->micro_batch * p->seq;
  for (int i = 0; i < BT; i++) {
    engine_tokens(&e)[i] = (int)rng_below(&r, (uint64_t)d->cfg.vocab_size);
    engine_targets(&e)[i] = (int)rng_below(&r, (uint64_t)d->cfg.vocab_size);
  }
  StepResult sr;
  engine_step(&e, (long)BT * comm_size(), &sr); /* warm-up */
  memset(m, 0, sizeof *m);
  for (int s = 0; s < steps; s++) {
    comm_reset_stats();
    comm_barrier();
    engine_step(&e, (long)BT * comm_size(), &sr);
    CommStats cs = comm_stats();
    m->step += sr.seconds;
    m->optim += sr.optim_seconds;
    for (int k = 0; k < COMM_KINDS; k++) {
      m->wait[k] += cs.seconds[k];
      m->comm += cs.seconds[k];
    }
  }
  m->step = comm_allreduce_max_f64(m->step / steps);
  m->optim = comm_allreduce_max_f64(m->optim / steps);
  m->comm = comm_allreduce_max_f64(m->comm / steps);
  for (int k = 0; k < COMM_KINDS; k++) m->wait[k] = comm_allreduce_max_f64(m->wait[k] / steps);
  engine_destroy(&e);
  return 0;
}

/* The overlap rate of collective `kind` in [0, 1] at which the cost model's replay of plan p
** waits `measured` seconds for that kind (bisection: the wait falls as the rate rises). */
static double fit_overlap(const GptDesc* d, DeviceInfo* dev, const Plan* p, int kind, double measured) {
  double lo = 0, hi = 1;
  PlanCost c;
  dev->coll[kind].overlap = 0;
  if (plan_cost(d, dev, p, &c) || c.exposed_s[kind] <= measured) return 0;
  dev->coll[kind].overlap = 1;
  if (plan_cost(d, dev, p, &c) || c.exposed_s[kind] >= measured) return 1;
  for (int it = 0; it < 30; it++) {
    double mid = 0.5 * (lo + hi);
    dev->coll[kind].overlap = mid;
    if (plan_cost(d, dev, p, &c)) break;
    if (c.exposed_s[kind] > measured) lo = mid; else hi = mid;
  }
  return 0.5 * (lo + hi);
}

/* Physical memory of this host divided among the ranks (the default memory limit). */
static size_t default_mem_limit(void) {
  long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
  return (size_t)pages * (size_t)psz / (size_t)comm_size();
}

#define PROFILE_MAX_POINTS 7

/* Least-squares fit t = fixed + per * B of one op over the measured micro-batches, with both
** coefficients kept non-negative. */
static void fit_op_time(const int* B, const double* t, int n, double* fixed, double* per) {
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (int i = 0; i < n; i++) { sx += B[i]; sy += t[i]; sxx += (double)B[i] * B[i]; sxy += B[i] * t[i]; }
  double den = n * sxx - sx * sx;
  *per = den > 0 ? (n * sxy - sx * sy) / den : t[n - 1] / B[n - 1];
  *fixed = (sy - *per * sx) / n;
  if (*per < 0) { *per = 0; *fixed = sy / n; }
  if (*fixed < 0) { *fixed = 0; *per = sxy / sxx; }
}

/* Prints a progress line on rank 0. */
static void progress(const ProfileOptions* o, const char* what, int B) {
  if (!o->verbose || comm_rank() != 0) return;
  printf("profile: %s at micro-batch %d, seq %d\n", what, B, o->seq);
  fflush(stdout);
}

/* Times every op at micro-batches 1, 2, 4, ... (until a step takes a quarter second, or 64)
** unsplit, then at k = 2, 4, 8 at the first, middle and last of those batches; fits each op
** per slice count. Fills dev->op_times[0..nops) and returns the batches in Bs (count *np). */
static int profile_compute(const GptDesc* d, const ProfileOptions* o, DeviceInfo* dev, int* Bs, int* np) {
  int n = d->nops;
  double* t = calloc((size_t)n * PROFILE_MAX_POINTS * DEVICE_SLICE_LEVELS, sizeof(double));
  double* col = malloc(PROFILE_MAX_POINTS * sizeof(double));
  if (!t || !col) { free(t); free(col); return osdp_fail("out of host memory"); }
#define AT(l, j, i) t[((size_t)(l) * PROFILE_MAX_POINTS + (size_t)(j)) * (size_t)n + (size_t)(i)]
  int rc = 0;
  *np = 0;
  for (int B = 1; *np < PROFILE_MAX_POINTS && B <= 64; B *= 2) {
    Bench b;
    progress(o, "timing every operator", B);
    if (bench_init(&b, d, B, o->seq, o->threads)) { rc = *np >= 2 ? 0 : -1; break; }
    bench_time(&b, o->steps, &AT(0, *np, 0));
    bench_free(&b);
    Bs[(*np)++] = B;
    double step = 0;
    for (int i = 0; i < n; i++) step += AT(0, *np - 1, i);
    if (*np >= 2 && step > 0.25) break;
  }
  int sample[3] = {0, *np / 2, *np - 1};
  for (int si = 0; !rc && si < 3; si++) {
    int j = sample[si];
    if (si > 0 && j == sample[si - 1]) continue;
    Bench b;
    progress(o, "timing split operators (k = 2, 4, 8)", Bs[j]);
    if (bench_init(&b, d, Bs[j], o->seq, o->threads)) { rc = -1; break; }
    for (int l = 1; l < DEVICE_SLICE_LEVELS; l++) {
      bench_set_slices(&b, 1 << l);
      bench_time(&b, o->steps, &AT(l, j, 0));
    }
    bench_free(&b);
  }
  for (int i = 0; !rc && i < n; i++) {
    OpTime* ot = &dev->op_times[i];
    snprintf(ot->name, sizeof ot->name, "%s", d->ops[i].name);
    for (int l = 0; l < DEVICE_SLICE_LEVELS; l++) {
      if (l > 0 && !(d->ops[i].splittable || d->ops[i].kind == OP_LMHEAD)) continue;
      int Bl[PROFILE_MAX_POINTS], m = 0;
      for (int j = 0; j < *np; j++) {
        if (l > 0 && j != sample[0] && j != sample[1] && j != sample[2]) continue;
        Bl[m] = Bs[j];
        col[m++] = AT(l, j, i);
      }
      fit_op_time(Bl, col, m, &ot->fixed_s[l], &ot->per_sample_s[l]);
      ot->measured[l] = 1;
    }
  }
#undef AT
  free(t);
  free(col);
  return rc;
}

/* Measures the optimizer rate and the overhead (a dp engine at each profiled micro-batch) and
** the overlap rates (at the largest one), into dev. */
static int profile_steps(const GptDesc* d, const ProfileOptions* o, DeviceInfo* dev, const int* Bs,
                         int np) {
  int N = comm_size(), B = 0;
  double optim = 0, ov[PROFILE_MAX_POINTS];
  int Bok[PROFILE_MAX_POINTS], m = 0;
  EngineMeasure em = {0};
  Plan p;
  for (int j = 0; j < np; j++) {
    progress(o, "timing engine steps (optimizer, overhead, overlap)", Bs[j]);
    if (plan_uniform(&p, d, STRAT_DP, N, Bs[j], o->seq)) return -1;
    int rc = measure_engine(d, &p, o->threads, o->steps, &em);
    if (rc) { plan_free(&p); if (m >= 1) break; return -1; }
    /* What the replay would give without overhead and optimizer: compute + communication. */
    PlanCost c;
    dev->coll[COLL_ALLREDUCE].overlap = 0;
    rc = plan_cost(d, dev, &p, &c);
    plan_free(&p);
    if (rc) return -1;
    ov[m] = em.step - em.optim - em.comm - c.compute_s;
    if (ov[m] < 0) ov[m] = 0;
    Bok[m++] = Bs[j];
    optim += em.optim;
    B = Bs[j];
  }
  dev->optimizer_s_per_param = optim / m / (double)d->n_params;
  OpTime* oh = &dev->op_times[d->nops];
  snprintf(oh->name, sizeof oh->name, "overhead");
  fit_op_time(Bok, ov, m, &oh->fixed_s[0], &oh->per_sample_s[0]);
  oh->measured[0] = 1;
  if (N == 1) return 0;
  /* Overlap: the last dp measurement's all-reduce wait; then zero3 with prefetch. */
  if (plan_uniform(&p, d, STRAT_DP, N, B, o->seq)) return -1;
  dev->coll[COLL_ALLREDUCE].overlap = fit_overlap(d, dev, &p, COLL_ALLREDUCE, em.wait[COMM_ALLREDUCE]);
  plan_free(&p);
  if (plan_uniform(&p, d, STRAT_ZERO3, N, B, o->seq)) return -1;
  p.prefetch = 1;
  int rc = measure_engine(d, &p, o->threads, o->steps, &em);
  if (!rc) dev->coll[COLL_ALLGATHER].overlap = fit_overlap(d, dev, &p, COLL_ALLGATHER, em.wait[COMM_ALLGATHER]);
  plan_free(&p);
  if (rc) osdp_clear_error(); /* zero3 did not fit here: leave the all-gather overlap at 0 */
  if (o->verbose && comm_rank() == 0)
    printf("profile: overlap beside compute: all-reduce %.0f%%, all-gather %.0f%% (fitted at "
           "micro-batch %d)\n", 100 * dev->coll[COLL_ALLREDUCE].overlap,
           100 * dev->coll[COLL_ALLGATHER].overlap, B);
  return 0;
}

int profile_device(const GptDesc* d, const ProfileOptions* o, DeviceInfo* dev) {
  memset(dev, 0, sizeof *dev);
  dev->ranks = comm_size();
  dev->threads = o->threads;
  dev->mem_limit = o->mem_limit ? o->mem_limit : default_mem_limit();
  kernels_set_threads(o->threads);
  if (profile_collectives(dev, o->verbose)) return -1;
  dev->flops = 1e9 * profile_sgemm(d, o->seq);
  if (device_alloc_op_times(dev, d->nops + 1)) return -1;
  snprintf(dev->compute_model, sizeof dev->compute_model, "%s", d->cfg.name);
  dev->compute_seq = o->seq;
  int Bs[PROFILE_MAX_POINTS], np = 0;
  if (profile_compute(d, o, dev, Bs, &np) || profile_steps(d, o, dev, Bs, np)) {
    device_free(dev);
    return osdp_fail("profile: cannot run %s here to time it (%s); describe the device with "
                     "--flops instead", d->cfg.name, osdp_last_error());
  }
  return 0;
}
