/* cost.c: memory and time of a plan on a device; see cost.h. */
#include "planner/cost.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"
#include "model/gpt_step.h"
#include "model/step_walk.h"

/* The sum of op i's compute shares over its passes in one step: 1 (forward and backward), plus
** the recomputed forward's share when its layer recomputes (gpt_op_recomputes). */
static double op_passes(const GptDesc* d, const DeviceInfo* dev, int i, int T, const int* recompute) {
  return 1.0 + (gpt_op_recomputes(d, recompute, i) ? device_op_pass_share(dev, d, i, T, GPT_RECOMPUTE) : 0);
}

/* The uses of op's parameters counted from the op list's step flags, for when the schedule
** cannot be allocated (it gives the same counts): each op using them (itself, or a tied op)
** reads the weight in its forward, again in a recomputed forward, and in its backward when it
** has one that reads it; its backward makes a gradient. */
static OpUses uses_by_rule(const GptDesc* d, int op, const int* recompute) {
  OpUses u = {0, 0, 0};
  for (int i = 0; d->ops[op].n_params && i < d->nops; i++) {
    const GptOp* x = &d->ops[i];
    if (x->owner != op) continue;
    u.fwd_weight += 1 + gpt_op_recomputes(d, recompute, i);
    u.bwd_weight += x->has_backward && x->bwd_weight;
    u.bwd_grad += 1; /* in its backward, or in the forward of a fused one (the LM head) */
  }
  return u;
}

int cost_ops_uses(const GptDesc* d, const int* recompute, OpUses* out) {
  int* ones = malloc((size_t)d->nops * sizeof *ones);
  int n = 0;
  for (int i = 0; ones && i < d->nops; i++) ones[i] = 1;
  GptParamUse* s = ones ? gpt_param_schedule_alloc(d, ones, recompute, &n) : NULL;
  for (int i = 0; i < d->nops; i++) out[i] = s ? (OpUses){0, 0, 0} : uses_by_rule(d, i, recompute);
  for (int i = 0; s && i < n; i++) {
    OpUses* u = &out[s[i].owner];
    u->fwd_weight += s[i].phase != GPT_BACKWARD && s[i].weight;
    u->bwd_weight += s[i].phase == GPT_BACKWARD && s[i].weight;
    u->bwd_grad += s[i].grad;
  }
  int ok = s != NULL;
  free(s);
  free(ones);
  return ok ? 0 : -1;
}

OpUses cost_op_uses(const GptDesc* d, int op, const int* recompute) {
  OpUses* all = malloc((size_t)d->nops * sizeof *all);
  if (!all) return uses_by_rule(d, op, recompute);
  cost_ops_uses(d, recompute, all);
  OpUses u = all[op];
  free(all);
  return u;
}

/* Full (padded) bytes of a slice of n parameters under strategy s sharded over G ranks in
** precision prec: its weight as the step gathers it (weight = 1: compute-copy elements, bf16
** in bf16 storage) or its gradient and master weights (weight = 0: fp32). */
static double slice_bytes(size_t n, Strategy s, int G, Precision prec, int weight) {
  size_t elem = weight ? precision_elems(prec).wt : sizeof(float);
  return (double)elem * (double)slice_padded(n, s, G, prec);
}

/* The factor a gradient reduction of kind scales its bytes by in dtype rd (bf16: as measured,
** or 1/2; device_reduce_factor). */
static double grad_factor(const DeviceInfo* dev, int kind, ReduceDtype rd) {
  return device_reduce_factor(dev, kind, rd == REDUCE_BF16);
}

/* The search model's all-reduce seconds of a dp slice whose gradient is `bytes` in fp32, its
** reductions sent at factor f of those bytes: its share of a full bucket's all-reduce (with
** latency + bandwidth: bytes / bandwidth + latency * bytes / bucket), over the world. */
static double dp_search_s(const DeviceInfo* dev, double bytes, double f) {
  double full = (double)PLAN_BUCKET_BYTES;
  return bytes * device_step_collective_s(dev, COLL_ALLREDUCE, f * full) / full;
}

/* The effective group size G of a context: its group, or the world when 0. */
static int context_group(const DeviceInfo* dev, const SliceContext* x) {
  return x->group > 0 ? x->group : dev->ranks;
}

