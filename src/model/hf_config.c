/* hf_config.c: Hugging Face config.json <-> GptConfig; see hf_config.h. */
#include "model/hf_config.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/util.h"

/* The largest config.json read (the Hub's are a few KiB). */
#define HF_CONFIG_MAX_BYTES ((size_t)16 << 20)
/* Sizes a config may give (gpt_config_validate then checks each against its own range). */
#define HF_MAX_SIZE 2147483647L

/* What the readers of one object share: the object, the file (for messages), the model type
** and the prefix of the object's keys in messages ("rope_scaling." inside that object). */
typedef struct Hf {
  const cJSON* o;
  const char* path;
  const char* type;
  const char* prefix;
} Hf;

/* A JSON value as short text for messages: "12.5", "\"gelu\"", "{...}" cut at 48 bytes. A number
** beyond a double's range (1e999), which the parser reads as infinity and would print as null,
** is said to be one. */
static const char* value_text(const cJSON* v, char buf[64]) {
  if (cJSON_IsNumber(v) && !isfinite(v->valuedouble))
    return strcpy(buf, "a number beyond the range of a double (not a finite number)");
  char* s = cJSON_PrintUnformatted(v);
  if (!s) return strcpy(buf, "?");
  if (strlen(s) > 48) snprintf(buf, 64, "%.45s...", s);
  else snprintf(buf, 64, "%s", s);
  free(s);
  return buf;
}

/* Key `key` of h's object, or NULL when it is absent or null (what transformers reads as "not
** set", so the default applies). */
static const cJSON* item(const Hf* h, const char* key) {
  const cJSON* v = cJSON_GetObjectItemCaseSensitive(h->o, key);
  return v && !cJSON_IsNull(v) ? v : NULL;
}

/* Reads number `key` into *out: absent is an error when required, else def; a value must be a
** number in [lo, hi] (and an integer when integer). */
static int get_number(const Hf* h, const char* key, int required, double def, double lo,
                      double hi, int integer, double* out) {
  const cJSON* v = item(h, key);
  char b[64];
  const char* what = integer ? "an integer" : "a number";
  if (!v) {
    if (required)
      return osdp_fail("%s: missing key \"%s%s\" (%s), which a %s config.json must have", h->path,
                       h->prefix, key, what, h->type);
    *out = def;
    return 0;
  }
  if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || v->valuedouble < lo ||
      v->valuedouble > hi || (integer && v->valuedouble != floor(v->valuedouble)))
    return osdp_fail("%s: key \"%s%s\" is %s; it must be %s in [%.10g, %.10g]", h->path, h->prefix, key,
                     value_text(v, b), what, lo, hi);
  *out = v->valuedouble;
  return 0;
}

/* Reads integer `key` (a size: 1 .. HF_MAX_SIZE) into *out; see get_number. */
static int get_int(const Hf* h, const char* key, int required, int def, int* out) {
  double v;
  if (get_number(h, key, required, def, 1, (double)HF_MAX_SIZE, 1, &v)) return -1;
  *out = (int)v;
  return 0;
}

/* Reads boolean `key` into *out (def when absent or null). */
static int get_bool(const Hf* h, const char* key, int def, int* out) {
  const cJSON* v = item(h, key);
  char b[64];
  if (!v) { *out = def; return 0; }
  if (!cJSON_IsBool(v))
    return osdp_fail("%s: key \"%s%s\" is %s; it must be true or false", h->path, h->prefix, key,
                     value_text(v, b));
  *out = cJSON_IsTrue(v);
  return 0;
}

/* Checks that string `key` (def when absent) is `want`, which is all osdp implements; `what`
** says what the key chooses, for the message. */
static int expect_string(const Hf* h, const char* key, const char* def, const char* want,
                         const char* alt, const char* what) {
  const cJSON* v = item(h, key);
  char b[64];
  const char* s = v && cJSON_IsString(v) ? v->valuestring : v ? NULL : def;
  if (s && (strcmp(s, want) == 0 || (alt && strcmp(s, alt) == 0))) return 0;
  return osdp_fail("%s: key \"%s%s\" is %s; osdp's %s is %s%s%s only; use a model with %s \"%s\"",
                   h->path, h->prefix, key, v ? value_text(v, b) : "absent", what, want,
                   alt ? " or " : "", alt ? alt : "", key, want);
}

