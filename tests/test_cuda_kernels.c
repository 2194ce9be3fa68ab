/*
** test_cuda_kernels.c: the CUDA backend (src/kernels/cuda) against the CPU backend.
**
** Exits 77 (CTest: skipped) only when the CUDA runtime sees no GPU and none is required (may_skip
** in tests/cuda_check.h, the scaffolding shared with test_cuda_bf16.c; any other failure to
** start fails). Otherwise, in matmul mode fp32 (MATMUL_FP32):
**  0. every entry of the backend's fp32 table (KERNEL_LIST) and every member of the backend is
**     set;
**  1. the backend's memory services: to_device, copy, zero and to_host round-trip bit-exactly,
**     available() reports free memory, and clock() advances over queued work;
**  2. every kernel of the fp32 table on random inputs of several shapes (T not a multiple of
**     the tile sizes, head sizes 16 to 128, grouped-query attention and rows wider than their
**     heads, accumulate on and off, ldinp > K, bias and dinp / dbias NULL or not, targets of
**     -1, RoPE at positions in the thousands) against the CPU kernel on the same inputs;
**     gradient buffers are pre-filled with random values, so the accumulating kernels must
**     accumulate;
**  3. the kernels that reduce (embedding, LayerNorm, RMSNorm and attention gradients, the loss,
**     the sum of squares) give bit-identical results when run twice;
**  4. in matmul modes tf32 and bf16, every matmul case of 2. still agrees to that format's
**     precision, and a larger product shows that the mode is in effect (in the emulation: equal
**     to the product of the inputs rounded to the format; on a GPU its error is printed);
**     attention too (on the tensor-core kernels of that precision for head sizes that are
**     multiples of 16, bit-identical twice), and bf16 attention visibly differs from TF32's.
** Also built against the CPU emulation of CUDA (tools/cuda-emu, -DOSDP_CUDA_EMU, CTest
** gpu_emu_kernels), where only the clock check's products are smaller.
** The comparison is norm-relative: max_i |gpu[i] - cpu[i]| <= tol * max_i |cpu[i]|, with
** tol = 1e-5 (fp32 against fp32 with a different summation order), 1e-12 for the sums of
** squares (both in double), 1e-2 for TF32 matmul and 3e-3 for TF32 attention, BF16_TOL and
** ATT_BF16_TOL (below) in bf16 mode. Every comparison prints its error.
*/
#include "cuda_check.h"
#include "kernels/cpu_kernels.h"

#define TOL 1e-5         /* fp32 GPU vs fp32 CPU, relative to the largest reference value */
#define DOUBLE_TOL 1e-12 /* sums accumulated in double on both sides */
#define TF32_TOL 1e-2    /* matmul on TF32 tensor cores */
#define ATT_TF32_TOL 3e-3 /* attention on TF32 tensor cores: inputs rounded to 10 mantissa bits */
/* bf16 mode: inputs rounded to 8 significant bits, unit roundoff u = 2^-8 = 3.9e-3. A product of
** two rounded inputs is off by at most 2u relative; over a K-term sum the rounding errors mostly
** cancel, so the norm-relative error stays near u (in the emulation: matmul 0.9e-3 to 4.2e-3,
** attention forward 1.2e-3 to 4.6e-3, lse 0.6e-3 to 1.5e-3, backward 2.3e-3 to 4.9e-3, at most
** 1.3u; each case prints its own). Attention, osdp's own kernels: 2.5u = 9.8e-3, twice the
** largest, and below what rounding toward zero instead of to nearest gives (tried: backward
** 1.26e-2). Matmul: 4u = 1.6e-2, as cuBLAS chooses how it converts (`CUBLAS_COMPUTE_32F_FAST_16BF`
** allows bf16 or TF32; a truncating conversion would double the error). u: BF16_U. */
#define BF16_TOL (4 * BF16_U)       /* matmul on bf16 tensor cores (cuBLAS) */
#define ATT_BF16_TOL (2.5 * BF16_U) /* attention on bf16 tensor cores: Q, K, V, dO, P, dS rounded */

static const Kernels_f32* gk; /* CUDA kernels */

// ----------------------------------------------------------------------------
// comparisons

/* Checks that the device buffers a and b hold bit-identical values (run-to-run determinism). */
static void compare_identical(const char* name, const float* a, const float* b, size_t n) {
  float *ha = download_f(a, n), *hb = download_f(b, n);
  CHECK_MSG(memcmp(ha, hb, n * sizeof(float)) == 0, "%s: two runs differ", name);
  free(ha);
  free(hb);
}

// ----------------------------------------------------------------------------
// the backend's table, memory services and clock

