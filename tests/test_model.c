/*
** test_model.c: the whole model, checked in double precision.
**  1. Gradient of the loss with respect to every parameter tensor (sampled entries of every
**     op's block) against central finite differences, at odd sizes, unsplit and split.
**  2. Splitting operators into slices changes nothing but the summation order.
**  3. The engine's arena peak equals the model description's prediction to the byte, for
**     several configs and plans (one process; multi-rank plans are checked by plan_invariance).
**  4. Recomputing layers changes nothing: the same loss and gradients, bit for bit, and the
**     schedule lists the recomputed forward's uses where the step makes them.
**  5. Fresh gradient buffers (the hook says "first use", as the engine does, over NaN garbage)
**     give the same gradients as zeroed buffers that the step accumulates into.
**  6. The step walk (step_walk.h), for random plans on 4 ranks: the engine's calls (one per hook)
**     and the replays' loop give the same actions; every buffer it allocates is freed by the end
**     (at most two gathered weights and two full gradients live), every prefetch is taken, every
**     dp bucket starts once, every hybrid shard's across-group all-reduce once, the final wait
**     comes last; a use out of schedule is refused; a reset after a forward frees its prefetch.
*/
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "comm/comm.h"
#include "core/util.h"
#include "kernels/cpu_kernels.h"
#include "model/gpt.h"
#include "model/gpt_step.h"
#include "model/plan.h"
#include "model/step_walk.h"
#include "runtime/engine.h"

/* Full local parameters and gradients in double: the hooks of a plain one-process run. */
typedef struct LocalParams {
  const GptDesc* d;
  const int* slices;
  double** w;   /* per op block */
  double** g;
  GptParamUse rec[4096];   /* the uses the hooks saw, in order */
  int open[4096];          /* per use: its parts (weight, gradient) acquired and not released */
  int nrec;
  int fresh_mode;          /* gradients start as NaN and the first use of a slice is fresh */
  unsigned char used[256 * GPT_MAX_SLICES]; /* [owner * GPT_MAX_SLICES + slice]: used yet */
} LocalParams;

/* Records a new use: a use still open when the next one begins is held. */
static void lp_record(LocalParams* lp, GptParamUse u) {
  if (lp->nrec == 4096) return;
  for (int j = lp->nrec - 1; j >= 0 && j >= lp->nrec - 16; j--)
    if (lp->open[j]) lp->rec[j].held = 1;
  lp->open[lp->nrec] = 1;
  lp->rec[lp->nrec++] = u;
}
/* A part of the latest open use of (owner, slice) is released. */
static void lp_close(LocalParams* lp, int owner, int slice) {
  for (int j = lp->nrec - 1; j >= 0; j--)
    if (lp->open[j] && lp->rec[j].owner == owner && lp->rec[j].slice == slice) {
      lp->open[j]--;
      return;
    }
}
static void* lp_weight(void* ctx, int owner, int slice, GptPhase ph) {
  LocalParams* lp = ctx;
  lp_record(lp, (GptParamUse){owner, slice, ph, 1, 0, 0});
  return lp->w[owner] + gpt_slice_offset(&lp->d->ops[owner], lp->slices[owner], slice);
}
static void lp_release(void* ctx, int owner, int slice, GptPhase ph) { lp_close(ctx, owner, slice); }
static void* lp_grad(void* ctx, int owner, int slice, int* fresh) {
  LocalParams* lp = ctx;
  /* Zeroed gradients are accumulated into; in fresh mode the first use overwrites. */
  unsigned char* used = &lp->used[owner * GPT_MAX_SLICES + slice];
  *fresh = lp->fresh_mode && !*used;
  *used = 1;
  GptParamUse* last = lp->nrec ? &lp->rec[lp->nrec - 1] : NULL;
  if (last && last->owner == owner && last->slice == slice && last->weight && !last->grad &&
      lp->open[lp->nrec - 1]) {
    last->grad = 1;
    lp->open[lp->nrec - 1]++;
  } else {
    lp_record(lp, (GptParamUse){owner, slice, GPT_BACKWARD, 0, 1, 0});
  }
  return lp->g[owner] + gpt_slice_offset(&lp->d->ops[owner], lp->slices[owner], slice);
}
static void lp_release_grad(void* ctx, int owner, int slice) { lp_close(ctx, owner, slice); }

typedef struct Fixture {
  GptDesc d;
  GptActs a;
  LocalParams lp;
  GptParamHooks h;
  int* slices;
  int* recompute;   /* per layer */
  void* shared;     /* the recompute buffer */
  double scale;
} Fixture;

