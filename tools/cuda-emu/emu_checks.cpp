// tools/cuda-emu/emu_checks.cpp: checks of the emulator's own numerics (CTest
// gpu_emu_primitives, label gpu-emu): bfloat16 conversions against an independent reference
// over every bf16 and a million float bit patterns, TF32 rounding, the WMMA fragments
// (m16n16k8 tf32, m16n16k16 bf16, both operand layouts, accumulator load/store in both memory
// layouts) run by one emulated warp against a reference product, the emulated cuBLAS's fp32,
// TF32 and bf16 compute types and its bf16 data (A, B; C bf16 or fp32; the combinations it
// refuses), and the emulated cuBLASLt (fp32 and bf16 data): its bias and GELU epilogues against a
// reference, its input rounding per compute type, and its refusals (pointer mode, bias and aux
// types, aux ld, layouts, alignment, workspace, attribute sizes). Prints each check; exits 1 on a
// failure.
#include <cuda_runtime.h>
#include <cublas_v2.h>
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <mma.h>
#include <cmath>
#include <cstdio>
#include <cstring>
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

enum { LT_M = 8, LT_N = 3, LT_K = 4 };
struct LtCase {
  float A[LT_M * LT_K], B[LT_K * LT_N], bias[LT_M], D[LT_M * LT_N + 1], aux[LT_M * LT_N];
  std::vector<char> workspace = std::vector<char>(1 << 20);
};
/* The end of every cuBLASLt check: D[M, N] (ld ldd) = A[M, K] B[K, N] under op and pref as
** set up, A and B of type ab, C = D of type dt; then everything made is destroyed (h, op, pref
** too). Returns st when it is already an error, else the first failing call's status (or the
** matmul's). */
static cublasStatus_t lt_finish(cublasStatus_t st, cublasLtHandle_t h, cublasLtMatmulDesc_t op,
                                cublasLtMatmulPreference_t pref, const void* A, const void* B, void* D,
                                cudaDataType ab, cudaDataType dt, int ldd, void* workspace, size_t ws_bytes) {
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  if (st == CUBLAS_STATUS_SUCCESS) st = cublasLtMatrixLayoutCreate(&a, ab, LT_M, LT_K, LT_M);
  if (st == CUBLAS_STATUS_SUCCESS) st = cublasLtMatrixLayoutCreate(&b, ab, LT_K, LT_N, LT_K);
  if (st == CUBLAS_STATUS_SUCCESS) st = cublasLtMatrixLayoutCreate(&d, dt, LT_M, LT_N, ldd);
  cublasLtMatmulHeuristicResult_t r;
  int count = 0;
  if (st == CUBLAS_STATUS_SUCCESS) st = cublasLtMatmulAlgoGetHeuristic(h, op, a, b, d, d, pref, 1, &r, &count);
  float one = 1, zero = 0;
  if (st == CUBLAS_STATUS_SUCCESS)
    st = cublasLtMatmul(h, op, &one, A, a, B, b, &zero, D, d, D, d, &r.algo, workspace, ws_bytes, nullptr);
  cublasLtMatrixLayoutDestroy(d); cublasLtMatrixLayoutDestroy(b); cublasLtMatrixLayoutDestroy(a);
  cublasLtMatmulDescDestroy(op); cublasLtMatmulPreferenceDestroy(pref); cublasLtDestroy(h);
  return st;
}

