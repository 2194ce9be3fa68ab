/*
** test_runtime.c: the engine's optimizer rules, checked in one process against a reference
** written out here (independent of engine.c):
**  1. After each of several engine_step calls, the parameters (engine_get_params) equal those
**     of an fp64 reference: the gradient from gpt_forward/gpt_backward in PRECISION_FP64 with plain local
**     hooks, the global norm, clipping to grad_clip, and AdamW (decoupled weight decay on the
**     weights of linears and on embed's wte and wpe; none on biases or LayerNorm) with the
**     documented learning-rate schedule. StepResult.loss and .grad_norm match the reference.
**     Run for uniform dp, zero2, zero3 and split mixed plans (with and without prefetch).
**     Self-checks show the comparison is sensitive: a reference without clipping, with decay
**     on every tensor or with decay on none differs from the true one far beyond the tolerance.
**  2. Which tensors decay, directly: one step with weight decay and one without, from the same
**     weights and batch, differ by exactly lr*wd*w on decayed tensors and not at all elsewhere.
**  3. StepResult.lr over 14 steps follows linear warm-up then cosine decay to lr_min_ratio*lr
**     at decay_steps (and stays there), or stays constant when decay_steps is 0.
*/
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "comm/comm.h"
#include "core/util.h"
#include "kernels/cpu_kernels.h"
#include "model/gpt.h"
#include "model/gpt_step.h"
#include "model/plan.h"
#include "runtime/engine.h"

/* Per-tensor tolerance of the engine (fp32) against the reference (fp64): max |difference|
** over a tensor, relative to the tensor's largest |value|. */
#define TENSOR_RTOL 1e-5

enum { B_ = 2, T_ = 7, STEPS = 3 };

/* The fp64 reference: full parameters, gradients and AdamW moments (flat, in op-block order,
** as engine_get_params lays them out), activations and the hooks of a plain local run. */
typedef struct Ref {
  GptDesc d;
  size_t* base;            /* [op] offset of the op's block in the flat arrays */
  double *w, *g, *m, *v;   /* [n_params] */
  int* slices;             /* all 1: the reference never splits */
  GptActs a;
  GptParamHooks h;
  long ntargets;           /* targets of the batch (not ignored) */
  double scale;            /* 1 / ntargets */
} Ref;

/* Reference hook: the slice's weights live in the flat array (slice 0 of an unsplit op). */
static void* ref_weight(void* ctx, int owner, int slice, GptPhase ph) {
  Ref* r = ctx;
  return r->w + r->base[owner];
}
/* Reference hook: nothing to free. */
static void ref_release(void* ctx, int owner, int slice, GptPhase ph) {}
/* Reference hook: gradients accumulate into the flat gradient array (zeroed before). */
static void* ref_grad(void* ctx, int owner, int slice, int* fresh) {
  Ref* r = ctx;
  *fresh = 0;
  return r->g + r->base[owner];
}
/* Reference hook: nothing to reduce. */
static void ref_release_grad(void* ctx, int owner, int slice) {}

/* A small model where no size is a power of two, several heads, a padded vocabulary. */
static const GptConfig test_cfg = {.name = "odd", .n_layer = 2, .n_embd = 18, .n_head = 3,
                                   .vocab_size = 37, .padded_vocab = 128, .max_seq = 16};

/* Builds the reference for test_cfg with a random batch (some targets ignored). */
static void ref_init(Ref* r) {
  memset(r, 0, sizeof *r);
  CHECK(gpt_desc_build(&r->d, &test_cfg) == 0);
  const GptDesc* d = &r->d;
  r->base = calloc((size_t)d->nops, sizeof *r->base);
  r->slices = calloc((size_t)d->nops, sizeof *r->slices);
  size_t at = 0;
  for (int i = 0; i < d->nops; i++) { r->base[i] = at; at += d->ops[i].n_params; r->slices[i] = 1; }
  r->w = calloc(d->n_params, sizeof(double));
  r->g = calloc(d->n_params, sizeof(double));
  r->m = calloc(d->n_params, sizeof(double));
  r->v = calloc(d->n_params, sizeof(double));
  r->h = (GptParamHooks){r, ref_weight, ref_release, ref_grad, ref_release_grad};
  r->a = (GptActs){.B = B_, .T = T_, .precision = PRECISION_FP64};
  r->a.op_acts = calloc((size_t)d->nops, sizeof(void*));
  for (int i = 0; i < d->nops; i++)
    r->a.op_acts[i] = calloc(1, gpt_op_act_bytes(d, &d->ops[i], B_, T_, PRECISION_FP64));
  r->a.scratch = calloc(1, gpt_scratch_bytes(d, B_, T_, PRECISION_FP64, 1, 0));
  Rng rng;
  rng_seed(&rng, 2024);
  int* tok = gpt_acts_tokens(d, &r->a);
  int* tg = gpt_acts_targets(d, &r->a);
  int n = 0;
  for (int i = 0; i < B_ * T_; i++) {
    tok[i] = (int)rng_below(&rng, (uint64_t)test_cfg.vocab_size);
    tg[i] = i % 4 == 1 ? -1 : (int)rng_below(&rng, (uint64_t)test_cfg.vocab_size);
    n += tg[i] >= 0;
  }
  r->ntargets = n;
  r->scale = 1.0 / n;
}

