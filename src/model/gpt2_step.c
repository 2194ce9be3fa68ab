/*
** gpt2_step.c: GPT-2's forward and backward passes, one plain function per op's pass and per
** layer's forward and backward, as in llm.c's train_gpt2.c. Parameters come from the hooks as
** named tensors (gpt_acquire_weights: W and b of a linear, gamma and beta of a LayerNorm, wte
** and wpe of the embedding); activations are the op list's named activation tensors.
**
** Compiled three times (step_ops.h has the element types): as it is, in fp32 (training; exports
** gpt2_step_f32), by gpt2_step_f64.c with STEP_REAL_DOUBLE defined, in double (the whole-model
** gradient checks; gpt2_step_f64), and by gpt2_step_bf16.c with STEP_BF16 defined, with bf16
** activations and fp32 gradients and statistics (`--precision bf16` on a GPU; gpt2_step_bf16).
** Every function is static, so the copies do not meet.
**
** Activation blocks (BT = B*T positions; gpt2.c names them):
**   embed:   out [BT, C], then tokens [BT] and targets [BT] as int
**   ln*:     out [BT, C], mean [BT], rstd [BT]
**   linear:  out [BT, OC] (for proj/fcproj: the new residual stream, input + x W + b)
**   attn:    out [BT, C], lse [B, NH, T] (log-sum-exp of each query row's scores)
**   gelu:    out [BT, 4C]
**   lm_head: losses [BT] (the logits exist a chunk of rows at a time, in the scratch buffer)
*/
#include "model/gpt2.h"

#include "model/family.h"

#include "model/step_ops.h"

/* ---- One op's pass each: they time themselves (gpt_op_timer_*) ------------------------ */

/* Forward of LayerNorm op opi from inp into its out, mean and rstd. */
static void layernorm_fwd(const GptDesc* d, GptActs* a, const GptParamHooks* h, int opi,
                          const act_t* inp, GptPhase phase) {
  OpTimer tm = gpt_op_timer_start(a);
  int BT = a->B * a->T, C = d->cfg.n_embd;
  ParamView w = gpt_acquire_weights(d, a, h, opi, 1, 0, phase);
  kern(a)->layernorm_forward(out_of(a, opi), stat_of(d, a, opi, "mean"), stat_of(d, a, opi, "rstd"), inp,
                             w.t[NORM_GAMMA], w.t[NORM_BETA], BT, C);
  h->release_weight(h->ctx, opi, 0, phase);
  gpt_op_timer_stop(a, opi, tm);
}

/* Backward of LayerNorm op opi (whose input was inp): dinp += ..., dgamma and dbeta through the
** hooks. */
static void layernorm_bwd(const GptDesc* d, GptActs* a, const GptParamHooks* h, int opi,
                          act_t* dinp, const act_t* dout, const act_t* inp) {
  OpTimer tm = gpt_op_timer_start(a);
  int BT = a->B * a->T, C = d->cfg.n_embd;
  ParamView w = gpt_acquire_weights(d, a, h, opi, 1, 0, GPT_BACKWARD);
  int fresh;
  ParamView g = gpt_acquire_grads(d, a, h, opi, 1, 0, &fresh);
  kern(a)->layernorm_backward(dinp, g.t[NORM_GAMMA], g.t[NORM_BETA], dout, inp, w.t[NORM_GAMMA],
                              stat_of(d, a, opi, "mean"), stat_of(d, a, opi, "rstd"), BT, C, !fresh);
  h->release_weight(h->ctx, opi, 0, GPT_BACKWARD);
  h->release_grad(h->ctx, opi, 0);
  gpt_op_timer_stop(a, opi, tm);
}

/* Causal self-attention op opi over qkv into its out and lse. */
static void attention_fwd(const GptDesc* d, GptActs* a, int opi, const act_t* qkv, stat_t* scratch) {
  OpTimer tm = gpt_op_timer_start(a);
  int C = d->cfg.n_embd, NH = d->cfg.n_head;
  kern(a)->attention_forward(out_of(a, opi), stat_of(d, a, opi, "lse"), qkv, qkv + C, qkv + 2 * C,
                             3 * C, 3 * C, scratch, a->B, a->T, NH, NH, C / NH);
  gpt_op_timer_stop(a, opi, tm);
}