/* One cuBLASLt product as cuda_lt.cu sets it up: column-major D[M, N] = A[M, K] B[K, N] + bias
** with epilogue GELU_AUX_BIAS (aux = the sum), host scalars, 4-byte alignments declared, a 1 MiB
** workspace. bad(op, pref) may spoil one setting first; returns the status of the first call
** that fails (or of cublasLtMatmul). */
static cublasStatus_t lt_run(LtCase& c, cublasComputeType_t ct, float* D, int64_t aux_ld, int ldd,
                             void (*bad)(cublasLtMatmulDesc_t, cublasLtMatmulPreference_t), bool with_workspace) {
  cublasLtHandle_t h = nullptr; cublasLtMatmulDesc_t op = nullptr; cublasLtMatmulPreference_t pref = nullptr;
  cublasLtCreate(&h);
  cublasLtMatmulPreferenceCreate(&pref);
  uint32_t epilogue = CUBLASLT_EPILOGUE_GELU_AUX_BIAS, align = 4;
  const float* bias = c.bias;
  float* aux = c.aux;
  uint64_t ws = c.workspace.size();
  cublasStatus_t st = cublasLtMatmulDescCreate(&op, ct, CUDA_R_32F);
  if (st == CUBLAS_STATUS_SUCCESS) {
    cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof epilogue);
    cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias);
    cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof aux);
    cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld, sizeof aux_ld);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
    for (int i = CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES; i <= CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES; i++)
      cublasLtMatmulPreferenceSetAttribute(pref, (cublasLtMatmulPreferenceAttributes_t)i, &align, sizeof align);
    if (bad) bad(op, pref);
  }
  return lt_finish(st, h, op, pref, c.A, c.B, D, CUDA_R_32F, CUDA_R_32F, ldd,
                   with_workspace ? c.workspace.data() : nullptr, with_workspace ? c.workspace.size() : 0);
}

/* The settings cuBLASLt refuses, one per function (each spoils a valid set-up). */
static void bad_pointer_mode(cublasLtMatmulDesc_t op, cublasLtMatmulPreference_t) {
  int32_t device = CUBLASLT_POINTER_MODE_DEVICE;
  cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_POINTER_MODE, &device, sizeof device);
}
static void bad_bias_type(cublasLtMatmulDesc_t op, cublasLtMatmulPreference_t) {
  int32_t bf16 = CUDA_R_16BF;
  cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bf16, sizeof bf16);
}
static void bad_aux_type(cublasLtMatmulDesc_t op, cublasLtMatmulPreference_t) {
  int32_t half = CUDA_R_16F;
  cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE, &half, sizeof half);
}
static void no_bias(cublasLtMatmulDesc_t op, cublasLtMatmulPreference_t) {
  const float* none = nullptr;
  cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &none, sizeof none);
}
static void alignment_256(cublasLtMatmulDesc_t, cublasLtMatmulPreference_t pref) {
  uint32_t align = 256;
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align, sizeof align);
}