/* Frees the reference. */
static void ref_free(Ref* r) {
  for (int i = 0; i < r->d.nops; i++) free(r->a.op_acts[i]);
  free(r->a.op_acts); free(r->a.scratch);
  free(r->base); free(r->slices); free(r->w); free(r->g); free(r->m); free(r->v);
  gpt_desc_free(&r->d);
}

/* Random starting weights as floats: nonzero biases and LayerNorm shifts, LayerNorm scales
** near 1, so that decaying (or not decaying) any tensor is visible. */
static float* random_params(const GptDesc* d) {
  float* p = malloc(d->n_params * sizeof(float));
  Rng rng;
  rng_seed(&rng, 99);
  size_t at = 0;
  for (int i = 0; i < d->nops; i++) {
    const GptOp* op = &d->ops[i];
    for (size_t j = 0; j < op->n_params; j++) {
      double x = 0.2 * rng_normal(&rng);
      if (op->kind == OP_LAYERNORM && j < (size_t)d->cfg.n_embd) x += 1.0;
      p[at + j] = (float)x;
    }
    at += op->n_params;
  }
  return p;
}

/* Whether element j of op's block is weight-decayed, by the rule the documentation states:
** weights decay (a linear's W, embed's wte and also wpe), biases and LayerNorm do not. */
static int decays(const GptOp* op, size_t j) {
  if (op->kind == OP_EMBED) return 1;
  if (op->kind == OP_LINEAR) return j < op->rows * op->width;
  return 0;
}

/* The learning rate of 1-based step t, written from TrainOptions' documentation: linear
** warm-up to lr over `warmup` steps, then (if decay_steps > warmup) cosine decay to
** lr_min_ratio*lr reached at step decay_steps and kept after; else constant lr. */
static double expected_lr(const TrainOptions* o, long t) {
  if (o->warmup > 0 && t <= o->warmup) return o->lr * (double)t / (double)o->warmup;
  if (o->decay_steps <= o->warmup) return o->lr;
  double x = (double)(t - o->warmup) / (double)(o->decay_steps - o->warmup);
  if (x > 1) x = 1;
  double lo = o->lr * o->lr_min_ratio;
  return lo + (o->lr - lo) * 0.5 * (1.0 + cos(M_PI * x));
}

/* Reference loss and gradient at the current reference weights; returns the mean loss. */
static double ref_grads(Ref* r) {
  memset(r->g, 0, r->d.n_params * sizeof(double));
  double sum = gpt_forward(&r->d, &r->a, &r->h, r->slices, GPT_TRAIN, r->scale, NULL);
  gpt_backward(&r->d, &r->a, &r->h, r->slices);
  return sum * r->scale;
}

/* Variants of the reference rules, used to show the comparison would catch them. */
typedef enum RefVariant { REF_TRUE, REF_NO_CLIP, REF_DECAY_ALL, REF_DECAY_NONE } RefVariant;

/* One reference training step t (1-based) under options o: gradient, global norm, clipping,
** AdamW with bias correction and decoupled weight decay. Returns the loss; *norm gets the
** unclipped gradient norm. */
static double ref_step(Ref* r, const TrainOptions* o, long t, RefVariant var, double* norm) {
  double loss = ref_grads(r), ss = 0;
  for (size_t i = 0; i < r->d.n_params; i++) ss += r->g[i] * r->g[i];
  *norm = sqrt(ss);
  double c = 1.0;
  if (var != REF_NO_CLIP && o->grad_clip > 0 && *norm > o->grad_clip) c = o->grad_clip / *norm;
  double lr = expected_lr(o, t);
  double bc1 = 1.0 - pow(o->beta1, (double)t), bc2 = 1.0 - pow(o->beta2, (double)t);
  for (int i = 0; i < r->d.nops; i++) {
    const GptOp* op = &r->d.ops[i];
    for (size_t j = 0; j < op->n_params; j++) {
      size_t k = r->base[i] + j;
      double g = r->g[k] * c;
      r->m[k] = o->beta1 * r->m[k] + (1 - o->beta1) * g;
      r->v[k] = o->beta2 * r->v[k] + (1 - o->beta2) * g * g;
      int dec = var == REF_DECAY_ALL ? 1 : var == REF_DECAY_NONE ? 0 : decays(op, j);
      double wd = dec ? o->weight_decay : 0.0;
      r->w[k] -= lr * ((r->m[k] / bc1) / (sqrt(r->v[k] / bc2) + o->eps) + wd * r->w[k]);
    }
  }
  return loss;
}

