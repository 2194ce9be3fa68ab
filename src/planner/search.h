/*
** search.h: the OSDP search. Chooses, for every operator that owns parameters, a slice count
** k and a strategy per slice, the micro-batch B and how many layers R recompute their
** activations in backward (the first R: in the search model the layers are alike, so only the
** count matters), to maximise samples/s under the cost model of cost.h subject to peak memory
** <= dev->mem_limit. The result is exact under the search model of cost.h (not a heuristic):
** see search.c for the method. planner_candidates
** then re-prices the best plan of each micro-batch (and the uniform plans) with the step replay
** (plan_cost), decides zero3 prefetch per plan, and ranks them; `--plan auto` takes the first
** or, with a trial, the fastest when measured.
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
  int min_batch;             /* smallest micro-batch tried (<= 0: 1); min = max fixes it, so a
                             ** run keeps the global batch its recipe was tuned for */
  int max_slices;            /* largest slice count k, from {1, 2, 4, 8} (<= 0: 8) */
  int allow[STRAT_COUNT];    /* strategies a slice may use (all zero: all allowed) */
  int max_recompute;         /* most layers that may recompute their activations in backward:
                             ** -1 (the default) any number up to all, 0 none, R at most R */
  int min_recompute;         /* fewest layers that recompute (0, the default: no minimum);
                             ** min = max fixes the count (osdp plan --recompute N) */
  int shard_group;           /* 0 (the default): each op's shard group G is chosen with the
                             ** rest, among planner_shard_groups; G (dividing the ranks): every
                             ** sharded slice shards over groups of G ranks */
  long global_batch;         /* 0 (the default): no fixed global batch, samples/s at micro-step
                             ** 1 (K = 1); G: sequences per optimizer step, so only micro-batches
                             ** B with N B dividing G, each with K = G / (N B) micro-steps, and the
                             ** plan with the least time per step of G (the most samples/s) */
  int keep_off;              /* KEEP_* bits (OpPlan.keep) the search may not choose (0, the
                             ** default: it chooses per op what to keep whole across micro-steps
                             ** where that can pay: a gradient with more than one reduction per
                             ** step, a weight with more than one gather) */
  int reduce_dtype;          /* the element type of gradient reductions: REDUCE_FP32 (the
                             ** default), REDUCE_BF16, or SEARCH_REDUCE_AUTO: the planner
                             ** searches both and keeps bf16 for a plan only where the replay
                             ** finds it at least REDUCE_BF16_MIN_GAIN faster */
} SearchOptions;

/* SearchOptions.reduce_dtype: the planner chooses per plan. */
#define SEARCH_REDUCE_AUTO (-1)
/* The least relative step-time gain for which auto chooses bf16 reductions (they round the
** gradients; fp32 is kept where they buy little). */
#define REDUCE_BF16_MIN_GAIN 0.01
/* The least relative step-time gain for which a plan prefetches its zero3 gathers: the replay
** prices prefetched gathers with two factors fitted to two noisy points of a profile, and where
** it predicted gains of 0.04-1.0% (zero3 at micro-batch 1, small, seq 64, 2 ranks: three
** profiles) the plan measured 0.99, 1.08 and 1.10 of its prediction, while blocking it measured
** 0.94-1.00 of its own (three other profiles). */
#define PLANNER_PREFETCH_MIN_GAIN 0.02
/* The cost model's error: plans predicted within this share of each other's samples/s are
** equally fast as far as anyone can tell (the gain a trial or the prefetch rule asks for), so
** among them planner_candidates puts the simplest first: the fewest distinct layer plans, then
** the fewest strategy kinds (gpt2-1.5b on 16 ranks mixed 3 layer plans for 1.1% predicted). */
#define PLANNER_MODEL_ERROR 0.02

/* Most shard groups a search considers per op. */
#define PLANNER_MAX_GROUPS 64

/* One way to run one operator: its slices and strategies with their costs. */
typedef struct OpConfig {
  size_t mem;         /* persistent bytes of all its slices */
  size_t transient;   /* largest transient bytes of any of its slices */
  double time_s;      /* search model: communication + optimizer + extra compute of splitting */
  OpPlan plan;        /* k and the strategy of each slice */
} OpConfig;

