/* trial.c: training candidate plans for a few steps to measure them; see trial.h. */
#include "planner/trial.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"
#include "core/util.h"
#include "runtime/engine.h"

/* Turns this rank's op seconds of each step (per_step[s * nops + i], then room for `steps`
** more) into every rank's per-step figures in op_s: each op's median over the steps (noise
** from other processes only ever adds time; a slow step moves no median of three), then the
** slowest rank's total shared among the ops in proportion to their mean over the ranks.
** Taking each op's own slowest rank instead would add up every rank's worst moments, which no
** step ever has (small on 4 ranks sharing 2 cores: the sum of per-op maxima was 1.05-1.26x the
** slowest rank's own total). Collective. */
static void slowest_rank_ops(double* per_step, double* op_s, int nops, int steps) {
  double mine = 0, mean = 0, *col = per_step + (size_t)steps * (size_t)nops;
  for (int i = 0; i < nops; i++) {
    for (int s = 0; s < steps; s++) col[s] = per_step[(size_t)s * nops + i];
    op_s[i] = median_of(col, steps);
    mine += op_s[i];
  }
  double slowest = comm_allreduce_max_f64(comm_world(), mine);
  comm_allreduce_f64_array(comm_world(), op_s, nops);
  for (int i = 0; i < nops; i++) mean += op_s[i];
  for (int i = 0; i < nops; i++) op_s[i] = mean > 0 ? op_s[i] / mean * slowest : 0;
}

/* Each op's share of its seconds spent in the forward pass, fwd_share[op]: this rank's forward
** seconds over its seconds in all passes across the `steps` kept (ph_step: [op * 3 + GptPhase]
** a step), then the mean over the ranks (0 for an op that took no measurable time). Collective. */
static void forward_shares(const double* ph_step, double* fwd_share, int nops, int steps) {
  for (int i = 0; i < nops; i++) {
    double all = 0, fwd = 0;
    for (int s = 0; s < steps; s++) {
      const double* ph = ph_step + ((size_t)s * nops + i) * 3;
      all += ph[GPT_FORWARD] + ph[GPT_BACKWARD] + ph[GPT_RECOMPUTE];
      fwd += ph[GPT_FORWARD];
    }
    fwd_share[i] = all > 0 ? fwd / all : 0;
  }
  comm_allreduce_f64_array(comm_world(), fwd_share, nops);
  for (int i = 0; i < nops; i++) fwd_share[i] /= comm_size();
}

/* A first timed step more than this much slower than the second was a warm-up (first touches
** of arena pages not committed before, buffers built lazily): it is dropped and one more step
** runs. After an engine reused the pages of one before it (the CPU backend keeps a released
** range), the first step is a step like the others and counts. */
#define WARM_UP_RATIO 1.10

/* Drops timed step 0 of the `last` + 1 filled (v: nf columns of `steps`; per_step: nops op times
** a step, ph_step: 3 * nops, either NULL), moving steps 1..last down one; returns the index the
** loop is now at (last - 1), so the dropped step's place is measured again. */
static int drop_first_step(double* v, double* per_step, double* ph_step, int nf, int steps, int nops, int last) {
  for (int f = 0; f < nf; f++)
    memmove(v + (size_t)f * steps, v + (size_t)f * steps + 1, (size_t)last * sizeof *v);
  if (per_step) memmove(per_step, per_step + nops, (size_t)last * (size_t)nops * sizeof *per_step);
  if (ph_step) memmove(ph_step, ph_step + 3 * nops, (size_t)last * 3 * (size_t)nops * sizeof *ph_step);
  return last - 1;
}

/* The figures of a step, x[0..nf) on every rank (x[0] the step's seconds, x[comm] the seconds
** in communication calls), replaced by those of the rank on the step's critical path: the one
** that spent the longest outside communication calls. Its waits are what the step could not
** hide; another rank's waits also hold the time it waited for that rank to arrive, which the
** critical rank's own compute already counts (the op times are the slowest rank's too), so
** taking each figure's largest over the ranks would count that lag twice. The step's time stays
** the slowest rank's. Ties go to the lowest rank. Collective. */
static void critical_rank_figures(double* x, int nf, int comm) {
  Comm* w = comm_world();
  double busy = x[0] - x[comm], most = comm_allreduce_max_f64(w, busy);
  int crit = (int)-comm_allreduce_max_f64(w, busy == most ? -(double)comm_rank() : -1e30);
  double step = comm_allreduce_max_f64(w, x[0]);
  for (int f = 0; f < nf; f++) x[f] = comm_rank() == crit ? x[f] : 0;
  comm_allreduce_f64_array(w, x, nf);
  x[0] = step;
}

