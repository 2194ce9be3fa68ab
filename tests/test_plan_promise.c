/*
** test_plan_promise.c: the planner's central promise, swept: whatever the model and options,
** every plan the search returns is priced by the search to the byte of plan_predict_memory,
** and no candidate planner_candidates returns is over the memory limit.
**  1. Random models of every family (GPT-2; Llama with a tied or untied head, grouped-query
**     attention, QKV biases, head_dim other than hidden / heads; odd vocabularies, so the LM
**     head's chunking differs), seeded, on random devices (1-8 ranks, one or two hosts, 1-4
**     threads, fp32 or bf16) with random options (slice counts, allowed strategies, recompute
**     bounds, shard groups, reduce dtypes, fixed global batches) at limits from the smallest that
**     fits upwards:
**     planner_search's own peak == plan_predict_memory(its plan) <= the limit; every candidate
**     <= the limit; a limit below the smallest is refused with that number.
**  2. Every preset at its max_seq x {8, 16, 80} GiB x {8, 64} ranks (8 a host) x {fp32, bf16}:
**     micro-batches up to 2: the chosen plan fits, or no plan fits and the error says the
**     smallest limit that does.
**     The first run of the issue that found it: llama3-8b at 8192 on 8 ranks in 80 GiB.
**  3. Global batches the search cannot serve (not a multiple of the ranks; no micro-batch of the
**     allowed range divides G / N): one error each, naming the numbers.
** Usage: test_plan_promise [CASES] (default 300 random models).
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "core/util.h"
#include "model/gpt.h"
#include "model/plan.h"
#include "planner/cost.h"
#include "planner/device.h"
#include "planner/search.h"

/* A random integer in [lo, hi]. */
static int rand_in(Rng* r, int lo, int hi) { return lo + (int)rng_below(r, (uint64_t)(hi - lo + 1)); }

/* A random small model of a random family, its description built into d. */
static void random_model(Rng* r, GptDesc* d, char* what, size_t n) {
  GptConfig c;
  memset(&c, 0, sizeof c);
  int llama = (int)rng_below(r, 3) > 0; /* two Llamas (of many shapes) for every GPT-2 */
  c.n_layer = rand_in(r, 1, 4);
  c.n_head = 1 << rand_in(r, 0, 3);
  c.n_embd = c.n_head * 8 * rand_in(r, 1, 4);
  c.vocab_size = rand_in(r, 50, 3000);
  c.padded_vocab = (c.vocab_size + 127) / 128 * 128;
  c.max_seq = 16 * rand_in(r, 1, 8);
  if (llama) {
    snprintf(c.family, sizeof c.family, "llama");
    c.n_kv_head = c.n_head >> rand_in(r, 0, 2);
    if (c.n_kv_head < 1) c.n_kv_head = 1;
    c.head_dim = rng_below(r, 3) ? c.n_embd / c.n_head : 8 * rand_in(r, 1, 4);
    c.ffn_dim = 8 * rand_in(r, 2, 24);
    c.tied_head = (int)rng_below(r, 2);
    c.qkv_bias = (int)rng_below(r, 2);
    c.norm_eps = 1e-5;
    c.rope_theta = 10000;
  }
  snprintf(c.name, sizeof c.name, "%s-%s", llama ? "llama" : "gpt2", llama && !c.tied_head ? "untied" : "tied");
  snprintf(what, n, "%s L=%d C=%d H=%d KV=%d hd=%d V=%d T=%d bias=%d", c.name, c.n_layer,
           c.n_embd, c.n_head, c.n_kv_head, c.head_dim, c.vocab_size, c.max_seq, c.qkv_bias);
  if (gpt_config_validate(&c) || gpt_desc_build(d, &c)) {
    fprintf(stderr, "%s: %s\n", what, osdp_last_error());
    exit(1);
  }
}

/* A device of N ranks (H a host), links that differ per kind and level, and `limit`. */
static DeviceInfo make_device(int N, int H, int threads, Precision prec, size_t limit) {
  DeviceInfo dev;
  memset(&dev, 0, sizeof dev);
  dev.ranks = N;
  dev.ranks_per_host = H;
  dev.threads = threads;
  dev.precision = prec;
  dev.mem_limit = limit;
  dev.flops = 4e14;
  dev.optimizer_s_per_param = 1e-11;
  for (int k = 0; k < COLL_COUNT; k++) {
    dev.coll[k] = (CollectiveModel){.latency_s = 1e-5 * (k + 1), .bandwidth_Bps = 1.5e11 / (k + 1)};
    dev.inter[k] = (CollectiveModel){.latency_s = 3e-5, .bandwidth_Bps = 1.25e10};
    dev.inter_given[k] = H < N;
  }
  return dev;
}

