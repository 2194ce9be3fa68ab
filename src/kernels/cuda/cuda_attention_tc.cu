/*
** cuda_attention_tc.cu: causal attention on TF32 tensor cores (WMMA, m16n16k8 with fp32
** accumulation), FlashAttention-2 style, for head sizes that are multiples of 16 up to 128. The
** contract is cuda_attention.cu's (attention_forward / attention_backward of KERNEL_LIST: q rows
** of stride ldq with NH heads, k and v rows of stride ldkv with NKV heads, query head h reading
** K/V head h / (NH / NKV), out [B, T, NH*hs], lse [B, NH, T], dq, dk, dv accumulated); it runs
** when matrix products are in TF32 (set_tf32(1), `--tf32 on`, the default), and
** cuda_attention.cu's fp32 kernels run otherwise, so `--tf32 off` keeps the exact path.
**
** Tiles are 64 queries by 64 keys. A block has 4 warps; each owns 16 rows of the block's tile
** (queries in the forward and the dQ kernel, keys in the dK dV kernel), so the products a warp
** makes, 16 x 64 score tiles and 16 x hs output tiles, touch only its own rows of the shared
** tiles: between its WMMA steps and its scalar (softmax) steps a warp needs only __syncwarp;
** __syncthreads only guards the tiles every warp reads (Q, K, V, dO). Tiles are staged in shared
** memory rounded to TF32 once (__float_to_tf32, to nearest), with rows of hs + 8 floats (64 + 8
** for score tiles): row starts stay 32-byte aligned as WMMA needs, and the 8 extra floats move
** consecutive rows to other banks.
**
**   forward:        one block per (query tile, b, h): S = Q K^T (scaled), online softmax in
**                   fp32 on the warp's rows (running max and sum per row, kept by every lane),
**                   O rescaled in shared memory, O += P V; then out = O / l, lse = m + log l;
**   backward dK dV: one block per (key tile, b, K/V head), over the group's query heads in
**                   order and their query tiles from the key tile's position on:
**                   S^T = K Q^T and dP^T = V dO^T, P = exp(scale S - lse), dS = P (dP - D),
**                   dV += P^T dO and dK += dS^T Q in accumulator fragments held across the loop;
**   backward dQ:    one block per (query tile, b, h), over the key tiles of its causal prefix:
**                   S and dP as above, dQ += dS K.
** D = rowsum(dO * O) is formed in fp32 from global memory. Every output element is summed by one
** warp in a fixed order: no atomics, deterministic. The head size is a template parameter, so
** that every loop over a row's 16-column tiles has a fixed count and fragments stay in registers.
*/
#include "kernels/cuda/cuda_internal.cuh"

#include <math.h>
#include <mma.h>

#include <type_traits>

using namespace nvcuda;

#define TC_TILE 64                    /* queries and keys per tile */
#define TC_WARPS 4
#define TC_THREADS (TC_WARPS * 32)
#define TC_WARP_ROWS 16               /* rows of the tile per warp: one WMMA tile high */
#define TC_PAD 8                      /* floats added to each shared row */
#define TC_SLD (TC_TILE + TC_PAD)     /* row stride of a score tile */

typedef wmma::fragment<wmma::matrix_a, 16, 16, 8, wmma::precision::tf32, wmma::row_major> FragA;
typedef wmma::fragment<wmma::matrix_b, 16, 16, 8, wmma::precision::tf32, wmma::row_major> FragB;
typedef wmma::fragment<wmma::matrix_b, 16, 16, 8, wmma::precision::tf32, wmma::col_major> FragBT;
typedef wmma::fragment<wmma::accumulator, 16, 16, 8, float> FragC;

/* The row stride of a [64][HS] tile in shared memory. */
static __host__ __device__ constexpr int tile_ld(int hs) { return hs + TC_PAD; }

/* Shared floats of the forward: Q, K, V and O tiles, and the warps' score tiles. */
static size_t tc_forward_smem(int hs) {
  return ((size_t)4 * TC_TILE * tile_ld(hs) + (size_t)TC_TILE * TC_SLD) * sizeof(float);
}

