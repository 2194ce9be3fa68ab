/*
** step_ops.h: the op passes every family's step shares, written once for the step's element
** types: linears (split into slices, with or without bias and residual) and the LM head fused
** with the loss (the owner's first tensor as its [in, out] weight: a tied embedding's wte or the
** head's own W). Included by each family's step file (gpt2_step.c, llama_step.c), which is
** compiled three times: as it is (PRECISION_FP32: everything float), with STEP_REAL_DOUBLE
** (PRECISION_FP64: everything double, the gradient checks) and with STEP_BF16 (PRECISION_BF16:
** bf16 activations, fp32 gradients and statistics); every function is static, so the copies
** never meet. The element types are those of the kernel list's roles (kernel_list.h): act_t
** for activations, their gradients and the working buffers, stat_t for saved statistics and
** losses, grad_t for parameter gradients; weights come as untyped views (ParamView) and go
** straight to the kernels.
*/
#ifndef OSDP_STEP_OPS_H
#define OSDP_STEP_OPS_H

#include "model/gpt_step.h"

#if defined(STEP_REAL_DOUBLE)
typedef double act_t;
typedef double stat_t;
typedef double grad_t;
typedef Kernels_f64 StepKernels;
#define STEP_PRECISION PRECISION_FP64
#elif defined(STEP_BF16)
typedef osdp_bf16 act_t;
typedef float stat_t;
typedef float grad_t;
typedef Kernels_bf16 StepKernels;
#define STEP_PRECISION PRECISION_BF16
#else
typedef float act_t;
typedef float stat_t;
typedef float grad_t;
typedef Kernels_f32 StepKernels;
#define STEP_PRECISION PRECISION_FP32
#endif

/* The tensors of a linear op (W, then b when it has one) and of the LM head's weight owner. */
enum { STEP_LINEAR_W = 0, STEP_LINEAR_B = 1, STEP_HEAD_W = 0 };

/* The kernels of the step's precision on a's backend. A backend without fp64 kernels (CUDA)
** cannot run the fp64 pass (the CPU's test path), one without bf16 kernels (the CPU) not the
** bf16 one: the engine checks before it runs a step. */
static inline const StepKernels* kern(const GptActs* a) {
#if defined(STEP_REAL_DOUBLE)
  return gpt_step_backend(a)->f64;
#elif defined(STEP_BF16)
  return gpt_step_backend(a)->bf16;
#else
  return gpt_step_backend(a)->f32;
#endif
}

/* Activation tensor `name` (a value: ACT_VALUE) of op's block, typed. */
static inline act_t* act(const GptDesc* d, const GptActs* a, int op, const char* name) {
  return (act_t*)((char*)a->op_acts[op] +
                  model_act_offset(&d->ops[op], name, a->B, a->T, STEP_PRECISION));
}

/* Statistic tensor `name` (ACT_STAT: mean, rstd, lse, losses) of op's block, typed. */
static inline stat_t* stat_of(const GptDesc* d, const GptActs* a, int op, const char* name) {
  return (stat_t*)((char*)a->op_acts[op] +
                   model_act_offset(&d->ops[op], name, a->B, a->T, STEP_PRECISION));
}

/* The op's activation block (its first tensor), typed. */
static inline act_t* out_of(const GptActs* a, int op) { return (act_t*)a->op_acts[op]; }

/* Forward of a (possibly split) linear op: out = inp W + b (b only when the op has one), plus
** the residual input when the op adds to the residual stream. One slice of rows of W is live
** at a time. With gelu_out (GPT-2's fc), the last slice's call also writes GELU(out) there
** (matmul_gelu_forward: one fused pass on CUDA), and the op's time includes it. */
static inline void linear_fwd_gelu(const GptDesc* d, GptActs* a, const GptParamHooks* h,
                                   const int* slices, int opi, act_t* out, const act_t* inp,
                                   const act_t* residual, act_t* gelu_out, GptPhase phase) {
  OpTimer tm = gpt_op_timer_start(a);
  const GptOp* op = &d->ops[opi];
  int BT = a->B * a->T, K = op->K, OC = op->OC, k = slices[opi];
  if (residual) gpt_step_backend(a)->copy(out, residual, (size_t)BT * OC * sizeof(act_t));
  for (int i = 0; i < k; i++) {
    ParamView w = gpt_acquire_weights(d, a, h, opi, k, i, phase);
    int accumulate = residual || i > 0;
    if (gelu_out && i == k - 1)
      kern(a)->matmul_gelu_forward(gelu_out, out, inp + w.row0, K, w.t[STEP_LINEAR_W],
                                   w.t[STEP_LINEAR_B], BT, (int)w.nrows, OC, accumulate);
    else
      kern(a)->matmul_forward(out, inp + w.row0, K, w.t[STEP_LINEAR_W], w.t[STEP_LINEAR_B], BT,
                              (int)w.nrows, OC, accumulate);
    h->release_weight(h->ctx, opi, i, phase);
  }
  gpt_op_timer_stop(a, opi, tm);
}

/* Forward of a linear op without an activation (see linear_fwd_gelu). */
static inline void linear_fwd(const GptDesc* d, GptActs* a, const GptParamHooks* h,
                              const int* slices, int opi, act_t* out, const act_t* inp,
                              const act_t* residual, GptPhase phase) {
  linear_fwd_gelu(d, a, h, slices, opi, out, inp, residual, NULL, phase);
}