/* The emulated cuBLASLt: GELU_AUX_BIAS gives aux = A B + bias (fp32) and D = its tanh GELU;
** TF32 compute rounds the inputs; and every wrong setting fails with INVALID_VALUE. */
static void check_cublaslt() {
  LtCase c;
  for (int i = 0; i < LT_M * LT_K; i++) c.A[i] = 0.25f * (float)((i * 7) % 11) - 1.25f;
  for (int i = 0; i < LT_K * LT_N; i++) c.B[i] = 0.125f * (float)((i * 5) % 9) - 0.5f;
  for (int i = 0; i < LT_M; i++) c.bias[i] = 0.3f * (float)i - 1.0f;
  bool ok = lt_run(c, CUBLAS_COMPUTE_32F, c.D, 8, LT_M, nullptr, true) == CUBLAS_STATUS_SUCCESS;
  double worst = 0;
  for (int j = 0; j < LT_N; j++)
    for (int i = 0; i < LT_M; i++) {
      double s = c.bias[i];
      for (int l = 0; l < LT_K; l++) s += (double)c.A[i + l * LT_M] * c.B[l + j * LT_K];
      float pre = (float)s;
      double g = 0.5 * pre * (1 + std::tanh(std::sqrt(2 / M_PI) * (pre + 0.044715 * pre * pre * pre)));
      ok = ok && c.aux[i + j * 8] == pre;
      worst = std::max(worst, std::fabs(c.D[i + j * LT_M] - g));
    }
  check(ok && worst <= 1e-6, "cuBLASLt GELU_AUX_BIAS: aux = A B + bias, D = tanh GELU of aux");
  LtCase t = c;
  t.A[0] = 1.0f + 0x1p-11f;
  for (int i = 1; i < LT_M * LT_K; i++) t.A[i] = 0;
  for (int i = 0; i < LT_K * LT_N; i++) t.B[i] = 1;
  for (int i = 0; i < LT_M; i++) t.bias[i] = 0;
  ok = lt_run(t, CUBLAS_COMPUTE_32F_FAST_TF32, t.D, 8, LT_M, nullptr, true) == CUBLAS_STATUS_SUCCESS;
  check(ok && t.aux[0] == 1.0f + 0x1p-10f, "cuBLASLt TF32: inputs rounded to TF32 (ties away)");
  const cublasStatus_t bad = CUBLAS_STATUS_INVALID_VALUE;
  check(lt_run(c, CUBLAS_COMPUTE_32F, c.D, 8, LT_M, bad_pointer_mode, true) == bad, "cuBLASLt refuses: device pointer mode");
  check(lt_run(c, CUBLAS_COMPUTE_32F, c.D, 8, LT_M, bad_bias_type, true) == bad, "cuBLASLt refuses: a bf16 bias for fp32 D");
  check(lt_run(c, CUBLAS_COMPUTE_32F, c.D, 8, LT_M, bad_aux_type, true) == bad, "cuBLASLt refuses: an fp16 aux for fp32 D");
  check(lt_run(c, CUBLAS_COMPUTE_32F, c.D, 8, LT_M, no_bias, true) == bad, "cuBLASLt refuses: a bias epilogue without a bias");
  check(lt_run(c, CUBLAS_COMPUTE_32F, c.D, 12, LT_M, nullptr, true) == bad, "cuBLASLt refuses: aux ld not a multiple of 8");
  check(lt_run(c, CUBLAS_COMPUTE_32F, c.D, 8, LT_M - 1, nullptr, true) == bad, "cuBLASLt refuses: D's ld below its rows");
  float* misaligned = (uintptr_t)c.D % 256 == 0 ? c.D + 1 : c.D;
  check(lt_run(c, CUBLAS_COMPUTE_32F, misaligned, 8, LT_M, alignment_256, true) == bad,
        "cuBLASLt refuses: D less aligned than the preference said");
  check(lt_run(c, CUBLAS_COMPUTE_32F, c.D, 8, LT_M, nullptr, false) == bad, "cuBLASLt refuses: no workspace for the algorithm");
  cublasLtMatmulDesc_t op;
  cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F);
  int64_t wide = CUBLAS_OP_N;
  uint32_t dgelu = CUBLASLT_EPILOGUE_DGELU_BGRAD;
  check(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &wide, sizeof wide) == bad,
        "cuBLASLt refuses: an attribute of the wrong size");
  check(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &dgelu, sizeof dgelu) == bad,
        "cuBLASLt emulation refuses: an epilogue it does not compute");
  cublasLtMatmulDescDestroy(op);
  check(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_16BF) == bad, "cuBLASLt refuses: a bf16 scale type");
}

/* Row i of column-major bf16 A (m rows, k columns) times column j of column-major bf16 B (k
** rows), exactly (in double): the reference of the bf16-data checks. */
static double bf16_dot(const __nv_bfloat16* A, const __nv_bfloat16* B, int m, int k, int i, int j) {
  double s = 0;
  for (int l = 0; l < k; l++) s += (double)__bfloat162float(A[i + l * m]) * (double)__bfloat162float(B[l + j * k]);
  return s;
}

/* n values drawn uniformly from [-2, 2) by rng, rounded to bf16. */
static void bf16_fill(__nv_bfloat16* x, int n, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  for (int i = 0; i < n; i++) x[i] = __float2bfloat16(u(rng));
}