/* Every entry of KERNEL_LIST is set in the CUDA backend's fp32 table, and so is every member
** of the backend; its attention needs no scratch. */
static void test_table(void) {
#define CHECK_TABLE_ENTRY(ret, kernel, params) \
  CHECK_MSG(gk->kernel != NULL, "cuda: fp32 table: %s is NULL", #kernel);
  KERNEL_LIST(CHECK_TABLE_ENTRY, float, float, float, float)
#undef CHECK_TABLE_ENTRY
  CHECK(gpu->reserve && gpu->release && gpu->available && gpu->zero && gpu->copy &&
        gpu->to_device && gpu->to_host && gpu->synchronize && gpu->clock && gpu->set_threads &&
        gpu->set_matmul_mode && gpu->attention_scratch_elems && gpu->compute_stream);
  if (gpu->attention_scratch_elems) CHECK(gpu->attention_scratch_elems(1024, 64) == 0);
}

/* to_device, copy, zero of a middle range, to_host: the values come back bit-exact. Also the
** backend's identity and available(). */
static void test_memory(void) {
  device_reset();
  CHECK(strcmp(gpu->name, "cuda") == 0);
  CHECK(gpu->device_memory == 1);
  CHECK(gpu->f64 == NULL);
  CHECK(gpu->available() > 0);
  size_t n = 1000, z0 = 100, nz = 200;
  float* h = frandn(n, 1, 0);
  float* a = upload_f(h, n);
  float* b = device_alloc(n * sizeof(float));
  gpu->copy(b, a, n * sizeof(float));
  gpu->zero(b + z0, nz * sizeof(float));
  float* back = download_f(b, n);
  float* again = download_f(a, n);
  int ok = memcmp(again, h, n * sizeof(float)) == 0;
  for (size_t i = 0; i < n; i++) {
    float want = i >= z0 && i < z0 + nz ? 0.0f : h[i];
    ok &= memcmp(&back[i], &want, sizeof want) == 0;
  }
  CHECK_MSG(ok, "to_device / copy / zero / to_host round trip");
  int ints[5] = {3, -1, 7, 0, 1 << 30}, ints_back[5];
  gpu->to_host(ints_back, upload_i(ints, 5), sizeof ints);
  CHECK(memcmp(ints, ints_back, sizeof ints) == 0);
  free(h); free(back); free(again);
}

/* clock() advances over queued work (twenty 512^3 products; 128^3 in the CPU emulation, where
** they would only cost time) and never goes back. */
static void test_clock(void) {
  device_reset();
#ifdef OSDP_CUDA_EMU
  int n = 128;
#else
  int n = 512;
#endif
  size_t nn = (size_t)n * n;
  float *ha = frandn(nn, 1, 0), *hb = frandn(nn, 1, 0);
  float *a = upload_f(ha, nn), *b = upload_f(hb, nn), *c = device_alloc(nn * sizeof(float));
  double t0 = gpu->clock();
  for (int i = 0; i < 20; i++) gk->matmul_forward(c, a, n, b, NULL, n, n, n, 0);
  double t1 = gpu->clock();
  double t2 = gpu->clock();
  printf("  clock: 20 products of %d^3 took %.3g ms\n", n, (t1 - t0) * 1e3);
  CHECK_MSG(t1 > t0, "clock did not advance: %.9g then %.9g", t0, t1);
  CHECK(t2 >= t1);
  CHECK(t1 - t0 < 10);
  gpu->synchronize();
  free(ha); free(hb);
}

// ----------------------------------------------------------------------------
// embeddings

/* embed_pos forward and backward (dwpe has maxT > T rows: the extra ones stay untouched). */
static void test_embed_pos(void) {
  device_reset();
  int B = 3, T = 37, C = 40, maxT = 50;
  size_t n = (size_t)B * T * C, nw = (size_t)maxT * C;
  float *wpe = frandn(nw, 1, 0), *out = xmalloc(n * sizeof(float));
  ck->embed_pos_forward(out, wpe, B, T, C);
  float* d_out = device_alloc(n * sizeof(float));
  gk->embed_pos_forward(d_out, upload_f(wpe, nw), B, T, C);
  compare_f("embed_pos_forward", d_out, out, n, TOL);

  for (int acc = 0; acc <= 1; acc++) { /* overwrite, then accumulate, over random values */
    float *dwpe = frandn(nw, 1, 0), *dout = frandn(n, 1, 0);
    float* d_dwpe = upload_f(dwpe, nw);
    ck->embed_pos_backward(dwpe, dout, B, T, C, acc);
    gk->embed_pos_backward(d_dwpe, upload_f(dout, n), B, T, C, acc);
    compare_f(acc ? "embed_pos_backward accumulate" : "embed_pos_backward", d_dwpe, dwpe, nw, TOL);
    free(dwpe); free(dout);
  }
  free(wpe); free(out);
}

/* embed_tok forward and backward on a slice of rows (c0, nrows) and on whole rows, with many
** repeated tokens (including the last column Vp - 1); the backward twice, bit-identical, and
** once more overwriting (accumulate = 0) over random values. */
static void test_embed_tok(void) {
  int shapes[][5] = {/* BT, C, Vp, c0, nrows */ {77, 48, 128, 5, 30}, {1000, 64, 256, 0, 64}};
  for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
    device_reset();
    int BT = shapes[si][0], C = shapes[si][1], Vp = shapes[si][2], c0 = shapes[si][3];
    int nrows = shapes[si][4];
    size_t nt = (size_t)C * Vp, no = (size_t)BT * C;
    int* tok = xmalloc((size_t)BT * sizeof(int));
    for (int i = 0; i < BT; i++) {
      /* the first shape: 10 distinct tokens, so every batch of positions has repeats */
      tok[i] = si == 0 ? (int)(rng_below(&rng, 10) * 13 % Vp) : (int)rng_below(&rng, Vp);
    }
    tok[BT - 1] = Vp - 1;
    int* d_tok = upload_i(tok, BT);
    float *table = frandn(nt, 1, 0), *out = frandn(no, 1, 0);
    float* d_out = upload_f(out, no);
    ck->embed_tok_forward(out + c0, C, tok, BT, table + (size_t)c0 * Vp, nrows, Vp);
    gk->embed_tok_forward(d_out + c0, C, d_tok, BT, upload_f(table, nt) + (size_t)c0 * Vp, nrows,
                          Vp);
    char name[96];
    snprintf(name, sizeof name, "embed_tok_forward BT%d C%d rows %d..%d", BT, C, c0, c0 + nrows);
    compare_f(name, d_out, out, no, TOL);

    float *dt = frandn(nt, 1, 0), *dout = frandn(no, 1, 0);
    float *d_dt = upload_f(dt, nt), *d_dt2 = upload_f(dt, nt), *d_dout = upload_f(dout, no);
    ck->embed_tok_backward(dt + (size_t)c0 * Vp, dout + c0, C, tok, BT, nrows, Vp, 1);
    gk->embed_tok_backward(d_dt + (size_t)c0 * Vp, d_dout + c0, C, d_tok, BT, nrows, Vp, 1);
    gk->embed_tok_backward(d_dt2 + (size_t)c0 * Vp, d_dout + c0, C, d_tok, BT, nrows, Vp, 1);
    snprintf(name, sizeof name, "embed_tok_backward BT%d C%d rows %d..%d", BT, C, c0, c0 + nrows);
    compare_f(name, d_dt, dt, nt, TOL);
    compare_identical(name, d_dt, d_dt2, nt);
    float* d_dt3 = upload_f(dt, nt);
    ck->embed_tok_backward(dt + (size_t)c0 * Vp, dout + c0, C, tok, BT, nrows, Vp, 0);
    gk->embed_tok_backward(d_dt3 + (size_t)c0 * Vp, d_dout + c0, C, d_tok, BT, nrows, Vp, 0);
    snprintf(name, sizeof name, "embed_tok_backward overwrite BT%d C%d rows %d..%d", BT, C, c0,
             c0 + nrows);
    compare_f(name, d_dt3, dt, nt, TOL);
    free(tok); free(table); free(out); free(dt); free(dout);
  }
}

// ----------------------------------------------------------------------------
// matmul

/* The tolerance of matmul mode m's products against the CPU's fp32. */
static double matmul_tol(MatmulMode m) {
  return m == MATMUL_BF16 ? BF16_TOL : m == MATMUL_TF32 ? TF32_TOL : TOL;
}

