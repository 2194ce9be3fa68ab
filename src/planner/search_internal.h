/*
** search_internal.h: PRIVATE header of the planner's search, NOT part of the public API (that
** is search.h; nothing outside src/planner may include this file). The types and functions
** shared by the files the search is split into: configs.c, classes.c, relax.c, exact.c,
** search.c (the driver, whose top comment describes the method) and candidates.c.
*/
#ifndef OSDP_SEARCH_INTERNAL_H
#define OSDP_SEARCH_INTERNAL_H

#include <stddef.h>

#include "planner/search.h"

/* Statistics of the search running in this thread (defined in search.c). */
extern _Thread_local PlannerStats last_stats;

/* ---- configs.c: configurations of one operator --------------------------------------- */

/* A growable list of configurations. */
typedef struct ConfigList {
  OpConfig* v;
  int n, cap;
} ConfigList;

/* The options with defaults filled in, seq defaulting to the model's max_seq (configs.c). */
SearchOptions normalized_options(const GptDesc* d, const SearchOptions* in);

/* Enumerates and prunes op's configurations at micro-batch B (reduce dtype and exposures in
** base) with the per-layer recompute flags (NULL: none) into l; -1 on failure (configs.c). */
int op_configs(const GptDesc* d, const DeviceInfo* dev, const SearchOptions* o, int op, int B,
               const SliceContext* base, const int* recompute, ConfigList* l);

/* ---- classes.c: classes of identical operators, caps, recompute counts: the Search ----- */

/* Operators with the same block and the same uses in the step's schedule (and alike in
** whether their layer recomputes them), hence the same configurations. */
typedef struct OpClass {
  int rep;            /* first op of the class */
  int count;          /* ops in it (in a ClassPool: 0) */
  OpUses uses;        /* the step's uses of its parameters (cost_ops_uses) */
  int recomputed;     /* its ops are re-run forward in backward (gpt_op_recomputes) */
  OpConfig* cfg;      /* its non-dominated configurations */
  int ncfg;
} OpClass;

/* The classes of one micro-batch B for every recompute count at once: each op with parameters
** has a class for when its layer does not recompute and one for when it does (the same class
** for ops outside the layers and for fcproj, whose forward is not re-run). */
typedef struct ClassPool {
  const GptDesc* d;
  const DeviceInfo* dev;
  SearchOptions o;
  int B;
  SliceContext base;    /* o's reduce dtype and the exposures at B (cost_exposures) */
  OpClass* cls;         /* owns the configurations */
  int ncls;
  int* plain;           /* [nops]: class of each op when its layer does not recompute (-1: none) */
  int* recomputed;      /* [nops]: and when it does */
} ClassPool;

/* Builds the classes of micro-batch B: the ops grouped, each class's configurations (classes.c). */
int pool_build(ClassPool* p, const GptDesc* d, const DeviceInfo* dev, const SearchOptions* o, int B);

/* Frees what pool_build allocated (classes.c). */
void pool_free(ClassPool* p);

/* Everything the search of one micro-batch B and recompute count R works from: the classes
** present when the first R layers recompute (configurations borrowed from the pool). */
typedef struct Search {
  const GptDesc* d;
  const DeviceInfo* dev;
  SearchOptions o;
  int B, R;             /* the micro-batch and the number of recomputed layers (the first R) */
  int nparam;           /* ops with parameters */
  int* param_op;        /* their indices, grouped by class */
  int* op_class;        /* class of each op (-1 without parameters) */
  OpClass* cls;         /* the classes with ops at this R (count > 0) */
  int ncls;
  size_t* taus;         /* distinct feasible transient caps, ascending */
  int ntaus;
  size_t batch_bytes;   /* activations (first R layers recomputed) and scratch at B */
  int K;                /* micro-steps per optimizer step (planner_accum) */
  double samples;       /* sequences per optimizer step: N B K */
  double compute_s;     /* K x (unsplit compute, overhead, recomputed forwards), norm all-reduce */
} Search;

/* Builds the search of pool p's micro-batch with the first R layers recomputed: classes,
** caps, batch bytes and compute (classes.c). */
int search_build(Search* s, const ClassPool* p, int R);

/* Frees what search_build allocated, not the pool's configurations (classes.c). */
void search_free(Search* s);

/* ---- relax.c: one transient cap: options per class and the linear relaxation --------- */

/* A class's option under a cap: one configuration on its (memory, time) Pareto frontier. */
typedef struct Option {
  size_t m;
  double t;
  int cfg;            /* index into the class's configurations */
} Option;

/* One step along a class's lower convex hull (from its fastest option towards its smallest),
** available `count` times (once per op of the class). */
typedef struct Segment {
  double slope;       /* seconds per byte saved */
  size_t dm;          /* bytes saved by one op */
  double dt;          /* seconds added by one op */
  int count;          /* ops of the class (in the solver: the class) */
} Segment;