/* Backward of attention op opi: dqkv (zeroed here, then accumulated) from dout. */
static void attention_bwd(const GptDesc* d, GptActs* a, int opi, act_t* dqkv, const act_t* dout,
                          const act_t* qkv, stat_t* scratch) {
  size_t BTC = (size_t)a->B * a->T * d->cfg.n_embd;
  gpt_step_backend(a)->zero(dqkv, 3 * BTC * sizeof(act_t));
  OpTimer tm = gpt_op_timer_start(a);
  int C = d->cfg.n_embd, NH = d->cfg.n_head;
  kern(a)->attention_backward(dqkv, dqkv + C, dqkv + 2 * C, dout, qkv, qkv + C, qkv + 2 * C,
                              3 * C, 3 * C, out_of(a, opi), stat_of(d, a, opi, "lse"), scratch,
                              a->B, a->T, NH, NH, C / NH);
  gpt_op_timer_stop(a, opi, tm);
}

/* Backward of GELU op opi (input inp): dinp = GELU'(inp) * dout, overwritten. */
static void gelu_bwd(const GptDesc* d, GptActs* a, int opi, act_t* dinp, const act_t* inp,
                     const act_t* dout) {
  OpTimer tm = gpt_op_timer_start(a);
  kern(a)->gelu_backward(dinp, inp, dout, 4 * (size_t)a->B * a->T * d->cfg.n_embd);
  gpt_op_timer_stop(a, opi, tm);
}

/* Token and position embedding into embed's out. The slices are visited last first because the
** last one holds wpe, whose kernel initialises the output. */
static void embed_fwd(const GptDesc* d, GptActs* a, const GptParamHooks* h, const int* slices) {
  OpTimer tm = gpt_op_timer_start(a);
  int e = d->tokens_op, k = slices[e], B = a->B, T = a->T, C = d->cfg.n_embd, Vp = d->cfg.padded_vocab;
  act_t* out = out_of(a, e);
  const int* tok = gpt_acts_tokens(d, a);
  for (int i = k - 1; i >= 0; i--) {
    ParamView w = gpt_acquire_weights(d, a, h, e, k, i, GPT_FORWARD);
    if (w.t[EMBED_WPE]) kern(a)->embed_pos_forward(out, w.t[EMBED_WPE], B, T, C);
    kern(a)->embed_tok_forward(out + w.row0, C, tok, B * T, w.t[EMBED_WTE], (int)w.nrows, Vp);
    h->release_weight(h->ctx, e, i, GPT_FORWARD);
  }
  gpt_op_timer_stop(a, e, tm);
}

/* A fresh gradient of embed's last slice gets its wpe tail [maxT, C] written by the kernels
** only in rows t < T (the embedding's backward) or not at all (the LM head's): the rest is
** zeroed here, from row first_row on, so that the use writes every element of the slice. */
static void zero_wpe_rows(const GptDesc* d, const GptActs* a, grad_t* wpe_grad, int first_row) {
  const ParamTensor* wpe = &d->ops[d->tokens_op].tensor[EMBED_WPE];
  if ((size_t)first_row < wpe->rows)
    gpt_step_backend(a)->zero(wpe_grad + first_row * wpe->cols,
                              (wpe->rows - first_row) * wpe->cols * sizeof(grad_t));
}

/* Backward of the embedding: scatters dres into the wte rows and the wpe tail. */
static void embed_bwd(const GptDesc* d, GptActs* a, const GptParamHooks* h, const int* slices,
                      const act_t* dres) {
  OpTimer tm = gpt_op_timer_start(a);
  int e = d->tokens_op, k = slices[e], B = a->B, T = a->T, C = d->cfg.n_embd, Vp = d->cfg.padded_vocab;
  const int* tok = gpt_acts_tokens(d, a);
  for (int i = 0; i < k; i++) {
    int fresh;
    ParamView g = gpt_acquire_grads(d, a, h, e, k, i, &fresh);
    kern(a)->embed_tok_backward(g.t[EMBED_WTE], dres + g.row0, C, tok, B * T, (int)g.nrows, Vp, !fresh);
    if (g.t[EMBED_WPE]) {
      kern(a)->embed_pos_backward(g.t[EMBED_WPE], dres, B, T, C, !fresh);
      if (fresh) zero_wpe_rows(d, a, g.t[EMBED_WPE], T);
    }
    h->release_grad(h->ctx, e, i);
  }
  gpt_op_timer_stop(a, e, tm);
}

