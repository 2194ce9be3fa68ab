/*
** cpu_bf16.c: the CPU's bf16 kernel table, cpu_kernels_bf16 (`--precision bf16` on the CPU):
** every kernel of KERNEL_LIST (kernel_list.h) with bf16 activations and weight copies (act = wt
** = osdp_bf16) and fp32 gradients, optimizer state and statistics (grad = stat = float).
**
** The design, in four rules:
**   - bf16 is STORAGE only. A kernel widens every bf16 value to fp32 as it reads it (exact: the
**     bf16 bits are the top half of the float), computes in fp32 (or double, where the fp32
**     kernel does), and rounds a bf16 result ONCE, to nearest even, as it stores it
**     (bf16_load / bf16_store below). A value that is added to (+=: accumulate, LayerNorm's
**     dinp, attention's dq, dk, dv) is read, the sum formed in fp32 and stored once: never a
**     sum kept in bf16 along the way.
**   - the arithmetic is the fp32 kernels' (cpu_kernels_real.c), the same expressions in the
**     same order on the widened values (the same branch-free exp and tanh, the same 16-lane
**     reductions), so a bf16 result is the fp32 kernel's result on the same inputs rounded to
**     bf16, bit for bit wherever the order of operations is the same (all kernels but the
**     products and attention, whose tiles may be smaller here: see the attention section).
**   - matrix products run in oneDNN (cpu_dnnl.h): bf16 operands, fp32 accumulation, one
**     rounding on store, on AVX512_BF16 / AMX; so the CPU backend installs the table only where
**     the CPU has those (cpu_backend.c; tests may emulate the products, cpu_dnnl.h).
**     Attention's small per-tile products run in OpenBLAS's sgemm on fp32 tiles widened from
**     bf16, as the fp32 kernel's do.
**   - the kernels that only see fp32 arrays (sum_values, sum_squares[_multi],
**     adamw_update[_multi]) ARE the fp32 table's: thin functions calling cpu_kernels_f32, so the
**     optimizer and the gradient norm are the same arithmetic in both precisions by
**     construction.
** As in the fp32 file: every kernel is a static function under its own name and only the table
** is exported (at the end); every OpenMP loop is schedule(static) with kernels_threads()
** threads and each thread owns what it writes, so results are deterministic (and, but for the
** matrix products, independent of the thread count); loops are written so that GCC vectorises
** them (conversions are shifts and integer selects; no `simd` clause is needed, and clang, which
** does not vectorise the bf16 loops, would warn about one); kernels allocate nothing (attention's
** tiles live in the caller's scratch and, past it, in at most 64 KB of the thread's stack; the
** other stack buffers are as small as the fp32 kernels').
*/
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <string.h>
#include <cblas.h>

#include "kernels/cpu_bf16.h"
#include "kernels/cpu_dnnl.h"
#include "kernels/cpu_fastmath.h"
#include "kernels/cpu_kernels.h"

// ----------------------------------------------------------------------------
// bf16 <-> fp32, and fp32 math (the fp32 kernels' own)

/* The float value of a bf16 (exact: its bits are the float's top 16). A shift, so loops of
** loads vectorise. */
static inline float bf16_load(osdp_bf16 h) { return bits_float((uint32_t)h.bits << 16); }

