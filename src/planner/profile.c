/* profile.c: measuring device information on the real ranks; see profile.h.
**
** What is measured, and how it is kept apart:
**  - collectives: each kind alone, from 1 KiB to 16 MiB, the slowest rank's best of several
**    runs; fitted by least squares on RELATIVE error, so small messages (latency) are as right
**    as large ones (bandwidth); the largest relative residual is kept in the device file. On
**    one host, one level (the intra-host one; `osdp plan --inter-bandwidth` can describe hosts
**    you do not have). When the job spans hosts (comm_ranks_per_host() < world), three: within
**    a host on comm_host() (every host at once); between hosts on comm_across(H), the ranks
**    with one local index on every host (all H such communicators at once, as a hybrid step
**    runs its across-group all-reduces); and the world's own collectives over all ranks (the
**    flat plans' gathers and reductions cross the links as MPI's algorithms route them, which
**    rescaling the other levels does not predict). With hosts of unequal or non-consecutive
**    ranks one level is measured over the world;
**  - compute: every op's forward+backward time inside real dp steps of the engine, without the
**    time its hooks spend in communication calls (engine_time_ops), at micro-batch 1, 2, 4, ...
**    and, for the splittable ops, at k = 1, 2, 4, 8 slices; fitted as fixed + per-sample seconds;
**    the forward pass's share of each op's time (GptActs.phase tells the timer the pass), for
**    the replay to price each pass (a recomputed forward as the forward).
**    The layers are identical, so they share the work: in one step each layer's splittable ops
**    run at one of the four slice counts in turn, and an op's time at a count is the mean over
**    the layers that ran it (one step instead of four per micro-batch). Four layers are thus
**    enough: a model with more is measured on a copy with four (--profile-layers), every layer
**    taking the copy's times, and the step figures below come from the copy's steps too
**    (gpt2-124m: a step of the copy costs about half the 12-layer model's). The embedding and
**    head are split (k = 1, 2, 4, 8) at the middle micro-batch (a smaller one where its steps
**    are long: split_point) on a copy of the model with one layer (their times depend on their
**    shapes only), their levels' ratios scaling the unsplit fit;
**  - the rest of a step ("overhead") and the optimizer: the dp step minus its op compute,
**    optimizer and time in communication calls;
**  - the collectives inside steps: real dp steps (all-reduce buckets) and zero3 steps (blocking
**    gathers and reduce-scatters, then prefetched gathers) against the cost model's replay of
**    the same plans with the table's times: a collective slower inside steps than alone gets
**    an in-step factor; one that waits less than the replay says gets the overlap rate that
**    explains it. These plans run over the world, so they calibrate the level the world's
**    collectives run on (the world level on several hosts); there a zero3 step sharded within
**    each host calibrates the intra-host gathers and reduce-scatters, and the same plan at the
**    middle and the largest micro-batch the all-reduces between hosts (their in-step factor
**    and overlap together: two amounts of compute to hide beside).
*/
#include "planner/profile.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm/comm.h"
#include "core/util.h"
#include "kernels/cpu_kernels.h"
#include "model/plan.h"
#include "planner/cost.h"
#include "planner/trial.h"
#include "runtime/engine.h"

/* Seconds of timed steps a profile measurement runs at least per step asked for (--profile-steps;
** 64 steps at most): short steps vary more, and the fits and in-step factors from 3 of them
** moved between two profiles of one idle machine (small: all-gather in-step x2.5 and x3.3). */
#define PROFILE_STEP_S (1.0 / 3)

/* The timed seconds each measurement of profile o runs at least. */
static double min_seconds(const ProfileOptions* o) { return o->steps * PROFILE_STEP_S; }

/* ---- Collectives ------------------------------------------------------------------------- */

