/*
** step_ops.h: the op passes every family's step shares, written once for the step's element
** type: linears (split into slices, with or without bias and residual), the LM head (the owner's
** first tensor as its [in, out] weight: a tied embedding's wte or the head's own W) and the
** loss. Included by each family's step file (gpt2_step.c, llama_step.c), which is compiled once
** with real = float and once with STEP_REAL_DOUBLE (real = double); every function is static, so
** the copies never meet.
*/
#ifndef OSDP_STEP_OPS_H
#define OSDP_STEP_OPS_H

#include "model/gpt_step.h"

#ifdef STEP_REAL_DOUBLE
typedef double real;
typedef Kernels_f64 RealKernels;
#else
typedef float real;
typedef Kernels_f32 RealKernels;
#endif

/* The tensors of a linear op (W, then b when it has one) and of the LM head's weight owner. */
enum { STEP_LINEAR_W = 0, STEP_LINEAR_B = 1, STEP_HEAD_W = 0 };

/* The kernels of the step's precision on a's backend. A backend without fp64 kernels (CUDA)
** cannot run the fp64 pass: the fp64 pass is the CPU's test path. */
static inline const RealKernels* kern(const GptActs* a) {
#ifdef STEP_REAL_DOUBLE
  return gpt_step_backend(a)->f64;
#else
  return gpt_step_backend(a)->f32;
#endif
}

/* Activation tensor `name` of op's block, typed. */
static inline real* act(const GptDesc* d, const GptActs* a, int op, const char* name) {
  return (real*)((char*)a->op_acts[op] + model_act_offset(&d->ops[op], name, a->B, a->T, a->elem));
}

/* The op's activation block (its first tensor), typed. */
static inline real* out_of(const GptActs* a, int op) { return (real*)a->op_acts[op]; }

/* Forward of a (possibly split) linear op: out = inp W + b (b only when the op has one), plus
** the residual input when the op adds to the residual stream. One slice of rows of W is live
** at a time. */
static inline void linear_fwd(const GptDesc* d, GptActs* a, const GptParamHooks* h,
                              const int* slices, int opi, real* out, const real* inp,
                              const real* residual, GptPhase phase) {
  OpTimer tm = gpt_op_timer_start(a);
  const GptOp* op = &d->ops[opi];
  int BT = a->B * a->T, K = op->K, OC = op->OC, k = slices[opi];
  if (residual) gpt_step_backend(a)->copy(out, residual, (size_t)BT * OC * sizeof(real));
  for (int i = 0; i < k; i++) {
    ParamView w = gpt_acquire_weights(d, a, h, opi, k, i, phase);
    kern(a)->matmul_forward(out, inp + w.row0, K, w.t[STEP_LINEAR_W], w.t[STEP_LINEAR_B], BT,
                            (int)w.nrows, OC, residual || i > 0);
    h->release_weight(h->ctx, opi, i, phase);
  }
  gpt_op_timer_stop(a, opi, tm);
}

/* Backward of a linear op: dinp = dout W^T (each slice overwrites its columns of dinp), dW +=
** inp^T dout, db += sum dout (= into a fresh gradient buffer), slice by slice. */
static inline void linear_bwd(const GptDesc* d, GptActs* a, const GptParamHooks* h,
                              const int* slices, int opi, real* dinp, const real* dout,
                              const real* inp) {
  OpTimer tm = gpt_op_timer_start(a);
  const GptOp* op = &d->ops[opi];
  int BT = a->B * a->T, K = op->K, OC = op->OC, k = slices[opi];
  for (int i = 0; i < k; i++) {
    ParamView w = gpt_acquire_weights(d, a, h, opi, k, i, GPT_BACKWARD);
    int fresh;
    ParamView g = gpt_acquire_grads(d, a, h, opi, k, i, &fresh);
    kern(a)->matmul_backward(dinp + w.row0, g.t[STEP_LINEAR_W], g.t[STEP_LINEAR_B], dout,
                             inp + w.row0, K, w.t[STEP_LINEAR_W], BT, (int)w.nrows, OC, !fresh);
    h->release_weight(h->ctx, opi, i, GPT_BACKWARD);
    h->release_grad(h->ctx, opi, i);
  }
  gpt_op_timer_stop(a, opi, tm);
}

