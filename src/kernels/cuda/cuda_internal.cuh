/*
** cuda_internal.cuh: what the files of the CUDA backend share: the backend's state (device,
** compute stream, cuBLAS and cuBLASLt handles, fixed reduction scratch), the error checks that
** abort on a failed CUDA or cuBLAS call, the launch macro, and the warp / block reductions.
**
** Every kernel and every cuBLAS call goes on cuda_ctx.stream, in the order the host issues
** them. Kernels allocate nothing: the only device memory besides the arena is allocated once
** by backend_cuda() (see cuda_backend.cu).
*/
#ifndef OSDP_CUDA_INTERNAL_CUH
#define OSDP_CUDA_INTERNAL_CUH

/* The C headers are included first so that the extern "C" block below only re-includes them
** (their include guards make that a no-op). */
#include <stddef.h>
#include <stdint.h>

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

extern "C" {
#include "core/util.h"
#include "kernels/backend.h"
}

/* Partial sums of the first pass of sum_squares: a fixed count, so the order of the
** reduction depends only on n. */
#define CUDA_REDUCE_BLOCKS 512

/* The scratch of the column sums' partial sums (cuda_kernels.cu, colsum_run): 4 MiB of floats,
** enough for 128 row chunks of 4096 columns, two sums at once; wider sums go in column groups.
** The CPU emulation (tests/gpu_emu.cmake) builds with 16384, so that its checks' shapes cover
** the column groups too. */
#ifndef COLSUM_SCRATCH_FLOATS
#define COLSUM_SCRATCH_FLOATS (1 << 20)
#endif

/* The state of the CUDA backend, set up once by backend_cuda(). */
typedef struct CudaContext {
  cudaStream_t stream;              /* the compute stream: every kernel, copy and GEMM */
  cublasHandle_t cublas;            /* bound to stream, with a fixed workspace */
  cublasLtHandle_t cublaslt;        /* the fused products (cuda_lt.cu); same stream per call */
  void* gemm_workspace;             /* cuBLAS's workspace, lent to each cuBLASLt call: every */
  size_t gemm_workspace_bytes;      /* product runs on the one stream, so none overlap */
  MatmulMode matmul_mode;           /* set_matmul_mode's: chooses cuBLAS's compute and attention */
  cublasComputeType_t gemm_compute; /* _32F, _32F_FAST_TF32 or _32F_FAST_16BF, by matmul_mode */
  /* Device scratch of the fixed-order reductions: CUDA_REDUCE_BLOCKS partial sums followed by
  ** the one result that is copied back to the host. */
  double* reduce_partials;
  double* reduce_result;
  /* Device scratch of the column sums: COLSUM_SCRATCH_FLOATS chunk sums. */
  float* colsum_partials;
} CudaContext;

extern CudaContext cuda_ctx;

/* Print "osdp: error: CUDA: <call>: <message>" and abort the process when a CUDA runtime call
** (or a cuBLAS call) failed. Kernels return void, so a failure cannot be reported otherwise. */
void cuda_check(cudaError_t err, const char* call);
void cuda_check(cublasStatus_t status, const char* call);
/* Prints "osdp: error: CUDA: <what>: <message>" and aborts. */
void cuda_abort(const char* what, const char* message);

#define CUDA_CHECK(call) cuda_check((call), #call)

