/*
** test_planner.c: the planner (device files, cost model, search), without MPI.
**  1. Device files: load/save round trip, and one clear error per kind of bad input; two link
**     levels (ranks per host, measured rank counts, inter-host collectives falling back to the
**     intra-host ones), old files as one host; the collective model over communicator shapes
**     (group and across-group levels, ring rescaling from the measured rank count).
**  2. Cost model: plan_cost's memory and replayed time equal formulas written out
**     independently here (no overlap), for plans with random layers recomputed too, and with
**     random shard groups, bf16 reductions, overlap_reduce and 1..3 accumulated micro-steps on
**     devices of 1..6 ranks with every
**     host size; the search model (cost_search_step_s) equals its own formulas and equals the
**     replay for plans without dp slices (also with measured split times and recomputation);
**     overlap hides all-reduces, prefetched gathers and (overlap_reduce) reduce-scatters; bf16
**     halves gradient reductions; measured compute times (per slice count) and "overhead" are
**     used.
**  3. Per-operator configurations: planner_op_configs covers every one of the 3^k
**     assignments of every slice count and shard group (nothing lost by grouping equal slices
**     or by pruning), for ops of recomputed layers too.
**  4. Search = brute force over ALL plans (every configuration of every op, every
**     micro-batch up to a cap, every number of recomputed layers) on small models, ranks 1..4,
**     several limits; the chosen plan fits, its peak equals plan_predict_memory and the
**     search's own sum, and it beats every uniform plan (which may recompute too). With shard
**     groups chosen per op on 4, 6 and 8 ranks over 1 or 2 hosts (and bf16) too; and with a
**     fixed global batch G (gradient accumulation: only micro-batches with N B dividing G, K =
**     G / (N B) micro-steps, the brute force pricing each configuration's per-micro-step part K
**     times).
**     And = an exact textbook reference (full Pareto frontiers) on a 2-layer model, k <= 8.
**     Hybrid: slow links between hosts make the search shard within hosts and beat every plan
**     sharded over the world; as fast as within, zero2 shards over the world; the candidates
**     list the hybrid uniform plans and decide overlap_reduce and (auto) bf16 per plan.
**     Candidates come simplest first among those within PLANNER_MODEL_ERROR of the fastest
**     (fewest layer plans, then strategy kinds), the rest fastest first.
**  5. Limits too small: -1, the message names the minimum, and the minimum is exact.
**     Recomputation: position does not matter in the model; a limit only recomputation meets
**     gives a plan with 0 < R that fits; max_recompute bounds R.
**  6. Speed: gpt2-1.5b on 8 ranks, 16 GiB, seq 1024, every option: well under a second; at
**     8 GiB, where only recomputation fits; on 16 ranks, 8 per host (printed).
*/
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "core/util.h"
#include "model/gpt.h"
#include "model/gpt2.h"
#include "model/plan.h"
#include "planner/cost.h"
#include "planner/device.h"
#include "planner/search.h"
#include "planner/trial.h"

/* ---- Helpers ----------------------------------------------------------------------------- */

/* A model config built in code (like a JSON config file). */
static GptConfig make_config(const char* name, int L, int C, int H, int V, int maxT) {
  GptConfig c;
  memset(&c, 0, sizeof c);
  snprintf(c.name, sizeof c.name, "%s", name);
  c.n_layer = L;
  c.n_embd = C;
  c.n_head = H;
  c.vocab_size = V;
  c.padded_vocab = (V + 127) / 128 * 128;
  c.max_seq = maxT;
  return c;
}

/* A device with different figures per collective, so that mix-ups show. */
static DeviceInfo make_device(int ranks, size_t limit, double flops) {
  DeviceInfo dev;
  memset(&dev, 0, sizeof dev);
  dev.ranks = ranks;
  dev.mem_limit = limit;
  dev.threads = 1;
  dev.flops = flops;
  dev.optimizer_s_per_param = 1e-9;
  dev.coll[COLL_ALLREDUCE] = (CollectiveModel){.latency_s = 3e-5, .bandwidth_Bps = 2e8};
  dev.coll[COLL_ALLGATHER] = (CollectiveModel){.latency_s = 1e-5, .bandwidth_Bps = 5e8};
  dev.coll[COLL_REDUCE_SCATTER] = (CollectiveModel){.latency_s = 2e-5, .bandwidth_Bps = 3e8};
  return dev;
}

/* Relative difference of two positive numbers. */
static double rel_diff(double a, double b) { return fabs(a - b) / fmax(fabs(a), fabs(b)); }

/* Writes text to a temporary file and returns its path (static buffer). */
static const char* write_temp(const char* text) {
  static char path[64];
  snprintf(path, sizeof path, "/tmp/osdp_test_planner_%d.json", (int)getpid());
  FILE* f = fopen(path, "w");
  fputs(text, f);
  fclose(f);
  return path;
}

/* ---- 1. Device files ----------------------------------------------------------------------- */

static const char* good_device =
    "{\"ranks\": 4, \"mem_limit\": \"8GiB\", \"threads\": 2, \"flops\": 9.4e10,"
    " \"optimizer_s_per_param\": 1.5e-9,"
    " \"collectives\": {\"allreduce\": {\"latency_s\": 2e-5, \"bandwidth_Bps\": 3e8, \"overlap\": 0.25},"
    "   \"allgather\": {\"latency_s\": 1e-5, \"bandwidth_Bps\": 4e8},"
    "   \"reduce_scatter\": {\"latency_s\": 3e-5, \"bandwidth_Bps\": 5e8, \"points\": [[1024, 1e-5], [4096, 2.5e-5]]}},"
    " \"compute\": {\"model\": \"tiny\", \"seq\": 64, \"ops\": ["
    "   {\"name\": \"h0.qkv\", \"fixed_s\": 1e-4, \"per_sample_s\": 2e-3, \"slices\": ["
    "     {\"k\": 2, \"fixed_s\": 2e-4, \"per_sample_s\": 2.5e-3}, {\"k\": 8, \"fixed_s\": 6e-4, \"per_sample_s\": 4e-3}]},"
    "   {\"name\": \"overhead\", \"fixed_s\": 0.25, \"per_sample_s\": 0.125}]}}";

/* Loads `text` as a device file expecting failure; checks the error names `field`. */
static void expect_device_error(const char* text, const char* field) {
  DeviceInfo dev;
  osdp_clear_error();
  int rc = device_load(&dev, write_temp(text));
  CHECK_MSG(rc == -1, "expected an error naming %s", field);
  CHECK_MSG(strstr(osdp_last_error(), field) != NULL, "error '%s' should name '%s'",
            osdp_last_error(), field);
  CHECK_MSG(strchr(osdp_last_error(), '\n') == NULL, "one line: '%s'", osdp_last_error());
}

/* Replaces the first occurrence of `from` in text by `to` (static buffer). */
static const char* text_variant(const char* text, const char* from, const char* to) {
  static char buf[2048];
  const char* at = strstr(text, from);
  if (!at) { fprintf(stderr, "bad variant %s\n", from); return text; }
  snprintf(buf, sizeof buf, "%.*s%s%s", (int)(at - text), text, to, at + strlen(from));
  return buf;
}

/* Replaces the first occurrence of `from` in good_device by `to`. */
static const char* device_variant(const char* from, const char* to) {
  return text_variant(good_device, from, to);
}

/* Checks that two devices hold the same values. */
static void check_same_device(const DeviceInfo* a, const DeviceInfo* b) {
  CHECK(a->ranks == b->ranks && a->mem_limit == b->mem_limit && a->threads == b->threads);
  CHECK(device_ranks_per_host(a) == device_ranks_per_host(b));
  for (int k = 0; k < COLL_COUNT; k++) {
    CHECK(a->inter_given[k] == b->inter_given[k] && a->world_given[k] == b->world_given[k]);
    for (int l = 0; l < LINK_LEVELS; l++) {
      const CollectiveModel *x = device_link(a, l, k), *y = device_link(b, l, k);
      CHECK(device_link_ranks(a, l, k) == device_link_ranks(b, l, k));
      CHECK(x->latency_s == y->latency_s && x->bandwidth_Bps == y->bandwidth_Bps && x->overlap == y->overlap &&
            x->in_step == y->in_step && x->npoints == y->npoints && x->bf16_factor == y->bf16_factor &&
            x->async_in_step == y->async_in_step);
    }
  }
  CHECK(a->flops == b->flops && a->optimizer_s_per_param == b->optimizer_s_per_param);
  for (int k = 0; k < COLL_COUNT; k++)
    CHECK(a->coll[k].latency_s == b->coll[k].latency_s &&
          a->coll[k].bandwidth_Bps == b->coll[k].bandwidth_Bps &&
          a->coll[k].overlap == b->coll[k].overlap && a->coll[k].residual == b->coll[k].residual &&
          a->coll[k].npoints == b->coll[k].npoints);
  for (int k = 0; k < COLL_COUNT; k++)
    for (int i = 0; i < a->coll[k].npoints && i < b->coll[k].npoints; i++)
      CHECK(a->coll[k].point_bytes[i] == b->coll[k].point_bytes[i] && a->coll[k].point_s[i] == b->coll[k].point_s[i]);
  CHECK(strcmp(a->compute_model, b->compute_model) == 0 && a->compute_seq == b->compute_seq);
  CHECK(a->n_op_times == b->n_op_times);
  for (int i = 0; i < a->n_op_times && i < b->n_op_times; i++) {
    const OpTime *x = &a->op_times[i], *y = &b->op_times[i];
    CHECK(strcmp(x->name, y->name) == 0);
    for (int l = 0; l < DEVICE_SLICE_LEVELS; l++)
      CHECK(x->measured[l] == y->measured[l] &&
            (!x->measured[l] || (x->fixed_s[l] == y->fixed_s[l] && x->per_sample_s[l] == y->per_sample_s[l])));
    CHECK(x->forward_share == y->forward_share);
    for (int l = 0; l < DEVICE_SLICE_LEVELS; l++) {
      CHECK(x->npoints[l] == y->npoints[l]);
      for (int j = 0; j < x->npoints[l] && j < y->npoints[l]; j++)
        CHECK(x->point_batch[l][j] == y->point_batch[l][j] && x->point_s[l][j] == y->point_s[l][j]);
    }
  }
}

/* Saves device a, loads it back, checks the two agree and frees both. */
static void check_round_trip(DeviceInfo* a) {
  DeviceInfo b;
  const char* path = write_temp("");
  CHECK(device_save(a, path) == 0);
  CHECK(device_load(&b, path) == 0);
  check_same_device(a, &b);
  device_free(a);
  device_free(&b);
}

/* Round trip and the errors of device files. */
static void test_device_files(void) {
  DeviceInfo a;
  CHECK(device_load(&a, write_temp(good_device)) == 0);
  CHECK(a.ranks == 4 && a.mem_limit == ((size_t)8 << 30) && a.threads == 2);
  CHECK(a.coll[COLL_ALLGATHER].bandwidth_Bps == 4e8 && a.n_op_times == 2);
  CHECK(a.coll[COLL_ALLREDUCE].overlap == 0.25 && a.coll[COLL_ALLGATHER].overlap == 0);
  CHECK(a.op_times[0].measured[0] && a.op_times[0].measured[1] && !a.op_times[0].measured[2] &&
        a.op_times[0].measured[3] && a.op_times[0].fixed_s[3] == 6e-4 && !a.op_times[1].measured[1]);
  CHECK(strcmp(a.compute_model, "tiny") == 0 && a.compute_seq == 64);
  a.flops = 1e11 / 3.0; /* a value that needs all 17 digits (within the file ranges) */
  a.coll[COLL_REDUCE_SCATTER].bf16_factor = 2.25; /* measured by osdp profile */
  CHECK(a.op_times[0].forward_share == 0); /* not given */
  a.op_times[0].forward_share = 0.3; /* measured by osdp profile */
  CHECK(a.coll[COLL_ALLGATHER].async_in_step == 0); /* not given */
  a.coll[COLL_ALLGATHER].async_in_step = 2.5;
  CHECK(a.op_times[0].npoints[0] == 0 && a.op_times[0].npoints[3] == 0); /* not given */
  OpTime* q = &a.op_times[0]; /* measured points at k = 1 and k = 8, as osdp profile writes */
  q->npoints[0] = 3;
  q->npoints[3] = 2;
  for (int j = 0; j < 3; j++) {
    q->point_batch[0][j] = q->point_batch[3][j] = 1 << (2 * j);
    q->point_s[0][j] = q->point_s[3][j] = 1e-3 * (j + 1) / 3.0;
  }
  check_round_trip(&a);
  CHECK(a.n_op_times == 0 && a.op_times == NULL);

  expect_device_error("{\"ranks\": 4,", "malformed");
  expect_device_error("[1, 2]", "malformed");
  expect_device_error(device_variant("\"ranks\": 4", "\"ranks\": 0"), "ranks");
  expect_device_error(device_variant("\"ranks\": 4", "\"ranks\": 2.5"), "ranks");
  expect_device_error(device_variant("\"ranks\": 4,", ""), "ranks");
  expect_device_error(device_variant("\"mem_limit\": \"8GiB\"", "\"mem_limit\": -5"), "mem_limit");
  expect_device_error(device_variant("\"mem_limit\": \"8GiB\"", "\"mem_limit\": \"8 parsecs\""), "mem_limit");
  expect_device_error(device_variant("\"mem_limit\": \"8GiB\",", ""), "mem_limit");
  expect_device_error(device_variant("\"threads\": 2", "\"threads\": 0"), "threads");
  expect_device_error(device_variant("\"flops\": 9.4e10,", ""), "flops");
  expect_device_error(device_variant("\"flops\": 9.4e10", "\"flops\": -1"), "flops");
  expect_device_error(device_variant("\"flops\": 9.4e10", "\"flops\": \"fast\""), "flops");
  /* Figures out of their physical ranges (issue 42): times that would overflow, or print with
  ** hundreds of digits. */
  expect_device_error(device_variant("\"flops\": 9.4e10", "\"flops\": 1e-300"),
                      "\"flops\" = 1e-300 must be from 1000");
  expect_device_error(device_variant("\"bandwidth_Bps\": 5e8", "\"bandwidth_Bps\": 1e-300"),
                      "collectives.reduce_scatter.bandwidth_Bps\" = 1e-300 must be from 1 to 1e+15 B/s");
  expect_device_error(device_variant("\"latency_s\": 2e-5", "\"latency_s\": 1e300"),
                      "collectives.allreduce.latency_s\" = 1e+300 must be from 0 to 1000 s");
  expect_device_error(device_variant("\"fixed_s\": 1e-4", "\"fixed_s\": 1e9"), "compute.ops[0].fixed_s");
  expect_device_error(device_variant("1.5e-9", "-1e-9"), "optimizer_s_per_param");
  expect_device_error(device_variant("\"allgather\"", "\"all_gather\""), "collectives.allgather");
  expect_device_error(device_variant("\"overlap\": 0.25", "\"overlap\": 0.25, \"bf16_factor\": -1"),
                      "bf16_factor");
  expect_device_error(device_variant("\"bandwidth_Bps\": 5e8", "\"bandwidth_Bps\": -5e8"),
                      "collectives.reduce_scatter.bandwidth_Bps");
  expect_device_error(device_variant("\"bandwidth_Bps\": 5e8", "\"bandwidth_Bps\": 0"),
                      "collectives.reduce_scatter.bandwidth_Bps");
  expect_device_error(device_variant("\"latency_s\": 2e-5", "\"latency_s\": -2e-5"),
                      "collectives.allreduce.latency_s");
  expect_device_error(device_variant("\"latency_s\": 1e-5, ", ""), "collectives.allgather.latency_s");
  expect_device_error(device_variant("\"collectives\"", "\"collective\""), "collectives");
  expect_device_error(device_variant("\"seq\": 64", "\"seq\": 0"), "compute.seq");
  expect_device_error(device_variant("\"fixed_s\": 1e-4", "\"fixed_s\": -1e-4"), "compute.ops[0].fixed_s");
  expect_device_error(device_variant("\"per_sample_s\": 0.125", "\"per_sample_s\": \"x\""),
                      "compute.ops[1].per_sample_s");
  expect_device_error(device_variant("{\"k\": 2,", "{\"k\": 3,"), "compute.ops[0].slices[0].k");
  expect_device_error(device_variant("\"per_sample_s\": 2e-3,", "\"per_sample_s\": 2e-3, \"forward_share\": 1,"),
                      "compute.ops[0].forward_share");
  expect_device_error(device_variant("\"per_sample_s\": 0.125", "\"per_sample_s\": 0.125, \"forward_share\": -0.1"),
                      "compute.ops[1].forward_share");
  expect_device_error(device_variant("\"per_sample_s\": 0.125", "\"per_sample_s\": 0.125, \"forward_share\": \"x\""),
                      "compute.ops[1].forward_share");
  expect_device_error(device_variant("\"fixed_s\": 6e-4", "\"fixed_s\": -6e-4"),
                      "compute.ops[0].slices[k=8].fixed_s");
  expect_device_error(device_variant("\"overlap\": 0.25", "\"overlap\": 1.5"), "collectives.allreduce.overlap");
  expect_device_error(device_variant("\"overlap\": 0.25", "\"overlap\": 0.25, \"async_in_step\": 0"),
                      "collectives.allreduce.async_in_step");
  expect_device_error(device_variant("\"per_sample_s\": 2e-3,", "\"per_sample_s\": 2e-3, \"points\": [[1, 1e-3], [1, 2e-3]],"),
                      "compute.ops[0].points[1]");
  expect_device_error(device_variant("\"per_sample_s\": 2e-3,", "\"per_sample_s\": 2e-3, \"points\": [[0, 1e-3]],"),
                      "compute.ops[0].points[0]");
  expect_device_error(device_variant("\"per_sample_s\": 2e-3,", "\"per_sample_s\": 2e-3, \"points\": [[1.5, 1e-3]],"),
                      "compute.ops[0].points[0]");
  expect_device_error(device_variant("\"per_sample_s\": 2e-3,", "\"per_sample_s\": 2e-3, \"points\": [[1e20, 1e-3]],"),
                      "compute.ops[0].points[0]");
  expect_device_error(device_variant("\"per_sample_s\": 2e-3,", "\"per_sample_s\": 2e-3, \"points\": [[2, -1e-3]],"),
                      "compute.ops[0].points[0]");
  expect_device_error(device_variant("\"per_sample_s\": 2e-3,", "\"per_sample_s\": 2e-3, \"points\": [],"),
                      "compute.ops[0].points");
  expect_device_error(device_variant("\"per_sample_s\": 4e-3}", "\"per_sample_s\": 4e-3, \"points\": [[2, 1e-3], [1, 1e-3]]}"),
                      "compute.ops[0].slices[k=8].points[1]");
  expect_device_error(device_variant("\"per_sample_s\": 4e-3}", "\"per_sample_s\": 4e-3, \"points\": [[2]]}"),
                      "compute.ops[0].slices[1].points[0]");
  expect_device_error(device_variant("[4096, 2.5e-5]", "[512, 2.5e-5]"), "collectives.reduce_scatter.points[1]");
  expect_device_error(device_variant("[4096, 2.5e-5]", "[4096]"), "collectives.reduce_scatter.points[1]");
  osdp_clear_error();
  CHECK(device_load(&a, "/nonexistent/dev.json") == -1 && strstr(osdp_last_error(), "/nonexistent/dev.json"));

  /* The same checks apply to devices built in code (command-line flags). */
  DeviceInfo f = make_device(2, 1 << 20, 1e9);
  CHECK(device_validate(&f, "flags") == 0);
  f.coll[COLL_ALLGATHER].bandwidth_Bps = NAN;
  CHECK(device_validate(&f, "flags") == -1 && strstr(osdp_last_error(), "allgather.bandwidth_Bps"));
  f = make_device(2, 0, 1e9);
  CHECK(device_validate(&f, "flags") == -1 && strstr(osdp_last_error(), "mem_limit"));
}