/* Builds a double-precision model with random weights and a random batch; layer l recomputes
** when bit l of recompute_mask is set. */
static void fixture_init_rc(Fixture* f, const GptConfig* cfg, int B, int T, int ksplit,
                            unsigned recompute_mask) {
  memset(f, 0, sizeof *f);
  gpt_desc_build(&f->d, cfg);
  const GptDesc* d = &f->d;
  f->recompute = calloc((size_t)cfg->n_layer, sizeof(int));
  for (int l = 0; l < cfg->n_layer; l++) f->recompute[l] = (recompute_mask >> l) & 1;
  f->slices = calloc((size_t)d->nops, sizeof(int));
  f->lp.w = calloc((size_t)d->nops, sizeof(double*));
  f->lp.g = calloc((size_t)d->nops, sizeof(double*));
  Rng r;
  rng_seed(&r, 42);
  for (int i = 0; i < d->nops; i++) {
    f->slices[i] = d->ops[i].splittable ? ksplit : 1;
    if (!d->ops[i].n_params) continue;
    f->lp.w[i] = malloc(d->ops[i].n_params * sizeof(double));
    f->lp.g[i] = calloc(d->ops[i].n_params, sizeof(double));
    for (size_t j = 0; j < d->ops[i].n_params; j++) f->lp.w[i][j] = 0.3 * rng_normal(&r);
    if (d->ops[i].kind == OP_LAYERNORM || d->ops[i].kind == OP_RMSNORM)
      for (int c = 0; c < cfg->n_embd; c++) f->lp.w[i][c] += 1.0;
  }
  f->lp.d = d;
  f->lp.slices = f->slices;
  f->h = (GptParamHooks){&f->lp, lp_weight, lp_release, lp_grad, lp_release_grad};
  f->a = (GptActs){.B = B, .T = T, .precision = PRECISION_FP64, .recompute = f->recompute};
  f->a.op_acts = calloc((size_t)d->nops, sizeof(void*));
  size_t own[256], off[256], shared = 0;
  gpt_acts_layout(d, B, T, PRECISION_FP64, f->recompute, own, off, &shared);
  f->shared = shared ? calloc(1, shared) : NULL;
  for (int i = 0; i < d->nops; i++)
    f->a.op_acts[i] = off[i] != (size_t)-1 ? (char*)f->shared + off[i] : calloc(1, own[i]);
  /* Chunks of 5 rows: several per batch, the last one short. */
  f->a.head_rows = 5;
  f->a.scratch = calloc(1, gpt_scratch_bytes(d, B, T, PRECISION_FP64, kernels_threads(), 5));
  int* tok = gpt_acts_tokens(d, &f->a);
  int* tg = gpt_acts_targets(d, &f->a);
  int n = 0;
  for (int i = 0; i < B * T; i++) {
    tok[i] = (int)rng_below(&r, (uint64_t)cfg->vocab_size);
    tg[i] = i % 5 == 3 ? -1 : (int)rng_below(&r, (uint64_t)cfg->vocab_size);
    n += tg[i] >= 0;
  }
  f->scale = 1.0 / n;
}

/* Builds the fixture without recomputation. */
static void fixture_init(Fixture* f, const GptConfig* cfg, int B, int T, int ksplit) {
  fixture_init_rc(f, cfg, B, T, ksplit, 0);
}

static void fixture_free(Fixture* f) {
  size_t off[256];
  gpt_acts_layout(&f->d, f->a.B, f->a.T, PRECISION_FP64, f->recompute, NULL, off, NULL);
  for (int i = 0; i < f->d.nops; i++) {
    free(f->lp.w[i]);
    free(f->lp.g[i]);
    if (off[i] == (size_t)-1) free(f->a.op_acts[i]);
  }
  free(f->lp.w); free(f->lp.g); free(f->a.op_acts); free(f->a.scratch); free(f->slices);
  free(f->recompute); free(f->shared);
  gpt_desc_free(&f->d);
}

/* The scaled loss of the current weights (an evaluation's forward: no gradient is touched). */
static double fixture_loss(Fixture* f) {
  return f->scale * gpt_forward(&f->d, &f->a, &f->h, f->slices, GPT_EVAL, f->scale, NULL);
}

/* Analytic gradients of the current weights into lp.g (zeroed first, or in fresh mode filled
** with NaN, which the step must overwrite). */
static double fixture_grads(Fixture* f) {
  for (int i = 0; i < f->d.nops; i++)
    for (size_t j = 0; f->lp.g[i] && j < f->d.ops[i].n_params; j++)
      f->lp.g[i][j] = f->lp.fresh_mode ? NAN : 0.0;
  memset(f->lp.used, 0, sizeof f->lp.used);
  double loss = f->scale * gpt_forward(&f->d, &f->a, &f->h, f->slices, GPT_TRAIN, f->scale, NULL);
  gpt_backward(&f->d, &f->a, &f->h, f->slices);
  return loss;
}

/* Checks sampled entries of every op's gradient against central differences. */
static void check_model_gradients(const GptConfig* cfg, int B, int T, int k) {
  Fixture f;
  fixture_init(&f, cfg, B, T, k);
  fixture_grads(&f);
  Rng r;
  rng_seed(&r, 7);
  double worst = 0;
  for (int i = 0; i < f.d.nops; i++) {
    size_t n = f.d.ops[i].n_params;
    if (!n) continue;
    int nonzero = 0;
    for (int s = 0; s < 24; s++) {
      /* Sample rows part and tail part; for wte, prefer entries of tokens in use. */
      size_t j = rng_below(&r, n);
      if (f.d.ops[i].kind == OP_EMBED && s % 2 == 0 && f.d.ops[i].rows) {
        int tok = gpt_acts_tokens(&f.d, &f.a)[rng_below(&r, (uint64_t)(B * T))];
        j = rng_below(&r, f.d.ops[i].rows) * f.d.ops[i].width + (size_t)tok;
      }
      double w0 = f.lp.w[i][j], eps = 1e-6;
      f.lp.w[i][j] = w0 + eps;
      double lp = fixture_loss(&f);
      f.lp.w[i][j] = w0 - eps;
      double lm = fixture_loss(&f);
      f.lp.w[i][j] = w0;
      double fd = (lp - lm) / (2 * eps), an = f.lp.g[i][j];
      /* Central differences at eps 1e-6 carry about 1e-10 of rounding noise. */
      double err = fabs(fd - an) / (fabs(fd) + fabs(an) + 1e-4);
      if (fabs(an) > 1e-9) nonzero++;
      if (err > worst) worst = err;
      CHECK_MSG(err < 1e-5, "op %s entry %zu: analytic %.10g vs fd %.10g (k=%d)", f.d.ops[i].name, j,
                an, fd, k);
    }
    CHECK_MSG(nonzero > 0, "op %s: every sampled gradient is zero", f.d.ops[i].name);
  }
  printf("model gradcheck L=%d C=%d NH=%d V=%d B=%d T=%d k=%d: worst relative error %.2e\n",
         cfg->n_layer, cfg->n_embd, cfg->n_head, cfg->vocab_size, B, T, k, worst);
  fixture_free(&f);
}

