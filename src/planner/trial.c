/* trial.c: training candidate plans for a few steps to measure them; see trial.h. */
#include "planner/trial.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"
#include "core/util.h"
#include "runtime/engine.h"

/* Orders doubles for qsort. */
static int cmp_double(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return x < y ? -1 : x > y;
}

/* Runs one candidate: a fresh engine, one warm-up step and `steps` timed ones on synthetic
** tokens (the step time does not depend on their values). */
static int trial_one(const GptDesc* d, const Plan* p, int threads, size_t mem_limit, int steps,
                     TrialResult* r) {
  TrainOptions opt;
  Engine e;
  train_options_default(&opt);
  opt.threads = threads;
  opt.mem_limit = mem_limit;
  memset(r, 0, sizeof *r);
  double* t = malloc((size_t)(steps > 0 ? steps : 1) * sizeof *t);
  if (!t) return osdp_fail("out of host memory");
  if (engine_create(&e, d, p, &opt)) { engine_destroy(&e); free(t); return -1; }
  Rng g;
  rng_seed(&g, 4242 + (uint64_t)comm_rank());
  int BT = p->micro_batch * p->seq;
  for (int i = 0; i < BT; i++) {
    engine_tokens(&e)[i] = (int)rng_below(&g, (uint64_t)d->cfg.vocab_size);
    engine_targets(&e)[i] = (int)rng_below(&g, (uint64_t)d->cfg.vocab_size);
  }
  StepResult sr;
  long targets = (long)BT * comm_size();
  engine_step(&e, targets, &sr); /* warm-up: first touch of the arena's pages */
  for (int s = 0; s < steps; s++) {
    comm_barrier();
    engine_step(&e, targets, &sr);
    t[s] = comm_allreduce_max_f64(sr.seconds);
  }
  qsort(t, (size_t)steps, sizeof *t, cmp_double);
  r->ok = 1;
  r->step_s = steps % 2 ? t[steps / 2] : 0.5 * (t[steps / 2 - 1] + t[steps / 2]);
  r->samples_per_s = (double)comm_size() * p->micro_batch / r->step_s;
  r->peak = (size_t)comm_allreduce_max_f64((double)e.arena.peak_total);
  engine_destroy(&e);
  free(t);
  return 0;
}

int planner_trial(const GptDesc* d, const Candidate* c, int n, int threads, size_t mem_limit,
                  int steps, int verbose, TrialResult* r) {
  int best = -1;
  if (steps < 1) steps = 1;
  for (int i = 0; i < n; i++) {
    if (verbose && comm_rank() == 0) {
      printf("trial %d/%d: %s, micro-batch %d%s, %d steps\n", i + 1, n, c[i].origin,
             c[i].plan.micro_batch, c[i].plan.prefetch ? ", prefetch" : "", steps);
      fflush(stdout);
    }
    if (trial_one(d, &c[i].plan, threads, mem_limit, steps, &r[i])) {
      if (verbose && comm_rank() == 0) printf("trial %d/%d: did not run: %s\n", i + 1, n, osdp_last_error());
      r[i].ok = 0;
      continue;
    }
    if (best < 0 || r[i].samples_per_s > r[best].samples_per_s) best = i;
  }
  if (best < 0) return osdp_fail("trial: none of the %d candidate plans ran", n);
  return best;
}
