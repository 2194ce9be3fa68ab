/* backend.c: choosing a backend by name; the CUDA stand-in when built without CUDA. See backend.h. */
#include "kernels/backend.h"

#include <string.h>

#include "core/util.h"
#include "kernels/cpu_dnnl.h"
#include "kernels/cpu_kernels.h"

const Backend* backend_by_name(const char* name, const char* field) {
  if (!strcmp(name, "cpu")) return backend_cpu();
  if (!strcmp(name, "cuda")) return backend_cuda();
  osdp_fail("%s: unknown device '%s': use cpu or cuda", field, name);
  return NULL;
}

double backend_matmul_gflops(const Backend* bk, int M, int N, int K) {
  if (bk == backend_cpu()) return kernels_sgemm_gflops(M, N, K);
  size_t n = (size_t)M * K + (size_t)K * N + (size_t)M * N;
  float* a = bk->reserve(n * sizeof(float));
  if (!a) { osdp_clear_error(); return 0; }
  bk->zero(a, n * sizeof(float));
  float *w = a + (size_t)M * K, *out = w + (size_t)K * N;
  double best = 1e30;
  for (int r = 0; r < 6; r++) { /* the first is a warm-up */
    double t0 = bk->clock();
    bk->f32->matmul_forward(out, a, K, w, NULL, M, K, N, 0);
    double t = bk->clock() - t0;
    if (r > 0 && t < best) best = t;
  }
  bk->release(a, n * sizeof(float), n * sizeof(float));
  return 2.0 * M * N * K / best / 1e9;
}

int backend_check_precision(const Backend* bk, Precision prec) {
  if (prec != PRECISION_BF16 || bk->bf16) return 0;
  const char* missing = "bf16 kernels";
  if (bk == backend_cpu() || !strcmp(bk->name, "cpu-staged")) {
    dnnl_bf16_supported(&missing);
    return osdp_fail("--precision bf16: this CPU lacks %s, which osdp's CPU bf16 kernels need "
                     "(without it a bf16 step would be several times slower than fp32, not "
                     "faster); use --precision fp32, or a CPU with AVX512_BF16 or AMX", missing);
  }
  return osdp_fail("--precision bf16: the %s backend has no %s; use --precision fp32", bk->name,
                   missing);
}

#ifndef OSDP_HAVE_CUDA
/* Built without CUDA: says so (the real one is in src/kernels/cuda/cuda_backend.cu). */
const Backend* backend_cuda(void) {
  osdp_fail("--device cuda: this osdp was built without CUDA (no nvcc/cuBLAS found); rebuild "
            "with cmake -DOSDP_CUDA=ON on a machine with the CUDA toolkit, or use --device cpu");
  return NULL;
}

int backend_cuda_built(void) { return 0; }
#endif
