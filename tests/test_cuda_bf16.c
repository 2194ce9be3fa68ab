/*
** test_cuda_bf16.c: the CUDA backend's bf16 kernel table (Backend.bf16: bf16 activations and
** weight copies, fp32 gradients, optimizer state and statistics) against the CPU's fp32 kernels.
**
** Exits 77 (CTest: skipped) only when the CUDA runtime sees no GPU and none is required, as
** tests/test_cuda_kernels.c (may_skip in tests/cuda_check.h, the scaffolding both share).
** Otherwise:
**  0. every entry of the backend's bf16 table (KERNEL_LIST with act = wt = osdp_bf16, grad =
**     stat = float) is set; the CPU has no bf16 table;
**  1. every kernel of the table on random inputs against the CPU's fp32 kernel on the SAME
**     values: every bf16-role input (act, wt) is drawn in fp32 and rounded to bf16 on the host;
**     the CPU gets the rounded floats, the GPU their bf16 bits; bf16 outputs come back widened
**     to fp32. So the only differences are the GPU's own: its rounding of bf16 outputs (and the
**     P and dS tiles of bf16 tensor-core attention), and fp32 summation order. Buffers a kernel
**     accumulates into (+=) or leaves partly untouched are pre-filled with random values (bf16
**     ones rounded), and the whole buffer is compared;
**  2. the bf16 path really stores bf16, rounded to nearest even: GELU's, SwiGLU's and
**     accumulate's outputs are the CPU's fp32 results rounded to nearest even (but for a last-bit
**     difference on a few elements, where the two fp32 values straddle a rounding boundary),
**     and GELU's and SwiGLU's differ from the fp32 results themselves; compute_copy's bits are
**     exactly the host's osdp_bf16_from_float (halfway cases, overflow to inf, subnormals
**     included);
**  3. the matmul mode (set_matmul_mode: how products on fp32 storage are computed) does not
**     change what the bf16 table computes: a product and attention are bit-identical in modes
**     fp32 and tf32.
** Also built against the CPU emulation of CUDA (tools/cuda-emu, -DOSDP_CUDA_EMU, CTest
** gpu_emu_bf16), where cuBLASLt's epilogues always have an algorithm (which path ran is
** checked, as in test_cuda_kernels.c). Shapes are those of test_cuda_kernels.c, fewer and
** smaller where the emulation would only spend time.
** The comparison is norm-relative, max_i |gpu[i] - cpu[i]| <= tol * max_i |cpu[i]|, with the
** tolerances below; every comparison prints its error.
*/
#include "cuda_check.h"
#include "kernels/cpu_kernels.h"

/* A bf16 output that is ONE rounding, to nearest, of a value the GPU computes to fp32 accuracy
** (elementwise and row kernels, embeddings, RoPE, the cross-entropy gradient, accumulate, matrix
** products with fp32 accumulation, and what is added to an old bf16 value before the one
** rounding): |err_i| <= u |cpu_i| + fp32 noise, so at most u norm-relative (in the emulation:
** 1.3e-3 to 3.7e-3, at most 0.96u). 1.25u: a sum accumulated in bf16 fails it, and so do the
** larger outputs of a truncating store (error up to 2u; tried: LayerNorm, RMSNorm, RoPE and
** fp32-compute attention failed it, up to 1.8u), the rounding checks of 2. catch the others. */
#define ROUND_TOL (1.25 * BF16_U)
/* Two roundings in sequence: the unfused matmul + GELU computes GELU from the rounded pre (its
** error, up to GELU' * u |pre|, plus the output's own rounding; in the emulation at most 1.1u). */
#define TWO_ROUND_TOL (2.5 * BF16_U)
/* A product with its bias (and GELU) in cuBLASLt's epilogue is one rounding when the epilogue
** runs. The emulation always has an algorithm for it (check_lt_path proves which path ran); a
** GPU's heuristic may refuse a shape (a bf16 slice 2 bytes aligned), and then the unfused path
** rounds the bias rows (or pre) first and the result again: two roundings. */
#ifdef OSDP_CUDA_EMU
#define LT_TOL ROUND_TOL
#else
#define LT_TOL TWO_ROUND_TOL
#endif
/* Attention on bf16 tensor cores, as test_cuda_kernels.c's ATT_BF16_TOL: P and dS are rounded
** to bf16 before their products (the inputs are bf16 already on both sides here, so there is no
** input rounding; the outputs' own rounding takes its place). Head sizes without tensor-core
** kernels (not a multiple of 16) compute in fp32 and round once: ROUND_TOL. In the emulation
** the tensor-core cases stay below 0.9u (forward and backward). */
#define ATT_BF16_TOL (2.5 * BF16_U)
/* fp32 outputs of osdp's own kernels from bf16 inputs (parameter gradients dwpe, dwrows, dbias,
** LayerNorm's and RMSNorm's dw and db; mean, rstd, lse, the losses and their sum; AdamW): the
** CPU computes on the same values and a product of two bf16 values is exact in fp32, so only
** the summation order differs: test_cuda_kernels.c's fp32 TOL (in the emulation at most
** 1.8e-6, LayerNorm's dw over 3000 rows; lse 1.3e-7; the embedding gradients and AdamW exact). */
#define F32_TOL 1e-5
/* fp32 outputs of cuBLAS on bf16 operands (matmul_backward's dw): exact products, fp32
** accumulation in the tensor cores, whose adders may truncate rather than round (2^-23 per
** addition instead of 2^-24, which over BT = 1000 terms can reach ~1e-5 of the largest value);
** 1e-4 leaves room for that, and is still 40 times below one bf16 rounding (the emulation, which
** sums in double: 2.2e-7). */
#define GEMM_F32_TOL 1e-4
#define DOUBLE_TOL 1e-12 /* sums of squares, accumulated in double on both sides */
/* The rounding check (2.): the share of elements that must equal the CPU's fp32 result rounded
** to nearest even (a truncating store matches about half), and the share that must differ from
** the fp32 result itself (an fp32 store would match nearly all). */
#define ROUNDED_SHARE 0.99
#define NOT_FP32_SHARE 0.9

static const Kernels_bf16* bk; /* CUDA kernels on bf16 storage */

// ----------------------------------------------------------------------------
// bf16 host and device buffers

/* x rounded to the nearest bf16 value (ties to even), as a float. */
static float bf16_round(float x) { return osdp_bf16_to_float(osdp_bf16_from_float(x)); }

