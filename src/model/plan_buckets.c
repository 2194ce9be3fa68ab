/* plan_buckets.c: how a plan's replicated gradients are grouped into all-reduce buckets; see
** plan.h. The runtime allocates and reduces exactly these buckets and the cost model prices
** them, so the grouping is written once, here. */
#include "model/plan.h"

int plan_dp_buckets(const GptDesc* d, const Plan* p, size_t bucket_bytes, int* bucket) {
  size_t cap = bucket_bytes / sizeof(float), filled = 0;
  int cur = -1;
  for (int i = 0; i < d->nops * GPT_MAX_SLICES && bucket; i++) bucket[i] = -1;
  for (int op = d->nops - 1; op >= 0; op--) {
    if (!d->ops[op].n_params) continue;
    for (int s = 0; s < p->ops[op].k; s++) {
      if (p->ops[op].strat[s] != STRAT_DP) continue;
      size_t n = gpt_slice_params(&d->ops[op], p->ops[op].k, s);
      if (cur < 0 || (filled + n > cap && filled > 0)) { cur++; filled = 0; }
      filled += n;
      if (bucket) bucket[op * GPT_MAX_SLICES + s] = cur;
    }
  }
  return cur + 1;
}
