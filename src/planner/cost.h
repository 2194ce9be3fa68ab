/*
** cost.h: the planner's cost model: the exact memory and the predicted time of a training
** step under a plan, on the ranks a DeviceInfo describes.
**
** Memory is plan_predict_memory's, to the byte (the runtime's arena matches it).
**
** Time (plan_cost) replays one step event by event in the order the runtime runs it
** (gpt_step_events for compute; the parameter uses of gpt_param_schedule through the step walk,
** model/step_walk.h, the one that drives the runtime's hooks, so every collective below starts
** and is waited for where the engine does it). Every collective is
** priced on the communicator it runs on (device.h: its rank count and link level): a sharded
** slice of an op with shard group G gathers and reduce-scatters within its group of G
** consecutive ranks; dp buckets and the gradient norm go over the world; the shards of a hybrid
** plan (G < N) are all-reduced across the N/G groups. Gradient reductions (reduce-scatters,
** bucket and across-group all-reduces) move half the bytes with "reduce_dtype": "bf16".
**   compute     each op's measured forward+backward time at its slice count k
**               (device_op_time_s), a third in forward and two thirds in backward (the loss:
**               all in forward), spread evenly over its k slices;
**   blocking    zero3: an all-gather before each weight use (unless prefetched); zero2 and
**               zero3: a reduce-scatter after each gradient use (the tied wte: 2 forward and
**               1 backward weight uses, 2 gradient uses), unless overlap_reduce; zero2: an
**               all-gather after the update;
**   overlapped  dp gradients are reduced in the buckets of plan_dp_buckets: a bucket's
**               all-reduce starts when its last member's gradient is final and then runs on a
**               communication channel beside compute at the overlap rate of its kind and link
**               level, at full speed while the rank waits for it (after backward, before the
**               optimizer). With "prefetch", the next zero3 weight's all-gather is queued on
**               the same channel at each zero3 weight use and waited for at its use. A hybrid
**               slice's across-group all-reduce of its shard is queued when the reduce-scatter
**               of its last gradient use has landed, and waited for after backward. With
**               "overlap_reduce", a sharded gradient use's reduce-scatter is queued on the
**               channel instead of blocking and waited for at the end of the next sharded
**               gradient use (or of backward), as the engine does; it lands then;
**   optimizer   elements the rank updates (n for dp, n_pad / G sharded) x optimizer_s_per_param,
**               and the gradient-norm all-reduce;
**   overhead    the measured rest of the step (zeroing, bookkeeping), if the device has it.
** The channel serves its jobs in order (one link's worth of progress at a time).
**
** The search (search.h) needs a cost that is a sum over operators for a given micro-batch: the
** separable model of cost_slice_search_s, which prices each slice's blocking communication and
** optimizer exactly as above (a zero3 slice of a recomputed layer: one more all-gather, for the
** recomputed forward; reduce-scatters as blocking), a dp slice's all-reduce at its bandwidth
** time plus its share of bucket latencies times an exposure factor (the share of all-reduce
** time the all-dp plan without recomputation leaves exposed in the replay), a hybrid slice's
** across-group all-reduce times the share of all-reduce work that replay leaves exposed,
** splitting at the measured extra compute of k slices (in every pass of the op: 4/3 of it for
** an op of a recomputed layer), and the recomputed forwards at a third of their ops' unsplit
** time (cost_recompute_s). In this model all layers are alike, so only how many layers
** recompute matters, not which (tested). With no overlap (every rate 0) and no dp slices it
** equals plan_cost exactly, hybrid groups, overlap_reduce, bf16 and recomputation included
** (tested); otherwise plan_cost re-ranks the search's best candidates, and decides prefetch
** and overlap_reduce per candidate.
*/
#ifndef OSDP_COST_H
#define OSDP_COST_H

#include <stddef.h>

#include "model/gpt.h"
#include "model/plan.h"
#include "planner/device.h"

typedef struct PlanCost {
  int micro_batch;
  int accum;             /* micro-steps per optimizer step, K (plan_accum) */
  double step_s;         /* the whole optimizer step: compute_s + comm_s + optim_s + overhead_s */
  double samples_per_s;  /* N * micro_batch * accum / step_s */
  double compute_s;      /* ops at their slice counts */
  double comm_s;         /* communication the rank waits for (blocking + exposed) */
  double hidden_s;       /* non-blocking communication that ran beside compute */
  double exposed_s[3];   /* of comm_s, per collective kind (COLL_*) */
  double optim_s;        /* optimizer, zero2's all-gathers and the norm all-reduce */
  double overhead_s;
  MemPrediction mem;     /* exact per-rank memory (plan_predict_memory) */
} PlanCost;

/* How many times one step uses an op's parameters. */
typedef struct OpUses {
  int fwd_weight;   /* forward uses of the weight */
  int bwd_weight;   /* backward uses of the weight */
  int bwd_grad;     /* backward uses that produce a gradient contribution */
} OpUses;

/* The uses of op's parameters per step with the per-layer recompute flags (NULL: none), counted
** from gpt_param_schedule: embed's tied wte is also the LM head's: 2, 1, 2; every other op 1, 1,
** 1, with one more forward weight use (the recomputed forward) in a recomputed layer (not fcproj). */
OpUses cost_op_uses(const GptDesc* d, int op, const int* recompute);
/* The same for every op at once (out: nops entries, 0 for ops without parameters), from one
** schedule. Returns 0, or -1 when the schedule could not be allocated (out then holds the
** counts by the rule above). */
int cost_ops_uses(const GptDesc* d, const int* recompute, OpUses* out);