/* Backward of a linear op: dinp = dout W^T (each slice overwrites its columns of dinp), dW +=
** inp^T dout, db += sum dout (= into a fresh gradient buffer), slice by slice. */
static inline void linear_bwd(const GptDesc* d, GptActs* a, const GptParamHooks* h,
                              const int* slices, int opi, act_t* dinp, const act_t* dout,
                              const act_t* inp) {
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

/* What a family does to a fresh gradient of the head's owner besides the head's own tensor (GPT-2
** zeroes embed's wpe tail), or NULL. */
typedef void (*HeadFresh)(const GptDesc* d, const GptActs* a, ParamView* g);

/* The slices of the head's owner, held for the whole fused head: weights, and in training their
** gradient buffers (fresh[i]: the buffer holds nothing to keep). */
typedef struct HeadSlices {
  int owner, k;
  ParamView w[GPT_MAX_SLICES], g[GPT_MAX_SLICES];
  int fresh[GPT_MAX_SLICES];
} HeadSlices;

/* Acquires every slice of the head's owner (weight, then in training its gradient: the
** schedule's held uses), calling on_fresh for a fresh gradient. */
static inline void head_acquire(const GptDesc* d, GptActs* a, const GptParamHooks* h,
                                const int* slices, GptForwardMode mode, HeadFresh on_fresh,
                                HeadSlices* s) {
  s->owner = d->ops[d->head_op].owner;
  s->k = slices[s->owner];
  for (int i = 0; i < s->k; i++) {
    s->w[i] = gpt_acquire_weights(d, a, h, s->owner, s->k, i, GPT_FORWARD);
    if (mode != GPT_TRAIN) continue;
    s->g[i] = gpt_acquire_grads(d, a, h, s->owner, s->k, i, &s->fresh[i]);
    if (s->fresh[i] && on_fresh) on_fresh(d, a, &s->g[i]);
  }
}

/* Gives the slices back, in the order they were acquired. */
static inline void head_release(const GptParamHooks* h, GptForwardMode mode, const HeadSlices* s) {
  for (int i = 0; i < s->k; i++) {
    h->release_weight(h->ctx, s->owner, i, GPT_FORWARD);
    if (mode == GPT_TRAIN) h->release_grad(h->ctx, s->owner, i);
  }
}

/* The LM head fused with the loss, over chunks of rows (gpt_head_rows) so the logits [BT, Vp]
** never exist whole. Per chunk of n rows from r0: logits = xf W (W the first tensor of the head's
** owner, [C, Vp]: a tied embedding's wte or the head's own weight; summed over its slices'
** rows), the argmax when asked, the per-position losses and dloss/dlogits in place; in training
** then the head's backward for the chunk: dxf's rows (each slice writes its columns) and the
** weight's gradient, accumulated over the chunks. Every slice is held throughout, so each is
** gathered once. Returns the losses' sum. */
static inline double head_loss_fwd(const GptDesc* d, GptActs* a, const GptParamHooks* h,
                                   const int* slices, GptForwardMode mode, const act_t* xf,
                                   act_t* dxf, double loss_scale, int* argmax, HeadFresh on_fresh) {
  OpTimer tm = gpt_op_timer_start(a);
  int head = d->head_op, BT = a->B * a->T, C = d->cfg.n_embd;
  int V = d->cfg.vocab_size, Vp = d->cfg.padded_vocab, R = gpt_head_rows(d, a->B, a->T, a->head_rows);
  act_t* logits = gpt_step_head_chunk(d, a);
  stat_t* losses = stat_of(d, a, head, "losses");
  const int* targets = gpt_acts_targets(d, a);
  HeadSlices s;
  head_acquire(d, a, h, slices, mode, on_fresh, &s);
  for (int r0 = 0; r0 < BT; r0 += R) {
    int n = BT - r0 < R ? BT - r0 : R;
    const act_t* x = xf + (size_t)r0 * C;
    for (int i = 0; i < s.k; i++)
      kern(a)->matmul_forward(logits, x + s.w[i].row0, C, s.w[i].t[STEP_HEAD_W], NULL, n,
                              (int)s.w[i].nrows, Vp, i > 0);
    if (argmax) kern(a)->logits_argmax(logits, n, V, Vp, argmax + r0);
    kern(a)->crossentropy_forward_backward(logits, losses + r0, targets + r0, n, V, Vp, loss_scale);
    for (int i = 0; mode == GPT_TRAIN && i < s.k; i++)
      kern(a)->matmul_backward(dxf + (size_t)r0 * C + s.w[i].row0, s.g[i].t[STEP_HEAD_W], NULL,
                               logits, x + s.w[i].row0, C, s.w[i].t[STEP_HEAD_W], n,
                               (int)s.w[i].nrows, Vp, !s.fresh[i] || r0 > 0);
  }
  head_release(h, mode, &s);
  double sum = kern(a)->sum_values(losses, (size_t)BT); /* the step's one wait for its loss */
  gpt_op_timer_stop(a, head, tm);
  return sum;
}

#endif
