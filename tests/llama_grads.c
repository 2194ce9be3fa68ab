/*
** llama_grads.c MODEL B T SEED DIR: one forward and backward pass of a model on the CPU, written
** out for a reference outside osdp (tests/llama_torch.sh runs it, tests/llama_torch.py checks
** it against a Llama written in PyTorch the way transformers computes it).
**
** MODEL is a preset name or an osdp model JSON file (gpt_config_load). The parameters are drawn
** from SEED (init_params: every tensor away from its trained-from-scratch start, so that each
** one matters), rounded to float32, and both passes use those very values: once in double
** (gpt_forward / gpt_backward in PRECISION_FP64) and once in float (the training step's fp32 path), with
** local hooks over full tensors, one slice per op (as tests/test_model.c does). Writes into DIR:
**   params.safetensors     the parameters (safetensors_save: Hugging Face names and layout)
**   grads64.safetensors    the fp64 pass's gradients of the mean loss, rounded to float32 (hi)
**   grads64lo.safetensors  what that rounding lost, (float)(g - hi): hi + lo holds g to about
**                          1e-14 relative, so the comparison is not limited by float32 files
**   grads32.safetensors    the fp32 pass's gradients
**   run.json               {"model": osdp's model JSON, "B", "T", "tokens": [B*T], "targets":
**                          [B*T] (-1: no loss there), "ntargets", "loss64", "loss32" (the mean
**                          over targets, as the step reports it), "inv_freq": the rotary
**                          frequencies osdp uses (llama_rope_inv_freq)}
** The gradients' layout is the parameters', so safetensors_save writes them as well; it stores
** only the V real rows of the embedding and head, so the padded columns' gradients (which must be
** 0) are checked here. Exit status 0, or 1 with a message.
*/
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "core/util.h"
#include "kernels/cpu_kernels.h"
#include "model/gpt.h"
#include "model/gpt_step.h"
#include "model/llama.h"
#include "model/safetensors.h"

/* Full local parameters and gradients (elem bytes per element, every op's block at its offset
** in one array): the hooks of a plain one-process run with one slice per op. Gradients start at
** zero and every use accumulates (fresh = 0). */
typedef struct Local {
  const GptDesc* d;
  size_t elem;
  char *w, *g;
  size_t* base; /* per op: the block's first element */
} Local;

/* acquire_weight: the op's whole block (one slice). */
static void* local_weight(void* ctx, int owner, int slice, GptPhase ph) {
  Local* lp = ctx;
  (void)slice; (void)ph;
  return lp->w + lp->base[owner] * lp->elem;
}

/* release_weight and release_grad: nothing to do for local tensors. */
static void local_release(void* ctx, int owner, int slice, GptPhase ph) {
  (void)ctx; (void)owner; (void)slice; (void)ph;
}
static void local_release_grad(void* ctx, int owner, int slice) {
  (void)ctx; (void)owner; (void)slice;
}

/* acquire_grad: the op's gradient block, zeroed before the step, so every use accumulates. */
static void* local_grad(void* ctx, int owner, int slice, int* fresh) {
  Local* lp = ctx;
  (void)slice;
  *fresh = 0;
  return lp->g + lp->base[owner] * lp->elem;
}

/* Prints a message and exits 1. */
static void die(const char* what, const char* detail) {
  fprintf(stderr, "llama_grads: %s%s%s\n", what, detail && detail[0] ? ": " : "",
          detail ? detail : "");
  exit(1);
}

/* The test's parameters into p (n_params floats, op-block order), drawn from seed: linear
** weights and the embedding N(0, 0.15), biases N(0, 0.1), norm weights 1 + N(0, 0.1). The
** scales keep every path alive: attention scores of order 1 (softmax neither uniform nor
** one-hot), SwiGLU inputs in silu's curved range, norm weights away from 1 so that their
** gradients and the norms' scaling both count, biases large enough to shift q, k and v.
** Padded vocabulary columns (>= real_cols) are 0, as osdp initialises them. */
static void init_params(const GptDesc* d, unsigned long long seed, float* p) {
  Rng r;
  rng_seed(&r, seed);
  size_t base = 0;
  for (int i = 0; i < d->nops; i++) {
    const GptOp* op = &d->ops[i];
    for (int j = 0; j < op->ntensors; j++) {
      const ParamTensor* t = &op->tensor[j];
      int norm = op->kind == OP_RMSNORM, bias = strcmp(t->name, "b") == 0;
      for (size_t e = 0; e < t->n; e++) {
        double v = rng_normal(&r) * (norm || bias ? 0.1 : 0.15) + (norm ? 1.0 : 0.0);
        if (t->cols && e % t->cols >= t->real_cols) v = 0;
        p[base + t->off + e] = (float)v;
      }
    }
    base += op->n_params;
  }
}

