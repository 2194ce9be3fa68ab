/*
** cpu_dnnl.h: the CPU's matrix products through oneDNN (libdnnl): bf16 x bf16 with fp32
** accumulation on AVX512-BF16 (or AMX), for the CPU's bf16 kernel table (cpu_bf16.c).
**
** oneDNN builds a primitive per shape (sizes, strides, data types, bias, accumulate): slow to
** make (about a millisecond), fast to run. A training step uses a few dozen shapes, over and
** over, so each primitive is made once and kept in a small cache keyed by its shape; the cache
** lives as long as the process. oneDNN runs on the OpenMP threads kernels_set_threads sets.
** Its own workspace (a primitive's scratchpad) is the library's, as OpenBLAS's buffers are.
*/
#ifndef OSDP_CPU_DNNL_H
#define OSDP_CPU_DNNL_H

#include <stddef.h>

#include "kernels/backend.h"

/* Whether this CPU computes bf16 products natively (AVX512_BF16 or AMX-BF16): the condition of
** the CPU's bf16 kernels. 0 with name set to the instruction set it lacks otherwise. */
int dnnl_bf16_supported(const char** missing);

/* Tests only: on a CPU without native bf16 products, compute them by widening to fp32 and
** sgemm instead (the same contract: fp32 accumulation, one rounding on store; slow, and it
** allocates its fp32 copies), so the CPU's bf16 kernels can be checked on any machine. The
** environment variable OSDP_CPU_BF16_EMULATE=1 turns it on for the CPU backend (backend_cpu);
** never a silent fallback for a user. */
void dnnl_bf16_emulate(int on);
/* Whether products run natively or emulated (dnnl_bf16_emulate): the bf16 kernels can run. */
int dnnl_bf16_usable(void);

/* out[BT, OC] (bf16; = or += when accumulate) = inp[BT, K] (bf16, row stride ldinp) @ w[K, OC]
** (bf16) (+ bias[OC], bf16, when not NULL), accumulated in fp32 and rounded once, to nearest
** even, as it is stored. */
void dnnl_matmul_bf16_forward(osdp_bf16* out, const osdp_bf16* inp, int ldinp, const osdp_bf16* w,
                              const osdp_bf16* bias, int BT, int K, int OC, int accumulate);
/* The input gradient dinp[BT, K] (bf16, row stride ldinp, OVERWRITTEN; columns K..ldinp
** untouched) = dout[BT, OC] @ w^T, fp32 accumulation. */
void dnnl_matmul_bf16_dinp(osdp_bf16* dinp, int ldinp, const osdp_bf16* dout, const osdp_bf16* w,
                           int BT, int K, int OC);
/* The weight gradient dw[K, OC] (fp32; = or += when accumulate) = inp^T @ dout, inp [BT, K]
** with row stride ldinp, dout [BT, OC], both bf16, fp32 accumulation. */
void dnnl_matmul_bf16_dw(float* dw, const osdp_bf16* inp, int ldinp, const osdp_bf16* dout, int BT,
                         int K, int OC, int accumulate);

/* GFLOP/s of oneDNN's bf16 matmul M x K by K x N (fp32 accumulation, bf16 out), the best of a
** few runs: the reference a bf16 step's speed is compared to. 0 when not supported or the
** buffers do not fit. */
double dnnl_bf16_gflops(int M, int N, int K);

/* The fp32 product of the CPU's linear layers, row-major, as cblas_sgemm takes it (transa,
** transb: 'N' or 'T'): C[M, N] = alpha op(A) op(B) + beta C. oneDNN's sgemm where osdp is built
** with it (1.0-1.3x OpenBLAS's at GPT-2's shapes on a Zen 2: docs/BENCHMARKS.md), else
** OpenBLAS's. Called outside OpenMP parallel regions (it spreads over kernels_threads()). */
void cpu_sgemm(char transa, char transb, int M, int N, int K, float alpha, const float* A, int lda,
               const float* B, int ldb, float beta, float* C, int ldc);
/* Which library cpu_sgemm runs: "oneDNN v2.6.3 sgemm, AVX2" or "OpenBLAS sgemm (kernel Zen)". */
const char* cpu_sgemm_name(void);

/* "oneDNN v2.6.3 (AVX512_BF16)": the library and the bf16 instruction set it dispatches to. */
const char* dnnl_describe(void);

#endif
