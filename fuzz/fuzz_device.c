/*
** fuzz_device.c: fuzzes device files (device_load, planner/device.h). A device that loads is
** asked for collective and operator times (what the planner does with it), and must survive
** a round trip through device_save and device_load unchanged.
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

/* Aborts unless devices a and b hold the same values (up to near()). */
static void device_expect_equal(const DeviceInfo* a, const DeviceInfo* b) {
  /* mem_limit travels as a JSON number: exact up to 2^53 bytes (8 PiB). */
  int mem_ok = a->mem_limit == b->mem_limit || a->mem_limit > ((size_t)1 << 53);
  if (a->ranks != b->ranks || !mem_ok || a->threads != b->threads ||
      strcmp(a->backend, b->backend) || !near(a->flops, b->flops) ||
      !near(a->optimizer_s_per_param, b->optimizer_s_per_param))
    fuzz_die("device round trip", "a top-level field changed");
  for (int k = 0; k < COLL_COUNT; k++) {
    const CollectiveModel *x = &a->coll[k], *y = &b->coll[k];
    if (!near(x->latency_s, y->latency_s) || !near(x->bandwidth_Bps, y->bandwidth_Bps) ||
        !near(x->overlap, y->overlap) || !near(x->in_step, y->in_step) || !near(x->residual, y->residual) ||
        x->npoints != y->npoints)
      fuzz_die("device round trip", "a collective changed");
    for (int i = 0; i < x->npoints; i++)
      if (!near(x->point_bytes[i], y->point_bytes[i]) || !near(x->point_s[i], y->point_s[i]))
        fuzz_die("device round trip", "a collective's points changed");
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
    for (double bytes = 1; bytes < 1e10; bytes *= 37)
      sink += device_step_collective_s(&dev, k, bytes);
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
