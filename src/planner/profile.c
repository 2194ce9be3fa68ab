/* profile.c: measuring device information on the real ranks; see profile.h. */
#include "planner/profile.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm/comm.h"
#include "core/util.h"
#include "kernels/cpu_kernels.h"
#include "model/plan.h"
#include "runtime/engine.h"

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

/* Least-squares fit of t = latency + bytes / bandwidth over the measured points. */
static CollectiveModel fit_alpha_beta(const double* bytes, const double* t, int n) {
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (int i = 0; i < n; i++) { sx += bytes[i]; sy += t[i]; sxx += bytes[i] * bytes[i]; sxy += bytes[i] * t[i]; }
  double slope = (n * sxy - sx * sy) / (n * sxx - sx * sx);
  double icept = (sy - slope * sx) / n;
  if (slope <= 0) slope = t[n - 1] / bytes[n - 1];
  if (icept < 0) icept = 0;
  return (CollectiveModel){.latency_s = icept, .bandwidth_Bps = 1.0 / slope};
}

/* Measures the three collectives at sizes from 4 KiB to 16 MiB. */
static void profile_collectives(DeviceInfo* dev, int verbose) {
  if (comm_size() == 1) {
    for (int k = 0; k < COLL_COUNT; k++) dev->coll[k] = (CollectiveModel){0, 1e15};
    return;
  }
  static const size_t sizes[] = {1024, 16384, 262144, 1048576, 4194304};
  enum { NS = sizeof sizes / sizeof sizes[0] };
  size_t maxn = sizes[NS - 1];
  float* buf = calloc(maxn, sizeof(float));
  float* shard = calloc(maxn, sizeof(float));
  for (int k = 0; k < COLL_COUNT; k++) {
    double bytes[NS], t[NS];
    for (int i = 0; i < NS; i++) {
      size_t n = sizes[i] / (size_t)comm_size() * (size_t)comm_size();
      bytes[i] = 4.0 * (double)n;
      t[i] = time_collective(k, buf, shard, n, 3);
    }
    dev->coll[k] = fit_alpha_beta(bytes, t, NS);
    if (verbose && comm_rank() == 0)
      printf("profile: %-14s latency %.1f us, bandwidth %.3f GB/s\n",
             k == 0 ? "all-reduce" : k == 1 ? "all-gather" : "reduce-scatter",
             1e6 * dev->coll[k].latency_s, dev->coll[k].bandwidth_Bps / 1e9);
  }
  free(buf);
  free(shard);
}

/* sgemm GFLOP/s at the model's MLP shape on the slowest rank (a stand-in FLOP rate for
** unmeasured ops). */
static double profile_sgemm(const GptDesc* d, int T) {
  int M = T < 256 ? 256 : T, K = d->cfg.n_embd, N = 4 * d->cfg.n_embd;
  return -comm_allreduce_max_f64(-kernels_sgemm_gflops(M, N, K));
}

