/*
** plan_tool.c: helpers for the plan-invariance test script.
**   plan_tool random MODEL WORLD B T SEED OUT   writes a random mixed plan (random strategy
**                                               and slice count per operator, random shard
**                                               group per operator among WORLD's divisors,
**                                               random prefetch, overlap_reduce, recompute,
**                                               what each op keeps whole across micro-steps)
**   plan_tool losses A.jsonl B.jsonl RELTOL     compares the per-step losses of two --log files
**   plan_tool weights A.bin B.bin TOL           compares two checkpoints' parameters
**   plan_tool memory SUMMARY.json               checks peak_bytes == predicted_peak_bytes and
**                                               that no rank differed
**   plan_tool roundtrip MODEL COUNT SEED DIR    writes COUNT random plans (every strategy,
**                                               k in 1..8 where the op allows, prefetch and
**                                               overlap_reduce on and off, both reduce dtypes,
**                                               shard groups, world 1..8) to DIR with plan_save, reads
**                                               them back with plan_load and checks every
**                                               field equals the original
** Each prints one line and exits 0 when the check holds, 1 when it does not.
*/
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"
#include "model/gpt.h"
#include "model/plan.h"

/* A random shard group for a world of N ranks: 0 (the world) or one of N's divisors. */
static int random_group(Rng* r, int N) {
  int div[64], n = 0;
  for (int g = 1; g <= N && n < 64; g++) if (N % g == 0) div[n++] = g;
  int i = (int)rng_below(r, (uint64_t)n + 1);
  return i == n || div[i] == N ? 0 : div[i];
}

/* Writes a random plan for MODEL. */
static int tool_random(char** argv) {
  GptConfig cfg;
  GptDesc d;
  if (gpt_config_load(argv[0], &cfg) || gpt_desc_build(&d, &cfg)) {
    fprintf(stderr, "%s\n", osdp_last_error());
    return 1;
  }
  Plan p;
  plan_uniform(&p, &d, STRAT_DP, atoi(argv[1]), atoi(argv[2]), atoi(argv[3]));
  Rng r;
  rng_seed(&r, (uint64_t)atoll(argv[4]));
  static const int ks[] = {1, 2, 3, 4, 8};
  for (int i = 0; i < d.nops; i++) {
    if (!d.ops[i].n_params) continue;
    p.ops[i].k = d.ops[i].splittable ? ks[rng_below(&r, 5)] : 1;
    for (int s = 0; s < p.ops[i].k; s++) p.ops[i].strat[s] = (Strategy)rng_below(&r, STRAT_COUNT);
    p.ops[i].group = random_group(&r, p.world);
    p.ops[i].keep = (int)rng_below(&r, KEEP_ALL + 1) & op_keep_allowed(&p.ops[i]);
  }
  p.prefetch = (int)rng_below(&r, 2);
  p.overlap_reduce = (int)rng_below(&r, 2);
  for (int l = 0; l < p.nlayers; l++) p.recompute[l] = (int)rng_below(&r, 2);
  int rc = plan_save(&p, &d, argv[5], "plan_tool");
  plan_free(&p);
  gpt_desc_free(&d);
  return rc ? 1 : 0;
}

/* Reads the "loss" of every step line of a JSON-lines log. */
static int read_losses(const char* path, double* out, int max) {
  FILE* f = fopen(path, "r");
  if (!f) return -1;
  char line[4096];
  int n = 0;
  while (fgets(line, sizeof line, f) && n < max) {
    cJSON* o = cJSON_Parse(line);
    const cJSON* step = cJSON_GetObjectItemCaseSensitive(o, "step");
    const cJSON* loss = cJSON_GetObjectItemCaseSensitive(o, "loss");
    if (cJSON_IsNumber(step) && cJSON_IsNumber(loss)) out[n++] = loss->valuedouble;
    cJSON_Delete(o);
  }
  fclose(f);
  return n;
}

/* Compares the loss curves of two runs. */
static int tool_losses(char** argv) {
  static double a[100000], b[100000];
  int na = read_losses(argv[0], a, 100000), nb = read_losses(argv[1], b, 100000);
  double tol = atof(argv[2]), worst = 0;
  if (na <= 0 || na != nb) { printf("losses: %d vs %d steps\n", na, nb); return 1; }
  for (int i = 0; i < na; i++) worst = fmax(worst, fabs(a[i] - b[i]) / fabs(a[i]));
  printf("losses: %d steps, worst relative difference %.3g (tolerance %.3g)\n", na, worst, tol);
  return worst <= tol ? 0 : 1;
}

