/*
** cuda_attention.cu: causal self-attention on the GPU, multi-head or grouped-query,
** FlashAttention-2 style: the [T, T] score matrix is never stored. Contract as
** attention_forward / attention_backward in KERNEL_LIST (kernel_list.h): q rows of stride ldq
** holding NH heads of hs, k and v rows of stride ldkv holding NKV heads (query head h reads K/V
** head h / (NH / NKV)), out [B, T, NH*hs], lse [B, NH, T], scores scaled by 1/sqrt(hs), dq, dk,
** dv accumulated. The scratch argument is not used (cuda_attention_scratch_elems is 0). Head
** sizes up to ATT_MAX_HS; any T. These kernels compute in fp32 on CUDA cores; while matrix
** products are on tensor cores (set_matmul_mode: MATMUL_TF32, the default, or MATMUL_BF16),
** head sizes that are multiples of 16 go to the tensor-core kernels of cuda_attention_tc.cu
** instead, in that precision.
**
** Activations (q, k, v, out, dout, dq, dk, dv) may be stored in bf16: every kernel and entry
** point is a template on their storage type A, float or osdp_bf16 (the act role of the kernel
** tables). Values are read widened to fp32 (to_f32) and every result is rounded once, as it is
** stored (store_rounded; dq, dk, dv: the old value plus this pass's fp32 sum); lse is fp32 in
** both. On bf16 storage the head sizes the tensor-core kernels have go to their bf16 instance
** whatever the matmul mode (the values are bf16 already); the others run here, in fp32.
**
** Tiles are ATT_TILE = 32 queries and 32 keys, so that one lane of a warp owns one key (or one
** query) of a tile when scores are formed, and a range of head dimensions (d = lane + 32 j) when
** outputs are accumulated. A block has ATT_WARPS warps, each owning ATT_ROWS_PER_WARP rows of
** the block's tile. Tiles are staged in shared memory; a tile whose rows are read by the lanes
** (lane = row) has row stride hs + 1 so that the 32 lanes hit 32 different banks, a tile whose
** rows are read whole by every lane (broadcast) or along d has stride hs.
**
**   forward:       one block per (query tile, b, h): online softmax over the key tiles of the
**                  causal prefix; writes out and lse.
**   backward dK dV: one block per (key tile, b, K/V head), over the query heads sharing that
**                  K/V head in head order and, for each, the query tiles at or after it;
**   backward dQ:    one block per (query tile, b, h), over the key tiles of its causal prefix.
** Both backward kernels recompute P = exp(S - lse) and D = rowsum(dO * O). Every output element
** is owned by one thread of one block and summed in a fixed order (a K/V head's gradient over
** its group of query heads too): no atomics, deterministic.
*/
#include "kernels/cuda/cuda_internal.cuh"

#include <math.h>
#include <stdio.h>

#define ATT_TILE 32
#define ATT_WARPS 8
#define ATT_THREADS (ATT_WARPS * 32)
#define ATT_ROWS_PER_WARP (ATT_TILE / ATT_WARPS)
#define ATT_MAX_HS 128
#define ATT_DIM_SLOTS (ATT_MAX_HS / 32) /* head dimensions per lane */

/* Shared memory of the forward kernel: Q [32][hs], K [32][hs + 1], V [32][hs]. */
static size_t forward_smem_bytes(int hs) {
  return (size_t)ATT_TILE * (3 * hs + 1) * sizeof(float);
}

/* Shared memory of either backward kernel: two tiles of stride hs + 1, two of stride hs, and
** the 32 lse and 32 D values of the query tile. */
static size_t backward_smem_bytes(int hs) {
  return ((size_t)ATT_TILE * (4 * hs + 2) + 2 * ATT_TILE) * sizeof(float);
}