/* A fresh gradient of the tied head's slice (embed's): the last slice's wpe tail is zeroed (the
** embedding's backward adds into it later), so that the use writes every element. */
static void head_fresh(const GptDesc* d, const GptActs* a, ParamView* g) {
  if (g->t[EMBED_WPE]) zero_wpe_rows(d, a, g->t[EMBED_WPE], 0);
}

/* ---- Layers ------------------------------------------------------------------------------ */

/* The backward working buffers inside GptActs.scratch: the residual stream's gradient and two
** [BT, 4C] buffers for the activation gradients inside a layer, then the attention scratch
** (which the forward uses too; in stat's precision, at the next multiple of its size:
** gpt2_work_att_offset). */
typedef struct WorkBufs {
  act_t *dres, *dbuf_a, *dbuf_b;
  stat_t* att_scratch;
} WorkBufs;

/* Names the parts of the scratch buffer. */
static WorkBufs work_bufs(const GptDesc* d, const GptActs* a) {
  size_t BTC = (size_t)a->B * a->T * d->cfg.n_embd;
  WorkBufs g;
  g.dres = (act_t*)gpt_step_work(d, a);
  g.dbuf_a = g.dres + BTC;
  g.dbuf_b = g.dbuf_a + 4 * BTC;
  g.att_scratch = (stat_t*)((char*)g.dres + gpt2_work_att_offset(BTC, sizeof(act_t), sizeof(stat_t)));
  return g;
}

/* The input of layer l: the previous layer's output, or the embedding's. */
static const act_t* layer_input(const GptDesc* d, const GptActs* a, int l) {
  return l == 0 ? out_of(a, d->tokens_op) : out_of(a, gpt_op_layer(l - 1, GPT_FCPROJ));
}

/* Forward of transformer layer l from its input `residual`:
**   res2 = residual + proj(attn(qkv(ln1(residual)))),  res3 = res2 + fcproj(gelu(fc(ln2(res2)))).
** In phase GPT_RECOMPUTE (backward of a recomputed layer) it stops before fcproj: res3 is kept
** and backward needs only what comes before it. */
static void layer_forward(const GptDesc* d, GptActs* a, const GptParamHooks* h, const int* slices,
                          int l, const act_t* residual, GptPhase phase) {
  int o = gpt_op_layer(l, 0);
  stat_t* att_scratch = work_bufs(d, a).att_scratch;
  layernorm_fwd(d, a, h, o + GPT_LN1, residual, phase);
  linear_fwd(d, a, h, slices, o + GPT_QKV, out_of(a, o + GPT_QKV), out_of(a, o + GPT_LN1), NULL, phase);
  attention_fwd(d, a, o + GPT_ATTN, out_of(a, o + GPT_QKV), att_scratch);
  linear_fwd(d, a, h, slices, o + GPT_PROJ, out_of(a, o + GPT_PROJ), out_of(a, o + GPT_ATTN), residual, phase);
  layernorm_fwd(d, a, h, o + GPT_LN2, out_of(a, o + GPT_PROJ), phase);
  /* fc and GELU in one pass (matmul_gelu_forward): gelu's out from fc's, timed as fc's */
  linear_fwd_gelu(d, a, h, slices, o + GPT_FC, out_of(a, o + GPT_FC), out_of(a, o + GPT_LN2), NULL,
                  out_of(a, o + GPT_GELU), phase);
  if (phase == GPT_RECOMPUTE) return;
  linear_fwd(d, a, h, slices, o + GPT_FCPROJ, out_of(a, o + GPT_FCPROJ), out_of(a, o + GPT_GELU),
             out_of(a, o + GPT_PROJ), phase);
}