double cost_slice_search_s(const DeviceInfo* dev, const SliceContext* x, size_t n, Strategy s) {
  int G = context_group(dev, x);
  double t = cost_slice_optim_s(dev, n, s, G);
  if (dev->ranks <= 1) return t;
  double far = grad_factor(dev, COLL_ALLREDUCE, x->reduce);
  double bytes = slice_bytes(n, s, G, dev->precision, 0);
  double frs = grad_factor(dev, COLL_REDUCE_SCATTER, x->reduce);
  if (s == STRAT_DP) return t + x->dp_exposure * dp_search_s(dev, bytes, far);
  CommShape in = device_group_shape(dev, G);
  /* zero2 gathers its updated fp32 shards; zero3 its weights as the step reads them */
  double ag = device_shape_step_s(dev, in, COLL_ALLGATHER,
                                  slice_bytes(n, s, G, dev->precision, s == STRAT_ZERO3));
  double rs = device_shape_step_s(dev, in, COLL_REDUCE_SCATTER, frs * bytes);
  double across = device_shape_step_s(dev, device_across_shape(dev, G), COLL_ALLREDUCE, far * bytes / G);
  double K = x->accum > 1 ? x->accum : 1; /* per micro-step: the gathers, the reduce-scatters */
  /* kept whole across the step: one reduce-scatter, one gather */
  t += (x->keep & KEEP_GRAD ? 1 : K * x->uses.bwd_grad) * rs + x->across_exposure * across;
  if (s == STRAT_ZERO2) return t + ag;
  return t + (x->keep & KEEP_WEIGHT ? 1 : K * (x->uses.fwd_weight + x->uses.bwd_weight)) * ag;
}

double cost_slice_optim_s(const DeviceInfo* dev, size_t n, Strategy s, int group) {
  return (double)slice_shard(n, s, group > 0 ? group : dev->ranks, dev->precision) *
         dev->optimizer_s_per_param;
}

size_t cost_slice_persistent(size_t n, Strategy s, int group, Precision prec, int keep) {
  size_t pa, gr, op, kw, kg;
  slice_persistent_bytes(n, s, group, prec, &pa, &gr, &op);
  slice_kept_bytes(n, s, group, prec, keep, &kw, &kg);
  return pa + gr + op + kw + kg;
}

size_t cost_op_transient(const GptDesc* d, int op, const OpPlan* o, int group, Precision prec,
                         OpUses uses) {
  size_t most = 0, held = 0;
  for (int s = 0; s < o->k; s++) {
    size_t n = gpt_slice_params(&d->ops[op], o->k, s);
    size_t f = slice_transient_forward(n, o->strat[s], group, prec, o->keep);
    size_t b = slice_transient_backward(n, o->strat[s], group, prec, uses.bwd_weight > 0, o->keep);
    if (f > most) most = f;
    if (b > most) most = b;
    held += slice_transient_backward(n, o->strat[s], group, prec, 1, o->keep);
  }
  return gpt_op_held(d, op) && held > most ? held : most;
}

/* Seconds of the measured "overhead" entry at micro-batch B (0 when not measured). */
static double overhead_s(const GptDesc* d, const DeviceInfo* dev, int B, int T) {
  const OpTime* o = device_measured_op(dev, d, T, "overhead");
  return o ? o->fixed_s[0] + (double)B * o->per_sample_s[0] : 0;
}

double cost_compute_s(const GptDesc* d, const DeviceInfo* dev, int B, int T) {
  double t = 0;
  for (int i = 0; i < d->nops; i++) t += device_op_time_s(dev, d, i, B, T, 1);
  return t + overhead_s(d, dev, B, T);
}

double cost_split_extra_s(const GptDesc* d, const DeviceInfo* dev, int op, int k, int B, int T,
                          const int* recompute) {
  if (k <= 1) return 0;
  double t = 0;
  for (int i = 0; i < d->nops; i++)
    if (d->ops[i].owner == op)
      t += op_passes(d, dev, i, T, recompute) *
           (device_op_time_s(dev, d, i, B, T, k) - device_op_time_s(dev, d, i, B, T, 1));
  return t;
}

double cost_recompute_s(const GptDesc* d, const DeviceInfo* dev, int B, int T, const int* recompute) {
  double t = 0;
  for (int i = 0; recompute && i < d->nops; i++)
    if (gpt_op_recomputes(d, recompute, i))
      t += device_op_pass_share(dev, d, i, T, GPT_RECOMPUTE) * device_op_time_s(dev, d, i, B, T, 1);
  return t;
}

size_t cost_batch_bytes(const GptDesc* d, const DeviceInfo* dev, int B, int T, const int* recompute) {
  size_t acts = gpt_acts_layout(d, B, T, dev->precision, recompute, NULL, NULL, NULL);
  return acts + gpt_scratch_bytes(d, B, T, dev->precision, dev->threads, 0);
}