/* Launches kernel on the backend's stream and checks the launch (bad configuration, too much
** shared memory, ...). Errors while the kernel runs surface at the next synchronising call. */
#define CUDA_LAUNCH(kernel, grid, block, smem_bytes, ...)                       \
  do {                                                                          \
    kernel<<<(grid), (block), (smem_bytes), cuda_ctx.stream>>>(__VA_ARGS__);   \
    cuda_check(cudaGetLastError(), "launch of " #kernel);                       \
  } while (0)

/* A linear's forward with its bias (and GELU) in cuBLASLt's epilogue (cuda_lt.cu): the
** row-major out[BT, OC] = inp[BT, K] (row stride ldinp) @ w[K, OC] + beta * out + bias, with
** epilogue CUBLASLT_EPILOGUE_BIAS; or, with CUBLASLT_EPILOGUE_GELU_AUX_BIAS (_GELU_AUX without a
** bias), aux[BT, OC] = that sum and out = its GELU (OC a multiple of 8: the aux ld's rule).
** Compute type: set_matmul_mode's for fp32 storage. Returns 0, or -1 when cuBLASLt has no
** algorithm for it (the caller then takes its unfused path); any other failure aborts, as
** CUDA_CHECK. The storage type T (float or osdp_bf16) is that of out, aux, inp, w and bias
** alike; bf16 products accumulate in fp32 (CUBLAS_COMPUTE_32F). */
template <typename T>
int cuda_lt_linear(T* out, T* aux, const T* inp, int ldinp, const T* w, const T* bias, int BT,
                   int K, int OC, float beta, cublasLtEpilogue_t epilogue);

/* The kernel tables of the CUDA kernels, one entry per kernel of KERNEL_LIST (cuda_kernels.cu):
** fp32 storage, and bf16 storage (bf16 activations and weight copies; fp32 gradients, optimizer
** state and statistics). */
extern const Kernels_f32 cuda_kernels_f32;
extern const Kernels_bf16 cuda_kernels_bf16;

// ----------------------------------------------------------------------------
// element access: the kernels are templates on their storage types (float or osdp_bf16, the
// roles of KERNEL_LIST) and compute in fp32; a value is widened as it is read (to_f32) and
// rounded once, to nearest even, as it is stored (store_rounded).

/* x as fp32 (exact). */
static __host__ __device__ __forceinline__ float to_f32(float x) { return x; }
static __host__ __device__ __forceinline__ float to_f32(osdp_bf16 x) {
  return __bfloat162float(__nv_bfloat16(__nv_bfloat16_raw{x.bits}));
}

/* *p = v, rounded to p's type (to nearest even for bf16). */
static __host__ __device__ __forceinline__ void store_rounded(float* p, float v) { *p = v; }
static __host__ __device__ __forceinline__ void store_rounded(osdp_bf16* p, float v) {
  __nv_bfloat16_raw r = __float2bfloat16_rn(v);
  p->bits = r.x;
}

/* cuBLAS's name of an element type (CUDA_R_32F, CUDA_R_16BF), from a pointer of that type. */
static inline cudaDataType_t cuda_type_of(const float*) { return CUDA_R_32F; }
static inline cudaDataType_t cuda_type_of(const osdp_bf16*) { return CUDA_R_16BF; }

/* Raises the dynamic shared-memory limit of the attention kernels to what head size 128 needs
** (more than the 48 KiB default). Called once at initialisation (cuda_attention.cu). */
cudaError_t cuda_attention_setup(void);

/* Causal attention (multi-head or grouped-query), FlashAttention-2 style, with the contract of
** the kernel table (cuda_attention.cu), on activations stored as A (float or osdp_bf16; lse is
** fp32 in both tables); instantiated for both in cuda_attention.cu. scratch is not used:
** cuda_attention_scratch_elems is 0. */
template <typename A>
void cuda_attention_forward(A* out, float* lse, const A* q, const A* k, const A* v, int ldq,
                            int ldkv, float* scratch, int B, int T, int NH, int NKV, int hs);
template <typename A>
void cuda_attention_backward(A* dq, A* dk, A* dv, const A* dout, const A* q, const A* k,
                             const A* v, int ldq, int ldkv, const A* out, const float* lse,
                             float* scratch, int B, int T, int NH, int NKV, int hs);
/* The backend's attention_scratch_elems: 0 for every T and hs (the tiles live in shared
** memory). */
size_t cuda_attention_scratch_elems(int T, int hs);

/* Attention on tensor cores (cuda_attention_tc.cu), the same contract, in the precision of
** matmul mode `mode` (MATMUL_TF32 or MATMUL_BF16; fp32 accumulation): used instead of the fp32
** kernels while matrix products are in one of those modes, for the head sizes it supports
** (multiples of 16 up to 128). cuda_attention_tc_setup opts its kernels in to the shared memory
** they need. On bf16 storage (A = osdp_bf16) the bf16 kernels run whatever the mode (mode
** MATMUL_BF16 is passed): the values are bf16 already. Instantiated for A = float and osdp_bf16.
*/
int cuda_attention_tc_supports(int hs);
cudaError_t cuda_attention_tc_setup(void);
template <typename A>
void cuda_attention_tc_forward(A* out, float* lse, const A* q, const A* k, const A* v, int ldq,
                               int ldkv, int B, int T, int NH, int NKV, int hs, MatmulMode mode);
template <typename A>
void cuda_attention_tc_backward(A* dq, A* dk, A* dv, const A* dout, const A* q, const A* k,
                                const A* v, int ldq, int ldkv, const A* out, const float* lse,
                                int B, int T, int NH, int NKV, int hs, MatmulMode mode);

#define CUDA_FULL_WARP 0xffffffffu

/* Sum of v over the 32 lanes of a warp, identical on every lane (xor butterfly: each step adds
** the same two values on both partners, so the result is bit-identical everywhere). */
static __device__ __forceinline__ float warp_sum(float v) {
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(CUDA_FULL_WARP, v, offset);
  return v;
}

/* Sum of v over a warp in double, identical on every lane. */
static __device__ __forceinline__ double warp_sum_double(double v) {
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(CUDA_FULL_WARP, v, offset);
  return v;
}

/* Max of v over a warp, identical on every lane. */
static __device__ __forceinline__ float warp_max(float v) {
  for (int offset = 16; offset > 0; offset /= 2)
    v = fmaxf(v, __shfl_xor_sync(CUDA_FULL_WARP, v, offset));
  return v;
}


/* The per-query values both attention backward passes need (cuda_attention.cu and
** cuda_attention_tc.cu, in every precision): lse_s[r] = lse of query q0 + r and D_s[r] = dO . O
** of that query (fp32, from global memory; 0 for rows at or past T), for r < rows. Warp w of the
** block computes rows w, w + warps, ..., its lanes splitting the head dimensions; every row is
** summed by one warp in a fixed order. dO and o are stored as A (float or osdp_bf16). */
template <typename A>
static __device__ __forceinline__ void attention_row_stats(float* lse_s, float* D_s,
                                                           const float* lse_head, const A* dO,
                                                           const A* o, size_t C, int q0, int T,
                                                           int hs, int rows) {
  const int warps = blockDim.x / 32, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int r = warp; r < rows; r += warps) {
    const int t = q0 + r;
    float part = 0;
    if (t < T)
      for (int d = lane; d < hs; d += 32)
        part += to_f32(dO[(size_t)t * C + d]) * to_f32(o[(size_t)t * C + d]);
    part = warp_sum(part);
    if (lane == 0) {
      D_s[r] = part;
      lse_s[r] = t < T ? lse_head[t] : 0.0f;
    }
  }
}

#endif