/* f rounded to bf16, to nearest even, as osdp_bf16_from_float (precision.c) rounds: adding
** 0x7fff plus the lowest kept bit carries into the kept half exactly when the dropped half is
** above one half, or equal to it with the kept half odd (values past bf16's largest round to
** inf, as they should). A NaN keeps its sign and payload's top bits and is made quiet (the
** carry could otherwise turn it into an inf). Integer operations and a select only, so the
** loops that store vectorise. */
static inline osdp_bf16 bf16_store(float f) {
  uint32_t u = float_bits(f);
  uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  uint32_t quiet_nan = (u >> 16) | 0x0040u;
  osdp_bf16 h;
  h.bits = (uint16_t)((u & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded);
  return h;
}


// ----------------------------------------------------------------------------
// block sizes (the fp32 kernels')

/* Columns per block when a thread owns a block of columns and sums over rows in order. */
#define KCOLBLOCK 64
/* Lanes of the fixed-order row reductions: 16 interleaved partial sums, as in the fp32 file, so
** that the sums are the same sums in the same order. */
#define LANES 16

// ----------------------------------------------------------------------------
// fixed-order vectorisable reductions over one bf16 row (the fp32 file's, reading bf16)

/* sum of x[0..n). */
static inline float row_sum(const osdp_bf16* x, int n) {
  float acc[LANES] = {0};
  int i = 0;
  for (; i + LANES <= n; i += LANES)
    for (int k = 0; k < LANES; k++) acc[k] += bf16_load(x[i + k]);
  for (int k = 0; i < n; i++, k++) acc[k] += bf16_load(x[i]);
  float s = 0;
  for (int k = 0; k < LANES; k++) s += acc[k];
  return s;
}

/* sum of (x[i] - m)^2 for i < n: LayerNorm's variance numerator, the fp32 kernel's
** row_dot(o, o) on its centred row o = x - m (which it keeps in out; here out is bf16, so the
** difference is formed again rather than stored). */
static inline float row_sqdev(const osdp_bf16* x, float m, int n) {
  float acc[LANES] = {0};
  int i = 0;
  for (; i + LANES <= n; i += LANES)
    for (int k = 0; k < LANES; k++) {
      float o = bf16_load(x[i + k]) - m;
      acc[k] += o * o;
    }
  for (int k = 0; i < n; i++, k++) {
    float o = bf16_load(x[i]) - m;
    acc[k] += o * o;
  }
  float s = 0;
  for (int k = 0; k < LANES; k++) s += acc[k];
  return s;
}

/* sum of x[i] * y[i] for i < n. */
static inline float row_dot(const osdp_bf16* x, const osdp_bf16* y, int n) {
  float acc[LANES] = {0};
  int i = 0;
  for (; i + LANES <= n; i += LANES)
    for (int k = 0; k < LANES; k++) acc[k] += bf16_load(x[i + k]) * bf16_load(y[i + k]);
  for (int k = 0; i < n; i++, k++) acc[k] += bf16_load(x[i]) * bf16_load(y[i]);
  float s = 0;
  for (int k = 0; k < LANES; k++) s += acc[k];
  return s;
}

/* sum of x[i] * y[i] * (z[i] - zc) for i < n (LayerNorm backward's sum(w*dout*(x-mean))). */
static inline float row_dot3_centred(const osdp_bf16* x, const osdp_bf16* y, const osdp_bf16* z,
                                     float zc, int n) {
  float acc[LANES] = {0};
  int i = 0;
  for (; i + LANES <= n; i += LANES)
    for (int k = 0; k < LANES; k++)
      acc[k] += bf16_load(x[i + k]) * bf16_load(y[i + k]) * (bf16_load(z[i + k]) - zc);
  for (int k = 0; i < n; i++, k++)
    acc[k] += bf16_load(x[i]) * bf16_load(y[i]) * (bf16_load(z[i]) - zc);
  float s = 0;
  for (int k = 0; k < LANES; k++) s += acc[k];
  return s;
}

/* sum of x[i]^2 for i < n in double, in row_sum's order (RMSNorm's statistic). */
static inline double row_sumsq_double(const osdp_bf16* x, int n) {
  double acc[LANES] = {0};
  int i = 0;
  for (; i + LANES <= n; i += LANES)
    for (int k = 0; k < LANES; k++) {
      double v = bf16_load(x[i + k]);
      acc[k] += v * v;
    }
  for (int k = 0; i < n; i++, k++) {
    double v = bf16_load(x[i]);
    acc[k] += v * v;
  }
  double s = 0;
  for (int k = 0; k < LANES; k++) s += acc[k];
  return s;
}

/* max of x[0..n), n >= 1, over integer order keys of the widened values (negative numbers get
** their magnitude bits flipped), which the compiler vectorises where a float max it may not:
** exact, as the fp32 file's row_max; a (positive) NaN sorts above +inf and so comes out. */
static inline float row_max(const osdp_bf16* x, int n) {
  int32_t best = INT32_MIN;
  for (int i = 0; i < n; i++) {
    int32_t bits = (int32_t)((uint32_t)x[i].bits << 16);
    int32_t key = bits >= 0 ? bits : bits ^ INT32_MAX;
    best = key > best ? key : best;
  }
  int32_t bits = best >= 0 ? best : best ^ INT32_MAX;
  return bits_float((uint32_t)bits);
}

// ----------------------------------------------------------------------------
// positional and token embeddings

/* out[b,t,:] = wpe[t,:]: copies the first T rows of the positional table into each of the B
** sequences (bf16 to bf16: exact, no rounding). */
static void embed_pos_forward(osdp_bf16* out, const osdp_bf16* wpe, int B, int T, int C) {
  #pragma omp parallel for schedule(static) num_threads(kernels_threads())
  for (int bt = 0; bt < B * T; bt++) {
    memcpy(out + (size_t)bt * C, wpe + (size_t)(bt % T) * C, (size_t)C * sizeof(osdp_bf16));
  }
}

/* dwpe[t,:] (fp32; += if accumulate, else =) sum_b dout[b,t,:] (bf16). Each thread owns whole
** rows t of dwpe and adds the B sequences in order b = 0, 1, ... (overwriting: starting from
** b = 0's widened values), as the fp32 kernel. */
static void embed_pos_backward(float* dwpe, const osdp_bf16* dout, int B, int T, int C,
                               int accumulate) {
  #pragma omp parallel for schedule(static) num_threads(kernels_threads())
  for (int t = 0; t < T; t++) {
    float* restrict dw = dwpe + (size_t)t * C;
    if (!accumulate) {
      const osdp_bf16* restrict d = dout + (size_t)t * C;
      for (int c = 0; c < C; c++) dw[c] = bf16_load(d[c]);
    }
    for (int b = accumulate ? 0 : 1; b < B; b++) {
      const osdp_bf16* restrict d = dout + ((size_t)b * T + t) * C;
      for (int c = 0; c < C; c++) dw[c] += bf16_load(d[c]);
    }
  }
}

/* out[i*ldo + r] += wrows[r*Vp + tok[i]] (bf16 += bf16: the sum in fp32, rounded once): adds
** the embedding of token tok[i], restricted to the nrows rows of the [C, Vp] table held in
** wrows, to position i. Parallel over positions, each thread owns its positions' outputs. */
static void embed_tok_forward(osdp_bf16* out, int ldo, const int* tok, int BT,
                              const osdp_bf16* wrows, int nrows, int Vp) {
  #pragma omp parallel for schedule(static) num_threads(kernels_threads())
  for (int i = 0; i < BT; i++) {
    osdp_bf16* o = out + (size_t)i * ldo;
    const osdp_bf16* w = wrows + tok[i];
    for (int r = 0; r < nrows; r++)
      o[r] = bf16_store(bf16_load(o[r]) + bf16_load(w[(size_t)r * Vp]));
  }
}

/* dwrows[r*Vp + tok[i]] (fp32) += dout[i*ldo + r] (bf16); without accumulate the nrows x Vp
** entries are zeroed first. Tokens repeat, so each thread owns a block of rows r (and zeroes
** them itself) and walks the positions in order, as the fp32 kernel: deterministic sums. */
static void embed_tok_backward(float* dwrows, const osdp_bf16* dout, int ldo, const int* tok,
                               int BT, int nrows, int Vp, int accumulate) {
  int nblocks = (nrows + KCOLBLOCK - 1) / KCOLBLOCK;
  #pragma omp parallel for schedule(static) num_threads(kernels_threads())
  for (int blk = 0; blk < nblocks; blk++) {
    int r0 = blk * KCOLBLOCK;
    int r1 = r0 + KCOLBLOCK < nrows ? r0 + KCOLBLOCK : nrows;
    if (!accumulate) memset(dwrows + (size_t)r0 * Vp, 0, (size_t)(r1 - r0) * Vp * sizeof(float));
    for (int i = 0; i < BT; i++) {
      const osdp_bf16* d = dout + (size_t)i * ldo;
      float* dw = dwrows + tok[i];
      for (int r = r0; r < r1; r++) dw[(size_t)r * Vp] += bf16_load(d[r]);
    }
  }
}

// ----------------------------------------------------------------------------
// matmul (linear layer), weights stored [in, out]: the products in oneDNN

/* dst[c] (fp32; += if accumulate, else =) column sums of src[rows, ncols] (bf16, row stride
** ncols), in fp32. Each thread owns a block of columns and adds the rows in order, so the sum
** is deterministic and the fp32 kernel's colsum on the widened values (overwriting starts from
** row 0's values). */
static void colsum(float* dst, const osdp_bf16* src, int rows, int ncols, int accumulate) {
  int nblocks = (ncols + KCOLBLOCK - 1) / KCOLBLOCK;
  #pragma omp parallel for schedule(static) num_threads(kernels_threads())
  for (int blk = 0; blk < nblocks; blk++) {
    int c0 = blk * KCOLBLOCK;
    int c1 = c0 + KCOLBLOCK < ncols ? c0 + KCOLBLOCK : ncols;
    int first = 0; /* the first row added */
    if (!accumulate) {
      for (int c = c0; c < c1; c++) dst[c] = rows > 0 ? bf16_load(src[c]) : 0.0f;
      first = 1;
    }
    for (int i = first; i < rows; i++) {
      const osdp_bf16* restrict s = src + (size_t)i * ncols;
      for (int c = c0; c < c1; c++) dst[c] += bf16_load(s[c]);
    }
  }
}

/* out[BT, OC] = (or += when accumulate) inp[BT, K] (row stride ldinp) @ w[K, OC] + bias: one
** oneDNN product, bf16 operands, fp32 accumulation (the bias and, when accumulating, the old
** out added in fp32), rounded once as it is stored. */
static void matmul_forward(osdp_bf16* out, const osdp_bf16* inp, int ldinp, const osdp_bf16* w,
                           const osdp_bf16* bias, int BT, int K, int OC, int accumulate) {
  dnnl_matmul_bf16_forward(out, inp, ldinp, w, bias, BT, K, OC, accumulate);
}

/* Backward of matmul_forward:
**   dinp[BT, K]  = dout[BT, OC] @ w^T    (bf16, overwritten; skipped when dinp == NULL): oneDNN
**   dw[K, OC]   += inp^T @ dout          (fp32, = when !accumulate): oneDNN, fp32 accumulation
**   dbias[OC]   += column sums of dout   (fp32, = when !accumulate; skipped when NULL): colsum
** The bias gradient is ours rather than oneDNN's so that it is the fp32 kernel's sum, in its
** order. */
static void matmul_backward(osdp_bf16* dinp, float* dw, float* dbias, const osdp_bf16* dout,
                            const osdp_bf16* inp, int ldinp, const osdp_bf16* w, int BT, int K,
                            int OC, int accumulate) {
  if (dinp != NULL) dnnl_matmul_bf16_dinp(dinp, ldinp, dout, w, BT, K, OC);
  dnnl_matmul_bf16_dw(dw, inp, ldinp, dout, BT, K, OC, accumulate);
  if (dbias != NULL) colsum(dbias, dout, BT, OC, accumulate);
}

// ----------------------------------------------------------------------------
// LayerNorm

/* LayerNorm of each of the BT rows of inp[BT, C]: out = (x - mean) * rstd * w + b with rstd =
** 1 / sqrt(var + 1e-5) (biased variance), in fp32 as the fp32 kernel (whose centred row, kept
** in its fp32 out, is formed again here: out is bf16 and gets only the final value, rounded
** once). Saves mean and rstd (fp32) for the backward. Each thread owns whole rows. */
static void layernorm_forward(osdp_bf16* out, float* mean, float* rstd, const osdp_bf16* inp,
                              const osdp_bf16* w, const osdp_bf16* b, int BT, int C) {
  const float eps = 1e-5f;
  #pragma omp parallel for schedule(static) num_threads(kernels_threads())
  for (int i = 0; i < BT; i++) {
    const osdp_bf16* restrict x = inp + (size_t)i * C;
    osdp_bf16* restrict o = out + (size_t)i * C;
    float m = row_sum(x, C) / C;
    float var = row_sqdev(x, m, C) / C;
    float s = 1 / sqrtf(var + eps);
    for (int c = 0; c < C; c++)
      o[c] = bf16_store((bf16_load(x[c]) - m) * s * bf16_load(w[c]) + bf16_load(b[c]));
    mean[i] = m;
    rstd[i] = s;
  }
}

/* Gradient of the input of LayerNorm, row by row (as in llm.c):
**   dinp += (w*dout - mean(w*dout) - norm * mean(w*dout*norm)) * rstd,
** with norm = (x - mean) * rstd; the old bf16 dinp widened, the sum rounded once. Each thread
** owns whole rows. */
static void layernorm_backward_input(osdp_bf16* dinp, const osdp_bf16* dout,
                                     const osdp_bf16* inp, const osdp_bf16* w, const float* mean,
                                     const float* rstd, int BT, int C) {
  #pragma omp parallel for schedule(static) num_threads(kernels_threads())
  for (int i = 0; i < BT; i++) {
    const osdp_bf16* restrict x = inp + (size_t)i * C;
    const osdp_bf16* restrict d = dout + (size_t)i * C;
    float m = mean[i], s = rstd[i];
    float dnorm_mean = row_dot(w, d, C) / C;                          /* mean(w*dout) */
    float dnorm_norm_mean = row_dot3_centred(w, d, x, m, C) * s / C;  /* mean(w*dout*norm) */
    osdp_bf16* restrict dx = dinp + (size_t)i * C;
    for (int c = 0; c < C; c++) {
      float norm = (bf16_load(x[c]) - m) * s;
      float g = (bf16_load(w[c]) * bf16_load(d[c]) - dnorm_mean - norm * dnorm_norm_mean) * s;
      dx[c] = bf16_store(bf16_load(dx[c]) + g);
    }
  }
}

/* Gradients of the LayerNorm weight and bias (fp32): dw += sum_i norm_i * dout_i, db += sum_i
** dout_i (from 0 without accumulate). Each thread owns a block of columns and adds the rows in
** order, as the fp32 kernel. */
static void layernorm_backward_params(float* restrict dw, float* restrict db,
                                      const osdp_bf16* dout, const osdp_bf16* inp,
                                      const float* mean, const float* rstd, int BT, int C,
                                      int accumulate) {
  int nblocks = (C + KCOLBLOCK - 1) / KCOLBLOCK;
  #pragma omp parallel for schedule(static) num_threads(kernels_threads())
  for (int blk = 0; blk < nblocks; blk++) {
    int c0 = blk * KCOLBLOCK;
    int c1 = c0 + KCOLBLOCK < C ? c0 + KCOLBLOCK : C;
    if (!accumulate) {
      memset(dw + c0, 0, (size_t)(c1 - c0) * sizeof(float));
      memset(db + c0, 0, (size_t)(c1 - c0) * sizeof(float));
    }
    for (int i = 0; i < BT; i++) {
      const osdp_bf16* x = inp + (size_t)i * C;
      const osdp_bf16* d = dout + (size_t)i * C;
      float m = mean[i], s = rstd[i];
      for (int c = c0; c < c1; c++) {
        float dc = bf16_load(d[c]);
        dw[c] += (bf16_load(x[c]) - m) * s * dc;
        db[c] += dc;
      }
    }
  }
}

/* Backward of layernorm_forward: accumulates dinp; dw and db as accumulate says. */
static void layernorm_backward(osdp_bf16* dinp, float* dw, float* db, const osdp_bf16* dout,
                               const osdp_bf16* inp, const osdp_bf16* w, const float* mean,
                               const float* rstd, int BT, int C, int accumulate) {
  layernorm_backward_input(dinp, dout, inp, w, mean, rstd, BT, C);
  layernorm_backward_params(dw, db, dout, inp, mean, rstd, BT, C, accumulate);
}

// ----------------------------------------------------------------------------
// RMSNorm

/* RMSNorm of each of the BT rows of inp[BT, C]: out = x * rstd * w with rstd = 1 / sqrt(
** mean(x^2) + eps), the statistic in double per row as the fp32 kernel; saves rstd (fp32).
** Each thread owns whole rows. */
static void rmsnorm_forward(osdp_bf16* out, float* rstd, const osdp_bf16* inp, const osdp_bf16* w,
                            int BT, int C, double eps) {
  #pragma omp parallel for schedule(static) num_threads(kernels_threads())
  for (int i = 0; i < BT; i++) {
    const osdp_bf16* restrict x = inp + (size_t)i * C;
    osdp_bf16* restrict o = out + (size_t)i * C;
    float s = (float)(1.0 / sqrt(row_sumsq_double(x, C) / C + eps));
    for (int c = 0; c < C; c++) o[c] = bf16_store(bf16_load(x[c]) * s * bf16_load(w[c]));
    rstd[i] = s;
  }
}

/* Gradient of the input of RMSNorm, row by row: with norm = x * rstd,
**   dinp += (w*dout - norm * mean(w*dout*norm)) * rstd
** (ACCUMULATES: the old bf16 value widened, the sum rounded once). Each thread owns whole
** rows. */
static void rmsnorm_backward_input(osdp_bf16* dinp, const osdp_bf16* dout, const osdp_bf16* inp,
                                   const osdp_bf16* w, const float* rstd, int BT, int C) {
  #pragma omp parallel for schedule(static) num_threads(kernels_threads())
  for (int i = 0; i < BT; i++) {
    const osdp_bf16* restrict x = inp + (size_t)i * C;
    const osdp_bf16* restrict d = dout + (size_t)i * C;
    float s = rstd[i];
    /* mean(w*dout*norm); row_dot3_centred with centre 0 is sum(w*dout*x) */
    float dnorm_norm_mean = row_dot3_centred(w, d, x, 0, C) * s / C;
    osdp_bf16* restrict dx = dinp + (size_t)i * C;
    for (int c = 0; c < C; c++) {
      float g = (bf16_load(w[c]) * bf16_load(d[c]) - bf16_load(x[c]) * s * dnorm_norm_mean) * s;
      dx[c] = bf16_store(bf16_load(dx[c]) + g);
    }
  }
}

/* Gradient of the RMSNorm weight (fp32): dw += sum_i x_i * rstd_i * dout_i (= when
** !accumulate). Each thread owns a block of columns and adds the rows in order. */
static void rmsnorm_backward_weight(float* restrict dw, const osdp_bf16* dout,
                                    const osdp_bf16* inp, const float* rstd, int BT, int C,
                                    int accumulate) {
  int nblocks = (C + KCOLBLOCK - 1) / KCOLBLOCK;
  #pragma omp parallel for schedule(static) num_threads(kernels_threads())
  for (int blk = 0; blk < nblocks; blk++) {
    int c0 = blk * KCOLBLOCK;
    int c1 = c0 + KCOLBLOCK < C ? c0 + KCOLBLOCK : C;
    if (!accumulate) memset(dw + c0, 0, (size_t)(c1 - c0) * sizeof(float));
    for (int i = 0; i < BT; i++) {
      const osdp_bf16* x = inp + (size_t)i * C;
      const osdp_bf16* d = dout + (size_t)i * C;
      float s = rstd[i];
      for (int c = c0; c < c1; c++) dw[c] += bf16_load(x[c]) * s * bf16_load(d[c]);
    }
  }
}

/* Backward of rmsnorm_forward: accumulates dinp; dw as accumulate says. */
static void rmsnorm_backward(osdp_bf16* dinp, float* dw, const osdp_bf16* dout,
                             const osdp_bf16* inp, const osdp_bf16* w, const float* rstd, int BT,
                             int C, int accumulate) {
  rmsnorm_backward_input(dinp, dout, inp, w, rstd, BT, C);
  rmsnorm_backward_weight(dw, dout, inp, rstd, BT, C, accumulate);
}

// ----------------------------------------------------------------------------
// causal self-attention, FlashAttention-2 style, on fp32 tiles widened from bf16
//
// The fp32 kernel's algorithm (cpu_kernels_real.c: read its comments first), with two changes
// that bf16 storage forces:
//   1. The tiles are fp32 and every bf16 operand is widened as it is copied into one:
//      OpenBLAS's sgemm multiplies fp32 only. The fp32 kernel reads Q, K, V, dO straight from
//      memory in most of its products; here each needs an fp32 copy, so a work item needs more
//      tile memory than the fp32 kernel's scratch, attention_scratch_elems(T, hs) floats per
//      thread (KERNEL_LIST gives the scratch in stat's precision: fp32 here). The tiles go into
//      that scratch first and the rest into a bounded area on the thread's stack
//      (ATTENTION_STACK_FLOATS, 64 KB): the tiles are square, of side `t`, the largest multiple
//      of 8 up to the fp32 kernel's 64 whose blocks fit in the two (bf16_attention_tile). At
//      hs <= 64 that is the fp32 kernel's 64 x 64 (forward and backward); at hs = 128, 64
//      forward and 40 backward (for T < 4096). The order of the work is the fp32 kernel's
//      with that tile side: results match it to fp32 rounding (the summation order of the
//      online softmax and of the gradients over tiles), far below bf16's.
//   2. The backward's gradients are sums over tiles: dq over key tiles, dk and dv over query
//      tiles (and over the query heads that share a K/V head). The fp32 kernel adds each
//      tile's part into dq, dk, dv in memory; in bf16 that would round once per tile. Instead
//      the backward makes two passes, each keeping one gradient's running sum in an fp32 tile
//      and storing it once: pass 1 (per key tile: dK_j, dV_j summed over the group's query
//      heads and the query tiles, in the fp32 kernel's order) and pass 2 (per query tile: dQ_i
//      summed over the key tiles, in order). Each pass recomputes the probabilities P and dS =
//      P * (dP - D) of its pairs of tiles, so the backward does 7 tile products per pair
//      instead of 5 (40% more attention-backward arithmetic; measured on one thread at T =
//      1024: 1.6x the fp32 kernel's time at hs = 64, 1.8x at hs = 128, where the tiles are
//      smaller): the price of rounding every gradient exactly once. The
//      old value of dq, dk, dv, which attention ACCUMULATES into, is the first term of each
//      fp32 sum.
// The forward has no sums across work items: each query tile's output is normalised and rounded
// once at its end, and lse stored in fp32.

/* OpenBLAS 0.3.21 (OpenMP build) runs slowly when GEMM is called from several threads of an
** OpenMP region while its own thread count is > 1 (see cpu_kernels_real.c): the attention
** kernels switch it to 1 thread for their region and give back kernels_threads() after. */
static void blas_serial_begin(void) { openblas_set_num_threads(1); }
static void blas_serial_end(void) { openblas_set_num_threads(kernels_threads()); }

/* Floats of tiles a work item may keep on its thread's stack when the scratch is full: 64 KB,
** the bound of the per-row stack buffers kernels may use (the scratch itself is accounted in
** the step's memory; this is not, as OpenBLAS's own buffers are not). */
#define ATTENTION_STACK_FLOATS 16384

/* The most tile blocks of a work item (attention_block_sizes). */
#define ATTENTION_MAX_BLOCKS 9

/* The fp32 kernel's tiles are at least 48 x 48: its scratch then always holds all the bf16
** blocks of 16 x 16 tiles (backward: 6 * 16 hs + 2 * 16^2 + 16 = 96 hs + 528 <= 2 * 48^2 + 2 *
** 48 hs floats), the smallest bf16_attention_tile returns, even without the stack area. */
#if ATTENTION_TILE_Q < 48 || ATTENTION_TILE_K < 48
#error "cpu_bf16.c's attention needs ATTENTION_TILE_Q and ATTENTION_TILE_K >= 48"
#endif

/* The sizes (floats) of the tile blocks of one work item, for tiles of side t, largest first;
** returns their count. Forward (backward = 0): Q_i^T [hs, t], the output accumulator [t, hs],
** K_j then V_j [t, hs]; S^T [t, t]; the four per-query values [4t] (running max and sum, new
** max, tile sum). Backward, either pass: six [t, hs] blocks (K_j^T, V_j^T, then pass 1: dK_j,
** dV_j, Q_i, dO_i; pass 2: K_j, Q_i, dO_i, dQ_i); P and dS [t, t]; D [t]. */
static int attention_block_sizes(int t, int hs, int backward, size_t* sizes) {
  size_t th = (size_t)t * hs, tt = (size_t)t * t;
  int n = 0;
  for (int i = 0; i < (backward ? 6 : 3); i++) sizes[n++] = th;
  for (int i = 0; i < (backward ? 2 : 1); i++) sizes[n++] = tt;
  sizes[n++] = (backward ? 1 : 4) * (size_t)t;
  return n;
}

/* Places the blocks of tiles of side t, first fit in order, into the thread's scratch (avail
** floats at work) and then its stack area (ATTENTION_STACK_FLOATS floats at stack), setting
** block[i] (unless block is NULL: only whether they fit is asked). Returns 0 when they do not
** fit. */
static int attention_place(float** block, float* work, size_t avail, float* stack, int t, int hs,
                           int backward) {
  size_t sizes[ATTENTION_MAX_BLOCKS], used[2] = {0, 0};
  const size_t cap[2] = {avail, ATTENTION_STACK_FLOATS};
  float* base[2] = {work, stack};
  int n = attention_block_sizes(t, hs, backward, sizes);
  for (int i = 0; i < n; i++) {
    int r = sizes[i] <= cap[0] - used[0] ? 0 : sizes[i] <= cap[1] - used[1] ? 1 : -1;
    if (r < 0) return 0;
    if (block) block[i] = base[r] + used[r];
    used[r] += sizes[i];
  }
  return 1;
}

/* The side of the square tiles of bf16 attention (forward or backward) for sequence length T and
** head size hs: the largest multiple of 8, at most the fp32 kernel's tiles, whose blocks fit in
** the per-thread scratch attention_scratch_elems(T, hs) and the stack area (attention_place).
** It depends on T and hs only, so results do not depend on the thread count. (A larger scratch
** gives larger tiles, up to the fp32 kernel's, with no stack.) */
static int bf16_attention_tile(int T, int hs, int backward) {
  size_t avail = attention_scratch_elems(T, hs);
  int tmax = (ATTENTION_TILE_Q < ATTENTION_TILE_K ? ATTENTION_TILE_Q : ATTENTION_TILE_K) / 8 * 8;
  for (int t = tmax; t > 16; t -= 8)
    if (attention_place(NULL, NULL, avail, NULL, t, hs, backward)) return t;
  return 16; /* fits in the scratch alone: see the #error above */
}

/* dst[r*cols + c] = src[r*ld + c] widened, for r < rows, c < cols: a [rows, cols] block of bf16
** rows into a contiguous fp32 tile. */
static void widen_rows(float* restrict dst, const osdp_bf16* restrict src, int ld, int rows,
                       int cols) {
  for (int r = 0; r < rows; r++) {
    const osdp_bf16* restrict s = src + (size_t)r * ld;
    float* restrict d = dst + (size_t)r * cols;
    for (int c = 0; c < cols; c++) d[c] = bf16_load(s[c]);
  }
}

/* dst[c*rows + r] = src[r*ld + c] widened: the transpose of a [rows, cols] bf16 block into a
** [cols, rows] fp32 tile (the fp32 kernel's transpose_block, which makes its Q K^T and dO V^T
** products ones with OpenBLAS's small-matrix kernels). */
static void widen_transpose(float* restrict dst, const osdp_bf16* restrict src, int ld, int rows,
                            int cols) {
  for (int r = 0; r < rows; r++) {
    const osdp_bf16* restrict s = src + (size_t)r * ld;
    for (int c = 0; c < cols; c++) dst[(size_t)c * rows + r] = bf16_load(s[c]);
  }
}

/* dst[r*ld + c] = src[r*cols + c] rounded to bf16 (once, to nearest even): an fp32 tile's final
** values stored into bf16 rows. */
static void store_rows(osdp_bf16* restrict dst, int ld, const float* restrict src, int rows,
                       int cols) {
  for (int r = 0; r < rows; r++) {
    const float* restrict s = src + (size_t)r * cols;
    osdp_bf16* restrict d = dst + (size_t)r * ld;
    for (int c = 0; c < cols; c++) d[c] = bf16_store(s[c]);
  }
}

/* Forward of one query tile (queries q0 .. q0+nq-1) of one (b, h), tiles of side t: the fp32
** kernel's attention_forward_tile with its operands widened into fp32 tiles (blk: the blocks
** attention_place made). Q_i^T is widened once; per key tile (only those holding a key <= the
** tile's last query), K_j is widened into the [nk, hs] block and S^T = scale K_j Q_i^T formed by
** one GEMM; the causal mask and the online softmax (running max and sum per query, the
** accumulator rescaled by exp(m_old - m_new)) are the fp32 kernel's, in fp32; then V_j is
** widened into the same block and (P^T)^T V_j added to the fp32 accumulator. At the end out =
** acc / l is rounded to bf16 once and lse = m + log l (fp32) stored. q, k, v are the head's
** views (row strides ldq, ldkv), o its view of out (stride ldo). */
static void attention_forward_tile(osdp_bf16* o, int ldo, float* lse_head, const osdp_bf16* q,
                                   int ldq, const osdp_bf16* k, const osdp_bf16* v, int ldkv,
                                   float* const* blk, int t, int q0, int nq, int hs,
                                   float scale) {
  float* qt = blk[0];                           /* [hs, nq] Q_i^T */
  float* acc = blk[1];                          /* [nq, hs] unnormalised output */
  float* kv = blk[2];                           /* [nk, hs] K_j, then V_j */
  float* st = blk[3];                           /* [nk, nq] S^T, then P^T */
  float* run_max = blk[4];                      /* [nq] running max per query */
  float* run_sum = run_max + t;                 /* [nq] running sum of exp(S - max) */
  float* new_max = run_sum + t;                 /* [nq] max after this key tile */
  float* tile_sum = new_max + t;                /* [nq] this key tile's sum */
  int q_end = q0 + nq;
  widen_transpose(qt, q + (size_t)q0 * ldq, ldq, nq, hs);
  for (int k0 = 0; k0 < q_end; k0 += t) {
    /* keys at or past q_end are masked for every query of the tile: left out of the products */
    int nk = q_end - k0 < t ? q_end - k0 : t;
    int first = k0 == 0;
    widen_rows(kv, k + (size_t)k0 * ldkv, ldkv, nk, hs);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, nk, nq, hs, scale, kv, hs, qt, nq, 0,
                st, nq);
    /* key k0+kr is seen by queries q0+c >= k0+kr: its masked part is the prefix c < k0+kr-q0 */
    for (int c = 0; c < nq; c++) {
      new_max[c] = first ? -INFINITY : run_max[c];
      tile_sum[c] = 0;
    }
    for (int kr = 0; kr < nk; kr++) {
      const float* row = st + (size_t)kr * nq;
      int nmasked = k0 + kr - q0 > 0 ? k0 + kr - q0 : 0;
      for (int c = nmasked; c < nq; c++) new_max[c] = row[c] > new_max[c] ? row[c] : new_max[c];
    }
    for (int kr = 0; kr < nk; kr++) {
      float* row = st + (size_t)kr * nq;
      int nmasked = k0 + kr - q0 > 0 ? k0 + kr - q0 : 0;
      for (int c = 0; c < nmasked; c++) row[c] = 0;
      for (int c = nmasked; c < nq; c++) {
        row[c] = fast_expf(row[c] - new_max[c]);
        tile_sum[c] += row[c];
      }
    }
    for (int c = 0; c < nq; c++) {
      if (first) {
        run_sum[c] = tile_sum[c];
      } else {
        float alpha = fast_expf(run_max[c] - new_max[c]);
        run_sum[c] = run_sum[c] * alpha + tile_sum[c];
        if (alpha != 1) {
          float* arow = acc + (size_t)c * hs;
          for (int d = 0; d < hs; d++) arow[d] *= alpha;
        }
      }
      run_max[c] = new_max[c];
    }
    widen_rows(kv, v + (size_t)k0 * ldkv, ldkv, nk, hs);
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, nq, hs, nk, 1, st, nq, kv, hs,
                first ? 0 : 1, acc, hs);
  }
  for (int r = 0; r < nq; r++) {
    float inv = 1 / run_sum[r];
    const float* arow = acc + (size_t)r * hs;
    osdp_bf16* orow = o + (size_t)(q0 + r) * ldo;
    for (int d = 0; d < hs; d++) orow[d] = bf16_store(arow[d] * inv);
    lse_head[q0 + r] = run_max[r] + logf(run_sum[r]);
  }
}

