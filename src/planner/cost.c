/* cost.c: memory and time of a plan on a device; see cost.h. */
#include "planner/cost.h"

#include <string.h>

OpUses cost_op_uses(int op) {
  if (op == 0) return (OpUses){2, 1, 2}; /* embed: wte also serves the tied LM head */
  return (OpUses){1, 1, 1};
}

double cost_slice_comm_s(const DeviceInfo* dev, int op, size_t n, Strategy s) {
  if (dev->ranks <= 1) return 0;
  OpUses u = cost_op_uses(op);
  double bytes = 4.0 * (double)slice_padded(n, s, dev->ranks);
  switch (s) {
    case STRAT_DP: {
      /* Buckets merge slices: full bandwidth, one latency per 16 MiB (fractional). */
      const CollectiveModel* ar = &dev->coll[COLL_ALLREDUCE];
      return bytes / ar->bandwidth_Bps + ar->latency_s * (bytes / COST_BUCKET_BYTES);
    }
    case STRAT_ZERO2:
      return u.bwd_grad * device_collective_s(dev, COLL_REDUCE_SCATTER, bytes) +
             device_collective_s(dev, COLL_ALLGATHER, bytes);
    case STRAT_ZERO3:
      return (u.fwd_weight + u.bwd_weight) * device_collective_s(dev, COLL_ALLGATHER, bytes) +
             u.bwd_grad * device_collective_s(dev, COLL_REDUCE_SCATTER, bytes);
    default: return 0;
  }
}

double cost_slice_optim_s(const DeviceInfo* dev, size_t n, Strategy s) {
  return (double)slice_shard(n, s, dev->ranks) * dev->optimizer_s_per_param;
}

size_t cost_slice_persistent(size_t n, Strategy s, int world) {
  size_t pa, gr, op;
  slice_persistent_bytes(n, s, world, &pa, &gr, &op);
  return pa + gr + op;
}

size_t cost_slice_transient(size_t n, Strategy s, int world) {
  size_t f = slice_transient_forward(n, s, world), b = slice_transient_backward(n, s, world, 1);
  return f > b ? f : b;
}

/* Index of the measured "overhead" entry when the device's times are for d at T, else -1. */
static int measured_overhead(const GptDesc* d, const DeviceInfo* dev, int T) {
  if (dev->n_op_times <= 0 || dev->compute_seq != T || strcmp(dev->compute_model, d->cfg.name) != 0)
    return -1;
  for (int i = 0; i < dev->n_op_times; i++)
    if (strcmp(dev->op_names[i], "overhead") == 0) return i;
  return -1;
}

double cost_compute_s(const GptDesc* d, const DeviceInfo* dev, int B, int T) {
  double t = 0;
  for (int i = 0; i < d->nops; i++) t += device_op_time_s(dev, d, i, B, T);
  int o = measured_overhead(d, dev, T);
  if (o >= 0) t += dev->op_fixed_s[o] + (double)B * dev->op_per_sample_s[o];
  return t;
}

size_t cost_batch_bytes(const GptDesc* d, const DeviceInfo* dev, int B, int T) {
  size_t acts = 0;
  for (int i = 0; i < d->nops; i++) acts += gpt_op_act_bytes(d, &d->ops[i], B, T, sizeof(float));
  return acts + gpt_scratch_bytes(d, B, T, sizeof(float), dev->threads);
}

void plan_cost(const GptDesc* d, const DeviceInfo* dev, const Plan* p, PlanCost* c) {
  memset(c, 0, sizeof *c);
  Plan on_dev = *p; /* shallow: same ops, world = the device's ranks */
  on_dev.world = dev->ranks;
  plan_predict_memory(d, &on_dev, dev->threads, &c->mem);
  c->micro_batch = p->micro_batch;
  c->compute_s = cost_compute_s(d, dev, p->micro_batch, p->seq);
  for (int i = 0; i < d->nops; i++) {
    if (!d->ops[i].n_params) continue;
    const OpPlan* o = &p->ops[i];
    for (int s = 0; s < o->k; s++) {
      size_t n = gpt_slice_params(&d->ops[i], o->k, s);
      c->comm_s += cost_slice_comm_s(dev, i, n, o->strat[s]);
      c->optim_s += cost_slice_optim_s(dev, n, o->strat[s]);
    }
  }
  c->step_s = c->compute_s + c->comm_s + c->optim_s;
  c->samples_per_s = c->step_s > 0 ? (double)dev->ranks * p->micro_batch / c->step_s : 0;
}
