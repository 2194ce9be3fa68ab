/*
** cuda_kernels.cu: the kernels of the CUDA backend, with the contracts of KERNEL_LIST
** (kernel_list.h: the same layouts; parameter-gradient kernels accumulate or, with
** accumulate = 0, overwrite; matmul's dinp, GELU's dinp and SwiGLU's dgate and dup are
** overwritten) and the semantics of the CPU kernels in cpu_kernels_real.c, and the two tables
** made from the list: cuda_kernels_f32 (fp32 storage) and cuda_kernels_bf16 (bf16 activations
** and weight copies, fp32 gradients, optimizer state and statistics). Each kernel is the host
** function cuda_<name> (the table entry), which launches its __global__ kernels (mostly one,
** <name>_kernel); both are templates on the storage types they touch (A: activations, W:
** weights; gradients and statistics are float in both tables), widening what they read to fp32
** (to_f32) and rounding what they store once (store_rounded), so the fp32 instances compute
** exactly what they did before the types were added. Attention is in cuda_attention.cu.
**
** Determinism: no kernel uses atomics or a reduction whose order depends on scheduling. Sums
** over rows (bias, LayerNorm and RMSNorm weight gradients) are chunk sums by fixed threads,
** then the chunks added in order (colsum_run); every embedding gradient entry has one owner
** adding positions in order; the loss and the sum of squares are reduced by fixed-shape trees
** (over many arrays, added in array order). Results are therefore bit-identical from run to run
** on the same GPU. Matrix products go through cuBLAS, and those with a bias (and GPT-2's GELU)
** through cuBLASLt with the bias (and GELU) as the product's epilogue (cuda_lt.cu), deterministic
** on a given GPU and library version (fixed workspace, one stream).
*/
#include "kernels/cuda/cuda_internal.cuh"

#include <math.h>

/* Threads per block of the elementwise and row kernels. */
#define THREADS 256
/* Most blocks of a grid-stride loop: enough to fill any current GPU several times over. */
#define MAX_BLOCKS 8192
/* The column sums (see colsum_run): a block is COLSUM_COLS columns (one warp reads 32
** consecutive floats of a row: coalesced) by COLSUM_YTHREADS rows at a time; rows are cut into
** at most COLSUM_MAX_CHUNKS chunks of at least COLSUM_MIN_CHUNK_ROWS rows. */
#define COLSUM_COLS 32
#define COLSUM_YTHREADS 8
#define COLSUM_MIN_CHUNK_ROWS 64
#define COLSUM_MAX_CHUNKS 128
/* Threads per block of the one-block-per-row softmax cross-entropy. */
#define CE_THREADS 512
/* Token classes of embed_tok_backward (tokens v with v % EMBED_CLASSES = k belong to class k)
** and the classes of one block (see there). */
#define EMBED_CLASSES 64
#define EMBED_CLASSES_PER_BLOCK 8

/* Blocks of THREADS threads for a grid-stride loop over n elements. */
static unsigned grid_for(size_t n) {
  size_t blocks = (n + THREADS - 1) / THREADS;
  if (blocks > MAX_BLOCKS) blocks = MAX_BLOCKS;
  return blocks > 0 ? (unsigned)blocks : 1u;
}

/* The index of this thread in a grid-stride loop, and the stride. */
static __device__ __forceinline__ size_t grid_index(void) {
  return (size_t)blockIdx.x * blockDim.x + threadIdx.x;
}
static __device__ __forceinline__ size_t grid_stride(void) {
  return (size_t)gridDim.x * blockDim.x;
}

/* Sum of v over the block (blockDim.x a multiple of 32, at most 1024) in double, by a fixed
** tree, returned to every thread. Contains __syncthreads: every thread of the block must call
** it. */
static __device__ double block_sum_double(double v) {
  __shared__ double warp_sums[32];
  int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  v = warp_sum_double(v);
  __syncthreads(); /* an earlier call may still be reading warp_sums */
  if (lane == 0) warp_sums[warp] = v;
  __syncthreads();
  v = lane < (int)(blockDim.x / 32) ? warp_sums[lane] : 0.0;
  return warp_sum_double(v);
}

/* Max of v over the block, as block_sum_double. */
static __device__ float block_max(float v) {
  __shared__ float warp_maxes[32];
  int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) warp_maxes[warp] = v;
  __syncthreads();
  v = lane < (int)(blockDim.x / 32) ? warp_maxes[lane] : -INFINITY;
  return warp_max(v);
}

/* Copies the one double the reductions leave in cuda_ctx.reduce_result to the host (waits). */
static double fetch_result(void) {
  double result = 0;
  CUDA_CHECK(cudaMemcpyAsync(&result, cuda_ctx.reduce_result, sizeof result,
                             cudaMemcpyDeviceToHost, cuda_ctx.stream));
  CUDA_CHECK(cudaStreamSynchronize(cuda_ctx.stream));
  return result;
}

/* *result = sum of x[0..n) in double (*result + that sum with accumulate), by one block: each
** thread adds a fixed strided subset in order, then block_sum_double. Used for the losses and
** for sum_squares' partial sums (accumulated over the arrays of sum_squares_multi). */
template <typename T>
static __global__ void sum_to_double_kernel(const T* x, size_t n, double* result,
                                            int accumulate) {
  double acc = 0;
  for (size_t i = threadIdx.x; i < n; i += blockDim.x) acc += (double)x[i];
  acc = block_sum_double(acc);
  if (threadIdx.x == 0) *result = accumulate ? *result + acc : acc;
}

// ----------------------------------------------------------------------------
// positional and token embeddings

/* out[b,t,:] = wpe[t,:]: element i of out[B*T*C] is wpe[i mod T*C]. */
template <typename A, typename W>
static __global__ void embed_pos_forward_kernel(A* out, const W* wpe, size_t n, size_t TC) {
  for (size_t i = grid_index(); i < n; i += grid_stride())
    store_rounded(&out[i], to_f32(wpe[i % TC]));
}

/* Table entry embed_pos_forward: one thread per element of out. */
template <typename A, typename W>
static void cuda_embed_pos_forward(A* out, const W* wpe, int B, int T, int C) {
  size_t n = (size_t)B * T * C;
  CUDA_LAUNCH((embed_pos_forward_kernel<A, W>), grid_for(n), THREADS, 0, out, wpe, n,
              (size_t)T * C);
}

/* dwpe[t,c] += sum_b dout[b,t,c] (= without accumulate): one thread per (t, c) adds b = 0, 1,
** ... in order (the CPU's order, so even the rounding matches). */
template <typename A>
static __global__ void embed_pos_backward_kernel(float* dwpe, const A* dout, int B, size_t TC,
                                                 int accumulate) {
  for (size_t i = grid_index(); i < TC; i += grid_stride()) {
    float acc = accumulate ? dwpe[i] : 0.0f;
    for (int b = 0; b < B; b++) acc += to_f32(dout[(size_t)b * TC + i]);
    dwpe[i] = acc;
  }
}

