/*
** llama_step.c: the Llama family's forward and backward passes, one plain function per op's
** pass and per layer's forward and backward (see llama.h for the op list). Parameters come from
** the hooks as named tensors (gpt_acquire_weights); activations are the op list's named
** activation tensors; the working buffers are laid out by llama_work.h.
**
** Compiled three times (step_ops.h has the element types): as it is, in fp32 (training; exports
** llama_step_f32), by llama_step_bf16.c with STEP_BF16 (bf16 activations, fp32 gradients and
** statistics; llama_step_bf16), and by
** llama_step_f64.c with STEP_REAL_DOUBLE defined, in double (the whole-model gradient
** checks; exports llama_step_f64).
**
** Activation blocks (BT = B*T; Q = NH*hs, KV = NKV*hs, F = ffn_dim):
**   embed:   out [BT, C], then tokens [BT] and targets [BT] as int
**   ln*:     out [BT, C], rstd [BT]
**   q, k, v: out [BT, Q], [BT, KV], [BT, KV]; attention's forward rotates q and k in place, so
**            after it they hold the rotated values its backward needs
**   attn:    out [BT, Q], lse [B, NH, T]
**   o, down: out [BT, C]: the new residual stream, input + x W
**   gate, up: out [BT, F]; swiglu: out [BT, F]
**   lm_head: losses [BT] (the logits exist a chunk of rows at a time, in the scratch buffer)
*/
#include "model/llama.h"

#include "model/family.h"
#include "model/llama_work.h"
#include "model/step_ops.h"

/* The working buffers of a (llama_work.h), typed. */
typedef struct Work {
  act_t *dres, *dx, *dt, *da, *dgate, *dup, *dq, *dk, *dv;
  stat_t *inv_freq, *att;
} Work;

/* Names the parts of the scratch buffer. */
static Work work_bufs(const GptDesc* d, const GptActs* a) {
  LlamaWork w = llama_work_layout(d, a->B, a->T, STEP_PRECISION);
  char* s = gpt_step_work(d, a);
  return (Work){(act_t*)(s + w.dres), (act_t*)(s + w.dx),    (act_t*)(s + w.dt),
                (act_t*)(s + w.da),   (act_t*)(s + w.dgate), (act_t*)(s + w.dup),
                (act_t*)(s + w.dq),   (act_t*)(s + w.dk),    (act_t*)(s + w.dv),
                (stat_t*)(s + w.inv_freq), (stat_t*)(s + w.att)};
}

/* Writes the rotary frequencies into the scratch buffer (the kernels read them there; the
** forward writes them, the backward that follows it on the same activations reads them). */
static void fill_inv_freq(const GptDesc* d, const GptActs* a) {
  double f[512];
  stat_t r[512];
  int half = d->cfg.head_dim / 2;
  llama_rope_inv_freq(&d->cfg, f);
  for (int j = 0; j < half; j++) r[j] = (stat_t)f[j];
  gpt_step_backend(a)->to_device(work_bufs(d, a).inv_freq, r, (size_t)half * sizeof(stat_t));
}

/* ---- One op's pass each: they time themselves (gpt_op_timer_*) ------------------------ */

/* Backward of a linear op whose input gradient is summed with others': dt = dout W^T (scratch),
** then dx += dt, timed as the op's. */
static void linear_bwd_add(const GptDesc* d, GptActs* a, const GptParamHooks* h,
                           const int* slices, int opi, act_t* dx, act_t* dt, const act_t* dout,
                           const act_t* inp) {
  linear_bwd(d, a, h, slices, opi, dt, dout, inp);
  OpTimer tm = gpt_op_timer_start(a);
  kern(a)->accumulate(dx, dt, (size_t)a->B * a->T * d->ops[opi].K);
  gpt_op_timer_stop(a, opi, tm);
}

/* Forward of RMSNorm op opi from inp into its out and rstd. */
static void rmsnorm_fwd(const GptDesc* d, GptActs* a, const GptParamHooks* h, int opi,
                        const act_t* inp, GptPhase phase) {
  OpTimer tm = gpt_op_timer_start(a);
  ParamView w = gpt_acquire_weights(d, a, h, opi, 1, 0, phase);
  kern(a)->rmsnorm_forward(out_of(a, opi), stat_of(d, a, opi, "rstd"), inp, w.t[LL_NORM_W],
                           a->B * a->T, d->cfg.n_embd, d->cfg.norm_eps);
  h->release_weight(h->ctx, opi, 0, phase);
  gpt_op_timer_stop(a, opi, tm);
}

