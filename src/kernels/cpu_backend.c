/* cpu_backend.c: the CPU backend: host memory, the OpenBLAS/OpenMP kernels of cpu_kernels.h and
** the wall clock. See backend.h. */
#include "kernels/backend.h"

#include <string.h>
#include <sys/mman.h>

#include "core/util.h"
#include "kernels/cpu_kernels.h"

/* Reserves address space; pages are committed when first touched (MAP_NORESERVE). */
static void* cpu_reserve(size_t bytes) {
  void* p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                 -1, 0);
  if (p == MAP_FAILED) {
    osdp_fail("arena: cannot reserve %zu bytes of address space", bytes);
    return NULL;
  }
  return p;
}

static void cpu_release(void* base, size_t bytes) { munmap(base, bytes); }
static size_t cpu_available(void) { return 0; }
static void cpu_zero(void* p, size_t bytes) { memset(p, 0, bytes); }
static void cpu_copy(void* dst, const void* src, size_t bytes) { memmove(dst, src, bytes); }
static void cpu_synchronize(void) {}
static void cpu_set_tf32(int on) { (void)on; }
static void* cpu_compute_stream(void) { return NULL; }

#define CPU_KERNEL_TABLE(R)                                                              \
  {R(embed_pos_forward), R(embed_pos_backward), R(embed_tok_forward), R(embed_tok_backward), \
   R(matmul_forward), R(matmul_backward), R(layernorm_forward), R(layernorm_backward),       \
   R(attention_forward), R(attention_backward), R(gelu_forward), R(gelu_backward),           \
   R(residual_forward), R(residual_backward), R(crossentropy_forward_backward),              \
   R(sum_squares), R(adamw_update), R(logits_argmax), R(accumulate)}
#define F32(name) .name = name##_f32
#define F64(name) .name = name##_f64
static const Kernels_f32 cpu_f32 = CPU_KERNEL_TABLE(F32);
static const Kernels_f64 cpu_f64 = CPU_KERNEL_TABLE(F64);

static const Backend cpu_backend = {
    .name = "cpu",
    .device_memory = 0,
    .reserve = cpu_reserve,
    .release = cpu_release,
    .available = cpu_available,
    .zero = cpu_zero,
    .copy = cpu_copy,
    .to_device = cpu_copy,
    .to_host = cpu_copy,
    .synchronize = cpu_synchronize,
    .clock = now_seconds,
    .set_threads = kernels_set_threads,
    .set_tf32 = cpu_set_tf32,
    .f32 = &cpu_f32,
    .f64 = &cpu_f64,
    .compute_stream = cpu_compute_stream,
};

const Backend* backend_cpu(void) { return &cpu_backend; }

/* The CPU again, but declaring its memory not host-addressable, so that everything above the
** boundary takes the GPU's paths (staged collectives, copies in and out): the CPU backend with
** another name and device_memory set. */
const Backend* backend_cpu_staged(void) {
  static Backend staged;
  if (!staged.name) {
    staged = cpu_backend;
    staged.name = "cpu-staged";
    staged.device_memory = 1;
  }
  return &staged;
}