/* Refuses boolean `key` when true: the computation it turns on (`what`) is not osdp's. */
static int refuse_true(const Hf* h, const char* key, const char* what) {
  int on = 0;
  if (get_bool(h, key, 0, &on)) return -1;
  if (!on) return 0;
  return osdp_fail("%s: key \"%s\" is true (%s), which osdp does not implement; use a model with "
                   "\"%s\": false", h->path, key, what, key);
}

/* Refuses a mixture-of-experts key set to anything but null, 0 or false. */
static int refuse_experts(const Hf* h, const char* key) {
  const cJSON* v = item(h, key);
  char b[64];
  if (!v || cJSON_IsFalse(v) || (cJSON_IsNumber(v) && v->valuedouble == 0)) return 0;
  return osdp_fail("%s: key \"%s\" is %s: mixture-of-experts layers are not implemented in osdp; "
                   "use a dense model (no experts)", h->path, key, value_text(v, b));
}

/* Reads a rope-scaling object (`key`: "rope_scaling", or newer files' "rope_parameters", which
** may also hold rope_theta) into c: none, "default" (none) or "llama3" with its four keys. */
static int read_rope(const Hf* h, const char* key, GptConfig* c) {
  const cJSON* r = item(h, key);
  char b[64], prefix[32];
  if (!r) return 0;
  if (!cJSON_IsObject(r))
    return osdp_fail("%s: key \"%s\" is %s; it must be null or an object with a rope_type", h->path,
                     key, value_text(r, b));
  snprintf(prefix, sizeof prefix, "%s.", key);
  Hf s = {r, h->path, h->type, prefix};
  int params = strcmp(key, "rope_parameters") == 0;
  if (params && get_number(&s, "rope_theta", 0, c->rope_theta, 1, 1e12, 0, &c->rope_theta)) return -1;
  const cJSON* t = item(&s, "rope_type");
  const char* tkey = t ? "rope_type" : "type";
  if (!t) t = item(&s, "type");
  if (!t && params) return 0;
  if (!t || !cJSON_IsString(t))
    return osdp_fail("%s: key \"%s.rope_type\" is %s; it must be a string (\"llama3\", or "
                     "\"default\" for none)", h->path, key, t ? value_text(t, b) : "absent");
  if (strcmp(t->valuestring, "default") == 0) return 0;
  if (strcmp(t->valuestring, "llama3") != 0)
    return osdp_fail("%s: key \"%s.%s\" is \"%s\": osdp implements llama3 rope scaling only; use a "
                     "model without %s or with rope_type \"llama3\"", h->path, key, tkey,
                     t->valuestring, key);
  double orig;
  if (get_number(&s, "factor", 1, 0, 1, 1e6, 0, &c->rope_factor) ||
      get_number(&s, "low_freq_factor", 1, 0, 1e-9, 1e6, 0, &c->rope_low_freq_factor) ||
      get_number(&s, "high_freq_factor", 1, 0, 1e-9, 1e6, 0, &c->rope_high_freq_factor) ||
      get_number(&s, "original_max_position_embeddings", 1, 0, 1, (double)HF_MAX_SIZE, 1, &orig))
    return -1;
  c->rope_original_max = (int)orig;
  if (c->rope_high_freq_factor <= c->rope_low_freq_factor)
    return osdp_fail("%s: key \"%s.high_freq_factor\" is %g, not above low_freq_factor %g; "
                     "llama3 rope scaling needs low < high", h->path, key,
                     c->rope_high_freq_factor, c->rope_low_freq_factor);
  return 0;
}

/* Refuses the keys of Llama/Qwen2 configs that would change the computation. */
static int llama_refusals(const Hf* h, int qwen2) {
  static const char* const experts[] = {"num_experts", "num_local_experts", "n_routed_experts",
                                        "moe_intermediate_size", NULL};
  for (int i = 0; experts[i]; i++)
    if (refuse_experts(h, experts[i])) return -1;
  if (expect_string(h, "hidden_act", "silu", "silu", NULL, "MLP activation (SwiGLU)")) return -1;
  if (refuse_true(h, "mlp_bias", "biases on the MLP's gate, up and down projections")) return -1;
  if (qwen2)
    return refuse_true(h, "use_sliding_window",
                       "sliding-window attention; osdp's attention is full causal");
  return refuse_true(h, "attention_bias",
                     "biases on q, k, v and o_proj; Qwen2's q, k, v biases alone are model_type "
                     "\"qwen2\"");
}