int cost_largest_batch(const GptDesc* d, const DeviceInfo* dev, int T, int max) {
  int* all = malloc((size_t)(d->cfg.n_layer > 0 ? d->cfg.n_layer : 1) * sizeof *all);
  for (int l = 0; all && l < d->cfg.n_layer; l++) all[l] = 1;
  int B = 0;
  while (B < max) {
    size_t plain = cost_batch_bytes(d, dev, B + 1, T, NULL);
    size_t rec = cost_batch_bytes(d, dev, B + 1, T, all);
    if ((plain < rec ? plain : rec) > dev->mem_limit) break;
    B++;
  }
  free(all);
  return B;
}

/* ---- The replay of one step ---------------------------------------------------------------- */

/* The communication channel of non-blocking collectives: a queue of jobs, each with the
** seconds it still needs at full speed and the rate it progresses at beside compute, served
** in order. */
typedef struct Replay {
  const GptDesc* d;
  const DeviceInfo* dev;
  const Plan* p;
  double t;                 /* the rank's clock */
  double* rem;              /* per job: seconds of work left */
  double* rate;             /* per job: its link level's overlap rate for its kind */
  int* kind;                /* per job: COLL_* */
  int head, tail;
  double compute, hidden, exposed[COLL_COUNT];
  StepWalk* walk;           /* the step's parameter uses and what each does (step_walk.h) */
  int prefetch_job;         /* the job of the prefetched gather in flight */
  int reduce_job;           /* overlap_reduce: the job of the reduce-scatter in flight */
} Replay;

/* The rank computes for dt seconds; the channel's jobs progress at their overlap rates. */
static void replay_compute(Replay* r, double dt) {
  r->t += dt;
  r->compute += dt;
  while (dt > 0 && r->head < r->tail) {
    double rate = r->rate[r->head];
    if (rate <= 0) return;
    double need = r->rem[r->head] / rate;
    if (need <= dt) {
      dt -= need;
      r->hidden += r->rem[r->head];
      r->rem[r->head++] = 0;
    } else {
      r->rem[r->head] -= rate * dt;
      r->hidden += rate * dt;
      dt = 0;
    }
  }
}

/* The rank waits until job j (and every job before it) is done, at full speed. */
static void replay_wait(Replay* r, int j) {
  for (; r->head <= j && r->head < r->tail; r->head++) {
    r->t += r->rem[r->head];
    r->exposed[r->kind[r->head]] += r->rem[r->head];
    r->rem[r->head] = 0;
  }
}

/* Queues a non-blocking collective of `bytes` over communicator shape sh; returns its job. */
static int replay_start(Replay* r, int kind, CommShape sh, double bytes) {
  r->rem[r->tail] = device_shape_async_step_s(r->dev, sh, kind, bytes);
  r->rate[r->tail] = device_link(r->dev, sh.level, kind)->overlap;
  r->kind[r->tail] = kind;
  return r->tail++;
}

/* A blocking collective of `bytes` over communicator shape sh. */
static void replay_blocking(Replay* r, int kind, CommShape sh, double bytes) {
  double s = device_shape_step_s(r->dev, sh, kind, bytes);
  r->t += s;
  r->exposed[kind] += s;
}

/* Shard group, full bytes of the slice of use u, and its group's shape. */
static int use_group(const Replay* r, const GptParamUse* u) { return plan_op_group(r->p, u->owner); }
static double use_bytes(const Replay* r, const GptParamUse* u, int weight) {
  const OpPlan* o = &r->p->ops[u->owner];
  return slice_bytes(gpt_slice_params(&r->d->ops[u->owner], o->k, u->slice), o->strat[u->slice],
                     use_group(r, u), r->p->precision, weight);
}
static CommShape use_shape(const Replay* r, const GptParamUse* u) {
  return device_group_shape(r->dev, use_group(r, u));
}

