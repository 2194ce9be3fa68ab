/* gpt.c: model configurations and their expansion into the operator list; see gpt.h. */
#include "model/gpt.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"
#include "kernels/cpu_kernels.h"

typedef struct Preset { const char* name; int L, C, NH, V, maxT; } Preset;

static const Preset presets[] = {
    {"tiny", 2, 64, 4, 256, 256},
    {"small", 4, 256, 4, 8192, 512},
    {"gpt2-124m", 12, 768, 12, 50257, 1024},
    {"gpt2-350m", 24, 1024, 16, 50257, 1024},
    {"gpt2-774m", 36, 1280, 20, 50257, 1024},
    {"gpt2-1.5b", 48, 1600, 25, 50257, 1024},
};
#define NPRESETS ((int)(sizeof presets / sizeof presets[0]))

const char* gpt_preset_names(void) { return "tiny, small, gpt2-124m, gpt2-350m, gpt2-774m, gpt2-1.5b"; }

/* Vocabulary padded up to a multiple of 128, as llm.c does (50257 -> 50304). */
static int pad_vocab(int V) { return (V + 127) / 128 * 128; }

int gpt_config_validate(const GptConfig* c) {
  if (c->n_layer < 1 || c->n_layer > 1000)
    return osdp_fail("model: n_layer=%d must be in [1, 1000]", c->n_layer);
  if (c->n_embd < 1 || c->n_embd > 65536)
    return osdp_fail("model: n_embd=%d must be in [1, 65536]", c->n_embd);
  if (c->n_head < 1 || c->n_embd % c->n_head != 0)
    return osdp_fail("model: n_head=%d does not divide n_embd=%d; choose a divisor of n_embd",
                     c->n_head, c->n_embd);
  if (c->vocab_size < 2 || c->vocab_size > (1 << 24))
    return osdp_fail("model: vocab_size=%d must be in [2, 16777216]", c->vocab_size);
  if (c->padded_vocab && (c->padded_vocab < c->vocab_size || c->padded_vocab % 128 != 0))
    return osdp_fail("model: padded_vocab=%d must be a multiple of 128 and >= vocab_size=%d",
                     c->padded_vocab, c->vocab_size);
  if (c->max_seq < 1 || c->max_seq > 65536)
    return osdp_fail("model: max_seq=%d must be in [1, 65536]", c->max_seq);
  return 0;
}

/* Reads an integer field of a JSON config; missing or non-integer values are errors (so are
** values outside int's range, checked before the cast, which would be undefined for them). */
static int json_int_field(const cJSON* o, const char* path, const char* key, int* out) {
  const cJSON* v = cJSON_GetObjectItemCaseSensitive(o, key);
  if (!v) return osdp_fail("%s: missing field \"%s\" (an integer)", path, key);
  if (!cJSON_IsNumber(v) || !(v->valuedouble >= -2147483648.0 && v->valuedouble <= 2147483647.0) ||
      v->valuedouble != (double)(int)v->valuedouble)
    return osdp_fail("%s: field \"%s\" must be an integer", path, key);
  *out = (int)v->valuedouble;
  return 0;
}

/* Parses a JSON model config file. */
static int config_from_json(const char* path, GptConfig* c) {
  cJSON* o = read_json_object(path, "--model", "expected an object such as {\"n_layer\":2,"
                              "\"n_embd\":64,\"n_head\":4,\"vocab_size\":256,\"max_seq\":128}");
  if (!o) return -1;
  memset(c, 0, sizeof *c);
  int rc = json_int_field(o, path, "n_layer", &c->n_layer) ||
           json_int_field(o, path, "n_embd", &c->n_embd) ||
           json_int_field(o, path, "n_head", &c->n_head) ||
           json_int_field(o, path, "vocab_size", &c->vocab_size) ||
           json_int_field(o, path, "max_seq", &c->max_seq);
  const cJSON* name = cJSON_GetObjectItemCaseSensitive(o, "name");
  snprintf(c->name, sizeof c->name, "%s", cJSON_IsString(name) ? name->valuestring : path);
  cJSON_Delete(o);
  return rc ? -1 : 0;
}