/* Rounds a[0..n) to bf16 values in place. */
static void round_bf16(float* a, size_t n) {
  for (size_t i = 0; i < n; i++) a[i] = bf16_round(a[i]);
}

/* A new array of n values normal(offset, sd) rounded to bf16: a bf16-role input. */
static float* brandn(size_t n, double sd, double offset) {
  float* a = frandn(n, sd, offset);
  round_bf16(a, n);
  return a;
}

/* A new device bf16 buffer holding host[0..n) converted to bf16 (to nearest even: the values
** of a bf16-role input are bf16 already, and convert exactly). */
static osdp_bf16* upload_bf16(const float* host, size_t n) {
  osdp_bf16* h = xmalloc(n * sizeof(osdp_bf16));
  for (size_t i = 0; i < n; i++) h[i] = osdp_bf16_from_float(host[i]);
  osdp_bf16* d = upload(h, n * sizeof(osdp_bf16));
  free(h);
  return d;
}

/* A new host copy of the device bf16 buffer dev[0..n), widened to float (exactly). */
static float* download_bf16(const osdp_bf16* dev, size_t n) {
  osdp_bf16* h = xmalloc(n * sizeof(osdp_bf16));
  gpu->to_host(h, dev, n * sizeof(osdp_bf16));
  float* f = xmalloc(n * sizeof(float));
  for (size_t i = 0; i < n; i++) f[i] = osdp_bf16_to_float(h[i]);
  free(h);
  return f;
}

// ----------------------------------------------------------------------------
// comparisons

/* Checks the device bf16 result dev[0..n) against ref (see check_close, cuda_check.h). */
static double compare_bf16(const char* name, const osdp_bf16* dev, const float* ref, size_t n,
                           double tol) {
  float* got = download_bf16(dev, n);
  double err = check_close(name, got, ref, n, tol);
  free(got);
  return err;
}

/* The bf16 values a and b (both bf16-representable floats) are at most one bf16 step apart:
** their bit patterns, as sign-magnitude integers, differ by at most 1. */
static int within_one_step(float a, float b) {
  int32_t ia = osdp_bf16_from_float(a).bits, ib = osdp_bf16_from_float(b).bits;
  ia = ia & 0x8000 ? -(ia & 0x7fff) : ia;
  ib = ib & 0x8000 ? -(ib & 0x7fff) : ib;
  return abs(ia - ib) <= 1;
}

/* Checks that the bf16 result dev[0..n) is the CPU's fp32 result ref rounded to nearest even,
** over the elements at least 2^-10 of the largest (the others weigh nothing in a norm-relative
** error, and there the CPU's fp32 value may itself be far from exact: GELU's 1 + tanh cancels
** for x < -3, and the CPU's fast tanh is accurate to ~1e-7 absolute): equal for at least
** ROUNDED_SHARE of them (the GPU's fp32 value may differ from the CPU's in its last bits, which
** changes the rounding only next to a boundary) and at most one bf16 step away from it for all.
** With must_differ, also different from the fp32 value itself for at least NOT_FP32_SHARE (the
** result really is stored in bf16; not for a sum of two bf16 values, which is often exact in
** bf16). A truncating store fails the first check, an fp32 one the last. */
static void check_rounded(const char* name, const osdp_bf16* dev, const float* ref, size_t n,
                          int must_differ) {
  float* got = download_bf16(dev, n);
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
  printf("  %-*s %8zu values, %.2f%% rounded to nearest, %.2f%% not fp32\n", check_name_width,
         name, counted, 100 * share, 100 * share_not);
  CHECK_MSG(share >= ROUNDED_SHARE, "%s: only %.2f%% are the fp32 result rounded to nearest",
            name, 100 * share);
  CHECK_MSG(far == 0, "%s: %zu values more than one bf16 step from the rounded fp32 result", name,
            far);
  if (must_differ)
    CHECK_MSG(share_not >= NOT_FP32_SHARE, "%s: %.2f%% equal the fp32 result: not bf16 storage?",
              name, 100 * (1 - share_not));
  free(got);
}

// ----------------------------------------------------------------------------
// the table

/* Every entry of KERNEL_LIST is set in the CUDA backend's bf16 table; the CPU has none. */
static void test_table(void) {
#define CHECK_TABLE_ENTRY(ret, kernel, params) \
  CHECK_MSG(bk->kernel != NULL, "cuda: bf16 table: %s is NULL", #kernel);
  KERNEL_LIST(CHECK_TABLE_ENTRY, osdp_bf16, osdp_bf16, float, float)
#undef CHECK_TABLE_ENTRY
  CHECK(backend_cpu()->bf16 == NULL);
}

// ----------------------------------------------------------------------------
// embeddings

/* embed_pos forward (a copy of bf16 values: exact) and backward into fp32 dwpe (maxT > T rows:
** the extra ones stay untouched), overwriting and accumulating over random values. */
static void test_embed_pos(void) {
  device_reset();
  int B = 3, T = 37, C = 40, maxT = 50;
  size_t n = (size_t)B * T * C, nw = (size_t)maxT * C;
  float *wpe = brandn(nw, 1, 0), *out = xmalloc(n * sizeof(float));
  ck->embed_pos_forward(out, wpe, B, T, C);
  osdp_bf16* d_out = device_alloc(n * sizeof(osdp_bf16));
  bk->embed_pos_forward(d_out, upload_bf16(wpe, nw), B, T, C);
  compare_bf16("embed_pos_forward (exact)", d_out, out, n, 0);

  for (int acc = 0; acc <= 1; acc++) {
    float *dwpe = frandn(nw, 1, 0), *dout = brandn(n, 1, 0);
    float* d_dwpe = upload_f(dwpe, nw);
    ck->embed_pos_backward(dwpe, dout, B, T, C, acc);
    bk->embed_pos_backward(d_dwpe, upload_bf16(dout, n), B, T, C, acc);
    compare_f(acc ? "embed_pos_backward.dwpe accumulate" : "embed_pos_backward.dwpe", d_dwpe,
              dwpe, nw, F32_TOL);
    free(dwpe); free(dout);
  }
  free(wpe); free(out);
}

/* embed_tok forward (bf16 out +=) and backward (fp32 dwrows, accumulating and overwriting) on a
** slice of rows (c0, nrows) with many repeated tokens, and on whole rows; the last token is the
** last column Vp - 1. */
static void test_embed_tok(void) {
  int shapes[][5] = {/* BT, C, Vp, c0, nrows */ {77, 48, 128, 5, 30}, {300, 64, 256, 0, 64}};
  for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
    device_reset();
    int BT = shapes[si][0], C = shapes[si][1], Vp = shapes[si][2], c0 = shapes[si][3];
    int nrows = shapes[si][4];
    size_t nt = (size_t)C * Vp, no = (size_t)BT * C, r0 = (size_t)c0 * Vp;
    int* tok = xmalloc((size_t)BT * sizeof(int));
    for (int i = 0; i < BT; i++) /* the first shape: 10 distinct tokens, many repeats */
      tok[i] = si == 0 ? (int)(rng_below(&rng, 10) * 13 % Vp) : (int)rng_below(&rng, Vp);
    tok[BT - 1] = Vp - 1;
    int* d_tok = upload_i(tok, BT);
    float *table = brandn(nt, 1, 0), *out = brandn(no, 1, 0);
    osdp_bf16* d_out = upload_bf16(out, no);
    ck->embed_tok_forward(out + c0, C, tok, BT, table + r0, nrows, Vp);
    bk->embed_tok_forward(d_out + c0, C, d_tok, BT, upload_bf16(table, nt) + r0, nrows, Vp);
    char name[96];
    snprintf(name, sizeof name, "embed_tok_forward BT%d C%d rows %d..%d", BT, C, c0, c0 + nrows);
    compare_bf16(name, d_out, out, no, ROUND_TOL);

    float *dt = frandn(nt, 1, 0), *dout = brandn(no, 1, 0);
    float* d_dt = upload_f(dt, nt);
    osdp_bf16* d_dout = upload_bf16(dout, no);
    for (int acc = 1; acc >= 0; acc--) {
      ck->embed_tok_backward(dt + r0, dout + c0, C, tok, BT, nrows, Vp, acc);
      bk->embed_tok_backward(d_dt + r0, d_dout + c0, C, d_tok, BT, nrows, Vp, acc);
      snprintf(name, sizeof name, "embed_tok_backward.dwrows%s BT%d C%d rows %d..%d",
               acc ? "" : " overwrite", BT, C, c0, c0 + nrows);
      compare_f(name, d_dt, dt, nt, F32_TOL);
    }
    free(tok); free(table); free(out); free(dt); free(dout);
  }
}