/* Largest per-tensor relative difference between a and b (flat, op-block order; each op's
** rows part and tail are separate tensors, so a bias is never hidden by its weight).
** With `report`, one CHECK per tensor against TENSOR_RTOL naming the tensor. */
static double compare_tensors(const GptDesc* d, const double* ref, const float* got_f,
                              const double* got_d, int report, const char* what) {
  double worst = 0;
  size_t at = 0;
  for (int i = 0; i < d->nops; i++) {
    const GptOp* op = &d->ops[i];
    size_t cut = op->rows * op->width;
    for (int part = 0; part < 2; part++) {
      size_t lo = part ? cut : 0, hi = part ? op->n_params : cut;
      if (hi <= lo) continue;
      double dmax = 0, vmax = 0;
      for (size_t j = lo; j < hi; j++) {
        double x = got_f ? (double)got_f[at + j] : got_d[at + j];
        dmax = fmax(dmax, fabs(x - ref[at + j]));
        vmax = fmax(vmax, fabs(ref[at + j]));
      }
      double rel = dmax / (vmax > 0 ? vmax : 1);
      worst = fmax(worst, rel);
      if (report)
        CHECK_MSG(rel <= TENSOR_RTOL, "%s: %s %s differs from the reference by %.3g relative "
                  "(max |diff| %.3g)", what, op->name, part ? "tail" : "rows", rel, dmax);
    }
    at += op->n_params;
  }
  return worst;
}

/* The plans checked on one rank. */
typedef enum PlanKind { PK_DP, PK_ZERO2, PK_ZERO3, PK_SPLIT, PK_SPLIT_PREFETCH, PK_COUNT } PlanKind;
static const char* const plan_names[] = {"dp", "zero2", "zero3", "split", "split+prefetch"};

/* Builds plan kind pk on world 1: uniform, or every splittable op in 3 slices cycling through
** the strategies (so each op mixes dp, zero2 and zero3 slices, and the tail lands on each). */
static void make_plan(Plan* p, const GptDesc* d, PlanKind pk) {
  Strategy s = pk == PK_ZERO2 ? STRAT_ZERO2 : pk == PK_ZERO3 ? STRAT_ZERO3 : STRAT_DP;
  CHECK(plan_uniform(p, d, s, 1, B_, T_) == 0);
  if (pk < PK_SPLIT) return;
  for (int i = 0; i < d->nops; i++)
    if (d->ops[i].splittable) {
      p->ops[i].k = 3;
      for (int j = 0; j < 3; j++) p->ops[i].strat[j] = (Strategy)((i + j) % STRAT_COUNT);
    }
  p->prefetch = pk == PK_SPLIT_PREFETCH;
}

/* Creates an engine for plan kind pk with options o, starting from params and the
** reference's batch. */
static int engine_for(Engine* e, Ref* r, PlanKind pk, const TrainOptions* o, const float* params) {
  Plan p;
  make_plan(&p, &r->d, pk);
  int rc = engine_create(e, &r->d, &p, o);
  plan_free(&p);
  CHECK_MSG(rc == 0, "engine_create %s: %s", plan_names[pk], osdp_last_error());
  if (rc) return -1;
  engine_set_params(e, params);
  engine_set_batch(e, gpt_acts_tokens(&r->d, &r->a), gpt_acts_targets(&r->d, &r->a));
  return 0;
}

/* Options for the trajectory check. eps is of the order of the clipped gradient's elements
** (the clipped norm 0.05 over ~12k parameters gives about 5e-4 each), so that AdamW's first
** steps are a smooth function of the gradient: with eps 1e-8 an update is about sign(g),
** which fp32 rounding can flip for elements whose gradient is near zero, and which hides the
** clipping factor. lr varies each step (warm-up 2, cosine to step 5); the decay is large so a
** wrong decay rule moves weights far beyond the tolerance. */
static void trajectory_options(TrainOptions* o) {
  train_options_default(o);
  o->lr = 1e-2;
  o->eps = 1e-4;
  o->weight_decay = 0.5;
  o->grad_clip = 0.05;
  o->warmup = 2;
  o->decay_steps = 5;
  o->lr_min_ratio = 0.1;
  o->threads = 1;
}