/* gpt_param_schedule lists exactly the uses the step makes, in order (layers recomputing as
** recompute_mask says). */
static void check_schedule(const GptConfig* cfg, int k, unsigned recompute_mask) {
  Fixture f;
  fixture_init_rc(&f, cfg, 1, 5, k, recompute_mask);
  f.lp.nrec = 0;
  fixture_grads(&f);
  int n = gpt_param_schedule(&f.d, f.slices, f.recompute, NULL);
  GptParamUse* want = calloc((size_t)n, sizeof *want);
  gpt_param_schedule(&f.d, f.slices, f.recompute, want);
  CHECK_MSG(n == f.lp.nrec, "schedule has %d uses, the step made %d", n, f.lp.nrec);
  int same = n == f.lp.nrec, recomputed = 0;
  for (int i = 0; same && i < n; i++) {
    same = memcmp(&want[i], &f.lp.rec[i], sizeof want[i]) == 0;
    recomputed += want[i].phase == GPT_RECOMPUTE;
  }
  CHECK_MSG(same, "schedule order differs from the step's (k=%d, recompute %#x)", k, recompute_mask);
  CHECK_MSG((recomputed > 0) == (recompute_mask != 0), "schedule has %d recompute uses for mask %#x",
            recomputed, recompute_mask);
  free(want);
  fixture_free(&f);
}

/* Recomputing layers (any subset) gives bit-identical losses and gradients, and, with at least
** two layers recomputed (one layer's worth is the shared buffer), needs fewer activation bytes. */
static void check_recompute_equivalence(const GptConfig* cfg, int B, int T, int k, unsigned mask) {
  Fixture a, b;
  fixture_init(&a, cfg, B, T, k);
  fixture_init_rc(&b, cfg, B, T, k, mask);
  double la = fixture_grads(&a), lb = fixture_grads(&b);
  CHECK_MSG(la == lb, "recompute %#x changes the loss: %.17g vs %.17g", mask, lb, la);
  size_t differ = 0;
  for (int i = 0; i < a.d.nops; i++)
    for (size_t j = 0; j < a.d.ops[i].n_params; j++) differ += a.lp.g[i][j] != b.lp.g[i][j];
  CHECK_MSG(differ == 0, "recompute %#x changes %zu gradient entries", mask, differ);
  size_t full = gpt_acts_layout(&a.d, B, T, PRECISION_FP64, NULL, NULL, NULL, NULL);
  size_t less = gpt_acts_layout(&b.d, B, T, PRECISION_FP64, b.recompute, NULL, NULL, NULL);
  CHECK_MSG(less < full, "recompute %#x keeps %zu activation bytes, none %zu", mask, less, full);
  fixture_free(&a);
  fixture_free(&b);
}

/* Fresh gradient buffers (NaN garbage, the first use of each slice overwrites, as the engine's
** dp gradients) give exactly the gradients of zeroed buffers, split into k slices, with
** recomputed layers and with T < max_seq (the wpe rows past T must come out 0). */
static void check_fresh_equivalence(const GptConfig* cfg, int B, int T, int k, unsigned mask) {
  Fixture a, b;
  fixture_init_rc(&a, cfg, B, T, k, mask);
  fixture_init_rc(&b, cfg, B, T, k, mask);
  b.lp.fresh_mode = 1;
  double la = fixture_grads(&a), lb = fixture_grads(&b);
  CHECK(la == lb);
  size_t differ = 0;
  for (int i = 0; i < a.d.nops; i++)
    for (size_t j = 0; j < a.d.ops[i].n_params; j++) differ += !(a.lp.g[i][j] == b.lp.g[i][j]);
  CHECK_MSG(differ == 0, "fresh gradients (k=%d, recompute %#x) differ in %zu entries", k, mask,
            differ);
  fixture_free(&a);
  fixture_free(&b);
}

/* The fused head's chunks: one chunk of all B*T rows (the logits whole, as an unfused head
** computes them) and chunks of 5 and of 1 row give the same loss and gradients up to the order
** of float summation, and an evaluation's forward touches no gradient. */
static void check_head_chunks(const GptConfig* cfg, int B, int T, int k) {
  Fixture f[3];
  int rows[3] = {B * T, 5, 1};
  double loss[3];
  for (int c = 0; c < 3; c++) {
    fixture_init(&f[c], cfg, B, T, k);
    f[c].a.head_rows = rows[c];
    free(f[c].a.scratch);
    f[c].a.scratch = calloc(1, gpt_scratch_bytes(&f[c].d, B, T, PRECISION_FP64, kernels_threads(),
                                                 rows[c]));
    loss[c] = fixture_grads(&f[c]);
  }
  for (int c = 1; c < 3; c++) {
    CHECK_NEAR(loss[c], loss[0], 1e-13 * fabs(loss[0]));
    double worst = 0, scale = 0;
    for (int i = 0; i < f[0].d.nops; i++)
      for (size_t j = 0; j < f[0].d.ops[i].n_params; j++) {
        worst = fmax(worst, fabs(f[c].lp.g[i][j] - f[0].lp.g[i][j]));
        scale = fmax(scale, fabs(f[0].lp.g[i][j]));
      }
    CHECK_MSG(scale > 0 && worst <= 1e-13 * scale, "%s: chunks of %d rows change gradients by %.3g "
              "(largest %.3g)", cfg->name, rows[c], worst, scale);
  }
  /* An evaluation: the same loss, no gradient acquired. */
  f[1].lp.nrec = 0;
  double eval = fixture_loss(&f[1]);
  int grads = 0;
  for (int i = 0; i < f[1].lp.nrec; i++) grads += f[1].lp.rec[i].grad;
  CHECK_MSG(grads == 0 && eval == loss[1], "%s: evaluation acquired %d gradients, loss %.17g vs %.17g",
            cfg->name, grads, eval, loss[1]);
  for (int c = 0; c < 3; c++) fixture_free(&f[c]);
}

