/*
** test_cpu_bf16.c: the CPU's bf16 kernel table (cpu_kernels_bf16, src/kernels/cpu_bf16.c: bf16
** activations and weight copies, fp32 gradients, optimizer state and statistics) against the
** CPU's fp32 kernels (cpu_kernels_f32), as tests/test_cuda_bf16.c checks the CUDA bf16 table.
**
**  0. every entry of the table (KERNEL_LIST with act = wt = osdp_bf16, grad = stat = float) is
**     set;
**  1. every kernel on random inputs against the fp32 kernel on the SAME values: every bf16-role
**     input (act, wt) is drawn in fp32 and rounded to bf16 on the host; the fp32 kernel gets the
**     rounded floats, the bf16 kernel their bits; bf16 outputs are widened for the comparison.
**     Buffers a kernel accumulates into (+=) or leaves partly untouched are pre-filled with
**     random values (bf16 ones rounded), and the whole buffer is compared. Shapes: odd sizes (C
**     not a multiple of 16, T not a multiple of the attention tiles), strided inputs (ldinp >
**     K, q/k/v rows wider than their heads), grouped-query attention (NKV < NH), accumulate 0
**     and 1;
**  2. stores round to nearest even, once: compute_copy's and accumulate's bits are exactly
**     osdp_bf16_from_float's on values whose truncation differs from their rounding (halfway
**     cases both ways, above and below half, overflow to inf, NaN, subnormals); GELU's,
**     SwiGLU's, LayerNorm's, RMSNorm's, RoPE's and the cross-entropy's outputs are the fp32
**     results rounded to nearest even (but for a last-bit difference on a few elements next to
**     a rounding boundary) and differ from the fp32 results themselves (really bf16);
**     attention's dq, dk, dv accumulate in fp32 and round once (T = 512: nearly all of them are
**     the fp32 kernel's sums rounded to nearest; rounding once per tile instead fails that and,
**     on the longer sequences, ROUND_TOL);
**  3. determinism: attention (forward and both backward passes), LayerNorm's and the embedding
**     gradients are bit-identical with 1 and 2 threads.
** The matrix products (matmul_forward, matmul_backward, matmul_gelu_forward) run in oneDNN on a
** CPU with AVX512_BF16 or AMX (dnnl_bf16_supported); elsewhere the test turns on cpu_dnnl.h's
** emulated products (dnnl_bf16_emulate: fp32 sgemm on widened operands, the same contract), so
** that every check runs on any machine, and says so. Only where no products can run at all
** (dnnl_bf16_usable() still 0) are those checks left out, and the test then exits 77 (CTest:
** skipped) after the others, unless a check failed.
** The comparison is norm-relative, max_i |bf16[i] - fp32[i]| <= tol * max_i |fp32[i]|, with the
** tolerances below (test_cuda_bf16.c's); every comparison prints its error.
*/
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "core/util.h"
#include "kernels/backend.h"
#include "kernels/cpu_bf16.h"
#include "kernels/cpu_dnnl.h"
#include "kernels/cpu_kernels.h"

#define SKIP_EXIT 77 /* CTest's SKIP_RETURN_CODE (tests/cpu_bf16.cmake) */

/* bf16's unit roundoff: rounding to nearest moves x by at most 2^-8 |x|, truncation by up to
** 2^-7 |x|. */
#define BF16_U (1.0 / 256)
/* A bf16 output that is ONE rounding, to nearest, of a value computed to fp32 accuracy: at most
** u norm-relative; 1.25u leaves room for fp32 noise (attention's tiles differ in size from the
** fp32 kernel's) and fails a sum kept in bf16 and the larger outputs of a truncating store. */
#define ROUND_TOL (1.25 * BF16_U)
/* Two roundings in sequence: matmul + GELU computes GELU from the rounded pre. */
#define TWO_ROUND_TOL (2.5 * BF16_U)
/* fp32 outputs of osdp's own kernels from bf16 inputs (parameter gradients, statistics, losses):
** a product of two bf16 values is exact in fp32, so only the summation order may differ (here it
** is mostly the same: most are exact). */
#define F32_TOL 1e-5
/* fp32 outputs of oneDNN on bf16 operands (matmul_backward's dw): exact products, oneDNN's fp32
** accumulation order. */
#define GEMM_F32_TOL 1e-4
/* The rounding check (2.): the share of elements that must equal the fp32 result rounded to
** nearest even (a truncating store matches about half), and the share that must differ from the
** fp32 result itself (an fp32 store would match nearly all). */
#define ROUNDED_SHARE 0.99
#define NOT_FP32_SHARE 0.9

static Rng rng;
static const Kernels_bf16* bk = &cpu_kernels_bf16; /* under test */
static const Kernels_f32* ck = &cpu_kernels_f32;   /* the reference */

// ----------------------------------------------------------------------------
// buffers

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

/* A new copy of the floats a[0..n). */
static float* fcopy(const float* a, size_t n) {
  float* c = xmalloc(n * sizeof(float));
  memcpy(c, a, n * sizeof(float));
  return c;
}

/* x rounded to the nearest bf16 value (ties to even), as a float. */
static float bf16_round(float x) { return osdp_bf16_to_float(osdp_bf16_from_float(x)); }

/* A new array of n values normal(offset, sd) rounded to bf16: a bf16-role input (the fp32
** reference reads these floats, the bf16 kernel their to_bf16 bits). */
static float* brandn(size_t n, double sd, double offset) {
  float* a = frandn(n, sd, offset);
  for (size_t i = 0; i < n; i++) a[i] = bf16_round(a[i]);
  return a;
}

/* A new bf16 array holding a[0..n) rounded (exactly converted when a is bf16-representable). */
static osdp_bf16* to_bf16(const float* a, size_t n) {
  osdp_bf16* h = xmalloc(n * sizeof(osdp_bf16));
  for (size_t i = 0; i < n; i++) h[i] = osdp_bf16_from_float(a[i]);
  return h;
}

/* A new float array holding h[0..n) widened (exact). */
static float* widen(const osdp_bf16* h, size_t n) {
  float* a = xmalloc(n * sizeof(float));
  for (size_t i = 0; i < n; i++) a[i] = osdp_bf16_to_float(h[i]);
  return a;
}

// ----------------------------------------------------------------------------
// comparisons

/* max |a - ref| / max |ref| (0 when equal). */
static double rel_err(const float* a, const float* ref, size_t n) {
  double diff = 0, scale = 0;
  for (size_t i = 0; i < n; i++) {
    double d = fabs((double)a[i] - (double)ref[i]);
    diff = d > diff || isnan(d) ? d : diff;
    scale = fmax(scale, fabs((double)ref[i]));
  }
  if (diff == 0) return 0;
  return scale > 0 ? diff / scale : INFINITY;
}

/* Checks got[0..n) against ref to tol (norm-relative); prints the check line. */
static void check_close(const char* name, const float* got, const float* ref, size_t n,
                        double tol) {
  double err = rel_err(got, ref, n);
  printf("  %-66s %8zu values, max rel err %.2e (tol %.1e)\n", name, n, err, tol);
  CHECK_MSG(err <= tol, "%s: relative error %.3g > %.3g", name, err, tol);
}

/* Checks the bf16 result got[0..n) against the fp32 ref (see check_close). */
static void compare_bf16(const char* name, const osdp_bf16* got, const float* ref, size_t n,
                         double tol) {
  float* g = widen(got, n);
  check_close(name, g, ref, n, tol);
  free(g);
}