/* What the search model prices a slice with besides its size and strategy. */
typedef struct SliceContext {
  OpUses uses;              /* the step's uses of its op's parameters (cost_op_uses) */
  int group;                /* its op's shard group G (0: the world) */
  ReduceDtype reduce;       /* the element type gradient reductions send */
  double dp_exposure;       /* cost_exposures: dp bucket all-reduces */
  double across_exposure;   /* cost_exposures: hybrid slices' across-group all-reduces */
  int accum;                /* micro-steps per optimizer step, K (0 reads as 1): the gathers and
                            ** reduce-scatters of every micro-step count K times, the all-reduces,
                            ** zero2's gathers of updated shards and the optimizer once */
  int keep;                 /* its op's KEEP_* bits (OpPlan.keep): a kept gradient is
                            ** reduce-scattered once per step, a kept weight gathered once */
} SliceContext;

/* Search model: seconds per optimizer step of one slice of n parameters under strategy s in
** context x (its K micro-steps): its communication and optimizer time, not its compute. */
double cost_slice_search_s(const DeviceInfo* dev, const SliceContext* x, size_t n, Strategy s);
/* Optimizer seconds per step of one slice of n parameters under strategy s sharded over
** `group` ranks (0: the world). */
double cost_slice_optim_s(const DeviceInfo* dev, size_t n, Strategy s, int group);
/* Bytes a slice keeps between steps, sharded over `group` ranks, in precision prec: weights
** (and their bf16 compute copy) + gradients + optimizer state (slice_persistent_bytes) + what
** its op's KEEP_* bits `keep` keep whole (slice_kept_bytes). */
size_t cost_slice_persistent(size_t n, Strategy s, int group, Precision prec, int keep);
/* Largest transient bytes of op's parameters under configuration o (slice count, strategies)
** sharded over `group` ranks in precision prec, with the step's uses of them: per slice its
** gathered weight (zero3) in forward, and in backward its full gradient (sharded slices) with
** the gathered weight again only when the backward reads the weight (uses.bwd_weight: not the
** embedding's), less what o->keep keeps (in cost_slice_persistent instead); all slices at once for an op a fused op holds whole (gpt_op_held: the LM head,
** weights and gradients together). Without prefetch or overlap_reduce the step's transient peak
** is the largest of these over the ops, which the memory replay (plan_transient_timeline)
** checks: what the search and the plan table price. */
size_t cost_op_transient(const GptDesc* d, int op, const OpPlan* o, int group, Precision prec,
                         OpUses uses);
/* Extra compute seconds of running owner op's parameters as k slices instead of 1 at
** micro-batch B (for embed: the embedding and the tied LM head), over all the passes of the
** ops using them: with the recompute flags (NULL: none) an op of a recomputed layer also runs
** its recomputed forward at k slices, so its extra counts 4/3 times. */
double cost_split_extra_s(const GptDesc* d, const DeviceInfo* dev, int op, int k, int B, int T,
                          const int* recompute);
/* Compute seconds of the recomputed forwards (ln1 .. gelu of every layer the flags mark, NULL:
** none) at micro-batch B, unsplit: a third of each op's forward+backward time, as the replay. */
double cost_recompute_s(const GptDesc* d, const DeviceInfo* dev, int B, int T, const int* recompute);
/* The exposures the search model applies, from the replay of the all-dp plan at micro-batch B
** without recomputation, its gradients reduced in rd: *dp its exposed all-reduce time over the
** time the search model counts for it (bucket latencies shared out by bytes); *across the share
** of its all-reduce work left exposed (exposed / (exposed + hidden)). Both 1 when nothing
** overlaps or on one rank (dp: exactly 1 only when its buckets are full). */
void cost_exposures(const GptDesc* d, const DeviceInfo* dev, int B, int T, ReduceDtype rd,
                    double* dp, double* across);
/* cost_exposures' dp factor with fp32 reductions. */
double cost_dp_exposure(const GptDesc* d, const DeviceInfo* dev, int B, int T);
/* Time of the search model for plan p: K = plan_accum(p) times (unsplit compute + overhead +
** the recomputed forwards of p's recomputed layers, cost_recompute_s, + cost_split_extra_s per
** op), the gradient norm's all-reduce, and the sum over slices of cost_slice_search_s (uses with
** p's recompute flags, each op's shard group, p's reduce_dtype, its exposures and K); p's
** prefetch and overlap_reduce play no part. What planner_search maximises N*B*K/t of. */
double cost_search_step_s(const GptDesc* d, const DeviceInfo* dev, const Plan* p);

/* Compute seconds of one step at micro-batch B and sequence T with every op unsplit, plus
** the measured "overhead" entry, if the device has one for this model and T. */
double cost_compute_s(const GptDesc* d, const DeviceInfo* dev, int B, int T);
/* Bytes that depend on the micro-batch (and the recompute flags, NULL: none) only: activations
** as gpt_acts_layout places them (a recomputed layer keeps its output; the rest of its blocks
** share one buffer with the other recomputed layers) + backward scratch, in dev's precision. */
size_t cost_batch_bytes(const GptDesc* d, const DeviceInfo* dev, int B, int T, const int* recompute);
/* The largest micro-batch up to max whose batch bytes alone fit dev->mem_limit, with every layer
** recomputed where that needs fewer bytes: no plan (they may recompute) runs a larger one. */
int cost_largest_batch(const GptDesc* d, const DeviceInfo* dev, int T, int max);

/* Cost of plan p (its micro_batch, seq, shard groups, prefetch, overlap_reduce and
** reduce_dtype) on dev, by replaying the step. The
** memory is computed for dev->ranks ranks (p->world should equal it). Returns 0, or -1 when
** out of memory (then *c holds the memory only). */
int plan_cost(const GptDesc* d, const DeviceInfo* dev, const Plan* p, PlanCost* c);

#endif