/* Shared floats of either backward kernel: four [64][hs] tiles, two score tiles, and the 64
** lse and 64 D values of the query tile. */
static size_t tc_backward_smem(int hs) {
  return ((size_t)4 * TC_TILE * tile_ld(hs) + (size_t)2 * TC_TILE * TC_SLD + 2 * TC_TILE) *
         sizeof(float);
}

/* Rows row0 .. row0+63 of a head's [T, hs] view (row stride ld) into the shared tile dst (row
** stride hs + 8), rounded to TF32; rows at or past T become 0. All threads of the block. */
template <int HS>
static __device__ void tc_load_tile(float* dst, const float* src, size_t ld, int row0, int T) {
  for (int idx = threadIdx.x; idx < TC_TILE * HS; idx += TC_THREADS) {
    int r = idx / HS, d = idx % HS, t = row0 + r;
    dst[r * tile_ld(HS) + d] = t < T ? wmma::__float_to_tf32(src[(size_t)t * ld + d]) : 0.0f;
  }
}

/* The warp's 16 x 64 tile of A B^T into S (row stride TC_SLD): A is 16 rows of a [64][HS] tile
** (a), B the whole [64][HS] tile b, the product summed over HS. */
template <int HS>
static __device__ void tc_scores(float* S, const float* a, const float* b) {
  for (int n = 0; n < TC_TILE / 16; n++) {
    FragC acc;
    wmma::fill_fragment(acc, 0.0f);
    for (int k = 0; k < HS; k += 8) {
      FragA fa;
      FragBT fb; /* B^T: element (k, n) of the operand is b[n][k] */
      wmma::load_matrix_sync(fa, a + k, tile_ld(HS));
      wmma::load_matrix_sync(fb, b + (size_t)n * 16 * tile_ld(HS) + k, tile_ld(HS));
      wmma::mma_sync(acc, fa, fb, acc);
    }
    wmma::store_matrix_sync(S + n * 16, acc, TC_SLD, wmma::mem_row_major);
  }
}

/* acc[j] += P V[:, 16 j .. 16 j + 15] for j < HS / 16: P the warp's 16 x 64 rows of a score
** tile (row stride TC_SLD), V a [64][HS] tile. */
template <int HS>
static __device__ void tc_accumulate(FragC* acc, const float* p, const float* v) {
  for (int k = 0; k < TC_TILE; k += 8) {
    FragA fa;
    wmma::load_matrix_sync(fa, p + k, TC_SLD);
    for (int j = 0; j < HS / 16; j++) {
      FragB fb;
      wmma::load_matrix_sync(fb, v + (size_t)k * tile_ld(HS) + j * 16, tile_ld(HS));
      wmma::mma_sync(acc[j], fa, fb, acc[j]);
    }
  }
}