/* What the last planner_search in this thread did (for reports and tests). */
typedef struct PlannerStats {
  int classes;            /* groups of identical operators (of one micro-batch, recomputed
                          ** and not) */
  int configs;            /* non-dominated configurations, summed over those classes */
  int taus;               /* distinct transient caps of one problem (the most) */
  long problems;          /* (micro-batch, recompute count) problems built and bounded */
  long pairs;             /* (cap, micro-batch) pairs that fit, each bounded */
  long candidates;        /* of those, the pairs whose bound reaches the best rounding */
  long exact_solves;      /* exact dynamic programs run (a pair's beam pass not counted) */
  long states_max;        /* largest Pareto state list of any one program step */
  long states_total;      /* states created over all programs */
  size_t peak;            /* the search's own sum of the best plan's peak bytes (tested to equal
                          ** plan_predict_memory's) */
} PlannerStats;

/* Fills o with the defaults: sequence seq, max_batch 512, max_slices 8, all strategies, any
** number of recomputed layers, shard groups chosen, fp32 reductions, no fixed global batch. */
void planner_default_options(SearchOptions* o, int seq);

/* The micro-steps K of micro-batch B on dev's N ranks under o: G / (N B) with a global batch G
** (0 when N B does not divide G), else 1. */
int planner_accum(const SearchOptions* o, const DeviceInfo* dev, int B);

/* How far the search may extrapolate measured op times in the micro-batch: the times are a line
** fitted over the micro-batches profiled, so past twice the largest of them the search does not
** go (gpt2-124m, profiled to 4: ranked micro-batch 23 first at 1.54 samples/s predicted; it ran
** at 0.75). */
#define PLANNER_EXTRAPOLATE 2

/* Lowers o->max_batch to PLANNER_EXTRAPOLATE x the largest micro-batch dev's op times were
** measured at for model d at o->seq, when those times are d's and record it and a larger
** micro-batch could fit dev->mem_limit (cost_largest_batch). Returns the new max_batch when it
** lowered it, else 0. For a caller whose user did not fix the largest micro-batch. */
int planner_cap_batch(const GptDesc* d, const DeviceInfo* dev, SearchOptions* o);

/* The shard groups a search gives an op's sharded slices a choice of (ascending), into out
** (room for PLANNER_MAX_GROUPS): o->shard_group when set; else the divisors G of the ranks N
** that keep a group within one host (G <= H dividing H, G > 1) or span whole hosts (G a
** multiple of H), always H and N (N alone on one rank). With more than PLANNER_MAX_GROUPS, the
** smallest ones are left out (not H). Returns their count (>= 1). */
int planner_shard_groups(const DeviceInfo* dev, const SearchOptions* o, int* out);

/* The non-dominated configurations of op at micro-batch B (no other has <= memory, <=
** transient and <= time, one strictly) under the options, with their exact costs when the
** layers the flags recompute (NULL: none) are recomputed. *out is malloc'ed (caller frees);
** returns their count (0 for an op without parameters), or -1 on allocation failure. */
int planner_op_configs(const GptDesc* d, const DeviceInfo* dev, const SearchOptions* o, int op,
                       int B, const int* recompute, OpConfig** out);

/* The plan, micro-batch and recompute count with the highest samples/s under the search model
** (cost_search_step_s) whose peak <= dev->mem_limit (ties: the smaller peak). Fills *out
** (caller plan_free's it; its first R layers recompute) and *cost (plan_cost's replay of it);
** *min_bytes is the smallest limit for which any plan fits (at micro-batch 1, with as many
** layers recomputed as the options allow when that is smaller) and *search_s the time the
** search took (either pointer may be NULL). Returns 0; or -1 with osdp_fail("no plan fits in
** LIMIT per rank ...; the smallest limit that fits is X ...") and *min_bytes set. */
int planner_search(const GptDesc* d, const DeviceInfo* dev, const SearchOptions* o, Plan* out,
                   PlanCost* cost, size_t* min_bytes, double* search_s);

