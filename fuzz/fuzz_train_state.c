/*
** fuzz_train_state.c: fuzzes training-state checkpoints (runtime/train_state.h): a directory
** holding manifest.json and rank files rank-00000.bin, rank-00001.bin, ... The input is all of
** them:
**   4 bytes   m, little-endian: the manifest's length (clamped to what follows);
**   m bytes   manifest.json, where "@SIZEk@" and "@FNVk@" (k = 0..7; "@SIZE@" and "@FNV@" mean
**             k = 0) become rank file k's real byte count and FNV-1a 64 checksum, so that
**             mutated rank files can pass the checksum check and reach the rank-file parser (a
**             manifest without them is used as it is);
**   the rest  the rank files one after another, cut before every "OSDPST01" (their magic) that
**             does not start the rest, at most FUZZ_MAX_RANKS; when empty, a fixed valid rank
**             file of 10 parameters in two ranges is rank file 0, so that the manifest can be
**             fuzzed alone.
** A checkpoint that opens is read whole and in ranges (which must agree), closed, and read
** again the way `osdp export` reads one (train_state_load_params).
*/
#include <inttypes.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz_util.h"
#include "core/util.h"
#include "model/gpt.h"
#include "runtime/train_state.h"

/* Largest checkpoint the target reads whole (parameters). */
#define STATE_MAX_PARAMS ((size_t)1 << 20)
/* Most rank files an input holds. */
#define FUZZ_MAX_RANKS 8

/* The fixed rank file used when the input has none: 10 parameters as ranges [0, 4) and [4, 10),
** each followed by its weights, m and v. Returns its size; *out points at a static buffer. */
static size_t fixed_rank_file(const uint8_t** out) {
  static uint8_t buf[24 + 2 * 16 + 3 * 10 * 4];
  static size_t n;
  if (!n) {
    uint32_t v32[2] = {1, 2};
    uint64_t np = 10, ranges[4] = {0, 4, 4, 6};
    memcpy(buf, "OSDPST01", 8);
    memcpy(buf + 8, v32, 8);
    memcpy(buf + 16, &np, 8);
    memcpy(buf + 24, ranges, sizeof ranges);
    n = 24 + sizeof ranges;
    for (int i = 0; i < 30; i++, n += 4) {
      float x = 0.25f * (float)i;
      memcpy(buf + n, &x, 4);
    }
  }
  *out = buf;
  return n;
}

/* Whether m[0..n) starts with placeholder "@<word><k>@" (k a digit, or none: 0); its length
** into *len and k into *k. */
static int placeholder(const uint8_t* m, size_t n, const char* word, size_t* len, int* k) {
  size_t w = strlen(word);
  if (n < w + 2 || m[0] != '@' || memcmp(m + 1, word, w)) return 0;
  if (m[w + 1] == '@') { *len = w + 2; *k = 0; return 1; }
  if (n < w + 3 || m[w + 1] < '0' || m[w + 1] > '9' || m[w + 2] != '@') return 0;
  *len = w + 3;
  *k = m[w + 1] - '0';
  return 1;
}

/* Writes the manifest text m[0..n) to path with every "@SIZEk@" and "@FNVk@" replaced by rank
** file k's size and checksum (0 and 16 zeros for a file the input does not have). */
static void write_manifest(const char* path, const uint8_t* m, size_t n, int nranks,
                           const size_t* bytes, const uint64_t* hash) {
  uint8_t* out = malloc(n * 4 + 1); /* a placeholder of 5 bytes or more becomes at most 20 */
  if (!out) fuzz_die("out of memory", NULL);
  size_t o = 0, len;
  int k;
  for (size_t i = 0; i < n;) {
    char text[24];
    if (placeholder(m + i, n - i, "SIZE", &len, &k))
      snprintf(text, sizeof text, "%zu", k < nranks ? bytes[k] : 0);
    else if (placeholder(m + i, n - i, "FNV", &len, &k))
      snprintf(text, sizeof text, "%016" PRIx64, k < nranks ? hash[k] : 0);
    else {
      out[o++] = m[i++];
      continue;
    }
    memcpy(out + o, text, strlen(text));
    o += strlen(text);
    i += len;
  }
  fuzz_write_file(path, out, o);
  free(out);
}

/* Reads parameters [off, off + n) of an open checkpoint into w, m, v (any may be NULL). */
static void read_range(TrainState* ts, size_t off, size_t n, float* w, float* m, float* v) {
  if (train_state_read(ts, off, n, w, m, v))
    fuzz_die("train_state_read failed on an opened checkpoint", osdp_last_error());
}