/* Splitting into k slices gives the same loss and gradients as unsplit (up to rounding). */
static void check_split_equivalence(const GptConfig* cfg, int B, int T) {
  Fixture a, b;
  fixture_init(&a, cfg, B, T, 1);
  fixture_init(&b, cfg, B, T, 3);
  double la = fixture_grads(&a), lb = fixture_grads(&b);
  CHECK_NEAR(la, lb, 1e-12 * fabs(la));
  double worst = 0;
  for (int i = 0; i < a.d.nops; i++)
    for (size_t j = 0; j < a.d.ops[i].n_params; j++)
      worst = fmax(worst, fabs(a.lp.g[i][j] - b.lp.g[i][j]));
  CHECK_MSG(worst < 1e-12, "split changes gradients by %.3g", worst);
  fixture_free(&a);
  fixture_free(&b);
}

/* The engine's measured arena peak equals the prediction for a plan, after a real step. */
static void check_memory(const char* model, int B, int T, Strategy s, int k, int threads,
                         int recompute) {
  GptConfig cfg;
  GptDesc d;
  CHECK(gpt_config_load(model, &cfg) == 0);
  gpt_desc_build(&d, &cfg);
  Plan p;
  plan_uniform(&p, &d, s, 1, B, T);
  for (int i = 0; i < d.nops; i++)
    if (d.ops[i].splittable) {
      p.ops[i].k = k;
      for (int j = 0; j < k; j++) p.ops[i].strat[j] = (Strategy)((s + j) % STRAT_COUNT);
    }
  plan_set_recompute(&p, recompute);
  p.head_rows = (B + T) % 2 ? 7 : 0; /* chunks of 7 rows, or the default (one chunk here) */
  TrainOptions o;
  train_options_default(&o);
  o.threads = threads;
  Engine e;
  CHECK(engine_create(&e, &d, &p, &o) == 0);
  Rng r;
  rng_seed(&r, 1);
  int* batch = malloc((size_t)B * T * 2 * sizeof *batch);
  CHECK(batch != NULL);
  for (int i = 0; i < B * T; i++) {
    batch[i] = (int)rng_below(&r, (uint64_t)cfg.vocab_size);
    batch[B * T + i] = (int)rng_below(&r, (uint64_t)cfg.vocab_size);
  }
  engine_set_batch(&e, batch, batch + B * T);
  free(batch);
  StepResult sr;
  engine_step(&e, (long)B * T, NULL, NULL, &sr);
  CHECK(isfinite(sr.loss));
  size_t at_peak[MEM_CATEGORY_COUNT];
  size_t peak = engine_peak_bytes(&e, at_peak);
  CHECK_MSG(peak == e.predicted.peak,
            "%s B=%d T=%d %s k=%d recompute %d: arena peak %zu != predicted %zu", model, B, T,
            strategy_name(s), k, recompute, peak, e.predicted.peak);
  size_t want[MEM_CATEGORY_COUNT] = {e.predicted.params, e.predicted.grads, e.predicted.optim,
                                     e.predicted.acts, e.predicted.scratch, e.predicted.transient};
  for (int c = 0; c < MEM_CATEGORY_COUNT; c++)
    CHECK_MSG(at_peak[c] == want[c], "%s: category %s at peak %zu != predicted %zu", model,
              mem_category_name(c), at_peak[c], want[c]);
  engine_destroy(&e);
  plan_free(&p);
  gpt_desc_free(&d);
}