/* A deterministic batch from seed: tokens uniform over the V real ones, targets too, except
** every seventh position (from the fourth) has none (-1). Returns the number of targets. */
static int make_batch(const GptConfig* c, int BT, unsigned long long seed, int* tok, int* tg) {
  Rng r;
  rng_seed(&r, seed ^ 0x5bd1e995ULL);
  int n = 0;
  for (int i = 0; i < BT; i++) {
    tok[i] = (int)rng_below(&r, (uint64_t)c->vocab_size);
    tg[i] = i % 7 == 3 ? -1 : (int)rng_below(&r, (uint64_t)c->vocab_size);
    n += tg[i] >= 0;
  }
  return n;
}

/* One forward and backward pass in precision elem (sizeof(float) or sizeof(double)) with
** parameters w (op-block order, that precision) into the zeroed gradients g; returns the mean
** loss over the ntargets targets. */
static double run_pass(const GptDesc* d, size_t elem, void* w, void* g, int B, int T,
                       const int* tok, const int* tg, int ntargets) {
  int n = d->nops;
  size_t* base = calloc((size_t)n, sizeof *base);
  size_t* own = calloc((size_t)n, sizeof *own);
  int* slices = calloc((size_t)n, sizeof *slices);
  if (!base || !own || !slices) die("out of memory", NULL);
  for (int i = 0; i < n; i++) {
    slices[i] = 1;
    if (i) base[i] = base[i - 1] + d->ops[i - 1].n_params;
  }
  Local lp = {d, elem, w, g, base};
  GptParamHooks h = {&lp, local_weight, local_release, local_grad, local_release_grad};
  Precision prec = elem == sizeof(double) ? PRECISION_FP64 : PRECISION_FP32;
  GptActs a = {.B = B, .T = T, .precision = prec};
  a.op_acts = calloc((size_t)n, sizeof(void*));
  gpt_acts_layout(d, B, T, prec, NULL, own, NULL, NULL);
  for (int i = 0; i < n; i++) a.op_acts[i] = calloc(1, own[i] ? own[i] : 1);
  a.head_rows = 3; /* several chunks of the head, the last one short */
  a.scratch = calloc(1, gpt_scratch_bytes(d, B, T, prec, kernels_threads(), a.head_rows));
  memcpy(gpt_acts_tokens(d, &a), tok, (size_t)B * T * sizeof(int));
  memcpy(gpt_acts_targets(d, &a), tg, (size_t)B * T * sizeof(int));
  double scale = 1.0 / ntargets, sum;
  sum = gpt_forward(d, &a, &h, slices, GPT_TRAIN, scale, NULL);
  gpt_backward(d, &a, &h, slices);
  for (int i = 0; i < n; i++) free(a.op_acts[i]);
  free(a.op_acts); free(a.scratch); free(base); free(own); free(slices);
  return sum * scale;
}

/* Exits 1 when a padded vocabulary column (>= real_cols) of some tensor has a nonzero gradient
** in g (the files leave those columns out, so they are checked here); elem as run_pass's. */
static void check_padding(const GptDesc* d, const void* g, size_t elem, const char* what) {
  size_t base = 0;
  for (int i = 0; i < d->nops; i++) {
    for (int j = 0; j < d->ops[i].ntensors; j++) {
      const ParamTensor* t = &d->ops[i].tensor[j];
      for (size_t e = 0; t->cols && e < t->n; e++) {
        if (e % t->cols < t->real_cols) continue;
        size_t at = base + t->off + e;
        double v = elem == sizeof(double) ? ((const double*)g)[at] : ((const float*)g)[at];
        if (v != 0) {
          fprintf(stderr, "llama_grads: %s gradient of %s.%s is %g in padded column %zu\n", what,
                  d->ops[i].name, t->name, v, e % t->cols);
          exit(1);
        }
      }
    }
    base += d->ops[i].n_params;
  }
}

/* Writes params (floats) to dir/name with safetensors_save, or exits. */
static void save(const GptDesc* d, const char* dir, const char* name, const float* params) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  if (safetensors_save(path, d, params)) die("saving failed", osdp_last_error());
}

