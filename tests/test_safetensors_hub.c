/* test_safetensors_hub.c: safetensors checkpoints as the Hugging Face Hub holds them: the
** Llama family's transformers names and shapes (llama-tiny: untied head, grouped-query
** attention; qwen-tiny: tied head, q/k/v biases), BF16 and F16 tensors (every 16-bit pattern
** against an independent decoder), sharded checkpoints through model.safetensors.index.json
** and directories, configs from osdp's metadata or config.json; every malformed index, missing
** shard, mismatched name or shape refused with one line naming the file, and params untouched. */
#include "check.h"
#include "core/util.h"
#include "model/gpt.h"
#include "model/hf_config.h"
#include "model/llama.h"
#include "model/safetensors.h"
#include "model/weights_file.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char tmpdir[256];

/* Path of `name` inside the test's temporary directory. */
static const char* tmp_path(const char* name, char buf[512]) {
  snprintf(buf, 512, "%s/%s", tmpdir, name);
  return buf;
}

/* Writes size bytes to path. */
static void write_file(const char* path, const void* data, size_t size) {
  FILE* f = fopen(path, "wb");
  CHECK_MSG(f && (size == 0 || fwrite(data, 1, size, f) == size) && fclose(f) == 0, "writing %s", path);
}

/* The model of preset `name`, built. */
static void build_preset(const char* name, GptDesc* d) {
  GptConfig c;
  CHECK(gpt_config_load(name, &c) == 0 && gpt_desc_build(d, &c) == 0);
}

/* Random normal parameters (with -0, a denormal, inf and NaN: the round trip is bitwise). */
static float* random_params(const GptDesc* d, uint64_t seed) {
  float* p = malloc(d->n_params * sizeof(float));
  Rng r;
  rng_seed(&r, seed);
  for (size_t i = 0; i < d->n_params; i++) p[i] = (float)rng_normal(&r);
  p[1] = -0.0f;
  p[d->n_params / 2] = 1e-42f;
  p[d->n_params - 1] = INFINITY;
  p[d->n_params - 2] = NAN;
  return p;
}

/* Which parameters are padding no file stores: the columns past hf_shape[0] of transposed
** tensors (the embedding's and an untied head's padded tokens). The caller frees it. */
static unsigned char* padding_mask(const GptDesc* d) {
  unsigned char* m = calloc(d->n_params, 1);
  size_t base = 0;
  for (int i = 0; i < d->nops; i++) {
    for (int j = 0; j < d->ops[i].ntensors; j++) {
      const ParamTensor* t = &d->ops[i].tensor[j];
      if (!t->hf_transposed) continue;
      for (size_t r = 0; r < t->rows; r++)
        for (size_t c = t->hf_shape[0]; c < t->cols; c++) m[base + t->off + r * t->cols + c] = 1;
    }
    base += d->ops[i].n_params;
  }
  return m;
}

/* Whether b holds a's values bitwise except padding, which is +0 in b. */
static int same_but_padding(const GptDesc* d, const float* a, const float* b) {
  unsigned char* pad = padding_mask(d);
  size_t bad = 0;
  for (size_t i = 0; i < d->n_params; i++)
    bad += pad[i] ? (b[i] != 0.0f || signbit(b[i])) : memcmp(&a[i], &b[i], sizeof(float)) != 0;
  free(pad);
  if (bad) fprintf(stderr, "  %zu parameters differ\n", bad);
  return bad == 0;
}

/* Whether two configs are the same model (all but the name). */
static int same_model(GptConfig a, GptConfig b) {
  memset(a.name, 0, sizeof a.name);
  memset(b.name, 0, sizeof b.name);
  return memcmp(&a, &b, sizeof a) == 0;
}

/* Whether rc is -1 with one line containing a and b (b may be NULL). */
static int refused(int rc, const char* a, const char* b) {
  const char* e = osdp_last_error();
  int ok = rc == -1 && strstr(e, a) && (!b || strstr(e, b)) && !strchr(e, '\n');
  if (!ok) fprintf(stderr, "  rc %d, message '%s' (wanted '%s', '%s')\n", rc, e, a, b ? b : "");
  return ok;
}

/* The checkpoint at path does not load into d (one line naming a and b) and params stay. */
static void check_refused(const GptDesc* d, const char* path, const char* a, const char* b) {
  float* p = malloc(d->n_params * sizeof(float));
  memset(p, 0x5a, d->n_params * sizeof(float));
  osdp_clear_error();
  CHECK_MSG(refused(safetensors_load(path, d, p), a, b), "%s", a);
  size_t moved = 0;
  for (size_t i = 0; i < d->n_params; i++) {
    uint32_t u;
    memcpy(&u, &p[i], 4);
    moved += u != 0x5a5a5a5au;
  }
  CHECK_MSG(moved == 0, "%zu parameters written by a refused load", moved);
  free(p);
}

/* ------------------------------------------------------------------------------------ */
/* Tensors to write: a file's tensors taken apart and written again, changed              */
/* ------------------------------------------------------------------------------------ */

#define MAX_TW 64

/* One tensor: its name, dtype, shape and bytes. */
typedef struct Tw {
  char name[96];
  char dtype[8];
  int nd;
  double shape[4];
  unsigned char* data;
  size_t bytes;
} Tw;

