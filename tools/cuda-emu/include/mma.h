/* Emulated WMMA (nvcuda::wmma, CUDA's <mma.h>) for the CPU emulation of osdp's CUDA backend:
** warp-level tensor-core tiles. A real fragment spreads its tile over the warp's 32 lanes in an
** unspecified layout; here every lane holds the whole tile (x[] of rows x cols, row-major), so
** code that uses only fill / load / mma / store (layout-agnostic, as CUDA requires of portable
** code) computes what a GPU computes. Every operation is warp-collective like the real one: it
** starts and ends at a barrier of the warp's lanes (a kernel that calls one from divergent lanes
** hangs here, as it is undefined on a GPU), and a store is made by lane 0 alone.
** Numerics: tf32 inputs are used as they are given (a kernel rounds them with __float_to_tf32,
** as the hardware reads only their top 19 bits: the rest is dropped here too), bf16 inputs are
** bf16 values, and the products are summed in fp32 in k order onto the accumulator. */
#pragma once
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cstdio>
#include <cstdlib>
#include <type_traits>

namespace nvcuda {
namespace wmma {

struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };
struct matrix_a {};
struct matrix_b {};
struct accumulator {};
namespace precision {
struct tf32 {};
}

/* The fp32 value of a tf32 input as the tensor cores read it: the top 19 bits (sign, exponent,
** 10 mantissa bits). */
inline float emu_tf32_bits(float v) {
  uint32_t u;
  memcpy(&u, &v, 4);
  u &= 0xffffe000u;
  memcpy(&v, &u, 4);
  return v;
}

/* v rounded to tf32, to nearest with ties away from zero (cvt.rna.tf32.f32); NaN and inf kept. */
inline float __float_to_tf32(float v) {
  uint32_t u;
  memcpy(&u, &v, 4);
  if ((u & 0x7f800000u) != 0x7f800000u) u = (u + 0x1000u) & 0xffffe000u;
  memcpy(&v, &u, 4);
  return v;
}

/* The tile shape of a fragment: A is M x K, B is K x N, the accumulator M x N. */
template <typename Use, int M, int N, int K> struct emu_shape;
template <int M, int N, int K> struct emu_shape<matrix_a, M, N, K> { enum { rows = M, cols = K }; };
template <int M, int N, int K> struct emu_shape<matrix_b, M, N, K> { enum { rows = K, cols = N }; };
template <int M, int N, int K> struct emu_shape<accumulator, M, N, K> { enum { rows = M, cols = N }; };

/* The value an input of element type T contributes (tf32: its top 19 bits; bf16: exact). */
inline float emu_input(float v, precision::tf32*) { return emu_tf32_bits(v); }
inline float emu_input(__nv_bfloat16 v, __nv_bfloat16*) { return __bfloat162float(v); }
inline float emu_input(float v, float*) { return v; }

template <typename Use, int M, int N, int K, typename T, typename Layout = void>
struct fragment {
  enum { rows = emu_shape<Use, M, N, K>::rows, cols = emu_shape<Use, M, N, K>::cols };
  enum { num_elements = rows * cols };
  float x[num_elements];
};

inline void emu_warp_sync() { emu_warp_barrier(); }

template <typename Use, int M, int N, int K, typename T, typename L>
inline void fill_fragment(fragment<Use, M, N, K, T, L>& f, float v) {
  emu_warp_sync();
  for (int i = 0; i < f.num_elements; i++) f.x[i] = v;
  emu_warp_sync();
}

/* Element (r, c) of a row-major (or column-major) matrix at p with leading dimension ldm. */
template <typename E> inline E emu_at(const E* p, unsigned ldm, int r, int c, bool col) {
  return col ? p[(size_t)c * ldm + r] : p[(size_t)r * ldm + c];
}

/* A or B from memory in the fragment's layout (ldm in elements; a multiple of 4 for 32-bit
** elements, of 8 for 16-bit ones, and p 32-byte aligned: checked, as a GPU faults or misreads). */
template <typename Use, int M, int N, int K, typename T, typename L, typename E>
inline void load_matrix_sync(fragment<Use, M, N, K, T, L>& f, const E* p, unsigned ldm) {
  emu_warp_sync();
  if (((uintptr_t)p % 32) != 0 || (ldm * sizeof(E)) % 16 != 0) {
    fprintf(stderr, "emu: wmma::load_matrix_sync: pointer %p or ldm %u misaligned\n", (const void*)p, ldm);
    abort();
  }
  bool col = std::is_same<L, col_major>::value;
  for (int r = 0; r < f.rows; r++)
    for (int c = 0; c < f.cols; c++) f.x[r * f.cols + c] = emu_input(emu_at(p, ldm, r, c, col), (T*)nullptr);
  emu_warp_sync();
}

/* The accumulator from memory, in the layout named at run time. */
template <int M, int N, int K>
inline void load_matrix_sync(fragment<accumulator, M, N, K, float, void>& f, const float* p, unsigned ldm,
                             layout_t layout) {
  emu_warp_sync();
  for (int r = 0; r < f.rows; r++)
    for (int c = 0; c < f.cols; c++) f.x[r * f.cols + c] = emu_at(p, ldm, r, c, layout == mem_col_major);
  emu_warp_sync();
}

/* The accumulator to memory (lane 0 writes; the others wait). */
template <int M, int N, int K>
inline void store_matrix_sync(float* p, const fragment<accumulator, M, N, K, float, void>& f, unsigned ldm,
                              layout_t layout) {
  emu_warp_sync();
  if (emu_lane() == 0)
    for (int r = 0; r < f.rows; r++)
      for (int c = 0; c < f.cols; c++) {
        size_t at = layout == mem_col_major ? (size_t)c * ldm + r : (size_t)r * ldm + c;
        p[at] = f.x[r * f.cols + c];
      }
  emu_warp_sync();
}

/* d = a b + c, the products summed in fp32 in k order onto c. */
template <int M, int N, int K, typename T, typename LA, typename LB>
inline void mma_sync(fragment<accumulator, M, N, K, float, void>& d, const fragment<matrix_a, M, N, K, T, LA>& a,
                     const fragment<matrix_b, M, N, K, T, LB>& b,
                     const fragment<accumulator, M, N, K, float, void>& c) {
  emu_warp_sync();
  float out[M * N];
  for (int i = 0; i < M; i++)
    for (int j = 0; j < N; j++) {
      float s = c.x[i * N + j];
      for (int k = 0; k < K; k++) s += a.x[i * K + k] * b.x[k * N + j];
      out[i * N + j] = s;
    }
  memcpy(d.x, out, sizeof out);
  emu_warp_sync();
}

}  // namespace wmma
}  // namespace nvcuda