/* Checks a scalar against the reference to tol relative to |ref|. */
static void compare_scalar(const char* name, double got, double ref, double tol) {
  double err = fabs(got - ref) / fmax(fabs(ref), 1e-300);
  printf("  %-66s %8d values, max rel err %.2e (tol %.1e)\n", name, 1, err, tol);
  CHECK_MSG(err <= tol, "%s: %.17g vs %.17g", name, got, ref);
}

/* The bf16 values a and b (bf16-representable floats) are at most one bf16 step apart. */
static int within_one_step(float a, float b) {
  int32_t ia = osdp_bf16_from_float(a).bits, ib = osdp_bf16_from_float(b).bits;
  ia = ia & 0x8000 ? -(ia & 0x7fff) : ia;
  ib = ib & 0x8000 ? -(ib & 0x7fff) : ib;
  return abs(ia - ib) <= 1;
}

/* Checks that the bf16 result got[0..n) is the fp32 result ref rounded to nearest even, over the
** elements at least 2^-10 of the largest (test_cuda_bf16.c's check_rounded): equal for at least
** ROUNDED_SHARE of them (the kernels compute the fp32 kernels' expressions, so nearly all are
** equal; a last-bit difference in fp32 changes the rounding only next to a boundary) and at most
** one bf16 step away for all. With must_differ, also different from the fp32 value itself for
** at least NOT_FP32_SHARE. A truncating store fails the first check, an fp32 one the last. */
static void check_rounded(const char* name, const osdp_bf16* got_bf16, const float* ref, size_t n,
                          int must_differ) {
  float* got = widen(got_bf16, n);
  double scale = 0;
  for (size_t i = 0; i < n; i++) scale = fmax(scale, fabs((double)ref[i]));
  size_t counted = 0, rounded = 0, not_fp32 = 0, far = 0;
  for (size_t i = 0; i < n; i++) {
    if (fabs((double)ref[i]) < scale / 1024) continue;
    float want = bf16_round(ref[i]);
    counted++;
    rounded += got[i] == want;
    not_fp32 += got[i] != ref[i];
    far += !within_one_step(got[i], want);
  }
  double share = counted ? (double)rounded / counted : 0;
  double share_not = counted ? (double)not_fp32 / counted : 0;
  printf("  %-66s %8zu values, %.2f%% rounded to nearest, %.2f%% not fp32\n", name, counted,
         100 * share, 100 * share_not);
  CHECK_MSG(counted > 0 && share >= ROUNDED_SHARE,
            "%s: only %.2f%% are the fp32 result rounded to nearest", name, 100 * share);
  CHECK_MSG(far == 0, "%s: %zu values more than one bf16 step from the rounded fp32 result", name,
            far);
  if (must_differ)
    CHECK_MSG(share_not >= NOT_FP32_SHARE, "%s: %.2f%% equal the fp32 result: not bf16 storage?",
              name, 100 * (1 - share_not));
  free(got);
}

// ----------------------------------------------------------------------------
// the table

/* Every entry of KERNEL_LIST is set in the bf16 table. */
static void test_table(void) {
#define CHECK_TABLE_ENTRY(ret, kernel, params) \
  CHECK_MSG(bk->kernel != NULL, "cpu: bf16 table: %s is NULL", #kernel);
  KERNEL_LIST(CHECK_TABLE_ENTRY, osdp_bf16, osdp_bf16, float, float)
#undef CHECK_TABLE_ENTRY
}

// ----------------------------------------------------------------------------
// embeddings

/* embed_pos forward (a copy of bf16 values: exact) and backward into fp32 dwpe (maxT > T rows:
** the extra ones stay untouched), overwriting and accumulating over random values. */
static void test_embed_pos(void) {
  int B = 3, T = 37, C = 40, maxT = 50;
  size_t n = (size_t)B * T * C, nw = (size_t)maxT * C;
  float *wpe = brandn(nw, 1, 0), *out = xmalloc(n * sizeof(float));
  osdp_bf16 *b_wpe = to_bf16(wpe, nw), *b_out = xmalloc(n * sizeof(osdp_bf16));
  ck->embed_pos_forward(out, wpe, B, T, C);
  bk->embed_pos_forward(b_out, b_wpe, B, T, C);
  compare_bf16("embed_pos_forward (exact)", b_out, out, n, 0);
  for (int acc = 0; acc <= 1; acc++) {
    float *dwpe = frandn(nw, 1, 0), *dout = brandn(n, 1, 0);
    float* got = fcopy(dwpe, nw);
    osdp_bf16* b_dout = to_bf16(dout, n);
    ck->embed_pos_backward(dwpe, dout, B, T, C, acc);
    bk->embed_pos_backward(got, b_dout, B, T, C, acc);
    check_close(acc ? "embed_pos_backward.dwpe accumulate" : "embed_pos_backward.dwpe", got,
                dwpe, nw, F32_TOL);
    free(dwpe); free(dout); free(got); free(b_dout);
  }
  free(wpe); free(out); free(b_wpe); free(b_out);
}

/* embed_tok forward (bf16 out +=, one rounding) and backward (fp32 dwrows, accumulating and
** overwriting) on a slice of rows (c0, nrows) with many repeated tokens, and on whole rows. */
static void test_embed_tok(void) {
  int shapes[][5] = {/* BT, C, Vp, c0, nrows */ {77, 48, 128, 5, 30}, {300, 64, 256, 0, 64},
                     {50, 200, 128, 3, 150}};
  for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
    int BT = shapes[si][0], C = shapes[si][1], Vp = shapes[si][2], c0 = shapes[si][3];
    int nrows = shapes[si][4];
    size_t nt = (size_t)C * Vp, no = (size_t)BT * C, r0 = (size_t)c0 * Vp;
    int* tok = xmalloc((size_t)BT * sizeof(int));
    for (int i = 0; i < BT; i++) /* the first shape: 10 distinct tokens, many repeats */
      tok[i] = si == 0 ? (int)(rng_below(&rng, 10) * 13 % Vp) : (int)rng_below(&rng, Vp);
    tok[BT - 1] = Vp - 1;
    float *table = brandn(nt, 1, 0), *out = brandn(no, 1, 0);
    osdp_bf16 *b_table = to_bf16(table, nt), *b_out = to_bf16(out, no);
    ck->embed_tok_forward(out + c0, C, tok, BT, table + r0, nrows, Vp);
    bk->embed_tok_forward(b_out + c0, C, tok, BT, b_table + r0, nrows, Vp);
    char name[112];
    snprintf(name, sizeof name, "embed_tok_forward BT%d C%d rows %d..%d", BT, C, c0, c0 + nrows);
    compare_bf16(name, b_out, out, no, ROUND_TOL);
    check_rounded(name, b_out, out, no, 0);

    float *dt = frandn(nt, 1, 0), *dout = brandn(no, 1, 0);
    float* got = fcopy(dt, nt);
    osdp_bf16* b_dout = to_bf16(dout, no);
    for (int acc = 1; acc >= 0; acc--) {
      ck->embed_tok_backward(dt + r0, dout + c0, C, tok, BT, nrows, Vp, acc);
      bk->embed_tok_backward(got + r0, b_dout + c0, C, tok, BT, nrows, Vp, acc);
      snprintf(name, sizeof name, "embed_tok_backward.dwrows%s BT%d C%d rows %d..%d",
               acc ? "" : " overwrite", BT, C, c0, c0 + nrows);
      check_close(name, got, dt, nt, F32_TOL);
    }
    free(tok); free(table); free(out); free(b_table); free(b_out); free(dt); free(dout);
    free(got); free(b_dout);
  }
}

// ----------------------------------------------------------------------------
// matmul (oneDNN)

