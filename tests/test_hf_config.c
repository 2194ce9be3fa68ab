/* test_hf_config.c: Hugging Face config.json -> GptConfig (model/hf_config.h): the Hub's own
** config files of TinyLlama, Llama 3.2, Qwen2.5, SmolLM2 and GPT-2 (tests/hf/) read into the
** shapes their models have; every key osdp cannot honour, every missing required key and every
** mistyped value refused with one line naming the file, the key and the value; config.json
** written by hf_config_write read back equal; `--model DIR` and `--model FILE` through
** gpt_config_load, osdp's own model JSON unchanged. usage: test_hf_config DIR_OF_CONFIGS */
#include "check.h"
#include "core/util.h"
#include "model/gpt.h"
#include "model/hf_config.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char* configs; /* tests/hf */
static char tmpdir[256];

/* Reads a whole text file (NULL on failure). */
static char* slurp(const char* path) {
  FILE* f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char* s = malloc((size_t)n + 1);
  s[fread(s, 1, (size_t)n, f)] = 0;
  fclose(f);
  return s;
}

/* The parsed Hub config tests/hf/<name>.json (the caller deletes it). */
static cJSON* hub_config(const char* name) {
  char path[1024];
  snprintf(path, sizeof path, "%s/%s.json", configs, name);
  char* text = slurp(path);
  cJSON* o = text ? cJSON_Parse(text) : NULL;
  free(text);
  CHECK_MSG(o != NULL, "cannot read %s", path);
  return o;
}

/* Writes text to path. */
static void put_file(const char* path, const char* text) {
  FILE* f = fopen(path, "w");
  CHECK(f && fputs(text, f) >= 0 && fclose(f) == 0);
}

/* Whether rc is -1 with one line containing every needle (NULL-terminated). */
static int refused_with(int rc, const char* const* needles) {
  const char* e = osdp_last_error();
  int ok = rc == -1 && !strchr(e, '\n');
  for (int i = 0; needles[i] && ok; i++) ok = strstr(e, needles[i]) != NULL;
  if (!ok) fprintf(stderr, "  rc %d, message '%s' (wanted '%s' ...)\n", rc, e, needles[0]);
  return ok;
}

/* The Hub's configs read into the shapes of their models. */
static void test_hub_configs(void) {
  GptConfig c;
  cJSON* o = hub_config("tinyllama-1.1b");
  CHECK_MSG(hf_config_from_json(o, "tinyllama/config.json", &c) == 0, "%s", osdp_last_error());
  CHECK(strcmp(c.family, "llama") == 0 && c.n_layer == 22 && c.n_embd == 2048 && c.n_head == 32 &&
        c.n_kv_head == 4 && c.head_dim == 64 && c.ffn_dim == 5632 && c.vocab_size == 32000 &&
        c.padded_vocab == 32000 && c.max_seq == 2048 && !c.tied_head && !c.qkv_bias &&
        c.norm_eps == 1e-5 && c.rope_theta == 10000 && c.rope_factor == 0);
  CHECK(strcmp(c.name, "tinyllama") == 0);
  cJSON_Delete(o);

  o = hub_config("llama3.2-1b");
  CHECK_MSG(hf_config_from_json(o, "config.json", &c) == 0, "%s", osdp_last_error());
  CHECK(c.n_layer == 16 && c.n_embd == 2048 && c.n_head == 32 && c.n_kv_head == 8 &&
        c.head_dim == 64 && c.ffn_dim == 8192 && c.vocab_size == 128256 && c.max_seq == 131072 &&
        c.tied_head == 1 && c.rope_theta == 500000 && c.rope_factor == 32 &&
        c.rope_low_freq_factor == 1 && c.rope_high_freq_factor == 4 && c.rope_original_max == 8192);
  cJSON_Delete(o);

  o = hub_config("qwen2.5-0.5b");
  CHECK_MSG(hf_config_from_json(o, "Qwen2.5-0.5B/config.json", &c) == 0, "%s", osdp_last_error());
  CHECK(strcmp(c.family, "llama") == 0 && c.n_layer == 24 && c.n_embd == 896 && c.n_head == 14 &&
        c.n_kv_head == 2 && c.head_dim == 64 && c.ffn_dim == 4864 && c.vocab_size == 151936 &&
        c.max_seq == 32768 && c.tied_head == 1 && c.qkv_bias == 1 && c.norm_eps == 1e-6 &&
        c.rope_theta == 1e6);
  CHECK(strcmp(c.name, "Qwen2.5-0.5B") == 0);
  cJSON_Delete(o);

  o = hub_config("smollm2-135m");
  CHECK_MSG(hf_config_from_json(o, "x.json", &c) == 0, "%s", osdp_last_error());
  CHECK(c.n_layer == 30 && c.n_embd == 576 && c.n_head == 9 && c.n_kv_head == 3 && c.head_dim == 64 &&
        c.ffn_dim == 1536 && c.vocab_size == 49152 && c.max_seq == 8192 && c.tied_head == 1 &&
        c.rope_theta == 100000 && c.norm_eps == 1e-5);
  CHECK(strcmp(c.name, "x.json") == 0);
  cJSON_Delete(o);

  o = hub_config("gpt2");
  cJSON_AddStringToObject(o, "_name_or_path", "openai-community/gpt2");
  CHECK_MSG(hf_config_from_json(o, "config.json", &c) == 0, "%s", osdp_last_error());
  CHECK(c.family[0] == 0 && c.n_layer == 12 && c.n_embd == 768 && c.n_head == 12 &&
        c.vocab_size == 50257 && c.padded_vocab == 50304 && c.max_seq == 1024);
  CHECK(strcmp(c.name, "gpt2") == 0);
  cJSON_Delete(o);
}