/* A device on two hosts of 8 ranks: a fast intra-host level measured over 8 ranks, a slow
** inter-host level over 2 (one rank per host) that leaves the reduce-scatter to the intra one. */
static const char* hosts_device =
    "{\"ranks\": 16, \"ranks_per_host\": 8, \"mem_limit\": \"8GiB\", \"flops\": 1e12,"
    " \"collectives\": {\"measured_ranks\": 8,"
    "   \"allreduce\": {\"latency_s\": 1e-5, \"bandwidth_Bps\": 1e11},"
    "   \"allgather\": {\"latency_s\": 1e-5, \"bandwidth_Bps\": 2e11},"
    "   \"reduce_scatter\": {\"latency_s\": 1e-5, \"bandwidth_Bps\": 2e11}},"
    " \"inter_host\": {\"measured_ranks\": 2,"
    "   \"allreduce\": {\"latency_s\": 3e-5, \"bandwidth_Bps\": 1e10, \"overlap\": 0.5},"
    "   \"allgather\": {\"latency_s\": 3e-5, \"bandwidth_Bps\": 2e10}}}";

/* The world level (osdp profile on several hosts): the world's collectives use its table as
** measured, over all ranks, and the kinds it lacks fall back to the inter-host level rescaled;
** groups smaller than the world and the across-group sets are untouched; a round trip keeps it;
** a wrong measured_ranks or a bad table names the field. */
static void test_device_world(void) {
  const char* w = text_variant(hosts_device, "}}}", "}}, \"world\": {\"measured_ranks\": 16,"
                               " \"allgather\": {\"latency_s\": 1e-4, \"bandwidth_Bps\": 4e9}}}");
  char text[4096];
  snprintf(text, sizeof text, "%s", w);
  DeviceInfo a, b;
  CHECK(device_load(&a, write_temp(text)) == 0 && device_load(&b, write_temp(hosts_device)) == 0);
  CHECK(a.world_given[COLL_ALLGATHER] && !a.world_given[COLL_ALLREDUCE] && !b.world_given[COLL_ALLGATHER]);
  CommShape ws = device_world_shape(&a);
  CHECK(ws.ranks == 16 && ws.level == LINK_WORLD && device_world_shape(&b).level == LINK_INTER);
  CHECK(device_link(&a, LINK_WORLD, COLL_ALLGATHER) == &a.world[COLL_ALLGATHER] &&
        device_link_ranks(&a, LINK_WORLD, COLL_ALLGATHER) == 16);
  CHECK(device_link(&a, LINK_WORLD, COLL_ALLREDUCE) == &a.inter[COLL_ALLREDUCE] &&
        device_link(&a, LINK_WORLD, COLL_REDUCE_SCATTER) == &a.coll[COLL_REDUCE_SCATTER]);
  double B = 64e6; /* the world's gathers: the measured line, not a rescaled inter-host one */
  CHECK(fabs(device_collective_s(&a, COLL_ALLGATHER, B) - (1e-4 + B / 4e9)) < 1e-12);
  CHECK(device_collective_s(&a, COLL_ALLREDUCE, B) == device_collective_s(&b, COLL_ALLREDUCE, B));
  CHECK(device_collective_s(&b, COLL_ALLGATHER, B) != device_collective_s(&a, COLL_ALLGATHER, B));
  for (int G = 2; G < 16; G *= 2) {
    CommShape x = device_group_shape(&a, G), y = device_group_shape(&b, G);
    CHECK(x.level == y.level && x.level != LINK_WORLD);
    CHECK(device_across_shape(&a, G).level == LINK_INTER);
  }
  check_round_trip(&a);
  device_free(&a);
  device_free(&b);
  expect_device_error(text_variant(text, "\"measured_ranks\": 16", "\"measured_ranks\": 8"), "world.measured_ranks");
  expect_device_error(text_variant(text, "\"bandwidth_Bps\": 4e9", "\"bandwidth_Bps\": -4"), "world.allgather.bandwidth_Bps");
  expect_device_error(text_variant(text, "\"world\": {", "\"world\": 3, \"y\": {"), "\"world\"");
}

/* Device files with two link levels: the ranks per host, each level's measured rank count and
** the inter-host collectives load, survive a round trip and fall back to the intra-host level
** where absent; a file without them is one host measured over all its ranks; bad values give
** one line naming the field. */
static void test_device_levels(void) {
  DeviceInfo a;
  CHECK(device_load(&a, write_temp(hosts_device)) == 0);
  CHECK(a.ranks == 16 && device_ranks_per_host(&a) == 8);
  CHECK(a.inter_given[COLL_ALLREDUCE] && a.inter_given[COLL_ALLGATHER] && !a.inter_given[COLL_REDUCE_SCATTER]);
  CHECK(device_link(&a, LINK_INTER, COLL_REDUCE_SCATTER) == &a.coll[COLL_REDUCE_SCATTER]);
  CHECK(device_link(&a, LINK_INTER, COLL_ALLREDUCE)->bandwidth_Bps == 1e10 &&
        device_link(&a, LINK_INTER, COLL_ALLREDUCE)->overlap == 0.5 &&
        device_link(&a, LINK_INTRA, COLL_ALLREDUCE)->bandwidth_Bps == 1e11);
  CHECK(device_link_ranks(&a, LINK_INTRA, COLL_ALLREDUCE) == 8 && device_link_ranks(&a, LINK_INTER, COLL_ALLREDUCE) == 2 &&
        device_link_ranks(&a, LINK_INTER, COLL_REDUCE_SCATTER) == 8);
  check_round_trip(&a);
  /* Without the new fields: one host (H = ranks), every level the intra-host one. */
  CHECK(device_load(&a, write_temp(good_device)) == 0);
  CHECK(device_ranks_per_host(&a) == 4 && device_link_ranks(&a, LINK_INTRA, 0) == 4);
  for (int k = 0; k < COLL_COUNT; k++) CHECK(!a.inter_given[k] && device_link(&a, LINK_INTER, k) == &a.coll[k]);
  device_free(&a);
  /* Defaults: the inter-host level over ranks / H, at least 2. */
  DeviceInfo f = make_device(12, 1 << 20, 1e9);
  f.ranks_per_host = 3;
  f.inter_given[COLL_ALLGATHER] = 1;
  f.inter[COLL_ALLGATHER] = f.coll[COLL_ALLGATHER];
  CHECK(device_validate(&f, "flags") == 0 && device_link_ranks(&f, LINK_INTER, COLL_ALLGATHER) == 4 &&
        device_link_ranks(&f, LINK_INTRA, COLL_ALLGATHER) == 3);
  f.ranks_per_host = 12;
  CHECK(device_link_ranks(&f, LINK_INTER, COLL_ALLGATHER) == 2);
  f.ranks_per_host = 5;
  CHECK(device_validate(&f, "flags") == -1 && strstr(osdp_last_error(), "ranks_per_host"));
  f.ranks_per_host = 3;
  f.inter[COLL_ALLGATHER].bandwidth_Bps = -1;
  CHECK(device_validate(&f, "flags") == -1 && strstr(osdp_last_error(), "inter_host.allgather.bandwidth_Bps"));

  const char* h = hosts_device;
  expect_device_error(text_variant(h, "\"ranks_per_host\": 8", "\"ranks_per_host\": 3"), "ranks_per_host");
  expect_device_error(text_variant(h, "\"ranks_per_host\": 8", "\"ranks_per_host\": 32"), "ranks_per_host");
  expect_device_error(text_variant(h, "\"ranks_per_host\": 8", "\"ranks_per_host\": 0"), "ranks_per_host");
  expect_device_error(text_variant(h, "\"ranks_per_host\": 8", "\"ranks_per_host\": 2.5"), "ranks_per_host");
  expect_device_error(text_variant(h, "\"measured_ranks\": 8", "\"measured_ranks\": 0"), "collectives.measured_ranks");
  expect_device_error(text_variant(h, "\"measured_ranks\": 2", "\"measured_ranks\": 99"), "inter_host.measured_ranks");
  expect_device_error(text_variant(h, "\"inter_host\": {", "\"inter_host\": 5, \"x\": {"), "inter_host");
  expect_device_error(text_variant(h, "\"bandwidth_Bps\": 1e10", "\"bandwidth_Bps\": 0"),
                      "inter_host.allreduce.bandwidth_Bps");
  expect_device_error(text_variant(h, "{\"latency_s\": 3e-5, \"bandwidth_Bps\": 2e10}", "{\"bandwidth_Bps\": 2e10}"),
                      "inter_host.allgather.latency_s");
  expect_device_error(text_variant(h, "{\"latency_s\": 3e-5, \"bandwidth_Bps\": 2e10}", "7"), "inter_host.allgather");
  expect_device_error(text_variant(h, "\"overlap\": 0.5", "\"overlap\": 2"), "inter_host.allreduce.overlap");
  test_device_world();
}

/* The collective model over communicator shapes: levels of groups and across-group sets, the
** ring rescaling from the measured rank count, in-step factors, one rank. */
static void test_group_collectives(void) {
  DeviceInfo dev;
  CHECK(device_load(&dev, write_temp(hosts_device)) == 0);
  CommShape w = device_world_shape(&dev), g8 = device_group_shape(&dev, 8), g4 = device_group_shape(&dev, 4);
  CommShape g16 = device_group_shape(&dev, 16), a8 = device_across_shape(&dev, 8), a4 = device_across_shape(&dev, 4);
  CHECK(w.ranks == 16 && w.level == LINK_INTER && g16.level == LINK_INTER);
  CHECK(g8.ranks == 8 && g8.level == LINK_INTRA && g4.ranks == 4 && g4.level == LINK_INTRA);
  CHECK(a8.ranks == 2 && a8.level == LINK_INTER && a4.ranks == 4 && a4.level == LINK_INTER);
  CHECK(device_across_shape(&dev, 16).ranks == 1);
  double B = 1e6;
  /* At the measured rank count: the table itself; elsewhere the bytes scaled by the ring's share. */
  CHECK(device_shape_collective_s(&dev, g8, COLL_ALLGATHER, B) == 1e-5 + B / 2e11);
  CHECK_NEAR(device_shape_collective_s(&dev, g4, COLL_ALLGATHER, B), 1e-5 + B * (0.75 / 0.875) / 2e11, 1e-18);
  CHECK(device_shape_collective_s(&dev, a8, COLL_ALLREDUCE, B) == 3e-5 + B / 1e10);
  CHECK_NEAR(device_shape_collective_s(&dev, a4, COLL_ALLREDUCE, B), 3e-5 + B * (1.5 / 1.0) / 1e10, 1e-16);
  CHECK_NEAR(device_collective_s(&dev, COLL_ALLREDUCE, B), 3e-5 + B * (30.0 / 16) / 1e10, 1e-16);
  CHECK_NEAR(device_collective_s(&dev, COLL_ALLGATHER, B), 3e-5 + B * (15.0 / 16 / 0.5) / 2e10, 1e-16);
  /* No inter-host reduce-scatter given: the intra-host line, measured over 8. */
  CHECK_NEAR(device_collective_s(&dev, COLL_REDUCE_SCATTER, B), 1e-5 + B * (15.0 / 16 / 0.875) / 2e11, 1e-18);
  CHECK(device_shape_collective_s(&dev, (CommShape){1, LINK_INTER}, COLL_ALLREDUCE, B) == 0);
  dev.inter[COLL_ALLREDUCE].in_step = 2;
  CHECK(device_shape_step_s(&dev, a8, COLL_ALLREDUCE, B) == 2 * (3e-5 + B / 1e10));
  CHECK(device_step_collective_s(&dev, COLL_ALLREDUCE, B) == 2 * device_collective_s(&dev, COLL_ALLREDUCE, B));
  CHECK(device_shape_step_s(&dev, g8, COLL_ALLREDUCE, B) == device_shape_collective_s(&dev, g8, COLL_ALLREDUCE, B));
  /* A group that straddles hosts (4 ranks on hosts of 6) is inter-host; on one host everything
  ** is intra-host, and a measured table is interpolated at the rescaled size. */
  DeviceInfo o = make_device(12, 1 << 20, 1e9);
  o.ranks_per_host = 6;
  CHECK(device_group_shape(&o, 4).level == LINK_INTER && device_group_shape(&o, 3).level == LINK_INTRA &&
        device_group_shape(&o, 6).level == LINK_INTRA && device_group_shape(&o, 12).level == LINK_INTER);
  o.ranks_per_host = 0;
  CHECK(device_group_shape(&o, 4).level == LINK_INTRA && device_across_shape(&o, 4).level == LINK_INTRA &&
        device_world_shape(&o).level == LINK_INTRA);
  CollectiveModel* rs = &o.coll[COLL_REDUCE_SCATTER];
  rs->npoints = 2;
  rs->point_bytes[0] = 1000;
  rs->point_s[0] = 1e-5;
  rs->point_bytes[1] = 2000;
  rs->point_s[1] = 3e-5;
  /* 6 ranks of 12 measured: 1200 bytes count as 1200 * (5/6) / (11/12) = 1090.9.. */
  double x = 1200 * (5.0 / 6) / (11.0 / 12);
  CHECK_NEAR(device_shape_collective_s(&o, device_group_shape(&o, 6), COLL_REDUCE_SCATTER, 1200),
             1e-5 + 2e-5 * (x - 1000) / 1000, 1e-18);
  device_free(&dev);
}