// ----------------------------------------------------------------------------
// matmul

/* matmul forward with bias / without, accumulate 0 / 1, on strided inputs (ldinp > K); backward
** with dinp and dbias present and both NULL, dw and dbias accumulated and overwritten, over
** random values (the padding columns of dinp must stay untouched: the whole strided buffer is
** compared). bf16 out and dinp are one rounding of an fp32-accumulated product; fp32 dw is
** cuBLAS's fp32 sum of exact products, dbias osdp's column sums. */
static void test_matmul(void) {
  /* the last: dbias over several row chunks of the column sums */
  int shapes[][4] = {/* BT, K, OC, ldinp */ {37, 50, 70, 64}, {64, 128, 96, 128},
                     {100, 33, 17, 40}, {1, 7, 5, 7}, {1000, 8, 600, 8}};
  for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
    int BT = shapes[si][0], K = shapes[si][1], OC = shapes[si][2], ld = shapes[si][3];
    size_t ni = (size_t)BT * ld, nw = (size_t)K * OC, no = (size_t)BT * OC;
    char name[112];
    for (int variant = 0; variant < 4; variant++) {
      device_reset();
      int with_bias = variant & 1, acc = variant >> 1;
      float *inp = brandn(ni, 1, 0), *w = brandn(nw, 1, 0), *bias = brandn(OC, 1, 0);
      float* out = brandn(no, 1, 0);
      osdp_bf16 *d_out = upload_bf16(out, no), *d_inp = upload_bf16(inp, ni);
      osdp_bf16 *d_w = upload_bf16(w, nw), *d_bias = with_bias ? upload_bf16(bias, OC) : NULL;
      ck->matmul_forward(out, inp, ld, w, with_bias ? bias : NULL, BT, K, OC, acc);
      long long before = lt_count();
      bk->matmul_forward(d_out, d_inp, ld, d_w, d_bias, BT, K, OC, acc);
      snprintf(name, sizeof name, "matmul_forward BT%d K%d OC%d ld%d%s%s", BT, K, OC, ld,
               with_bias ? " bias" : "", acc ? " accumulate" : "");
      check_lt_path(name, before, with_bias); /* the bias as cuBLASLt's epilogue */
      compare_bf16(name, d_out, out, no, with_bias ? LT_TOL : ROUND_TOL);
      free(inp); free(w); free(bias); free(out);
    }
    for (int variant = 0; variant < 4; variant++) {
      device_reset();
      int optional = !(variant & 1), acc = variant >> 1;
      float *inp = brandn(ni, 1, 0), *w = brandn(nw, 1, 0), *dout = brandn(no, 1, 0);
      float *dinp = brandn(ni, 1, 0), *dw = frandn(nw, 1, 0), *db = frandn(OC, 1, 0);
      osdp_bf16* d_dinp = upload_bf16(dinp, ni);
      float *d_dw = upload_f(dw, nw), *d_db = upload_f(db, OC);
      ck->matmul_backward(optional ? dinp : NULL, dw, optional ? db : NULL, dout, inp, ld, w, BT,
                          K, OC, acc);
      bk->matmul_backward(optional ? d_dinp : NULL, d_dw, optional ? d_db : NULL,
                          upload_bf16(dout, no), upload_bf16(inp, ni), ld, upload_bf16(w, nw),
                          BT, K, OC, acc);
      const char* which = optional ? (acc ? " accumulate" : "")
                          : acc ? " accumulate (dinp, dbias NULL)" : " (dinp, dbias NULL)";
      snprintf(name, sizeof name, "matmul_backward.dw BT%d K%d OC%d%s", BT, K, OC, which);
      compare_f(name, d_dw, dw, nw, GEMM_F32_TOL);
      snprintf(name, sizeof name, "matmul_backward.dinp BT%d K%d OC%d ld%d%s", BT, K, OC, ld,
               which);
      compare_bf16(name, d_dinp, dinp, ni, ROUND_TOL);
      snprintf(name, sizeof name, "matmul_backward.dbias BT%d K%d OC%d%s", BT, K, OC, which);
      compare_f(name, d_db, db, OC, F32_TOL);
      free(inp); free(w); free(dout); free(dinp); free(dw); free(db);
    }
  }
}

