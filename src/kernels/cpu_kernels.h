/*
** cpu_kernels.h: forward and backward kernels of every GPT operator on the CPU.
**
** Every kernel exists twice, in fp32 (suffix _f32, used for training) and in fp64
** (suffix _f64, used by the finite-difference tests so that gradients are checked in
** double precision against exactly the same code). Both are generated from one source,
** cpu_kernels_impl.inc, with REAL and KN(name) defined by the including file.
**
** Conventions (all tensors row-major, contiguous unless a leading dimension is given):
**   - a linear weight is stored [in, out] (K rows of OC floats), so a slice along the
**     reduction dimension is a contiguous block of rows: y = sum_i x[:, s_i] W[s_i, :];
**   - the tied token embedding is stored [C, Vp] (it is the LM head's [in, out] weight),
**     Vp = vocabulary padded to a multiple of 128 as llm.c pads it;
**   - every backward kernel ACCUMULATES (+=) into its input-gradient and parameter-gradient
**     outputs; callers zero them when a fresh gradient is wanted;
**   - kernels allocate nothing: any scratch is passed in by the caller;
**   - results are bit-for-bit deterministic for a given thread count (no racy reductions).
*/
#ifndef OSDP_CPU_KERNELS_H
#define OSDP_CPU_KERNELS_H

#include <stddef.h>

/* Sets the number of threads used by OpenMP loops and by OpenBLAS. */
void kernels_set_threads(int n);
/* Returns the thread count set by kernels_set_threads (1 by default). */
int kernels_threads(void);
/* The sgemm rate (GFLOP/s, best of a few runs) of an M x K by K x N product at the current
** thread count: the reference benchmarks compare with, and the profiler's stand-in FLOP rate. */
double kernels_sgemm_gflops(int M, int N, int K);
/* The name of the CPU kernel OpenBLAS chose ("Haswell", "SkylakeX", "Prescott" = generic). */
const char* kernels_blas_core(void);

#define REAL float
#define KN(name) name##_f32
#include "cpu_kernels_decl.inc"
#undef REAL
#undef KN

#define REAL double
#define KN(name) name##_f64
#include "cpu_kernels_decl.inc"
#undef REAL
#undef KN

/* Tile sizes of the attention kernels: query rows and key rows per tile. Each query tile
** meets only the key tiles of its causal prefix; see cpu_kernels_impl.inc. 64 x 64 keeps
** every product on OpenBLAS's small-matrix kernels for head sizes up to 128 and measured best
** overall (64 x 128 was ~2% faster at hs = 64 but ~10% slower at hs = 128; 32 and 128 slower). */
#ifndef ATTENTION_TILE_Q
#define ATTENTION_TILE_Q 64
#endif
#ifndef ATTENTION_TILE_K
#define ATTENTION_TILE_K 64
#endif

/* Elements of attention scratch needed per thread for sequence length T and head size hs
** (both passes). */
size_t attention_scratch_elems(int T, int hs);

#endif