/* Backward of RMSNorm op opi (whose input was inp): dinp += ..., dw through the hooks. */
static void rmsnorm_bwd(const GptDesc* d, GptActs* a, const GptParamHooks* h, int opi,
                        act_t* dinp, const act_t* dout, const act_t* inp) {
  OpTimer tm = gpt_op_timer_start(a);
  ParamView w = gpt_acquire_weights(d, a, h, opi, 1, 0, GPT_BACKWARD);
  int fresh;
  ParamView g = gpt_acquire_grads(d, a, h, opi, 1, 0, &fresh);
  kern(a)->rmsnorm_backward(dinp, g.t[LL_NORM_W], dout, inp, w.t[LL_NORM_W],
                            stat_of(d, a, opi, "rstd"), a->B * a->T, d->cfg.n_embd, !fresh);
  h->release_weight(h->ctx, opi, 0, GPT_BACKWARD);
  h->release_grad(h->ctx, opi, 0);
  gpt_op_timer_stop(a, opi, tm);
}

/* Attention op opi of layer base o: rotates q and k in place, then causal grouped-query
** attention into its out and lse. */
static void attention_fwd(const GptDesc* d, GptActs* a, int o, const Work* w) {
  OpTimer tm = gpt_op_timer_start(a);
  const GptConfig* c = &d->cfg;
  int opi = o + LL_ATTN, Q = c->n_head * c->head_dim, KV = c->n_kv_head * c->head_dim;
  act_t *q = out_of(a, o + LL_Q), *k = out_of(a, o + LL_K), *v = out_of(a, o + LL_V);
  kern(a)->rope_forward(q, Q, w->inv_freq, a->B, a->T, c->n_head, c->head_dim);
  kern(a)->rope_forward(k, KV, w->inv_freq, a->B, a->T, c->n_kv_head, c->head_dim);
  kern(a)->attention_forward(out_of(a, opi), stat_of(d, a, opi, "lse"), q, k, v, Q, KV, w->att,
                             a->B, a->T, c->n_head, c->n_kv_head, c->head_dim);
  gpt_op_timer_stop(a, opi, tm);
}

/* Backward of attention (layer base o) from dout: dq, dk, dv (zeroed here, then accumulated),
** the rotation undone on dq and dk. */
static void attention_bwd(const GptDesc* d, GptActs* a, int o, const act_t* dout, const Work* w) {
  const GptConfig* c = &d->cfg;
  int opi = o + LL_ATTN, Q = c->n_head * c->head_dim, KV = c->n_kv_head * c->head_dim;
  size_t BT = (size_t)a->B * a->T;
  gpt_step_backend(a)->zero(w->dq, BT * Q * sizeof(act_t));
  gpt_step_backend(a)->zero(w->dk, BT * KV * sizeof(act_t));
  gpt_step_backend(a)->zero(w->dv, BT * KV * sizeof(act_t));
  OpTimer tm = gpt_op_timer_start(a);
  kern(a)->attention_backward(w->dq, w->dk, w->dv, dout, out_of(a, o + LL_Q), out_of(a, o + LL_K),
                              out_of(a, o + LL_V), Q, KV, out_of(a, opi), stat_of(d, a, opi, "lse"),
                              w->att, a->B, a->T, c->n_head, c->n_kv_head, c->head_dim);
  kern(a)->rope_backward(w->dq, Q, w->inv_freq, a->B, a->T, c->n_head, c->head_dim);
  kern(a)->rope_backward(w->dk, KV, w->inv_freq, a->B, a->T, c->n_kv_head, c->head_dim);
  gpt_op_timer_stop(a, opi, tm);
}

/* SwiGLU op opi: out = silu(gate) * up. */
static void swiglu_fwd(const GptDesc* d, GptActs* a, int opi, const act_t* gate, const act_t* up) {
  OpTimer tm = gpt_op_timer_start(a);
  kern(a)->swiglu_forward(out_of(a, opi), gate, up, (size_t)a->B * a->T * d->cfg.ffn_dim);
  gpt_op_timer_stop(a, opi, tm);
}

/* Backward of SwiGLU op opi: dgate and dup (overwritten) from dout. */
static void swiglu_bwd(const GptDesc* d, GptActs* a, int opi, const act_t* dout, const act_t* gate,
                       const act_t* up, const Work* w) {
  OpTimer tm = gpt_op_timer_start(a);
  kern(a)->swiglu_backward(w->dgate, w->dup, dout, gate, up, (size_t)a->B * a->T * d->cfg.ffn_dim);
  gpt_op_timer_stop(a, opi, tm);
}

