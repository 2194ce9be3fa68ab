/*
** cuda_check.h: the scaffolding both CUDA kernel checks share (tests/test_cuda_kernels.c, the
** backend's fp32 table, and tests/test_cuda_bf16.c, its bf16 table), so that each keeps only
** its own checks: starting the CUDA backend, or skipping (exit 77) only where no GPU is visible;
** one device block every test carves its buffers from; host and device buffers; the
** norm-relative comparison with the CPU and its check lines; the emulated cuBLASLt's count of
** products; a few inputs both draw alike (attention's q, k, v layout, RoPE's frequencies,
** cross-entropy targets, AdamW's state, logits_argmax's planted cases and their check).
** Everything is static: each test includes this header once, and it brings the C headers,
** check.h and the backend's interface with it.
*/
#ifndef OSDP_CUDA_CHECK_H
#define OSDP_CUDA_CHECK_H
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "core/util.h"
#include "kernels/backend.h"

/* bf16's unit roundoff: 8 significant bits, so rounding to nearest moves x by at most
** 2^-8 |x|, and truncation (rounding toward zero) by up to 2^-7 |x|. Both tests' bf16
** tolerances are multiples of it. */
#define BF16_U (1.0 / 256)
#define SKIP_EXIT 77 /* CTest's SKIP_RETURN_CODE */
#define DEVICE_BYTES ((size_t)64 << 20)

static Rng rng;
static const Backend* gpu;
static const Kernels_f32* ck; /* CPU kernels, fp32: the reference */

/* The layout of the check lines: the width of the name column, and whether a comparison's line
** also prints its tolerance. Each test sets them in main, before its first check. */
static int check_name_width;
static int check_print_tol;

#ifdef OSDP_CUDA_EMU
/* The emulated cuBLASLt's count of products (tools/cuda-emu/emu.cpp). */
long long emu_lt_matmuls(void);
#endif

/* The emulated cuBLASLt's count of products so far (0 on a GPU). */
static long long lt_count(void) {
#ifdef OSDP_CUDA_EMU
  return emu_lt_matmuls();
#else
  return 0;
#endif
}

/* Checks, in the emulation, that the kernel call between the count `before` and now made exactly
** `expected` cuBLASLt products (1: its epilogue path ran, 0: its unfused path). A GPU has no
** such count: there the comparison with the CPU is the check. */
static void check_lt_path(const char* name, long long before, int expected) {
#ifdef OSDP_CUDA_EMU
  long long made = emu_lt_matmuls() - before;
  CHECK_MSG(made == expected, "%s: %lld cuBLASLt products, expected %d (%s path)", name, made,
            expected, expected ? "the epilogue" : "the unfused");
#else
  (void)name; (void)before; (void)expected;
#endif
}

// ----------------------------------------------------------------------------
// host and device buffers

/* malloc that ends the test on failure. */
static void* xmalloc(size_t bytes) {
  void* p = malloc(bytes ? bytes : 1);
  if (!p) { fprintf(stderr, "out of memory\n"); exit(2); }
  return p;
}

/* A new array of n values normal(offset, sd). */
static float* frandn(size_t n, double sd, double offset) {
  float* a = xmalloc(n * sizeof(float));
  for (size_t i = 0; i < n; i++) a[i] = (float)(offset + sd * rng_normal(&rng));
  return a;
}

/* The device block every test carves its buffers from (one reserve), and the bytes in use. */
static char* device_base;
static size_t device_used;

/* The next `bytes` of the device block, 256-byte aligned. */
static void* device_alloc(size_t bytes) {
  size_t offset = (device_used + 255) / 256 * 256;
  if (offset + bytes > DEVICE_BYTES) {
    fprintf(stderr, "test device block too small for %zu more bytes\n", bytes);
    exit(2);
  }
  device_used = offset + bytes;
  return device_base + offset;
}

/* Frees every buffer carved so far (each test starts from an empty block). */
static void device_reset(void) { device_used = 0; }

/* A new device buffer holding a copy of host[0..bytes). */
static void* upload(const void* host, size_t bytes) {
  void* d = device_alloc(bytes);
  gpu->to_device(d, host, bytes);
  return d;
}

/* A new device buffer holding the floats host[0..n). */
static float* upload_f(const float* host, size_t n) { return upload(host, n * sizeof(float)); }
/* A new device buffer holding the ints host[0..n) (tokens, targets). */
static int* upload_i(const int* host, size_t n) { return upload(host, n * sizeof(int)); }