/* A copy of config `base` with key (a.b for a key of object a) set to the JSON `value`
** (NULL: removed), read as file "m/config.json"; returns hf_config_from_json's result. */
static int read_changed(const char* base, const char* key, const char* value, GptConfig* c) {
  cJSON* o = hub_config(base);
  cJSON* obj = o;
  char k[64];
  snprintf(k, sizeof k, "%s", key);
  char* dot = strchr(k, '.');
  if (dot) {
    *dot = 0;
    obj = cJSON_GetObjectItem(o, k);
    memmove(k, dot + 1, strlen(dot + 1) + 1);
  }
  cJSON_DeleteItemFromObjectCaseSensitive(obj, k);
  if (value) {
    cJSON* v = cJSON_Parse(value);
    CHECK_MSG(v != NULL, "bad test value %s", value);
    cJSON_AddItemToObject(obj, k, v);
  }
  osdp_clear_error();
  int rc = hf_config_from_json(o, "m/config.json", c);
  cJSON_Delete(o);
  return rc;
}

/* One refusal: config base with key = value is refused naming the file and every needle. */
typedef struct Refusal {
  const char* base;
  const char* key;
  const char* value;
  const char* needle[4];
} Refusal;

/* Every key that would change the computation, missing required keys, mistyped values. */
static void test_refusals(void) {
  static const Refusal cases[] = {
      /* unsupported computation */
      {"tinyllama-1.1b", "hidden_act", "\"gelu\"", {"\"hidden_act\" is \"gelu\"", "silu"}},
      {"tinyllama-1.1b", "attention_bias", "true", {"\"attention_bias\" is true", "o_proj", "false"}},
      {"tinyllama-1.1b", "mlp_bias", "true", {"\"mlp_bias\" is true", "false"}},
      {"qwen2.5-0.5b", "use_sliding_window", "true", {"\"use_sliding_window\" is true", "sliding-window"}},
      {"tinyllama-1.1b", "num_local_experts", "8", {"\"num_local_experts\" is 8", "mixture-of-experts"}},
      {"qwen2.5-0.5b", "num_experts", "60", {"\"num_experts\" is 60", "dense model"}},
      {"tinyllama-1.1b", "moe_intermediate_size", "1408", {"\"moe_intermediate_size\" is 1408"}},
      {"tinyllama-1.1b", "rope_scaling", "{\"type\": \"linear\", \"factor\": 2.0}",
       {"\"rope_scaling.type\" is \"linear\"", "llama3 rope scaling only"}},
      {"llama3.2-1b", "rope_scaling.rope_type", "\"yarn\"", {"\"rope_scaling.rope_type\" is \"yarn\""}},
      {"llama3.2-1b", "rope_scaling.factor", NULL, {"missing key \"rope_scaling.factor\""}},
      {"llama3.2-1b", "rope_scaling.high_freq_factor", "0.5", {"rope_scaling.high_freq_factor", "0.5"}},
      {"llama3.2-1b", "rope_scaling.rope_type", NULL, {"\"rope_scaling.rope_type\" is absent"}},
      {"tinyllama-1.1b", "rope_scaling", "5", {"\"rope_scaling\" is 5", "null or an object"}},
      {"tinyllama-1.1b", "rope_parameters", "{\"rope_type\": \"dynamic\", \"rope_theta\": 1e4}",
       {"\"rope_parameters.rope_type\" is \"dynamic\""}},
      {"gpt2", "activation_function", "\"relu\"", {"\"activation_function\" is \"relu\"", "gelu_new"}},
      {"gpt2", "n_inner", "1000", {"\"n_inner\" is 1000", "3072"}},
      {"gpt2", "layer_norm_epsilon", "1e-6", {"\"layer_norm_epsilon\" is 1e-06"}},
      {"gpt2", "scale_attn_weights", "false", {"\"scale_attn_weights\" is false"}},
      {"gpt2", "scale_attn_by_inverse_layer_idx", "true", {"\"scale_attn_by_inverse_layer_idx\" is true"}},
      {"gpt2", "tie_word_embeddings", "false", {"\"tie_word_embeddings\" is false", "ties"}},
      {"gpt2", "add_cross_attention", "true", {"\"add_cross_attention\" is true"}},
      {"gpt2", "model_type", "\"mistral\"", {"\"model_type\" is \"mistral\"", "llama, qwen2 or gpt2"}},
      {"gpt2", "model_type", "7", {"\"model_type\" is 7"}},
      /* missing required keys */
      {"tinyllama-1.1b", "num_hidden_layers", NULL, {"missing key \"num_hidden_layers\"", "llama config.json"}},
      {"tinyllama-1.1b", "hidden_size", NULL, {"missing key \"hidden_size\""}},
      {"qwen2.5-0.5b", "num_attention_heads", NULL, {"missing key \"num_attention_heads\"", "qwen2"}},
      {"tinyllama-1.1b", "intermediate_size", NULL, {"missing key \"intermediate_size\""}},
      {"tinyllama-1.1b", "vocab_size", NULL, {"missing key \"vocab_size\""}},
      {"tinyllama-1.1b", "max_position_embeddings", NULL, {"missing key \"max_position_embeddings\""}},
      {"gpt2", "n_positions", NULL, {"missing key \"n_positions\"", "gpt2 config.json"}},
      {"gpt2", "n_head", NULL, {"missing key \"n_head\""}},
      {"gpt2", "model_type", NULL, {"no key \"model_type\""}},
      /* wrong types and values */
      {"tinyllama-1.1b", "hidden_size", "\"2048\"", {"\"hidden_size\" is \"2048\"", "an integer"}},
      {"tinyllama-1.1b", "num_hidden_layers", "2.5", {"\"num_hidden_layers\" is 2.5"}},
      {"tinyllama-1.1b", "num_hidden_layers", "0", {"\"num_hidden_layers\" is 0"}},
      {"tinyllama-1.1b", "vocab_size", "1e300", {"\"vocab_size\" is 1e+300"}},
      {"tinyllama-1.1b", "num_key_value_heads", "5", {"\"num_key_value_heads\" is 5", "does not divide"}},
      {"tinyllama-1.1b", "num_attention_heads", "30", {"\"num_attention_heads\" is 30", "head_dim"}},
      {"tinyllama-1.1b", "tie_word_embeddings", "1", {"\"tie_word_embeddings\" is 1", "true or false"}},
      {"tinyllama-1.1b", "rms_norm_eps", "\"1e-5\"", {"\"rms_norm_eps\" is \"1e-5\"", "a number"}},
      {"tinyllama-1.1b", "rms_norm_eps", "0", {"\"rms_norm_eps\" is 0"}},
      {"tinyllama-1.1b", "rope_theta", "-1", {"\"rope_theta\" is -1"}},
      {"tinyllama-1.1b", "hidden_act", "[1]", {"\"hidden_act\" is [1]"}},
      {"tinyllama-1.1b", "attention_bias", "\"no\"", {"\"attention_bias\" is \"no\""}},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    const Refusal* r = &cases[i];
    GptConfig c;
    const char* needles[6] = {"m/config.json", NULL};
    for (int k = 0; k < 4 && r->needle[k]; k++) needles[k + 1] = r->needle[k];
    CHECK_MSG(refused_with(read_changed(r->base, r->key, r->value, &c), needles), "%s %s=%s",
              r->base, r->key, r->value ? r->value : "(removed)");
  }
}