/* Causal attention forward, see KERNEL_LIST. The fp32 kernel's work split: items (b, h, pair of
** query tiles), tile p paired with tile ntiles-1-p so that every item costs about the same;
** each item writes only its own rows of out and lse and computes them the same way whichever
** thread runs it (deterministic, independent of the thread count). Query head h reads K/V head
** h / (NH / NKV). */
static void attention_forward(osdp_bf16* out, float* lse, const osdp_bf16* q, const osdp_bf16* k,
                              const osdp_bf16* v, int ldq, int ldkv, float* scratch, int B, int T,
                              int NH, int NKV, int hs) {
  int C = NH * hs; /* out's row stride */
  int group = NH / NKV;
  float scale = 1 / sqrtf((float)hs);
  size_t per_thread = attention_scratch_elems(T, hs);
  int t = bf16_attention_tile(T, hs, 0);
  int ntiles = (T + t - 1) / t;
  int npairs = (ntiles + 1) / 2;
  int nitems = B * NH * npairs;
  blas_serial_begin();
  #pragma omp parallel for schedule(static) num_threads(kernels_threads())
  for (int item = 0; item < nitems; item++) {
    int bh = item / npairs, pair = item % npairs;
    int b = bh / NH, h = bh % NH;
    const osdp_bf16* qh = q + (size_t)b * T * ldq + (size_t)h * hs;
    size_t kvoff = (size_t)b * T * ldkv + (size_t)(h / group) * hs;
    osdp_bf16* o = out + (size_t)b * T * C + (size_t)h * hs;
    float stack_tiles[ATTENTION_STACK_FLOATS];
    float* blk[ATTENTION_MAX_BLOCKS] = {NULL};
    attention_place(blk, scratch + (size_t)omp_get_thread_num() * per_thread, per_thread,
                    stack_tiles, t, hs, 0);
    int tiles[2] = {pair, ntiles - 1 - pair};
    for (int n = 0; n < (tiles[0] == tiles[1] ? 1 : 2); n++) {
      int q0 = tiles[n] * t;
      int nq = T - q0 < t ? T - q0 : t;
      attention_forward_tile(o, C, lse + (size_t)bh * T, qh, ldq, k + kvoff, v + kvoff, ldkv,
                             blk, t, q0, nq, hs, scale);
    }
  }
  blas_serial_end();
}

