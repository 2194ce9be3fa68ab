/* test_data.c: tests of the data module (addition problems, text files, llm.c token files of both versions). */
#include "check.h"
#include "core/util.h"
#include "data/data.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char tmpdir[256];

/* Path of a file called `name` inside the test's temporary directory. */
static const char* tmp_path(const char* name, char buf[512]) {
  snprintf(buf, 512, "%s/%s", tmpdir, name);
  return buf;
}

/* Writes `size` bytes to `path`; returns 0 on success. */
static int write_file(const char* path, const void* data, size_t size) {
  FILE* f = fopen(path, "wb");
  if (!f) return -1;
  size_t put = fwrite(data, 1, size, f);
  return fclose(f) == 0 && put == size ? 0 : -1;
}

/* Writes an llm.c token file with the given header fields and `ntok` tokens tok[i] = i % 50257,
** cut to `keep` bytes of tokens (keep < 2*ntok makes a truncated file). */
static int write_token_file(const char* path, int magic, int version, int ntok, size_t keep) {
  size_t size = 1024 + keep;
  unsigned char* buf = calloc(1, size);
  int32_t header[256] = {0};
  header[0] = magic;
  header[1] = version;
  header[2] = ntok;
  memcpy(buf, header, sizeof header);
  for (size_t i = 0; 2 * i + 1 < keep; i++) {
    uint16_t t = (uint16_t)(i * 7919 % DATA_GPT2_VOCAB);
    memcpy(buf + 1024 + 2 * i, &t, 2);
  }
  int rc = write_file(path, buf, size);
  free(buf);
  return rc;
}

/* Whether data_open(spec) fails with a message containing `needle`. */
static int open_fails_with(const char* spec, int T, const char* needle) {
  DataSource* ds = NULL;
  osdp_clear_error();
  int rc = data_open(&ds, spec, T, 1);
  data_close(ds);
  int ok = rc == -1 && ds == NULL && strstr(osdp_last_error(), needle) != NULL &&
           strchr(osdp_last_error(), '\n') == NULL;
  if (!ok) fprintf(stderr, "  spec '%s' T=%d: rc %d, message '%s'\n", spec, T, rc, osdp_last_error());
  return ok;
}

/* Fetches rows [first, first+n) of a global batch into the matching slice of in/tg/pb. */
static int fetch(DataSource* ds, DataSplit split, long step, int rows, int first, int n,
                 int* in, int* tg, int* pb) {
  size_t off = (size_t)first * (size_t)data_seq_len(ds);
  return data_batch(ds, split, step, rows, first, n, in + off, tg + off, pb + off);
}