/* Collective and operator times. */
static void test_device_times(void) {
  GptConfig cfg;
  GptDesc d;
  CHECK(gpt_config_load("tiny", &cfg) == 0 && gpt_desc_build(&d, &cfg) == 0);
  DeviceInfo dev;
  CHECK(device_load(&dev, write_temp(good_device)) == 0);
  CHECK(device_collective_s(&dev, COLL_ALLGATHER, 4e8) == 1e-5 + 1.0);
  /* A measured table is interpolated; below it its first time, above it its last slope. */
  CHECK(dev.coll[COLL_REDUCE_SCATTER].npoints == 2);
  CHECK_NEAR(device_collective_s(&dev, COLL_REDUCE_SCATTER, 2048), 1.5e-5, 1e-18);
  CHECK(device_collective_s(&dev, COLL_REDUCE_SCATTER, 100) == 1e-5);
  CHECK_NEAR(device_collective_s(&dev, COLL_REDUCE_SCATTER, 7168), 4e-5, 1e-18);
  dev.ranks = 1;
  CHECK(device_collective_s(&dev, COLL_ALLGATHER, 4e8) == 0);
  dev.ranks = 4;
  int qkv = gpt_op_layer(0, GPT_QKV), proj = gpt_op_layer(0, GPT_PROJ);
  CHECK(device_op_time_s(&dev, &d, qkv, 3, 64, 1) == 1e-4 + 3 * 2e-3);
  CHECK(device_op_time_s(&dev, &d, qkv, 3, 64, 2) == 2e-4 + 3 * 2.5e-3);   /* measured at k=2 */
  CHECK(device_op_time_s(&dev, &d, qkv, 3, 64, 8) == 6e-4 + 3 * 4e-3);     /* and k=8 */
  double t2 = 2e-4 + 3 * 2.5e-3, t8 = 6e-4 + 3 * 4e-3;                      /* k=4: between */
  CHECK_NEAR(device_op_time_s(&dev, &d, qkv, 3, 64, 4), t2 + (t8 - t2) * (4 - 2) / 6.0, 1e-15);
  { /* Measured points: interpolated between, per_sample_s a micro-batch past the ends. */
    OpTime* pt = (OpTime*)device_measured_op(&dev, &d, 64, d.ops[qkv].name);
    int pb[3] = {2, 4, 8};
    double ps[3] = {5e-3, 9e-3, 20e-3};
    pt->npoints[0] = 3;
    memcpy(pt->point_batch[0], pb, sizeof pb);
    memcpy(pt->point_s[0], ps, sizeof ps);
    CHECK(device_op_time_s(&dev, &d, qkv, 4, 64, 1) == 9e-3);                      /* a point */
    CHECK_NEAR(device_op_time_s(&dev, &d, qkv, 3, 64, 1), 7e-3, 1e-15);            /* between */
    CHECK_NEAR(device_op_time_s(&dev, &d, qkv, 6, 64, 1), 14.5e-3, 1e-15);
    CHECK_NEAR(device_op_time_s(&dev, &d, qkv, 10, 64, 1), 20e-3 + 2 * 2e-3, 1e-15); /* past the last */
    CHECK_NEAR(device_op_time_s(&dev, &d, qkv, 1, 64, 1), 5e-3 - 2e-3, 1e-15);      /* before the first */
    CHECK(device_op_time_s(&dev, &d, qkv, 3, 64, 2) == t2);                        /* k=2: its own line */
    pt->npoints[0] = 0;
  }
  CHECK(device_op_time_s(&dev, &d, gpt_op_layer(0, GPT_LN1), 3, 64, 1) ==
        3.0 * gpt_op_flops_per_token(&d, &d.ops[gpt_op_layer(0, GPT_LN1)], 64) * 3 * 64 / dev.flops);
  double flops_time = 3.0 * gpt_op_flops_per_token(&d, &d.ops[proj], 64) * 3 * 64 / dev.flops;
  CHECK(device_op_time_s(&dev, &d, proj, 3, 64, 4) == flops_time); /* not measured: FLOPs */
  double other_seq = 3.0 * gpt_op_flops_per_token(&d, &d.ops[qkv], 32) * 3 * 32 / dev.flops;
  CHECK(device_op_time_s(&dev, &d, qkv, 3, 32, 2) == other_seq);   /* measured at another seq */
  CHECK_NEAR(cost_split_extra_s(&d, &dev, qkv, 2, 3, 64, NULL), t2 - (1e-4 + 3 * 2e-3), 1e-15);
  /* A recomputed layer runs qkv's forward again at k slices: the extra counts 4/3 times, and
  ** its recomputed forwards (ln1 .. gelu, not fcproj) take a third of their time. */
  int rec[64] = {1}; /* layer 0 only */
  CHECK(d.cfg.n_layer <= 64);
  CHECK_NEAR(cost_split_extra_s(&d, &dev, qkv, 2, 3, 64, rec), 4.0 / 3 * (t2 - (1e-4 + 3 * 2e-3)), 1e-15);
  double third = 0;
  for (int j = GPT_LN1; j <= GPT_GELU; j++)
    third += device_op_time_s(&dev, &d, gpt_op_layer(0, j), 3, 64, 1) / 3;
  CHECK_NEAR(cost_recompute_s(&d, &dev, 3, 64, rec), third, 1e-15);
  CHECK(cost_recompute_s(&d, &dev, 3, 64, NULL) == 0);
  /* A measured forward share replaces the third: the forward and a recomputed forward take it,
  ** the backward the rest. */
  OpTime* qt = (OpTime*)device_measured_op(&dev, &d, 64, d.ops[qkv].name);
  CHECK(qt != NULL);
  qt->forward_share = 0.2;
  CHECK_NEAR(device_op_pass_share(&dev, &d, qkv, 64, GPT_FORWARD), 0.2, 1e-15);
  CHECK_NEAR(device_op_pass_share(&dev, &d, qkv, 64, GPT_BACKWARD), 0.8, 1e-15);
  CHECK_NEAR(device_op_pass_share(&dev, &d, qkv, 64, GPT_RECOMPUTE), 0.2, 1e-15);
  double t1 = device_op_time_s(&dev, &d, qkv, 3, 64, 1);
  CHECK_NEAR(cost_recompute_s(&d, &dev, 3, 64, rec), third - t1 / 3 + 0.2 * t1, 1e-15);
  CHECK(device_op_pass_share(&dev, &d, d.head_op, 64, GPT_FORWARD) == 1); /* no backward pass */
  CHECK(device_op_pass_share(&dev, &d, d.head_op, 64, GPT_BACKWARD) == 0);
  qt->forward_share = 0;
  /* Compute time: every op + the overhead entry, only where the measurements apply. */
  double sum = 0, sum32 = 0;
  for (int i = 0; i < d.nops; i++) {
    sum += device_op_time_s(&dev, &d, i, 3, 64, 1);
    sum32 += device_op_time_s(&dev, &d, i, 3, 32, 1);
  }
  CHECK_NEAR(cost_compute_s(&d, &dev, 3, 64), sum + 0.25 + 3 * 0.125, 1e-15);
  CHECK_NEAR(cost_compute_s(&d, &dev, 3, 32), sum32, 1e-15);
  /* Measured split times with recomputation: the search model equals the replay for a zero3
  ** plan with qkv in 2 and 8 slices and layer 0 recomputed (its qkv forward runs again at k). */
  Plan p;
  PlanCost c;
  CHECK(plan_uniform(&p, &d, STRAT_ZERO3, 4, 3, 64) == 0);
  p.ops[qkv].k = 2;
  p.ops[qkv].strat[1] = STRAT_ZERO3;
  if (d.cfg.n_layer > 1) {
    int qkv1 = gpt_op_layer(1, GPT_QKV);
    p.ops[qkv1].k = 8;
    for (int k = 0; k < 8; k++) p.ops[qkv1].strat[k] = STRAT_ZERO3;
  }
  for (int R = 0; R <= 2 && R <= d.cfg.n_layer; R++) {
    plan_set_recompute(&p, R);
    CHECK(plan_cost(&d, &dev, &p, &c) == 0);
    double ts = cost_search_step_s(&d, &dev, &p);
    CHECK_MSG(rel_diff(ts, c.step_s) < 1e-12, "R=%d: search %.17g, replay %.17g", R, ts, c.step_s);
  }
  plan_free(&p);
  device_free(&dev);
  gpt_desc_free(&d);
}

/* ---- 2. Cost model, written out independently ------------------------------------------------- */

/* n rounded up to a multiple of N. */
static size_t pad_to(size_t n, int N) { return (n + (size_t)N - 1) / (size_t)N * (size_t)N; }

/* Whether op is re-run forward in backward when the layers flagged in rec (NULL: none)
** recompute: ln1 .. gelu of such a layer, not fcproj (written out here, not from gpt_step.c). */
static int ref_recomputed(const GptDesc* d, const int* rec, int op) {
  int l = d->ops[op].layer;
  return rec && l >= 0 && rec[l] && op != gpt_op_layer(l, GPT_FCPROJ);
}

/* dp exposure the search model applies (ref_exposure_of), and the element type gradient
** reductions send in the plan being checked (fp32 unless set). */
static double ref_exposure;
static ReduceDtype ref_reduce;
/* Micro-steps per optimizer step of the plan being checked (gradient accumulation): zero3's
** gathers and the reduce-scatters happen in each, the all-reduces, zero2's gathers of updated
** shards and the optimizer once. */
static int ref_accum = 1;

/* The reference share of its fp32 bytes a bf16 reduction of kind costs: the device's measured
** bf16_factor, or one half. */
static double ref_factor(const DeviceInfo* dev, int kind) {
  if (ref_reduce != REDUCE_BF16) return 1;
  return dev->coll[kind].bf16_factor > 0 ? dev->coll[kind].bf16_factor : 0.5;
}

/* H of a device: its ranks per host, all its ranks when 0. */
static int ref_hosts(const DeviceInfo* dev) { return dev->ranks_per_host ? dev->ranks_per_host : dev->ranks; }

/* The time of collective `kind` over n ranks (inter: between hosts) for a full buffer of
** `bytes`, written out from the design: the level's latency + bandwidth line (the inter-host
** one where given, else the intra-host one) at the bytes scaled by the ring's share of the
** buffer each link moves (all-reduce 2(n-1)/n, the others (n-1)/n) over n ranks against the m
** ranks the line was measured over (intra: H; inter: N/H, at least 2). */
static double ref_coll(const DeviceInfo* dev, int kind, int n, int inter, double bytes) {
  if (n <= 1 || bytes <= 0) return 0;
  int H = ref_hosts(dev), given = inter && dev->inter_given[kind];
  const CollectiveModel* c = given ? &dev->inter[kind] : &dev->coll[kind];
  int m = given ? (dev->inter_ranks ? dev->inter_ranks : dev->ranks / H) : (dev->coll_ranks ? dev->coll_ranks : H);
  if (m < 2) m = 2;
  double k = kind == COLL_ALLREDUCE ? 2 : 1, sn = k * (n - 1) / n, sm = k * (m - 1) / m;
  double x = n == m ? bytes : bytes * (sn / sm);
  return c->latency_s + x / c->bandwidth_Bps;
}

/* A collective over groups of G consecutive ranks: within a host when G <= H and H % G == 0. */
static double ref_group(const DeviceInfo* dev, int kind, int G, double bytes) {
  int H = ref_hosts(dev);
  return ref_coll(dev, kind, G, !(G <= H && H % G == 0), bytes);
}

/* The all-reduce over the N/G ranks holding one shard: between hosts whenever N > H. */
static double ref_across(const DeviceInfo* dev, int G, double bytes) {
  return ref_coll(dev, COLL_ALLREDUCE, dev->ranks / G, dev->ranks > ref_hosts(dev), bytes);
}

/* The cost of one slice sharded over G ranks (0: the world), from the formulas of the design
** (not from cost.c); rec: its op is recomputed (one more forward weight use); held: the fused LM
** head uses its weight and gradient in one use, in its forward (op 0, the tied embedding, is
** also used by its own forward and backward). On a device without overlap the across-group
** all-reduce is fully exposed. keep: its op's KEEP_* bits: a kept full gradient (sharded) is
** held for the whole step and reduce-scattered once, a kept weight (zero3) held and gathered
** once. */
static void ref_slice(const DeviceInfo* dev, int op, int rec, int held, size_t n, Strategy s, int G,
                      int keep, size_t* mem, size_t* tr, double* t) {
  int N = dev->ranks;
  if (G <= 0) G = N;
  size_t np = s == STRAT_DP ? n : pad_to(n, G), sh = s == STRAT_DP ? n : np / (size_t)G;
  double bytes = 4.0 * (double)np, f = ref_factor(dev, COLL_ALLREDUCE);
  double frs = ref_factor(dev, COLL_REDUCE_SCATTER);
  int fw = (op == 0 && held ? 2 : 1) + rec, bw = held ? 0 : 1, bg = op == 0 && held ? 2 : 1;
  double comm = 0, mib16 = 16.0 * 1048576.0;
  double ag = ref_group(dev, COLL_ALLGATHER, G, bytes), rs = ref_group(dev, COLL_REDUCE_SCATTER, G, frs * bytes);
  double across = ref_across(dev, G, f * bytes / G);
  if (N > 1 && s == STRAT_DP) comm = ref_exposure * bytes * ref_group(dev, COLL_ALLREDUCE, N, f * mib16) / mib16;
  int K = ref_accum, kg = (keep & KEEP_GRAD) && s != STRAT_DP, kw = (keep & KEEP_WEIGHT) && s == STRAT_ZERO3;
  double reduces = kg ? 1 : K * bg, gathers = kw ? 1 : K * (fw + bw);
  if (N > 1 && s == STRAT_ZERO2) comm = reduces * rs + ag + across;
  if (N > 1 && s == STRAT_ZERO3) comm = gathers * ag + reduces * rs + across;
  *t = comm + (double)sh * dev->optimizer_s_per_param;
  *mem = (s == STRAT_DP ? 16 * n : s == STRAT_ZERO2 ? 4 * np + 12 * sh : 16 * sh) + 4 * np * (kg + kw);
  *tr = s == STRAT_DP ? 0 : (kg ? 0 : 4 * np) + (s == STRAT_ZERO3 && !kw ? 4 * np : 0);
}

/* The KEEP_* bits that save communication for a slice of op (rec, held as ref_slice) at K
** micro-steps: a gradient reduced more than once per step, a weight gathered more than once. */
static int ref_keep_worth(int op, int rec, int held, int K) {
  int fw = (op == 0 && held ? 2 : 1) + rec, bw = held ? 0 : 1, bg = op == 0 && held ? 2 : 1;
  return (K * bg > 1 ? KEEP_GRAD : 0) | (K * (fw + bw) > 1 ? KEEP_WEIGHT : 0);
}

/* The cost of one op configuration from the reference formulas (rec: the op is recomputed). */
static void ref_op(const GptDesc* d, const DeviceInfo* dev, int op, int rec, const OpPlan* o,
                   size_t* mem, size_t* tr, double* t) {
  *mem = 0;
  *tr = 0;
  *t = 0;
  int held = gpt_op_held(d, op);
  size_t all = 0; /* held: every slice's transient at once */
  for (int s = 0; s < o->k; s++) {
    size_t m, r;
    double x;
    ref_slice(dev, op, rec, held, gpt_slice_params(&d->ops[op], o->k, s), o->strat[s], o->group,
              o->keep, &m, &r, &x);
    *mem += m;
    *t += x;
    all += r;
    if (r > *tr) *tr = r;
  }
  if (held) *tr = all;
}

/* The dp exposure for a model whose dp gradients fit one 16 MiB bucket, on a device without
** overlap: the replay waits for one all-reduce of all the bytes; the search model counts each
** slice's share of a full bucket's all-reduce (latency shared out by bytes); the factor makes
** the all-dp plan agree. */
static double ref_exposure_of(const GptDesc* d, const DeviceInfo* dev) {
  if (dev->ranks <= 1) return 1;
  double bytes = 4.0 * (double)d->n_params, f = ref_factor(dev, COLL_ALLREDUCE), mib16 = 16.0 * 1048576.0;
  int N = dev->ranks;
  return ref_group(dev, COLL_ALLREDUCE, N, f * bytes) / (bytes * ref_group(dev, COLL_ALLREDUCE, N, f * mib16) / mib16);
}

/* The shard groups of the design: the divisors G > 1 of N with G <= H dividing H or G a
** multiple of H (N itself on one rank), or o's fixed group. */
static int ref_groups(const DeviceInfo* dev, const SearchOptions* o, int* out) {
  int N = dev->ranks, H = ref_hosts(dev), n = 0;
  if (o->shard_group > 0) { out[0] = o->shard_group; return 1; }
  for (int G = 1; G <= N; G++)
    if (N % G == 0 && (G > 1 || N == 1) && ((G <= H && H % G == 0) || G % H == 0)) out[n++] = G;
  return n;
}

/* Activations + scratch and compute time at micro-batch B (with the gradient norm's
** all-reduce), from the model description, with the layers flagged in rec (NULL: none)
** recomputed: their ln1 .. gelu blocks move into one shared buffer (blocks 64-byte aligned, in
** layer order) and their forwards run again at a third of the op's time. */
static void ref_batch(const GptDesc* d, const DeviceInfo* dev, int B, int T, const int* rec,
                      size_t* bytes, double* comp) {
  *bytes = gpt_scratch_bytes(d, B, T, PRECISION_FP32, dev->threads, 0);
  *comp = 0;
  int any = 0;
  for (int i = 0; i < d->nops; i++) {
    double t = 3.0 * gpt_op_flops_per_token(d, &d->ops[i], T) * B * T / dev->flops;
    *comp += ref_accum * t;
    if (ref_recomputed(d, rec, i)) { any = 1; *comp += ref_accum * t / 3; continue; }
    *bytes += gpt_op_act_bytes(d, &d->ops[i], B, T, PRECISION_FP32);
  }
  size_t off = 0, end = 0;
  for (int j = GPT_LN1; any && j <= GPT_GELU; j++) {
    size_t a = gpt_op_act_bytes(d, &d->ops[gpt_op_layer(0, j)], B, T, PRECISION_FP32);
    end = off + a;
    off = (end + 63) / 64 * 64;
  }
  *bytes += end;
  *comp += ref_group(dev, COLL_ALLREDUCE, dev->ranks, 16.0); /* the gradient norm */
}