/* Reads a "llama" or "qwen2" config (see hf_config.h) into c. */
static int llama_from_json(const Hf* h, GptConfig* c) {
  int qwen2 = strcmp(h->type, "qwen2") == 0;
  snprintf(c->family, sizeof c->family, "llama");
  c->qkv_bias = qwen2;
  if (get_int(h, "num_hidden_layers", 1, 0, &c->n_layer) || get_int(h, "hidden_size", 1, 0, &c->n_embd) ||
      get_int(h, "num_attention_heads", 1, 0, &c->n_head) ||
      get_int(h, "intermediate_size", 1, 0, &c->ffn_dim) ||
      get_int(h, "vocab_size", 1, 0, &c->vocab_size) ||
      get_int(h, "max_position_embeddings", 1, 0, &c->max_seq) ||
      get_int(h, "num_key_value_heads", 0, c->n_head, &c->n_kv_head))
    return -1;
  if (!item(h, "head_dim") && c->n_embd % c->n_head != 0)
    return osdp_fail("%s: key \"num_attention_heads\" is %d, which does not divide hidden_size %d, "
                     "and there is no head_dim; give head_dim", h->path, c->n_head, c->n_embd);
  if (get_int(h, "head_dim", 0, c->n_embd / c->n_head, &c->head_dim)) return -1;
  if (c->n_head % c->n_kv_head != 0)
    return osdp_fail("%s: key \"num_key_value_heads\" is %d, which does not divide "
                     "num_attention_heads %d; grouped-query attention needs a divisor", h->path,
                     c->n_kv_head, c->n_head);
  double theta = 10000.0;
  if (get_number(h, "rms_norm_eps", 0, 1e-6, 1e-30, 0.5, 0, &c->norm_eps) ||
      get_number(h, "rope_theta", 0, 10000.0, 1, 1e12, 0, &theta) ||
      get_bool(h, "tie_word_embeddings", 0, &c->tied_head))
    return -1;
  c->rope_theta = theta;
  if (read_rope(h, "rope_scaling", c) || read_rope(h, "rope_parameters", c)) return -1;
  return llama_refusals(h, qwen2);
}

/* Refuses the keys of GPT-2 configs that would change osdp's GPT-2 (tanh GELU, 4C MLP,
** LayerNorm eps 1e-5, attention scaled by 1/sqrt(head size), tied head, no cross-attention). */
static int gpt2_refusals(const Hf* h, const GptConfig* c) {
  int on = 0;
  double inner = 0, eps = 0;
  char b[64];
  if (expect_string(h, "activation_function", "gelu_new", "gelu_new", "gelu_pytorch_tanh",
                    "GPT-2 activation"))
    return -1;
  if (get_number(h, "n_inner", 0, 4.0 * c->n_embd, 1, (double)HF_MAX_SIZE, 1, &inner)) return -1;
  if (inner != 4.0 * c->n_embd)
    return osdp_fail("%s: key \"n_inner\" is %s; osdp's GPT-2 MLP is 4 * n_embd = %d wide; use a "
                     "model with \"n_inner\": null", h->path, value_text(item(h, "n_inner"), b),
                     4 * c->n_embd);
  if (get_number(h, "layer_norm_epsilon", 0, 1e-5, 0, 1, 0, &eps)) return -1;
  if (fabs(eps - 1e-5) > 1e-12)
    return osdp_fail("%s: key \"layer_norm_epsilon\" is %g; osdp's LayerNorm uses 1e-05; use a "
                     "model with layer_norm_epsilon 1e-05", h->path, eps);
  if (get_bool(h, "scale_attn_weights", 1, &on)) return -1;
  if (!on)
    return osdp_fail("%s: key \"scale_attn_weights\" is false; osdp scales attention by "
                     "1/sqrt(head size); use a model with \"scale_attn_weights\": true", h->path);
  if (get_bool(h, "tie_word_embeddings", 1, &on)) return -1;
  if (!on)
    return osdp_fail("%s: key \"tie_word_embeddings\" is false; osdp's GPT-2 ties the LM head to "
                     "wte; use a model with \"tie_word_embeddings\": true", h->path);
  return refuse_true(h, "scale_attn_by_inverse_layer_idx", "attention scaled by 1/(layer + 1)") ||
                 refuse_true(h, "add_cross_attention", "cross-attention layers")
             ? -1 : 0;
}

/* Reads a "gpt2" config into c. */
static int gpt2_from_json(const Hf* h, GptConfig* c) {
  if (get_int(h, "n_layer", 1, 0, &c->n_layer) || get_int(h, "n_embd", 1, 0, &c->n_embd) ||
      get_int(h, "n_head", 1, 0, &c->n_head) || get_int(h, "vocab_size", 1, 0, &c->vocab_size) ||
      get_int(h, "n_positions", 1, 0, &c->max_seq))
    return -1;
  return gpt2_refusals(h, c);
}

