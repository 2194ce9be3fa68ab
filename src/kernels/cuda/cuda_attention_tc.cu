/*
** cuda_attention_tc.cu: causal attention on tensor cores (WMMA, fp32 accumulation),
** FlashAttention-2 style, for head sizes that are multiples of 16 up to 128, in two precisions
** from one source: TF32 (m16n16k8 on fp32 tiles rounded to TF32) while matrix products are in
** TF32 (set_matmul_mode(MATMUL_TF32), `--matmul tf32`, the default) and bf16 (m16n16k16 on
** __nv_bfloat16 tiles) while they are in bf16 (MATMUL_BF16, `--matmul bf16`). The contract is
** cuda_attention.cu's (attention_forward / attention_backward of KERNEL_LIST: q rows of stride ldq
** with NH heads, k and v rows of stride ldkv with NKV heads, query head h reading K/V head
** h / (NH / NKV), out [B, T, NH*hs], lse [B, NH, T], dq, dk, dv accumulated);
** cuda_attention.cu's fp32 kernels run in fp32 mode (`--matmul fp32`: the exact path) and for
** other head sizes.
**
** Activations (q, k, v, out, dout, dq, dk, dv) may be stored in bf16: the kernels and entry
** points are also templates on their storage type A, float or osdp_bf16. Values are read
** widened to fp32 (to_f32) and rounded for P as they are staged (from bf16 into a bf16 tile:
** exact); every result is rounded once, as it is stored (store_rounded; dq, dk, dv: the old
** value plus this pass's fp32 sum). lse is fp32 in both. bf16 storage only runs the bf16
** kernels (cuda_attention.cu passes MATMUL_BF16 whatever the mode): only those are instantiated
** for it.
**
** Every kernel is a template on a precision P (TcTf32 or TcBf16 below: the element type of the
** shared tiles, WMMA's k, the rounding) and on the head size. What is rounded: the Q, K, V and
** dO tiles once, as they are staged in shared memory (TF32: to nearest, ties away, as
** cvt.rna.tf32.f32; bf16: to nearest even), and P and dS just before their products. What stays
** fp32: the softmax statistics (running max and sum), lse, D = rowsum(dO * O) (formed from
** global memory), the scores S and dP, and every accumulator (O, dQ, dK, dV). The relative
** error against fp32 is therefore a small multiple of the format's unit roundoff: 2^-11 for
** TF32, 2^-8 for bf16.
**
** Tiles are 64 queries by 64 keys. A block has 4 warps; each owns 16 rows of the block's tile
** (queries in the forward and the dQ kernel, keys in the dK dV kernel), so the products a warp
** makes, 16 x 64 score tiles and 16 x hs output tiles, touch only its own rows of the shared
** tiles: between its WMMA steps and its scalar (softmax) steps a warp needs only __syncwarp;
** __syncthreads only guards the tiles every warp reads (Q, K, V, dO). Shared rows are hs + 8
** elements (64 + 8 for score tiles): WMMA tiles start on rows that are multiples of 8 (TF32) or
** 16 (bf16), so they stay 32-byte aligned, and the 8 extra elements move consecutive rows to
** other banks. Score tiles are floats (what the accumulators store); the rounded P and dS
** overwrite them in place in TF32 (a TF32 value is a float), and go to tiles of their own in
** bf16.
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
** Every output element is summed by one warp in a fixed order: no atomics, deterministic. The
** head size is a template parameter, so that every loop over a row's 16-column tiles has a fixed
** count and fragments stay in registers.
*/
#include "kernels/cuda/cuda_internal.cuh"

#include <cuda_bf16.h>
#include <math.h>
#include <mma.h>

#include <initializer_list>
#include <type_traits>

using namespace nvcuda;

#define TC_TILE 64                    /* queries and keys per tile */
#define TC_WARPS 4
#define TC_THREADS (TC_WARPS * 32)
#define TC_WARP_ROWS 16               /* rows of the tile per warp: one WMMA tile high */
#define TC_PAD 8                      /* elements added to each shared row */
#define TC_SLD (TC_TILE + TC_PAD)     /* row stride of a score tile */