/* Mode m's name in check lines (" BF16", " TF32"; fp32: none). */
static const char* mode_label(MatmulMode m) {
  return m == MATMUL_BF16 ? " BF16" : m == MATMUL_TF32 ? " TF32" : "";
}

/* matmul_gelu_forward in the matmul mode set (named `mode` in check lines), against the CPU's
** matmul then GELU: OC a multiple of 8 and overwriting (one cuBLASLt product with the GELU_AUX
** epilogue) and the unfused path (OC not a multiple of 8, accumulate), with and without bias, the
** input a column slice of a wider row (ldinp > K) starting 0 or 1 float in (a 4-byte aligned
** product). w is scaled by 1/sqrt(K), so pre is about N(0, 1) where GELU bends: in fp32 mode TOL
** then also tells the tanh GELU from the erf one (up to 4.7e-4 apart), on a GPU too. */
static void test_matmul_gelu_mode(double tol, const char* mode) {
  int shapes[][5] = {/* BT, K, OC, ldinp, first column */ {37, 50, 64, 64, 0},
                     {64, 128, 96, 130, 1}, {100, 33, 17, 40, 0}, {1, 7, 8, 8, 1}};
  for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
    int BT = shapes[si][0], K = shapes[si][1], OC = shapes[si][2], ld = shapes[si][3];
    int c0 = shapes[si][4];
    size_t ni = (size_t)BT * ld, nw = (size_t)K * OC, no = (size_t)BT * OC;
    for (int variant = 0; variant < 4; variant++) {
      device_reset();
      int with_bias = variant & 1, accumulate = variant >> 1;
      float *inp = frandn(ni, 1, 0), *w = frandn(nw, 1 / sqrt(K), 0), *bias = frandn(OC, 0.5, 0);
      float *pre = frandn(no, 0.5, 0), *out = frandn(no, 1, 0);
      float *d_pre = upload_f(pre, no), *d_out = upload_f(out, no);
      ck->matmul_gelu_forward(out, pre, inp + c0, ld, w, with_bias ? bias : NULL, BT, K, OC,
                              accumulate);
      float *d_inp = upload_f(inp, ni) + c0, *d_w = upload_f(w, nw);
      float* d_bias = with_bias ? upload_f(bias, OC) : NULL;
      long long before = lt_count();
      gk->matmul_gelu_forward(d_out, d_pre, d_inp, ld, d_w, d_bias, BT, K, OC, accumulate);
      char name[96];
      snprintf(name, sizeof name, "matmul_gelu%s BT%d K%d OC%d ld%d+%d%s%s", mode, BT, K, OC, ld,
               c0, with_bias ? " bias" : "", accumulate ? " acc" : "");
      /* fused: OC % 8 == 0 and overwriting; else matmul_forward (an epilogue with a bias) */
      check_lt_path(name, before, (OC % 8 == 0 && !accumulate) || with_bias);
      compare_f(name, d_out, out, no, tol);
      strncat(name, " pre", sizeof name - strlen(name) - 1);
      compare_f(name, d_pre, pre, no, tol);
      free(inp); free(w); free(bias); free(pre); free(out);
    }
  }
}

/* matmul forward with bias / without, accumulate 0 / 1, on strided inputs (ldinp > K); backward
** with dinp and dbias present and both NULL, dw and dbias accumulated and overwritten, over
** random values (the padding columns of dinp stay untouched, which the comparison of the whole
** strided buffer checks); then matmul_gelu_forward's cases. */
static void test_matmul_mode(MatmulMode m) {
  double tol = matmul_tol(m);
  const char* mode = mode_label(m);
  gpu->set_matmul_mode(m);
  /* the last: dbias over several row chunks of the column sums */
  int shapes[][4] = {/* BT, K, OC, ldinp */ {37, 50, 70, 64}, {64, 128, 96, 128},
                     {100, 33, 17, 40}, {1, 7, 5, 7}, {1000, 8, 600, 8}};
  for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
    int BT = shapes[si][0], K = shapes[si][1], OC = shapes[si][2], ld = shapes[si][3];
    size_t ni = (size_t)BT * ld, nw = (size_t)K * OC, no = (size_t)BT * OC;
    char name[96];
    for (int variant = 0; variant < 4; variant++) {
      device_reset();
      int with_bias = variant & 1, accumulate = variant >> 1;
      float *inp = frandn(ni, 1, 0), *w = frandn(nw, 1, 0), *bias = frandn(OC, 1, 0);
      float* out = frandn(no, 1, 0);
      float* d_out = upload_f(out, no);
      ck->matmul_forward(out, inp, ld, w, with_bias ? bias : NULL, BT, K, OC, accumulate);
      float *d_inp = upload_f(inp, ni), *d_w = upload_f(w, nw);
      float* d_bias = with_bias ? upload_f(bias, OC) : NULL;
      long long before = lt_count();
      gk->matmul_forward(d_out, d_inp, ld, d_w, d_bias, BT, K, OC, accumulate);
      snprintf(name, sizeof name, "matmul_forward%s BT%d K%d OC%d ld%d%s%s", mode, BT, K, OC, ld,
               with_bias ? " bias" : "", accumulate ? " accumulate" : "");
      check_lt_path(name, before, with_bias); /* the bias as cuBLASLt's epilogue */
      compare_f(name, d_out, out, no, tol);
      free(inp); free(w); free(bias); free(out);
    }
    for (int variant = 0; variant < 4; variant++) {
      int optional = !(variant & 1), acc = variant >> 1;
      device_reset();
      float *inp = frandn(ni, 1, 0), *w = frandn(nw, 1, 0), *dout = frandn(no, 1, 0);
      float *dinp = frandn(ni, 1, 0), *dw = frandn(nw, 1, 0), *db = frandn(OC, 1, 0);
      float *d_dinp = upload_f(dinp, ni), *d_dw = upload_f(dw, nw), *d_db = upload_f(db, OC);
      ck->matmul_backward(optional ? dinp : NULL, dw, optional ? db : NULL, dout, inp, ld, w, BT,
                          K, OC, acc);
      gk->matmul_backward(optional ? d_dinp : NULL, d_dw, optional ? d_db : NULL,
                          upload_f(dout, no), upload_f(inp, ni), ld, upload_f(w, nw), BT, K, OC,
                          acc);
      const char* which = optional ? (acc ? " accumulate" : "")
                          : (acc ? " accumulate (dinp, dbias NULL)" : " (dinp, dbias NULL)");
      snprintf(name, sizeof name, "matmul_backward.dw%s BT%d K%d OC%d%s", mode, BT, K, OC, which);
      compare_f(name, d_dw, dw, nw, tol);
      snprintf(name, sizeof name, "matmul_backward.dinp%s BT%d K%d OC%d ld%d%s", mode, BT, K, OC,
               ld, which);
      compare_f(name, d_dinp, dinp, ni, tol);
      snprintf(name, sizeof name, "matmul_backward.dbias%s BT%d K%d OC%d%s", mode, BT, K, OC,
               which);
      compare_f(name, d_db, db, OC, tol);
      free(inp); free(w); free(dout); free(dinp); free(dw); free(db);
    }
  }
  test_matmul_gelu_mode(tol, mode);
  gpu->set_matmul_mode(MATMUL_FP32);
}

