/*
** precision.c: the names and sizes of the step's storage precisions (Precision, StepElems) and
** of the matmul modes, and bf16's conversions on the host. Plain functions with no backend
** behind them, apart from backend.c, so that a program that only plans or predicts memory
** (plan_tool, libosdp's planning API) does not link a GPU backend and its libraries. See
** backend.h.
*/
#include <stdint.h>
#include <string.h>

#include "kernels/backend.h"

/* The index of name in names[0..count), or -1: the parse of an enum from its names. */
static int name_index(const char* const* names, int count, const char* name) {
  for (int i = 0; i < count; i++)
    if (!strcmp(name, names[i])) return i;
  return -1;
}

/* The modes' names, indexed by MatmulMode. */
static const char* const matmul_mode_names[] = {"fp32", "tf32", "bf16"};

int matmul_mode_parse(const char* name) { return name_index(matmul_mode_names, 3, name); }

const char* matmul_mode_name(MatmulMode m) { return matmul_mode_names[m]; }

StepElems precision_elems(Precision p) {
  if (p == PRECISION_FP64) return (StepElems){8, 8, 8, 8};
  if (p == PRECISION_BF16) return (StepElems){2, 2, 4, 4};
  return (StepElems){4, 4, 4, 4};
}

/* The precisions' names, indexed by Precision. */
static const char* const precision_names[] = {"fp32", "fp64", "bf16"};

int precision_parse(const char* name) { return name_index(precision_names, 3, name); }

const char* precision_name(Precision p) { return precision_names[p]; }

/* Rounds to nearest even on the bits: adding 0x7fff plus the lowest kept bit carries into the
** kept half exactly when the dropped half is above one half, or equal to it with the kept half
** odd. A NaN keeps its sign and becomes quiet (the carry could otherwise make it an inf). */
osdp_bf16 osdp_bf16_from_float(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  osdp_bf16 h;
  if ((u & 0x7fffffffu) > 0x7f800000u) {
    h.bits = (uint16_t)((u >> 16) | 0x0040u);
    return h;
  }
  u += 0x7fffu + ((u >> 16) & 1u);
  h.bits = (uint16_t)(u >> 16);
  return h;
}

float osdp_bf16_to_float(osdp_bf16 h) {
  uint32_t u = (uint32_t)h.bits << 16;
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}