/* The memory of bf16 storage, from the plan alone (no GPU needed): for each strategy on 4 ranks,
** the persistent bytes are the fp32 master weights, gradients and moments of what a rank holds
** plus the bf16 compute copy (2 bytes) of the n weights (dp, zero2) or of the shard (zero3), whose
** count is even (zero3 pads to 2G); the activations are gpt_acts_layout's in bf16, less than
** fp32's; a zero3 plan's transient is less than fp32's (its gathered weights are bf16), and the
** plan's JSON names the precision (plan_tool's roundtrip reads it back). The engine's own bytes are checked against this on the
** emulated GPU (tests/gpu_emu_train.sh). */
static void check_bf16_memory(void) {
  GptConfig cfg;
  GptDesc d;
  CHECK(gpt_config_load("tiny", &cfg) == 0);
  gpt_desc_build(&d, &cfg);
  for (int s = 0; s < STRAT_COUNT; s++) {
    Plan p32, p16;
    plan_uniform(&p32, &d, (Strategy)s, 4, 2, 64);
    plan_uniform(&p16, &d, (Strategy)s, 4, 2, 64);
    p16.precision = PRECISION_BF16;
    MemPrediction m32, m16;
    plan_predict_memory(&d, &p32, 1, &m32);
    plan_predict_memory(&d, &p16, 1, &m16);
    size_t params = 0, grads = 0;
    for (int i = 0; i < d.nops; i++) {
      if (!d.ops[i].n_params) continue;
      size_t n = d.ops[i].n_params, sh = slice_shard(n, (Strategy)s, 4, PRECISION_BF16);
      size_t held = s == STRAT_ZERO3 ? sh : slice_padded(n, (Strategy)s, 4, PRECISION_BF16);
      if (s == STRAT_ZERO3)
        CHECK_MSG(sh % 2 == 0, "%s: zero3 bf16 shard %zu is odd", d.ops[i].name, sh);
      params += 4 * held + 2 * (s == STRAT_ZERO3 ? sh : n);
      grads += 4 * sh;
    }
    CHECK_MSG(m16.params == params && m16.grads == grads && m16.optim == 2 * grads,
              "%s bf16: params %zu grads %zu optim %zu, want %zu %zu %zu", strategy_name(s),
              m16.params, m16.grads, m16.optim, params, grads, 2 * grads);
    CHECK(m16.acts == gpt_acts_layout(&d, 2, 64, PRECISION_BF16, NULL, NULL, NULL, NULL));
    CHECK(m16.acts < m32.acts && m16.scratch < m32.scratch && m16.peak < m32.peak);
    if (s == STRAT_ZERO3) CHECK(m16.transient < m32.transient);
    char* json = plan_to_json(&p16, &d);
    CHECK(json && strstr(json, "\"precision\":") && strstr(json, "\"bf16\""));
    free(json);
    plan_free(&p32);
    plan_free(&p16);
  }
  gpt_desc_free(&d);
}

/* Predicted memory behaves as the strategies promise: zero3 on N ranks needs less than dp, and
** splitting a zero3 model into k slices shrinks its transient peak to the largest slice (or to
** the slices the fused head holds at once, when those are more). */
static void check_prediction_order(void) {
  GptConfig cfg;
  GptDesc d;
  gpt_config_load("small", &cfg);
  gpt_desc_build(&d, &cfg);
  Plan dp, z3, z3k;
  plan_uniform(&dp, &d, STRAT_DP, 4, 2, 64);
  plan_uniform(&z3, &d, STRAT_ZERO3, 4, 2, 64);
  plan_uniform(&z3k, &d, STRAT_ZERO3, 4, 2, 64);
  size_t largest = 0, held = 0; /* the largest slice; the slices the fused head holds at once */
  for (int i = 0; i < d.nops; i++)
    if (d.ops[i].splittable) {
      z3k.ops[i].k = 4;
      for (int j = 0; j < 4; j++) {
        z3k.ops[i].strat[j] = STRAT_ZERO3;
        size_t n = slice_padded(gpt_slice_params(&d.ops[i], 4, j), STRAT_ZERO3, 4,
                                PRECISION_FP32);
        if (gpt_op_held(&d, i)) held += n;
        else if (n > largest) largest = n;
      }
    }
  if (held > largest) largest = held;
  MemPrediction a, b, c;
  plan_predict_memory(&d, &dp, 1, &a);
  plan_predict_memory(&d, &z3, 1, &b);
  plan_predict_memory(&d, &z3k, 1, &c);
  CHECK_MSG(b.peak < a.peak, "zero3 %zu should need less than dp %zu", b.peak, a.peak);
  CHECK_MSG(c.transient <= b.transient, "split transient %zu vs unsplit %zu", c.transient, b.transient);
  CHECK_MSG(c.transient == 2 * sizeof(float) * largest, "split transient %zu, expected weight + "
            "gradient of the largest slice or of the head's held slices %zu", c.transient,
            2 * sizeof(float) * largest);
  CHECK(b.params * 4 >= a.params && b.params * 4 < a.params + 4 * 4 * (size_t)d.nops * 4);
  plan_free(&dp); plan_free(&z3); plan_free(&z3k);
  gpt_desc_free(&d);
}

