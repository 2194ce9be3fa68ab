/*
** fuzz_st_index.c: fuzzes sharded safetensors checkpoints' index files
** (model.safetensors.index.json, model/safetensors.h). The input is the index; beside it lie
** two fixed, valid shards of the micro model (1 layer, hidden 4, vocabulary 14): the tensors at
** even positions of its file in model-00001-of-00002.safetensors, the odd ones in
** model-00002-of-00002.safetensors. The directory's config is read (weights_read_config) and,
** through the index, the weights are loaded into the micro model: whatever index loads must
** give exactly the micro model's parameters (an index that agrees with its shards can only
** name what they hold).
*/
#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz_util.h"
#include "model/gpt.h"
#include "model/safetensors.h"
#include "model/weights_file.h"

/* The micro model's parameters: element i is i / 4 (exact). */
static float* micro_params(void) {
  static float* p;
  const GptDesc* d = fuzz_micro_model();
  if (p) return p;
  if (!(p = malloc(d->n_params * sizeof(float)))) fuzz_die("out of memory", NULL);
  for (size_t i = 0; i < d->n_params; i++) p[i] = (float)i / 4;
  return p;
}

/* Writes shard `path` holding the tensors of the parsed file (header root, buffer buf) whose
** position in the header has parity `odd`, with no metadata. */
static void write_shard(const char* path, const cJSON* root, const unsigned char* buf, int odd) {
  cJSON* h = cJSON_CreateObject();
  unsigned char* out = malloc(1 << 16);
  size_t at = 0;
  int k = 0;
  for (const cJSON* e = root->child; e; e = e->next) {
    if (strcmp(e->string, "__metadata__") == 0 || k++ % 2 != odd) continue;
    const cJSON* of = cJSON_GetObjectItem(e, "data_offsets");
    size_t b = (size_t)cJSON_GetArrayItem(of, 0)->valuedouble, n = (size_t)cJSON_GetArrayItem(of, 1)->valuedouble - b;
    cJSON* t = cJSON_Duplicate(e, 1);
    double o2[2] = {(double)at, (double)(at + n)};
    cJSON_ReplaceItemInObject(t, "data_offsets", cJSON_CreateDoubleArray(o2, 2));
    cJSON_AddItemToObject(h, e->string, t);
    if (at + n > (1 << 15)) fuzz_die("micro shard too large", path);
    memcpy(out + (1 << 15) + at, buf + b, n);
    at += n;
  }
  char* text = cJSON_PrintUnformatted(h);
  size_t N = strlen(text);
  if (N > (1 << 15) - 8) fuzz_die("micro shard header too large", path);
  unsigned char* file = malloc(8 + N + at);
  for (int i = 0; i < 8; i++) file[i] = (unsigned char)((uint64_t)N >> (8 * i));
  memcpy(file + 8, text, N);
  memcpy(file + 8 + N, out + (1 << 15), at);
  fuzz_write_file(path, file, 8 + N + at);
  free(file);
  free(text);
  free(out);
  cJSON_Delete(h);
}

/* Makes the directory with the two shards once; returns it (the index goes in it). */
static const char* shard_dir(void) {
  static const char* dir;
  if (dir) return dir;
  dir = fuzz_temp_path(NULL, "st-index", 1);
  if (mkdir(dir, 0700) != 0) fuzz_die("cannot make", dir);
  const char* whole = fuzz_temp_path(dir, "whole.bin", 0);
  if (safetensors_save(whole, fuzz_micro_model(), micro_params())) fuzz_die("safetensors_save", osdp_last_error());
  FILE* f = fopen(whole, "rb");
  static unsigned char raw[1 << 16];
  size_t n = f ? fread(raw, 1, sizeof raw, f) : 0;
  if (f) fclose(f);
  uint64_t N = 0;
  for (int i = 7; i >= 0; i--) N = N << 8 | raw[i];
  if (n < 8 || N > n - 8) fuzz_die("cannot read back", whole);
  char* h = malloc(N + 1);
  memcpy(h, raw + 8, N);
  h[N] = 0;
  cJSON* root = cJSON_Parse(h);
  if (!root) fuzz_die("cannot parse", whole);
  write_shard(fuzz_temp_path(dir, "model-00001-of-00002.safetensors", 0), root, raw + 8 + N, 0);
  write_shard(fuzz_temp_path(dir, "model-00002-of-00002.safetensors", 0), root, raw + 8 + N, 1);
  remove(whole);
  cJSON_Delete(root);
  free(h);
  return dir;
}

/* libFuzzer's entry point: one index file per call. */
int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const char* index;
  const char* dir = shard_dir();
  if (!index) index = fuzz_temp_path(dir, "model.safetensors.index.json", 0);
  fuzz_write_file(index, data, size);
  osdp_clear_error();
  GptConfig c;
  if (weights_read_config(dir, &c) == 0) {
    if (c.n_head == 0) c.n_head = 1;
    GptDesc d;
    if (gpt_desc_build(&d, &c)) fuzz_die("gpt_desc_build refused an index's config", osdp_last_error());
    gpt_desc_free(&d);
  } else {
    fuzz_expect_message("weights_read_config");
  }
  const GptDesc* m = fuzz_micro_model();
  static float* got;
  if (!got && !(got = malloc(m->n_params * sizeof(float)))) fuzz_die("out of memory", NULL);
  memset(got, 0, m->n_params * sizeof(float));
  if (weights_load(index, m, got)) {
    fuzz_expect_message("weights_load");
    return 0;
  }
  const float* want = micro_params();
  const size_t V = 14, Vp = 128, C = 4;
  for (size_t i = 0; i < m->n_params; i++) {
    int pad = i < C * Vp && i % Vp >= V;
    if (got[i] != (pad ? 0.0f : want[i])) fuzz_die("an index loaded other parameters than its shards hold", index);
  }
  return 0;
}