/* Random search options for a model of L layers at sequence T on N ranks. */
static SearchOptions random_options(Rng* r, int L, int T, int N) {
  SearchOptions o;
  planner_default_options(&o, T);
  o.max_batch = rand_in(r, 1, 12);
  static const int ks[] = {1, 2, 4, 8};
  o.max_slices = ks[rng_below(r, 4)];
  if (rng_below(r, 3) == 0)
    for (int s = 0; s < STRAT_COUNT; s++) o.allow[s] = (int)rng_below(r, 2);
  o.max_recompute = rng_below(r, 3) == 0 ? rand_in(r, 0, L) : -1;
  if (rng_below(r, 4) == 0) {
    int G = rand_in(r, 1, N);
    o.shard_group = N % G == 0 ? G : 0;
  }
  if (rng_below(r, 3) == 0) o.global_batch = (long)N * rand_in(r, 1, 24); /* accumulation */
  static const int rd[] = {REDUCE_FP32, REDUCE_BF16, SEARCH_REDUCE_AUTO};
  o.reduce_dtype = rd[rng_below(r, 3)];
  return o;
}

/* Plans d on dev with o and checks the promise; returns 0 when a plan fits, 1 when none does
** (then the error named the smallest limit, *min_bytes > the limit). */
static int check_plans(const GptDesc* d, const DeviceInfo* dev, const SearchOptions* o,
                       const char* what, size_t* min_bytes) {
  Plan p;
  PlanCost c;
  int rc = planner_search(d, dev, o, &p, &c, min_bytes, NULL);
  if (rc) {
    CHECK_MSG(*min_bytes != (size_t)-1 && strstr(osdp_last_error(), "no plan fits") &&
                  (*min_bytes > dev->mem_limit || strstr(osdp_last_error(), "micro-batch")),
              "%s limit %zu: %s", what, dev->mem_limit, osdp_last_error());
    osdp_clear_error();
    return 1;
  }
  MemPrediction m;
  plan_predict_memory(d, &p, dev->threads, &m);
  CHECK_MSG(planner_last_stats().peak == m.peak && m.peak == c.mem.peak && m.peak <= dev->mem_limit,
            "%s limit %zu: search %zu, prediction %zu", what, dev->mem_limit, planner_last_stats().peak,
            m.peak);
  CHECK(plan_validate(&p, d, dev->ranks) == 0 && p.precision == dev->precision);
  CHECK(!o->global_batch || plan_global_batch(&p) == o->global_batch);
  plan_free(&p);
  Candidate cand[8];
  int n = planner_candidates(d, dev, o, cand, 8, NULL, NULL);
  CHECK_MSG(n >= 1, "%s limit %zu: %s", what, dev->mem_limit, osdp_last_error());
  for (int i = 0; i < n; i++) {
    plan_predict_memory(d, &cand[i].plan, dev->threads, &m);
    CHECK_MSG(m.peak == cand[i].cost.mem.peak && m.peak <= dev->mem_limit, "%s limit %zu: %s %zu",
              what, dev->mem_limit, cand[i].origin, m.peak);
    CHECK(!o->global_batch || plan_global_batch(&cand[i].plan) == o->global_batch);
    plan_free(&cand[i].plan);
  }
  return 0;
}

/* 1. Random models, devices, options and limits. */
static void test_random(int cases) {
  Rng r;
  rng_seed(&r, 20261206);
  int fitted = 0, refused = 0;
  for (int i = 0; i < cases; i++) {
    GptDesc d;
    char what[200];
    random_model(&r, &d, what, sizeof what);
    static const int hosts[][2] = {{1, 1}, {2, 2}, {2, 1}, {3, 3}, {4, 4}, {4, 2}, {6, 3}, {8, 4}};
    int h = (int)rng_below(&r, 8);
    Precision prec = rng_below(&r, 2) ? PRECISION_BF16 : PRECISION_FP32;
    DeviceInfo dev = make_device(hosts[h][0], hosts[h][1], rand_in(&r, 1, 4), prec, (size_t)1 << 40);
    SearchOptions o = random_options(&r, d.cfg.n_layer, d.cfg.max_seq, dev.ranks);
    /* The smallest limit, from a limit nothing meets; then limits from there to a few times it. */
    size_t least = 0;
    dev.mem_limit = 1;
    check_plans(&d, &dev, &o, what, &least);
    for (int j = 0; j < 3; j++) {
      double f = j == 0 ? 1.0 : 1.0 + 2.0 * rng_uniform(&r);
      dev.mem_limit = (size_t)((double)least * f);
      size_t mb;
      if (check_plans(&d, &dev, &o, what, &mb)) refused++;
      else fitted++;
      if (j == 0) CHECK_MSG(mb == least, "%s: the smallest limit %zu, then %zu", what, least, mb);
    }
    dev.mem_limit = least - 1;
    size_t mb;
    CHECK_MSG(check_plans(&d, &dev, &o, what, &mb) == 1, "%s: fits below its smallest limit %zu",
              what, least);
    gpt_desc_free(&d);
  }
  printf("random models: %d, searches that fit %d, refused (micro-batch bounds) %d\n", cases,
         fitted, refused);
  CHECK(fitted > 2 * cases);
}