/* The TF32 kernels: shared tiles of floats holding TF32 values (rounded to nearest, ties away:
** cvt.rna.tf32.f32), WMMA m16n16k8; the rounded P and dS overwrite their float score tiles. */
struct TcTf32 {
  typedef float Elem;                       /* a shared tile's element */
  typedef wmma::precision::tf32 FragElem;   /* the WMMA fragments' element type */
  static constexpr int K = 8;               /* WMMA's k: the products' depth per mma_sync */
  static constexpr bool ROUNDS_IN_PLACE = true;
  /* x rounded to TF32 (kept in a float), as the tensor cores should read it. */
  static __device__ __forceinline__ float round(float x) { return wmma::__float_to_tf32(x); }
};

/* The bf16 kernels: shared tiles of __nv_bfloat16 (rounded to nearest even), WMMA m16n16k16
** (each product exact in fp32, fp32 accumulation); P and dS go to bf16 tiles of their own. */
struct TcBf16 {
  typedef __nv_bfloat16 Elem;                /* a shared tile's element */
  typedef __nv_bfloat16 FragElem;            /* for bf16, WMMA's precision is the element type */
  static constexpr int K = 16;               /* WMMA's k */
  static constexpr bool ROUNDS_IN_PLACE = false;
  /* x rounded to bf16. */
  static __device__ __forceinline__ __nv_bfloat16 round(float x) { return __float2bfloat16_rn(x); }
};

/* The fragments of precision P: A row-major, B row-major or column-major (B^T), fp32
** accumulator. */
template <class P>
using FragA = wmma::fragment<wmma::matrix_a, 16, 16, P::K, typename P::FragElem, wmma::row_major>;
template <class P>
using FragB = wmma::fragment<wmma::matrix_b, 16, 16, P::K, typename P::FragElem, wmma::row_major>;
template <class P>
using FragBT = wmma::fragment<wmma::matrix_b, 16, 16, P::K, typename P::FragElem, wmma::col_major>;
template <class P>
using FragC = wmma::fragment<wmma::accumulator, 16, 16, P::K, float>;

/* The row stride of a [64][HS] tile in shared memory, in elements. */
static __host__ __device__ constexpr int tile_ld(int hs) { return hs + TC_PAD; }

/* Bytes of a [64][hs] tile of elements E in shared memory. */
template <class E>
static __host__ __device__ constexpr size_t tile_bytes(int hs) {
  return sizeof(E) * TC_TILE * tile_ld(hs);
}

/* Bytes of a [64][64] score tile of elements E in shared memory. */
template <class E>
static __host__ __device__ constexpr size_t score_bytes() {
  return sizeof(E) * TC_TILE * TC_SLD;
}

/* Bytes of the tile a score tile's rounded copy needs: none where P rounds in place. */
template <class P>
static __host__ __device__ constexpr size_t rounded_score_bytes() {
  return P::ROUNDS_IN_PLACE ? 0 : score_bytes<typename P::Elem>();
}

/* Shared memory of the forward, in the order the kernel takes it: the Q, K and V tiles, the O
** tile and the score tile (floats), the rounded P tile. */
template <class P>
static size_t tc_forward_smem(int hs) {
  return 3 * tile_bytes<typename P::Elem>(hs) + tile_bytes<float>(hs) + score_bytes<float>() +
         rounded_score_bytes<P>();
}

/* Shared memory of either backward kernel, in the order the kernels take it: four [64][hs]
** tiles, two float score tiles and their rounded copies (the dQ kernel needs one), and the 64
** lse and 64 D values of the query tile. */
template <class P>
static size_t tc_backward_smem(int hs) {
  return 4 * tile_bytes<typename P::Elem>(hs) + 2 * score_bytes<float>() +
         2 * rounded_score_bytes<P>() + 2 * TC_TILE * sizeof(float);
}