/* Table entry embed_pos_backward: one thread per element of dwpe's first T rows. */
template <typename A>
static void cuda_embed_pos_backward(float* dwpe, const A* dout, int B, int T, int C,
                                    int accumulate) {
  size_t TC = (size_t)T * C;
  CUDA_LAUNCH(embed_pos_backward_kernel<A>, grid_for(TC), THREADS, 0, dwpe, dout, B, TC,
              accumulate);
}

/* out[i*ldo + r] += wrows[r*Vp + tok[i]]: one thread per (i, r), r fastest (coalesced writes). */
template <typename A, typename W>
static __global__ void embed_tok_forward_kernel(A* out, int ldo, const int* tok, size_t n,
                                                const W* wrows, int nrows, int Vp) {
  for (size_t idx = grid_index(); idx < n; idx += grid_stride()) {
    size_t i = idx / nrows;
    int r = (int)(idx % nrows);
    A* o = &out[i * ldo + r];
    store_rounded(o, to_f32(*o) + to_f32(wrows[(size_t)r * Vp + tok[i]]));
  }
}

/* Table entry embed_tok_forward: one thread per (position, row). */
template <typename A, typename W>
static void cuda_embed_tok_forward(A* out, int ldo, const int* tok, int BT, const W* wrows,
                                   int nrows, int Vp) {
  size_t n = (size_t)BT * nrows;
  CUDA_LAUNCH((embed_tok_forward_kernel<A, W>), grid_for(n), THREADS, 0, out, ldo, tok, n, wrows,
              nrows, Vp);
}

/* dwrows[r*Vp + tok[i]] += dout[i*ldo + r], deterministically and without atomics: thread
** (r, k) owns the entries of table row r whose token v has v % EMBED_CLASSES == k, and walks
** the positions in order, adding those of its class. Every entry thus has one owner that adds
** its positions in position order: the CPU's order, so the sums match it bit for bit, and
** repeated tokens never race. A warp is 32 consecutive rows r of one class: tok[i] is one
** broadcast read, the class test is the same branch for the whole warp, and the gradient reads
** dout[i*ldo + r .. r+31] are coalesced. Was one thread per row r (C ~ 768 threads in all, each
** walking every position); now EMBED_CLASSES times as many threads, each adding 1 /
** EMBED_CLASSES of the positions (on average) while still reading every token. */
template <typename A>
static __global__ void embed_tok_backward_kernel(float* dwrows, const A* dout, int ldo,
                                                 const int* tok, int BT, int nrows, int Vp) {
  int r = blockIdx.x * blockDim.x + threadIdx.x;
  int k = blockIdx.y * blockDim.y + threadIdx.y;
  if (r >= nrows) return;
  float* dw = dwrows + (size_t)r * Vp;
  for (int i = 0; i < BT; i++) {
    int v = tok[i];
    if (v % EMBED_CLASSES == k) dw[v] += to_f32(dout[(size_t)i * ldo + r]);
  }
}

/* Table entry embed_tok_backward: blocks of 32 rows x EMBED_CLASSES_PER_BLOCK classes, grid
** (rows / 32, EMBED_CLASSES / EMBED_CLASSES_PER_BLOCK). Without accumulate the rows are zeroed
** first (one memset on the stream: every entry of the nrows x Vp rows is then written). */
template <typename A>
static void cuda_embed_tok_backward(float* dwrows, const A* dout, int ldo, const int* tok,
                                    int BT, int nrows, int Vp, int accumulate) {
  if (nrows <= 0) return;
  if (!accumulate)
    CUDA_CHECK(cudaMemsetAsync(dwrows, 0, (size_t)nrows * Vp * sizeof(float), cuda_ctx.stream));
  dim3 grid((nrows + 31) / 32, EMBED_CLASSES / EMBED_CLASSES_PER_BLOCK);
  CUDA_LAUNCH(embed_tok_backward_kernel<A>, grid, dim3(32, EMBED_CLASSES_PER_BLOCK), 0, dwrows,
              dout, ldo, tok, BT, nrows, Vp);
}

// ----------------------------------------------------------------------------
// column sums: parameter gradients summed over the rows (bias, LayerNorm and RMSNorm weights)
//
// A sum over R rows of C columns has too few columns (C ~ 768) to fill a GPU one thread per
// column, and a serial walk over R rows per column is latency-bound. So the rows are cut into
// chunks and summed in two passes, deterministically (no atomics, the order fixed by the shape):
//   1. colsum_partial_kernel, grid (column tiles, chunks), block COLSUM_COLS x COLSUM_YTHREADS:
//      thread (x, y) adds rows y, y + COLSUM_YTHREADS, ... of its chunk in order for column x
//      of the tile, then thread y = 0 adds the COLSUM_YTHREADS sums in order and writes the
//      chunk's sum to the scratch cuda_ctx.colsum_partials;
//   2. colsum_finish_kernel, one thread per column: adds the chunks' sums in chunk order, then
//      adds the total to the gradient (or overwrites it without accumulate).
// With R = 8192 rows and C = 768 that is 24 x 128 blocks of 256 threads, each thread adding 8
// rows, then 768 threads adding 128 values, instead of 24 blocks walking 256 rows per thread.
// What is summed per (row, column) is a functor (Colsum*), so one pass can produce several sums
// (LayerNorm's dw and db). Columns are processed in groups when NSUMS x chunks x C would not
// fit the fixed scratch of COLSUM_SCRATCH_FLOATS.

/* The term of column c in row i of a plain column sum: src[i, c] (matmul's dbias), src stored
** as A. */
template <typename A>
struct ColsumPlain {
  static constexpr int NSUMS = 1;
  const A* src;
  int ld;
  __device__ void add(float* acc, int i, int c) const {
    acc[0] += to_f32(src[(size_t)i * ld + c]);
  }
};

/* LayerNorm's weight and bias gradients: dw += (x - mean) rstd dout, db += dout. */
template <typename A>
struct ColsumLayerNorm {
  static constexpr int NSUMS = 2;
  const A *dout, *inp;
  const float *mean, *rstd;
  int C;
  __device__ void add(float* acc, int i, int c) const {
    float d = to_f32(dout[(size_t)i * C + c]);
    acc[0] += (to_f32(inp[(size_t)i * C + c]) - mean[i]) * rstd[i] * d;
    acc[1] += d;
  }
};