/* Reads the parameters of a weights file: the floats after an llm.c checkpoint's 1024-byte
** header, or after a safetensors file's 8-byte size and JSON header (osdp writes F32 only). */
static float* read_params(const char* path, long* n) {
  FILE* f = fopen(path, "rb");
  if (!f) return NULL;
  unsigned char head[9] = {0};
  long skip = 1024;
  if (fread(head, 1, 9, f) == 9 && head[8] == '{') {
    unsigned long long h = 0;
    for (int i = 7; i >= 0; i--) h = h << 8 | head[i];
    skip = 8 + (long)h;
  }
  fseek(f, 0, SEEK_END);
  long bytes = ftell(f) - skip;
  fseek(f, skip, SEEK_SET);
  float* p = bytes > 0 ? malloc((size_t)bytes) : NULL;
  if (p && fread(p, 1, (size_t)bytes, f) != (size_t)bytes) { free(p); p = NULL; }
  fclose(f);
  *n = bytes / 4;
  return p;
}

/* Compares two checkpoints' parameters. */
static int tool_weights(char** argv) {
  long na = 0, nb = 0;
  float *a = read_params(argv[0], &na), *b = read_params(argv[1], &nb);
  double tol = atof(argv[2]), worst = 0;
  if (!a || !b || na != nb) { printf("weights: unreadable or different sizes\n"); return 1; }
  for (long i = 0; i < na; i++) worst = fmax(worst, fabs((double)a[i] - (double)b[i]));
  printf("weights: %ld parameters, worst absolute difference %.3g (tolerance %.3g)\n", na, worst, tol);
  free(a); free(b);
  return worst <= tol ? 0 : 1;
}

/* Checks the memory fields of a train --json summary. */
static int tool_memory(char** argv) {
  FILE* f = fopen(argv[0], "r");
  char line[8192] = {0};
  int ok = 0;
  while (f && fgets(line, sizeof line, f)) {
    cJSON* o = cJSON_Parse(line);
    const cJSON* pk = cJSON_GetObjectItemCaseSensitive(o, "peak_bytes");
    const cJSON* pr = cJSON_GetObjectItemCaseSensitive(o, "predicted_peak_bytes");
    const cJSON* mm = cJSON_GetObjectItemCaseSensitive(o, "ranks_off_prediction");
    if (cJSON_IsNumber(pk) && cJSON_IsNumber(pr) && cJSON_IsNumber(mm)) {
      ok = pk->valuedouble == pr->valuedouble && mm->valuedouble == 0;
      printf("memory: peak %.0f, predicted %.0f, ranks off prediction %.0f\n", pk->valuedouble,
             pr->valuedouble, mm->valuedouble);
    }
    cJSON_Delete(o);
  }
  if (f) fclose(f);
  return ok ? 0 : 1;
}

/* Compares two plans field by field; prints the first difference. Returns 1 when equal. */
static int plans_equal(const Plan* a, const Plan* b, const GptDesc* d, int n) {
  if (a->world != b->world || a->micro_batch != b->micro_batch || a->seq != b->seq ||
      a->prefetch != b->prefetch || a->nops != b->nops || a->overlap_reduce != b->overlap_reduce ||
      a->reduce_dtype != b->reduce_dtype || a->precision != b->precision) {
    printf("roundtrip: plan %d: world %d/%d micro_batch %d/%d seq %d/%d prefetch %d/%d nops %d/%d "
           "overlap_reduce %d/%d reduce_dtype %d/%d precision %d/%d\n", n, a->world, b->world,
           a->micro_batch, b->micro_batch, a->seq, b->seq, a->prefetch, b->prefetch, a->nops,
           b->nops, a->overlap_reduce, b->overlap_reduce, a->reduce_dtype, b->reduce_dtype,
           a->precision, b->precision);
    return 0;
  }
  for (int l = 0; l < a->nlayers; l++)
    if ((a->recompute[l] != 0) != (b->recompute[l] != 0)) {
      printf("roundtrip: plan %d: layer %d recompute %d vs %d\n", n, l, a->recompute[l],
             b->recompute[l]);
      return 0;
    }
  for (int i = 0; i < a->nops; i++) {
    int same = a->ops[i].k == b->ops[i].k && plan_op_group(a, i) == plan_op_group(b, i) &&
               a->ops[i].keep == b->ops[i].keep;
    for (int s = 0; same && s < a->ops[i].k; s++) same = a->ops[i].strat[s] == b->ops[i].strat[s];
    if (!same) {
      printf("roundtrip: plan %d: operator %s differs (k %d vs %d)\n", n, d->ops[i].name,
             a->ops[i].k, b->ops[i].k);
      return 0;
    }
  }
  return 1;
}

