/*
** bench_kernels.c: throughput of the fp32 attention and matmul kernels at GPT-2 124M shapes
** (B=4, T=256, C=768, NH=12), compared with raw cblas_sgemm, for 1 and 2 threads.
** Not part of CTest. Build from the repository root with
**   gcc -std=c11 -O3 -march=x86-64-v2 -fopenmp -D_DEFAULT_SOURCE -Isrc
**     -I/usr/include/x86_64-linux-gnu/openblas-openmp src/kernels/cpu_kernels*.c
**     src/core/util.c bench/bench_kernels.c -L/usr/lib/x86_64-linux-gnu/openblas-openmp
**     -lopenblas -lm -o /tmp/bench_kernels
** and run /tmp/bench_kernels. On a VM that hides the CPU model OpenBLAS may pick its
** generic Prescott kernels (check with OPENBLAS_VERBOSE=2); OPENBLAS_CORETYPE=SkylakeX
** (or Haswell) then makes sgemm several times faster.
** FLOPs count the full T x T products of attention (2 flops per multiply-add).
*/
#include <cblas.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/util.h"
#include "kernels/cpu_kernels.h"

enum { B = 4, T = 256, C = 768, NH = 12, BT = B * T, OC = 3072, V = 50257, VP = 50304,
       NPARAM = 1 << 24, REPS = 10 };

/* malloc of n floats filled with small uniform random values. */
static float* frand(size_t n, Rng* rng) {
  float* a = malloc(n * sizeof(float));
  if (!a) { fprintf(stderr, "out of memory\n"); exit(1); }
  for (size_t i = 0; i < n; i++) a[i] = (float)(rng_uniform(rng) - 0.5);
  return a;
}

typedef struct {
  float *qkv, *att, *out, *dout, *dqkv, *scratch;   /* attention */
  float *inp, *w, *bias, *mout, *dinp, *dw, *dbias; /* matmul */
  float *logits, *losses;                           /* cross-entropy */
  float *pw, *pg, *pm, *pv;                         /* AdamW */
  int* targets;
} Bufs;

/* attention forward + backward once. */
static void run_attention(Bufs* b) {
  attention_forward_f32(b->out, b->att, b->qkv, B, T, C, NH);
  attention_backward_f32(b->dqkv, b->dout, b->qkv, b->att, b->scratch, B, T, C, NH);
}

/* matmul forward + backward once (K = C, OC = 4C, BT rows). */
static void run_matmul(Bufs* b) {
  matmul_forward_f32(b->mout, b->inp, C, b->w, b->bias, BT, C, OC, 0);
  matmul_backward_f32(b->dinp, b->dw, b->dbias, b->mout, b->inp, C, b->w, BT, C, OC);
}

/* GELU forward + backward on the MLP activation [BT, 4C] (three slices of the logits). */
static void run_gelu(Bufs* b) {
  size_t n = (size_t)BT * OC;
  float *x = b->logits, *y = b->logits + n, *d = b->logits + 2 * n;
  gelu_forward_f32(y, x, n);
  gelu_backward_f32(d, x, y, n);
}

/* LayerNorm forward + backward on [BT, C]. */
static void run_layernorm(Bufs* b) {
  float* mean = b->losses;
  float* rstd = b->losses + BT;
  layernorm_forward_f32(b->out, mean, rstd, b->inp, b->w, b->bias, BT, C);
  layernorm_backward_f32(b->dinp, b->dw, b->dbias, b->dout, b->inp, b->w, mean, rstd, BT, C);
}

/* Fused softmax cross-entropy on [BT, Vp] logits (re-randomising them is not needed: the
** kernel's cost does not depend on the values). */
static void run_crossentropy(Bufs* b) {
  crossentropy_forward_backward_f32(b->logits, b->losses, b->targets, BT, V, VP, 1.0 / BT);
}

/* One AdamW step on NPARAM parameters. */
static void run_adamw(Bufs* b) {
  adamw_update_f32(b->pw, b->pg, b->pm, b->pv, NPARAM, 1e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 3,
                   1.0f);
}

/* One raw sgemm with the matmul forward's shape. */
static void run_sgemm_big(Bufs* b) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, BT, OC, C, 1, b->inp, C, b->w, OC, 0,
              b->mout, OC);
}

