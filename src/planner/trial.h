/*
** trial.h: measuring candidate plans. The cost model ranks plans; a trial settles what the
** model cannot: each candidate trains a few steps on a fresh engine on the real ranks, and the
** measured fastest wins. Trial engines use synthetic tokens and are destroyed afterwards, so a
** run that trials first starts from the same initial weights and data position as one that
** does not.
*/
#ifndef OSDP_TRIAL_H
#define OSDP_TRIAL_H

#include <stddef.h>

#include "kernels/backend.h"
#include "model/gpt.h"
#include "planner/search.h"

/* What `steps` real training steps of one plan measured: medians over the steps of the slowest
** rank's step time and of the figures of the rank on each step's critical path (the one that
** spent the longest outside communication calls): its optimizer time, time in communication
** calls and waits per comm kind (COMM_*). */
typedef struct PlanMeasure {
  double step_s, optim_s, comm_s;
  double wait_s[3];
  size_t peak;        /* arena peak, the largest over ranks */
  int steps;          /* the timed steps the medians are over */
} PlanMeasure;

/* Runs plan p on a fresh engine on backend bk (NULL: the CPU; threads, arena limit mem_limit,
** 0: none) on synthetic tokens (a step's time does not depend on their values) for `steps`
** timed steps, and more while they add up to less than min_s seconds (0: none; 64 steps at
** most: a profile's millisecond steps then give medians that move less between profiles), then
** destroys it. A first step over 1.1x slower than the second is a warm-up: dropped, and one
** more runs (with steps = 1 the first always is), unless `warm` (the process already ran steps
** this large: a trial's candidates after the first), when every step counts. With op_s (nops entries) not NULL, also each
** op's compute seconds per step without its hooks' communication (engine_time_ops): each op's
** median over the steps, then the slowest rank's total shared among the ops by their mean
** over the ranks; with fwd_share (nops entries) also not NULL, each op's share of its time
** spent in the forward pass (the mean over the ranks of its forward seconds over all its
** seconds).
** Collective. Returns 0, or -1 with the engine's error (e.g. the plan does not fit). */
int planner_measure_plan(const GptDesc* d, const Plan* p, const Backend* bk, int threads, size_t mem_limit, int steps,
                         int warm, double min_s, PlanMeasure* m, double* op_s, double* fwd_share);

typedef struct TrialResult {
  int ok;             /* 1 when the candidate ran */
  double step_s;      /* the fastest round's median of the slowest rank's step time */
  double samples_per_s;
  size_t peak;        /* measured arena peak (the largest over ranks) */
} TrialResult;

/* Trains each of the n candidates for about `steps` timed steps, in one round per 2 steps (at
** most 3) that visit every candidate in turn (each round: a fresh engine, planner_measure_plan,
** at least a third of a second of timed steps per step asked for; only the first candidate's
** first step may be a warm-up: the memory of the largest is committed before, and the others
** run where it ran), with
** backend bk (NULL: the CPU), `threads` kernel threads and the arena limited to mem_limit, and fills r[0..n) with the
** fastest round's median step; after a round, a candidate clearly slower than the fastest so
** far runs no more rounds (1.25x after one round; after two, more than twice the largest
** difference between any candidate's two rounds, at least 3%; its figures are its rounds'). Collective: every rank must pass the same
** candidates. Returns
** the index of the measured fastest, or of the candidate the model ranks first (by predicted
** samples/s, among those that ran) when that one measured within the trial's noise of the
** fastest (the largest difference between any candidate's rounds, at least 3%); -1 (with an
** error) when none ran. Prints a progress line per round on rank 0 if verbose. */
int planner_trial(const GptDesc* d, const Candidate* c, int n, const Backend* bk, int threads, size_t mem_limit,
                  int steps, int verbose, TrialResult* r);

/* Seconds of timed steps a trial's candidate runs at least per step asked for (a round of s
** steps: s times this): millisecond steps (small models) then give medians over many, while a
** step of seconds (gpt2-124m at seq 128: 2-9 s) is timed once per step asked for. */
#define PLANNER_TRIAL_STEP_S (1.0 / 3)

/* A trial's choice among candidates c[0..n) measured in r (ok, samples_per_s): the measured
** fastest, unless the candidate the cost model ranks first among those that ran (the highest
** predicted samples/s, c[i].cost) measured within `noise` (a share, e.g. 0.03) of it: a few
** steps cannot rank plans that close, and the model, fitted on many steps, breaks the tie
** (2 hosts x 2 ranks at 150 Mbit/s: the measured pick, 1.5% ahead in its trial, trained 2%
** slower than the model's, predicted 5.5% ahead). -1 when none ran. Says so on rank 0 when it
** keeps the model's choice and verbose. */
int planner_trial_choice(const Candidate* c, int n, const TrialResult* r, double noise, int verbose);

#endif