/* The same batch comes back twice, and pieced together from row ranges (4 vs 2+2 vs 1+3). */
static void test_determinism_and_row_ranges(const char* spec, int T) {
  DataSource* ds;
  CHECK(data_open(&ds, spec, T, 42) == 0);
  int R = 4, N = R * T;
  int *in1 = malloc(N * sizeof(int)), *tg1 = malloc(N * sizeof(int)), *pb1 = malloc(N * sizeof(int));
  int *in2 = malloc(N * sizeof(int)), *tg2 = malloc(N * sizeof(int)), *pb2 = malloc(N * sizeof(int));
  for (int split = 0; split < 2; split++) {
    CHECK(fetch(ds, split, 7, R, 0, R, in1, tg1, pb1) == 0);
    CHECK(fetch(ds, split, 7, R, 0, R, in2, tg2, pb2) == 0);
    CHECK(memcmp(in1, in2, N * sizeof(int)) == 0 && memcmp(tg1, tg2, N * sizeof(int)) == 0);
    int cuts[][3] = {{2, 2, 0}, {1, 3, 0}, {3, 1, 0}, {1, 1, 2}};
    for (int c = 0; c < 4; c++) {
      memset(in2, 0x55, N * sizeof(int));
      int first = 0;
      for (int k = 0; k < 3 && first < R; k++) {
        int n = cuts[c][k] ? cuts[c][k] : R - first;
        CHECK(fetch(ds, split, 7, R, first, n, in2, tg2, pb2) == 0);
        first += n;
      }
      CHECK_MSG(memcmp(in1, in2, N * sizeof(int)) == 0 && memcmp(tg1, tg2, N * sizeof(int)) == 0 &&
                memcmp(pb1, pb2, N * sizeof(int)) == 0, "%s split %d cut %d", spec, split, c);
    }
    /* Another step, or the other seed, gives another batch. */
    CHECK(fetch(ds, split, 8, R, 0, R, in2, tg2, pb2) == 0);
    CHECK(memcmp(in1, in2, N * sizeof(int)) != 0);
  }
  DataSource* other;
  CHECK(data_open(&other, spec, T, 43) == 0);
  CHECK(fetch(other, DATA_TRAIN, 7, R, 0, R, in2, tg2, pb2) == 0);
  CHECK(fetch(ds, DATA_TRAIN, 7, R, 0, R, in1, tg1, pb1) == 0);
  CHECK(memcmp(in1, in2, N * sizeof(int)) != 0);
  data_close(other);
  free(in1); free(tg1); free(pb1); free(in2); free(tg2); free(pb2);
  data_close(ds);
}

/* Reads count digit tokens as a number, most significant first unless reversed. */
static long long read_number(const int* tok, int count, int reversed) {
  long long v = 0;
  for (int i = 0; i < count; i++) {
    int d = tok[reversed ? count - 1 - i : i];
    if (d < 0 || d > 9) return -1;
    v = v * 10 + d;
  }
  return v;
}

/* Whether the unordered pair {a, b} is in the list of pairs seen (for the train/val check). */
typedef struct { long long a, b; } Pair;
static int pair_cmp(const void* x, const void* y) {
  const Pair *p = x, *q = y;
  if (p->a != q->a) return p->a < q->a ? -1 : 1;
  if (p->b != q->b) return p->b < q->b ? -1 : 1;
  return 0;
}

/* Decodes every problem of a batch and checks the format, the sum, targets and problem ids.
** Appends the unordered pairs seen to pairs (if not NULL). Returns the number of problems. */
static int check_addition_batch(DataSource* ds, int n, const int* in, const int* tg, const int* pb,
                                int rows, Pair* pairs) {
  int T = data_seq_len(ds), L = 3 * n + 4, P = T / L, problems = 0, bad = 0;
  for (int r = 0; r < rows; r++) {
    const int *ri = in + r * T, *rt = tg + r * T, *rp = pb + r * T;
    for (int j = 0; j < P; j++) {
      const int *t = ri + j * L, *g = rt + j * L, *p = rp + j * L;
      long long a = read_number(t, n, 0), b = read_number(t + n + 1, n, 0);
      long long c = read_number(t + 2 * n + 2, n + 1, 1);
      bad += a < 0 || b < 0 || c != a + b;
      bad += t[n] != DATA_ADD_PLUS || t[2 * n + 1] != DATA_ADD_EQUALS || t[L - 1] != DATA_ADD_END;
      for (int k = 0; k < L; k++) {
        int answer = k >= 2 * n + 1 && k <= L - 2;
        bad += answer ? (g[k] != t[k + 1] || p[k] != r * P + j) : (g[k] != -1 || p[k] != -1);
      }
      if (pairs) pairs[problems] = (Pair){a < b ? a : b, a < b ? b : a};
      problems++;
    }
    for (int k = P * L; k < T; k++) bad += ri[k] != DATA_ADD_PAD || rt[k] != -1 || rp[k] != -1;
  }
  CHECK_MSG(bad == 0, "%d bad positions in addition batch", bad);
  return problems;
}