/* Raw sgemms with attention's shapes: per (b, h), the six T x T x hs products, run in a
** parallel loop over heads as attention does (OpenBLAS set to 1 thread for the region),
** on contiguous operands. */
static void run_sgemm_heads(Bufs* b) {
  int hs = C / NH;
  openblas_set_num_threads(1);
  #pragma omp parallel for schedule(static) num_threads(kernels_threads())
  for (int bh = 0; bh < B * NH; bh++) {
    float* s = b->att + (size_t)bh * T * T;
    float* x = b->qkv + (size_t)bh * T * hs;
    float* y = b->dqkv + (size_t)bh * T * hs;
    for (int r = 0; r < 3; r++) {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, hs, 1, x, hs, y, hs, 0, s, T);
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, hs, T, 1, s, T, x, hs, 0, y, hs);
    }
  }
  openblas_set_num_threads(kernels_threads());
}

/* Best-of-REPS wall time of fn, after one warm-up call. */
static double best_time(void (*fn)(Bufs*), Bufs* b) {
  fn(b);
  double best = 1e30;
  for (int r = 0; r < REPS; r++) {
    double t0 = now_seconds();
    fn(b);
    double dt = now_seconds() - t0;
    if (dt < best) best = dt;
  }
  return best;
}

int main(void) {
  Rng rng;
  rng_seed(&rng, 7);
  size_t nq = (size_t)BT * 3 * C, na = (size_t)B * NH * T * T;
  Bufs b = { frand(nq, &rng), frand(na, &rng), frand((size_t)BT * C, &rng),
             frand((size_t)BT * C, &rng), frand(nq, &rng),
             frand(attention_scratch_elems(T) * 16, &rng),
             frand((size_t)BT * C, &rng), frand((size_t)C * OC, &rng), frand(OC, &rng),
             frand((size_t)BT * OC, &rng), frand((size_t)BT * C, &rng),
             frand((size_t)C * OC, &rng), frand(OC, &rng), frand((size_t)BT * VP, &rng),
             frand(2 * BT, &rng), frand(NPARAM, &rng), frand(NPARAM, &rng),
             frand(NPARAM, &rng), frand(NPARAM, &rng), malloc(BT * sizeof(int)) };
  for (int i = 0; i < NPARAM; i++) b.pv[i] = b.pv[i] * b.pv[i];
  for (int i = 0; i < BT; i++) b.targets[i] = (int)rng_below(&rng, V);
  double att_flops = 12.0 * T * T * (C / NH) * B * NH;
  double mm_flops = 3 * 2.0 * BT * C * OC;
  double sg_flops = 2.0 * BT * C * OC;
  double heads_flops = att_flops;
  for (int threads = 1; threads <= 2; threads++) {
    kernels_set_threads(threads);
    double ts = best_time(run_sgemm_big, &b);
    double th = best_time(run_sgemm_heads, &b);
    double ta = best_time(run_attention, &b);
    double tm = best_time(run_matmul, &b);
    printf("threads %d\n", threads);
    printf("  raw sgemm %dx%dx%d          %7.2f ms %7.1f GFLOP/s\n", BT, OC, C, ts * 1e3,
           sg_flops / ts * 1e-9);
    printf("  raw sgemm heads (6x %dx%dx%d) %6.2f ms %7.1f GFLOP/s\n", T, T, C / NH, th * 1e3,
           heads_flops / th * 1e-9);
    printf("  attention fwd+bwd               %7.2f ms %7.1f GFLOP/s (%.0f%% of big sgemm, "
           "%.0f%% of head sgemm)\n", ta * 1e3, att_flops / ta * 1e-9,
           100 * (att_flops / ta) / (sg_flops / ts), 100 * th / ta);
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
  free(b.qkv); free(b.att); free(b.out); free(b.dout); free(b.dqkv); free(b.scratch);
  free(b.inp); free(b.w); free(b.bias); free(b.mout); free(b.dinp); free(b.dw); free(b.dbias);
  free(b.logits); free(b.losses); free(b.pw); free(b.pg); free(b.pm); free(b.pv); free(b.targets);
  return 0;
}