/* Adds the n ints v to o as array `key`. */
static void json_ints(cJSON* o, const char* key, const int* v, int n) {
  cJSON* arr = cJSON_AddArrayToObject(o, key);
  for (int i = 0; i < n; i++) cJSON_AddItemToArray(arr, cJSON_CreateNumber(v[i]));
}

/* Writes dir/run.json (see the top of the file). */
static void write_run(const GptDesc* d, const char* dir, int B, int T, const int* tok,
                      const int* tg, int ntargets, double loss64, double loss32) {
  cJSON* o = cJSON_CreateObject();
  cJSON* m = cJSON_AddObjectToObject(o, "model");
  gpt_config_to_json(&d->cfg, m);
  cJSON_AddNumberToObject(o, "B", B);
  cJSON_AddNumberToObject(o, "T", T);
  json_ints(o, "tokens", tok, B * T);
  json_ints(o, "targets", tg, B * T);
  cJSON_AddNumberToObject(o, "ntargets", ntargets);
  cJSON_AddNumberToObject(o, "loss64", loss64);
  cJSON_AddNumberToObject(o, "loss32", loss32);
  double f[512];
  llama_rope_inv_freq(&d->cfg, f);
  cJSON* arr = cJSON_AddArrayToObject(o, "inv_freq");
  for (int j = 0; j < d->cfg.head_dim / 2; j++) cJSON_AddItemToArray(arr, cJSON_CreateNumber(f[j]));
  char* text = cJSON_Print(o);
  char path[4096];
  snprintf(path, sizeof path, "%s/run.json", dir);
  FILE* fp = fopen(path, "w");
  if (!text || !fp || fputs(text, fp) < 0 || fclose(fp) != 0) die("cannot write", path);
  free(text);
  cJSON_Delete(o);
}

/* Parses the arguments, runs both passes, writes the files. */
int main(int argc, char** argv) {
  if (argc != 6) die("usage: llama_grads MODEL B T SEED DIR", NULL);
  GptConfig cfg;
  GptDesc d;
  if (gpt_config_load(argv[1], &cfg) || gpt_desc_build(&d, &cfg)) die("model", osdp_last_error());
  if (strcmp(cfg.family, "llama") != 0) die("not a Llama-family model", argv[1]);
  int B = atoi(argv[2]), T = atoi(argv[3]);
  unsigned long long seed = strtoull(argv[4], NULL, 10);
  const char* dir = argv[5];
  if (B < 1 || T < 1 || T > cfg.max_seq) die("B and T must be positive, T at most max_seq", NULL);
  size_t N = d.n_params;
  int *tok = malloc((size_t)B * T * sizeof(int)), *tg = malloc((size_t)B * T * sizeof(int));
  float *p32 = malloc(N * sizeof(float)), *g32 = calloc(N, sizeof(float));
  float *hi = malloc(N * sizeof(float)), *lo = malloc(N * sizeof(float));
  double *p64 = malloc(N * sizeof(double)), *g64 = calloc(N, sizeof(double));
  if (!tok || !tg || !p32 || !g32 || !hi || !lo || !p64 || !g64) die("out of memory", NULL);
  init_params(&d, seed, p32);
  for (size_t i = 0; i < N; i++) p64[i] = p32[i];
  int ntargets = make_batch(&cfg, B * T, seed, tok, tg);
  double loss64 = run_pass(&d, sizeof(double), p64, g64, B, T, tok, tg, ntargets);
  double loss32 = run_pass(&d, sizeof(float), p32, g32, B, T, tok, tg, ntargets);
  check_padding(&d, g64, sizeof(double), "fp64");
  check_padding(&d, g32, sizeof(float), "fp32");
  for (size_t i = 0; i < N; i++) {
    hi[i] = (float)g64[i];
    lo[i] = (float)(g64[i] - hi[i]);
  }
  save(&d, dir, "params.safetensors", p32);
  save(&d, dir, "grads64.safetensors", hi);
  save(&d, dir, "grads64lo.safetensors", lo);
  save(&d, dir, "grads32.safetensors", g32);
  write_run(&d, dir, B, T, tok, tg, ntargets, loss64, loss32);
  printf("%s B=%d T=%d: %zu parameters, %d targets, loss fp64 %.15g, fp32 %.9g\n", cfg.name, B, T,
         N, ntargets, loss64, loss32);
  free(tok); free(tg); free(p32); free(g32); free(hi); free(lo); free(p64); free(g64);
  gpt_desc_free(&d);
  return 0;
}