/* matmul forward and backward in fp32 mode (fp32 products, TOL). */
static void test_matmul(void) { test_matmul_mode(MATMUL_FP32); }

/* x rounded as matmul mode m feeds the tensor cores: TF32 to nearest with ties away from zero
** (cvt.rna.tf32.f32), bf16 to nearest even; fp32 as it is. Inf and NaN are not used here. */
static float round_for_mode(float x, MatmulMode m) {
  uint32_t u;
  memcpy(&u, &x, 4);
  if (m == MATMUL_TF32) u = (u + 0x1000u) & 0xffffe000u;
  if (m == MATMUL_BF16) u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
  memcpy(&x, &u, 4);
  return x;
}

/* Matmul mode m (tf32 or bf16): every matmul case of test_matmul in that mode, to its tolerance,
** and a larger product whose error must show that the mode is in effect: more than fp32's TOL,
** and in the CPU emulation (whose cuBLAS rounds the inputs as the mode says) within 1e-6 of the
** product of the inputs rounded to the format, summed in double, which no other mode's
** rounding is. On a GPU the errors are printed (cuBLAS may pick a kernel without tensor cores).
** The mode is set back to fp32. */
static void test_matmul_fast(MatmulMode m) {
  test_matmul_mode(m);
  device_reset();
  int BT = 256, K = 512, OC = 384;
  size_t ni = (size_t)BT * K, nw = (size_t)K * OC, no = (size_t)BT * OC;
  float *inp = frandn(ni, 1, 0), *w = frandn(nw, 1, 0), *out = xmalloc(no * sizeof(float));
  float* d_out = device_alloc(no * sizeof(float));
  ck->matmul_forward(out, inp, K, w, NULL, BT, K, OC, 0);
  gpu->set_matmul_mode(m);
  gk->matmul_forward(d_out, upload_f(inp, ni), K, upload_f(w, nw), NULL, BT, K, OC, 0);
  gpu->set_matmul_mode(MATMUL_FP32);
  char name[96];
  snprintf(name, sizeof name, "matmul_forward%s BT256 K512 OC384", mode_label(m));
  compare_f(name, d_out, out, no, matmul_tol(m));
  float* got = download_f(d_out, no);
  double err = rel_err(got, out, no);
  /* the product of the rounded inputs, in double, rounded to float once */
  float* rounded = xmalloc(no * sizeof(float));
  for (int i = 0; i < BT; i++)
    for (int j = 0; j < OC; j++) {
      double sum = 0;
      for (int k = 0; k < K; k++)
        sum += (double)round_for_mode(inp[(size_t)i * K + k], m) *
               round_for_mode(w[(size_t)k * OC + j], m);
      rounded[(size_t)i * OC + j] = (float)sum;
    }
  double err_rounded = rel_err(got, rounded, no);
  snprintf(name, sizeof name, "%s in effect", mode_label(m) + 1);
  printf("  %-*s %s (error %.2e vs fp32's %.0e; %.2e from the product of the rounded inputs)\n",
         check_name_width, name, err > TOL ? "yes" : "no", err, TOL, err_rounded);
#ifdef OSDP_CUDA_EMU
  CHECK_MSG(err > TOL, "%s mode: error %.3g is fp32's: the inputs were not rounded", name, err);
  CHECK_MSG(err_rounded <= 1e-6, "%s mode: %.3g from the product of the inputs rounded to the "
            "format", name, err_rounded);
#endif
  free(inp); free(w); free(out); free(got); free(rounded);
}

// ----------------------------------------------------------------------------
// layernorm

/* layernorm forward (out, mean, rstd) and backward (dinp, dw, db accumulate), the backward
** twice, bit-identical. */
static void test_layernorm(void) {
  /* BT, C; the last two: the column sums over many row chunks (9000: the most chunks) */
  int shapes[][2] = {{37, 100}, {300, 768}, {5, 33}, {1000, 768}, {9000, 40}};
  for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
    device_reset();
    int BT = shapes[si][0], C = shapes[si][1];
    size_t n = (size_t)BT * C;
    float *inp = frandn(n, 1.5, 0.7), *w = frandn(C, 0.5, 1), *b = frandn(C, 0.5, 0);
    float *out = xmalloc(n * sizeof(float)), *mean = xmalloc(BT * sizeof(float));
    float* rstd = xmalloc(BT * sizeof(float));
    float *d_inp = upload_f(inp, n), *d_w = upload_f(w, C), *d_b = upload_f(b, C);
    float* d_out = device_alloc(n * sizeof(float));
    float *d_mean = device_alloc(BT * sizeof(float)), *d_rstd = device_alloc(BT * sizeof(float));
    ck->layernorm_forward(out, mean, rstd, inp, w, b, BT, C);
    gk->layernorm_forward(d_out, d_mean, d_rstd, d_inp, d_w, d_b, BT, C);
    char name[96];
    snprintf(name, sizeof name, "layernorm_forward BT%d C%d", BT, C);
    compare_f(name, d_out, out, n, TOL);
    snprintf(name, sizeof name, "layernorm_forward.mean BT%d C%d", BT, C);
    compare_f(name, d_mean, mean, BT, TOL);
    snprintf(name, sizeof name, "layernorm_forward.rstd BT%d C%d", BT, C);
    compare_f(name, d_rstd, rstd, BT, TOL);

    /* the backward of both runs on the CPU's saved statistics */
    float *dout = frandn(n, 1, 0), *dinp = frandn(n, 1, 0), *dw = frandn(C, 1, 0);
    float* db = frandn(C, 1, 0);
    float *d_dout = upload_f(dout, n), *d_m = upload_f(mean, BT), *d_r = upload_f(rstd, BT);
    float *d_dinp = upload_f(dinp, n), *d_dw = upload_f(dw, C), *d_db = upload_f(db, C);
    float *d_dinp2 = upload_f(dinp, n), *d_dw2 = upload_f(dw, C), *d_db2 = upload_f(db, C);
    ck->layernorm_backward(dinp, dw, db, dout, inp, w, mean, rstd, BT, C, 1);
    gk->layernorm_backward(d_dinp, d_dw, d_db, d_dout, d_inp, d_w, d_m, d_r, BT, C, 1);
    gk->layernorm_backward(d_dinp2, d_dw2, d_db2, d_dout, d_inp, d_w, d_m, d_r, BT, C, 1);
    snprintf(name, sizeof name, "layernorm_backward.dinp BT%d C%d", BT, C);
    compare_f(name, d_dinp, dinp, n, TOL);
    compare_identical(name, d_dinp, d_dinp2, n);
    snprintf(name, sizeof name, "layernorm_backward.dw BT%d C%d", BT, C);
    compare_f(name, d_dw, dw, C, TOL);
    compare_identical(name, d_dw, d_dw2, C);
    snprintf(name, sizeof name, "layernorm_backward.db BT%d C%d", BT, C);
    compare_f(name, d_db, db, C, TOL);
    compare_identical(name, d_db, d_db2, C);
    /* the weight and bias gradients overwritten (accumulate = 0) over the values just made */
    ck->layernorm_backward(dinp, dw, db, dout, inp, w, mean, rstd, BT, C, 0);
    gk->layernorm_backward(d_dinp, d_dw, d_db, d_dout, d_inp, d_w, d_m, d_r, BT, C, 0);
    snprintf(name, sizeof name, "layernorm_backward.dw overwrite BT%d C%d", BT, C);
    compare_f(name, d_dw, dw, C, TOL);
    snprintf(name, sizeof name, "layernorm_backward.db overwrite BT%d C%d", BT, C);
    compare_f(name, d_db, db, C, TOL);
    free(inp); free(w); free(b); free(out); free(mean); free(rstd);
    free(dout); free(dinp); free(dw); free(db);
  }
}

