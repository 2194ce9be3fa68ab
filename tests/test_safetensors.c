/* test_safetensors.c: tests of safetensors I/O against the format's rules and Hugging Face's
** GPT-2 names: round trips, the header read back independently (names, shapes, offsets,
** alignment, order, values), hand-made malformed files refused with one line naming the file
** and field (params untouched), and atomic saves that leave an old file intact on failure. */
#include "check.h"
#include "core/util.h"
#include "model/gpt.h"
#include "model/gpt2.h"
#include "model/safetensors.h"
#include "model/weights_file.h"

#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

static char tmpdir[256];

/* Path of a file called `name` inside the test's temporary directory. */
static const char* tmp_path(const char* name, char buf[512]) {
  snprintf(buf, 512, "%s/%s", tmpdir, name);
  return buf;
}

/* Whether a path exists (lstat: a dangling symlink counts). */
static int file_exists(const char* path) {
  struct stat st;
  return lstat(path, &st) == 0;
}

/* Writes `size` bytes to `path`; returns 0 on success. */
static int write_file(const char* path, const void* data, size_t size) {
  FILE* f = fopen(path, "wb");
  if (!f) return -1;
  size_t put = size ? fwrite(data, 1, size, f) : 0;
  return fclose(f) == 0 && put == size ? 0 : -1;
}

/* A config from explicit sizes, padded the way llm.c pads (Vp = V rounded up to 128). */
static GptConfig make_config(const char* name, int L, int C, int NH, int V, int maxT) {
  GptConfig c;
  memset(&c, 0, sizeof c);
  snprintf(c.name, sizeof c.name, "%s", name);
  c.n_layer = L; c.n_embd = C; c.n_head = NH;
  c.vocab_size = V; c.padded_vocab = (V + 127) / 128 * 128; c.max_seq = maxT;
  return c;
}

/* Whether element idx of the parameters is one of wte's padded columns (token >= V). */
static int is_padding(const GptDesc* d, size_t idx) {
  size_t Vp = (size_t)d->cfg.padded_vocab;
  return idx < (size_t)d->cfg.n_embd * Vp && idx % Vp >= (size_t)d->cfg.vocab_size;
}

/* Random normal parameters with a few special values (-0, a denormal, inf, NaN) to show the
** round trip is bitwise; the padded columns hold garbage too (they must not be written). */
static float* random_params(const GptDesc* d, uint64_t seed) {
  float* p = malloc(d->n_params * sizeof(float));
  Rng r;
  rng_seed(&r, seed);
  for (size_t i = 0; i < d->n_params; i++) p[i] = (float)rng_normal(&r);
  p[0] = -0.0f;
  p[d->n_params / 2] = 1e-42f;
  p[d->n_params - 1] = INFINITY;
  p[d->n_params - 2] = NAN;
  return p;
}

/* Whether b holds a's values bitwise everywhere except wte's padding, which is 0 in b. */
static int same_but_padding(const GptDesc* d, const float* a, const float* b) {
  size_t bad = 0;
  for (size_t i = 0; i < d->n_params; i++) {
    if (is_padding(d, i)) bad += b[i] != 0.0f || signbit(b[i]);
    else bad += memcmp(&a[i], &b[i], sizeof(float)) != 0;
  }
  if (bad) fprintf(stderr, "  %zu parameters differ\n", bad);
  return bad == 0;
}

/* Saves random params of config c, loads them back, and checks values and the config. */
static void test_round_trip(const GptConfig* c, const char* file) {
  GptDesc d;
  char path[512], tmp[520];
  CHECK(gpt_desc_build(&d, c) == 0);
  float* a = random_params(&d, 7);
  float* b = malloc(d.n_params * sizeof(float));
  memset(b, 0x5a, d.n_params * sizeof(float));
  tmp_path(file, path);
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  CHECK_MSG(safetensors_save(path, &d, a) == 0, "%s", osdp_last_error());
  CHECK(!file_exists(tmp));
  CHECK_MSG(safetensors_load(path, &d, b) == 0, "%s", osdp_last_error());
  CHECK(same_but_padding(&d, a, b));
  GptConfig got;
  CHECK_MSG(safetensors_read_config(path, &got) == 0, "%s", osdp_last_error());
  CHECK(got.n_layer == c->n_layer && got.n_embd == c->n_embd && got.n_head == c->n_head &&
        got.vocab_size == c->vocab_size && got.padded_vocab == c->padded_vocab &&
        got.max_seq == c->max_seq);
  CHECK(strcmp(got.name, file) == 0);
  /* Through the format-neutral interface: detected by content, same result. */
  WeightsFormat fmt = WEIGHTS_LLMC;
  CHECK(weights_detect(path, &fmt) == 0 && fmt == WEIGHTS_SAFETENSORS);
  memset(b, 0x5a, d.n_params * sizeof(float));
  CHECK(weights_load(path, &d, b) == 0 && same_but_padding(&d, a, b));
  /* Saving again over an existing file replaces it. */
  a[1] = 42.0f;
  CHECK(safetensors_save(path, &d, a) == 0);
  CHECK(safetensors_load(path, &d, b) == 0 && b[1] == 42.0f);
  CHECK(!file_exists(tmp));
  remove(path);
  free(a);
  free(b);
  gpt_desc_free(&d);
}