/* What a backward work item reads and writes: the [T, hs] views of a first query head's q, dq,
** out and dout (the group's next query heads hs columns further on each, their lse T values
** further on) and of its K/V head's k, v, dk, dv; the row strides; the sizes, the group (query
** heads per K/V head; 1 for an item of pass 2, which handles one query head), the tile side t
** and the score scale. */
typedef struct {
  const osdp_bf16 *q, *k, *v, *o, *dO;
  osdp_bf16 *dq, *dk, *dv;
  const float* lse;
  int ldq, ldkv, ldo;
  int T, hs, group, t;
  float scale;
} AttentionBackward;

/* The probabilities P[nq, nk] = exp(S - lse) of query rows q0.. against keys k0.. under the
** causal mask (a row's keys past its query are 0), S = scale Q_i K_j^T by one GEMM of the fp32
** tiles qi [nq, hs] and kt = K_j^T (row stride ldkt); then dS = P * (dP - D) with dP = dO_i
** V_j^T (one GEMM, vt = V_j^T of row stride ldkt) and D the rows' rowsum(dO * O): the fp32
** kernel's per-pair steps, shared by both backward passes. */
static void attention_probs_and_ds(float* p, float* ds, const float* qi, const float* doi,
                                   const float* kt, const float* vt, int ldkt,
                                   const float* lse_head, const float* drow, int q0, int nq,
                                   int k0, int nk, int hs, float scale) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, nq, nk, hs, scale, qi, hs, kt, ldkt, 0,
              p, nk);
  for (int r = 0; r < nq; r++) {
    float* row = p + (size_t)r * nk;
    float row_lse = lse_head[q0 + r];
    int nvalid = q0 + r + 1 - k0; /* keys <= the row's query, clamped to [0, nk] */
    nvalid = nvalid < 0 ? 0 : (nvalid > nk ? nk : nvalid);
    for (int c = 0; c < nvalid; c++) row[c] = fast_expf(row[c] - row_lse);
    for (int c = nvalid; c < nk; c++) row[c] = 0;
  }
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, nq, nk, hs, 1, doi, hs, vt, ldkt, 0, ds,
              nk);
  for (int r = 0; r < nq; r++) {
    const float* prow = p + (size_t)r * nk;
    float* dsrow = ds + (size_t)r * nk;
    float d = drow[r];
    for (int c = 0; c < nk; c++) dsrow[c] = prow[c] * (dsrow[c] - d);
  }
}