/* A file's tensors in header order (and its metadata). */
typedef struct Tws {
  Tw t[MAX_TW];
  int n;
  cJSON* meta;
} Tws;

/* Reads the safetensors file at path into ws. */
static void tws_read(const char* path, Tws* ws) {
  memset(ws, 0, sizeof *ws);
  size_t size;
  unsigned char* raw = read_file(path, &size);
  uint64_t N = 0;
  for (int i = 7; raw && i >= 0; i--) N = N << 8 | raw[i];
  char* h = raw ? malloc(N + 1) : NULL;
  if (!h) { CHECK_MSG(0, "cannot read %s", path); free(raw); return; }
  memcpy(h, raw + 8, N);
  h[N] = 0;
  cJSON* root = cJSON_Parse(h);
  free(h);
  for (const cJSON* e = root ? root->child : NULL; e && ws->n < MAX_TW; e = e->next) {
    if (strcmp(e->string, "__metadata__") == 0) { ws->meta = cJSON_Duplicate(e, 1); continue; }
    Tw* t = &ws->t[ws->n++];
    snprintf(t->name, sizeof t->name, "%s", e->string);
    snprintf(t->dtype, sizeof t->dtype, "%s", cJSON_GetObjectItem(e, "dtype")->valuestring);
    const cJSON* sh = cJSON_GetObjectItem(e, "shape");
    t->nd = cJSON_GetArraySize(sh);
    for (int k = 0; k < t->nd; k++) t->shape[k] = cJSON_GetArrayItem(sh, k)->valuedouble;
    const cJSON* of = cJSON_GetObjectItem(e, "data_offsets");
    size_t b = (size_t)cJSON_GetArrayItem(of, 0)->valuedouble, en = (size_t)cJSON_GetArrayItem(of, 1)->valuedouble;
    t->bytes = en - b;
    t->data = malloc(t->bytes + 1);
    memcpy(t->data, raw + 8 + N + b, t->bytes);
  }
  cJSON_Delete(root);
  free(raw);
}

/* Frees what tws_read allocated. */
static void tws_free(Tws* ws) {
  for (int i = 0; i < ws->n; i++) free(ws->t[i].data);
  cJSON_Delete(ws->meta);
  memset(ws, 0, sizeof *ws);
}

/* The tensor called name, or NULL. */
static Tw* tws_find(Tws* ws, const char* name) {
  for (int i = 0; i < ws->n; i++)
    if (strcmp(ws->t[i].name, name) == 0) return &ws->t[i];
  return NULL;
}

/* Writes the tensors i of ws with pick[i] != 0 (pick NULL: all) as a safetensors file at path,
** with ws's metadata when with_meta, unpadded (others' files need not align). */
static void tws_write(const Tws* ws, const char* path, const int* pick, int with_meta) {
  cJSON* j = cJSON_CreateObject();
  if (with_meta && ws->meta) cJSON_AddItemToObject(j, "__metadata__", cJSON_Duplicate(ws->meta, 1));
  size_t total = 0, at = 0;
  for (int i = 0; i < ws->n; i++) total += ws->t[i].bytes;
  unsigned char* buf = malloc(total + 1);
  for (int i = 0; i < ws->n; i++) {
    const Tw* t = &ws->t[i];
    if (pick && !pick[i]) continue;
    cJSON* e = cJSON_CreateObject();
    cJSON_AddStringToObject(e, "dtype", t->dtype);
    cJSON_AddItemToObject(e, "shape", cJSON_CreateDoubleArray(t->shape, t->nd));
    double of[2] = {(double)at, (double)(at + t->bytes)};
    cJSON_AddItemToObject(e, "data_offsets", cJSON_CreateDoubleArray(of, 2));
    cJSON_AddItemToObject(j, t->name, e);
    memcpy(buf + at, t->data, t->bytes);
    at += t->bytes;
  }
  char* h = cJSON_PrintUnformatted(j);
  size_t N = strlen(h);
  unsigned char* out = malloc(8 + N + at);
  for (int i = 0; i < 8; i++) out[i] = (unsigned char)((uint64_t)N >> (8 * i));
  memcpy(out + 8, h, N);
  memcpy(out + 8 + N, buf, at);
  write_file(path, out, 8 + N + at);
  free(out);
  free(h);
  free(buf);
  cJSON_Delete(j);
}

/* Rewrites F32 tensor t as 16-bit dtype `dtype` holding pattern(k) for element k. */
static void tw_to16(Tw* t, const char* dtype, uint16_t (*pattern)(size_t k, const float* v)) {
  size_t n = t->bytes / 4;
  unsigned char* d = malloc(2 * n + 1);
  for (size_t k = 0; k < n; k++) {
    uint16_t h = pattern(k, (const float*)t->data + k);
    memcpy(d + 2 * k, &h, 2);
  }
  free(t->data);
  t->data = d;
  t->bytes = 2 * n;
  snprintf(t->dtype, sizeof t->dtype, "%s", dtype);
}

/* ------------------------------------------------------------------------------------ */
/* Llama names and layout                                                                */
/* ------------------------------------------------------------------------------------ */