/* The most timed steps a measurement with a time floor (min_s) runs. */
#define MEASURE_MAX_STEPS 64

int planner_measure_plan(const GptDesc* d, const Plan* p, const Backend* bk, int threads, size_t mem_limit, int steps,
                         int warm, double min_s, PlanMeasure* m, double* op_s, double* fwd_share) {
  TrainOptions opt;
  Engine e;
  train_options_default(&opt);
  opt.threads = threads;
  opt.mem_limit = mem_limit;
  opt.backend = bk;
  opt.timing_only = 1; /* the weights' values do not change a step's time */
  memset(m, 0, sizeof *m);
  if (steps < 1) steps = 1;
  int cap = min_s > 0 && steps < MEASURE_MAX_STEPS ? MEASURE_MAX_STEPS : steps; /* room for steps */
  enum { F_STEP, F_OPTIM, F_COMM, F_WAIT0, NF = F_WAIT0 + COMM_KINDS };
  double* v = malloc((size_t)cap * NF * sizeof *v);
  double* per_step = op_s ? calloc((size_t)cap * (size_t)(d->nops + 1), sizeof *per_step) : NULL;
  double* ph_step = op_s && fwd_share ? calloc((size_t)cap * 3 * (size_t)d->nops, sizeof *ph_step) : NULL;
  if (!v || (op_s && !per_step) || (op_s && fwd_share && !ph_step)) {
    free(v); free(per_step); free(ph_step);
    return osdp_fail("out of host memory");
  }
  if (engine_create(&e, d, p, &opt)) { free(v); free(per_step); free(ph_step); return -1; } /* nothing left to destroy */
  Rng g;
  rng_seed(&g, 4242 + (uint64_t)comm_rank());
  int BT = p->micro_batch * p->seq;
  int* tok = malloc((size_t)BT * 2 * sizeof *tok);
  if (!tok) { engine_destroy(&e); free(v); free(per_step); free(ph_step); return osdp_fail("out of host memory"); }
  for (int i = 0; i < 2 * BT; i++) tok[i] = (int)rng_below(&g, (uint64_t)d->cfg.vocab_size);
  engine_set_batch(&e, tok, tok + BT);
  free(tok);
  StepResult sr;
  long targets = (long)BT * comm_size() * plan_accum(p);
  int checked = warm, second = steps > 1, n = 0; /* with one step asked for, the first warms up */
  double timed = 0; /* seconds of the steps kept, the same on every rank (the slowest's) */
  for (int s = 0; s < steps || (timed < min_s && s < cap); s++) {
    if (op_s) engine_time_ops(&e, per_step + (size_t)s * d->nops, ph_step ? ph_step + (size_t)s * 3 * d->nops : NULL);
    comm_reset_stats();
    comm_barrier(comm_world());
    engine_step(&e, targets, NULL, NULL, &sr);
    CommStats cs = comm_stats();
    double x[NF] = {[F_STEP] = sr.seconds, [F_OPTIM] = sr.optim_seconds};
    for (int k = 0; k < COMM_KINDS; k++) {
      x[F_WAIT0 + k] = cs.seconds[k];
      x[F_COMM] += cs.seconds[k];
    }
    critical_rank_figures(x, NF, F_COMM);
    for (int f = 0; f < NF; f++) v[(size_t)f * cap + s] = x[f];
    timed += x[F_STEP];
    if (!checked && s == second) {
      checked = 1;
      if (!second || v[0] > WARM_UP_RATIO * v[1]) {
        timed -= v[0];
        s = drop_first_step(v, per_step, ph_step, NF, cap, d->nops, s);
      }
    }
    n = s + 1;
  }
  m->step_s = median_of(v + (size_t)F_STEP * cap, n);
  m->optim_s = median_of(v + (size_t)F_OPTIM * cap, n);
  m->comm_s = median_of(v + (size_t)F_COMM * cap, n);
  for (int k = 0; k < COMM_KINDS; k++) m->wait_s[k] = median_of(v + (size_t)(F_WAIT0 + k) * cap, n);
  m->steps = n;
  m->peak = (size_t)comm_allreduce_max_f64(comm_world(), (double)engine_peak_bytes(&e, NULL));
  if (ph_step) forward_shares(ph_step, fwd_share, d->nops, n);
  if (op_s) slowest_rank_ops(per_step, op_s, d->nops, n);
  engine_destroy(&e);
  free(v);
  free(per_step);
  free(ph_step);
  return 0;
}