/* RMSNorm's weight gradient: dw += x rstd dout. */
template <typename A>
struct ColsumRMSNorm {
  static constexpr int NSUMS = 1;
  const A *dout, *inp;
  const float* rstd;
  int C;
  __device__ void add(float* acc, int i, int c) const {
    acc[0] += to_f32(inp[(size_t)i * C + c]) * rstd[i] * to_f32(dout[(size_t)i * C + c]);
  }
};

/* Where the sums go: dst[k][c] for sum k. */
struct ColsumDst {
  float* dst[2];
};

/* Pass 1: the sums of chunk blockIdx.y (rows [chunk * chunk_rows, + chunk_rows)) for the group's
** columns c0 + blockIdx.x * COLSUM_COLS + threadIdx.x, into partial[(k * chunks + chunk) *
** width + column in the group]. */
template <class Op>
static __global__ void colsum_partial_kernel(Op op, int rows, int chunk_rows, int c0, int width,
                                             float* partial) {
  __shared__ float part[Op::NSUMS][COLSUM_YTHREADS][COLSUM_COLS];
  int x = threadIdx.x, y = threadIdx.y;
  int cg = blockIdx.x * COLSUM_COLS + x; /* column within the group */
  int lo = blockIdx.y * chunk_rows, hi = min(rows, lo + chunk_rows);
  float acc[Op::NSUMS];
  for (int k = 0; k < Op::NSUMS; k++) acc[k] = 0.0f;
  if (cg < width)
    for (int i = lo + y; i < hi; i += COLSUM_YTHREADS) op.add(acc, i, c0 + cg);
  for (int k = 0; k < Op::NSUMS; k++) part[k][y][x] = acc[k];
  __syncthreads();
  if (y == 0 && cg < width) {
    for (int k = 0; k < Op::NSUMS; k++) {
      float total = 0.0f;
      for (int j = 0; j < COLSUM_YTHREADS; j++) total += part[k][j][x];
      partial[((size_t)k * gridDim.y + blockIdx.y) * width + cg] = total;
    }
  }
}

/* Pass 2: dst[k][c0 + cg] (+)= the sum over the chunks, in chunk order, for every column cg of
** the group (one thread per column: consecutive threads read consecutive partials). */
template <int NSUMS>
static __global__ void colsum_finish_kernel(ColsumDst out, const float* partial, int chunks,
                                            int c0, int width, int accumulate) {
  for (size_t cg = grid_index(); cg < (size_t)width; cg += grid_stride()) {
    for (int k = 0; k < NSUMS; k++) {
      float total = 0.0f;
      for (int chunk = 0; chunk < chunks; chunk++)
        total += partial[((size_t)k * chunks + chunk) * width + cg];
      float* d = out.dst[k] + c0 + cg;
      *d = accumulate ? *d + total : total;
    }
  }
}

/* The column sums of op over rows x ncols into out (see above). The chunking depends only on
** rows and ncols, so the result is bit-reproducible. */
template <class Op>
static void colsum_run(const Op& op, ColsumDst out, int rows, int ncols, int accumulate) {
  if (rows <= 0 || ncols <= 0) return;
  int chunks = (rows + COLSUM_MIN_CHUNK_ROWS - 1) / COLSUM_MIN_CHUNK_ROWS;
  if (chunks > COLSUM_MAX_CHUNKS) chunks = COLSUM_MAX_CHUNKS;
  int chunk_rows = (rows + chunks - 1) / chunks;
  chunks = (rows + chunk_rows - 1) / chunk_rows; /* no empty chunk */
  /* columns per group: what the scratch holds, a multiple of the tile (>= 2048 columns) */
  int group = COLSUM_SCRATCH_FLOATS / (Op::NSUMS * chunks) / COLSUM_COLS * COLSUM_COLS;
  for (int c0 = 0; c0 < ncols; c0 += group) {
    int width = ncols - c0 < group ? ncols - c0 : group;
    dim3 grid((width + COLSUM_COLS - 1) / COLSUM_COLS, chunks);
    CUDA_LAUNCH(colsum_partial_kernel<Op>, grid, dim3(COLSUM_COLS, COLSUM_YTHREADS), 0, op, rows,
                chunk_rows, c0, width, cuda_ctx.colsum_partials);
    CUDA_LAUNCH(colsum_finish_kernel<Op::NSUMS>, grid_for(width), THREADS, 0, out,
                cuda_ctx.colsum_partials, chunks, c0, width, accumulate);
  }
}

// ----------------------------------------------------------------------------
// matmul through cuBLAS, weights stored [in, out]
//
// cuBLAS is column-major: a row-major [rows, cols] matrix with row stride ld is, to cuBLAS, its
// transpose, a [cols, rows] column-major matrix with leading dimension ld. So a row-major
// product C = A B is computed as the column-major C^T = B^T A^T, with the operands swapped.

/* Column-major C[m, n] = op(A) op(B) + beta C. On fp32 storage (T = float) C is fp32 and the
** compute type is set_matmul_mode's (fp32, or tensor cores on inputs rounded to TF32 or bf16);
** on bf16 storage (T = osdp_bf16) A and B are bf16, C is bf16 or fp32 (TC: a parameter
** gradient), and the products accumulate in fp32 (CUBLAS_COMPUTE_32F), C rounded once. */
template <typename T, typename TC>
static void gemm(cublasOperation_t op_a, cublasOperation_t op_b, int m, int n, int k, const T* A,
                 int lda, const T* Bm, int ldb, float beta, TC* Cm, int ldc) {
  const float alpha = 1.0f;
  cublasComputeType_t compute =
      cuda_type_of(A) == CUDA_R_32F ? cuda_ctx.gemm_compute : CUBLAS_COMPUTE_32F;
  CUDA_CHECK(cublasGemmEx(cuda_ctx.cublas, op_a, op_b, m, n, k, &alpha, A, cuda_type_of(A), lda,
                          Bm, cuda_type_of(Bm), ldb, &beta, Cm, cuda_type_of(Cm), ldc, compute,
                          CUBLAS_GEMM_DEFAULT));
}

/* out[i, c] = bias[c] (or += when accumulate) for every row of out[rows, OC]. */
template <typename T>
static __global__ void bias_rows_kernel(T* out, const T* bias, size_t n, int OC, int accumulate) {
  for (size_t i = grid_index(); i < n; i += grid_stride()) {
    float b = to_f32(bias[i % OC]);
    store_rounded(&out[i], accumulate ? to_f32(out[i]) + b : b);
  }
}