/* A new host copy of the device buffer of floats dev[0..n). */
static float* download_f(const float* dev, size_t n) {
  float* h = xmalloc(n * sizeof(float));
  gpu->to_host(h, dev, n * sizeof(float));
  return h;
}

// ----------------------------------------------------------------------------
// comparisons

/* max |a - ref| / max |ref| (0 when both are all zero). */
static double rel_err(const float* a, const float* ref, size_t n) {
  double diff = 0, scale = 0;
  for (size_t i = 0; i < n; i++) {
    diff = fmax(diff, fabs((double)a[i] - (double)ref[i]));
    scale = fmax(scale, fabs((double)ref[i]));
  }
  if (diff == 0) return 0;
  return scale > 0 ? diff / scale : INFINITY;
}

/* Prints a comparison's check line: its name, how many values it compared and their error (and
** the tolerance, where check_print_tol says so). */
static void print_check_line(const char* name, size_t n, double err, double tol) {
  printf("  %-*s %8zu values, max rel err %.2e", check_name_width, name, n, err);
  if (check_print_tol) printf(" (tol %.1e)", tol);
  printf("\n");
}

/* Checks got[0..n) (on the host) against the CPU's ref to tol (norm-relative); prints the
** error, returns it. */
static double check_close(const char* name, const float* got, const float* ref, size_t n,
                          double tol) {
  double err = rel_err(got, ref, n);
  print_check_line(name, n, err, tol);
  CHECK_MSG(err <= tol, "%s: relative error %.3g > %.3g", name, err, tol);
  return err;
}

/* Checks the device fp32 result dev[0..n) against the CPU's ref (see check_close). */
static double compare_f(const char* name, const float* dev, const float* ref, size_t n,
                        double tol) {
  float* got = download_f(dev, n);
  double err = check_close(name, got, ref, n, tol);
  free(got);
  return err;
}

/* Checks a scalar result against the CPU's to tol relative to |ref|; prints the error. */
static void compare_scalar(const char* name, double got, double ref, double tol) {
  double err = fabs(got - ref) / fmax(fabs(ref), 1e-300);
  print_check_line(name, 1, err, tol);
  CHECK_MSG(err <= tol, "%s: %.17g vs %.17g (relative error %.3g > %.3g)", name, got, ref, err,
            tol);
}

// ----------------------------------------------------------------------------
// inputs both tests draw alike

/* The layout of attention's q, k and v (and of their gradients) in one buffer of BT rows, C =
** NH * hs query columns: with *ldq 0, GPT-2's fused qkv (rows of 3C holding q, k and v side by
** side; *ldq and *ldkv become 3C), else three blocks of BT rows, *ldq, *ldkv and *ldkv wide. Sets
** the offsets ok and ov of k and v (q is at 0) and returns the buffer's length. */
static size_t attention_layout(size_t BT, int C, int* ldq, int* ldkv, size_t* ok, size_t* ov) {
  if (*ldq == 0) { /* GPT-2's fused qkv */
    *ldq = *ldkv = 3 * C;
    *ok = C;
    *ov = 2 * (size_t)C;
    return BT * 3 * C;
  }
  *ok = BT * *ldq;
  *ov = *ok + BT * *ldkv;
  return *ov + BT * *ldkv;
}

/* A new array of Llama's RoPE frequencies for head size hs: 10000^(-2j/hs) for j < hs / 2. */
static float* rope_inv_freq(int hs) {
  float* inv_freq = xmalloc((size_t)(hs / 2) * sizeof(float));
  for (int j = 0; j < hs / 2; j++) inv_freq[j] = (float)(1.0 / pow(10000.0, 2.0 * j / hs));
  return inv_freq;
}

/* A new array of BT cross-entropy targets (BT >= 2): random tokens below V, but -1 (no target)
** in row 1 and, where BT > 3, in the last row. */
static int* random_targets(int BT, int V) {
  int* targets = xmalloc((size_t)BT * sizeof(int));
  for (int i = 0; i < BT; i++) targets[i] = (int)rng_below(&rng, V);
  targets[1] = -1;
  if (BT > 3) targets[BT - 1] = -1;
  return targets;
}

/* New AdamW inputs of n values each: weights and gradients N(0, 1), first moments N(0, 0.1),
** second moments |N(0, 0.01)| (never negative). */
static void adamw_inputs(size_t n, float** w, float** g, float** m, float** v) {
  *w = frandn(n, 1, 0);
  *g = frandn(n, 1, 0);
  *m = frandn(n, 0.1, 0);
  *v = frandn(n, 0.01, 0);
  for (size_t i = 0; i < n; i++) (*v)[i] = fabsf((*v)[i]);
}

