/*
** step_walk.h: what a plan's parameter uses do to memory and communication, written once.
**
** A training step uses parameter slices in the order of gpt_param_schedule (forward, then
** backward with its recomputed forwards). Under a plan each use has consequences: a zero3
** weight is gathered before its use (or taken from the prefetch) and freed after, and with
** prefetch the next zero3 weight starts gathering; a sharded slice's gradient use needs a full
** gradient, which is reduce-scattered into the shard after the use (blocking, or with
** overlap_reduce started then and landing at the end of the next sharded gradient use or of
** backward); after a slice's last reduce-scatter has landed a hybrid slice all-reduces its shard
** across the groups; a dp slice's last gradient use may complete its gradient bucket, which is
** then all-reduced; the end of backward waits for everything.
**
** The step walker decides all of that and tells its user through one callback, action by action
** (WalkAction), in the order they happen. Three users act on the same actions:
**   the engine (runtime/engine.c)   real buffers and collectives; its parameter hooks call
**                                   walk_weight_begin / walk_grad_begin / ..._end as the model's
**                                   step makes each use;
**   the memory replay (plan.c)      byte counts: plan_transient_timeline;
**   the time replay (planner/cost.c) its clock and communication channel: plan_cost.
** The replays drive the walk themselves, run by run: walk_run_begin (one use, or a run of held
** uses), then what it computes, then walk_run_end.
**
** What an op keeps across the step (OpPlan.keep) changes the actions of its sharded slices: a kept
** weight is gathered (into its own buffer, arg WALK_KEPT) at its first use of the step and never
** freed or prefetched; a kept gradient is allocated by nobody (its buffer is the slice's own), adds
** up over the step's uses and micro-steps, and is reduce-scattered once (arg WALK_KEPT), after its
** last use of the last micro-step.
**
** Within one use the order is: the weight (gathered or taken), the next prefetch, the full
** gradient; then the use computes; then the weight is freed and the gradient reduced. A run of
** held uses (the fused LM head's slices) begins each in turn, computes, and ends each in turn.
*/
#ifndef OSDP_STEP_WALK_H
#define OSDP_STEP_WALK_H

#include <stddef.h>

#include "model/gpt.h"
#include "model/gpt_step.h"
#include "model/plan.h"

/* What the walk asks its user to do, for a use u of the schedule (NULL where none is named). */
typedef enum WalkAction {
  WALK_GATHER,         /* u's zero3 weight: allocate its full buffer and all-gather into it now
                       ** (arg WALK_KEPT: into the slice's kept buffer) */
  WALK_PREFETCH,       /* u's zero3 weight, ahead of its use: allocate the buffer, start gathering */
  WALK_TAKE_PREFETCH,  /* u's zero3 weight is the one prefetched: wait for that gather */
  WALK_FREE_WEIGHT,    /* u's gathered weight is done with: free it */
  WALK_ALLOC_GRAD,     /* u is a sharded slice's gradient use: allocate the full gradient */
  WALK_REDUCE,         /* reduce-scatter u's full gradient into the shard now, then free it;
                       ** arg bit 1: add to the shard (not the slice's first gradient use);
                       ** WALK_KEPT: the slice's kept gradient (not freed) */
  WALK_REDUCE_START,   /* the same without blocking (overlap_reduce): start it, keep the buffer */
  WALK_REDUCE_WAIT,    /* wait for u's reduce-scatter in flight: it has landed, free the buffer
                       ** (WALK_KEPT: a kept one, not freed) */
  WALK_ACROSS_START,   /* u's slice has its whole gradient in the shard: start the shard's
                       ** all-reduce across the groups of a hybrid plan */
  WALK_BUCKET_START,   /* dp bucket `arg` has every member final: start its all-reduce */
  WALK_WAIT_ALL,       /* end of backward: wait for every collective started */
} WalkAction;

/* An action's arg bit: the buffer is one a slice keeps across the step (OpPlan.keep), not a
** transient one: nothing is allocated for it or freed after it. */
#define WALK_KEPT 2