/* matmul_gelu_forward against the CPU's matmul then GELU: OC a multiple of 8 and overwriting
** (one cuBLASLt product with the GELU_AUX epilogue: GELU of the fp32 sum, pre and out each
** rounded once) and the unfused path (OC not a multiple of 8, or accumulate: GELU of the
** rounded pre), with and without bias, the input a column slice of a wider row (ldinp > K)
** starting 0 or 1 element in. w is scaled by 1/sqrt(K), so pre is about N(0, 1), where GELU
** bends. */
static void test_matmul_gelu(void) {
  int shapes[][5] = {/* BT, K, OC, ldinp, first column */ {37, 50, 64, 64, 0},
                     {64, 128, 96, 130, 1}, {100, 33, 17, 40, 0}, {1, 7, 8, 8, 1}};
  for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
    int BT = shapes[si][0], K = shapes[si][1], OC = shapes[si][2], ld = shapes[si][3];
    int c0 = shapes[si][4];
    size_t ni = (size_t)BT * ld, nw = (size_t)K * OC, no = (size_t)BT * OC;
    for (int variant = 0; variant < 4; variant++) {
      device_reset();
      int with_bias = variant & 1, acc = variant >> 1;
      int fused = OC % 8 == 0 && !acc;
      float *inp = brandn(ni, 1, 0), *w = brandn(nw, 1 / sqrt(K), 0), *bias = brandn(OC, 0.5, 0);
      float *pre = brandn(no, 0.5, 0), *out = brandn(no, 1, 0);
      osdp_bf16 *d_pre = upload_bf16(pre, no), *d_out = upload_bf16(out, no);
      osdp_bf16 *d_inp = upload_bf16(inp, ni) + c0, *d_w = upload_bf16(w, nw);
      osdp_bf16* d_bias = with_bias ? upload_bf16(bias, OC) : NULL;
      ck->matmul_gelu_forward(out, pre, inp + c0, ld, w, with_bias ? bias : NULL, BT, K, OC, acc);
      long long before = lt_count();
      bk->matmul_gelu_forward(d_out, d_pre, d_inp, ld, d_w, d_bias, BT, K, OC, acc);
      char name[112];
      snprintf(name, sizeof name, "matmul_gelu_forward%s BT%d K%d OC%d ld%d+%d%s%s",
               fused ? " fused" : "", BT, K, OC, ld, c0, with_bias ? " bias" : "",
               acc ? " accumulate" : "");
      /* fused: the GELU epilogue; unfused: matmul_forward, an epilogue only for the bias */
      check_lt_path(name, before, fused || with_bias);
      compare_bf16(name, d_out, out, no, fused ? LT_TOL : TWO_ROUND_TOL);
      strncat(name, " pre", sizeof name - strlen(name) - 1);
      compare_bf16(name, d_pre, pre, no, fused || with_bias ? LT_TOL : ROUND_TOL);
      free(inp); free(w); free(bias); free(pre); free(out);
    }
  }
}

// ----------------------------------------------------------------------------
// LayerNorm, RMSNorm

/* LayerNorm forward (bf16 out, fp32 mean and rstd) and backward (bf16 dinp accumulates, fp32 dw
** and db accumulated, then overwritten), the backward on the CPU's statistics. The shapes
** include one whose column sums take several column groups (1000 x 768 in the emulation's small
** column-sum scratch) and one of many row chunks. */
static void test_layernorm(void) {
  int shapes[][2] = {{37, 100}, {5, 33}, {1000, 768}, {3000, 40}};
  for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
    device_reset();
    int BT = shapes[si][0], C = shapes[si][1];
    size_t n = (size_t)BT * C;
    float *inp = brandn(n, 1.5, 0.7), *w = brandn(C, 0.5, 1), *b = brandn(C, 0.5, 0);
    float *out = xmalloc(n * sizeof(float)), *mean = xmalloc(BT * sizeof(float));
    float* rstd = xmalloc(BT * sizeof(float));
    osdp_bf16 *d_inp = upload_bf16(inp, n), *d_w = upload_bf16(w, C), *d_b = upload_bf16(b, C);
    osdp_bf16* d_out = device_alloc(n * sizeof(osdp_bf16));
    float *d_mean = device_alloc(BT * sizeof(float)), *d_rstd = device_alloc(BT * sizeof(float));
    ck->layernorm_forward(out, mean, rstd, inp, w, b, BT, C);
    bk->layernorm_forward(d_out, d_mean, d_rstd, d_inp, d_w, d_b, BT, C);
    char name[96];
    snprintf(name, sizeof name, "layernorm_forward BT%d C%d", BT, C);
    compare_bf16(name, d_out, out, n, ROUND_TOL);
    snprintf(name, sizeof name, "layernorm_forward.mean BT%d C%d", BT, C);
    compare_f(name, d_mean, mean, BT, F32_TOL);
    snprintf(name, sizeof name, "layernorm_forward.rstd BT%d C%d", BT, C);
    compare_f(name, d_rstd, rstd, BT, F32_TOL);

    float *dout = brandn(n, 1, 0), *dinp = brandn(n, 1, 0), *dw = frandn(C, 1, 0);
    float* db = frandn(C, 1, 0);
    osdp_bf16 *d_dout = upload_bf16(dout, n), *d_dinp = upload_bf16(dinp, n);
    float *d_m = upload_f(mean, BT), *d_r = upload_f(rstd, BT);
    float *d_dw = upload_f(dw, C), *d_db = upload_f(db, C);
    ck->layernorm_backward(dinp, dw, db, dout, inp, w, mean, rstd, BT, C, 1);
    bk->layernorm_backward(d_dinp, d_dw, d_db, d_dout, d_inp, d_w, d_m, d_r, BT, C, 1);
    snprintf(name, sizeof name, "layernorm_backward.dinp BT%d C%d", BT, C);
    compare_bf16(name, d_dinp, dinp, n, ROUND_TOL);
    snprintf(name, sizeof name, "layernorm_backward.dw BT%d C%d", BT, C);
    compare_f(name, d_dw, dw, C, F32_TOL);
    snprintf(name, sizeof name, "layernorm_backward.db BT%d C%d", BT, C);
    compare_f(name, d_db, db, C, F32_TOL);
    /* dw and db overwritten; dinp accumulates once more onto the GPU's rounded values, which
    ** the CPU starts from too */
    float* again = download_bf16(d_dinp, n);
    memcpy(dinp, again, n * sizeof(float));
    ck->layernorm_backward(dinp, dw, db, dout, inp, w, mean, rstd, BT, C, 0);
    bk->layernorm_backward(d_dinp, d_dw, d_db, d_dout, d_inp, d_w, d_m, d_r, BT, C, 0);
    snprintf(name, sizeof name, "layernorm_backward.dinp (dw, db overwritten) BT%d C%d", BT, C);
    compare_bf16(name, d_dinp, dinp, n, ROUND_TOL);
    snprintf(name, sizeof name, "layernorm_backward.dw overwrite BT%d C%d", BT, C);
    compare_f(name, d_dw, dw, C, F32_TOL);
    snprintf(name, sizeof name, "layernorm_backward.db overwrite BT%d C%d", BT, C);
    compare_f(name, d_db, db, C, F32_TOL);
    free(inp); free(w); free(b); free(out); free(mean); free(rstd);
    free(dout); free(dinp); free(dw); free(db); free(again);
  }
}