/* ------------------------------------------------------------------------------------ */
/* The file read back without safetensors.c                                              */
/* ------------------------------------------------------------------------------------ */

/* A safetensors file split into its parts. */
typedef struct Parsed {
  unsigned char* raw;
  size_t size;
  uint64_t N;        /* header size */
  cJSON* header;     /* parsed header */
  const unsigned char* buf; /* the data buffer */
  size_t buf_len;
} Parsed;

/* Splits the file at path; returns 0 when its 8-byte size and JSON header parse. */
static int parse_file(const char* path, Parsed* p) {
  memset(p, 0, sizeof *p);
  p->raw = read_file(path, &p->size);
  if (!p->raw || p->size < 8) return -1;
  for (int i = 7; i >= 0; i--) p->N = p->N << 8 | p->raw[i];
  if (p->N > p->size - 8) return -1;
  char* h = malloc(p->N + 1);
  memcpy(h, p->raw + 8, p->N);
  h[p->N] = 0;
  p->header = cJSON_Parse(h);
  free(h);
  p->buf = p->raw + 8 + p->N;
  p->buf_len = p->size - 8 - p->N;
  return p->header ? 0 : -1;
}

/* Frees what parse_file allocated. */
static void parsed_free(Parsed* p) {
  cJSON_Delete(p->header);
  free(p->raw);
}

/* Start of op i's block in osdp's op-block order. */
static size_t block_start(const GptDesc* d, int op) {
  size_t s = 0;
  for (int i = 0; i < op; i++) s += d->ops[i].n_params;
  return s;
}

/* The float at element k of tensor e of the parsed file. */
static float tensor_at(const Parsed* p, const cJSON* e, size_t k) {
  const cJSON* of = cJSON_GetObjectItem(e, "data_offsets");
  size_t b = (size_t)cJSON_GetArrayItem(of, 0)->valuedouble;
  float v;
  memcpy(&v, p->buf + b + 4 * k, 4);
  return v;
}

/* Checks entry e of the header: F32, the shape (d0[, d1]), offsets [at, at + bytes). Returns
** its end offset. */
static size_t check_entry(const cJSON* e, const char* name, int nd, size_t d0, size_t d1, size_t at) {
  CHECK_MSG(e != NULL, "no tensor %s", name);
  if (!e) return at;
  const cJSON* dt = cJSON_GetObjectItem(e, "dtype");
  const cJSON* sh = cJSON_GetObjectItem(e, "shape");
  const cJSON* of = cJSON_GetObjectItem(e, "data_offsets");
  CHECK_MSG(cJSON_IsString(dt) && strcmp(dt->valuestring, "F32") == 0, "%s dtype", name);
  CHECK_MSG(cJSON_GetArraySize(sh) == nd && cJSON_GetArrayItem(sh, 0)->valuedouble == (double)d0 &&
            (nd == 1 || cJSON_GetArrayItem(sh, 1)->valuedouble == (double)d1), "%s shape", name);
  size_t bytes = 4 * d0 * (nd == 2 ? d1 : 1);
  CHECK_MSG(cJSON_GetArraySize(of) == 2 && cJSON_GetArrayItem(of, 0)->valuedouble == (double)at &&
            cJSON_GetArrayItem(of, 1)->valuedouble == (double)(at + bytes), "%s offsets", name);
  return at + bytes;
}

