/*
** cpu_kernels.c: the type-independent part of the CPU kernels: the thread count shared by
** our OpenMP loops and OpenBLAS, and the size of the attention scratch.
*/
#include <omp.h>
#include <cblas.h>
#include <stdlib.h>
#include "cpu_kernels.h"
#include "kernels/cpu_dnnl.h"
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

/* Elements of attention scratch needed per thread, the larger of the two passes' needs:
** forward: a [TILE_K, TILE_Q] score tile, Q_i^T [hs, TILE_Q], the [TILE_Q, hs] output
** accumulator and four values per query (running max and sum, new max, tile sum);
** backward: the P and dP/dS tiles, K_j^T and V_j^T [hs, TILE_K], and the T values
** rowsum(dO * O). Rounded up to 16 elements so that threads' slices start on separate cache
** lines. */
size_t attention_scratch_elems(int T, int hs) {
  size_t tile = (size_t)ATTENTION_TILE_Q * ATTENTION_TILE_K;
  size_t forward = tile + 2 * (size_t)ATTENTION_TILE_Q * (size_t)hs + 4 * (size_t)ATTENTION_TILE_Q;
  size_t backward = 2 * tile + 2 * (size_t)ATTENTION_TILE_K * (size_t)hs + (size_t)T;
  size_t n = forward > backward ? forward : backward;
  return (n + 15) / 16 * 16;
}

double kernels_sgemm_gflops(int M, int N, int K) {
  float* a = calloc((size_t)M * K, sizeof(float));
  float* b = calloc((size_t)K * N, sizeof(float));
  float* c = calloc((size_t)M * N, sizeof(float));
  double best = 1e30;
  for (int i = 0; a && b && c && i < 4; i++) {
    double t0 = now_seconds();
    cpu_sgemm('N', 'N', M, N, K, 1.0f, a, K, b, N, 0.0f, c, N); /* the linear layers' product */
    double t = now_seconds() - t0;
    if (i > 0 && t < best) best = t; /* the first run warms caches and threads */
  }
  free(a);
  free(b);
  free(c);
  return best < 1e30 ? 2.0 * M * N * K / best / 1e9 : 0.0;
}

const char* kernels_blas_core(void) { return openblas_get_corename(); }

const char* kernels_blas_config(void) { return openblas_get_config(); }