/* D[r] = dO[q0+r] . O[q0+r] for the nq rows of a query tile (row stride ldo), in fp32 in the
** fp32 kernel's row_dot order, from the bf16 out the forward stored (as the fp32 kernel, which
** reads its own out). */
static void attention_drow(float* drow, const osdp_bf16* dO, const osdp_bf16* o, int ldo, int q0,
                           int nq, int hs) {
  for (int r = 0; r < nq; r++)
    drow[r] = row_dot(dO + (size_t)(q0 + r) * ldo, o + (size_t)(q0 + r) * ldo, hs);
}

/* Backward pass 1, one key tile (keys k0 .. k0+nk_tile-1) of one (b, K/V head): dK_j and dV_j.
** K_j^T and V_j^T are widened once; the fp32 accumulators start from the old dk, dv rows
** (widened). Then for each query head of the group in order, and each query tile holding a
** query >= k0 in order (the order in which the fp32 kernel adds into dk and dv): P and dS
** (attention_probs_and_ds), dV_j += P^T dO_i, dK_j += scale dS^T Q_i (Q_i, dO_i widened).
** Finally the dk, dv rows are rounded once and stored. Writes only this key tile's rows of its
** K/V head's columns of dk and dv. */
static void attention_backward_kv(const AttentionBackward* a, float* const* blk, int k0) {
  const int t = a->t, hs = a->hs, T = a->T, ldq = a->ldq, ldkv = a->ldkv, ldo = a->ldo;
  int nk_tile = T - k0 < t ? T - k0 : t;
  float* kt = blk[0];    /* [hs, nk_tile] K_j^T */
  float* vt = blk[1];    /* [hs, nk_tile] V_j^T */
  float* dkj = blk[2];   /* [nk_tile, hs] dK_j, fp32 running sum */
  float* dvj = blk[3];   /* [nk_tile, hs] dV_j, fp32 running sum */
  float* qi = blk[4];    /* [nq, hs] Q_i */
  float* doi = blk[5];   /* [nq, hs] dO_i */
  float* p = blk[6];     /* [nq, nk] probabilities */
  float* ds = blk[7];    /* [nq, nk] dP, then dS */
  float* drow = blk[8];  /* [nq] rowsum(dO * O) */
  widen_transpose(kt, a->k + (size_t)k0 * ldkv, ldkv, nk_tile, hs);
  widen_transpose(vt, a->v + (size_t)k0 * ldkv, ldkv, nk_tile, hs);
  widen_rows(dkj, a->dk + (size_t)k0 * ldkv, ldkv, nk_tile, hs);
  widen_rows(dvj, a->dv + (size_t)k0 * ldkv, ldkv, nk_tile, hs);
  for (int g = 0; g < a->group; g++) {
    const osdp_bf16* q = a->q + (size_t)g * hs;
    const osdp_bf16* o = a->o + (size_t)g * hs;
    const osdp_bf16* dO = a->dO + (size_t)g * hs;
    const float* lse_head = a->lse + (size_t)g * T;
    /* query tiles ending before k0 see none of these keys: start at the one holding k0 */
    for (int q0 = k0 / t * t; q0 < T; q0 += t) {
      int nq = T - q0 < t ? T - q0 : t;
      /* keys past the tile's last query are masked for all its rows: left out */
      int nk = q0 + nq - k0 < nk_tile ? q0 + nq - k0 : nk_tile;
      widen_rows(qi, q + (size_t)q0 * ldq, ldq, nq, hs);
      widen_rows(doi, dO + (size_t)q0 * ldo, ldo, nq, hs);
      attention_drow(drow, dO, o, ldo, q0, nq, hs);
      attention_probs_and_ds(p, ds, qi, doi, kt, vt, nk_tile, lse_head, drow, q0, nq, k0, nk, hs,
                             a->scale);
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, nk, hs, nq, 1, p, nk, doi, hs, 1, dvj,
                  hs);
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, nk, hs, nq, a->scale, ds, nk, qi, hs,
                  1, dkj, hs);
    }
  }
  store_rows(a->dk + (size_t)k0 * ldkv, ldkv, dkj, nk_tile, hs);
  store_rows(a->dv + (size_t)k0 * ldkv, ldkv, dvj, nk_tile, hs);
}