/* Copies rows row0 .. row0+31 of a head's [T, hs] view (row stride ld, stored as A) into the
** fp32 shared tile dst (row stride sld), widened; rows at or past T become 0. All threads of the
** block take part. */
template <typename A>
static __device__ void load_tile(float* dst, int sld, const A* src, size_t ld, int row0, int T,
                                 int hs) {
  for (int idx = threadIdx.x; idx < ATT_TILE * hs; idx += ATT_THREADS) {
    int r = idx / hs, d = idx % hs;
    int t = row0 + r;
    dst[r * sld + d] = t < T ? to_f32(src[(size_t)t * ld + d]) : 0.0f;
  }
}

/* Forward of query tile blockIdx.x of (b, h) = blockIdx.y. For each key tile of the causal
** prefix, lane k of a warp forms the scaled scores of key k against the warp's rows, and the
** online softmax keeps each row's running max m and sum l of exp(S - m) (warp reductions); the
** unnormalised output, lane owning dimensions lane + 32 j, is rescaled by exp(m_old - m_new)
** and gets P V added. At the end out = O / l and lse = m + log l. Key 0 is valid for every row
** (even rows past T, which are computed but not written), so m is finite after the first tile
** and masked scores (-inf) contribute exp(-inf) = 0. Activations are stored as A; out is
** rounded once to A as it is written. */
template <typename A>
static __global__ void __launch_bounds__(ATT_THREADS)
    attention_forward_kernel(A* out, float* lse, const A* q_all, const A* k_all, const A* v_all,
                             int ldq, int ldkv, int T, int NH, int NKV, int hs, float scale) {
  extern __shared__ float smem[];
  const size_t C = (size_t)NH * hs; /* out's row stride */
  const int bh = blockIdx.y, b = bh / NH, h = bh % NH, kvh = h / (NH / NKV);
  const int q0 = blockIdx.x * ATT_TILE;
  const A* q = q_all + (size_t)b * T * ldq + (size_t)h * hs;
  const A* k = k_all + (size_t)b * T * ldkv + (size_t)kvh * hs;
  const A* v = v_all + (size_t)b * T * ldkv + (size_t)kvh * hs;
  float* Qs = smem;                     /* [32][hs], read by broadcast */
  float* Ks = Qs + ATT_TILE * hs;       /* [32][hs + 1], lane = key */
  float* Vs = Ks + ATT_TILE * (hs + 1); /* [32][hs], lanes along d */
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int row0 = warp * ATT_ROWS_PER_WARP; /* this warp's first row of the tile */

  load_tile(Qs, hs, q, ldq, q0, T, hs);
  float run_max[ATT_ROWS_PER_WARP], run_sum[ATT_ROWS_PER_WARP];
  float acc[ATT_ROWS_PER_WARP][ATT_DIM_SLOTS];
#pragma unroll
  for (int r = 0; r < ATT_ROWS_PER_WARP; r++) {
    run_max[r] = -INFINITY;
    run_sum[r] = 0.0f;
#pragma unroll
    for (int j = 0; j < ATT_DIM_SLOTS; j++) acc[r][j] = 0.0f;
  }
  const int q_last = min(q0 + ATT_TILE, T) - 1;
  for (int k0 = 0; k0 <= q_last; k0 += ATT_TILE) {
    __syncthreads(); /* the previous tile's K and V are no longer read */
    load_tile(Ks, hs + 1, k, ldkv, k0, T, hs);
    load_tile(Vs, hs, v, ldkv, k0, T, hs);
    __syncthreads();
    float s[ATT_ROWS_PER_WARP] = {0};
    const float* krow = Ks + lane * (hs + 1);
    for (int d = 0; d < hs; d++) {
      float kd = krow[d];
#pragma unroll
      for (int r = 0; r < ATT_ROWS_PER_WARP; r++) s[r] += Qs[(row0 + r) * hs + d] * kd;
    }
    const int key = k0 + lane;
    float p[ATT_ROWS_PER_WARP];
#pragma unroll
    for (int r = 0; r < ATT_ROWS_PER_WARP; r++) {
      const int t = q0 + row0 + r;
      float score = key <= t && key < T ? s[r] * scale : -INFINITY;
      float new_max = fmaxf(run_max[r], warp_max(score));
      p[r] = expf(score - new_max);
      float alpha = expf(run_max[r] - new_max); /* 0 on the first tile (run_max = -inf) */
      run_sum[r] = run_sum[r] * alpha + warp_sum(p[r]);
      run_max[r] = new_max;
#pragma unroll
      for (int j = 0; j < ATT_DIM_SLOTS; j++) acc[r][j] *= alpha;
    }
    for (int kk = 0; kk < ATT_TILE; kk++) {
      float pk[ATT_ROWS_PER_WARP];
#pragma unroll
      for (int r = 0; r < ATT_ROWS_PER_WARP; r++) pk[r] = __shfl_sync(CUDA_FULL_WARP, p[r], kk);
#pragma unroll
      for (int j = 0; j < ATT_DIM_SLOTS; j++) {
        const int d = lane + 32 * j;
        if (d < hs) {
          float vd = Vs[kk * hs + d];
#pragma unroll
          for (int r = 0; r < ATT_ROWS_PER_WARP; r++) acc[r][j] += pk[r] * vd;
        }
      }
    }
  }
#pragma unroll
  for (int r = 0; r < ATT_ROWS_PER_WARP; r++) {
    const int t = q0 + row0 + r;
    if (t >= T) continue;
    float inv = 1.0f / run_sum[r];
    A* orow = out + ((size_t)b * T + t) * C + (size_t)h * hs;
#pragma unroll
    for (int j = 0; j < ATT_DIM_SLOTS; j++) {
      const int d = lane + 32 * j;
      if (d < hs) store_rounded(&orow[d], acc[r][j] * inv);
    }
    if (lane == 0) lse[(size_t)bh * T + t] = run_max[r] + logf(run_sum[r]);
  }
}