/* Saves params whose every value is its own index, then reads the file as bytes + JSON and
** checks it entry by entry against the safetensors rules and Hugging Face's GPT-2 layout. */
static void test_layout(void) {
  GptConfig c = make_config("layout", 2, 8, 2, 20, 5);
  GptDesc d;
  CHECK(gpt_desc_build(&d, &c) == 0);
  size_t C = 8, V = 20, Vp = 128, maxT = 5, L = 2;
  float* p = malloc(d.n_params * sizeof(float));
  for (size_t i = 0; i < d.n_params; i++) p[i] = (float)i;  /* exact: n_params < 2^24 */
  char path[512];
  tmp_path("layout.safetensors", path);
  CHECK(safetensors_save(path, &d, p) == 0);
  Parsed f;
  CHECK(parse_file(path, &f) == 0);
  if (!f.header) { free(p); gpt_desc_free(&d); parsed_free(&f); return; }
  /* The buffer starts at a multiple of 8; the header is JSON then spaces only. */
  CHECK((8 + f.N) % 8 == 0);
  const char* h = (const char*)f.raw + 8;
  size_t close = f.N;
  while (close > 0 && h[close - 1] == ' ') close--;
  CHECK(close > 0 && h[close - 1] == '}' && f.N - close < 8);
  CHECK(h[0] == '{');
  /* __metadata__: format pt and the shape, all strings. */
  const cJSON* m = cJSON_GetObjectItem(f.header, "__metadata__");
  CHECK(cJSON_IsObject(m));
  for (const cJSON* e = m ? m->child : NULL; e; e = e->next) CHECK(cJSON_IsString(e));
  const char* want_meta[][2] = {{"format", "pt"}, {"n_layer", "2"}, {"n_head", "2"}, {"n_embd", "8"},
                                {"vocab_size", "20"}, {"max_seq", "5"}, {"padded_vocab", "128"}};
  for (size_t k = 0; k < sizeof want_meta / sizeof want_meta[0]; k++) {
    const cJSON* e = cJSON_GetObjectItem(m, want_meta[k][0]);
    CHECK_MSG(cJSON_IsString(e) && strcmp(e->valuestring, want_meta[k][1]) == 0, "metadata %s",
              want_meta[k][0]);
  }
  /* Exactly Hugging Face's names, without the prefix, no lm_head; in model order, contiguous
  ** from 0 and covering the buffer. */
  int ntensors = 0;
  for (const cJSON* e = f.header->child; e; e = e->next) ntensors += strcmp(e->string, "__metadata__") != 0;
  CHECK(ntensors == 2 + 12 * (int)L + 2);
  CHECK(cJSON_GetObjectItem(f.header, "lm_head.weight") == NULL);
  CHECK(cJSON_GetObjectItem(f.header, "transformer.wte.weight") == NULL);
  size_t at = 0;
  const cJSON* wte = cJSON_GetObjectItem(f.header, "wte.weight");
  const cJSON* wpe = cJSON_GetObjectItem(f.header, "wpe.weight");
  at = check_entry(wte, "wte.weight", 2, V, C, at);
  at = check_entry(wpe, "wpe.weight", 2, maxT, C, at);
  /* wte[v][c] = osdp's [C, Vp] entry c*Vp + v: the first V columns, transposed. */
  int bad = 0;
  for (size_t v = 0; v < V; v++)
    for (size_t k = 0; k < C; k++) bad += tensor_at(&f, wte, v * C + k) != (float)(k * Vp + v);
  for (size_t t = 0; t < maxT * C; t++) bad += tensor_at(&f, wpe, t) != (float)(C * Vp + t);
  CHECK(bad == 0);
  static const struct { const char* suffix; int op, nd; size_t d0, d1, within; } lt[] = {
      {"ln_1.weight", GPT_LN1, 1, 8, 0, 0},          {"ln_1.bias", GPT_LN1, 1, 8, 0, 8},
      {"attn.c_attn.weight", GPT_QKV, 2, 8, 24, 0},  {"attn.c_attn.bias", GPT_QKV, 1, 24, 0, 192},
      {"attn.c_proj.weight", GPT_PROJ, 2, 8, 8, 0},  {"attn.c_proj.bias", GPT_PROJ, 1, 8, 0, 64},
      {"ln_2.weight", GPT_LN2, 1, 8, 0, 0},          {"ln_2.bias", GPT_LN2, 1, 8, 0, 8},
      {"mlp.c_fc.weight", GPT_FC, 2, 8, 32, 0},      {"mlp.c_fc.bias", GPT_FC, 1, 32, 0, 256},
      {"mlp.c_proj.weight", GPT_FCPROJ, 2, 32, 8, 0}, {"mlp.c_proj.bias", GPT_FCPROJ, 1, 8, 0, 256},
  };
  for (size_t l = 0; l < L; l++) {
    for (size_t j = 0; j < sizeof lt / sizeof lt[0]; j++) {
      char name[64];
      snprintf(name, sizeof name, "h.%zu.%s", l, lt[j].suffix);
      const cJSON* e = cJSON_GetObjectItem(f.header, name);
      at = check_entry(e, name, lt[j].nd, lt[j].d0, lt[j].d1, at);
      /* Conv1D weights are [in, out] = osdp's block as it is; biases and LayerNorms too. */
      size_t base = block_start(&d, gpt_op_layer((int)l, lt[j].op)) + lt[j].within;
      size_t n = lt[j].d0 * (lt[j].nd == 2 ? lt[j].d1 : 1);
      bad = 0;
      for (size_t k = 0; e && k < n; k++) bad += tensor_at(&f, e, k) != (float)(base + k);
      CHECK_MSG(bad == 0, "%s values", name);
    }
  }
  /* One entry spelled out: h.1.attn.c_attn.weight[i=2][o=17] is qkv's W[2*3C + 17]. */
  const cJSON* qkv1 = cJSON_GetObjectItem(f.header, "h.1.attn.c_attn.weight");
  if (qkv1)
    CHECK(tensor_at(&f, qkv1, 2 * 24 + 17) ==
          (float)(block_start(&d, gpt_op_layer(1, GPT_QKV)) + 2 * 24 + 17));
  const cJSON* lnfw = cJSON_GetObjectItem(f.header, "ln_f.weight");
  const cJSON* lnfb = cJSON_GetObjectItem(f.header, "ln_f.bias");
  at = check_entry(lnfw, "ln_f.weight", 1, C, 0, at);
  at = check_entry(lnfb, "ln_f.bias", 1, C, 0, at);
  size_t lnf = block_start(&d, gpt_op_lnf(&d));
  if (lnfw && lnfb) CHECK(tensor_at(&f, lnfw, 3) == (float)(lnf + 3) && tensor_at(&f, lnfb, 3) == (float)(lnf + C + 3));
  CHECK(at == f.buf_len);
  CHECK(f.size == 8 + f.N + d.n_params * 4 - (Vp - V) * C * 4);
  /* The header's entries appear in model order: wte first, ln_f.bias last. */
  const cJSON* first = f.header->child;
  while (first && strcmp(first->string, "__metadata__") == 0) first = first->next;
  const cJSON* last = f.header->child;
  while (last && last->next) last = last->next;
  CHECK(first && strcmp(first->string, "wte.weight") == 0);
  CHECK(last && strcmp(last->string, "ln_f.bias") == 0);
  parsed_free(&f);
  remove(path);
  free(p);
  gpt_desc_free(&d);
}

