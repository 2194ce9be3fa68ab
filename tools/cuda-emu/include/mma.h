/* Emulated mma.h (tools/cuda-emu): the warp-level tensor-core API nvcuda::wmma for the shapes
** osdp's kernels may use: m16n16k8 with precision::tf32 inputs and m16n16k16 with
** __nv_bfloat16 inputs, both accumulating in float.
**
** The hardware spreads a fragment's elements over the warp's lanes in an unspecified way; here
** every lane holds the whole tile (x[] row-major, num_elements = rows * cols), so elementwise
** code over x[] (scaling an accumulator, converting to TF32) gives the GPU's values, while code
** that assumes which element a lane holds is not portable and not emulated. Every *_sync call
** is a warp barrier: all 32 lanes must make it (a missing lane is a deadlock the emulator
** reports). Loads check the API's rules: a 32-byte aligned pointer and ldm a multiple of 16
** bytes.
**
** Numerics of mma_sync: tf32 inputs are read as the tensor cores read them, the low 13 mantissa
** bits ignored (kernels round first with __float_to_tf32, to nearest, ties away); bf16 inputs
** are exact (kernels round to them with __float2bfloat16_rn, to nearest even). Each product is
** exact, as on the GPU (8 x 8 significant bits for bf16, 11 x 11 for tf32, both within fp32's
** 24); the K products and the accumulator are added in double and rounded to float once, so
** every mma_sync rounds to fp32 once and a chain of them (a kernel's sum over its k-steps)
** accumulates in fp32, as on the GPU. Within one mma_sync the GPU adds with a few bits fewer
** than double (aligned to the largest term, undocumented, of the order of fp32's last bit), so
** the emulation is at least as accurate: a check against the CPU needs a tolerance of the
** format's rounding (tf32: 2^-11, bf16: 2^-8), which that difference does not approach. */
#pragma once
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cstdio>
#include <cstdlib>

