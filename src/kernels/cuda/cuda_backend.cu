/*
** cuda_backend.cu: the CUDA backend: device memory, copies on one compute stream, the event
** clock, cuBLAS and cuBLASLt set-up and the fp32 kernel table (cuda_kernels.cu,
** cuda_attention.cu). See backend.h.
**
** Initialised on the first call of backend_cuda(): the process's GPU is the local rank (MPI or
** Slurm launcher environment) modulo the GPUs visible, so one rank per GPU needs no set-up and
** several ranks may share a GPU (each has its own context, stream and memory). Besides the
** arena's block (reserve), the backend holds device memory for the CUDA context itself (a few
** hundred MiB, the driver's), the cuBLAS and cuBLASLt handles and their one fixed workspace
** (CUBLAS_WORKSPACE_BYTES) and the reduction scratch ((CUDA_REDUCE_BLOCKS + 1) doubles, and the
** column sums' COLSUM_SCRATCH_FLOATS floats: 4 MiB). Not thread-safe: the first call must not
** race with another.
*/
#include "kernels/cuda/cuda_internal.cuh"

#include <stdio.h>
#include <stdlib.h>

CudaContext cuda_ctx;

/* The cuBLAS workspace: 32 MiB, the size NVIDIA recommends for Hopper (cuBLAS documentation,
** cublasSetWorkspace). Allocated once at initialisation, outside any arena, so cuBLAS never
** allocates during a step. */
#define CUBLAS_WORKSPACE_BYTES ((size_t)32 << 20)

/* The message of a CUDA runtime result, NULL on success. */
static const char* cuda_error_message(cudaError_t err) {
  return err == cudaSuccess ? NULL : cudaGetErrorString(err);
}

/* The message of a cuBLAS result, NULL on success. */
static const char* cuda_error_message(cublasStatus_t status) {
  return status == CUBLAS_STATUS_SUCCESS ? NULL : cublasGetStatusString(status);
}

/* Prints the one error line and aborts (see cuda_internal.cuh). */
void cuda_abort(const char* what, const char* message) {
  fprintf(stderr, "osdp: error: CUDA: %s: %s\n", what, message);
  fflush(stderr);
  abort();
}

/* Aborts with the call's text when a CUDA runtime call failed. */
void cuda_check(cudaError_t err, const char* call) {
  const char* message = cuda_error_message(err);
  if (message != NULL) cuda_abort(call, message);
}

/* Aborts with the call's text when a cuBLAS call failed. */
void cuda_check(cublasStatus_t status, const char* call) {
  const char* message = cuda_error_message(status);
  if (message != NULL) cuda_abort(call, message);
}

// ----------------------------------------------------------------------------
// memory and copies

/* The arena's block: one cudaMalloc (never managed memory). On failure the CUDA error is
** cleared, so that the next launch check does not report it again. */
static void* cuda_reserve(size_t bytes) {
  void* p = NULL;
  cudaError_t err = cudaMalloc(&p, bytes > 0 ? bytes : 1);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    osdp_fail("arena: cannot allocate %zu bytes of GPU memory (%s)", bytes,
              cudaGetErrorString(err));
    return NULL;
  }
  return p;
}

/* Frees the arena's block (cudaFree waits for the work queued on it). */
static void cuda_release(void* base, size_t, size_t) { CUDA_CHECK(cudaFree(base)); }

/* Free device memory now (shared with any other process on the same GPU). */
static size_t cuda_available(void) {
  size_t free_bytes = 0, total_bytes = 0;
  CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  return free_bytes;
}

/* Zeroes device memory, queued on the stream. */
static void cuda_zero(void* p, size_t bytes) {
  CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, cuda_ctx.stream));
}

/* Device-to-device copy, queued on the stream (the ranges must not overlap). */
static void cuda_copy(void* dst, const void* src, size_t bytes) {
  CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, cuda_ctx.stream));
}

/* Host-to-device copy. Queued on the compute stream, so it is ordered after the kernels that
** still read dst (a plain cudaMemcpy runs on the legacy default stream, which does not wait
** for a non-blocking stream), then waited for, so src is reusable on return. */
static void cuda_to_device(void* dst, const void* src, size_t bytes) {
  CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, cuda_ctx.stream));
  CUDA_CHECK(cudaStreamSynchronize(cuda_ctx.stream));
}

