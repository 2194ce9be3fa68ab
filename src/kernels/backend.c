/* backend.c: choosing a backend by name; the CUDA stand-in when built without CUDA. See backend.h. */
#include "kernels/backend.h"

#include <string.h>

#include "core/util.h"
#include "kernels/cpu_kernels.h"

const Backend* backend_by_name(const char* name, const char* field) {
  if (!strcmp(name, "cpu")) return backend_cpu();
  if (!strcmp(name, "cuda")) return backend_cuda();
  osdp_fail("%s: unknown device '%s': use cpu or cuda", field, name);
  return NULL;
}

/* The index of name in names[0..count), or -1: the parse of an enum from its names. */
static int name_index(const char* const* names, int count, const char* name) {
  for (int i = 0; i < count; i++)
    if (!strcmp(name, names[i])) return i;
  return -1;
}

/* The modes' names, indexed by MatmulMode. */
static const char* const matmul_mode_names[] = {"fp32", "tf32", "bf16"};

int matmul_mode_parse(const char* name) { return name_index(matmul_mode_names, 3, name); }

const char* matmul_mode_name(MatmulMode m) { return matmul_mode_names[m]; }

StepElems precision_elems(Precision p) {
  if (p == PRECISION_FP64) return (StepElems){8, 8, 8, 8};
  if (p == PRECISION_BF16) return (StepElems){2, 2, 4, 4};
  return (StepElems){4, 4, 4, 4};
}

/* The precisions' names, indexed by Precision. */
static const char* const precision_names[] = {"fp32", "fp64", "bf16"};

int precision_parse(const char* name) { return name_index(precision_names, 3, name); }

const char* precision_name(Precision p) { return precision_names[p]; }

/* Rounds to nearest even on the bits: adding 0x7fff plus the lowest kept bit carries into the
** kept half exactly when the dropped half is above one half, or equal to it with the kept half
** odd. A NaN keeps its sign and becomes quiet (the carry could otherwise make it an inf). */
osdp_bf16 osdp_bf16_from_float(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  osdp_bf16 h;
  if ((u & 0x7fffffffu) > 0x7f800000u) {
    h.bits = (uint16_t)((u >> 16) | 0x0040u);
    return h;
  }
  u += 0x7fffu + ((u >> 16) & 1u);
  h.bits = (uint16_t)(u >> 16);
  return h;
}

float osdp_bf16_to_float(osdp_bf16 h) {
  uint32_t u = (uint32_t)h.bits << 16;
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
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

#ifndef OSDP_HAVE_CUDA
/* Built without CUDA: says so (the real one is in src/kernels/cuda/cuda_backend.cu). */
const Backend* backend_cuda(void) {
  osdp_fail("--device cuda: this osdp was built without CUDA (no nvcc/cuBLAS found); rebuild "
            "with cmake -DOSDP_CUDA=ON on a machine with the CUDA toolkit, or use --device cpu");
  return NULL;
}

int backend_cuda_built(void) { return 0; }
#endif