/* out[BT, OC] = (or += when accumulate) inp[BT, K] (row stride ldinp) @ w[K, OC] + bias. With a
** bias, in one pass: cuBLASLt's bias epilogue, out = inp w + bias + beta out (beta 1 or 0: it
** expresses both forms); where cuBLASLt has no algorithm for it, the bias rows are written (or
** added) first and the product then accumulated (beta = 1), as on the CPU. Column-major:
** out^T[OC, BT] = w^T[OC, K] inp^T[K, BT]. Activations and weights share the storage type T. */
template <typename T>
static void cuda_matmul_forward(T* out, const T* inp, int ldinp, const T* w, const T* bias,
                                int BT, int K, int OC, int accumulate) {
  if (BT <= 0 || OC <= 0) return;
  float beta = accumulate ? 1.0f : 0.0f;
  if (bias != NULL) {
    if (K > 0 && cuda_lt_linear(out, (T*)NULL, inp, ldinp, w, bias, BT, K, OC, beta,
                                CUBLASLT_EPILOGUE_BIAS) == 0)
      return;
    size_t n = (size_t)BT * OC;
    CUDA_LAUNCH(bias_rows_kernel<T>, grid_for(n), THREADS, 0, out, bias, n, OC, accumulate);
    beta = 1.0f;
  }
  gemm(CUBLAS_OP_N, CUBLAS_OP_N, OC, BT, K, w, OC, inp, ldinp, beta, out, OC);
}

/* Backward of matmul_forward; dinp is overwritten (beta = 0), dw and dbias accumulate (beta =
** 1) or, without accumulate, are overwritten; dinp and dbias are skipped when NULL:
**   dinp[BT, K] = dout @ w^T,   column-major dinp^T[K, BT] = (w^T)^T[K, OC] dout^T[OC, BT];
**   dw[K, OC] += inp^T @ dout,  column-major dw^T[OC, K] = dout^T[OC, BT] (inp^T)^T[BT, K];
**   dbias[OC] += column sums of dout.
** dw and dbias are fp32 in both tables; dinp, dout, inp and w are stored as T. */
template <typename T>
static void cuda_matmul_backward(T* dinp, float* dw, float* dbias, const T* dout, const T* inp,
                                 int ldinp, const T* w, int BT, int K, int OC, int accumulate) {
  if (BT <= 0 || K <= 0 || OC <= 0) return;
  float beta = accumulate ? 1.0f : 0.0f;
  if (dinp != NULL) gemm(CUBLAS_OP_T, CUBLAS_OP_N, K, BT, OC, w, OC, dout, OC, 0.0f, dinp, ldinp);
  gemm(CUBLAS_OP_N, CUBLAS_OP_T, OC, K, BT, dout, OC, inp, ldinp, beta, dw, OC);
  if (dbias != NULL)
    colsum_run(ColsumPlain<T>{dout, OC}, ColsumDst{{dbias, NULL}}, BT, OC, accumulate);
}

// ----------------------------------------------------------------------------
// layernorm: one warp per row for the row statistics and the input gradient

/* LayerNorm of row `row` of inp[BT, C] by one warp, eps = 1e-5, biased variance computed from
** the centred values (two passes, as on the CPU); saves mean and rstd. */
template <typename A, typename W>
static __global__ void layernorm_forward_kernel(A* out, float* mean, float* rstd, const A* inp,
                                                const W* w, const W* b, int BT, int C) {
  int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  int lane = threadIdx.x % 32;
  if (row >= BT) return; /* the whole warp leaves together */
  const A* x = inp + (size_t)row * C;
  A* o = out + (size_t)row * C;
  float sum = 0;
  for (int c = lane; c < C; c += 32) sum += to_f32(x[c]);
  float m = warp_sum(sum) / C;
  float sq = 0;
  for (int c = lane; c < C; c += 32) {
    float centred = to_f32(x[c]) - m;
    sq += centred * centred;
  }
  float var = warp_sum(sq) / C;
  float s = 1.0f / sqrtf(var + 1e-5f);
  for (int c = lane; c < C; c += 32)
    store_rounded(&o[c], (to_f32(x[c]) - m) * s * to_f32(w[c]) + to_f32(b[c]));
  if (lane == 0) {
    mean[row] = m;
    rstd[row] = s;
  }
}

/* Table entry layernorm_forward: THREADS / 32 rows per block, one per warp. */
template <typename A, typename W>
static void cuda_layernorm_forward(A* out, float* mean, float* rstd, const A* inp, const W* w,
                                   const W* b, int BT, int C) {
  if (BT <= 0) return;
  int rows_per_block = THREADS / 32;
  CUDA_LAUNCH((layernorm_forward_kernel<A, W>), (BT + rows_per_block - 1) / rows_per_block,
              THREADS, 0, out, mean, rstd, inp, w, b, BT, C);
}

/* Input gradient of LayerNorm for one row per warp (as in llm.c):
**   dinp += (w*dout - mean(w*dout) - norm * mean(w*dout*norm)) * rstd, norm = (x - mean) rstd. */
template <typename A, typename W>
static __global__ void layernorm_backward_input_kernel(A* dinp, const A* dout, const A* inp,
                                                       const W* w, const float* mean,
                                                       const float* rstd, int BT, int C) {
  int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  int lane = threadIdx.x % 32;
  if (row >= BT) return;
  const A* x = inp + (size_t)row * C;
  const A* d = dout + (size_t)row * C;
  A* dx = dinp + (size_t)row * C;
  float m = mean[row], s = rstd[row];
  float wd = 0, wdc = 0;
  for (int c = lane; c < C; c += 32) {
    float g = to_f32(w[c]) * to_f32(d[c]);
    wd += g;
    wdc += g * (to_f32(x[c]) - m);
  }
  float dnorm_mean = warp_sum(wd) / C;
  float dnorm_norm_mean = warp_sum(wdc) * s / C;
  for (int c = lane; c < C; c += 32) {
    float norm = (to_f32(x[c]) - m) * s;
    float g = (to_f32(w[c]) * to_f32(d[c]) - dnorm_mean - norm * dnorm_norm_mean) * s;
    store_rounded(&dx[c], to_f32(dx[c]) + g);
  }
}

/* Table entry layernorm_backward: the input gradient (a warp per row, accumulated), then the
** weight and bias gradients (column sums, accumulated or overwritten). */
template <typename A, typename W>
static void cuda_layernorm_backward(A* dinp, float* dw, float* db, const A* dout, const A* inp,
                                    const W* w, const float* mean, const float* rstd, int BT,
                                    int C, int accumulate) {
  if (BT <= 0 || C <= 0) return;
  int rows_per_block = THREADS / 32;
  CUDA_LAUNCH((layernorm_backward_input_kernel<A, W>), (BT + rows_per_block - 1) / rows_per_block,
              THREADS, 0, dinp, dout, inp, w, mean, rstd, BT, C);
  colsum_run(ColsumLayerNorm<A>{dout, inp, mean, rstd, C}, ColsumDst{{dw, db}}, BT, C,
             accumulate);
}

