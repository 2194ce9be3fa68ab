// tools/cuda-emu/emu.cpp: see build.sh. Not a GPU: a check of the CUDA code's logic on a CPU.
/* CPU emulation of the CUDA runtime subset used by osdp's CUDA backend: each block runs as
** blockDim fibers (ucontext), __syncthreads and warp shuffles are barriers among them. */
#include <cuda_runtime.h>
#include <ucontext.h>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <map>
#include <vector>

uint3 threadIdx, blockIdx;
dim3 blockDim, gridDim;
static cudaError_t last_error = cudaSuccess;
static std::map<const void*, int> smem_limit;
static int nthreads;
static std::vector<ucontext_t> ctx;
static std::vector<char*> stacks;
static std::vector<int> done;
static ucontext_t sched_ctx;
static int cur;
static std::function<void()> cur_body;
static float* dyn_smem;
static long block_gen; static int block_arrived;
static std::vector<long> warp_gen; static std::vector<int> warp_arrived;
static std::vector<unsigned char> slots; /* 8 bytes per thread */
static long long launches, switches;

static void yield_() { switches++; swapcontext(&ctx[cur], &sched_ctx); }
static void entry() { cur_body(); done[cur] = 1; }
int emu_lane(void) { return cur % 32; }
void* emu_shfl_slot(int lane) { return &slots[8 * ((cur / 32) * 32 + lane)]; }
static int active() { int n = 0; for (int i = 0; i < nthreads; i++) n += !done[i]; return n; }
void __syncthreads(void) {
  long g = block_gen;
  if (++block_arrived == active()) { block_arrived = 0; block_gen++; return; }
  while (block_gen == g) yield_();
}
void emu_warp_barrier(void) {
  int w = cur / 32;
  long g = warp_gen[w];
  int lanes = std::min(32, nthreads - w * 32);
  if (++warp_arrived[w] == lanes) { warp_arrived[w] = 0; warp_gen[w]++; return; }
  while (warp_gen[w] == g) yield_();
}
float* emu_dynamic_smem(void) { return dyn_smem; }