/* plan_cost (the replay, on a device without overlap) and the search model of plan p against
** the reference formulas: memory summed independently (with overlap_reduce: at least that, and
** plan_predict_memory's); the replay waits for every collective (a recomputed layer's zero3
** slices gather once more; with overlap_reduce the reduce-scatters wait later, as long) and for
** the one dp bucket at full length; the search model prices dp with the exposure factor; both
** equal when the plan has no dp slice, with hybrid groups, bf16 reductions, overlap_reduce or
** recomputation. */
static void check_plan_cost(const GptDesc* d, const DeviceInfo* dev, const Plan* p) {
  PlanCost c;
  CHECK(plan_cost(d, dev, p, &c) == 0);
  size_t mem = 0, tr = 0, bytes, ndp = 0;
  double t = 0, t_sharded = 0, comp, saved_exposure = ref_exposure;
  ReduceDtype saved_reduce = ref_reduce; /* the caller's, restored at the end */
  ref_reduce = p->reduce_dtype;
  ref_accum = plan_accum(p);
  ref_exposure = ref_exposure_of(d, dev);
  for (int i = 0; i < d->nops; i++) {
    if (!d->ops[i].n_params) continue;
    size_t a, r;
    double x;
    int rec = ref_recomputed(d, p->recompute, i);
    ref_op(d, dev, i, rec, &p->ops[i], &a, &r, &x);
    mem += a;
    t += x;
    if (r > tr) tr = r;
    for (int s = 0; s < p->ops[i].k; s++) { /* the replay: sharded slices as in the formulas */
      size_t n = gpt_slice_params(&d->ops[i], p->ops[i].k, s), m2, r2;
      double x2;
      ref_slice(dev, i, rec, gpt_op_held(d, i), n, p->ops[i].strat[s], p->ops[i].group,
                p->ops[i].keep, &m2, &r2, &x2);
      if (p->ops[i].strat[s] == STRAT_DP) {
        ndp += n;
        x2 = (double)n * dev->optimizer_s_per_param; /* its all-reduce is the bucket's, below */
      }
      t_sharded += x2;
    }
  }
  ref_batch(d, dev, p->micro_batch, p->seq, p->recompute, &bytes, &comp);
  double f = ref_factor(dev, COLL_ALLREDUCE);
  double bucket = ndp ? ref_group(dev, COLL_ALLREDUCE, dev->ranks, f * 4.0 * (double)ndp) : 0;
  MemPrediction pm;
  plan_predict_memory(d, p, dev->threads, &pm);
  CHECK(memcmp(&pm, &c.mem, sizeof pm) == 0);
  if (p->overlap_reduce) CHECK(c.mem.peak >= mem + tr + bytes);
  else CHECK(c.mem.peak == mem + tr + bytes);
  CHECK_MSG(rel_diff(c.step_s, comp + t_sharded + bucket) < 1e-12, "replay %.17g vs %.17g", c.step_s,
            comp + t_sharded + bucket);
  CHECK(c.hidden_s == 0);
  double ts = cost_search_step_s(d, dev, p);
  CHECK_MSG(rel_diff(ts, comp + t) < 1e-12, "search model %.17g vs %.17g", ts, comp + t);
  if (ndp == 0) CHECK_MSG(rel_diff(ts, c.step_s) < 1e-12, "no dp: search %.17g, replay %.17g", ts, c.step_s);
  CHECK(rel_diff(c.samples_per_s, dev->ranks * p->micro_batch * ref_accum / c.step_s) < 1e-12);
  CHECK(c.micro_batch == p->micro_batch && c.accum == ref_accum);
  ref_accum = 1;
  ref_reduce = saved_reduce;
  ref_exposure = saved_exposure;
}

/* Whether plan p has a zero3 slice. */
static int has_zero3(const Plan* p) {
  for (int i = 0; i < p->nops; i++)
    for (int j = 0; j < p->ops[i].k; j++)
      if (p->ops[i].strat[j] == STRAT_ZERO3) return 1;
  return 0;
}

/* The candidates prefetch their zero3 gathers exactly where the replay finds it at least
** PLANNER_PREFETCH_MIN_GAIN faster (their other options as chosen), over prefetched gathers'
** overlap rates from none to full; some rate gives a gain below the margin (faster, yet
** blocking), some one above it. */
static void check_prefetch_margin(const GptDesc* d, DeviceInfo* dev) {
  SearchOptions o;
  planner_default_options(&o, 16);
  int on = 0, below = 0;
  double flops = dev->flops;
  dev->flops = 1e11; /* gathers worth hiding */
  dev->coll[COLL_ALLGATHER].in_step = 3;
  for (int r = 0; r <= 4; r++) {
    dev->coll[COLL_ALLGATHER].overlap = r == 0 ? 0 : pow(4.0, r - 4); /* 0, 1/64 .. 1 */
    Candidate cand[8];
    int n = planner_candidates(d, dev, &o, cand, 8, NULL, NULL);
    CHECK(n > 0);
    for (int i = 0; i < n; i++) {
      Plan q;
      PlanCost off, pf;
      CHECK(plan_copy(&q, &cand[i].plan) == 0);
      q.prefetch = 0;
      CHECK(plan_cost(d, dev, &q, &off) == 0);
      q.prefetch = 1;
      CHECK(plan_cost(d, dev, &q, &pf) == 0);
      double judged = pf.step_s * (1 + PLANNER_PREFETCH_MIN_GAIN);
      if (cand[i].plan.prefetch) {
        on++;
        CHECK_MSG(judged < off.step_s, "%s prefetches at %.6g s against %.6g blocking", cand[i].origin, pf.step_s,
                  off.step_s);
      } else if (has_zero3(&q) && pf.mem.peak <= dev->mem_limit) {
        below += pf.step_s < off.step_s;
        CHECK_MSG(judged >= off.step_s * (1 - 1e-12), "%s blocks at %.6g s against %.6g prefetching",
                  cand[i].origin, off.step_s, pf.step_s);
      }
      plan_free(&q);
      plan_free(&cand[i].plan);
    }
  }
  CHECK_MSG(on > 0 && below > 0, "prefetching candidates %d, faster with prefetch yet blocking %d", on, below);
  dev->coll[COLL_ALLGATHER].overlap = 0;
  dev->coll[COLL_ALLGATHER].in_step = 1;
  dev->flops = flops;
}

/* Overlap: with the channel running beside compute, the replay hides part of the dp
** all-reduce (never more than it would wait without overlap) and prefetched zero3 gathers;
** the fitted factor makes the search model agree with the replay on the all-dp plan. */
static void test_overlap(void) {
  GptConfig cfg = make_config("wide", 2, 512, 2, 64, 16); /* 12.6 MB per layer: 2 buckets */
  GptDesc d;
  CHECK(gpt_desc_build(&d, &cfg) == 0);
  DeviceInfo dev = make_device(2, (size_t)1 << 30, 1e9); /* slow compute: room to overlap */
  Plan p;
  PlanCost c0, c1;
  plan_uniform(&p, &d, STRAT_DP, 2, 2, 16);
  CHECK(plan_dp_buckets(&d, &p, PLAN_BUCKET_BYTES, NULL) >= 2);
  CHECK(plan_cost(&d, &dev, &p, &c0) == 0);
  dev.coll[COLL_ALLREDUCE].overlap = 0.5;
  CHECK(plan_cost(&d, &dev, &p, &c1) == 0);
  CHECK(c1.hidden_s > 0 && c1.exposed_s[COLL_ALLREDUCE] < c0.exposed_s[COLL_ALLREDUCE]);
  CHECK_NEAR(c1.hidden_s + c1.exposed_s[COLL_ALLREDUCE], c0.exposed_s[COLL_ALLREDUCE], 1e-15);
  CHECK_NEAR(cost_search_step_s(&d, &dev, &p), c1.step_s, 1e-12 * c1.step_s);
  plan_free(&p);
  /* zero3 with prefetch: the next gather runs beside compute; memory grows, time falls. */
  plan_uniform(&p, &d, STRAT_ZERO3, 2, 2, 16);
  dev.coll[COLL_ALLGATHER].overlap = 1;
  CHECK(plan_cost(&d, &dev, &p, &c0) == 0);
  p.prefetch = 1;
  CHECK(plan_cost(&d, &dev, &p, &c1) == 0);
  CHECK(c1.exposed_s[COLL_ALLGATHER] < c0.exposed_s[COLL_ALLGATHER] && c1.step_s < c0.step_s);
  CHECK(c1.mem.transient > c0.mem.transient);
  dev.coll[COLL_ALLGATHER].overlap = 0; /* no progress beside compute: prefetch gains nothing */
  CHECK(plan_cost(&d, &dev, &p, &c1) == 0);
  CHECK_NEAR(c1.step_s, c0.step_s, 1e-12 * c0.step_s);
  /* Prefetched gathers twice as slow inside a step as blocking ones (async_in_step): prefetch
  ** without overlap costs the gathers' time again. */
  dev.coll[COLL_ALLGATHER].in_step = 1;
  dev.coll[COLL_ALLGATHER].async_in_step = 2;
  CHECK(plan_cost(&d, &dev, &p, &c1) == 0);
  CHECK(c1.exposed_s[COLL_ALLGATHER] > 1.5 * c0.exposed_s[COLL_ALLGATHER] && c1.step_s > c0.step_s);
  p.prefetch = 0;
  CHECK(plan_cost(&d, &dev, &p, &c1) == 0); /* blocking gathers keep in_step */
  CHECK_NEAR(c1.step_s, c0.step_s, 1e-12 * c0.step_s);
  dev.coll[COLL_ALLGATHER].async_in_step = 0;
  plan_free(&p);
  check_prefetch_margin(&d, &dev);
  gpt_desc_free(&d);
}

/* A random plan: random slice count and strategies per op, random layers recomputed. */
static void random_plan(const GptDesc* d, int world, int B, int T, Rng* r, Plan* p) {
  plan_uniform(p, d, STRAT_DP, world, B, T);
  p->accum = 1 + (int)rng_below(r, 3); /* 1..3 micro-steps */
  for (int l = 0; l < p->nlayers; l++) p->recompute[l] = rng_below(r, 2) == 0;
  for (int i = 0; i < d->nops; i++) {
    if (!d->ops[i].n_params) continue;
    int k = 1 << rng_below(r, 4);
    while (k > 1 && (!d->ops[i].splittable || (size_t)k > d->ops[i].rows)) k /= 2;
    p->ops[i].k = k;
    for (int s = 0; s < k; s++) p->ops[i].strat[s] = (Strategy)rng_below(r, 3);
  }
}

/* A device of N ranks, H per host (0: one host), whose inter-host level (given when H < N) is
** about `slow` times slower than make_device's intra-host one, differently for each kind. */
static DeviceInfo make_hosts_device(int N, int H, size_t limit, double flops, double slow) {
  DeviceInfo dev = make_device(N, limit, flops);
  dev.ranks_per_host = H;
  for (int k = 0; k < COLL_COUNT; k++) {
    dev.inter[k] = dev.coll[k];
    dev.inter[k].bandwidth_Bps /= slow * (1 + 0.25 * k);
    dev.inter[k].latency_s *= 2 + k;
    dev.inter_given[k] = H > 0 && H < N;
  }
  return dev;
}

/* Randomises plan p's hybrid settings: each op's shard group any divisor of N (the world as
** 0), the reduce dtype and overlap_reduce. */
static void random_hybrid(const GptDesc* d, int N, Rng* r, Plan* p) {
  int div[32], nd = 0;
  for (int G = 1; G <= N; G++) if (N % G == 0 && nd < 32) div[nd++] = G;
  for (int i = 0; i < d->nops; i++) {
    int G = div[rng_below(r, (uint64_t)nd)];
    p->ops[i].group = G == N ? 0 : G;
  }
  p->reduce_dtype = rng_below(r, 2) ? REDUCE_BF16 : REDUCE_FP32;
  p->overlap_reduce = (int)rng_below(r, 2);
}

/* plan_cost on random plans of several models and rank counts, flat and (on 1..6 ranks with
** every host size) with random shard groups, reduce dtypes and overlap_reduce. */
static void test_cost_model(void) {
  GptConfig cfgs[] = {make_config("odd", 1, 6, 2, 20, 8), make_config("two", 2, 8, 2, 50, 16)};
  Rng r;
  rng_seed(&r, 7);
  for (int c = 0; c < 2; c++) {
    GptDesc d;
    CHECK(gpt_desc_build(&d, &cfgs[c]) == 0);
    for (int N = 1; N <= 5; N++)
      for (int trial = 0; trial < 20; trial++) {
        DeviceInfo dev = make_device(N, (size_t)1 << 30, 1e8);
        Plan p;
        random_plan(&d, N, 1 + (int)rng_below(&r, 4), cfgs[c].max_seq, &r, &p);
        check_plan_cost(&d, &dev, &p);
        plan_free(&p);
      }
    for (int N = 1; N <= 6; N++)
      for (int H = 1; H <= N; H++)
        for (int trial = 0; N % H == 0 && trial < 12; trial++) {
          DeviceInfo dev = make_hosts_device(N, H, (size_t)1 << 30, 1e8, 7);
          Plan p;
          random_plan(&d, N, 1 + (int)rng_below(&r, 4), cfgs[c].max_seq, &r, &p);
          random_hybrid(&d, N, &r, &p);
          check_plan_cost(&d, &dev, &p);
          plan_free(&p);
        }
    gpt_desc_free(&d);
  }
}

/* Hybrid plans in the replay: overlap_reduce hides reduce-scatters beside the next gradient
** use (less waiting, a larger transient: the full gradient stays live until then), and gains
** nothing when the reduce-scatter cannot progress beside compute; bf16 halves every gradient
** reduction's bytes (with no latency: half the time) but not the gathers; the across-group
** exposure is the share of the all-dp plan's all-reduce work left exposed. */
static void test_hybrid_cost(void) {
  GptConfig cfg = make_config("wide", 2, 512, 2, 64, 16);
  GptDesc d;
  CHECK(gpt_desc_build(&d, &cfg) == 0);
  DeviceInfo dev = make_hosts_device(4, 2, (size_t)1 << 32, 1e9, 4);
  Plan p;
  PlanCost c0, c1;
  plan_uniform(&p, &d, STRAT_ZERO2, 4, 2, 16);
  plan_set_group(&p, 2);
  CHECK(plan_cost(&d, &dev, &p, &c0) == 0);
  check_plan_cost(&d, &dev, &p);
  CHECK(c0.exposed_s[COLL_ALLREDUCE] > 0); /* the shards' all-reduces across the 2 hosts */
  p.overlap_reduce = 1;
  CHECK(plan_cost(&d, &dev, &p, &c1) == 0);
  CHECK_NEAR(c1.step_s, c0.step_s, 1e-12 * c0.step_s); /* no progress beside compute */
  CHECK(c1.mem.transient > c0.mem.transient);
  dev.coll[COLL_REDUCE_SCATTER].overlap = 1;
  CHECK(plan_cost(&d, &dev, &p, &c1) == 0);
  CHECK(c1.step_s < c0.step_s && c1.hidden_s > 0 && c1.exposed_s[COLL_REDUCE_SCATTER] < c0.exposed_s[COLL_REDUCE_SCATTER]);
  CHECK_NEAR(c1.hidden_s + c1.exposed_s[COLL_REDUCE_SCATTER], c0.exposed_s[COLL_REDUCE_SCATTER], 1e-12);
  dev.coll[COLL_REDUCE_SCATTER].overlap = 0;
  p.overlap_reduce = 0;
  /* bf16 with no latency: gradient reductions take half as long, gathers as long. */
  for (int l = 0; l < LINK_LEVELS; l++)
    for (int k = 0; k < COLL_COUNT; k++) (l ? dev.inter : dev.coll)[k].latency_s = 0;
  plan_free(&p);
  plan_uniform(&p, &d, STRAT_ZERO3, 4, 2, 16);
  plan_set_group(&p, 2);
  p.ops[gpt_op_layer(1, GPT_FC)].strat[0] = STRAT_DP; /* and a dp bucket */
  CHECK(plan_cost(&d, &dev, &p, &c0) == 0);
  p.reduce_dtype = REDUCE_BF16;
  CHECK(plan_cost(&d, &dev, &p, &c1) == 0);
  CHECK_NEAR(c1.exposed_s[COLL_REDUCE_SCATTER], 0.5 * c0.exposed_s[COLL_REDUCE_SCATTER], 1e-15);
  CHECK_NEAR(c1.exposed_s[COLL_ALLREDUCE], 0.5 * c0.exposed_s[COLL_ALLREDUCE], 1e-15);
  CHECK(c1.exposed_s[COLL_ALLGATHER] == c0.exposed_s[COLL_ALLGATHER] && c1.mem.peak == c0.mem.peak);
  check_plan_cost(&d, &dev, &p);
  /* A measured bf16 factor (conversions cost more than the bytes save: shared memory) prices
  ** bf16 reductions above fp32's, and the separable model agrees with the replay. */
  dev.coll[COLL_REDUCE_SCATTER].bf16_factor = 1.5;
  dev.coll[COLL_ALLREDUCE].bf16_factor = 1.25;
  CHECK(plan_cost(&d, &dev, &p, &c1) == 0);
  CHECK_NEAR(c1.exposed_s[COLL_REDUCE_SCATTER], 1.5 * c0.exposed_s[COLL_REDUCE_SCATTER], 1e-15);
  CHECK_NEAR(c1.exposed_s[COLL_ALLREDUCE], 1.25 * c0.exposed_s[COLL_ALLREDUCE], 1e-15);
  CHECK(c1.step_s > c0.step_s);
  check_plan_cost(&d, &dev, &p);
  CHECK(device_reduce_factor(&dev, COLL_REDUCE_SCATTER, 0) == 1 &&
        device_reduce_factor(&dev, COLL_ALLGATHER, 1) == 0.5);
  plan_free(&p);
  /* The exposures: dp calibrates the all-dp plan; across is its exposed share of the work. */
  dev = make_hosts_device(4, 2, (size_t)1 << 32, 1e9, 4);
  dev.inter[COLL_ALLREDUCE].overlap = 0.5;
  plan_uniform(&p, &d, STRAT_DP, 4, 2, 16);
  CHECK(plan_cost(&d, &dev, &p, &c0) == 0);
  double dp, across;
  cost_exposures(&d, &dev, 2, 16, REDUCE_FP32, &dp, &across);
  CHECK(c0.hidden_s > 0 && across < 1);
  CHECK_NEAR(across, c0.exposed_s[COLL_ALLREDUCE] / (c0.exposed_s[COLL_ALLREDUCE] + c0.hidden_s), 1e-15);
  CHECK_NEAR(cost_search_step_s(&d, &dev, &p), c0.step_s, 1e-12 * c0.step_s);
  CHECK(dp == cost_dp_exposure(&d, &dev, 2, 16));
  plan_free(&p);
  gpt_desc_free(&d);
}