// ----------------------------------------------------------------------------
// RMSNorm: one warp per row for the row statistic and the input gradient

/* RMSNorm of row `row` of inp[BT, C] by one warp: the sum of squares in double (as on the CPU),
** rstd = 1 / sqrt(mean(x^2) + eps) rounded to float, out = x * rstd * w; saves rstd. */
template <typename A, typename W>
static __global__ void rmsnorm_forward_kernel(A* out, float* rstd, const A* inp, const W* w,
                                              int BT, int C, double eps) {
  int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  int lane = threadIdx.x % 32;
  if (row >= BT) return; /* the whole warp leaves together */
  const A* x = inp + (size_t)row * C;
  A* o = out + (size_t)row * C;
  double sq = 0;
  for (int c = lane; c < C; c += 32) {
    double xc = to_f32(x[c]);
    sq += xc * xc;
  }
  float s = (float)(1.0 / sqrt(warp_sum_double(sq) / C + eps));
  for (int c = lane; c < C; c += 32) store_rounded(&o[c], to_f32(x[c]) * s * to_f32(w[c]));
  if (lane == 0) rstd[row] = s;
}

/* Table entry rmsnorm_forward: THREADS / 32 rows per block, one per warp. */
template <typename A, typename W>
static void cuda_rmsnorm_forward(A* out, float* rstd, const A* inp, const W* w, int BT, int C,
                                 double eps) {
  if (BT <= 0) return;
  int rows_per_block = THREADS / 32;
  CUDA_LAUNCH((rmsnorm_forward_kernel<A, W>), (BT + rows_per_block - 1) / rows_per_block,
              THREADS, 0, out, rstd, inp, w, BT, C, eps);
}

/* Input gradient of RMSNorm for one row per warp: with norm = x rstd,
**   dinp += (w*dout - norm * mean(w*dout*norm)) * rstd. */
template <typename A, typename W>
static __global__ void rmsnorm_backward_input_kernel(A* dinp, const A* dout, const A* inp,
                                                     const W* w, const float* rstd, int BT,
                                                     int C) {
  int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  int lane = threadIdx.x % 32;
  if (row >= BT) return;
  const A* x = inp + (size_t)row * C;
  const A* d = dout + (size_t)row * C;
  A* dx = dinp + (size_t)row * C;
  float s = rstd[row];
  float wdx = 0;
  for (int c = lane; c < C; c += 32) wdx += to_f32(w[c]) * to_f32(d[c]) * to_f32(x[c]);
  float dnorm_norm_mean = warp_sum(wdx) * s / C;
  for (int c = lane; c < C; c += 32) {
    float g = (to_f32(w[c]) * to_f32(d[c]) - to_f32(x[c]) * s * dnorm_norm_mean) * s;
    store_rounded(&dx[c], to_f32(dx[c]) + g);
  }
}

/* Table entry rmsnorm_backward: the input gradient (a warp per row, accumulated), then the
** weight gradient (column sums, accumulated or overwritten). */
template <typename A, typename W>
static void cuda_rmsnorm_backward(A* dinp, float* dw, const A* dout, const A* inp, const W* w,
                                  const float* rstd, int BT, int C, int accumulate) {
  if (BT <= 0 || C <= 0) return;
  int rows_per_block = THREADS / 32;
  CUDA_LAUNCH((rmsnorm_backward_input_kernel<A, W>), (BT + rows_per_block - 1) / rows_per_block,
              THREADS, 0, dinp, dout, inp, w, rstd, BT, C);
  colsum_run(ColsumRMSNorm<A>{dout, inp, rstd, C}, ColsumDst{{dw, NULL}}, BT, C, accumulate);
}

// ----------------------------------------------------------------------------
// GELU

#define GELU_SCALING 0.7978845608028654f /* sqrt(2 / pi) */
#define GELU_CUBE 0.044715f

/* Tanh-approximation GELU: out = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))). */
template <typename A>
static __global__ void gelu_forward_kernel(A* out, const A* inp, size_t n) {
  for (size_t i = grid_index(); i < n; i += grid_stride()) {
    float x = to_f32(inp[i]);
    float u = GELU_SCALING * (x + GELU_CUBE * x * x * x);
    store_rounded(&out[i], 0.5f * x * (1.0f + tanhf(u)));
  }
}

/* Table entry gelu_forward. */
template <typename A>
static void cuda_gelu_forward(A* out, const A* inp, size_t n) {
  CUDA_LAUNCH(gelu_forward_kernel<A>, grid_for(n), THREADS, 0, out, inp, n);
}

/* dinp = GELU'(x) dout (overwritten), GELU'(x) = 0.5 (1 + tanh u) + 0.5 x (1 - tanh^2 u) du/dx. */
template <typename A>
static __global__ void gelu_backward_kernel(A* dinp, const A* inp, const A* dout, size_t n) {
  for (size_t i = grid_index(); i < n; i += grid_stride()) {
    float x = to_f32(inp[i]);
    float u = GELU_SCALING * (x + GELU_CUBE * x * x * x);
    float th = tanhf(u);
    float sech2 = 1.0f - th * th;
    float du = GELU_SCALING * (1.0f + 3.0f * GELU_CUBE * x * x);
    float grad = 0.5f * (1.0f + th) + 0.5f * x * sech2 * du;
    store_rounded(&dinp[i], grad * to_f32(dout[i]));
  }
}

/* Table entry gelu_backward (overwrites dinp). */
template <typename A>
static void cuda_gelu_backward(A* dinp, const A* inp, const A* dout, size_t n) {
  CUDA_LAUNCH(gelu_backward_kernel<A>, grid_for(n), THREADS, 0, dinp, inp, dout, n);
}

/* Table entry matmul_gelu_forward: pre = (or += when accumulate) inp @ w + bias, out = GELU(pre).
** Overwriting, with OC a multiple of 8 (the aux matrix's ld rule), it is one cuBLASLt product
** whose GELU_AUX(_BIAS) epilogue writes pre as its aux output and GELU(pre) as its result (see
** cublasLtMatmul in tools/cuda-emu/emu.cpp for the GELU it computes); otherwise, or without an
** algorithm for it, matmul_forward into pre and then gelu_forward: an epilogue cannot read the
** old pre and also write it as aux. On bf16 storage the fused product computes GELU from the
** fp32 sum and rounds pre and out each once; the unfused path computes it from the rounded pre. */
template <typename T>
static void cuda_matmul_gelu_forward(T* out, T* pre, const T* inp, int ldinp, const T* w,
                                     const T* bias, int BT, int K, int OC, int accumulate) {
  if (BT <= 0 || OC <= 0) return;
  cublasLtEpilogue_t epilogue = bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
  if (!accumulate && K > 0 && OC % 8 == 0 &&
      cuda_lt_linear(out, pre, inp, ldinp, w, bias, BT, K, OC, 0.0f, epilogue) == 0)
    return;
  cuda_matmul_forward(pre, inp, ldinp, w, bias, BT, K, OC, accumulate);
  cuda_gelu_forward(out, pre, (size_t)BT * OC);
}