/* dK and dV of key tile blockIdx.x of (b, K/V head) = blockIdx.y, over the query heads of its
** group in order and, for each, the query tiles from the one at the same position (earlier
** queries see none of these keys) to the end. Warp w owns keys row0 .. row0+3 of the tile. Per
** query tile, lane t forms, for each of the warp's keys,
**   S = scale Q_t . K, P = exp(S - lse_t) (0 where masked), dP = dO_t . V, dS = P (dP - D_t);
** then, lanes along d, dV += sum_t P dO_t and dK += sum_t dS Q_t (scaled at the end). The fp32
** sums are added to dk and dv (stored as A) at the end, each element rounded once. */
template <typename A>
static __global__ void __launch_bounds__(ATT_THREADS)
    attention_backward_dkdv_kernel(A* dk_all, A* dv_all, const A* dout, const A* q_all,
                                   const A* k_all, const A* v_all, int ldq, int ldkv,
                                   const A* out, const float* lse, int T, int NH, int NKV,
                                   int hs, float scale) {
  extern __shared__ float smem[];
  const size_t C = (size_t)NH * hs; /* the row stride of out and dout */
  const int bkv = blockIdx.y, b = bkv / NKV, kvh = bkv % NKV, group = NH / NKV;
  const int k0 = blockIdx.x * ATT_TILE;
  const size_t kvoff = (size_t)b * T * ldkv + (size_t)kvh * hs;
  const A* k = k_all + kvoff;
  const A* v = v_all + kvoff;
  A* dk = dk_all + kvoff;
  A* dv = dv_all + kvoff;
  float* Qs = smem;                       /* [32][hs + 1], lane = query */
  float* dOs = Qs + ATT_TILE * (hs + 1);  /* [32][hs + 1], lane = query */
  float* Ks = dOs + ATT_TILE * (hs + 1);  /* [32][hs], read by broadcast */
  float* Vs = Ks + ATT_TILE * hs;         /* [32][hs], read by broadcast */
  float* lse_s = Vs + ATT_TILE * hs;      /* [32] */
  float* D_s = lse_s + ATT_TILE;          /* [32] */
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int row0 = warp * ATT_ROWS_PER_WARP;

  load_tile(Ks, hs, k, ldkv, k0, T, hs);
  load_tile(Vs, hs, v, ldkv, k0, T, hs);
  float dK[ATT_ROWS_PER_WARP][ATT_DIM_SLOTS], dV[ATT_ROWS_PER_WARP][ATT_DIM_SLOTS];
#pragma unroll
  for (int r = 0; r < ATT_ROWS_PER_WARP; r++) {
#pragma unroll
    for (int j = 0; j < ATT_DIM_SLOTS; j++) {
      dK[r][j] = 0.0f;
      dV[r][j] = 0.0f;
    }
  }
  for (int h = kvh * group; h < (kvh + 1) * group; h++) { /* the group's query heads, in order */
    const A* q = q_all + (size_t)b * T * ldq + (size_t)h * hs;
    const A* dO = dout + (size_t)b * T * C + (size_t)h * hs;
    const A* o = out + (size_t)b * T * C + (size_t)h * hs;
    for (int q0 = k0; q0 < T; q0 += ATT_TILE) {
      __syncthreads(); /* the previous query tile is no longer read */
      load_tile(Qs, hs + 1, q, ldq, q0, T, hs);
      load_tile(dOs, hs + 1, dO, C, q0, T, hs);
      attention_row_stats(lse_s, D_s, lse + ((size_t)b * NH + h) * T, dO, o, C, q0, T, hs,
                          ATT_TILE);
      __syncthreads();
      float s[ATT_ROWS_PER_WARP] = {0}, dp[ATT_ROWS_PER_WARP] = {0};
      const float* qrow = Qs + lane * (hs + 1);
      const float* dorow = dOs + lane * (hs + 1);
      for (int d = 0; d < hs; d++) {
        float qd = qrow[d], dod = dorow[d];
#pragma unroll
        for (int r = 0; r < ATT_ROWS_PER_WARP; r++) {
          s[r] += qd * Ks[(row0 + r) * hs + d];
          dp[r] += dod * Vs[(row0 + r) * hs + d];
        }
      }
      const int t = q0 + lane; /* this lane's query */
      float p[ATT_ROWS_PER_WARP], ds[ATT_ROWS_PER_WARP];
#pragma unroll
      for (int r = 0; r < ATT_ROWS_PER_WARP; r++) {
        const int key = k0 + row0 + r;
        p[r] = key <= t && t < T ? expf(s[r] * scale - lse_s[lane]) : 0.0f;
        ds[r] = p[r] * (dp[r] - D_s[lane]);
      }
      for (int tt = 0; tt < ATT_TILE; tt++) {
        float pt[ATT_ROWS_PER_WARP], dst[ATT_ROWS_PER_WARP];
#pragma unroll
        for (int r = 0; r < ATT_ROWS_PER_WARP; r++) {
          pt[r] = __shfl_sync(CUDA_FULL_WARP, p[r], tt);
          dst[r] = __shfl_sync(CUDA_FULL_WARP, ds[r], tt);
        }
#pragma unroll
        for (int j = 0; j < ATT_DIM_SLOTS; j++) {
          const int d = lane + 32 * j;
          if (d < hs) {
            float dod = dOs[tt * (hs + 1) + d], qd = Qs[tt * (hs + 1) + d];
#pragma unroll
            for (int r = 0; r < ATT_ROWS_PER_WARP; r++) {
              dV[r][j] += pt[r] * dod;
              dK[r][j] += dst[r] * qd;
            }
          }
        }
      }
    }
  }
#pragma unroll
  for (int r = 0; r < ATT_ROWS_PER_WARP; r++) {
    const int key = k0 + row0 + r;
    if (key >= T) continue;
#pragma unroll
    for (int j = 0; j < ATT_DIM_SLOTS; j++) {
      const int d = lane + 32 * j;
      if (d < hs) {
        A* dkp = &dk[(size_t)key * ldkv + d];
        A* dvp = &dv[(size_t)key * ldkv + d];
        store_rounded(dkp, to_f32(*dkp) + scale * dK[r][j]);
        store_rounded(dvp, to_f32(*dvp) + dV[r][j]);
      }
    }
  }
}

