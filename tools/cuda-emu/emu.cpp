// tools/cuda-emu/emu.cpp: see build.sh. Not a GPU: a check of the CUDA code's logic on a CPU.
/* CPU emulation of the CUDA runtime subset used by osdp's CUDA backend: each block runs as
** blockDim fibers, __syncthreads and warp shuffles are barriers among them, cuBLAS is a
** reference GEMM (fp64 sums; TF32 compute rounds its inputs to TF32 first, bf16 compute to bf16),
** and cuBLASLt the same GEMM with the bias and GELU epilogues, checking its descriptors as the
** library does.
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
#include <cublasLt.h>
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

/* x as the tensor cores of compute type ct multiply it: fp32 as it is (CUBLAS_COMPUTE_32F),
** rounded to TF32 (CUBLAS_COMPUTE_32F_FAST_TF32) or to bf16, to nearest even
** (CUBLAS_COMPUTE_32F_FAST_16BF). */
static double emu_gemm_input(float x, cublasComputeType_t ct) {
  if (ct == CUBLAS_COMPUTE_32F_FAST_TF32) return (double)emu_round_tf32(x);
  if (ct == CUBLAS_COMPUTE_32F_FAST_16BF) return (double)__bfloat162float(__float2bfloat16(x));
  return (double)x;
}

/* Element i of a matrix of data type t (CUDA_R_32F or CUDA_R_16BF), as a float. */
static float emu_load(const void* p, cudaDataType t, size_t i) {
  return t == CUDA_R_16BF ? __bfloat162float(((const __nv_bfloat16*)p)[i]) : ((const float*)p)[i];
}

/* Stores v, an fp32 result, as element i of a matrix of data type t: bf16 rounds it to nearest
** even, as a GPU's epilogue converts its fp32 accumulator. */
static void emu_store(void* p, cudaDataType t, size_t i, float v) {
  if (t == CUDA_R_16BF) ((__nv_bfloat16*)p)[i] = __float2bfloat16(v);
  else ((float*)p)[i] = v;
}

/* Whether cuBLAS's GEMM takes A and B of type ab and C of type c under compute type ct (the
** combinations osdp uses, as cuBLAS's table lists them): all fp32 in every compute type the
** emulation has; bf16 A and B with a bf16 or an fp32 C only under CUBLAS_COMPUTE_32F (the
** FAST_* types are for fp32 data). */
static bool emu_types_ok(cudaDataType a, cudaDataType b, cudaDataType c, cublasComputeType_t ct) {
  if (a != b) return false;
  if (a == CUDA_R_32F) return c == CUDA_R_32F;
  return a == CUDA_R_16BF && ct == CUBLAS_COMPUTE_32F && (c == CUDA_R_16BF || c == CUDA_R_32F);
}

/* The reference product of cuBLAS and cuBLASLt: for every element (i, j) of the column-major
** m x n result, store(i, j, s) with s = sum_l op(A)(i, l) op(B)(l, j) in double over the inputs
** (A and B of data type ab: fp32 or bf16) as compute type ct rounds them (emu_gemm_input); so a
** TF32- or bf16-mode run shows that format's error and an fp32 run does not (fp32 sums on a GPU
** are within rounding of it).
** op(A) rows and op(B) columns are copied out contiguous first, so the inner loop is a dot
** product of two contiguous double arrays. */
static void emu_gemm(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const void* A,
                     int lda, const void* B, int ldb, cudaDataType ab, cublasComputeType_t ct,
                     const std::function<void(int, int, double)>& store) {
  std::vector<double> a((size_t)m * k), b((size_t)n * k); /* a[i][l] = op(A)(i, l), b[j][l] = op(B)(l, j) */
  for (int i = 0; i < m; i++)
    for (int l = 0; l < k; l++)
      a[(size_t)i * k + l] = emu_gemm_input(emu_load(A, ab, ta == CUBLAS_OP_N ? i + (size_t)l * lda : l + (size_t)i * lda), ct);
  for (int j = 0; j < n; j++)
    for (int l = 0; l < k; l++)
      b[(size_t)j * k + l] = emu_gemm_input(emu_load(B, ab, tb == CUBLAS_OP_N ? l + (size_t)j * ldb : j + (size_t)l * ldb), ct);
  for (int j = 0; j < n; j++)
    for (int i = 0; i < m; i++) {
      const double *ai = &a[(size_t)i * k], *bj = &b[(size_t)j * k];
      double s = 0;
      for (int l = 0; l < k; l++) s += ai[l] * bj[l];
      store(i, j, s);
    }
}