/* The spec's tensors partition every op's block: contiguous in block order from 0 to n_params,
** the split part exactly the rows x width tensor, tail tensors after it; every slice's view
** points inside the slice's range; every tensor has a unique file name; the activation tensors
** sum to the op's block. Checked for every preset and an odd config. */
static void check_spec(const GptConfig* cfg) {
  GptDesc d;
  CHECK(gpt_desc_build(&d, cfg) == 0);
  CHECK(d.ops_per_layer > 0 && gpt_layer_op(&d, cfg->n_layer - 1, d.ops_per_layer - 1) < d.nops);
  CHECK(d.ops[d.tokens_op].nacts >= 3 && d.ops[d.head_op].owner >= 0);
  for (int i = 0; i < d.nops; i++) {
    const GptOp* op = &d.ops[i];
    size_t at = 0;
    for (int j = 0; j < op->ntensors; j++) {
      const ParamTensor* t = &op->tensor[j];
      CHECK_MSG(t->off == at && t->n == t->rows * t->cols, "%s.%s", op->name, t->name);
      CHECK_MSG(t->split == (t->off < op->rows * op->width), "%s.%s", op->name, t->name);
      if (t->split) CHECK_MSG(t->rows == op->rows && t->cols == op->width, "%s.%s", op->name, t->name);
      CHECK_MSG(model_tensor(op, t->name) == t, "%s.%s", op->name, t->name);
      for (int m = 0; m < i; m++)
        for (int q = 0; q < d.ops[m].ntensors; q++)
          CHECK_MSG(strcmp(d.ops[m].tensor[q].hf_name, t->hf_name) != 0, "%s twice", t->hf_name);
      at += t->n;
    }
    CHECK_MSG(at == op->n_params, "%s: tensors %zu of %zu", op->name, at, op->n_params);
    /* fp32: the tensors back to back; bf16: values 2 bytes, statistics and ints 4, each tensor
    ** at a multiple of its element size */
    size_t acts = 0, acts16 = 0;
    for (int j = 0; j < op->nacts; j++) {
      const ActTensor* a = &op->act[j];
      size_t e16 = a->kind == ACT_VALUE ? 2 : 4;
      CHECK_MSG(model_act_offset(op, a->name, 2, 3, PRECISION_FP32) == acts, "%s.%s", op->name,
                a->name);
      acts += a->per_token * 6 * (a->kind == ACT_INT ? sizeof(int) : sizeof(float));
      acts16 = (acts16 + e16 - 1) / e16 * e16;
      CHECK_MSG(model_act_offset(op, a->name, 2, 3, PRECISION_BF16) == acts16, "%s.%s bf16",
                op->name, a->name);
      acts16 += a->per_token * 6 * e16;
    }
    CHECK_MSG(acts == gpt_op_act_bytes(&d, op, 2, 3, PRECISION_FP32), "%s", op->name);
    CHECK_MSG(acts16 == gpt_op_act_bytes(&d, op, 2, 3, PRECISION_BF16), "%s bf16", op->name);
    for (int k = 1; op->n_params && k <= (op->splittable ? 3 : 1); k++)
      for (int s = 0; s < k; s++) {
        /* A made-up address for the block (never dereferenced): element e is at 4096 + 4e. */
        uintptr_t block = 4096, first = block + 4 * gpt_slice_offset(op, k, s);
        ParamView v = model_param_view(op, k, s, (void*)first, sizeof(float));
        for (int j = 0; j < op->ntensors; j++) {
          const ParamTensor* t = &op->tensor[j];
          if (!v.t[j]) { CHECK(!t->split && s < k - 1); continue; }
          size_t e = ((uintptr_t)v.t[j] - block) / 4;
          size_t len = t->split ? v.nrows * t->cols : t->n;
          CHECK_MSG(e >= gpt_slice_offset(op, k, s) &&
                    e + len <= gpt_slice_offset(op, k, s) + gpt_slice_params(op, k, s),
                    "%s.%s slice %d of %d", op->name, t->name, s, k);
        }
      }
  }
  gpt_desc_free(&d);
}

/* ---- 6. The step walk ------------------------------------------------------------------------ */

/* The actions of one walk, in order. */
enum { WALK_LOG_MAX = 16384 };
typedef struct WalkEntry { int action, owner, slice, arg; } WalkEntry;
typedef struct WalkLog { int n; WalkEntry e[WALK_LOG_MAX]; } WalkLog;

/* Records an action of the walk. */
static void log_action(void* ctx, WalkAction a, const GptParamUse* u, int arg) {
  WalkLog* l = ctx;
  if (l->n < WALK_LOG_MAX) l->e[l->n++] = (WalkEntry){a, u ? u->owner : -1, u ? u->slice : -1, arg};
}

/* A random plan on 4 ranks: random slice counts, strategies and shard groups (1, 2 or 4),
** prefetch, overlap_reduce and recomputed layers. */
static void random_walk_plan(Plan* p, const GptDesc* d, Rng* g) {
  CHECK(plan_uniform(p, d, STRAT_DP, 4, 2, 5) == 0);
  for (int i = 0; i < d->nops; i++) {
    if (!d->ops[i].n_params) continue;
    p->ops[i].k = d->ops[i].splittable ? 1 + (int)rng_below(g, 4) : 1;
    for (int s = 0; s < p->ops[i].k; s++) p->ops[i].strat[s] = (Strategy)rng_below(g, STRAT_COUNT);
    p->ops[i].group = (int[]){0, 1, 2}[rng_below(g, 3)];
  }
  p->prefetch = (int)rng_below(g, 2);
  p->overlap_reduce = (int)rng_below(g, 2);
  for (int l = 0; l < p->nlayers; l++) p->recompute[l] = (int)rng_below(g, 2);
}

/* Walks plan p with w as the engine's hooks do, one call per hook over the schedule (only the
** forward's uses when forward_only, as an evaluation); checks that each begin is accepted and
** that walk_grad_begin says "first" at each slice's first gradient use. */
static void walk_as_engine(const GptDesc* d, const Plan* p, StepWalk* w, int forward_only) {
  int* slices = malloc((size_t)d->nops * sizeof *slices);
  int* seen = calloc((size_t)d->nops * GPT_MAX_SLICES, sizeof *seen);
  plan_slice_counts(p, slices);
  int n = 0;
  GptParamUse* u = gpt_param_schedule_alloc(d, slices, p->recompute, &n);
  CHECK(u && seen);
  for (int i = 0; u && seen && i < n && !(forward_only && u[i].phase != GPT_FORWARD); i++) {
    int last = i; /* a run of held uses: all begun, then all ended */
    while (last + 1 < n && u[last].held) last++;
    for (int j = i; j <= last; j++) {
      if (u[j].weight) CHECK(walk_weight_begin(w, u[j].owner, u[j].slice, u[j].phase) == 0);
      if (u[j].grad && !forward_only) {
        int first = seen[u[j].owner * GPT_MAX_SLICES + u[j].slice]++ == 0;
        CHECK(walk_grad_begin(w, u[j].owner, u[j].slice) == first);
      }
    }
    for (int j = i; j <= last; j++) {
      if (u[j].weight) CHECK(walk_weight_end(w, u[j].owner, u[j].slice) == 0);
      if (u[j].grad && !forward_only) CHECK(walk_grad_end(w, u[j].owner, u[j].slice) == 0);
    }
    i = last;
  }
  if (!forward_only) walk_backward_end(w);
  free(u);
  free(seen);
  free(slices);
}