/* ------------------------------------------------------------------------------------ */
/* Malformed files                                                                       */
/* ------------------------------------------------------------------------------------ */

/* Whether rc is -1 with a one-line message containing both needles. */
static int refused(int rc, const char* a, const char* b) {
  const char* e = osdp_last_error();
  int ok = rc == -1 && strstr(e, a) && (!b || strstr(e, b)) && !strchr(e, '\n');
  if (!ok) fprintf(stderr, "  rc %d, message '%s' (wanted '%s', '%s')\n", rc, e, a, b ? b : "");
  return ok;
}

/* Writes a safetensors file from header text h (padded with spaces to 8-byte alignment unless
** raw) and the n data bytes of buf. */
static void write_st(const char* path, const char* h, const void* buf, size_t n, int raw) {
  size_t N = strlen(h), pad = raw ? 0 : (8 - (8 + N) % 8) % 8;
  unsigned char* out = malloc(8 + N + pad + n + 1);
  uint64_t NN = N + pad;
  for (int i = 0; i < 8; i++) out[i] = (unsigned char)(NN >> (8 * i));
  memcpy(out + 8, h, N);
  memset(out + 8 + N, ' ', pad);
  if (n) memcpy(out + 8 + N + pad, buf, n);
  CHECK(write_file(path, out, 8 + N + pad + n) == 0);
  free(out);
}

/* Writes header object j (serialised) with the data buffer of the good file g, cut or
** extended to buf_len + delta bytes. */
static void write_json(const char* path, const cJSON* j, const Parsed* g, long delta) {
  char* h = cJSON_PrintUnformatted(j);
  size_t n = (size_t)((long)g->buf_len + delta);
  unsigned char* buf = calloc(1, n + 1);
  memcpy(buf, g->buf, n < g->buf_len ? n : g->buf_len);
  write_st(path, h, buf, n, 0);
  free(buf);
  free(h);
}

/* The test's bad file loads with -1, a one-line error naming the file and `what`, and leaves
** params as they were. */
static void check_refused(const GptDesc* d, const char* path, const char* what, const char* what2) {
  float* p = malloc(d->n_params * sizeof(float));
  memset(p, 0x5a, d->n_params * sizeof(float));
  unsigned char* before = malloc(d->n_params * sizeof(float));
  memcpy(before, p, d->n_params * sizeof(float));
  osdp_clear_error();
  CHECK_MSG(refused(safetensors_load(path, d, p), path, what) && (!what2 || strstr(osdp_last_error(), what2)),
            "%s", what);
  CHECK(memcmp(before, p, d->n_params * sizeof(float)) == 0);
  free(p);
  free(before);
}

/* A copy of the good header with tensor `name`'s field `key` set to the number array a[0..n). */
static cJSON* with_array(const Parsed* g, const char* name, const char* key, const double* a, int n) {
  cJSON* j = cJSON_Duplicate(g->header, 1);
  cJSON* e = cJSON_GetObjectItem(j, name);
  cJSON* arr = cJSON_CreateArray();
  for (int k = 0; k < n; k++) cJSON_AddItemToArray(arr, cJSON_CreateNumber(a[k]));
  cJSON_ReplaceItemInObject(e, key, arr);
  return j;
}

/* The offsets of tensor `name` in the good header. */
static void offsets_of(const Parsed* g, const char* name, double* b, double* e) {
  const cJSON* of = cJSON_GetObjectItem(cJSON_GetObjectItem(g->header, name), "data_offsets");
  *b = cJSON_GetArrayItem(of, 0)->valuedouble;
  *e = cJSON_GetArrayItem(of, 1)->valuedouble;
}