#undef GELU_SCALING
#undef GELU_CUBE

// ----------------------------------------------------------------------------
// SwiGLU, RoPE

/* out = silu(gate) * up, silu(x) = x sigmoid(x), sigmoid(x) = 1 / (1 + exp(-x)) (as on the
** CPU; exp(-x) = inf for very negative x gives sigmoid 0, never a NaN). */
template <typename A>
static __global__ void swiglu_forward_kernel(A* out, const A* gate, const A* up, size_t n) {
  for (size_t i = grid_index(); i < n; i += grid_stride()) {
    float g = to_f32(gate[i]);
    float sig = 1.0f / (1.0f + expf(-g));
    store_rounded(&out[i], g * sig * to_f32(up[i]));
  }
}

/* Table entry swiglu_forward. */
template <typename A>
static void cuda_swiglu_forward(A* out, const A* gate, const A* up, size_t n) {
  CUDA_LAUNCH(swiglu_forward_kernel<A>, grid_for(n), THREADS, 0, out, gate, up, n);
}

/* dup = dout silu(gate), dgate = dout up silu'(gate), silu'(x) = sigmoid(x) (1 + x (1 -
** sigmoid(x))); both overwritten. */
template <typename A>
static __global__ void swiglu_backward_kernel(A* dgate, A* dup, const A* dout, const A* gate,
                                              const A* up, size_t n) {
  for (size_t i = grid_index(); i < n; i += grid_stride()) {
    float g = to_f32(gate[i]);
    float sig = 1.0f / (1.0f + expf(-g));
    float d = to_f32(dout[i]);
    store_rounded(&dup[i], d * (g * sig));
    store_rounded(&dgate[i], d * to_f32(up[i]) * (sig * (1.0f + g * (1.0f - sig))));
  }
}

/* Table entry swiglu_backward (overwrites dgate and dup). */
template <typename A>
static void cuda_swiglu_backward(A* dgate, A* dup, const A* dout, const A* gate, const A* up,
                                 size_t n) {
  CUDA_LAUNCH(swiglu_backward_kernel<A>, grid_for(n), THREADS, 0, dgate, dup, dout, gate, up, n);
}

/* Threads per block of the RoPE kernel (one block per row; a thread per pair j of a head). */
#define ROPE_THREADS 64

/* Rotates row blockIdx.x of x (stride ld, position row % T) in place: thread j takes the pairs
** j, j + ROPE_THREADS, ... < hs/2, computes the angle t * inv_freq[j] (a float product, as on
** the CPU) and its cosine and sine once, and rotates pair (j, j + hs/2) of every head by it;
** sign = -1 (backward) negates the sine, the exact inverse (transpose) rotation. */
template <typename A>
static __global__ void rope_kernel(A* x, int ld, const float* inv_freq, int T, int nh, int hs,
                                   float sign) {
  int row = blockIdx.x, half = hs / 2;
  float pos = (float)(row % T);
  A* xr = x + (size_t)row * ld;
  for (int j = threadIdx.x; j < half; j += blockDim.x) {
    float a = pos * inv_freq[j];
    float c = cosf(a), s = sign * sinf(a);
    for (int h = 0; h < nh; h++) {
      A* x1 = xr + (size_t)h * hs + j;
      float a1 = to_f32(x1[0]), a2 = to_f32(x1[half]);
      store_rounded(&x1[0], a1 * c - a2 * s);
      store_rounded(&x1[half], a2 * c + a1 * s);
    }
  }
}

/* Table entry rope_forward: one block per row. */
template <typename A>
static void cuda_rope_forward(A* x, int ld, const float* inv_freq, int B, int T, int nh, int hs) {
  if (B <= 0 || T <= 0 || nh <= 0 || hs < 2) return;
  CUDA_LAUNCH(rope_kernel<A>, B * T, ROPE_THREADS, 0, x, ld, inv_freq, T, nh, hs, 1.0f);
}

/* Table entry rope_backward: the inverse rotation, in place. */
template <typename A>
static void cuda_rope_backward(A* dx, int ld, const float* inv_freq, int B, int T, int nh,
                               int hs) {
  if (B <= 0 || T <= 0 || nh <= 0 || hs < 2) return;
  CUDA_LAUNCH(rope_kernel<A>, B * T, ROPE_THREADS, 0, dx, ld, inv_freq, T, nh, hs, -1.0f);
}

#undef ROPE_THREADS

// ----------------------------------------------------------------------------
// compute copy, accumulate

/* dst = src rounded to dst's type. */
template <typename W>
static __global__ void compute_copy_kernel(W* dst, const float* src, size_t n) {
  for (size_t i = grid_index(); i < n; i += grid_stride()) store_rounded(&dst[i], src[i]);
}

/* Table entry compute_copy: the step's copy of fp32 master weights (bf16 storage rounds each
** once; fp32 copies). */
template <typename W>
static void cuda_compute_copy(W* dst, const float* src, size_t n) {
  CUDA_LAUNCH(compute_copy_kernel<W>, grid_for(n), THREADS, 0, dst, src, n);
}

/* dst += src. */
template <typename A>
static __global__ void accumulate_kernel(A* dst, const A* src, size_t n) {
  for (size_t i = grid_index(); i < n; i += grid_stride())
    store_rounded(&dst[i], to_f32(dst[i]) + to_f32(src[i]));
}

/* Table entry accumulate. */
template <typename A>
static void cuda_accumulate(A* dst, const A* src, size_t n) {
  CUDA_LAUNCH(accumulate_kernel<A>, grid_for(n), THREADS, 0, dst, src, n);
}

// ----------------------------------------------------------------------------
// fused softmax cross-entropy, one block per position