/* dQ of query tile blockIdx.x of (b, h) = blockIdx.y, over the key tiles of its causal prefix
** (of K/V head h / (NH / NKV)). Warp w owns queries row0 .. row0+3 of the tile. Per key tile,
** lane k forms, for each of the warp's queries, S, P, dP and dS as in the dK dV kernel; then,
** lanes along d, dQ += sum_k dS K_k (scaled at the end). The fp32 sum is added to dq (stored
** as A) at the end, each element rounded once. */
template <typename A>
static __global__ void __launch_bounds__(ATT_THREADS)
    attention_backward_dq_kernel(A* dq_all, const A* dout, const A* q_all, const A* k_all,
                                 const A* v_all, int ldq, int ldkv, const A* out,
                                 const float* lse, int T, int NH, int NKV, int hs,
                                 float scale) {
  extern __shared__ float smem[];
  const size_t C = (size_t)NH * hs; /* the row stride of out and dout */
  const int bh = blockIdx.y, b = bh / NH, h = bh % NH, kvh = h / (NH / NKV);
  const int q0 = blockIdx.x * ATT_TILE;
  const A* q = q_all + (size_t)b * T * ldq + (size_t)h * hs;
  const A* k = k_all + (size_t)b * T * ldkv + (size_t)kvh * hs;
  const A* v = v_all + (size_t)b * T * ldkv + (size_t)kvh * hs;
  const A* dO = dout + (size_t)b * T * C + (size_t)h * hs;
  const A* o = out + (size_t)b * T * C + (size_t)h * hs;
  A* dq = dq_all + (size_t)b * T * ldq + (size_t)h * hs;
  float* Ks = smem;                      /* [32][hs + 1], lane = key, then lanes along d */
  float* Vs = Ks + ATT_TILE * (hs + 1);  /* [32][hs + 1], lane = key */
  float* Qs = Vs + ATT_TILE * (hs + 1);  /* [32][hs], read by broadcast */
  float* dOs = Qs + ATT_TILE * hs;       /* [32][hs], read by broadcast */
  float* lse_s = dOs + ATT_TILE * hs;    /* [32] */
  float* D_s = lse_s + ATT_TILE;         /* [32] */
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int row0 = warp * ATT_ROWS_PER_WARP;

  load_tile(Qs, hs, q, ldq, q0, T, hs);
  load_tile(dOs, hs, dO, C, q0, T, hs);
  attention_row_stats(lse_s, D_s, lse + (size_t)bh * T, dO, o, C, q0, T, hs, ATT_TILE);
  float dQ[ATT_ROWS_PER_WARP][ATT_DIM_SLOTS];
#pragma unroll
  for (int r = 0; r < ATT_ROWS_PER_WARP; r++) {
#pragma unroll
    for (int j = 0; j < ATT_DIM_SLOTS; j++) dQ[r][j] = 0.0f;
  }
  const int q_last = min(q0 + ATT_TILE, T) - 1;
  for (int k0 = 0; k0 <= q_last; k0 += ATT_TILE) {
    __syncthreads(); /* the previous key tile is no longer read (and the query tile is loaded) */
    load_tile(Ks, hs + 1, k, ldkv, k0, T, hs);
    load_tile(Vs, hs + 1, v, ldkv, k0, T, hs);
    __syncthreads();
    float s[ATT_ROWS_PER_WARP] = {0}, dp[ATT_ROWS_PER_WARP] = {0};
    const float* krow = Ks + lane * (hs + 1);
    const float* vrow = Vs + lane * (hs + 1);
    for (int d = 0; d < hs; d++) {
      float kd = krow[d], vd = vrow[d];
#pragma unroll
      for (int r = 0; r < ATT_ROWS_PER_WARP; r++) {
        s[r] += Qs[(row0 + r) * hs + d] * kd;
        dp[r] += dOs[(row0 + r) * hs + d] * vd;
      }
    }
    const int key = k0 + lane; /* this lane's key */
    float ds[ATT_ROWS_PER_WARP];
#pragma unroll
    for (int r = 0; r < ATT_ROWS_PER_WARP; r++) {
      const int t = q0 + row0 + r;
      float p = key <= t && t < T ? expf(s[r] * scale - lse_s[row0 + r]) : 0.0f;
      ds[r] = p * (dp[r] - D_s[row0 + r]);
    }
    for (int kk = 0; kk < ATT_TILE; kk++) {
      float dsk[ATT_ROWS_PER_WARP];
#pragma unroll
      for (int r = 0; r < ATT_ROWS_PER_WARP; r++)
        dsk[r] = __shfl_sync(CUDA_FULL_WARP, ds[r], kk);
#pragma unroll
      for (int j = 0; j < ATT_DIM_SLOTS; j++) {
        const int d = lane + 32 * j;
        if (d < hs) {
          float kd = Ks[kk * (hs + 1) + d];
#pragma unroll
          for (int r = 0; r < ATT_ROWS_PER_WARP; r++) dQ[r][j] += dsk[r] * kd;
        }
      }
    }
  }
#pragma unroll
  for (int r = 0; r < ATT_ROWS_PER_WARP; r++) {
    const int t = q0 + row0 + r;
    if (t >= T) continue;
#pragma unroll
    for (int j = 0; j < ATT_DIM_SLOTS; j++) {
      const int d = lane + 32 * j;
      if (d < hs) {
        A* dqp = &dq[(size_t)t * ldq + d];
        store_rounded(dqp, to_f32(*dqp) + scale * dQ[r][j]);
      }
    }
  }
}

