/*
** decode.c: the decoder's cache and the parts of one position's forward every family shares
** (attention over the cache, the LM head), the cache-free reference, and choosing a token. See
** decode.h.
*/
#include "model/decode.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/backend.h"
#include "kernels/cpu_kernels.h"
#include "model/family.h"

int decoder_create(Decoder* dec, const GptDesc* d, const float* params, int max_len) {
  memset(dec, 0, sizeof *dec);
  if (max_len < 1 || max_len > d->cfg.max_seq)
    return osdp_fail("sample: %d positions do not fit model %s, whose context is %d (give fewer "
                     "--tokens or a shorter prompt)", max_len, d->cfg.name, d->cfg.max_seq);
  size_t work = 0;
  d->family->decode->shape(d, &dec->kv_dim, &work);
  size_t cache = (size_t)d->cfg.n_layer * max_len * dec->kv_dim;
  dec->d = d;
  dec->params = params;
  dec->max_len = max_len;
  dec->op_offset = malloc((size_t)d->nops * sizeof(size_t));
  dec->k_cache = malloc(cache * sizeof(float));
  dec->v_cache = malloc(cache * sizeof(float));
  dec->work = malloc(work * sizeof(float));
  dec->logits = malloc((size_t)d->cfg.padded_vocab * sizeof(float));
  if (!dec->op_offset || !dec->k_cache || !dec->v_cache || !dec->work || !dec->logits) {
    decoder_free(dec);
    return osdp_fail("sample: out of memory for a KV cache of %d positions", max_len);
  }
  size_t off = 0;
  for (int i = 0; i < d->nops; i++) {
    dec->op_offset[i] = off;
    off += d->ops[i].n_params;
  }
  return 0;
}

void decoder_free(Decoder* dec) {
  free(dec->op_offset);
  free(dec->k_cache);
  free(dec->v_cache);
  free(dec->work);
  free(dec->logits);
  memset(dec, 0, sizeof *dec);
}

void decoder_reset(Decoder* dec) { dec->len = 0; }

int decoder_push(Decoder* dec, int token) {
  if (dec->len >= dec->max_len)
    return osdp_fail("sample: the KV cache holds %d positions and is full", dec->max_len);
  if (token < 0 || token >= dec->d->cfg.vocab_size)
    return osdp_fail("sample: token %d is outside the vocabulary of %s (0..%d)", token,
                     dec->d->cfg.name, dec->d->cfg.vocab_size - 1);
  dec->d->family->decode->token(dec, token, dec->len);
  dec->len++;
  return 0;
}

const float* decoder_logits(const Decoder* dec) { return dec->logits; }

ParamView decoder_weights(const Decoder* dec, int op) {
  return model_param_view(&dec->d->ops[op], 1, 0, (void*)(dec->params + dec->op_offset[op]),
                          sizeof(float));
}

float* decoder_keys(const Decoder* dec, int l, int pos) {
  return dec->k_cache + ((size_t)l * dec->max_len + pos) * dec->kv_dim;
}

float* decoder_values(const Decoder* dec, int l, int pos) {
  return dec->v_cache + ((size_t)l * dec->max_len + pos) * dec->kv_dim;
}

void decoder_attend(const Decoder* dec, int l, int p, const float* q, int nh, int nkv, int hs,
                    float* out, double* scores) {
  double scale = 1.0 / sqrt((double)hs);
  for (int h = 0; h < nh; h++) {
    int kvh = h / (nh / nkv);
    const float* qh = q + (size_t)h * hs;
    double maxs = -INFINITY, sum = 0;
    for (int j = 0; j <= p; j++) {
      const float* kj = decoder_keys(dec, l, j) + (size_t)kvh * hs;
      double s = 0;
      for (int i = 0; i < hs; i++) s += (double)qh[i] * kj[i];
      scores[j] = s * scale;
      if (scores[j] > maxs) maxs = scores[j];
    }
    for (int j = 0; j <= p; j++) sum += scores[j] = exp(scores[j] - maxs);
    float* oh = out + (size_t)h * hs;
    for (int i = 0; i < hs; i++) {
      double acc = 0;
      for (int j = 0; j <= p; j++) acc += scores[j] * decoder_values(dec, l, j)[(size_t)kvh * hs + i];
      oh[i] = (float)(acc / sum);
    }
  }
}

void decoder_head(const Decoder* dec, const float* x, float* logits) {
  const GptDesc* d = dec->d;
  int owner = d->ops[d->head_op].owner;
  ParamView w = decoder_weights(dec, owner);
  backend_cpu()->f32->matmul_forward(logits, x, d->cfg.n_embd, w.t[0], NULL, 1, d->cfg.n_embd,
                                     d->cfg.padded_vocab, 0);
}

/* ---- Without a cache ------------------------------------------------------------------- */

/* Hooks over full weights in op-block order: a weight is its place in the array; an evaluation
** touches no gradient. */
typedef struct FullParams {
  const GptDesc* d;
  const float* params;
  const size_t* op_offset;
} FullParams;

/* The whole block of op owner (one slice). */
static void* full_weight(void* ctx, int owner, int slice, GptPhase phase) {
  const FullParams* f = ctx;
  return (void*)(f->params + f->op_offset[owner]);
}
static void full_release(void* ctx, int owner, int slice, GptPhase phase) {}
static void* full_grad(void* ctx, int owner, int slice, int* fresh) { return NULL; }
static void full_release_grad(void* ctx, int owner, int slice) {}

