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

/* Appends the uses of all slices of owner to the schedule (in slice order, or reversed). */
static int add_uses(GptParamUse* out, int n, int owner, int k, GptPhase ph, int weight, int grad,
                    int reversed) {
  for (int j = 0; j < k; j++) {
    int i = reversed ? k - 1 - j : j;
    if (out) out[n] = (GptParamUse){owner, i, ph, weight, grad};
    n++;
  }
  return n;
}

int gpt_param_schedule(const GptDesc* d, const int* slices, GptParamUse* out) {
  static const int fwd_ops[] = {GPT_LN1, GPT_QKV, GPT_PROJ, GPT_LN2, GPT_FC, GPT_FCPROJ};
  int n = 0, L = d->cfg.n_layer, lnf = gpt_op_lnf(d);
  n = add_uses(out, n, 0, slices[0], GPT_FORWARD, 1, 0, 1); /* embed: last slice first */
  for (int l = 0; l < L; l++)
    for (int j = 0; j < 6; j++) {
      int op = gpt_op_layer(l, fwd_ops[j]);
      n = add_uses(out, n, op, slices[op], GPT_FORWARD, 1, 0, 0);
    }
  n = add_uses(out, n, lnf, 1, GPT_FORWARD, 1, 0, 0);
  n = add_uses(out, n, 0, slices[0], GPT_FORWARD, 1, 0, 0);   /* lm_head */
  n = add_uses(out, n, 0, slices[0], GPT_BACKWARD, 1, 1, 0);  /* lm_head */
  n = add_uses(out, n, lnf, 1, GPT_BACKWARD, 1, 1, 0);
  for (int l = L - 1; l >= 0; l--)
    for (int j = 5; j >= 0; j--) {
      int op = gpt_op_layer(l, fwd_ops[j]);
      n = add_uses(out, n, op, slices[op], GPT_BACKWARD, 1, 1, 0);
    }
  return add_uses(out, n, 0, slices[0], GPT_BACKWARD, 0, 1, 0); /* embed: gradient only */
}

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