/* Per-op times (slowest rank, mean of steps) of a dp engine at micro-batch B; also the
** optimizer time per parameter and the rest of the step ("overhead"). */
static int profile_batch(const GptDesc* d, const ProfileOptions* o, int B, double* op_s,
                         double* optim_per_param, double* overhead) {
  Plan p;
  TrainOptions opt;
  Engine e;
  train_options_default(&opt);
  opt.threads = o->threads;
  if (plan_uniform(&p, d, STRAT_DP, comm_size(), B, o->seq)) return -1;
  int rc = engine_create(&e, d, &p, &opt);
  plan_free(&p);
  if (rc) return -1;
  Rng r;
  rng_seed(&r, 99 + (uint64_t)comm_rank());
  int BT = B * o->seq;
  for (int i = 0; i < BT; i++) {
    engine_tokens(&e)[i] = (int)rng_below(&r, (uint64_t)d->cfg.vocab_size);
    engine_targets(&e)[i] = (int)rng_below(&r, (uint64_t)d->cfg.vocab_size);
  }
  StepResult sr;
  engine_step(&e, (long)BT * comm_size(), &sr); /* warm-up */
  memset(op_s, 0, (size_t)d->nops * sizeof(double));
  e.acts.op_seconds = op_s;
  double step = 0, optim = 0, comm = 0;
  for (int s = 0; s < o->steps; s++) {
    comm_reset_stats();
    comm_barrier();
    engine_step(&e, (long)BT * comm_size(), &sr);
    CommStats cs = comm_stats();
    step += sr.seconds;
    optim += sr.optim_seconds;
    comm += cs.seconds[0] + cs.seconds[1] + cs.seconds[2];
  }
  double ops = 0;
  for (int i = 0; i < d->nops; i++) { op_s[i] /= o->steps; ops += op_s[i]; }
  for (int i = 0; i < d->nops; i++) op_s[i] = comm_allreduce_max_f64(op_s[i]);
  *optim_per_param = comm_allreduce_max_f64(optim / o->steps) / (double)d->n_params;
  *overhead = comm_allreduce_max_f64((step - optim - comm) / o->steps - ops);
  if (*overhead < 0) *overhead = 0;
  engine_destroy(&e);
  return 0;
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

int profile_device(const GptDesc* d, const ProfileOptions* o, DeviceInfo* dev) {
  memset(dev, 0, sizeof *dev);
  dev->ranks = comm_size();
  dev->threads = o->threads;
  dev->mem_limit = o->mem_limit ? o->mem_limit : default_mem_limit();
  kernels_set_threads(o->threads);
  profile_collectives(dev, o->verbose);
  dev->flops = 1e9 * profile_sgemm(d, o->seq);
  int n = d->nops + 1;
  double* t = calloc((size_t)n * PROFILE_MAX_POINTS, sizeof(double));
  dev->op_names = calloc((size_t)n, sizeof *dev->op_names);
  dev->op_fixed_s = calloc((size_t)n, sizeof(double));
  dev->op_per_sample_s = calloc((size_t)n, sizeof(double));
  if (!t || !dev->op_names || !dev->op_fixed_s || !dev->op_per_sample_s)
    return osdp_fail("out of host memory");
  /* Micro-batches 1, 2, 4, ... until a step takes a quarter second (or 64): the fit then covers
  ** the batches a plan is likely to use without spending long on large models. */
  int Bs[PROFILE_MAX_POINTS], np = 0;
  double optim = 0;
  for (int B = 1; np < PROFILE_MAX_POINTS && B <= 64; B *= 2) {
    double* tb = t + (size_t)np * n, opt, oh;
    if (o->verbose && comm_rank() == 0) {
      printf("profile: timing %s at micro-batch %d, seq %d\n", d->cfg.name, B, o->seq);
      fflush(stdout);
    }
    if (profile_batch(d, o, B, tb, &opt, &oh)) {
      if (np >= 2) break; /* out of memory at a large batch: fit what we have */
      free(t);
      return osdp_fail("profile: cannot run %s here to time it (%s); describe the device with "
                       "--flops instead", d->cfg.name, osdp_last_error());
    }
    tb[d->nops] = oh;
    Bs[np++] = B;
    optim += opt;
    double step = 0;
    for (int i = 0; i < n; i++) step += tb[i];
    if (np >= 2 && step > 0.25) break;
  }
  double* col = malloc((size_t)np * sizeof(double));
  for (int i = 0; i < n && col; i++) {
    snprintf(dev->op_names[i], sizeof dev->op_names[i], "%s", i < d->nops ? d->ops[i].name : "overhead");
    for (int j = 0; j < np; j++) col[j] = t[(size_t)j * n + i];
    fit_op_time(Bs, col, np, &dev->op_fixed_s[i], &dev->op_per_sample_s[i]);
  }
  free(col);
  dev->n_op_times = n;
  dev->optimizer_s_per_param = optim / np;
  snprintf(dev->compute_model, sizeof dev->compute_model, "%s", d->cfg.name);
  dev->compute_seq = o->seq;
  free(t);
  return 0;
}