/* Backward pass 2, one query tile (queries q0 .. q0+nq-1) of one (b, query head): dQ_i. Q_i and
** dO_i are widened once, D computed, the fp32 accumulator started from the old dq rows; then
** for each key tile holding a key <= the tile's last query, in order (the fp32 kernel's order
** of the additions into dq): K_j^T, V_j^T and K_j widened, P and dS recomputed
** (attention_probs_and_ds), dQ_i += scale dS K_j. Finally the dq rows are rounded once and
** stored. Writes only this query tile's rows of its head's columns of dq. */
static void attention_backward_q(const AttentionBackward* a, float* const* blk, int q0) {
  const int t = a->t, hs = a->hs, T = a->T, ldq = a->ldq, ldkv = a->ldkv, ldo = a->ldo;
  int nq = T - q0 < t ? T - q0 : t;
  float* kt = blk[0];    /* [hs, nk] K_j^T */
  float* vt = blk[1];    /* [hs, nk] V_j^T */
  float* kj = blk[2];    /* [nk, hs] K_j */
  float* qi = blk[3];    /* [nq, hs] Q_i */
  float* doi = blk[4];   /* [nq, hs] dO_i */
  float* dqi = blk[5];   /* [nq, hs] dQ_i, fp32 running sum */
  float* p = blk[6];     /* [nq, nk] probabilities */
  float* ds = blk[7];    /* [nq, nk] dP, then dS */
  float* drow = blk[8];  /* [nq] rowsum(dO * O) */
  widen_rows(qi, a->q + (size_t)q0 * ldq, ldq, nq, hs);
  widen_rows(doi, a->dO + (size_t)q0 * ldo, ldo, nq, hs);
  widen_rows(dqi, a->dq + (size_t)q0 * ldq, ldq, nq, hs);
  attention_drow(drow, a->dO, a->o, ldo, q0, nq, hs);
  for (int k0 = 0; k0 < q0 + nq; k0 += t) {
    /* keys past the tile's last query are masked for all its rows: left out */
    int nk = q0 + nq - k0 < t ? q0 + nq - k0 : t;
    widen_transpose(kt, a->k + (size_t)k0 * ldkv, ldkv, nk, hs);
    widen_transpose(vt, a->v + (size_t)k0 * ldkv, ldkv, nk, hs);
    widen_rows(kj, a->k + (size_t)k0 * ldkv, ldkv, nk, hs);
    attention_probs_and_ds(p, ds, qi, doi, kt, vt, nk, a->lse, drow, q0, nq, k0, nk, hs,
                           a->scale);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, nq, hs, nk, a->scale, ds, nk, kj, hs,
                1, dqi, hs);
  }
  store_rows(a->dq + (size_t)q0 * ldq, ldq, dqi, nq, hs);
}