/* ---- 3. Per-operator configurations ----------------------------------------------------------- */

/* Every configuration of op: all slice counts allowed, all assignments of the allowed
** strategies, and every combination of the KEEP_* bits its slices can use that o allows (rec: the
** op is recomputed). Returns the count; *out malloc'ed. */
static int all_configs(const GptDesc* d, const DeviceInfo* dev, const SearchOptions* o, int op,
                       int rec, OpConfig** out) {
  Strategy al[STRAT_COUNT];
  int na = 0, n = 0, cap = 64, groups[64], ng = ref_groups(dev, o, groups);
  for (int s = 0; s < STRAT_COUNT; s++) if (o->allow[s]) al[na++] = (Strategy)s;
  OpConfig* v = malloc((size_t)cap * sizeof *v);
  for (int k = 1; k <= GPT_MAX_SLICES; k *= 2) {
    if (k > 1 && (!d->ops[op].splittable || (size_t)k > d->ops[op].rows || k > o->max_slices)) continue;
    long total = 1;
    for (int s = 0; s < k; s++) total *= na;
    for (long code = 0; code < total; code++)
      for (int g = 0; g < ng; g++) {
        OpPlan pl = {.k = k};
        long x = code;
        int sharded = 0;
        for (int s = 0; s < k; s++, x /= na) sharded |= (pl.strat[s] = al[x % na]) != STRAT_DP;
        if (!sharded && g > 0) break; /* an all-dp assignment has no group */
        pl.group = sharded && groups[g] != dev->ranks ? groups[g] : 0;
        int can = 0;
        for (int s = 0; s < k; s++)
          can |= (pl.strat[s] != STRAT_DP ? KEEP_GRAD : 0) | (pl.strat[s] == STRAT_ZERO3 ? KEEP_WEIGHT : 0);
        for (int keep = 0; keep <= KEEP_ALL; keep++) {
          if (keep & ~(can & ~o->keep_off)) continue;
          if (n == cap) v = realloc(v, (size_t)(cap *= 2) * sizeof *v);
          OpConfig* c = &v[n++];
          memset(c, 0, sizeof *c);
          c->plan = pl;
          c->plan.keep = keep;
          ref_op(d, dev, op, rec, &c->plan, &c->mem, &c->transient, &c->time_s);
        }
      }
  }
  *out = v;
  return n;
}

/* Whether a is no worse than b in every cost (time within 1e-12). */
static int covers(const OpConfig* a, const OpConfig* b) {
  return a->mem <= b->mem && a->transient <= b->transient && a->time_s <= b->time_s * (1 + 1e-12);
}

/* planner_op_configs of every op against the full enumeration, with the layers flagged in
** flags (NULL: none) recomputed. */
static void check_op_configs_with(const GptDesc* d, const DeviceInfo* dev, const SearchOptions* o,
                                  const int* flags) {
  ref_reduce = o->reduce_dtype == REDUCE_BF16 ? REDUCE_BF16 : REDUCE_FP32;
  ref_exposure = ref_exposure_of(d, dev);
  for (int op = 0; op < d->nops; op++) {
    if (!d->ops[op].n_params) continue;
    OpConfig *mine, *all;
    int rec = ref_recomputed(d, flags, op);
    int n = planner_op_configs(d, dev, o, op, 1, flags, &mine), na = all_configs(d, dev, o, op, rec, &all);
    CHECK(n >= 1);
    for (int i = 0; i < n; i++) { /* real configurations with their true costs */
      size_t m, tr;
      double t;
      ref_op(d, dev, op, rec, &mine[i].plan, &m, &tr, &t);
      CHECK(m == mine[i].mem && tr == mine[i].transient && rel_diff(t, mine[i].time_s) < 1e-12);
      for (int s = 0; s < mine[i].plan.k; s++) CHECK(o->allow[mine[i].plan.strat[s]]);
      for (int j = 0; j < n; j++)
        if (j != i) CHECK_MSG(!covers(&mine[j], &mine[i]) || !covers(&mine[i], &mine[j]) ? 1 : 0,
                              "op %d: configs %d and %d are equivalent", op, i, j);
    }
    /* Keeping where it saves no communication only moves bytes from the transient to what is
    ** held, which never lowers a peak: the search does not offer it. */
    int lost = 0, useless = ~ref_keep_worth(op, rec, gpt_op_held(d, op), ref_accum) & KEEP_ALL;
    for (int a = 0; a < na; a++) {
      if (all[a].plan.keep & useless) continue;
      int ok = 0;
      for (int i = 0; i < n && !ok; i++) ok = covers(&mine[i], &all[a]);
      lost += !ok;
    }
    CHECK_MSG(lost == 0, "op %s: %d of %d configurations not covered", d->ops[op].name, lost, na);
    free(mine);
    free(all);
  }
  ref_reduce = REDUCE_FP32;
}

/* planner_op_configs of every op against the full enumeration, recomputed and not. */
static void check_op_configs(const GptDesc* d, const DeviceInfo* dev, const SearchOptions* o) {
  int all[1] = {1};
  check_op_configs_with(d, dev, o, NULL);
  check_op_configs_with(d, dev, o, all);
}

/* Configurations on models with uneven slices (rows 6 in 4 slices, 24 in 8), several N. */
static void test_op_configs(void) {
  GptConfig cfg = make_config("odd", 1, 6, 2, 20, 8);
  GptDesc d;
  CHECK(gpt_desc_build(&d, &cfg) == 0);
  SearchOptions o;
  planner_default_options(&o, 8);
  for (int N = 1; N <= 4; N++) {
    DeviceInfo dev = make_device(N, 1 << 30, 1e8);
    check_op_configs(&d, &dev, &o);
    o.allow[STRAT_DP] = 0;
    check_op_configs(&d, &dev, &o);
    o.allow[STRAT_DP] = 1;
    o.max_slices = 2;
    check_op_configs(&d, &dev, &o);
    o.max_slices = 8;
  }
  gpt_desc_free(&d);
}

/* ---- 4. Search against brute force ------------------------------------------------------------- */

#define BF_MAX_OPS 32
#define BF_MAX_LIMITS 10
#define BF_MAX_B 16
#define BF_MAX_LAYERS 2

/* The brute-force search: every configuration of every op, every micro-batch, every number of
** recomputed layers (the first R). */
typedef struct Brute {
  int nops, op[BF_MAX_OPS];          /* parameter ops */
  OpConfig* cfg[2][BF_MAX_OPS];      /* all configurations of each: as it is, and recomputed */
  double* micro[2][BF_MAX_OPS];      /* of each configuration's time, the part every micro-step
                                     ** repeats (the rest is once a step) */
  int ncfg[BF_MAX_OPS];
  long G;                            /* the global batch (0: none, K = 1) */
  int rec[BF_MAX_OPS];               /* whether op i is recomputed at the current R */
  int cur[BF_MAX_OPS];
  int N, maxb, nlim, maxr, R;        /* ranks, largest B, limits, largest R, current R */
  size_t lim[BF_MAX_LIMITS];
  size_t batch[BF_MAX_LAYERS + 1][BF_MAX_B + 1];
  double comp[BF_MAX_LAYERS + 1][BF_MAX_B + 1]; /* one micro-step's compute and the norm */
  double norm;                       /* the gradient norm's all-reduce (once a step) */
  double best[BF_MAX_LIMITS];        /* samples/s, 0: nothing fits */
  size_t best_peak[BF_MAX_LIMITS];
  int best_B[BF_MAX_LIMITS], best_R[BF_MAX_LIMITS], best_cfg[BF_MAX_LIMITS][BF_MAX_OPS];
  size_t min_need;                   /* least persistent + transient of any plan */
  long leaves;
} Brute;

/* The micro-steps of micro-batch B for brute force b: G / (N B), 0 when that is no whole
** number, 1 without a global batch. */
static int brute_accum(const Brute* b, int B) {
  if (!b->G) return 1;
  return b->G % ((long)b->N * B) ? 0 : (int)(b->G / ((long)b->N * B));
}

/* Evaluates one complete assignment (time t of one micro-step, of which tm repeats each
** micro-step) at every micro-batch for every limit (at b->R). */
static void brute_leaf(Brute* b, size_t mem, size_t tr, double t, double tm) {
  b->leaves++;
  if (mem + tr < b->min_need) b->min_need = mem + tr;
  for (int l = 0; l < b->nlim; l++)
    for (int B = 1; B <= b->maxb; B++) {
      size_t peak = mem + tr + b->batch[b->R][B];
      if (peak > b->lim[l]) break;
      int K = brute_accum(b, B);
      if (K == 0) continue;
      double comp = K * (b->comp[b->R][B] - b->norm) + b->norm;
      double sps = (double)b->N * B * K / (comp + t + (K - 1) * tm);
      int better = b->best[l] == 0 || sps > b->best[l] * (1 + 1e-13) ||
                   (sps >= b->best[l] * (1 - 1e-13) && peak < b->best_peak[l]);
      if (!better) continue;
      b->best[l] = sps;
      b->best_peak[l] = peak;
      b->best_B[l] = B;
      b->best_R[l] = b->R;
      memcpy(b->best_cfg[l], b->cur, sizeof b->cur);
    }
}

/* Tries every configuration of op i and recurses. */
static void brute_rec(Brute* b, int i, size_t mem, size_t tr, double t, double tm) {
  if (i == b->nops) { brute_leaf(b, mem, tr, t, tm); return; }
  for (int j = 0; j < b->ncfg[i]; j++) {
    const OpConfig* c = &b->cfg[b->rec[i]][i][j];
    b->cur[i] = j;
    brute_rec(b, i + 1, mem + c->mem, c->transient > tr ? c->transient : tr, t + c->time_s,
              tm + b->micro[b->rec[i]][i][j]);
  }
}

/* The plan the brute force found for limit l. */
static void brute_plan(const Brute* b, const GptDesc* d, int l, int T, Plan* p) {
  plan_uniform(p, d, STRAT_DP, b->N, b->best_B[l], T);
  p->accum = brute_accum(b, b->best_B[l]);
  for (int i = 0; i < b->nops; i++) p->ops[b->op[i]] = b->cfg[0][i][b->best_cfg[l][i]].plan;
  plan_set_recompute(p, b->best_R[l]);
  p->reduce_dtype = ref_reduce;
}

/* Complete plans the brute force evaluated, and optima that recompute or shard an op over
** fewer ranks than the world, over all instances. */
static long brute_leaves, brute_recomputing, brute_hybrid, brute_keeping;

/* The first R of a model's layers flagged (up to BF_MAX_LAYERS). */
static const int* first_flags(int R) {
  static int f[BF_MAX_LAYERS];
  for (int l = 0; l < BF_MAX_LAYERS; l++) f[l] = l < R;
  return f;
}

/* The part of each configuration's time the reference formulas repeat every micro-step: the
** difference of its time at 2 micro-steps and at 1. */
static double* micro_parts(const GptDesc* d, const DeviceInfo* dev, int op, int rec,
                           const OpConfig* one, int n) {
  double* m = malloc((size_t)n * sizeof *m);
  ref_accum = 2;
  for (int j = 0; j < n; j++) {
    size_t mem, tr;
    ref_op(d, dev, op, rec, &one[j].plan, &mem, &tr, &m[j]);
    m[j] -= one[j].time_s;
  }
  ref_accum = 1;
  return m;
}

/* Fills the brute force's tables: per op all configurations (recomputed and not) and their
** per-micro-step parts, per R and B the batch bytes and compute; then evaluates every plan at
** every R. */
static void brute_run(Brute* b, const GptDesc* d, const DeviceInfo* dev, const SearchOptions* o) {
  int all[BF_MAX_LAYERS] = {1, 1};
  b->G = o->global_batch;
  b->norm = ref_group(dev, COLL_ALLREDUCE, dev->ranks, 16.0);
  for (int R = 0; R <= b->maxr; R++)
    for (int B = 1; B <= b->maxb; B++)
      ref_batch(d, dev, B, o->seq, first_flags(R), &b->batch[R][B], &b->comp[R][B]);
  for (int i = 0; i < d->nops; i++)
    if (d->ops[i].n_params) {
      int n = b->nops, rec = ref_recomputed(d, all, i);
      b->op[n] = i;
      b->ncfg[n] = all_configs(d, dev, o, i, 0, &b->cfg[0][n]);
      all_configs(d, dev, o, i, rec, &b->cfg[1][n]);
      b->micro[0][n] = micro_parts(d, dev, i, 0, b->cfg[0][n], b->ncfg[n]);
      b->micro[1][n] = micro_parts(d, dev, i, rec, b->cfg[1][n], b->ncfg[n]);
      b->nops++;
    }
  for (b->R = 0; b->R <= b->maxr; b->R++) {
    for (int i = 0; i < b->nops; i++) b->rec[i] = ref_recomputed(d, first_flags(b->R), b->op[i]);
    brute_rec(b, 0, 0, 0, 0, 0);
  }
}

/* The uniform plans against the search's samples/s sps (search model): planner_best_uniform
** succeeds exactly when the plan fits at micro-batch 1 with no or all allowed layers
** recomputed (checked independently), and is never faster. */
static void check_uniform_slower(const GptDesc* d, const DeviceInfo* dev, const SearchOptions* o,
                                 int maxr, double sps) {
  int N = dev->ranks;
  for (int s = 0; s < STRAT_COUNT; s++) {
    if (!o->allow[s]) continue;
    Plan up, u1;
    PlanCost uc, c0, c1;
    plan_uniform(&u1, d, (Strategy)s, N, 1, o->seq);
    CHECK(plan_cost(d, dev, &u1, &c0) == 0);
    plan_set_recompute(&u1, maxr);
    CHECK(plan_cost(d, dev, &u1, &c1) == 0);
    plan_free(&u1);
    int fits = c0.mem.peak <= dev->mem_limit || c1.mem.peak <= dev->mem_limit;
    int rcu = planner_best_uniform(d, dev, o, (Strategy)s, &up, &uc);
    CHECK_MSG((rcu == 0) == fits, "uniform %s: rc %d, peak at B=1 %zu / %zu", strategy_name((Strategy)s),
              rcu, c0.mem.peak, c1.mem.peak);
    if (rcu != 0) continue;
    CHECK(uc.mem.peak <= dev->mem_limit && up.micro_batch == uc.micro_batch);
    CHECK(plan_recompute_count(&up) <= maxr);
    CHECK(!o->global_batch || plan_global_batch(&up) == o->global_batch);
    double us = (double)plan_global_batch(&up) / cost_search_step_s(d, dev, &up);
    CHECK_MSG(sps >= us * (1 - 1e-12), "uniform %s %.9g > %.9g", strategy_name((Strategy)s), us, sps);
    plan_free(&up);
  }
}

/* The search's plan p for limit l of brute force b: the same samples/s under the search model,
** within the limit and the options, its cost as the reference formulas say. */
static void check_found(const Brute* b, const GptDesc* d, const DeviceInfo* dev, const SearchOptions* o,
                        int l, const Plan* p, const PlanCost* c) {
  int N = dev->ranks;
  double sps = (double)plan_global_batch(p) / cost_search_step_s(d, dev, p); /* search model */
  CHECK(!o->global_batch || plan_global_batch(p) == o->global_batch);
  CHECK_MSG(rel_diff(sps, b->best[l]) <= 1e-12,
            "%s N=%d limit %zu: search %.15g samples/s (B=%d, R=%d, peak %zu), brute force %.15g "
            "(B=%d, R=%d, peak %zu)", d->cfg.name, N, b->lim[l], sps, c->micro_batch,
            plan_recompute_count(p), c->mem.peak, b->best[l], b->best_B[l], b->best_R[l], b->best_peak[l]);
  CHECK(c->mem.peak <= dev->mem_limit && plan_validate(p, d, N) == 0);
  CHECK(plan_recompute_count(p) <= b->maxr);
  check_plan_cost(d, dev, p);
  for (int i = 0; i < d->nops; i++) {
    CHECK(p->ops[i].k <= o->max_slices);
    for (int s = 0; s < p->ops[i].k && d->ops[i].n_params; s++) CHECK(o->allow[p->ops[i].strat[s]]);
  }
  Plan bp;
  brute_plan(b, d, l, o->seq, &bp);
  PlanCost bc;
  CHECK(plan_cost(d, dev, &bp, &bc) == 0);
  CHECK(bc.mem.peak == b->best_peak[l] &&
        rel_diff((double)plan_global_batch(&bp) / cost_search_step_s(d, dev, &bp), b->best[l]) < 1e-12);
  plan_free(&bp);
  check_uniform_slower(d, dev, o, b->maxr, sps);
  for (int i = 0; i < d->nops; i++) { /* explanations for sharded ops */
    int sharded = 0;
    for (int s = 0; s < p->ops[i].k; s++) sharded |= p->ops[i].strat[s] != STRAT_DP;
    if (!sharded || !d->ops[i].n_params) continue;
    char why[256];
    planner_explain(d, dev, o, p, i, why, sizeof why);
    CHECK_MSG(why[0] != 0 && strchr(why, '\n') == NULL, "explanation: '%s'", why);
  }
}