/* Opts the three kernels of storage A in to the dynamic shared memory that head size
** ATT_MAX_HS needs (above the 48 KiB default). */
template <typename A>
static cudaError_t attention_setup_storage(void) {
  cudaError_t err = cudaFuncSetAttribute(attention_forward_kernel<A>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         (int)forward_smem_bytes(ATT_MAX_HS));
  if (err == cudaSuccess)
    err = cudaFuncSetAttribute(attention_backward_dkdv_kernel<A>,
                               cudaFuncAttributeMaxDynamicSharedMemorySize,
                               (int)backward_smem_bytes(ATT_MAX_HS));
  if (err == cudaSuccess)
    err = cudaFuncSetAttribute(attention_backward_dq_kernel<A>,
                               cudaFuncAttributeMaxDynamicSharedMemorySize,
                               (int)backward_smem_bytes(ATT_MAX_HS));
  return err;
}

/* Opts every kernel that can be launched in to its shared memory, once per process: the three
** kernels here for both storage types (fp32 storage, and bf16 storage's head sizes without a
** tensor-core instance), and the tensor-core ones. */
cudaError_t cuda_attention_setup(void) {
  cudaError_t err = attention_setup_storage<float>();
  if (err == cudaSuccess) err = attention_setup_storage<osdp_bf16>();
  if (err == cudaSuccess) err = cuda_attention_tc_setup();
  return err;
}