/* Format, sums, targets, problem ids, target count and the train/val partition. */
static void test_addition(void) {
  DataSource* ds;
  CHECK(data_open(&ds, "addition", 64, 5) == 0);
  CHECK(data_vocab_size(ds) == DATA_ADD_VOCAB);
  CHECK(strstr(data_describe(ds), "addition of 3-digit numbers") != NULL);
  char buf[DATA_TOKEN_TEXT];
  CHECK(strcmp(data_token_text(ds, 7, buf), "7") == 0);
  CHECK(strcmp(data_token_text(ds, DATA_ADD_PLUS, buf), "+") == 0);
  CHECK(strcmp(data_token_text(ds, 99, buf), "?") == 0);

  /* Exact format of one problem: 13 tokens, 4 problems per 64-token row, 12 pads. */
  int R = 64, T = 64, N = R * T;
  int *in = malloc(N * sizeof(int)), *tg = malloc(N * sizeof(int)), *pb = malloc(N * sizeof(int));
  CHECK(data_batch(ds, DATA_TRAIN, 0, R, 0, R, in, tg, pb) == 0);
  char text[64] = "";
  for (int k = 0; k < 13; k++) strcat(text, data_token_text(ds, in[k], buf));
  long long a = read_number(in, 3, 0), b = read_number(in + 4, 3, 0);
  char want[64];
  long long c = a + b;
  snprintf(want, sizeof want, "%03lld+%03lld=%lld%lld%lld%lld;", a, b, c % 10, c / 10 % 10,
           c / 100 % 10, c / 1000);
  CHECK_MSG(strcmp(text, want) == 0, "'%s' vs '%s'", text, want);
  CHECK(data_batch_problem_count(ds, R) == R * 4);
  long count = 0;
  for (int i = 0; i < N; i++) count += tg[i] >= 0;
  CHECK(count == data_batch_target_count(ds, DATA_TRAIN, 0, R));
  CHECK(count == (long)R * 4 * 5);
  check_addition_batch(ds, 3, in, tg, pb, R, NULL);
  data_close(ds);

  /* Train and val never share an (unordered) pair; val is about 10% of pairs. */
  for (int n = 1; n <= 3; n++) {
    char spec[32];
    snprintf(spec, sizeof spec, "addition:%d", n);
    CHECK(data_open(&ds, spec, T, 9) == 0);
    int steps = 8, per = R * (T / (3 * n + 4));
    Pair *tr = malloc((size_t)steps * per * sizeof(Pair)), *va = malloc((size_t)steps * per * sizeof(Pair));
    int ntr = 0, nva = 0;
    for (int s = 0; s < steps; s++) {
      CHECK(data_batch(ds, DATA_TRAIN, s, R, 0, R, in, tg, pb) == 0);
      ntr += check_addition_batch(ds, n, in, tg, pb, R, tr + ntr);
      CHECK(data_batch(ds, DATA_VAL, s, R, 0, R, in, tg, pb) == 0);
      nva += check_addition_batch(ds, n, in, tg, pb, R, va + nva);
    }
    qsort(tr, ntr, sizeof(Pair), pair_cmp);
    int shared = 0;
    for (int i = 0; i < nva; i++) shared += bsearch(&va[i], tr, ntr, sizeof(Pair), pair_cmp) != NULL;
    CHECK_MSG(shared == 0, "n=%d: %d val problems use train pairs", n, shared);
    /* With 1 digit all 55 unordered pairs show up in train or val; about 10% are held out. */
    if (n == 1) {
      int distinct_tr = 0;
      for (int i = 0; i < ntr; i++) distinct_tr += i == 0 || pair_cmp(&tr[i], &tr[i - 1]) != 0;
      qsort(va, nva, sizeof(Pair), pair_cmp);
      int distinct_va = 0;
      for (int i = 0; i < nva; i++) distinct_va += i == 0 || pair_cmp(&va[i], &va[i - 1]) != 0;
      CHECK_MSG(distinct_tr + distinct_va == 55 && distinct_va >= 1 && distinct_va <= 15,
                "train %d val %d distinct pairs", distinct_tr, distinct_va);
    }
    free(tr); free(va);
    data_close(ds);
  }

  /* 9 digits: sums up to 1999999998 still decode right. */
  CHECK(data_open(&ds, "addition:9", 31, 1) == 0);
  CHECK(data_batch(ds, DATA_VAL, 3, 8, 0, 8, in, tg, pb) == 0);
  CHECK(check_addition_batch(ds, 9, in, tg, pb, 8, NULL) == 8);
  /* problem may be NULL. */
  CHECK(data_batch(ds, DATA_TRAIN, 3, 8, 2, 3, in, tg, NULL) == 0);
  data_close(ds);
  free(in); free(tg); free(pb);
}

