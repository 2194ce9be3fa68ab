/*
** cost.h: the planner's cost model: the exact memory and the predicted time of a training
** step under a plan, on the ranks a DeviceInfo describes.
**
** Memory is plan_predict_memory's, to the byte (the runtime's arena matches it):
**   peak = sum over slices of their persistent bytes (weights, gradients, optimizer state)
**        + activations of every op at micro-batch B + backward scratch
**        + the largest transient of any one slice (a gathered weight or full gradient).
** Time per step = compute + communication + optimizer, with
**   compute        sum over all ops of device_op_time_s (measured or from FLOPs), plus the
**                  measured "overhead" entry if the device has one; independent of the plan;
**   communication  per slice of n parameters (n_pad when sharded), bytes = 4 * n_pad:
**                    dp     one all-reduce, bucketed: 4n / bandwidth + latency * 4n / 16 MiB
**                    zero2  a reduce-scatter per backward gradient use + one all-gather
**                    zero3  an all-gather per weight use + a reduce-scatter per gradient use
**                  (embed's wte is also the LM head: 2 forward weight uses, 1 backward weight
**                  use, 2 backward gradient uses; every other op 1, 1, 1); zero on one rank;
**   optimizer      elements the rank updates (n for dp, n_pad / N sharded) times
**                  dev->optimizer_s_per_param.
** Communication and optimizer time do not depend on the micro-batch; compute does not
** depend on the plan. samples/s = N * B / step time. Nothing overlaps in this model: a plan
** with "prefetch" gets its exact (larger) memory from plan_predict_memory, but no time credit.
*/
#ifndef OSDP_COST_H
#define OSDP_COST_H

#include <stddef.h>

#include "model/gpt.h"
#include "model/plan.h"
#include "planner/device.h"

/* Gradient bucket size the runtime merges dp gradients into (engine's default). */
#define COST_BUCKET_BYTES ((double)(16u << 20))

typedef struct PlanCost {
  int micro_batch;
  double step_s;         /* compute_s + comm_s + optim_s */
  double samples_per_s;  /* N * micro_batch / step_s */
  double compute_s, comm_s, optim_s;
  MemPrediction mem;     /* exact per-rank memory (plan_predict_memory) */
} PlanCost;

/* How many times one step uses an op's parameters. */
typedef struct OpUses {
  int fwd_weight;   /* forward uses of the weight */
  int bwd_weight;   /* backward uses of the weight */
  int bwd_grad;     /* backward uses that produce a gradient contribution */
} OpUses;

/* The uses of op's parameters per step (embed's tied wte is used twice, see above). */
OpUses cost_op_uses(int op);

/* Communication seconds per step of one slice of n parameters of op under strategy s. */
double cost_slice_comm_s(const DeviceInfo* dev, int op, size_t n, Strategy s);
/* Optimizer seconds per step of one slice of n parameters under strategy s. */
double cost_slice_optim_s(const DeviceInfo* dev, size_t n, Strategy s);
/* Bytes a slice keeps between steps: weights + gradients + optimizer state. */
size_t cost_slice_persistent(size_t n, Strategy s, int world);
/* Largest transient bytes of a slice: max of its forward and backward transients. */
size_t cost_slice_transient(size_t n, Strategy s, int world);

/* Compute seconds of one step at micro-batch B and sequence T: every op's time plus the
** measured "overhead" entry, if the device has one for this model and T. */
double cost_compute_s(const GptDesc* d, const DeviceInfo* dev, int B, int T);
/* Bytes that depend on the micro-batch only: activations of all ops + backward scratch. */
size_t cost_batch_bytes(const GptDesc* d, const DeviceInfo* dev, int B, int T);

/* Cost of plan p (its micro_batch and seq) on dev. The memory is computed for dev->ranks
** ranks (p->world should equal it). */
void plan_cost(const GptDesc* d, const DeviceInfo* dev, const Plan* p, PlanCost* c);

#endif