/* Whether ct is a compute type the emulation (and osdp) uses. */
static bool emu_compute_ok(cublasComputeType_t ct) {
  return ct == CUBLAS_COMPUTE_32F || ct == CUBLAS_COMPUTE_32F_FAST_TF32 || ct == CUBLAS_COMPUTE_32F_FAST_16BF;
}

/* Column-major C = alpha op(A) op(B) + beta C with cuBLAS's argument checks and data types
** (emu_types_ok), on emu_gemm's reference product rounded to fp32 once, then to C's type (C not
** read when beta = 0, as cuBLAS). */
cublasStatus_t cublasGemmEx(cublasHandle_t, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const void* alpha_, const void* A_, cudaDataType at, int lda, const void* B_, cudaDataType bt, int ldb, const void* beta_, void* C_, cudaDataType ct_c, int ldc, cublasComputeType_t ct, cublasGemmAlgo_t) {
  int rowsA = ta == CUBLAS_OP_N ? m : k, rowsB = tb == CUBLAS_OP_N ? k : n;
  if (m < 0 || n < 0 || k < 0 || lda < std::max(1, rowsA) || ldb < std::max(1, rowsB) || ldc < std::max(1, m) ||
      !emu_compute_ok(ct) || !emu_types_ok(at, bt, ct_c, ct)) {
    fprintf(stderr, "emu: cublasGemmEx invalid: ta %d tb %d m %d n %d k %d lda %d ldb %d ldc %d compute %d types %d %d %d\n",
            ta, tb, m, n, k, lda, ldb, ldc, (int)ct, (int)at, (int)bt, (int)ct_c);
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  float alpha = *(const float*)alpha_, beta = *(const float*)beta_;
  emu_gemm(ta, tb, m, n, k, A_, lda, B_, ldb, at, ct, [&](int i, int j, double s) {
    size_t c = i + (size_t)j * ldc;
    emu_store(C_, ct_c, c, (float)(alpha * s + (beta != 0 ? beta * (double)emu_load(C_, ct_c, c) : 0.0)));
  });
  return CUBLAS_STATUS_SUCCESS;
}

// ----------------------------------------------------------------------------
// cuBLASLt: descriptors, heuristic and matmul with the epilogues osdp uses (bias, GELU + aux)

struct EmuLtContext { int live; };
struct EmuLtMatmulDesc {
  cublasComputeType_t compute;
  int32_t pointer_mode = CUBLASLT_POINTER_MODE_HOST, transa = CUBLAS_OP_N, transb = CUBLAS_OP_N;
  uint32_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  const void* bias = nullptr;
  void* aux = nullptr;
  int64_t aux_ld = 0;
  int32_t bias_type = -1, aux_type = -1; /* -1: D's type */
};
struct EmuLtLayout { cudaDataType type; uint64_t rows, cols; int64_t ld; };
struct EmuLtPreference { uint64_t max_workspace = 0; uint32_t align[4] = {256, 256, 256, 256}; };
/* What the emulated heuristic puts in an algorithm: a tag, the alignments of A, B, C, D it
** assumed (the preference's), its workspace and the problem's m, n, k. */
enum { ALGO_TAG, ALGO_ALIGN, ALGO_WORKSPACE = ALGO_ALIGN + 4, ALGO_MNK };
static const uint64_t EMU_ALGO_TAG = 0x656d756c74616c67ull; /* "emultalg" */
/* The workspace the emulated algorithm asks for (at most the preference's): a call that forgot
** to pass the workspace fails as it would on a GPU whose algorithm needs one. */
static const uint64_t EMU_ALGO_WORKSPACE = (uint64_t)1 << 20;

/* Prints "emu: cublasLt<call>: <why>" and returns CUBLAS_STATUS_INVALID_VALUE: what the real
** library refuses, or what the emulation does not model, fails loudly. */
static cublasStatus_t lt_invalid(const char* call, const char* why, long long value = 0) {
  fprintf(stderr, "emu: cublasLt%s: %s (%lld)\n", call, why, value);
  return CUBLAS_STATUS_INVALID_VALUE;
}

cublasStatus_t cublasLtCreate(cublasLtHandle_t* h) { *h = new EmuLtContext{1}; return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasLtDestroy(cublasLtHandle_t h) { delete h; return CUBLAS_STATUS_SUCCESS; }

/* The operation's compute type must be one cuBLAS's GEMM emulation has, and its scale type
** (alpha, beta) fp32. */
cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* d, cublasComputeType_t ct, cudaDataType_t scale) {
  if (!emu_compute_ok(ct)) return lt_invalid("MatmulDescCreate", "compute type not emulated", ct);
  if (scale != CUDA_R_32F) return lt_invalid("MatmulDescCreate", "scale type is not CUDA_R_32F", scale);
  *d = new EmuLtMatmulDesc;
  (*d)->compute = ct;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d) { delete d; return CUBLAS_STATUS_SUCCESS; }

/* Copies the attribute's value when buf holds exactly its type's size (the library's check). */
template <class T> static cublasStatus_t lt_take(T* field, const void* buf, size_t size, const char* call, int attr) {
  if (buf == nullptr || size != sizeof(T)) return lt_invalid(call, "attribute value of the wrong size (or NULL)", attr);
  memcpy(field, buf, sizeof(T));
  return CUBLAS_STATUS_SUCCESS;
}

/* Whether e is an epilogue the emulation computes. */
static bool lt_epilogue_ok(uint32_t e) {
  return e == CUBLASLT_EPILOGUE_DEFAULT || e == CUBLASLT_EPILOGUE_BIAS || e == CUBLASLT_EPILOGUE_GELU ||
         e == CUBLASLT_EPILOGUE_GELU_BIAS || e == CUBLASLT_EPILOGUE_GELU_AUX || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
}

/* The attributes osdp sets, each of its documented type; any other attribute is refused. */
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t a, const void* buf, size_t size) {
  const char* call = "MatmulDescSetAttribute";
  cublasStatus_t st;
  switch (a) {
    case CUBLASLT_MATMUL_DESC_POINTER_MODE: return lt_take(&d->pointer_mode, buf, size, call, a);
    case CUBLASLT_MATMUL_DESC_TRANSA: return lt_take(&d->transa, buf, size, call, a);
    case CUBLASLT_MATMUL_DESC_TRANSB: return lt_take(&d->transb, buf, size, call, a);
    case CUBLASLT_MATMUL_DESC_EPILOGUE:
      if ((st = lt_take(&d->epilogue, buf, size, call, a)) != CUBLAS_STATUS_SUCCESS) return st;
      return lt_epilogue_ok(d->epilogue) ? st : lt_invalid(call, "epilogue not emulated", d->epilogue);
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER: return lt_take(&d->bias, buf, size, call, a);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER: return lt_take(&d->aux, buf, size, call, a);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD: return lt_take(&d->aux_ld, buf, size, call, a);
    case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE: return lt_take(&d->bias_type, buf, size, call, a);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE: return lt_take(&d->aux_type, buf, size, call, a);
    default: return lt_invalid(call, "attribute not emulated", a);
  }
}