/* Builds preset `name` into d. */
static void build_preset(const char* name, GptDesc* d) {
  GptConfig cfg;
  CHECK(gpt_config_load(name, &cfg) == 0 && gpt_desc_build(d, &cfg) == 0);
}

/* 2. Every preset at its max_seq on the limits and rank counts people use. */
static void test_presets(void) {
  static const char* names[] = {"tiny", "small", "gpt2-124m", "gpt2-350m", "gpt2-774m",
                                "gpt2-1.5b", "llama-tiny", "qwen-tiny", "llama-small",
                                "smollm2-135m", "tinyllama-1.1b", "llama3.2-1b", "llama3-8b",
                                "qwen2.5-0.5b"};
  static const int gib[] = {8, 16, 80}, ranks[] = {8, 64};
  int fit = 0, none = 0;
  for (size_t m = 0; m < sizeof names / sizeof *names; m++) {
    GptDesc d;
    build_preset(names[m], &d);
    const GptConfig cfg = d.cfg;
    for (int g = 0; g < 3; g++)
      for (int n = 0; n < 2; n++)
        for (int pr = 0; pr < 2; pr++) {
          DeviceInfo dev = make_device(ranks[n], 8, 1, pr ? PRECISION_BF16 : PRECISION_FP32,
                                       (size_t)gib[g] << 30);
          SearchOptions o;
          planner_default_options(&o, cfg.max_seq);
          o.max_batch = 2; /* the promise is the same at any micro-batch; the suite's time is not */
          char what[96];
          snprintf(what, sizeof what, "%s seq %d, %d GiB, %d ranks, %s", names[m], cfg.max_seq,
                   gib[g], ranks[n], pr ? "bf16" : "fp32");
          size_t mb;
          if (check_plans(&d, &dev, &o, what, &mb)) none++;
          else fit++;
        }
    gpt_desc_free(&d);
  }
  printf("presets: %d settings with a plan, %d where none fits (each error names the smallest limit)\n",
         fit, none);
  /* The case: it chose micro-batch 6 at 83.42 GiB under 80 GiB. */
  GptDesc d;
  build_preset("llama3-8b", &d);
  DeviceInfo dev = make_device(8, 8, 1, PRECISION_FP32, (size_t)80 << 30);
  SearchOptions o;
  planner_default_options(&o, 8192);
  size_t mb;
  CHECK(check_plans(&d, &dev, &o, "llama3-8b seq 8192, 8 ranks, 80 GiB", &mb) == 0);
  gpt_desc_free(&d);
}

/* 3. Global batches the search cannot serve: one error each, naming the numbers. */
static void test_global_batch_errors(void) {
  GptDesc d;
  build_preset("tiny", &d);
  DeviceInfo dev = make_device(2, 1, 1, PRECISION_FP32, (size_t)1 << 30);
  SearchOptions o;
  planner_default_options(&o, 16);
  Plan p;
  PlanCost c;
  o.global_batch = 7; /* not a multiple of the 2 ranks */
  CHECK(planner_search(&d, &dev, &o, &p, &c, NULL, NULL) == -1 &&
        strstr(osdp_last_error(), "global batch of 7 sequences is not a multiple of the 2 ranks"));
  o.global_batch = 24; /* 12 a rank, and the micro-batch fixed at 5 */
  o.min_batch = o.max_batch = 5;
  CHECK(planner_search(&d, &dev, &o, &p, &c, NULL, NULL) == -1 &&
        strstr(osdp_last_error(), "which no micro-batch from 5 to 5 divides"));
  o.max_batch = 6; /* 6 divides 12: two micro-steps */
  CHECK(planner_search(&d, &dev, &o, &p, &c, NULL, NULL) == 0 && p.micro_batch == 6 &&
        plan_accum(&p) == 2 && c.samples_per_s > 0);
  plan_free(&p);
  osdp_clear_error();
  gpt_desc_free(&d);
}

int main(int argc, char** argv) {
  int cases = argc > 1 ? atoi(argv[1]) : 300;
  test_random(cases);
  test_presets();
  test_global_batch_errors();
  return check_summary();
}