/* Saves and reloads random plans and checks they come back unchanged. Also checks that the
** plans covered every strategy, every slice count 1..8, both prefetch settings and recomputed
** and kept layers. */
static int tool_roundtrip(char** argv) {
  GptConfig cfg;
  GptDesc d;
  if (gpt_config_load(argv[0], &cfg) || gpt_desc_build(&d, &cfg)) {
    fprintf(stderr, "%s\n", osdp_last_error());
    return 1;
  }
  int count = atoi(argv[1]), bad = 0;
  int seen_k[GPT_MAX_SLICES + 1] = {0}, seen_s[STRAT_COUNT] = {0}, seen_pf[2] = {0}, seen_rc[2] = {0};
  int seen_g[2] = {0}, seen_ov[2] = {0}, seen_rd[2] = {0}, seen_pr[2] = {0};
  int seen_keep[KEEP_ALL + 1] = {0};
  Rng r;
  rng_seed(&r, (uint64_t)atoll(argv[2]));
  char path[4096];
  snprintf(path, sizeof path, "%s/roundtrip.json", argv[3]);
  for (int n = 0; n < count && !bad; n++) {
    Plan p, q;
    int world = 1 + (int)rng_below(&r, 8);
    plan_uniform(&p, &d, STRAT_DP, world, 1 + (int)rng_below(&r, 16),
                 1 + (int)rng_below(&r, (uint64_t)cfg.max_seq));
    for (int i = 0; i < d.nops; i++) {
      if (!d.ops[i].n_params) continue;
      int kmax = d.ops[i].splittable ? GPT_MAX_SLICES : 1;
      if ((size_t)kmax > d.ops[i].rows && d.ops[i].splittable) kmax = (int)d.ops[i].rows;
      p.ops[i].k = 1 + (int)rng_below(&r, (uint64_t)kmax);
      seen_k[p.ops[i].k]++;
      for (int s = 0; s < p.ops[i].k; s++) {
        p.ops[i].strat[s] = (Strategy)rng_below(&r, STRAT_COUNT);
        seen_s[p.ops[i].strat[s]]++;
      }
      p.ops[i].group = random_group(&r, world);
      seen_g[p.ops[i].group != 0]++;
      p.ops[i].keep = (int)rng_below(&r, KEEP_ALL + 1) & op_keep_allowed(&p.ops[i]);
      seen_keep[p.ops[i].keep]++;
    }
    p.prefetch = (int)rng_below(&r, 2);
    seen_pf[p.prefetch]++;
    p.overlap_reduce = (int)rng_below(&r, 2);
    p.reduce_dtype = (ReduceDtype)rng_below(&r, 2);
    seen_ov[p.overlap_reduce]++;
    seen_rd[p.reduce_dtype]++;
    p.precision = rng_below(&r, 2) ? PRECISION_BF16 : PRECISION_FP32;
    seen_pr[p.precision == PRECISION_BF16]++;
    for (int l = 0; l < p.nlayers; l++) seen_rc[p.recompute[l] = (int)rng_below(&r, 2)]++;
    if (plan_save(&p, &d, path, "plan_tool") || plan_load(&q, &d, path)) {
      printf("roundtrip: plan %d: %s\n", n, osdp_last_error());
      bad = 1;
    } else {
      bad = !plans_equal(&p, &q, &d, n);
      plan_free(&q);
    }
    plan_free(&p);
  }
  int covered = seen_pf[0] && seen_pf[1] && seen_rc[0] && seen_rc[1] && seen_g[0] && seen_g[1] &&
                seen_ov[0] && seen_ov[1] && seen_rd[0] && seen_rd[1] && seen_pr[0] && seen_pr[1];
  for (int k = 1; k <= GPT_MAX_SLICES; k++) covered = covered && seen_k[k];
  for (int s = 0; s < STRAT_COUNT; s++) covered = covered && seen_s[s];
  for (int k = 0; k <= KEEP_ALL; k++) covered = covered && seen_keep[k];
  remove(path);
  gpt_desc_free(&d);
  if (!bad && !covered) printf("roundtrip: the random plans missed a strategy, slice count, prefetch, recompute or keep_whole\n");
  if (!bad && covered) printf("roundtrip: %d plans saved and loaded back unchanged\n", count);
  return bad || !covered ? 1 : 0;
}

int main(int argc, char** argv) {
  if (argc == 8 && strcmp(argv[1], "random") == 0) return tool_random(argv + 2);
  if (argc == 5 && strcmp(argv[1], "losses") == 0) return tool_losses(argv + 2);
  if (argc == 5 && strcmp(argv[1], "weights") == 0) return tool_weights(argv + 2);
  if (argc == 3 && strcmp(argv[1], "memory") == 0) return tool_memory(argv + 2);
  if (argc == 6 && strcmp(argv[1], "roundtrip") == 0) return tool_roundtrip(argv + 2);
  fprintf(stderr, "usage: see the comment at the top of tests/plan_tool.c\n");
  return 2;
}