/* Windows of a text file are T+1 consecutive bytes from the right 90/10 part. */
static void test_text(void) {
  char path[512];
  tmp_path("text.txt", path);
  size_t size = 1000;
  unsigned char* bytes = malloc(size);
  Rng rng;
  rng_seed(&rng, 3);
  for (size_t i = 0; i < size; i++) bytes[i] = (unsigned char)rng_below(&rng, 256);
  CHECK(write_file(path, bytes, size) == 0);
  char spec[600];
  snprintf(spec, sizeof spec, "text:%s", path);
  DataSource* ds;
  int T = 16, R = 50;
  CHECK(data_open(&ds, spec, T, 11) == 0);
  CHECK(data_vocab_size(ds) == 256);
  CHECK(strstr(data_describe(ds), "(1000 bytes)") != NULL);
  int *in = malloc(R * T * sizeof(int)), *tg = malloc(R * T * sizeof(int)), *pb = malloc(R * T * sizeof(int));
  for (int split = 0; split < 2; split++) {
    CHECK(data_batch(ds, split, 2, R, 0, R, in, tg, pb) == 0);
    size_t lo = split == DATA_TRAIN ? 0 : 900, hi = split == DATA_TRAIN ? 900 : 1000;
    int bad = 0;
    for (int r = 0; r < R; r++) {
      /* Find where the window starts: the first offset in the part that matches. */
      long found = -1;
      for (size_t s = lo; s + T + 1 <= hi && found < 0; s++) {
        int ok = 1;
        for (int i = 0; i < T && ok; i++)
          ok = in[r * T + i] == bytes[s + i] && tg[r * T + i] == bytes[s + i + 1];
        if (ok) found = (long)s;
      }
      bad += found < 0;
      for (int i = 0; i < T; i++) bad += pb[r * T + i] != -1;
    }
    CHECK_MSG(bad == 0, "split %d: %d rows are not windows of their part", split, bad);
    CHECK(data_batch_target_count(ds, split, 2, R) == (long)R * T);
  }
  char buf[DATA_TOKEN_TEXT];
  CHECK(strcmp(data_token_text(ds, 'a', buf), "a") == 0);
  CHECK(strcmp(data_token_text(ds, '\n', buf), "\\n") == 0);
  CHECK(strcmp(data_token_text(ds, 0x1f, buf), "\\x1f") == 0);
  CHECK(data_batch_problem_count(ds, R) == 0);
  data_close(ds);
  free(in); free(tg); free(pb);
  test_determinism_and_row_ranges(spec, T);

  /* 1000 bytes hold T = 99 (needs 991) but not T = 100 (needs 1001). */
  CHECK(data_open(&ds, spec, 99, 1) == 0);
  data_close(ds);
  CHECK(open_fails_with(spec, 100, "at least 1001 bytes"));
  CHECK(write_file(path, "", 0) == 0);
  CHECK(open_fails_with(spec, 4, "is empty"));
  remove(path);
  CHECK(open_fails_with(spec, 4, "No such file"));
  CHECK(open_fails_with(spec, 4, path));
  CHECK(open_fails_with("text:", 4, "needs a file name"));
  snprintf(spec, sizeof spec, "text:%s", tmpdir);
  CHECK(open_fails_with(spec, 4, "not a regular file"));
  free(bytes);
}