/* One instance on device dev (its limit set here): model cfg (built as d), options o, limits
** placed between the least memory and the all-dp plan at the largest micro-batch. */
static void check_against_brute_on(const GptConfig* cfg, const SearchOptions* o, GptDesc* d, DeviceInfo* dev) {
  int N = dev->ranks;
  ref_reduce = o->reduce_dtype == REDUCE_BF16 ? REDUCE_BF16 : REDUCE_FP32;
  ref_exposure = ref_exposure_of(d, dev);
  Brute* b = calloc(1, sizeof *b);
  b->N = N;
  b->maxb = o->max_batch;
  b->maxr = o->max_recompute < 0 || o->max_recompute > cfg->n_layer ? cfg->n_layer : o->max_recompute;
  b->min_need = (size_t)-1;
  /* Limits: from just below the least that fits to beyond the fastest plan at max_batch. */
  Plan dp;
  PlanCost dpc;
  plan_uniform(&dp, d, STRAT_DP, N, b->maxb, o->seq);
  plan_cost(d, dev, &dp, &dpc);
  plan_free(&dp);
  size_t lo = 0, hi = dpc.mem.peak + dpc.mem.peak / 10;
  {
    Plan p;
    PlanCost c;
    dev->mem_limit = 1;
    CHECK(planner_search(d, dev, o, &p, &c, &lo, NULL) == -1);
  }
  static const double frac[] = {0.0, 0.02, 0.1, 0.3, 0.55, 0.8, 1.0};
  b->nlim = 7;
  for (int l = 0; l < b->nlim; l++) b->lim[l] = lo + (size_t)(frac[l] * (double)(hi - lo));
  size_t plain = lo; /* and just below and above the least without recomputation */
  {
    SearchOptions so = *o;
    Plan p;
    PlanCost c;
    so.max_recompute = 0;
    CHECK(planner_search(d, dev, &so, &p, &c, &plain, NULL) == -1);
  }
  if (plain > lo) {
    b->lim[b->nlim++] = plain - 1;
    b->lim[b->nlim++] = plain + (plain - lo) / 4;
  }
  brute_run(b, d, dev, o);
  brute_leaves += b->leaves;
  size_t least = (size_t)-1;
  for (int R = 0; R <= b->maxr; R++) if (b->batch[R][1] < least) least = b->batch[R][1];
  CHECK_MSG(b->min_need + least == lo, "min_bytes %zu, brute force %zu", lo, b->min_need + least);
  for (int l = 0; l < b->nlim; l++) {
    dev->mem_limit = b->lim[l];
    Plan p;
    PlanCost c;
    int rc = planner_search(d, dev, o, &p, &c, NULL, NULL);
    CHECK_MSG(rc == 0 && b->best[l] > 0, "%s N=%d limit %zu: search rc %d (%s), brute %.6g", cfg->name,
              N, b->lim[l], rc, osdp_last_error(), b->best[l]);
    if (rc) continue;
    check_found(b, d, dev, o, l, &p, &c);
    brute_recomputing += b->best_R[l] > 0;
    int hybrid = 0;
    for (int i = 0; i < d->nops; i++)
      for (int k = 0; k < p.ops[i].k && p.ops[i].group > 0 && p.ops[i].group < N; k++)
        hybrid |= p.ops[i].strat[k] != STRAT_DP;
    brute_hybrid += hybrid;
    int keeping = 0;
    for (int i = 0; i < d->nops; i++) keeping |= p.ops[i].keep != 0;
    brute_keeping += keeping;
    CHECK(planner_last_stats().peak == c.mem.peak); /* the search's own sum = the prediction */
    plan_free(&p);
  }
  for (int i = 0; i < b->nops; i++) {
    free(b->cfg[0][i]);
    free(b->cfg[1][i]);
    free(b->micro[0][i]);
    free(b->micro[1][i]);
  }
  free(b);
  ref_reduce = REDUCE_FP32;
}

/* One instance: model cfg, options o, N ranks, limits placed between the least memory and
** the all-dp plan at the largest micro-batch. */
static void check_against_brute(const GptConfig* cfg, const SearchOptions* o, int N) {
  GptDesc d;
  CHECK(gpt_desc_build(&d, cfg) == 0 && cfg->n_layer <= BF_MAX_LAYERS);
  DeviceInfo dev = make_device(N, (size_t)1 << 40, 1e8);
  check_against_brute_on(cfg, o, &d, &dev);
  gpt_desc_free(&d);
}
/* Brute-force instances: 1 and 2 layers, uneven slices, restricted option sets (slice counts,
** strategies, recompute counts), N = 1..4. */
static void test_search_brute_force(void) {
  GptConfig one = make_config("one-layer", 1, 4, 2, 20, 8);
  GptConfig thin = make_config("thin", 1, 2, 1, 20, 8);
  GptConfig odd = make_config("odd", 1, 6, 2, 20, 8);
  GptConfig two = make_config("two-layer", 2, 4, 2, 20, 8);
  SearchOptions o;
  double t0 = now_seconds();
  for (int N = 1; N <= 4; N++) {
    planner_default_options(&o, 8);
    o.keep_off = KEEP_ALL; /* keeping whole across micro-steps: the cases below */
    o.shard_group = N; /* over the world (test_search_groups_brute_force chooses groups) */
    o.max_batch = 6;
    o.max_slices = 2; /* 12 configurations per linear, 3 per LayerNorm */
    if (N > 1) check_against_brute(&one, &o, N);
    o.max_slices = 8; /* fcproj in 8 slices; dp or zero3 per slice */
    o.allow[STRAT_ZERO2] = 0;
    o.max_recompute = N == 2 ? 0 : -1; /* recomputation forbidden */
    check_against_brute(&thin, &o, N);
    o.max_recompute = -1;
    o.allow[STRAT_ZERO2] = 1;
    o.allow[STRAT_DP] = 0; /* uneven slices, sharded only */
    o.max_slices = 2;
    check_against_brute(&odd, &o, N);
    o.max_slices = 4;
    o.allow[STRAT_ZERO2] = 0;
    check_against_brute(&odd, &o, N);
    o.allow[STRAT_DP] = o.allow[STRAT_ZERO2] = 1;
    if (N == 2 || N == 3) {
      o.max_slices = 1; /* two layers, unsplit, all strategies, 0..2 layers recomputed */
      check_against_brute(&two, &o, N);
      o.max_recompute = 1; /* at most one (which saves nothing) */
      if (N == 2) check_against_brute(&two, &o, N);
      o.max_recompute = -1;
    }
  }
  /* A fixed global batch: only micro-batches B with N B dividing G, each K = G / (N B) micro-steps
  ** (zero3's gathers and every reduce-scatter repeated K times, the rest once). */
  static const int accum_cases[][2] = {{1, 6}, {2, 8}, {2, 12}, {3, 12}, {4, 8}};
  for (int c = 0; c < 5; c++) {
    planner_default_options(&o, 8);
    o.keep_off = KEEP_ALL;
    int N = accum_cases[c][0];
    o.shard_group = N;
    o.max_batch = 6;
    o.max_slices = c == 0 ? 2 : 1; /* unsplit but one: slicing does not change what repeats */
    o.global_batch = accum_cases[c][1];
    check_against_brute(c % 2 ? &two : &one, &o, N);
  }
  /* What sharded slices keep whole across the step, chosen per op (a gradient reduce-scattered
  ** once, a zero3 weight gathered once, each held for the whole step): with a global batch of
  ** up to 4 micro-steps, and without one (a kept weight saves the backward's and the
  ** recomputed forward's gathers; the tied embedding's kept gradient one of its two reductions);
  ** sharded only, so every op has something to keep. */
  static const int keep_cases[][2] = {{2, 8}, {2, 0}, {3, 12}};
  for (int c = 0; c < 3; c++) {
    planner_default_options(&o, 8);
    int N = keep_cases[c][0];
    o.shard_group = N;
    o.max_batch = 4;
    o.max_slices = 1;
    o.allow[STRAT_DP] = c == 1;
    o.global_batch = keep_cases[c][1];
    check_against_brute(&one, &o, N);
  }
  printf("brute force comparisons: %ld plans x up to 9 limits x up to 6 micro-batches, %ld optima "
         "recompute, %ld keep whole, %.2f s\n", brute_leaves, brute_recomputing, brute_keeping,
         now_seconds() - t0);
  CHECK(brute_recomputing > 0 && brute_keeping > 0);
}

/* Brute force with shard groups chosen per op: devices of 4 ranks on 2 hosts (slow links
** between them; groups 2 and 4), on one host (groups 2 and 4), 6 ranks on 2 hosts (3 and 6),
** 8 ranks on 2 hosts (2, 4 and 8, no zero2), and bf16 reductions; unsplit ops. */
static void test_search_groups_brute_force(void) {
  GptConfig thin = make_config("thin", 1, 2, 1, 20, 8);
  GptDesc d;
  CHECK(gpt_desc_build(&d, &thin) == 0);
  SearchOptions o;
  planner_default_options(&o, 8);
  o.keep_off = KEEP_ALL; /* test_search_brute_force has kept gradients and weights */
  o.max_batch = 4;
  o.max_slices = 1;
  double t0 = now_seconds();
  long before = brute_leaves;
  long hybrid = brute_hybrid;
  /* ranks, per host, how much slower between hosts, variant: 1 no zero2, 2 bf16, 3 k <= 2 and
  ** no zero2 */
  static const int shape[][4] = {{4, 2, 20, 0}, {4, 4, 1, 0}, {6, 3, 8, 0}, {8, 4, 30, 1}, {4, 2, 5, 2},
                                 {4, 2, 50, 3}};
  for (size_t i = 0; i < sizeof shape / sizeof shape[0]; i++) {
    DeviceInfo dev = make_hosts_device(shape[i][0], shape[i][1], (size_t)1 << 40, 1e8, shape[i][2]);
    o.allow[STRAT_ZERO2] = shape[i][3] != 1 && shape[i][3] != 3;
    o.reduce_dtype = shape[i][3] == 2 ? REDUCE_BF16 : REDUCE_FP32;
    o.max_slices = shape[i][3] == 3 ? 2 : 1;
    int g[PLANNER_MAX_GROUPS], rg[64], n = planner_shard_groups(&dev, &o, g), rn = ref_groups(&dev, &o, rg);
    CHECK(n == rn && memcmp(g, rg, (size_t)n * sizeof *g) == 0);
    for (int N = 1; N <= 64; N++) /* every host size: the rule, ascending */
      for (int H = 1; H <= N; H++) {
        DeviceInfo x = make_device(N, 1, 1);
        x.ranks_per_host = N % H ? 0 : H;
        n = planner_shard_groups(&x, &o, g);
        rn = ref_groups(&x, &o, rg);
        CHECK_MSG(n == rn && memcmp(g, rg, (size_t)n * sizeof *g) == 0, "groups of N=%d H=%d", N, H);
      }
    check_against_brute_on(&thin, &o, &d, &dev);
  }
  /* Many divisors: the largest PLANNER_MAX_GROUPS, H among them; 2^20 ranks, 8 per host. */
  DeviceInfo big = make_device(720720, 1, 1);
  int g[PLANNER_MAX_GROUPS], n = planner_shard_groups(&big, &o, g);
  CHECK(n == PLANNER_MAX_GROUPS && g[n - 1] == 720720);
  for (int i = 1; i < n; i++) CHECK(g[i] > g[i - 1] && 720720 % g[i] == 0);
  big.ranks_per_host = 6;
  n = planner_shard_groups(&big, &o, g);
  int hasH = 0;
  for (int i = 0; i < n; i++) hasH |= g[i] == 6;
  CHECK(n == PLANNER_MAX_GROUPS && hasH && g[n - 1] == 720720);
  big = make_device(1 << 20, 1, 1);
  big.ranks_per_host = 8;
  CHECK(planner_shard_groups(&big, &o, g) == 20 && g[0] == 2 && g[1] == 4 && g[2] == 8 && g[19] == 1 << 20);
  printf("brute force with shard groups: %ld plans, %ld optima shard within groups, %.2f s\n",
         brute_leaves - before, brute_hybrid - hybrid, now_seconds() - t0);
  CHECK(brute_hybrid > hybrid);
  gpt_desc_free(&d);
}

/* ---- 4b. Search against an exact reference on a bigger model -------------------------------- */

/* A (memory, time) point of a frontier. */
typedef struct Point {
  size_t m;
  double t;
} Point;

/* Orders points by memory, then time. */
static int cmp_point(const void* a, const void* b) {
  const Point *x = a, *y = b;
  if (x->m != y->m) return x->m < y->m ? -1 : 1;
  return x->t < y->t ? -1 : x->t > y->t;
}

/* Sorts points and keeps the Pareto ones (memory ascending, time strictly descending). */
static long pareto(Point* p, long n) {
  qsort(p, (size_t)n, sizeof *p, cmp_point);
  long w = 0;
  for (long i = 0; i < n; i++)
    if (w == 0 || p[i].t < p[w - 1].t) p[w++] = p[i];
  return w;
}

/* The exact best samples/s by the textbook method with the first R layers recomputed: for
** every transient cap, the full Pareto frontier of the sum over ops (merged op by op), then a
** lookup per micro-batch. Slow, but independent of the search's bounds. */
static double reference_at(const GptDesc* d, const DeviceInfo* dev, const SearchOptions* o, int R) {
  int nops = 0, ncfg[BF_MAX_OPS], flags[BF_MAX_LAYERS];
  for (int l = 0; l < BF_MAX_LAYERS; l++) flags[l] = l < R;
  OpConfig* cfg[BF_MAX_OPS];
  for (int i = 0; i < d->nops && nops < BF_MAX_OPS; i++)
    if (d->ops[i].n_params) {
      ncfg[nops] = planner_op_configs(d, dev, o, i, 1, flags, &cfg[nops]);
      nops++;
    }
  double best = 0;
  for (int a = 0; a < nops; a++)
    for (int j = 0; j < ncfg[a]; j++) {
      size_t tau = cfg[a][j].transient;
      int seen = 0; /* each distinct cap once */
      for (int a2 = 0; a2 <= a && !seen; a2++)
        for (int j2 = 0; j2 < (a2 == a ? j : ncfg[a2]) && !seen; j2++) seen = cfg[a2][j2].transient == tau;
      if (seen) continue;
      Point* f = malloc(sizeof *f);
      long nf = 1;
      f[0] = (Point){0, 0};
      for (int b = 0; b < nops && f; b++) {
        Point* g = malloc((size_t)(nf * ncfg[b] + 1) * sizeof *g);
        long ng = 0;
        for (long x = 0; x < nf; x++)
          for (int y = 0; y < ncfg[b]; y++)
            if (cfg[b][y].transient <= tau && f[x].m + cfg[b][y].mem <= dev->mem_limit)
              g[ng++] = (Point){f[x].m + cfg[b][y].mem, f[x].t + cfg[b][y].time_s};
        free(f);
        f = ng ? g : NULL;
        if (!ng) free(g);
        nf = ng ? pareto(g, ng) : 0;
      }
      for (int B = 1; f && B <= o->max_batch; B++) {
        size_t bytes = cost_batch_bytes(d, dev, B, o->seq, flags);
        long k = -1;
        while (k + 1 < nf && f[k + 1].m + tau + bytes <= dev->mem_limit) k++;
        if (k < 0) break;
        double comp = cost_compute_s(d, dev, B, o->seq) + device_collective_s(dev, COLL_ALLREDUCE, 16) +
                      cost_recompute_s(d, dev, B, o->seq, flags);
        double sps = (double)dev->ranks * B / (comp + f[k].t);
        if (sps > best) best = sps;
      }
      free(f);
    }
  for (int a = 0; a < nops; a++) free(cfg[a]);
  return best;
}

/* The reference over every recompute count the options allow. */
static double reference_search(const GptDesc* d, const DeviceInfo* dev, const SearchOptions* o) {
  int L = d->cfg.n_layer, maxr = o->max_recompute < 0 || o->max_recompute > L ? L : o->max_recompute;
  double best = 0;
  for (int R = 0; R <= maxr; R++) best = fmax(best, reference_at(d, dev, o, R));
  return best;
}

