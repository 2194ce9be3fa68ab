/*
** search.h: the OSDP search. Chooses, for every operator that owns parameters, a slice count
** k and a strategy per slice, and the micro-batch B, to maximise samples/s under the cost
** model of cost.h subject to peak memory <= dev->mem_limit. The result is exact under that
** model (not a heuristic): see search.c for the method.
*/
#ifndef OSDP_SEARCH_H
#define OSDP_SEARCH_H

#include <stddef.h>

#include "model/gpt.h"
#include "model/plan.h"
#include "planner/cost.h"
#include "planner/device.h"

typedef struct SearchOptions {
  int seq;                   /* sequence length T (<= the model's max_seq) */
  int max_batch;             /* largest micro-batch tried (<= 0: 512); the search also stops
                             ** where activations alone exceed the limit */
  int max_slices;            /* largest slice count k, from {1, 2, 4, 8} (<= 0: 8) */
  int allow[STRAT_COUNT];    /* strategies a slice may use (all zero: all allowed) */
} SearchOptions;

/* One way to run one operator: its slices and strategies with their costs. */
typedef struct OpConfig {
  size_t mem;         /* persistent bytes of all its slices */
  size_t transient;   /* largest transient bytes of any of its slices */
  double time_s;      /* communication + optimizer seconds per step */
  OpPlan plan;        /* k and the strategy of each slice */
} OpConfig;

/* What the last planner_search in this thread did (for reports and tests). */
typedef struct PlannerStats {
  int classes;            /* groups of identical operators */
  int configs;            /* non-dominated configurations, summed over classes */
  int taus;               /* distinct transient caps examined */
  long pairs;             /* (cap, micro-batch) pairs that fit, each bounded */
  long candidates;        /* of those, the pairs whose bound reaches the best rounding */
  long exact_solves;      /* exact dynamic programs run (a pair's beam pass not counted) */
  long states_max;        /* largest Pareto state list of any one program step */
  long states_total;      /* states created over all programs */
} PlannerStats;

/* Fills o with the defaults: sequence seq, max_batch 512, max_slices 8, all strategies. */
void planner_default_options(SearchOptions* o, int seq);

/* The non-dominated configurations of op (no other has <= memory, <= transient and <= time,
** one strictly) under the options, with their exact costs. *out is malloc'ed (caller frees);
** returns their count (0 for an op without parameters), or -1 on allocation failure. */
int planner_op_configs(const GptDesc* d, const DeviceInfo* dev, const SearchOptions* o, int op,
                       OpConfig** out);

/* The plan and micro-batch with the highest samples/s whose peak <= dev->mem_limit (ties:
** the smaller peak). Fills *out (caller plan_free's it) and *cost; *min_bytes is the
** smallest limit for which any plan fits (at micro-batch 1) and *search_s the time the
** search took (either pointer may be NULL). Returns 0; or -1 with osdp_fail("no plan fits
** in LIMIT per rank ...; the smallest limit that fits is X ...") and *min_bytes set. */
int planner_search(const GptDesc* d, const DeviceInfo* dev, const SearchOptions* o, Plan* out,
                   PlanCost* cost, size_t* min_bytes, double* search_s);

/* Statistics of the last planner_search of this thread. */
PlannerStats planner_last_stats(void);

/* Best micro-batch (up to o->max_batch) for the uniform unsplit plan of strategy s. Fills
** *out (caller plan_free's it) and *cost; returns 0, or -1 (with an error) if it fits at no
** micro-batch. */
int planner_best_uniform(const GptDesc* d, const DeviceInfo* dev, const SearchOptions* o,
                         Strategy s, Plan* out, PlanCost* cost);

/* One line saying why op of plan p has sharded slices: how much memory sharding saves and
** that replicating the op would need PEAK > LIMIT, or that the memory it frees allows
** micro-batch B instead of B', or what it costs in time. */
void planner_explain(const GptDesc* d, const DeviceInfo* dev, const SearchOptions* o,
                     const Plan* p, int op, char* buf, size_t n);

#endif