/* Hands out a kernel's dynamic shared memory as consecutive arrays, in the order its
** tc_*_smem function counts them. */
struct SmemCarver {
  char* next;
  /* The next `bytes` bytes, as an array of E. */
  template <class E>
  __device__ E* take(size_t bytes) {
    E* p = reinterpret_cast<E*>(next);
    next += bytes;
    return p;
  }
  /* Where the rounded copy of the float score tile `scores` goes: over the tile itself where P
  ** rounds in place (TF32), else the next [64][64] tile of P::Elem. */
  template <class P>
  __device__ typename P::Elem* rounded(float* scores) {
    if constexpr (P::ROUNDS_IN_PLACE) return reinterpret_cast<typename P::Elem*>(scores);
    return take<typename P::Elem>(score_bytes<typename P::Elem>());
  }
};

/* Rows row0 .. row0+63 of a head's [T, hs] view (row stride ld, stored as A) into the shared
** tile dst (row stride hs + 8), widened and rounded for precision P (exact from bf16 into bf16);
** rows at or past T become 0. All threads of the block. */
template <class P, int HS, typename A>
static __device__ void tc_load_tile(typename P::Elem* dst, const A* src, size_t ld, int row0,
                                    int T) {
  for (int idx = threadIdx.x; idx < TC_TILE * HS; idx += TC_THREADS) {
    int r = idx / HS, d = idx % HS, t = row0 + r;
    dst[r * tile_ld(HS) + d] = P::round(t < T ? to_f32(src[(size_t)t * ld + d]) : 0.0f);
  }
}

/* The warp's 16 x 64 tile of A B^T into S (floats, row stride TC_SLD): A is 16 rows of a
** [64][HS] tile (a), B the whole [64][HS] tile b, the product summed over HS. */
template <class P, int HS>
static __device__ void tc_scores(float* S, const typename P::Elem* a, const typename P::Elem* b) {
  for (int n = 0; n < TC_TILE / 16; n++) {
    FragC<P> acc;
    wmma::fill_fragment(acc, 0.0f);
    for (int k = 0; k < HS; k += P::K) {
      FragA<P> fa;
      FragBT<P> fb; /* B^T: element (k, n) of the operand is b[n][k] */
      wmma::load_matrix_sync(fa, a + k, tile_ld(HS));
      wmma::load_matrix_sync(fb, b + (size_t)n * 16 * tile_ld(HS) + k, tile_ld(HS));
      wmma::mma_sync(acc, fa, fb, acc);
    }
    wmma::store_matrix_sync(S + n * 16, acc, TC_SLD, wmma::mem_row_major);
  }
}

/* acc[j] += P V[:, 16 j .. 16 j + 15] for j < HS / 16: P the warp's 16 x 64 rows of a rounded
** score tile (row stride TC_SLD), V a [64][HS] tile. */
template <class P, int HS>
static __device__ void tc_accumulate(FragC<P>* acc, const typename P::Elem* p,
                                     const typename P::Elem* v) {
  for (int k = 0; k < TC_TILE; k += P::K) {
    FragA<P> fa;
    wmma::load_matrix_sync(fa, p + k, TC_SLD);
    for (int j = 0; j < HS / 16; j++) {
      FragB<P> fb;
      wmma::load_matrix_sync(fb, v + (size_t)k * tile_ld(HS) + j * 16, tile_ld(HS));
      wmma::mma_sync(acc[j], fa, fb, acc[j]);
    }
  }
}