/* A 2-layer model (hidden 16, up to 8 slices, all strategies) on random devices and limits. */
static void test_search_reference(void) {
  GptConfig cfg = make_config("ref", 2, 16, 2, 64, 32);
  GptDesc d;
  CHECK(gpt_desc_build(&d, &cfg) == 0);
  Rng r;
  rng_seed(&r, 2024);
  double t0 = now_seconds();
  int recomputing = 0;
  for (int trial = 0; trial < 16; trial++) {
    DeviceInfo dev = make_device(1 + (int)rng_below(&r, 8), 1, pow(10, 8 + 4 * rng_uniform(&r)));
    dev.optimizer_s_per_param = rng_uniform(&r) < 0.5 ? 0 : 1e-8 * rng_uniform(&r);
    for (int k = 0; k < COLL_COUNT; k++)
      dev.coll[k] = (CollectiveModel){.latency_s = pow(10, -6 + 2 * rng_uniform(&r)), .bandwidth_Bps = pow(10, 8 + 3 * rng_uniform(&r))};
    SearchOptions o;
    planner_default_options(&o, 32);
    o.max_batch = 8;
    if (trial % 3 == 2) o.allow[rng_below(&r, 3)] = 0;
    Plan p, dp;
    PlanCost c, dc;
    size_t lo;
    CHECK(planner_search(&d, &dev, &o, &p, &c, &lo, NULL) == -1);
    plan_uniform(&dp, &d, STRAT_DP, dev.ranks, o.max_batch, o.seq);
    plan_cost(&d, &dev, &dp, &dc);
    plan_free(&dp);
    dev.mem_limit = lo + (size_t)(rng_uniform(&r) * 1.2 * (double)(dc.mem.peak - lo));
    int rc = planner_search(&d, &dev, &o, &p, &c, NULL, NULL);
    double ref = reference_search(&d, &dev, &o);
    double sps = rc ? 0 : (double)dev.ranks * p.micro_batch / cost_search_step_s(&d, &dev, &p);
    CHECK_MSG(rc == 0 && rel_diff(sps, ref) <= 1e-12,
              "ref N=%d limit %zu: search %.15g, reference %.15g", dev.ranks, dev.mem_limit, sps, ref);
    if (rc == 0) {
      CHECK(c.mem.peak <= dev.mem_limit);
      check_plan_cost(&d, &dev, &p);
      recomputing += plan_recompute_count(&p) > 0;
      plan_free(&p);
    }
  }
  printf("reference comparisons: %d of 16 recompute, %.2f s\n", recomputing, now_seconds() - t0);
  gpt_desc_free(&d);
}

/* ---- 4c. Candidates ------------------------------------------------------------------------- */

/* planner_candidates: distinct plans, fastest first by the replay, all within the limit,
** the first at least as fast as every uniform plan and as the search's own plan; prefetch
** only where it fits. */
/* The trial's choice: the measured fastest, unless the model's first (highest predicted
** samples/s among the candidates that ran) measured within the trial's noise of it. */
static void test_trial_choice(void) {
  Candidate c[3];
  TrialResult r[3];
  memset(c, 0, sizeof c);
  memset(r, 0, sizeof r);
  /* Predicted samples/s (up to the world): 16/2.0 = 8.0, 17/2.0 = 8.5 (the model's first), 12/1.6 = 7.5. */
  int mb[3] = {16, 17, 12};
  double pred[3] = {2.0, 2.0, 1.6};
  for (int i = 0; i < 3; i++) {
    c[i].plan.micro_batch = mb[i];
    c[i].cost.step_s = pred[i];
    c[i].cost.samples_per_s = mb[i] / pred[i];
    snprintf(c[i].origin, sizeof c[i].origin, "c%d", i);
    r[i].ok = 1;
  }
  r[0].samples_per_s = 10.2, r[1].samples_per_s = 10.0, r[2].samples_per_s = 9.0;
  CHECK(planner_trial_choice(c, 3, r, 0.03, 0) == 1);  /* 2% ahead, noise 3%: the model's */
  CHECK(planner_trial_choice(c, 3, r, 0.01, 0) == 0);  /* 2% ahead, noise 1%: the measured */
  r[0].samples_per_s = 10.5;
  CHECK(planner_trial_choice(c, 3, r, 0.03, 0) == 0);  /* 5% ahead: the measured fastest */
  r[1].ok = 0;                                         /* the model's first did not run: */
  CHECK(planner_trial_choice(c, 3, r, 0.03, 0) == 0);  /* the next by prediction is c0 itself */
  r[0].samples_per_s = 9.1;
  r[2].samples_per_s = 9.2;                            /* c2 1.1% ahead of c0 (predicted first now) */
  CHECK(planner_trial_choice(c, 3, r, 0.03, 0) == 0);
  r[2].samples_per_s = 9.6;                            /* 5.5% ahead */
  CHECK(planner_trial_choice(c, 3, r, 0.03, 0) == 2);
  r[0].ok = r[2].ok = 0;
  CHECK(planner_trial_choice(c, 3, r, 0.03, 0) == -1); /* none ran */
}

/* The candidates' order: the first is within PLANNER_MODEL_ERROR of the fastest and no candidate
** that close is simpler (fewer layer plans, then strategy kinds); the rest fastest first. Returns
** the least samples/s the first may have against a plan of `sps` (the fastest may be that plan). */
static double check_candidate_order(const GptDesc* d, const Candidate* c, int n, double sps) {
  double fastest = 0;
  for (int i = 0; i < n; i++) if (c[i].cost.samples_per_s > fastest) fastest = c[i].cost.samples_per_s;
  CHECK(c[0].cost.samples_per_s >= fastest * (1 - PLANNER_MODEL_ERROR));
  int g0 = plan_layer_groups(d, &c[0].plan), k0 = plan_strategy_kinds(d, &c[0].plan);
  for (int i = 1; i < n; i++) {
    if (i > 1) CHECK(c[i].cost.samples_per_s <= c[i - 1].cost.samples_per_s);
    if (c[i].cost.samples_per_s < fastest * (1 - PLANNER_MODEL_ERROR)) continue;
    int g = plan_layer_groups(d, &c[i].plan), k = plan_strategy_kinds(d, &c[i].plan);
    CHECK_MSG(g > g0 || (g == g0 && k >= k0), "candidate %d (%s: %d layer plans, %d kinds) is simpler "
              "than the first (%s: %d, %d)", i, c[i].origin, g, k, c[0].origin, g0, k0);
  }
  return (sps > fastest ? sps : fastest) * (1 - PLANNER_MODEL_ERROR) * (1 - 1e-12);
}

static void test_candidates(void) {
  GptConfig cfg = make_config("cand", 2, 16, 2, 64, 32);
  GptDesc d;
  CHECK(gpt_desc_build(&d, &cfg) == 0);
  DeviceInfo dev = make_device(2, 1, 1e9);
  dev.coll[COLL_ALLREDUCE].overlap = 0.3;
  dev.coll[COLL_ALLGATHER].overlap = 0.6;
  SearchOptions o;
  planner_default_options(&o, 32);
  o.max_batch = 12;
  Plan dp;
  PlanCost dc;
  plan_uniform(&dp, &d, STRAT_DP, 2, 8, 32);
  CHECK(plan_cost(&d, &dev, &dp, &dc) == 0);
  plan_free(&dp);
  dev.mem_limit = dc.mem.peak * 7 / 10; /* ddp fits only at smaller micro-batches */
  Candidate c[5];
  int n = planner_candidates(&d, &dev, &o, c, 5, NULL, NULL);
  CHECK_MSG(n >= 3 && n <= 5, "%d candidates (%s)", n, osdp_last_error());
  Plan sp;
  PlanCost sc;
  CHECK(planner_search(&d, &dev, &o, &sp, &sc, NULL, NULL) == 0);
  for (int i = 0; i < n; i++) {
    PlanCost k;
    CHECK(plan_cost(&d, &dev, &c[i].plan, &k) == 0);
    CHECK(k.step_s == c[i].cost.step_s && k.mem.peak == c[i].cost.mem.peak);
    CHECK(c[i].cost.mem.peak <= dev.mem_limit && c[i].origin[0]);
    for (int j = 0; j < i; j++) {
      int same = c[i].plan.micro_batch == c[j].plan.micro_batch && c[i].plan.prefetch == c[j].plan.prefetch &&
                 c[i].plan.overlap_reduce == c[j].plan.overlap_reduce &&
                 c[i].plan.reduce_dtype == c[j].plan.reduce_dtype;
      for (int op = 0; same && op < d.nops; op++)
        same = memcmp(&c[i].plan.ops[op], &c[j].plan.ops[op], sizeof(OpPlan)) == 0;
      CHECK_MSG(!same, "candidates %d and %d are the same plan", j, i);
    }
  }
  double least = check_candidate_order(&d, c, n, sc.samples_per_s);
  CHECK(c[0].cost.samples_per_s >= least);
  /* Prefetch is decided per plan: on exactly when the plan has zero3 slices, the prefetching
  ** variant fits and the replay finds it faster. */
  int decided_on = 0;
  for (int i = 0; i < n; i++) {
    int z3 = 0;
    for (int op = 0; op < d.nops; op++)
      for (int k = 0; d.ops[op].n_params && k < c[i].plan.ops[op].k; k++) z3 |= c[i].plan.ops[op].strat[k] == STRAT_ZERO3;
    Plan other;
    PlanCost oc;
    CHECK(plan_copy(&other, &c[i].plan) == 0);
    other.prefetch = !c[i].plan.prefetch;
    CHECK(plan_cost(&d, &dev, &other, &oc) == 0);
    if (c[i].plan.prefetch) {
      decided_on++;
      CHECK(z3 && c[i].cost.step_s < oc.step_s && c[i].cost.mem.peak <= dev.mem_limit);
    } else if (z3) {
      CHECK_MSG(oc.mem.peak > dev.mem_limit || oc.step_s >= c[i].cost.step_s,
                "candidate %d would be faster with prefetch and fits", i);
    }
    plan_free(&other);
  }
  CHECK_MSG(decided_on > 0, "no candidate prefetches although gathers overlap compute 60%%");
  for (int s = 0; s < STRAT_COUNT; s++) {
    Plan up;
    PlanCost uc;
    if (planner_best_uniform(&d, &dev, &o, (Strategy)s, &up, &uc) != 0) continue;
    CHECK(c[0].cost.samples_per_s >= uc.samples_per_s * (1 - PLANNER_MODEL_ERROR) * (1 - 1e-12));
    plan_free(&up);
  }
  plan_free(&sp);
  for (int i = 0; i < n; i++) plan_free(&c[i].plan);
  gpt_desc_free(&d);
}

/* ---- 4d. Hybrid sharding: groups when the links between hosts are slow -------------------- */

/* A device of N ranks, H per host, whose tables are consistent with rings over uniform links
** (an all-reduce takes as long as a reduce-scatter and an all-gather: half their bandwidth),
** the same within and between hosts except that the inter-host bandwidth is `inter` times
** the intra-host one. */
static DeviceInfo make_link_device(int N, int H, size_t limit, double inter) {
  DeviceInfo dev = make_device(N, limit, 1e10);
  dev.ranks_per_host = H;
  for (int k = 0; k < COLL_COUNT; k++) {
    dev.coll[k] = (CollectiveModel){.latency_s = 1e-5, .bandwidth_Bps = k == COLL_ALLREDUCE ? 5e8 : 1e9};
    dev.inter[k] = dev.coll[k];
    dev.inter[k].bandwidth_Bps *= inter;
    dev.inter_given[k] = 1;
  }
  return dev;
}

/* Whether plan p shards any op over groups smaller than the world. */
static int plan_is_hybrid(const Plan* p) {
  for (int i = 0; i < p->nops; i++)
    for (int k = 0; p->ops[i].group > 0 && p->ops[i].group < p->world && k < p->ops[i].k; k++)
      if (p->ops[i].strat[k] != STRAT_DP) return 1;
  return 0;
}

/* The search with slow links between hosts shards within each host and beats the best plan
** sharded over the world only; with links as fast between hosts as within (zero2 and dp only)
** it is at least as good as the flat search and hybrid only when strictly better.
** The candidates list the hybrid uniform plans, and decide overlap_reduce like prefetch. */
static void test_hybrid_search(void) {
  GptConfig cfg = make_config("hyb", 2, 64, 2, 256, 32);
  GptDesc d;
  CHECK(gpt_desc_build(&d, &cfg) == 0);
  SearchOptions o, flat;
  planner_default_options(&o, 32);
  o.max_batch = 16;
  for (int zero3 = 1; zero3 >= 0; zero3--)
    for (int slow = 1; slow >= 0; slow--) {
      DeviceInfo dev = make_link_device(8, 4, 1, slow ? 0.02 : 1);
      o.allow[STRAT_ZERO3] = zero3;
      flat = o;
      flat.shard_group = 8;
      Plan p, q, dp;
      PlanCost c, fc, dc;
      size_t least;
      CHECK(planner_search(&d, &dev, &o, &p, &c, &least, NULL) == -1);
      plan_uniform(&dp, &d, STRAT_DP, 8, 8, 32);
      CHECK(plan_cost(&d, &dev, &dp, &dc) == 0);
      plan_free(&dp);
      dev.mem_limit = least + (dc.mem.peak - least) / 3;
      CHECK(planner_search(&d, &dev, &o, &p, &c, NULL, NULL) == 0);
      CHECK(planner_search(&d, &dev, &flat, &q, &fc, NULL, NULL) == 0);
      double sps = 8.0 * p.micro_batch / cost_search_step_s(&d, &dev, &p);
      double fsps = 8.0 * q.micro_batch / cost_search_step_s(&d, &dev, &q);
      CHECK(!plan_is_hybrid(&q) && c.mem.peak <= dev.mem_limit && plan_validate(&p, &d, 8) == 0);
      if (slow) {
        CHECK_MSG(plan_is_hybrid(&p) && sps > fsps * (1 + 1e-9), "zero3 %d slow: hybrid %d, %.6g vs flat %.6g",
                  zero3, plan_is_hybrid(&p), sps, fsps);
      } else if (!zero3) {
        /* The search over all groups includes the flat plans: never worse, and hybrid only when
        ** strictly better (latencies can favour groups within a host even on fast links). */
        CHECK_MSG(plan_is_hybrid(&p) ? sps > fsps * (1 + 1e-12) : rel_diff(sps, fsps) < 1e-12,
                  "fast: hybrid %d, %.9g vs flat %.9g", plan_is_hybrid(&p), sps, fsps);
      }
      if (slow && zero3) {
        /* Candidates: the hybrid uniform baselines are there; overlap_reduce decided per plan. */
        dev.coll[COLL_REDUCE_SCATTER].overlap = dev.inter[COLL_REDUCE_SCATTER].overlap = 0.8;
        Candidate cand[8];
        int n = planner_candidates(&d, &dev, &o, cand, 8, NULL, NULL), hyb_uniform = 0, on = 0;
        CHECK(n >= 3);
        for (int i = 0; i < n; i++) {
          hyb_uniform += cand[i].uniform >= 0 && cand[i].uniform_group == 4 && strstr(cand[i].origin, " G=4");
          if (cand[i].uniform >= 0 && !cand[i].uniform_group) CHECK(!plan_is_hybrid(&cand[i].plan));
          CHECK(cand[i].cost.mem.peak <= dev.mem_limit);
          Plan other;
          PlanCost oc;
          CHECK(plan_copy(&other, &cand[i].plan) == 0);
          other.overlap_reduce = !other.overlap_reduce;
          CHECK(plan_cost(&d, &dev, &other, &oc) == 0);
          if (cand[i].plan.overlap_reduce) on++;
          if (cand[i].plan.overlap_reduce) CHECK(cand[i].cost.step_s < oc.step_s);
          else CHECK(oc.mem.peak > dev.mem_limit || oc.step_s >= cand[i].cost.step_s * (1 - 1e-12));
          plan_free(&other);
        }
        CHECK_MSG(hyb_uniform >= 1 && on >= 1, "%d hybrid uniform candidates, %d with overlap_reduce", hyb_uniform, on);
        CHECK(cand[0].cost.samples_per_s >= check_candidate_order(&d, cand, n, c.samples_per_s));
        for (int i = 0; i < n; i++) plan_free(&cand[i].plan);
      }
      plan_free(&p);
      plan_free(&q);
    }
  /* bf16 reductions: always at least as fast; auto keeps them where they gain >= 1%. */
  DeviceInfo dev = make_link_device(8, 4, 1, 0.02);
  Plan p, q;
  PlanCost c, cb;
  size_t least;
  o.allow[STRAT_ZERO3] = 1;
  CHECK(planner_search(&d, &dev, &o, &p, &c, &least, NULL) == -1);
  dev.mem_limit = 2 * least;
  CHECK(planner_search(&d, &dev, &o, &p, &c, NULL, NULL) == 0 && p.reduce_dtype == REDUCE_FP32);
  o.reduce_dtype = REDUCE_BF16;
  CHECK(planner_search(&d, &dev, &o, &q, &cb, NULL, NULL) == 0 && q.reduce_dtype == REDUCE_BF16);
  CHECK(cb.samples_per_s >= c.samples_per_s);
  plan_free(&q);
  o.reduce_dtype = SEARCH_REDUCE_AUTO;
  CHECK(planner_search(&d, &dev, &o, &q, &cb, NULL, NULL) == 0);
  CHECK_MSG(q.reduce_dtype == REDUCE_BF16 && cb.samples_per_s > c.samples_per_s * (1 + REDUCE_BF16_MIN_GAIN),
            "auto: %s at %.6g vs fp32 %.6g", reduce_dtype_name(q.reduce_dtype), cb.samples_per_s, c.samples_per_s);
  plan_free(&q);
  Candidate cand[8];
  int n = planner_candidates(&d, &dev, &o, cand, 8, NULL, NULL);
  for (int i = 0; i < n; i++) {
    Plan other;
    PlanCost a, x;
    CHECK(plan_copy(&other, &cand[i].plan) == 0);
    other.reduce_dtype = REDUCE_FP32;
    CHECK(plan_cost(&d, &dev, &other, &a) == 0);
    other.reduce_dtype = REDUCE_BF16;
    CHECK(plan_cost(&d, &dev, &other, &x) == 0);
    if (cand[i].plan.reduce_dtype == REDUCE_BF16) CHECK(x.step_s < a.step_s * (1 - REDUCE_BF16_MIN_GAIN));
    else CHECK(x.step_s >= a.step_s * (1 - REDUCE_BF16_MIN_GAIN));
    plan_free(&other);
    plan_free(&cand[i].plan);
  }
  o.reduce_dtype = REDUCE_FP32;
  o.shard_group = 3; /* not a divisor */
  CHECK(planner_search(&d, &dev, &o, &q, &cb, NULL, NULL) == -1 && strstr(osdp_last_error(), "shard group 3"));
  plan_free(&p);
  gpt_desc_free(&d);
}