/* Token embedding into embed's out: zeroed, then each slice adds its rows. */
static void embed_fwd(const GptDesc* d, GptActs* a, const GptParamHooks* h, const int* slices) {
  OpTimer tm = gpt_op_timer_start(a);
  int e = d->tokens_op, k = slices[e], BT = a->B * a->T, C = d->cfg.n_embd;
  act_t* out = out_of(a, e);
  const int* tok = gpt_acts_tokens(d, a);
  gpt_step_backend(a)->zero(out, (size_t)BT * C * sizeof(act_t));
  for (int i = 0; i < k; i++) {
    ParamView w = gpt_acquire_weights(d, a, h, e, k, i, GPT_FORWARD);
    kern(a)->embed_tok_forward(out + w.row0, C, tok, BT, w.t[LL_EMBED_WTE], (int)w.nrows,
                               d->cfg.padded_vocab);
    h->release_weight(h->ctx, e, i, GPT_FORWARD);
  }
  gpt_op_timer_stop(a, e, tm);
}

/* Backward of the embedding: scatters dres into the wte rows. */
static void embed_bwd(const GptDesc* d, GptActs* a, const GptParamHooks* h, const int* slices,
                      const act_t* dres) {
  OpTimer tm = gpt_op_timer_start(a);
  int e = d->tokens_op, k = slices[e], BT = a->B * a->T, C = d->cfg.n_embd;
  const int* tok = gpt_acts_tokens(d, a);
  for (int i = 0; i < k; i++) {
    int fresh;
    ParamView g = gpt_acquire_grads(d, a, h, e, k, i, &fresh);
    kern(a)->embed_tok_backward(g.t[LL_EMBED_WTE], dres + g.row0, C, tok, BT, (int)g.nrows,
                                d->cfg.padded_vocab, !fresh);
    h->release_grad(h->ctx, e, i);
  }
  gpt_op_timer_stop(a, e, tm);
}

/* ---- Layers ------------------------------------------------------------------------------ */

/* The input of layer l: the previous layer's output, or the embedding's. */
static const act_t* layer_input(const GptDesc* d, const GptActs* a, int l) {
  return l == 0 ? out_of(a, d->tokens_op) : out_of(a, llama_op_layer(l - 1, LL_DOWN));
}

/* Forward of decoder layer l from its input x:
**   r2 = x + o(attn(rope(q(n1)), rope(k(n1)), v(n1))),  n1 = ln1(x)
**   out = r2 + down(silu(gate(n2)) * up(n2)),            n2 = ln2(r2)
** In phase GPT_RECOMPUTE it stops before down: the output is kept. */
static void layer_forward(const GptDesc* d, GptActs* a, const GptParamHooks* h, const int* slices,
                          int l, const act_t* x, GptPhase phase) {
  int o = llama_op_layer(l, 0);
  Work w = work_bufs(d, a);
  rmsnorm_fwd(d, a, h, o + LL_LN1, x, phase);
  const act_t* n1 = out_of(a, o + LL_LN1);
  linear_fwd(d, a, h, slices, o + LL_Q, out_of(a, o + LL_Q), n1, NULL, phase);
  linear_fwd(d, a, h, slices, o + LL_K, out_of(a, o + LL_K), n1, NULL, phase);
  linear_fwd(d, a, h, slices, o + LL_V, out_of(a, o + LL_V), n1, NULL, phase);
  attention_fwd(d, a, o, &w);
  linear_fwd(d, a, h, slices, o + LL_O, out_of(a, o + LL_O), out_of(a, o + LL_ATTN), x, phase);
  rmsnorm_fwd(d, a, h, o + LL_LN2, out_of(a, o + LL_O), phase);
  const act_t* n2 = out_of(a, o + LL_LN2);
  linear_fwd(d, a, h, slices, o + LL_GATE, out_of(a, o + LL_GATE), n2, NULL, phase);
  linear_fwd(d, a, h, slices, o + LL_UP, out_of(a, o + LL_UP), n2, NULL, phase);
  swiglu_fwd(d, a, o + LL_SWIGLU, out_of(a, o + LL_GATE), out_of(a, o + LL_UP));
  if (phase == GPT_RECOMPUTE) return;
  linear_fwd(d, a, h, slices, o + LL_DOWN, out_of(a, o + LL_DOWN), out_of(a, o + LL_SWIGLU),
             out_of(a, o + LL_O), phase);
}