/* One cuBLASLt product D[M, N] = A[M, K] B[K, N] + bias (epilogue BIAS) with A and B of type
** ab and C = D and the bias of type dt, compute type ct, 2-byte alignments declared, no
** workspace. */
static cublasStatus_t lt_typed(const void* A, const void* B, void* D, const void* bias, cudaDataType ab, cudaDataType dt,
                               cublasComputeType_t ct) {
  cublasLtHandle_t h = nullptr; cublasLtMatmulDesc_t op = nullptr; cublasLtMatmulPreference_t pref = nullptr;
  cublasLtCreate(&h);
  cublasLtMatmulPreferenceCreate(&pref);
  uint32_t epilogue = CUBLASLT_EPILOGUE_BIAS, align = 2;
  for (int i = CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES; i <= CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES; i++)
    cublasLtMatmulPreferenceSetAttribute(pref, (cublasLtMatmulPreferenceAttributes_t)i, &align, sizeof align);
  cublasStatus_t st = cublasLtMatmulDescCreate(&op, ct, CUDA_R_32F);
  if (st == CUBLAS_STATUS_SUCCESS) {
    cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof epilogue);
    cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias);
  }
  return lt_finish(st, h, op, pref, A, B, D, ab, dt, LT_M, nullptr, 0);
}

/* cuBLASLt on bf16 data: bf16 A and B with an fp32 D and bias give the bf16 values' product plus
** the bias rounded to fp32 once; with a bf16 D and bias, that fp32 value rounded to nearest
** even; the combinations cuBLAS has no kernel for are refused. */
static void check_cublaslt_bf16() {
  __nv_bfloat16 A[LT_M * LT_K], B[LT_K * LT_N], bias_b[LT_M], Db[LT_M * LT_N];
  float bias[LT_M], D[LT_M * LT_N];
  std::mt19937 rng(11);
  bf16_fill(A, LT_M * LT_K, rng);
  bf16_fill(B, LT_K * LT_N, rng);
  bf16_fill(bias_b, LT_M, rng);
  for (int i = 0; i < LT_M; i++) bias[i] = __bfloat162float(bias_b[i]);
  auto exact = [&](int i, int j) { return bias[i] + bf16_dot(A, B, LT_M, LT_K, i, j); };
  bool ok = lt_typed(A, B, D, bias, CUDA_R_16BF, CUDA_R_32F, CUBLAS_COMPUTE_32F) == CUBLAS_STATUS_SUCCESS;
  for (int i = 0; i < LT_M; i++)
    for (int j = 0; j < LT_N; j++) ok = ok && D[i + j * LT_M] == (float)exact(i, j);
  check(ok, "cuBLASLt bf16 A, B, fp32 D and bias: one fp32 rounding");
  ok = lt_typed(A, B, Db, bias_b, CUDA_R_16BF, CUDA_R_16BF, CUBLAS_COMPUTE_32F) == CUBLAS_STATUS_SUCCESS;
  for (int i = 0; i < LT_M; i++)
    for (int j = 0; j < LT_N; j++) ok = ok && Db[i + j * LT_M].__x == __float2bfloat16((float)exact(i, j)).__x;
  check(ok, "cuBLASLt bf16 D and bias: the fp32 value rounded to nearest even");
  const cublasStatus_t bad = CUBLAS_STATUS_INVALID_VALUE;
  check(lt_typed(A, B, D, bias, CUDA_R_16BF, CUDA_R_32F, CUBLAS_COMPUTE_32F_FAST_16BF) == bad,
        "cuBLASLt refuses: bf16 data under a FAST_16BF compute type");
  check(lt_typed(D, D, Db, bias_b, CUDA_R_32F, CUDA_R_16BF, CUBLAS_COMPUTE_32F) == bad,
        "cuBLASLt refuses: fp32 A and B with a bf16 D");
}

enum { BF_M = 5, BF_N = 3, BF_K = 7 };