int gpt_config_load(const char* name, GptConfig* c) {
  memset(c, 0, sizeof *c);
  int found = 0;
  for (int i = 0; i < NPRESETS; i++) {
    if (strcmp(name, presets[i].name) != 0) continue;
    const Preset* p = &presets[i];
    snprintf(c->name, sizeof c->name, "%s", p->name);
    c->n_layer = p->L; c->n_embd = p->C; c->n_head = p->NH;
    c->vocab_size = p->V; c->max_seq = p->maxT;
    found = 1;
  }
  if (!found) {
    if (!strchr(name, '/') && !strstr(name, ".json"))
      return osdp_fail("--model: unknown preset '%s'; use one of %s, or a JSON file", name,
                       gpt_preset_names());
    if (config_from_json(name, c)) return -1;
  }
  c->padded_vocab = pad_vocab(c->vocab_size);
  return gpt_config_validate(c);
}

const char* gpt_op_kind_name(OpKind k) {
  static const char* names[] = {"embed", "layernorm", "linear", "attention", "gelu", "lm_head", "loss"};
  return names[k];
}

/* Appends one op to the list being built. */
static GptOp* add_op(GptDesc* d, const char* name, OpKind kind, int layer) {
  GptOp* op = &d->ops[d->nops];
  memset(op, 0, sizeof *op);
  snprintf(op->name, sizeof op->name, "%s", name);
  op->kind = kind;
  op->layer = layer;
  op->owner = -1;
  op->index_self = d->nops;
  d->nops++;
  return op;
}

/* Gives op a parameter block of rows x width plus tail; the op becomes its own owner. */
static void set_params(GptOp* op, size_t rows, size_t width, size_t tail, int splittable) {
  op->rows = rows; op->width = width; op->tail = tail;
  op->n_params = rows * width + tail;
  op->splittable = splittable;
  op->owner = op->index_self;
}

/* Adds a linear K -> OC with bias. */
static void add_linear(GptDesc* d, const char* name, int layer, int K, int OC, int residual) {
  GptOp* op = add_op(d, name, OP_LINEAR, layer);
  set_params(op, (size_t)K, (size_t)OC, (size_t)OC, 1);
  op->K = K; op->OC = OC; op->residual = residual;
}

/* Adds a LayerNorm over C features (w and b: a tail of 2C, never split). */
static void add_layernorm(GptDesc* d, const char* name, int layer, int C) {
  GptOp* op = add_op(d, name, OP_LAYERNORM, layer);
  set_params(op, 0, 0, 2 * (size_t)C, 0);
}

int gpt_desc_build(GptDesc* d, const GptConfig* cfg) {
  memset(d, 0, sizeof *d);
  if (gpt_config_validate(cfg)) return -1;
  d->cfg = *cfg;
  if (cfg->padded_vocab < cfg->vocab_size)
    return osdp_fail("model: padded_vocab=%d is smaller than vocab_size=%d", cfg->padded_vocab,
                     cfg->vocab_size);
  int L = cfg->n_layer, C = cfg->n_embd;
  d->ops = calloc((size_t)(GPT_OPS_PER_LAYER * L + 4), sizeof *d->ops);
  if (!d->ops) return osdp_fail("out of memory");
  GptOp* e = add_op(d, "embed", OP_EMBED, -1);
  set_params(e, (size_t)C, (size_t)cfg->padded_vocab, (size_t)cfg->max_seq * (size_t)C, 1);
  e->tail_decay = 1;
  e->K = C; e->OC = cfg->padded_vocab;
  char nm[24];
  for (int l = 0; l < L; l++) {
    snprintf(nm, sizeof nm, "h%d.ln1", l);    add_layernorm(d, nm, l, C);
    snprintf(nm, sizeof nm, "h%d.qkv", l);    add_linear(d, nm, l, C, 3 * C, 0);
    snprintf(nm, sizeof nm, "h%d.attn", l);   add_op(d, nm, OP_ATTENTION, l);
    snprintf(nm, sizeof nm, "h%d.proj", l);   add_linear(d, nm, l, C, C, 1);
    snprintf(nm, sizeof nm, "h%d.ln2", l);    add_layernorm(d, nm, l, C);
    snprintf(nm, sizeof nm, "h%d.fc", l);     add_linear(d, nm, l, C, 4 * C, 0);
    snprintf(nm, sizeof nm, "h%d.gelu", l);   add_op(d, nm, OP_GELU, l);
    snprintf(nm, sizeof nm, "h%d.fcproj", l); add_linear(d, nm, l, 4 * C, C, 1);
  }
  add_layernorm(d, "lnf", -1, C);
  GptOp* head = add_op(d, "lm_head", OP_LMHEAD, -1);
  head->owner = 0;
  head->K = C; head->OC = cfg->padded_vocab;
  add_op(d, "loss", OP_LOSS, -1);
  for (int i = 0; i < d->nops; i++) d->n_params += d->ops[i].n_params;
  return 0;
}