/* The llm.c token file reader: good files read back, bad ones are refused with a message. */
static void test_tokens(void) {
  char path[512], spec[600];
  tmp_path("tokens.bin", path);
  snprintf(spec, sizeof spec, "tokens:%s", path);
  int ntok = 2000, T = 32, R = 8;
  CHECK(write_token_file(path, 20240520, 1, ntok, 2 * (size_t)ntok) == 0);
  DataSource* ds;
  CHECK(data_open(&ds, spec, T, 1) == 0);
  /* The vocabulary a token file needs is its largest id + 1, not GPT-2's 50257. */
  long max_id = 0;
  for (long i = 0; i < ntok; i++) if (i * 7919 % DATA_GPT2_VOCAB > max_id) max_id = i * 7919 % DATA_GPT2_VOCAB;
  CHECK_MSG(data_vocab_size(ds) == max_id + 1, "vocab %d, largest id %ld", data_vocab_size(ds), max_id);
  CHECK(strstr(data_describe(ds), "(2000 uint16 tokens)") != NULL);
  int *in = malloc(R * T * sizeof(int)), *tg = malloc(R * T * sizeof(int));
  for (int split = 0; split < 2; split++) {
    CHECK(data_batch(ds, split, 0, R, 0, R, in, tg, NULL) == 0);
    int bad = 0;
    for (int r = 0; r < R; r++) {
      /* Token i is i*7919 % 50257 with 7919 invertible mod 50257, so a token gives its position. */
      long pos = -1;
      for (long i = 0; i < ntok && pos < 0; i++)
        if (i * 7919 % DATA_GPT2_VOCAB == in[r * T]) pos = i;
      long lo = split == DATA_TRAIN ? 0 : 1800, hi = split == DATA_TRAIN ? 1800 : 2000;
      bad += pos < lo || pos + T + 1 > hi;
      for (int i = 0; i < T && pos >= 0; i++)
        bad += in[r * T + i] != (pos + i) * 7919 % DATA_GPT2_VOCAB ||
               tg[r * T + i] != (pos + i + 1) * 7919 % DATA_GPT2_VOCAB;
    }
    CHECK_MSG(bad == 0, "split %d: %d bad windows", split, bad);
  }
  char buf[DATA_TOKEN_TEXT];
  CHECK(strcmp(data_token_text(ds, 50256, buf), "<50256>") == 0);
  data_close(ds);
  free(in); free(tg);
  test_determinism_and_row_ranges(spec, T);

  CHECK(write_token_file(path, 20240520, 1, ntok, 2 * (size_t)ntok - 2) == 0);
  CHECK(open_fails_with(spec, T, "truncated"));
  CHECK(write_token_file(path, 20240520, 1, ntok, 2 * (size_t)ntok + 2) == 0);
  CHECK(open_fails_with(spec, T, "longer than its header"));
  CHECK(write_token_file(path, 12345, 1, ntok, 2 * (size_t)ntok) == 0);
  CHECK(open_fails_with(spec, T, "magic 12345"));
  CHECK(write_token_file(path, 20240520, 3, ntok, 2 * (size_t)ntok) == 0);
  CHECK(open_fails_with(spec, T, "version 3; llm.c writes version 1 (uint16 GPT-2 tokens) or 2"));
  /* Version 2 (uint32) with version 1's uint16 tokens: half the bytes its header promises. */
  CHECK(write_token_file(path, 20240520, 2, ntok, 2 * (size_t)ntok) == 0);
  CHECK(open_fails_with(spec, T, "promises 2000 tokens of 4 bytes"));
  CHECK(write_token_file(path, 20240520, 1, 0, 0) == 0);
  CHECK(open_fails_with(spec, T, "holds 0 tokens"));
  CHECK(write_file(path, "abc", 3) == 0);
  CHECK(open_fails_with(spec, T, "shorter than the 1024-byte"));
  CHECK(write_token_file(path, 20240520, 1, 100, 200) == 0);
  CHECK(open_fails_with(spec, T, "at least 321 tokens"));
  /* A uint16 id outside GPT-2's vocabulary: the file needs 60001 ids (the model decides). */
  CHECK(write_token_file(path, 20240520, 1, 400, 800) == 0);
  FILE* f = fopen(path, "r+b");
  uint16_t big = 60000;
  fseek(f, 1024 + 2 * 17, SEEK_SET);
  fwrite(&big, 2, 1, f);
  fclose(f);
  CHECK(data_open(&ds, spec, T, 1) == 0 && data_vocab_size(ds) == 60001);
  data_close(ds);
  /* Small ids: a file whose largest id is 300 needs a vocabulary of 301, wherever the 300 is. */
  for (int at = 0; at < 400; at += 399) {
    unsigned char* raw = calloc(1, 1024 + 800);
    int32_t header[256] = {20240520, 1, 400};
    memcpy(raw, header, sizeof header);
    for (int i = 0; i < 400; i++) {
      uint16_t t = (uint16_t)(i == at ? 300 : i % 200);
      memcpy(raw + 1024 + 2 * i, &t, 2);
    }
    CHECK(write_file(path, raw, 1024 + 800) == 0);
    free(raw);
    CHECK(data_open(&ds, spec, T, 1) == 0);
    CHECK_MSG(data_vocab_size(ds) == 301, "largest id 300 at %d: vocab %d", at, data_vocab_size(ds));
    CHECK(strcmp(data_token_text(ds, 300, buf), "<300>") == 0);
    data_close(ds);
  }
  remove(path);
  CHECK(open_fails_with(spec, T, "No such file"));
}

