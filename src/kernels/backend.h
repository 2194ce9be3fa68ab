/*
** backend.h: the one boundary between osdp and the hardware it computes on.
**
** Everything above the kernels layer (the model step, the engine, the comm staging, the
** profiler) reaches memory and compute only through a Backend: the arena's single block, zeroing
** and copies, host <-> backend transfers, every kernel, the optimizer and the clock that times
** them. Two implementations: the CPU (OpenBLAS + OpenMP kernels of cpu_kernels.h, host memory)
** and CUDA (src/kernels/cuda/: CUDA kernels, cuBLAS, device memory; built with OSDP_CUDA).
**
** Memory handed out by a backend (from `reserve`) is that backend's: on the CPU it is host
** memory; on a GPU it is device memory that host code must never dereference (device_memory
** = 1): values cross with to_device / to_host. Kernels are queued in order on the backend's
** compute stream; functions that return a value to the host (loss, sum of squares) wait for
** their result, `synchronize` waits for everything queued.
*/
#ifndef OSDP_BACKEND_H
#define OSDP_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/kernel_list.h"

/* A bfloat16 value in backend memory: the top 16 bits of the fp32 value it was rounded from
** (sign, 8 exponent bits, 7 mantissa bits), rounded to nearest even. A struct, so that a bf16
** array is never passed where a float or a uint16_t array is expected; kernels widen it to fp32
** as they read it (CUDA's __nv_bfloat16 has the same layout). Host code only moves such arrays
** (osdp_bf16_from_float and osdp_bf16_to_float convert on the host, for tests and transfers). */
typedef struct osdp_bf16 {
  uint16_t bits;
} osdp_bf16;

/* f rounded to bf16, to nearest even (a NaN stays a NaN; large values may round to inf). */
osdp_bf16 osdp_bf16_from_float(float f);
/* The float value of h (exact). */
float osdp_bf16_to_float(osdp_bf16 h);

/* The kernel table of one precision: a pointer per kernel of KERNEL_LIST (kernel_list.h, with
** its contracts and the four element roles act, wt, grad, stat), under the kernel's own name:
** bk->f32->matmul_forward(...). Kernels_bf16 is bf16 storage: bf16 activations and weight
** copies, fp32 gradients, optimizer state and statistics. */
#define KERNEL_TABLE_MEMBER(ret, name, params) ret(*name) params;
typedef struct Kernels_f32 {
  KERNEL_LIST(KERNEL_TABLE_MEMBER, float, float, float, float)
} Kernels_f32;
typedef struct Kernels_f64 {
  KERNEL_LIST(KERNEL_TABLE_MEMBER, double, double, double, double)
} Kernels_f64;
typedef struct Kernels_bf16 {
  KERNEL_LIST(KERNEL_TABLE_MEMBER, osdp_bf16, osdp_bf16, float, float)
} Kernels_bf16;
#undef KERNEL_TABLE_MEMBER

/* The storage precision of a training step: which kernel table runs it (bk->f32, ->f64, ->bf16)
** and how many bytes each of KERNEL_LIST's four element roles takes (precision_elems).
** PRECISION_FP32: everything fp32 (training's default); PRECISION_FP64: everything double (the
** CPU's gradient checks); PRECISION_BF16: bf16 activations and weight copies, fp32 gradients,
** master weights, optimizer state and statistics (`--precision bf16`, on a backend with a bf16
** table). One source for the step, the engine's buffers and the memory prediction. */
typedef enum Precision { PRECISION_FP32 = 0, PRECISION_FP64 = 1, PRECISION_BF16 = 2 } Precision;

/* Bytes of one element of each role (kernel_list.h): act, wt, grad, stat. */
typedef struct StepElems {
  size_t act, wt, grad, stat;
} StepElems;

/* The element sizes of precision p: fp32 4 4 4 4, fp64 8 8 8 8, bf16 2 2 4 4. */
StepElems precision_elems(Precision p);
/* The Precision called `name` ("fp32", "fp64" or "bf16"), or -1 for any other name. */
int precision_parse(const char* name);
/* The name of precision p. */
const char* precision_name(Precision p);

/* How a backend computes matrix products (on CUDA also attention), always on fp32 storage with
** fp32 accumulation: MATMUL_FP32 in full fp32; MATMUL_TF32 on tensor cores with the inputs
** rounded to TF32 (10 mantissa bits; the CUDA default, `--matmul tf32`); MATMUL_BF16 on tensor
** cores with the inputs rounded to bf16 (7 mantissa bits: PyTorch's
** float32_matmul_precision("medium"), `--matmul bf16`). The CPU computes in fp32 in every mode. */
typedef enum MatmulMode { MATMUL_FP32 = 0, MATMUL_TF32 = 1, MATMUL_BF16 = 2 } MatmulMode;