/* A plan worth running, with its replayed cost and where it came from. */
typedef struct Candidate {
  Plan plan;
  PlanCost cost;       /* plan_cost of plan (prefetch, overlap_reduce, reduce dtype decided) */
  char origin[32];     /* "search B=7", "search B=4 R=12", "search unsplit", "search R=0",
                       ** "ddp", "zero2", "zero3", "zero3 R=40" (R: layers recomputed),
                       ** "zero2 G=8" (a hybrid uniform plan: shard groups of 8), "zero3 keep"
                       ** (a uniform plan that keeps gradients and weights whole) */
  int uniform;         /* the Strategy of a uniform baseline, or -1 for the search's plans */
  int uniform_group;   /* a uniform baseline's shard group: 0 over the world, else G */
  int uniform_keep;    /* a uniform baseline's KEEP_* bits (every op's) */
} Candidate;

/* The best distinct plans by plan_cost, the first the simplest (plan_layer_groups, then
** plan_strategy_kinds) of those within PLANNER_MODEL_ERROR of the fastest, the rest fastest
** first: the search's best plan of each
** micro-batch (each with its recompute count), the best unsplit one, the best one without
** recomputation (when recomputation is allowed and any plan fits without), the fastest search
** plan with one plan for every layer (each of its layer plans tried on all layers, "simple
** B=.."), the best uniform
** ddp / zero2 / zero3 plans over the world and, on several hosts, the hybrid uniform zero2 /
** zero3 plans sharded within each host (planner_best_uniform_group with G = H), and with a
** global batch (micro-steps to accumulate over) zero2 / zero3 over the world keeping what the
** options allow whole ("zero2 keep", "zero3 keep": FSDP's no_sync); each with
** zero3 prefetch and overlap_reduce on where they fit and the replay says they are faster
** (and, with SEARCH_REDUCE_AUTO, bf16 reductions where they gain REDUCE_BF16_MIN_GAIN). At
** most max (>= 1) are written to out: every uniform plan that fits, the best one without
** recomputation (a hedge: plans that recompute use micro-batches beyond those a profile
** measured, priced by extrapolating its op fits; one gpt2-124m profile ranked micro-batch 23
** with every layer recomputed first, which then measured 0.92x the micro-batch-4 plans), and
** the fastest others in the remaining places (caller frees each plan with plan_free); returns their count (>= 1), or
** -1 as planner_search (min_bytes, search_s as there). */
int planner_candidates(const GptDesc* d, const DeviceInfo* dev, const SearchOptions* o,
                       Candidate* out, int max, size_t* min_bytes, double* search_s);

/* Statistics of the last planner_search of this thread. */
PlannerStats planner_last_stats(void);

/* Best micro-batch (up to o->max_batch; with a global batch G those whose N B divides G, each
** with K = G / (N B) micro-steps) by plan_cost for the uniform unsplit plan of strategy
** s over the world, each micro-batch with the fewest recomputed layers (up to
** o->max_recompute) at which it fits: more would only be slower. Its gradients are reduced in
** o's reduce dtype (fp32 when auto); prefetch and overlap_reduce off. Fills *out (caller
** plan_free's it; its first R layers recompute) and *cost; returns 0, or -1 (with an error) if
** it fits at no micro-batch. */
int planner_best_uniform(const GptDesc* d, const DeviceInfo* dev, const SearchOptions* o,
                         Strategy s, Plan* out, PlanCost* cost);
/* The same with every op's shard group G (dividing the ranks; G = N: planner_best_uniform) and
** every op keeping the KEEP_* bits of `keep` it can use (plan_set_keep; 0: nothing). */
int planner_best_uniform_group(const GptDesc* d, const DeviceInfo* dev, const SearchOptions* o,
                               Strategy s, int G, int keep, Plan* out, PlanCost* cost);

/* A few words (for a table column) on why op of plan p has sharded slices: the bytes sharding
** saves, then what replicating just this op (one dp slice, replayed by plan_cost) would do:
** "saves 822 MiB, needed to fit" (no micro-batch fits), "saves 1.51 MiB for B=6, not 5
** (+5.5%)" (only micro-batch 5 fits; p's samples/s gain over it), or, when it fits too,
** "saves 1.51 MiB, 0.159 ms faster than dp" / "saves 1.51 MiB, costs 0.2 ms (dp fits)" (step
** time). Always starts with "saves"; empty for an op without parameters. */
void planner_explain(const GptDesc* d, const DeviceInfo* dev, const SearchOptions* o,
                     const Plan* p, int op, char* buf, size_t n);

#endif