// ----------------------------------------------------------------------------
// RMSNorm

/* rmsnorm forward (out, rstd) and backward (dinp accumulates, dw accumulated and then
** overwritten), the backward twice, bit-identical. */
static void test_rmsnorm(void) {
  /* BT, C; the last two: the column sums over many row chunks (9000: the most chunks) */
  int shapes[][2] = {{37, 100}, {300, 768}, {5, 33}, {1000, 768}, {9000, 40}};
  for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
    device_reset();
    int BT = shapes[si][0], C = shapes[si][1];
    size_t n = (size_t)BT * C;
    double eps = 1e-6;
    float *inp = frandn(n, 1.5, 0.3), *w = frandn(C, 0.5, 1);
    float *out = xmalloc(n * sizeof(float)), *rstd = xmalloc(BT * sizeof(float));
    float *d_inp = upload_f(inp, n), *d_w = upload_f(w, C);
    float *d_out = device_alloc(n * sizeof(float)), *d_rstd = device_alloc(BT * sizeof(float));
    ck->rmsnorm_forward(out, rstd, inp, w, BT, C, eps);
    gk->rmsnorm_forward(d_out, d_rstd, d_inp, d_w, BT, C, eps);
    char name[96];
    snprintf(name, sizeof name, "rmsnorm_forward BT%d C%d", BT, C);
    compare_f(name, d_out, out, n, TOL);
    snprintf(name, sizeof name, "rmsnorm_forward.rstd BT%d C%d", BT, C);
    compare_f(name, d_rstd, rstd, BT, TOL);

    /* the backward of both runs on the CPU's saved rstd */
    float *dout = frandn(n, 1, 0), *dinp = frandn(n, 1, 0), *dw = frandn(C, 1, 0);
    float *d_dout = upload_f(dout, n), *d_r = upload_f(rstd, BT);
    float *d_dinp = upload_f(dinp, n), *d_dw = upload_f(dw, C);
    float *d_dinp2 = upload_f(dinp, n), *d_dw2 = upload_f(dw, C);
    ck->rmsnorm_backward(dinp, dw, dout, inp, w, rstd, BT, C, 1);
    gk->rmsnorm_backward(d_dinp, d_dw, d_dout, d_inp, d_w, d_r, BT, C, 1);
    gk->rmsnorm_backward(d_dinp2, d_dw2, d_dout, d_inp, d_w, d_r, BT, C, 1);
    snprintf(name, sizeof name, "rmsnorm_backward.dinp BT%d C%d", BT, C);
    compare_f(name, d_dinp, dinp, n, TOL);
    compare_identical(name, d_dinp, d_dinp2, n);
    snprintf(name, sizeof name, "rmsnorm_backward.dw BT%d C%d", BT, C);
    compare_f(name, d_dw, dw, C, TOL);
    compare_identical(name, d_dw, d_dw2, C);
    ck->rmsnorm_backward(dinp, dw, dout, inp, w, rstd, BT, C, 0);
    gk->rmsnorm_backward(d_dinp, d_dw, d_dout, d_inp, d_w, d_r, BT, C, 0);
    snprintf(name, sizeof name, "rmsnorm_backward.dinp (dw overwritten) BT%d C%d", BT, C);
    compare_f(name, d_dinp, dinp, n, TOL);
    snprintf(name, sizeof name, "rmsnorm_backward.dw overwrite BT%d C%d", BT, C);
    compare_f(name, d_dw, dw, C, TOL);
    free(inp); free(w); free(out); free(rstd); free(dout); free(dinp); free(dw);
  }
}

// ----------------------------------------------------------------------------
// attention