/* Backward of decoder layer l (input x): on entry w->dres holds the gradient of its output, on
** exit that of its input; every parameter gradient goes through the hooks. The linears'
** backwards overwrite their input gradients; the two that read n2 (and the three that read n1)
** are summed in w->dx before the RMSNorm's backward adds into dres. Ops run in reverse op order
** (up before gate, v before k before q), as gpt_step_events lists them. */
static void layer_backward(const GptDesc* d, GptActs* a, const GptParamHooks* h,
                           const int* slices, int l, const act_t* x, const Work* w) {
  int o = llama_op_layer(l, 0);
  const act_t *n1 = out_of(a, o + LL_LN1), *n2 = out_of(a, o + LL_LN2);
  /* MLP: dres holds dout = dr2 so far. */
  linear_bwd(d, a, h, slices, o + LL_DOWN, w->da, w->dres, out_of(a, o + LL_SWIGLU));
  swiglu_bwd(d, a, o + LL_SWIGLU, w->da, out_of(a, o + LL_GATE), out_of(a, o + LL_UP), w);
  linear_bwd(d, a, h, slices, o + LL_UP, w->dx, w->dup, n2);
  linear_bwd_add(d, a, h, slices, o + LL_GATE, w->dx, w->dt, w->dgate, n2);
  rmsnorm_bwd(d, a, h, o + LL_LN2, w->dres, w->dx, out_of(a, o + LL_O));
  /* Attention. */
  linear_bwd(d, a, h, slices, o + LL_O, w->da, w->dres, out_of(a, o + LL_ATTN));
  attention_bwd(d, a, o, w->da, w);
  linear_bwd(d, a, h, slices, o + LL_V, w->dx, w->dv, n1);
  linear_bwd_add(d, a, h, slices, o + LL_K, w->dx, w->dt, w->dk, n1);
  linear_bwd_add(d, a, h, slices, o + LL_Q, w->dx, w->dt, w->dq, n1);
  rmsnorm_bwd(d, a, h, o + LL_LN1, w->dres, w->dx, x);
}

/* ---- The passes ------------------------------------------------------------------------------ */

/* Forward pass and loss; in training the fused head leaves dlnf in dx for the backward (see
** gpt_forward in gpt_step.h). */
static double llama_forward(const GptDesc* d, GptActs* a, const GptParamHooks* h,
                            const int* slices, GptForwardMode mode, double loss_scale,
                            int* argmax) {
  int L = d->cfg.n_layer, lnf = llama_op_lnf(d);
  fill_inv_freq(d, a);
  embed_fwd(d, a, h, slices);
  for (int l = 0; l < L; l++) layer_forward(d, a, h, slices, l, layer_input(d, a, l), GPT_FORWARD);
  rmsnorm_fwd(d, a, h, lnf, layer_input(d, a, L), GPT_FORWARD);
  return head_loss_fwd(d, a, h, slices, mode, out_of(a, lnf), work_bufs(d, a).dx, loss_scale,
                       argmax, NULL);
}

/* Backward pass (see gpt_backward in gpt_step.h): the ops in reverse from lnf (the head's
** ran in the forward and left dlnf in dx), a recomputed layer's forward re-run just before its
** backward. */
static void llama_backward(const GptDesc* d, GptActs* a, const GptParamHooks* h,
                           const int* slices) {
  int L = d->cfg.n_layer, lnf = llama_op_lnf(d);
  Work w = work_bufs(d, a);
  gpt_step_backend(a)->zero(w.dres, (size_t)a->B * a->T * d->cfg.n_embd * sizeof(act_t));
  rmsnorm_bwd(d, a, h, lnf, w.dres, w.dx, layer_input(d, a, L));
  for (int l = L - 1; l >= 0; l--) {
    const act_t* x = layer_input(d, a, l);
    if (a->recompute && a->recompute[l]) {
      a->phase = GPT_RECOMPUTE;
      layer_forward(d, a, h, slices, l, x, GPT_RECOMPUTE);
      a->phase = GPT_BACKWARD;
    }
    layer_backward(d, a, h, slices, l, x, &w);
  }
  embed_bwd(d, a, h, slices, w.dres);
}

#if defined(STEP_REAL_DOUBLE)
const StepPasses llama_step_f64 = {llama_forward, llama_backward};
#elif defined(STEP_BF16)
const StepPasses llama_step_bf16 = {llama_forward, llama_backward};
#else
const StepPasses llama_step_f32 = {llama_forward, llama_backward};
#endif