/* cuBLAS's column-major C[BF_M, BF_N] = A[BF_M, BF_K] B[BF_K, BF_N] + beta C, with the data types
** and compute type given. */
static cublasStatus_t gemm_typed(const void* A, cudaDataType at, const void* B, cudaDataType bt, float beta, void* C,
                                 cudaDataType c_type, cublasComputeType_t ct) {
  float one = 1;
  return cublasGemmEx(nullptr, CUBLAS_OP_N, CUBLAS_OP_N, BF_M, BF_N, BF_K, &one, A, at, BF_M, B, bt, BF_K, &beta, C,
                      c_type, BF_M, ct, CUBLAS_GEMM_DEFAULT);
}

/* cuBLAS's bf16 data (the GEMMs of bf16 storage): bf16 A and B with an fp32 C give the exact
** product of the bf16 values rounded to fp32 once; with a bf16 C that fp32 result rounded to
** nearest even, and beta reads the bf16 C; the combinations cuBLAS does not have are refused. */
static void check_cublas_bf16() {
  const cudaDataType bf = CUDA_R_16BF, f32 = CUDA_R_32F;
  const cublasStatus_t good = CUBLAS_STATUS_SUCCESS, bad = CUBLAS_STATUS_INVALID_VALUE;
  std::mt19937 rng(7);
  __nv_bfloat16 A[BF_M * BF_K], B[BF_K * BF_N], Cb[BF_M * BF_N], prev[BF_M * BF_N];
  float C[BF_M * BF_N];
  bf16_fill(A, BF_M * BF_K, rng);
  bf16_fill(B, BF_K * BF_N, rng);
  bool ok = gemm_typed(A, bf, B, bf, 0, C, f32, CUBLAS_COMPUTE_32F) == good;
  for (int i = 0; i < BF_M; i++)
    for (int j = 0; j < BF_N; j++) ok &= C[i + j * BF_M] == (float)bf16_dot(A, B, BF_M, BF_K, i, j);
  check(ok, "cuBLAS bf16 A, B, fp32 C: the bf16 values' product, one fp32 rounding");
  ok = gemm_typed(A, bf, B, bf, 0, Cb, bf, CUBLAS_COMPUTE_32F) == good;
  for (int i = 0; i < BF_M; i++)
    for (int j = 0; j < BF_N; j++) ok &= Cb[i + j * BF_M].__x == __float2bfloat16((float)bf16_dot(A, B, BF_M, BF_K, i, j)).__x;
  check(ok, "cuBLAS bf16 C: the fp32 result rounded to nearest even");
  memcpy(prev, Cb, sizeof Cb);
  ok = gemm_typed(A, bf, B, bf, 1, Cb, bf, CUBLAS_COMPUTE_32F) == good;
  for (int i = 0; i < BF_M; i++)
    for (int j = 0; j < BF_N; j++) {
      double s = bf16_dot(A, B, BF_M, BF_K, i, j) + (double)__bfloat162float(prev[i + j * BF_M]);
      ok &= Cb[i + j * BF_M].__x == __float2bfloat16((float)s).__x;
    }
  check(ok, "cuBLAS bf16 C with beta 1: adds the bf16 C, rounds once to bf16");
  check(gemm_typed(A, bf, C, f32, 0, C, f32, CUBLAS_COMPUTE_32F) == bad, "cuBLAS refuses: bf16 A with fp32 B");
  check(gemm_typed(A, bf, B, bf, 0, C, f32, CUBLAS_COMPUTE_32F_FAST_16BF) == bad,
        "cuBLAS refuses: bf16 data under a FAST_16BF compute type");
  check(gemm_typed(C, f32, C, f32, 0, Cb, bf, CUBLAS_COMPUTE_32F) == bad, "cuBLAS refuses: fp32 A and B with a bf16 C");
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
  check_cublas_bf16();
  check_cublaslt();
  check_cublaslt_bf16();
  printf("%s\n", failures ? "FAILED" : "all passed");
  return failures ? 1 : 0;
}