/* Start of op i's block in osdp's op-block order. */
static size_t block_start(const GptDesc* d, int op) {
  size_t s = 0;
  for (int i = 0; i < op; i++) s += d->ops[i].n_params;
  return s;
}

/* Checks tensor `name` of ws: F32 with shape [d0] (d1 == 0) or [d0, d1]; marks it seen. */
static void expect_tensor(Tws* ws, int* seen, const char* name, size_t d0, size_t d1) {
  Tw* t = tws_find(ws, name);
  CHECK_MSG(t != NULL, "no tensor %s", name);
  if (!t) return;
  seen[t - ws->t] = 1;
  CHECK_MSG(strcmp(t->dtype, "F32") == 0 && t->nd == (d1 ? 2 : 1) && t->shape[0] == (double)d0 &&
            (!d1 || t->shape[1] == (double)d1), "%s: shape or dtype", name);
}

/* The file of a Llama-family preset holds exactly transformers' names and shapes, linears
** transposed ([out, in]), a head only when untied, the whole config in its metadata. */
static void check_llama_layout(const GptDesc* d, const char* path, const float* p) {
  const GptConfig* c = &d->cfg;
  size_t C = (size_t)c->n_embd, V = (size_t)c->vocab_size, Q = (size_t)(c->n_head * c->head_dim);
  size_t KV = (size_t)(c->n_kv_head * c->head_dim), F = (size_t)c->ffn_dim;
  Tws ws;
  tws_read(path, &ws);
  int seen[MAX_TW] = {0};
  char n[96];
  expect_tensor(&ws, seen, "model.embed_tokens.weight", V, C);
  for (int l = 0; l < c->n_layer; l++) {
    static const char* const proj[] = {"q", "k", "v"};
    snprintf(n, sizeof n, "model.layers.%d.input_layernorm.weight", l);   expect_tensor(&ws, seen, n, C, 0);
    for (int k = 0; k < 3; k++) {
      snprintf(n, sizeof n, "model.layers.%d.self_attn.%s_proj.weight", l, proj[k]);
      expect_tensor(&ws, seen, n, k ? KV : Q, C);
      snprintf(n, sizeof n, "model.layers.%d.self_attn.%s_proj.bias", l, proj[k]);
      if (c->qkv_bias) expect_tensor(&ws, seen, n, k ? KV : Q, 0);
    }
    snprintf(n, sizeof n, "model.layers.%d.self_attn.o_proj.weight", l);  expect_tensor(&ws, seen, n, C, Q);
    snprintf(n, sizeof n, "model.layers.%d.post_attention_layernorm.weight", l); expect_tensor(&ws, seen, n, C, 0);
    snprintf(n, sizeof n, "model.layers.%d.mlp.gate_proj.weight", l);     expect_tensor(&ws, seen, n, F, C);
    snprintf(n, sizeof n, "model.layers.%d.mlp.up_proj.weight", l);       expect_tensor(&ws, seen, n, F, C);
    snprintf(n, sizeof n, "model.layers.%d.mlp.down_proj.weight", l);     expect_tensor(&ws, seen, n, C, F);
  }
  expect_tensor(&ws, seen, "model.norm.weight", C, 0);
  if (!c->tied_head) expect_tensor(&ws, seen, "lm_head.weight", V, C);
  for (int i = 0; i < ws.n; i++) CHECK_MSG(seen[i], "unexpected tensor %s", ws.t[i].name);
  /* k_proj of layer 1: transformers' [o][i] is osdp's W[i][o]; the embedding's [v][c] is wte[c][v]. */
  Tw* k1 = tws_find(&ws, "model.layers.1.self_attn.k_proj.weight");
  Tw* emb = tws_find(&ws, "model.embed_tokens.weight");
  size_t kb = block_start(d, llama_op_layer(1, LL_K)), Vp = (size_t)c->padded_vocab, bad = 0;
  for (size_t o = 0; k1 && o < KV; o++)
    for (size_t i = 0; i < C; i++) bad += memcmp((float*)k1->data + o * C + i, &p[kb + i * KV + o], 4) != 0;
  for (size_t v = 0; emb && v < V; v++)
    for (size_t i = 0; i < C; i++) bad += memcmp((float*)emb->data + v * C + i, &p[i * Vp + v], 4) != 0;
  CHECK_MSG(bad == 0, "%zu transposed values differ", bad);
  const char* meta[][2] = {{"family", "llama"}, {"format", "pt"}, {"n_kv_head", NULL}, {"norm_eps", NULL},
                           {"rope_theta", NULL}, {"tied_head", NULL}, {"qkv_bias", NULL}, {"head_dim", NULL}};
  for (int k = 0; k < 8; k++) {
    const cJSON* m = cJSON_GetObjectItem(ws.meta, meta[k][0]);
    CHECK_MSG(cJSON_IsString(m) && (!meta[k][1] || strcmp(m->valuestring, meta[k][1]) == 0), "metadata %s", meta[k][0]);
  }
  tws_free(&ws);
}