/* Every kind of bad file is refused with a one-line message naming the file and the field. */
static void test_refusals(void) {
  GptConfig c = make_config("tiny3", 2, 16, 4, 40, 8);
  GptDesc d;
  CHECK(gpt_desc_build(&d, &c) == 0);
  float* p = random_params(&d, 3);
  char good_path[512], path[512];
  tmp_path("good.st", good_path);
  tmp_path("bad.st", path);
  CHECK(safetensors_save(good_path, &d, p) == 0);
  Parsed g;
  CHECK(parse_file(good_path, &g) == 0);
  if (!g.header) { parsed_free(&g); free(p); gpt_desc_free(&d); return; }

  /* Sizes: shorter than the size field, header size past the end or over the limit, data cut
  ** short, trailing data. */
  CHECK(write_file(path, g.raw, 5) == 0);
  check_refused(&d, path, "shorter than the 8-byte header size", NULL);
  unsigned char* raw = malloc(g.size);
  memcpy(raw, g.raw, g.size);
  raw[5] = 1; /* N += 2^40 */
  CHECK(write_file(path, raw, g.size) == 0);
  check_refused(&d, path, "header size 10995116", "larger than the");
  memcpy(raw, g.raw, 8);
  CHECK(write_file(path, raw, 8 + (size_t)g.N - 3) == 0);
  check_refused(&d, path, "header size", "truncated");
  CHECK(write_file(path, raw, g.size - 4) == 0);
  check_refused(&d, path, "ln_f.bias", "past the end");
  {
    /* Over the header limit in a file large enough to hold it (sparse: costs no disk). */
    uint64_t N = SAFETENSORS_MAX_HEADER + 8;
    unsigned char n8[8];
    for (int i = 0; i < 8; i++) n8[i] = (unsigned char)(N >> (8 * i));
    CHECK(write_file(path, n8, 8) == 0);
    CHECK(truncate(path, (off_t)(N + 64)) == 0);
    check_refused(&d, path, "header size 100000008", "limit");
  }
  write_json(path, g.header, &g, 8);
  check_refused(&d, path, "trailing data", NULL);

  /* Offsets: past the end, overlapping, leaving a gap, end before begin, not integers. */
  double b, e;
  offsets_of(&g, "h.0.ln_1.bias", &b, &e);
  double off[2] = {b, e + (double)g.buf_len};
  cJSON* j = with_array(&g, "h.0.ln_1.bias", "data_offsets", off, 2);
  write_json(path, j, &g, 0);
  cJSON_Delete(j);
  check_refused(&d, path, "h.0.ln_1.bias", "past the end");
  off[0] = b - 8; off[1] = e - 8;
  j = with_array(&g, "h.0.ln_1.bias", "data_offsets", off, 2);
  write_json(path, j, &g, 0);
  cJSON_Delete(j);
  check_refused(&d, path, "overlaps", "h.0.ln_1.bias");
  off[0] = b + 8; off[1] = e + 8;
  j = with_array(&g, "h.0.ln_1.bias", "data_offsets", off, 2);
  write_json(path, j, &g, 0);
  cJSON_Delete(j);
  check_refused(&d, path, "h.0.ln_1.bias", "leaving bytes");
  off[0] = e; off[1] = b;
  j = with_array(&g, "h.0.ln_1.bias", "data_offsets", off, 2);
  write_json(path, j, &g, 0);
  cJSON_Delete(j);
  check_refused(&d, path, "end before begin", NULL);
  off[0] = b + 0.5; off[1] = e;
  j = with_array(&g, "h.0.ln_1.bias", "data_offsets", off, 2);
  write_json(path, j, &g, 0);
  cJSON_Delete(j);
  check_refused(&d, path, "data_offsets", "non-negative integers");
  off[0] = -1;
  j = with_array(&g, "h.0.ln_1.bias", "data_offsets", off, 1);
  write_json(path, j, &g, 0);
  cJSON_Delete(j);
  check_refused(&d, path, "data_offsets", "non-negative integers");

  /* dtypes: a smaller one (sizes disagree), an unknown one, a 4-byte one that is not F32. */
  const char* dts[][2] = {{"F16", "need 32 bytes"}, {"F33", "not a safetensors dtype"},
                          {"I32", "osdp reads F32, BF16 and F16 tensors"}};
  for (int k = 0; k < 3; k++) {
    j = cJSON_Duplicate(g.header, 1);
    cJSON_ReplaceItemInObject(cJSON_GetObjectItem(j, "h.1.ln_2.weight"), "dtype", cJSON_CreateString(dts[k][0]));
    write_json(path, j, &g, 0);
    cJSON_Delete(j);
    check_refused(&d, path, "h.1.ln_2.weight", dts[k][1]);
  }
  /* Shapes: transposed (same bytes), a product that disagrees with the bytes, negative. */
  double sh[2] = {48, 16};
  j = with_array(&g, "h.0.attn.c_attn.weight", "shape", sh, 2);
  write_json(path, j, &g, 0);
  cJSON_Delete(j);
  check_refused(&d, path, "h.0.attn.c_attn.weight", "has shape [48, 16] but model 'tiny3' needs [16, 48]");
  sh[0] = 16; sh[1] = 49;
  j = with_array(&g, "h.0.attn.c_attn.weight", "shape", sh, 2);
  write_json(path, j, &g, 0);
  cJSON_Delete(j);
  check_refused(&d, path, "h.0.attn.c_attn.weight", "need 3136 bytes");
  sh[0] = -16;
  j = with_array(&g, "h.0.attn.c_attn.weight", "shape", sh, 2);
  write_json(path, j, &g, 0);
  cJSON_Delete(j);
  check_refused(&d, path, "shape[0]", NULL);
  /* A model of another shape. */
  GptConfig c2 = make_config("other", 2, 16, 4, 41, 8);
  GptDesc d2;
  CHECK(gpt_desc_build(&d2, &c2) == 0);
  check_refused(&d2, good_path, "wte.weight", "has shape [40, 16] but model 'other' needs [41, 16]");
  gpt_desc_free(&d2);
  GptConfig c3 = make_config("heads", 2, 16, 2, 40, 8);
  CHECK(gpt_desc_build(&d2, &c3) == 0);
  check_refused(&d2, good_path, "n_head=4", "n_head=2");
  gpt_desc_free(&d2);

  /* Names: missing, unknown, beyond the model's layers, twice (with and without the prefix),
  ** the same key twice in the JSON. */
  j = cJSON_Duplicate(g.header, 1);
  cJSON_DeleteItemFromObject(j, "ln_f.bias");
  write_json(path, j, &g, -4 * 16);
  cJSON_Delete(j);
  check_refused(&d, path, "has no tensor 'ln_f.bias'", NULL);
  const char* extra[][2] = {{"foo.weight", "not part of a GPT-2 model"},
                            {"h.2.ln_1.weight", "has 2 layers"},
                            {"transformer.ln_f.bias", "twice"},
                            {"h.0.attn.c_attn.weights", "not part of a GPT-2 model"},
                            {"h.00.ln_1.weight", "not part of a GPT-2 model"}};
  for (int k = 0; k < 5; k++) {
    j = cJSON_Duplicate(g.header, 1);
    cJSON* t = cJSON_CreateObject();
    cJSON_AddStringToObject(t, "dtype", "F32");
    cJSON_AddItemToObject(t, "shape", cJSON_CreateArray());
    cJSON_AddItemToArray(cJSON_GetObjectItem(t, "shape"), cJSON_CreateNumber(0));
    double end = (double)g.buf_len, o2[2] = {end, end};
    cJSON* oa = cJSON_CreateArray();
    for (int q = 0; q < 2; q++) cJSON_AddItemToArray(oa, cJSON_CreateNumber(o2[q]));
    cJSON_AddItemToObject(t, "data_offsets", oa);
    cJSON_AddItemToObject(j, extra[k][0], t);
    write_json(path, j, &g, 0);
    cJSON_Delete(j);
    check_refused(&d, path, extra[k][0], extra[k][1]);
  }
  {
    char* h = cJSON_PrintUnformatted(g.header);
    size_t n = strlen(h);
    const char* dup = ",\"wpe.weight\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]}}";
    char* h2 = malloc(n + strlen(dup) + 1);
    memcpy(h2, h, n - 1);
    strcpy(h2 + n - 1, dup);
    write_st(path, h2, g.buf, g.buf_len, 0);
    check_refused(&d, path, "'wpe.weight' appears twice", NULL);
    free(h2);
    free(h);
  }

  /* Header text: not JSON, not starting with '{', invalid UTF-8, a NUL byte, metadata that
  ** is not a string or disagrees with the tensors. */
  write_st(path, "{\"wte.weight\": [", g.buf, g.buf_len, 0);
  check_refused(&d, path, "not valid JSON", NULL);
  write_st(path, " {}", g.buf, g.buf_len, 1);
  check_refused(&d, path, "does not start with '{'", NULL);
  write_st(path, "{\"w\xff\":{}}", g.buf, g.buf_len, 0);
  check_refused(&d, path, "not valid UTF-8", NULL);
  write_st(path, "{\"w\xc0\xaf\":{}}", g.buf, g.buf_len, 0); /* overlong '/' */
  check_refused(&d, path, "not valid UTF-8", NULL);
  {
    /* The JSON padded with NUL bytes instead of spaces. */
    char* h = cJSON_PrintUnformatted(g.header);
    size_t n = strlen(h), N = (8 + n + 8 + 7) / 8 * 8 - 8; /* at least 8 NULs */
    unsigned char* out = calloc(1, 8 + N + g.buf_len);
    for (int i = 0; i < 8; i++) out[i] = (unsigned char)((uint64_t)N >> (8 * i));
    memcpy(out + 8, h, n);
    memcpy(out + 8 + N, g.buf, g.buf_len);
    CHECK(write_file(path, out, 8 + N + g.buf_len) == 0);
    check_refused(&d, path, "NUL byte", NULL);
    free(out);
    free(h);
  }
  j = cJSON_Duplicate(g.header, 1);
  cJSON_AddNumberToObject(cJSON_GetObjectItem(j, "__metadata__"), "epoch", 3);
  write_json(path, j, &g, 0);
  cJSON_Delete(j);
  check_refused(&d, path, "__metadata__.epoch is not a string", NULL);
  j = cJSON_Duplicate(g.header, 1);
  cJSON_ReplaceItemInObject(cJSON_GetObjectItem(j, "__metadata__"), "n_layer", cJSON_CreateString("3"));
  write_json(path, j, &g, 0);
  cJSON_Delete(j);
  GptConfig got;
  CHECK(refused(safetensors_read_config(path, &got), path, "__metadata__.n_layer is 3"));
  j = cJSON_Duplicate(g.header, 1);
  cJSON_ReplaceItemInObject(cJSON_GetObjectItem(j, "__metadata__"), "n_head", cJSON_CreateString("four"));
  write_json(path, j, &g, 0);
  cJSON_Delete(j);
  check_refused(&d, path, "__metadata__.n_head is \"four\"", NULL);
  j = cJSON_Duplicate(g.header, 1);
  cJSON_ReplaceItemInObject(j, "wte.weight", cJSON_CreateString("x"));
  write_json(path, j, &g, 0);
  cJSON_Delete(j);
  check_refused(&d, path, "'wte.weight' is not an object", NULL);

  /* An untied lm_head (differs from wte) is refused. */
  {
    double wb, we;
    offsets_of(&g, "wte.weight", &wb, &we);
    size_t n = (size_t)(we - wb);
    j = cJSON_Duplicate(g.header, 1);
    cJSON* t = cJSON_Duplicate(cJSON_GetObjectItem(j, "wte.weight"), 1);
    double o2[2] = {(double)g.buf_len, (double)(g.buf_len + n)};
    cJSON_ReplaceItemInObject(t, "data_offsets", cJSON_CreateDoubleArray(o2, 2));
    cJSON_AddItemToObject(j, "lm_head.weight", t);
    char* h = cJSON_PrintUnformatted(j);
    unsigned char* buf = malloc(g.buf_len + n);
    memcpy(buf, g.buf, g.buf_len);
    memcpy(buf + g.buf_len, g.buf + (size_t)wb, n);
    buf[g.buf_len + 5] ^= 1;
    write_st(path, h, buf, g.buf_len + n, 0);
    check_refused(&d, path, "lm_head.weight", "differs from 'wte.weight'");
    free(buf);
    free(h);
    cJSON_Delete(j);
  }

  /* Missing file, a directory. */
  tmp_path("missing.st", path);
  check_refused(&d, path, "cannot open", NULL);
  CHECK(refused(safetensors_read_config(path, &got), path, "cannot open"));
  check_refused(&d, tmpdir, "is a directory without model.safetensors", NULL);

  tmp_path("bad.st", path);
  remove(path);
  remove(good_path);
  free(raw);
  parsed_free(&g);
  free(p);
  gpt_desc_free(&d);
}