/* RMSNorm forward (bf16 out, fp32 rstd) and backward (bf16 dinp accumulates, fp32 dw
** accumulated, then overwritten), the backward on the CPU's rstd. */
static void test_rmsnorm(void) {
  int shapes[][2] = {{37, 100}, {5, 33}, {1000, 768}, {3000, 40}};
  for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
    device_reset();
    int BT = shapes[si][0], C = shapes[si][1];
    size_t n = (size_t)BT * C;
    double eps = 1e-6;
    float *inp = brandn(n, 1.5, 0.3), *w = brandn(C, 0.5, 1);
    float *out = xmalloc(n * sizeof(float)), *rstd = xmalloc(BT * sizeof(float));
    osdp_bf16 *d_inp = upload_bf16(inp, n), *d_w = upload_bf16(w, C);
    osdp_bf16* d_out = device_alloc(n * sizeof(osdp_bf16));
    float* d_rstd = device_alloc(BT * sizeof(float));
    ck->rmsnorm_forward(out, rstd, inp, w, BT, C, eps);
    bk->rmsnorm_forward(d_out, d_rstd, d_inp, d_w, BT, C, eps);
    char name[96];
    snprintf(name, sizeof name, "rmsnorm_forward BT%d C%d", BT, C);
    compare_bf16(name, d_out, out, n, ROUND_TOL);
    snprintf(name, sizeof name, "rmsnorm_forward.rstd BT%d C%d", BT, C);
    compare_f(name, d_rstd, rstd, BT, F32_TOL);

    float *dout = brandn(n, 1, 0), *dinp = brandn(n, 1, 0), *dw = frandn(C, 1, 0);
    osdp_bf16 *d_dout = upload_bf16(dout, n), *d_dinp = upload_bf16(dinp, n);
    float *d_r = upload_f(rstd, BT), *d_dw = upload_f(dw, C);
    for (int acc = 1; acc >= 0; acc--) {
      if (!acc) { /* the CPU continues from the GPU's rounded dinp */
        float* again = download_bf16(d_dinp, n);
        memcpy(dinp, again, n * sizeof(float));
        free(again);
      }
      ck->rmsnorm_backward(dinp, dw, dout, inp, w, rstd, BT, C, acc);
      bk->rmsnorm_backward(d_dinp, d_dw, d_dout, d_inp, d_w, d_r, BT, C, acc);
      snprintf(name, sizeof name, "rmsnorm_backward.dinp%s BT%d C%d",
               acc ? "" : " (dw overwritten)", BT, C);
      compare_bf16(name, d_dinp, dinp, n, ROUND_TOL);
      snprintf(name, sizeof name, "rmsnorm_backward.dw%s BT%d C%d", acc ? "" : " overwrite", BT,
               C);
      compare_f(name, d_dw, dw, C, F32_TOL);
    }
    free(inp); free(w); free(out); free(rstd); free(dout); free(dinp); free(dw);
  }
}

// ----------------------------------------------------------------------------
// attention

/* Whether bf16 attention of head size hs runs the bf16 tensor-core kernels (multiples of 16 up
** to 128) rather than the fp32-compute ones. */
static int attention_tc(int hs) { return hs % 16 == 0 && hs <= 128; }

/* Attention forward (bf16 out, fp32 lse) and backward (bf16 dq, dk, dv accumulate) for T = 1,
** T not a multiple of the tiles, several tiles, B > 1, on GPT-2's fused qkv (ldq = 0 below)
** and on separate q, k, v buffers with rows wider than their heads, NKV = NH, NH = 2 NKV and a
** K/V head shared by six query heads; head sizes 16 to 128 (the bf16 tensor-core kernels) and 40
** (fp32 compute). q, k and v live in one buffer, their gradients too (the padding must come
** back untouched). The backward runs on the CPU's lse and on its out rounded to bf16 (what a
** bf16 step keeps), on both sides. */
static void test_attention(void) {
  int shapes[][7] = {/* B, T, NH, NKV, hs, ldq, ldkv */
                     {2, 37, 2, 2, 32, 0, 0},     {1, 70, 2, 2, 128, 0, 0},
                     {1, 1, 2, 2, 32, 0, 0},      {1, 100, 1, 1, 64, 0, 0},
                     {2, 37, 4, 2, 32, 136, 72},  {1, 70, 6, 1, 48, 300, 50},
                     {2, 45, 3, 3, 16, 50, 49},   {1, 50, 2, 2, 40, 0, 0},
                     {1, 33, 4, 2, 40, 170, 90}};
  for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
    device_reset();
    int B = shapes[si][0], T = shapes[si][1], NH = shapes[si][2], NKV = shapes[si][3];
    int hs = shapes[si][4], ldq = shapes[si][5], ldkv = shapes[si][6], C = NH * hs;
    size_t BT = (size_t)B * T, ok, ov;
    size_t nbuf = attention_layout(BT, C, &ldq, &ldkv, &ok, &ov);
    size_t no = BT * C, nl = (size_t)B * NH * T;
    double tol = attention_tc(hs) ? ATT_BF16_TOL : ROUND_TOL;
    float* scratch = xmalloc(attention_scratch_elems(T, hs) * kernels_threads() * sizeof(float));
    float *buf = brandn(nbuf, 1, 0), *out = xmalloc(no * sizeof(float));
    float* lse = xmalloc(nl * sizeof(float));
    osdp_bf16* d_buf = upload_bf16(buf, nbuf);
    osdp_bf16* d_out = device_alloc(no * sizeof(osdp_bf16));
    float* d_lse = device_alloc(nl * sizeof(float));
    ck->attention_forward(out, lse, buf, buf + ok, buf + ov, ldq, ldkv, scratch, B, T, NH, NKV,
                          hs);
    bk->attention_forward(d_out, d_lse, d_buf, d_buf + ok, d_buf + ov, ldq, ldkv, NULL, B, T, NH,
                          NKV, hs);
    char name[112], shape[80];
    snprintf(shape, sizeof shape, "B%d T%d NH%d NKV%d hs%d ldq%d ldkv%d%s", B, T, NH, NKV, hs,
             ldq, ldkv, attention_tc(hs) ? "" : " (fp32)");
    snprintf(name, sizeof name, "attention_forward %s", shape);
    compare_bf16(name, d_out, out, no, tol);
    snprintf(name, sizeof name, "attention_forward.lse %s", shape);
    compare_f(name, d_lse, lse, nl, F32_TOL);

    round_bf16(out, no);
    float *dout = brandn(no, 1, 0), *dbuf = brandn(nbuf, 1, 0);
    osdp_bf16 *d_dbuf = upload_bf16(dbuf, nbuf), *d_dout = upload_bf16(dout, no);
    osdp_bf16* d_o = upload_bf16(out, no);
    float* d_l = upload_f(lse, nl);
    ck->attention_backward(dbuf, dbuf + ok, dbuf + ov, dout, buf, buf + ok, buf + ov, ldq, ldkv,
                           out, lse, scratch, B, T, NH, NKV, hs);
    bk->attention_backward(d_dbuf, d_dbuf + ok, d_dbuf + ov, d_dout, d_buf, d_buf + ok,
                           d_buf + ov, ldq, ldkv, d_o, d_l, NULL, B, T, NH, NKV, hs);
    snprintf(name, sizeof name, "attention_backward.dqkv %s", shape);
    compare_bf16(name, d_dbuf, dbuf, nbuf, tol);
    free(scratch); free(buf); free(out); free(lse); free(dout); free(dbuf);
  }
}

