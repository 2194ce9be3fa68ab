/*
** bench_kernels.c: throughput of the fp32 attention and matmul kernels at GPT-2 124M shapes
** (B=4, T=256, C=768, NH=12; attention also at B=1, T=1024), compared with raw cblas_sgemm,
** for 1 and 2 threads, through the CPU backend's fp32 table. Not part of CTest: built with the
** project (CMakeLists.txt) as build/bench_kernels. On a VM that hides the CPU model OpenBLAS
** may pick its generic Prescott kernels (check with OPENBLAS_VERBOSE=2);
** OPENBLAS_CORETYPE=SkylakeX (or Haswell) then makes sgemm several times faster.
** FLOPs count the full T x T products of attention (2 flops per multiply-add, 12 T^2 hs per
** (b, h) for forward + backward) although the kernel skips the tiles above the diagonal and
** so does about half of them: the figure compares with the old kernel, which stored the
** T x T probabilities and computed every product in full.
*/
#include <cblas.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/util.h"
#include "kernels/backend.h"
#include "kernels/cpu_kernels.h"

enum { B = 4, T = 256, C = 768, NH = 12, BT = B * T, OC = 3072, V = 50257, VP = 50304,
       NPARAM = 1 << 24, REPS = 10, T_LONG = 1024, B_LONG = BT / T_LONG };

/* The kernels measured: the CPU backend's fp32 table (set by main). */
static const Kernels_f32* cpu;

/* malloc of n floats filled with small uniform random values. */
static float* frand(size_t n, Rng* rng) {
  float* a = malloc(n * sizeof(float));
  if (!a) { fprintf(stderr, "out of memory\n"); exit(1); }
  for (size_t i = 0; i < n; i++) a[i] = (float)(rng_uniform(rng) - 0.5);
  return a;
}

typedef struct {
  float *qkv, *lse, *out, *dout, *dqkv, *scratch;   /* attention, up to BT positions */
  float* scores;                                    /* raw sgemm heads: T_LONG^2 per thread (2) */
  int att_B, att_T;                                 /* attention shape being measured */
  float *inp, *w, *bias, *mout, *dinp, *dw, *dbias; /* matmul */
  float *logits, *losses;                           /* cross-entropy */
  float *pw, *pg, *pm, *pv;                         /* AdamW */
  int* targets;
} Bufs;

/* attention forward once, at the shape in b->att_B, b->att_T. */
static void run_attention_fwd(Bufs* b) {
  cpu->attention_forward(b->out, b->lse, b->qkv, b->qkv + C, b->qkv + 2 * C, 3 * C, 3 * C,
                         b->scratch, b->att_B, b->att_T, NH, NH, C / NH);
}

/* attention backward once (after a forward at the same shape). */
static void run_attention_bwd(Bufs* b) {
  cpu->attention_backward(b->dqkv, b->dqkv + C, b->dqkv + 2 * C, b->dout, b->qkv, b->qkv + C,
                          b->qkv + 2 * C, 3 * C, 3 * C, b->out, b->lse, b->scratch, b->att_B,
                          b->att_T, NH, NH, C / NH);
}

/* attention forward + backward once. */
static void run_attention(Bufs* b) {
  run_attention_fwd(b);
  run_attention_bwd(b);
}

/* matmul forward + backward once (K = C, OC = 4C, BT rows). */
static void run_matmul(Bufs* b) {
  cpu->matmul_forward(b->mout, b->inp, C, b->w, b->bias, BT, C, OC, 0);
  cpu->matmul_backward(b->dinp, b->dw, b->dbias, b->mout, b->inp, C, b->w, BT, C, OC, 1);
}

/* GELU forward + backward on the MLP activation [BT, 4C] (three slices of the logits). */
static void run_gelu(Bufs* b) {
  size_t n = (size_t)BT * OC;
  float *x = b->logits, *y = b->logits + n, *d = b->logits + 2 * n;
  cpu->gelu_forward(y, x, n);
  cpu->gelu_backward(d, x, y, n);
}