/* A column-major fp32 or bf16 layout with ld >= rows (the kinds osdp describes). */
cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* l, cudaDataType type, uint64_t rows, uint64_t cols, int64_t ld) {
  if (type != CUDA_R_32F && type != CUDA_R_16BF) return lt_invalid("MatrixLayoutCreate", "data type not emulated", type);
  if (ld < 1 || (uint64_t)ld < rows) return lt_invalid("MatrixLayoutCreate", "leading dimension below the rows", ld);
  *l = new EmuLtLayout{type, rows, cols, ld};
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t l) { delete l; return CUBLAS_STATUS_SUCCESS; }

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* p) { *p = new EmuLtPreference; return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p) { delete p; return CUBLAS_STATUS_SUCCESS; }

/* The workspace limit (uint64_t) and the alignments of A, B, C, D (uint32_t, powers of two). */
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t p, cublasLtMatmulPreferenceAttributes_t a, const void* buf, size_t size) {
  const char* call = "MatmulPreferenceSetAttribute";
  if (a == CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES) return lt_take(&p->max_workspace, buf, size, call, a);
  if (a < CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES || a > CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES)
    return lt_invalid(call, "preference not emulated", a);
  uint32_t v;
  cublasStatus_t st = lt_take(&v, buf, size, call, a);
  if (st != CUBLAS_STATUS_SUCCESS) return st;
  if (v == 0 || (v & (v - 1)) != 0) return lt_invalid(call, "alignment not a power of two", v);
  p->align[a - CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES] = v;
  return CUBLAS_STATUS_SUCCESS;
}

