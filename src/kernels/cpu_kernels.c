/*
** cpu_kernels.c: the type-independent part of the CPU kernels: the thread count shared by
** our OpenMP loops and OpenBLAS, and the size of the attention backward scratch.
*/
#include <omp.h>
#include <cblas.h>
#include <stdlib.h>
#include "cpu_kernels.h"
#include "core/util.h"

static int g_threads = 1;

/* Sets the number of threads used by OpenMP loops and by OpenBLAS. The OpenMP build of
** OpenBLAS runs single-threaded when called inside one of our parallel regions, so the
** two never oversubscribe the cores. */
void kernels_set_threads(int n) {
  if (n < 1) n = 1;
  g_threads = n;
  omp_set_num_threads(n);
  openblas_set_num_threads(n);
}

/* Returns the thread count set by kernels_set_threads (1 by default). Kernels that index a
** per-thread scratch by omp_get_thread_num() run with exactly this many threads. */
int kernels_threads(void) {
  return g_threads;
}

/* Elements of attention_backward scratch needed per thread: one T x T matrix that holds
** dP = dO V^T and is then turned in place into dS, the gradient of the scores. */
size_t attention_scratch_elems(int T) {
  return (size_t)T * (size_t)T;
}

double kernels_sgemm_gflops(int M, int N, int K) {
  float* a = calloc((size_t)M * K, sizeof(float));
  float* b = calloc((size_t)K * N, sizeof(float));
  float* c = calloc((size_t)M * N, sizeof(float));
  double best = 1e30;
  for (int i = 0; a && b && c && i < 4; i++) {
    double t0 = now_seconds();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, N, K, 1.0f, a, K, b, N, 0.0f, c, N);
    double t = now_seconds() - t0;
    if (i > 0 && t < best) best = t; /* the first run warms caches and threads */
  }
  free(a);
  free(b);
  free(c);
  return best < 1e30 ? 2.0 * M * N * K / best / 1e9 : 0.0;
}

const char* kernels_blas_core(void) { return openblas_get_corename(); }
