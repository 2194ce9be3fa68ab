/* gpt_step.c: instantiates the forward and backward passes in fp32 and fp64; see gpt_step.h. */
#include "model/gpt_step.h"

#include <stdlib.h>
#include <string.h>

#include "core/util.h"

int* gpt_acts_tokens(const GptDesc* d, const GptActs* a) {
  size_t BTC = (size_t)a->B * a->T * d->cfg.n_embd;
  return (int*)((char*)a->op_acts[0] + BTC * a->elem);
}

int* gpt_acts_targets(const GptDesc* d, const GptActs* a) {
  return gpt_acts_tokens(d, a) + (size_t)a->B * a->T;
}

void* gpt_acts_logits(const GptDesc* d, const GptActs* a) { return a->op_acts[gpt_op_lmhead(d)]; }

/* Whether layer l recomputes. */
static int recomputes(const int* recompute, int l) { return recompute && recompute[l]; }

int gpt_op_recomputes(const GptDesc* d, const int* recompute, int op) {
  int l = d->ops[op].layer;
  return l >= 0 && recomputes(recompute, l) && op - gpt_op_layer(l, 0) != GPT_FCPROJ;
}

/* Appends event (op, phase) to out (when not NULL) at index n; returns n + 1. */
static int add_event(GptStepEvent* out, int n, int op, GptPhase phase) {
  if (out) out[n] = (GptStepEvent){op, phase};
  return n + 1;
}

int gpt_step_events(const GptDesc* d, const int* recompute, GptStepEvent* out) {
  int n = 0, L = d->cfg.n_layer;
  for (int i = 0; i < d->nops; i++) n = add_event(out, n, i, GPT_FORWARD);
  n = add_event(out, n, gpt_op_lmhead(d), GPT_BACKWARD);
  n = add_event(out, n, gpt_op_lnf(d), GPT_BACKWARD);
  for (int l = L - 1; l >= 0; l--) {
    int o = gpt_op_layer(l, 0);
    for (int j = 0; j < GPT_FCPROJ; j++)
      if (gpt_op_recomputes(d, recompute, o + j)) n = add_event(out, n, o + j, GPT_RECOMPUTE);
    for (int j = GPT_FCPROJ; j >= 0; j--) n = add_event(out, n, o + j, GPT_BACKWARD);
  }
  return add_event(out, n, 0, GPT_BACKWARD);
}

int gpt_event_param_uses(const GptDesc* d, const int* slices, GptStepEvent ev, GptParamUse* out) {
  int owner = d->ops[ev.op].owner;
  if (owner < 0) return 0;
  int k = slices[owner], bwd = ev.phase == GPT_BACKWARD;
  int reversed = ev.op == 0 && !bwd;  /* embed forward: last slice (with wpe) first */
  int weight = !(ev.op == 0 && bwd);  /* embed backward: gradient only */
  for (int j = 0; out && j < k; j++)
    out[j] = (GptParamUse){owner, reversed ? k - 1 - j : j, ev.phase, weight, bwd};
  return k;
}

int gpt_param_schedule(const GptDesc* d, const int* slices, const int* recompute, GptParamUse* out) {
  int ne = gpt_step_events(d, recompute, NULL), n = 0;
  GptStepEvent* ev = malloc((size_t)ne * sizeof *ev);
  if (!ev) return -1;
  gpt_step_events(d, recompute, ev);
  for (int i = 0; i < ne; i++) n += gpt_event_param_uses(d, slices, ev[i], out ? out + n : NULL);
  free(ev);
  return n;
}

GptParamUse* gpt_param_schedule_alloc(const GptDesc* d, const int* slices, const int* recompute,
                                      int* n) {
  *n = gpt_param_schedule(d, slices, recompute, NULL);
  GptParamUse* u = *n >= 0 ? malloc((size_t)(*n > 0 ? *n : 1) * sizeof *u) : NULL;
  if (u) gpt_param_schedule(d, slices, recompute, u);
  return u;
}

/* Rounds a byte offset up to the 64-byte alignment of blocks in the shared buffer. */
static size_t align64(size_t x) { return (x + 63) / 64 * 64; }

size_t gpt_acts_layout(const GptDesc* d, int B, int T, size_t elem, const int* recompute,
                       size_t* own, size_t* shared_off, size_t* shared_bytes) {
  size_t total = 0, shared = 0;
  for (int i = 0; i < d->nops; i++) {
    const GptOp* op = &d->ops[i];
    size_t bytes = gpt_op_act_bytes(d, op, B, T, elem);
    int in_shared = gpt_op_recomputes(d, recompute, i);
    if (own) own[i] = in_shared ? 0 : bytes;
    if (shared_off) shared_off[i] = (size_t)-1;
    if (!in_shared) { total += bytes; continue; }
    /* Every recomputed layer uses the same offsets: those of its ops in layer order. */
    size_t off = 0;
    for (int j = gpt_op_layer(op->layer, 0); j < i; j++)
      off = align64(off + gpt_op_act_bytes(d, &d->ops[j], B, T, elem));
    if (shared_off) shared_off[i] = off;
    if (off + bytes > shared) shared = off + bytes;
  }
  if (shared_bytes) *shared_bytes = shared;
  return total + shared;
}

/* The backend of the activations a: where the step's kernels run. */
static const Backend* step_backend(const GptActs* a) { return a->backend ? a->backend : backend_cpu(); }
#define STEP_BACKEND(a) step_backend(a)

/* KT(a): the kernel table of the REAL being instantiated, on a's backend. A backend without
** fp64 kernels (CUDA) cannot run the fp64 pass: the fp64 pass is the CPU's test path. */
#define REAL float
#define KN(name) name##_f32
#define KT(a) (step_backend(a)->f32)
#include "model/gpt_step_impl.inc"
#undef REAL
#undef KN
#undef KT

#define REAL double
#define KN(name) name##_f64
#define KT(a) (step_backend(a)->f64)
#include "model/gpt_step_impl.inc"
#undef REAL
#undef KN
#undef KT