/* Plants logits_argmax's edge cases in rows 0 to 2 of logits (rows of Vp, V of them real): a
** tie (row 0: columns 10 and 500, the first wins), a tie at the row's two ends (row 1: 0 wins)
** and a larger value in the padding, which must be ignored (row 2: V - 1 wins). */
static void plant_argmax_cases(float* logits, int V, int Vp) {
  logits[0 * Vp + 10] = logits[0 * Vp + 500] = 100;       /* tie: 10 */
  logits[1 * Vp + 0] = logits[1 * Vp + V - 1] = 100;      /* tie: 0 */
  logits[2 * Vp + V - 1] = 50;
  logits[2 * Vp + V] = 1000;                               /* padding: ignored, V - 1 */
}

/* Checks the device's logits_argmax indices d_arg[0..BT) against the CPU's on the same logits
** (exactly) and against the planted cases (plant_argmax_cases); prints the check line. */
static void check_argmax(const int* d_arg, const float* logits, int BT, int V, int Vp) {
  int *ref = xmalloc((size_t)BT * sizeof(int)), *got = xmalloc((size_t)BT * sizeof(int));
  ck->logits_argmax(logits, BT, V, Vp, ref);
  gpu->to_host(got, d_arg, (size_t)BT * sizeof(int));
  int same = memcmp(ref, got, (size_t)BT * sizeof(int)) == 0;
  printf("  %-*s %8d rows, %s\n", check_name_width, "logits_argmax", BT,
         same ? "identical" : "DIFFERENT");
  CHECK(same);
  CHECK(got[0] == 10 && got[1] == 0 && got[2] == V - 1);
  free(ref); free(got);
}

// ----------------------------------------------------------------------------
// start and end

/* Whether the caller says a GPU is there (OSDP_REQUIRE_GPU set and not 0: scripts/gpu-check.sh
** sets it where `nvidia-smi -L` lists a GPU), so that no failure may read as "no GPU". */
static int gpu_required(void) {
  const char* require = getenv("OSDP_REQUIRE_GPU");
  return require != NULL && *require != '\0' && strcmp(require, "0") != 0;
}

/* Whether a backend_cuda() that failed with `why` may skip the test: only when the CUDA runtime
** sees no GPU at all (the backend's "no CUDA GPU is visible": no device, no driver) and no GPU is
** required. Any other failure at set-up (cudaSetDevice, a stream, cuBLAS, an allocation, a kernel
** attribute) is a broken backend, never "no GPU". tests/gpu_train.sh applies the same rule. */
static int may_skip(const char* why) {
  return !gpu_required() && why != NULL && strstr(why, "no CUDA GPU is visible") != NULL;
}

/* Starts the test named `test` (its messages begin so): the CUDA backend in gpu, or a skip where
** no GPU is visible (may_skip: one SKIP line) and a failure otherwise; then rng seeded with
** `seed`, the CPU's fp32 kernels in ck on one thread, matmul mode fp32 and the device block.
** Returns -1 when the checks may run, else main's exit status (SKIP_EXIT, or 1: failed). */
static int cuda_check_start(const char* test, uint64_t seed) {
  gpu = backend_cuda();
  if (gpu == NULL) {
    const char* why = osdp_last_error();
    if (may_skip(why)) {
      printf("%s: SKIP: %s\n", test, why);
      return SKIP_EXIT;
    }
    fprintf(stderr, "%s: FAIL: the CUDA backend did not start: %s%s\n", test, why,
            gpu_required() ? " (OSDP_REQUIRE_GPU is set: a GPU must be usable)" : "");
    return 1;
  }
  rng_seed(&rng, seed);
  ck = backend_cpu()->f32;
  backend_cpu()->set_threads(1);
  gpu->set_matmul_mode(MATMUL_FP32);
  device_base = gpu->reserve(DEVICE_BYTES);
  if (device_base == NULL) {
    fprintf(stderr, "%s: %s\n", test, osdp_last_error());
    return 1;
  }
  return -1;
}

/* Ends the checks: waits for the GPU's queued work, gives the device block back and prints the
** summary; returns main's exit status. */
static int cuda_check_finish(void) {
  gpu->synchronize();
  gpu->release(device_base, DEVICE_BYTES, DEVICE_BYTES);
  return check_summary();
}

#endif
