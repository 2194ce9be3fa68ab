/* test_checkpoint.c: tests of llm.c checkpoint I/O (round trips, llm.c's layout, refusals). */
#include "check.h"
#include "core/util.h"
#include "model/checkpoint.h"
#include "model/gpt.h"
#include "model/gpt2.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char tmpdir[256];

/* Path of a file called `name` inside the test's temporary directory. */
static const char* tmp_path(const char* name, char buf[512]) {
  snprintf(buf, 512, "%s/%s", tmpdir, name);
  return buf;
}

/* Whether a file exists. */
static int file_exists(const char* path) {
  struct stat st;
  return stat(path, &st) == 0;
}

/* Writes `size` bytes to `path`; returns 0 on success. */
static int write_file(const char* path, const void* data, size_t size) {
  FILE* f = fopen(path, "wb");
  if (!f) return -1;
  size_t put = fwrite(data, 1, size, f);
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

/* Random normal parameters, with a few special values (-0, a denormal, inf) to show the round
** trip is bitwise. */
static float* random_params(const GptDesc* d, uint64_t seed) {
  float* p = malloc(d->n_params * sizeof(float));
  Rng r;
  rng_seed(&r, seed);
  for (size_t i = 0; i < d->n_params; i++) p[i] = (float)rng_normal(&r);
  p[0] = -0.0f;
  p[d->n_params / 2] = 1e-42f;
  p[d->n_params - 1] = INFINITY;
  return p;
}

/* Whether checkpoint_read_config(path) returned the same shape as c, named after the file. */
static int same_shape(const GptConfig* a, const GptConfig* c) {
  return a->n_layer == c->n_layer && a->n_embd == c->n_embd && a->n_head == c->n_head &&
         a->vocab_size == c->vocab_size && a->padded_vocab == c->padded_vocab &&
         a->max_seq == c->max_seq;
}

/* Saves random params of config c, loads them back and compares bit for bit. */
static void test_round_trip(const GptConfig* c, const char* file) {
  GptDesc d;
  char path[512], tmp[520];
  CHECK(gpt_desc_build(&d, c) == 0);
  float* a = random_params(&d, 7);
  float* b = calloc(d.n_params, sizeof(float));
  tmp_path(file, path);
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  CHECK_MSG(checkpoint_save(path, &d, a) == 0, "%s", osdp_last_error());
  CHECK(!file_exists(tmp));
  CHECK_MSG(checkpoint_load(path, &d, b) == 0, "%s", osdp_last_error());
  CHECK(memcmp(a, b, d.n_params * sizeof(float)) == 0);
  GptConfig got;
  CHECK_MSG(checkpoint_read_config(path, &got) == 0, "%s", osdp_last_error());
  CHECK(same_shape(&got, c));
  CHECK(strcmp(got.name, file) == 0);
  /* Saving again over an existing file replaces it. */
  a[1] = 42.0f;
  CHECK(checkpoint_save(path, &d, a) == 0);
  CHECK(checkpoint_load(path, &d, b) == 0 && b[1] == 42.0f);
  CHECK(!file_exists(tmp));
  remove(path);
  free(a);
  free(b);
  gpt_desc_free(&d);
}

/* Offsets of llm.c's 16 tensors in the file's float array, computed the way llm.c's
** fill_in_parameter_sizes lays them out. */
enum { WTE, WPE, LN1W, LN1B, QKVW, QKVB, ATTPROJW, ATTPROJB, LN2W, LN2B, FCW, FCB, FCPROJW,
       FCPROJB, LNFW, LNFB, NT };
static size_t llmc_offsets(const GptConfig* c, size_t off[NT]) {
  size_t L = (size_t)c->n_layer, C = (size_t)c->n_embd, Vp = (size_t)c->padded_vocab;
  size_t maxT = (size_t)c->max_seq;
  size_t sizes[NT] = {Vp * C, maxT * C, L * C, L * C, L * 3 * C * C, L * 3 * C, L * C * C, L * C,
                      L * C, L * C, L * 4 * C * C, L * 4 * C, L * C * 4 * C, L * C, C, C};
  size_t total = 0;
  for (int t = 0; t < NT; t++) { off[t] = total; total += sizes[t]; }
  return total;
}

/* Start of op i's block in osdp's op-block order. */
static size_t block_start(const GptDesc* d, int op) {
  size_t s = 0;
  for (int i = 0; i < op; i++) s += d->ops[i].n_params;
  return s;
}

/* Counts entries where file tensor [R, K] (at fo, layer stride R*K) holds osdp's [K, R] weight
** transposed (at osdp op blocks), for every layer; returns the number of mismatches. */
static int check_linear(const GptDesc* d, const float* file, size_t fo, int j, size_t R, size_t K) {
  int bad = 0;
  for (int l = 0; l < d->cfg.n_layer; l++) {
    size_t ob = block_start(d, gpt_op_layer(l, j));
    for (size_t o = 0; o < R; o++)
      for (size_t i = 0; i < K; i++)
        bad += file[fo + (size_t)l * R * K + o * K + i] != (float)(ob + i * R + o);
  }
  return bad;
}

/* Counts mismatches of a per-layer vector tensor of n values per layer (at fo in the file)
** against offset `within` of op j's block. */
static int check_vector(const GptDesc* d, const float* file, size_t fo, int j, size_t within, size_t n) {
  int bad = 0;
  for (int l = 0; l < d->cfg.n_layer; l++) {
    size_t ob = block_start(d, gpt_op_layer(l, j)) + within;
    for (size_t k = 0; k < n; k++) bad += file[fo + (size_t)l * n + k] != (float)(ob + k);
  }
  return bad;
}

/* Saves params whose every value is its own index, then checks the raw file entry by entry
** against llm.c's order and [out, in] layout. */
static void test_llmc_layout(void) {
  GptConfig c = make_config("layout", 2, 8, 2, 20, 5);
  GptDesc d;
  CHECK(gpt_desc_build(&d, &c) == 0);
  size_t C = 8, Vp = 128, maxT = 5, off[NT];
  size_t total = llmc_offsets(&c, off);
  CHECK(total == d.n_params);
  float* p = malloc(d.n_params * sizeof(float));
  for (size_t i = 0; i < d.n_params; i++) p[i] = (float)i;  /* exact: n_params < 2^24 */
  char path[512];
  tmp_path("layout.bin", path);
  CHECK(checkpoint_save(path, &d, p) == 0);
  size_t size = 0;
  unsigned char* raw = read_file(path, &size);
  CHECK(raw && size == 1024 + 4 * d.n_params);
  int32_t h[256];
  memcpy(h, raw, sizeof h);
  CHECK(h[0] == 20240326 && h[1] == 3 && h[2] == 5 && h[3] == 20 && h[4] == 2 && h[5] == 2 &&
        h[6] == 8 && h[7] == 128);
  int rest = 0;
  for (int i = 8; i < 256; i++) rest |= h[i];
  CHECK(rest == 0);
  float* f = malloc(d.n_params * sizeof(float));
  memcpy(f, raw + 1024, d.n_params * sizeof(float));

  /* wte[v][c] is embed block [c*Vp + v]; wpe follows wte in embed's block. */
  int bad = 0;
  for (size_t v = 0; v < Vp; v++)
    for (size_t k = 0; k < C; k++) bad += f[off[WTE] + v * C + k] != (float)(k * Vp + v);
  for (size_t t = 0; t < maxT * C; t++) bad += f[off[WPE] + t] != (float)(C * Vp + t);
  CHECK(bad == 0);
  CHECK(f[off[WTE] + 3 * C + 5] == (float)(5 * Vp + 3));
  /* Per-layer tensors. */
  CHECK(check_vector(&d, f, off[LN1W], GPT_LN1, 0, C) == 0);
  CHECK(check_vector(&d, f, off[LN1B], GPT_LN1, C, C) == 0);
  CHECK(check_linear(&d, f, off[QKVW], GPT_QKV, 3 * C, C) == 0);
  CHECK(check_vector(&d, f, off[QKVB], GPT_QKV, 3 * C * C, 3 * C) == 0);
  CHECK(check_linear(&d, f, off[ATTPROJW], GPT_PROJ, C, C) == 0);
  CHECK(check_vector(&d, f, off[ATTPROJB], GPT_PROJ, C * C, C) == 0);
  CHECK(check_vector(&d, f, off[LN2W], GPT_LN2, 0, C) == 0);
  CHECK(check_vector(&d, f, off[LN2B], GPT_LN2, C, C) == 0);
  CHECK(check_linear(&d, f, off[FCW], GPT_FC, 4 * C, C) == 0);
  CHECK(check_vector(&d, f, off[FCB], GPT_FC, 4 * C * C, 4 * C) == 0);
  CHECK(check_linear(&d, f, off[FCPROJW], GPT_FCPROJ, C, 4 * C) == 0);
  CHECK(check_vector(&d, f, off[FCPROJB], GPT_FCPROJ, 4 * C * C, C) == 0);
  /* A few entries spelled out: layer 1's qkvw[o=17][i=2] is qkv block W[2*3C + 17]. */
  size_t qkv1 = block_start(&d, gpt_op_layer(1, GPT_QKV));
  CHECK(f[off[QKVW] + 3 * C * C + 17 * C + 2] == (float)(qkv1 + 2 * 3 * C + 17));
  size_t fc0 = block_start(&d, gpt_op_layer(0, GPT_FC));
  CHECK(f[off[FCB] + 5] == (float)(fc0 + 4 * C * C + 5));
  /* lnf's w and b are the last 2C floats of both orders. */
  size_t lnf = block_start(&d, gpt_op_lnf(&d));
  for (size_t k = 0; k < C; k++) {
    bad += f[off[LNFW] + k] != (float)(lnf + k);
    bad += f[off[LNFB] + k] != (float)(lnf + C + k);
  }
  CHECK(bad == 0);
  CHECK(lnf + 2 * C == d.n_params);
  remove(path);
  free(raw);
  free(f);
  free(p);
  gpt_desc_free(&d);
}

/* Whether rc is -1 with a one-line message containing both needles. */
static int refused(int rc, const char* a, const char* b) {
  const char* e = osdp_last_error();
  int ok = rc == -1 && strstr(e, a) && (!b || strstr(e, b)) && !strchr(e, '\n');
  if (!ok) fprintf(stderr, "  rc %d, message '%s' (wanted '%s', '%s')\n", rc, e, a, b ? b : "");
  return ok;
}

/* Writes a copy of the checkpoint `good` (size bytes) with header entry idx set to val, cut or
** extended to `size + delta` bytes, as path. */
static void write_variant(const char* path, const unsigned char* good, size_t size, int idx,
                          int32_t val, long delta) {
  size_t n = (size_t)((long)size + delta);
  unsigned char* buf = calloc(1, n > size ? n : size);
  memcpy(buf, good, size);
  if (idx >= 0) memcpy(buf + 4 * idx, &val, 4);
  CHECK(write_file(path, buf, n) == 0);
  free(buf);
}

/* The error checkpoint_load gave in the last check_variant. */
static char load_error[1024];

/* Loading variant (header entry idx = val, size + delta bytes) fails naming the file and `what`;
** params stay untouched and checkpoint_read_config agrees when the header itself is bad. */
static void check_variant(const GptDesc* d, const unsigned char* good, size_t size, int idx,
                          int32_t val, long delta, const char* what, int header_bad) {
  char path[512];
  tmp_path("bad.bin", path);
  write_variant(path, good, size, idx, val, delta);
  float* p = malloc(d->n_params * sizeof(float));
  memset(p, 0x5a, d->n_params * sizeof(float));
  unsigned char* before = malloc(d->n_params * sizeof(float));
  memcpy(before, p, d->n_params * sizeof(float));
  osdp_clear_error();
  CHECK_MSG(refused(checkpoint_load(path, d, p), path, what), "idx %d val %d delta %ld", idx,
            (int)val, delta);
  CHECK(memcmp(before, p, d->n_params * sizeof(float)) == 0);
  snprintf(load_error, sizeof load_error, "%s", osdp_last_error());
  /* Reading the header alone refuses it too: a bad header by its field, a good one whose shape
  ** does not match the file's size by the size (checked before anything that big is built). */
  GptConfig c;
  int rc = checkpoint_read_config(path, &c);
  if (header_bad) CHECK(refused(rc, path, what));
  else CHECK_MSG(rc == -1 && (strstr(osdp_last_error(), "truncated") || strstr(osdp_last_error(), "trailing")),
                 "%s: read_config: %s", what, osdp_last_error());
  remove(path);
  free(p);
  free(before);
}

/* Every kind of bad file is refused with a one-line message naming the file and the problem. */
static void test_refusals(void) {
  GptConfig c = make_config("tiny3", 2, 16, 4, 40, 8);
  GptDesc d;
  CHECK(gpt_desc_build(&d, &c) == 0);
  float* p = random_params(&d, 3);
  char good_path[512];
  tmp_path("good.bin", good_path);
  CHECK(checkpoint_save(good_path, &d, p) == 0);
  size_t size = 0;
  unsigned char* good = read_file(good_path, &size);
  CHECK(good && size == 1024 + 4 * d.n_params);

  check_variant(&d, good, size, 0, 12345, 0, "not an llm.c GPT-2 checkpoint", 1);
  check_variant(&d, good, size, 1, 5, 0, "version 5 (bf16)", 1);
  check_variant(&d, good, size, 1, 1, 0, "version 1", 1);
  check_variant(&d, good, size, -1, 0, -4, "truncated", 0);
  check_variant(&d, good, size, -1, 0, -(long)size + 100, "truncated", 1);
  check_variant(&d, good, size, -1, 0, -(long)size, "truncated", 1);
  check_variant(&d, good, size, -1, 0, 8, "trailing", 0);
  check_variant(&d, good, size, 6, -16, 0, "n_embd=-16", 1);
  check_variant(&d, good, size, 4, 0, 0, "n_layer=0", 1);
  check_variant(&d, good, size, 4, 1 << 30, 0, "n_layer", 1);
  check_variant(&d, good, size, 2, -1, 0, "max_seq=-1", 1);
  check_variant(&d, good, size, 3, -40, 0, "vocab_size=-40", 1);
  check_variant(&d, good, size, 5, 3, 0, "n_head=3", 1);
  check_variant(&d, good, size, 7, 39, 0, "padded_vocab=39", 1);
  /* A valid header of another shape: the field and both values are named. */
  check_variant(&d, good, size, 4, 3, 0, "n_layer=3", 0);
  CHECK(strstr(load_error, "n_layer=2") != NULL);
  check_variant(&d, good, size, 2, 16, 0, "max_seq=16", 0);
  check_variant(&d, good, size, 7, 256, 0, "padded_vocab=256", 0);

  /* The expected and actual sizes appear in the truncation message. */
  char path[512], num[64];
  tmp_path("short.bin", path);
  write_variant(path, good, size, -1, 0, -4);
  CHECK(checkpoint_load(path, &d, p) == -1);
  snprintf(num, sizeof num, "expected %zu bytes", size);
  CHECK_MSG(strstr(osdp_last_error(), num) != NULL, "%s", osdp_last_error());
  snprintf(num, sizeof num, "found %zu", size - 4);
  CHECK_MSG(strstr(osdp_last_error(), num) != NULL, "%s", osdp_last_error());
  remove(path);

  /* Missing files, a directory, and a save into a missing directory. */
  tmp_path("missing.bin", path);
  CHECK(refused(checkpoint_load(path, &d, p), path, "cannot open"));
  GptConfig got;
  CHECK(refused(checkpoint_read_config(path, &got), path, "cannot open"));
  CHECK(refused(checkpoint_load(tmpdir, &d, p), tmpdir, "not a regular file"));
  tmp_path("no/such/dir.bin", path);
  CHECK(refused(checkpoint_save(path, &d, p), path, "cannot write"));
  /* Saving over a directory is refused before anything is written (core/output.h): no temporary
  ** file behind. */
  char dir[512], dirtmp[540];
  tmp_path("adir", dir);
  snprintf(dirtmp, sizeof dirtmp, "%s.tmp-%ld", dir, (long)getpid());
  CHECK(mkdir(dir, 0700) == 0);
  CHECK(refused(checkpoint_save(dir, &d, p), dir, "is a directory"));
  CHECK(!file_exists(dirtmp));
  rmdir(dir);

  remove(good_path);
  free(good);
  free(p);
  gpt_desc_free(&d);
}

/* A model of another shape cannot load the file; its own shape from the header can. */
static void test_load_into_header_shape(void) {
  GptConfig odd = make_config("odd", 3, 24, 3, 50, 17), tiny;
  CHECK(gpt_config_load("tiny", &tiny) == 0);
  GptDesc dodd, dtiny;
  CHECK(gpt_desc_build(&dodd, &odd) == 0 && gpt_desc_build(&dtiny, &tiny) == 0);
  float* p = random_params(&dodd, 11);
  float* q = malloc(dtiny.n_params * sizeof(float));
  char path[512];
  tmp_path("odd.bin", path);
  CHECK(checkpoint_save(path, &dodd, p) == 0);
  CHECK(refused(checkpoint_load(path, &dtiny, q), path, "n_layer=3"));
  GptConfig got;
  GptDesc dgot;
  CHECK(checkpoint_read_config(path, &got) == 0 && gpt_desc_build(&dgot, &got) == 0);
  CHECK(dgot.n_params == dodd.n_params);
  float* r = malloc(dgot.n_params * sizeof(float));
  CHECK(checkpoint_load(path, &dgot, r) == 0);
  CHECK(memcmp(p, r, dodd.n_params * sizeof(float)) == 0);
  remove(path);
  free(p);
  free(q);
  free(r);
  gpt_desc_free(&dodd);
  gpt_desc_free(&dtiny);
  gpt_desc_free(&dgot);
}

int main(void) {
  snprintf(tmpdir, sizeof tmpdir, "/tmp/osdp_ckpt_XXXXXX");
  if (!mkdtemp(tmpdir)) { perror("mkdtemp"); return 1; }
  GptConfig tiny;
  CHECK(gpt_config_load("tiny", &tiny) == 0);
  test_round_trip(&tiny, "tiny.bin");
  GptConfig odd = make_config("odd", 3, 24, 3, 50, 17);
  CHECK(odd.padded_vocab == 128);
  test_round_trip(&odd, "odd.bin");
  /* wte [50048, 24] is larger than the 1M-float stream buffer: several chunks, the last partial. */
  GptConfig wide = make_config("wide", 1, 24, 3, 50000, 17);
  test_round_trip(&wide, "wide.bin");
  test_llmc_layout();
  test_refusals();
  test_load_into_header_shape();
  CHECK_MSG(rmdir(tmpdir) == 0, "%s was left non-empty", tmpdir);
  return check_summary();
}
