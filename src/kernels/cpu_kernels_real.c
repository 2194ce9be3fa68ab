/*
** cpu_kernels_real.c: the forward and backward kernels of the operators of every model family
** (GPT-2's; Llama's RMSNorm, SwiGLU, RoPE and grouped-query attention) on the CPU, written once
** for the element type `real`. CMakeLists.txt compiles this file twice:
**   - as it is: real = float, the table cpu_kernels_f32 (training);
**   - with -DOSDP_REAL_DOUBLE: real = double, the table cpu_kernels_f64 (the finite-difference
**     gradient checks, which so check exactly the code that trains).
** Every kernel is a static function under its own name (matmul_forward, attention_backward,
** ...); each compile exports only its table, at the end of the file, whose members and
** contracts are KERNEL_LIST's (kernel_list.h). Both compiles use -fno-math-errno and the
** project's -O3 -march=native (OSDP_NATIVE).
** GPT-2's semantics follow Karpathy's llm.c (train_gpt2.c), with two differences: linear
** weights are stored [in, out] and attention is computed FlashAttention-2 style, tile by tile
** with GEMMs, without the T x T probability matrix; Llama's follow Hugging Face transformers.
**
** Determinism: every OpenMP loop is schedule(static) and each thread owns the output
** elements it writes; sums over rows (bias, norm and embedding gradients) run in a
** fixed row order inside a block of columns owned by one thread, so the results do not
** even depend on the thread count. All parallel regions run with kernels_threads() threads.
**
** Gradients: a kernel that writes a parameter gradient takes `accumulate`: 1 adds into the
** buffer, 0 overwrites it (the first use of the gradient in a step), so no gradient buffer
** needs zeroing first. Overwriting gives the very values zero-then-add would (0 + x = x).
** Elementwise loops are written so that the compiler vectorises them (AVX-512 with
** -march=native): restrict pointers, no calls into libm, constants computed before the loop.
*/
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <string.h>
#include <cblas.h>

#include "kernels/cpu_dnnl.h"
#include "kernels/cpu_kernels.h"

// ----------------------------------------------------------------------------
// the element type and its BLAS routine and math:
//   GEMM                    cblas_sgemm or cblas_dgemm (attention's tile products)
//   LINEAR_GEMM             the linear layers' products: cpu_sgemm (cpu_dnnl.h: oneDNN's where
//                           built with it) or cblas_dgemm, row-major, transposes as 'N'/'T' 
//   EXP, LOG, SQRT, TANH    the math functions of that precision (EXP and TANH vectorisable
//                           in fp32; SQRT is one instruction, the file builds -fno-math-errno)
//   COS, SIN                libm's cosine and sine of that precision (RoPE's angles)
//   KINT, KINT_MAX          the signed integer type of real's size, and its maximum

#ifdef OSDP_REAL_DOUBLE

/* fp64 keeps libm, so the gradient checks run on exact reference math. */
typedef double real;
#define GEMM cblas_dgemm
#define LINEAR_GEMM dgemm_rowmajor
#define EXP exp
#define LOG log
#define SQRT sqrt
#define TANH tanh
#define COS cos
#define SIN sin
#define KINT int64_t
#define KINT_MAX INT64_MAX