/* A Llama-family preset saves, loads bitwise, rebuilds its config from the file alone, and
** holds transformers' layout. */
static void test_llama_round_trip(const char* preset) {
  GptDesc d;
  build_preset(preset, &d);
  float* a = random_params(&d, 11);
  float* b = malloc(d.n_params * sizeof(float));
  char path[512];
  tmp_path("llama.safetensors", path);
  CHECK_MSG(safetensors_save(path, &d, a) == 0, "%s", osdp_last_error());
  memset(b, 0x5a, d.n_params * sizeof(float));
  CHECK_MSG(safetensors_load(path, &d, b) == 0, "%s: %s", preset, osdp_last_error());
  CHECK_MSG(same_but_padding(&d, a, b), "%s", preset);
  GptConfig got;
  CHECK_MSG(weights_read_config(path, &got) == 0, "%s", osdp_last_error());
  CHECK_MSG(same_model(got, d.cfg) && strcmp(got.name, "llama.safetensors") == 0, "%s config", preset);
  check_llama_layout(&d, path, a);
  remove(path);
  free(a);
  free(b);
  gpt_desc_free(&d);
}

/* A tied head in the file: absent (usual) or equal to the embedding loads; a differing one is
** refused; an untied model needs its lm_head.weight, and refuses names and shapes not its own. */
static void test_llama_heads_and_names(void) {
  GptDesc q, l;
  build_preset("qwen-tiny", &q);
  build_preset("llama-tiny", &l);
  char path[512], bad[512];
  tmp_path("q.safetensors", path);
  tmp_path("bad.safetensors", bad);
  float* p = random_params(&q, 3);
  float* r = malloc(q.n_params * sizeof(float));
  CHECK(safetensors_save(path, &q, p) == 0);
  Tws ws;
  tws_read(path, &ws);
  Tw* emb = tws_find(&ws, "model.embed_tokens.weight");
  ws.t[ws.n] = *emb;
  snprintf(ws.t[ws.n].name, sizeof ws.t[0].name, "lm_head.weight");
  ws.t[ws.n].data = malloc(emb->bytes);
  memcpy(ws.t[ws.n++].data, emb->data, emb->bytes);
  tws_write(&ws, bad, NULL, 1);
  CHECK_MSG(safetensors_load(bad, &q, r) == 0 && same_but_padding(&q, p, r), "%s", osdp_last_error());
  ws.t[ws.n - 1].data[7] ^= 0x40;
  tws_write(&ws, bad, NULL, 1);
  check_refused(&q, bad, "'lm_head.weight' differs from 'model.embed_tokens.weight'", NULL);
  tws_free(&ws);
  /* The untied model's own file: without lm_head.weight (its own tensor there) it is refused. */
  float* pl = random_params(&l, 4);
  CHECK(safetensors_save(path, &l, pl) == 0);
  tws_read(path, &ws);
  int pick[MAX_TW];
  for (int i = 0; i < ws.n; i++) pick[i] = strcmp(ws.t[i].name, "lm_head.weight") != 0;
  tws_write(&ws, bad, pick, 1);
  check_refused(&l, bad, "has no tensor 'lm_head.weight', which model 'llama-tiny' needs", NULL);
  CHECK(strstr(osdp_last_error(), "(nor") == NULL);
  /* Names and shapes. */
  Tw* o = tws_find(&ws, "model.layers.0.mlp.gate_proj.weight");
  double s0 = o->shape[0];
  o->shape[0] = o->shape[1];
  o->shape[1] = s0;
  tws_write(&ws, bad, NULL, 1);
  check_refused(&l, bad, "'model.layers.0.mlp.gate_proj.weight' has shape [64, 128] but model "
                "'llama-tiny' needs [128, 64]", NULL);
  o->shape[1] = o->shape[0];
  o->shape[0] = s0;
  Tw* k = tws_find(&ws, "model.layers.1.self_attn.k_proj.weight");
  k->shape[0] = 16;
  k->shape[1] = 64 * 2;
  tws_write(&ws, bad, NULL, 1);
  check_refused(&l, bad, "'model.layers.1.self_attn.k_proj.weight' has shape [16, 128] but model "
                "'llama-tiny' needs [32, 64]", NULL);
  k->shape[0] = 32;
  k->shape[1] = 64;
  static const char* const extra[][2] = {
      {"model.layers.0.self_attn.q_norm.weight", "not part of a Llama model"},
      {"model.layers.2.input_layernorm.weight", "has 2 layers"},
      {"model.layers.0.self_attn.o_proj.bias", "not part of a Llama model"},
      {"transformer.wte.weight", "not part of a Llama model"},
  };
  for (int e = 0; e < 4; e++) {
    Tw* t = &ws.t[ws.n];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", extra[e][0]);
    snprintf(t->dtype, sizeof t->dtype, "F32");
    t->nd = 1;
    t->shape[0] = 1;
    t->bytes = 4;
    t->data = calloc(1, 4);
    ws.n++;
    tws_write(&ws, bad, NULL, 1);
    check_refused(&l, bad, extra[e][0], extra[e][1]);
    free(t->data);
    ws.n--;
  }
  /* The rotary buffers old checkpoints carry are ignored. */
  Tw* t = &ws.t[ws.n++];
  memset(t, 0, sizeof *t);
  snprintf(t->name, sizeof t->name, "model.layers.1.self_attn.rotary_emb.inv_freq");
  snprintf(t->dtype, sizeof t->dtype, "F32");
  t->nd = 1;
  t->shape[0] = 8;
  t->bytes = 32;
  t->data = calloc(1, 32);
  tws_write(&ws, bad, NULL, 1);
  float* rl = malloc(l.n_params * sizeof(float));
  CHECK_MSG(safetensors_load(bad, &l, rl) == 0 && same_but_padding(&l, pl, rl), "%s", osdp_last_error());
  /* The metadata's config must be the model's, key by key (rope_theta changes no shape). */
  GptDesc l2;
  GptConfig c2 = l.cfg;
  c2.rope_theta = 500000;
  CHECK(gpt_desc_build(&l2, &c2) == 0);
  check_refused(&l2, path, "__metadata__.rope_theta=10000 but model 'llama-tiny' has rope_theta=500000", NULL);
  gpt_desc_free(&l2);
  tws_free(&ws);
  remove(path);
  remove(bad);
  free(p);
  free(r);
  free(pl);
  free(rl);
  gpt_desc_free(&q);
  gpt_desc_free(&l);
}