/* The problem's m, n, k from the layouts, or an error: op(A) is m x k, op(B) k x n, C and D
** m x n with the same layout (osdp multiplies in place, C == D), data types cuBLAS's GEMM has
** (emu_types_ok: fp32, or bf16 A and B with a bf16 or fp32 D), the operation's settings
** consistent with its epilogue (bias and aux pointers set, bias and aux of D's type, aux ld a
** multiple of 8 and at least m: cublasLt.h's rules), host scalars. The heuristic and the matmul
** both check it, as the library does. */
static cublasStatus_t lt_problem(const char* call, cublasLtMatmulDesc_t d, cublasLtMatrixLayout_t A, cublasLtMatrixLayout_t B,
                                 cublasLtMatrixLayout_t C, cublasLtMatrixLayout_t D, uint64_t mnk[3]) {
  if (!d || !A || !B || !C || !D) return lt_invalid(call, "a descriptor is NULL");
  if (d->pointer_mode != CUBLASLT_POINTER_MODE_HOST) return lt_invalid(call, "pointer mode not host (osdp passes host scalars)", d->pointer_mode);
  if ((d->transa != CUBLAS_OP_N && d->transa != CUBLAS_OP_T) || (d->transb != CUBLAS_OP_N && d->transb != CUBLAS_OP_T))
    return lt_invalid(call, "transpose not N or T", d->transa * 10 + d->transb);
  uint64_t m = D->rows, n = D->cols;
  uint64_t am = d->transa == CUBLAS_OP_N ? A->rows : A->cols, k = d->transa == CUBLAS_OP_N ? A->cols : A->rows;
  uint64_t bk = d->transb == CUBLAS_OP_N ? B->rows : B->cols, bn = d->transb == CUBLAS_OP_N ? B->cols : B->rows;
  if (am != m || bk != k || bn != n) return lt_invalid(call, "op(A), op(B) and D do not chain (m x k, k x n, m x n)");
  if (C->rows != m || C->cols != n || C->ld != D->ld || C->type != D->type) return lt_invalid(call, "C's layout is not D's");
  if (!emu_types_ok(A->type, B->type, D->type, d->compute))
    return lt_invalid(call, "data types of A, B, D and the compute type have no kernel", A->type * 100 + D->type);
  bool bias = d->epilogue & CUBLASLT_EPILOGUE_BIAS, aux = (d->epilogue & 128) != 0;
  if (bias && d->bias == nullptr) return lt_invalid(call, "bias epilogue without CUBLASLT_MATMUL_DESC_BIAS_POINTER");
  if (bias && d->bias_type != -1 && d->bias_type != D->type) return lt_invalid(call, "bias type is not D's", d->bias_type);
  if (aux && d->aux == nullptr) return lt_invalid(call, "GELU_AUX epilogue without CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER");
  if (aux && (d->aux_ld < (int64_t)m || d->aux_ld % 8 != 0)) return lt_invalid(call, "aux ld below m or not a multiple of 8", d->aux_ld);
  if (aux && d->aux_type != -1 && d->aux_type != D->type) return lt_invalid(call, "aux type is not D's", d->aux_type);
  mnk[0] = m; mnk[1] = n; mnk[2] = k;
  return CUBLAS_STATUS_SUCCESS;
}