/* Device-to-host copy after everything queued so far; waits for it. */
static void cuda_to_host(void* dst, const void* src, size_t bytes) {
  CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, cuda_ctx.stream));
  CUDA_CHECK(cudaStreamSynchronize(cuda_ctx.stream));
}

/* Waits for all work queued on the stream. */
static void cuda_synchronize(void) { CUDA_CHECK(cudaStreamSynchronize(cuda_ctx.stream)); }

// ----------------------------------------------------------------------------
// clock and settings

/* The event clock: clock_base is the last reading's event and clock_seconds its time since
** initialisation. Each reading records clock_now, waits for it and adds the time from
** clock_base; the two events then swap. Summing short intervals in double keeps the clock
** precise for long runs (cudaEventElapsedTime's float milliseconds since a single start would
** lose microseconds after a few minutes). */
static cudaEvent_t clock_base, clock_now;
static double clock_seconds;

/* Seconds since initialisation, after everything queued so far has finished. */
static double cuda_clock(void) {
  CUDA_CHECK(cudaEventRecord(clock_now, cuda_ctx.stream));
  CUDA_CHECK(cudaEventSynchronize(clock_now));
  float ms = 0;
  CUDA_CHECK(cudaEventElapsedTime(&ms, clock_base, clock_now));
  clock_seconds += ms / 1e3;
  cudaEvent_t previous = clock_base;
  clock_base = clock_now;
  clock_now = previous;
  return clock_seconds;
}

/* The GPU has no host threads to set. */
static void cuda_set_threads(int) {}

/* The compute mode of every matmul and attention call from now on: cuBLAS's compute type for
** the mode (fp32 in and out, fp32 accumulation; the inputs rounded to TF32 or to bf16 on the
** tensor cores), and the attention kernels it selects (cuda_attention.cu). */
static void cuda_set_matmul_mode(MatmulMode mode) {
  cuda_ctx.matmul_mode = mode;
  switch (mode) {
    case MATMUL_FP32: cuda_ctx.gemm_compute = CUBLAS_COMPUTE_32F; break;
    case MATMUL_TF32: cuda_ctx.gemm_compute = CUBLAS_COMPUTE_32F_FAST_TF32; break;
    case MATMUL_BF16: cuda_ctx.gemm_compute = CUBLAS_COMPUTE_32F_FAST_16BF; break;
  }
}

// ----------------------------------------------------------------------------
// initialisation

static Backend cuda_backend;
static int init_state;             /* 0: not tried, 1: ready, -1: failed */
static char init_error[512];       /* why it failed, repeated to later calls (after "--device cuda: ") */

/* The process's rank among those on its node, from the launcher's environment (Open MPI,
** Slurm, then torchrun-style LOCAL_RANK); -1 when none is set or it is not a number. */
static int local_rank(void) {
  const char* names[] = {"OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID", "LOCAL_RANK"};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    const char* value = getenv(names[i]);
    if (value == NULL || *value == '\0') continue;
    char* end = NULL;
    long rank = strtol(value, &end, 10);
    if (*end == '\0' && rank >= 0 && rank <= 1 << 20) return (int)rank;
  }
  return -1;
}

/* The stream every kernel is queued on (NCCL's stream orders itself against it). */
static void* cuda_compute_stream(void) { return (void*)cuda_ctx.stream; }

/* Records why initialisation failed (for this and every later call) and returns -1. */
static int init_failed(const char* message) {
  snprintf(init_error, sizeof init_error, "%s", message);
  init_state = -1;
  return -1;
}

