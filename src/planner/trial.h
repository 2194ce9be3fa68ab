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

#include "model/gpt.h"
#include "planner/search.h"

typedef struct TrialResult {
  int ok;             /* 1 when the candidate ran */
  double step_s;      /* median over the timed steps of the slowest rank's step time */
  double samples_per_s;
  size_t peak;        /* measured arena peak (the largest over ranks) */
} TrialResult;

/* Trains each of the n candidates for `steps` timed steps after one warm-up step, with
** `threads` kernel threads and the arena limited to mem_limit, and fills r[0..n). Collective:
** every rank must pass the same candidates. Returns the index of the measured fastest, or -1
** (with an error) when none ran. Prints one progress line per candidate on rank 0 if verbose. */
int planner_trial(const GptDesc* d, const Candidate* c, int n, int threads, size_t mem_limit,
                  int steps, int verbose, TrialResult* r);

#endif
