/*
** test_staging.c: the GPU's communication path, tested without a GPU. Run under mpirun with 2
** or more ranks. Each plan (dp, zero2, zero3, zero3 with prefetch, mixed random plans with
** sliced operators, recomputed layers, random shard groups, overlapped reduce-scatters and
** bf16 reductions; on an even world zero3 in groups of 2) trains a few steps twice: on the CPU backend, whose
** collectives use the buffers directly, and on backend_cpu_staged(), which declares its memory
** not host-addressable, so every collective goes through host staging copies, the batch is
** copied in and the weights out, exactly as on a GPU shared by several ranks. The two must
** agree bit for bit (staging only copies; bf16 packing is the same host code), and both peaks
** must equal the prediction.
*/
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "comm/comm.h"
#include "core/util.h"
#include "model/gpt.h"
#include "model/plan.h"
#include "runtime/engine.h"

enum { B = 2, T = 12, STEPS = 4 };

/* An odd model: no size a power of two, several heads, a padded vocabulary. */
static const GptConfig cfg = {.name = "odd", .n_layer = 2, .n_embd = 18, .n_head = 3,
                              .vocab_size = 37, .padded_vocab = 128, .max_seq = 16};

/* What a run leaves to compare: its losses, gradient norms and final weights. */
typedef struct Run {
  double loss[STEPS], norm[STEPS];
  float* params;
  int ok;
} Run;

/* Trains plan p for STEPS steps on backend bk from the seed's weights, on batches that depend
** on (step, rank) only. */
static void train(const GptDesc* d, const Plan* p, const Backend* bk, Run* run) {
  TrainOptions o;
  train_options_default(&o);
  o.backend = bk;
  o.lr = 3e-3;
  o.bucket_bytes = 512; /* several dp buckets, so several non-blocking all-reduces overlap */
  Engine e;
  memset(run, 0, sizeof *run);
  if (engine_create(&e, d, p, &o)) {
    CHECK_MSG(0, "engine_create on %s: %s", bk->name, osdp_last_error());
    engine_destroy(&e);
    return;
  }
  int tok[B * T], tg[B * T];
  for (int s = 0; s < STEPS; s++) {
    Rng r;
    rng_seed(&r, 1000 + 17 * (uint64_t)s + (uint64_t)comm_rank());
    for (int i = 0; i < B * T; i++) {
      tok[i] = (int)rng_below(&r, (uint64_t)cfg.vocab_size);
      tg[i] = i % 5 == 4 ? -1 : (int)rng_below(&r, (uint64_t)cfg.vocab_size);
    }
    engine_set_batch(&e, tok, tg);
    StepResult sr;
    engine_step(&e, (long)B * T * comm_size(), NULL, NULL, &sr);
    run->loss[s] = sr.loss;
    run->norm[s] = sr.grad_norm;
  }
  size_t peak = engine_peak_bytes(&e, NULL);
  CHECK_MSG(peak == e.predicted.peak, "%s: peak %zu != predicted %zu", bk->name, peak, e.predicted.peak);
  run->params = malloc(d->n_params * sizeof(float));
  if (run->params) engine_get_params(&e, run->params);
  run->ok = run->params != NULL;
  engine_destroy(&e);
}

/* Trains p on both backends and checks they agree exactly. */
static void check_plan(const GptDesc* d, const Plan* p, const char* name) {
  Run direct, staged;
  train(d, p, backend_cpu(), &direct);
  train(d, p, backend_cpu_staged(), &staged);
  if (direct.ok && staged.ok) {
    int same = memcmp(direct.loss, staged.loss, sizeof direct.loss) == 0 &&
               memcmp(direct.norm, staged.norm, sizeof direct.norm) == 0;
    CHECK_MSG(same, "%s: staged losses/norms differ (step 1: %.9g vs %.9g)", name, direct.loss[0],
              staged.loss[0]);
    CHECK_MSG(memcmp(direct.params, staged.params, d->n_params * sizeof(float)) == 0,
              "%s: staged weights differ", name);
  }
  free(direct.params);
  free(staged.params);
}

int main(int argc, char** argv) {
  comm_init(&argc, &argv);
  GptDesc d;
  if (gpt_desc_build(&d, &cfg)) { fprintf(stderr, "%s\n", osdp_last_error()); return 1; }
  const char* names[] = {"dp", "zero2", "zero3"};
  Plan p;
  for (int s = 0; s < STRAT_COUNT; s++) {
    plan_uniform(&p, &d, (Strategy)s, comm_size(), B, T);
    check_plan(&d, &p, names[s]);
    if (s == STRAT_ZERO3) {
      p.prefetch = 1;
      check_plan(&d, &p, "zero3+prefetch");
    }
    plan_free(&p);
  }
  if (comm_size() % 2 == 0) {
    plan_uniform(&p, &d, STRAT_ZERO3, comm_size(), B, T);
    plan_set_group(&p, 2);
    check_plan(&d, &p, "zero3 in groups of 2");
    p.overlap_reduce = 1;
    p.reduce_dtype = REDUCE_BF16;
    check_plan(&d, &p, "zero3 in groups of 2, overlapped, bf16");
    plan_free(&p);
  }
  /* Mixed plans: every rank draws the same ones. */
  static const int ks[] = {1, 2, 3};
  for (int seed = 1; seed <= 3; seed++) {
    Rng r;
    rng_seed(&r, (uint64_t)seed);
    plan_uniform(&p, &d, STRAT_DP, comm_size(), B, T);
    for (int i = 0; i < d.nops; i++) {
      if (!d.ops[i].n_params) continue;
      p.ops[i].k = d.ops[i].splittable ? ks[rng_below(&r, 3)] : 1;
      for (int j = 0; j < p.ops[i].k; j++) p.ops[i].strat[j] = (Strategy)rng_below(&r, STRAT_COUNT);
      int G = 1 + (int)rng_below(&r, (uint64_t)comm_size());
      p.ops[i].group = comm_size() % G == 0 && G < comm_size() ? G : 0;
    }
    p.prefetch = (int)rng_below(&r, 2);
    p.overlap_reduce = (int)rng_below(&r, 2);
    p.reduce_dtype = (ReduceDtype)rng_below(&r, 2);
    for (int l = 0; l < p.nlayers; l++) p.recompute[l] = (int)rng_below(&r, 2);
    char name[32];
    snprintf(name, sizeof name, "random plan %d", seed);
    check_plan(&d, &p, name);
    plan_free(&p);
  }
  gpt_desc_free(&d);
  int rc = check_summary();
  rc = (int)comm_allreduce_max_f64(comm_world(), rc);
  comm_finalize();
  return rc;
}