/* attention forward (out, lse) and backward (dq, dk, dv accumulate) for T = 1, T below, at and
** not a multiple of the tile sizes (32 on the GPU, 64 on the CPU), several tiles, B > 1, NH 1
** and 2, head sizes 16, 32, 40, 48, 64 and 128, on GPT-2's fused qkv (ldq = 0 below) and on
** separate q, k, v buffers with rows wider than their heads, with NKV = NH, NH = 2 NKV,
** NH = 4 NKV and one K/V head for six query heads. q, k and v live in one buffer (their
** gradients too, the padding included, which must come back untouched). The backward runs on
** the CPU's out and lse, twice on the GPU, bit-identical. The GPU gets no scratch (it uses
** none). Returns the largest forward error (out) of the head sizes that are multiples of 16 (the
** tensor-core kernels' in tf32 and bf16 modes). */
static double attention_cases(const char* mode, double tol) {
  double tc_err = 0;
  int shapes[][7] = {/* B, T, NH, NKV, hs, ldq, ldkv */
                     {2, 37, 2, 2, 32, 0, 0},       {1, 100, 2, 2, 64, 0, 0},
                     {2, 64, 1, 1, 64, 0, 0},       {1, 70, 2, 2, 128, 0, 0},
                     {1, 45, 2, 2, 48, 0, 0},       {1, 1, 2, 2, 32, 0, 0},
                     {2, 129, 2, 2, 32, 0, 0},      {2, 37, 4, 2, 32, 136, 72},
                     {1, 70, 6, 1, 48, 300, 50},    {2, 45, 3, 3, 16, 50, 49},
                     {1, 66, 8, 2, 64, 520, 130},   {1, 33, 4, 1, 128, 512, 130},
                     {1, 50, 2, 2, 40, 0, 0}};
  for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
    device_reset();
    int B = shapes[si][0], T = shapes[si][1], NH = shapes[si][2], NKV = shapes[si][3];
    int hs = shapes[si][4], ldq = shapes[si][5], ldkv = shapes[si][6], C = NH * hs;
    size_t BT = (size_t)B * T, oq = 0, ok, ov;
    size_t nbuf = attention_layout(BT, C, &ldq, &ldkv, &ok, &ov);
    size_t no = BT * C, nl = (size_t)B * NH * T;
    float* scratch = xmalloc(attention_scratch_elems(T, hs) * kernels_threads() * sizeof(float));
    float *buf = frandn(nbuf, 1, 0), *out = xmalloc(no * sizeof(float));
    float* lse = xmalloc(nl * sizeof(float));
    float* d_buf = upload_f(buf, nbuf);
    float *d_out = device_alloc(no * sizeof(float)), *d_lse = device_alloc(nl * sizeof(float));
    ck->attention_forward(out, lse, buf + oq, buf + ok, buf + ov, ldq, ldkv, scratch, B, T, NH,
                          NKV, hs);
    gk->attention_forward(d_out, d_lse, d_buf + oq, d_buf + ok, d_buf + ov, ldq, ldkv, NULL, B,
                          T, NH, NKV, hs);
    char name[96], shape[64];
    snprintf(shape, sizeof shape, "%sB%d T%d NH%d NKV%d hs%d ldq%d ldkv%d", mode, B, T, NH, NKV, hs,
             ldq, ldkv);
    snprintf(name, sizeof name, "attention_forward %s", shape);
    double err = compare_f(name, d_out, out, no, tol);
    if (hs % 16 == 0) tc_err = fmax(tc_err, err);
    snprintf(name, sizeof name, "attention_forward.lse %s", shape);
    compare_f(name, d_lse, lse, nl, tol);

    float *dout = frandn(no, 1, 0), *dbuf = frandn(nbuf, 1, 0);
    float *d_dout = upload_f(dout, no), *d_o = upload_f(out, no), *d_l = upload_f(lse, nl);
    float *d_dbuf = upload_f(dbuf, nbuf), *d_dbuf2 = upload_f(dbuf, nbuf);
    ck->attention_backward(dbuf + oq, dbuf + ok, dbuf + ov, dout, buf + oq, buf + ok, buf + ov,
                           ldq, ldkv, out, lse, scratch, B, T, NH, NKV, hs);
    for (int run = 0; run < 2; run++) {
      float* g = run ? d_dbuf2 : d_dbuf;
      gk->attention_backward(g + oq, g + ok, g + ov, d_dout, d_buf + oq, d_buf + ok, d_buf + ov,
                             ldq, ldkv, d_o, d_l, NULL, B, T, NH, NKV, hs);
    }
    snprintf(name, sizeof name, "attention_backward.dqkv %s", shape);
    compare_f(name, d_dbuf, dbuf, nbuf, tol);
    compare_identical(name, d_dbuf, d_dbuf2, nbuf);
    free(scratch); free(buf); free(out); free(lse); free(dout); free(dbuf);
  }
  return tc_err;
}

/* The fp32 kernels (matmul mode fp32: the exact path). */
static void test_attention(void) { attention_cases("", TOL); }

/* In matmul modes tf32 and bf16, the shapes again: head sizes that are multiples of 16 run on
** the tensor-core kernels of that precision (64 x 64 tiles: T = 1, 37, 64, 70, 100, 129 cover
** one partial, one whole and several tiles) and agree to its precision; hs 40 still runs the
** fp32 kernels. Bit-identical twice, as before. bf16's largest forward error must be more than
** twice TF32's (bf16's unit roundoff is 8 times TF32's): bf16 mode ran the bf16 kernels, not
** TF32's or fp32's. The mode is set back to fp32. */
static void test_attention_fast(void) {
  gpu->set_matmul_mode(MATMUL_TF32);
  double tf32_err = attention_cases("TF32 ", ATT_TF32_TOL);
  gpu->set_matmul_mode(MATMUL_BF16);
  double bf16_err = attention_cases("BF16 ", ATT_BF16_TOL);
  gpu->set_matmul_mode(MATMUL_FP32);
  printf("  %-*s %s (largest forward error %.2e vs TF32's %.2e)\n", check_name_width,
         "BF16 attention in effect", bf16_err > 2 * tf32_err ? "yes" : "no", bf16_err, tf32_err);
  CHECK_MSG(bf16_err > 2 * tf32_err, "bf16 attention: largest forward error %.3g is not above "
            "twice TF32's %.3g: the bf16 kernels did not run", bf16_err, tf32_err);
}

// ----------------------------------------------------------------------------
// elementwise kernels

