// tools/cuda-emu/emu.cpp: see build.sh. Not a GPU: a check of the CUDA code's logic on a CPU.
/* CPU emulation of the CUDA runtime subset used by osdp's CUDA backend: each block runs as
** blockDim fibers, __syncthreads and warp shuffles are barriers among them, cuBLAS is a
** reference GEMM (fp64 sums; TF32 compute rounds its inputs to TF32 first, bf16 compute to bf16).
**
** Fibers: on x86-64 a fiber switch is emu_switch below (callee-saved registers, MXCSR and the
** x87 control word pushed on the fiber's own stack, then the stack pointer swapped: a few
** nanoseconds). glibc's swapcontext also saves the signal mask with a system call on every
** switch, which made a run of the kernel checks ten times slower; it stays the fallback on other
** machines (or with -DEMU_UCONTEXT). The switch keeps no shadow stack: the emulator is compiled
** with -fcf-protection=none so that a binary containing it is never marked for one.
**
** Scheduling: the block's threads run round-robin, each until it finishes or waits at a
** barrier. __syncthreads counts the threads that have not finished: a thread that returns early
** leaves the barrier of the others (CUDA's rule for exited threads); a warp-synchronous call
** after a lane of the warp returned is reported and aborted. A full pass in which
** no thread arrives at a barrier, passes one or finishes is a deadlock (a barrier some threads
** never reach): reported and aborted, instead of hanging. */
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#if !defined(__x86_64__) || defined(EMU_UCONTEXT)
#include <ucontext.h>
#endif
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <map>
#include <vector>

uint3 threadIdx, blockIdx;
dim3 blockDim, gridDim;
static cudaError_t last_error = cudaSuccess;
static std::map<const void*, int> smem_limit;
static const size_t STACK_BYTES = 1 << 16;
static int nthreads;
static std::vector<char*> stacks;
static std::vector<int> done;
static int cur, ndone;
static long progress; /* arrivals, releases and exits: a pass without any is a deadlock */
static std::function<void()> cur_body;
static float* dyn_smem;
static long block_gen; static int block_arrived;
static std::vector<long> warp_gen; static std::vector<int> warp_arrived, warp_done;
static std::vector<unsigned char> slots; /* 8 bytes per thread */
static long long launches, switches;