/* matmul forward with bias / without, accumulate 0 / 1, on strided inputs (ldinp > K); backward
** with dinp and dbias present and both NULL, dw and dbias accumulated and overwritten, over
** random values (dinp's padding columns must stay untouched: the whole strided buffer is
** compared). */
static void test_matmul(void) {
  int shapes[][4] = {/* BT, K, OC, ldinp */ {37, 50, 70, 64}, {64, 128, 96, 128},
                     {100, 33, 17, 40}, {1, 7, 5, 7}, {1000, 8, 600, 8}};
  for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
    int BT = shapes[si][0], K = shapes[si][1], OC = shapes[si][2], ld = shapes[si][3];
    size_t ni = (size_t)BT * ld, nw = (size_t)K * OC, no = (size_t)BT * OC;
    char name[112];
    for (int variant = 0; variant < 4; variant++) {
      int with_bias = variant & 1, acc = variant >> 1;
      float *inp = brandn(ni, 1, 0), *w = brandn(nw, 1, 0), *bias = brandn(OC, 1, 0);
      float* out = brandn(no, 1, 0);
      osdp_bf16 *b_out = to_bf16(out, no), *b_inp = to_bf16(inp, ni), *b_w = to_bf16(w, nw);
      osdp_bf16* b_bias = to_bf16(bias, OC);
      ck->matmul_forward(out, inp, ld, w, with_bias ? bias : NULL, BT, K, OC, acc);
      bk->matmul_forward(b_out, b_inp, ld, b_w, with_bias ? b_bias : NULL, BT, K, OC, acc);
      snprintf(name, sizeof name, "matmul_forward BT%d K%d OC%d ld%d%s%s", BT, K, OC, ld,
               with_bias ? " bias" : "", acc ? " accumulate" : "");
      compare_bf16(name, b_out, out, no, ROUND_TOL);
      free(inp); free(w); free(bias); free(out); free(b_out); free(b_inp); free(b_w);
      free(b_bias);
    }
    for (int variant = 0; variant < 4; variant++) {
      int optional = !(variant & 1), acc = variant >> 1;
      float *inp = brandn(ni, 1, 0), *w = brandn(nw, 1, 0), *dout = brandn(no, 1, 0);
      float *dinp = brandn(ni, 1, 0), *dw = frandn(nw, 1, 0), *db = frandn(OC, 1, 0);
      osdp_bf16 *b_dinp = to_bf16(dinp, ni), *b_dout = to_bf16(dout, no);
      osdp_bf16 *b_inp = to_bf16(inp, ni), *b_w = to_bf16(w, nw);
      float *g_dw = fcopy(dw, nw), *g_db = fcopy(db, OC);
      ck->matmul_backward(optional ? dinp : NULL, dw, optional ? db : NULL, dout, inp, ld, w, BT,
                          K, OC, acc);
      bk->matmul_backward(optional ? b_dinp : NULL, g_dw, optional ? g_db : NULL, b_dout, b_inp,
                          ld, b_w, BT, K, OC, acc);
      const char* which = optional ? (acc ? " accumulate" : "")
                          : acc ? " accumulate (dinp, dbias NULL)" : " (dinp, dbias NULL)";
      snprintf(name, sizeof name, "matmul_backward.dw BT%d K%d OC%d%s", BT, K, OC, which);
      check_close(name, g_dw, dw, nw, GEMM_F32_TOL);
      snprintf(name, sizeof name, "matmul_backward.dinp BT%d K%d OC%d ld%d%s", BT, K, OC, ld,
               which);
      compare_bf16(name, b_dinp, dinp, ni, ROUND_TOL);
      snprintf(name, sizeof name, "matmul_backward.dbias BT%d K%d OC%d%s", BT, K, OC, which);
      check_close(name, g_db, db, OC, F32_TOL);
      free(inp); free(w); free(dout); free(dinp); free(dw); free(db); free(b_dinp);
      free(b_dout); free(b_inp); free(b_w); free(g_dw); free(g_db);
    }
  }
}

/* matmul_gelu_forward against the fp32 matmul then GELU, with and without bias, overwriting and
** accumulating, the input a column slice of a wider row (ldinp > K) starting 0 or 1 element in:
** pre is one rounding, out GELU of the rounded pre rounded again. w is scaled by 1/sqrt(K), so
** pre is about N(0, 1), where GELU bends. */
static void test_matmul_gelu(void) {
  int shapes[][5] = {/* BT, K, OC, ldinp, first column */ {37, 50, 64, 64, 0},
                     {64, 128, 96, 130, 1}, {100, 33, 17, 40, 0}, {1, 7, 8, 8, 1}};
  for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
    int BT = shapes[si][0], K = shapes[si][1], OC = shapes[si][2], ld = shapes[si][3];
    int c0 = shapes[si][4];
    size_t ni = (size_t)BT * ld, nw = (size_t)K * OC, no = (size_t)BT * OC;
    for (int variant = 0; variant < 4; variant++) {
      int with_bias = variant & 1, acc = variant >> 1;
      float *inp = brandn(ni, 1, 0), *w = brandn(nw, 1 / sqrt(K), 0), *bias = brandn(OC, 0.5, 0);
      float *pre = brandn(no, 0.5, 0), *out = brandn(no, 1, 0);
      osdp_bf16 *b_pre = to_bf16(pre, no), *b_out = to_bf16(out, no);
      osdp_bf16 *b_inp = to_bf16(inp, ni), *b_w = to_bf16(w, nw), *b_bias = to_bf16(bias, OC);
      ck->matmul_gelu_forward(out, pre, inp + c0, ld, w, with_bias ? bias : NULL, BT, K, OC, acc);
      bk->matmul_gelu_forward(b_out, b_pre, b_inp + c0, ld, b_w, with_bias ? b_bias : NULL, BT, K,
                              OC, acc);
      char name[112];
      snprintf(name, sizeof name, "matmul_gelu_forward BT%d K%d OC%d ld%d+%d%s%s", BT, K, OC, ld,
               c0, with_bias ? " bias" : "", acc ? " accumulate" : "");
      compare_bf16(name, b_out, out, no, TWO_ROUND_TOL);
      strncat(name, " pre", sizeof name - strlen(name) - 1);
      compare_bf16(name, b_pre, pre, no, ROUND_TOL);
      free(inp); free(w); free(bias); free(pre); free(out); free(b_pre); free(b_out);
      free(b_inp); free(b_w); free(b_bias);
    }
  }
}

// ----------------------------------------------------------------------------
// LayerNorm, RMSNorm