/* The user's side of a walk: does action a (for use u, with arg where the action says). */
typedef void (*WalkFn)(void* ctx, WalkAction a, const GptParamUse* u, int arg);

typedef struct StepWalk StepWalk;

/* A walker for plan p on model d: the schedule of p's slice counts and recomputed layers, p's
** dp buckets of at most bucket_bytes (plan_dp_buckets), actions sent to fn(ctx, ...). p must
** outlive the walker. NULL with an error when out of memory. */
StepWalk* walk_create(const GptDesc* d, const Plan* p, size_t bucket_bytes, WalkFn fn, void* ctx);
/* Frees a walker (NULL: nothing). */
void walk_destroy(StepWalk* w);
/* Starts a new pass: back to the first use, every per-pass count re-armed; a prefetch left from
** a forward-only pass (evaluation) is taken and freed. Outside an optimizer step's micro-steps
** (before its first, or an evaluation) kept weights are marked stale: gathered again at their
** next use, since the weights may have changed. */
void walk_reset(StepWalk* w);
/* The passes from now on are micro-step k (0 .. plan_accum - 1) of an optimizer step (a new
** walker: one pass that is the whole step): the first micro-step's gradient uses start fresh
** (walk_grad_begin's 1, WALK_REDUCE's overwrite), later ones add; only the last one starts dp
** buckets' all-reduces and hybrid shards' across-group all-reduces, and kept gradients'
** reduce-scatters. Bytes are the same in every micro-step. walk_backward_end of the last ends
** the step. */
void walk_set_micro(StepWalk* w, int k);

/* The engine's side, one call per parameter hook. The step makes use u of the schedule: its
** weight (forward, recompute, backward) and then, in backward (and the fused head), its
** gradient; the ends name the slice released (after held uses, several are open). Every call
** returns -1 when the use is not the one the schedule has next or is not open (a bug), else 0;
** walk_grad_begin returns 1 when this is the slice's first gradient use of the optimizer step. A use whose
** gradient is never acquired (an evaluation's forward) ends with its weight. */
int walk_weight_begin(StepWalk* w, int owner, int slice, GptPhase phase);
int walk_weight_end(StepWalk* w, int owner, int slice);
int walk_grad_begin(StepWalk* w, int owner, int slice);
int walk_grad_end(StepWalk* w, int owner, int slice);
/* Backward is over: the reduce-scatter in flight lands, then WALK_WAIT_ALL. */
void walk_backward_end(StepWalk* w);

/* The replays' side. walk_use_begin begins the next use of the schedule (its weight and its
** gradient, whichever it has) and returns its index, or -1 when the schedule is done;
** walk_use_end ends the oldest use begun and not ended. A held use (GptParamUse.held) is ended
** only after the next one has begun: the replays begin a run of held uses and the use after it,
** then end them all. */
int walk_use_begin(StepWalk* w);
void walk_use_end(StepWalk* w);
/* A run of uses: walk_run_begin begins the next use and, while the use just begun is held, the
** one after it (the fused head's slices); it returns the first one's index and sets *n to the
** uses begun, or returns -1 when the schedule is done. walk_run_end ends those n uses. */
int walk_run_begin(StepWalk* w, int* n);
void walk_run_end(StepWalk* w, int n);
/* Use i of the schedule. */
const GptParamUse* walk_use(const StepWalk* w, int i);

/* The number of uses in the schedule. */
int walk_use_count(const StepWalk* w);
/* Gradient uses of slice (owner, slice) per step (2 for the tied wte, 0: none). */
int walk_grad_uses(const StepWalk* w, int owner, int slice);
/* The dp buckets: how many, which one a slice is in (-1: sharded or no parameters), and the
** parameters a bucket holds. */
int walk_bucket_count(const StepWalk* w);
int walk_bucket_of(const StepWalk* w, int owner, int slice);
size_t walk_bucket_params(const StepWalk* w, int bucket);

#endif