/* LayerNorm forward + backward on [BT, C]. */
static void run_layernorm(Bufs* b) {
  float* mean = b->losses;
  float* rstd = b->losses + BT;
  cpu->layernorm_forward(b->out, mean, rstd, b->inp, b->w, b->bias, BT, C);
  cpu->layernorm_backward(b->dinp, b->dw, b->dbias, b->dout, b->inp, b->w, mean, rstd, BT, C, 1);
}

/* Fused softmax cross-entropy on [BT, Vp] logits (re-randomising them is not needed: the
** kernel's cost does not depend on the values). */
static void run_crossentropy(Bufs* b) {
  cpu->crossentropy_forward_backward(b->logits, b->losses, b->targets, BT, V, VP, 1.0 / BT);
}

/* One AdamW step on NPARAM parameters. */
static void run_adamw(Bufs* b) {
  cpu->adamw_update(b->pw, b->pg, b->pm, b->pv, NPARAM, 1e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 3,
                    1.0f);
}

/* One raw sgemm with the matmul forward's shape. */
static void run_sgemm_big(Bufs* b) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, BT, OC, C, 1, b->inp, C, b->w, OC, 0,
              b->mout, OC);
}

/* Raw sgemms with the full (untiled) attention shapes: per (b, h), the six T x T x hs
** products, run in a parallel loop over heads (OpenBLAS set to 1 thread for the region), on
** contiguous operands, with a T x T result per thread. */
static void run_sgemm_heads(Bufs* b) {
  int hs = C / NH, Bn = b->att_B, Tn = b->att_T;
  openblas_set_num_threads(1);
  #pragma omp parallel for schedule(static) num_threads(kernels_threads())
  for (int bh = 0; bh < Bn * NH; bh++) {
    float* s = b->scores + (size_t)omp_get_thread_num() * Tn * Tn;
    float* x = b->qkv + (size_t)bh * Tn * hs;
    float* y = b->dqkv + (size_t)bh * Tn * hs;
    for (int r = 0; r < 3; r++) {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, Tn, Tn, hs, 1, x, hs, y, hs, 0, s, Tn);
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, Tn, hs, Tn, 1, s, Tn, x, hs, 0, y,
                  hs);
    }
  }
  openblas_set_num_threads(kernels_threads());
}

/* qsort comparison of doubles, ascending. */
static int compare_doubles(const void* x, const void* y) {
  double a = *(const double*)x, c = *(const double*)y;
  return a < c ? -1 : a > c;
}

/* Best and median of REPS wall times of fn, after one warm-up call. */
static void time_reps(void (*fn)(Bufs*), Bufs* b, double* best, double* median) {
  double t[REPS];
  fn(b);
  for (int r = 0; r < REPS; r++) {
    double t0 = now_seconds();
    fn(b);
    t[r] = now_seconds() - t0;
  }
  qsort(t, REPS, sizeof t[0], compare_doubles);
  *best = t[0];
  if (median) *median = t[REPS / 2];
}

/* Best-of-REPS wall time of fn, after one warm-up call. */
static double best_time(void (*fn)(Bufs*), Bufs* b) {
  double best;
  time_reps(fn, b, &best, NULL);
  return best;
}

/* Prints the attention lines for shape (Bn, Tn): forward + backward (best and median of
** REPS), forward and backward alone, and the raw full-size head sgemms, against the big
** sgemm time ts. */
static void report_attention(Bufs* b, int Bn, int Tn, double ts) {
  b->att_B = Bn;
  b->att_T = Tn;
  double att_flops = 12.0 * Tn * Tn * (C / NH) * Bn * NH;
  double sg_flops = 2.0 * BT * C * OC;
  double th = best_time(run_sgemm_heads, b);
  double ta, ta_med, tf, tb;
  time_reps(run_attention, b, &ta, &ta_med);
  tf = best_time(run_attention_fwd, b);
  tb = best_time(run_attention_bwd, b);
  printf("  raw sgemm heads B=%d T=%-4d (6x %dx%dx%d) %7.2f ms %7.1f GFLOP/s\n", Bn, Tn, Tn, Tn,
         C / NH, th * 1e3, att_flops / th * 1e-9);
  printf("  attention fwd+bwd B=%d T=%-4d  best %7.2f ms %7.1f GFLOP/s, median %7.2f ms %7.1f "
         "GFLOP/s (%.0f%% of big sgemm, %.0f%% of head sgemm); fwd %.2f ms, bwd %.2f ms\n",
         Bn, Tn, ta * 1e3, att_flops / ta * 1e-9, ta_med * 1e3, att_flops / ta_med * 1e-9,
         100 * (att_flops / ta) / (sg_flops / ts), 100 * th / ta, tf * 1e3, tb * 1e3);
}