/* LayerNorm forward (bf16 out, fp32 mean and rstd) and backward (bf16 dinp accumulates, fp32 dw
** and db accumulated, then overwritten), the backward on the fp32 kernel's statistics. C not a
** multiple of 16 in three shapes. */
static void test_layernorm(void) {
  int shapes[][2] = {{37, 100}, {5, 33}, {300, 768}, {1000, 40}};
  for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
    int BT = shapes[si][0], C = shapes[si][1];
    size_t n = (size_t)BT * C;
    float *inp = brandn(n, 1.5, 0.7), *w = brandn(C, 0.5, 1), *b = brandn(C, 0.5, 0);
    float *out = xmalloc(n * sizeof(float)), *mean = xmalloc(BT * sizeof(float));
    float *rstd = xmalloc(BT * sizeof(float)), *g_mean = xmalloc(BT * sizeof(float));
    float* g_rstd = xmalloc(BT * sizeof(float));
    osdp_bf16 *b_inp = to_bf16(inp, n), *b_w = to_bf16(w, C), *b_b = to_bf16(b, C);
    osdp_bf16* b_out = xmalloc(n * sizeof(osdp_bf16));
    ck->layernorm_forward(out, mean, rstd, inp, w, b, BT, C);
    bk->layernorm_forward(b_out, g_mean, g_rstd, b_inp, b_w, b_b, BT, C);
    char name[112];
    snprintf(name, sizeof name, "layernorm_forward BT%d C%d", BT, C);
    compare_bf16(name, b_out, out, n, ROUND_TOL);
    check_rounded(name, b_out, out, n, 1);
    snprintf(name, sizeof name, "layernorm_forward.mean BT%d C%d", BT, C);
    check_close(name, g_mean, mean, BT, F32_TOL);
    snprintf(name, sizeof name, "layernorm_forward.rstd BT%d C%d", BT, C);
    check_close(name, g_rstd, rstd, BT, F32_TOL);

    float *dout = brandn(n, 1, 0), *dinp = brandn(n, 1, 0), *dw = frandn(C, 1, 0);
    float* db = frandn(C, 1, 0);
    osdp_bf16 *b_dout = to_bf16(dout, n), *b_dinp = to_bf16(dinp, n);
    float *g_dw = fcopy(dw, C), *g_db = fcopy(db, C);
    for (int acc = 1; acc >= 0; acc--) {
      if (!acc) { /* dinp accumulates once more: the fp32 side continues from the rounded values */
        float* again = widen(b_dinp, n);
        memcpy(dinp, again, n * sizeof(float));
        free(again);
      }
      ck->layernorm_backward(dinp, dw, db, dout, inp, w, mean, rstd, BT, C, acc);
      bk->layernorm_backward(b_dinp, g_dw, g_db, b_dout, b_inp, b_w, mean, rstd, BT, C, acc);
      snprintf(name, sizeof name, "layernorm_backward.dinp%s BT%d C%d",
               acc ? "" : " (dw, db overwritten)", BT, C);
      compare_bf16(name, b_dinp, dinp, n, ROUND_TOL);
      if (acc) check_rounded(name, b_dinp, dinp, n, 0);
      snprintf(name, sizeof name, "layernorm_backward.dw%s BT%d C%d", acc ? "" : " overwrite", BT,
               C);
      check_close(name, g_dw, dw, C, F32_TOL);
      snprintf(name, sizeof name, "layernorm_backward.db%s BT%d C%d", acc ? "" : " overwrite", BT,
               C);
      check_close(name, g_db, db, C, F32_TOL);
    }
    free(inp); free(w); free(b); free(out); free(mean); free(rstd); free(g_mean); free(g_rstd);
    free(b_inp); free(b_w); free(b_b); free(b_out); free(dout); free(dinp); free(dw); free(db);
    free(b_dout); free(b_dinp); free(g_dw); free(g_db);
  }
}

/* RMSNorm forward (bf16 out, fp32 rstd) and backward (bf16 dinp accumulates, fp32 dw accumulated,
** then overwritten), the backward on the fp32 kernel's rstd. */
static void test_rmsnorm(void) {
  int shapes[][2] = {{37, 100}, {5, 33}, {300, 768}, {1000, 40}};
  for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
    int BT = shapes[si][0], C = shapes[si][1];
    size_t n = (size_t)BT * C;
    double eps = 1e-6;
    float *inp = brandn(n, 1.5, 0.3), *w = brandn(C, 0.5, 1);
    float *out = xmalloc(n * sizeof(float)), *rstd = xmalloc(BT * sizeof(float));
    float* g_rstd = xmalloc(BT * sizeof(float));
    osdp_bf16 *b_inp = to_bf16(inp, n), *b_w = to_bf16(w, C);
    osdp_bf16* b_out = xmalloc(n * sizeof(osdp_bf16));
    ck->rmsnorm_forward(out, rstd, inp, w, BT, C, eps);
    bk->rmsnorm_forward(b_out, g_rstd, b_inp, b_w, BT, C, eps);
    char name[112];
    snprintf(name, sizeof name, "rmsnorm_forward BT%d C%d", BT, C);
    compare_bf16(name, b_out, out, n, ROUND_TOL);
    check_rounded(name, b_out, out, n, 1);
    snprintf(name, sizeof name, "rmsnorm_forward.rstd BT%d C%d", BT, C);
    check_close(name, g_rstd, rstd, BT, F32_TOL);

    float *dout = brandn(n, 1, 0), *dinp = brandn(n, 1, 0), *dw = frandn(C, 1, 0);
    osdp_bf16 *b_dout = to_bf16(dout, n), *b_dinp = to_bf16(dinp, n);
    float* g_dw = fcopy(dw, C);
    for (int acc = 1; acc >= 0; acc--) {
      if (!acc) { /* the fp32 side continues from the bf16 kernel's rounded dinp */
        float* again = widen(b_dinp, n);
        memcpy(dinp, again, n * sizeof(float));
        free(again);
      }
      ck->rmsnorm_backward(dinp, dw, dout, inp, w, rstd, BT, C, acc);
      bk->rmsnorm_backward(b_dinp, g_dw, b_dout, b_inp, b_w, rstd, BT, C, acc);
      snprintf(name, sizeof name, "rmsnorm_backward.dinp%s BT%d C%d",
               acc ? "" : " (dw overwritten)", BT, C);
      compare_bf16(name, b_dinp, dinp, n, ROUND_TOL);
      snprintf(name, sizeof name, "rmsnorm_backward.dw%s BT%d C%d", acc ? "" : " overwrite", BT,
               C);
      check_close(name, g_dw, dw, C, F32_TOL);
    }
    free(inp); free(w); free(out); free(rstd); free(g_rstd); free(b_inp); free(b_w); free(b_out);
    free(dout); free(dinp); free(dw); free(b_dout); free(b_dinp); free(g_dw);
  }
}

// ----------------------------------------------------------------------------
// attention

/* The layout of attention's q, k and v (and of their gradients) in one buffer of BT rows, C = NH
** * hs query columns (test_cuda_bf16.c's): with *ldq 0, GPT-2's fused qkv (rows of 3C; *ldq and
** *ldkv become 3C), else three blocks of BT rows, *ldq, *ldkv and *ldkv wide. Sets the offsets
** ok and ov of k and v (q is at 0) and returns the buffer's length. */
static size_t attention_layout(size_t BT, int C, int* ldq, int* ldkv, size_t* ok, size_t* ov) {
  if (*ldq == 0) {
    *ldq = *ldkv = 3 * C;
    *ok = C;
    *ov = 2 * (size_t)C;
    return BT * 3 * C;
  }
  *ok = BT * *ldq;
  *ov = *ok + BT * *ldkv;
  return *ov + BT * *ldkv;
}

/* A new scratch for the attention kernels at the current thread count, exactly the size the
** backend gives them (kernels_threads() x attention_scratch_elems floats): a kernel that used
** more would write past it (AddressSanitizer in the sanitize build). */
static float* attention_scratch(int T, int hs) {
  return xmalloc(attention_scratch_elems(T, hs) * (size_t)kernels_threads() * sizeof(float));
}

