/* gpt.c: the model description's common part: configs, building the op list through the
** family's spec, and everything derived from the list (slices, named views, FLOPs, activation
** bytes, initial values); see gpt.h. */
#include "model/gpt.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"
#include "model/family.h"
#include "model/hf_config.h"

/* The families osdp knows, in the order presets are looked up. */
static const ModelFamily* (*const families[])(void) = {family_gpt2, family_llama};
#define NFAMILIES ((int)(sizeof families / sizeof families[0]))

const ModelFamily* model_family_find(const char* name) {
  for (int i = 0; i < NFAMILIES; i++)
    if (strcmp(families[i]()->name, name) == 0) return families[i]();
  return NULL;
}

/* The family of a config: its `family` field, GPT-2's when empty (older files). */
static const ModelFamily* family_of_config(const GptConfig* c) {
  return c->family[0] ? model_family_find(c->family) : family_gpt2();
}

const char* gpt_preset_names(void) {
  static char names[512];
  if (!names[0])
    for (int i = 0; i < NFAMILIES; i++)
      snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", i ? ", " : "",
               families[i]()->preset_names);
  return names;
}

/* Vocabulary padded up to a multiple of 128, as llm.c does (50257 -> 50304). */
static int pad_vocab(int V) { return (V + 127) / 128 * 128; }

/* The Llama family's own fields. */
static int llama_config_validate(const GptConfig* c) {
  if (c->n_kv_head < 1 || c->n_head % c->n_kv_head != 0)
    return osdp_fail("model: n_kv_head=%d does not divide n_head=%d; choose a divisor of n_head",
                     c->n_kv_head, c->n_head);
  if (c->head_dim < 2 || c->head_dim > 1024 || c->head_dim % 2 != 0)
    return osdp_fail("model: head_dim=%d must be even and in [2, 1024] (rotary embedding pairs "
                     "its halves)", c->head_dim);
  if (c->ffn_dim < 1 || c->ffn_dim > 1 << 20)
    return osdp_fail("model: ffn_dim=%d must be in [1, 1048576]", c->ffn_dim);
  if (!(c->norm_eps > 0 && c->norm_eps < 1))
    return osdp_fail("model: norm_eps=%g must be in (0, 1)", c->norm_eps);
  if (!(c->rope_theta > 1 && c->rope_theta < 1e12))
    return osdp_fail("model: rope_theta=%g must be in (1, 1e12)", c->rope_theta);
  if (c->rope_factor != 0 &&
      !(c->rope_factor >= 1 && c->rope_low_freq_factor > 0 &&
        c->rope_high_freq_factor > c->rope_low_freq_factor && c->rope_original_max >= 1))
    return osdp_fail("model: llama3 rope scaling needs factor >= 1, 0 < low_freq_factor < "
                     "high_freq_factor and original_max_position_embeddings >= 1 (got %g, %g, "
                     "%g, %d)", c->rope_factor, c->rope_low_freq_factor,
                     c->rope_high_freq_factor, c->rope_original_max);
  if ((c->tied_head != 0 && c->tied_head != 1) || (c->qkv_bias != 0 && c->qkv_bias != 1))
    return osdp_fail("model: tied_head=%d and qkv_bias=%d must be 0 or 1", c->tied_head,
                     c->qkv_bias);
  return 0;
}

int gpt_config_validate(const GptConfig* c) {
  if (c->family[0] && !model_family_find(c->family))
    return osdp_fail("model: family '%s' is unknown; use gpt2 or llama", c->family);
  if (c->n_layer < 1 || c->n_layer > 1000)
    return osdp_fail("model: n_layer=%d must be in [1, 1000]", c->n_layer);
  if (c->n_embd < 1 || c->n_embd > 65536)
    return osdp_fail("model: n_embd=%d must be in [1, 65536]", c->n_embd);
  int llama = strcmp(c->family, "llama") == 0;
  if (c->n_head < 1 || (!llama && c->n_embd % c->n_head != 0))
    return osdp_fail("model: n_head=%d does not divide n_embd=%d; choose a divisor of n_embd",
                     c->n_head, c->n_embd);
  if (c->vocab_size < 2 || c->vocab_size > (1 << 24))
    return osdp_fail("model: vocab_size=%d must be in [2, 16777216]", c->vocab_size);
  if (c->padded_vocab && (c->padded_vocab < c->vocab_size || c->padded_vocab % 128 != 0))
    return osdp_fail("model: padded_vocab=%d must be a multiple of 128 and >= vocab_size=%d",
                     c->padded_vocab, c->vocab_size);
  if (c->max_seq < 1 || c->max_seq > (1 << 20))
    return osdp_fail("model: max_seq=%d must be in [1, 1048576]", c->max_seq);
  return llama ? llama_config_validate(c) : 0;
}