/* Writes a version 2 (uint32, Llama 3) token file of ntok tokens tok[i] = (i * 7919) % 128256,
** but token `at` = big. */
static int write_token_file_v2(const char* path, int ntok, int at, uint32_t big) {
  size_t size = 1024 + 4 * (size_t)ntok;
  unsigned char* buf = calloc(1, size);
  int32_t header[256] = {20240520, 2, ntok};
  memcpy(buf, header, sizeof header);
  for (int i = 0; i < ntok; i++) {
    uint32_t t = i == at ? big : (uint32_t)((long)i * 7919 % 128256);
    memcpy(buf + 1024 + 4 * (size_t)i, &t, 4);
  }
  int rc = write_file(path, buf, size);
  free(buf);
  return rc;
}

/* llm.c's version 2 token files (uint32 Llama 3 tokens): read back token for token, the
** vocabulary their largest id + 1, ids past DATA_MAX_VOCAB refused. */
static void test_tokens_v2(void) {
  char path[512], spec[600];
  tmp_path("tokens32.bin", path);
  snprintf(spec, sizeof spec, "tokens:%s", path);
  int ntok = 3000, T = 16, R = 4;
  CHECK(write_token_file_v2(path, ntok, 5, 128255) == 0);
  DataSource* ds;
  CHECK_MSG(data_open(&ds, spec, T, 3) == 0, "%s", osdp_last_error());
  if (!ds) return;
  CHECK_MSG(data_vocab_size(ds) == 128256, "vocab %d", data_vocab_size(ds));
  CHECK(strstr(data_describe(ds), "(3000 uint32 tokens)") != NULL);
  int in[4 * 16], tg[4 * 16];
  CHECK(data_batch(ds, DATA_TRAIN, 2, R, 0, R, in, tg, NULL) == 0);
  int bad = 0;
  for (int r = 0; r < R; r++) {
    long pos = -1; /* 7919 is invertible mod 128256 = 2^7 * 3 * 167 * 2: find the position */
    for (long i = 0; i < ntok && pos < 0; i++)
      if (i != 5 && i * 7919 % 128256 == in[r * T]) pos = i;
    for (int i = 0; i < T && pos >= 0; i++) {
      long p = pos + i, q = p + 1;
      bad += in[r * T + i] != (p == 5 ? 128255 : p * 7919 % 128256) ||
             tg[r * T + i] != (q == 5 ? 128255 : q * 7919 % 128256);
    }
    bad += pos < 0;
  }
  CHECK_MSG(bad == 0, "%d bad tokens", bad);
  char buf[DATA_TOKEN_TEXT];
  CHECK(strcmp(data_token_text(ds, 128255, buf), "<128255>") == 0);
  CHECK(strcmp(data_token_text(ds, DATA_MAX_VOCAB - 1, buf), "<16777215>") == 0);
  data_close(ds);
  test_determinism_and_row_ranges(spec, T);
  /* Ids up to the largest vocabulary osdp builds, and one past it. */
  CHECK(write_token_file_v2(path, ntok, 2999, DATA_MAX_VOCAB - 1) == 0);
  CHECK(data_open(&ds, spec, T, 3) == 0 && data_vocab_size(ds) == DATA_MAX_VOCAB);
  data_close(ds);
  CHECK(write_token_file_v2(path, ntok, 7, 0xffffffffu) == 0);
  CHECK(open_fails_with(spec, T, "token 4294967295 at position 7, beyond the largest vocabulary"));
  /* Cut by one byte. */
  CHECK(write_token_file_v2(path, ntok, 0, 1) == 0);
  CHECK(truncate(path, 1024 + 4 * ntok - 1) == 0);
  CHECK(open_fails_with(spec, T, "truncated"));
  remove(path);
}

