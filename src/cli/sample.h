/*
** sample.h: generating tokens from a model's weights for people (`osdp sample`, and the
** problems `osdp train` answers at the end of an addition run): a prompt continued token by
** token over the KV cache (model/decode.h), or without it (the full forward every token: the
** reference path), and held-out addition problems answered and scored.
*/
#ifndef OSDP_CLI_SAMPLE_H
#define OSDP_CLI_SAMPLE_H

#include <stdint.h>
#include <stdio.h>

#include "data/data.h"
#include "model/gpt.h"

struct cJSON;

/* How tokens are generated. */
typedef struct SampleOptions {
  int tokens;          /* at most this many new tokens */
  double temperature;  /* 0: greedy */
  int top_k;           /* 0: every token */
  uint64_t seed;
  int no_cache;        /* 1: the full forward for every token instead of the KV cache */
  int stop_token;      /* generation ends after this token (-1: none) */
} SampleOptions;

/* Continues prompt[0..n-1] of model d (weights params): up to o->tokens new tokens into out
** (*nout of them), fewer when the stop token comes or the context is full; *seconds is the time
** the generation took. Returns 0, or -1 with an error (the prompt empty or longer than the
** model's context, a token outside its vocabulary). */
int sample_generate(const GptDesc* d, const float* params, const int* prompt, int n,
                    const SampleOptions* o, int* out, int* nout, double* seconds);

/* Answers `count` held-out addition problems of ds (its val split, one problem a row) with
** options o (stop_token is set to the end token): prints each problem, the model's answer, the
** right one and whether it is right to `people` (NULL: nothing), and adds an array "problems" and
** counts "right", "total" to json (NULL: none). *right receives the number answered right.
** Returns 0, or -1 with an error. */
int sample_problems(const GptDesc* d, const float* params, const DataSource* ds, int count,
                    const SampleOptions* o, FILE* people, struct cJSON* json, int* right);

/* The text of tokens[0..n-1] in ds's form (data_token_text; ds NULL: "<id>" each), into buf of
** size cap. */
const char* sample_text(const DataSource* ds, const int* tokens, int n, char* buf, size_t cap);

#endif