/* The problem restricted to configurations with transient <= tau. */
typedef struct CapProblem {
  size_t tau;
  Option* opt;        /* per class: opt[off[c] .. off[c] + nopt[c]), memory ascending */
  int *off, *nopt;
  size_t M0;          /* memory with every op at its fastest option */
  double T0;          /* and the time */
  size_t minmem;      /* smallest memory of all ops */
  Segment* seg;       /* all hull steps, slope ascending */
  int nseg;
  size_t* cum_dm;     /* [nseg + 1] prefix sums of count * dm */
  double* cum_dt;     /* [nseg + 1] prefix sums of count * dt */
} CapProblem;

/* Builds the options, the relaxation's hull steps and their prefix sums under cap tau (relax.c). */
int cap_build(const Search* s, size_t tau, CapProblem* p);

/* Frees a cap problem (relax.c). */
void cap_free(CapProblem* p);

/* Relaxation lower bound, feasible-rounding upper bound and byte price at budget b (relax.c). */
void cap_bounds(const CapProblem* p, size_t b, double* lb, double* ub, double* lambda);

/* Appends the lower convex hull steps of options o[0..n); returns the new count (relax.c). */
int class_hull(const Option* o, int n, int count, Segment* seg, int nseg, int* hull);

/* Orders hull segments by slope, for qsort (relax.c). */
int cmp_segment(const void* a, const void* b);

/* Lagrangian lower bound on the time of every plan within budget b at price lambda (relax.c). */
double lagrangian_bound(const Search* s, const CapProblem* p, size_t b, double lambda);

/* ---- exact.c: exact solve of one (cap, budget) pair ------------------------------------ */

/* The dynamic program's nodes, links and merge heads (defined in exact.c). */
typedef struct DpNode DpNode;
typedef struct DpLink DpLink;
typedef struct MergeHead MergeHead;

/* Working memory of the exact solver, reused across solves. */
typedef struct Solver {
  DpNode* level[2];   /* previous and current level */
  long cap_level;
  DpLink* link;       /* every level's links, level after level */
  long nlink, cap_link;
  double *key, *sorted; /* [cap_level] scratch of the beam */
  MergeHead* heap;    /* merge heads, one per candidate */
  int* cand_off;      /* per class: first candidate in cand[] */
  int* ncand;         /* per class */
  Option* cand;       /* candidates of all classes, memory ascending per class */
  Segment* seg;       /* hull steps of the multi-candidate classes, slope ascending */
  int nseg;
  int* hull;          /* scratch for class_hull */
  int* remain;        /* scratch: ops left per class */
  size_t* cum_dm;     /* [(nparam + 1) * (nseg + 1)]: per level L, prefix sums of the hull */
  double* cum_dt;     /* steps of the multi-candidate ops from L on */
  size_t* min_rest;   /* [nparam + 1] least memory of the multi-candidate ops from L on */
  size_t* max_rest;   /* [nparam + 1] most memory of the multi-candidate ops from L on */
  double* tmin_rest;  /* [nparam + 1] their time at the most memory */
  int* choice;        /* result: configuration index per parameter op (in param order) */
} Solver;

/* Allocates a solver for search s; -1 on failure, then solver_free it (exact.c). */
int solver_init(Solver* v, const Search* s);

/* Frees a solver (exact.c). */
void solver_free(Solver* v);

/* Least time under cap p within budget b if <= t_cap: 1 (time in *t), 0 none, -1 fail (exact.c). */
int solve_exact(Solver* v, const Search* s, const CapProblem* p, size_t b, double t_cap,
                double* t);

/* ---- search.c: the driver over micro-batches and recompute counts ----------------------- */

/* The best plan of one micro-batch under the search model. */
typedef struct BatchBest {
  int B, R;
  double sps;
  size_t peak;
  Plan plan;
} BatchBest;

/* Searches every micro-batch that fits, largest first, skipping those whose bound cannot reach
** the keep-th best found; writes the found ones into *out (malloc'ed, *nout entries, fastest
** first by the search model; free with batches_free); *min_bytes as planner_search. With
** SEARCH_REDUCE_AUTO, the lists of both reduce dtypes merged, a bf16 plan ranked as if
** REDUCE_BF16_MIN_GAIN slower (search.c). */
int search_batches(const GptDesc* d, const DeviceInfo* dev, const SearchOptions* o, int keep,
                   BatchBest** out, int* nout, size_t* min_bytes);

/* Frees the plans of a BatchBest list and the list (search.c). */
void batches_free(BatchBest* v, int n);

#endif