/* Attention forward (bf16 out, fp32 lse) and backward (bf16 dq, dk, dv accumulate) for T = 1, T
** not a multiple of the tiles, several tiles (T = 300: 64-row forward tiles, 32-row backward
** tiles at hs 64; T = 200 at hs 128), B > 1, GPT-2's fused qkv and separate q, k, v buffers with
** rows wider than their heads, NKV = NH, NH = 2 NKV and a K/V head shared by six query heads,
** head sizes 16 to 128 and 40. q, k and v live in one buffer, their gradients too (pre-filled
** with random values: the gradients accumulate, the padding must come back untouched). The
** backward runs on the fp32 kernel's lse and on its out rounded to bf16 (what a bf16 step keeps),
** on both sides. The gradients of long sequences sum hundreds of tile contributions: kept in
** bf16 along the way they would miss ROUND_TOL. */
static void test_attention(void) {
  int shapes[][7] = {/* B, T, NH, NKV, hs, ldq, ldkv */
                     {2, 37, 2, 2, 32, 0, 0},     {1, 70, 2, 2, 128, 0, 0},
                     {1, 1, 2, 2, 32, 0, 0},      {1, 100, 1, 1, 64, 0, 0},
                     {2, 37, 4, 2, 32, 136, 72},  {1, 70, 6, 1, 48, 300, 50},
                     {2, 45, 3, 3, 16, 50, 49},   {1, 50, 2, 2, 40, 0, 0},
                     {1, 33, 4, 2, 40, 170, 90},  {1, 300, 4, 2, 64, 0, 0},
                     {1, 200, 2, 1, 128, 260, 130}};
  for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
    int B = shapes[si][0], T = shapes[si][1], NH = shapes[si][2], NKV = shapes[si][3];
    int hs = shapes[si][4], ldq = shapes[si][5], ldkv = shapes[si][6], C = NH * hs;
    size_t BT = (size_t)B * T, ok, ov;
    size_t nbuf = attention_layout(BT, C, &ldq, &ldkv, &ok, &ov);
    size_t no = BT * C, nl = (size_t)B * NH * T;
    float* scratch = attention_scratch(T, hs);
    float *buf = brandn(nbuf, 1, 0), *out = xmalloc(no * sizeof(float));
    float *lse = xmalloc(nl * sizeof(float)), *g_lse = xmalloc(nl * sizeof(float));
    osdp_bf16 *b_buf = to_bf16(buf, nbuf), *b_out = xmalloc(no * sizeof(osdp_bf16));
    ck->attention_forward(out, lse, buf, buf + ok, buf + ov, ldq, ldkv, scratch, B, T, NH, NKV,
                          hs);
    bk->attention_forward(b_out, g_lse, b_buf, b_buf + ok, b_buf + ov, ldq, ldkv, scratch, B, T,
                          NH, NKV, hs);
    char name[112], shape[80];
    snprintf(shape, sizeof shape, "B%d T%d NH%d NKV%d hs%d ldq%d ldkv%d", B, T, NH, NKV, hs, ldq,
             ldkv);
    snprintf(name, sizeof name, "attention_forward %s", shape);
    compare_bf16(name, b_out, out, no, ROUND_TOL);
    snprintf(name, sizeof name, "attention_forward.lse %s", shape);
    check_close(name, g_lse, lse, nl, F32_TOL);

    for (size_t i = 0; i < no; i++) out[i] = bf16_round(out[i]);
    float *dout = brandn(no, 1, 0), *dbuf = brandn(nbuf, 1, 0);
    osdp_bf16 *b_dbuf = to_bf16(dbuf, nbuf), *b_dout = to_bf16(dout, no), *b_o = to_bf16(out, no);
    ck->attention_backward(dbuf, dbuf + ok, dbuf + ov, dout, buf, buf + ok, buf + ov, ldq, ldkv,
                           out, lse, scratch, B, T, NH, NKV, hs);
    bk->attention_backward(b_dbuf, b_dbuf + ok, b_dbuf + ov, b_dout, b_buf, b_buf + ok,
                           b_buf + ov, ldq, ldkv, b_o, lse, scratch, B, T, NH, NKV, hs);
    snprintf(name, sizeof name, "attention_backward.dqkv %s", shape);
    compare_bf16(name, b_dbuf, dbuf, nbuf, ROUND_TOL);
    free(scratch); free(buf); free(out); free(lse); free(g_lse); free(b_buf); free(b_out);
    free(dout); free(dbuf); free(b_dbuf); free(b_dout); free(b_o);
  }
}

/* The gradients' single rounding, made visible: attention_backward on zeroed dq, dk, dv with
** out and dout such that every query's dq is a sum of many key tiles' parts and every key's dk,
** dv a sum of many query tiles' parts (T = 512, a long causal prefix), against the fp32 kernel's
** sums rounded once: nearly every value is exactly that rounding (check_rounded), which rounding
** after each tile's part would miss on a large share of them. */
static void test_attention_single_rounding(void) {
  int B = 1, T = 512, NH = 2, NKV = 1, hs = 64, C = NH * hs;
  int ldq = 0, ldkv = 0;
  size_t BT = (size_t)B * T, ok, ov;
  size_t nbuf = attention_layout(BT, C, &ldq, &ldkv, &ok, &ov);
  size_t no = BT * C, nl = (size_t)B * NH * T;
  float* scratch = attention_scratch(T, hs);
  float *buf = brandn(nbuf, 0.3, 0), *out = xmalloc(no * sizeof(float));
  float* lse = xmalloc(nl * sizeof(float));
  ck->attention_forward(out, lse, buf, buf + ok, buf + ov, ldq, ldkv, scratch, B, T, NH, NKV, hs);
  for (size_t i = 0; i < no; i++) out[i] = bf16_round(out[i]);
  float* dout = brandn(no, 1, 0);
  float* dbuf = xmalloc(nbuf * sizeof(float));
  memset(dbuf, 0, nbuf * sizeof(float));
  osdp_bf16 *b_buf = to_bf16(buf, nbuf), *b_dout = to_bf16(dout, no), *b_o = to_bf16(out, no);
  osdp_bf16* b_dbuf = to_bf16(dbuf, nbuf);
  ck->attention_backward(dbuf, dbuf + ok, dbuf + ov, dout, buf, buf + ok, buf + ov, ldq, ldkv, out,
                         lse, scratch, B, T, NH, NKV, hs);
  bk->attention_backward(b_dbuf, b_dbuf + ok, b_dbuf + ov, b_dout, b_buf, b_buf + ok, b_buf + ov,
                         ldq, ldkv, b_o, lse, scratch, B, T, NH, NKV, hs);
  check_rounded("attention_backward.dqkv T512 GQA: one rounding of the fp32 sums", b_dbuf, dbuf,
                nbuf, 1);
  free(scratch); free(buf); free(out); free(lse); free(dout); free(dbuf); free(b_buf);
  free(b_dout); free(b_o); free(b_dbuf);
}

// ----------------------------------------------------------------------------
// elementwise kernels, RoPE