/* Files written by others: "transformer."-prefixed names, the attention-mask buffers, a tied
** lm_head.weight, no osdp metadata (n_head unknown), tensors in another order. All load. */
static void test_foreign_files(void) {
  GptConfig c = make_config("foreign", 2, 16, 4, 40, 8);
  GptDesc d;
  CHECK(gpt_desc_build(&d, &c) == 0);
  float* p = random_params(&d, 5);
  float* q = malloc(d.n_params * sizeof(float));
  char good_path[512], path[512];
  tmp_path("good.st", good_path);
  tmp_path("foreign.st", path);
  CHECK(safetensors_save(good_path, &d, p) == 0);
  Parsed g;
  CHECK(parse_file(good_path, &g) == 0);
  if (!g.header) { parsed_free(&g); free(p); free(q); gpt_desc_free(&d); return; }
  /* Rebuild the file: no metadata, every tensor prefixed, in reverse order of both the header
  ** and the buffer, plus h.{i}.attn.bias (U8 masks) and a tied lm_head.weight. */
  cJSON* j = cJSON_CreateObject();
  size_t cap = g.buf_len * 2 + 1024, at = 0;
  unsigned char* buf = calloc(1, cap);
  const cJSON* entries[64];
  int ne = 0;
  for (const cJSON* e = g.header->child; e && ne < 64; e = e->next)
    if (strcmp(e->string, "__metadata__") != 0) entries[ne++] = e;
  CHECK(ne == 2 + 12 * 2 + 2);
  for (int k = ne - 1; k >= 0; k--) {
    const cJSON* e = entries[k];
    double b, en;
    offsets_of(&g, e->string, &b, &en);
    cJSON* t = cJSON_Duplicate(e, 1);
    double o2[2] = {(double)at, (double)at + (en - b)};
    cJSON_ReplaceItemInObject(t, "data_offsets", cJSON_CreateDoubleArray(o2, 2));
    memcpy(buf + at, g.buf + (size_t)b, (size_t)(en - b));
    at += (size_t)(en - b);
    char name[96];
    snprintf(name, sizeof name, "transformer.%s", e->string);
    cJSON_AddItemToObject(j, name, t);
    if (strcmp(e->string, "wte.weight") == 0) {
      cJSON* lm = cJSON_Duplicate(t, 1);
      double o3[2] = {(double)at, (double)at + (en - b)};
      cJSON_ReplaceItemInObject(lm, "data_offsets", cJSON_CreateDoubleArray(o3, 2));
      memcpy(buf + at, g.buf + (size_t)b, (size_t)(en - b));
      at += (size_t)(en - b);
      cJSON_AddItemToObject(j, "lm_head.weight", lm);
    }
  }
  for (int l = 0; l < 2; l++) {
    char name[64];
    snprintf(name, sizeof name, "transformer.h.%d.attn.bias", l);
    cJSON* t = cJSON_CreateObject();
    cJSON_AddStringToObject(t, "dtype", "U8");
    int dims[4] = {1, 1, 8, 8};
    cJSON_AddItemToObject(t, "shape", cJSON_CreateIntArray(dims, 4));
    double o2[2] = {(double)at, (double)at + 64};
    cJSON_AddItemToObject(t, "data_offsets", cJSON_CreateDoubleArray(o2, 2));
    memset(buf + at, 1, 64);
    at += 64;
    cJSON_AddItemToObject(j, name, t);
  }
  char* h = cJSON_PrintUnformatted(j);
  write_st(path, h, buf, at, 1); /* unpadded: alignment is not required of others' files */
  free(h);
  cJSON_Delete(j);
  free(buf);
  memset(q, 0x5a, d.n_params * sizeof(float));
  CHECK_MSG(safetensors_load(path, &d, q) == 0, "%s", osdp_last_error());
  CHECK(same_but_padding(&d, p, q));
  GptConfig got;
  CHECK_MSG(safetensors_read_config(path, &got) == 0, "%s", osdp_last_error());
  CHECK(got.n_layer == 2 && got.n_embd == 16 && got.n_head == 0 && got.vocab_size == 40 &&
        got.max_seq == 8 && got.padded_vocab == 128);
  CHECK(weights_read_config(path, &got) == 0 && got.n_head == 0);
  remove(path);
  remove(good_path);
  parsed_free(&g);
  free(p);
  free(q);
  gpt_desc_free(&d);
}