/* What transformers accepts with the same meaning loads: defaults, nulls, head_dim given for
** heads that do not divide hidden, "default" rope types, rope_parameters, Llama's qkv-free
** Qwen2 attention_bias key ignored. */
static void test_defaults(void) {
  GptConfig c;
  CHECK(read_changed("tinyllama-1.1b", "num_key_value_heads", NULL, &c) == 0 && c.n_kv_head == 32);
  CHECK(read_changed("tinyllama-1.1b", "num_key_value_heads", "null", &c) == 0 && c.n_kv_head == 32);
  CHECK(read_changed("tinyllama-1.1b", "rms_norm_eps", NULL, &c) == 0 && c.norm_eps == 1e-6);
  CHECK(read_changed("tinyllama-1.1b", "rope_theta", NULL, &c) == 0 && c.rope_theta == 10000);
  CHECK(read_changed("tinyllama-1.1b", "hidden_act", NULL, &c) == 0);
  CHECK(read_changed("tinyllama-1.1b", "tie_word_embeddings", NULL, &c) == 0 && c.tied_head == 0);
  CHECK(read_changed("qwen2.5-0.5b", "tie_word_embeddings", NULL, &c) == 0 && c.tied_head == 0);
  CHECK(read_changed("tinyllama-1.1b", "pretraining_tp", "4", &c) == 0);
  CHECK(read_changed("tinyllama-1.1b", "num_local_experts", "0", &c) == 0);
  CHECK(read_changed("qwen2.5-0.5b", "attention_bias", "true", &c) == 0 && c.qkv_bias == 1);
  CHECK(read_changed("tinyllama-1.1b", "rope_scaling", "{\"rope_type\": \"default\"}", &c) == 0 &&
        c.rope_factor == 0);
  CHECK(read_changed("tinyllama-1.1b", "rope_parameters", "{\"rope_type\": \"default\", "
                     "\"rope_theta\": 250000}", &c) == 0 && c.rope_theta == 250000);
  CHECK(read_changed("tinyllama-1.1b", "head_dim", "48", &c) == 0 && c.head_dim == 48);
  cJSON* o = hub_config("tinyllama-1.1b");
  cJSON_ReplaceItemInObject(o, "num_attention_heads", cJSON_CreateNumber(28));
  cJSON_AddNumberToObject(o, "head_dim", 64);
  CHECK_MSG(hf_config_from_json(o, "m.json", &c) == 0 && c.head_dim == 64 && c.n_head == 28,
            "%s", osdp_last_error());
  cJSON_Delete(o);
  CHECK(read_changed("gpt2", "activation_function", "\"gelu_pytorch_tanh\"", &c) == 0);
  CHECK(read_changed("gpt2", "n_inner", "3072", &c) == 0);
}

