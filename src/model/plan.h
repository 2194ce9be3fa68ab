/*
** plan.h: an execution plan, and the exact memory it needs.
**
** A plan says, for every operator that owns parameters, into how many slices k its
** parameter block is split and which strategy each slice uses:
**   dp     full replica of weight, gradient and optimizer state; gradient all-reduced;
**   zero2  full weight kept; gradient reduce-scattered; optimizer state and update sharded;
**          updated shards all-gathered back into the full weight;
**   zero3  only the rank's 1/N shard of everything kept; the full weight is gathered before
**          each use and freed after; the full gradient is reduce-scattered and freed.
** Sharded slices shard over a group of G ranks (the op's "shard_group"; default the whole world
** of N): ranks r = g*G + j (group g, index j) hold shard j, replicated across the N/G groups
** (hybrid sharding: weights gathered within the group; gradients reduce-scattered within it, then
** the shard all-reduced across groups). A slice of n parameters is padded to
** n_pad = ceil(n / G) * G when sharded; index j owns elements [j n_pad/G, (j+1) n_pad/G).
**
** On disk a plan is JSON:
**   {"model": {"name":..,"n_layer":..,"n_embd":..,"n_head":..,"vocab_size":..,"max_seq":..},
**    "world_size": N, "micro_batch": B, "seq_len": T, "prefetch": false,
**    "overlap_reduce": false, "reduce_dtype": "fp32", "head_rows": R (optional),
**    "precision": "bf16" (optional; absent: fp32), "grad_accum": K (optional; absent: 1),
**    "ops": [{"name": "embed", "slices": ["zero3", "zero3", "dp", "dp"], "shard_group": 2,
**             "keep_whole": "grad+weight" (optional; absent: "none")}, ...],
**    "layers": [{"layer": 0, "recompute": true}, ...]}
** listing every operator that owns parameters (ops not listed default to one dp slice) and the
** transformer layers that recompute their activations in backward (absent: not recomputed; see
** GptActs in gpt_step.h).
** With "prefetch" the runtime starts gathering the next fully sharded weight as soon as the
** current one is in place, so two gathered weights can be live at once; the memory model
** replays the step to account for that exactly. With "overlap_reduce" a sharded slice's
** reduce-scatter runs without blocking while the next gradient computes (its full gradient
** stays live until then; also replayed). "reduce_dtype": "bf16" sends gradients as bf16 and
** sums them in fp32 (half the bytes; the losses move by about bf16's rounding, see docs/GUIDE.md).
** "head_rows" sets the rows of the LM head's chunks (more: fewer passes over the head's weight
** gradient, fewer rows: less memory; absent: gpt_head_rows_default). "precision": "bf16" stores
** activations and the weights the step reads in bf16 (a compute copy beside each fp32 master
** weight; gradients, optimizer state and statistics stay fp32), on a backend with bf16 kernels;
** a zero3 slice keeps the bf16 copy of its shard and gathers that (half the bytes).
** "grad_accum": K runs K micro-steps of micro_batch sequences per rank before each optimizer
** step, so the global batch is world_size x micro_batch x K sequences. Between micro-steps a dp
** slice accumulates its full gradient where it is (its all-reduce runs once, in the last
** micro-step) and a sharded slice reduce-scatters every micro-step into its shard, adding (its
** across-group all-reduce once, in the last): no byte more than K = 1, K times the
** reduce-scatters and zero3's gathers. An op's "keep_whole" changes that for its sharded slices
** (FSDP2's set_requires_gradient_sync and reshard_after_forward, chosen per op by the planner):
**   "grad"    each sharded slice keeps its full gradient whole across the step: the micro-steps
**             (and a tied weight's two uses) add into it, and it is reduce-scattered once, after
**             its last use of the last micro-step (one reduction instead of K);
**   "weight"  each zero3 slice keeps its weight gathered: gathered at its first use of the
**             step, read by every later use and micro-step (one gather instead of every use's).
** What is kept lives in a buffer of its own for as long as the engine does (counted with the
** params or grads: the bytes are there at every peak, as a dp gradient's are), so no use
** allocates it. A kept weight is gathered again in each optimizer step, and in each evaluation.
*/
#ifndef OSDP_PLAN_H
#define OSDP_PLAN_H

#include <stddef.h>

#include "model/gpt.h"

typedef enum Strategy { STRAT_DP = 0, STRAT_ZERO2 = 1, STRAT_ZERO3 = 2, STRAT_COUNT } Strategy;

/* What an op's sharded slices keep whole across an optimizer step's micro-steps (OpPlan.keep,
** bits; see "keep_whole" above). */
#define KEEP_GRAD 1    /* zero2/zero3: the full gradient, reduce-scattered once per step */
#define KEEP_WEIGHT 2  /* zero3: the gathered weight, gathered once per step */
#define KEEP_ALL (KEEP_GRAD | KEEP_WEIGHT)