/* Forward of query tile blockIdx.x of (b, h) = blockIdx.y; see the file's comment. Every lane
** keeps the running max m and sum l of each of its warp's 16 rows (warp reductions give every
** lane the same values); l sums the probabilities in fp32, before they are rounded for P V. Key 0
** is valid for every row (rows past T are computed, not written), so m is finite from the first
** tile on and masked scores add exp(-inf) = 0. Activations are stored as A; out is rounded once
** to A as it is written. */
template <class P, int HS, typename A>
static __global__ void __launch_bounds__(TC_THREADS)
    tc_forward_kernel(A* out, float* lse, const A* q_all, const A* k_all, const A* v_all,
                      int ldq, int ldkv, int T, int NH, int NKV, float scale) {
  typedef typename P::Elem Elem;
  extern __shared__ float smem[];
  const size_t C = (size_t)NH * HS;
  const int bh = blockIdx.y, b = bh / NH, h = bh % NH, kvh = h / (NH / NKV);
  const int q0 = blockIdx.x * TC_TILE, ld = tile_ld(HS);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, row0 = warp * TC_WARP_ROWS;
  SmemCarver carve{reinterpret_cast<char*>(smem)};
  Elem* Qs = carve.take<Elem>(tile_bytes<Elem>(HS));
  Elem* Ks = carve.take<Elem>(tile_bytes<Elem>(HS));
  Elem* Vs = carve.take<Elem>(tile_bytes<Elem>(HS));
  float* Os = carve.take<float>(tile_bytes<float>(HS));
  float* Ss = carve.take<float>(score_bytes<float>());
  Elem* Ps = carve.rounded<P>(Ss);
  float* Sw = Ss + row0 * TC_SLD; /* this warp's rows */
  Elem* Pw = Ps + row0 * TC_SLD;
  float* Ow = Os + row0 * ld;
  tc_load_tile<P, HS>(Qs, q_all + (size_t)b * T * ldq + (size_t)h * HS, ldq, q0, T);
  for (int idx = threadIdx.x; idx < TC_TILE * ld; idx += TC_THREADS) Os[idx] = 0.0f;
  float m[TC_WARP_ROWS], l[TC_WARP_ROWS];
#pragma unroll
  for (int r = 0; r < TC_WARP_ROWS; r++) {
    m[r] = -INFINITY;
    l[r] = 0.0f;
  }
  const int q_last = min(q0 + TC_TILE, T) - 1;
  for (int k0 = 0; k0 <= q_last; k0 += TC_TILE) {
    __syncthreads(); /* every warp is done with the previous K and V (and Q, O are ready) */
    tc_load_tile<P, HS>(Ks, k_all + (size_t)b * T * ldkv + (size_t)kvh * HS, ldkv, k0, T);
    tc_load_tile<P, HS>(Vs, v_all + (size_t)b * T * ldkv + (size_t)kvh * HS, ldkv, k0, T);
    __syncthreads();
    tc_scores<P, HS>(Sw, Qs + row0 * ld, Ks);
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
      for (int c = 0; c < 2; c++) Pw[r * TC_SLD + lane + 32 * c] = P::round(p[c]);
      for (int d = lane; d < HS; d += 32) Ow[r * ld + d] *= alpha;
    }
    __syncwarp();
    FragC<P> acc[HS / 16];
    for (int j = 0; j < HS / 16; j++)
      wmma::load_matrix_sync(acc[j], Ow + j * 16, ld, wmma::mem_row_major);
    tc_accumulate<P, HS>(acc, Pw, Vs);
    for (int j = 0; j < HS / 16; j++)
      wmma::store_matrix_sync(Ow + j * 16, acc[j], ld, wmma::mem_row_major);
    __syncwarp();
  }
#pragma unroll
  for (int r = 0; r < TC_WARP_ROWS; r++) {
    const int t = q0 + row0 + r;
    if (t >= T) continue;
    const float inv = 1.0f / l[r];
    A* orow = out + ((size_t)b * T + t) * C + (size_t)h * HS;
    for (int d = lane; d < HS; d += 32) store_rounded(&orow[d], Ow[r * ld + d] * inv);
    if (lane == 0) lse[(size_t)bh * T + t] = m[r] + logf(l[r]);
  }
}

/* Adds scale x the warp's 16 x HS accumulator rows (staged through the warp's rows stage[0 ..
** 16 * (HS + 8)), floats) into rows row0 + (0 .. 15) of the global view g (row stride ldg,
** stored as A: the old value widened, the sum in fp32, rounded once), skipping rows at or past
** T. */
template <class P, int HS, typename A>
static __device__ void tc_add_rows(A* g, size_t ldg, const FragC<P>* acc, float* stage,
                                   int row0, int T, float scale) {
  const int lane = threadIdx.x % 32, ld = tile_ld(HS);
  for (int j = 0; j < HS / 16; j++)
    wmma::store_matrix_sync(stage + j * 16, acc[j], ld, wmma::mem_row_major);
  __syncwarp();
  for (int r = 0; r < TC_WARP_ROWS; r++) {
    if (row0 + r >= T) break;
    for (int d = lane; d < HS; d += 32) {
      A* p = &g[(size_t)(row0 + r) * ldg + d];
      store_rounded(p, to_f32(*p) + scale * stage[r * ld + d]);
    }
  }
}