typedef struct Backend {
  const char* name;         /* "cpu" or "cuda" */
  int device_memory;        /* 1: reserved memory is not host-addressable */
  /* The arena's block: reserve returns `bytes` of backend memory (CPU: address space committed
  ** on first touch; CUDA: one cudaMalloc) or NULL with an error set (osdp_fail). release gives
  ** it back; `written` says how much of its start may hold non-zero bytes (the arena's high-water
  ** mark): the CPU keeps one released range, its pages committed, for the next reserve and
  ** zeroes that much of it then. */
  void* (*reserve)(size_t bytes);
  void (*release)(void* base, size_t bytes, size_t written);
  int reserve_zeroed;       /* 1: what reserve returns reads as zeros (CPU: anonymous mmap) */
  /* Bytes the backend could still reserve (CUDA: free device memory; CPU: 0 = not bounded by
  ** the backend). */
  size_t (*available)(void);
  void (*zero)(void* p, size_t bytes);                          /* backend memory */
  void (*copy)(void* dst, const void* src, size_t bytes);       /* backend to backend */
  void (*to_device)(void* dst, const void* src, size_t bytes);  /* host to backend; src reusable on return */
  void (*to_host)(void* dst, const void* src, size_t bytes);    /* backend to host; waits */
  void (*synchronize)(void);                                    /* waits for all queued work */
  /* Seconds on a clock that has seen every kernel queued so far finish (CPU: the wall clock;
  ** CUDA: an event recorded and waited for, timed against one recorded at start), so the
  ** difference of two readings is the work between them. */
  double (*clock)(void);
  void (*set_threads)(int n);                                   /* CPU kernel threads */
  /* The compute mode of matrix products and attention from now on (MatmulMode; `--matmul`):
  ** CUDA's default is MATMUL_TF32, MATMUL_FP32 is the exact path of the tests. The CPU
  ** computes in fp32 whatever the mode. */
  void (*set_matmul_mode)(MatmulMode mode);
  const Kernels_f32* f32;
  const Kernels_f64* f64;   /* NULL where there are no fp64 kernels (CUDA) */
  const Kernels_bf16* bf16; /* bf16 storage; NULL where there is none (the CPU) */
  /* Elements of scratch the attention kernels need per kernel thread for sequence length T
  ** and head size hs (the `scratch` argument of attention_forward/backward holds threads x
  ** this many): the CPU's tiles (attention_scratch_elems of cpu_kernels.h); 0 on CUDA, whose
  ** attention keeps its tiles in shared memory. */
  size_t (*attention_scratch_elems)(int T, int hs);
  /* CUDA: the cudaStream_t all kernels are queued on (for NCCL's stream to order against);
  ** NULL on the CPU. */
  void* (*compute_stream)(void);
} Backend;

/* The CPU backend (always available). */
const Backend* backend_cpu(void);
/* The CPU kernels and memory under a backend that says its memory is not host-addressable
** (device_memory = 1), so the engine and comm take the GPU's paths (host staging of every
** collective, copies in and out): how those paths are tested on machines without a GPU. */
const Backend* backend_cpu_staged(void);
/* The CUDA backend on the process's GPU, initialised on first call; NULL with an error saying why
** (built without CUDA, no GPU visible, initialisation failed). Defined in src/kernels/cuda/
** when built with OSDP_CUDA, else in backend.c. */
const Backend* backend_cuda(void);
/* The backend called `name` ("cpu" or "cuda"), or NULL with an error naming `field` (the option
** being read, e.g. "--device") and the accepted values. */
const Backend* backend_by_name(const char* name, const char* field);
/* GFLOP/s of a matrix product of M x K by K x N on backend bk: OpenBLAS's sgemm rate
** (kernels_sgemm_gflops) on the CPU, the best of 5 timed matmul_forward calls on the backend's
** clock elsewhere; 0 when the buffers do not fit. The reference a step's speed is compared to. */
double backend_matmul_gflops(const Backend* bk, int M, int N, int K);
/* Whether backend bk can run steps of precision prec: 0, or -1 with an error saying what it
** lacks (bf16 on a CPU without AVX512_BF16 or AMX names the instruction set). */
int backend_check_precision(const Backend* bk, Precision prec);
/* The MatmulMode called `name` ("fp32", "tf32" or "bf16"), or -1 for any other name. */
int matmul_mode_parse(const char* name);
/* The name of mode m: "fp32", "tf32" or "bf16". */
const char* matmul_mode_name(MatmulMode m);
/* Whether this osdp was built with the CUDA backend. */
int backend_cuda_built(void);

#endif