/* One algorithm for any valid problem, carrying the preference's alignments and a workspace of
** at most the preference's limit (EMU_ALGO_WORKSPACE); the matmul then holds its pointers to
** them, as a GPU kernel chosen for those alignments needs. */
cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t h, cublasLtMatmulDesc_t d, cublasLtMatrixLayout_t A,
                                              cublasLtMatrixLayout_t B, cublasLtMatrixLayout_t C, cublasLtMatrixLayout_t D,
                                              cublasLtMatmulPreference_t p, int requested, cublasLtMatmulHeuristicResult_t results[],
                                              int* count) {
  const char* call = "MatmulAlgoGetHeuristic";
  if (!h || !p || requested < 1 || !results || !count) return lt_invalid(call, "handle, preference, results or count missing", requested);
  uint64_t mnk[3];
  cublasStatus_t st = lt_problem(call, d, A, B, C, D, mnk);
  if (st != CUBLAS_STATUS_SUCCESS) return st;
  memset(&results[0], 0, sizeof results[0]);
  uint64_t* algo = results[0].algo.data;
  algo[ALGO_TAG] = EMU_ALGO_TAG;
  for (int i = 0; i < 4; i++) algo[ALGO_ALIGN + i] = p->align[i];
  algo[ALGO_WORKSPACE] = std::min(p->max_workspace, EMU_ALGO_WORKSPACE);
  algo[ALGO_MNK] = mnk[0] << 42 | mnk[1] << 21 | mnk[2];
  results[0].workspaceSize = algo[ALGO_WORKSPACE];
  results[0].state = CUBLAS_STATUS_SUCCESS;
  results[0].wavesCount = 1.0f;
  *count = 1;
  return CUBLAS_STATUS_SUCCESS;
}

