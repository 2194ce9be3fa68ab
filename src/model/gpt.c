/* gpt.c: the model description's common part: configs, building the op list through the
** family's spec, and everything derived from the list (slices, named views, FLOPs, activation
** bytes, initial values); see gpt.h. */
#include "model/gpt.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"
#include "model/family.h"
#include "model/hf_config.h"

/* The families osdp knows, in the order presets are looked up. */
static const ModelFamily* family_of_config(const GptConfig* c) {
  (void)c; /* one family so far: every config is GPT-2's */
  return family_gpt2();
}

const char* gpt_preset_names(void) { return family_gpt2()->preset_names; }

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
  if (!family_gpt2()->preset(name, c)) {
    int hf = hf_config_load(name, c); /* 1: a Hugging Face model directory or config.json */
    if (hf < 0) return -1;
    if (!hf && !strchr(name, '/') && !strstr(name, ".json"))
      return osdp_fail("--model: unknown preset '%s'; use one of %s, a JSON file or a Hugging "
                       "Face model directory", name, gpt_preset_names());
    if (!hf && config_from_json(name, c)) return -1;
  }
  c->padded_vocab = pad_vocab(c->vocab_size);
  return gpt_config_validate(c);
}

const char* gpt_op_kind_name(OpKind k) {
  static const char* names[OP_KIND_COUNT] = {"embed", "layernorm", "linear", "attention", "gelu",
                                             "lm_head", "loss"};
  return k >= 0 && k < OP_KIND_COUNT ? names[k] : "?";
}

int gpt_desc_build(GptDesc* d, const GptConfig* cfg) {
  memset(d, 0, sizeof *d);
  if (gpt_config_validate(cfg)) return -1;
  if (cfg->padded_vocab < cfg->vocab_size)
    return osdp_fail("model: padded_vocab=%d is smaller than vocab_size=%d", cfg->padded_vocab,
                     cfg->vocab_size);
  d->cfg = *cfg;
  d->family = family_of_config(cfg);
  if (d->family->build(d)) { gpt_desc_free(d); return -1; }
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

ParamView model_param_view(const GptOp* op, int k, int i, void* base, size_t elem) {
  ParamView v;
  memset(&v, 0, sizeof v);
  v.row0 = gpt_slice_row0(op->rows, k, i);
  v.nrows = gpt_slice_row0(op->rows, k, i + 1) - v.row0;
  size_t first = gpt_slice_offset(op, k, i); /* the block offset base points at */
  for (int j = 0; j < op->ntensors; j++) {
    const ParamTensor* t = &op->tensor[j];
    if (t->split) v.t[j] = base;                                      /* its rows of the split part */
    else if (i == k - 1) v.t[j] = (char*)base + (t->off - first) * elem; /* a tail tensor */
  }
  return v;
}

const ParamTensor* model_tensor(const GptOp* op, const char* name) {
  for (int j = 0; j < op->ntensors; j++)
    if (strcmp(op->tensor[j].name, name) == 0) return &op->tensor[j];
  return NULL;
}

double gpt_op_flops_per_token(const GptDesc* d, const GptOp* op, int T) {
  (void)d;
  return op->flops_tok + op->flops_tok_T * T;
}

double gpt_step_flops(const GptDesc* d, int B, int T) {
  double f = 0;
  for (int i = 0; i < d->nops; i++) f += gpt_op_flops_per_token(d, &d->ops[i], T);
  return 3.0 * f * (double)B * (double)T;
}

/* Bytes of activation tensor a for BT positions, reals of elem bytes. */
static size_t act_bytes(const ActTensor* a, size_t BT, size_t elem) {
  return BT * a->per_token * (a->is_int ? sizeof(int) : elem);
}

size_t gpt_op_act_bytes(const GptDesc* d, const GptOp* op, int B, int T, size_t elem) {
  (void)d;
  size_t BT = (size_t)B * (size_t)T, bytes = 0;
  for (int j = 0; j < op->nacts; j++) bytes += act_bytes(&op->act[j], BT, elem);
  return bytes;
}

size_t model_act_offset(const GptOp* op, const char* name, int B, int T, size_t elem) {
  size_t BT = (size_t)B * (size_t)T, off = 0;
  for (int j = 0; j < op->nacts && strcmp(op->act[j].name, name) != 0; j++)
    off += act_bytes(&op->act[j], BT, elem);
  return off;
}

size_t gpt_scratch_bytes(const GptDesc* d, int B, int T, size_t elem, int threads) {
  return d->family->scratch_bytes(d, B, T, elem, threads);
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
  const ParamTensor* t = NULL;
  for (int j = 0; j < op->ntensors && !t; j++)
    if (idx >= op->tensor[j].off && idx < op->tensor[j].off + op->tensor[j].n) t = &op->tensor[j];
  if (!t) return 0.0f;
  switch (t->init) {
    case INIT_ONES: return 1.0f;
    case INIT_ZEROS: return 0.0f;
    case INIT_NORMAL:
      if ((idx - t->off) % t->cols >= t->real_cols) return 0.0f;
      return (float)(t->std * hashed_normal(seed, opi, idx));
  }
  return 0.0f;
}
