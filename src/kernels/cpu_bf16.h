/*
** cpu_bf16.h: the CPU's bf16 kernel table: KERNEL_LIST (kernel_list.h) with bf16 activations and
** weight copies (act = wt = osdp_bf16) and fp32 gradients, optimizer state and statistics (grad
** = stat = float), the storage of `--precision bf16`. Every kernel computes in fp32 and rounds a
** bf16 result once, to nearest even, as it stores it; the matrix products run in oneDNN
** (cpu_dnnl.h), so the table is for CPUs where dnnl_bf16_supported() says so (tests may emulate
** the products: dnnl_bf16_emulate). See cpu_bf16.c.
*/
#ifndef OSDP_CPU_BF16_H
#define OSDP_CPU_BF16_H

#include "kernels/backend.h"

/* The CPU's bf16 table (cpu_bf16.c). Its attention kernels take the CPU's scratch,
** kernels_threads() x attention_scratch_elems(T, hs) floats, as the fp32 table's (and keep
** what of their fp32 tiles does not fit there in at most 64 KB of each thread's stack). */
extern const Kernels_bf16 cpu_kernels_bf16;

#endif
