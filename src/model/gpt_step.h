/*
** gpt_step.h: one forward and one backward pass of the model over the operator list.
**
** The step code knows the model's math and activation layout, but not where parameters
** live: it asks a GptParamHooks for each parameter slice just before using it and gives it
** back right after. The single-process engine answers with pointers into full local
** tensors; the sharded runtime gathers, frees and reduces there. So there is exactly one
** implementation of the model, whatever the plan.
**
** The passes themselves are the model family's (family.h; GPT-2's in gpt2_step.c), in fp32
** (training) and fp64 (whole-model gradient checks); this module holds what every family's
** step shares: the hooks, the activation layout, the step's events and parameter schedule
** (derived from the op list's flags), and the helpers a family's step calls (named views of
** acquired slices, per-op timing).
*/
#ifndef OSDP_GPT_STEP_H
#define OSDP_GPT_STEP_H

#include <stddef.h>

#include "kernels/backend.h"
#include "model/gpt.h"

/* The three passes a parameter can be used in: the forward pass, the backward pass, and the
** forward of a recomputed layer re-run inside the backward pass (see GptActs.recompute). */
typedef enum GptPhase { GPT_FORWARD = 0, GPT_BACKWARD = 1, GPT_RECOMPUTE = 2 } GptPhase;

/* Where parameter slices come from. `owner` is the op owning the block, `slice` the slice
** index under that op's slice count. acquire_weight returns the slice's full weights
** (gpt_slice_params elements); acquire_grad returns a full-size gradient buffer for the
** slice and sets *fresh: 0 when the buffer holds gradient the step must ACCUMULATE into, 1
** when it holds nothing to keep (garbage: the first use of the slice's gradient in the step,
** or a new transient buffer), in which case the step writes EVERY element of the slice's
** gradient in this use (kernels overwrite; what they would not reach is zeroed), so no
** gradient buffer needs zeroing before a step. release_grad tells the owner that this use of
** the gradient is complete (it may reduce it then). */
typedef struct GptParamHooks {
  void* ctx;
  void* (*acquire_weight)(void* ctx, int owner, int slice, GptPhase phase);
  void (*release_weight)(void* ctx, int owner, int slice, GptPhase phase);
  void* (*acquire_grad)(void* ctx, int owner, int slice, int* fresh);
  void (*release_grad)(void* ctx, int owner, int slice);
} GptParamHooks;

/* The buffers of one micro-batch: each op's activation block (gpt_op_act_bytes, placed as
** gpt_acts_layout says), and the step's working buffers (gpt_scratch_bytes, laid out by the
** family's step: GPT-2's are dres [BT,C], two [BT,4C] buffers and the attention scratch, which
** the forward uses too), in the step's precision (precision_elems: activations and working
** buffers act elements, saved statistics stat elements; weights wt and gradients grad elements
** as the hooks hand them over). Every buffer is in the
** backend's memory; the step reaches them only through the backend's kernels, zero and copy.
**
** Recomputation: a layer l with recompute[l] != 0 keeps only its output (the block of its
** layer_output op, the next layer's input) between forward and backward; its other blocks are
** views of one buffer shared by all recomputed layers. Backward re-runs such a layer's forward
** (phase GPT_RECOMPUTE, without the output op) into the shared buffer just before the layer's
** backward, acquiring its weights again through the hooks. */
typedef struct GptActs {
  int B, T;
  Precision precision; /* which kernels run (the backend's f32, f64 or bf16 table) on what */
  const Backend* backend; /* where the buffers live and the kernels run (NULL: the CPU) */
  void** op_acts;   /* nops pointers */
  const int* recompute; /* NULL, or n_layer flags: which layers recompute */
  void* scratch;    /* gpt_scratch_bytes */
  double* op_seconds; /* NULL, or nops counters that receive each op's forward+backward time */
  double* op_phase_seconds; /* NULL, or 3 * nops counters: [op * 3 + phase] receives op's
                            ** time in each GptPhase (forward, backward, recomputed forward);
                            ** needs op_seconds */
  GptPhase phase;   /* the pass running: set by gpt_forward_* and gpt_backward_*, and by the
                    ** families' backward around a layer's recomputed forward */
  const double* exclude_clock; /* NULL, or a clock of seconds (e.g. spent communicating inside
                                ** the hooks) whose advance during an op is left out of its time */
  int head_rows;    /* rows of the LM head's chunks (gpt_head_rows; 0: the default) */
} GptActs;

/* One use of a parameter slice by the step: its weight (acquire_weight), its gradient
** (acquire_grad), or both (backward of an op with weights, and the fused LM head's forward).
** A held use stays open while the next one begins: the fused LM head acquires every slice of
** its owner before its first chunk and releases them after its last, so all are live at once
** (its uses are held but the last). */
typedef struct GptParamUse {
  int owner, slice;
  GptPhase phase;
  int weight, grad;
  int held;
} GptParamUse;

/* One operator's pass in a training step: op's forward, its backward, or its forward again
** (GPT_RECOMPUTE) in the backward pass of a recomputed layer. */
typedef struct GptStepEvent {
  int op;
  GptPhase phase;
} GptStepEvent;

/* Whether op is re-run forward in the backward pass (phase GPT_RECOMPUTE) under the per-layer
** flags recompute (NULL: none): every op of a recomputed layer but its output op (layer_output,
** whose output is kept). The same ops' activation blocks live in the shared recompute buffer. */
int gpt_op_recomputes(const GptDesc* d, const int* recompute, int op);