/* Runs the reference trajectory of `var` for STEPS steps from params; returns final weights. */
static double* ref_trajectory(Ref* r, const TrainOptions* o, const float* params, RefVariant var) {
  for (size_t i = 0; i < r->d.n_params; i++) r->w[i] = params[i];
  memset(r->m, 0, r->d.n_params * sizeof(double));
  memset(r->v, 0, r->d.n_params * sizeof(double));
  double norm;
  for (long t = 1; t <= STEPS; t++) ref_step(r, o, t, var, &norm);
  double* out = malloc(r->d.n_params * sizeof(double));
  memcpy(out, r->w, r->d.n_params * sizeof(double));
  return out;
}

/* Check 1: engine steps against the reference, for plan kind pk. */
static void check_trajectory(Ref* r, const float* params, PlanKind pk) {
  TrainOptions o;
  trajectory_options(&o);
  Engine e;
  if (engine_for(&e, r, pk, &o, params)) return;
  for (size_t i = 0; i < r->d.n_params; i++) r->w[i] = params[i];
  memset(r->m, 0, r->d.n_params * sizeof(double));
  memset(r->v, 0, r->d.n_params * sizeof(double));
  float* got = malloc(r->d.n_params * sizeof(float));
  double worst = 0;
  int clipped = 0;
  for (long t = 1; t <= STEPS; t++) {
    StepResult sr;
    engine_step(&e, r->ntargets, NULL, NULL, &sr);
    double norm, loss = ref_step(r, &o, t, REF_TRUE, &norm);
    clipped += norm > o.grad_clip;
    CHECK_MSG(fabs(sr.loss - loss) <= 1e-5 * fabs(loss), "%s step %ld: loss %.9g vs reference %.9g",
              plan_names[pk], t, sr.loss, loss);
    CHECK_MSG(fabs(sr.grad_norm - norm) <= 1e-5 * norm, "%s step %ld: grad_norm %.9g vs reference "
              "%.9g", plan_names[pk], t, sr.grad_norm, norm);
    CHECK_MSG(fabs(sr.lr - expected_lr(&o, t)) <= 1e-12, "%s step %ld: lr %.9g vs %.9g",
              plan_names[pk], t, sr.lr, expected_lr(&o, t));
    engine_get_params(&e, got);
    char what[64];
    snprintf(what, sizeof what, "%s step %ld", plan_names[pk], t);
    worst = fmax(worst, compare_tensors(&r->d, r->w, got, NULL, 1, what));
  }
  CHECK_MSG(clipped == STEPS, "clipping was active in only %d of %d steps", clipped, STEPS);
  printf("trajectory %-15s %d steps: worst per-tensor relative difference %.2e (tolerance %.0e)\n",
         plan_names[pk], STEPS, worst, TENSOR_RTOL);
  free(got);
  engine_destroy(&e);
}

/* Check 1's self-test: references that skip clipping, decay every tensor or decay none end
** far (over 100x the tolerance) from the true reference, so the trajectory check can fail. */
static void check_reference_sensitivity(Ref* r, const float* params) {
  TrainOptions o;
  trajectory_options(&o);
  double* want = ref_trajectory(r, &o, params, REF_TRUE);
  static const char* const names[] = {"", "no clipping", "decay on every tensor",
                                      "decay on no tensor"};
  for (int var = REF_NO_CLIP; var <= REF_DECAY_NONE; var++) {
    double* alt = ref_trajectory(r, &o, params, (RefVariant)var);
    double d = compare_tensors(&r->d, want, NULL, alt, 0, names[var]);
    printf("reference with %-22s differs by %.2e (per-tensor relative)\n", names[var], d);
    CHECK_MSG(d > 100 * TENSOR_RTOL, "a reference with %s differs by only %.3g", names[var], d);
    free(alt);
  }
  free(want);
}