/* The walk's actions on the replay's clock and channel, as the engine runs them: zero3 gathers
** block within the slice's group unless prefetched (then queued at the previous zero3 use and
** waited for here); reduce-scatters block, or with overlap_reduce are queued and waited for when
** the walk lands them; across-group and bucket all-reduces are queued; the end of backward waits
** for the whole channel. Gradient reductions send their bytes at the dtype's factor. */
static void time_action(void* ctx, WalkAction a, const GptParamUse* u, int arg) {
  Replay* r = ctx;
  ReduceDtype rd = r->p->reduce_dtype;
  switch (a) {
    case WALK_GATHER:
      replay_blocking(r, COLL_ALLGATHER, use_shape(r, u), use_bytes(r, u, 1));
      break;
    case WALK_PREFETCH:
      r->prefetch_job = replay_start(r, COLL_ALLGATHER, use_shape(r, u), use_bytes(r, u, 1));
      break;
    case WALK_TAKE_PREFETCH:
      replay_wait(r, r->prefetch_job);
      break;
    case WALK_REDUCE:
      replay_blocking(r, COLL_REDUCE_SCATTER, use_shape(r, u),
                      grad_factor(r->dev, COLL_REDUCE_SCATTER, rd) * use_bytes(r, u, 0));
      break;
    case WALK_REDUCE_START:
      r->reduce_job = replay_start(r, COLL_REDUCE_SCATTER, use_shape(r, u),
                                   grad_factor(r->dev, COLL_REDUCE_SCATTER, rd) * use_bytes(r, u, 0));
      break;
    case WALK_REDUCE_WAIT:
      replay_wait(r, r->reduce_job);
      break;
    case WALK_ACROSS_START:
      replay_start(r, COLL_ALLREDUCE, device_across_shape(r->dev, use_group(r, u)),
                   grad_factor(r->dev, COLL_ALLREDUCE, rd) * use_bytes(r, u, 0) / use_group(r, u));
      break;
    case WALK_BUCKET_START:
      replay_start(r, COLL_ALLREDUCE, device_world_shape(r->dev),
                   grad_factor(r->dev, COLL_ALLREDUCE, rd) *
                       (4.0 * (double)walk_bucket_params(r->walk, arg)));
      break;
    case WALK_WAIT_ALL:
      replay_wait(r, r->tail - 1);
      break;
    default: /* allocations and frees take no time */
      break;
  }
}

/* Runs op i in the given phase: its parameter uses from the walk, each with its share of the
** op's compute between the use's begin and end (a run of held uses, the fused head's, all begun
** before their compute); an op without parameters just computes. */
static void replay_op(Replay* r, int i, GptPhase phase, int B) {
  const GptDesc* d = r->d;
  int owner = d->ops[i].owner;
  int k = owner >= 0 ? r->p->ops[owner].k : 1;
  double t = device_op_pass_share(r->dev, d, i, r->p->seq, phase) *
             device_op_time_s(r->dev, d, i, B, r->p->seq, k);
  if (owner < 0) { replay_compute(r, t); return; }
  int run;
  for (int s = 0; s < k && walk_run_begin(r->walk, &run) >= 0; s += run) {
    replay_compute(r, t * run / k);
    walk_run_end(r->walk, run);
  }
}

/* The optimizer's seconds: the norm's all-reduce, each slice's update, zero2's all-gathers of
** the updated shards within the group (groups of plan p on the device: on_dev). */
static double replay_optimizer_s(const GptDesc* d, const DeviceInfo* dev, const Plan* on_dev) {
  double t = device_step_collective_s(dev, COLL_ALLREDUCE, 16);
  for (int i = 0; i < d->nops; i++)
    for (int s = 0; d->ops[i].n_params && s < on_dev->ops[i].k; s++) {
      size_t n = gpt_slice_params(&d->ops[i], on_dev->ops[i].k, s);
      int G = plan_op_group(on_dev, i);
      t += cost_slice_optim_s(dev, n, on_dev->ops[i].strat[s], G);
      if (on_dev->ops[i].strat[s] == STRAT_ZERO2) /* the updated fp32 shards */
        t += device_shape_step_s(dev, device_group_shape(dev, G), COLL_ALLGATHER,
                                 slice_bytes(n, STRAT_ZERO2, G, on_dev->precision, 0));
    }
  return t;
}