/* Row blockIdx.x of logits[BT, Vp]: without a target (< 0) the row and its loss become 0;
** otherwise losses[i] = -log softmax(row[0..V))[target] and the row is overwritten with
** scale * (p - onehot(target)), 0 in the padding. As on the CPU, the exponentials are summed in
** double, and the target's shifted logit is read first; each exponential is computed twice (for
** the sum, then for p) rather than stored in the row, the same value both times, so a bf16 row
** rounds only the gradient. Every thread touches only its own strided columns, so the row needs
** no barrier beyond the reductions'. */
template <typename A>
static __global__ void crossentropy_kernel(A* logits, float* losses, const int* targets, int V,
                                           int Vp, double scale) {
  int i = blockIdx.x;
  A* row = logits + (size_t)i * Vp;
  int target = targets[i];
  if (target < 0) { /* the whole block takes this branch */
    for (int v = threadIdx.x; v < Vp; v += blockDim.x) store_rounded(&row[v], 0.0f);
    if (threadIdx.x == 0) losses[i] = 0.0f;
    return;
  }
  /* read by all before block_max's barrier, written after */
  float target_logit = to_f32(row[target]);
  float local_max = -INFINITY;
  for (int v = threadIdx.x; v < V; v += blockDim.x) local_max = fmaxf(local_max, to_f32(row[v]));
  float maxv = block_max(local_max);
  double local_sum = 0;
  for (int v = threadIdx.x; v < V; v += blockDim.x)
    local_sum += (double)expf(to_f32(row[v]) - maxv);
  double sum = block_sum_double(local_sum);
  float norm = (float)(scale / sum);
  for (int v = threadIdx.x; v < V; v += blockDim.x) {
    float p = expf(to_f32(row[v]) - maxv) * norm;
    store_rounded(&row[v], v == target ? p - (float)scale : p);
  }
  for (int v = V + threadIdx.x; v < Vp; v += blockDim.x) store_rounded(&row[v], 0.0f);
  if (threadIdx.x == 0) losses[i] = (float)(log(sum) - (double)(target_logit - maxv));
}

/* The fused cross-entropy: one block per position, nothing read back (the head sums the
** losses once, cuda_sum_values). */
template <typename A>
static void cuda_crossentropy_forward_backward(A* logits, float* losses, const int* targets,
                                               int BT, int V, int Vp, double scale) {
  if (BT <= 0) return;
  CUDA_LAUNCH(crossentropy_kernel<A>, BT, CE_THREADS, 0, logits, losses, targets, V, Vp, scale);
}

/* The sum of x[0..n) in double by one block (a fixed order), copied back to the host: one
** wait. */
static double cuda_sum_values(const float* x, size_t n) {
  if (n == 0) return 0.0;
  CUDA_LAUNCH(sum_to_double_kernel<float>, 1, 1024, 0, x, n, cuda_ctx.reduce_result, 0);
  return fetch_result();
}

// ----------------------------------------------------------------------------
// sum of squares, optimizer, argmax

/* partial[blk] = sum of g[i]^2 in double over block blk's fixed share of [0, n) (the shares
** depend only on n and gridDim.x), by a fixed tree. */
static __global__ void sum_squares_partial_kernel(const float* g, size_t n, double* partial) {
  size_t lo = n * blockIdx.x / gridDim.x, hi = n * (blockIdx.x + 1) / gridDim.x;
  double acc = 0;
  for (size_t i = lo + threadIdx.x; i < hi; i += blockDim.x) {
    double x = g[i];
    acc += x * x;
  }
  acc = block_sum_double(acc);
  if (threadIdx.x == 0) partial[blockIdx.x] = acc;
}

/* Queues the sum of squares of g[0..n) into cuda_ctx.reduce_result (added to it with
** accumulate), in two passes: CUDA_REDUCE_BLOCKS partial sums into the fixed scratch, then
** their sum by one block. */
static void queue_sum_squares(const float* g, size_t n, int accumulate) {
  CUDA_LAUNCH(sum_squares_partial_kernel, CUDA_REDUCE_BLOCKS, THREADS, 0, g, n,
              cuda_ctx.reduce_partials);
  CUDA_LAUNCH(sum_to_double_kernel<double>, 1, CUDA_REDUCE_BLOCKS, 0, cuda_ctx.reduce_partials,
              (size_t)CUDA_REDUCE_BLOCKS, cuda_ctx.reduce_result, accumulate);
}

/* Table entry sum_squares: one array, one double copied back. */
static double cuda_sum_squares(const float* g, size_t n) {
  queue_sum_squares(g, n, 0);
  return fetch_result();
}

/* Table entry sum_squares_multi: each array's sum as sum_squares computes it, added on the
** device to the running total in array order (the first overwrites it), so the result is the
** host sum of the sum_squares results bit for bit; one double copied back, one wait for all
** arrays (was one per array: a host round trip per parameter slice). Two small launches per
** array remain. */
static double cuda_sum_squares_multi(const float* const* g, const size_t* n, int count) {
  if (count <= 0) return 0.0;
  for (int j = 0; j < count; j++) queue_sum_squares(g[j], n[j], j > 0);
  return fetch_result();
}

/* The AdamW hyperparameters every element of a step shares; inv_bc1 and inv_bc2 are the bias
** corrections' inverses, computed on the host in double as on the CPU. */
struct AdamwParams {
  float lr, b1, b2, eps, inv_bc1, inv_bc2, grad_scale;
};

/* AdamW on element i of one array: the CPU's arithmetic, in float. */
static __device__ __forceinline__ void adamw_element(float* w, const float* g, float* m, float* v,
                                                     size_t i, float wd, const AdamwParams& p) {
  float gi = g[i] * p.grad_scale;
  float mi = p.b1 * m[i] + (1.0f - p.b1) * gi;
  float vi = p.b2 * v[i] + (1.0f - p.b2) * gi * gi;
  m[i] = mi;
  v[i] = vi;
  float mhat = mi * p.inv_bc1;
  float vhat = vi * p.inv_bc2;
  w[i] -= p.lr * (mhat / (sqrtf(vhat) + p.eps) + wd * w[i]);
}

/* The host's bias corrections for step t (see AdamwParams). */
static AdamwParams adamw_params(float lr, float b1, float b2, float eps, int t,
                                float grad_scale) {
  AdamwParams p;
  p.lr = lr;
  p.b1 = b1;
  p.b2 = b2;
  p.eps = eps;
  p.inv_bc1 = (float)(1.0 / (1.0 - pow((double)b1, (double)t)));
  p.inv_bc2 = (float)(1.0 / (1.0 - pow((double)b2, (double)t)));
  p.grad_scale = grad_scale;
  return p;
}

/* Arrays per launch of adamw_multi_kernel: their pointers travel in the kernel's parameter
** (AdamwBatch, about 2.5 KiB, under the 4 KiB every CUDA version accepts). */
#define ADAMW_BATCH 48
/* Elements per block of adamw_multi_kernel (16 per thread). */
#define ADAMW_BLOCK_ELEMS (THREADS * 16)