/* Backward of attention_forward, see KERNEL_LIST; dq, dk, dv accumulate, each rounded once.
** Pass 1: items (b, K/V head, pair of key tiles j and ntiles-1-j: key tile j meets ntiles - j
** query tiles, so every pair costs about the same), dk and dv (attention_backward_kv); pass 2:
** items (b, query head, pair of query tiles), dq (attention_backward_q). An item alone writes
** its rows of its heads' gradient columns (pass 1's sums over the query heads of a group run
** inside one item, in head order), and computes them the same way whichever thread runs it: no
** races, results independent of the thread count. The two passes write different columns (dq
** and dk, dv), so their order does not matter. */
static void attention_backward(osdp_bf16* dq, osdp_bf16* dk, osdp_bf16* dv, const osdp_bf16* dout,
                               const osdp_bf16* q, const osdp_bf16* k, const osdp_bf16* v, int ldq,
                               int ldkv, const osdp_bf16* out, const float* lse, float* scratch,
                               int B, int T, int NH, int NKV, int hs) {
  int C = NH * hs; /* the row stride of out and dout */
  int group = NH / NKV;
  float scale = 1 / sqrtf((float)hs);
  size_t per_thread = attention_scratch_elems(T, hs);
  int t = bf16_attention_tile(T, hs, 1);
  int ntiles = (T + t - 1) / t;
  int npairs = (ntiles + 1) / 2;
  blas_serial_begin();
  #pragma omp parallel for schedule(static) num_threads(kernels_threads())
  for (int item = 0; item < B * NKV * npairs; item++) {
    int bkv = item / npairs, pair = item % npairs;
    int b = bkv / NKV, kvh = bkv % NKV, h0 = kvh * group;
    size_t kvoff = (size_t)b * T * ldkv + (size_t)kvh * hs;
    size_t qoff = (size_t)b * T * ldq + (size_t)h0 * hs;
    size_t ooff = (size_t)b * T * C + (size_t)h0 * hs;
    AttentionBackward a = {
      .q = q + qoff, .k = k + kvoff, .v = v + kvoff, .o = out + ooff, .dO = dout + ooff,
      .dq = dq + qoff, .dk = dk + kvoff, .dv = dv + kvoff, .lse = lse + ((size_t)b * NH + h0) * T,
      .ldq = ldq, .ldkv = ldkv, .ldo = C, .T = T, .hs = hs, .group = group, .t = t,
      .scale = scale,
    };
    float stack_tiles[ATTENTION_STACK_FLOATS];
    float* blk[ATTENTION_MAX_BLOCKS] = {NULL};
    attention_place(blk, scratch + (size_t)omp_get_thread_num() * per_thread, per_thread,
                    stack_tiles, t, hs, 1);
    int tiles[2] = {pair, ntiles - 1 - pair};
    for (int n = 0; n < (tiles[0] == tiles[1] ? 1 : 2); n++)
      attention_backward_kv(&a, blk, tiles[n] * t);
  }
  #pragma omp parallel for schedule(static) num_threads(kernels_threads())
  for (int item = 0; item < B * NH * npairs; item++) {
    int bh = item / npairs, pair = item % npairs;
    int b = bh / NH, h = bh % NH;
    size_t kvoff = (size_t)b * T * ldkv + (size_t)(h / group) * hs;
    size_t qoff = (size_t)b * T * ldq + (size_t)h * hs;
    size_t ooff = (size_t)b * T * C + (size_t)h * hs;
    AttentionBackward a = {
      .q = q + qoff, .k = k + kvoff, .v = v + kvoff, .o = out + ooff, .dO = dout + ooff,
      .dq = dq + qoff, .dk = dk + kvoff, .dv = dv + kvoff, .lse = lse + (size_t)bh * T,
      .ldq = ldq, .ldkv = ldkv, .ldo = C, .T = T, .hs = hs, .group = 1, .t = t, .scale = scale,
    };
    float stack_tiles[ATTENTION_STACK_FLOATS];
    float* blk[ATTENTION_MAX_BLOCKS] = {NULL};
    attention_place(blk, scratch + (size_t)omp_get_thread_num() * per_thread, per_thread,
                    stack_tiles, t, hs, 1);
    int tiles[2] = {pair, ntiles - 1 - pair};
    for (int n = 0; n < (tiles[0] == tiles[1] ? 1 : 2); n++)
      attention_backward_q(&a, blk, tiles[n] * t);
  }
  blas_serial_end();
}

// ----------------------------------------------------------------------------
// GELU

#define GELU_SCALING 0.7978845608028654f /* sqrt(2 / pi) */
#define GELU_CUBE 0.044715f

/* Tanh-approximation GELU: out = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), in fp32 (the
** fp32 kernel's expression), rounded once. */
static void gelu_forward(osdp_bf16* restrict out, const osdp_bf16* restrict inp, size_t N) {
  #pragma omp parallel for schedule(static) num_threads(kernels_threads())
  for (size_t i = 0; i < N; i++) {
    float x = bf16_load(inp[i]);
    float u = GELU_SCALING * (x + GELU_CUBE * x * x * x);
    out[i] = bf16_store(0.5f * x * (1 + fast_tanhf(u)));
  }
}

/* dinp = GELU'(x) * dout (OVERWRITTEN), GELU'(x) = 0.5 (1 + tanh u) + 0.5 x sech^2(u) du/dx with
** sech^2 u = 1 - tanh^2 u, as the fp32 kernel; rounded once. */
static void gelu_backward(osdp_bf16* restrict dinp, const osdp_bf16* restrict inp,
                          const osdp_bf16* restrict dout, size_t N) {
  #pragma omp parallel for schedule(static) num_threads(kernels_threads())
  for (size_t i = 0; i < N; i++) {
    float x = bf16_load(inp[i]);
    float u = GELU_SCALING * (x + GELU_CUBE * x * x * x);
    float th = fast_tanhf(u);
    float sech2 = 1 - th * th;
    float du = GELU_SCALING * (1 + 3 * GELU_CUBE * x * x);
    float grad = 0.5f * (1 + th) + 0.5f * x * sech2 * du;
    dinp[i] = bf16_store(grad * bf16_load(dout[i]));
  }
}

/* GPT-2's fc linear then its GELU (KERNEL_LIST's matmul_gelu_forward): exactly the two kernels,
** matmul_forward into pre (rounded to bf16 there: the pre-activation the backward reads), then
** gelu_forward from that rounded pre into out, as the fp32 CPU kernel does. */
static void matmul_gelu_forward(osdp_bf16* out, osdp_bf16* pre, const osdp_bf16* inp, int ldinp,
                                const osdp_bf16* w, const osdp_bf16* bias, int BT, int K, int OC,
                                int accumulate) {
  matmul_forward(pre, inp, ldinp, w, bias, BT, K, OC, accumulate);
  gelu_forward(out, pre, (size_t)BT * OC);
}

#undef GELU_SCALING
#undef GELU_CUBE

// ----------------------------------------------------------------------------
// SwiGLU

/* SwiGLU's product: out = silu(gate) * up, silu(x) = x / (1 + exp(-x)), in fp32 (the fp32
** kernel's expression: never a NaN beyond exp's clamp), rounded once. */
static void swiglu_forward(osdp_bf16* restrict out, const osdp_bf16* restrict gate,
                           const osdp_bf16* restrict up, size_t N) {
  #pragma omp parallel for schedule(static) num_threads(kernels_threads())
  for (size_t i = 0; i < N; i++) {
    float g = bf16_load(gate[i]);
    float sig = 1 / (1 + fast_expf(-g));
    out[i] = bf16_store(g * sig * bf16_load(up[i]));
  }
}

/* Backward of swiglu_forward (both OVERWRITTEN, each rounded once): dup = dout * silu(gate),
** dgate = dout * up * silu'(gate) with silu'(x) = sigmoid(x) (1 + x (1 - sigmoid(x))). */
static void swiglu_backward(osdp_bf16* restrict dgate, osdp_bf16* restrict dup,
                            const osdp_bf16* restrict dout, const osdp_bf16* restrict gate,
                            const osdp_bf16* restrict up, size_t N) {
  #pragma omp parallel for schedule(static) num_threads(kernels_threads())
  for (size_t i = 0; i < N; i++) {
    float g = bf16_load(gate[i]);
    float sig = 1 / (1 + fast_expf(-g));
    float d = bf16_load(dout[i]);
    dup[i] = bf16_store(d * (g * sig));
    dgate[i] = bf16_store(d * bf16_load(up[i]) * (sig * (1 + g * (1 - sig))));
  }
}

// ----------------------------------------------------------------------------
// rotary position embedding

/* Frequencies per chunk of a row, on the stack, as in the fp32 file. */
#define ROPE_CHUNK 64

