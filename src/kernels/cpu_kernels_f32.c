/*
** cpu_kernels_f32.c: the fp32 kernels (suffix _f32), used for training. The code itself
** lives in cpu_kernels_impl.inc; this file only picks the type, the name suffix, the BLAS
** routine and the single-precision math functions.
**
** exp and tanh are our own branch-free versions rather than libm's: without -ffast-math the
** compiler cannot vectorise calls into libm, and scalar tanhf (~15 ns) made GELU cost as much
** as a fifth of a GPT-2 step (expf ~3.5 ns). These inline versions vectorise and are accurate
** to a few ulp (exp) and ~2e-7 absolute (tanh), which is enough for fp32 training. sqrt is
** libm's sqrtf: this file is compiled with -fno-math-errno (CMakeLists.txt), which makes it
** the exact, vectorisable square-root instruction.
** The fp64 kernels keep libm, so the gradient checks run on exact reference math.
*/
#include <math.h>
#include <stdint.h>
#include <string.h>
#include <cblas.h>
#include "cpu_kernels.h"

/* The bits of a float as an unsigned integer, and back (memcpy: no aliasing issues; the
** compiler turns it into a register move). */
static inline uint32_t kn_bits(float x) { uint32_t u; memcpy(&u, &x, sizeof u); return u; }
static inline float kn_float(uint32_t u) { float x; memcpy(&x, &u, sizeof x); return x; }

/* a * b + c, fused (one rounding, one instruction) where the target has FMA (-march=native
** here); the C11 build never contracts a * b + c on its own (-ffp-contract=off). */
#ifdef __FMA__
#define KN_FMA(a, b, c) __builtin_fmaf((a), (b), (c))
#else
#define KN_FMA(a, b, c) ((a) * (b) + (c))
#endif

/* exp(x) for float, vectorisable, ~1.3 ulp: x = n ln2 + r with |r| <= ln2/2, exp(r) by the
** Cephes degree-6 polynomial (Horner, fused multiply-adds where available), times 2^n built
** from the exponent bits. n is rounded by adding 1.5 * 2^23 (the "magic number" trick), which
** also leaves n in the low bits of the sum, so no float-to-int conversion is needed. x is
** first clamped to [-87, 88] (exp(-87) ~ 1.6e-38 stands in for underflow, exp(88) ~ 1.7e38
** for overflow) with INTEGER compares on its bits: float compares and selects would keep GCC
** from vectorising the loops that call it (under the default -ftrapping-math). A NaN argument
** gives NaN. */
static inline float kn_expf(float x0) {
  const float magic = 12582912.0f; /* 1.5 * 2^23 */
  uint32_t xb = kn_bits(x0);
  uint32_t cb = xb > 0xC2AE0000u ? 0xC2AE0000u : xb; /* unsigned: x < -87 -> -87 */
  int32_t ci;
  memcpy(&ci, &cb, sizeof ci);
  ci = ci > 0x42B00000 ? 0x42B00000 : ci;            /* signed: x > 88 -> 88 */
  float x;
  memcpy(&x, &ci, sizeof x);
  float t = KN_FMA(x, 1.44269504088896341f, magic); /* n + magic, n = round(x / ln2) */
  float n = t - magic;
  float r = KN_FMA(n, -0.693359375f, x);            /* ln2 split in two parts for accuracy */
  r = KN_FMA(n, 2.12194440e-4f, r);
  float p = 1.9875691500e-4f;
  p = KN_FMA(p, r, 1.3981999507e-3f);
  p = KN_FMA(p, r, 8.3334519073e-3f);
  p = KN_FMA(p, r, 4.1665795894e-2f);
  p = KN_FMA(p, r, 1.6666665459e-1f);
  p = KN_FMA(p, r, 5.0000001201e-1f);
  float y = KN_FMA(p, r * r, r) + 1.0f;
  float scale = kn_float((kn_bits(t) - 0x4B400000u + 127u) << 23); /* 2^n */
  uint32_t nan_bits = (xb & 0x7FFFFFFFu) > 0x7F800000u ? 0x7FC00000u : 0u; /* NaN in, */
  return kn_float(kn_bits(y * scale) | nan_bits);                        /* NaN out */
}

/* tanh(x) = 1 - 2 / (exp(2x) + 1) for float, vectorisable; exact limits +-1 for large |x|
** and ~1e-7 absolute error near 0. */
static inline float kn_tanhf(float x) {
  return 1.0f - 2.0f / (kn_expf(2.0f * x) + 1.0f);
}

#define REAL float
#define KN(name) name##_f32
#define GEMM cblas_sgemm
#define EXP kn_expf
#define LOG logf
#define SQRT sqrtf
#define TANH kn_tanhf
#define KINT int32_t
#define KINT_MAX INT32_MAX
#include "cpu_kernels_impl.inc"