/* Rounds a trial is split into at most (one per 2 steps asked for): every candidate runs once
** per round, in turn, so a slow spell of the machine (another process) falls on several
** candidates, not on one. */
#define TRIAL_ROUNDS 3
/* After a round, a candidate whose fastest round so far is this much slower (in samples/s) than
** the fastest candidate's runs no more rounds: noise only ever slows a step down, so more rounds
** could not make it the fastest, and its rounds cost as much as the contenders'. After two
** rounds the bar is lower: twice the largest difference between any candidate's two rounds (the
** noise this trial has seen), at least TRIAL_DROP_MIN. */
#define TRIAL_DROP_RATIO 1.25
#define TRIAL_DROP_MIN 0.03

/* Samples per second of candidate c at step time step_s. */
static double trial_sps(const Candidate* c, double step_s) {
  return (double)plan_global_batch(&c->plan) / step_s;
}

/* The noise a trial has seen: the largest relative difference between any candidate's rounds
** (worst[i]: candidate i's slowest round, rounds[i]: how many it ran), or -1 while none has run
** twice. */
static double rounds_noise(int n, const TrialResult* r, const double* worst, const int* rounds) {
  double noise = -1;
  for (int i = 0; i < n; i++)
    if (r[i].ok && rounds[i] >= 2 && worst[i] / r[i].step_s - 1 > noise) noise = worst[i] / r[i].step_s - 1;
  return noise;
}

/* After a round: marks (dropped[i] = 1) the candidates clearly slower than the leader: by
** TRIAL_DROP_RATIO after one round, by 1 + max(2 x the noise, TRIAL_DROP_MIN) once some have run
** twice. */
static void trial_drop_slow(const Candidate* c, int n, const TrialResult* r, const double* worst,
                            const int* rounds, int* dropped, int verbose) {
  double noise = rounds_noise(n, r, worst, rounds);
  double bar = noise < 0 ? TRIAL_DROP_RATIO : 1 + (2 * noise > TRIAL_DROP_MIN ? 2 * noise : TRIAL_DROP_MIN);
  if (bar > TRIAL_DROP_RATIO) bar = TRIAL_DROP_RATIO;
  int lead = -1;
  for (int i = 0; i < n; i++)
    if (r[i].ok && (lead < 0 || trial_sps(&c[i], r[i].step_s) > trial_sps(&c[lead], r[lead].step_s)))
      lead = i;
  for (int i = 0; lead >= 0 && i < n; i++) {
    double ratio = trial_sps(&c[lead], r[lead].step_s) / trial_sps(&c[i], r[i].step_s);
    if (!r[i].ok || dropped[i] || ratio < bar) continue;
    dropped[i] = 1;
    if (verbose && comm_rank() == 0)
      printf("trial: %s is %.2fx slower than %s: no more rounds for it\n", c[i].origin, ratio,
             c[lead].origin);
  }
}

int planner_trial_choice(const Candidate* c, int n, const TrialResult* r, double noise, int verbose) {
  int best = -1, model = -1;
  for (int i = 0; i < n; i++) {
    if (!r[i].ok) continue;
    if (best < 0 || r[i].samples_per_s > r[best].samples_per_s) best = i;
    /* Predicted samples/s up to the world size, the same for every candidate. */
    double pred = c[i].cost.samples_per_s;
    if (pred > 0 && (model < 0 || pred > c[model].cost.samples_per_s)) model = i;
  }
  if (best < 0 || model < 0 || model == best || r[best].samples_per_s > r[model].samples_per_s * (1 + noise))
    return best;
  if (verbose && comm_rank() == 0)
    printf("trial: %s measured %.1f%% ahead of %s, within this trial's noise (%.1f%%): keeping "
           "the model's choice, %s\n", c[best].origin,
           100 * (r[best].samples_per_s / r[model].samples_per_s - 1), c[model].origin, 100 * noise,
           c[model].origin);
  return model;
}

/* Where a trial is, for its progress lines: wall seconds since it began, and the predicted
** step seconds of the candidate-rounds done and of those still to run. */
typedef struct TrialClock {
  double t0, done_pred, left_pred;
} TrialClock;

/* The predicted step seconds of one candidate-round of candidate c (steps steps). */
static double round_pred(const Candidate* c, int steps) {
  return c->cost.step_s > 0 ? c->cost.step_s * steps : 1.0;
}

/* After candidate c's round (m: its measurement, or NULL when it did not run): one progress line
** on rank 0 with the time left, the candidate-rounds still to run scaled by how long the done
** ones took against their prediction (so an engine's set-up and the model's error count too). */
static void trial_progress(TrialClock* k, const Candidate* c, int i, int n, int steps,
                           const PlanMeasure* m) {
  double pred = round_pred(c, steps);
  k->done_pred += pred;
  k->left_pred -= pred;
  if (comm_rank() != 0) return;
  double spent = now_seconds() - k->t0, left = k->left_pred > 0 ? k->left_pred * spent / k->done_pred : 0;
  if (m)
    printf("trial %d/%d: %-16s %8.4f s/step (predicted %.4f), %.2f samples/s | %.0f s, about %.0f s left\n",
           i + 1, n, c->origin, m->step_s, c->cost.step_s, trial_sps(c, m->step_s), spent, left);
  else
    printf("trial %d/%d: %-16s did not run: %s | %.0f s, about %.0f s left\n", i + 1, n, c->origin,
           osdp_last_error(), spent, left);
  fflush(stdout);
}