/* The activations of one sample of T positions in one allocation: each op's block (64-byte
** aligned) and the scratch after them. Fills a's pointers; returns the block or NULL. */
static void* full_acts(const GptDesc* d, int T, GptActs* a, void** op_acts) {
  size_t* own = malloc((size_t)d->nops * sizeof(size_t)), total = 0;
  if (!own) return NULL;
  gpt_acts_layout(d, 1, T, PRECISION_FP32, NULL, own, NULL, NULL);
  for (int i = 0; i < d->nops; i++) total += (own[i] + 63) & ~(size_t)63;
  size_t scratch = gpt_scratch_bytes(d, 1, T, PRECISION_FP32, kernels_threads(), 0);
  char* base = calloc(1, total + scratch);
  if (!base) { free(own); return NULL; }
  *a = (GptActs){.B = 1, .T = T, .precision = PRECISION_FP32, .backend = backend_cpu(),
                 .op_acts = op_acts, .scratch = base + total};
  size_t off = 0;
  for (int i = 0; i < d->nops; i++) {
    op_acts[i] = base + off;
    off += (own[i] + 63) & ~(size_t)63;
  }
  free(own);
  return base;
}

int decode_full_logits(const GptDesc* d, const float* params, const int* tokens, int n,
                       float* logits, int* argmax) {
  if (n < 1 || n > d->cfg.max_seq)
    return osdp_fail("sample: %d positions do not fit model %s, whose context is %d", n,
                     d->cfg.name, d->cfg.max_seq);
  size_t* op_offset = malloc((size_t)d->nops * sizeof(size_t));
  int* slices = malloc((size_t)d->nops * sizeof(int));
  void** op_acts = malloc((size_t)d->nops * sizeof(void*));
  GptActs a;
  void* base = op_acts ? full_acts(d, n, &a, op_acts) : NULL;
  if (!op_offset || !slices || !base) {
    free(op_offset); free(slices); free(op_acts); free(base);
    return osdp_fail("sample: out of memory for a forward over %d positions", n);
  }
  size_t off = 0;
  for (int i = 0; i < d->nops; i++) {
    op_offset[i] = off;
    off += d->ops[i].n_params;
    slices[i] = 1;
  }
  int *tok = gpt_acts_tokens(d, &a), *tg = gpt_acts_targets(d, &a);
  for (int i = 0; i < n; i++) { tok[i] = tokens[i]; tg[i] = -1; }
  FullParams fp = {d, params, op_offset};
  GptParamHooks h = {&fp, full_weight, full_release, full_grad, full_release_grad};
  d->family->f32->forward(d, &a, &h, slices, GPT_EVAL, 1.0, argmax);
  /* The head's input is the final norm's output: every family's op list puts that norm just
  ** before the head (gpt.h's roles), so it is the activation block of the op before it. */
  const float* xf = (const float*)a.op_acts[d->head_op - 1] + (size_t)(n - 1) * d->cfg.n_embd;
  Decoder view = {.d = d, .params = params, .op_offset = op_offset};
  float* full = malloc((size_t)d->cfg.padded_vocab * sizeof(float));
  if (full) {
    decoder_head(&view, xf, full);
    memcpy(logits, full, (size_t)d->cfg.vocab_size * sizeof(float));
  }
  free(full); free(op_offset); free(slices); free(op_acts); free(base);
  return full ? 0 : osdp_fail("sample: out of memory for the logits");
}

/* ---- Choosing a token -------------------------------------------------------------------- */

/* Index of the largest of x[0..n-1] (the first of equals). */
static int arg_max(const float* x, int n) {
  int best = 0;
  for (int i = 1; i < n; i++)
    if (x[i] > x[best]) best = i;
  return best;
}

/* The k-th largest value of x[0..n-1] (1 <= k <= n), by a partial selection on a copy. */
static float kth_largest(const float* x, int n, int k, float* tmp) {
  memcpy(tmp, x, (size_t)n * sizeof(float));
  for (int i = 0; i < k; i++) {
    int m = i;
    for (int j = i + 1; j < n; j++)
      if (tmp[j] > tmp[m]) m = j;
    float t = tmp[i]; tmp[i] = tmp[m]; tmp[m] = t;
  }
  return tmp[k - 1];
}

int decode_pick(const float* logits, int V, double temperature, int top_k, Rng* rng) {
  if (temperature <= 0) return arg_max(logits, V);
  float floor_v = -INFINITY;
  float* tmp = top_k > 0 && top_k < V ? malloc((size_t)V * sizeof(float)) : NULL;
  if (tmp) floor_v = kth_largest(logits, V, top_k, tmp);
  free(tmp);
  float maxv = logits[arg_max(logits, V)];
  double sum = 0;
  for (int i = 0; i < V; i++)
    if (logits[i] >= floor_v) sum += exp((logits[i] - maxv) / temperature);
  double u = rng_uniform(rng) * sum, acc = 0;
  int last = 0;
  for (int i = 0; i < V; i++) {
    if (logits[i] < floor_v) continue;
    acc += exp((logits[i] - maxv) / temperature);
    last = i;
    if (u < acc) return i;
  }
  return last;
}