/* Check 2: one step with weight decay wd and one without, same weights and batch: decayed
** tensors differ by lr*wd*w0 (up to fp32 rounding of w), the others are bit-identical. */
static void check_decay_sets(Ref* r, const float* params, PlanKind pk) {
  TrainOptions o;
  train_options_default(&o);
  o.lr = 1e-2; o.weight_decay = 0.5; o.warmup = 0; o.threads = 1;
  TrainOptions o0 = o;
  o0.weight_decay = 0;
  Engine a, b;
  if (engine_for(&a, r, pk, &o, params)) return;
  if (engine_for(&b, r, pk, &o0, params)) { engine_destroy(&a); return; }
  StepResult sa, sb;
  engine_step(&a, r->ntargets, NULL, NULL, &sa);
  engine_step(&b, r->ntargets, NULL, NULL, &sb);
  float* wa = malloc(r->d.n_params * sizeof(float));
  float* wb = malloc(r->d.n_params * sizeof(float));
  engine_get_params(&a, wa);
  engine_get_params(&b, wb);
  size_t at = 0;
  int seen_decayed = 0, seen_plain = 0;
  for (int i = 0; i < r->d.nops; i++) {
    const GptOp* op = &r->d.ops[i];
    size_t cut = op->rows * op->width;
    for (int part = 0; part < 2; part++) {
      size_t lo = part ? cut : 0, hi = part ? op->n_params : cut;
      if (hi <= lo) continue;
      int dec = decays(op, lo);
      double err = 0, scale = 0;
      for (size_t j = lo; j < hi; j++) {
        double want = dec ? o.lr * o.weight_decay * params[at + j] : 0.0;
        double diff = (double)wb[at + j] - (double)wa[at + j];
        err = fmax(err, fabs(diff - want));
        scale = fmax(scale, fabs(o.lr * o.weight_decay * params[at + j]));
      }
      /* Decayed: exact up to a few ulps of w (|w| <= ~1, ulp 6e-8) against lr*wd*|w| ~ 1e-3. */
      double tol = dec ? 1e-3 * scale : 0.0;
      CHECK_MSG(err <= tol, "%s: %s %s should%s decay: off by %.3g (decay term up to %.3g)",
                plan_names[pk], op->name, part ? "tail" : "rows", dec ? "" : " not", err, scale);
      seen_decayed += dec;
      seen_plain += !dec;
    }
    at += op->n_params;
  }
  CHECK(seen_decayed > 0 && seen_plain > 0);
  free(wa); free(wb);
  engine_destroy(&a);
  engine_destroy(&b);
}

/* Check 3: StepResult.lr over 14 steps against the schedule, with anchor values that follow
** from the definition alone (peak after warm-up, midpoint of the cosine, floor after). */
static void check_lr_schedule(Ref* r, const float* params, int warmup, long decay_steps) {
  TrainOptions o;
  train_options_default(&o);
  o.lr = 2e-2; o.warmup = warmup; o.decay_steps = decay_steps; o.lr_min_ratio = 0.1; o.threads = 1;
  Engine e;
  if (engine_for(&e, r, PK_DP, &o, params)) return;
  for (long t = 1; t <= 14; t++) {
    StepResult sr;
    engine_step(&e, r->ntargets, NULL, NULL, &sr);
    double want = expected_lr(&o, t);
    CHECK_MSG(fabs(sr.lr - want) <= 1e-12, "warmup %d decay %ld step %ld: lr %.12g, expected %.12g",
              warmup, decay_steps, t, sr.lr, want);
    if (warmup > 0 && t <= warmup) CHECK_NEAR(sr.lr, o.lr * t / warmup, 1e-15);
    if (t == warmup) CHECK_NEAR(sr.lr, o.lr, 1e-15);
    if (decay_steps > warmup && t >= decay_steps) CHECK_NEAR(sr.lr, 0.1 * o.lr, 1e-15);
    if (decay_steps > warmup && 2 * (t - warmup) == decay_steps - warmup)
      CHECK_NEAR(sr.lr, 0.55 * o.lr, 1e-15);
    if (decay_steps == 0 && t > warmup) CHECK_NEAR(sr.lr, o.lr, 1e-15);
  }
  engine_destroy(&e);
}

/* Runs every check on one rank (world size 1) and prints "N passed, M failed". */
int main(int argc, char** argv) {
  comm_init(&argc, &argv);
  kernels_set_threads(1);
  Ref r;
  ref_init(&r);
  float* params = random_params(&r.d);
  check_reference_sensitivity(&r, params);
  for (int pk = 0; pk < PK_COUNT; pk++) {
    check_trajectory(&r, params, (PlanKind)pk);
    check_decay_sets(&r, params, (PlanKind)pk);
  }
  check_lr_schedule(&r, params, 2, 12);  /* midpoint of the cosine at step 7 */
  check_lr_schedule(&r, params, 0, 10);  /* no warm-up: cosine from step 1, midpoint step 5 */
  check_lr_schedule(&r, params, 3, 0);   /* warm-up, then constant */
  free(params);
  ref_free(&r);
  int rc = check_summary();
  comm_finalize();
  return rc;
}