/* Whether two configs are the same model (every field but the name). */
static int same_model(const GptConfig* a, const GptConfig* b) {
  GptConfig x = *a, y = *b;
  memset(x.name, 0, sizeof x.name);
  memset(y.name, 0, sizeof y.name);
  return memcmp(&x, &y, sizeof x) == 0;
}

/* hf_config_write's config.json reads back as the same model, named as written. */
static void test_round_trip(void) {
  static const char* const names[] = {"tinyllama-1.1b", "llama3.2-1b", "qwen2.5-0.5b", "smollm2-135m",
                                      "gpt2"};
  char path[512];
  snprintf(path, sizeof path, "%s/config.json", tmpdir);
  for (int i = 0; i < 5; i++) {
    cJSON* o = hub_config(names[i]);
    GptConfig a, b;
    CHECK(hf_config_from_json(o, names[i], &a) == 0);
    cJSON_Delete(o);
    CHECK_MSG(hf_config_write(&a, path) == 0, "%s", osdp_last_error());
    CHECK_MSG(hf_config_load(path, &b) == 1, "%s: %s", names[i], osdp_last_error());
    CHECK_MSG(same_model(&a, &b) && strcmp(b.name, names[i]) == 0, "%s", names[i]);
  }
  remove(path);
}

/* Each Hub config is the model of osdp's preset of the same name (the presets were written
** from these files), and gpt_config_load accepts every one. */
static void test_presets(void) {
  static const char* const pairs[][2] = {{"tinyllama-1.1b", "tinyllama-1.1b"}, {"llama3.2-1b", "llama3.2-1b"},
                                         {"qwen2.5-0.5b", "qwen2.5-0.5b"}, {"smollm2-135m", "smollm2-135m"},
                                         {"gpt2", "gpt2-124m"}};
  for (int i = 0; i < 5; i++) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s.json", configs, pairs[i][0]);
    GptConfig hub, preset;
    CHECK_MSG(gpt_config_load(path, &hub) == 0, "%s: %s", path, osdp_last_error());
    CHECK(gpt_config_load(pairs[i][1], &preset) == 0);
    CHECK_MSG(same_model(&hub, &preset), "%s differs from preset %s", path, pairs[i][1]);
  }
}

