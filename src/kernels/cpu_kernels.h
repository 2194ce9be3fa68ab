/*
** cpu_kernels.h: the CPU kernels: forward and backward of every model family's operators on the
** CPU (OpenBLAS + OpenMP), the thread count they run with and the size of their attention
** scratch.
**
** The kernels themselves are reached through their tables (normally as backend_cpu()->f32 and
** ->f64): one per precision, with the members and contracts of KERNEL_LIST (kernel_list.h).
** Both come from one source, cpu_kernels_real.c, compiled twice (CMakeLists.txt): in fp32 for
** training and in fp64 (OSDP_REAL_DOUBLE) for the finite-difference tests, so that gradients
** are checked in double precision against exactly the same code. In each compile the kernels
** are static functions under their own names (matmul_forward, ...) and only the table is
** exported.
*/
#ifndef OSDP_CPU_KERNELS_H
#define OSDP_CPU_KERNELS_H

#include <stddef.h>

#include "kernels/backend.h"

/* Sets the number of threads used by OpenMP loops and by OpenBLAS. */
void kernels_set_threads(int n);
/* Returns the thread count set by kernels_set_threads (1 by default). */
int kernels_threads(void);
/* The sgemm rate (GFLOP/s, best of a few runs) of an M x K by K x N product at the current
** thread count, with the linear layers' own product (cpu_sgemm: oneDNN's or OpenBLAS's): the
** reference benchmarks compare with, and the profiler's stand-in FLOP rate. */
double kernels_sgemm_gflops(int M, int N, int K);
/* The name of the CPU kernel OpenBLAS chose ("Haswell", "SkylakeX", "Prescott" = generic). */
const char* kernels_blas_core(void);
/* OpenBLAS's build description ("OpenBLAS 0.3.21 DYNAMIC_ARCH NO_AFFINITY Zen MAX_THREADS=64"). */
const char* kernels_blas_config(void);

/* The CPU kernel tables (cpu_kernels_real.c): fp32, and fp64 for the gradient checks. */
extern const Kernels_f32 cpu_kernels_f32;
extern const Kernels_f64 cpu_kernels_f64;

/* Tile sizes of the attention kernels: query rows and key rows per tile. Each query tile
** meets only the key tiles of its causal prefix; see cpu_kernels_real.c. 64 x 64 keeps
** every product on OpenBLAS's small-matrix kernels for head sizes up to 128 and measured best
** overall (64 x 128 was ~2% faster at hs = 64 but ~10% slower at hs = 128; 32 and 128 slower). */
#ifndef ATTENTION_TILE_Q
#define ATTENTION_TILE_Q 64
#endif
#ifndef ATTENTION_TILE_K
#define ATTENTION_TILE_K 64
#endif

/* Elements of attention scratch needed per thread for sequence length T and head size hs
** (both passes): the CPU backend's attention_scratch_elems member. */
size_t attention_scratch_elems(int T, int hs);

#endif