/* The last component of path (trailing slashes ignored) into out. */
static void last_component(const char* path, char* out, size_t n) {
  size_t len = strlen(path);
  while (len > 1 && path[len - 1] == '/') len--;
  size_t start = len;
  while (start > 0 && path[start - 1] != '/') start--;
  snprintf(out, n, "%.*s", (int)(len - start), path + start);
}

/* The model's name (see hf_config.h) into c->name. */
static void config_name(const cJSON* o, const char* path, GptConfig* c) {
  const cJSON* v = cJSON_GetObjectItemCaseSensitive(o, "_name_or_path");
  char buf[4096];
  if (cJSON_IsString(v) && v->valuestring[0] && strspn(v->valuestring, "/") < strlen(v->valuestring)) {
    last_component(v->valuestring, buf, sizeof buf);
  } else {
    last_component(path, buf, sizeof buf);
    const char* slash = strrchr(path, '/');
    if (strcmp(buf, "config.json") == 0 && slash && slash > path) {
      char dir[4096];
      snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
      last_component(dir, buf, sizeof buf);
    }
  }
  snprintf(c->name, sizeof c->name, "%.*s", (int)sizeof c->name - 1, buf);
}

int hf_config_is(const cJSON* o) {
  return cJSON_IsObject(o) && cJSON_GetObjectItemCaseSensitive(o, "model_type") != NULL;
}

int hf_config_from_json(const cJSON* o, const char* path, GptConfig* c) {
  memset(c, 0, sizeof *c);
  const cJSON* mt = cJSON_IsObject(o) ? cJSON_GetObjectItemCaseSensitive(o, "model_type") : NULL;
  char b[64];
  if (!mt)
    return osdp_fail("%s: no key \"model_type\"; a Hugging Face config.json names its model type "
                     "(llama, qwen2 or gpt2)", path);
  if (!cJSON_IsString(mt) || (strcmp(mt->valuestring, "llama") && strcmp(mt->valuestring, "qwen2") &&
                              strcmp(mt->valuestring, "gpt2")))
    return osdp_fail("%s: key \"model_type\" is %s, not a model osdp builds; use a llama, qwen2 or "
                     "gpt2 model", path, value_text(mt, b));
  Hf h = {o, path, mt->valuestring, ""};
  int gpt2 = strcmp(h.type, "gpt2") == 0;
  if (gpt2 ? gpt2_from_json(&h, c) : llama_from_json(&h, c)) return -1;
  c->padded_vocab = (c->vocab_size + 127) / 128 * 128;
  config_name(o, path, c);
  return 0;
}

int hf_config_load(const char* path, GptConfig* cfg) {
  struct stat st;
  if (stat(path, &st) != 0 || !(S_ISDIR(st.st_mode) || S_ISREG(st.st_mode))) return 0;
  int dir = S_ISDIR(st.st_mode);
  char file[4096];
  snprintf(file, sizeof file, dir ? "%s/config.json" : "%s", path);
  if (dir && stat(file, &st) != 0)
    return osdp_fail("%s: a directory without config.json; give a Hugging Face model directory "
                     "(config.json, model.safetensors), a preset or a model JSON file", path);
  char* text = read_text_bounded(file, HF_CONFIG_MAX_BYTES, file, "is it a config.json?");
  if (!text && !dir) osdp_clear_error(); /* a file osdp's own reader will name */
  if (!text) return dir ? -1 : 0;
  const char* end = NULL;
  cJSON* o = cJSON_ParseWithOpts(text, &end, 0);
  int strict = hf_config_is(o) ? json_check_one_meaning(o, text, end, file) : 0;
  free(text);
  int rc = 0;
  if (strict) rc = -1;
  else if (hf_config_is(o)) rc = hf_config_from_json(o, file, cfg) ? -1 : 1;
  else if (dir)
    rc = osdp_fail("%s: %s; a Hugging Face config.json is an object with model_type", file,
                   o ? "no key \"model_type\"" : "malformed JSON");
  cJSON_Delete(o);
  return rc;
}