/* gelu forward and (overwriting) backward, accumulate, compute_copy (exact), and SwiGLU forward
** and (overwriting) backward. */
static void test_elementwise(void) {
  device_reset();
  size_t n = 10007;
  float *x = frandn(n, 2, 0), *y = frandn(n, 1, 0), *d = frandn(n, 1, 0);
  float *d_x = upload_f(x, n), *d_y = upload_f(y, n), *d_d = upload_f(d, n);
  float* out = xmalloc(n * sizeof(float));
  float* d_res = device_alloc(n * sizeof(float));

  ck->gelu_forward(out, x, n);
  gk->gelu_forward(d_res, d_x, n);
  compare_f("gelu_forward", d_res, out, n, TOL);

  float* dinp = frandn(n, 1, 0);
  float* d_dinp = upload_f(dinp, n);
  ck->gelu_backward(dinp, x, d, n);
  gk->gelu_backward(d_dinp, d_x, d_d, n);
  compare_f("gelu_backward", d_dinp, dinp, n, TOL);

  float* dst = frandn(n, 1, 0);
  float* d_dst = upload_f(dst, n);
  ck->accumulate(dst, y, n);
  gk->accumulate(d_dst, d_y, n);
  compare_f("accumulate", d_dst, dst, n, TOL);
  /* the fp32 compute copy of master weights is the weights themselves, bit for bit */
  ck->compute_copy(dst, y, n);
  gk->compute_copy(d_dst, d_y, n);
  compare_f("compute_copy", d_dst, dst, n, 0);
  compare_identical("compute_copy", d_dst, d_y, n);

  /* SwiGLU with gate = x (|x| up to ~8, and a few far beyond exp's range), up = y */
  x[0] = 100; x[1] = -100; x[2] = 1000; x[3] = -1000;
  d_x = upload_f(x, n);
  ck->swiglu_forward(out, x, y, n);
  gk->swiglu_forward(d_res, d_x, d_y, n);
  compare_f("swiglu_forward", d_res, out, n, TOL);
  float *dgate = frandn(n, 1, 0), *dup = frandn(n, 1, 0);
  float *d_dgate = upload_f(dgate, n), *d_dup = upload_f(dup, n);
  ck->swiglu_backward(dgate, dup, d, x, y, n);
  gk->swiglu_backward(d_dgate, d_dup, d_d, d_x, d_y, n);
  compare_f("swiglu_backward.dgate", d_dgate, dgate, n, TOL);
  compare_f("swiglu_backward.dup", d_dup, dup, n, TOL);
  free(x); free(y); free(d); free(out); free(dinp); free(dst); free(dgate); free(dup);
}

// ----------------------------------------------------------------------------
// RoPE

/* rope forward and backward, in place, on rows wider than their heads (the padding must stay
** as it was: the whole buffer is compared), at positions up to T - 1 = 2999, with Llama's
** frequencies 10000^(-2j/hs) for hs 64 and 128, and hs 160 (more pairs than a block has
** threads). */
static void test_rope(void) {
  int shapes[][5] = {/* B, T, nh, hs, ld */ {2, 37, 4, 64, 260}, {1, 3000, 2, 128, 256},
                     {3, 5, 3, 160, 500}};
  for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
    device_reset();
    int B = shapes[si][0], T = shapes[si][1], nh = shapes[si][2], hs = shapes[si][3];
    int ld = shapes[si][4];
    size_t n = (size_t)B * T * ld;
    float* inv_freq = rope_inv_freq(hs);
    float* d_freq = upload_f(inv_freq, hs / 2);
    char name[96];
    for (int backward = 0; backward <= 1; backward++) {
      float* x = frandn(n, 1, 0);
      float* d_x = upload_f(x, n);
      if (backward) {
        ck->rope_backward(x, ld, inv_freq, B, T, nh, hs);
        gk->rope_backward(d_x, ld, d_freq, B, T, nh, hs);
      } else {
        ck->rope_forward(x, ld, inv_freq, B, T, nh, hs);
        gk->rope_forward(d_x, ld, d_freq, B, T, nh, hs);
      }
      snprintf(name, sizeof name, "%s B%d T%d nh%d hs%d ld%d",
               backward ? "rope_backward" : "rope_forward", B, T, nh, hs, ld);
      compare_f(name, d_x, x, n, TOL);
      free(x);
    }
    free(inv_freq);
  }
}

// ----------------------------------------------------------------------------
// cross-entropy, sum of squares, AdamW, argmax

/* The fused cross-entropy: dlogits (incl. 0 in the padding and on rows without a target),
** losses (0 there) and the returned sum; twice, with the same sum. Random values in the
** padding columns must be overwritten. */
static void test_crossentropy(void) {
  int shapes[][3] = {/* BT, V, Vp */ {20, 1000, 1024}, {3, 50257, 50304}, {4, 5, 128}};
  for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
    device_reset();
    int BT = shapes[si][0], V = shapes[si][1], Vp = shapes[si][2];
    size_t n = (size_t)BT * Vp;
    int* targets = random_targets(BT, V);
    float *logits = frandn(n, 2, 0), *losses = frandn(BT, 1, 0);
    float *d_logits = upload_f(logits, n), *d_logits2 = upload_f(logits, n);
    float *d_losses = upload_f(losses, BT), *d_losses2 = upload_f(losses, BT);
    int* d_targets = upload_i(targets, BT);
    double scale = 1.0 / BT;
    ck->crossentropy_forward_backward(logits, losses, targets, BT, V, Vp, scale);
    gk->crossentropy_forward_backward(d_logits, d_losses, d_targets, BT, V, Vp, scale);
    gk->crossentropy_forward_backward(d_logits2, d_losses2, d_targets, BT, V, Vp, scale);
    double ref = ck->sum_values(losses, (size_t)BT), got = gk->sum_values(d_losses, (size_t)BT);
    double again = gk->sum_values(d_losses2, (size_t)BT);
    char name[96];
    snprintf(name, sizeof name, "crossentropy.dlogits BT%d V%d Vp%d", BT, V, Vp);
    compare_f(name, d_logits, logits, n, TOL);
    snprintf(name, sizeof name, "crossentropy.losses BT%d V%d Vp%d", BT, V, Vp);
    compare_f(name, d_losses, losses, BT, TOL);
    snprintf(name, sizeof name, "crossentropy.sum BT%d V%d Vp%d", BT, V, Vp);
    compare_scalar(name, got, ref, TOL);
    CHECK_MSG(got == again, "%s: two runs differ", name);
    free(targets); free(logits); free(losses);
  }
}

/* sum_squares_multi over arrays of several sizes (and none): against the CPU's, and equal bit
** for bit to the sum_squares results added in order on the host; twice, the same. */
static void test_sum_squares_multi(void) {
  device_reset();
  size_t sizes[] = {1000003, 1, 1000, 77};
  enum { COUNT = sizeof sizes / sizeof sizes[0] };
  float* host[COUNT];
  const float *g[COUNT], *d_g[COUNT];
  double host_sum = 0;
  for (int j = 0; j < COUNT; j++) {
    host[j] = frandn(sizes[j], 1, 0);
    g[j] = host[j];
    d_g[j] = upload_f(host[j], sizes[j]);
    host_sum += gk->sum_squares(d_g[j], sizes[j]);
  }
  double ref = ck->sum_squares_multi(g, sizes, COUNT);
  double got = gk->sum_squares_multi(d_g, sizes, COUNT);
  compare_scalar("sum_squares_multi 4 arrays", got, ref, DOUBLE_TOL);
  CHECK_MSG(got == host_sum, "sum_squares_multi: %.17g, the sum of sum_squares: %.17g", got,
            host_sum);
  CHECK_MSG(gk->sum_squares_multi(d_g, sizes, COUNT) == got, "sum_squares_multi: two runs differ");
  CHECK(gk->sum_squares_multi(d_g, sizes, 0) == 0.0);
  for (int j = 0; j < COUNT; j++) free(host[j]);
}

