/*
** gpt2_decode.c: GPT-2's forward for one new position over a KV cache (decode.h): the same ops
** as gpt2_step.c's layer_forward, on one row, with attention over the cached keys and values of
** the positions before it. The cache holds, per layer and position, k and v: the second and
** third thirds of qkv (C floats each).
**
** Working buffers of one position (floats): x [C] (the residual stream), n [C] (a norm's
** output), qkv [3C], att [C], h [4C] and g [4C] (fc's output and its GELU), mean/rstd [2],
** scores [maxT] (attention's, in double: 2 floats each).
*/
#include <string.h>

#include "kernels/backend.h"
#include "model/decode.h"
#include "model/family.h"
#include "model/gpt2.h"

/* The working buffers of one position, named (see above). */
typedef struct Row {
  float *x, *n, *qkv, *att, *h, *g, *stats;
  double* scores;
} Row;

/* Names the parts of dec->work. */
static Row row_bufs(const Decoder* dec) {
  int C = dec->d->cfg.n_embd;
  Row r;
  r.x = dec->work;
  r.n = r.x + C;
  r.qkv = r.n + C;
  r.att = r.qkv + 3 * C;
  r.h = r.att + C;
  r.g = r.h + 4 * C;
  r.stats = r.g + 4 * C;
  r.scores = (double*)(void*)(r.stats + 2);
  return r;
}

/* Keys and values are C floats a position; the buffers above, the scores 8-byte aligned. */
static void gpt2_decode_shape(const GptDesc* d, int* kv_dim, size_t* work_floats) {
  size_t C = (size_t)d->cfg.n_embd;
  *kv_dim = d->cfg.n_embd;
  *work_floats = C * 14 + 2 + 2 * (size_t)d->cfg.max_seq + 2;
}

/* out = LayerNorm op opi of in (one row). */
static void ln_row(const Decoder* dec, int opi, const float* in, float* out, float* stats) {
  ParamView w = decoder_weights(dec, opi);
  backend_cpu()->f32->layernorm_forward(out, stats, stats + 1, in, w.t[NORM_GAMMA],
                                        w.t[NORM_BETA], 1, dec->d->cfg.n_embd);
}

/* out (=, or += when accumulate) = in W + b of linear op opi (one row). */
static void linear_row(const Decoder* dec, int opi, const float* in, float* out, int accumulate) {
  const GptOp* op = &dec->d->ops[opi];
  ParamView w = decoder_weights(dec, opi);
  backend_cpu()->f32->matmul_forward(out, in, op->K, w.t[LINEAR_W], w.t[LINEAR_B], 1, op->K,
                                     op->OC, accumulate);
}

/* Token and position embedding of token at pos into x: x[c] = wte[c, token] + wpe[pos, c]. */
static void embed_row(const Decoder* dec, int token, int pos, float* x) {
  const GptDesc* d = dec->d;
  int C = d->cfg.n_embd, Vp = d->cfg.padded_vocab;
  ParamView w = decoder_weights(dec, d->tokens_op);
  const float *wte = w.t[EMBED_WTE], *wpe = (const float*)w.t[EMBED_WPE] + (size_t)pos * C;
  for (int c = 0; c < C; c++) x[c] = wpe[c] + wte[(size_t)c * Vp + token];
}

/* Layer l on the row at pos: x += proj(attn(qkv(ln1(x)))), then x += fcproj(gelu(fc(ln2(x)))),
** the position's k and v stored in the cache first. */
static void layer_row(const Decoder* dec, int l, int pos, Row* r) {
  const GptConfig* c = &dec->d->cfg;
  int C = c->n_embd, o = gpt_op_layer(l, 0);
  ln_row(dec, o + GPT_LN1, r->x, r->n, r->stats);
  linear_row(dec, o + GPT_QKV, r->n, r->qkv, 0);
  memcpy(decoder_keys(dec, l, pos), r->qkv + C, (size_t)C * sizeof(float));
  memcpy(decoder_values(dec, l, pos), r->qkv + 2 * C, (size_t)C * sizeof(float));
  decoder_attend(dec, l, pos, r->qkv, c->n_head, c->n_head, C / c->n_head, r->att, r->scores);
  linear_row(dec, o + GPT_PROJ, r->att, r->x, 1);
  ln_row(dec, o + GPT_LN2, r->x, r->n, r->stats);
  linear_row(dec, o + GPT_FC, r->n, r->h, 0);
  backend_cpu()->f32->gelu_forward(r->g, r->h, 4 * (size_t)C);
  linear_row(dec, o + GPT_FCPROJ, r->g, r->x, 1);
}

/* One position: embedding, the layers, the final LayerNorm and the head into dec->logits. */
static void gpt2_decode_token(Decoder* dec, int token, int pos) {
  Row r = row_bufs(dec);
  embed_row(dec, token, pos, r.x);
  for (int l = 0; l < dec->d->cfg.n_layer; l++) layer_row(dec, l, pos, &r);
  ln_row(dec, gpt_op_lnf(dec->d), r.x, r.n, r.stats);
  decoder_head(dec, r.n, dec->logits);
}

const DecodeFns gpt2_decode = {gpt2_decode_shape, gpt2_decode_token};