/* Backward of transformer layer l: on entry g->dres holds the gradient of its output res3, on
** exit that of its input; every parameter gradient goes through the hooks. */
static void layer_backward(const GptDesc* d, GptActs* a, const GptParamHooks* h, const int* slices,
                           int l, const act_t* residual, WorkBufs* g) {
  int o = gpt_op_layer(l, 0);
  act_t *dres = g->dres, *da = g->dbuf_a, *db = g->dbuf_b;
  const act_t* res2 = out_of(a, o + GPT_PROJ);
  /* MLP: dres holds dres3 = dres2 so far. The linear and GELU backwards overwrite their input
  ** gradients (da, db), the LayerNorms add into dres, attention adds into a zeroed db. */
  linear_bwd(d, a, h, slices, o + GPT_FCPROJ, da, dres, out_of(a, o + GPT_GELU));
  gelu_bwd(d, a, o + GPT_GELU, db, out_of(a, o + GPT_FC), da);
  linear_bwd(d, a, h, slices, o + GPT_FC, da, db, out_of(a, o + GPT_LN2));
  layernorm_bwd(d, a, h, o + GPT_LN2, dres, da, res2);
  /* Attention. */
  linear_bwd(d, a, h, slices, o + GPT_PROJ, da, dres, out_of(a, o + GPT_ATTN));
  attention_bwd(d, a, o + GPT_ATTN, db, da, out_of(a, o + GPT_QKV), g->att_scratch);
  linear_bwd(d, a, h, slices, o + GPT_QKV, da, db, out_of(a, o + GPT_LN1));
  layernorm_bwd(d, a, h, o + GPT_LN1, dres, da, residual);
}

/* ---- The passes ------------------------------------------------------------------------------ */

/* Forward pass and loss; in training the fused head leaves dlnf in dbuf_a for the backward
** (see gpt_forward in gpt_step.h). */
static double gpt2_forward(const GptDesc* d, GptActs* a, const GptParamHooks* h, const int* slices,
                           GptForwardMode mode, double loss_scale, int* argmax) {
  int L = d->cfg.n_layer, lnf = gpt_op_lnf(d);
  embed_fwd(d, a, h, slices);
  for (int l = 0; l < L; l++) layer_forward(d, a, h, slices, l, layer_input(d, a, l), GPT_FORWARD);
  layernorm_fwd(d, a, h, lnf, layer_input(d, a, L), GPT_FORWARD);
  return head_loss_fwd(d, a, h, slices, mode, out_of(a, lnf), work_bufs(d, a).dbuf_a, loss_scale,
                       argmax, head_fresh);
}

/* Backward pass (see gpt_backward in gpt_step.h): the ops in reverse from lnf (the head's
** ran in the forward and left dlnf in dbuf_a), a recomputed layer's forward re-run just before
** its backward. */
static void gpt2_backward(const GptDesc* d, GptActs* a, const GptParamHooks* h, const int* slices) {
  int L = d->cfg.n_layer, lnf = gpt_op_lnf(d);
  size_t BTC = (size_t)a->B * a->T * d->cfg.n_embd;
  WorkBufs g = work_bufs(d, a);
  gpt_step_backend(a)->zero(g.dres, BTC * sizeof(act_t));
  layernorm_bwd(d, a, h, lnf, g.dres, g.dbuf_a, layer_input(d, a, L));
  for (int l = L - 1; l >= 0; l--) {
    const act_t* residual = layer_input(d, a, l);
    if (a->recompute && a->recompute[l]) {
      a->phase = GPT_RECOMPUTE;
      layer_forward(d, a, h, slices, l, residual, GPT_RECOMPUTE);
      a->phase = GPT_BACKWARD;
    }
    layer_backward(d, a, h, slices, l, residual, &g);
  }
  embed_bwd(d, a, h, slices, g.dres);
}

#if defined(STEP_REAL_DOUBLE)
const StepPasses gpt2_step_f64 = {gpt2_forward, gpt2_backward};
#elif defined(STEP_BF16)
const StepPasses gpt2_step_bf16 = {gpt2_forward, gpt2_backward};
#else
const StepPasses gpt2_step_f32 = {gpt2_forward, gpt2_backward};
#endif