/* The keys of osdp's model JSON (model files, plans, checkpoint manifests), one per field of
** GptConfig but name and family; `llama`: only the Llama family has it. */
typedef struct ConfigKey {
  const char* key;
  size_t off;
  int is_double, llama;
} ConfigKey;
static const ConfigKey config_keys[] = {
    {"n_layer", offsetof(GptConfig, n_layer), 0, 0},
    {"n_embd", offsetof(GptConfig, n_embd), 0, 0},
    {"n_head", offsetof(GptConfig, n_head), 0, 0},
    {"vocab_size", offsetof(GptConfig, vocab_size), 0, 0},
    {"max_seq", offsetof(GptConfig, max_seq), 0, 0},
    {"n_kv_head", offsetof(GptConfig, n_kv_head), 0, 1},
    {"head_dim", offsetof(GptConfig, head_dim), 0, 1},
    {"ffn_dim", offsetof(GptConfig, ffn_dim), 0, 1},
    {"tied_head", offsetof(GptConfig, tied_head), 0, 1},
    {"qkv_bias", offsetof(GptConfig, qkv_bias), 0, 1},
    {"norm_eps", offsetof(GptConfig, norm_eps), 1, 1},
    {"rope_theta", offsetof(GptConfig, rope_theta), 1, 1},
    {"rope_factor", offsetof(GptConfig, rope_factor), 1, 1},
    {"rope_low_freq_factor", offsetof(GptConfig, rope_low_freq_factor), 1, 1},
    {"rope_high_freq_factor", offsetof(GptConfig, rope_high_freq_factor), 1, 1},
    {"rope_original_max", offsetof(GptConfig, rope_original_max), 0, 1},
};
#define NCONFIG_KEYS ((int)(sizeof config_keys / sizeof config_keys[0]))

/* Whether a config of family `llama` has key k. */
static int config_has(const ConfigKey* k, int llama) { return !k->llama || llama; }

/* The value of key k of c, as a double. */
static double config_get(const GptConfig* c, const ConfigKey* k) {
  const char* p = (const char*)c + k->off;
  if (k->is_double) { double v; memcpy(&v, p, sizeof v); return v; }
  int v; memcpy(&v, p, sizeof v); return v;
}

void gpt_config_to_json(const GptConfig* c, cJSON* m) {
  int llama = strcmp(c->family, "llama") == 0;
  cJSON_AddStringToObject(m, "name", c->name);
  if (llama) cJSON_AddStringToObject(m, "family", c->family);
  for (int i = 0; i < NCONFIG_KEYS; i++)
    if (config_has(&config_keys[i], llama))
      cJSON_AddNumberToObject(m, config_keys[i].key, config_get(c, &config_keys[i]));
}

/* Reads key k of object o into c; missing or mistyped values are errors (integers are checked
** against int's range before the cast, which would be undefined outside it). */
static int config_read_key(const cJSON* o, const char* path, const ConfigKey* k, GptConfig* c) {
  const cJSON* v = cJSON_GetObjectItemCaseSensitive(o, k->key);
  char* p = (char*)c + k->off;
  if (!v) return osdp_fail("%s: missing field \"%s\" (%s)", path, k->key, k->is_double ? "a number" : "an integer");
  if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble))
    return osdp_fail("%s: field \"%s\" must be a number", path, k->key);
  if (k->is_double) { memcpy(p, &v->valuedouble, sizeof(double)); return 0; }
  if (!(v->valuedouble >= -2147483648.0 && v->valuedouble <= 2147483647.0) ||
      v->valuedouble != (double)(int)v->valuedouble)
    return osdp_fail("%s: field \"%s\" must be an integer", path, k->key);
  int iv = (int)v->valuedouble;
  memcpy(p, &iv, sizeof iv);
  return 0;
}

