/*
** sample.c: generation for people over model/decode.h (see sample.h).
*/
#include "cli/sample.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"
#include "model/decode.h"

int sample_generate(const GptDesc* d, const float* params, const int* prompt, int n,
                    const SampleOptions* o, int* out, int* nout, double* seconds) {
  *nout = 0;
  *seconds = 0;
  int ctx = d->cfg.max_seq, V = d->cfg.vocab_size;
  if (n < 1) return osdp_fail("sample: the prompt is empty; give --prompt TEXT or --prompt-tokens IDS");
  if (n >= ctx)
    return osdp_fail("sample: the prompt's %d tokens fill the context of %s (%d positions): give "
                     "a shorter one", n, d->cfg.name, ctx);
  int total = n + o->tokens < ctx ? n + o->tokens : ctx;
  int* seq = malloc((size_t)total * sizeof(int));
  float* logits = malloc((size_t)V * sizeof(float));
  Decoder dec = {0};
  int rc = seq && logits ? 0 : osdp_fail("sample: out of memory");
  if (!rc && !o->no_cache) rc = decoder_create(&dec, d, params, total);
  Rng rng;
  rng_seed(&rng, o->seed);
  double t0 = now_seconds();
  for (int i = 0; !rc && i < n; i++) {
    seq[i] = prompt[i];
    if (!o->no_cache) rc = decoder_push(&dec, prompt[i]);
    else if (prompt[i] < 0 || prompt[i] >= V)
      rc = osdp_fail("sample: token %d is outside the vocabulary of %s (0..%d)", prompt[i],
                     d->cfg.name, V - 1);
  }
  for (int len = n; !rc && len < total; len++) {
    const float* next = logits;
    if (o->no_cache) rc = decode_full_logits(d, params, seq, len, logits, NULL);
    else next = decoder_logits(&dec);
    if (rc) break;
    int t = decode_pick(next, V, o->temperature, o->top_k, &rng);
    seq[len] = out[(*nout)++] = t;
    if (t == o->stop_token || len + 1 == total) break;
    if (!o->no_cache) rc = decoder_push(&dec, t);
  }
  *seconds = now_seconds() - t0;
  decoder_free(&dec);
  free(seq);
  free(logits);
  return rc;
}

const char* sample_text(const DataSource* ds, const int* tokens, int n, char* buf, size_t cap) {
  size_t len = 0;
  buf[0] = 0;
  for (int i = 0; i < n; i++) {
    char t[DATA_TOKEN_TEXT];
    if (ds) data_token_text(ds, tokens[i], t);
    else snprintf(t, sizeof t, "<%d>", tokens[i]);
    size_t k = strlen(t);
    if (len + k + 1 > cap) break;
    memcpy(buf + len, t, k + 1);
    len += k;
  }
  return buf;
}

/* The value of the answer digits ans[0..n-1] (least significant first, as the task writes
** them) up to the end token; -1 when they are not all digits or there is no end token. */
static long answer_value(const int* ans, int n) {
  long v = 0, place = 1;
  for (int i = 0; i < n; i++) {
    if (ans[i] == DATA_ADD_END) return i > 0 ? v : -1;
    if (ans[i] < 0 || ans[i] > 9 || place > 1000000000L) return -1;
    v += ans[i] * place;
    place *= 10;
  }
  return -1;
}

/* One problem of row tokens (T of them): the prompt (up to and including the first '=') and
** the right answer (through the end token after it). 0, or -1 when the row holds none. */
static int row_problem(const int* row, int T, int* prompt_len, int* answer_len) {
  int eq = -1, end = -1;
  for (int i = 0; i < T && end < 0; i++) {
    if (row[i] == DATA_ADD_EQUALS && eq < 0) eq = i;
    else if (row[i] == DATA_ADD_END && eq >= 0) end = i;
  }
  if (eq < 0 || end < 0) return -1;
  *prompt_len = eq + 1;
  *answer_len = end - eq;
  return 0;
}

/* Prints and records one answered problem. */
static void report_problem(const DataSource* ds, const int* row, int plen, const int* want,
                           int wlen, const int* got, int glen, int right, FILE* people,
                           cJSON* arr) {
  char ptxt[64], wtxt[64], gtxt[64];
  sample_text(ds, row, plen - 1, ptxt, sizeof ptxt);
  sample_text(ds, want, wlen, wtxt, sizeof wtxt);
  sample_text(ds, got, glen, gtxt, sizeof gtxt);
  long wv = answer_value(want, wlen), gv = answer_value(got, glen);
  if (people) {
    char gnum[24] = "?";
    if (gv >= 0) snprintf(gnum, sizeof gnum, "%ld", gv);
    fprintf(people, "  %s = %-6s (wrote %-7s)  %s", ptxt, gnum, gtxt, right ? "right\n" : "WRONG");
    if (!right) fprintf(people, ": %ld (%s)\n", wv, wtxt);
  }
  if (!arr) return;
  cJSON* o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "problem", ptxt);
  cJSON_AddStringToObject(o, "wrote", gtxt);
  if (gv >= 0) cJSON_AddNumberToObject(o, "answer", (double)gv);
  else cJSON_AddNullToObject(o, "answer");
  cJSON_AddNumberToObject(o, "expected", (double)wv);
  cJSON_AddBoolToObject(o, "right", right);
  cJSON_AddItemToArray(arr, o);
}

int sample_problems(const GptDesc* d, const float* params, const DataSource* ds, int count,
                    const SampleOptions* o, FILE* people, cJSON* json, int* right) {
  *right = 0;
  int T = data_seq_len(ds);
  int* rows = malloc((size_t)count * T * sizeof(int));
  int* targets = malloc((size_t)count * T * sizeof(int));
  int rc = rows && targets ? 0 : osdp_fail("sample: out of memory");
  if (!rc) rc = data_batch(ds, DATA_VAL, (long)(o->seed % 1000003), count, 0, count, rows, targets, NULL);
  SampleOptions so = *o;
  so.stop_token = DATA_ADD_END;
  cJSON* arr = json ? cJSON_AddArrayToObject(json, "problems") : NULL;
  for (int p = 0; !rc && p < count; p++) {
    const int* row = rows + (size_t)p * T;
    int plen, wlen, glen, got[32];
    double secs;
    if (row_problem(row, T, &plen, &wlen)) { rc = osdp_fail("sample: no problem in a row"); break; }
    so.tokens = wlen < 32 ? wlen : 32;
    so.seed = o->seed + (uint64_t)p;
    rc = sample_generate(d, params, row, plen, &so, got, &glen, &secs);
    if (rc) break;
    int ok = glen == wlen && memcmp(got, row + plen, (size_t)wlen * sizeof(int)) == 0;
    *right += ok;
    report_problem(ds, row, plen, row + plen, wlen, got, glen, ok, people, arr);
  }
  if (json && !rc) {
    cJSON_AddNumberToObject(json, "right", *right);
    cJSON_AddNumberToObject(json, "total", count);
  }
  free(rows);
  free(targets);
  return rc;
}