#if defined(__x86_64__) && !defined(EMU_UCONTEXT)
/* emu_switch(&save, load): pushes the callee-saved registers and the floating-point control
** words, stores the stack pointer in *save, loads `load` and pops what that stack saved. */
extern "C" void emu_switch(void** save, void* load);
asm(R"(
  .text
  .p2align 4
  .globl emu_switch
  .type emu_switch, @function
emu_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $8, %rsp
  stmxcsr (%rsp)
  fnstcw 4(%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  ldmxcsr (%rsp)
  fldcw 4(%rsp)
  addq $8, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size emu_switch, .-emu_switch
)");
static std::vector<void*> fiber_sp;
static void* sched_sp;
static void* dead_sp; /* where a finished fiber's last switch saves its (unused) stack pointer */
static void fiber_main();
/* A fresh fiber i: its stack holds what emu_switch pops (control words of this thread, zero
** registers) and returns into fiber_main, with the stack aligned as after a call. */
static void fiber_init(int i) {
  uintptr_t* p = (uintptr_t*)((uintptr_t)(stacks[i] + STACK_BYTES) & ~(uintptr_t)15);
  *--p = 0;                        /* fiber_main's (never used) return address */
  *--p = (uintptr_t)&fiber_main;   /* emu_switch's ret */
  for (int r = 0; r < 6; r++) *--p = 0; /* rbp rbx r12 r13 r14 r15 */
  uint32_t csr[2];
  asm volatile("stmxcsr %0\n\tfnstcw %1" : "=m"(csr[0]), "=m"(csr[1]));
  *--p = (uintptr_t)csr[0] | (uintptr_t)(csr[1] & 0xffff) << 32;
  fiber_sp[i] = p;
}
static void fiber_resize(int n) { fiber_sp.resize(n); }
static void to_fiber(int i) { emu_switch(&sched_sp, fiber_sp[i]); }
static void to_scheduler() { emu_switch(&fiber_sp[cur], sched_sp); }
static void fiber_exit() { emu_switch(&dead_sp, sched_sp); }
#else
static std::vector<ucontext_t> ctx;
static ucontext_t sched_ctx, dead_ctx;
static void fiber_entry() ;
static void fiber_init(int i) {
  getcontext(&ctx[i]);
  ctx[i].uc_stack.ss_sp = stacks[i]; ctx[i].uc_stack.ss_size = STACK_BYTES; ctx[i].uc_link = &sched_ctx;
  makecontext(&ctx[i], fiber_entry, 0);
}
static void fiber_resize(int n) { ctx.resize(n); }
static void to_fiber(int i) { swapcontext(&sched_ctx, &ctx[i]); }
static void to_scheduler() { swapcontext(&ctx[cur], &sched_ctx); }
static void fiber_exit() { swapcontext(&dead_ctx, &sched_ctx); }
static void fiber_main();
static void fiber_entry() { fiber_main(); }
#endif

static void yield_() { switches++; to_scheduler(); }
/* The body of every fiber: the kernel, then the thread leaves its warp's and its block's
** barriers (releasing them when everyone else already waits there). */
static void fiber_main() {
  cur_body();
  done[cur] = 1; ndone++; progress++;
  warp_done[cur / 32]++; /* a lane waiting in a warp call now never gets its partner: deadlock */
  if (block_arrived > 0 && block_arrived == nthreads - ndone) { block_arrived = 0; block_gen++; }
  fiber_exit();
}
int emu_lane(void) { return cur % 32; }
void* emu_shfl_slot(int lane) { return &slots[8 * ((cur / 32) * 32 + lane)]; }
void __syncthreads(void) {
  long g = block_gen;
  progress++;
  if (++block_arrived == nthreads - ndone) { block_arrived = 0; block_gen++; return; }
  while (block_gen == g) yield_();
}
/* The barrier of a warp-synchronous call (shuffles, WMMA). Every lane must take part: a lane
** that has returned makes a full-mask shuffle undefined on a GPU, so that is an error here. */
void emu_warp_barrier(void) {
  int w = cur / 32;
  long g = warp_gen[w];
  if (warp_done[w] > 0) {
    fprintf(stderr, "emu: warp %d of block %u,%u,%u: a warp-synchronous call (shuffle, wmma) after "
            "%d of its lanes returned (undefined on a GPU)\n", w, blockIdx.x, blockIdx.y, blockIdx.z, warp_done[w]);
    abort();
  }
  int lanes = std::min(32, nthreads - w * 32);
  progress++;
  if (++warp_arrived[w] == lanes) { warp_arrived[w] = 0; warp_gen[w]++; return; }
  while (warp_gen[w] == g) yield_();
}
float* emu_dynamic_smem(void) { return dyn_smem; }

void emu_launch(const void* fn, dim3 grid, dim3 block, size_t smem, std::function<void()> body) {
  launches++;
  nthreads = block.x * block.y * block.z;
  int limit = smem_limit.count(fn) ? smem_limit[fn] : 48 * 1024;
  if (grid.x == 0 || grid.y == 0 || grid.z == 0 || grid.y > 65535 || grid.z > 65535 ||
      nthreads == 0 || nthreads > 1024 || smem > (size_t)limit) {
    fprintf(stderr, "emu: bad launch grid %u,%u,%u block %d smem %zu (limit %d)\n", grid.x, grid.y, grid.z, nthreads, smem, limit);
    last_error = cudaErrorInvalidConfiguration; return;
  }
  gridDim = grid; blockDim = block;
  cur_body = body;
  fiber_resize(nthreads); done.assign(nthreads, 0);
  while ((int)stacks.size() < nthreads) stacks.push_back((char*)malloc(STACK_BYTES));
  int nwarps = (nthreads + 31) / 32;
  slots.assign(8 * nthreads + 256, 0);
  for (unsigned bz = 0; bz < grid.z; bz++)
  for (unsigned by = 0; by < grid.y; by++)
    for (unsigned bx = 0; bx < grid.x; bx++) {
      blockIdx = {bx, by, bz};
      dyn_smem = smem ? (float*)aligned_alloc(256, (smem + 255) / 256 * 256) : nullptr; /* aligned as WMMA needs */
      if (dyn_smem) memset(dyn_smem, 0xff, smem); /* NaN garbage */
      block_gen = 0; block_arrived = 0; ndone = 0;
      warp_gen.assign(nwarps, 0); warp_arrived.assign(nwarps, 0); warp_done.assign(nwarps, 0);
      for (int i = 0; i < nthreads; i++) { done[i] = 0; fiber_init(i); }
      while (ndone < nthreads) {
        long before = progress;
        for (int i = 0; i < nthreads; i++) {
          if (done[i]) continue;
          cur = i;
          threadIdx = {(unsigned)(i % block.x), (unsigned)((i / block.x) % block.y), (unsigned)(i / (block.x * block.y))};
          to_fiber(i);
        }
        if (progress == before) {
          fprintf(stderr, "emu: deadlock in block %u,%u,%u: %d of %d threads wait at a barrier the others never reach\n",
                  bx, by, bz, nthreads - ndone, nthreads);
          abort();
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

/* x rounded to TF32 (8-bit exponent, 10 explicit mantissa bits): to nearest, ties away from
** zero, as the conversion cvt.rna.tf32.f32 that feeds the tensor cores; Inf and NaN as they
** are. Exported for the emulator's own checks (emu_checks.cpp). */
float emu_round_tf32(float x) {
  uint32_t u; memcpy(&u, &x, 4);
  if ((u & 0x7f800000u) != 0x7f800000u) { u += 0x1000u; u &= 0xffffe000u; }
  memcpy(&x, &u, 4);
  return x;
}

/* Column-major C = alpha op(A) op(B) + beta C with cuBLAS's argument checks. Each product is
** summed in double from fp32 inputs (CUBLAS_COMPUTE_32F: a reference the GPU's fp32 sums are
** within rounding of) or from inputs first rounded to what the tensor cores multiply: TF32
** (CUBLAS_COMPUTE_32F_FAST_TF32) or bf16, to nearest even (CUBLAS_COMPUTE_32F_FAST_16BF); so a
** TF32- or bf16-mode run shows that format's error and an fp32 run does not.
** op(A) rows and op(B) columns are copied out contiguous first, so the inner loop is a dot
** product of two contiguous double arrays. */
cublasStatus_t cublasGemmEx(cublasHandle_t, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const void* alpha_, const void* A_, cudaDataType, int lda, const void* B_, cudaDataType, int ldb, const void* beta_, void* C_, cudaDataType, int ldc, cublasComputeType_t ct, cublasGemmAlgo_t) {
  int rowsA = ta == CUBLAS_OP_N ? m : k, rowsB = tb == CUBLAS_OP_N ? k : n;
  if (m < 0 || n < 0 || k < 0 || lda < std::max(1, rowsA) || ldb < std::max(1, rowsB) || ldc < std::max(1, m) ||
      (ct != CUBLAS_COMPUTE_32F && ct != CUBLAS_COMPUTE_32F_FAST_TF32 && ct != CUBLAS_COMPUTE_32F_FAST_16BF)) {
    fprintf(stderr, "emu: cublasGemmEx invalid: ta %d tb %d m %d n %d k %d lda %d ldb %d ldc %d compute %d\n", ta, tb, m, n, k, lda, ldb, ldc, (int)ct);
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  const float *A = (const float*)A_, *B = (const float*)B_; float* C = (float*)C_;
  float alpha = *(const float*)alpha_, beta = *(const float*)beta_;
  auto in = [&](float x) {
    if (ct == CUBLAS_COMPUTE_32F_FAST_TF32) return (double)emu_round_tf32(x);
    if (ct == CUBLAS_COMPUTE_32F_FAST_16BF) return (double)__bfloat162float(__float2bfloat16(x));
    return (double)x;
  };
  std::vector<double> a((size_t)m * k), b((size_t)n * k); /* a[i][l] = op(A)(i, l), b[j][l] = op(B)(l, j) */
  for (int i = 0; i < m; i++)
    for (int l = 0; l < k; l++) a[(size_t)i * k + l] = in(ta == CUBLAS_OP_N ? A[i + (size_t)l * lda] : A[l + (size_t)i * lda]);
  for (int j = 0; j < n; j++)
    for (int l = 0; l < k; l++) b[(size_t)j * k + l] = in(tb == CUBLAS_OP_N ? B[l + (size_t)j * ldb] : B[j + (size_t)l * ldb]);
  for (int j = 0; j < n; j++)
    for (int i = 0; i < m; i++) {
      const double *ai = &a[(size_t)i * k], *bj = &b[(size_t)j * k];
      double s = 0;
      for (int l = 0; l < k; l++) s += ai[l] * bj[l];
      float* c = &C[i + (size_t)j * ldc];
      *c = (float)(alpha * s + (beta != 0 ? beta * (double)*c : 0.0));
    }
  return CUBLAS_STATUS_SUCCESS;
}
struct Report { ~Report() { if (launches) fprintf(stderr, "emu: %lld launches, %lld switches\n", launches, switches); } } report;