/* Checks the actions of one step walk of plan p (see check 6). */
static void check_walk_log(const GptDesc* d, const Plan* p, const StepWalk* w, const WalkLog* l) {
  int weights = 0, grads = 0, max_weights = 0, max_grads = 0, prefetches = 0, taken = 0, started = 0;
  int* bucket_starts = calloc((size_t)walk_bucket_count(w) + 1, sizeof(int));
  int* across = calloc((size_t)d->nops * GPT_MAX_SLICES, sizeof(int));
  for (int j = 0; j < l->n; j++) {
    const WalkEntry* x = &l->e[j];
    weights += (x->action == WALK_GATHER || x->action == WALK_PREFETCH) - (x->action == WALK_FREE_WEIGHT);
    grads += (x->action == WALK_ALLOC_GRAD) - (x->action == WALK_REDUCE || x->action == WALK_REDUCE_WAIT);
    max_weights = weights > max_weights ? weights : max_weights;
    max_grads = grads > max_grads ? grads : max_grads;
    prefetches += x->action == WALK_PREFETCH;
    taken += x->action == WALK_TAKE_PREFETCH;
    started += x->action == WALK_REDUCE_START;
    started -= x->action == WALK_REDUCE_WAIT;
    CHECK(x->action != WALK_PREFETCH || p->prefetch);
    CHECK(x->action != (p->overlap_reduce ? WALK_REDUCE : WALK_REDUCE_START));
    if (x->action == WALK_BUCKET_START) bucket_starts[x->arg]++;
    if (x->action == WALK_ACROSS_START) across[x->owner * GPT_MAX_SLICES + x->slice]++;
    CHECK((x->action == WALK_WAIT_ALL) == (j == l->n - 1));
  }
  CHECK_MSG(weights == 0 && grads == 0 && started == 0 && prefetches == taken,
            "buffers left: %d weights, %d gradients, %d reduce-scatters; %d of %d prefetches taken",
            weights, grads, started, taken, prefetches);
  /* One use at a time, and a prefetch or a reduce-scatter in flight beside it; the fused head
  ** holds all of its owner's slices. */
  int held_k = p->ops[d->ops[d->head_op].owner].k;
  CHECK_MSG(max_weights <= 1 + held_k && max_grads <= 1 + held_k, "%d weights, %d gradients live",
            max_weights, max_grads);
  for (int b = 0; b < walk_bucket_count(w); b++) CHECK_MSG(bucket_starts[b] == 1, "bucket %d started %d times", b, bucket_starts[b]);
  for (int op = 0; op < d->nops; op++)
    for (int s = 0; d->ops[op].n_params && s < p->ops[op].k; s++) {
      int hybrid = p->ops[op].strat[s] != STRAT_DP && p->world / plan_op_group(p, op) > 1;
      CHECK_MSG(across[op * GPT_MAX_SLICES + s] == (hybrid && walk_grad_uses(w, op, s) > 0),
                "op %d slice %d: %d across-group all-reduces", op, s, across[op * GPT_MAX_SLICES + s]);
    }
  free(bucket_starts);
  free(across);
}

/* Check 6 on `trials` random plans of model cfg. */
static void check_step_walk(const GptConfig* cfg, int trials) {
  GptDesc d;
  CHECK(gpt_desc_build(&d, cfg) == 0);
  Rng g;
  rng_seed(&g, 17);
  WalkLog* a = malloc(sizeof *a);
  WalkLog* b = malloc(sizeof *b);
  for (int t = 0; t < trials; t++) {
    Plan p;
    random_walk_plan(&p, &d, &g);
    size_t bucket_bytes = rng_below(&g, 2) ? PLAN_BUCKET_BYTES : 512;
    a->n = b->n = 0;
    StepWalk* w = walk_create(&d, &p, bucket_bytes, log_action, a);
    StepWalk* we = walk_create(&d, &p, bucket_bytes, log_action, b);
    CHECK(w && we);
    if (!w || !we) { walk_destroy(w); walk_destroy(we); plan_free(&p); break; }
    for (int i; (i = walk_use_begin(w)) >= 0;) { /* as the replays: a held run begun, then ended */
      int run = 1;
      while (walk_use(w, i)->held && (i = walk_use_begin(w)) >= 0) run++;
      while (run--) walk_use_end(w);
    }
    walk_backward_end(w);
    walk_as_engine(&d, &p, we, 0);
    CHECK(a->n < WALK_LOG_MAX);
    CHECK_MSG(a->n == b->n && memcmp(a->e, b->e, (size_t)a->n * sizeof a->e[0]) == 0,
              "plan %d: the engine's calls and the replays' loop differ", t);
    check_walk_log(&d, &p, w, a);
    /* Out of schedule: refused. An evaluation (a forward alone, then a reset): nothing left. */
    walk_reset(we);
    CHECK(walk_weight_begin(we, d.nops, 0, GPT_FORWARD) == -1);
    CHECK(walk_grad_begin(we, 0, 0) == -1);
    b->n = 0;
    walk_as_engine(&d, &p, we, 1);
    walk_reset(we);
    int live = 0, prefetched = 0;
    for (int j = 0; j < b->n; j++) {
      live += (b->e[j].action == WALK_GATHER || b->e[j].action == WALK_PREFETCH) -
              (b->e[j].action == WALK_FREE_WEIGHT);
      prefetched += (b->e[j].action == WALK_PREFETCH) - (b->e[j].action == WALK_TAKE_PREFETCH);
    }
    CHECK_MSG(live == 0 && prefetched == 0, "plan %d: after a forward and a reset, %d weights "
              "live, %d prefetches not taken", t, live, prefetched);
    walk_destroy(we);
    walk_destroy(w);
    plan_free(&p);
  }
  free(a);
  free(b);
  gpt_desc_free(&d);
}