// ----------------------------------------------------------------------------
// elementwise kernels, RoPE

/* GELU forward and (overwriting) backward, accumulate, SwiGLU forward and (overwriting)
** backward: to one rounding of the CPU's fp32 result, and GELU's, SwiGLU's and accumulate's
** outputs that rounding exactly (check_rounded). */
static void test_elementwise(void) {
  device_reset();
  size_t n = 10007;
  float *x = brandn(n, 2, 0), *y = brandn(n, 1, 0), *d = brandn(n, 1, 0);
  osdp_bf16 *d_x = upload_bf16(x, n), *d_y = upload_bf16(y, n), *d_d = upload_bf16(d, n);
  float* out = xmalloc(n * sizeof(float));
  osdp_bf16* d_res = device_alloc(n * sizeof(osdp_bf16));

  ck->gelu_forward(out, x, n);
  bk->gelu_forward(d_res, d_x, n);
  compare_bf16("gelu_forward", d_res, out, n, ROUND_TOL);
  check_rounded("gelu_forward rounded to nearest even", d_res, out, n, 1);

  float* dinp = brandn(n, 1, 0);
  osdp_bf16* d_dinp = upload_bf16(dinp, n);
  ck->gelu_backward(dinp, x, d, n);
  bk->gelu_backward(d_dinp, d_x, d_d, n);
  compare_bf16("gelu_backward", d_dinp, dinp, n, ROUND_TOL);

  float* dst = brandn(n, 1, 0);
  osdp_bf16* d_dst = upload_bf16(dst, n);
  ck->accumulate(dst, y, n);
  bk->accumulate(d_dst, d_y, n);
  compare_bf16("accumulate", d_dst, dst, n, ROUND_TOL);
  check_rounded("accumulate rounded to nearest even", d_dst, dst, n, 0);

  /* SwiGLU with gate = x (|x| up to ~8, and a few far beyond exp's range), up = y */
  x[0] = 100; x[1] = -100; x[2] = 1000; x[3] = -1000;
  d_x = upload_bf16(x, n);
  ck->swiglu_forward(out, x, y, n);
  bk->swiglu_forward(d_res, d_x, d_y, n);
  compare_bf16("swiglu_forward", d_res, out, n, ROUND_TOL);
  /* past the planted extremes, which would set the scale of the rounding check */
  check_rounded("swiglu_forward rounded to nearest even", d_res + 4, out + 4, n - 4, 1);
  float *dgate = brandn(n, 1, 0), *dup = brandn(n, 1, 0);
  osdp_bf16 *d_dgate = upload_bf16(dgate, n), *d_dup = upload_bf16(dup, n);
  ck->swiglu_backward(dgate, dup, d, x, y, n);
  bk->swiglu_backward(d_dgate, d_dup, d_d, d_x, d_y, n);
  compare_bf16("swiglu_backward.dgate", d_dgate, dgate, n, ROUND_TOL);
  compare_bf16("swiglu_backward.dup", d_dup, dup, n, ROUND_TOL);
  free(x); free(y); free(d); free(out); free(dinp); free(dst); free(dgate); free(dup);
}

/* RoPE forward and backward, in place, on rows wider than their heads (the padding must stay
** as it was: the whole buffer is compared), at positions up to 1999, with Llama's frequencies
** 10000^(-2j/hs) (fp32) for hs 64 and 128, and hs 160 (more pairs than a block has threads). */
static void test_rope(void) {
  int shapes[][5] = {/* B, T, nh, hs, ld */ {2, 37, 4, 64, 260}, {1, 2000, 1, 128, 130},
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
      float* x = brandn(n, 1, 0);
      osdp_bf16* d_x = upload_bf16(x, n);
      if (backward) {
        ck->rope_backward(x, ld, inv_freq, B, T, nh, hs);
        bk->rope_backward(d_x, ld, d_freq, B, T, nh, hs);
      } else {
        ck->rope_forward(x, ld, inv_freq, B, T, nh, hs);
        bk->rope_forward(d_x, ld, d_freq, B, T, nh, hs);
      }
      snprintf(name, sizeof name, "%s B%d T%d nh%d hs%d ld%d",
               backward ? "rope_backward" : "rope_forward", B, T, nh, hs, ld);
      compare_bf16(name, d_x, x, n, ROUND_TOL);
      free(x);
    }
    free(inv_freq);
  }
}

// ----------------------------------------------------------------------------
// cross-entropy, sums, AdamW, argmax, compute copy