/* Checks one call of init_device: on failure, says which call on which GPU and returns -1. */
#define INIT_CHECK(call)                                                                    \
  do {                                                                                      \
    const char* message_ = cuda_error_message(call);                                        \
    if (message_ != NULL) {                                                                 \
      char line_[sizeof init_error];                                                        \
      snprintf(line_, sizeof line_, "cannot initialise GPU %d: %s: %s",                   \
               device, #call, message_);                                                    \
      return init_failed(line_);                                                            \
    }                                                                                       \
  } while (0)

/* Picks the GPU, creates the stream, the clock's events, the cuBLAS handle with its workspace
** (lent to cuBLASLt's calls too), the cuBLASLt handle and the reduction scratch, and fills the
** backend. Returns 0, or -1 with init_error set (whatever was created before a failure is left
** to process exit). */
static int init_device(void) {
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess || count == 0) {
    char line[sizeof init_error];
    snprintf(line, sizeof line, "no CUDA GPU is visible (%s); use --device cpu",
             err != cudaSuccess ? cudaGetErrorString(err) : "no CUDA-capable device is detected");
    return init_failed(line);
  }
  int rank = local_rank();
  int device = rank >= 0 ? rank % count : 0;
  INIT_CHECK(cudaSetDevice(device));
  INIT_CHECK(cudaStreamCreateWithFlags(&cuda_ctx.stream, cudaStreamNonBlocking));
  INIT_CHECK(cudaEventCreate(&clock_base));
  INIT_CHECK(cudaEventCreate(&clock_now));
  INIT_CHECK(cudaEventRecord(clock_base, cuda_ctx.stream));
  clock_seconds = 0;

  void* workspace = NULL;
  INIT_CHECK(cublasCreate(&cuda_ctx.cublas));
  /* cublasSetStream resets the workspace to cuBLAS's own pool: bind the stream first */
  INIT_CHECK(cublasSetStream(cuda_ctx.cublas, cuda_ctx.stream));
  INIT_CHECK(cudaMalloc(&workspace, CUBLAS_WORKSPACE_BYTES));
  INIT_CHECK(cublasSetWorkspace(cuda_ctx.cublas, workspace, CUBLAS_WORKSPACE_BYTES));
  INIT_CHECK(cublasLtCreate(&cuda_ctx.cublaslt));
  cuda_ctx.gemm_workspace = workspace;
  cuda_ctx.gemm_workspace_bytes = CUBLAS_WORKSPACE_BYTES;
  cuda_set_matmul_mode(MATMUL_TF32);

  INIT_CHECK(cudaMalloc(&cuda_ctx.reduce_partials, (CUDA_REDUCE_BLOCKS + 1) * sizeof(double)));
  cuda_ctx.reduce_result = cuda_ctx.reduce_partials + CUDA_REDUCE_BLOCKS;
  INIT_CHECK(cudaMalloc(&cuda_ctx.colsum_partials, COLSUM_SCRATCH_FLOATS * sizeof(float)));
  INIT_CHECK(cuda_attention_setup());
  INIT_CHECK(cudaStreamSynchronize(cuda_ctx.stream));

  cuda_backend.name = "cuda";
  cuda_backend.device_memory = 1;
  cuda_backend.reserve = cuda_reserve;
  cuda_backend.release = cuda_release;
  cuda_backend.available = cuda_available;
  cuda_backend.zero = cuda_zero;
  cuda_backend.copy = cuda_copy;
  cuda_backend.to_device = cuda_to_device;
  cuda_backend.to_host = cuda_to_host;
  cuda_backend.synchronize = cuda_synchronize;
  cuda_backend.clock = cuda_clock;
  cuda_backend.set_threads = cuda_set_threads;
  cuda_backend.set_matmul_mode = cuda_set_matmul_mode;
  cuda_backend.f32 = &cuda_kernels_f32;
  cuda_backend.f64 = NULL;
  cuda_backend.bf16 = &cuda_kernels_bf16;
  cuda_backend.attention_scratch_elems = cuda_attention_scratch_elems;
  cuda_backend.compute_stream = cuda_compute_stream;
  init_state = 1;
  return 0;
}

#undef INIT_CHECK

/* The CUDA backend, initialised on the first call; NULL with the reason (osdp_fail) when no
** GPU is usable, on that call and every later one. */
extern "C" const Backend* backend_cuda(void) {
  if (init_state == 0) init_device();
  if (init_state < 0) {
    osdp_fail("--device cuda: %s", init_error);
    return NULL;
  }
  return &cuda_backend;
}

/* This osdp was built with the CUDA backend. */
extern "C" int backend_cuda_built(void) { return 1; }
