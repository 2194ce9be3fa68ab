/*
** test_decode.c: decoding with a KV cache (model/decode.h) against the training forward, for
** every family: GPT-2 (tiny), Llama with grouped-query attention and its own head (llama-tiny),
** Qwen2 with q/k/v biases, a tied head and one K/V head (qwen-tiny), and Llama 3's scaled
** rotary frequencies.
**   1. After every token of a greedy generation, the cached decoder's logits equal those of the
**      full forward over the whole prefix (decode_full_logits), to float rounding.
**   2. Greedy decoding produces, at every generated position, the argmax of the full forward
**      over the finished sequence at the position before it.
**   3. decode_pick: temperature 0 and top-k 1 are the argmax; a seed repeats its draws; the
**      draws follow softmax(logits / T) (frequencies of 20000 draws); top-k never draws
**      outside the k largest.
**   4. Errors: a full cache, a token outside the vocabulary, a context too long.
*/
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "core/util.h"
#include "model/decode.h"

/* Random weights (N(0, 0.3); norms' weights around 1) for model d, so logits are far from
** uniform and greedy choices are clear-cut. */
static float* random_params(const GptDesc* d, uint64_t seed) {
  float* p = malloc(d->n_params * sizeof(float));
  Rng r;
  rng_seed(&r, seed);
  size_t off = 0;
  for (int i = 0; i < d->nops; i++) {
    const GptOp* op = &d->ops[i];
    int norm = op->kind == OP_LAYERNORM || op->kind == OP_RMSNORM;
    for (size_t j = 0; j < op->n_params; j++)
      p[off + j] = (float)(0.3 * rng_normal(&r)) + (norm && j < (size_t)d->cfg.n_embd ? 1.0f : 0.0f);
    off += op->n_params;
  }
  return p;
}

/* The largest |a - b| over n values, and the largest |a|. */
static double max_diff(const float* a, const float* b, int n, double* scale) {
  double m = 0;
  *scale = 0;
  for (int i = 0; i < n; i++) {
    m = fmax(m, fabs((double)a[i] - b[i]));
    *scale = fmax(*scale, fabs((double)a[i]));
  }
  return m;
}

/* Checks 1 and 2 on model cfg: a prompt of 5 random tokens, then greedy tokens to n_total. */
static void check_model(const GptConfig* cfg, int n_total) {
  GptDesc d;
  CHECK(gpt_desc_build(&d, cfg) == 0);
  float* params = random_params(&d, 7);
  int V = cfg->vocab_size, prompt = 5;
  int* seq = malloc((size_t)n_total * sizeof(int));
  int* argmax = malloc((size_t)n_total * sizeof(int));
  float* full = malloc((size_t)V * sizeof(float));
  Rng r;
  rng_seed(&r, 11);
  for (int i = 0; i < prompt; i++) seq[i] = (int)rng_below(&r, (uint64_t)V);
  Decoder dec;
  CHECK(decoder_create(&dec, &d, params, n_total) == 0);
  double worst = 0, scale = 0;
  int distinct = 0;
  for (int p = 0; p < n_total; p++) {
    CHECK(decoder_push(&dec, seq[p]) == 0);
    CHECK(decode_full_logits(&d, params, seq, p + 1, full, NULL) == 0);
    double s;
    worst = fmax(worst, max_diff(decoder_logits(&dec), full, V, &s));
    scale = fmax(scale, s);
    if (p + 1 < n_total && p + 1 >= prompt) {
      seq[p + 1] = decode_pick(decoder_logits(&dec), V, 0, 0, NULL);
      distinct += seq[p + 1] != seq[p];
    }
  }
  CHECK_MSG(worst <= 2e-5 * fmax(1.0, scale), "%s: cached logits differ from the full forward's "
            "by %.3g (largest logit %.3g)", cfg->name, worst, scale);
  CHECK_MSG(distinct > 0, "%s: greedy decoding repeated one token throughout", cfg->name);
  /* The full forward's argmax over the finished sequence is what greedy decoding chose. */
  CHECK(decode_full_logits(&d, params, seq, n_total, full, argmax) == 0);
  int wrong = 0;
  for (int p = prompt - 1; p + 1 < n_total; p++) wrong += argmax[p] != seq[p + 1];
  CHECK_MSG(wrong == 0, "%s: %d generated tokens are not the full forward's argmax", cfg->name, wrong);
  /* A full cache and a token outside the vocabulary are errors; a reset makes room again. */
  CHECK(decoder_push(&dec, 0) == -1);
  decoder_reset(&dec);
  CHECK(decoder_push(&dec, V) == -1);
  CHECK(decoder_push(&dec, V - 1) == 0);
  decoder_free(&dec);
  CHECK(decoder_create(&dec, &d, params, cfg->max_seq + 1) == -1);
  free(seq); free(argmax); free(full); free(params);
  gpt_desc_free(&d);
}

/* Check 3. */
static void check_pick(void) {
  float logits[6] = {0.5f, 2.0f, -1.0f, 1.9f, 0.0f, 1.0f};
  Rng a, b;
  CHECK(decode_pick(logits, 6, 0, 0, NULL) == 1);
  rng_seed(&a, 3);
  CHECK(decode_pick(logits, 6, 1.0, 1, &a) == 1);
  rng_seed(&a, 5);
  rng_seed(&b, 5);
  int same = 1, outside = 0, count[6] = {0};
  for (int i = 0; i < 200; i++) same &= decode_pick(logits, 6, 0.8, 0, &a) == decode_pick(logits, 6, 0.8, 0, &b);
  CHECK_MSG(same, "one seed gave two different draws");
  for (int i = 0; i < 2000; i++) {
    int t = decode_pick(logits, 6, 1.0, 2, &a);
    outside += t != 1 && t != 3;
  }
  CHECK_MSG(outside == 0, "top-k 2 drew %d tokens outside the 2 largest", outside);
  int n = 20000;
  for (int i = 0; i < n; i++) count[decode_pick(logits, 6, 2.0, 0, &a)]++;
  double z = 0;
  for (int i = 0; i < 6; i++) z += exp(logits[i] / 2.0);
  for (int i = 0; i < 6; i++)
    CHECK_NEAR((double)count[i] / n, exp(logits[i] / 2.0) / z, 0.015);
}

int main(void) {
  GptConfig c;
  CHECK(gpt_config_load("tiny", &c) == 0);
  check_model(&c, 24);
  CHECK(gpt_config_load("llama-tiny", &c) == 0);
  check_model(&c, 24);
  CHECK(gpt_config_load("qwen-tiny", &c) == 0);
  check_model(&c, 24);
  /* Llama 3's rope scaling, over a short original context so every band of it is used. */
  CHECK(gpt_config_load("llama-tiny", &c) == 0);
  c.rope_factor = 8; c.rope_low_freq_factor = 1; c.rope_high_freq_factor = 4;
  c.rope_original_max = 32; c.rope_theta = 500000;
  check_model(&c, 40);
  check_pick();
  return check_summary();
}