/* Forward of query tile blockIdx.x of (b, h) = blockIdx.y; see the file's comment. Every lane
** keeps the running max m and sum l of each of its warp's 16 rows (warp reductions give every
** lane the same values). Key 0 is valid for every row (rows past T are computed, not written),
** so m is finite from the first tile on and masked scores add exp(-inf) = 0. */
template <int HS>
static __global__ void __launch_bounds__(TC_THREADS)
    tc_forward_kernel(float* out, float* lse, const float* q_all, const float* k_all, const float* v_all,
                      int ldq, int ldkv, int T, int NH, int NKV, float scale) {
  extern __shared__ float smem[];
  const size_t C = (size_t)NH * HS;
  const int bh = blockIdx.y, b = bh / NH, h = bh % NH, kvh = h / (NH / NKV);
  const int q0 = blockIdx.x * TC_TILE, ld = tile_ld(HS);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, row0 = warp * TC_WARP_ROWS;
  float* Qs = smem;
  float* Ks = Qs + TC_TILE * ld;
  float* Vs = Ks + TC_TILE * ld;
  float* Os = Vs + TC_TILE * ld;
  float* Ss = Os + TC_TILE * ld;
  float* Sw = Ss + row0 * TC_SLD; /* this warp's rows */
  float* Ow = Os + row0 * ld;
  tc_load_tile<HS>(Qs, q_all + (size_t)b * T * ldq + (size_t)h * HS, ldq, q0, T);
  for (int idx = threadIdx.x; idx < TC_TILE * ld; idx += TC_THREADS) Os[idx] = 0.0f;
  float m[TC_WARP_ROWS], l[TC_WARP_ROWS];
#pragma unroll
  for (int r = 0; r < TC_WARP_ROWS; r++) { m[r] = -INFINITY; l[r] = 0.0f; }
  const int q_last = min(q0 + TC_TILE, T) - 1;
  for (int k0 = 0; k0 <= q_last; k0 += TC_TILE) {
    __syncthreads(); /* every warp is done with the previous K and V (and Q, O are ready) */
    tc_load_tile<HS>(Ks, k_all + (size_t)b * T * ldkv + (size_t)kvh * HS, ldkv, k0, T);
    tc_load_tile<HS>(Vs, v_all + (size_t)b * T * ldkv + (size_t)kvh * HS, ldkv, k0, T);
    __syncthreads();
    tc_scores<HS>(Sw, Qs + row0 * ld, Ks);
    __syncwarp();
#pragma unroll /* m and l stay in registers */
    for (int r = 0; r < TC_WARP_ROWS; r++) {
      const int t = q0 + row0 + r;
      float s[2], p[2];
      for (int c = 0; c < 2; c++) {
        const int key = k0 + lane + 32 * c;
        s[c] = key <= t && key < T ? Sw[r * TC_SLD + lane + 32 * c] * scale : -INFINITY;
      }
      const float new_m = fmaxf(m[r], warp_max(fmaxf(s[0], s[1])));
      for (int c = 0; c < 2; c++) p[c] = expf(s[c] - new_m);
      const float alpha = expf(m[r] - new_m); /* 0 on the first tile (m = -inf) */
      l[r] = l[r] * alpha + warp_sum(p[0] + p[1]);
      m[r] = new_m;
      for (int c = 0; c < 2; c++) Sw[r * TC_SLD + lane + 32 * c] = wmma::__float_to_tf32(p[c]);
      for (int d = lane; d < HS; d += 32) Ow[r * ld + d] *= alpha;
    }
    __syncwarp();
    FragC acc[HS / 16];
    for (int j = 0; j < HS / 16; j++) wmma::load_matrix_sync(acc[j], Ow + j * 16, ld, wmma::mem_row_major);
    tc_accumulate<HS>(acc, Sw, Vs);
    for (int j = 0; j < HS / 16; j++) wmma::store_matrix_sync(Ow + j * 16, acc[j], ld, wmma::mem_row_major);
    __syncwarp();
  }
#pragma unroll
  for (int r = 0; r < TC_WARP_ROWS; r++) {
    const int t = q0 + row0 + r;
    if (t >= T) continue;
    const float inv = 1.0f / l[r];
    float* orow = out + ((size_t)b * T + t) * C + (size_t)h * HS;
    for (int d = lane; d < HS; d += 32) orow[d] = Ow[r * ld + d] * inv;
    if (lane == 0) lse[(size_t)bh * T + t] = m[r] + logf(l[r]);
  }
}

/* Adds scale x the warp's 16 x HS accumulator rows (staged through its rows of the [64][HS]
** shared tile stage) into rows row0 + (0 .. 15) of the global view g (row stride ldg), skipping
** rows at or past T. */
template <int HS>
static __device__ void tc_add_rows(float* g, size_t ldg, const FragC* acc, float* stage, int row0, int T,
                                   float scale) {
  const int lane = threadIdx.x % 32, ld = tile_ld(HS);
  for (int j = 0; j < HS / 16; j++) wmma::store_matrix_sync(stage + j * 16, acc[j], ld, wmma::mem_row_major);
  __syncwarp();
  for (int r = 0; r < TC_WARP_ROWS; r++) {
    if (row0 + r >= T) break;
    for (int d = lane; d < HS; d += 32) g[(size_t)(row0 + r) * ldg + d] += scale * stage[r * ld + d];
  }
}