/* Aborts on a head layout the kernels do not handle (their per-lane accumulators cover
** ATT_MAX_HS dimensions; NKV must divide NH). */
static void check_heads(int NH, int NKV, int hs) {
  if (NH <= 0 || NKV <= 0 || NH % NKV != 0 || hs <= 0 || hs > ATT_MAX_HS) {
    char message[128];
    snprintf(message, sizeof message,
             "NH = %d, NKV = %d, hs = %d: NKV must divide NH and the head size be 1..%d", NH,
             NKV, hs, ATT_MAX_HS);
    cuda_abort("attention", message);
  }
}

/* The matmul mode in which attention of head size hs on fp32 storage runs on the tensor cores
** (cuda_attention_tc.cu, in that mode's precision, TF32 or bf16), or MATMUL_FP32 when it runs
** here: the tensor cores while matrix products are in one of those modes and for the head sizes
** those kernels have. (The pointer only selects the storage type.) */
static MatmulMode tensor_core_mode(const float*, int hs) {
  const MatmulMode mode = cuda_ctx.matmul_mode;
  return mode != MATMUL_FP32 && cuda_attention_tc_supports(hs) ? mode : MATMUL_FP32;
}

/* The same for bf16 storage: the bf16 tensor-core kernels for every head size they have,
** whatever the matmul mode (the values are bf16 already, so nothing is lost to the format);
** MATMUL_FP32, the kernels here in fp32, for the others. */
static MatmulMode tensor_core_mode(const osdp_bf16*, int hs) {
  return cuda_attention_tc_supports(hs) ? MATMUL_BF16 : MATMUL_FP32;
}