/* Up to ADAMW_BATCH arrays of one launch: array j's blocks are first_block[j] ..
** first_block[j + 1] - 1, each ADAMW_BLOCK_ELEMS elements (the last one fewer). */
struct AdamwBatch {
  float* w[ADAMW_BATCH];
  const float* g[ADAMW_BATCH];
  float* m[ADAMW_BATCH];
  float* v[ADAMW_BATCH];
  size_t n[ADAMW_BATCH];
  float wd[ADAMW_BATCH];
  unsigned first_block[ADAMW_BATCH + 1];
  int count;
};

/* AdamW on the arrays of a batch (PyTorch's multi_tensor_apply, without atomics): block b finds
** its array j (first_block[j] <= b < first_block[j + 1], the same for all its threads) and
** updates that array's elements [(b - first_block[j]) * ADAMW_BLOCK_ELEMS, + ADAMW_BLOCK_ELEMS)
** with stride THREADS (coalesced). The one AdamW kernel: adamw_update is a batch of one array,
** so both table entries give the same values. */
static __global__ void adamw_multi_kernel(AdamwBatch batch, AdamwParams p) {
  int j = 0;
  while (j + 1 < batch.count && batch.first_block[j + 1] <= blockIdx.x) j++;
  size_t lo = (size_t)(blockIdx.x - batch.first_block[j]) * ADAMW_BLOCK_ELEMS;
  size_t hi = lo + ADAMW_BLOCK_ELEMS < batch.n[j] ? lo + ADAMW_BLOCK_ELEMS : batch.n[j];
  for (size_t i = lo + threadIdx.x; i < hi; i += blockDim.x)
    adamw_element(batch.w[j], batch.g[j], batch.m[j], batch.v[j], i, batch.wd[j], p);
}

/* Table entry adamw_update_multi: the bias corrections on the host in double, as on the CPU,
** then the arrays in batches of ADAMW_BATCH, one launch each (with blocks of ADAMW_BLOCK_ELEMS
** elements over all the batch's arrays), instead of a launch per array; empty arrays are left
** out. */
static void cuda_adamw_update_multi(float* const* w, const float* const* g, float* const* m,
                                    float* const* v, const size_t* n, const float* wd, int count,
                                    float lr, float b1, float b2, float eps, int t,
                                    float grad_scale) {
  AdamwParams p = adamw_params(lr, b1, b2, eps, t, grad_scale);
  AdamwBatch batch;
  batch.count = 0;
  batch.first_block[0] = 0;
  for (int j = 0; j < count; j++) {
    if (n[j] == 0) continue;
    int k = batch.count++;
    batch.w[k] = w[j];
    batch.g[k] = g[j];
    batch.m[k] = m[j];
    batch.v[k] = v[j];
    batch.n[k] = n[j];
    batch.wd[k] = wd[j];
    batch.first_block[k + 1] =
        batch.first_block[k] + (unsigned)((n[j] + ADAMW_BLOCK_ELEMS - 1) / ADAMW_BLOCK_ELEMS);
    if (batch.count == ADAMW_BATCH) {
      CUDA_LAUNCH(adamw_multi_kernel, batch.first_block[batch.count], THREADS, 0, batch, p);
      batch.count = 0;
    }
  }
  if (batch.count > 0)
    CUDA_LAUNCH(adamw_multi_kernel, batch.first_block[batch.count], THREADS, 0, batch, p);
}

/* Table entry adamw_update: adamw_update_multi on one array. */
static void cuda_adamw_update(float* w, const float* g, float* m, float* v, size_t n, float lr,
                              float b1, float b2, float eps, float wd, int t, float grad_scale) {
  cuda_adamw_update_multi(&w, &g, &m, &v, &n, &wd, 1, lr, b1, b2, eps, t, grad_scale);
}

/* Whether candidate (value cv, index ci) beats (bv, bi) for "the first largest": larger, or
** equal and earlier. Index -1 is "none yet". */
static __device__ __forceinline__ bool argmax_better(float cv, int ci, float bv, int bi) {
  return ci >= 0 && (bi < 0 || cv > bv || (cv == bv && ci < bi));
}

/* argmax[i] = first index of the largest of row i's V logits: one block per row; each thread
** keeps the first largest of its strided columns, then the block reduces (value, index) pairs
** with ties going to the smaller index. */
template <typename A>
static __global__ void logits_argmax_kernel(const A* logits, int V, int Vp, int* argmax) {
  __shared__ float warp_value[32];
  __shared__ int warp_index[32];
  const A* row = logits + (size_t)blockIdx.x * Vp;
  float best_value = 0.0f;
  int best_index = -1;
  for (int v = threadIdx.x; v < V; v += blockDim.x) {
    float x = to_f32(row[v]);
    if (best_index < 0 || x > best_value) {
      best_value = x;
      best_index = v;
    }
  }
  for (int offset = 16; offset > 0; offset /= 2) {
    float other_value = __shfl_xor_sync(CUDA_FULL_WARP, best_value, offset);
    int other_index = __shfl_xor_sync(CUDA_FULL_WARP, best_index, offset);
    if (argmax_better(other_value, other_index, best_value, best_index)) {
      best_value = other_value;
      best_index = other_index;
    }
  }
  int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) {
    warp_value[warp] = best_value;
    warp_index[warp] = best_index;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int k = 1; k < (int)(blockDim.x / 32); k++) {
      if (argmax_better(warp_value[k], warp_index[k], best_value, best_index)) {
        best_value = warp_value[k];
        best_index = warp_index[k];
      }
    }
    argmax[blockIdx.x] = best_index;
  }
}

/* Table entry logits_argmax: one block per row. */
template <typename A>
static void cuda_logits_argmax(const A* logits, int BT, int V, int Vp, int* argmax) {
  if (BT <= 0) return;
  CUDA_LAUNCH(logits_argmax_kernel<A>, BT, THREADS, 0, logits, V, Vp, argmax);
}

// ----------------------------------------------------------------------------
// the table

/* The tables: cuda_<name> for every entry of KERNEL_LIST, in the list's order (the members'
** order; C++17 has no designated initialisers). Each member's type (the list's signature with the
** table's four types) picks the template instance: fp32 storage, then bf16 activations and
** weights with fp32 gradients and statistics. A kernel of the list without a cuda_ function is
** an undeclared name and one no instance fits a type error: both fail the compile. */
#define CUDA_TABLE_ENTRY(ret, name, params) cuda_##name,
const Kernels_f32 cuda_kernels_f32 = {KERNEL_LIST(CUDA_TABLE_ENTRY, float, float, float, float)};
const Kernels_bf16 cuda_kernels_bf16 = {
    KERNEL_LIST(CUDA_TABLE_ENTRY, osdp_bf16, osdp_bf16, float, float)};
#undef CUDA_TABLE_ENTRY