/* The operator passes of one training step in the order gpt_forward and gpt_backward run them:
** every op forward; then every op with a backward (has_backward) from the last to the first,
** and when the backward reaches a layer that recomputes (recompute != NULL and recompute[l]),
** first that layer's recomputed forwards (gpt_op_recomputes, in forward order). Writes up to the
** returned count into out (NULL: count only). The cost model replays exactly these events. */
int gpt_step_events(const GptDesc* d, const int* recompute, GptStepEvent* out);

/* The parameter uses of one op pass, in the order the step makes them: each slice of the
** op's owner in turn (last first in the forward of an op with fwd_reversed); the weight in
** forward and recompute, weight and gradient in backward (the gradient only for an op without
** bwd_weight). An op whose backward runs in its forward (has_backward 0: the fused LM head)
** uses weight and gradient of every slice in its forward, held (GptParamUse.held). Ops without
** parameters have none. Writes into out (NULL: count only) and returns the count. */
int gpt_event_param_uses(const GptDesc* d, const int* slices, GptStepEvent ev, GptParamUse* out);

/* The parameter uses of one training step: gpt_event_param_uses over gpt_step_events, so a
** runtime can prefetch the next weight, count each slice's gradient uses, and the memory and
** cost models can replay the step. Writes up to the returned count into out (NULL: count
** only). A test checks it against the order the hooks really see. */
int gpt_param_schedule(const GptDesc* d, const int* slices, const int* recompute, GptParamUse* out);

/* gpt_param_schedule into a new heap array (caller frees) of *n entries; NULL when out of
** memory (then *n is undefined). */
GptParamUse* gpt_param_schedule_alloc(const GptDesc* d, const int* slices, const int* recompute,
                                      int* n);

/* Where the activation blocks of B x T with per-layer recompute flags (NULL: none) live: own[op]
** bytes in the op's own block (0 for a block inside the shared buffer), shared_off[op] its offset
** in the shared buffer (or (size_t)-1), *shared_bytes the shared buffer's size (0 without
** recomputation; blocks 64-byte aligned in it). Any output pointer may be NULL. Returns the
** total activation bytes: own blocks plus the shared buffer. One source of truth for the
** runtime's allocation and the memory prediction. */
size_t gpt_acts_layout(const GptDesc* d, int B, int T, Precision prec, const int* recompute,
                       size_t* own, size_t* shared_off, size_t* shared_bytes);

/* The token ids and targets of the micro-batch, in the activation block of the op that holds
** them (GptDesc.tokens_op). */
int* gpt_acts_tokens(const GptDesc* d, const GptActs* a);
int* gpt_acts_targets(const GptDesc* d, const GptActs* a);

/* ---- For a family's step ---------------------------------------------------------------- */

/* The parts of a's scratch buffer (gpt_scratch_bytes): the LM head's chunk of logits, and the
** family's working buffers after it. */
void* gpt_step_head_chunk(const GptDesc* d, const GptActs* a);
void* gpt_step_work(const GptDesc* d, const GptActs* a);

/* The backend of the activations a: where the step's kernels run (the CPU when unset). */
const Backend* gpt_step_backend(const GptActs* a);

/* Acquires slice i of k of op owner's weight through the hooks and names its tensors
** (model_param_view); release with h->release_weight. */
ParamView gpt_acquire_weights(const GptDesc* d, const GptActs* a, const GptParamHooks* h,
                              int owner, int k, int i, GptPhase phase);
/* Acquires the same slice's gradient buffer (see acquire_grad: *fresh) and names its tensors;
** release with h->release_grad. */
ParamView gpt_acquire_grads(const GptDesc* d, const GptActs* a, const GptParamHooks* h,
                            int owner, int k, int i, int* fresh);

/* Times one op's pass when the caller asked for per-op timing (GptActs.op_seconds): start before
** the pass, stop after it; the op's counter gains the wall time less what the exclude clock
** (time the hooks spent communicating) advanced meanwhile, and so does its op_phase_seconds
** counter of the pass running (GptActs.phase). */
typedef struct OpTimer { double t0, x0; } OpTimer;
OpTimer gpt_op_timer_start(const GptActs* a);
void gpt_op_timer_stop(GptActs* a, int op, OpTimer t);

/* ---- The step ----------------------------------------------------------------------------- */

/* The passes a forward can be: training (the LM head's backward runs fused inside it, so its
** weight gradient goes through the hooks and gpt_backward must follow) or evaluation (losses
** only: no gradient is touched, nothing must follow). */
typedef enum GptForwardMode { GPT_EVAL = 0, GPT_TRAIN = 1 } GptForwardMode;

/* Forward pass and loss, in a's precision (the family's passes of that precision, on its
** backend's kernel table of that precision, which must exist). slices[op] is the slice count of
** each owner op. loss_scale multiplies
** the summed per-position losses (1 / number of targets in the global batch, so gradients are
** those of the global mean). In GPT_TRAIN the fused LM head also makes the gradient of its
** input (for gpt_backward) and of its weight. If argmax is not NULL it receives, for each of the
** B*T positions, the index of the largest logit (for accuracy). Returns the sum of this
** micro-batch's per-position losses (unscaled). */
double gpt_forward(const GptDesc* d, GptActs* a, const GptParamHooks* h, const int* slices,
                   GptForwardMode mode, double loss_scale, int* argmax);
/* Backward pass: writes (fresh buffers) or accumulates every parameter gradient through the
** hooks. Must follow gpt_forward in GPT_TRAIN on the same activations. */
void gpt_backward(const GptDesc* d, GptActs* a, const GptParamHooks* h, const int* slices);

#endif
