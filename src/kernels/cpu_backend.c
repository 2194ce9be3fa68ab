/* cpu_backend.c: the CPU backend: host memory, the OpenBLAS/OpenMP kernel tables of
** cpu_kernels_real.c (fp32 and fp64) and the wall clock. See backend.h. */
#define _GNU_SOURCE /* mremap */
#include "kernels/backend.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "core/util.h"
#include "kernels/cpu_bf16.h"
#include "kernels/cpu_dnnl.h"
#include "kernels/cpu_kernels.h"

/* One released range kept for the next reservation (SPARE_MAX_WRITTEN bytes written at most):
** its pages stay committed, so an engine built after another (the profile's and trial's plans,
** then the training engine) does not pay the first touches again; `written` is how much of it
** may hold non-zero bytes. */
static struct { char* base; size_t bytes, written; } spare;
#define SPARE_MAX_WRITTEN ((size_t)64 << 30)

/* bytes rounded up to whole pages: what a mapping of that length spans. */
static size_t whole_pages(size_t bytes) {
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  return (bytes + page - 1) / page * page;
}

/* A fresh range of address space; pages are committed when first touched (MAP_NORESERVE), in
** 2 MiB transparent huge pages where the kernel has them (a hint; without it 4 KiB pages): a
** first step touches the whole arena, and on this machine (a VM) first touches cost 4 s per GB
** in 4 KiB pages against 1.5 s in huge pages (gpt2-124m's first zero3 step on 2 ranks: 11.6 s
** against 6.2 s). */
static void* fresh_range(size_t bytes) {
  void* p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                 -1, 0);
  if (p == MAP_FAILED) {
    osdp_fail("arena: cannot reserve %zu bytes of address space", bytes);
    return NULL;
  }
#ifdef MADV_HUGEPAGE
  madvise(p, bytes, MADV_HUGEPAGE); /* a hint: its failure changes nothing */
#endif
  return p;
}

/* The spare range resized to `bytes` (its tail unmapped, or grown in place or moved with its
** pages by mremap) with its written prefix zeroed, so it reads as a fresh one; NULL (the spare
** unmapped) when it cannot grow. */
static void* reuse_spare(size_t bytes) {
  char* p = spare.base;
  size_t have = spare.bytes, want = whole_pages(bytes), written = spare.written;
  spare.base = NULL;
  if (have > want) {
    munmap(p + want, have - want);
  } else if (have < want) {
    void* q = mremap(p, have, want, MREMAP_MAYMOVE);
    if (q == MAP_FAILED) { munmap(p, have); return NULL; }
    p = q;
#ifdef MADV_HUGEPAGE
    madvise(p, want, MADV_HUGEPAGE);
#endif
  }
  memset(p, 0, written < want ? written : want);
  return p;
}

/* Reserves `bytes` of address space reading as zeros: the spare range when there is one, else
** a fresh one. */
static void* cpu_reserve(size_t bytes) {
  void* p = spare.base ? reuse_spare(bytes) : NULL;
  return p ? p : fresh_range(bytes);
}

/* Gives a range back: kept as the spare when it was written less than SPARE_MAX_WRITTEN and
** more than a spare already kept (that one is unmapped), else unmapped. */
static void cpu_release(void* base, size_t bytes, size_t written) {
  bytes = whole_pages(bytes);
  if (written > bytes) written = bytes;
  if (written > SPARE_MAX_WRITTEN || (spare.base && spare.written >= written)) {
    munmap(base, bytes);
    return;
  }
  if (spare.base) munmap(spare.base, spare.bytes);
  spare.base = base;
  spare.bytes = bytes;
  spare.written = written;
}

/* The rest of the backend's services on host memory (see backend.h): the CPU bounds nothing
** (available = 0), zero and copies are memset / memmove, work is finished when a kernel
** returns (nothing to synchronise), every matmul mode computes in fp32 and there is no stream. */
static size_t cpu_available(void) { return 0; }
static void cpu_zero(void* p, size_t bytes) { memset(p, 0, bytes); }
static void cpu_copy(void* dst, const void* src, size_t bytes) { memmove(dst, src, bytes); }
static void cpu_synchronize(void) {}
static void cpu_set_matmul_mode(MatmulMode mode) { (void)mode; }
static void* cpu_compute_stream(void) { return NULL; }

/* The CPU backend; its bf16 table is set by backend_cpu, where the CPU can run it. */
static Backend cpu_backend = {
    .name = "cpu",
    .device_memory = 0,
    .reserve = cpu_reserve,
    .release = cpu_release,
    .reserve_zeroed = 1,
    .available = cpu_available,
    .zero = cpu_zero,
    .copy = cpu_copy,
    .to_device = cpu_copy,
    .to_host = cpu_copy,
    .synchronize = cpu_synchronize,
    .clock = now_seconds,
    .set_threads = kernels_set_threads,
    .set_matmul_mode = cpu_set_matmul_mode,
    .f32 = &cpu_kernels_f32,
    .f64 = &cpu_kernels_f64,
    .bf16 = NULL,
    .attention_scratch_elems = attention_scratch_elems,
    .compute_stream = cpu_compute_stream,
};

/* The CPU backend: one static object, always available. Its bf16 table (cpu_bf16.c) is there
** where the CPU multiplies bf16 natively (AVX512_BF16 or AMX, through oneDNN), or where a test
** asked for emulated products (OSDP_CPU_BF16_EMULATE=1: cpu_dnnl.h); else NULL, and
** --precision bf16 says what the CPU lacks (backend_check_precision). */
const Backend* backend_cpu(void) {
  static int ready;
  if (!ready) {
    const char* emu = getenv("OSDP_CPU_BF16_EMULATE");
    if (emu && strcmp(emu, "1") == 0) dnnl_bf16_emulate(1);
    cpu_backend.bf16 = dnnl_bf16_usable() ? &cpu_kernels_bf16 : NULL;
    ready = 1;
  }
  return &cpu_backend;
}

/* The CPU again, but declaring its memory not host-addressable, so that everything above the
** boundary takes the GPU's paths (staged collectives, copies in and out): the CPU backend with
** another name and device_memory set. */
const Backend* backend_cpu_staged(void) {
  static Backend staged;
  if (!staged.name) {
    staged = *backend_cpu();
    staged.name = "cpu-staged";
    staged.device_memory = 1;
  }
  return &staged;
}
