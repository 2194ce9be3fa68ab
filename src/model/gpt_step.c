/* gpt_step.c: instantiates the forward and backward passes in fp32 and fp64; see gpt_step.h. */
#include "model/gpt_step.h"

#include <string.h>

#include "core/util.h"
#include "kernels/cpu_kernels.h"

int* gpt_acts_tokens(const GptDesc* d, const GptActs* a) {
  size_t BTC = (size_t)a->B * a->T * d->cfg.n_embd;
  return (int*)((char*)a->op_acts[0] + BTC * a->elem);
}

int* gpt_acts_targets(const GptDesc* d, const GptActs* a) {
  return gpt_acts_tokens(d, a) + (size_t)a->B * a->T;
}

void* gpt_acts_logits(const GptDesc* d, const GptActs* a) { return a->op_acts[gpt_op_lmhead(d)]; }

#define REAL float
#define KN(name) name##_f32
#include "model/gpt_step_impl.inc"
#undef REAL
#undef KN

#define REAL double
#define KN(name) name##_f64
#include "model/gpt_step_impl.inc"
#undef REAL
#undef KN
