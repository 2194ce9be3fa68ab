/*
** profile.h: measuring device information on the ranks of this run: the latency and
** bandwidth of each collective on the real communicator, the forward+backward time of every
** operator of the model at its real shapes, the optimizer's time per parameter and the sgemm
** rate. The planner then works from measurements rather than datasheets.
*/
#ifndef OSDP_PROFILE_H
#define OSDP_PROFILE_H

#include <stddef.h>

#include "kernels/backend.h"
#include "model/gpt.h"
#include "planner/device.h"

typedef struct ProfileOptions {
  int seq;            /* sequence length the op times are measured at */
  int threads;        /* kernel threads per rank */
  size_t mem_limit;   /* recorded in the device information (0: physical memory / ranks) */
  int steps;          /* timed steps per micro-batch size (after one warm-up) */
  int layers;         /* layers of the copy measured (0: 4, the fewest that run every slice
                      ** level in one step; the model's own when it has no more) */
  int verbose;        /* progress lines on rank 0 */
  const Backend* backend; /* the device measured (NULL: the CPU) */
  Precision precision;    /* the storage every measured step runs in (bf16: a backend with bf16
                          ** kernels); recorded in the device information */
  double started;     /* set by profile_device: when it began (progress lines give the time since) */
} ProfileOptions;

/* Measures everything on all ranks (collective) and fills dev. Returns 0, or -1 with an error
** (e.g. when the model is too large to run here: then describe the hardware by hand). */
int profile_device(const GptDesc* d, const ProfileOptions* o, DeviceInfo* dev);

#endif
