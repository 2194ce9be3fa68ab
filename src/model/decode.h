/*
** decode.h: generating text with a trained model, one token at a time (`osdp sample`).
**
** A Decoder holds a model's full weights (op-block order, gpt.h) and a KV cache: for every layer
** and every position fed so far, the keys and values its attention made there (GPT-2: the k and v
** thirds of qkv; Llama: k after its rotation, and v). Feeding the token at position p then costs
** one position's work: the family's decode->token (family.h) runs the model on that one row,
** appends its keys and values to the cache and attends over positions 0..p, ending in the logits
** of the next token. It runs on the CPU in fp32 with the same kernels as training, whatever the
** model was trained on.
**
** decode_full_logits is the path without a cache: the family's own training forward (an
** evaluation pass over the whole sequence, the code every loss of osdp comes from), then the LM
** head on the last row. Tests hold the cached path to it, and the argmax of the full forward at
** every position to what greedy decoding produced.
**
** Choosing a token (decode_pick): greedy (the largest logit) at temperature 0; otherwise a draw
** from softmax(logits / temperature) over the top_k largest (0: all), from a seeded generator,
** so a seed makes the output repeatable.
*/
#ifndef OSDP_DECODE_H
#define OSDP_DECODE_H

#include <stddef.h>

#include "core/util.h"
#include "model/gpt.h"

typedef struct Decoder {
  const GptDesc* d;
  const float* params;  /* d->n_params, op-block order (borrowed) */
  size_t* op_offset;    /* [nops]: where each op's block starts in params */
  int max_len;          /* positions the cache holds (at most the model's max_seq) */
  int len;              /* positions fed so far */
  int kv_dim;           /* floats of keys (and of values) per layer and position */
  float *k_cache, *v_cache; /* [n_layer][max_len][kv_dim] */
  float* work;          /* the family's buffers for one position (the family's decode->shape) */
  float* logits;        /* [padded_vocab]: the next token's, after the last decoder_push */
} Decoder;

/* Builds a decoder for model d with weights params (kept by pointer: they must outlive it) whose
** cache holds max_len positions (1 .. d->cfg.max_seq). Returns 0, or -1 with an error naming
** max_len, or out of memory (nothing is left allocated). */
int decoder_create(Decoder* dec, const GptDesc* d, const float* params, int max_len);
/* Frees what the decoder holds and zeroes it. */
void decoder_free(Decoder* dec);
/* Feeds `token` at the next position: afterwards decoder_logits holds the logits of the token
** after it. -1 with an error when the cache is full or the token is outside the vocabulary. */
int decoder_push(Decoder* dec, int token);
/* The logits of the next token (vocab_size of them) after the last decoder_push. */
const float* decoder_logits(const Decoder* dec);
/* Forgets every position fed (the cache is reused). */
void decoder_reset(Decoder* dec);

/* For a family's decode_token: the weights of op as named tensors (one slice). */
ParamView decoder_weights(const Decoder* dec, int op);
/* For a family's decode_token: layer l's cached keys and values at position pos. */
float* decoder_keys(const Decoder* dec, int l, int pos);
float* decoder_values(const Decoder* dec, int l, int pos);
/* One query row of causal attention at position p over the cache: for each of nh query heads
** (head h of q, hs wide, uses K/V head h / (nh / nkv)), out[h] = softmax(q k_j / sqrt(hs)) v
** over positions j = 0..p of layer l. The scores and the softmax sum in double. */
void decoder_attend(const Decoder* dec, int l, int p, const float* q, int nh, int nkv, int hs,
                    float* out, double* scores);
/* The LM head on one row: logits = x W (W the head owner's first tensor, [C, Vp]). */
void decoder_head(const Decoder* dec, const float* x, float* logits);

/* The logits after tokens[0..n-1] without a cache: the family's training forward over the whole
** sequence (one sample of n positions, evaluation mode) and the LM head on its last row, into
** logits[vocab_size]; argmax, if not NULL, receives the forward's argmax at each of the n
** positions. Returns 0, or -1 with an error (n outside 1..max_seq, out of memory). */
int decode_full_logits(const GptDesc* d, const float* params, const int* tokens, int n,
                       float* logits, int* argmax);

/* The next token from logits[V]: the largest at temperature 0 (the first of equals); otherwise a
** draw from softmax(logits / temperature) over the top_k largest (0 or >= V: all of them). */
int decode_pick(const float* logits, int V, double temperature, int top_k, Rng* rng);

#endif
