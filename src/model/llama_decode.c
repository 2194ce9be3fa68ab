/*
** llama_decode.c: the Llama family's forward for one new position over a KV cache (decode.h):
** the same ops as llama_step.c's layer_forward, on one row. The cache holds, per layer and
** position, k after its rotation and v (NKV*hs floats each); grouped-query heads share them as
** in training.
**
** Working buffers of one position (floats, Q = NH*hs, F = ffn_dim): x [C] (the residual stream),
** n [C] (a norm's output), q [Q], att [Q], gate [F], up [F], act [F], rstd [1], inv_freq [hs/2],
** then the attention's scores [maxT] in double.
*/
#include <math.h>

#include "kernels/backend.h"
#include "model/decode.h"
#include "model/family.h"
#include "model/llama.h"

/* The working buffers of one position, named (see above). */
typedef struct Row {
  float *x, *n, *q, *att, *gate, *up, *act, *rstd, *inv_freq;
  double* scores;
} Row;

/* The floats of the buffers before the scores, rounded up to an even count (8-byte aligned). */
static size_t row_floats(const GptConfig* c) {
  size_t Q = (size_t)c->n_head * c->head_dim;
  size_t n = 2 * (size_t)c->n_embd + 2 * Q + 3 * (size_t)c->ffn_dim + 1 + (size_t)c->head_dim / 2;
  return (n + 1) & ~(size_t)1;
}

/* Names the parts of dec->work; the rotary frequencies are filled in once per position. */
static Row row_bufs(const Decoder* dec) {
  const GptConfig* c = &dec->d->cfg;
  size_t Q = (size_t)c->n_head * c->head_dim;
  Row r;
  r.x = dec->work;
  r.n = r.x + c->n_embd;
  r.q = r.n + c->n_embd;
  r.att = r.q + Q;
  r.gate = r.att + Q;
  r.up = r.gate + c->ffn_dim;
  r.act = r.up + c->ffn_dim;
  r.rstd = r.act + c->ffn_dim;
  r.inv_freq = r.rstd + 1;
  r.scores = (double*)(void*)(dec->work + row_floats(c));
  return r;
}

/* Keys and values are NKV*hs floats a position; the buffers above. */
static void llama_decode_shape(const GptDesc* d, int* kv_dim, size_t* work_floats) {
  *kv_dim = d->cfg.n_kv_head * d->cfg.head_dim;
  *work_floats = row_floats(&d->cfg) + 2 * (size_t)d->cfg.max_seq;
}

/* out = RMSNorm op opi of in (one row). */
static void norm_row(const Decoder* dec, int opi, const float* in, float* out, float* rstd) {
  ParamView w = decoder_weights(dec, opi);
  backend_cpu()->f32->rmsnorm_forward(out, rstd, in, w.t[LL_NORM_W], 1, dec->d->cfg.n_embd,
                                      dec->d->cfg.norm_eps);
}

/* out (=, or += when accumulate) = in W (+ b when the op has one) of linear op opi. */
static void linear_row(const Decoder* dec, int opi, const float* in, float* out, int accumulate) {
  const GptOp* op = &dec->d->ops[opi];
  ParamView w = decoder_weights(dec, opi);
  backend_cpu()->f32->matmul_forward(out, in, op->K, w.t[LL_LINEAR_W], w.t[LL_LINEAR_B], 1,
                                     op->K, op->OC, accumulate);
}

/* Rotates the nh heads (hs wide) of row x as the rope kernel does at position pos: the angle
** pos * inv_freq[j] in fp32, its cosine and sine from cosf/sinf, rotate-half pairs. */
static void rope_row(float* x, const float* inv_freq, int pos, int nh, int hs) {
  int half = hs / 2;
  for (int j = 0; j < half; j++) {
    float a = (float)pos * inv_freq[j], cs = cosf(a), sn = sinf(a);
    for (int h = 0; h < nh; h++) {
      float *x1 = x + (size_t)h * hs + j, *x2 = x1 + half;
      float a1 = *x1, a2 = *x2;
      *x1 = a1 * cs - a2 * sn;
      *x2 = a2 * cs + a1 * sn;
    }
  }
}

/* Token embedding: x[c] = wte[c, token]. */
static void embed_row(const Decoder* dec, int token, float* x) {
  const GptDesc* d = dec->d;
  ParamView w = decoder_weights(dec, d->tokens_op);
  const float* wte = w.t[LL_EMBED_WTE];
  for (int c = 0; c < d->cfg.n_embd; c++) x[c] = wte[(size_t)c * d->cfg.padded_vocab + token];
}

/* Layer l on the row at pos: q, k, v of ln1(x), k and v (rotated k) into the cache, x +=
** o(attention); then x += down(silu(gate(n2)) * up(n2)), n2 = ln2(x). */
static void layer_row(const Decoder* dec, int l, int pos, Row* r) {
  const GptConfig* c = &dec->d->cfg;
  int o = llama_op_layer(l, 0), hs = c->head_dim;
  float *k = decoder_keys(dec, l, pos), *v = decoder_values(dec, l, pos);
  norm_row(dec, o + LL_LN1, r->x, r->n, r->rstd);
  linear_row(dec, o + LL_Q, r->n, r->q, 0);
  linear_row(dec, o + LL_K, r->n, k, 0);
  linear_row(dec, o + LL_V, r->n, v, 0);
  rope_row(r->q, r->inv_freq, pos, c->n_head, hs);
  rope_row(k, r->inv_freq, pos, c->n_kv_head, hs);
  decoder_attend(dec, l, pos, r->q, c->n_head, c->n_kv_head, hs, r->att, r->scores);
  linear_row(dec, o + LL_O, r->att, r->x, 1);
  norm_row(dec, o + LL_LN2, r->x, r->n, r->rstd);
  linear_row(dec, o + LL_GATE, r->n, r->gate, 0);
  linear_row(dec, o + LL_UP, r->n, r->up, 0);
  backend_cpu()->f32->swiglu_forward(r->act, r->gate, r->up, (size_t)c->ffn_dim);
  linear_row(dec, o + LL_DOWN, r->act, r->x, 1);
}

/* One position: embedding, the layers, the final RMSNorm and the head into dec->logits. */
static void llama_decode_token(Decoder* dec, int token, int pos) {
  const GptConfig* c = &dec->d->cfg;
  Row r = row_bufs(dec);
  double f[512];
  llama_rope_inv_freq(c, f);
  for (int j = 0; j < c->head_dim / 2; j++) r.inv_freq[j] = (float)f[j];
  embed_row(dec, token, r.x);
  for (int l = 0; l < c->n_layer; l++) layer_row(dec, l, pos, &r);
  norm_row(dec, llama_op_lnf(dec->d), r.x, r.n, r.rstd);
  decoder_head(dec, r.n, dec->logits);
}

const DecodeFns llama_decode = {llama_decode_shape, llama_decode_token};