/* The tanh-approximation GELU, the formula of osdp's CPU kernel (cpu_kernels_real.c), in double:
** 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))). */
static double emu_gelu(double x) {
  return 0.5 * x * (1.0 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
}

/* Checks that pointer p of matrix `which` is aligned as the algorithm assumed. */
static cublasStatus_t lt_aligned(const void* p, uint64_t align, const char* which) {
  if ((uintptr_t)p % align == 0) return CUBLAS_STATUS_SUCCESS;
  fprintf(stderr, "emu: cublasLtMatmul: %s at %p is not %llu-byte aligned as the algorithm assumed\n", which, p, (unsigned long long)align);
  return CUBLAS_STATUS_INVALID_VALUE;
}

static long long lt_matmuls; /* cublasLtMatmul calls that computed a product */
/* How many products cublasLtMatmul has computed: the kernel checks (test_cuda_kernels.c) tell
** from it that a kernel took its cuBLASLt path and not its unfused fallback. */
extern "C" long long emu_lt_matmuls(void) { return lt_matmuls; }

/* D = epilogue(alpha op(A) op(B) + beta C [+ bias]) on emu_gemm's reference product: the sum in
** double, rounded to fp32 once (C not read when beta = 0), then to D's type (a bf16 D, C, bias and
** aux are read and written as bf16; the epilogue works on the fp32 value). GELU_AUX writes that fp32 sum to aux
** and GELU of it to D, so D = GELU(aux) exactly as osdp's CPU computes GELU from the stored
** pre-activation. The real cuBLASLt evaluates its GELU epilogue in fp32 on the fp32 sum, with
** its own tanh; cublasLt.h documents it only as "GELU" (x := GELU(x)). It is taken to be this
** tanh approximation, as llm.c takes it for GPT-2; a GPU run of test_cuda_kernels checks that:
** its fp32-mode cases hold the fused GELU to the CPU's tanh form within 1e-5 of the largest
** value, which the erf form (up to 4.7e-4 away where pre is about -2.7) would not meet. Checked
** first: the problem (lt_problem), the algorithm (the emulated heuristic's, for this m, n, k),
** the pointers' alignment and the workspace. */
cublasStatus_t cublasLtMatmul(cublasLtHandle_t h, cublasLtMatmulDesc_t d, const void* alpha_, const void* A_,
                              cublasLtMatrixLayout_t Ad, const void* B_, cublasLtMatrixLayout_t Bd, const void* beta_,
                              const void* C_, cublasLtMatrixLayout_t Cd, void* D_, cublasLtMatrixLayout_t Dd,
                              const cublasLtMatmulAlgo_t* algo, void* workspace, size_t workspace_bytes, cudaStream_t) {
  const char* call = "Matmul";
  uint64_t mnk[3];
  if (!h || !alpha_ || !beta_ || !A_ || !B_ || !C_ || !D_) return lt_invalid(call, "handle, scalar or matrix pointer NULL");
  cublasStatus_t st = lt_problem(call, d, Ad, Bd, Cd, Dd, mnk);
  if (st != CUBLAS_STATUS_SUCCESS) return st;
  if (!algo || algo->data[ALGO_TAG] != EMU_ALGO_TAG || algo->data[ALGO_MNK] != (mnk[0] << 42 | mnk[1] << 21 | mnk[2]))
    return lt_invalid(call, "no algorithm, or one the heuristic chose for another problem");
  const void* ptrs[4] = {A_, B_, C_, D_};
  const char* names[4] = {"A", "B", "C", "D"};
  for (int i = 0; i < 4; i++)
    if ((st = lt_aligned(ptrs[i], algo->data[ALGO_ALIGN + i], names[i])) != CUBLAS_STATUS_SUCCESS) return st;
  if (workspace_bytes < algo->data[ALGO_WORKSPACE] || (workspace_bytes > 0 && workspace == nullptr))
    return lt_invalid(call, "workspace smaller than the algorithm's (or NULL)", (long long)workspace_bytes);
  int m = (int)mnk[0], n = (int)mnk[1], k = (int)mnk[2];
  cudaDataType dt = Dd->type; /* C's, the bias's and aux's too */
  const void* bias = (d->epilogue & CUBLASLT_EPILOGUE_BIAS) ? d->bias : nullptr;
  void* aux = (d->epilogue & 128) ? d->aux : nullptr;
  bool gelu = (d->epilogue & CUBLASLT_EPILOGUE_GELU) != 0;
  double alpha = *(const float*)alpha_, beta = *(const float*)beta_;
  int64_t ld = Dd->ld;
  emu_gemm((cublasOperation_t)d->transa, (cublasOperation_t)d->transb, m, n, k, A_, (int)Ad->ld,
           B_, (int)Bd->ld, Ad->type, d->compute, [&](int i, int j, double s) {
    size_t at = i + (size_t)j * ld;
    double v = alpha * s + (beta != 0 ? beta * (double)emu_load(C_, dt, at) : 0.0) +
               (bias ? (double)emu_load(bias, dt, i) : 0.0);
    float pre = (float)v;
    if (aux) emu_store(aux, dt, i + (size_t)j * d->aux_ld, pre);
    emu_store(D_, dt, at, gelu ? (float)emu_gelu(pre) : pre);
  });
  lt_matmuls++;
  return CUBLAS_STATUS_SUCCESS;
}
struct Report { ~Report() { if (launches) fprintf(stderr, "emu: %lld launches, %lld switches\n", launches, switches); } } report;