/* dK and dV of key tile blockIdx.x of (b, K/V head) = blockIdx.y; see the file's comment. The
** warp's score tiles are transposed (row = key, column = query). Activations are stored as A. */
template <class P, int HS, typename A>
static __global__ void __launch_bounds__(TC_THREADS)
    tc_backward_dkdv_kernel(A* dk_all, A* dv_all, const A* dout, const A* q_all, const A* k_all,
                            const A* v_all, int ldq, int ldkv, const A* out, const float* lse,
                            int T, int NH, int NKV, float scale) {
  typedef typename P::Elem Elem;
  extern __shared__ float smem[];
  const size_t C = (size_t)NH * HS;
  const int bkv = blockIdx.y, b = bkv / NKV, kvh = bkv % NKV, group = NH / NKV;
  const int k0 = blockIdx.x * TC_TILE, ld = tile_ld(HS);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, row0 = warp * TC_WARP_ROWS;
  const size_t kvoff = (size_t)b * T * ldkv + (size_t)kvh * HS;
  SmemCarver carve{reinterpret_cast<char*>(smem)};
  Elem* Ks = carve.take<Elem>(tile_bytes<Elem>(HS));
  Elem* Vs = carve.take<Elem>(tile_bytes<Elem>(HS));
  Elem* Qs = carve.take<Elem>(tile_bytes<Elem>(HS));
  Elem* dOs = carve.take<Elem>(tile_bytes<Elem>(HS));
  float* Ss = carve.take<float>(score_bytes<float>());  /* S^T of the warp's keys */
  float* dPs = carve.take<float>(score_bytes<float>()); /* dP^T */
  Elem* Ps = carve.rounded<P>(Ss);                      /* P^T rounded */
  Elem* dSs = carve.rounded<P>(dPs);                    /* dS^T rounded */
  float* lse_s = carve.take<float>(TC_TILE * sizeof(float));
  float* D_s = carve.take<float>(TC_TILE * sizeof(float));
  float* Sw = Ss + row0 * TC_SLD;
  float* dPw = dPs + row0 * TC_SLD;
  Elem* Pw = Ps + row0 * TC_SLD;
  Elem* dSw = dSs + row0 * TC_SLD;
  tc_load_tile<P, HS>(Ks, k_all + kvoff, ldkv, k0, T);
  tc_load_tile<P, HS>(Vs, v_all + kvoff, ldkv, k0, T);
  FragC<P> dK[HS / 16], dV[HS / 16];
  for (int j = 0; j < HS / 16; j++) {
    wmma::fill_fragment(dK[j], 0.0f);
    wmma::fill_fragment(dV[j], 0.0f);
  }
  for (int h = kvh * group; h < (kvh + 1) * group; h++) { /* the group's query heads, in order */
    const A* dO = dout + (size_t)b * T * C + (size_t)h * HS;
    for (int q0 = k0; q0 < T; q0 += TC_TILE) {
      __syncthreads(); /* every warp is done with the previous query tile */
      tc_load_tile<P, HS>(Qs, q_all + (size_t)b * T * ldq + (size_t)h * HS, ldq, q0, T);
      tc_load_tile<P, HS>(dOs, dO, C, q0, T);
      attention_row_stats(lse_s, D_s, lse + ((size_t)b * NH + h) * T, dO,
                          out + (size_t)b * T * C + (size_t)h * HS, C, q0, T, HS, TC_TILE);
      __syncthreads();
      tc_scores<P, HS>(Sw, Ks + row0 * ld, Qs);   /* S^T */
      tc_scores<P, HS>(dPw, Vs + row0 * ld, dOs); /* dP^T */
      __syncwarp();
      for (int r = 0; r < TC_WARP_ROWS; r++) {
        const int key = k0 + row0 + r;
        for (int c = 0; c < 2; c++) {
          const int qi = lane + 32 * c, t = q0 + qi;
          const bool live = key <= t && t < T && key < T;
          const float p = live ? expf(Sw[r * TC_SLD + qi] * scale - lse_s[qi]) : 0.0f;
          const float ds = p * (dPw[r * TC_SLD + qi] - D_s[qi]);
          Pw[r * TC_SLD + qi] = P::round(p);
          dSw[r * TC_SLD + qi] = P::round(ds);
        }
      }
      __syncwarp();
      tc_accumulate<P, HS>(dV, Pw, dOs); /* dV += P^T dO */
      tc_accumulate<P, HS>(dK, dSw, Qs); /* dK += dS^T Q */
    }
  }
  /* Staging: the warp's rows of a float [64][HS] tile, over the K and V tiles for dK and over the
  ** Q and dO tiles for dV (two tiles of P::Elem hold one of floats). */
  __syncthreads();
  float* stage_k = reinterpret_cast<float*>(Ks) + row0 * ld;
  float* stage_v = reinterpret_cast<float*>(Qs) + row0 * ld;
  tc_add_rows<P, HS>(dk_all + kvoff + (size_t)k0 * ldkv, ldkv, dK, stage_k, row0, T - k0,
                     scale);
  tc_add_rows<P, HS>(dv_all + kvoff + (size_t)k0 * ldkv, ldkv, dV, stage_v, row0, T - k0,
                     1.0f);
}