/* The Llama family: odd shapes with grouped-query attention (n_head * head_dim != n_embd),
** untied with Llama 3's RoPE scaling (its original context short enough that the scaling bends
** frequencies at these positions), and tied with QKV biases and a single K/V head (Qwen2). */
static void check_llama(void) {
  GptConfig ll = {.name = "llama-odd", .family = "llama", .n_layer = 2, .n_embd = 18, .n_head = 4,
                  .n_kv_head = 2, .head_dim = 6, .ffn_dim = 22, .vocab_size = 37,
                  .padded_vocab = 128, .max_seq = 16, .norm_eps = 1e-5, .rope_theta = 10000,
                  .rope_factor = 8, .rope_low_freq_factor = 1, .rope_high_freq_factor = 4,
                  .rope_original_max = 4};
  GptConfig qw = {.name = "qwen-odd", .family = "llama", .n_layer = 3, .n_embd = 20, .n_head = 3,
                  .n_kv_head = 1, .head_dim = 4, .ffn_dim = 14, .vocab_size = 129,
                  .padded_vocab = 256, .max_seq = 9, .norm_eps = 1e-6, .rope_theta = 1e6,
                  .tied_head = 1, .qkv_bias = 1};
  check_spec(&ll);
  check_spec(&qw);
  const char* presets[] = {"llama-tiny", "qwen-tiny", "smollm2-135m", "tinyllama-1.1b",
                           "llama3.2-1b", "llama3-8b", "qwen2.5-0.5b"};
  for (int i = 0; i < 7; i++) {
    GptConfig c;
    CHECK(gpt_config_load(presets[i], &c) == 0);
    check_spec(&c);
  }
  check_model_gradients(&ll, 2, 7, 1);
  check_model_gradients(&ll, 2, 7, 3);
  check_model_gradients(&qw, 3, 9, 2);
  check_split_equivalence(&ll, 2, 7);
  check_split_equivalence(&qw, 2, 9);
  check_head_chunks(&ll, 2, 7, 3);
  check_head_chunks(&qw, 3, 9, 2);
  check_fresh_equivalence(&ll, 2, 7, 3, 1);
  check_fresh_equivalence(&qw, 3, 9, 2, 5);
  check_schedule(&ll, 2, 1);
  check_schedule(&qw, 3, 5);
  check_recompute_equivalence(&ll, 2, 7, 1, 3);
  check_recompute_equivalence(&qw, 3, 9, 2, 6);
  check_memory("llama-tiny", 3, 17, STRAT_ZERO3, 2, 1, 1);
  check_memory("qwen-tiny", 2, 33, STRAT_ZERO2, 1, 2, 0);
  check_memory("llama-tiny", 2, 20, STRAT_DP, 1, 2, 0);
  check_step_walk(&ll, 100);
  check_step_walk(&qw, 100);
}

int main(int argc, char** argv) {
  comm_init(&argc, &argv);
  kernels_set_threads(1);
  GptConfig odd = {.name = "odd", .n_layer = 2, .n_embd = 18, .n_head = 3, .vocab_size = 37,
                   .padded_vocab = 128, .max_seq = 16};
  check_spec(&odd);
  const char* presets[] = {"tiny", "small", "gpt2-124m", "gpt2-1.5b"};
  for (int i = 0; i < 4; i++) {
    GptConfig c;
    CHECK(gpt_config_load(presets[i], &c) == 0);
    check_spec(&c);
  }
  check_model_gradients(&odd, 2, 7, 1);
  check_model_gradients(&odd, 2, 7, 3);
  GptConfig odd2 = {.name = "odd2", .n_layer = 3, .n_embd = 20, .n_head = 5, .vocab_size = 129,
                    .padded_vocab = 256, .max_seq = 9};
  check_model_gradients(&odd2, 3, 9, 2);
  check_split_equivalence(&odd, 2, 7);
  check_head_chunks(&odd, 2, 7, 1);
  check_head_chunks(&odd, 3, 5, 3);
  check_fresh_equivalence(&odd, 2, 7, 1, 0);
  check_fresh_equivalence(&odd, 2, 7, 3, 1);
  check_fresh_equivalence(&odd2, 3, 9, 2, 5);
  check_schedule(&odd, 1, 0);
  check_schedule(&odd, 3, 0);
  check_schedule(&odd, 2, 1);
  check_schedule(&odd2, 3, 5);
  check_recompute_equivalence(&odd, 2, 7, 1, 3);
  check_recompute_equivalence(&odd2, 3, 9, 2, 6);
  check_prediction_order();
  check_bf16_memory();
  check_memory("tiny", 4, 32, STRAT_DP, 1, 1, 0);
  check_memory("tiny", 3, 17, STRAT_ZERO2, 2, 1, 0);
  check_memory("tiny", 2, 64, STRAT_ZERO3, 4, 2, 0);
  check_memory("small", 1, 40, STRAT_ZERO3, 3, 1, 0);
  check_memory("small", 2, 33, STRAT_DP, 1, 2, 0);
  check_memory("tiny", 3, 17, STRAT_ZERO3, 2, 1, 1);
  check_memory("small", 2, 33, STRAT_ZERO2, 1, 2, 4);
  check_step_walk(&odd, 300);
  check_step_walk(&odd2, 100);
  check_llama();
  int rc = check_summary();
  comm_finalize();
  return rc;
}