/* Reads the whole checkpoint, then ranges of it starting at every extent's first parameter and
** in its middle (and at every parameter of small ones), each into a buffer holding the
** complement of the expected bytes: every parameter of a range must be read, as
** train_state_read promises for a checkpoint whose coverage open checked. */
static void check_reads(TrainState* ts) {
  size_t np = ts->n_params;
  float* all = malloc((np ? np : 1) * 3 * sizeof(float));
  float* part = malloc((np ? np : 1) * 3 * sizeof(float));
  if (!all || !part) fuzz_die("out of memory", NULL);
  read_range(ts, 0, np, all, all + np, all + 2 * np);
  for (int i = 0; i < ts->next && i < 64; i++) {
    size_t starts[2] = {ts->ext[i].offset, ts->ext[i].offset + ts->ext[i].n / 2};
    for (int s = 0; s < 2; s++) {
      size_t a = starts[s], n = np - a < 7 ? np - a : 7;
      if (a >= np) continue;
      for (size_t j = 0; j < 3 * n; j++) {
        uint32_t bits;
        memcpy(&bits, &all[(j / n) * np + a + j % n], 4);
        bits = ~bits;
        memcpy(&part[j], &bits, 4);
      }
      read_range(ts, a, n, part, part + n, part + 2 * n);
      for (int k = 0; k < 3; k++)
        if (memcmp(part + k * n, all + k * np + a, n * sizeof(float)))
          fuzz_die("train_state_read", "a range read differs from the same parameters read whole");
    }
  }
  free(all);
  free(part);
}

/* libFuzzer's entry point: one checkpoint directory per call. */
int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const char *dir, *manifest, *ranks[FUZZ_MAX_RANKS];
  if (!dir) {
    dir = fuzz_temp_path(NULL, "state", 1);
    if (mkdir(dir, 0777) && access(dir, W_OK)) fuzz_die("cannot create", dir);
    manifest = fuzz_temp_path(dir, "manifest.json", 0);
    for (int k = 0; k < FUZZ_MAX_RANKS; k++) {
      char name[32];
      snprintf(name, sizeof name, "rank-%05d.bin", k);
      ranks[k] = fuzz_temp_path(dir, name, 0);
    }
  }
  uint32_t m = 0;
  if (size >= 4) memcpy(&m, data, 4);
  size_t body = size >= 4 ? size - 4 : 0;
  size_t mlen = m < body ? m : body;
  const uint8_t* mtext = data + (size - body);
  const uint8_t* rest = mtext + mlen;
  size_t rlen = body - mlen;
  if (rlen == 0) rlen = fixed_rank_file(&rest);
  /* Cut the rest into rank files before each magic; files the input lacks are removed, so
  ** nothing of an earlier input stays behind. */
  size_t start[FUZZ_MAX_RANKS + 1], bytes[FUZZ_MAX_RANKS];
  uint64_t hash[FUZZ_MAX_RANKS];
  int nranks = 1;
  start[0] = 0;
  for (size_t i = 1; i + 8 <= rlen && nranks < FUZZ_MAX_RANKS; i++)
    if (memcmp(rest + i, "OSDPST01", 8) == 0) start[nranks++] = i;
  start[nranks] = rlen;
  for (int k = 0; k < FUZZ_MAX_RANKS; k++) {
    if (k >= nranks) { unlink(ranks[k]); continue; }
    bytes[k] = start[k + 1] - start[k];
    hash[k] = fnv1a64(FNV1A64_START, rest + start[k], bytes[k]); /* as train_state.c */
    fuzz_write_file(ranks[k], rest + start[k], bytes[k]);
  }
  write_manifest(manifest, mtext, mlen, nranks, bytes, hash);
  osdp_clear_error();
  TrainState ts;
  if (train_state_open(dir, &ts)) {
    fuzz_expect_message("train_state_open");
    return 0;
  }
  size_t np = ts.n_params;
  if (np <= STATE_MAX_PARAMS) {
    check_reads(&ts);
    read_range(&ts, np / 3, np / 2 - np / 3, NULL, NULL, NULL);
    float w;
    if (np) read_range(&ts, np - 1, 1, &w, NULL, NULL);
  }
  train_state_close(&ts);
  GptConfig c;
  float* params = NULL;
  if (train_state_load_params(dir, &c, &params) == 0) {
    if (!params && np) fuzz_die("train_state_load_params", "no parameters");
    free(params);
  } else {
    fuzz_expect_message("train_state_load_params");
  }
  return 0;
}