/* Saves fail cleanly: no directory, a directory in the way of the temporary file or the
** target, a device that fills up mid-write. An existing target is never touched and no
** temporary file is left behind. */
static void test_save_failures(void) {
  GptConfig c = make_config("save", 1, 16, 2, 40, 8);
  GptDesc d;
  CHECK(gpt_desc_build(&d, &c) == 0);
  float* p = random_params(&d, 9);
  char path[512], tmp[540];
  tmp_path("no/such/dir.st", path);
  CHECK(refused(safetensors_save(path, &d, p), path, "cannot write"));
  /* Over a directory: refused before anything is written, no temporary file. */
  tmp_path("adir", path);
  snprintf(tmp, sizeof tmp, "%s.tmp-%ld", path, (long)getpid());
  CHECK(mkdir(path, 0700) == 0);
  CHECK(refused(safetensors_save(path, &d, p), path, "is a directory"));
  CHECK(!file_exists(tmp));
  rmdir(path);
  /* An old file stays when the temporary file cannot be created (a directory there, which
  ** must survive; a link to a device node made here). The temporary file's name is the output
  ** layer's: PATH.tmp-PID. */
  tmp_path("old.st", path);
  snprintf(tmp, sizeof tmp, "%s.tmp-%ld", path, (long)getpid());
  CHECK(safetensors_save(path, &d, p) == 0);
  size_t n0 = 0, n1 = 0;
  unsigned char* before = read_file(path, &n0);
  float* p2 = random_params(&d, 10);
  CHECK(mkdir(tmp, 0700) == 0);
  CHECK(refused(safetensors_save(path, &d, p2), path, "cannot write"));
  struct stat st;
  CHECK(stat(tmp, &st) == 0 && S_ISDIR(st.st_mode));
  rmdir(tmp);
  char full[540];
  tmp_path("fulldev", full);
  /* A link at the temporary file's predictable name is never written through (the temporary
  ** file is created O_EXCL | O_NOFOLLOW): refused, the link and its device left as they are.
  ** (A full disk mid-write: cli_fulldisk, on a small tmpfs.) */
  if (mknod(full, S_IFCHR | 0600, makedev(1, 7)) == 0 && symlink(full, tmp) == 0) {
    CHECK(refused(safetensors_save(path, &d, p2), path, "cannot write"));
    CHECK(lstat(tmp, &st) == 0 && S_ISLNK(st.st_mode));
    struct stat fs;
    CHECK(stat(full, &fs) == 0 && S_ISCHR(fs.st_mode));
    remove(tmp);
  }
  remove(full);
  unsigned char* after = read_file(path, &n1);
  CHECK(before && after && n0 == n1 && memcmp(before, after, n0) == 0);
  remove(path);
  free(before);
  free(after);
  free(p2);
  free(p);
  gpt_desc_free(&d);
}