void emu_launch(const void* fn, dim3 grid, dim3 block, size_t smem, std::function<void()> body) {
  launches++;
  nthreads = block.x * block.y * block.z;
  int limit = smem_limit.count(fn) ? smem_limit[fn] : 48 * 1024;
  if (grid.x == 0 || grid.y == 0 || nthreads == 0 || nthreads > 1024 || smem > (size_t)limit) {
    fprintf(stderr, "emu: bad launch grid %u,%u block %d smem %zu (limit %d)\n", grid.x, grid.y, nthreads, smem, limit);
    last_error = cudaErrorInvalidConfiguration; return;
  }
  gridDim = grid; blockDim = block;
  cur_body = body;
  ctx.resize(nthreads); done.assign(nthreads, 0);
  while ((int)stacks.size() < nthreads) stacks.push_back((char*)malloc(1 << 16));
  warp_gen.assign((nthreads + 31) / 32, 0); warp_arrived.assign((nthreads + 31) / 32, 0);
  slots.assign(8 * nthreads + 256, 0);
  for (unsigned bz = 0; bz < grid.z; bz++)
  for (unsigned by = 0; by < grid.y; by++)
    for (unsigned bx = 0; bx < grid.x; bx++) {
      blockIdx = {bx, by, bz};
      dyn_smem = smem ? (float*)aligned_alloc(256, (smem + 255) / 256 * 256) : nullptr; /* aligned as WMMA needs */
      if (dyn_smem) memset(dyn_smem, 0xff, smem); /* NaN garbage */
      block_gen = 0; block_arrived = 0;
      for (int i = 0; i < nthreads; i++) {
        done[i] = 0;
        getcontext(&ctx[i]);
        ctx[i].uc_stack.ss_sp = stacks[i]; ctx[i].uc_stack.ss_size = 1 << 16; ctx[i].uc_link = &sched_ctx;
        makecontext(&ctx[i], entry, 0);
      }
      int remaining = nthreads;
      while (remaining > 0) {
        for (int i = 0; i < nthreads; i++) {
          if (done[i]) continue;
          cur = i;
          threadIdx = {(unsigned)(i % block.x), (unsigned)((i / block.x) % block.y), (unsigned)(i / (block.x * block.y))};
          swapcontext(&sched_ctx, &ctx[i]);
          if (done[i]) remaining--;
        }
      }
      free(dyn_smem);
    }
}
cudaError_t emu_set_smem_limit(const void* fn, int bytes) { if (bytes > 227 * 1024) return cudaErrorInvalidValue; smem_limit[fn] = bytes; return cudaSuccess; }
const char* cudaGetErrorString(cudaError_t e) { return e == cudaSuccess ? "no error" : "emulated error"; }
cudaError_t cudaGetLastError(void) { cudaError_t e = last_error; last_error = cudaSuccess; return e; }
cudaError_t cudaGetDeviceCount(int* n) { if (getenv("EMU_NO_GPU")) { *n = 0; last_error = cudaErrorNoDevice; return cudaErrorNoDevice; } *n = 2; return cudaSuccess; }
// EMU_FAIL_INIT=1: a GPU that is listed but whose set-up fails (a backend that cannot start).
cudaError_t cudaSetDevice(int d) { if (getenv("EMU_FAIL_INIT")) return cudaErrorInvalidValue; fprintf(stderr, "emu: device %d\n", d); return cudaSuccess; }
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned) { *s = (cudaStream_t)0x1; return cudaSuccess; }
cudaError_t cudaStreamSynchronize(cudaStream_t) { return cudaSuccess; }
struct CUevent_st { double t; };
static double now() { timespec ts; clock_gettime(CLOCK_MONOTONIC, &ts); return ts.tv_sec + ts.tv_nsec * 1e-9; }
cudaError_t cudaEventCreate(cudaEvent_t* e) { *e = new CUevent_st{0}; return cudaSuccess; }
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t) { e->t = now(); return cudaSuccess; }
cudaError_t cudaEventSynchronize(cudaEvent_t) { return cudaSuccess; }
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t a, cudaEvent_t b) { *ms = (float)((b->t - a->t) * 1e3); return cudaSuccess; }
static size_t allocated;
cudaError_t emu_malloc(void** p, size_t n) { if (n > ((size_t)1 << 33)) { last_error = cudaErrorMemoryAllocation; return cudaErrorMemoryAllocation; } *p = aligned_alloc(256, (n + 255) / 256 * 256); allocated += n; return cudaSuccess; }
cudaError_t cudaFree(void* p) { free(p); return cudaSuccess; }
cudaError_t cudaMemGetInfo(size_t* f, size_t* t) { *f = (size_t)1 << 34; *t = (size_t)1 << 35; return cudaSuccess; }
cudaError_t cudaMemsetAsync(void* p, int v, size_t n, cudaStream_t) { memset(p, v, n); return cudaSuccess; }
cudaError_t cudaMemcpyAsync(void* d, const void* s, size_t n, cudaMemcpyKind, cudaStream_t) { memcpy(d, s, n); return cudaSuccess; }
const char* cublasGetStatusString(cublasStatus_t) { return "emulated cublas error"; }
cublasStatus_t cublasCreate(cublasHandle_t* h) { *h = (cublasHandle_t)0x2; return CUBLAS_STATUS_SUCCESS; }
static int stream_set;
cublasStatus_t cublasSetStream(cublasHandle_t, cudaStream_t) { stream_set = 1; return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasSetWorkspace(cublasHandle_t, void* w, size_t n) { if (!stream_set || !w || n != ((size_t)32 << 20)) return CUBLAS_STATUS_INVALID_VALUE; return CUBLAS_STATUS_SUCCESS; }
/* column-major reference GEMM with argument validation like cuBLAS */
cublasStatus_t cublasGemmEx(cublasHandle_t, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const void* alpha_, const void* A_, cudaDataType, int lda, const void* B_, cudaDataType, int ldb, const void* beta_, void* C_, cudaDataType, int ldc, cublasComputeType_t ct, cublasGemmAlgo_t) {
  int rowsA = ta == CUBLAS_OP_N ? m : k, rowsB = tb == CUBLAS_OP_N ? k : n;
  if (m < 0 || n < 0 || k < 0 || lda < std::max(1, rowsA) || ldb < std::max(1, rowsB) || ldc < std::max(1, m)) {
    fprintf(stderr, "emu: cublasGemmEx invalid: ta %d tb %d m %d n %d k %d lda %d ldb %d ldc %d\n", ta, tb, m, n, k, lda, ldb, ldc);
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  const float *A = (const float*)A_, *B = (const float*)B_; float* C = (float*)C_;
  float alpha = *(const float*)alpha_, beta = *(const float*)beta_;
  for (int j = 0; j < n; j++)
    for (int i = 0; i < m; i++) {
      double s = 0;
      for (int l = 0; l < k; l++) {
        double a = ta == CUBLAS_OP_N ? A[i + (size_t)l * lda] : A[l + (size_t)i * lda];
        double b = tb == CUBLAS_OP_N ? B[l + (size_t)j * ldb] : B[j + (size_t)l * ldb];
        if (ct == CUBLAS_COMPUTE_32F_FAST_TF32) { /* crude tf32: drop 13 mantissa bits */
          float fa = (float)a, fb = (float)b; uint32_t ua, ub; memcpy(&ua, &fa, 4); memcpy(&ub, &fb, 4);
          ua &= 0xffffe000u; ub &= 0xffffe000u; memcpy(&fa, &ua, 4); memcpy(&fb, &ub, 4); a = fa; b = fb; }
        s += a * b;
      }
      float* c = &C[i + (size_t)j * ldc];
      *c = (float)(alpha * s + (beta != 0 ? beta * (double)*c : 0.0));
    }
  return CUBLAS_STATUS_SUCCESS;
}
struct Report { ~Report() { fprintf(stderr, "emu: %lld launches, %lld switches\n", launches, switches); } } report;