/* cblas_dgemm, row-major, with cpu_sgemm's arguments (transposes as 'N' or 'T'). */
static inline void dgemm_rowmajor(char ta, char tb, int M, int N, int K, double alpha,
                                  const double* A, int lda, const double* B, int ldb, double beta,
                                  double* C, int ldc) {
  cblas_dgemm(CblasRowMajor, ta == 'T' ? CblasTrans : CblasNoTrans,
              tb == 'T' ? CblasTrans : CblasNoTrans, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

#else

/* fp32: exp and tanh are our own branch-free versions rather than libm's: without -ffast-math
** the compiler cannot vectorise calls into libm, and scalar tanhf (~15 ns) made GELU cost as
** much as a fifth of a GPT-2 step (expf ~3.5 ns). These inline versions vectorise and are
** accurate to a few ulp (exp) and ~2e-7 absolute (tanh), which is enough for fp32 training.
** sqrt is libm's sqrtf: with -fno-math-errno it is the exact, vectorisable square-root
** instruction. */
typedef float real;
#define GEMM cblas_sgemm
#define LINEAR_GEMM cpu_sgemm
#define EXP fast_expf
#define LOG logf
#define SQRT sqrtf
#define TANH fast_tanhf
#define COS cosf
#define SIN sinf
#define KINT int32_t
#define KINT_MAX INT32_MAX

#include "kernels/cpu_fastmath.h"

#endif

// ----------------------------------------------------------------------------
// block sizes

/* Columns per block when a thread owns a block of columns and sums over rows in order. */
#ifndef KCOLBLOCK
#define KCOLBLOCK 64
#endif

/* Lanes of the fixed-order reductions below: 16 interleaved partial results, which the
** compiler keeps in vector registers (a single running sum cannot be vectorised without
** -ffast-math): one AVX-512 register of floats (8 lanes made GCC shuffle half-registers, which
** cost LayerNorm twice its time). The order of operations is fixed, so results stay
** deterministic. */
#define LANES 16

// ----------------------------------------------------------------------------
// fixed-order vectorisable reductions over one row

/* sum of x[0..n). */
static inline real row_sum(const real* x, int n) {
  real acc[LANES] = {0};
  int i = 0;
  for (; i + LANES <= n; i += LANES)
    for (int k = 0; k < LANES; k++) acc[k] += x[i + k];
  for (int k = 0; i < n; i++, k++) acc[k] += x[i];
  real s = 0;
  for (int k = 0; k < LANES; k++) s += acc[k];
  return s;
}

/* sum of x[i] * y[i] for i < n. */
static inline real row_dot(const real* x, const real* y, int n) {
  real acc[LANES] = {0};
  int i = 0;
  for (; i + LANES <= n; i += LANES)
    for (int k = 0; k < LANES; k++) acc[k] += x[i + k] * y[i + k];
  for (int k = 0; i < n; i++, k++) acc[k] += x[i] * y[i];
  real s = 0;
  for (int k = 0; k < LANES; k++) s += acc[k];
  return s;
}

/* sum of x[i] * y[i] * (z[i] - zc) for i < n (LayerNorm backward's sum(w*dout*(x-mean))). */
static inline real row_dot3_centred(const real* x, const real* y, const real* z, real zc, int n) {
  real acc[LANES] = {0};
  int i = 0;
  for (; i + LANES <= n; i += LANES)
    for (int k = 0; k < LANES; k++) acc[k] += x[i + k] * y[i + k] * (z[i + k] - zc);
  for (int k = 0; i < n; i++, k++) acc[k] += x[i] * y[i] * (z[i] - zc);
  real s = 0;
  for (int k = 0; k < LANES; k++) s += acc[k];
  return s;
}

/* Maps a real to a signed integer of the same size that sorts in the same order (negative
** numbers get their magnitude bits flipped). The map is its own inverse. */
static inline KINT order_key(KINT bits) {
  return bits >= 0 ? bits : bits ^ KINT_MAX;
}

/* max of x[0..n), n >= 1. Taken over the order keys because the compiler vectorises an
** integer max but not a float one (whose ternary it may not reorder under the default
** IEEE rules). Exact; a (positive) NaN in x sorts above +inf and so comes out. */
static inline real row_max(const real* x, int n) {
  KINT bits;
  memcpy(&bits, &x[0], sizeof bits);
  KINT best = order_key(bits);
  for (int i = 1; i < n; i++) {
    memcpy(&bits, &x[i], sizeof bits);
    KINT key = order_key(bits);
    best = key > best ? key : best;
  }
  bits = order_key(best);
  real m;
  memcpy(&m, &bits, sizeof m);
  return m;
}

// ----------------------------------------------------------------------------
// positional and token embeddings

/* out[b,t,:] = wpe[t,:]: copies the first T rows of the positional table into each of
** the B sequences. */
static void embed_pos_forward(real* out, const real* wpe, int B, int T, int C) {
  #pragma omp parallel for schedule(static) num_threads(kernels_threads())
  for (int bt = 0; bt < B * T; bt++) {
    memcpy(out + (size_t)bt * C, wpe + (size_t)(bt % T) * C, (size_t)C * sizeof(real));
  }
}

/* dwpe[t,:] (+= if accumulate, else =) sum_b dout[b,t,:]. Each thread owns whole rows t of
** dwpe and adds the B sequences in order b = 0, 1, ... (overwriting: starting from b = 0's). */
static void embed_pos_backward(real* dwpe, const real* dout, int B, int T, int C, int accumulate) {
  #pragma omp parallel for schedule(static) num_threads(kernels_threads())
  for (int t = 0; t < T; t++) {
    real* restrict dw = dwpe + (size_t)t * C;
    if (!accumulate) memcpy(dw, dout + (size_t)t * C, (size_t)C * sizeof(real));
    for (int b = accumulate ? 0 : 1; b < B; b++) {
      const real* restrict d = dout + ((size_t)b * T + t) * C;
      for (int c = 0; c < C; c++) dw[c] += d[c];
    }
  }
}

/* out[i*ldo + r] += wrows[r*Vp + tok[i]]: adds the embedding of token tok[i], restricted
** to the nrows rows of the [C, Vp] table held in wrows, to position i. Parallel over
** positions, each thread owns its positions' outputs. */
static void embed_tok_forward(real* out, int ldo, const int* tok, int BT, const real* wrows,
                              int nrows, int Vp) {
  #pragma omp parallel for schedule(static) num_threads(kernels_threads())
  for (int i = 0; i < BT; i++) {
    real* o = out + (size_t)i * ldo;
    const real* w = wrows + tok[i];
    for (int r = 0; r < nrows; r++) o[r] += w[(size_t)r * Vp];
  }
}

/* dwrows[r*Vp + tok[i]] += dout[i*ldo + r]; without accumulate the nrows x Vp rows are zeroed
** first (entries of tokens that do not occur get 0). Tokens repeat, so positions cannot be
** split among threads; instead each thread owns a block of rows r (and zeroes them itself)
** and walks the positions in order i = 0, 1, ..., which makes every sum deterministic. */
static void embed_tok_backward(real* dwrows, const real* dout, int ldo, const int* tok, int BT,
                               int nrows, int Vp, int accumulate) {
  int nblocks = (nrows + KCOLBLOCK - 1) / KCOLBLOCK;
  #pragma omp parallel for schedule(static) num_threads(kernels_threads())
  for (int blk = 0; blk < nblocks; blk++) {
    int r0 = blk * KCOLBLOCK;
    int r1 = r0 + KCOLBLOCK < nrows ? r0 + KCOLBLOCK : nrows;
    if (!accumulate) memset(dwrows + (size_t)r0 * Vp, 0, (size_t)(r1 - r0) * Vp * sizeof(real));
    for (int i = 0; i < BT; i++) {
      const real* d = dout + (size_t)i * ldo;
      real* dw = dwrows + tok[i];
      for (int r = r0; r < r1; r++) dw[(size_t)r * Vp] += d[r];
    }
  }
}

// ----------------------------------------------------------------------------
// matmul (linear layer), weights stored [in, out]

/* dst[c] (+= if accumulate, else =) column sums of src[rows, ncols] (row stride ncols) over
** all rows. Each thread owns a block of columns and adds the rows in order, so the sum is
** deterministic (overwriting starts from row 0's values: the same sums). */
static void colsum(real* dst, const real* src, int rows, int ncols, int accumulate) {
  int nblocks = (ncols + KCOLBLOCK - 1) / KCOLBLOCK;
  #pragma omp parallel for schedule(static) num_threads(kernels_threads())
  for (int blk = 0; blk < nblocks; blk++) {
    int c0 = blk * KCOLBLOCK;
    int c1 = c0 + KCOLBLOCK < ncols ? c0 + KCOLBLOCK : ncols;
    int first = 0; /* the first row added */
    if (!accumulate) {
      if (rows > 0) memcpy(dst + c0, src + c0, (size_t)(c1 - c0) * sizeof(real));
      else memset(dst + c0, 0, (size_t)(c1 - c0) * sizeof(real));
      first = 1;
    }
    for (int i = first; i < rows; i++) {
      const real* restrict s = src + (size_t)i * ncols;
      for (int c = c0; c < c1; c++) dst[c] += s[c];
    }
  }
}

/* out[i,:] = bias (or += bias when accumulate) for every row i of out[BT, OC]. */
static void bias_rows(real* out, const real* bias, int BT, int OC, int accumulate) {
  #pragma omp parallel for schedule(static) num_threads(kernels_threads())
  for (int i = 0; i < BT; i++) {
    real* o = out + (size_t)i * OC;
    if (accumulate) {
      for (int c = 0; c < OC; c++) o[c] += bias[c];
    } else {
      memcpy(o, bias, (size_t)OC * sizeof(real));
    }
  }
}

/* out[BT, OC] = (or += when accumulate) inp[BT, K] @ w[K, OC] + bias. The bias is first
** written (or added) into out and the product is then accumulated by one GEMM. */
static void matmul_forward(real* out, const real* inp, int ldinp, const real* w, const real* bias,
                           int BT, int K, int OC, int accumulate) {
  real beta = accumulate ? 1 : 0;
  if (bias != NULL) {
    bias_rows(out, bias, BT, OC, accumulate);
    beta = 1;
  }
  LINEAR_GEMM('N', 'N', BT, OC, K, 1, inp, ldinp, w, OC, beta, out, OC);
}

/* Backward of matmul_forward (GEMM's beta picks overwrite or add):
**   dinp[BT, K]  = dout[BT, OC] @ w^T    (overwritten; skipped when dinp == NULL)
**   dw[K, OC]   += inp^T @ dout          (= when !accumulate)
**   dbias[OC]   += column sums of dout   (= when !accumulate; skipped when dbias == NULL) */
static void matmul_backward(real* dinp, real* dw, real* dbias, const real* dout, const real* inp,
                            int ldinp, const real* w, int BT, int K, int OC, int accumulate) {
  real beta = accumulate ? 1 : 0;
  if (dinp != NULL) {
    LINEAR_GEMM('N', 'T', BT, K, OC, 1, dout, OC, w, OC, 0, dinp, ldinp);
  }
  LINEAR_GEMM('T', 'N', K, OC, BT, 1, inp, ldinp, dout, OC, beta, dw, OC);
  if (dbias != NULL) colsum(dbias, dout, BT, OC, accumulate);
}

// ----------------------------------------------------------------------------
// layernorm

/* LayerNorm of each of the BT rows of inp[BT, C]: out = (x - mean) * rstd * w + b with
** rstd = 1 / sqrt(var + 1e-5) (biased variance). Saves mean and rstd for the backward. */
static void layernorm_forward(real* out, real* mean, real* rstd, const real* inp, const real* w,
                              const real* b, int BT, int C) {
  const real eps = (real)1e-5;
  #pragma omp parallel for schedule(static) num_threads(kernels_threads())
  for (int i = 0; i < BT; i++) {
    const real* x = inp + (size_t)i * C;
    real* o = out + (size_t)i * C;
    real m = row_sum(x, C) / C;
    for (int c = 0; c < C; c++) o[c] = x[c] - m;  /* centred row, kept in out */
    real var = row_dot(o, o, C) / C;
    real s = 1 / SQRT(var + eps);
    for (int c = 0; c < C; c++) o[c] = o[c] * s * w[c] + b[c];
    mean[i] = m;
    rstd[i] = s;
  }
}

/* Gradient of the input of LayerNorm, row by row (as in llm.c):
**   dinp += (w*dout - mean(w*dout) - norm * mean(w*dout*norm)) * rstd,
** with norm = (x - mean) * rstd. Each thread owns whole rows. */
static void layernorm_backward_input(real* dinp, const real* dout, const real* inp, const real* w,
                                     const real* mean, const real* rstd, int BT, int C) {
  #pragma omp parallel for schedule(static) num_threads(kernels_threads())
  for (int i = 0; i < BT; i++) {
    const real* x = inp + (size_t)i * C;
    const real* d = dout + (size_t)i * C;
    real m = mean[i], s = rstd[i];
    real dnorm_mean = row_dot(w, d, C) / C;                          /* mean(w*dout) */
    real dnorm_norm_mean = row_dot3_centred(w, d, x, m, C) * s / C;  /* mean(w*dout*norm) */
    real* dx = dinp + (size_t)i * C;
    for (int c = 0; c < C; c++) {
      real norm = (x[c] - m) * s;
      dx[c] += (w[c] * d[c] - dnorm_mean - norm * dnorm_norm_mean) * s;
    }
  }
}

/* Gradients of the LayerNorm weight and bias: dw += sum_i norm_i * dout_i, db += sum_i
** dout_i (without accumulate the sums start from 0 instead of dw, db). Each thread owns a
** block of columns and adds the rows in order. */
static void layernorm_backward_params(real* restrict dw, real* restrict db, const real* dout,
                                      const real* inp, const real* mean, const real* rstd, int BT,
                                      int C, int accumulate) {
  int nblocks = (C + KCOLBLOCK - 1) / KCOLBLOCK;
  #pragma omp parallel for schedule(static) num_threads(kernels_threads())
  for (int blk = 0; blk < nblocks; blk++) {
    int c0 = blk * KCOLBLOCK;
    int c1 = c0 + KCOLBLOCK < C ? c0 + KCOLBLOCK : C;
    if (!accumulate) {
      memset(dw + c0, 0, (size_t)(c1 - c0) * sizeof(real));
      memset(db + c0, 0, (size_t)(c1 - c0) * sizeof(real));
    }
    for (int i = 0; i < BT; i++) {
      const real* x = inp + (size_t)i * C;
      const real* d = dout + (size_t)i * C;
      real m = mean[i], s = rstd[i];
      for (int c = c0; c < c1; c++) {
        dw[c] += (x[c] - m) * s * d[c];
        db[c] += d[c];
      }
    }
  }
}

/* Backward of layernorm_forward: accumulates dinp; dw and db as accumulate says. */
static void layernorm_backward(real* dinp, real* dw, real* db, const real* dout, const real* inp,
                               const real* w, const real* mean, const real* rstd, int BT, int C,
                               int accumulate) {
  layernorm_backward_input(dinp, dout, inp, w, mean, rstd, BT, C);
  layernorm_backward_params(dw, db, dout, inp, mean, rstd, BT, C, accumulate);
}

// ----------------------------------------------------------------------------
// RMSNorm

/* sum of x[i]^2 for i < n, accumulated in double in row_sum's fixed order (LANES interleaved
** partial sums). */
static inline double row_sumsq_double(const real* x, int n) {
  double acc[LANES] = {0};
  int i = 0;
  for (; i + LANES <= n; i += LANES)
    for (int k = 0; k < LANES; k++) acc[k] += (double)x[i + k] * (double)x[i + k];
  for (int k = 0; i < n; i++, k++) acc[k] += (double)x[i] * (double)x[i];
  double s = 0;
  for (int k = 0; k < LANES; k++) s += acc[k];
  return s;
}

/* RMSNorm of each of the BT rows of inp[BT, C]: out = x * rstd * w with rstd = 1 / sqrt(
** mean(x^2) + eps), the statistic computed in double per row (so fp32 keeps it exact to
** rounding for any C); saves rstd for the backward. Each thread owns whole rows. */
static void rmsnorm_forward(real* out, real* rstd, const real* inp, const real* w, int BT, int C,
                            double eps) {
  #pragma omp parallel for schedule(static) num_threads(kernels_threads())
  for (int i = 0; i < BT; i++) {
    const real* restrict x = inp + (size_t)i * C;
    real* restrict o = out + (size_t)i * C;
    real s = (real)(1.0 / sqrt(row_sumsq_double(x, C) / C + eps));
    for (int c = 0; c < C; c++) o[c] = x[c] * s * w[c];
    rstd[i] = s;
  }
}

/* Gradient of the input of RMSNorm, row by row: with norm = x * rstd,
**   dinp += (w*dout - norm * mean(w*dout*norm)) * rstd
** (ACCUMULATES). Each thread owns whole rows. */
static void rmsnorm_backward_input(real* dinp, const real* dout, const real* inp, const real* w,
                                   const real* rstd, int BT, int C) {
  #pragma omp parallel for schedule(static) num_threads(kernels_threads())
  for (int i = 0; i < BT; i++) {
    const real* x = inp + (size_t)i * C;
    const real* d = dout + (size_t)i * C;
    real s = rstd[i];
    /* mean(w*dout*norm); row_dot3_centred with centre 0 is sum(w*dout*x) */
    real dnorm_norm_mean = row_dot3_centred(w, d, x, 0, C) * s / C;
    real* dx = dinp + (size_t)i * C;
    for (int c = 0; c < C; c++) dx[c] += (w[c] * d[c] - x[c] * s * dnorm_norm_mean) * s;
  }
}

/* Gradient of the RMSNorm weight: dw += sum_i x_i * rstd_i * dout_i (= when !accumulate).
** Each thread owns a block of columns and adds the rows in order. */
static void rmsnorm_backward_weight(real* restrict dw, const real* dout, const real* inp,
                                    const real* rstd, int BT, int C, int accumulate) {
  int nblocks = (C + KCOLBLOCK - 1) / KCOLBLOCK;
  #pragma omp parallel for schedule(static) num_threads(kernels_threads())
  for (int blk = 0; blk < nblocks; blk++) {
    int c0 = blk * KCOLBLOCK;
    int c1 = c0 + KCOLBLOCK < C ? c0 + KCOLBLOCK : C;
    if (!accumulate) memset(dw + c0, 0, (size_t)(c1 - c0) * sizeof(real));
    for (int i = 0; i < BT; i++) {
      const real* x = inp + (size_t)i * C;
      const real* d = dout + (size_t)i * C;
      real s = rstd[i];
      for (int c = c0; c < c1; c++) dw[c] += x[c] * s * d[c];
    }
  }
}

/* Backward of rmsnorm_forward: accumulates dinp; dw as accumulate says. */
static void rmsnorm_backward(real* dinp, real* dw, const real* dout, const real* inp,
                             const real* w, const real* rstd, int BT, int C, int accumulate) {
  rmsnorm_backward_input(dinp, dout, inp, w, rstd, BT, C);
  rmsnorm_backward_weight(dw, dout, inp, rstd, BT, C, accumulate);
}

// ----------------------------------------------------------------------------
// causal multi-head self-attention, FlashAttention-2 style: tiles of queries meet the causal
// prefix of key tiles one at a time, so no T x T matrix is ever stored

/* OpenBLAS 0.3.21 (the OpenMP build) does NOT simply run single-threaded when GEMM is called
** from inside an OpenMP parallel region while its own thread count is > 1: concurrent calls
** then contend for its one internal thread buffer and run up to 20x slower. So the kernels
** that call GEMM from several threads at once switch OpenBLAS to 1 thread for their region
** and give it back kernels_threads() afterwards. (openblas_set_num_threads also sets the
** OpenMP default thread count; the restore puts that back too, and our parallel regions pass
** num_threads explicitly.) Both calls are cheap (microseconds). */
static void blas_serial_begin(void) {
  openblas_set_num_threads(1);
}

/* Undoes blas_serial_begin: OpenBLAS (and the OpenMP default) back to kernels_threads(). */
static void blas_serial_end(void) {
  openblas_set_num_threads(kernels_threads());
}

/* Number of keys among key0 .. key0+nk-1 that query row t may attend to (keys <= t), clamped
** to [0, nk]: the causal mask of one row of a tile. */
static inline int causal_valid_keys(int t, int key0, int nk) {
  int n = t + 1 - key0;
  return n < 0 ? 0 : (n > nk ? nk : n);
}

/* Writes the transpose of the [rows, cols] block src (row stride ld) into dst [cols, rows].
** The attention products that contract two row-major [n, hs] blocks over hs (Q K^T, dO V^T)
** are A B^T in row-major terms, for which OpenBLAS 0.3.21 packs both operands (its
** small-matrix kernels cover the other cases: ~110 instead of ~82 GFLOP/s for 64 x 64 x 64
** on one AVX-512 core). One
** operand is therefore transposed once, into scratch, and reused for a whole row or column
** of tiles, which turns every product into one with a small-matrix kernel. */
static void transpose_block(real* dst, const real* src, int ld, int rows, int cols) {
  for (int r = 0; r < rows; r++) {
    const real* srow = src + (size_t)r * ld;
    for (int c = 0; c < cols; c++) dst[(size_t)c * rows + r] = srow[c];
  }
}

/* Forward of one query tile of one (b, h): queries q0 .. q0+nq-1 against every key tile that
** holds at least one key <= q0+nq-1 (tiles entirely above the diagonal are never computed).
** q is the query head's [T, hs] view (row stride ldq), k and v its K/V head's (row stride
** ldkv), o its [T, hs] view of out (row stride ldo), lse_head its T log-sum-exps. The tile
** is held transposed, [keys, queries]: Q_i^T is formed once (into work), then per key tile
** S^T = scale * K_j Q_i^T is one GEMM, and with
** the causal mask (a prefix of each key's row) the online softmax keeps each query's running
** max m and sum l of exp(S - m), working along rows of S^T (vectorised over queries, summed
** over keys in order). The unnormalised output O (in work, [nq, hs]) is rescaled by
** exp(m_old - m_new) and gets (P^T)^T V_j added by a second GEMM. Finally out = O / l and
** lse = m + log l. The first key tile starts every query (key 0 is valid for all of them). */
static void attention_forward_tile(real* o, int ldo, real* lse_head, const real* q, int ldq,
                                   const real* k, const real* v, int ldkv, real* work, int q0,
                                   int nq, int hs, real scale) {
  real* st = work;                                         /* [nk, nq] S^T, then P^T */
  real* qt = st + ATTENTION_TILE_Q * ATTENTION_TILE_K;     /* [hs, nq] Q_i^T */
  real* acc = qt + (size_t)hs * ATTENTION_TILE_Q;          /* [nq, hs] unnormalised output */
  real* run_max = acc + (size_t)ATTENTION_TILE_Q * hs;     /* [nq] running max per query */
  real* run_sum = run_max + ATTENTION_TILE_Q;              /* [nq] running sum of exp(S - max) */
  real* new_max = run_sum + ATTENTION_TILE_Q;              /* [nq] max after this key tile */
  real* tile_sum = new_max + ATTENTION_TILE_Q;             /* [nq] this key tile's sum */
  int q_end = q0 + nq;
  transpose_block(qt, q + (size_t)q0 * ldq, ldq, nq, hs);
  for (int k0 = 0; k0 < q_end; k0 += ATTENTION_TILE_K) {
    /* keys at or past q_end are masked for every query of the tile: left out of the products */
    int nk = q_end - k0 < ATTENTION_TILE_K ? q_end - k0 : ATTENTION_TILE_K;
    int first = k0 == 0;
    GEMM(CblasRowMajor, CblasNoTrans, CblasNoTrans, nk, nq, hs, scale, k + (size_t)k0 * ldkv,
         ldkv, qt, nq, 0, st, nq);
    /* key k0+kr is seen by queries q0+c >= k0+kr: its masked part is the prefix c < k0+kr-q0
    ** (shorter than the row, since keys past the last query were left out) */
    for (int c = 0; c < nq; c++) {
      new_max[c] = first ? -INFINITY : run_max[c];
      tile_sum[c] = 0;
    }
    for (int kr = 0; kr < nk; kr++) {
      const real* row = st + (size_t)kr * nq;
      int nmasked = k0 + kr - q0 > 0 ? k0 + kr - q0 : 0;
      for (int c = nmasked; c < nq; c++) new_max[c] = row[c] > new_max[c] ? row[c] : new_max[c];
    }
    for (int kr = 0; kr < nk; kr++) {
      real* row = st + (size_t)kr * nq;
      int nmasked = k0 + kr - q0 > 0 ? k0 + kr - q0 : 0;
      for (int c = 0; c < nmasked; c++) row[c] = 0;
      for (int c = nmasked; c < nq; c++) {
        row[c] = EXP(row[c] - new_max[c]);
        tile_sum[c] += row[c];
      }
    }
    for (int c = 0; c < nq; c++) {
      if (first) {
        run_sum[c] = tile_sum[c];
      } else {
        real alpha = EXP(run_max[c] - new_max[c]);
        run_sum[c] = run_sum[c] * alpha + tile_sum[c];
        if (alpha != 1) {
          real* arow = acc + (size_t)c * hs;
          for (int d = 0; d < hs; d++) arow[d] *= alpha;
        }
      }
      run_max[c] = new_max[c];
    }
    GEMM(CblasRowMajor, CblasTrans, CblasNoTrans, nq, hs, nk, 1, st, nq, v + (size_t)k0 * ldkv,
         ldkv, first ? 0 : 1, acc, hs);
  }
  for (int r = 0; r < nq; r++) {
    real inv = 1 / run_sum[r];
    const real* arow = acc + (size_t)r * hs;
    real* orow = o + (size_t)(q0 + r) * ldo;
    for (int d = 0; d < hs; d++) orow[d] = arow[d] * inv;
    lse_head[q0 + r] = run_max[r] + LOG(run_sum[r]);
  }
}

/* Causal attention forward, see KERNEL_LIST (kernel_list.h). The work items are (b, h, pair
** of query tiles): query tile i costs i+1 key tiles, so tile p is paired with tile ntiles-1-p
** and every pair costs about the same (ntiles+1 tiles; the middle tile of an odd count is
** alone); schedule(static) then gives each thread an equal share even for a single (b, h).
** Each item writes only its own rows of out and lse, and computes them the same way whichever
** thread runs it, so results do not depend on the thread count. Query head h reads K/V head
** h / (NH / NKV). */
static void attention_forward(real* out, real* lse, const real* q, const real* k, const real* v,
                              int ldq, int ldkv, real* scratch, int B, int T, int NH, int NKV,
                              int hs) {
  int C = NH * hs; /* out's row stride */
  int group = NH / NKV;
  real scale = 1 / SQRT((real)hs);
  size_t per_thread = attention_scratch_elems(T, hs);
  int ntiles = (T + ATTENTION_TILE_Q - 1) / ATTENTION_TILE_Q;
  int npairs = (ntiles + 1) / 2;
  int nitems = B * NH * npairs;
  blas_serial_begin();
  #pragma omp parallel for schedule(static) num_threads(kernels_threads())
  for (int item = 0; item < nitems; item++) {
    int bh = item / npairs, pair = item % npairs;
    int b = bh / NH, h = bh % NH;
    const real* qh = q + (size_t)b * T * ldq + (size_t)h * hs;
    size_t kvoff = (size_t)b * T * ldkv + (size_t)(h / group) * hs;
    real* o = out + (size_t)b * T * C + (size_t)h * hs;
    real* work = scratch + (size_t)omp_get_thread_num() * per_thread;
    int tiles[2] = { pair, ntiles - 1 - pair };
    for (int n = 0; n < (tiles[0] == tiles[1] ? 1 : 2); n++) {
      int q0 = tiles[n] * ATTENTION_TILE_Q;
      int nq = T - q0 < ATTENTION_TILE_Q ? T - q0 : ATTENTION_TILE_Q;
      attention_forward_tile(o, C, lse + (size_t)bh * T, qh, ldq, k + kvoff, v + kvoff, ldkv,
                             work, q0, nq, hs, scale);
    }
  }
  blas_serial_end();
}

/* The [T, hs] views of one query head's q, dq and one K/V head's k, v, dk, dv (row strides
** ldq and ldkv), and of the query head's out and dout (row stride ldo): the operands of
** attention_backward_head. */
typedef struct {
  const real *q, *k, *v, *o, *dO;
  real *dq, *dk, *dv;
  int ldq, ldkv, ldo;
} AttentionHeadViews;

/* Backward of one (b, h), the FlashAttention-2 recurrence, on the views in a; dq, dk, dv
** accumulate. First D[t] = dO[t] . O[t] for every row (into work).
** Then for each key tile j (K_j^T and V_j^T formed once, into work) and each query tile i
** that holds a query >= the tile's first key:
**   S = scale Q_i K_j^T, P = exp(S - lse) under the causal mask, dV_j += P^T dO_i,
**   dP = dO_i V_j^T, dS = P * (dP - D_i), dQ_i += scale dS K_j, dK_j += scale dS^T Q_i.
** All products are GEMMs on blocks of at most a tile; the order of every sum is fixed. */
static void attention_backward_head(const AttentionHeadViews* a, const real* lse_head, real* work,
                                    int T, int hs, real scale) {
  const int ldq = a->ldq, ldkv = a->ldkv, ldo = a->ldo;
  const real *q = a->q, *k = a->k, *v = a->v, *o = a->o, *dO = a->dO;
  real *dq = a->dq, *dk = a->dk, *dv = a->dv;
  real* p = work;                                         /* [nq, nk] probabilities */
  real* ds = p + ATTENTION_TILE_Q * ATTENTION_TILE_K;     /* [nq, nk] dP, then dS */
  real* kt = ds + ATTENTION_TILE_Q * ATTENTION_TILE_K;    /* [hs, nk_tile] K_j^T */
  real* vt = kt + (size_t)hs * ATTENTION_TILE_K;          /* [hs, nk_tile] V_j^T */
  real* drow = vt + (size_t)hs * ATTENTION_TILE_K;        /* [T] rowsum(dO * O) */
  for (int t = 0; t < T; t++) drow[t] = row_dot(dO + (size_t)t * ldo, o + (size_t)t * ldo, hs);
  for (int k0 = 0; k0 < T; k0 += ATTENTION_TILE_K) {
    int nk_tile = T - k0 < ATTENTION_TILE_K ? T - k0 : ATTENTION_TILE_K;
    const real* kj = k + (size_t)k0 * ldkv;
    real* dkj = dk + (size_t)k0 * ldkv;
    real* dvj = dv + (size_t)k0 * ldkv;
    transpose_block(kt, kj, ldkv, nk_tile, hs);
    transpose_block(vt, v + (size_t)k0 * ldkv, ldkv, nk_tile, hs);
    /* query tiles ending at or before k0 see none of these keys: start at the one holding k0 */
    for (int q0 = k0 / ATTENTION_TILE_Q * ATTENTION_TILE_Q; q0 < T; q0 += ATTENTION_TILE_Q) {
      int nq = T - q0 < ATTENTION_TILE_Q ? T - q0 : ATTENTION_TILE_Q;
      /* keys past the tile's last query are masked for all its rows: left out (the first nk
      ** columns of K_j^T and V_j^T, row stride nk_tile) */
      int nk = q0 + nq - k0 < nk_tile ? q0 + nq - k0 : nk_tile;
      const real* qi = q + (size_t)q0 * ldq;
      const real* dOi = dO + (size_t)q0 * ldo;
      GEMM(CblasRowMajor, CblasNoTrans, CblasNoTrans, nq, nk, hs, scale, qi, ldq, kt, nk_tile, 0,
           p, nk);
      for (int r = 0; r < nq; r++) {
        real* row = p + (size_t)r * nk;
        real row_lse = lse_head[q0 + r];
        int nvalid = causal_valid_keys(q0 + r, k0, nk);
        for (int c = 0; c < nvalid; c++) row[c] = EXP(row[c] - row_lse);
        for (int c = nvalid; c < nk; c++) row[c] = 0;
      }
      GEMM(CblasRowMajor, CblasTrans, CblasNoTrans, nk, hs, nq, 1, p, nk, dOi, ldo, 1, dvj, ldkv);
      GEMM(CblasRowMajor, CblasNoTrans, CblasNoTrans, nq, nk, hs, 1, dOi, ldo, vt, nk_tile, 0, ds,
           nk);
      for (int r = 0; r < nq; r++) {
        const real* prow = p + (size_t)r * nk;
        real* dsrow = ds + (size_t)r * nk;
        real d = drow[q0 + r];
        for (int c = 0; c < nk; c++) dsrow[c] = prow[c] * (dsrow[c] - d);
      }
      GEMM(CblasRowMajor, CblasNoTrans, CblasNoTrans, nq, hs, nk, scale, ds, nk, kj, ldkv, 1,
           dq + (size_t)q0 * ldq, ldq);
      GEMM(CblasRowMajor, CblasTrans, CblasNoTrans, nk, hs, nq, scale, ds, nk, qi, ldq, 1, dkj,
           ldkv);
    }
  }
}

/* Backward of attention_forward, see KERNEL_LIST; dq, dk, dv accumulate. Parallel over (b, K/V
** head): each pair runs the backward of its NH / NKV query heads one after the other, in head
** order, on one thread, so it alone writes its K/V head's columns of dk and dv (summed over the
** group in that fixed order) and its query heads' columns of dq: there are no races and the
** result does not depend on the thread count. (All pairs cost the same, so the split is
** balanced whenever B*NKV is a multiple of the thread count; with NKV = NH this is GPT-2's
** split over (b, h).) */
static void attention_backward(real* dq, real* dk, real* dv, const real* dout, const real* q,
                               const real* k, const real* v, int ldq, int ldkv, const real* out,
                               const real* lse, real* scratch, int B, int T, int NH, int NKV,
                               int hs) {
  int C = NH * hs; /* the row stride of out and dout */
  int group = NH / NKV;
  real scale = 1 / SQRT((real)hs);
  size_t per_thread = attention_scratch_elems(T, hs);
  blas_serial_begin();
  #pragma omp parallel for schedule(static) num_threads(kernels_threads())
  for (int bkv = 0; bkv < B * NKV; bkv++) {
    int b = bkv / NKV, kvh = bkv % NKV;
    size_t kvoff = (size_t)b * T * ldkv + (size_t)kvh * hs;
    real* work = scratch + (size_t)omp_get_thread_num() * per_thread;
    for (int h = kvh * group; h < (kvh + 1) * group; h++) {
      size_t qoff = (size_t)b * T * ldq + (size_t)h * hs;
      size_t ooff = (size_t)b * T * C + (size_t)h * hs;
      AttentionHeadViews a = {
        .q = q + qoff, .k = k + kvoff, .v = v + kvoff, .o = out + ooff, .dO = dout + ooff,
        .dq = dq + qoff, .dk = dk + kvoff, .dv = dv + kvoff, .ldq = ldq, .ldkv = ldkv, .ldo = C,
      };
      attention_backward_head(&a, lse + ((size_t)b * NH + h) * T, work, T, hs, scale);
    }
  }
  blas_serial_end();
}

// ----------------------------------------------------------------------------
// GELU

#define GELU_SCALING ((real)0.7978845608028654) /* sqrt(2 / pi) */
#define GELU_CUBE ((real)0.044715)

/* Tanh-approximation GELU: out = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))). */
static void gelu_forward(real* restrict out, const real* restrict inp, size_t N) {
  #pragma omp parallel for simd schedule(static) num_threads(kernels_threads())
  for (size_t i = 0; i < N; i++) {
    real x = inp[i];
    real u = GELU_SCALING * (x + GELU_CUBE * x * x * x);
    out[i] = (real)0.5 * x * (1 + TANH(u));
  }
}

/* dinp = GELU'(x) * dout (overwritten: the MLP's gradient buffer needs no zeroing), with
** GELU'(x) = 0.5 (1 + tanh u) + 0.5 x sech^2(u) du/dx and sech^2 u computed as 1 - tanh^2 u
** (no cosh, which overflows for large |u|). */
static void gelu_backward(real* restrict dinp, const real* restrict inp, const real* restrict dout,
                          size_t N) {
  #pragma omp parallel for simd schedule(static) num_threads(kernels_threads())
  for (size_t i = 0; i < N; i++) {
    real x = inp[i];
    real u = GELU_SCALING * (x + GELU_CUBE * x * x * x);
    real th = TANH(u);
    real sech2 = 1 - th * th;
    real du = GELU_SCALING * (1 + 3 * GELU_CUBE * x * x);
    real grad = (real)0.5 * (1 + th) + (real)0.5 * x * sech2 * du;
    dinp[i] = grad * dout[i];
  }
}

/* GPT-2's fc linear then its GELU (KERNEL_LIST's matmul_gelu_forward): the two kernels one
** after the other, so the values are exactly theirs (the CUDA backend fuses them in cuBLASLt). */
static void matmul_gelu_forward(real* out, real* pre, const real* inp, int ldinp, const real* w,
                                const real* bias, int BT, int K, int OC, int accumulate) {
  matmul_forward(pre, inp, ldinp, w, bias, BT, K, OC, accumulate);
  gelu_forward(out, pre, (size_t)BT * OC);
}

#undef GELU_SCALING
#undef GELU_CUBE

// ----------------------------------------------------------------------------
// SwiGLU

/* SwiGLU's product: out = silu(gate) * up, silu(x) = x * sigmoid(x), sigmoid(x) = 1 / (1 +
** exp(-x)) (EXP: vectorisable in fp32; -x beyond fast_expf's clamp gives sigmoid 0 or 1 to
** within fp32's range, never a NaN). */
static void swiglu_forward(real* restrict out, const real* restrict gate, const real* restrict up,
                           size_t N) {
  #pragma omp parallel for simd schedule(static) num_threads(kernels_threads())
  for (size_t i = 0; i < N; i++) {
    real g = gate[i];
    real sig = 1 / (1 + EXP(-g));
    out[i] = g * sig * up[i];
  }
}

/* Backward of swiglu_forward (both OVERWRITTEN): dup = dout * silu(gate), dgate = dout * up *
** silu'(gate) with silu'(x) = sigmoid(x) (1 + x (1 - sigmoid(x))). */
static void swiglu_backward(real* restrict dgate, real* restrict dup, const real* restrict dout,
                            const real* restrict gate, const real* restrict up, size_t N) {
  #pragma omp parallel for simd schedule(static) num_threads(kernels_threads())
  for (size_t i = 0; i < N; i++) {
    real g = gate[i];
    real sig = 1 / (1 + EXP(-g));
    real d = dout[i];
    dup[i] = d * (g * sig);
    dgate[i] = d * up[i] * (sig * (1 + g * (1 - sig)));
  }
}

// ----------------------------------------------------------------------------
// rotary position embedding

/* Frequencies per chunk of a row: the row's cosines and sines are computed for ROPE_CHUNK
** pairs at a time (on the stack: kernels allocate nothing) and applied to every head. */
#define ROPE_CHUNK 64

/* Rotates every head of the B*T rows of x (stride ld) by the angle t * inv_freq[j] (rope_forward,
** sign = 1) or by its opposite (rope_backward, sign = -1: the sine negated, which is exact, so
** backward is exactly the transpose of forward's rotation). The angle is the product in real's
** precision as transformers computes it, its cosine and sine come from libm (cosf/sinf in fp32)
** once per (row, pair) for all heads. Each thread owns whole rows. */
static void rope_rotate(real* x, int ld, const real* inv_freq, int B, int T, int nh, int hs,
                        real sign) {
  int half = hs / 2;
  #pragma omp parallel for schedule(static) num_threads(kernels_threads())
  for (int row = 0; row < B * T; row++) {
    real pos = (real)(row % T);
    real* xr = x + (size_t)row * ld;
    real cs[ROPE_CHUNK], sn[ROPE_CHUNK];
    for (int j0 = 0; j0 < half; j0 += ROPE_CHUNK) {
      int nj = half - j0 < ROPE_CHUNK ? half - j0 : ROPE_CHUNK;
      for (int j = 0; j < nj; j++) {
        real a = pos * inv_freq[j0 + j];
        cs[j] = COS(a);
        sn[j] = sign * SIN(a);
      }
      for (int h = 0; h < nh; h++) {
        real* restrict x1 = xr + (size_t)h * hs + j0;
        real* restrict x2 = x1 + half;
        for (int j = 0; j < nj; j++) {
          real a1 = x1[j], a2 = x2[j];
          x1[j] = a1 * cs[j] - a2 * sn[j];
          x2[j] = a2 * cs[j] + a1 * sn[j];
        }
      }
    }
  }
}

/* Rotary position embedding in place, see KERNEL_LIST. */
static void rope_forward(real* x, int ld, const real* inv_freq, int B, int T, int nh, int hs) {
  rope_rotate(x, ld, inv_freq, B, T, nh, hs, 1);
}

/* Backward of rope_forward: the inverse rotation of dx, in place. */
static void rope_backward(real* dx, int ld, const real* inv_freq, int B, int T, int nh, int hs) {
  rope_rotate(dx, ld, inv_freq, B, T, nh, hs, -1);
}

#undef ROPE_CHUNK

// ----------------------------------------------------------------------------
// fused softmax cross-entropy

/* row[v] = exp(row[v] - maxv) for v < n, returning the sum of the new values accumulated in
** double (for long rows such as the vocabulary) in row_sum's fixed order (LANES interleaved
** partial sums): one pass instead of an exp pass and a sum pass. */
static inline double row_exp_sum(real* restrict row, real maxv, int n) {
  double acc[LANES] = {0};
  int i = 0;
  for (; i + LANES <= n; i += LANES)
    for (int k = 0; k < LANES; k++) {
      real e = EXP(row[i + k] - maxv);
      row[i + k] = e;
      acc[k] += (double)e;
    }
  for (int k = 0; i < n; i++, k++) {
    row[i] = EXP(row[i] - maxv);
    acc[k] += (double)row[i];
  }
  double s = 0;
  for (int k = 0; k < LANES; k++) s += acc[k];
  return s;
}

/* One position of crossentropy_forward_backward: returns -log softmax(row[0..V))[target]
** and overwrites row[0..Vp) with scale * (p - onehot(target)) (0 in the padding). The
** normaliser is summed in double so that the fp32 loss stays accurate for V ~ 50k. Three
** passes over the row (max; exp and sum; scale), the row (~200 KB) staying in cache. */
static real crossentropy_row(real* row, int target, int V, int Vp, double scale) {
  real maxv = row_max(row, V);
  real shifted_target = row[target] - maxv;
  double sum = row_exp_sum(row, maxv, V);
  real loss = (real)(log(sum) - (double)shifted_target);
  real norm = (real)(scale / sum);
  for (int v = 0; v < V; v++) row[v] *= norm;
  row[target] -= (real)scale;
  for (int v = V; v < Vp; v++) row[v] = 0;
  return loss;
}

/* Fused softmax cross-entropy over logits[BT, Vp] (first V columns real), see KERNEL_LIST.
** Positions are split among threads. */
static void crossentropy_forward_backward(real* logits, real* losses, const int* targets, int BT,
                                          int V, int Vp, double scale) {
  #pragma omp parallel for schedule(static) num_threads(kernels_threads())
  for (int i = 0; i < BT; i++) {
    real* row = logits + (size_t)i * Vp;
    if (targets[i] < 0) {
      losses[i] = 0;
      memset(row, 0, (size_t)Vp * sizeof(real));
    } else {
      losses[i] = crossentropy_row(row, targets[i], V, Vp, scale);
    }
  }
}

/* Sum of x[0..n) in double, one by one in index order (the loss of a step: a few thousand
** values, so one thread). */
static double sum_values(const real* x, size_t n) {
  double total = 0;
  for (size_t i = 0; i < n; i++) total += x[i];
  return total;
}

// ----------------------------------------------------------------------------
// gradient norm and optimizer

/* Sum of squares of g[0..n) in double. The range is cut into a fixed number of chunks
** (independent of the thread count), each summed with 8 interleaved accumulators, and the
** chunk sums are added in order: fast, and bit-identical for any number of threads. */
static double sum_squares(const real* g, size_t n) {
  enum { NCHUNK = 64, NACC = 8 };
  double partial[NCHUNK];
  #pragma omp parallel for schedule(static) num_threads(kernels_threads())
  for (int c = 0; c < NCHUNK; c++) {
    size_t lo = n * (size_t)c / NCHUNK, hi = n * (size_t)(c + 1) / NCHUNK;
    double acc[NACC] = {0};
    size_t i = lo;
    for (; i + NACC <= hi; i += NACC) {
      for (int j = 0; j < NACC; j++) acc[j] += (double)g[i + j] * (double)g[i + j];
    }
    for (; i < hi; i++) acc[0] += (double)g[i] * (double)g[i];
    double s = 0;
    for (int j = 0; j < NACC; j++) s += acc[j];
    partial[c] = s;
  }
  double total = 0;
  for (int c = 0; c < NCHUNK; c++) total += partial[c];
  return total;
}

/* The sums of squares of count arrays, added in order (see KERNEL_LIST). */
static double sum_squares_multi(const real* const* g, const size_t* n, int count) {
  double total = 0;
  for (int j = 0; j < count; j++) total += sum_squares(g[j], n[j]);
  return total;
}

/* AdamW step (PyTorch formulation, bias-corrected moments, decoupled weight decay) on n
** parameters; t is the 1-based step and grad_scale multiplies the gradient first (e.g.
** for gradient clipping). One fused pass: each element's w, g, m, v are read once and w, m,
** v written once (28 bytes per fp32 parameter, so the loop is bound by memory bandwidth once
** it runs in vectors). Everything that does not depend on the element is computed before
** the loop: the bias corrections (in double, as reciprocals), 1 - b1 and 1 - b2; per element
** there remain one sqrt and one division, both vector instructions. */
static void adamw_update(real* restrict w, const real* restrict g, real* restrict m,
                         real* restrict v, size_t n, float lr, float b1, float b2, float eps,
                         float wd, int t, float grad_scale) {
  const real inv_bc1 = (real)(1.0 / (1.0 - pow((double)b1, (double)t)));
  const real inv_bc2 = (real)(1.0 / (1.0 - pow((double)b2, (double)t)));
  const real rb1 = b1, rb2 = b2, rlr = lr, reps = eps, rwd = wd, gs = grad_scale;
  const real one_b1 = 1 - rb1, one_b2 = 1 - rb2;
  #pragma omp parallel for simd schedule(static) num_threads(kernels_threads())
  for (size_t i = 0; i < n; i++) {
    real gi = g[i] * gs;
    real mi = rb1 * m[i] + one_b1 * gi;
    real vi = rb2 * v[i] + one_b2 * gi * gi;
    m[i] = mi;
    v[i] = vi;
    real mhat = mi * inv_bc1;
    real vhat = vi * inv_bc2;
    w[i] -= rlr * (mhat / (SQRT(vhat) + reps) + rwd * w[i]);
  }
}

/* adamw_update on count arrays in order (see KERNEL_LIST). */
static void adamw_update_multi(real* const* w, const real* const* g, real* const* m,
                               real* const* v, const size_t* n, const float* wd, int count,
                               float lr, float b1, float b2, float eps, int t, float grad_scale) {
  for (int j = 0; j < count; j++)
    adamw_update(w[j], g[j], m[j], v[j], n[j], lr, b1, b2, eps, wd[j], t, grad_scale);
}

/* argmax[i] = the first index of the largest of logits[i, 0..V); rows have stride Vp. Each
** thread owns whole rows. */
static void logits_argmax(const real* logits, int BT, int V, int Vp, int* argmax) {
  #pragma omp parallel for schedule(static) num_threads(kernels_threads())
  for (int i = 0; i < BT; i++) {
    const real* row = logits + (size_t)i * Vp;
    int best = 0;
    for (int v = 1; v < V; v++) if (row[v] > row[best]) best = v;
    argmax[i] = best;
  }
}

/* dst = src (one type on the CPU: the compute copy of master weights is a copy). */
static void compute_copy(real* dst, const real* src, size_t n) {
  #pragma omp parallel for simd schedule(static) num_threads(kernels_threads())
  for (size_t i = 0; i < n; i++) dst[i] = src[i];
}

/* dst[0..n) += src[0..n) (the gradient reductions add a received part into a shard). */
static void accumulate(real* dst, const real* src, size_t n) {
  #pragma omp parallel for schedule(static) num_threads(kernels_threads())
  for (size_t i = 0; i < n; i++) dst[i] += src[i];
}

// ----------------------------------------------------------------------------
// the table this compile exports

/* One member per entry of KERNEL_LIST, each set to the static function of the same name: a
** kernel of the list without a definition here is an undeclared name, and a definition whose
** signature differs from the list's an incompatible pointer, which the pragma makes an error
** (not only a warning). A kernel defined here but not in the list is an unused function
** (-Wall warns). */
#pragma GCC diagnostic error "-Wincompatible-pointer-types"
#define CPU_TABLE_ENTRY(ret, name, params) .name = name,
#ifdef OSDP_REAL_DOUBLE
const Kernels_f64 cpu_kernels_f64 = {KERNEL_LIST(CPU_TABLE_ENTRY, double, double, double, double)};
#else
const Kernels_f32 cpu_kernels_f32 = {KERNEL_LIST(CPU_TABLE_ENTRY, float, float, float, float)};
#endif
#undef CPU_TABLE_ENTRY