/* GELU forward and (overwriting) backward, accumulate, SwiGLU forward and (overwriting) backward:
** to one rounding of the fp32 result, and that rounding exactly (check_rounded). n is odd, so
** the vector loops' remainders run too. */
static void test_elementwise(void) {
  size_t n = 10007;
  float *x = brandn(n, 2, 0), *y = brandn(n, 1, 0), *d = brandn(n, 1, 0);
  osdp_bf16 *b_x = to_bf16(x, n), *b_y = to_bf16(y, n), *b_d = to_bf16(d, n);
  float* out = xmalloc(n * sizeof(float));
  osdp_bf16* b_res = xmalloc(n * sizeof(osdp_bf16));

  ck->gelu_forward(out, x, n);
  bk->gelu_forward(b_res, b_x, n);
  compare_bf16("gelu_forward", b_res, out, n, ROUND_TOL);
  check_rounded("gelu_forward rounded to nearest even", b_res, out, n, 1);

  float* dinp = brandn(n, 1, 0);
  osdp_bf16* b_dinp = to_bf16(dinp, n);
  ck->gelu_backward(dinp, x, d, n);
  bk->gelu_backward(b_dinp, b_x, b_d, n);
  compare_bf16("gelu_backward", b_dinp, dinp, n, ROUND_TOL);
  check_rounded("gelu_backward rounded to nearest even", b_dinp, dinp, n, 1);

  float* dst = brandn(n, 1, 0);
  osdp_bf16* b_dst = to_bf16(dst, n);
  ck->accumulate(dst, y, n);
  bk->accumulate(b_dst, b_y, n);
  compare_bf16("accumulate", b_dst, dst, n, ROUND_TOL);
  check_rounded("accumulate rounded to nearest even", b_dst, dst, n, 0);

  /* SwiGLU with gate = x (|x| up to ~8, and a few far beyond exp's range), up = y */
  x[0] = 100; x[1] = -100; x[2] = 1000; x[3] = -1000;
  free(b_x);
  b_x = to_bf16(x, n);
  ck->swiglu_forward(out, x, y, n);
  bk->swiglu_forward(b_res, b_x, b_y, n);
  compare_bf16("swiglu_forward", b_res, out, n, ROUND_TOL);
  /* past the planted extremes, which would set the scale of the rounding check */
  check_rounded("swiglu_forward rounded to nearest even", b_res + 4, out + 4, n - 4, 1);
  float *dgate = brandn(n, 1, 0), *dup = brandn(n, 1, 0);
  osdp_bf16 *b_dgate = to_bf16(dgate, n), *b_dup = to_bf16(dup, n);
  ck->swiglu_backward(dgate, dup, d, x, y, n);
  bk->swiglu_backward(b_dgate, b_dup, b_d, b_x, b_y, n);
  compare_bf16("swiglu_backward.dgate", b_dgate, dgate, n, ROUND_TOL);
  compare_bf16("swiglu_backward.dup", b_dup, dup, n, ROUND_TOL);
  check_rounded("swiglu_backward.dup rounded to nearest even", b_dup + 4, dup + 4, n - 4, 1);
  free(x); free(y); free(d); free(out); free(dinp); free(dst); free(dgate); free(dup);
  free(b_x); free(b_y); free(b_d); free(b_res); free(b_dinp); free(b_dst); free(b_dgate);
  free(b_dup);
}

/* A new array of Llama's RoPE frequencies for head size hs: 10000^(-2j/hs) for j < hs / 2. */
static float* rope_inv_freq(int hs) {
  float* inv_freq = xmalloc((size_t)(hs / 2) * sizeof(float));
  for (int j = 0; j < hs / 2; j++) inv_freq[j] = (float)(1.0 / pow(10000.0, 2.0 * j / hs));
  return inv_freq;
}

/* RoPE forward and backward, in place, on rows wider than their heads (the padding must stay as
** it was: the whole buffer is compared), at positions up to 1999, hs 64, 128 and 160 (more pairs
** than the frequency chunk). */
static void test_rope(void) {
  int shapes[][5] = {/* B, T, nh, hs, ld */ {2, 37, 4, 64, 260}, {1, 2000, 1, 128, 130},
                     {3, 5, 3, 160, 500}};
  for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
    int B = shapes[si][0], T = shapes[si][1], nh = shapes[si][2], hs = shapes[si][3];
    int ld = shapes[si][4];
    size_t n = (size_t)B * T * ld;
    float* inv_freq = rope_inv_freq(hs);
    char name[112];
    for (int backward = 0; backward <= 1; backward++) {
      float* x = brandn(n, 1, 0);
      osdp_bf16* b_x = to_bf16(x, n);
      if (backward) {
        ck->rope_backward(x, ld, inv_freq, B, T, nh, hs);
        bk->rope_backward(b_x, ld, inv_freq, B, T, nh, hs);
      } else {
        ck->rope_forward(x, ld, inv_freq, B, T, nh, hs);
        bk->rope_forward(b_x, ld, inv_freq, B, T, nh, hs);
      }
      snprintf(name, sizeof name, "%s B%d T%d nh%d hs%d ld%d",
               backward ? "rope_backward" : "rope_forward", B, T, nh, hs, ld);
      compare_bf16(name, b_x, x, n, ROUND_TOL);
      check_rounded(name, b_x, x, n, 0);
      free(x); free(b_x);
    }
    free(inv_freq);
  }
}

// ----------------------------------------------------------------------------
// cross-entropy, sums, AdamW, argmax, compute copy

/* A new array of BT cross-entropy targets (BT >= 2): random tokens below V, but -1 (no target)
** in row 1 and, where BT > 3, in the last row. */
static int* random_targets(int BT, int V) {
  int* targets = xmalloc((size_t)BT * sizeof(int));
  for (int i = 0; i < BT; i++) targets[i] = (int)rng_below(&rng, V);
  targets[1] = -1;
  if (BT > 3) targets[BT - 1] = -1;
  return targets;
}

/* The fused cross-entropy on bf16 logits: dlogits (0 in the padding, whose random values must be
** overwritten, and on the rows without a target), fp32 losses (0 there) and their sum. */
static void test_crossentropy(void) {
  int shapes[][3] = {/* BT, V, Vp */ {20, 1000, 1024}, {2, 50257, 50304}, {4, 5, 128}};
  for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
    int BT = shapes[si][0], V = shapes[si][1], Vp = shapes[si][2];
    size_t n = (size_t)BT * Vp;
    int* targets = random_targets(BT, V);
    float *logits = brandn(n, 2, 0), *losses = frandn(BT, 1, 0);
    osdp_bf16* b_logits = to_bf16(logits, n);
    float* g_losses = frandn(BT, 1, 0);
    double scale = 1.0 / BT;
    ck->crossentropy_forward_backward(logits, losses, targets, BT, V, Vp, scale);
    bk->crossentropy_forward_backward(b_logits, g_losses, targets, BT, V, Vp, scale);
    char name[112];
    snprintf(name, sizeof name, "crossentropy.dlogits BT%d V%d Vp%d", BT, V, Vp);
    compare_bf16(name, b_logits, logits, n, ROUND_TOL);
    check_rounded(name, b_logits, logits, n, 0);
    snprintf(name, sizeof name, "crossentropy.losses BT%d V%d Vp%d", BT, V, Vp);
    check_close(name, g_losses, losses, BT, F32_TOL);
    snprintf(name, sizeof name, "sum_values of the losses BT%d V%d Vp%d", BT, V, Vp);
    compare_scalar(name, bk->sum_values(g_losses, (size_t)BT), ck->sum_values(losses, BT),
                   F32_TOL);
    free(targets); free(logits); free(losses); free(b_logits); free(g_losses);
  }
}

/* sum_squares, sum_squares_multi and AdamW take only fp32 arrays: the bf16 table's are the fp32
** kernels, so the results are bit-identical. */
static void test_fp32_kernels(void) {
  size_t sizes[] = {100003, 1, 1000, 77};
  enum { COUNT = sizeof sizes / sizeof sizes[0] };
  float* g[COUNT];
  int same = 1;
  for (int j = 0; j < COUNT; j++) {
    g[j] = frandn(sizes[j], 1, 0);
    same &= bk->sum_squares(g[j], sizes[j]) == ck->sum_squares(g[j], sizes[j]);
  }
  const float* cg[COUNT] = {g[0], g[1], g[2], g[3]};
  same &= bk->sum_squares_multi(cg, sizes, COUNT) == ck->sum_squares_multi(cg, sizes, COUNT);
  same &= bk->sum_squares_multi(cg, sizes, 0) == 0.0;
  size_t n = 10007;
  float *w = frandn(n, 1, 0), *gr = frandn(n, 1, 0), *m = frandn(n, 0.1, 0);
  float* v = frandn(n, 0.01, 0);
  for (size_t i = 0; i < n; i++) v[i] = fabsf(v[i]);
  float *w2 = fcopy(w, n), *m2 = fcopy(m, n), *v2 = fcopy(v, n);
  ck->adamw_update(w, gr, m, v, n, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.1f, 3, 0.5f);
  bk->adamw_update(w2, gr, m2, v2, n, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.1f, 3, 0.5f);
  same &= !memcmp(w, w2, n * sizeof(float)) && !memcmp(m, m2, n * sizeof(float)) &&
          !memcmp(v, v2, n * sizeof(float));
  float *ws[1] = {w}, *ms[1] = {m}, *vs[1] = {v}, *ws2[1] = {w2}, *ms2[1] = {m2}, *vs2[1] = {v2};
  const float* gs[1] = {gr};
  float wd[1] = {0.1f};
  ck->adamw_update_multi(ws, gs, ms, vs, &n, wd, 1, 1e-3f, 0.9f, 0.999f, 1e-8f, 4, 1.0f);
  bk->adamw_update_multi(ws2, gs, ms2, vs2, &n, wd, 1, 1e-3f, 0.9f, 0.999f, 1e-8f, 4, 1.0f);
  same &= !memcmp(w, w2, n * sizeof(float)) && !memcmp(m, m2, n * sizeof(float)) &&
          !memcmp(v, v2, n * sizeof(float));
  printf("  %-66s %s\n", "sum_squares[_multi], adamw_update[_multi] (fp32 kernels)",
         same ? "identical" : "DIFFERENT");
  CHECK_MSG(same, "the bf16 table's fp32-only kernels differ from the fp32 table's");
  for (int j = 0; j < COUNT; j++) free(g[j]);
  free(w); free(gr); free(m); free(v); free(w2); free(m2); free(v2);
}