/* ------------------------------------------------------------------------------------ */
/* BF16 and F16                                                                          */
/* ------------------------------------------------------------------------------------ */

/* A bfloat16 decoded by its definition (sign, 8-bit exponent, 7-bit fraction). */
static float bf16_ref(uint16_t h) {
  int s = h >> 15, e = (h >> 7) & 0xff, m = h & 0x7f;
  double v = e == 0xff ? (m ? NAN : INFINITY) : e ? ldexp(1.0 + m / 128.0, e - 127) : ldexp(m, -133);
  return (float)(s ? -v : v);
}

/* An IEEE half decoded by its definition (sign, 5-bit exponent, 10-bit fraction). */
static float f16_ref(uint16_t h) {
  int s = h >> 15, e = (h >> 10) & 0x1f, m = h & 0x3ff;
  double v = e == 0x1f ? (m ? NAN : INFINITY) : e ? ldexp(1.0 + m / 1024.0, e - 15) : ldexp(m, -24);
  return (float)(s ? -v : v);
}

/* The first element index of the tensor being converted, so that consecutive tensors carry
** consecutive patterns. */
static size_t pattern_base;

/* Every 16-bit pattern once per 65536 consecutive elements (40503 is odd: a permutation). */
static uint16_t all_patterns(size_t k, const float* v) {
  (void)v;
  return (uint16_t)((pattern_base + k) * 40503u);
}

/* A float's high half: its bfloat16 when its low half is 0. */
static uint16_t bf16_high(size_t k, const float* v) {
  (void)k;
  uint32_t u;
  memcpy(&u, v, 4);
  return (uint16_t)(u >> 16);
}

/* Every tensor of a model as 16-bit `dtype` holding all_patterns loads as the reference
** decoder's values (NaN as NaN, everything else bitwise), and mixed F32/16-bit files load. */
static void test_half(const char* dtype, float (*ref)(uint16_t)) {
  GptConfig c;
  CHECK(gpt_config_load("tiny", &c) == 0); /* wte [256, 64]: 16384 patterns, fc [64, 256] */
  GptDesc d;
  CHECK(gpt_desc_build(&d, &c) == 0);
  float* p = random_params(&d, 9);
  char f32[512], half[512], want[512];
  tmp_path("f32.safetensors", f32);
  tmp_path("half.safetensors", half);
  tmp_path("want.safetensors", want);
  CHECK(safetensors_save(f32, &d, p) == 0);
  Tws ws, wf;
  tws_read(f32, &ws);
  tws_read(f32, &wf);
  pattern_base = 0;
  for (int i = 0; i < ws.n; i++) {
    tw_to16(&ws.t[i], dtype, all_patterns);
    for (size_t k = 0; k < wf.t[i].bytes / 4; k++) ((float*)wf.t[i].data)[k] = ref(all_patterns(k, NULL));
    pattern_base += wf.t[i].bytes / 4;
  }
  CHECK(pattern_base >= 65536);
  tws_write(&ws, half, NULL, 1);
  tws_write(&wf, want, NULL, 1);
  float* a = malloc(d.n_params * sizeof(float));
  float* b = malloc(d.n_params * sizeof(float));
  CHECK_MSG(safetensors_load(want, &d, a) == 0, "%s", osdp_last_error());
  CHECK_MSG(safetensors_load(half, &d, b) == 0, "%s: %s", dtype, osdp_last_error());
  size_t bad = 0, nans = 0;
  for (size_t i = 0; i < d.n_params; i++) {
    nans += isnan(a[i]);
    bad += isnan(a[i]) ? !isnan(b[i]) : memcmp(&a[i], &b[i], 4) != 0;
  }
  CHECK_MSG(bad == 0 && nans > 0, "%s: %zu values differ from the reference decoder", dtype, bad);
  /* Half the tensors F32, half 16-bit. */
  for (int i = 0; i < ws.n; i += 2) {
    free(ws.t[i].data);
    ws.t[i] = wf.t[i];
    wf.t[i].data = NULL;
  }
  tws_write(&ws, half, NULL, 1);
  CHECK_MSG(safetensors_load(half, &d, b) == 0, "%s", osdp_last_error());
  bad = 0;
  for (size_t i = 0; i < d.n_params; i++) bad += isnan(a[i]) ? !isnan(b[i]) : memcmp(&a[i], &b[i], 4) != 0;
  CHECK_MSG(bad == 0, "mixed %s: %zu values differ", dtype, bad);
  tws_free(&ws);
  tws_free(&wf);
  remove(f32);
  remove(half);
  remove(want);
  free(p);
  free(a);
  free(b);
  gpt_desc_free(&d);
}

