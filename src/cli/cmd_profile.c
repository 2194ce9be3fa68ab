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

static const char* profile_help =
    "usage: [mpirun -np N] osdp profile [--model M] [--seq T] [--threads N] [--mem-limit SIZE]\n"
    "                                   [--steps N] [--device cpu|cuda] --out device.json\n"
    "  measures, on the N ranks: all-reduce / all-gather / reduce-scatter times from 1 KiB to\n"
    "  16 MiB among the ranks of each host and, when the job spans hosts, between hosts (the\n"
    "  ranks with the same local index on every host); every operator's forward+backward compute\n"
    "  inside real training steps at\n"
    "  micro-batch 1, 2, 4, ... (until a step takes 0.25 s), unsplit and in k = 2, 4, 8 slices;\n"
    "  the optimizer's time per parameter and the rest of a step; how much slower each\n"
    "  collective is inside a step than alone, and how much of it overlaps compute (dp buckets,\n"
    "  zero3 prefetch); and writes them to device.json for osdp plan --devices.\n";

/* Parses the profile options shared with `train --plan auto`. */
int profile_options_from_args(const Args* a, const GptDesc* d, ProfileOptions* o) {
  long T, threads, steps;
  memset(o, 0, sizeof *o);
  if (args_int(a, "seq", d->cfg.max_seq < 256 ? d->cfg.max_seq : 256, 1, d->cfg.max_seq, &T) ||
      args_int(a, "threads", 1, 1, 256, &threads) || args_int(a, "profile-steps", 3, 1, 100, &steps) ||
      args_size(a, "mem-limit", 0, &o->mem_limit))
    return -1;
  o->seq = (int)T;
  o->threads = (int)threads;
  o->steps = (int)steps;
  return (o->backend = setup_backend(a)) ? 0 : -1;
}

int cmd_profile(int argc, char** argv) {
  if (argc > 0 && strcmp(argv[0], "--help") == 0) { fputs(profile_help, stdout); return 0; }
  static const char* const opts[] = {"model", "seq", "threads", "mem-limit", "profile-steps", "out", "device",
                                     "tf32", "precision", NULL};
  static const char* const sws[] = {"quiet", NULL};
  Args a;
  GptDesc d;
  ProfileOptions po;
  DeviceInfo dev;
  if (args_parse(&a, "profile", argc, argv, opts, sws) || setup_model(&a, "tiny", &d) ||
      profile_options_from_args(&a, &d, &po))
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