/* ---- 5. Limits too small -------------------------------------------------------------------- */

/* -1 below the minimum, with the minimum in the message; success exactly at it. */
static void test_too_small(void) {
  GptConfig cfg;
  GptDesc d;
  CHECK(gpt_config_load("small", &cfg) == 0 && gpt_desc_build(&d, &cfg) == 0);
  DeviceInfo dev = make_device(4, 1 << 20, 1e10);
  SearchOptions o;
  planner_default_options(&o, 128);
  Plan p;
  PlanCost c;
  size_t minb = 0;
  CHECK(planner_search(&d, &dev, &o, &p, &c, &minb, NULL) == -1);
  char num[32];
  snprintf(num, sizeof num, "%zu", minb);
  CHECK_MSG(strstr(osdp_last_error(), num) && strstr(osdp_last_error(), "smallest limit"),
            "message '%s' should name %s", osdp_last_error(), num);
  dev.mem_limit = minb;
  CHECK(planner_search(&d, &dev, &o, &p, &c, NULL, NULL) == 0);
  CHECK(c.mem.peak == minb && c.micro_batch == 1);
  plan_free(&p);
  dev.mem_limit = minb - 1;
  CHECK(planner_search(&d, &dev, &o, &p, &c, NULL, NULL) == -1);
  Plan up;
  PlanCost uc;
  CHECK(planner_best_uniform(&d, &dev, &o, STRAT_DP, &up, &uc) == -1);
  CHECK(strstr(osdp_last_error(), "dp") != NULL);
  gpt_desc_free(&d);
}

/* ---- 5b. Recomputation ----------------------------------------------------------------------- */

/* In the model all layers are alike: for a plan whose layers have the same slices and
** strategies, plan_cost of R recomputed layers at different positions gives the same memory,
** and, without overlap, the same time (replay and search model). (The search chooses the
** configurations of the recomputed layers' ops as classes of their own, so it recomputes the
** first R layers and gives them theirs.) */
static void test_recompute_positions(void) {
  GptConfig cfg = make_config("six", 6, 32, 2, 64, 32);
  GptDesc d;
  CHECK(gpt_desc_build(&d, &cfg) == 0);
  DeviceInfo dev = make_device(4, (size_t)1 << 32, 1e9);
  Rng r;
  rng_seed(&r, 11);
  static const int where[3][6] = {{1, 1, 1, 0, 0, 0}, {0, 0, 0, 1, 1, 1}, {1, 0, 1, 0, 0, 1}};
  for (int trial = 0; trial < 6; trial++) {
    Plan p;
    random_plan(&d, 4, 2, 32, &r, &p);
    for (int l = 1; l < cfg.n_layer; l++)
      for (int j = 0; j < GPT_OPS_PER_LAYER; j++) p.ops[gpt_op_layer(l, j)] = p.ops[gpt_op_layer(0, j)];
    PlanCost c[3];
    double ts[3];
    for (int w = 0; w < 3; w++) {
      memcpy(p.recompute, where[w], sizeof where[w]);
      CHECK(plan_cost(&d, &dev, &p, &c[w]) == 0);
      ts[w] = cost_search_step_s(&d, &dev, &p);
      check_plan_cost(&d, &dev, &p);
    }
    for (int w = 1; w < 3; w++) {
      CHECK(memcmp(&c[w].mem, &c[0].mem, sizeof c[0].mem) == 0);
      CHECK_MSG(rel_diff(c[w].step_s, c[0].step_s) < 1e-12, "replay %.17g vs %.17g", c[w].step_s,
                c[0].step_s);
      CHECK(rel_diff(ts[w], ts[0]) < 1e-12);
    }
    /* With overlap only the dp all-reduce's exposure may differ; the memory stays. */
    dev.coll[COLL_ALLREDUCE].overlap = 0.5;
    for (int w = 1; w < 3; w++) {
      PlanCost a, b;
      memcpy(p.recompute, where[0], sizeof where[0]);
      CHECK(plan_cost(&d, &dev, &p, &a) == 0);
      memcpy(p.recompute, where[w], sizeof where[w]);
      CHECK(plan_cost(&d, &dev, &p, &b) == 0);
      CHECK(a.mem.peak == b.mem.peak && rel_diff(a.compute_s, b.compute_s) < 1e-12);
    }
    dev.coll[COLL_ALLREDUCE].overlap = 0;
    plan_free(&p);
  }
  gpt_desc_free(&d);
}

/* The smallest limit without recomputation and with every layer recomputed; *none and *all. */
static void limits_of(const GptDesc* d, const DeviceInfo* dev, const SearchOptions* o, size_t* none,
                      size_t* all) {
  DeviceInfo tiny = *dev;
  tiny.mem_limit = 1;
  SearchOptions so = *o;
  Plan p;
  PlanCost c;
  so.max_recompute = 0;
  CHECK(planner_search(d, &tiny, &so, &p, &c, none, NULL) == -1);
  so.max_recompute = -1;
  CHECK(planner_search(d, &tiny, &so, &p, &c, all, NULL) == -1);
}

/* A limit between the least that fits without recomputation and the least with all layers
** recomputed: the search recomputes (0 < R), the plan fits, its peak is the prediction's and
** the search's own; without recomputation nothing fits, and max_recompute bounds R. The plan
** beats every uniform plan (which may recompute too), and candidates include them. */
static void test_recompute_needed(void) {
  GptConfig cfg;
  GptDesc d;
  CHECK(gpt_config_load("small", &cfg) == 0 && gpt_desc_build(&d, &cfg) == 0);
  DeviceInfo dev = make_device(4, 1, 1e10);
  SearchOptions o;
  planner_default_options(&o, 128);
  size_t none, all;
  limits_of(&d, &dev, &o, &none, &all);
  CHECK_MSG(all < none, "recomputing all layers should lower the least limit: %zu vs %zu", all, none);
  dev.mem_limit = all + (none - all) / 2;
  Plan p;
  PlanCost c;
  CHECK(planner_search(&d, &dev, &o, &p, &c, NULL, NULL) == 0);
  int R = plan_recompute_count(&p);
  MemPrediction m;
  plan_predict_memory(&d, &p, dev.threads, &m);
  CHECK_MSG(R > 0 && c.mem.peak <= dev.mem_limit, "R=%d peak %zu limit %zu", R, c.mem.peak, dev.mem_limit);
  CHECK(memcmp(&m, &c.mem, sizeof m) == 0 && planner_last_stats().peak == m.peak);
  CHECK(m.recompute > 0);
  double sps = (double)dev.ranks * p.micro_batch / cost_search_step_s(&d, &dev, &p);
  check_uniform_slower(&d, &dev, &o, cfg.n_layer, sps);
  Candidate cand[6];
  int n = planner_candidates(&d, &dev, &o, cand, 6, NULL, NULL);
  CHECK(n >= 1);
  for (int s = 0; s < STRAT_COUNT; s++) {
    Plan up;
    PlanCost uc;
    if (planner_best_uniform(&d, &dev, &o, (Strategy)s, &up, &uc) != 0) continue;
    int listed = 0;
    for (int i = 0; i < n; i++) listed |= cand[i].uniform == s;
    CHECK(listed && cand[0].cost.samples_per_s >= uc.samples_per_s * (1 - PLANNER_MODEL_ERROR) * (1 - 1e-12));
    plan_free(&up);
  }
  for (int i = 0; i < n; i++) {
    CHECK(cand[i].cost.mem.peak <= dev.mem_limit);
    if (plan_recompute_count(&cand[i].plan) > 0) CHECK(strstr(cand[i].origin, " R=") != NULL);
    plan_free(&cand[i].plan);
  }
  o.max_recompute = 0; /* nothing fits without recomputation */
  Plan q;
  int rc0 = planner_search(&d, &dev, &o, &q, &c, NULL, NULL);
  CHECK(rc0 == -1);
  if (rc0 == 0) plan_free(&q);
  o.max_recompute = R - 1; /* fewer allowed: R - 1 or fewer, or nothing fits */
  if (planner_search(&d, &dev, &o, &q, &c, NULL, NULL) == 0) {
    CHECK(plan_recompute_count(&q) <= R - 1 && c.mem.peak <= dev.mem_limit);
    plan_free(&q);
  }
  osdp_clear_error();
  plan_free(&p);
  gpt_desc_free(&d);
}

/* ---- 6. Speed ------------------------------------------------------------------------------- */

/* Times one search on a GPT-2 preset and prints its figures. */
/* Times one search on a GPT-2 preset (H ranks per host, 0: one host, with links 12x slower
** between hosts) and prints its figures. */
static double time_search(const char* model, int N, int H, size_t limit, int T, int print) {
  GptConfig cfg;
  GptDesc d;
  CHECK(gpt_config_load(model, &cfg) == 0 && gpt_desc_build(&d, &cfg) == 0);
  DeviceInfo dev = make_device(N, limit, 1e14);
  dev.optimizer_s_per_param = 0;
  dev.ranks_per_host = H;
  for (int k = 0; k < COLL_COUNT; k++) {
    dev.coll[k] = (CollectiveModel){.latency_s = 2e-5, .bandwidth_Bps = 1.25e10};
    dev.inter[k] = (CollectiveModel){.latency_s = 3e-5, .bandwidth_Bps = 1.25e10 / 12};
    dev.inter_given[k] = H > 0;
  }
  SearchOptions o;
  planner_default_options(&o, T);
  Plan p;
  PlanCost c;
  double s = 0;
  char lim[32];
  int rc = planner_search(&d, &dev, &o, &p, &c, NULL, &s);
  CHECK_MSG(rc == 0, "%s", osdp_last_error());
  if (rc == 0) {
    CHECK(c.mem.peak <= limit);
    PlannerStats st = planner_last_stats();
    if (print)
      printf("search %-9s N=%-2d H=%-2d limit %-9s seq %4d: %.3f s  B=%d R=%d %.2f samples/s%s  "
             "(classes %d, configs %d, caps %d, problems %ld, candidates %ld, programs %ld, states max "
             "%ld total %ld)\n", model, N, device_ranks_per_host(&dev), format_bytes((double)limit, lim), T,
             s, c.micro_batch, plan_recompute_count(&p), c.samples_per_s, plan_is_hybrid(&p) ? " hybrid" : "",
             st.classes, st.configs, st.taus, st.problems, st.candidates, st.exact_solves, st.states_max,
             st.states_total);
    plan_free(&p);
  }
  gpt_desc_free(&d);
  return s;
}

/* gpt2-1.5b on 8 ranks at 16 GiB and at 8 GiB (nothing fits without recomputation), seq 1024,
** every option, and other shapes: a plan is found in each; and gpt2-1.5b on 16 ranks, 8 per
** host (shard groups 2, 4, 8, 16 to choose from per op). The times are printed, not asserted
** (a timed unit test measures the machine, not the code; under the sanitizers the search runs
** several times slower): `osdp plan ... --json` reports search_s. */
static void test_speed(void) {
  time_search("gpt2-1.5b", 8, 0, (size_t)16 << 30, 1024, 1);
  time_search("gpt2-1.5b", 8, 0, (size_t)8 << 30, 1024, 1);
  time_search("gpt2-1.5b", 16, 8, (size_t)16 << 30, 1024, 1);
  time_search("gpt2-124m", 2, 0, (size_t)2 << 30, 256, 1);
  time_search("gpt2-350m", 16, 0, (size_t)4 << 30, 512, 1);
}

/* Planning for bf16 storage (a device whose op times are bf16's: DeviceInfo.precision): over
** limits from the least that fits to ample, with every strategy, slice counts and recomputation
** allowed, on 1 and 4 ranks, the chosen plan and every candidate and uniform plan carry
** precision bf16, the search's own memory sum is the prediction of the plan it returns
** (plan_predict_memory in bf16), which fits the limit; a bf16 device with the limit an fp32
** search needs at its best micro-batch affords a larger one (the activations take half the
** bytes). And a device file keeps its precision through save and load. */
static void test_bf16_search(void) {
  GptConfig cfg;
  GptDesc d;
  CHECK(gpt_config_load("small", &cfg) == 0 && gpt_desc_build(&d, &cfg) == 0);
  for (int N = 1; N <= 4; N += 3) {
    DeviceInfo dev = make_device(N, (size_t)1 << 40, 1e10), d32 = dev;
    dev.precision = PRECISION_BF16;
    SearchOptions o;
    planner_default_options(&o, 64);
    o.max_batch = 64;
    Plan p;
    PlanCost c;
    size_t least = 0;
    dev.mem_limit = 1;
    CHECK(planner_search(&d, &dev, &o, &p, &c, &least, NULL) == -1 && least > 0);
    for (int l = 0; l < 5; l++) {
      dev.mem_limit = least + (size_t)l * least / 2;
      CHECK_MSG(planner_search(&d, &dev, &o, &p, &c, NULL, NULL) == 0, "N=%d limit %zu: %s", N,
                dev.mem_limit, osdp_last_error());
      MemPrediction m;
      plan_predict_memory(&d, &p, dev.threads, &m);
      CHECK(p.precision == PRECISION_BF16 && c.mem.peak == m.peak && m.peak <= dev.mem_limit);
      CHECK(planner_last_stats().peak == c.mem.peak);
      Candidate cand[4];
      int n = planner_candidates(&d, &dev, &o, cand, 4, NULL, NULL);
      for (int i = 0; i < n; i++) CHECK(cand[i].plan.precision == PRECISION_BF16);
      Plan up;
      PlanCost uc;
      if (planner_best_uniform(&d, &dev, &o, STRAT_ZERO3, &up, &uc) == 0) {
        plan_predict_memory(&d, &up, dev.threads, &m);
        CHECK(up.precision == PRECISION_BF16 && uc.mem.peak == m.peak);
        plan_free(&up);
      }
      for (int i = 0; i < n; i++) plan_free(&cand[i].plan);
      plan_free(&p);
    }
    /* fp32 at a limit where it reaches micro-batch 8; bf16 at that limit goes further */
    Plan p8;
    plan_uniform(&p8, &d, STRAT_DP, N, 8, 64);
    MemPrediction m8;
    plan_predict_memory(&d, &p8, 1, &m8);
    plan_free(&p8);
    d32.mem_limit = dev.mem_limit = m8.peak;
    o.allow[STRAT_ZERO2] = o.allow[STRAT_ZERO3] = 0;
    o.max_recompute = 0;
    PlanCost c32, c16;
    CHECK(planner_search(&d, &d32, &o, &p, &c32, NULL, NULL) == 0);
    plan_free(&p);
    CHECK(planner_search(&d, &dev, &o, &p, &c16, NULL, NULL) == 0);
    plan_free(&p);
    CHECK_MSG(c32.micro_batch == 8 && c16.micro_batch > 8, "dp at %zu bytes: fp32 B=%d, bf16 B=%d",
              m8.peak, c32.micro_batch, c16.micro_batch);
    if (N == 4) { /* a device file keeps the precision */
      const char* path = write_temp("");
      DeviceInfo back;
      CHECK(device_save(&dev, path) == 0 && device_load(&back, path) == 0);
      CHECK(back.precision == PRECISION_BF16);
      device_free(&back);
    }
  }
  gpt_desc_free(&d);
}

int main(void) {
  test_device_files();
  test_device_levels();
  test_group_collectives();
  test_device_times();
  test_cost_model();
  test_overlap();
  test_hybrid_cost();
  test_op_configs();
  test_too_small();
  test_recompute_positions();
  test_recompute_needed();
  test_search_brute_force();
  test_search_groups_brute_force();
  test_search_reference();
  test_candidates();
  test_trial_choice();
  test_hybrid_search();
  test_bf16_search();
  test_speed();
  unlink(write_temp(""));
  return check_summary();
}