/* Rotates every head of the B*T rows of x (bf16, stride ld) by the angle t * inv_freq[j]
** (sign = 1, forward) or its opposite (sign = -1, backward: the sine negated, exact): the fp32
** kernel's rope_rotate, the angle a float product, cosf and sinf once per (row, pair) for all
** heads; each pair read widened, rotated in fp32, both values rounded once. Each thread owns
** whole rows. */
static void rope_rotate(osdp_bf16* x, int ld, const float* inv_freq, int B, int T, int nh, int hs,
                        float sign) {
  int half = hs / 2;
  #pragma omp parallel for schedule(static) num_threads(kernels_threads())
  for (int row = 0; row < B * T; row++) {
    float pos = (float)(row % T);
    osdp_bf16* xr = x + (size_t)row * ld;
    float cs[ROPE_CHUNK], sn[ROPE_CHUNK];
    for (int j0 = 0; j0 < half; j0 += ROPE_CHUNK) {
      int nj = half - j0 < ROPE_CHUNK ? half - j0 : ROPE_CHUNK;
      for (int j = 0; j < nj; j++) {
        float a = pos * inv_freq[j0 + j];
        cs[j] = cosf(a);
        sn[j] = sign * sinf(a);
      }
      for (int h = 0; h < nh; h++) {
        osdp_bf16* restrict x1 = xr + (size_t)h * hs + j0;
        osdp_bf16* restrict x2 = x1 + half;
        for (int j = 0; j < nj; j++) {
          float a1 = bf16_load(x1[j]), a2 = bf16_load(x2[j]);
          x1[j] = bf16_store(a1 * cs[j] - a2 * sn[j]);
          x2[j] = bf16_store(a2 * cs[j] + a1 * sn[j]);
        }
      }
    }
  }
}

/* Rotary position embedding in place, see KERNEL_LIST. */
static void rope_forward(osdp_bf16* x, int ld, const float* inv_freq, int B, int T, int nh,
                         int hs) {
  rope_rotate(x, ld, inv_freq, B, T, nh, hs, 1);
}

/* Backward of rope_forward: the inverse rotation of dx, in place. */
static void rope_backward(osdp_bf16* dx, int ld, const float* inv_freq, int B, int T, int nh,
                          int hs) {
  rope_rotate(dx, ld, inv_freq, B, T, nh, hs, -1);
}

#undef ROPE_CHUNK

// ----------------------------------------------------------------------------
// fused softmax cross-entropy

/* sum of exp(row[v] - maxv) for v < n in double, in the fp32 kernel's row_exp_sum order (LANES
** interleaved partial sums). Unlike the fp32 kernel it does not keep the exponentials in the
** row (bf16 would round them): crossentropy_row computes them again, bit for bit the same. */
static inline double row_exp_sum(const osdp_bf16* restrict row, float maxv, int n) {
  double acc[LANES] = {0};
  int i = 0;
  for (; i + LANES <= n; i += LANES)
    for (int k = 0; k < LANES; k++) acc[k] += (double)fast_expf(bf16_load(row[i + k]) - maxv);
  for (int k = 0; i < n; i++, k++) acc[k] += (double)fast_expf(bf16_load(row[i]) - maxv);
  double s = 0;
  for (int k = 0; k < LANES; k++) s += acc[k];
  return s;
}

/* One position of crossentropy_forward_backward: returns -log softmax(row[0..V))[target] and
** overwrites row[0..Vp) with scale * (p - onehot(target)) (0 in the padding), each value
** computed in fp32 as the fp32 kernel does (exp(x - max) * (scale / sum), the target's minus
** scale) and rounded once. The normaliser is summed in double. Three passes over the row
** (max; exp and sum; exp again, scale and store) and no buffer: a row (up to the vocabulary)
** would not fit on the stack. */
static float crossentropy_row(osdp_bf16* row, int target, int V, int Vp, double scale) {
  float maxv = row_max(row, V);
  float shifted_target = bf16_load(row[target]) - maxv;
  double sum = row_exp_sum(row, maxv, V);
  float loss = (float)(log(sum) - (double)shifted_target);
  float norm = (float)(scale / sum);
  for (int v = 0; v < V; v++) row[v] = bf16_store(fast_expf(bf16_load(row[v]) - maxv) * norm);
  row[target] = bf16_store(fast_expf(shifted_target) * norm - (float)scale);
  for (int v = V; v < Vp; v++) row[v].bits = 0;
  return loss;
}

/* Fused softmax cross-entropy over bf16 logits[BT, Vp] (first V columns real), fp32 losses, see
** KERNEL_LIST. Positions are split among threads. */
static void crossentropy_forward_backward(osdp_bf16* logits, float* losses, const int* targets,
                                          int BT, int V, int Vp, double scale) {
  #pragma omp parallel for schedule(static) num_threads(kernels_threads())
  for (int i = 0; i < BT; i++) {
    osdp_bf16* row = logits + (size_t)i * Vp;
    if (targets[i] < 0) {
      losses[i] = 0;
      memset(row, 0, (size_t)Vp * sizeof(osdp_bf16));
    } else {
      losses[i] = crossentropy_row(row, targets[i], V, Vp, scale);
    }
  }
}

// ----------------------------------------------------------------------------
// the fp32-only kernels: the fp32 table's, so the same arithmetic by construction

/* Sum of the fp32 losses: the fp32 kernel. */
static double sum_values(const float* x, size_t n) { return cpu_kernels_f32.sum_values(x, n); }

/* Sum of squares of fp32 gradients: the fp32 kernel. */
static double sum_squares(const float* g, size_t n) { return cpu_kernels_f32.sum_squares(g, n); }

/* Sums of squares of several fp32 gradient arrays: the fp32 kernel. */
static double sum_squares_multi(const float* const* g, const size_t* n, int count) {
  return cpu_kernels_f32.sum_squares_multi(g, n, count);
}

/* AdamW on fp32 master weights, gradients and moments: the fp32 kernel (the bf16 compute copy
** is made afterwards by compute_copy). */
static void adamw_update(float* w, const float* g, float* m, float* v, size_t n, float lr,
                         float b1, float b2, float eps, float wd, int t, float grad_scale) {
  cpu_kernels_f32.adamw_update(w, g, m, v, n, lr, b1, b2, eps, wd, t, grad_scale);
}

/* AdamW on several fp32 arrays: the fp32 kernel. */
static void adamw_update_multi(float* const* w, const float* const* g, float* const* m,
                               float* const* v, const size_t* n, const float* wd, int count,
                               float lr, float b1, float b2, float eps, int t, float grad_scale) {
  cpu_kernels_f32.adamw_update_multi(w, g, m, v, n, wd, count, lr, b1, b2, eps, t, grad_scale);
}

// ----------------------------------------------------------------------------
// argmax, compute copy, accumulate

/* argmax[i] = the first index of the largest of logits[i, 0..V) (bf16, compared widened: the
** same order as the fp32 values); rows have stride Vp. Each thread owns whole rows. */
static void logits_argmax(const osdp_bf16* logits, int BT, int V, int Vp, int* argmax) {
  #pragma omp parallel for schedule(static) num_threads(kernels_threads())
  for (int i = 0; i < BT; i++) {
    const osdp_bf16* row = logits + (size_t)i * Vp;
    int best = 0;
    float best_value = bf16_load(row[0]);
    for (int v = 1; v < V; v++) {
      float x = bf16_load(row[v]);
      if (x > best_value) {
        best = v;
        best_value = x;
      }
    }
    argmax[i] = best;
  }
}

/* dst = src rounded to bf16, to nearest even: the compute copy of the fp32 master weights (the
** bits osdp_bf16_from_float gives, NaN and inf included). */
static void compute_copy(osdp_bf16* restrict dst, const float* restrict src, size_t n) {
  #pragma omp parallel for schedule(static) num_threads(kernels_threads())
  for (size_t i = 0; i < n; i++) dst[i] = bf16_store(src[i]);
}

/* dst[0..n) += src[0..n) (bf16 both: the sum of the two widened values, exact in fp32 but for
** far-apart magnitudes, rounded once). */
static void accumulate(osdp_bf16* restrict dst, const osdp_bf16* restrict src, size_t n) {
  #pragma omp parallel for schedule(static) num_threads(kernels_threads())
  for (size_t i = 0; i < n; i++) dst[i] = bf16_store(bf16_load(dst[i]) + bf16_load(src[i]));
}

// ----------------------------------------------------------------------------
// the table

/* One member per entry of KERNEL_LIST, each set to the static function of the same name: a
** kernel of the list without a definition here is an undeclared name, and a definition whose
** signature differs from the bf16 table's an incompatible pointer, which the pragma makes an
** error. A kernel defined here but not in the list is an unused function (-Wall warns). */
#pragma GCC diagnostic error "-Wincompatible-pointer-types"
#define ENTRY(ret, name, params) .name = name,
const Kernels_bf16 cpu_kernels_bf16 = {KERNEL_LIST(ENTRY, osdp_bf16, osdp_bf16, float, float)};
#undef ENTRY