/* Commits, once, the memory the largest of the n candidates will use, where reserved memory is
** committed on first touch (the CPU, which keeps a released range's pages for the next engine):
** otherwise the first candidate larger than what the profile's engines touched paid those first
** touches in its first step (gpt2-124m, micro-batch 8 after a profile to 4: 21 s against
** 10.6 s), which was then dropped as a warm-up and run again. */
static void warm_memory(const Backend* bk, const Candidate* c, int n) {
  size_t most = 0;
  for (int i = 0; i < n; i++)
    if (c[i].cost.mem.peak > most) most = c[i].cost.mem.peak;
  if (!most || bk->device_memory) return; /* a device's memory is there when reserved */
  void* p = bk->reserve(most);
  if (!p) { osdp_clear_error(); return; } /* the engines will say what they cannot reserve */
  bk->zero(p, most);
  bk->release(p, most, most);
}

int planner_trial(const GptDesc* d, const Candidate* c, int n, const Backend* bk, int threads, size_t mem_limit,
                  int steps, int verbose, TrialResult* r) {
  int best = -1, nrounds = steps / 2, warmed = 0;
  if (nrounds < 1) nrounds = 1;
  if (nrounds > TRIAL_ROUNDS) nrounds = TRIAL_ROUNDS;
  int per_round = (steps + nrounds - 1) / nrounds;
  int* dropped = calloc((size_t)(n > 0 ? n : 1), sizeof *dropped);
  int* rounds = calloc((size_t)(n > 0 ? n : 1), sizeof *rounds);
  double* worst = calloc((size_t)(n > 0 ? n : 1), sizeof *worst);
  if (!dropped || !rounds || !worst) {
    free(dropped); free(rounds); free(worst);
    return osdp_fail("out of host memory");
  }
  for (int i = 0; i < n; i++) memset(&r[i], 0, sizeof r[i]);
  warm_memory(bk ? bk : backend_cpu(), c, n);
  TrialClock clock = {now_seconds(), 0, 0};
  for (int round = 0; round < nrounds; round++) {
    int left = 0;
    clock.left_pred = 0;
    for (int i = 0; i < n; i++)
      if (round == 0 || (r[i].ok && !dropped[i])) { left++; clock.left_pred += round_pred(&c[i], per_round); }
    if (round > 0 && left <= 1) break; /* the fastest alone is left: nothing to compare */
    if (verbose && comm_rank() == 0) {
      printf("trial round %d/%d: %d candidates, %d step%s each\n", round + 1, nrounds, left, per_round,
             per_round == 1 ? "" : "s");
      fflush(stdout);
    }
    for (int i = 0; i < n; i++) {
      if (round > 0 && (!r[i].ok || dropped[i])) continue; /* did not run, or clearly slower */
      PlanMeasure m;
      int failed = planner_measure_plan(d, &c[i].plan, bk, threads, mem_limit, per_round, warmed,
                                        per_round * PLANNER_TRIAL_STEP_S, &m, NULL, NULL);
      if (verbose) trial_progress(&clock, &c[i], i, n, per_round, failed ? NULL : &m);
      if (failed) continue;
      warmed = 1; /* the first run's first step may have warmed the process up; later ones' count */
      /* Noise only ever slows a step down: keep the fastest round's median. */
      if (!r[i].ok || m.step_s < r[i].step_s) r[i].step_s = m.step_s;
      if (m.step_s > worst[i]) worst[i] = m.step_s;
      rounds[i]++;
      r[i].ok = 1;
      r[i].peak = m.peak;
    }
    if (round + 1 < nrounds) trial_drop_slow(c, n, r, worst, rounds, dropped, verbose);
  }
  for (int i = 0; i < n; i++)
    if (r[i].ok) r[i].samples_per_s = trial_sps(&c[i], r[i].step_s);
  double noise = rounds_noise(n, r, worst, rounds);
  best = planner_trial_choice(c, n, r, noise > TRIAL_DROP_MIN ? noise : TRIAL_DROP_MIN, verbose);
  free(dropped);
  free(rounds);
  free(worst);
  if (best < 0) return osdp_fail("trial: none of the %d candidate plans ran", n);
  return best;
}