typedef struct OpPlan {
  int k;                              /* slice count, 1..GPT_MAX_SLICES */
  Strategy strat[GPT_MAX_SLICES];     /* per slice */
  int group;                          /* sharded slices shard over groups of this many ranks and
                                      ** replicate across groups (0: the whole world) */
  int keep;                           /* KEEP_* bits (0: reduce and re-gather every use) */
} OpPlan;

/* The element type gradients travel in: fp32, or bf16 with fp32 accumulation (each rank
** rounds its contribution to bf16; the owner of a shard sums the contributions in fp32). */
typedef enum ReduceDtype { REDUCE_FP32 = 0, REDUCE_BF16 = 1 } ReduceDtype;

typedef struct Plan {
  int world, micro_batch, seq;
  int prefetch;                       /* zero3: gather the next weight while this one computes */
  int overlap_reduce;                 /* sharded gradients: reduce-scatter without blocking, one
                                      ** in flight while the next gradient computes */
  ReduceDtype reduce_dtype;           /* gradient reductions' element type */
  int head_rows;                      /* rows of the fused LM head's chunks of logits (0: the
                                      ** default, gpt_head_rows_default) */
  Precision precision;                /* the step's storage: PRECISION_FP32 or _BF16 */
  int accum;                          /* micro-steps per optimizer step, K >= 1 (0 reads as 1) */
  int nops;
  OpPlan* ops;                        /* nops entries, one per op (parameterless ops: k = 1) */
  int nlayers;
  int* recompute;                     /* nlayers flags: the layer recomputes in backward */
} Plan;

/* The largest micro-batch and micro-step count a plan file may give (--batch's and --accum's
** bounds): past them a run would only fail allocating its batches. */
#define PLAN_MAX_MICRO_BATCH (1 << 20)
#define PLAN_MAX_ACCUM (1 << 20)

/* Micro-steps per optimizer step (p->accum, at least 1). */
int plan_accum(const Plan* p);
/* Sequences per optimizer step: world x micro_batch x plan_accum. */
long plan_global_batch(const Plan* p);
/* The group size op i's sharded slices shard over: its group, or the world when 0. */
int plan_op_group(const Plan* p, int op);
/* Sets every op's shard group to G (0: the whole world). */
void plan_set_group(Plan* p, int G);
/* "fp32", "bf16"; and the parse (-1 if unknown). */
const char* reduce_dtype_name(ReduceDtype t);
int reduce_dtype_parse(const char* s);

/* "none", "grad", "weight", "grad+weight"; and the parse (-1 if unknown). */
const char* keep_name(int keep);
int keep_parse(const char* s);
/* The KEEP_* bits an op with configuration o can use: KEEP_GRAD with a sharded slice,
** KEEP_WEIGHT with a zero3 slice. */
int op_keep_allowed(const OpPlan* o);
/* Sets every op's keep to the bits of `keep` it can use (op_keep_allowed). */
void plan_set_keep(Plan* p, int keep);
/* Whether slice s of op i keeps its full gradient (a sharded slice of a KEEP_GRAD op) or its
** gathered weight (a zero3 slice of a KEEP_WEIGHT op) across the step. */
int plan_keeps_grad(const Plan* p, int op, int s);
int plan_keeps_weight(const Plan* p, int op, int s);
/* How many ops keep any of the KEEP_* bits `bits` (for reports: "keep grad x12"). */
int plan_keep_ops(const Plan* p, int bits);

/* "dp", "zero2", "zero3". */
const char* strategy_name(Strategy s);
/* Parses a strategy name; -1 if unknown. */
int strategy_parse(const char* s);

/* Builds the plan that uses strategy s, unsplit, for every op. */
int plan_uniform(Plan* p, const GptDesc* d, Strategy s, int world, int B, int T);
/* Frees a plan's op array. */
void plan_free(Plan* p);
/* Copies a plan. */
int plan_copy(Plan* dst, const Plan* src);
/* Checks a plan against a model and world size; -1 with a one-line error if it does not fit. */
int plan_validate(const Plan* p, const GptDesc* d, int world);
/* Reads a plan file written for model d. Returns -1 with an error naming the file and field. */
int plan_load(Plan* p, const GptDesc* d, const char* path);
/* Writes a plan as JSON to a heap string (caller frees). */
char* plan_to_json(const Plan* p, const GptDesc* d);
/* Writes a plan file atomically (plan_to_json and a newline); errors name `field` (the option,
** "--out", or the API function the path came from). */
int plan_save(const Plan* p, const GptDesc* d, const char* path, const char* field);
/* The slice counts of a plan as an int array indexed by op (for gpt_forward/backward). */
void plan_slice_counts(const Plan* p, int* slices);
/* Marks the first n layers (n >= nlayers: all) as recomputed and the others not. */
void plan_set_recompute(Plan* p, int n);
/* Number of layers the plan recomputes. */
int plan_recompute_count(const Plan* p);
/* Whether layers a and b have the same plan: both recompute or neither, and every op has the
** same slice count, strategies and shard group. */
int plan_same_layer(const GptDesc* d, const Plan* p, int a, int b);
/* How many distinct layer plans (plan_same_layer) p has: the layer groups a reader must tell
** apart (1: every layer alike). */
int plan_layer_groups(const GptDesc* d, const Plan* p);
/* How many of the strategies (dp, zero2, zero3) p's parameter slices use. */
int plan_strategy_kinds(const GptDesc* d, const Plan* p);