/* The fused cross-entropy on bf16 logits: dlogits (0 in the padding, whose random values must be
** overwritten, and on the rows without a target), fp32 losses (0 there) and their sum by
** sum_values. */
static void test_crossentropy(void) {
  int shapes[][3] = {/* BT, V, Vp */ {20, 1000, 1024}, {2, 50257, 50304}, {4, 5, 128}};
  for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
    device_reset();
    int BT = shapes[si][0], V = shapes[si][1], Vp = shapes[si][2];
    size_t n = (size_t)BT * Vp;
    int* targets = random_targets(BT, V);
    float *logits = brandn(n, 2, 0), *losses = frandn(BT, 1, 0);
    osdp_bf16* d_logits = upload_bf16(logits, n);
    float* d_losses = upload_f(losses, BT);
    double scale = 1.0 / BT;
    ck->crossentropy_forward_backward(logits, losses, targets, BT, V, Vp, scale);
    bk->crossentropy_forward_backward(d_logits, d_losses, upload_i(targets, BT), BT, V, Vp,
                                      scale);
    char name[96];
    snprintf(name, sizeof name, "crossentropy.dlogits BT%d V%d Vp%d", BT, V, Vp);
    compare_bf16(name, d_logits, logits, n, ROUND_TOL);
    snprintf(name, sizeof name, "crossentropy.losses BT%d V%d Vp%d", BT, V, Vp);
    compare_f(name, d_losses, losses, BT, F32_TOL);
    snprintf(name, sizeof name, "sum_values of the losses BT%d V%d Vp%d", BT, V, Vp);
    compare_scalar(name, bk->sum_values(d_losses, (size_t)BT), ck->sum_values(losses, BT),
                   F32_TOL);
    free(targets); free(logits); free(losses);
  }
}

/* sum_squares of fp32 gradients, short and long, and sum_squares_multi over several arrays (and
** none), equal bit for bit to the sum_squares results added in order. */
static void test_sum_squares(void) {
  device_reset();
  size_t sizes[] = {100003, 1, 1000, 77};
  enum { COUNT = sizeof sizes / sizeof sizes[0] };
  float* host[COUNT];
  const float *g[COUNT], *d_g[COUNT];
  double host_sum = 0;
  for (int j = 0; j < COUNT; j++) {
    host[j] = frandn(sizes[j], 1, 0);
    g[j] = host[j];
    d_g[j] = upload_f(host[j], sizes[j]);
    double got = bk->sum_squares(d_g[j], sizes[j]);
    char name[64];
    snprintf(name, sizeof name, "sum_squares n=%zu", sizes[j]);
    compare_scalar(name, got, ck->sum_squares(g[j], sizes[j]), DOUBLE_TOL);
    host_sum += got;
  }
  double got = bk->sum_squares_multi(d_g, sizes, COUNT);
  compare_scalar("sum_squares_multi 4 arrays", got, ck->sum_squares_multi(g, sizes, COUNT),
                 DOUBLE_TOL);
  CHECK_MSG(got == host_sum, "sum_squares_multi: %.17g, the sum of sum_squares: %.17g", got,
            host_sum);
  CHECK(bk->sum_squares_multi(d_g, sizes, 0) == 0.0);
  for (int j = 0; j < COUNT; j++) free(host[j]);
}

/* adamw_update on the first and a later step (bias corrections), with weight decay and
** grad_scale; adamw_update_multi on 5 arrays (one empty, weight decay on every other) against
** the CPU's. All fp32: the bf16 table's optimizer is fp32. */
static void test_adamw(void) {
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
    bk->adamw_update(d_w, d_g, d_m, d_v, n, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.1f, t, 0.5f);
    char name[64];
    snprintf(name, sizeof name, "adamw_update.w t=%d", t);
    compare_f(name, d_w, w, n, F32_TOL);
    snprintf(name, sizeof name, "adamw_update.m t=%d", t);
    compare_f(name, d_m, m, n, F32_TOL);
    snprintf(name, sizeof name, "adamw_update.v t=%d", t);
    compare_f(name, d_v, v, n, F32_TOL);
    free(w); free(g); free(m); free(v);
  }

  device_reset();
  enum { COUNT = 5 };
  size_t n[COUNT] = {1000, 0, 5000, 1, 777}, at[COUNT], total = 0;
  float wd[COUNT];
  for (int j = 0; j < COUNT; j++) {
    wd[j] = j % 2 ? 0.1f : 0.0f;
    at[j] = total;
    total += (n[j] + 255) / 256 * 256;
  }
  float *w, *g, *m, *v;
  adamw_inputs(total, &w, &g, &m, &v);
  float *d_w = upload_f(w, total), *d_g = upload_f(g, total), *d_m = upload_f(m, total);
  float* d_v = upload_f(v, total);
  float *hw[COUNT], *hm[COUNT], *hv[COUNT], *dw[COUNT], *dm[COUNT], *dv[COUNT];
  const float *hg[COUNT], *dg[COUNT];
  for (int j = 0; j < COUNT; j++) {
    hw[j] = w + at[j]; hg[j] = g + at[j]; hm[j] = m + at[j]; hv[j] = v + at[j];
    dw[j] = d_w + at[j]; dg[j] = d_g + at[j]; dm[j] = d_m + at[j]; dv[j] = d_v + at[j];
  }
  ck->adamw_update_multi(hw, hg, hm, hv, n, wd, COUNT, 1e-3f, 0.9f, 0.999f, 1e-8f, 3, 0.5f);
  bk->adamw_update_multi(dw, dg, dm, dv, n, wd, COUNT, 1e-3f, 0.9f, 0.999f, 1e-8f, 3, 0.5f);
  compare_f("adamw_update_multi.w 5 arrays", d_w, w, total, F32_TOL);
  compare_f("adamw_update_multi.m 5 arrays", d_m, m, total, F32_TOL);
  compare_f("adamw_update_multi.v 5 arrays", d_v, v, total, F32_TOL);
  free(w); free(g); free(m); free(v);
}

/* logits_argmax on bf16 logits: random rows, each with one planted largest value (bf16 has few
** values per octave, so random rows alone would tie), planted ties (the first index wins) and a
** larger value in the padding (ignored): the indices agree exactly with the CPU's. */
static void test_argmax(void) {
  device_reset();
  int BT = 33, V = 1000, Vp = 1024;
  size_t n = (size_t)BT * Vp;
  float* logits = brandn(n, 1, 0);
  for (int i = 3; i < BT; i++) /* 8 above any N(0, 1) draw here, exact in bf16 */
    logits[(size_t)i * Vp + rng_below(&rng, V)] = 8 + i / 8;
  plant_argmax_cases(logits, V, Vp);
  int* d_arg = device_alloc((size_t)BT * sizeof(int));
  bk->logits_argmax(upload_bf16(logits, n), BT, V, Vp, d_arg);
  check_argmax(d_arg, logits, BT, V, Vp);
  free(logits);
}