/* dQ of query tile blockIdx.x of (b, h) = blockIdx.y; see the file's comment. Activations are
** stored as A. */
template <class P, int HS, typename A>
static __global__ void __launch_bounds__(TC_THREADS)
    tc_backward_dq_kernel(A* dq_all, const A* dout, const A* q_all, const A* k_all,
                          const A* v_all, int ldq, int ldkv, const A* out, const float* lse,
                          int T, int NH, int NKV, float scale) {
  typedef typename P::Elem Elem;
  extern __shared__ float smem[];
  const size_t C = (size_t)NH * HS;
  const int bh = blockIdx.y, b = bh / NH, h = bh % NH, kvh = h / (NH / NKV);
  const int q0 = blockIdx.x * TC_TILE, ld = tile_ld(HS);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, row0 = warp * TC_WARP_ROWS;
  const A* dO = dout + (size_t)b * T * C + (size_t)h * HS;
  SmemCarver carve{reinterpret_cast<char*>(smem)};
  Elem* Qs = carve.take<Elem>(tile_bytes<Elem>(HS));
  Elem* dOs = carve.take<Elem>(tile_bytes<Elem>(HS));
  Elem* Ks = carve.take<Elem>(tile_bytes<Elem>(HS));
  Elem* Vs = carve.take<Elem>(tile_bytes<Elem>(HS));
  float* Ss = carve.take<float>(score_bytes<float>());
  float* dPs = carve.take<float>(score_bytes<float>());
  Elem* dSs = carve.rounded<P>(Ss); /* dS rounded (over S in TF32) */
  float* lse_s = carve.take<float>(TC_TILE * sizeof(float));
  float* D_s = carve.take<float>(TC_TILE * sizeof(float));
  float* Sw = Ss + row0 * TC_SLD;
  float* dPw = dPs + row0 * TC_SLD;
  Elem* dSw = dSs + row0 * TC_SLD;
  tc_load_tile<P, HS>(Qs, q_all + (size_t)b * T * ldq + (size_t)h * HS, ldq, q0, T);
  tc_load_tile<P, HS>(dOs, dO, C, q0, T);
  attention_row_stats(lse_s, D_s, lse + (size_t)bh * T, dO,
                      out + (size_t)b * T * C + (size_t)h * HS, C, q0, T, HS, TC_TILE);
  FragC<P> dQ[HS / 16];
  for (int j = 0; j < HS / 16; j++) wmma::fill_fragment(dQ[j], 0.0f);
  const int q_last = min(q0 + TC_TILE, T) - 1;
  for (int k0 = 0; k0 <= q_last; k0 += TC_TILE) {
    __syncthreads(); /* every warp is done with the previous K and V (Q, dO, stats are ready) */
    tc_load_tile<P, HS>(Ks, k_all + (size_t)b * T * ldkv + (size_t)kvh * HS, ldkv, k0, T);
    tc_load_tile<P, HS>(Vs, v_all + (size_t)b * T * ldkv + (size_t)kvh * HS, ldkv, k0, T);
    __syncthreads();
    tc_scores<P, HS>(Sw, Qs + row0 * ld, Ks);   /* S */
    tc_scores<P, HS>(dPw, dOs + row0 * ld, Vs); /* dP */
    __syncwarp();
    for (int r = 0; r < TC_WARP_ROWS; r++) {
      const int qi = row0 + r, t = q0 + qi;
      for (int c = 0; c < 2; c++) {
        const int kj = lane + 32 * c, key = k0 + kj;
        const float p =
            key <= t && t < T ? expf(Sw[r * TC_SLD + kj] * scale - lse_s[qi]) : 0.0f;
        dSw[r * TC_SLD + kj] = P::round(p * (dPw[r * TC_SLD + kj] - D_s[qi]));
      }
    }
    __syncwarp();
    tc_accumulate<P, HS>(dQ, dSw, Ks); /* dQ += dS K */
  }
  __syncthreads(); /* the K and V tiles become the warps' staging rows (a float [64][HS] tile) */
  tc_add_rows<P, HS>(dq_all + (size_t)b * T * ldq + (size_t)h * HS + (size_t)q0 * ldq, ldq, dQ,
                     reinterpret_cast<float*>(Ks) + row0 * ld, row0, T - q0, scale);
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

/* Calls f(P(), std::integral_constant<int, HS>()) for the kernels of matmul mode `mode` on
** storage A (TcTf32 for MATMUL_TF32, TcBf16 for MATMUL_BF16) and head size hs; 0, or -1 when
** there is no such instance (MATMUL_FP32 has none: cuda_attention.cu's kernels are its; bf16
** storage has only TcBf16, the mode cuda_attention.cu always passes for it). */
template <typename A, typename F>
static int with_instance(MatmulMode mode, int hs, F f) {
  if constexpr (std::is_same<A, float>::value) {
    if (mode == MATMUL_TF32) return with_head_size(hs, [&](auto size) { f(TcTf32(), size); });
  }
  if (mode == MATMUL_BF16) return with_head_size(hs, [&](auto size) { f(TcBf16(), size); });
  return -1;
}

/* Whether the tensor-core kernels have head size hs (the same sizes in every precision). */
int cuda_attention_tc_supports(int hs) { return with_head_size(hs, [](auto) {}) == 0; }

/* Opts the three kernels of every instance on storage A in to the dynamic shared memory they
** need (above the 48 KiB default from head size 64 on). */
template <typename A>
static cudaError_t tc_setup_storage(void) {
  cudaError_t err = cudaSuccess;
  for (MatmulMode mode : {MATMUL_TF32, MATMUL_BF16})
    for (int hs = 16; hs <= 128; hs += 16)
      with_instance<A>(mode, hs, [&](auto prec, auto size) {
        typedef decltype(prec) P;
        constexpr int HS = decltype(size)::value;
        const int fwd = (int)tc_forward_smem<P>(HS), bwd = (int)tc_backward_smem<P>(HS);
        const cudaFuncAttribute smem = cudaFuncAttributeMaxDynamicSharedMemorySize;
        if (err == cudaSuccess)
          err = cudaFuncSetAttribute(tc_forward_kernel<P, HS, A>, smem, fwd);
        if (err == cudaSuccess)
          err = cudaFuncSetAttribute(tc_backward_dkdv_kernel<P, HS, A>, smem, bwd);
        if (err == cudaSuccess)
          err = cudaFuncSetAttribute(tc_backward_dq_kernel<P, HS, A>, smem, bwd);
      });
  return err;
}

/* The shared-memory opt-in of every instance that can be launched: fp32 storage (TF32 and
** bf16) and bf16 storage (bf16). Once per process, from cuda_attention_setup. */
cudaError_t cuda_attention_tc_setup(void) {
  cudaError_t err = tc_setup_storage<float>();
  if (err == cudaSuccess) err = tc_setup_storage<osdp_bf16>();
  return err;
}

/* Table entry attention_forward on tensor cores, in the precision of `mode`, on activations
** stored as A: one block per (query tile, b, h). Aborts for a mode or head size without an
** instance. */
template <typename A>
void cuda_attention_tc_forward(A* out, float* lse, const A* q, const A* k, const A* v, int ldq,
                               int ldkv, int B, int T, int NH, int NKV, int hs, MatmulMode mode) {
  const dim3 grid((T + TC_TILE - 1) / TC_TILE, B * NH);
  const float scale = 1.0f / sqrtf((float)hs);
  int rc = with_instance<A>(mode, hs, [&](auto prec, auto size) {
    typedef decltype(prec) P;
    constexpr int HS = decltype(size)::value;
    CUDA_LAUNCH((tc_forward_kernel<P, HS, A>), grid, TC_THREADS, tc_forward_smem<P>(HS), out,
                lse, q, k, v, ldq, ldkv, T, NH, NKV, scale);
  });
  if (rc) cuda_abort("attention", "tensor-core attention called for a mode or head size it lacks");
}

/* Table entry attention_backward on tensor cores, likewise: the dK dV kernel (a block per key
** tile and K/V head), then the dQ kernel (a block per query tile and query head), in order on
** the stream. */
template <typename A>
void cuda_attention_tc_backward(A* dq, A* dk, A* dv, const A* dout, const A* q, const A* k,
                                const A* v, int ldq, int ldkv, const A* out, const float* lse,
                                int B, int T, int NH, int NKV, int hs, MatmulMode mode) {
  const int tiles = (T + TC_TILE - 1) / TC_TILE;
  const float scale = 1.0f / sqrtf((float)hs);
  int rc = with_instance<A>(mode, hs, [&](auto prec, auto size) {
    typedef decltype(prec) P;
    constexpr int HS = decltype(size)::value;
    const size_t smem = tc_backward_smem<P>(HS);
    CUDA_LAUNCH((tc_backward_dkdv_kernel<P, HS, A>), dim3(tiles, B * NKV), TC_THREADS, smem, dk,
                dv, dout, q, k, v, ldq, ldkv, out, lse, T, NH, NKV, scale);
    CUDA_LAUNCH((tc_backward_dq_kernel<P, HS, A>), dim3(tiles, B * NH), TC_THREADS, smem, dq,
                dout, q, k, v, ldq, ldkv, out, lse, T, NH, NKV, scale);
  });
  if (rc) cuda_abort("attention", "tensor-core attention called for a mode or head size it lacks");
}

/* The instances cuda_attention.cu calls: fp32 and bf16 storage. */
template void cuda_attention_tc_forward<float>(float*, float*, const float*, const float*,
                                               const float*, int, int, int, int, int, int, int,
                                               MatmulMode);
template void cuda_attention_tc_forward<osdp_bf16>(osdp_bf16*, float*, const osdp_bf16*,
                                                   const osdp_bf16*, const osdp_bf16*, int, int,
                                                   int, int, int, int, int, MatmulMode);
template void cuda_attention_tc_backward<float>(float*, float*, float*, const float*,
                                                const float*, const float*, const float*, int,
                                                int, const float*, const float*, int, int, int,
                                                int, int, MatmulMode);
template void cuda_attention_tc_backward<osdp_bf16>(osdp_bf16*, osdp_bf16*, osdp_bf16*,
                                                    const osdp_bf16*, const osdp_bf16*,
                                                    const osdp_bf16*, const osdp_bf16*, int, int,
                                                    const osdp_bf16*, const float*, int, int,
                                                    int, int, int, MatmulMode);
