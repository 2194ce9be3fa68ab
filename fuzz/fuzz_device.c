/*
** fuzz_device.c: fuzzes device files (device_load, planner/device.h). A device that loads is
** asked for collective and operator times (what the planner does with it: over the world, shard
** groups and across groups of every size dividing the ranks), and must survive a round trip
** through device_save and device_load unchanged (both link levels).
*/
#include <float.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "fuzz_util.h"
#include "model/gpt.h"
#include "planner/device.h"

/* Whether two numbers agree after a trip through a JSON file: cJSON prints a double with 15
** significant digits when that reads back within a relative DBL_EPSILON of it (and with 17
** otherwise), so the last bit may change; -0 may become 0. */
static int near(double a, double b) {
  return a == b || fabs(a - b) <= 2 * DBL_EPSILON * fmax(fabs(a), fabs(b));
}

/* Aborts unless collective tables x and y hold the same values (up to near()). */
static void collective_expect_equal(const CollectiveModel* x, const CollectiveModel* y) {
  if (!near(x->latency_s, y->latency_s) || !near(x->bandwidth_Bps, y->bandwidth_Bps) ||
      !near(x->overlap, y->overlap) || !near(x->in_step, y->in_step) || !near(x->residual, y->residual) ||
      x->npoints != y->npoints)
    fuzz_die("device round trip", "a collective changed");
  for (int i = 0; i < x->npoints; i++)
    if (!near(x->point_bytes[i], y->point_bytes[i]) || !near(x->point_s[i], y->point_s[i]))
      fuzz_die("device round trip", "a collective's points changed");
}

/* Aborts unless devices a and b hold the same values (up to near()). */
static void device_expect_equal(const DeviceInfo* a, const DeviceInfo* b) {
  /* mem_limit travels as a JSON number: exact up to 2^53 bytes (8 PiB). */
  int mem_ok = a->mem_limit == b->mem_limit || a->mem_limit > ((size_t)1 << 53);
  if (a->ranks != b->ranks || !mem_ok || a->threads != b->threads ||
      strcmp(a->backend, b->backend) || !near(a->flops, b->flops) ||
      !near(a->optimizer_s_per_param, b->optimizer_s_per_param))
    fuzz_die("device round trip", "a top-level field changed");
  if (device_ranks_per_host(a) != device_ranks_per_host(b)) fuzz_die("device round trip", "ranks_per_host changed");
  for (int k = 0; k < COLL_COUNT; k++) {
    if (a->inter_given[k] != b->inter_given[k]) fuzz_die("device round trip", "an inter_host collective changed");
    for (int l = 0; l < LINK_LEVELS; l++) {
      if (device_link_ranks(a, l, k) != device_link_ranks(b, l, k))
        fuzz_die("device round trip", "a level's measured_ranks changed");
      collective_expect_equal(device_link(a, l, k), device_link(b, l, k));
    }
  }
  if (a->n_op_times != b->n_op_times) fuzz_die("device round trip", "compute.ops changed");
  if (a->n_op_times && (strcmp(a->compute_model, b->compute_model) || a->compute_seq != b->compute_seq))
    fuzz_die("device round trip", "compute.model or compute.seq changed");
  for (int i = 0; i < a->n_op_times; i++) {
    const OpTime *x = &a->op_times[i], *y = &b->op_times[i];
    if (strcmp(x->name, y->name)) fuzz_die("device round trip", "an op name changed");
    for (int l = 0; l < DEVICE_SLICE_LEVELS; l++)
      if (x->measured[l] != y->measured[l] ||
          (x->measured[l] && (!near(x->fixed_s[l], y->fixed_s[l]) || !near(x->per_sample_s[l], y->per_sample_s[l]))))
        fuzz_die("device round trip", "an op time changed");
  }
}

/* libFuzzer's entry point: one device file per call. */
int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const char *path, *again;
  const GptDesc* tiny = fuzz_tiny_model();
  if (!path) {
    path = fuzz_temp_path(NULL, "device.json", 0);
    again = fuzz_temp_path(NULL, "device-again.json", 0);
  }
  fuzz_write_file(path, data, size);
  osdp_clear_error();
  DeviceInfo dev;
  if (device_load(&dev, path)) {
    fuzz_expect_message("device_load");
    return 0;
  }
  /* The planner's questions: collectives of a few sizes, every op at a few slice counts, at
  ** the measured sequence length (so measured entries are used) and at another. */
  volatile double sink = 0;
  for (int k = 0; k < COLL_COUNT; k++)
    for (double bytes = 1; bytes < 1e10; bytes *= 37) {
      sink += device_step_collective_s(&dev, k, bytes);
      for (int G = 1; G <= dev.ranks && G <= 64; G++)
        if (dev.ranks % G == 0)
          sink += device_shape_step_s(&dev, device_group_shape(&dev, G), k, bytes) +
                  device_shape_step_s(&dev, device_across_shape(&dev, G), k, bytes);
    }
  int seqs[2] = {dev.compute_seq, 64};
  for (int s = 0; s < 2; s++)
    for (int i = 0; i < tiny->nops; i++)
      for (int kk = 1; kk <= GPT_MAX_SLICES; kk++)
        sink += device_op_time_s(&dev, tiny, i, 3, seqs[s], kk);
  (void)sink;
  if (device_save(&dev, again)) fuzz_die("device_save", osdp_last_error());
  DeviceInfo back;
  if (device_load(&back, again)) fuzz_die("device_load refused device_save's output", osdp_last_error());
  device_expect_equal(&dev, &back);
  device_free(&back);
  device_free(&dev);
  return 0;
}