/* dK and dV of key tile blockIdx.x of (b, K/V head) = blockIdx.y; see the file's comment. The
** warp's score tiles are transposed (row = key, column = query). */
template <int HS>
static __global__ void __launch_bounds__(TC_THREADS)
    tc_backward_dkdv_kernel(float* dk_all, float* dv_all, const float* dout, const float* q_all,
                            const float* k_all, const float* v_all, int ldq, int ldkv, const float* out,
                            const float* lse, int T, int NH, int NKV, float scale) {
  extern __shared__ float smem[];
  const size_t C = (size_t)NH * HS;
  const int bkv = blockIdx.y, b = bkv / NKV, kvh = bkv % NKV, group = NH / NKV;
  const int k0 = blockIdx.x * TC_TILE, ld = tile_ld(HS);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, row0 = warp * TC_WARP_ROWS;
  const size_t kvoff = (size_t)b * T * ldkv + (size_t)kvh * HS;
  float* Ks = smem;
  float* Vs = Ks + TC_TILE * ld;
  float* Qs = Vs + TC_TILE * ld;
  float* dOs = Qs + TC_TILE * ld;
  float* Ps = dOs + TC_TILE * ld;      /* P^T of the warp's keys, then P^T rounded */
  float* dSs = Ps + TC_TILE * TC_SLD;  /* dP^T, then dS^T rounded */
  float* lse_s = dSs + TC_TILE * TC_SLD;
  float* D_s = lse_s + TC_TILE;
  float* Pw = Ps + row0 * TC_SLD;
  float* dSw = dSs + row0 * TC_SLD;
  tc_load_tile<HS>(Ks, k_all + kvoff, ldkv, k0, T);
  tc_load_tile<HS>(Vs, v_all + kvoff, ldkv, k0, T);
  FragC dK[HS / 16], dV[HS / 16];
  for (int j = 0; j < HS / 16; j++) { wmma::fill_fragment(dK[j], 0.0f); wmma::fill_fragment(dV[j], 0.0f); }
  for (int h = kvh * group; h < (kvh + 1) * group; h++) { /* the group's query heads, in order */
    const float* dO = dout + (size_t)b * T * C + (size_t)h * HS;
    for (int q0 = k0; q0 < T; q0 += TC_TILE) {
      __syncthreads(); /* every warp is done with the previous query tile */
      tc_load_tile<HS>(Qs, q_all + (size_t)b * T * ldq + (size_t)h * HS, ldq, q0, T);
      tc_load_tile<HS>(dOs, dO, C, q0, T);
      attention_row_stats(lse_s, D_s, lse + ((size_t)b * NH + h) * T, dO,
                          out + (size_t)b * T * C + (size_t)h * HS, C, q0, T, HS, TC_TILE);
      __syncthreads();
      tc_scores<HS>(Pw, Ks + row0 * ld, Qs);   /* S^T */
      tc_scores<HS>(dSw, Vs + row0 * ld, dOs); /* dP^T */
      __syncwarp();
      for (int r = 0; r < TC_WARP_ROWS; r++) {
        const int key = k0 + row0 + r;
        for (int c = 0; c < 2; c++) {
          const int qi = lane + 32 * c, t = q0 + qi;
          const float p = key <= t && t < T && key < T ? expf(Pw[r * TC_SLD + qi] * scale - lse_s[qi]) : 0.0f;
          const float ds = p * (dSw[r * TC_SLD + qi] - D_s[qi]);
          Pw[r * TC_SLD + qi] = wmma::__float_to_tf32(p);
          dSw[r * TC_SLD + qi] = wmma::__float_to_tf32(ds);
        }
      }
      __syncwarp();
      tc_accumulate<HS>(dV, Pw, dOs); /* dV += P^T dO */
      tc_accumulate<HS>(dK, dSw, Qs); /* dK += dS^T Q */
    }
  }
  __syncthreads(); /* the Q and dO tiles become the warps' staging rows */
  tc_add_rows<HS>(dk_all + kvoff + (size_t)k0 * ldkv, ldkv, dK, Qs + row0 * ld, row0, T - k0, scale);
  tc_add_rows<HS>(dv_all + kvoff + (size_t)k0 * ldkv, ldkv, dV, dOs + row0 * ld, row0, T - k0, 1.0f);
}