/* LM head: logits = xf W, W the first tensor of the head's owner ([C, Vp]: a tied embedding's
** wte or the head's own weight), slice by slice, no bias. */
static inline void head_fwd(const GptDesc* d, GptActs* a, const GptParamHooks* h,
                            const int* slices, const real* xf) {
  OpTimer tm = gpt_op_timer_start(a);
  int head = d->logits_op, e = d->ops[head].owner, k = slices[e];
  int BT = a->B * a->T, C = d->cfg.n_embd, Vp = d->cfg.padded_vocab;
  real* logits = out_of(a, head);
  for (int i = 0; i < k; i++) {
    ParamView w = gpt_acquire_weights(d, a, h, e, k, i, GPT_FORWARD);
    kern(a)->matmul_forward(logits, xf + w.row0, C, w.t[STEP_HEAD_W], NULL, BT, (int)w.nrows, Vp,
                            i > 0);
    h->release_weight(h->ctx, e, i, GPT_FORWARD);
  }
  gpt_op_timer_stop(a, head, tm);
}

/* What a family does to a fresh gradient of the head's owner besides the head's own tensor (GPT-2
** zeroes embed's wpe tail), or NULL. */
typedef void (*HeadFresh)(const GptDesc* d, const GptActs* a, ParamView* g);

/* Backward of the LM head: dxf (each slice writes its columns) from the dlogits left in the
** logits buffer, and the weight's gradient slice by slice (on_fresh for a fresh one). */
static inline void head_bwd(const GptDesc* d, GptActs* a, const GptParamHooks* h,
                            const int* slices, real* dxf, const real* xf, HeadFresh on_fresh) {
  OpTimer tm = gpt_op_timer_start(a);
  int head = d->logits_op, e = d->ops[head].owner, k = slices[e];
  int BT = a->B * a->T, C = d->cfg.n_embd, Vp = d->cfg.padded_vocab;
  const real* dlogits = out_of(a, head);
  for (int i = 0; i < k; i++) {
    ParamView w = gpt_acquire_weights(d, a, h, e, k, i, GPT_BACKWARD);
    int fresh;
    ParamView g = gpt_acquire_grads(d, a, h, e, k, i, &fresh);
    kern(a)->matmul_backward(dxf + w.row0, g.t[STEP_HEAD_W], NULL, dlogits, xf + w.row0, C,
                             w.t[STEP_HEAD_W], BT, (int)w.nrows, Vp, !fresh);
    if (fresh && on_fresh) on_fresh(d, a, &g);
    h->release_weight(h->ctx, e, i, GPT_BACKWARD);
    h->release_grad(h->ctx, e, i);
  }
  gpt_op_timer_stop(a, head, tm);
}

/* The loss op (the op after the head): per-position losses, and dloss/dlogits over the logits;
** the argmax of each position's logits first when asked. Returns the losses' sum. */
static inline double loss_fwd(const GptDesc* d, GptActs* a, double loss_scale, int* argmax) {
  int BT = a->B * a->T, loss = d->logits_op + 1, V = d->cfg.vocab_size, Vp = d->cfg.padded_vocab;
  real* logits = out_of(a, d->logits_op);
  if (argmax) kern(a)->logits_argmax(logits, BT, V, Vp, argmax);
  OpTimer tm = gpt_op_timer_start(a);
  double sum = kern(a)->crossentropy_forward_backward(logits, out_of(a, loss),
                                                      gpt_acts_targets(d, a), BT, V, Vp,
                                                      loss_scale);
  gpt_op_timer_stop(a, loss, tm);
  return sum;
}

#endif