/* ------------------------------------------------------------------------------------ */
/* Sharded checkpoints                                                                   */
/* ------------------------------------------------------------------------------------ */

/* Writes DIR/model-0000{s+1}-of-00003.safetensors from the tensors i of ws with i % 3 == s (an
** `except` tensor left out of every shard), no metadata, as the Hub's shards. */
static void write_shards(const Tws* ws, const char* dir, const char* except) {
  for (int s = 0; s < 3; s++) {
    int pick[MAX_TW];
    for (int i = 0; i < ws->n; i++) pick[i] = i % 3 == s && (!except || strcmp(ws->t[i].name, except));
    char path[600];
    snprintf(path, sizeof path, "%s/model-%05d-of-00003.safetensors", dir, s + 1);
    tws_write(ws, path, pick, 0);
  }
}

/* The index of write_shards' shards as JSON text (the caller frees it): every tensor but
** `except`, tensor `moved` mapped to the next shard instead, `extra` added to shard 1. */
static char* index_json(const Tws* ws, const char* except, const char* moved, const char* extra) {
  cJSON* root = cJSON_CreateObject();
  cJSON* meta = cJSON_AddObjectToObject(root, "metadata");
  cJSON_AddNumberToObject(meta, "total_size", 12345);
  cJSON* map = cJSON_AddObjectToObject(root, "weight_map");
  for (int i = 0; i < ws->n; i++) {
    if (except && strcmp(ws->t[i].name, except) == 0) continue;
    int s = i % 3 + (moved && strcmp(ws->t[i].name, moved) == 0);
    char shard[64];
    snprintf(shard, sizeof shard, "model-%05d-of-00003.safetensors", s % 3 + 1);
    cJSON_AddStringToObject(map, ws->t[i].name, shard);
  }
  if (extra) cJSON_AddStringToObject(map, extra, "model-00001-of-00003.safetensors");
  char* text = cJSON_Print(root);
  cJSON_Delete(root);
  return text;
}

/* Writes text to path. */
static void put_text(const char* path, const char* text) { write_file(path, text, strlen(text)); }

