/*
** engine.h: the training runtime. It executes a plan on this rank: owns the arena with every
** tensor, answers the model's parameter hooks (gathering, freeing and reducing as each
** slice's strategy says), and runs the optimizer on what the rank owns.
**
** One process is the world-size-1 case of the same code: the single-process engine and
** the sharded runtime are one implementation, so a plan can only change where bytes live
** and how they travel, never the math.
*/
#ifndef OSDP_ENGINE_H
#define OSDP_ENGINE_H

#include <stddef.h>

#include "comm/comm.h"
#include "core/arena.h"
#include "model/gpt.h"
#include "model/gpt_step.h"
#include "model/plan.h"
#include "model/step_walk.h"

typedef struct TrainOptions {
  double lr, beta1, beta2, eps, weight_decay, grad_clip;
  int warmup;                 /* linear learning-rate warmup steps (0: none) */
  long decay_steps;           /* cosine decay to lr_min_ratio*lr at this step (0: constant) */
  double lr_min_ratio;
  unsigned long long seed;    /* weight initialisation seed */
  int timing_only;            /* 1: an engine that only times steps (profile, trial): weights from
                              ** gpt_init_range_fast, the same scale at a fraction of the cost */
  int threads;                /* kernel threads per rank */
  size_t mem_limit;           /* arena capacity in bytes (0: unlimited) */
  size_t bucket_bytes;        /* dp gradient bucket size */
  const Backend* backend;     /* where the rank computes (NULL: the CPU) */
} TrainOptions;

/* Defaults: AdamW lr 1e-3, betas (0.9, 0.95), eps 1e-8, weight decay 0.1, clip 1.0. */
void train_options_default(TrainOptions* o);

/* State of one parameter slice on this rank (see plan.h for the strategies). */
typedef struct SliceState {
  Strategy strat;
  size_t n, n_pad, shard, off;  /* elements, padded, owned by a rank, this rank's first */
  size_t rows_n;                /* elements of the slice before the tail (weight-decayed) */
  int tail_decay;
  float* w;      /* dp, zero2: full weight (n_pad); zero3: this rank's shard */
  void* wc;      /* bf16 storage (dp, zero2): the compute copy of w's n weights, which the step
                 ** reads; NULL in fp32, where the step reads w */
  float* g;      /* dp: full gradient (view into a bucket); zero2/zero3: shard */
  float *m, *v;  /* optimizer state of what the rank owns (n for dp, shard otherwise) */
  void* gathered;   /* zero3 while acquired: the full weight as the step reads it (fp32, or the
                    ** bf16 compute copies of the shards) */
  float* gfull;     /* zero2/zero3 while acquired: the full gradient */
  void* kept_w;     /* zero3 of a KEEP_WEIGHT op: the gathered weight it keeps across the step
                    ** (compute-copy elements), else NULL; `gathered` points at it */
  float* kept_g;    /* sharded of a KEEP_GRAD op: the full gradient it keeps across the step,
                    ** else NULL; `gfull` points at it */
  Comm* group;             /* sharded: the ranks the slice is sharded over (plan_op_group) */
  Comm* across;            /* sharded: the ranks holding the same shard (one per group) */
  CommRequest across_req;  /* sharded, hybrid: the shard gradient's all-reduce across groups */
} SliceState;

/* A dp gradient bucket (plan_dp_buckets): its members' gradients, side by side. */
typedef struct GradBucket {
  float* buf;
  size_t n;
  CommRequest req;
} GradBucket;

/* The host arrays of the backend's kernels over many arrays, refilled every step: the gradient
** norm's parts (sum_squares_multi: g, n; one per slice at most) and AdamW's (adamw_update_multi:
** w, g, m, v, n, wd; two per slice at most: the rows, the tail). Sized at engine_build. */
typedef struct SliceLists {
  float** w;
  const float** g;
  float** m;
  float** v;
  size_t* n;
  float* wd;
} SliceLists;

typedef struct Engine {
  const GptDesc* d;
  const Backend* bk;       /* opt.backend, or the CPU */
  Plan plan;
  TrainOptions opt;
  int rank, world;
  Arena arena;
  SliceState** slices;     /* [op][slice], NULL for ops without parameters */
  int* slice_counts;       /* [op] */
  GradBucket* buckets;
  int nbuckets;
  GptActs acts;
  void** act_ptrs;
  GptParamHooks hooks;
  long step;               /* optimizer steps taken */
  /* The step walk (model/step_walk.h): which use of the step's schedule comes next and what
  ** each does; the hooks tell it each use and it calls back engine_action. */
  StepWalk* walk;
  void* pending_buf;       /* prefetch: the next zero3 weight (as gathered), being gathered ahead */
  CommRequest pending_req;
  float* reducing_buf;     /* overlap_reduce: the full gradient whose reduce-scatter is in flight */
  CommRequest reducing_req;
  CommDtype reduce_dtype;  /* plan.reduce_dtype as comm's element type */
  MemPrediction predicted;
  int* host_targets;       /* the micro-batch's targets as given to engine_set_batch (for eval) */
  SliceLists lists;
} Engine;