int gpt_config_from_json(const cJSON* o, const char* path, GptConfig* c) {
  memset(c, 0, sizeof *c);
  const cJSON* fam = cJSON_GetObjectItemCaseSensitive(o, "family");
  if (fam && (!cJSON_IsString(fam) || !model_family_find(fam->valuestring)))
    return osdp_fail("%s: field \"family\" must be \"gpt2\" or \"llama\"", path);
  snprintf(c->family, sizeof c->family, "%s", fam ? fam->valuestring : "gpt2");
  int llama = strcmp(c->family, "llama") == 0;
  for (int i = 0; i < NCONFIG_KEYS; i++)
    if (config_has(&config_keys[i], llama) && config_read_key(o, path, &config_keys[i], c)) return -1;
  const cJSON* name = cJSON_GetObjectItemCaseSensitive(o, "name");
  snprintf(c->name, sizeof c->name, "%s", cJSON_IsString(name) ? name->valuestring : path);
  if (!llama) c->family[0] = '\0'; /* GPT-2 configs keep the empty family of its presets */
  return 0;
}

int gpt_config_matches_json(const cJSON* m, const GptConfig* c, const char* path,
                            const char* what) {
  if (!cJSON_IsObject(m)) return osdp_fail("%s: missing object \"model\"", path);
  GptConfig f;
  if (gpt_config_from_json(m, path, &f)) return -1;
  int llama = strcmp(c->family, "llama") == 0;
  if (strcmp(f.family, c->family) != 0)
    return osdp_fail("%s: %s is for a %s model, this one is %s; make one for %s", path, what,
                     f.family[0] ? f.family : "gpt2", c->family[0] ? c->family : "gpt2", c->name);
  for (int i = 0; i < NCONFIG_KEYS; i++) {
    const ConfigKey* k = &config_keys[i];
    double a = config_get(&f, k), b = config_get(c, k);
    if (config_has(k, llama) && a != b)
      return osdp_fail("%s: %s is for another model (model.%s=%.17g, this model has %.17g); "
                       "make one for %s", path, what, k->key, a, b, c->name);
  }
  return 0;
}

const char* gpt_config_summary(const GptConfig* c, char* buf, size_t n) {
  int len = snprintf(buf, n, "%s%d layers, hidden %d, %d heads", c->family[0] ? "Llama-family, " : "",
                     c->n_layer, c->n_embd, c->n_head);
  if (c->family[0] && len >= 0 && (size_t)len < n)
    len += snprintf(buf + len, n - (size_t)len, " (%d K/V) of %d, ffn %d, %s head%s, rope theta %g%s",
                    c->n_kv_head, c->head_dim, c->ffn_dim, c->tied_head ? "tied" : "untied",
                    c->qkv_bias ? ", qkv bias" : "", c->rope_theta,
                    c->rope_factor > 0 ? " (llama3 scaling)" : "");
  if (len >= 0 && (size_t)len < n)
    snprintf(buf + len, n - (size_t)len, ", vocab %d (padded %d), max seq %d", c->vocab_size,
             c->padded_vocab, c->max_seq);
  return buf;
}

/* Parses a JSON model config file. */
static int config_from_json(const char* path, GptConfig* c) {
  cJSON* o = read_json_object(path, "--model", "expected an object such as {\"n_layer\":2,"
                              "\"n_embd\":64,\"n_head\":4,\"vocab_size\":256,\"max_seq\":128}");
  if (!o) return -1;
  int rc = gpt_config_from_json(o, path, c);
  cJSON_Delete(o);
  return rc;
}

/* Fills c from the preset called name of any family; 1 if there is one. */
static int any_preset(const char* name, GptConfig* c) {
  for (int i = 0; i < NFAMILIES; i++)
    if (families[i]()->preset(name, c)) return 1;
  return 0;
}