/* Format detection by content: each format whatever its name, other files refused. */
static void test_detect(void) {
  char path[512];
  WeightsFormat fmt;
  tmp_path("x.safetensors", path);
  const unsigned char llmc[12] = {0xc6, 0xd7, 0x34, 0x01, 3, 0, 0, 0, 0, 0, 0, 0}; /* 20240326 */
  CHECK(write_file(path, llmc, sizeof llmc) == 0);
  CHECK(weights_detect(path, &fmt) == 0 && fmt == WEIGHTS_LLMC);
  const unsigned char st[10] = {2, 0, 0, 0, 0, 0, 0, 0, '{', '}'};
  CHECK(write_file(path, st, sizeof st) == 0);
  CHECK(weights_detect(path, &fmt) == 0 && fmt == WEIGHTS_SAFETENSORS);
  CHECK(write_file(path, "hello, world", 12) == 0);
  CHECK(refused(weights_detect(path, &fmt), path, "neither an llm.c checkpoint"));
  CHECK(write_file(path, "abc", 3) == 0);
  CHECK(refused(weights_detect(path, &fmt), path, "too short"));
  remove(path);
  CHECK(refused(weights_detect(path, &fmt), path, "cannot open"));
  CHECK(refused(weights_detect(tmpdir, &fmt), tmpdir, "is a directory without model.safetensors"));
  CHECK(weights_format_parse("safetensors", "--format", &fmt) == 0 && fmt == WEIGHTS_SAFETENSORS);
  CHECK(weights_format_parse("llmc", "--format", &fmt) == 0 && fmt == WEIGHTS_LLMC);
  CHECK(refused(weights_format_parse("gguf", "--format", &fmt), "--format", "'gguf'"));
}

int main(void) {
  snprintf(tmpdir, sizeof tmpdir, "/tmp/osdp_st_XXXXXX");
  if (!mkdtemp(tmpdir)) { perror("mkdtemp"); return 1; }
  GptConfig tiny;
  CHECK(gpt_config_load("tiny", &tiny) == 0);
  test_round_trip(&tiny, "tiny.safetensors");
  GptConfig odd = make_config("odd", 3, 24, 3, 50, 17);
  test_round_trip(&odd, "odd.st");
  /* wte [50000, 24] is larger than the 1M-float stream buffer: several chunks, the last partial. */
  GptConfig wide = make_config("wide", 1, 24, 3, 50000, 17);
  test_round_trip(&wide, "wide.st");
  test_layout();
  test_refusals();
  test_foreign_files();
  test_save_failures();
  test_detect();
  CHECK_MSG(rmdir(tmpdir) == 0, "%s was left non-empty", tmpdir);
  return check_summary();
}
