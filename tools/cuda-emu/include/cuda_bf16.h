/* Emulated cuda_bf16.h (tools/cuda-emu): bfloat16 as NVIDIA's header spells it, for the CUDA
** sources compiled as C++ by the emulator. __nv_bfloat16 holds the 16 bits (sign, 8 exponent
** bits, 7 mantissa bits: the top half of a float). Conversions from float round to nearest,
** ties to even (the device's cvt.rn.bf16.f32); a NaN becomes the canonical 0x7fff, infinities
** and signed zeros stay, subnormals are kept (never flushed). Arithmetic goes through float and
** rounds once more, as NVIDIA's own host code does: exact for products (8 x 8 mantissa bits fit
** a float), while a sum may round twice where the device's fused bf16 add rounds once (last-bit
** differences, rare). */
#pragma once
#include <cstdint>
#include <cstring>

struct __nv_bfloat16_raw {
  unsigned short x;
};

/* The bits of float f rounded to bfloat16 (see above). */
static inline unsigned short emu_float_to_bf16_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fffu; /* NaN */
  uint32_t lower = u & 0xffffu, upper = u >> 16;
  if (lower > 0x8000u || (lower == 0x8000u && (upper & 1u))) upper++; /* may carry into inf */
  return (unsigned short)upper;
}

/* The float of bfloat16 bits b (exact). */
static inline float emu_bf16_bits_to_float(unsigned short b) {
  uint32_t u = (uint32_t)b << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

struct __nv_bfloat16 {
  unsigned short __x;
  __nv_bfloat16() = default;
  __nv_bfloat16(__nv_bfloat16_raw r) : __x(r.x) {}
  __nv_bfloat16(float f) : __x(emu_float_to_bf16_bits(f)) {}
  __nv_bfloat16(double d) : __x(emu_float_to_bf16_bits((float)d)) {}
  operator __nv_bfloat16_raw() const { return __nv_bfloat16_raw{__x}; }
  operator float() const { return emu_bf16_bits_to_float(__x); }
};

struct __nv_bfloat162 {
  __nv_bfloat16 x, y;
};

static inline __nv_bfloat16 emu_bf16_from_bits(unsigned short b) {
  __nv_bfloat16 h;
  h.__x = b;
  return h;
}
static inline __nv_bfloat16 __float2bfloat16(float f) { return emu_bf16_from_bits(emu_float_to_bf16_bits(f)); }
static inline __nv_bfloat16 __float2bfloat16_rn(float f) { return __float2bfloat16(f); }
/* Toward zero: the top 16 bits (a NaN stays a NaN). */
static inline __nv_bfloat16 __float2bfloat16_rz(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return emu_bf16_from_bits(0x7fffu);
  return emu_bf16_from_bits((unsigned short)(u >> 16));
}
static inline float __bfloat162float(__nv_bfloat16 h) { return emu_bf16_bits_to_float(h.__x); }
static inline __nv_bfloat162 __floats2bfloat162_rn(float a, float b) {
  return __nv_bfloat162{__float2bfloat16(a), __float2bfloat16(b)};
}
static inline __nv_bfloat162 __float22bfloat162_rn(float2 f) { return __floats2bfloat162_rn(f.x, f.y); }
static inline float __low2float(__nv_bfloat162 h) { return __bfloat162float(h.x); }
static inline float __high2float(__nv_bfloat162 h) { return __bfloat162float(h.y); }
static inline __nv_bfloat16 __hadd(__nv_bfloat16 a, __nv_bfloat16 b) { return __float2bfloat16((float)a + (float)b); }
static inline __nv_bfloat16 __hsub(__nv_bfloat16 a, __nv_bfloat16 b) { return __float2bfloat16((float)a - (float)b); }
static inline __nv_bfloat16 __hmul(__nv_bfloat16 a, __nv_bfloat16 b) { return __float2bfloat16((float)a * (float)b); }