/* Per-slice sizes under a strategy sharded over `group` ranks (plan_op_group). */
/* n (dp), or n rounded up to a multiple of G; of 2G for zero3 in bf16, so that a shard's bf16
** compute copy has an even count (it is all-gathered as fp32 words: comm_allgather_into_bf16). */
size_t slice_padded(size_t n, Strategy s, int group, Precision prec);
/* Elements a rank owns: n (dp) or n_pad / G. */
size_t slice_shard(size_t n, Strategy s, int group, Precision prec);

/* Exact memory of one rank, per arena category, predicted from the description alone. */
typedef struct MemPrediction {
  size_t params, grads, optim, acts, scratch;
  size_t kept;        /* of params and grads: what ops keep whole across the step (OpPlan.keep) */
  size_t recompute;   /* of acts: the buffer recomputed layers share (0 without recomputation) */
  size_t transient;   /* largest gather/full-gradient bytes live at once */
  size_t peak;        /* the sum of all the above: the arena's peak */
} MemPrediction;

/* Bytes a slice keeps between steps (weights, gradients, optimizer state) in precision prec:
** the fp32 master weights, and under PRECISION_BF16 also their bf16 compute copy (counted with
** the params): of the n weights the step reads (dp, zero2), or of the shard (zero3). */
void slice_persistent_bytes(size_t n, Strategy s, int group, Precision prec, size_t* params,
                            size_t* grads, size_t* optim);
/* Bytes a slice keeps whole across the step under the KEEP_* bits `keep` (OpPlan.keep): its
** gathered weight (zero3, compute-copy elements) into *params and its full gradient (sharded,
** fp32) into *grads. */
void slice_kept_bytes(size_t n, Strategy s, int group, Precision prec, int keep, size_t* params,
                      size_t* grads);
/* Transient bytes live while a slice is used in forward (a zero3 gathered weight, of compute-copy
** elements) and in backward (a sharded full gradient, fp32, and the gathered weight), less what
** the slice keeps across the step under the KEEP_* bits `keep` (slice_kept_bytes). */
size_t slice_transient_forward(size_t n, Strategy s, int group, Precision prec, int keep);
size_t slice_transient_backward(size_t n, Strategy s, int group, Precision prec,
                                int needs_weight, int keep);
/* The transient bytes over one training step: walks the step's parameter uses
** (gpt_param_schedule order: forward, then backward) with the runtime's own step walk
** (step_walk.h: zero3 gathers a weight before its use and frees it after; a sharded slice holds a
** full gradient from its gradient use until its reduce-scatter lands; with p->prefetch each zero3
** weight use also allocates the next zero3 weight's buffer) and counts the bytes. Returns the number of uses n, or -1 with an error when out of
** memory; when live != NULL (n entries; call with NULL first to size it) live[i] receives the
** transient bytes live at the fullest moment of use i. The memory prediction's transient is
** the maximum of this timeline, so the prediction and its picture (plan_svg) agree. */
int plan_transient_timeline(const GptDesc* d, const Plan* p, size_t* live);
/* Predicts every rank's memory for plan p with `threads` kernel threads. Uses the plan's
** micro_batch and seq; transient = the maximum of plan_transient_timeline (should its
** schedule not fit in memory, a bound that is exact without prefetch and never low with it). */
void plan_predict_memory(const GptDesc* d, const Plan* p, int threads, MemPrediction* m);

/* The size of a dp gradient bucket: the runtime's default (TrainOptions.bucket_bytes) and what
** the cost model prices. */
#define PLAN_BUCKET_BYTES ((size_t)16 << 20)

/* Groups the plan's dp slices into gradient all-reduce buckets of at most bucket_bytes (a
** slice larger than that gets a bucket of its own), in the order backward finishes them:
** ops from last to first, each op's slices in order. Writes bucket[op * GPT_MAX_SLICES + slice]
** (-1 for sharded slices and ops without parameters; bucket may be NULL) and returns the
** number of buckets. The runtime reduces exactly these buckets (plan_buckets.c). */
int plan_dp_buckets(const GptDesc* d, const Plan* p, size_t bucket_bytes, int* bucket);

#endif
