/* gpt_step.c: what every family's step shares: the step's events and parameter schedule, the
** activation layout, named views of acquired slices, per-op timing, and the forward/backward
** entry points, which run the family's passes; see gpt_step.h. */
#include "model/gpt_step.h"

#include <stdlib.h>
#include <string.h>

#include "core/util.h"
#include "model/family.h"

int* gpt_acts_tokens(const GptDesc* d, const GptActs* a) {
  const GptOp* op = &d->ops[d->tokens_op];
  return (int*)((char*)a->op_acts[d->tokens_op] + model_act_offset(op, "tokens", a->B, a->T, a->precision));
}

int* gpt_acts_targets(const GptDesc* d, const GptActs* a) {
  const GptOp* op = &d->ops[d->tokens_op];
  return (int*)((char*)a->op_acts[d->tokens_op] + model_act_offset(op, "targets", a->B, a->T, a->precision));
}


int gpt_op_recomputes(const GptDesc* d, const int* recompute, int op) {
  int l = d->ops[op].layer;
  return l >= 0 && recompute && recompute[l] && !d->ops[op].layer_output;
}

/* Appends event (op, phase) to out (when not NULL) at index n; returns n + 1. */
static int add_event(GptStepEvent* out, int n, int op, GptPhase phase) {
  if (out) out[n] = (GptStepEvent){op, phase};
  return n + 1;
}

int gpt_step_events(const GptDesc* d, const int* recompute, GptStepEvent* out) {
  int n = 0;
  for (int i = 0; i < d->nops; i++) n = add_event(out, n, i, GPT_FORWARD);
  for (int i = d->nops - 1; i >= 0; i--) {
    int l = d->ops[i].layer;
    /* Entering layer l's backward (its last op): first its recomputed forwards. */
    if (l >= 0 && i == gpt_layer_op(d, l, d->ops_per_layer - 1))
      for (int j = gpt_layer_op(d, l, 0); j <= i; j++)
        if (gpt_op_recomputes(d, recompute, j)) n = add_event(out, n, j, GPT_RECOMPUTE);
    if (d->ops[i].has_backward) n = add_event(out, n, i, GPT_BACKWARD);
  }
  return n;
}

int gpt_event_param_uses(const GptDesc* d, const int* slices, GptStepEvent ev, GptParamUse* out) {
  const GptOp* op = &d->ops[ev.op];
  if (op->owner < 0) return 0;
  int k = slices[op->owner], bwd = ev.phase == GPT_BACKWARD, fused = !op->has_backward;
  int reversed = op->fwd_reversed && !bwd;
  int weight = !bwd || op->bwd_weight;
  for (int j = 0; out && j < k; j++)
    out[j] = (GptParamUse){op->owner, reversed ? k - 1 - j : j, ev.phase, weight, bwd || fused,
                           fused && j < k - 1};
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
  if (u && gpt_param_schedule(d, slices, recompute, u) != *n) { /* the list must not change */
    free(u);
    u = NULL;
  }
  return u;
}

/* Rounds a byte offset up to the 64-byte alignment of blocks in the shared buffer. */
static size_t align64(size_t x) { return (x + 63) / 64 * 64; }

size_t gpt_acts_layout(const GptDesc* d, int B, int T, Precision prec, const int* recompute,
                       size_t* own, size_t* shared_off, size_t* shared_bytes) {
  size_t total = 0, shared = 0;
  for (int i = 0; i < d->nops; i++) {
    const GptOp* op = &d->ops[i];
    size_t bytes = gpt_op_act_bytes(d, op, B, T, prec);
    int in_shared = gpt_op_recomputes(d, recompute, i);
    if (own) own[i] = in_shared ? 0 : bytes;
    if (shared_off) shared_off[i] = (size_t)-1;
    if (!in_shared) { total += bytes; continue; }
    /* Every recomputed layer uses the same offsets: those of its ops in layer order. */
    size_t off = 0;
    for (int j = gpt_layer_op(d, op->layer, 0); j < i; j++)
      off = align64(off + gpt_op_act_bytes(d, &d->ops[j], B, T, prec));
    if (shared_off) shared_off[i] = off;
    if (off + bytes > shared) shared = off + bytes;
  }
  if (shared_bytes) *shared_bytes = shared;
  return total + shared;
}

void* gpt_step_head_chunk(const GptDesc* d, const GptActs* a) {
  (void)d;
  return a->scratch;
}

void* gpt_step_work(const GptDesc* d, const GptActs* a) {
  return (char*)a->scratch + gpt_head_chunk_bytes(d, a->B, a->T, a->precision, a->head_rows);
}

const Backend* gpt_step_backend(const GptActs* a) { return a->backend ? a->backend : backend_cpu(); }

ParamView gpt_acquire_weights(const GptDesc* d, const GptActs* a, const GptParamHooks* h,
                              int owner, int k, int i, GptPhase phase) {
  void* w = h->acquire_weight(h->ctx, owner, i, phase);
  return model_param_view(&d->ops[owner], k, i, w, precision_elems(a->precision).wt);
}

ParamView gpt_acquire_grads(const GptDesc* d, const GptActs* a, const GptParamHooks* h,
                            int owner, int k, int i, int* fresh) {
  void* g = h->acquire_grad(h->ctx, owner, i, fresh);
  return model_param_view(&d->ops[owner], k, i, g, precision_elems(a->precision).grad);
}

OpTimer gpt_op_timer_start(const GptActs* a) {
  OpTimer t = {0, 0};
  if (a->op_seconds) t.t0 = gpt_step_backend(a)->clock();
  if (a->exclude_clock) t.x0 = *a->exclude_clock;
  return t;
}

void gpt_op_timer_stop(GptActs* a, int op, OpTimer t) {
  if (!a->op_seconds) return;
  double s = gpt_step_backend(a)->clock() - t.t0 - (a->exclude_clock ? *a->exclude_clock - t.x0 : 0);
  a->op_seconds[op] += s;
  if (a->op_phase_seconds) a->op_phase_seconds[(size_t)op * 3 + (size_t)a->phase] += s;
}

/* The family's passes for a's precision (NULL: the family has none). */
static const StepPasses* step_passes(const GptDesc* d, const GptActs* a) {
  switch (a->precision) {
    case PRECISION_FP64: return d->family->f64;
    case PRECISION_BF16: return d->family->bf16;
    default: return d->family->f32;
  }
}

double gpt_forward(const GptDesc* d, GptActs* a, const GptParamHooks* h, const int* slices,
                   GptForwardMode mode, double loss_scale, int* argmax) {
  a->phase = GPT_FORWARD;
  return step_passes(d, a)->forward(d, a, h, slices, mode, loss_scale, argmax);
}

void gpt_backward(const GptDesc* d, GptActs* a, const GptParamHooks* h, const int* slices) {
  a->phase = GPT_BACKWARD;
  step_passes(d, a)->backward(d, a, h, slices);
}
