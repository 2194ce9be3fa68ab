/* Emulated bf16 (CUDA's <cuda_bf16.h>) for the CPU emulation of osdp's CUDA backend: the 16 top
** bits of an fp32, converted to nearest with ties to even (NaN kept a NaN), as the GPU's
** __float2bfloat16 does. */
#pragma once
#include <cstdint>
#include <cstring>

struct __nv_bfloat16 {
  uint16_t bits;
};

inline __nv_bfloat16 __float2bfloat16(float v) {
  uint32_t u;
  memcpy(&u, &v, 4);
  __nv_bfloat16 h;
  if ((u & 0x7fffffffu) > 0x7f800000u) h.bits = (uint16_t)((u >> 16) | 0x40u); /* quiet NaN */
  else h.bits = (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
  return h;
}

inline float __bfloat162float(__nv_bfloat16 h) {
  uint32_t u = (uint32_t)h.bits << 16;
  float v;
  memcpy(&v, &u, 4);
  return v;
}