/* A sharded llama-tiny loads bitwise through the directory, the index and weights_load; its
** config comes from config.json; every disagreement between index and shards is refused. */
static void test_shards(void) {
  GptDesc d;
  build_preset("llama-tiny", &d);
  float* p = random_params(&d, 21);
  float* q = malloc(d.n_params * sizeof(float));
  char one[512], dir[512], index[600], cfg[600], shard1[600];
  tmp_path("one.safetensors", one);
  tmp_path("llama-sharded", dir);
  snprintf(index, sizeof index, "%s/model.safetensors.index.json", dir);
  snprintf(cfg, sizeof cfg, "%s/config.json", dir);
  snprintf(shard1, sizeof shard1, "%s/model-00001-of-00003.safetensors", dir);
  CHECK(mkdir(dir, 0755) == 0);
  CHECK(safetensors_save(one, &d, p) == 0);
  Tws ws;
  tws_read(one, &ws);
  write_shards(&ws, dir, NULL);
  char* text = index_json(&ws, NULL, NULL, NULL);
  put_text(index, text);
  free(text);
  CHECK(hf_config_write(&d.cfg, cfg) == 0);
  const char* paths[] = {dir, index};
  for (int k = 0; k < 2; k++) {
    memset(q, 0x5a, d.n_params * sizeof(float));
    CHECK_MSG(weights_load(paths[k], &d, q) == 0 && same_but_padding(&d, p, q), "%s: %s", paths[k],
              osdp_last_error());
    GptConfig got;
    CHECK_MSG(weights_read_config(paths[k], &got) == 0 && same_model(got, d.cfg), "%s", osdp_last_error());
    CHECK(strcmp(got.name, "llama-tiny") == 0); /* config.json's _name_or_path */
  }
  /* A directory holding one model.safetensors (no index) loads too, the index first when both. */
  char single[600];
  snprintf(single, sizeof single, "%s/model.safetensors", dir);
  tws_write(&ws, single, NULL, 0);
  remove(index);
  CHECK_MSG(safetensors_load(dir, &d, q) == 0 && same_but_padding(&d, p, q), "%s", osdp_last_error());
  remove(single);
  /* BF16 shards: values bf16 holds exactly, loaded as the F32 file of the same values. */
  Tws wb;
  tws_read(one, &wb);
  for (int i = 0; i < wb.n; i++)
    for (size_t e = 0; e < wb.t[i].bytes / 4; e++) {
      uint32_t u;
      memcpy(&u, (float*)wb.t[i].data + e, 4);
      u &= 0xffff0000u;
      memcpy((float*)wb.t[i].data + e, &u, 4);
    }
  char exact[512];
  tmp_path("exact.safetensors", exact);
  tws_write(&wb, exact, NULL, 1);
  float* pb = malloc(d.n_params * sizeof(float));
  CHECK(safetensors_load(exact, &d, pb) == 0);
  for (int i = 0; i < wb.n; i++) tw_to16(&wb.t[i], "BF16", bf16_high);
  write_shards(&wb, dir, NULL);
  text = index_json(&wb, NULL, NULL, NULL);
  put_text(index, text);
  free(text);
  CHECK_MSG(safetensors_load(dir, &d, q) == 0 && same_but_padding(&d, pb, q), "%s", osdp_last_error());
  remove(exact);
  tws_free(&wb);
  free(pb);

  /* Refusals, one line each naming the file, params untouched. */
  text = index_json(&ws, "model.norm.weight", NULL, NULL);
  write_shards(&ws, dir, "model.norm.weight");
  put_text(index, text);
  free(text);
  check_refused(&d, dir, index, "has no tensor 'model.norm.weight', which model 'llama-tiny' needs");
  write_shards(&ws, dir, NULL);
  check_refused(&d, dir, "shard", "model.norm.weight', which index");
  CHECK(strstr(osdp_last_error(), "does not list") != NULL);
  text = index_json(&ws, NULL, "model.norm.weight", NULL);
  put_text(index, text);
  free(text);
  check_refused(&d, index, "maps tensor 'model.norm.weight' to shard", "which has no such tensor");
  text = index_json(&ws, NULL, NULL, "model.layers.0.mlp.gate_proj.bias");
  put_text(index, text);
  free(text);
  check_refused(&d, index, "maps tensor 'model.layers.0.mlp.gate_proj.bias'", "which has no such tensor");
  text = index_json(&ws, NULL, NULL, NULL);
  put_text(index, text);
  free(text);
  CHECK(rename(shard1, one) == 0);
  check_refused(&d, dir, "to shard 'model-00001-of-00003.safetensors', which is missing", shard1);
  CHECK(rename(one, shard1) == 0);
  /* A tensor in two shards (mapped to one of them). */
  {
    int pick[MAX_TW] = {0};
    pick[0] = pick[1] = 1; /* tensor 1 belongs to shard 2 */
    char s1[600];
    snprintf(s1, sizeof s1, "%s/model-00001-of-00003.safetensors", dir);
    for (int i = 0; i < ws.n; i++) pick[i] |= i % 3 == 0;
    tws_write(&ws, s1, pick, 0);
    check_refused(&d, dir, ws.t[1].name, "which index");
    CHECK(strstr(osdp_last_error(), "maps to shard 'model-00002-of-00003.safetensors'") != NULL);
    write_shards(&ws, dir, NULL);
  }
  /* A truncated shard: the shard's own checks, naming it. */
  {
    size_t size;
    unsigned char* raw = read_file(shard1, &size);
    write_file(shard1, raw, size - 3);
    check_refused(&d, index, shard1, "past the end");
    write_file(shard1, raw, size);
    free(raw);
  }
  /* Malformed index files. */
  static const char* const bad_index[][3] = {
      {"{\"weight_map\": {\"a\": \"model-00001-of-00003.safetensors\",", "is not valid JSON", NULL},
      {"[1, 2]", "no JSON object", NULL},
      {"{\"metadata\": {}}", "no \"weight_map\"", NULL},
      {"{\"weight_map\": []}", "a weight_map that is not an object", NULL},
      {"{\"weight_map\": {}}", "an empty weight_map", NULL},
      {"{\"weight_map\": {\"model.norm.weight\": 3}}", "maps tensor 'model.norm.weight' to a value that is not a string", NULL},
      {"{\"weight_map\": {\"model.norm.weight\": \"../x.safetensors\"}}", "to '../x.safetensors'", "the name of a shard file"},
      {"{\"weight_map\": {\"model.norm.weight\": \"\"}}", "the name of a shard file", NULL},
      {"{\"weight_map\": {\"model.norm.weight\": \"model-00001-of-00003.safetensors\", "
       "\"model.norm.weight\": \"model-00002-of-00003.safetensors\"}}", "maps tensor 'model.norm.weight' twice", NULL},
      {"{\"weight_map\": {\"model.norm.weight\": \"model-00009-of-00009.safetensors\"}}", "which is missing", NULL},
  };
  for (size_t k = 0; k < sizeof bad_index / sizeof bad_index[0]; k++) {
    put_text(index, bad_index[k][0]);
    check_refused(&d, index, bad_index[k][1], bad_index[k][2]);
    CHECK(strstr(osdp_last_error(), index) != NULL);
    osdp_clear_error();
    GptConfig got;
    CHECK_MSG(refused(safetensors_read_config(dir, &got), bad_index[k][1], NULL), "read_config %zu", k);
  }
  /* A directory without weights. */
  remove(index);
  for (int s = 1; s <= 3; s++) {
    char sp[600];
    snprintf(sp, sizeof sp, "%s/model-%05d-of-00003.safetensors", dir, s);
    remove(sp);
  }
  check_refused(&d, dir, "is a directory without model.safetensors or model.safetensors.index.json", NULL);
  remove(cfg);
  rmdir(dir);
  remove(one);
  tws_free(&ws);
  free(p);
  free(q);
  gpt_desc_free(&d);
}