/* Adds a Llama-family config's keys (LlamaConfig, or Qwen2Config when q, k, v have biases). */
static void llama_to_json(const GptConfig* c, cJSON* o) {
  int qwen2 = c->qkv_bias;
  cJSON_AddItemToObject(o, "architectures", cJSON_CreateStringArray(
      (const char* const[]){qwen2 ? "Qwen2ForCausalLM" : "LlamaForCausalLM"}, 1));
  cJSON_AddStringToObject(o, "model_type", qwen2 ? "qwen2" : "llama");
  cJSON_AddNumberToObject(o, "num_hidden_layers", c->n_layer);
  cJSON_AddNumberToObject(o, "hidden_size", c->n_embd);
  cJSON_AddNumberToObject(o, "num_attention_heads", c->n_head);
  cJSON_AddNumberToObject(o, "num_key_value_heads", c->n_kv_head);
  cJSON_AddNumberToObject(o, "head_dim", c->head_dim);
  cJSON_AddNumberToObject(o, "intermediate_size", c->ffn_dim);
  cJSON_AddNumberToObject(o, "vocab_size", c->vocab_size);
  cJSON_AddNumberToObject(o, "max_position_embeddings", c->max_seq);
  cJSON_AddNumberToObject(o, "rms_norm_eps", c->norm_eps);
  cJSON_AddNumberToObject(o, "rope_theta", c->rope_theta);
  if (c->rope_factor > 0) {
    cJSON* r = cJSON_AddObjectToObject(o, "rope_scaling");
    cJSON_AddStringToObject(r, "rope_type", "llama3");
    cJSON_AddNumberToObject(r, "factor", c->rope_factor);
    cJSON_AddNumberToObject(r, "low_freq_factor", c->rope_low_freq_factor);
    cJSON_AddNumberToObject(r, "high_freq_factor", c->rope_high_freq_factor);
    cJSON_AddNumberToObject(r, "original_max_position_embeddings", c->rope_original_max);
  } else {
    cJSON_AddNullToObject(o, "rope_scaling");
  }
  cJSON_AddBoolToObject(o, "tie_word_embeddings", c->tied_head);
  cJSON_AddStringToObject(o, "hidden_act", "silu");
  if (qwen2) {
    cJSON_AddBoolToObject(o, "use_sliding_window", 0);
  } else {
    cJSON_AddBoolToObject(o, "attention_bias", 0);
    cJSON_AddBoolToObject(o, "mlp_bias", 0);
  }
}

/* Adds a GPT-2 config's keys (GPT2Config). */
static void gpt2_to_json(const GptConfig* c, cJSON* o) {
  cJSON_AddItemToObject(o, "architectures",
                        cJSON_CreateStringArray((const char* const[]){"GPT2LMHeadModel"}, 1));
  cJSON_AddStringToObject(o, "model_type", "gpt2");
  cJSON_AddNumberToObject(o, "n_layer", c->n_layer);
  cJSON_AddNumberToObject(o, "n_embd", c->n_embd);
  cJSON_AddNumberToObject(o, "n_head", c->n_head);
  cJSON_AddNumberToObject(o, "vocab_size", c->vocab_size);
  cJSON_AddNumberToObject(o, "n_positions", c->max_seq);
  cJSON_AddNumberToObject(o, "n_ctx", c->max_seq);
  cJSON_AddNullToObject(o, "n_inner");
  cJSON_AddStringToObject(o, "activation_function", "gelu_new");
  cJSON_AddNumberToObject(o, "layer_norm_epsilon", 1e-5);
  cJSON_AddBoolToObject(o, "tie_word_embeddings", 1);
}

cJSON* hf_config_to_json(const GptConfig* c) {
  cJSON* o = cJSON_CreateObject();
  if (!o) return NULL;
  cJSON_AddStringToObject(o, "_name_or_path", c->name);
  if (strcmp(c->family, "llama") == 0) llama_to_json(c, o);
  else gpt2_to_json(c, o);
  cJSON_AddStringToObject(o, "torch_dtype", "float32");
  cJSON_AddStringToObject(o, "producer", "osdp");
  return o;
}

int hf_config_write(const GptConfig* c, const char* path) {
  cJSON* o = hf_config_to_json(c);
  char* text = o ? cJSON_Print(o) : NULL;
  cJSON_Delete(o);
  if (!text) return osdp_fail("%s: out of memory writing the config", path);
  size_t n = strlen(text);
  char* line = realloc(text, n + 2);
  if (!line) { free(text); return osdp_fail("%s: out of memory writing the config", path); }
  line[n] = '\n';
  line[n + 1] = 0;
  int rc = write_file_atomic(path, line, "config.json");
  free(line);
  return rc;
}