/* gpt_config_load: --model DIR (its config.json), --model FILE with model_type, osdp's own
** JSON (no model_type) as before, and a directory without config.json refused. */
static void test_config_load(void) {
  char dir[512], path[600], text[256];
  GptConfig c;
  snprintf(dir, sizeof dir, "%s/SmolLM2-135M", tmpdir);
  CHECK(mkdir(dir, 0755) == 0);
  snprintf(path, sizeof path, "%s/config.json", dir);
  osdp_clear_error();
  CHECK(refused_with(gpt_config_load(dir, &c), (const char* const[]){dir, "without config.json", NULL}));
  char* smol = NULL;
  {
    char src[1024];
    snprintf(src, sizeof src, "%s/smollm2-135m.json", configs);
    smol = slurp(src);
  }
  put_file(path, smol);
  free(smol);
  CHECK_MSG(gpt_config_load(dir, &c) == 0, "%s", osdp_last_error());
  CHECK(c.n_layer == 30 && c.n_embd == 576 && c.padded_vocab == 49152 && strcmp(c.name, "SmolLM2-135M") == 0);
  CHECK_MSG(gpt_config_load(path, &c) == 0 && c.n_kv_head == 3, "%s", osdp_last_error());
  put_file(path, "{\"model_type\": \"gpt2\", \"n_layer\": 2}");
  CHECK(refused_with(gpt_config_load(dir, &c), (const char* const[]){path, "missing key \"n_embd\"", NULL}));
  put_file(path, "{\"model_type\": ");
  CHECK(refused_with(gpt_config_load(dir, &c), (const char* const[]){path, "malformed JSON", NULL}));
  /* A model file in a file named config.json is still osdp's own when it has no model_type. */
  snprintf(text, sizeof text, "{\"n_layer\":1,\"n_embd\":8,\"n_head\":2,\"vocab_size\":20,\"max_seq\":16}");
  put_file(path, text);
  CHECK_MSG(gpt_config_load(path, &c) == 0 && c.n_layer == 1 && c.n_embd == 8, "%s", osdp_last_error());
  CHECK(refused_with(gpt_config_load(dir, &c), (const char* const[]){path, "no key \"model_type\"", NULL}));
  CHECK(hf_config_load(path, &c) == 0);
  CHECK(hf_config_load("no-such-file", &c) == 0 && hf_config_load("tiny", &c) == 0);
  remove(path);
  rmdir(dir);
}

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: test_hf_config DIR (tests/hf)\n");
    return 2;
  }
  configs = argv[1];
  snprintf(tmpdir, sizeof tmpdir, "%s/osdp_test_hf_XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
  if (!mkdtemp(tmpdir)) {
    perror("mkdtemp");
    return 1;
  }
  test_hub_configs();
  test_refusals();
  test_defaults();
  test_round_trip();
  test_presets();
  test_config_load();
  rmdir(tmpdir);
  return check_summary();
}