namespace nvcuda {
namespace wmma {

struct row_major;
struct col_major;
struct matrix_a;
struct matrix_b;
struct accumulator;
namespace precision {
struct tf32;
}
enum layout_t { mem_row_major, mem_col_major };

/* f rounded to TF32 (to nearest, ties away from zero: cvt.rna.tf32.f32), kept in a float. */
static inline float __float_to_tf32(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  if ((u & 0x7f800000u) != 0x7f800000u) u = (u + 0x1000u) & 0xffffe000u;
  memcpy(&f, &u, 4);
  return f;
}

/* The element type a fragment stores (tf32 is kept in floats). */
template <class T> struct emu_storage { typedef T type; };
template <> struct emu_storage<precision::tf32> { typedef float type; };

/* A fragment's tile: A is M x K, B is K x N, the accumulator M x N. */
template <class Use, int M, int N, int K> struct emu_tile;
template <int M, int N, int K> struct emu_tile<matrix_a, M, N, K> { enum { rows = M, cols = K }; };
template <int M, int N, int K> struct emu_tile<matrix_b, M, N, K> { enum { rows = K, cols = N }; };
template <int M, int N, int K> struct emu_tile<accumulator, M, N, K> { enum { rows = M, cols = N }; };

template <class Use, int M, int N, int K, class T, class Layout = void>
struct fragment {
  typedef typename emu_storage<T>::type storage_element_type;
  enum { rows = emu_tile<Use, M, N, K>::rows, cols = emu_tile<Use, M, N, K>::cols };
  enum { num_elements = rows * cols, num_storage_elements = rows * cols };
  storage_element_type x[rows * cols]; /* x[r * cols + c], the whole tile in every lane */
};

/* The shapes and types the emulation supports (as in the hardware's API). */
template <int M, int N, int K, class T> struct emu_shape_ok { enum { value = 0 }; };
template <> struct emu_shape_ok<16, 16, 8, precision::tf32> { enum { value = 1 }; };
template <> struct emu_shape_ok<16, 16, 16, __nv_bfloat16> { enum { value = 1 }; };

/* Aborts unless p is 32-byte aligned and ldm (elements of `bytes`) a multiple of 16 bytes. */
static inline void emu_check_ldm(const void* p, unsigned ldm, size_t bytes, const char* what) {
  if ((uintptr_t)p % 32 != 0 || (ldm * bytes) % 16 != 0) {
    fprintf(stderr, "emu: wmma::%s: pointer %p must be 32-byte aligned and ldm %u a multiple of "
            "16 bytes\n", what, p, ldm);
    abort();
  }
}

template <class Use, int M, int N, int K, class T, class Layout>
inline void fill_fragment(fragment<Use, M, N, K, T, Layout>& f,
                          typename emu_storage<T>::type v) {
  for (int i = 0; i < f.num_elements; i++) f.x[i] = v;
}

/* Loads matrix_a or matrix_b: element (r, c) of the tile from p[r * ldm + c] (row_major) or
** p[c * ldm + r] (col_major). */
template <class Use, int M, int N, int K, class T, class Layout>
inline void load_matrix_sync(fragment<Use, M, N, K, T, Layout>& f,
                             const typename emu_storage<T>::type* p, unsigned ldm) {
  static_assert(emu_shape_ok<M, N, K, T>::value, "wmma shape/type not emulated");
  emu_check_ldm(p, ldm, sizeof *p, "load_matrix_sync");
  emu_warp_barrier();
  for (int r = 0; r < f.rows; r++)
    for (int c = 0; c < f.cols; c++)
      f.x[r * f.cols + c] = Layout::emu_row_major ? p[(size_t)r * ldm + c] : p[(size_t)c * ldm + r];
}

/* Loads an accumulator in the given memory layout. */
template <int M, int N, int K>
inline void load_matrix_sync(fragment<accumulator, M, N, K, float>& f, const float* p,
                             unsigned ldm, layout_t layout) {
  emu_check_ldm(p, ldm, sizeof *p, "load_matrix_sync");
  emu_warp_barrier();
  for (int r = 0; r < f.rows; r++)
    for (int c = 0; c < f.cols; c++)
      f.x[r * f.cols + c] = layout == mem_row_major ? p[(size_t)r * ldm + c] : p[(size_t)c * ldm + r];
}

/* Stores an accumulator (every lane writes the same values). */
template <int M, int N, int K>
inline void store_matrix_sync(float* p, const fragment<accumulator, M, N, K, float>& f,
                              unsigned ldm, layout_t layout) {
  emu_check_ldm(p, ldm, sizeof *p, "store_matrix_sync");
  emu_warp_barrier();
  for (int r = 0; r < f.rows; r++)
    for (int c = 0; c < f.cols; c++)
      (layout == mem_row_major ? p[(size_t)r * ldm + c] : p[(size_t)c * ldm + r]) = f.x[r * f.cols + c];
  emu_warp_barrier(); /* no lane reads p before all have written */
}

/* An input element as the tensor cores read it (see above). */
static inline double emu_mma_input(float v) {
  uint32_t u;
  memcpy(&u, &v, 4);
  u &= 0xffffe000u;
  memcpy(&v, &u, 4);
  return v;
}
static inline double emu_mma_input(__nv_bfloat16 v) { return (float)v; }

/* d = a b + c (d may be c). */
template <int M, int N, int K, class T, class LA, class LB>
inline void mma_sync(fragment<accumulator, M, N, K, float>& d,
                     const fragment<matrix_a, M, N, K, T, LA>& a,
                     const fragment<matrix_b, M, N, K, T, LB>& b,
                     const fragment<accumulator, M, N, K, float>& c) {
  static_assert(emu_shape_ok<M, N, K, T>::value, "wmma shape/type not emulated");
  emu_warp_barrier();
  float out[M * N];
  for (int i = 0; i < M; i++)
    for (int j = 0; j < N; j++) {
      double s = c.x[i * N + j];
      for (int k = 0; k < K; k++) s += emu_mma_input(a.x[i * K + k]) * emu_mma_input(b.x[k * N + j]);
      out[i * N + j] = (float)s;
    }
  for (int i = 0; i < M * N; i++) d.x[i] = out[i];
}

struct row_major { enum { emu_row_major = 1 }; };
struct col_major { enum { emu_row_major = 0 }; };

}  // namespace wmma
}  // namespace nvcuda
