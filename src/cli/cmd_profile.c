/*
** cmd_profile.c: `osdp profile`: measures device information on the ranks it runs on (the
** collectives on the real communicator, every operator's time at the model's shapes) and
** writes it as a device file for `osdp plan --devices`.
*/
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/setup.h"
#include "comm/comm.h"
#include "core/output.h"
#include "core/util.h"
#include "planner/device.h"
#include "planner/profile.h"

static const OptionSpec profile_options[] = {
    {"seq", "T", "the model's max, at most 256", "sequence length the operators are timed at"},
    {"out", "FILE", NULL, "where to write the device information (required)"},
    {"quiet", NULL, NULL, "no progress lines"},
    {NULL, NULL, NULL, NULL}};

static const CommandSpec profile_spec = {
    "profile", "[mpirun -np N] osdp profile [options] --out device.json",
    "  measures, on the N ranks: all-reduce / all-gather / reduce-scatter times from 1 KiB to\n"
    "  16 MiB among the ranks of each host and, when the job spans hosts, between hosts (the\n"
    "  ranks with the same local index on every host); every operator's forward+backward compute\n"
    "  inside real training steps at micro-batch 1, 2, 4, ... (until a step takes 0.25 s),\n"
    "  unsplit and in k = 2, 4, 8 slices; the optimizer's time per parameter and the rest of a\n"
    "  step; how much slower each collective is inside a step than alone, and how much of it\n"
    "  overlaps compute (dp buckets, zero3 prefetch); and writes them to device.json for\n"
    "  osdp plan --devices.",
    {setup_model_options, profile_options, setup_rank_options, setup_profile_options, setup_device_options, NULL},
    NULL};

/* Parses the profile options shared with `train --plan auto`. */
int profile_options_from_args(const Args* a, const GptDesc* d, long def_T, ProfileOptions* o) {
  long T, threads, steps, layers;
  memset(o, 0, sizeof *o);
  if (args_int(a, "seq", def_T, 1, d->cfg.max_seq, &T) ||
      args_int(a, "threads", 1, 1, 256, &threads) || args_int(a, "profile-steps", 3, 1, 100, &steps) ||
      args_int(a, "profile-layers", DEVICE_SLICE_LEVELS, 1, 100000, &layers) ||
      args_size(a, "mem-limit", 0, &o->mem_limit))
    return -1;
  o->seq = (int)T;
  o->threads = (int)threads;
  o->steps = (int)steps;
  o->layers = layers < d->cfg.n_layer ? (int)layers : d->cfg.n_layer;
  if (setup_precision(a, &o->precision)) return -1;
  return (o->backend = setup_backend(a)) ? 0 : -1;
}

int cmd_profile(int argc, char** argv) {
  Args a;
  GptDesc d;
  ProfileOptions po;
  DeviceInfo dev;
  if (args_help(&profile_spec, argc, argv)) return 0;
  if (args_parse(&a, &profile_spec, argc, argv) || setup_model(&a, "tiny", &d) ||
      profile_options_from_args(&a, &d, d.cfg.max_seq < 256 ? d.cfg.max_seq : 256, &po))
    return cli_report_error();
  const char* out = args_get(&a, "out", NULL);
  if (!out) { osdp_fail("osdp profile: --out FILE is required (where to write the device information)"); return cli_report_error(); }
  /* The output fails now, not after the whole profile. */
  static const char* const outputs[] = {"out", NULL};
  if (setup_claim_files(&a, outputs) || (comm_rank() == 0 && check_writable(out, "--out")))
    return cli_report_error();
  po.verbose = !args_has(&a, "quiet");
  if (profile_device(&d, &po, &dev)) return cli_report_error();
  int rc = comm_rank() == 0 ? device_save(&dev, out) : 0;
  if (!rc && comm_rank() == 0 && po.verbose)
    printf("profile: %d rank(s), %d per host, sgemm %.1f GFLOP/s, optimizer %.2f ns/param; wrote %s\n",
           dev.ranks, device_ranks_per_host(&dev), dev.flops / 1e9, 1e9 * dev.optimizer_s_per_param, out);
  device_free(&dev);
  gpt_desc_free(&d);
  return rc ? cli_report_error() : 0;
}