typedef struct StepResult {
  double loss;        /* global mean loss of the step */
  double grad_norm;   /* global gradient norm before clipping */
  double seconds;
  double optim_seconds; /* of which the optimizer (and zero2's all-gathers) */
  double lr;
  int nonfinite;      /* 1: the loss or gradient norm was not finite; the weights were not updated */
} StepResult;

/* Builds the engine for plan p on this rank: checks the plan and the memory limit, reserves
** the arena and initialises the weights from opt->seed. Returns 0, or -1 with an error after
** undoing everything it built (e is left zeroed: no engine_destroy is needed). */
int engine_create(Engine* e, const GptDesc* d, const Plan* p, const TrainOptions* opt);
/* Frees everything the engine holds and zeroes it (a zeroed engine: nothing to do). */
void engine_destroy(Engine* e);

/* Copies this rank's micro-batch (host arrays of B*T token ids and targets; a target < 0 has no
** loss) into the engine's activations, for the next step or evaluation. */
void engine_set_batch(Engine* e, const int* tokens, const int* targets);

/* Bytes the arena has held at most since creation (or since the last trial reset), and the
** bytes of each category at that moment (out[MEM_CATEGORY_COUNT], may be NULL). */
size_t engine_peak_bytes(const Engine* e, size_t* at_peak);

/* Loads micro-batch k (0 .. plan_accum - 1) of the optimizer step into engine e
** (engine_set_batch with this rank's rows of it). */
typedef void (*EngineBatchFn)(void* ctx, Engine* e, int k);

/* One optimizer step: plan_accum(plan) micro-steps (forward and backward; batch(ctx, e, k)
** loads micro-batch k first; batch NULL: every micro-step runs on what engine_set_batch set
** last, as benchmarks and trials time it), gradients accumulated between them as the step walk
** says (walk_set_micro), then the global gradient norm, clipping and AdamW once. A step whose
** loss or gradient norm is not finite updates nothing (r->nonfinite = 1; the optimizer's step
** count stays). global_targets is the number of targets in the whole global batch, every
** micro-step of every rank (the loss is their mean). Collective. */
void engine_step(Engine* e, long global_targets, EngineBatchFn batch, void* ctx, StepResult* r);

/* Forward pass only (evaluation): returns the global sum of losses over the global batch and,
** if problem is not NULL, counts the problems whose every answer token is predicted right
** (argmax); problem[i] is the problem id of target i or -1. *problems_total and *problems_ok
** are global. Collective. */
double engine_eval(Engine* e, const int* problem, long* problems_total, long* problems_ok);

/* Per-op timing for the profiler and bench: from now on each step adds every op's
** forward+backward compute seconds, without the time its hooks spent communicating, into
** op_seconds[nops] (NULL: stop timing), and the same seconds per pass into
** op_phase_seconds[op * 3 + GptPhase] (3 * nops; NULL: not kept apart). */
void engine_time_ops(Engine* e, double* op_seconds, double* op_phase_seconds);

/* Copies all parameters, in op-block order (gpt.h), into full[d->n_params] on every rank. Collective. */
void engine_get_params(Engine* e, float* full);
/* Sets all parameters from full[d->n_params] (each rank keeps what it owns) and resets the
** optimizer. */
void engine_set_params(Engine* e, const float* full);

/* ---- Training state (checkpoints) ----------------------------------------------------- */

/* A run of parameters: elements [offset, offset + n) of the op-block order (gpt.h). */
typedef struct ParamRange { size_t offset, n; } ParamRange;

/* The ranges of parameters whose weights and AdamW moments this rank writes to a checkpoint:
** over all ranks, every parameter exactly once (a dp slice in N parts, one per rank; a sharded
** slice's own shard). Writes up to the returned count into out (NULL: count only). */
int engine_owned_ranges(const Engine* e, ParamRange* out);
/* Copies the weights and moments of range i of engine_owned_ranges into host arrays of its n
** floats each. */
void engine_read_owned(Engine* e, int i, float* w, float* m, float* v);
/* Reads the weights (w), moments (m, v) of parameters [offset, offset + n) into host arrays
** (any may be NULL); returns 0, or -1 with an error. */
typedef int (*StateReadFn)(void* ctx, size_t offset, size_t n, float* w, float* m, float* v);
/* Sets every weight and moment this rank holds from `read`, whatever plan and world size wrote
** them, and the optimizer's step count to `step`, so bias correction and the learning-rate
** schedule continue from there. Returns 0, or -1 with the reader's error. */
int engine_load_state(Engine* e, StateReadFn read, void* ctx, long step);
/* Optimizer steps taken (after engine_load_state: counting the restored ones). */
long engine_steps_taken(const Engine* e);

#endif