void gpt_desc_free(GptDesc* d) {
  free(d->ops);
  memset(d, 0, sizeof *d);
}

size_t gpt_slice_offset(const GptOp* op, int k, int i) {
  return gpt_slice_row0(op->rows, k, i) * op->width;
}

size_t gpt_slice_params(const GptOp* op, int k, int i) {
  size_t r0 = gpt_slice_row0(op->rows, k, i), r1 = gpt_slice_row0(op->rows, k, i + 1);
  return (r1 - r0) * op->width + (i == k - 1 ? op->tail : 0);
}

double gpt_op_flops_per_token(const GptDesc* d, const GptOp* op, int T) {
  switch (op->kind) {
    case OP_LINEAR:
    case OP_LMHEAD: return 2.0 * op->K * op->OC;
    case OP_ATTENTION: return 4.0 * T * d->cfg.n_embd;
    default: return 0;
  }
}

double gpt_step_flops(const GptDesc* d, int B, int T) {
  double f = 0;
  for (int i = 0; i < d->nops; i++) f += gpt_op_flops_per_token(d, &d->ops[i], T);
  return 3.0 * f * (double)B * (double)T;
}

size_t gpt_op_act_bytes(const GptDesc* d, const GptOp* op, int B, int T, size_t elem) {
  size_t BT = (size_t)B * (size_t)T, C = (size_t)d->cfg.n_embd;
  switch (op->kind) {
    case OP_EMBED: return BT * C * elem + 2 * BT * sizeof(int);
    case OP_LAYERNORM: return (BT * C + 2 * BT) * elem;
    case OP_LINEAR: return BT * (size_t)op->OC * elem;
    case OP_ATTENTION: return (BT * C + (size_t)B * d->cfg.n_head * T) * elem;
    case OP_GELU: return BT * 4 * C * elem;
    case OP_LMHEAD: return BT * (size_t)d->cfg.padded_vocab * elem;
    case OP_LOSS: return BT * elem;
  }
  return 0;
}

size_t gpt_scratch_bytes(const GptDesc* d, int B, int T, size_t elem, int threads) {
  size_t BT = (size_t)B * (size_t)T, C = (size_t)d->cfg.n_embd;
  /* dres [BT, C] + two [BT, 4C] work buffers + per-thread attention scratch (also used by
  ** the forward), then two int [BT] buffers for evaluation (argmax and problem ids). */
  size_t att = (size_t)threads * attention_scratch_elems(T, d->cfg.n_embd / d->cfg.n_head);
  return (BT * C + 2 * BT * 4 * C + att) * elem +
         2 * BT * sizeof(int);
}

/* A standard normal drawn from a hash of (seed, op, idx): counter-based, so any element can
** be generated on its own. */
static double hashed_normal(unsigned long long seed, int op, size_t idx) {
  unsigned long long z = seed * 0x9E3779B97F4A7C15ULL + ((unsigned long long)op << 40) + idx;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  z ^= z >> 31;
  double u1 = ((double)(z >> 32) + 0.5) * 0x1.0p-32, u2 = (double)(z & 0xffffffffULL) * 0x1.0p-32;
  return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

float gpt_init_value(const GptDesc* d, int opi, size_t idx, unsigned long long seed) {
  const GptOp* op = &d->ops[opi];
  size_t rows_n = op->rows * op->width;
  switch (op->kind) {
    case OP_EMBED:
      /* wte's padded columns (tokens V..Vp of [C, Vp]) start at 0 as in llm.c's files: no
      ** token or logit uses them, so they get no gradient and weight decay keeps them 0, and a
      ** checkpoint's padding stays zero (safetensors files hold only the V real rows). */
      if (idx < rows_n && idx % op->width >= (size_t)d->cfg.vocab_size) return 0.0f;
      return (float)(0.02 * hashed_normal(seed, opi, idx));
    case OP_LAYERNORM: return idx < (size_t)d->cfg.n_embd ? 1.0f : 0.0f;
    case OP_LINEAR: {
      if (idx >= rows_n) return 0.0f; /* bias */
      double std = op->residual ? 0.02 / sqrt(2.0 * d->cfg.n_layer) : 0.02;
      return (float)(std * hashed_normal(seed, opi, idx));
    }
    default: return 0.0f;
  }
}