/* logits_argmax on bf16 logits: random rows each with one planted largest value (bf16 has few
** values per octave, so random rows alone would tie), planted ties (the first index wins) and a
** larger value in the padding (ignored): the indices agree exactly with the fp32 kernel's. */
static void test_argmax(void) {
  int BT = 33, V = 1000, Vp = 1024;
  size_t n = (size_t)BT * Vp;
  float* logits = brandn(n, 1, 0);
  for (int i = 3; i < BT; i++) logits[(size_t)i * Vp + rng_below(&rng, V)] = 8 + i / 8;
  logits[0 * Vp + 10] = logits[0 * Vp + 500] = 100;  /* tie: 10 */
  logits[1 * Vp + 0] = logits[1 * Vp + V - 1] = 100; /* tie: 0 */
  logits[2 * Vp + V - 1] = 50;
  logits[2 * Vp + V] = 1000;                          /* padding: ignored, V - 1 */
  logits[3 * Vp + 7] = -0.0f;                         /* a row of negatives, but -0 */
  for (int v = 0; v < V; v++) if (v != 7) logits[3 * Vp + v] = -fabsf(logits[3 * Vp + v]) - 1;
  osdp_bf16* b_logits = to_bf16(logits, n);
  int *ref = xmalloc((size_t)BT * sizeof(int)), *got = xmalloc((size_t)BT * sizeof(int));
  ck->logits_argmax(logits, BT, V, Vp, ref);
  bk->logits_argmax(b_logits, BT, V, Vp, got);
  int same = memcmp(ref, got, (size_t)BT * sizeof(int)) == 0;
  printf("  %-66s %8d rows, %s\n", "logits_argmax", BT, same ? "identical" : "DIFFERENT");
  CHECK(same);
  CHECK(got[0] == 10 && got[1] == 0 && got[2] == V - 1 && got[3] == 7);
  free(logits); free(b_logits); free(ref); free(got);
}

/* compute_copy: fp32 master weights to bf16, bit for bit the host's osdp_bf16_from_float (round
** to nearest even), on random values and on the cases truncation or a careless rounding gets
** wrong: halfway values with an even and with an odd kept half, of both signs, values just above
** and below half a step, values that round up into the next octave or to inf, NaN (stays NaN),
** -0 and subnormals. */
static void test_compute_copy(void) {
  size_t n = 4099;
  float* src = frandn(n, 3, 0);
  uint32_t special[] = {0x3f808000u, 0x3f818000u, 0xbf808000u, 0xbf818000u, 0x3fffffffu,
                        0x7f7fffffu, 0x7f7f8000u, 0x80000000u, 0x00000001u, 0x00018000u,
                        0x80408000u, 0x3f80c000u, 0x3f808001u, 0x3f807fffu, 0x7fc00001u,
                        0xffc12345u, 0x7f800001u, 0x7f800000u, 0xff800000u, 0x3f81ffffu};
  size_t nspecial = sizeof special / sizeof special[0];
  for (size_t i = 0; i < nspecial; i++) memcpy(&src[i * 97], &special[i], sizeof(float));
  osdp_bf16* dst = xmalloc(n * sizeof(osdp_bf16));
  bk->compute_copy(dst, src, n);
  size_t wrong = 0, truncated_differs = 0;
  for (size_t i = 0; i < n; i++) {
    uint16_t want = osdp_bf16_from_float(src[i]).bits;
    uint32_t u;
    memcpy(&u, &src[i], sizeof u);
    truncated_differs += (uint16_t)(u >> 16) != want;
    if (dst[i].bits != want && wrong++ < 5)
      fprintf(stderr, "  compute_copy[%zu]: %a gave bf16 0x%04x, expected 0x%04x\n", i,
              (double)src[i], dst[i].bits, want);
  }
  printf("  %-66s %8zu values (%zu where truncation differs), %zu not rounded to nearest even\n",
         "compute_copy", n, truncated_differs, wrong);
  CHECK_MSG(wrong == 0, "compute_copy: %zu values not rounded to nearest even", wrong);
  CHECK(truncated_differs > n / 4); /* the check can tell truncation from rounding */
  free(src); free(dst);
}

/* accumulate on pairs whose exact sum (in fp32) lies exactly halfway between two bf16 values with
** an odd and with an even lower neighbour, just above and just below halfway, rounds up into the
** next octave, overflows to inf, or cancels to a subnormal: the bf16 sum is the fp32 sum rounded
** to nearest even (osdp_bf16_from_float); truncation would miss 6 of the 12 (checked). */
static void test_accumulate_rounding(void) {
  /* {dst, src} bf16 bit patterns */
  uint16_t pairs[][2] = {
    {0x3f80, 0x3c40}, /* 1 + 1.5 ulp: halfway, the lower neighbour odd: up */
    {0x3f81, 0x3b80}, /* (1 + 1 ulp) + 0.5 ulp: halfway, lower odd: up to even */
    {0x3f80, 0x3b80}, /* 1 + 0.5 ulp: halfway, lower even: stays 1 */
    {0x3f80, 0x3ba0}, /* 1 + 0.625 ulp: above half: up */
    {0x3f80, 0x3b60}, /* 1 + 0.4375 ulp: below half: down */
    {0xbf80, 0xbc40}, /* negative halfway: away from zero to even */
    {0x3fff, 0x3c00}, /* 1.9921875 + 0.0078125 = 2: exact, into the next octave */
    {0x7f7f, 0x7b00}, /* largest finite + half its ulp, odd: inf */
    {0x4000, 0xbb80}, /* 2 - 2^-8: halfway below an octave boundary: back up to 2 */
    {0x0081, 0x8080}, /* cancels to a subnormal, exact */
    {0x4049, 0x3d01}, /* 3.140625 + 0.031494140625: inexact, below half: down */
    {0x3f80, 0x3380}, /* 1 + 2^-24: far below half: 1 */
  };
  enum { NPAIR = sizeof pairs / sizeof pairs[0], REPS = 37 };
  size_t n = (size_t)NPAIR * REPS; /* many, so the vector loop and its remainder both see them */
  osdp_bf16 *dst = xmalloc(n * sizeof(osdp_bf16)), *src = xmalloc(n * sizeof(osdp_bf16));
  for (size_t i = 0; i < n; i++) {
    dst[i].bits = pairs[i % NPAIR][0];
    src[i].bits = pairs[i % NPAIR][1];
  }
  bk->accumulate(dst, src, n);
  size_t wrong = 0, truncated_differs = 0;
  for (size_t i = 0; i < n; i++) {
    float a = osdp_bf16_to_float((osdp_bf16){pairs[i % NPAIR][0]});
    float b = osdp_bf16_to_float((osdp_bf16){pairs[i % NPAIR][1]});
    float sum = a + b; /* exact in fp32 for these pairs */
    uint16_t want = osdp_bf16_from_float(sum).bits;
    uint32_t u;
    memcpy(&u, &sum, sizeof u);
    truncated_differs += i < NPAIR && (uint16_t)(u >> 16) != want;
    if (dst[i].bits != want && wrong++ < 5)
      fprintf(stderr, "  accumulate: 0x%04x + 0x%04x gave 0x%04x, expected 0x%04x\n",
              pairs[i % NPAIR][0], pairs[i % NPAIR][1], dst[i].bits, want);
  }
  printf("  %-66s %8zu values (%zu pairs where truncation differs), %zu wrong\n",
         "accumulate rounds to nearest even", n, truncated_differs, wrong);
  CHECK_MSG(wrong == 0, "accumulate: %zu sums not rounded to nearest even", wrong);
  CHECK(truncated_differs == 6); /* the pairs tell truncation from rounding */
  free(dst); free(src);
}