int plan_cost(const GptDesc* d, const DeviceInfo* dev, const Plan* p, PlanCost* c) {
  memset(c, 0, sizeof *c);
  Plan on_dev = *p; /* shallow: same ops, world = the device's ranks */
  on_dev.world = dev->ranks;
  plan_predict_memory(d, &on_dev, dev->threads, &c->mem);
  c->micro_batch = p->micro_batch;
  c->accum = plan_accum(p);
  int B = p->micro_batch, T = p->seq;
  Replay r = {.d = d, .dev = dev, .p = &on_dev};
  r.walk = walk_create(d, &on_dev, PLAN_BUCKET_BYTES, time_action, &r);
  int nev = gpt_step_events(d, p->recompute, NULL);
  GptStepEvent* ev = malloc((size_t)nev * sizeof *ev);
  if (ev) gpt_step_events(d, p->recompute, ev);
  /* Jobs: per use of each micro-step at most a prefetch, a reduce-scatter and an across-group
  ** all-reduce; one per bucket. */
  int K = plan_accum(p);
  size_t njobs = r.walk ? 3 * (size_t)K * (size_t)walk_use_count(r.walk) +
                              (size_t)walk_bucket_count(r.walk) + 1 : 1;
  r.rem = malloc(njobs * sizeof *r.rem);
  r.rate = malloc(njobs * sizeof *r.rate);
  r.kind = malloc(njobs * sizeof *r.kind);
  int rc = !r.walk || !ev || !r.rem || !r.rate || !r.kind ? osdp_fail("out of memory") : 0;
  if (!rc) {
    for (int k = 0; k < K; k++) { /* the micro-steps, as engine_step runs them */
      walk_reset(r.walk);
      walk_set_micro(r.walk, k);
      for (int i = 0; i < nev; i++) replay_op(&r, ev[i].op, ev[i].phase, B);
      walk_backward_end(r.walk);
    }
    c->optim_s = replay_optimizer_s(d, dev, &on_dev);
    c->compute_s = r.compute;
    c->hidden_s = r.hidden;
    for (int k = 0; k < COLL_COUNT; k++) {
      c->exposed_s[k] = r.exposed[k];
      c->comm_s += r.exposed[k];
    }
    c->overhead_s = K * overhead_s(d, dev, B, T); /* measured per forward and backward */
    c->step_s = c->compute_s + c->comm_s + c->optim_s + c->overhead_s;
    c->samples_per_s = c->step_s > 0 ? (double)dev->ranks * B * K / c->step_s : 0;
  }
  free(r.rem);
  free(r.rate);
  free(r.kind);
  free(ev);
  walk_destroy(r.walk);
  return rc;
}

/* ---- The search model ---------------------------------------------------------------------- */

void cost_exposures(const GptDesc* d, const DeviceInfo* dev, int B, int T, ReduceDtype rd,
                    double* dp, double* across) {
  *dp = *across = 1;
  if (dev->ranks <= 1) return;
  Plan p;
  PlanCost c;
  if (plan_uniform(&p, d, STRAT_DP, dev->ranks, B, T)) return;
  p.reduce_dtype = rd;
  p.precision = dev->precision;
  double modeled = 0, f = grad_factor(dev, COLL_ALLREDUCE, rd);
  for (int i = 0; i < d->nops; i++)
    if (d->ops[i].n_params) modeled += dp_search_s(dev, slice_bytes(d->ops[i].n_params, STRAT_DP, 1, PRECISION_FP32, 0), f);
  int rc = plan_cost(d, dev, &p, &c);
  plan_free(&p);
  if (rc) return;
  double ar = c.exposed_s[COLL_ALLREDUCE];
  if (modeled > 0) *dp = ar / modeled;
  if (ar + c.hidden_s > 0) *across = ar / (ar + c.hidden_s);
}

double cost_dp_exposure(const GptDesc* d, const DeviceInfo* dev, int B, int T) {
  double dp, across;
  cost_exposures(d, dev, B, T, REDUCE_FP32, &dp, &across);
  return dp;
}

double cost_search_step_s(const GptDesc* d, const DeviceInfo* dev, const Plan* p) {
  int B = p->micro_batch, T = p->seq, K = plan_accum(p);
  SliceContext x = {.reduce = p->reduce_dtype, .accum = K};
  cost_exposures(d, dev, B, T, p->reduce_dtype, &x.dp_exposure, &x.across_exposure);
  double t = K * (cost_compute_s(d, dev, B, T) + cost_recompute_s(d, dev, B, T, p->recompute)) +
             device_step_collective_s(dev, COLL_ALLREDUCE, 16);
  OpUses* uses = malloc((size_t)d->nops * sizeof *uses);
  if (!uses) return INFINITY;
  cost_ops_uses(d, p->recompute, uses);
  for (int i = 0; i < d->nops; i++) {
    if (!d->ops[i].n_params) continue;
    const OpPlan* o = &p->ops[i];
    x.uses = uses[i];
    x.group = o->group > 0 ? o->group : dev->ranks;
    x.keep = o->keep;
    t += K * cost_split_extra_s(d, dev, i, o->k, B, T, p->recompute);
    for (int s = 0; s < o->k; s++) t += cost_slice_search_s(dev, &x, gpt_slice_params(&d->ops[i], o->k, s), o->strat[s]);
  }
  free(uses);
  return t;
}