/* compute_copy: fp32 master weights to bf16, bit for bit the host's osdp_bf16_from_float
** (round to nearest even), on random values and on the cases a rounding gets wrong: halfway
** values with an even and with an odd kept half, of both signs, values that round up into the
** next octave or to inf (FLT_MAX, the largest finite bf16 plus half a step), -0 and subnormals. */
static void test_compute_copy(void) {
  device_reset();
  size_t n = 4099;
  float* src = frandn(n, 3, 0);
  uint32_t special[] = {0x3f808000u, 0x3f818000u, 0xbf808000u, 0xbf818000u, 0x3fffffffu,
                        0x7f7fffffu, 0x7f7f8000u, 0x80000000u, 0x00000001u, 0x00018000u,
                        0x80408000u, 0x3f80c000u};
  for (size_t i = 0; i < sizeof special / sizeof special[0]; i++)
    memcpy(&src[i * 97], &special[i], sizeof(float));
  osdp_bf16* d_dst = device_alloc(n * sizeof(osdp_bf16));
  bk->compute_copy(d_dst, upload_f(src, n), n);
  osdp_bf16* got = xmalloc(n * sizeof(osdp_bf16));
  gpu->to_host(got, d_dst, n * sizeof(osdp_bf16));
  size_t wrong = 0;
  for (size_t i = 0; i < n; i++) {
    uint16_t want = osdp_bf16_from_float(src[i]).bits;
    if (got[i].bits != want && wrong++ < 5)
      fprintf(stderr, "  compute_copy[%zu]: %a gave bf16 0x%04x, expected 0x%04x\n", i,
              (double)src[i], got[i].bits, want);
  }
  printf("  %-*s %8zu values, %zu not osdp_bf16_from_float's\n", check_name_width,
         "compute_copy", n, wrong);
  CHECK_MSG(wrong == 0, "compute_copy: %zu values not rounded to nearest even", wrong);
  free(src); free(got);
}

// ----------------------------------------------------------------------------
// the matmul mode

/* The bf16 table's products and attention do not depend on set_matmul_mode (which says how
** products on fp32 storage are computed): a matmul_forward and attention_forward (head sizes 32,
** tensor cores, and 40, fp32) in modes fp32 and tf32 give bit-identical outputs. The mode is
** set back to fp32. */
static void test_mode_independent(void) {
  device_reset();
  int BT = 37, K = 50, OC = 70, T = 37, NH = 2;
  size_t ni = (size_t)BT * K, nw = (size_t)K * OC, no = (size_t)BT * OC;
  float *inp = brandn(ni, 1, 0), *w = brandn(nw, 1, 0);
  osdp_bf16 *d_inp = upload_bf16(inp, ni), *d_w = upload_bf16(w, nw), *d_out[2];
  for (int m = 0; m < 2; m++) {
    gpu->set_matmul_mode(m ? MATMUL_TF32 : MATMUL_FP32);
    d_out[m] = device_alloc(no * sizeof(osdp_bf16));
    bk->matmul_forward(d_out[m], d_inp, K, d_w, NULL, BT, K, OC, 0);
  }
  float *a = download_bf16(d_out[0], no), *b = download_bf16(d_out[1], no);
  int same = memcmp(a, b, no * sizeof(float)) == 0;
  CHECK_MSG(same, "bf16 matmul_forward: modes fp32 and tf32 differ");
  int all_same = same;
  free(a); free(b);
  int head_sizes[] = {32, 40};
  for (int hi = 0; hi < 2; hi++) {
    int hs = head_sizes[hi], C = NH * hs;
    size_t nq = (size_t)T * 3 * C, na = (size_t)T * C;
    float* qkv = brandn(nq, 1, 0);
    osdp_bf16* d_qkv = upload_bf16(qkv, nq);
    for (int m = 0; m < 2; m++) {
      gpu->set_matmul_mode(m ? MATMUL_TF32 : MATMUL_FP32);
      d_out[m] = device_alloc(na * sizeof(osdp_bf16));
      float* d_lse = device_alloc((size_t)NH * T * sizeof(float));
      bk->attention_forward(d_out[m], d_lse, d_qkv, d_qkv + C, d_qkv + 2 * C, 3 * C, 3 * C, NULL,
                            1, T, NH, NH, hs);
    }
    a = download_bf16(d_out[0], na);
    b = download_bf16(d_out[1], na);
    same = memcmp(a, b, na * sizeof(float)) == 0;
    CHECK_MSG(same, "bf16 attention_forward hs%d: modes fp32 and tf32 differ", hs);
    all_same &= same;
    free(a); free(b); free(qkv);
  }
  gpu->set_matmul_mode(MATMUL_FP32);
  printf("  %-*s %s\n", check_name_width,
         "matmul mode fp32 vs tf32 (matmul, attention hs32, hs40)",
         all_same ? "identical" : "DIFFERENT");
  free(inp); free(w);
}

// ----------------------------------------------------------------------------

/* Skips where no GPU is visible (cuda_check_start); otherwise one device block for every test, in
** matmul mode fp32 (the bf16 table ignores the mode: test_mode_independent). */
int main(void) {
  check_name_width = 60; /* the check lines' layout (cuda_check.h), with their tolerances */
  check_print_tol = 1;
  int status = cuda_check_start("test_cuda_bf16", 8642);
  if (status >= 0) return status;
  if (gpu->bf16 == NULL) {
    fprintf(stderr, "test_cuda_bf16: FAIL: the CUDA backend has no bf16 table\n");
    return 1;
  }
  setvbuf(stdout, NULL, _IOLBF, 0); /* the check lines and CHECK's messages in order */
  bk = gpu->bf16;
  test_table();
  if (check_failed) return check_summary(); /* a NULL entry would crash the rest */
  test_embed_pos();
  test_embed_tok();
  test_matmul();
  test_matmul_gelu();
  test_layernorm();
  test_rmsnorm();
  test_attention();
  test_elementwise();
  test_rope();
  test_crossentropy();
  test_sum_squares();
  test_adamw();
  test_argmax();
  test_compute_copy();
  test_mode_independent();
  return cuda_check_finish();
}
