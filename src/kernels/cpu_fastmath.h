/*
** cpu_fastmath.h: the CPU kernels' own float math, shared by the fp32 kernels
** (cpu_kernels_real.c) and the bf16 ones (cpu_bf16.c), so that both compute exactly the same
** exp and tanh: vectorisable, branch-free, NaN-preserving. Static inline functions, included by
** the two kernel files only.
*/
#ifndef OSDP_CPU_FASTMATH_H
#define OSDP_CPU_FASTMATH_H

#include <stdint.h>
#include <string.h>

/* The bits of a float as an unsigned integer, and back (memcpy: no aliasing issues; the
** compiler turns it into a register move). */
static inline uint32_t float_bits(float x) { uint32_t u; memcpy(&u, &x, sizeof u); return u; }
static inline float bits_float(uint32_t u) { float x; memcpy(&x, &u, sizeof x); return x; }

/* a * b + c, fused (one rounding, one instruction) where the target has FMA (-march=native
** here); the C11 build never contracts a * b + c on its own (-ffp-contract=off). */
#ifdef __FMA__
#define FMA_F32(a, b, c) __builtin_fmaf((a), (b), (c))
#else
#define FMA_F32(a, b, c) ((a) * (b) + (c))
#endif

/* exp(x) for float, vectorisable, ~1.3 ulp: x = n ln2 + r with |r| <= ln2/2, exp(r) by the
** Cephes degree-6 polynomial (Horner, fused multiply-adds where available), times 2^n built
** from the exponent bits. n is rounded by adding 1.5 * 2^23 (the "magic number" trick), which
** also leaves n in the low bits of the sum, so no float-to-int conversion is needed. x is
** first clamped to [-87, 88] (exp(-87) ~ 1.6e-38 stands in for underflow, exp(88) ~ 1.7e38
** for overflow) with INTEGER compares on its bits: float compares and selects would keep GCC
** from vectorising the loops that call it (under the default -ftrapping-math). A NaN argument
** gives NaN. */
static inline float fast_expf(float x0) {
  const float magic = 12582912.0f; /* 1.5 * 2^23 */
  uint32_t xb = float_bits(x0);
  uint32_t cb = xb > 0xC2AE0000u ? 0xC2AE0000u : xb; /* unsigned: x < -87 -> -87 */
  int32_t ci;
  memcpy(&ci, &cb, sizeof ci);
  ci = ci > 0x42B00000 ? 0x42B00000 : ci;            /* signed: x > 88 -> 88 */
  float x;
  memcpy(&x, &ci, sizeof x);
  float t = FMA_F32(x, 1.44269504088896341f, magic); /* n + magic, n = round(x / ln2) */
  float n = t - magic;
  float r = FMA_F32(n, -0.693359375f, x);            /* ln2 split in two parts for accuracy */
  r = FMA_F32(n, 2.12194440e-4f, r);
  float p = 1.9875691500e-4f;
  p = FMA_F32(p, r, 1.3981999507e-3f);
  p = FMA_F32(p, r, 8.3334519073e-3f);
  p = FMA_F32(p, r, 4.1665795894e-2f);
  p = FMA_F32(p, r, 1.6666665459e-1f);
  p = FMA_F32(p, r, 5.0000001201e-1f);
  float y = FMA_F32(p, r * r, r) + 1.0f;
  float scale = bits_float((float_bits(t) - 0x4B400000u + 127u) << 23); /* 2^n */
  uint32_t nan_bits = (xb & 0x7FFFFFFFu) > 0x7F800000u ? 0x7FC00000u : 0u; /* NaN in, */
  return bits_float(float_bits(y * scale) | nan_bits);                    /* NaN out */
}

/* tanh(x) = 1 - 2 / (exp(2x) + 1) for float, vectorisable; exact limits +-1 for large |x|
** and ~1e-7 absolute error near 0. */
static inline float fast_tanhf(float x) {
  return 1.0f - 2.0f / (fast_expf(2.0f * x) + 1.0f);
}

#endif