int main(void) {
  Rng rng;
  rng_seed(&rng, 7);
  cpu = backend_cpu()->f32;
  size_t nq = (size_t)BT * 3 * C, nlse = (size_t)BT * NH;
  Bufs b = { frand(nq, &rng), frand(nlse, &rng), frand((size_t)BT * C, &rng),
             frand((size_t)BT * C, &rng), frand(nq, &rng),
             frand(attention_scratch_elems(T_LONG, C / NH) * 16, &rng),
             frand((size_t)T_LONG * T_LONG * 2, &rng), B, T,
             frand((size_t)BT * C, &rng), frand((size_t)C * OC, &rng), frand(OC, &rng),
             frand((size_t)BT * OC, &rng), frand((size_t)BT * C, &rng),
             frand((size_t)C * OC, &rng), frand(OC, &rng), frand((size_t)BT * VP, &rng),
             frand(2 * BT, &rng), frand(NPARAM, &rng), frand(NPARAM, &rng),
             frand(NPARAM, &rng), frand(NPARAM, &rng), malloc(BT * sizeof(int)) };
  for (int i = 0; i < NPARAM; i++) b.pv[i] = b.pv[i] * b.pv[i];
  for (int i = 0; i < BT; i++) b.targets[i] = (int)rng_below(&rng, V);
  double mm_flops = 3 * 2.0 * BT * C * OC;
  double sg_flops = 2.0 * BT * C * OC;
  for (int threads = 1; threads <= 2; threads++) {
    kernels_set_threads(threads);
    double ts = best_time(run_sgemm_big, &b);
    double tm = best_time(run_matmul, &b);
    printf("threads %d\n", threads);
    printf("  raw sgemm %dx%dx%d          %7.2f ms %7.1f GFLOP/s\n", BT, OC, C, ts * 1e3,
           sg_flops / ts * 1e-9);
    report_attention(&b, B, T, ts);
    report_attention(&b, B_LONG, T_LONG, ts);
    printf("  matmul fwd+bwd K=%d OC=%d     %7.2f ms %7.1f GFLOP/s (%.0f%% of sgemm)\n", C, OC,
           tm * 1e3, mm_flops / tm * 1e-9, 100 * (mm_flops / tm) / (sg_flops / ts));
    double tg = best_time(run_gelu, &b), tl = best_time(run_layernorm, &b);
    double tc = best_time(run_crossentropy, &b), tw = best_time(run_adamw, &b);
    printf("  gelu fwd+bwd [%d x %d]        %7.2f ms %7.2f ns/elem\n", BT, OC, tg * 1e3,
           tg / ((double)BT * OC) * 1e9);
    printf("  layernorm fwd+bwd [%d x %d]    %7.2f ms\n", BT, C, tl * 1e3);
    printf("  crossentropy [%d x %d]      %7.2f ms %7.2f ns/logit\n", BT, VP, tc * 1e3,
           tc / ((double)BT * VP) * 1e9);
    printf("  adamw %d params              %7.2f ms %7.2f ns/param\n", NPARAM, tw * 1e3,
           tw / NPARAM * 1e9);
  }
  free(b.qkv); free(b.lse); free(b.scores); free(b.out); free(b.dout); free(b.dqkv); free(b.scratch);
  free(b.inp); free(b.w); free(b.bias); free(b.mout); free(b.dinp); free(b.dw); free(b.dbias);
  free(b.logits); free(b.losses); free(b.pw); free(b.pg); free(b.pm); free(b.pv); free(b.targets);
  return 0;
}