/* No scratch: every tile of both passes is staged in the block's shared memory. */
size_t cuda_attention_scratch_elems(int, int) { return 0; }

/* Table entry attention_forward on activations stored as A: on tensor cores (tensor_core_mode),
** else one block per (query tile, b, h). */
template <typename A>
void cuda_attention_forward(A* out, float* lse, const A* q, const A* k, const A* v, int ldq,
                            int ldkv, float*, int B, int T, int NH, int NKV, int hs) {
  if (B <= 0 || T <= 0) return;
  check_heads(NH, NKV, hs);
  const MatmulMode mode = tensor_core_mode(q, hs);
  if (mode != MATMUL_FP32) {
    cuda_attention_tc_forward(out, lse, q, k, v, ldq, ldkv, B, T, NH, NKV, hs, mode);
    return;
  }
  dim3 grid((T + ATT_TILE - 1) / ATT_TILE, B * NH);
  CUDA_LAUNCH((attention_forward_kernel<A>), grid, ATT_THREADS, forward_smem_bytes(hs), out,
              lse, q, k, v, ldq, ldkv, T, NH, NKV, hs, 1.0f / sqrtf((float)hs));
}

/* Table entry attention_backward on activations stored as A: on tensor cores
** (tensor_core_mode), else the dK dV kernel (a block per key tile and K/V head), then the dQ
** kernel (a block per query tile and query head); they write disjoint buffers, in order on the
** stream. */
template <typename A>
void cuda_attention_backward(A* dq, A* dk, A* dv, const A* dout, const A* q, const A* k,
                             const A* v, int ldq, int ldkv, const A* out, const float* lse,
                             float*, int B, int T, int NH, int NKV, int hs) {
  if (B <= 0 || T <= 0) return;
  check_heads(NH, NKV, hs);
  const MatmulMode mode = tensor_core_mode(q, hs);
  if (mode != MATMUL_FP32) {
    cuda_attention_tc_backward(dq, dk, dv, dout, q, k, v, ldq, ldkv, out, lse, B, T, NH, NKV, hs,
                               mode);
    return;
  }
  float scale = 1.0f / sqrtf((float)hs);
  int tiles = (T + ATT_TILE - 1) / ATT_TILE;
  size_t smem = backward_smem_bytes(hs);
  CUDA_LAUNCH((attention_backward_dkdv_kernel<A>), dim3(tiles, B * NKV), ATT_THREADS, smem, dk,
              dv, dout, q, k, v, ldq, ldkv, out, lse, T, NH, NKV, hs, scale);
  CUDA_LAUNCH((attention_backward_dq_kernel<A>), dim3(tiles, B * NH), ATT_THREADS, smem, dq,
              dout, q, k, v, ldq, ldkv, out, lse, T, NH, NKV, hs, scale);
}

/* The instances the kernel tables point at (cuda_kernels.cu): fp32 and bf16 storage. */
template void cuda_attention_forward<float>(float*, float*, const float*, const float*,
                                            const float*, int, int, float*, int, int, int, int,
                                            int);
template void cuda_attention_forward<osdp_bf16>(osdp_bf16*, float*, const osdp_bf16*,
                                                const osdp_bf16*, const osdp_bf16*, int, int,
                                                float*, int, int, int, int, int);
template void cuda_attention_backward<float>(float*, float*, float*, const float*, const float*,
                                             const float*, const float*, int, int, const float*,
                                             const float*, float*, int, int, int, int, int);
template void cuda_attention_backward<osdp_bf16>(osdp_bf16*, osdp_bf16*, osdp_bf16*,
                                                 const osdp_bf16*, const osdp_bf16*,
                                                 const osdp_bf16*, const osdp_bf16*, int, int,
                                                 const osdp_bf16*, const float*, float*, int,
                                                 int, int, int, int);