/* dQ of query tile blockIdx.x of (b, h) = blockIdx.y; see the file's comment. */
template <int HS>
static __global__ void __launch_bounds__(TC_THREADS)
    tc_backward_dq_kernel(float* dq_all, const float* dout, const float* q_all, const float* k_all,
                          const float* v_all, int ldq, int ldkv, const float* out, const float* lse, int T,
                          int NH, int NKV, float scale) {
  extern __shared__ float smem[];
  const size_t C = (size_t)NH * HS;
  const int bh = blockIdx.y, b = bh / NH, h = bh % NH, kvh = h / (NH / NKV);
  const int q0 = blockIdx.x * TC_TILE, ld = tile_ld(HS);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, row0 = warp * TC_WARP_ROWS;
  const float* dO = dout + (size_t)b * T * C + (size_t)h * HS;
  float* Qs = smem;
  float* dOs = Qs + TC_TILE * ld;
  float* Ks = dOs + TC_TILE * ld;
  float* Vs = Ks + TC_TILE * ld;
  float* Ss = Vs + TC_TILE * ld;       /* S, then dS rounded */
  float* dPs = Ss + TC_TILE * TC_SLD;
  float* lse_s = dPs + TC_TILE * TC_SLD;
  float* D_s = lse_s + TC_TILE;
  float* Sw = Ss + row0 * TC_SLD;
  float* dPw = dPs + row0 * TC_SLD;
  tc_load_tile<HS>(Qs, q_all + (size_t)b * T * ldq + (size_t)h * HS, ldq, q0, T);
  tc_load_tile<HS>(dOs, dO, C, q0, T);
  attention_row_stats(lse_s, D_s, lse + (size_t)bh * T, dO, out + (size_t)b * T * C + (size_t)h * HS, C, q0,
                      T, HS, TC_TILE);
  FragC dQ[HS / 16];
  for (int j = 0; j < HS / 16; j++) wmma::fill_fragment(dQ[j], 0.0f);
  const int q_last = min(q0 + TC_TILE, T) - 1;
  for (int k0 = 0; k0 <= q_last; k0 += TC_TILE) {
    __syncthreads(); /* every warp is done with the previous K and V (and Q, dO, stats are ready) */
    tc_load_tile<HS>(Ks, k_all + (size_t)b * T * ldkv + (size_t)kvh * HS, ldkv, k0, T);
    tc_load_tile<HS>(Vs, v_all + (size_t)b * T * ldkv + (size_t)kvh * HS, ldkv, k0, T);
    __syncthreads();
    tc_scores<HS>(Sw, Qs + row0 * ld, Ks);   /* S */
    tc_scores<HS>(dPw, dOs + row0 * ld, Vs); /* dP */
    __syncwarp();
    for (int r = 0; r < TC_WARP_ROWS; r++) {
      const int qi = row0 + r, t = q0 + qi;
      for (int c = 0; c < 2; c++) {
        const int kj = lane + 32 * c, key = k0 + kj;
        const float p = key <= t && t < T ? expf(Sw[r * TC_SLD + kj] * scale - lse_s[qi]) : 0.0f;
        Sw[r * TC_SLD + kj] = wmma::__float_to_tf32(p * (dPw[r * TC_SLD + kj] - D_s[qi]));
      }
    }
    __syncwarp();
    tc_accumulate<HS>(dQ, Sw, Ks); /* dQ += dS K */
  }
  __syncthreads(); /* the K tile becomes the warps' staging rows */
  tc_add_rows<HS>(dq_all + (size_t)b * T * ldq + (size_t)h * HS + (size_t)q0 * ldq, ldq, dQ, Ks + row0 * ld,
                  row0, T - q0, scale);
}