// ----------------------------------------------------------------------------
// determinism

/* The kernels with sums over rows or tiles give bit-identical results with 1 and 2 threads:
** attention forward and backward (GQA, several tiles), LayerNorm's backward (its column blocks)
** and the positional embedding's gradient. */
static void test_determinism(void) {
  int B = 2, T = 150, NH = 4, NKV = 2, hs = 32, C = NH * hs, ldq = 0, ldkv = 0;
  size_t BT = (size_t)B * T, ok, ov;
  size_t nbuf = attention_layout(BT, C, &ldq, &ldkv, &ok, &ov);
  size_t no = BT * C, nl = (size_t)B * NH * T;
  float* buf = brandn(nbuf, 1, 0);
  osdp_bf16 *b_buf = to_bf16(buf, nbuf), *b_dout = NULL;
  osdp_bf16 *outs[2], *dbufs[2];
  float* lses[2];
  float* dbuf0 = brandn(nbuf, 1, 0);
  float* ln_in = brandn(BT * 100, 1, 0);
  osdp_bf16 *b_ln = to_bf16(ln_in, BT * 100), *ln_dinp[2];
  float *ln_dw[2], *ln_db[2], *dwpe[2];
  float *mean = xmalloc(BT * sizeof(float)), *rstd = xmalloc(BT * sizeof(float));
  osdp_bf16* lnw = to_bf16(ln_in, 100);
  osdp_bf16* ln_out = xmalloc(BT * 100 * sizeof(osdp_bf16));
  bk->layernorm_forward(ln_out, mean, rstd, b_ln, lnw, lnw, (int)BT, 100);
  float* dout = brandn(no, 1, 0);
  b_dout = to_bf16(dout, no);
  for (int r = 0; r < 2; r++) {
    kernels_set_threads(r + 1);
    float* scratch = attention_scratch(T, hs);
    outs[r] = xmalloc(no * sizeof(osdp_bf16));
    lses[r] = xmalloc(nl * sizeof(float));
    bk->attention_forward(outs[r], lses[r], b_buf, b_buf + ok, b_buf + ov, ldq, ldkv, scratch, B,
                          T, NH, NKV, hs);
    dbufs[r] = to_bf16(dbuf0, nbuf);
    bk->attention_backward(dbufs[r], dbufs[r] + ok, dbufs[r] + ov, b_dout, b_buf, b_buf + ok,
                           b_buf + ov, ldq, ldkv, outs[r], lses[r], scratch, B, T, NH, NKV, hs);
    ln_dinp[r] = to_bf16(dbuf0, BT * 100);
    ln_dw[r] = xmalloc(100 * sizeof(float));
    ln_db[r] = xmalloc(100 * sizeof(float));
    bk->layernorm_backward(ln_dinp[r], ln_dw[r], ln_db[r], b_ln, b_ln, lnw, mean, rstd, (int)BT,
                           100, 0);
    dwpe[r] = xmalloc((size_t)T * C * sizeof(float));
    bk->embed_pos_backward(dwpe[r], b_dout, B, T, C, 0);
    free(scratch);
  }
  kernels_set_threads(1);
  int same = !memcmp(outs[0], outs[1], no * sizeof(osdp_bf16)) &&
             !memcmp(lses[0], lses[1], nl * sizeof(float));
  CHECK_MSG(same, "attention_forward differs between 1 and 2 threads");
  int same_b = !memcmp(dbufs[0], dbufs[1], nbuf * sizeof(osdp_bf16));
  CHECK_MSG(same_b, "attention_backward differs between 1 and 2 threads");
  int same_ln = !memcmp(ln_dinp[0], ln_dinp[1], BT * 100 * sizeof(osdp_bf16)) &&
                !memcmp(ln_dw[0], ln_dw[1], 100 * sizeof(float)) &&
                !memcmp(ln_db[0], ln_db[1], 100 * sizeof(float)) &&
                !memcmp(dwpe[0], dwpe[1], (size_t)T * C * sizeof(float));
  CHECK_MSG(same_ln, "layernorm_backward or embed_pos_backward differs between 1 and 2 threads");
  printf("  %-66s %s\n", "attention, layernorm_backward, embed_pos_backward: 1 vs 2 threads",
         same && same_b && same_ln ? "identical" : "DIFFERENT");
  for (int r = 0; r < 2; r++) {
    free(outs[r]); free(lses[r]); free(dbufs[r]); free(ln_dinp[r]); free(ln_dw[r]);
    free(ln_db[r]); free(dwpe[r]);
  }
  free(buf); free(b_buf); free(b_dout); free(dbuf0); free(ln_in); free(b_ln); free(mean);
  free(rstd); free(lnw); free(ln_out); free(dout);
}

// ----------------------------------------------------------------------------

/* Every check; the matrix products natively or emulated (see the header). Exits 1 when any check
** failed, 77 (skipped) when the products could not run at all. */
int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0); /* the check lines and CHECK's messages in order */
  rng_seed(&rng, 4242);
  kernels_set_threads(1);
  const char* missing = NULL;
  int native = dnnl_bf16_supported(&missing);
  if (!native) dnnl_bf16_emulate(1);
  int products = dnnl_bf16_usable();
  printf("test_cpu_bf16: %s; matrix products %s\n", dnnl_describe(),
         native ? "native" : products ? "EMULATED (fp32 sgemm: this CPU lacks native bf16)"
                                      : "unavailable");
  test_table();
  if (check_failed) return check_summary(); /* a NULL entry would crash the rest */
  test_embed_pos();
  test_embed_tok();
  if (products) {
    test_matmul();
    test_matmul_gelu();
  } else {
    printf("  matmul_forward, matmul_backward, matmul_gelu_forward: left out (no %s)\n",
           missing ? missing : "native bf16");
  }
  test_layernorm();
  test_rmsnorm();
  test_attention();
  test_attention_single_rounding();
  test_elementwise();
  test_rope();
  test_crossentropy();
  test_fp32_kernels();
  test_argmax();
  test_compute_copy();
  test_accumulate_rounding();
  test_determinism();
  int status = check_summary();
  if (status == 0 && !products) {
    printf("test_cpu_bf16: SKIP: the matrix products need %s; every other kernel passed\n",
           missing ? missing : "native bf16");
    return SKIP_EXIT;
  }
  return status;
}