/* ------------------------------------------------------------------------------------ */
/* Configs: metadata, config.json beside the file, GPT-2 tensors                          */
/* ------------------------------------------------------------------------------------ */

/* Where a checkpoint's config comes from, and a directory transformers can load. */
static void test_configs(void) {
  GptDesc l, g;
  build_preset("llama-tiny", &l);
  build_preset("tiny", &g);
  float* p = random_params(&l, 5);
  float* pg = random_params(&g, 6);
  char dir[512], file[600], cfg[600];
  tmp_path("SmolThing", dir);
  snprintf(file, sizeof file, "%s/model.safetensors", dir);
  snprintf(cfg, sizeof cfg, "%s/config.json", dir);
  /* safetensors_save_dir: the directory transformers loads; read back from either file. */
  CHECK_MSG(safetensors_save_dir(dir, &l, p) == 0, "%s", osdp_last_error());
  GptConfig got, hf;
  CHECK(hf_config_load(cfg, &hf) == 1 && same_model(hf, l.cfg));
  CHECK(safetensors_read_config(dir, &got) == 0 && same_model(got, l.cfg) && strcmp(got.name, "SmolThing") == 0);
  CHECK(gpt_config_load(dir, &got) == 0 && same_model(got, l.cfg));
  /* No metadata: config.json gives the config; one that disagrees with the tensors is refused. */
  Tws ws;
  tws_read(file, &ws);
  tws_write(&ws, file, NULL, 0);
  CHECK_MSG(safetensors_read_config(dir, &got) == 0 && same_model(got, l.cfg), "%s", osdp_last_error());
  GptConfig three = l.cfg;
  three.n_layer = 3;
  CHECK(hf_config_write(&three, cfg) == 0);
  osdp_clear_error();
  CHECK(refused(safetensors_read_config(dir, &got), "config.json's n_layer is 3 but its tensors give 2 layers", NULL));
  GptConfig wide = l.cfg;
  wide.vocab_size = 300;
  CHECK(hf_config_write(&wide, cfg) == 0);
  CHECK(refused(safetensors_read_config(file, &got), "config.json's vocab_size is 300 but its tensors give 256", NULL));
  remove(cfg);
  CHECK(refused(safetensors_read_config(file, &got), "Llama-family model", "config.json"));
  /* GPT-2 from the Hub: no metadata; config.json supplies n_head, else it stays unknown. */
  CHECK(safetensors_save(file, &g, pg) == 0);
  tws_free(&ws);
  tws_read(file, &ws);
  tws_write(&ws, file, NULL, 0);
  CHECK(safetensors_read_config(file, &got) == 0 && got.n_head == 0 && got.n_layer == 2);
  CHECK(hf_config_write(&g.cfg, cfg) == 0);
  CHECK_MSG(safetensors_read_config(dir, &got) == 0 && same_model(got, g.cfg), "%s", osdp_last_error());
  /* osdp's metadata wins over config.json; metadata that disagrees with the tensors is refused. */
  tws_write(&ws, file, NULL, 0);
  cJSON_Delete(ws.meta);
  cJSON* m = cJSON_CreateObject();
  cJSON_AddStringToObject(m, "n_layer", "2");
  cJSON_AddStringToObject(m, "n_head", "4");
  cJSON_AddStringToObject(m, "n_embd", "64");
  cJSON_AddStringToObject(m, "vocab_size", "256");
  cJSON_AddStringToObject(m, "max_seq", "128");
  ws.meta = m;
  tws_write(&ws, file, NULL, 1);
  CHECK(refused(safetensors_read_config(dir, &got), "__metadata__.max_seq is 128 but its tensors give 256 wpe rows", NULL));
  cJSON_ReplaceItemInObject(m, "max_seq", cJSON_CreateString("256"));
  cJSON_AddStringToObject(m, "family", "llama");
  tws_write(&ws, file, NULL, 1);
  CHECK(refused(safetensors_read_config(dir, &got), "__metadata__: missing field \"n_kv_head\"", NULL));
  cJSON_DeleteItemFromObject(m, "family");
  cJSON_ReplaceItemInObject(m, "n_head", cJSON_CreateString("four"));
  tws_write(&ws, file, NULL, 1);
  CHECK(refused(safetensors_read_config(dir, &got), "__metadata__.n_head is \"four\", not a number", NULL));
  tws_free(&ws);
  remove(file);
  remove(cfg);
  rmdir(dir);
  /* A file where the directory should be. */
  put_text(dir, "x");
  CHECK(refused(safetensors_save_dir(dir, &l, p), dir, "is not a directory"));
  remove(dir);
  free(p);
  free(pg);
  gpt_desc_free(&l);
  gpt_desc_free(&g);
}

int main(void) {
  snprintf(tmpdir, sizeof tmpdir, "%s/osdp_st_hub_XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
  if (!mkdtemp(tmpdir)) {
    perror("mkdtemp");
    return 1;
  }
  test_llama_round_trip("llama-tiny");
  test_llama_round_trip("qwen-tiny");
  test_llama_heads_and_names();
  test_half("BF16", bf16_ref);
  test_half("F16", f16_ref);
  test_shards();
  test_configs();
  rmdir(tmpdir);
  return check_summary();
}
