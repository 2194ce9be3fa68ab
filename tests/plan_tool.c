/*
** plan_tool.c: helpers for the plan-invariance test script.
**   plan_tool random MODEL WORLD B T SEED OUT   writes a random mixed plan (random strategy
**                                               and slice count per operator)
**   plan_tool losses A.jsonl B.jsonl RELTOL     compares the per-step losses of two --log files
**   plan_tool weights A.bin B.bin TOL           compares two checkpoints' parameters
**   plan_tool memory SUMMARY.json               checks peak_bytes == predicted_peak_bytes and
**                                               that no rank differed
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
  }
  p.prefetch = (int)rng_below(&r, 2);
  int rc = plan_save(&p, &d, argv[5]);
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

/* Reads a whole binary file. */
static float* read_params(const char* path, long* n) {
  FILE* f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long bytes = ftell(f) - 1024;
  fseek(f, 1024, SEEK_SET);
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

int main(int argc, char** argv) {
  if (argc == 8 && strcmp(argv[1], "random") == 0) return tool_random(argv + 2);
  if (argc == 5 && strcmp(argv[1], "losses") == 0) return tool_losses(argv + 2);
  if (argc == 5 && strcmp(argv[1], "weights") == 0) return tool_weights(argv + 2);
  if (argc == 3 && strcmp(argv[1], "memory") == 0) return tool_memory(argv + 2);
  fprintf(stderr, "usage: see the comment at the top of tests/plan_tool.c\n");
  return 2;
}