/* Seconds of one collective of kind over communicator c on a full buffer of n floats (a
** multiple of c's size): the slowest rank's best of reps runs (after a warm-up), every rank
** running its own c at once. */
static double time_collective(Comm* c, int kind, float* buf, float* shard, size_t n, int reps,
                              CommDtype dtype) {
  size_t sh = n / (size_t)comm_size_of(c);
  double best = 1e30;
  for (int r = 0; r <= reps; r++) {
    comm_barrier(comm_world());
    double t0 = now_seconds();
    CommRequest q;
    if (kind == COLL_ALLREDUCE && dtype == COMM_FP32) comm_allreduce_f32(c, buf, n);
    else if (kind == COLL_ALLREDUCE) { comm_iallreduce_f32(c, buf, n, dtype, &q); comm_wait(&q); }
    else if (kind == COLL_ALLGATHER) comm_allgather_into_f32(c, shard, buf, sh);
    else comm_reduce_scatter_f32(c, buf, shard, sh, dtype, 1);
    double t = comm_allreduce_max_f64(comm_world(), now_seconds() - t0);
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
  /* A slope near 0 (noise) is no link faster than a device file may say. */
  CollectiveModel c = {.latency_s = icept, .bandwidth_Bps = fmin(1.0 / slope, DEVICE_MAX_BANDWIDTH)};
  for (int i = 0; i < n; i++) {
    double e = (icept + slope * x[i] - t[i]) / t[i];
    if (e < 0) e = -e;
    if (e > c.residual) c.residual = e;
  }
  return c;
}

/* Largest relative error of interpolating each interior point from its two neighbours
** (leave-one-out): how well the table predicts sizes it was not measured at. */
static double interpolation_residual(const double* x, const double* t, int n) {
  double worst = 0;
  for (int i = 1; i + 1 < n; i++) {
    double y = t[i - 1] + (t[i + 1] - t[i - 1]) * (x[i] - x[i - 1]) / (x[i + 1] - x[i - 1]);
    double e = (y - t[i]) / t[i];
    if (e < 0) e = -e;
    if (e > worst) worst = e;
  }
  return worst;
}

/* The bytes per second each host's network link carried when `flows` communicators of n_c
** ranks, one rank per host each, ran a collective of kind k on `bytes` at once in t seconds:
** each rank sends (n_c - 1) / n_c of the buffer (twice for an all-reduce: reduce-scatter, then
** all-gather). Comparable with a link's rate (tbf's, a NIC's). */
static double link_rate(int k, int n_c, int flows, double bytes, double t) {
  double sent = (k == COLL_ALLREDUCE ? 2.0 : 1.0) * (double)(n_c - 1) / (double)n_c * bytes;
  return t > 0 ? flows * sent / t : 0;
}

/* Measures the three collectives over communicator c (`what` names it in the progress lines)
** at every power of two from 1 KiB to 16 MiB into models[]: the table is the model
** (interpolated between sizes); latency and bandwidth summarise it. flows > 0: c crosses hosts,
** one rank per host, and `flows` such communicators run at once over each host's link; the
** progress lines then also say what each link carried. */
static int profile_level(Comm* c, const char* what, CollectiveModel* models, const Backend* bk,
                         int flows, int verbose) {
  enum { NS = 15 }; /* 256 floats (1 KiB) .. 4Mi floats (16 MiB) */
  size_t maxn = (size_t)256 << (NS - 1);
  int n_c = comm_size_of(c);
  /* Both buffers in the backend's memory, where the training step's buffers are. */
  float* buf = bk->reserve(2 * maxn * sizeof(float));
  if (!buf) return -1;
  float* shard = buf + maxn;
  bk->zero(buf, 2 * maxn * sizeof(float));
  static const char* names[] = {"all-reduce", "all-gather", "reduce-scatter"};
  for (int k = 0; k < COLL_COUNT; k++) {
    double bytes[NS], t[NS];
    for (int i = 0; i < NS; i++) {
      size_t n = ((size_t)256 << i) / (size_t)n_c * (size_t)n_c;
      bytes[i] = 4.0 * (double)n;
      t[i] = time_collective(c, k, buf, shard, n, n <= 65536 ? 9 : 3, COMM_FP32);
      if (i > 0 && t[i] < t[i - 1]) t[i] = t[i - 1]; /* noise: a larger buffer is never faster */
    }
    CollectiveModel line = fit_alpha_beta(bytes, t, NS);
    CollectiveModel* m = &models[k];
    *m = line;
    m->npoints = NS;
    memcpy(m->point_bytes, bytes, sizeof bytes);
    memcpy(m->point_s, t, sizeof t);
    m->residual = interpolation_residual(bytes, t, NS);
    if (verbose && comm_rank() == 0) {
      char b[32];
      char link[64] = "";
      if (flows > 0)
        snprintf(link, sizeof link, " (each host's link: %.1f MB/s)",
                 link_rate(k, n_c, flows, bytes[NS - 1], t[NS - 1]) / 1e6);
      printf("profile: %-14s %s: %5.1f us at 1 KiB, %6.2f GB/s at %s%s; table of %d sizes, within "
             "%.0f%% between sizes (one latency+bandwidth line: within %.0f%%)\n", names[k], what,
             1e6 * t[0], bytes[NS - 1] / t[NS - 1] / 1e9, format_bytes(bytes[NS - 1], b), link, NS,
             100 * m->residual, 100 * line.residual);
    }
  }
  /* bf16 reductions: their time against fp32's at the largest size, as the share of the bytes
  ** they cost (conversions included: on shared memory more than the half the bytes say). */
  for (int k = 0; k < COLL_COUNT; k++) {
    if (k == COLL_ALLGATHER) continue;
    size_t n = maxn / (size_t)n_c * (size_t)n_c;
    double t32 = time_collective(c, k, buf, shard, n, 3, COMM_FP32);
    double t16 = time_collective(c, k, buf, shard, n, 3, COMM_BF16);
    models[k].bf16_factor = t32 > 0 ? t16 / t32 : 0.5;
    if (models[k].bf16_factor > 4) models[k].bf16_factor = 4;
    if (models[k].bf16_factor <= 0) models[k].bf16_factor = 0.5;
    if (verbose && comm_rank() == 0)
      printf("profile: %-14s %s in bf16: %.2f of fp32's time at %s (0.5: only the bytes count)\n",
             names[k], what, models[k].bf16_factor, "16 MiB");
  }
  bk->release(buf, 2 * maxn * sizeof(float), 2 * maxn * sizeof(float));
  return 0;
}

/* Measures the collectives: on one host (or hosts of one rank each, or of unequal or
** non-consecutive ranks) one level over the world; on H ranks per host, 1 < H < N, the
** intra-host level on comm_host() and the inter-host level on comm_across(H). Sets the ranks
** per host and the levels' measured rank counts. */
static int profile_collectives(DeviceInfo* dev, const Backend* bk, int verbose) {
  int N = comm_size(), H = comm_ranks_per_host();
  char what[64];
  dev->ranks_per_host = H >= 1 ? H : N;
  if (N == 1) {
    for (int k = 0; k < COLL_COUNT; k++) dev->coll[k] = (CollectiveModel){.latency_s = 0, .bandwidth_Bps = 1e15};
    return 0;
  }
  if (H > 1 && H < N) {
    snprintf(what, sizeof what, "within hosts (%d ranks)", H);
    dev->coll_ranks = H;
    if (profile_level(comm_host(), what, dev->coll, bk, 0, verbose)) return -1;
    snprintf(what, sizeof what, "between hosts (%d ranks)", N / H);
    dev->inter_ranks = N / H;
    for (int k = 0; k < COLL_COUNT; k++) dev->inter_given[k] = dev->world_given[k] = 1;
    if (profile_level(comm_across(H), what, dev->inter, bk, H, verbose)) return -1;
    snprintf(what, sizeof what, "over the world (%d ranks)", N);
    return profile_level(comm_world(), what, dev->world, bk, 0, verbose);
  }
  if (verbose && comm_rank() == 0) {
    if (H == N)
      printf("profile: one host: the inter-host level was not measured and is taken as the "
             "intra-host level (osdp plan --ranks-per-host H --inter-bandwidth B --inter-latency S "
             "describes one)\n");
    else
      printf("profile: %s: one level measured over the world\n",
             H == 1 ? "one rank per host" : "hosts with unequal or non-consecutive ranks");
  }
  snprintf(what, sizeof what, "over the world (%d ranks)", N);
  dev->coll_ranks = N;
  return profile_level(comm_world(), what, dev->coll, bk, H == 1 ? 1 : 0, verbose);
}

/* The matrix-product GFLOP/s at the shape of the model's largest linear inside the layers (the
** first of equals: GPT-2's fc, C -> 4C; Llama's gate, C -> F) on the slowest rank (a stand-in
** FLOP rate for unmeasured ops). */
static double profile_sgemm(const GptDesc* d, const Backend* bk, int T) {
  int M = T < 256 ? 256 : T, K = d->cfg.n_embd, N = 4 * d->cfg.n_embd;
  double best = 0;
  for (int i = d->first_layer_op; i < d->first_layer_op + d->ops_per_layer; i++)
    if (d->ops[i].kind == OP_LINEAR && d->ops[i].flops_tok > best) {
      best = d->ops[i].flops_tok;
      K = d->ops[i].K;
      N = d->ops[i].OC;
    }
  double g = backend_matmul_gflops(bk, M, N, K);
  return -comm_allreduce_max_f64(comm_world(), -g);
}

/* ---- Compute, overhead, optimizer and the collectives inside steps ----------------------- */

/* The default memory limit: on a GPU 90% of its free memory (ranks sharing one GPU give
** --mem-limit), else the host's physical memory divided among the ranks. */
static size_t default_mem_limit(const Backend* bk) {
  size_t gpu = bk->available();
  if (gpu) return gpu / 10 * 9;
  long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
  return (size_t)pages * (size_t)psz / (size_t)comm_size();
}

#define PROFILE_MAX_POINTS 7
_Static_assert(PROFILE_MAX_POINTS <= DEVICE_OP_POINTS, "an op time keeps every point");

/* Least-squares fit t = fixed + per * B of one op over the measured micro-batches on RELATIVE
** error (weights 1 / t^2), with both coefficients kept non-negative. On absolute error the
** largest micro-batch (64 for small at seq 64, 30x the time of micro-batch 1) decided the fit,
** and its 1% of noise moved the fixed part by half a micro-batch-1 step: two profiles of one
** idle machine predicted plans at micro-batch 1 up to 26% apart. Weighted, every micro-batch
** counts alike, as the collectives' fits do. */
static void fit_op_time(const int* B, const double* t, int n, double* fixed, double* per) {
  double s = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (int i = 0; i < n; i++) {
    double w = 1.0 / (t[i] * t[i] + 1e-18); /* an op that took no measurable time weighs most */
    s += w; sx += w * B[i]; sy += w * t[i]; sxx += w * B[i] * B[i]; sxy += w * B[i] * t[i];
  }
  double den = s * sxx - sx * sx;
  *per = den > 1e-12 * s * sxx ? (s * sxy - sx * sy) / den : t[n - 1] / B[n - 1];
  *fixed = (sy - *per * sx) / s;
  if (*per < 0) { *per = 0; *fixed = sy / s; }
  if (*fixed < 0) { *fixed = 0; *per = sxy / sxx; }
}

/* Prints a progress line on rank 0: what is measured now, the seconds so far and, with `left`
** >= 0, about how many are left (profile_left). */
static void progress(const ProfileOptions* o, const char* what, int B, double left) {
  if (!o->verbose || comm_rank() != 0) return;
  char eta[48] = "";
  if (left >= 0) snprintf(eta, sizeof eta, ", about %.0f s left", left);
  printf("profile: %s at micro-batch %d, seq %d (%.0f s so far%s)\n", what, B, o->seq,
         now_seconds() - o->started, eta);
  fflush(stdout);
}

/* The plan every profiled step runs: dp everywhere, every splittable op in k slices (as far as
** its rows allow); strategy s instead of dp when s is sharded; in the profile's precision. */
static int profile_plan(const GptDesc* d, Strategy s, int B, int T, int k, Precision prec,
                        Plan* p) {
  if (plan_uniform(p, d, s, comm_size(), B, T)) return -1;
  p->precision = prec;
  for (int i = 0; i < d->nops; i++) {
    const GptOp* op = &d->ops[i];
    if (!op->n_params || !op->splittable) continue;
    int kk = (size_t)k > op->rows ? (int)op->rows : k;
    p->ops[i].k = kk < 1 ? 1 : kk;
    for (int j = 0; j < p->ops[i].k; j++) p->ops[i].strat[j] = s;
  }
  return 0;
}

/* What the dp steps at the profiled micro-batches measured. */
typedef struct DpPoints {
  int n, B[PROFILE_MAX_POINTS];
  PlanMeasure m[PROFILE_MAX_POINTS];
  double ops_s[PROFILE_MAX_POINTS];   /* sum of the measured op compute */
  int bfit;                           /* the largest micro-batch the whole model fits at (<= 64) */
} DpPoints;

/* ---- Compute: every op at every slice count, identical layers sharing the work ---------- */

/* Every layer has the same ops, so one step can time an op at all four slice levels (k = 1, 2,
** 4, 8) at once: layer l's splittable ops run at level (r * L + l) mod 4 in rotation r, and
** ceil(4 / L) rotations (one from 4 layers on) give every level some layers. Ops outside the
** layers (the embedding and the head that uses its weights) run unsplit in the rotations and at
** each level once more, at the middle micro-batch. */
static int rotations(const GptDesc* d) {
  int L = d->cfg.n_layer;
  return L >= DEVICE_SLICE_LEVELS ? 1 : (DEVICE_SLICE_LEVELS + L - 1) / L;
}

/* The slice level of op i in rotation r with the ops outside the layers at level outer. */
static int op_level(const GptDesc* d, int i, int r, int outer) {
  int l = d->ops[i].layer;
  return l >= 0 ? (r * d->cfg.n_layer + l) % DEVICE_SLICE_LEVELS : outer;
}

/* The plan of one compute measurement: dp, every splittable op in 2^op_level slices (as far as
** its rows allow), in the profile's precision. */
static int rotated_plan(const GptDesc* d, int B, int T, int r, int outer, Precision prec,
                        Plan* p) {
  if (plan_uniform(p, d, STRAT_DP, comm_size(), B, T)) return -1;
  p->precision = prec;
  for (int i = 0; i < d->nops; i++) {
    const GptOp* op = &d->ops[i];
    if (!op->n_params || !op->splittable) continue;
    int k = 1 << op_level(d, i, r, outer);
    p->ops[i].k = (size_t)k > op->rows ? (int)op->rows : k;
    for (int j = 0; j < p->ops[i].k; j++) p->ops[i].strat[j] = STRAT_DP;
  }
  return 0;
}

/* Op seconds summed per (op, level, micro-batch point) over the measurements, and how many;
** per op, its seconds and its forward pass's seconds summed over them. */
typedef struct OpSamples {
  int nops;
  double* sum;  /* [level][point][op] */
  int* count;
  double* all;  /* [op] */
  double* fwd;  /* [op] */
} OpSamples;

#define SAMPLE(x, l, j, i) ((size_t)((l) * PROFILE_MAX_POINTS + (j)) * (size_t)(x)->nops + (size_t)(i))

/* Frees what op_samples_alloc allocated (any of it NULL). */
static void op_samples_free(OpSamples* x) {
  free(x->sum);
  free(x->count);
  free(x->all);
  free(x->fwd);
  *x = (OpSamples){0};
}

/* Allocates x's zeroed sums for n ops; -1 (an error set, nothing left allocated) when out of
** memory. */
static int op_samples_alloc(OpSamples* x, int n) {
  size_t cells = (size_t)n * PROFILE_MAX_POINTS * DEVICE_SLICE_LEVELS;
  *x = (OpSamples){n, calloc(cells, sizeof(double)), calloc(cells, sizeof(int)), calloc((size_t)n, sizeof(double)),
                   calloc((size_t)n, sizeof(double))};
  if (x->sum && x->count && x->all && x->fwd) return 0;
  op_samples_free(x);
  return osdp_fail("out of host memory");
}

/* Which level op i ran at in a measurement: its own for a splittable op or one using another
** op's (split) weights; level 0 for the rest, which have no slices. */
static int measured_level(const GptDesc* d, int i, int r, int outer) {
  const GptOp* op = &d->ops[i];
  int tied = op->owner >= 0 && op->owner != i;
  if (!op->splittable && !tied) return 0;
  return op_level(d, tied ? op->owner : i, r, outer);
}

/* Measures plan (r, outer) at micro-batch point j (micro-batch B) for at least `floor` seconds
** of timed steps and adds each op's seconds to x; the step's figures go to *m and its op
** compute sum to *ops_s. op_s: room for 2 * nops. */
static int measure_rotated(const GptDesc* d, const ProfileOptions* o, int B, int j, int r, int outer,
                           double floor, OpSamples* x, double* op_s, PlanMeasure* m, double* ops_s) {
  Plan p;
  double* share = op_s + d->nops;
  if (rotated_plan(d, B, o->seq, r, outer, o->precision, &p)) return -1;
  int rc = planner_measure_plan(d, &p, o->backend, o->threads, 0, o->steps, 0, floor, m, op_s, share);
  plan_free(&p);
  if (rc) return -1;
  *ops_s = 0;
  for (int i = 0; i < d->nops; i++) {
    int l = measured_level(d, i, r, outer);
    x->sum[SAMPLE(x, l, j, i)] += op_s[i];
    x->count[SAMPLE(x, l, j, i)]++;
    x->all[i] += op_s[i];
    x->fwd[i] += op_s[i] * share[i];
    *ops_s += op_s[i];
  }
  return 0;
}

/* Measures point j (micro-batch B) in every rotation, each for at least `floor` seconds, into x;
** the first rotation's step figures go to *m and its op sum to *ops_s. */
static int measure_point(const GptDesc* d, const ProfileOptions* o, int B, int j, double floor, OpSamples* x,
                         double* op_s, PlanMeasure* m, double* ops_s) {
  PlanMeasure extra;
  double ignored;
  int rc = measure_rotated(d, o, B, j, 0, 0, floor, x, op_s, m, ops_s);
  for (int r = 1; !rc && r < rotations(d); r++) rc = measure_rotated(d, o, B, j, r, 0, floor, x, op_s, &extra, &ignored);
  return rc;
}

/* ---- Progress: what the rest of a profile should take ------------------------------------ */

/* Seconds of a dp step after which the profile measures no larger micro-batch: each point costs
** about four steps, and the search extrapolates the fitted line to PLANNER_EXTRAPOLATE x the
** largest point (gpt2-124m on 2 ranks of this 2-core machine: micro-batches 1, 2, 4 of the
** 4-layer copy, a search up to 8). */
#define PROFILE_LONG_STEP 2.0

/* Seconds of a dp step above which the ops outside the layers are split at a smaller micro-batch
** than the middle one: their levels' ratios depend on their shapes, and at micro-batch 1 a
** 128-token head is a matrix product large enough to time (gpt2-124m: the split's five
** measurements at micro-batch 2 took 15 s of a first start that should take at most 2 minutes). */
#define PROFILE_SPLIT_STEP 1.0

/* Whether the profile times a point after the n-th, at micro-batch B whose dp step took step_s:
** while two points and a quarter-second step are not yet there, or plans may use larger batches
** (bfit: the largest the whole model fits at), which are then measured rather than extrapolated
** (while a step takes at most PROFILE_LONG_STEP); never past PROFILE_MAX_POINTS or micro-batch 64. */
static int more_points(int n, int B, double step_s, int bfit) {
  if (n >= PROFILE_MAX_POINTS || 2 * B > 64) return 0;
  return !(n >= 2 && step_s > 0.25 && (2 * B > bfit || step_s > PROFILE_LONG_STEP));
}

/* Whether the model has splittable ops outside its layers (the embedding). */
static int has_outer_slices(const GptDesc* d) {
  for (int i = 0; i < d->nops; i++)
    if (d->ops[i].layer < 0 && d->ops[i].splittable && d->ops[i].n_params) return 1;
  return 0;
}

/* The measurements of a profile after the collectives, in the order they run. */
typedef enum ProfilePhase {
  PHASE_POINTS,       /* dp steps at micro-batch 1, 2, 4, ... (profile_compute) */
  PHASE_WINDOWS,      /* the short points timed again (second_windows) */
  PHASE_SPLIT,        /* the embedding and head split (profile_outer_split) */
  PHASE_ZERO3,        /* zero3 steps at the middle micro-batch (profile_zero3) */
  PHASE_ZERO3_SMALL,  /* and at the smallest */
  PHASE_HOSTS         /* zero3 within hosts (profile_hosts_steps) */
} ProfilePhase;

/* Seconds one measurement of steps of step_s seconds takes: a first step (it may be a warm-up),
** then `steps` timed ones, more while they add up to less than `floor` (planner_measure_plan). */
static double measurement_s(double step_s, int steps, double floor) {
  double timed = steps * step_s;
  return step_s + (timed < floor && step_s > 0 ? step_s * ceil(floor / step_s) : timed);
}

/* The index among n points of dp step seconds t at which the ops outside the layers are split:
** the middle one, or the largest smaller one whose step took at most PROFILE_SPLIT_STEP (the
** first when none did). */
static int split_index(const double* t, int n) {
  int j = n / 2;
  while (j > 0 && t[j] > PROFILE_SPLIT_STEP) j--;
  return j;
}

/* About how many seconds the profile's measurements from phase `from` on take (in the windows
** phase, from point `next` on), from the dp steps measured so far (pts): the points still to
** come by profile_compute's rule, their steps drawn along the last two measured (the first
** alone: in proportion to the micro-batch); the one-layer copy's steps as 2 / (layers + 1) of
** the copy's (the embedding and head about one layer's worth); zero3 steps as dp steps. -1
** before the first point. */
static double profile_left(const GptDesc* d, const ProfileOptions* o, const DpPoints* pts, ProfilePhase from,
                           int next) {
  int n = pts->n, R = rotations(d), B[PROFILE_MAX_POINTS] = {0};
  double t[PROFILE_MAX_POINTS] = {0}, floor = min_seconds(o), left = 0;
  if (n == 0) return -1;
  for (int j = 0; j < n; j++) { B[j] = pts->B[j]; t[j] = pts->m[j].step_s; }
  while (from == PHASE_POINTS && more_points(n, B[n - 1], t[n - 1], pts->bfit)) {
    int a = n >= 2 ? n - 2 : 0, b = n - 1;
    B[n] = 2 * B[n - 1];
    t[n] = a == b ? t[b] * B[n] / B[b] : t[b] + (t[b] - t[a]) * (B[n] - B[b]) / (double)(B[b] - B[a]);
    if (t[n] < t[b]) t[n] = t[b];
    left += R * measurement_s(t[n], o->steps, 0.5 * floor);
    n++;
  }
  for (int j = from == PHASE_WINDOWS ? next : 0; from <= PHASE_WINDOWS && j < n; j++)
    if (o->steps * t[j] < floor) left += R * measurement_s(t[j], o->steps, 0.5 * floor);
  if (from <= PHASE_SPLIT && has_outer_slices(d))
    left += (DEVICE_SLICE_LEVELS + 1) *
            measurement_s(t[split_index(t, n)] * 2 / (d->cfg.n_layer + 1), o->steps, floor);
  int jm = n / 2, H = comm_ranks_per_host(), N = comm_size();
  if (N > 1 && from <= PHASE_ZERO3) left += 2 * measurement_s(t[jm], o->steps + 1, floor);
  if (N > 1 && from <= PHASE_ZERO3_SMALL && jm > 0) left += 2 * measurement_s(t[0], o->steps, floor);
  if (from <= PHASE_HOSTS && H > 1 && H < N) left += 2 * measurement_s(t[n - 1], o->steps + 1, floor);
  return left;
}

/* Measures again, once every point has run, each point whose first window of timed steps (at
** least half the time floor) was shorter than the whole floor, and keeps per point the window
** whose ops took less, with its step figures; the forward shares pool both. A slow spell of
** the machine (another process) only ever adds time and rarely covers two windows seconds
** apart: over six profiles of small (seq 64, 2 ranks, idle machine) the op sums at micro-batch
** 1 and 2 of one window of the whole floor spread 1.52x and 1.57x, the lesser of two half
** windows 1.06x and 1.09x, and the plans at micro-batch 1-2 moved most between profiles. Points
** whose steps are long enough run once (3 of them: a median already drops one slow one), so
** the profile takes about as long as with one window of the whole floor. */
static int second_windows(const GptDesc* d, const ProfileOptions* o, DpPoints* pts, OpSamples* x, double* op_s) {
  int n = d->nops;
  OpSamples y;
  int rc = op_samples_alloc(&y, n);
  for (int j = 0; !rc && j < pts->n; j++) {
    if (pts->m[j].steps * pts->m[j].step_s >= min_seconds(o)) continue;
    progress(o, "timing a dp step again (a second window)", pts->B[j], profile_left(d, o, pts, PHASE_WINDOWS, j));
    PlanMeasure m;
    double ops_s;
    rc = measure_point(d, o, pts->B[j], j, 0.5 * min_seconds(o), &y, op_s, &m, &ops_s);
    if (rc || ops_s >= pts->ops_s[j]) continue;
    pts->m[j] = m;
    pts->ops_s[j] = ops_s;
    for (int l = 0; l < DEVICE_SLICE_LEVELS; l++)
      for (int i = 0; i < n; i++) {
        x->sum[SAMPLE(x, l, j, i)] = y.sum[SAMPLE(&y, l, j, i)];
        x->count[SAMPLE(x, l, j, i)] = y.count[SAMPLE(&y, l, j, i)];
      }
  }
  for (int i = 0; !rc && i < n; i++) {
    x->all[i] += y.all[i];
    x->fwd[i] += y.fwd[i];
  }
  op_samples_free(&y);
  return rc;
}

/* Op i's forward seconds over all its seconds in the dp steps, summed over them and, for a
** layer op, pooled over the layers (as sample_mean pools its times); 0 when not measured. A
** recomputed forward costs what the forward does: timed in a step that
** recomputes every layer, the linears' and attention's recomputed forwards took 0.28-0.35 of
** their time where their forwards took 0.30-0.33 (small, seq 64), while the step's own growth,
** a difference of two steps, moved between 0.09 and 0.34 from one profile to the next. */
static double forward_share(const GptDesc* d, const OpSamples* x, int i) {
  int layer_op = d->ops[i].layer >= 0, within = (i - d->first_layer_op) % d->ops_per_layer;
  double all = 0, fwd = 0;
  for (int ll = 0; ll < (layer_op ? d->cfg.n_layer : 1); ll++) {
    int ii = layer_op ? gpt_layer_op(d, ll, within) : i;
    all += x->all[ii];
    fwd += x->fwd[ii];
  }
  return all > 0 && fwd > 0 && fwd < all ? fwd / all : 0;
}

/* Mean seconds of op i at level l, point j: over the layers for a layer op (identical layers
** share their samples), its own otherwise; -1 when never measured. */
static double sample_mean(const GptDesc* d, const OpSamples* x, int i, int l, int j) {
  double sum = 0;
  int n = 0;
  if (d->ops[i].layer < 0) {
    sum = x->sum[SAMPLE(x, l, j, i)];
    n = x->count[SAMPLE(x, l, j, i)];
  } else {
    int within = (i - d->first_layer_op) % d->ops_per_layer;
    for (int ll = 0; ll < d->cfg.n_layer; ll++) {
      int ii = gpt_layer_op(d, ll, within);
      sum += x->sum[SAMPLE(x, l, j, ii)];
      n += x->count[SAMPLE(x, l, j, ii)];
    }
  }
  return n ? sum / n : -1;
}

/* Fits op i's times into ot: each level from the micro-batch points measured at it, kept as
** points (the planner interpolates between them: over six profiles of small the op sums sat 4-6%
** below the fitted line at micro-batch 4 and 2-5% above it from 8 on, a curve no line follows,
** and the 96 MiB plans at micro-batch 2-6 measured 0.93-0.96 of what the line predicted) and
** fitted by a line (fixed_s, per_sample_s: its slope prices micro-batches past the last). An op
** outside the layers was measured unsplit only (level 0); its other levels are level 0's fit
** scaled by their ratio to level 0 in split (op i's seconds per level from the one-layer copy,
** [i * DEVICE_SLICE_LEVELS + l]; NULL when the model has no such split), at least 1: each level
** is one step of its own, and a split that measured faster than the whole op (the head at k = 2:
** 0.98x in one profile, 1.03-1.10x in the others) is noise the search would bet on (the plan
** splitting the head in two then measured 0.91x the best uniform one). */
static void fit_op(const GptDesc* d, const OpSamples* x, const DpPoints* pts, const double* split, int i,
                   OpTime* ot) {
  const GptOp* op = &d->ops[i];
  int sliced = op->splittable || (op->owner >= 0 && op->owner != i);
  const double* own = split ? split + (size_t)i * DEVICE_SLICE_LEVELS : NULL;
  snprintf(ot->name, sizeof ot->name, "%s", op->name);
  ot->forward_share = op->has_backward ? forward_share(d, x, i) : 0;
  for (int l = 0; l < (sliced ? DEVICE_SLICE_LEVELS : 1); l++) {
    int Bl[PROFILE_MAX_POINTS], m = 0;
    double col[PROFILE_MAX_POINTS];
    for (int j = 0; j < pts->n; j++) {
      double t = sample_mean(d, x, i, l, j);
      if (t < 0) continue;
      Bl[m] = pts->B[j];
      col[m++] = t;
    }
    if (m > 0) {
      fit_op_time(Bl, col, m, &ot->fixed_s[l], &ot->per_sample_s[l]);
      ot->npoints[l] = m;
      memcpy(ot->point_batch[l], Bl, (size_t)m * sizeof *Bl);
      memcpy(ot->point_s[l], col, (size_t)m * sizeof *col);
    } else if (l > 0 && ot->measured[0] && own && own[0] > 0 && own[l] > 0) {
      double ratio = own[l] > own[0] ? own[l] / own[0] : 1.0; /* see below */
      ot->fixed_s[l] = ratio * ot->fixed_s[0];
      ot->per_sample_s[l] = ratio * ot->per_sample_s[0];
      ot->npoints[l] = ot->npoints[0];
      for (int j = 0; j < ot->npoints[0]; j++) {
        ot->point_batch[l][j] = ot->point_batch[0][j];
        ot->point_s[l][j] = ratio * ot->point_s[0][j];
      }
    } else {
      continue;
    }
    ot->measured[l] = 1;
  }
}

/* The forward passes' share of the layer ops' time at micro-batch 1 (dev's fits of d). */
static double layer_forward_share(const GptDesc* d, const DeviceInfo* dev) {
  double all = 0, fwd = 0;
  for (int i = 0; i < d->nops; i++) {
    const OpTime* t = &dev->op_times[i];
    if (d->ops[i].layer < 0 || !d->ops[i].has_backward) continue;
    all += t->fixed_s[0] + t->per_sample_s[0];
    fwd += (t->fixed_s[0] + t->per_sample_s[0]) * (t->forward_share > 0 ? t->forward_share : DEVICE_FORWARD_SHARE);
  }
  return all > 0 ? fwd / all : 0;
}

/* The index in r, a copy of d with fewer layers, of op i of d, an op outside the layers; -1 for a
** layer op. */
static int outer_op_in_copy(const GptDesc* d, const GptDesc* r, int i) {
  if (d->ops[i].layer >= 0) return -1;
  int after = d->first_layer_op + d->cfg.n_layer * d->ops_per_layer; /* d's first op past them */
  return i < d->first_layer_op ? i : i - after + r->first_layer_op + r->cfg.n_layer * r->ops_per_layer;
}

/* The ops outside the layers (the embedding and the head using its weights) at each slice level
** (k = 1, 2, 4, 8) at micro-batch B, measured on a copy of the model with one layer: their times
** depend on their own shapes only, and a step of the copy costs a fraction of the model's
** (gpt2-124m: about 0.37), so the four steps cost less than three of the whole model would.
** Only the levels' ratios are used (fit_op scales the whole model's level-0 fit by them), so
** what the one layer adds to a step cancels. Level 0 runs again after the others and keeps the
** faster of its two: each level is one measurement, and a slow one at level 0 made every split
** look faster than the whole op (small: the head 0.76x unsplit at k = 4, where other profiles
** measured 1.13-1.31x; the plan that split it measured 0.88x the best uniform one), while a
** slow split level only makes the planner split less. split[i * DEVICE_SLICE_LEVELS + l]: op
** i's seconds at level l (0 for layer ops). Collective. */
static int profile_outer_split(const GptDesc* d, const ProfileOptions* o, int B, double* split) {
  GptConfig cfg = d->cfg;
  GptDesc r;
  cfg.n_layer = 1;
  if (gpt_desc_build(&r, &cfg)) return -1;
  double* op_s = malloc((size_t)r.nops * sizeof *op_s);
  int rc = op_s ? 0 : osdp_fail("out of host memory");
  for (int n = 0; !rc && n <= DEVICE_SLICE_LEVELS; n++) {
    int l = n % DEVICE_SLICE_LEVELS; /* 0, 1, 2, 3, then 0 again */
    Plan p;
    PlanMeasure m;
    if (rotated_plan(&r, B, o->seq, 0, l, o->precision, &p)) { rc = -1; break; }
    rc = planner_measure_plan(&r, &p, o->backend, o->threads, 0, o->steps, 0, min_seconds(o), &m, op_s, NULL);
    plan_free(&p);
    for (int i = 0; !rc && i < d->nops; i++) {
      int ir = outer_op_in_copy(d, &r, i);
      double* s = &split[(size_t)i * DEVICE_SLICE_LEVELS + l];
      if (ir >= 0 && (n == l || op_s[ir] < *s)) *s = op_s[ir];
    }
  }
  free(op_s);
  gpt_desc_free(&r);
  return rc;
}

/* The point at which the ops outside the layers are split (split_index). */
static int split_point(const DpPoints* pts) {
  double t[PROFILE_MAX_POINTS];
  for (int j = 0; j < pts->n; j++) t[j] = pts->m[j].step_s;
  return split_index(t, pts->n);
}

/* Times every op of d (the model measured: the whole model or its copy with fewer layers, see
** profile_device) inside real dp steps at micro-batches 1, 2, 4, ... (until a step takes a
** quarter second and no larger batch fits the limit, or a step takes PROFILE_LONG_STEP, or 64;
** what fits is the whole model's, `whole`), every level of the layers' splittable ops in the
** same steps (rotations), the ops outside the layers at k = 2, 4, 8 at one of them (split_point),
** and fits each op per slice count into dev->op_times. The first rotation's step figures are
** kept in *pts for the rest of the profile. */
static int profile_compute(const GptDesc* whole, const GptDesc* d, const ProfileOptions* o, DeviceInfo* dev,
                           DpPoints* pts) {
  int n = d->nops, rc = 0, R = rotations(d);
  OpSamples x;
  double* op_s = malloc((size_t)n * 2 * sizeof(double)); /* seconds, then forward shares */
  if (op_samples_alloc(&x, n)) rc = -1;
  else if (!op_s) rc = osdp_fail("out of host memory");
  memset(pts, 0, sizeof *pts);
  pts->bfit = cost_largest_batch(whole, dev, o->seq, 64); /* plans may use it */
  for (int B = 1; !rc; B *= 2) {
    int j = pts->n;
    progress(o, R > 1 ? "timing dp steps (every operator, every slice count)"
                      : "timing a dp step (every operator, every slice count)", B,
             profile_left(d, o, pts, PHASE_POINTS, 0));
    rc = measure_point(d, o, B, j, 0.5 * min_seconds(o), &x, op_s, &pts->m[j], &pts->ops_s[j]);
    if (rc) { if (j >= 2) { rc = 0; osdp_clear_error(); } break; } /* out of memory: fit what we have */
    pts->B[pts->n++] = B;
    if (!more_points(pts->n, B, pts->m[j].step_s, pts->bfit)) break;
  }
  if (!rc) rc = second_windows(d, o, pts, &x, op_s);
  dev->compute_max_batch = pts->n ? pts->B[pts->n - 1] : 0;
  int js = split_point(pts);
  double* split = NULL;
  if (!rc && has_outer_slices(d)) {
    progress(o, "timing the embedding and head split (k = 1, 2, 4, 8, 1 again, on a one-layer copy)", pts->B[js],
             profile_left(d, o, pts, PHASE_SPLIT, 0));
    split = calloc((size_t)n * DEVICE_SLICE_LEVELS, sizeof *split);
    rc = split ? profile_outer_split(d, o, pts->B[js], split) : osdp_fail("out of host memory");
  }
  for (int i = 0; !rc && i < n; i++) fit_op(d, &x, pts, split, i, &dev->op_times[i]);
  if (!rc && o->verbose && comm_rank() == 0)
    printf("profile: the forward passes take %.2f of the layers' op time (the rest: backward)\n",
           layer_forward_share(d, dev));
  free(split);
  op_samples_free(&x);
  free(op_s);
  return rc;
}

#undef SAMPLE

/* The replay's exposed seconds of collective `kind` for plan p (its other settings as in dev). */
static double replay_exposed(const GptDesc* d, const DeviceInfo* dev, const Plan* p, int kind) {
  PlanCost c;
  return plan_cost(d, dev, p, &c) ? 0 : c.exposed_s[kind];
}

/* The table plan p's collectives of `kind` run on (the calibration plans shard every op alike,
** so its first sharded op's group G says): gathers and reduce-scatters on the level of G; all-
** reduces across the groups when G < N (the shards' sums), else over the world. */
static CollectiveModel* plan_model(DeviceInfo* dev, const Plan* p, int kind) {
  int G = dev->ranks;
  for (int i = 0; i < p->nops; i++)
    if (p->ops[i].strat[0] != STRAT_DP) { G = plan_op_group(p, i); break; }
  CommShape sh = kind == COLL_ALLREDUCE && G < dev->ranks ? device_across_shape(dev, G)
                                                          : device_group_shape(dev, G);
  return device_link_model(dev, sh.level, kind);
}

/* Sets the overlap rate of collective `kind` to the one in [0, 1] at which the replay of plan p
** waits `measured` seconds for it (bisection: the wait falls as the rate rises). */
static void fit_overlap(const GptDesc* d, DeviceInfo* dev, const Plan* p, int kind, double measured) {
  CollectiveModel* c = plan_model(dev, p, kind);
  double lo = 0, hi = 1;
  for (int it = 0; it < 30; it++) {
    c->overlap = 0.5 * (lo + hi);
    if (replay_exposed(d, dev, p, kind) > measured) lo = c->overlap; else hi = c->overlap;
  }
  c->overlap = 0.5 * (lo + hi);
}

/* Calibrates collective `kind` against `measured` seconds that real steps of plan p spent in
** it: more than the table predicts -> in_step = the ratio (slower inside a step), overlap 0;
** less -> in_step 1 and the overlap at which the replay hides the difference. */
static void calibrate(const GptDesc* d, DeviceInfo* dev, const Plan* p, int kind, double measured) {
  CollectiveModel* c = plan_model(dev, p, kind);
  c->in_step = 1;
  c->overlap = 0;
  double alone = replay_exposed(d, dev, p, kind);
  if (alone <= 0 || measured <= 0) return;
  if (measured >= alone) c->in_step = fmin(measured / alone, DEVICE_MAX_FACTOR); /* a file's range */
  else fit_overlap(d, dev, p, kind, measured);
}

/* Fits the across-host all-reduce's in-step factor and overlap rate together to what steps of
** two plans waited for it: p1 (less compute after the all-reduces start) waited w1, p2 (more)
** w2. Neither alone tells a slow collective that hides beside compute from a fast one that
** does not; two amounts of compute do. For each in-step factor on a grid (1 .. 4) the overlap
** at which p2's replay waits w2 (bisection), keeping the pair that best matches w1. */
static void fit_across_pair(const GptDesc* d, DeviceInfo* dev, const Plan* p1, double w1,
                            const Plan* p2, double w2) {
  CollectiveModel* c = plan_model(dev, p1, COLL_ALLREDUCE);
  double best_err = -1, best_in = 1, best_ov = 0;
  for (int i = 0; i <= 60; i++) {
    c->in_step = pow(4.0, i / 60.0);
    fit_overlap(d, dev, p2, COLL_ALLREDUCE, w2);
    double r = replay_exposed(d, dev, p1, COLL_ALLREDUCE);
    double err = fabs(log((r + 1e-4) / (w1 + 1e-4)));
    if (best_err < 0 || err < best_err) { best_err = err; best_in = c->in_step; best_ov = c->overlap; }
  }
  c->in_step = best_in;
  c->overlap = best_ov;
}

/* zero3 steps of one micro-batch, unsplit (every weight gathered, every gradient
** reduce-scattered): blocking and with prefetch. */
typedef struct Zero3Steps {
  Plan p;                  /* blocking; its prefetch flag set for the replay of the other */
  PlanMeasure blocking, prefetched;
} Zero3Steps;

/* Measures z at micro-batch B (steps timed steps each); -1 (error cleared, nothing left to free)
** when zero3 does not run here. */
static int measure_zero3(const GptDesc* d, const ProfileOptions* o, int B, int steps, Zero3Steps* z) {
  if (profile_plan(d, STRAT_ZERO3, B, o->seq, 1, o->precision, &z->p)) { osdp_clear_error(); return -1; }
  PlanMeasure* into[2] = {&z->blocking, &z->prefetched};
  int rc = 0;
  for (int pf = 0; !rc && pf < 2; pf++) {
    z->p.prefetch = pf;
    rc = planner_measure_plan(d, &z->p, o->backend, o->threads, 0, steps, 0, min_seconds(o), into[pf], NULL, NULL);
  }
  z->p.prefetch = 0;
  if (rc) { osdp_clear_error(); plan_free(&z->p); }
  return rc;
}

/* The blocking steps' waits for `kind` over the replay's without in-step factor (its own table
** times); 0 when the replay gives none. */
static double blocking_ratio(const GptDesc* d, DeviceInfo* dev, const Zero3Steps* z, int kind) {
  CollectiveModel* c = plan_model(dev, &z->p, kind);
  double keep = c->in_step;
  c->in_step = 1;
  double alone = replay_exposed(d, dev, &z->p, kind);
  c->in_step = keep;
  int k = kind == COLL_ALLGATHER ? COMM_ALLGATHER : COMM_REDUCE_SCATTER;
  return alone > 0 ? z->blocking.wait_s[k] / alone : 0;
}

/* What z's prefetched gathers cost its steps: the replay's blocking gathers plus what the steps
** with prefetch waited more (or less) than the blocking ones, gathers and reduce-scatters
** together (a gather posted early progresses inside the calls after it: with prefetch the
** reduce-scatters waited 1-2 ms a step more here). */
static double prefetch_wait(const GptDesc* d, const DeviceInfo* dev, const Zero3Steps* z) {
  const double *pf = z->prefetched.wait_s, *bl = z->blocking.wait_s;
  double w = replay_exposed(d, dev, &z->p, COLL_ALLGATHER) + pf[COMM_ALLGATHER] + pf[COMM_REDUCE_SCATTER] -
             bl[COMM_ALLGATHER] - bl[COMM_REDUCE_SCATTER];
  return w > 0 ? w : 0;
}

/* The prefetched gathers' in-step factor (async_in_step) and overlap rate, fitted together to
** zero3 steps at the middle micro-batch (zm) and at the smallest (z0): neither alone tells a
** gather that is slow when posted early but hides beside compute from one that is neither
** (here prefetch cost 5-7 ms a step at micro-batch 1-2, and saved time from 4 on). For each
** factor on a grid (1 .. 4 x the blocking gathers': a gather posted early is no faster per
** byte than one waited for at once, what it gains is the overlap; one profile's pair fitted
** x0.5, priced prefetch at micro-batch 1 as a 5% gain, and the plan measured 1.26 of its
** prediction) the overlap at which zm's replay with prefetch waits what its steps did
** (bisection), keeping the pair that best matches z0's. With zm alone (z0 NULL), the overlap
** alone, as far as the gathers waited less than blocking ones. */
static void fit_prefetch(const GptDesc* d, DeviceInfo* dev, Zero3Steps* zm, Zero3Steps* z0) {
  CollectiveModel* c = plan_model(dev, &zm->p, COLL_ALLGATHER);
  double wm = prefetch_wait(d, dev, zm), w0 = z0 ? prefetch_wait(d, dev, z0) : 0;
  zm->p.prefetch = 1;
  if (z0) z0->p.prefetch = 1;
  if (!z0) {
    if (wm < replay_exposed(d, dev, &zm->p, COLL_ALLGATHER)) fit_overlap(d, dev, &zm->p, COLL_ALLGATHER, wm);
  } else {
    double base = c->in_step, best_err = -1, best_f = 0, best_ov = 0;
    for (int i = 0; i <= 60; i++) {
      c->async_in_step = base * pow(4.0, i / 60.0);
      fit_overlap(d, dev, &zm->p, COLL_ALLGATHER, wm);
      double err = fabs(log((replay_exposed(d, dev, &z0->p, COLL_ALLGATHER) + 1e-4) / (w0 + 1e-4)));
      if (best_err < 0 || err < best_err) { best_err = err; best_f = c->async_in_step; best_ov = c->overlap; }
    }
    c->async_in_step = best_f;
    c->overlap = best_ov;
  }
  zm->p.prefetch = 0;
  if (z0) z0->p.prefetch = 0;
}

/* The share of a blocking zero3 step spent in gathers and reduce-scatters below which the
** profile does not measure zero3 steps at a second micro-batch: prefetch then moves a step by
** less than the machine's noise (gpt2-124m at seq 128 here: about 4%, and the second pair cost
** 8 s of a first start that should take at most 2 minutes; small at seq 64: 6%). */
#define PROFILE_ZERO3_SECOND_SHARE 0.05

/* The gathers and reduce-scatters inside steps, from zero3 steps at the middle micro-batch B and
** the smallest B0: each kind's in-step factor the mean of its blocking steps' ratios at the two
** (the waits hold the ranks' jitter, which grows with the compute between calls: at B0 the
** ratio is lower, at the largest micro-batches higher, and plans use all of them), then the
** prefetched gathers' factor and overlap (fit_prefetch). B0's steps are measured only where the
** collectives take PROFILE_ZERO3_SECOND_SHARE of B's blocking step. */
static void profile_zero3(const GptDesc* d, const ProfileOptions* o, DeviceInfo* dev, const DpPoints* pts, int B,
                          int B0, int steps) {
  Zero3Steps zm, z0;
  progress(o, "timing zero3 steps (all-gather, reduce-scatter, prefetch)", B,
           profile_left(d, o, pts, PHASE_ZERO3, 0));
  if (measure_zero3(d, o, B, steps, &zm)) return; /* zero3 does not run here: keep the table's times */
  int two = 0;
  const PlanMeasure* bl = &zm.blocking;
  double waits = bl->wait_s[COMM_ALLGATHER] + bl->wait_s[COMM_REDUCE_SCATTER];
  if (B0 < B && waits >= PROFILE_ZERO3_SECOND_SHARE * bl->step_s) {
    progress(o, "timing zero3 steps (all-gather, reduce-scatter, prefetch)", B0,
             profile_left(d, o, pts, PHASE_ZERO3_SMALL, 0));
    two = measure_zero3(d, o, B0, steps - 1, &z0) == 0; /* its ratios only: a step fewer */
  }
  for (int kind = COLL_ALLGATHER; kind <= COLL_REDUCE_SCATTER; kind++) {
    double r = blocking_ratio(d, dev, &zm, kind);
    if (two) r = 0.5 * (r + blocking_ratio(d, dev, &z0, kind));
    CollectiveModel* c = plan_model(dev, &zm.p, kind);
    c->in_step = 1;
    calibrate(d, dev, &zm.p, kind, r * replay_exposed(d, dev, &zm.p, kind));
  }
  fit_prefetch(d, dev, &zm, two ? &z0 : NULL);
  plan_free(&zm.p);
  if (two) plan_free(&z0.p);
}

/* Several hosts: zero3 sharded within each host, at micro-batch B, calibrates the intra-host
** gathers and reduce-scatters; with the same plan at the largest measured micro-batch Bmax, the
** all-reduces between hosts (fit_across_pair). */
static void profile_hosts_steps(const GptDesc* d, const ProfileOptions* o, DeviceInfo* dev, const DpPoints* pts,
                                int B, int Bmax, int steps) {
  int H = device_ranks_per_host(dev);
  Plan p1, p2;
  PlanMeasure m1, m2;
  if (profile_plan(d, STRAT_ZERO3, B, o->seq, 1, o->precision, &p1)) { osdp_clear_error(); return; }
  plan_set_group(&p1, H);
  if (planner_measure_plan(d, &p1, o->backend, o->threads, 0, steps, 0, min_seconds(o), &m1, NULL, NULL) == 0) {
    calibrate(d, dev, &p1, COLL_ALLGATHER, m1.wait_s[COMM_ALLGATHER]);
    calibrate(d, dev, &p1, COLL_REDUCE_SCATTER, m1.wait_s[COMM_REDUCE_SCATTER]);
    calibrate(d, dev, &p1, COLL_ALLREDUCE, m1.wait_s[COMM_ALLREDUCE]); /* the shards, across hosts */
    if (Bmax > B && profile_plan(d, STRAT_ZERO3, Bmax, o->seq, 1, o->precision, &p2) == 0) {
      plan_set_group(&p2, H);
      progress(o, "timing zero3 steps within hosts (all-reduce between hosts)", Bmax,
               profile_left(d, o, pts, PHASE_HOSTS, 0) / 2);
      if (planner_measure_plan(d, &p2, o->backend, o->threads, 0, steps, 0, min_seconds(o), &m2, NULL, NULL) == 0)
        fit_across_pair(d, dev, &p1, m1.wait_s[COMM_ALLREDUCE], &p2, m2.wait_s[COMM_ALLREDUCE]);
      plan_free(&p2);
    }
  }
  osdp_clear_error(); /* a plan that does not run here keeps the table's times */
  plan_free(&p1);
}

/* From the dp steps: the optimizer rate, the overhead (step - ops - communication - optimizer)
** and the all-reduce's in-step factor; from zero3 steps at the middle micro-batch: the
** all-gather's and reduce-scatter's, then the prefetched all-gather's overlap. */
static int profile_steps(const GptDesc* d, const ProfileOptions* o, DeviceInfo* dev, const DpPoints* pts) {
  int N = comm_size(), np = pts->n;
  double optim[PROFILE_MAX_POINTS], ov[PROFILE_MAX_POINTS], ratio[PROFILE_MAX_POINTS];
  for (int j = 0; j < np; j++) {
    const PlanMeasure* m = &pts->m[j];
    ov[j] = m->step_s - m->optim_s - m->comm_s - pts->ops_s[j];
    if (ov[j] < 0) ov[j] = 0;
    optim[j] = m->optim_s;
  }
  /* The optimizer's step does not depend on the micro-batch: the median over the points (within
  ** one profile of small they ranged 3.5-6.8 ms, and their mean moved 20-50% between profiles,
  ** 1-2% of a micro-batch-1 step). */
  dev->optimizer_s_per_param = median_of(optim, np) / (double)d->n_params;
  OpTime* oh = &dev->op_times[d->nops];
  snprintf(oh->name, sizeof oh->name, "overhead");
  fit_op_time(pts->B, ov, np, &oh->fixed_s[0], &oh->per_sample_s[0]);
  oh->measured[0] = 1;
  if (N == 1) return 0;
  Plan p;
  for (int j = 0; j < np; j++) { /* all-reduce: median over the micro-batches of measured/replay */
    if (rotated_plan(d, pts->B[j], o->seq, 0, 0, o->precision, &p)) return -1; /* the plan measured */
    plan_model(dev, &p, COLL_ALLREDUCE)->in_step = 1;
    double alone = replay_exposed(d, dev, &p, COLL_ALLREDUCE);
    ratio[j] = alone > 0 ? pts->m[j].wait_s[COMM_ALLREDUCE] / alone : 1;
    plan_free(&p);
  }
  int jm = np / 2, B = pts->B[jm];
  if (rotated_plan(d, B, o->seq, 0, 0, o->precision, &p)) return -1;
  calibrate(d, dev, &p, COLL_ALLREDUCE, median_of(ratio, np) * replay_exposed(d, dev, &p, COLL_ALLREDUCE));
  plan_free(&p);
  int steps = o->steps + 1; /* one plan calibrates two kinds: one step more */
  profile_zero3(d, o, dev, pts, B, pts->B[0], steps);
  int H = device_ranks_per_host(dev);
  if (H > 1 && H < N) profile_hosts_steps(d, o, dev, pts, B, pts->B[np - 1], steps);
  int wl = device_world_shape(dev).level;
  const CollectiveModel *ar = device_link(dev, wl, COLL_ALLREDUCE), *ag = device_link(dev, wl, COLL_ALLGATHER),
                        *rs = device_link(dev, wl, COLL_REDUCE_SCATTER);
  if (o->verbose && comm_rank() == 0)
    printf("profile: inside steps vs alone%s: all-reduce x%.2f, all-gather x%.2f (prefetched x%.2f), "
           "reduce-scatter x%.2f; beside compute: all-reduce %.0f%%, prefetched all-gather %.0f%% "
           "(micro-batch %d)\n",
           H < N ? " (over the world)" : "", ar->in_step, ag->in_step,
           ag->async_in_step > 0 ? ag->async_in_step : ag->in_step, rs->in_step, 100 * ar->overlap,
           100 * ag->overlap, B);
  if (o->verbose && comm_rank() == 0 && H > 1 && H < N)
    printf("profile: inside steps vs alone (zero3 within hosts): all-gather x%.2f, reduce-scatter "
           "x%.2f; between hosts: all-reduce x%.2f, beside compute %.0f%%\n",
           dev->coll[COLL_ALLGATHER].in_step, dev->coll[COLL_REDUCE_SCATTER].in_step,
           dev->inter[COLL_ALLREDUCE].in_step, 100 * dev->inter[COLL_ALLREDUCE].overlap);
  return 0;
}

/* The layers of the copy a profile measures: o->layers (0: DEVICE_SLICE_LEVELS, the fewest
** that run every slice level in one step), at most the model's. */
static int profiled_layers(const GptDesc* d, const ProfileOptions* o) {
  int L = o->layers > 0 ? o->layers : DEVICE_SLICE_LEVELS;
  return L < d->cfg.n_layer ? L : d->cfg.n_layer;
}

/* The index in the copy c (fewer layers) of op i of the whole model d: the op at the same place
** in c's first layer for a layer op (identical layers, one fit), its twin outside the layers
** otherwise. */
static int op_in_copy(const GptDesc* d, const GptDesc* c, int i) {
  if (d->ops[i].layer < 0) return outer_op_in_copy(d, c, i);
  return gpt_layer_op(c, 0, (i - d->first_layer_op) % d->ops_per_layer);
}

/* Replaces dev->op_times, measured on the copy c, by the whole model d's: every op's times
** from its place in c (op_in_copy), named as in d; the overhead (the step's time outside ops,
** communication and optimizer: bookkeeping around each op) scaled by d's ops over c's. */
static int expand_op_times(const GptDesc* d, const GptDesc* c, DeviceInfo* dev) {
  OpTime* t = calloc((size_t)d->nops + 1, sizeof *t);
  if (!t) return osdp_fail("out of host memory");
  for (int i = 0; i < d->nops; i++) {
    t[i] = dev->op_times[op_in_copy(d, c, i)];
    snprintf(t[i].name, sizeof t[i].name, "%s", d->ops[i].name);
  }
  t[d->nops] = dev->op_times[c->nops];
  double scale = (double)d->nops / c->nops;
  for (int l = 0; l < DEVICE_SLICE_LEVELS; l++) {
    t[d->nops].fixed_s[l] *= scale;
    t[d->nops].per_sample_s[l] *= scale;
  }
  free(dev->op_times);
  dev->op_times = t;
  dev->n_op_times = d->nops + 1;
  return 0;
}

/* Measures the compute and the collectives inside steps on a copy of d with profiled_layers
** layers (d itself when it has no more) and leaves d's op times in dev. */
static int profile_model(const GptDesc* d, const ProfileOptions* o, DeviceInfo* dev) {
  GptDesc own;
  const GptDesc* c = d;
  int L = profiled_layers(d, o);
  if (L < d->cfg.n_layer) {
    GptConfig cfg = d->cfg;
    cfg.n_layer = L;
    if (gpt_desc_build(&own, &cfg)) return -1;
    c = &own;
    if (o->verbose && comm_rank() == 0)
      printf("profile: timing a copy with %d of the %d layers (identical layers share their times; "
             "--profile-layers N)\n", L, d->cfg.n_layer);
  }
  DpPoints pts;
  int rc = device_alloc_op_times(dev, c->nops + 1);
  if (!rc) rc = profile_compute(d, c, o, dev, &pts);
  if (!rc) rc = profile_steps(c, o, dev, &pts);
  if (!rc && c != d) rc = expand_op_times(d, c, dev);
  if (c != d) gpt_desc_free(&own);
  return rc;
}

int profile_device(const GptDesc* d, const ProfileOptions* opt, DeviceInfo* dev) {
  ProfileOptions own = *opt;
  const ProfileOptions* o = &own;
  own.started = now_seconds();
  memset(dev, 0, sizeof *dev);
  dev->ranks = comm_size();
  dev->threads = o->threads;
  const Backend* bk = o->backend ? o->backend : backend_cpu();
  snprintf(dev->backend, sizeof dev->backend, "%s", bk->name);
  dev->precision = o->precision;
  dev->mem_limit = o->mem_limit ? o->mem_limit : default_mem_limit(bk);
  bk->set_threads(o->threads);
  comm_use_backend(bk);
  if (profile_collectives(dev, bk, o->verbose)) return -1;
  dev->flops = 1e9 * profile_sgemm(d, bk, o->seq);
  snprintf(dev->compute_model, sizeof dev->compute_model, "%s", d->cfg.name);
  dev->compute_seq = o->seq;
  if (profile_model(d, o, dev)) {
    device_free(dev);
    return osdp_fail("profile: cannot run %s here to time it (%s); describe the device with "
                     "--flops instead", d->cfg.name, osdp_last_error());
  }
  return 0;
}