int gpt_config_load(const char* name, GptConfig* c) {
  memset(c, 0, sizeof *c);
  if (!any_preset(name, c)) {
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
                                             "lm_head", "rmsnorm", "swiglu"};
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

double gpt_step_useful_flops(const GptDesc* d, int B, int T) {
  double f = 0;
  for (int i = 0; i < d->nops; i++) f += d->ops[i].flops_tok + d->ops[i].flops_tok_T * (T + 1) / 2.0;
  return 3.0 * f * (double)B * (double)T;
}

/* Bytes of one element of activation tensor a in precision prec. */
static size_t act_elem(const ActTensor* a, Precision prec) {
  if (a->kind == ACT_INT) return sizeof(int);
  StepElems e = precision_elems(prec);
  return a->kind == ACT_STAT ? e.stat : e.act;
}

/* The offset of tensor j of op's block (B*T = BT positions): the end of tensor j - 1 rounded up
** to a multiple of tensor j's element size. */
static size_t act_start(const GptOp* op, int j, size_t BT, Precision prec) {
  size_t off = 0;
  for (int i = 0; i <= j && i < op->nacts; i++) {
    size_t elem = act_elem(&op->act[i], prec);
    off = (off + elem - 1) / elem * elem;
    if (i < j) off += BT * op->act[i].per_token * elem;
  }
  return off;
}

size_t gpt_op_act_bytes(const GptDesc* d, const GptOp* op, int B, int T, Precision prec) {
  (void)d;
  size_t BT = (size_t)B * (size_t)T;
  if (op->nacts == 0) return 0;
  const ActTensor* last = &op->act[op->nacts - 1];
  return act_start(op, op->nacts - 1, BT, prec) + BT * last->per_token * act_elem(last, prec);
}

size_t model_act_offset(const GptOp* op, const char* name, int B, int T, Precision prec) {
  int j = 0;
  while (j < op->nacts && strcmp(op->act[j].name, name) != 0) j++;
  return act_start(op, j, (size_t)B * (size_t)T, prec);
}

int gpt_op_held(const GptDesc* d, int op) {
  for (int i = 0; i < d->nops; i++)
    if (d->ops[i].owner == op && !d->ops[i].has_backward) return 1;
  return 0;
}

int gpt_head_rows_default(const GptDesc* d) {
  size_t row = (size_t)d->cfg.padded_vocab * sizeof(float);
  size_t rows = GPT_HEAD_CHUNK_BYTES / row / 16 * 16;
  return rows < 16 ? 16 : (int)rows;
}

int gpt_head_rows(const GptDesc* d, int B, int T, int head_rows) {
  int rows = head_rows > 0 ? head_rows : gpt_head_rows_default(d);
  return rows < B * T ? rows : B * T;
}

size_t gpt_head_chunk_bytes(const GptDesc* d, int B, int T, Precision prec, int head_rows) {
  size_t chunk = (size_t)gpt_head_rows(d, B, T, head_rows) * (size_t)d->cfg.padded_vocab *
                 precision_elems(prec).act;
  return (chunk + 63) / 64 * 64;
}

size_t gpt_scratch_bytes(const GptDesc* d, int B, int T, Precision prec, int threads,
                         int head_rows) {
  return gpt_head_chunk_bytes(d, B, T, prec, head_rows) +
         d->family->scratch_bytes(d, B, T, prec, threads) + 2 * (size_t)B * T * sizeof(int);
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

void gpt_init_range_fast(const GptDesc* d, int opi, size_t first, size_t n, unsigned long long seed,
                         float* out) {
  const GptOp* op = &d->ops[opi];
  for (size_t j = 0; j < n; j++) out[j] = 0.0f;
  for (int t = 0; t < op->ntensors; t++) {
    const ParamTensor* pt = &op->tensor[t];
    size_t lo = pt->off > first ? pt->off : first, hi = pt->off + pt->n < first + n ? pt->off + pt->n : first + n;
    double half = 1.7320508075688772 * pt->std; /* a uniform on [-half, half] has std pt->std */
    uint64_t z = seed * 0x9E3779B97F4A7C15ULL + ((uint64_t)opi << 40);
    for (size_t i = lo; i < hi; i++) {
      if (pt->init == INIT_ONES) { out[i - first] = 1.0f; continue; }
      if (pt->init != INIT_NORMAL) continue;
      z = z * 6364136223846793005ULL + 1442695040888963407ULL + i; /* an LCG step, mixed with i */
      out[i - first] = (float)(half * ((double)(z >> 11) * 0x1.0p-52 - 1.0));
    }
  }
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
