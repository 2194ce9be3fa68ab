/*
** explain.c: a few words on why an operator of a plan is sharded (what it saves and what
** replicating it would cost); planner_explain of search.h. See search.c for the search itself.
*/
#include "planner/search.h"

#include <math.h>
#include <stdio.h>

#include "core/util.h"

/* Persistent bytes of op's slices in plan p (sharded over its shard group on dev's ranks). */
static size_t op_kept_bytes(const GptDesc* d, const DeviceInfo* dev, const Plan* p, int op) {
  size_t m = 0;
  int G = p->ops[op].group > 0 ? p->ops[op].group : dev->ranks;
  for (int s = 0; s < p->ops[op].k; s++)
    m += cost_slice_persistent(gpt_slice_params(&d->ops[op], p->ops[op].k, s),
                               p->ops[op].strat[s], G, p->precision, p->ops[op].keep);
  return m;
}

/* Whether plan q fits on dev: plan_cost succeeds and the peak is within the limit. Fills *c. */
static int plan_fits(const GptDesc* d, const DeviceInfo* dev, const Plan* q, PlanCost* c) {
  return plan_cost(d, dev, q, c) == 0 && c->mem.peak <= dev->mem_limit;
}

/* The largest micro-batch <= B at which plan q fits, or 0; fills *c with its cost. */
static int largest_fitting_batch(const GptDesc* d, const DeviceInfo* dev, Plan* q, int B, PlanCost* c) {
  for (int b = B; b >= 1; b--) {
    q->micro_batch = b;
    if (plan_fits(d, dev, q, c)) return b;
  }
  return 0;
}

/* Bytes to three significant digits, for a short sentence: "1.51 MiB", "822 MiB", "0 B". */
static void short_bytes(double bytes, char buf[32]) {
  static const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  int u = 0;
  while (fabs(bytes) >= 1024.0 && u < 5) { bytes /= 1024.0; u++; }
  snprintf(buf, 32, fabs(bytes) >= 100 ? "%.0f %s" : "%.3g %s", bytes, units[u]);
}

/* Seconds to three significant digits: "0.159 ms", "8.12 us". */
static void short_time(double s, char buf[32]) {
  if (fabs(s) < 1e-4) snprintf(buf, 32, "%.3g us", 1e6 * s);
  else snprintf(buf, 32, "%.3g ms", 1e3 * s);
}

/* Compares p with the same plan with only this op replicated (one dp slice), replayed by
** plan_cost, and says which of these holds, after the bytes sharding saves:
**   replicated, no micro-batch fits:     "saves 822 MiB, needed to fit"
**   replicated, only a smaller B fits:   "saves 1.51 MiB for B=6, not 5 (+5.5%)"
**   replicated fits too, p is faster:    "saves 1.51 MiB, 0.159 ms faster than dp"
**   replicated fits too and is faster:   "saves 1.51 MiB, costs 0.2 ms (dp fits)" */
void planner_explain(const GptDesc* d, const DeviceInfo* dev, const SearchOptions* o,
                     const Plan* p, int op, char* buf, size_t n) {
  Plan q;
  PlanCost cp, cq, cb;
  char saved[32];
  if (n) buf[0] = 0;
  if (!d->ops[op].n_params || plan_copy(&q, p)) return;
  q.ops[op].k = 1;
  q.ops[op].strat[0] = STRAT_DP;
  if (plan_cost(d, dev, p, &cp) == 0) {
    size_t mine = op_kept_bytes(d, dev, p, op), dp = op_kept_bytes(d, dev, &q, op);
    short_bytes((double)(dp > mine ? dp - mine : 0), saved);
    if (plan_fits(d, dev, &q, &cq)) {
      double dt = cp.step_s - cq.step_s;
      char ts[32];
      short_time(fabs(dt), ts);
      if (dt < 0) snprintf(buf, n, "saves %s, %s faster than dp", saved, ts);
      else snprintf(buf, n, "saves %s, costs %s (dp fits)", saved, ts);
    } else {
      int b = largest_fitting_batch(d, dev, &q, p->micro_batch - 1, &cb);
      if (b > 0 && cb.samples_per_s > 0)
        snprintf(buf, n, "saves %s for B=%d, not %d (%+.1f%%)", saved, p->micro_batch, b,
                 100.0 * (cp.samples_per_s / cb.samples_per_s - 1));
      else
        snprintf(buf, n, "saves %s, needed to fit", saved);
    }
  }
  plan_free(&q);
  (void)o;
}