/* Spec and argument errors. */
static void test_errors(void) {
  CHECK(open_fails_with("foo", 64, "unknown source 'foo'; use addition, addition:N"));
  CHECK(open_fails_with("additionx", 64, "unknown source"));
  CHECK(open_fails_with("addition:0", 64, "bad digit count"));
  CHECK(open_fails_with("addition:10", 64, "bad digit count"));
  CHECK(open_fails_with("addition:", 64, "bad digit count"));
  CHECK(open_fails_with("addition", 12, "--seq T=12 is too short for 3-digit addition problems of "
                                        "13 tokens; use --seq >= 13"));
  CHECK(open_fails_with("addition", 0, "at least 1"));
  DataSource* ds;
  CHECK(data_open(&ds, "addition", 13, 1) == 0);
  int in[13 * 4], tg[13 * 4];
  CHECK(data_batch(ds, DATA_TRAIN, 0, 4, 3, 2, in, tg, NULL) == -1);
  CHECK(strstr(osdp_last_error(), "outside the global batch") != NULL);
  CHECK(data_batch(ds, DATA_TRAIN, -1, 4, 0, 1, in, tg, NULL) == -1);
  CHECK(data_batch(ds, (DataSplit)2, 0, 4, 0, 1, in, tg, NULL) == -1);
  CHECK(data_batch_target_count(ds, DATA_VAL, 0, 0) == -1);
  CHECK(data_batch(ds, DATA_TRAIN, 0, 4, 4, 0, in, tg, NULL) == 0);
  data_close(ds);
  data_close(NULL);
}

int main(void) {
  double t0 = now_seconds();
  snprintf(tmpdir, sizeof tmpdir, "%s/osdp_test_data_XXXXXX",
           getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
  if (!mkdtemp(tmpdir)) {
    perror("mkdtemp");
    return 1;
  }
  test_addition();
  test_determinism_and_row_ranges("addition", 64);
  test_determinism_and_row_ranges("addition:2", 40);
  test_text();
  test_tokens();
  test_tokens_v2();
  test_errors();
  rmdir(tmpdir);
  printf("test_data: %.2f s\n", now_seconds() - t0);
  return check_summary();
}