/* Calls f(std::integral_constant<int, HS>()) for the instance of head size hs; 0, or -1 when
** no instance has that size. */
template <typename F>
static int with_head_size(int hs, F f) {
  switch (hs) {
    case 16: f(std::integral_constant<int, 16>()); return 0;
    case 32: f(std::integral_constant<int, 32>()); return 0;
    case 48: f(std::integral_constant<int, 48>()); return 0;
    case 64: f(std::integral_constant<int, 64>()); return 0;
    case 80: f(std::integral_constant<int, 80>()); return 0;
    case 96: f(std::integral_constant<int, 96>()); return 0;
    case 112: f(std::integral_constant<int, 112>()); return 0;
    case 128: f(std::integral_constant<int, 128>()); return 0;
    default: return -1;
  }
}

int cuda_attention_tc_supports(int hs) { return with_head_size(hs, [](auto) {}) == 0; }

cudaError_t cuda_attention_tc_setup(void) {
  cudaError_t err = cudaSuccess;
  for (int hs = 16; hs <= 128; hs += 16)
    with_head_size(hs, [&](auto size) {
      constexpr int HS = decltype(size)::value;
      const int fwd = (int)tc_forward_smem(HS), bwd = (int)tc_backward_smem(HS);
      const cudaFuncAttribute max_smem = cudaFuncAttributeMaxDynamicSharedMemorySize;
      if (err == cudaSuccess) err = cudaFuncSetAttribute(tc_forward_kernel<HS>, max_smem, fwd);
      if (err == cudaSuccess) err = cudaFuncSetAttribute(tc_backward_dkdv_kernel<HS>, max_smem, bwd);
      if (err == cudaSuccess) err = cudaFuncSetAttribute(tc_backward_dq_kernel<HS>, max_smem, bwd);
    });
  return err;
}

void cuda_attention_tc_forward(float* out, float* lse, const float* q, const float* k, const float* v, int ldq,
                               int ldkv, int B, int T, int NH, int NKV, int hs) {
  const dim3 grid((T + TC_TILE - 1) / TC_TILE, B * NH);
  const float scale = 1.0f / sqrtf((float)hs);
  int rc = with_head_size(hs, [&](auto size) {
    constexpr int HS = decltype(size)::value;
    CUDA_LAUNCH(tc_forward_kernel<HS>, grid, TC_THREADS, tc_forward_smem(HS), out, lse, q, k, v,
                ldq, ldkv, T, NH, NKV, scale);
  });
  if (rc) cuda_abort("attention", "tensor-core attention called for a head size it is not built for");
}

void cuda_attention_tc_backward(float* dq, float* dk, float* dv, const float* dout, const float* q,
                                const float* k, const float* v, int ldq, int ldkv, const float* out,
                                const float* lse, int B, int T, int NH, int NKV, int hs) {
  const int tiles = (T + TC_TILE - 1) / TC_TILE;
  const float scale = 1.0f / sqrtf((float)hs);
  int rc = with_head_size(hs, [&](auto size) {
    constexpr int HS = decltype(size)::value;
    const size_t smem = tc_backward_smem(HS);
    CUDA_LAUNCH(tc_backward_dkdv_kernel<HS>, dim3(tiles, B * NKV), TC_THREADS, smem, dk, dv, dout, q,
                k, v, ldq, ldkv, out, lse, T, NH, NKV, scale);
    CUDA_LAUNCH(tc_backward_dq_kernel<HS>, dim3(tiles, B * NH), TC_THREADS, smem, dq, dout, q, k, v,
                ldq, ldkv, out, lse, T, NH, NKV, scale);
  });
  if (rc) cuda_abort("attention", "tensor-core attention called for a head size it is not built for");
}