/* sum_squares for short and long arrays (fewer values than partial sums, and many per block);
** twice, the same. */
static void test_sum_squares(void) {
  test_sum_squares_multi();
  size_t sizes[] = {1, 1000, 1000003};
  for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
    device_reset();
    size_t n = sizes[si];
    float* g = frandn(n, 1, 0);
    float* d_g = upload_f(g, n);
    double ref = ck->sum_squares(g, n);
    double got = gk->sum_squares(d_g, n);
    char name[96];
    snprintf(name, sizeof name, "sum_squares n=%zu", n);
    compare_scalar(name, got, ref, DOUBLE_TOL);
    CHECK_MSG(gk->sum_squares(d_g, n) == got, "%s: two runs differ", name);
    free(g);
  }
}

/* adamw_update_multi on 61 arrays (more than one launch's batch on the GPU; sizes 0 to 9000,
** weight decay on every other): against the CPU's, and bit-identical to adamw_update called on
** each array. All arrays live in one buffer per quantity, at 256-element offsets. */
static void test_adamw_multi(void) {
  device_reset();
  enum { COUNT = 61 };
  size_t n[COUNT], at[COUNT], total = 0;
  float wd[COUNT];
  for (int j = 0; j < COUNT; j++) {
    n[j] = j == 3 ? 0 : j == 7 ? 9000 : (size_t)rng_below(&rng, 2000);
    wd[j] = j % 2 ? 0.1f : 0.0f;
    at[j] = total;
    total += (n[j] + 255) / 256 * 256;
  }
  float *w, *g, *m, *v;
  adamw_inputs(total, &w, &g, &m, &v);
  float* d[2][4]; /* [run][w, g, m, v]: run 0 multi, run 1 one call per array */
  for (int r = 0; r < 2; r++) {
    d[r][0] = upload_f(w, total);
    d[r][1] = upload_f(g, total);
    d[r][2] = upload_f(m, total);
    d[r][3] = upload_f(v, total);
  }
  float *hw[COUNT], *hm[COUNT], *hv[COUNT], *dw[COUNT], *dm[COUNT], *dv[COUNT];
  const float *hg[COUNT], *dg[COUNT];
  for (int j = 0; j < COUNT; j++) {
    hw[j] = w + at[j]; hg[j] = g + at[j]; hm[j] = m + at[j]; hv[j] = v + at[j];
    dw[j] = d[0][0] + at[j]; dg[j] = d[0][1] + at[j]; dm[j] = d[0][2] + at[j];
    dv[j] = d[0][3] + at[j];
    gk->adamw_update(d[1][0] + at[j], d[1][1] + at[j], d[1][2] + at[j], d[1][3] + at[j], n[j],
                     1e-3f, 0.9f, 0.999f, 1e-8f, wd[j], 3, 0.5f);
  }
  ck->adamw_update_multi(hw, hg, hm, hv, n, wd, COUNT, 1e-3f, 0.9f, 0.999f, 1e-8f, 3, 0.5f);
  gk->adamw_update_multi(dw, dg, dm, dv, n, wd, COUNT, 1e-3f, 0.9f, 0.999f, 1e-8f, 3, 0.5f);
  compare_f("adamw_update_multi.w 61 arrays", d[0][0], w, total, TOL);
  compare_f("adamw_update_multi.m 61 arrays", d[0][2], m, total, TOL);
  compare_f("adamw_update_multi.v 61 arrays", d[0][3], v, total, TOL);
  for (int q = 0; q < 4; q++)
    compare_identical("adamw_update_multi vs adamw_update per array", d[0][q], d[1][q], total);
  free(w); free(g); free(m); free(v);
}

/* AdamW on the first and a later step (bias corrections), with weight decay and grad_scale. */
static void test_adamw(void) {
  test_adamw_multi();
  int steps[] = {1, 7};
  for (size_t si = 0; si < sizeof steps / sizeof steps[0]; si++) {
    device_reset();
    size_t n = 10007;
    int t = steps[si];
    float *w, *g, *m, *v;
    adamw_inputs(n, &w, &g, &m, &v);
    float *d_w = upload_f(w, n), *d_g = upload_f(g, n), *d_m = upload_f(m, n);
    float* d_v = upload_f(v, n);
    ck->adamw_update(w, g, m, v, n, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.1f, t, 0.5f);
    gk->adamw_update(d_w, d_g, d_m, d_v, n, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.1f, t, 0.5f);
    char name[96];
    snprintf(name, sizeof name, "adamw_update.w t=%d", t);
    compare_f(name, d_w, w, n, TOL);
    snprintf(name, sizeof name, "adamw_update.m t=%d", t);
    compare_f(name, d_m, m, n, TOL);
    snprintf(name, sizeof name, "adamw_update.v t=%d", t);
    compare_f(name, d_v, v, n, TOL);
    free(w); free(g); free(m); free(v);
  }
}

/* logits_argmax with planted ties (the first index wins) and a larger value in the padding
** (ignored): the indices agree exactly. */
static void test_argmax(void) {
  device_reset();
  int BT = 33, V = 1000, Vp = 1024;
  size_t n = (size_t)BT * Vp;
  float* logits = frandn(n, 1, 0);
  plant_argmax_cases(logits, V, Vp);
  int* d_arg = device_alloc((size_t)BT * sizeof(int));
  gk->logits_argmax(upload_f(logits, n), BT, V, Vp, d_arg);
  check_argmax(d_arg, logits, BT, V, Vp);
  free(logits);
}

/* Skips where no GPU is visible (cuda_check_start); otherwise one device block for every test, in
** matmul mode fp32 except in test_matmul_fast and test_attention_fast. */
int main(void) {
  check_name_width = 52; /* the check lines' layout (cuda_check.h): no tolerances */
  int status = cuda_check_start("test_cuda_kernels", 4321);
  if (status >= 0) return status;
  gk = gpu->f32;
  test_table();
  test_memory();
  test_clock();
  test_embed_pos();
  test_embed_tok();
  test_matmul();
  test_matmul_fast(MATMUL_TF32);
  test_matmul_fast(MATMUL_BF16);
  test_layernorm();
  test_rmsnorm();
  test_attention();
  test_attention_fast();
  test_elementwise();
  test_rope();
  test_crossentropy();
  test_sum_squares();
  test_adamw();
  test_argmax();
  return cuda_check_finish();
}
