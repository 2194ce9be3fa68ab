// tools/cuda-emu/emu_checks.cpp: checks of the emulator's own numerics (CTest
// gpu_emu_primitives, label gpu-emu): bfloat16 conversions against an independent reference
// over every bf16 and a million float bit patterns, TF32 rounding, the WMMA fragments
// (m16n16k8 tf32, m16n16k16 bf16, both operand layouts, accumulator load/store in both memory
// layouts) run by one emulated warp against a reference product, and the emulated cuBLAS's fp32,
// TF32 and bf16 compute types. Prints each check; exits 1 on a failure.
#include <cuda_runtime.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <mma.h>
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

using namespace nvcuda;

float emu_round_tf32(float x); /* emu.cpp: the emulated cuBLAS's TF32 rounding */

static int failures;
static void check(bool ok, const char* what) {
  printf("  %-64s %s\n", what, ok ? "ok" : "FAILED");
  if (!ok) failures++;
}
static uint32_t bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static float from_bits(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

/* f rounded to bf16 by comparing the two neighbours in double (ties to the even one): an
** implementation independent of the emulator's bit trick. */
static unsigned short ref_bf16(float f) {
  if (std::isnan(f)) return 0x7fff;
  uint32_t u = bits(f);
  unsigned short lo = (unsigned short)(u >> 16);
  if ((u & 0xffffu) == 0) return lo;
  unsigned short hi = (unsigned short)(lo + 1); /* the next magnitude (may be inf) */
  double dlo = std::fabs((double)from_bits((uint32_t)lo << 16) - f);
  double dhi = std::fabs((double)from_bits((uint32_t)hi << 16) - f);
  if ((hi & 0x7fffu) == 0x7f80u) dhi = std::fabs(std::ldexp(1.0, 128) - std::fabs((double)f)); /* inf as 2^128 */
  if (dlo < dhi) return lo;
  if (dhi < dlo) return hi;
  return (lo & 1u) ? hi : lo;
}

static void check_bf16() {
  bool ok = true;
  for (uint32_t b = 0; b < 0x10000u; b++) { /* every bf16 is exact in float and back */
    float f = __bfloat162float(emu_bf16_from_bits((unsigned short)b));
    unsigned short back = __float2bfloat16(f).__x;
    ok &= std::isnan(f) ? back == 0x7fff : back == b;
  }
  check(ok, "bf16: every bf16 -> float -> bf16 is the identity (NaN: 0x7fff)");
  std::mt19937 gen(1234);
  int bad = 0;
  for (int i = 0; i < 1000000; i++) {
    float f = from_bits(gen());
    bad += __float2bfloat16(f).__x != ref_bf16(f);
  }
  check(bad == 0, "bf16: 10^6 random float bit patterns round as the reference");
  check(__float2bfloat16(1.0f + 0x1p-8f).__x == 0x3f80, "bf16: tie 1 + 2^-8 goes to even (1)");
  check(__float2bfloat16(1.0f + 0x3p-8f).__x == 0x3f82, "bf16: tie 1 + 3 2^-8 goes to even (1 + 2^-6)");
  check(__float2bfloat16(-(1.0f + 0x1p-8f + 0x1p-20f)).__x == 0xbf81, "bf16: above a tie rounds away (negative)");
  check(__float2bfloat16(3.4028235e38f).__x == 0x7f80, "bf16: FLT_MAX rounds to inf");
  check(__float2bfloat16(INFINITY).__x == 0x7f80 && __float2bfloat16(-0.0f).__x == 0x8000,
        "bf16: inf and -0 kept");
  check(__float2bfloat16(from_bits(0x00018000u)).__x == 0x0002, "bf16: subnormal tie to even, not flushed");
  check(__float2bfloat16_rz(1.0f + 0x3p-8f).__x == 0x3f81, "bf16: _rz truncates");
  __nv_bfloat162 two = __floats2bfloat162_rn(1.5f, -2.25f);
  check(__low2float(two) == 1.5f && __high2float(two) == -2.25f, "bf16: __floats2bfloat162_rn, __low2float, __high2float");
  check((float)__hmul(__float2bfloat16(1.5f), __float2bfloat16(3.0f)) == 4.5f &&
        (float)__hadd(__float2bfloat16(1.0f), __float2bfloat16(0x1p-8f)) == 1.0f,
        "bf16: __hmul exact, __hadd rounds to bf16");
}

static void check_tf32() {
  check(bits(wmma::__float_to_tf32(1.0f + 0x1p-11f)) == bits(1.0f + 0x1p-10f), "tf32: tie 1 + 2^-11 rounds away (1 + 2^-10)");
  check(wmma::__float_to_tf32(-(1.0f + 0x1p-11f)) == -(1.0f + 0x1p-10f), "tf32: negative tie rounds away");
  check(wmma::__float_to_tf32(1.0f + 0x1p-12f) == 1.0f, "tf32: below a tie rounds down");
  check(std::isinf(wmma::__float_to_tf32(INFINITY)) && std::isnan(wmma::__float_to_tf32(NAN)), "tf32: inf and NaN kept");
  bool same = true;
  std::mt19937 gen(99);
  for (int i = 0; i < 100000; i++) {
    float f = from_bits(gen());
    same &= bits(wmma::__float_to_tf32(f)) == bits(emu_round_tf32(f)) || std::isnan(f);
  }
  check(same, "tf32: wmma::__float_to_tf32 and the emulated cuBLAS round alike");
}

/* One warp: D = A B + C with the fragments; A M x K, B K x N (row- or column-major), C and D
** M x N in the given memory layouts. Element type T (float for tf32, or __nv_bfloat16). */
template <int M, int N, int K, class Prec, class T, class LA, class LB>
static void wmma_kernel(const T* A, const T* B, const float* C, float* D, bool c_row, bool d_row,
                        bool to_tf32) {
  wmma::fragment<wmma::matrix_a, M, N, K, Prec, LA> a;
  wmma::fragment<wmma::matrix_b, M, N, K, Prec, LB> b;
  wmma::fragment<wmma::accumulator, M, N, K, float> c;
  wmma::load_matrix_sync(a, A, LA::emu_row_major ? K : M);
  wmma::load_matrix_sync(b, B, LB::emu_row_major ? N : K);
  wmma::load_matrix_sync(c, C, c_row ? N : M, c_row ? wmma::mem_row_major : wmma::mem_col_major);
  if (to_tf32) {
    for (int i = 0; i < a.num_elements; i++) a.x[i] = wmma::__float_to_tf32(a.x[i]);
    for (int i = 0; i < b.num_elements; i++) b.x[i] = wmma::__float_to_tf32(b.x[i]);
  }
  wmma::mma_sync(c, a, b, c);
  wmma::store_matrix_sync(D, c, d_row ? N : M, d_row ? wmma::mem_row_major : wmma::mem_col_major);
}

/* Runs wmma_kernel on random data (all layouts) and compares D with the product of the inputs
** as the tensor cores read them (round(x): tf32 rounding or truncation, or bf16's value) summed
** in double: equal to the last bit; and with the exact product of the original float values
** (before bf16 storage or TF32 rounding) to `tol` relative (the precision of the format). */
template <int M, int N, int K, class Prec, class T, class LA, class LB>
static void check_wmma(const char* name, bool to_tf32, float (*round)(float), double tol) {
  std::mt19937 gen(7);
  std::normal_distribution<float> normal;
  alignas(32) static T A[M * K], B[K * N];
  alignas(32) static float C[M * N], D[M * N];
  std::vector<float> fa(M * K), fb(K * N), oa(M * K), ob(K * N); /* as stored (T), original */
  for (int i = 0; i < M * K; i++) { oa[i] = normal(gen); A[i] = T(oa[i]); fa[i] = (float)A[i]; }
  for (int i = 0; i < K * N; i++) { ob[i] = normal(gen); B[i] = T(ob[i]); fb[i] = (float)B[i]; }
  for (int i = 0; i < M * N; i++) C[i] = normal(gen);
  bool exact = true;
  double worst = 0, scale = 0;
  for (int lay = 0; lay < 4; lay++) {
    bool c_row = lay & 1, d_row = lay & 2;
    emu_launch((const void*)&wmma_kernel<M, N, K, Prec, T, LA, LB>, dim3(1), dim3(32), 0, [&]() {
      wmma_kernel<M, N, K, Prec, T, LA, LB>(A, B, C, D, c_row, d_row, to_tf32);
    });
    for (int i = 0; i < M; i++)
      for (int j = 0; j < N; j++) {
        double s = c_row ? C[i * N + j] : C[j * M + i], s32 = s;
        for (int k = 0; k < K; k++) {
          int ia = LA::emu_row_major ? i * K + k : k * M + i;
          int ib = LB::emu_row_major ? k * N + j : j * K + k;
          s += (double)round(fa[ia]) * round(fb[ib]);
          s32 += (double)oa[ia] * ob[ib];
        }
        float d = d_row ? D[i * N + j] : D[j * M + i];
        exact &= d == (float)s;
        worst = std::max(worst, std::fabs(d - s32));
        scale = std::max(scale, std::fabs(s32));
      }
  }
  char line[160];
  snprintf(line, sizeof line, "wmma %s: D = A B + C as the reference, 4 C/D layouts", name);
  check(exact, line);
  snprintf(line, sizeof line, "wmma %s: within %.0e of the exact product (%.1e)", name, tol, worst / scale);
  check(worst / scale <= tol, line);
}

static float rna_tf32(float x) { return wmma::__float_to_tf32(x); }
static float trunc_tf32(float x) { return from_bits(bits(x) & 0xffffe000u); }
static float as_is(float x) { return x; }

/* The emulated cuBLAS's 1 x 1 x 1 product a b in compute type ct. */
static float cublas_product(float a, float b, cublasComputeType_t ct) {
  float c = 0, one = 1, zero = 0;
  cublasGemmEx(nullptr, CUBLAS_OP_N, CUBLAS_OP_N, 1, 1, 1, &one, &a, CUDA_R_32F, 1, &b, CUDA_R_32F, 1,
               &zero, &c, CUDA_R_32F, 1, ct, CUBLAS_GEMM_DEFAULT);
  return c;
}

/* Each compute type reads its inputs as the GPU's: fp32 as they are, TF32 rounded with ties
** away, bf16 rounded to nearest even (a tie, one above it, and the product of two ties). */
static void check_cublas_modes() {
  float tie11 = 1.0f + 0x1p-11f, tie8 = 1.0f + 0x1p-8f;
  check(cublas_product(tie11, 1, CUBLAS_COMPUTE_32F_FAST_TF32) == 1.0f + 0x1p-10f,
        "cuBLAS TF32: inputs rounded to TF32 (ties away)");
  check(cublas_product(tie11, 1, CUBLAS_COMPUTE_32F) == tie11, "cuBLAS fp32: inputs as they are");
  check(cublas_product(tie8, 1, CUBLAS_COMPUTE_32F_FAST_16BF) == 1.0f,
        "cuBLAS bf16: a tie rounds to even (1 + 2^-8 -> 1)");
  check(cublas_product(1.0f + 0x3p-8f, 1, CUBLAS_COMPUTE_32F_FAST_16BF) == 1.0f + 0x1p-6f,
        "cuBLAS bf16: a tie rounds to even (1 + 3 2^-8 -> 1 + 2^-6)");
  check(cublas_product(tie8 + 0x1p-20f, -1.5f, CUBLAS_COMPUTE_32F_FAST_16BF) == -1.5f * (1.0f + 0x1p-7f),
        "cuBLAS bf16: above a tie rounds up, the product exact");
  check(cublas_product(tie8, 1, CUBLAS_COMPUTE_32F_FAST_TF32) == tie8, "cuBLAS TF32: 1 + 2^-8 is exact");
}

int main() {
  printf("tools/cuda-emu: the emulator's numerics\n");
  check_bf16();
  check_tf32();
  check_wmma<16, 16, 8, wmma::precision::tf32, float, wmma::row_major, wmma::col_major>(
      "m16n16k8 tf32 (rounded) A row B col", true, rna_tf32, 2e-3);
  check_wmma<16, 16, 8, wmma::precision::tf32, float, wmma::col_major, wmma::row_major>(
      "m16n16k8 tf32 (not rounded) A col B row", false, trunc_tf32, 2e-3);
  check_wmma<16, 16, 16, __nv_bfloat16, __nv_bfloat16, wmma::row_major, wmma::col_major>(
      "m16n16k16 bf16 A row B col", false, as_is, 1e-2);
  check_wmma<16, 16, 16, __nv_bfloat16, __nv_bfloat16, wmma::col_major, wmma::row_major>(
      "m16n16k16 bf16 A col B row", false, as_is, 1e-2);
  check_cublas_modes();
  printf("%s\n", failures ? "FAILED" : "all passed");
  return failures ? 1 : 0;
}
