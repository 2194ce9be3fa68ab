/* setup.c: model, plan and option set-up shared by the subcommands; see setup.h. */
#include "cli/setup.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli/profile_cache.h"
#include "comm/comm.h"
#include "core/output.h"
#include "core/util.h"
#include "model/safetensors.h"
#include "model/weights_file.h"
#include "runtime/train_state.h"

int setup_model(const Args* a, const char* def, GptDesc* d) {
  const char* name = args_get(a, "model", NULL);
  const char* load = args_get(a, "load", NULL);
  GptConfig cfg, ck;
  char why[128];
  /* --load is an llm.c checkpoint, a safetensors file, index or model directory (told apart by
  ** content); a GPT-2 safetensors file without osdp's metadata or a config.json beside it does
  ** not say its number of heads (ck.n_head = 0). */
  if (load && weights_read_config(load, &ck)) return -1;
  if (name) {
    if (gpt_config_load(name, &cfg)) return -1;
    if (load && weights_config_differs(&cfg, &ck, why, sizeof why)) {
      char heads[16] = "?";
      if (ck.n_head) snprintf(heads, sizeof heads, "%d", ck.n_head);
      return osdp_fail("--load: %s holds a model of L=%d C=%d heads=%s V=%d maxT=%d, but --model %s "
                       "is L=%d C=%d heads=%d V=%d maxT=%d (%s); drop --model to use the "
                       "checkpoint's", load, ck.n_layer, ck.n_embd, heads, ck.vocab_size,
                       ck.max_seq, name, cfg.n_layer, cfg.n_embd, cfg.n_head, cfg.vocab_size,
                       cfg.max_seq, why);
    }
  } else if (load) {
    if (ck.n_head == 0)
      return osdp_fail("--load: %s does not record its number of heads (no n_head in its "
                       "safetensors __metadata__, no config.json beside it); give --model with "
                       "the model's shape (a preset, a JSON file or a config.json)", load);
    cfg = ck;
  } else if (gpt_config_load(def, &cfg)) {
    return -1;
  }
  return gpt_desc_build(d, &cfg);
}

/* The layer count of --recompute N|all into *n: 1 when given, 0 when absent, -1 with an error
** naming the value when it is not a count of d's layers. */
static int recompute_count(const Args* a, const GptDesc* d, int* n) {
  const char* v = args_get(a, "recompute", NULL);
  if (!v) return 0;
  int L = d->cfg.n_layer;
  char* end = NULL;
  long c = strcmp(v, "all") == 0 ? L : strtol(v, &end, 10);
  if (end && (end == v || *end || c < 0 || c > L))
    return osdp_fail("--recompute: '%s' is not a layer count; give 0..%d (model %s has %d layers) "
                     "or all", v, L, d->cfg.name, L);
  *n = (int)c;
  return 1;
}

int setup_recompute(const Args* a, const GptDesc* d, Plan* p) {
  int n = 0, rc = recompute_count(a, d, &n);
  if (rc > 0) plan_set_recompute(p, n);
  return rc < 0 ? -1 : 0;
}

int setup_recompute_search(const Args* a, const GptDesc* d, SearchOptions* so) {
  int n = 0, rc = recompute_count(a, d, &n);
  if (rc > 0) so->min_recompute = so->max_recompute = n;
  return rc < 0 ? -1 : 0;
}

/* The G of --shard-group into *G (0 when absent): it must divide the `ranks`; -1 with an error
** naming the value otherwise. */
static int shard_group_option(const Args* a, int ranks, int* G) {
  const char* g = args_get(a, "shard-group", NULL);
  *G = 0;
  if (!g) return 0;
  char* end = NULL;
  long v = strtol(g, &end, 10);
  if (end == g || *end || v < 1 || v > ranks || ranks % v)
    return osdp_fail("--shard-group: '%s' must divide the %d ranks (sharded slices then shard within "
                     "groups of G ranks, e.g. the ranks per host, and replicate across the groups)",
                     g, ranks);
  *G = (int)v;
  return 0;
}

void setup_cap_batch(const Args* a, const GptDesc* d, const DeviceInfo* dev, SearchOptions* so, int quiet) {
  if (args_has(a, "max-batch") || args_has(a, "batch")) return;
  int cap = planner_cap_batch(d, dev, so);
  if (cap && !quiet) {
    printf("plan: micro-batches up to %d, %dx the largest the op times were measured at (%d); "
           "--max-batch B searches further on extrapolated times\n", cap, PLANNER_EXTRAPOLATE,
           dev->compute_max_batch);
    fflush(stdout);
  }
}

/* --keep: KEEP_* bits into *keep (unset: *keep unchanged); -1 with an error naming the value. */
static int keep_option(const Args* a, int* keep) {
  const char* k = args_get(a, "keep-whole", NULL);
  if (!k) return 0;
  if ((*keep = keep_parse(k)) < 0)
    return osdp_fail("--keep-whole: '%s' must be none, grad, weight or grad+weight (what sharded slices "
                     "keep whole across micro-steps)", k);
  return 0;
}

int setup_search_options(const Args* a, const GptDesc* d, int ranks, SearchOptions* so) {
  int keep = KEEP_ALL;
  if (keep_option(a, &keep)) return -1;
  so->keep_off = KEEP_ALL & ~keep;
  const char* rd = args_get(a, "reduce-dtype", "fp32");
  if (strcmp(rd, "auto") == 0) so->reduce_dtype = SEARCH_REDUCE_AUTO;
  else if (reduce_dtype_parse(rd) >= 0) so->reduce_dtype = reduce_dtype_parse(rd);
  else
    return osdp_fail("--reduce-dtype: '%s' must be fp32, bf16 or auto (the element type of gradient "
                     "reductions; auto: the planner chooses per plan)", rd);
  int G;
  if (shard_group_option(a, ranks, &G)) return -1;
  if (G) so->shard_group = G;
  if (args_has(a, "global-batch")) {
    long gb;
    if (args_int(a, "global-batch", 0, 1, 1L << 30, &gb)) return -1;
    if (gb % ranks)
      return osdp_fail("--global-batch %ld is not a multiple of the %d ranks; use a multiple of %d",
                       gb, ranks, ranks);
    so->global_batch = gb;
  }
  return setup_recompute_search(a, d, so);
}

int setup_claim_files(const Args* a, const char* const* outputs) {
  static const char* const inputs[] = {"model", "load", "plan", "devices", "resume", "tokenizer", NULL};
  char field[48];
  for (int i = 0; inputs[i]; i++) {
    snprintf(field, sizeof field, "--%s", inputs[i]);
    if (out_claim_input(args_get(a, inputs[i], NULL), field)) return -1;
  }
  const char* data = args_get(a, "data", NULL);
  const char* colon = data ? strchr(data, ':') : NULL;
  if (colon && (strncmp(data, "text:", 5) == 0 || strncmp(data, "tokens:", 7) == 0) &&
      out_claim_input(colon + 1, "--data"))
    return -1;
  for (int i = 0; outputs && outputs[i]; i++) {
    snprintf(field, sizeof field, "--%s", outputs[i]);
    if (out_claim_output(args_get(a, outputs[i], NULL), field)) return -1;
  }
  return 0;
}

int setup_plan_options(const Args* a, const GptDesc* d, Plan* p) {
  if (args_has(a, "prefetch")) p->prefetch = 1;
  if (args_has(a, "overlap-reduce")) p->overlap_reduce = 1;
  int G, keep = -1;
  if (shard_group_option(a, p->world, &G)) return -1;
  if (G) plan_set_group(p, G);
  if (keep_option(a, &keep)) return -1;
  if (keep >= 0) plan_set_keep(p, keep);
  int can = 0; /* what the plan's ops can keep at all */
  for (int i = 0; keep > 0 && i < p->nops; i++) can |= op_keep_allowed(&p->ops[i]);
  if (keep > 0 && (keep & ~can))
    return osdp_fail("--keep-whole %s: this plan has no %s slice to keep %s for; use it with "
                     "%s, or drop it", keep_name(keep), keep & ~can & KEEP_GRAD ? "zero2 or zero3" : "zero3",
                     keep & ~can & KEEP_GRAD ? "a gradient" : "a weight",
                     keep & ~can & KEEP_GRAD ? "--plan zero2 or zero3" : "--plan zero3");
  const char* rd = args_get(a, "reduce-dtype", NULL);
  if (rd) {
    int t = reduce_dtype_parse(rd);
    if (t < 0)
      return osdp_fail("--reduce-dtype: '%s' is not fp32 or bf16 (bf16: gradients travel as bf16 "
                       "and are summed in fp32; auto is for --plan auto and osdp plan)", rd);
    p->reduce_dtype = (ReduceDtype)t;
  }
  if (args_get(a, "head-rows", NULL)) {
    long r;
    if (args_int(a, "head-rows", 0, 1, 1L << 24, &r)) return -1;
    p->head_rows = (int)r;
  }
  if (args_get(a, "precision", NULL) && setup_precision(a, &p->precision)) return -1;
  return setup_recompute(a, d, p);
}

int setup_plan(const Args* a, const GptDesc* d, int B, int T, int B_given, int T_given, Plan* p) {
  const char* spec = args_get(a, "plan", "ddp");
  int world = comm_size();
  int s = strategy_parse(strcmp(spec, "ddp") == 0 ? "dp" : spec);
  if (s >= 0) {
    if (plan_uniform(p, d, (Strategy)s, world, B, T)) return -1;
    if (setup_plan_options(a, d, p)) return -1;
    return plan_validate(p, d, world);
  }
  if (plan_load(p, d, spec)) return -1;
  if (setup_plan_options(a, d, p)) return -1;
  if (B_given && p->micro_batch != B)
    return osdp_fail("--batch %d differs from micro_batch=%d of plan %s; drop --batch or re-plan",
                     B, p->micro_batch, spec);
  if (T_given && p->seq != T)
    return osdp_fail("--seq %d differs from seq_len=%d of plan %s; drop --seq or re-plan", T,
                     p->seq, spec);
  return plan_validate(p, d, world);
}

int setup_matmul_mode(const Args* a, MatmulMode* mode) {
  const char* matmul = args_get(a, "matmul", NULL);
  const char* tf32 = args_get(a, "tf32", NULL);
  int m = MATMUL_TF32, from_tf32 = -1;
  if (matmul && (m = matmul_mode_parse(matmul)) < 0)
    return osdp_fail("--matmul: '%s' is not fp32, tf32 or bf16", matmul);
  if (tf32) {
    if (strcmp(tf32, "on") && strcmp(tf32, "off"))
      return osdp_fail("--tf32: '%s' is not on or off", tf32);
    from_tf32 = strcmp(tf32, "on") == 0 ? MATMUL_TF32 : MATMUL_FP32;
  }
  if (matmul && tf32 && m != from_tf32)
    return osdp_fail("--matmul %s and --tf32 %s disagree (--tf32 on is --matmul tf32, off is "
                     "--matmul fp32); give only --matmul", matmul, tf32);
  *mode = (MatmulMode)(tf32 && !matmul ? from_tf32 : m);
  return 0;
}

int setup_precision(const Args* a, Precision* prec) {
  const char* name = args_get(a, "precision", "fp32");
  int p = precision_parse(name);
  if (p != PRECISION_FP32 && p != PRECISION_BF16)
    return osdp_fail("--precision: '%s' is not fp32 or bf16 (bf16: bf16 activations and weight "
                     "copies, fp32 master weights, gradients and optimizer state)",
                     name);
  *prec = (Precision)p;
  return 0;
}

const Backend* setup_backend(const Args* a) {
  MatmulMode mode;
  Precision prec = PRECISION_FP32;
  if (setup_matmul_mode(a, &mode) || setup_precision(a, &prec)) return NULL;
  const Backend* bk = backend_by_name(args_get(a, "device", "cpu"), "--device");
  if (bk && backend_check_precision(bk, prec)) return NULL;
  if (bk) bk->set_matmul_mode(mode);
  return bk;
}

/* Checks --grad-clip (0: off, else the largest global gradient norm) and --weight-decay (>= 0,
** and lr x weight_decay below 1: AdamW scales every decayed weight by 1 - lr x weight_decay each
** step, which at 1 or more zeroes or flips it). */
static int check_decay_clip(const TrainOptions* o) {
  if (o->grad_clip < 0)
    return osdp_fail("--grad-clip: %g must be 0 (off) or positive (the largest global gradient "
                     "norm)", o->grad_clip);
  if (o->weight_decay < 0 || o->lr * o->weight_decay >= 1)
    return osdp_fail("--weight-decay %g with --lr %g: the decay must be >= 0 and lr x weight_decay "
                     "(%g) below 1 (each step scales every decayed weight by 1 - lr x "
                     "weight_decay); use a --weight-decay from 0 to below %g", o->weight_decay,
                     o->lr, o->lr * o->weight_decay, 1 / o->lr);
  return 0;
}

int setup_train_options(const Args* a, TrainOptions* o) {
  train_options_default(o);
  if (!(o->backend = setup_backend(a))) return -1;
  long threads, seed, warmup;
  /* The command line's defaults (lr 1e-2, 100 warm-up steps) suit the built-in tiny demo;
  ** GPT-2-sized models want about 6e-4. */
  if (args_double(a, "lr", 1e-2, &o->lr) || args_int(a, "seed", (long)o->seed, 0, 1L << 62, &seed) ||
      args_int(a, "threads", 1, 1, 256, &threads) || args_size(a, "mem-limit", 0, &o->mem_limit) ||
      args_int(a, "warmup", 100, 0, 1L << 30, &warmup) ||
      args_double(a, "weight-decay", o->weight_decay, &o->weight_decay) ||
      args_double(a, "grad-clip", o->grad_clip, &o->grad_clip))
    return -1;
  if (o->lr <= 0 || o->lr > 10) return osdp_fail("--lr: %g must be in (0, 10]", o->lr);
  if (check_decay_clip(o)) return -1;
  if (args_has(a, "mem-limit") && o->mem_limit == 0)
    return osdp_fail("--mem-limit: 0 is not a limit; give bytes such as 512MiB, or omit it");
  o->seed = (unsigned long long)seed;
  o->threads = (int)threads;
  o->warmup = (int)warmup;
  return 0;
}

/* --devices FILE for --plan auto: the device file on every rank, for this run's ranks, with
** --mem-limit (when given) in place of the file's. */
static int auto_devices_file(const Args* a, const char* path, const ProfileOptions* po,
                             DeviceInfo* dev) {
  int rc = devices_load_shared(path, dev);
  if (!rc && (dev->ranks != comm_size() || device_ranks_per_host(dev) != comm_ranks_per_host())) {
    rc = osdp_fail("--devices: %s describes %d rank(s), %d per host, but this run has %d, %d per "
                   "host; profile these ranks (drop --devices) or run on the ranks it describes",
                   path, dev->ranks, device_ranks_per_host(dev), comm_size(), comm_ranks_per_host());
    device_free(dev);
  }
  if (!rc && dev->precision != po->precision) {
    rc = osdp_fail("--devices: %s measured %s steps but this run is --precision %s; profile this "
                   "precision (drop --devices) or run in the file's", path,
                   precision_name(dev->precision), precision_name(po->precision));
    device_free(dev);
  }
  if (!rc && po->mem_limit) dev->mem_limit = po->mem_limit;
  if (!rc && comm_rank() == 0 && po->verbose)
    printf("profile: none; planning with the device file %s\n", path);
  return rc;
}

/* The device information --plan auto plans with: --devices FILE; else this setting's profile
** from the cache (profile_cache.h) unless --reprofile; else a new profile, then cached. With a
** cache, trial (room for 4200 bytes) receives the path of the trial kept beside the profile, and
** *reuse_trial whether it may be reused (not under --reprofile). */
static int auto_device(const Args* a, const GptDesc* d, const ProfileOptions* po, long trial_steps,
                       DeviceInfo* dev, char* trial, int* reuse_trial) {
  const char* given = args_get(a, "devices", NULL);
  trial[0] = 0;
  *reuse_trial = !args_has(a, "reprofile");
  if (given) return auto_devices_file(a, given, po, dev);
  char dir[4096], key[PROFILE_KEY_MAX], path[4200];
  if (profile_cache_dir(a, dir, sizeof dir)) return -1;
  profile_cache_key(d, po, key);
  MatmulMode mode;
  if (po->backend && po->backend != backend_cpu() && !setup_matmul_mode(a, &mode)) {
    /* A GPU's op times depend on the matmul mode: a profile of another mode is not reused (the
    ** CPU computes in fp32 in every mode). */
    size_t used = strlen(key);
    snprintf(key + used, PROFILE_KEY_MAX - used, "matmul %s\n", matmul_mode_name(mode));
  }
  if (dir[0]) trial_cache_path(dir, key, po->mem_limit, (int)trial_steps, trial, 4200);
  int verbose = comm_rank() == 0 && po->verbose;
  if (!args_has(a, "reprofile") && dir[0] && profile_cache_find(dir, key, d, po->seq, dev, path, sizeof path)) {
    if (verbose)
      printf("profile: reusing %s (measured before for this model, seq, ranks, threads, limit, "
             "machine and build; --reprofile measures anew)\n", path);
    return 0;
  }
  double t0 = now_seconds();
  if (profile_device(d, po, dev)) return -1;
  if (!dir[0]) return 0;
  int stored = 0;
  if (comm_rank() == 0 && profile_cache_store(dir, key, dev, path, sizeof path))
    fprintf(stderr, "osdp: note: the profile was not cached (%s); the next start profiles again\n",
            osdp_last_error());
  else if (comm_rank() == 0)
    stored = 1;
  if (verbose && stored)
    printf("profile: %.1f s; kept in %s for the next start\n", now_seconds() - t0, path);
  /* Plan with the numbers as kept, as the next start will: the file holds them to 15
  ** significant digits, and where two plans nearly tie, the last bits could choose another
  ** candidate list than the next start's, which then would not find this start's trial. */
  DeviceInfo kept;
  if (comm_allreduce_max_f64(comm_world(), stored) > 0 &&
      profile_cache_find(dir, key, d, po->seq, &kept, path, sizeof path)) {
    device_free(dev);
    *dev = kept;
  }
  return 0;
}

int setup_auto_plan(const Args* a, const GptDesc* d, int T, int min_batch, int max_batch, int quiet,
                    Plan* p, PlanCost* cost, PlanReport* report) {
  ProfileOptions po;
  DeviceInfo dev;
  if (profile_options_from_args(a, d, T, &po)) return -1;
  po.verbose = !quiet;
  long trial_steps;
  if (args_int(a, "trial-steps", 1, 0, 1000, &trial_steps)) return -1;
  char trial[4200];
  int reuse;
  if (auto_device(a, d, &po, trial_steps, &dev, trial, &reuse)) return -1;
  SearchOptions so;
  planner_default_options(&so, T);
  so.max_batch = max_batch;
  so.min_batch = min_batch;
  if (setup_search_options(a, d, dev.ranks, &so)) { device_free(&dev); return -1; }
  setup_cap_batch(a, d, &dev, &so, quiet || comm_rank() != 0);
  memset(report, 0, sizeof *report);
  snprintf(report->trial_cache, sizeof report->trial_cache, "%s", trial);
  report->reuse_trial = reuse;
  report->quiet = quiet;
  report->trial_steps = (int)trial_steps;
  int rc = plan_and_report(d, &dev, &so, report, p, cost);
  device_free(&dev);
  return rc;
}

/* ---- The flags above, for the commands' help --------------------------------------------- */

const OptionSpec setup_model_options[] = {
    {"model", "M", "tiny", "a preset or a JSON file: GPT-2 (tiny, small, gpt2-124m, gpt2-350m,\n"
                           "gpt2-774m, gpt2-1.5b) or Llama family (llama-tiny, qwen-tiny, llama-small,\n"
                           "smollm2-135m, tinyllama-1.1b, llama3.2-1b, llama3-8b, qwen2.5-0.5b)"},
    {NULL, NULL, NULL, NULL}};

const OptionSpec setup_optimizer_options[] = {
    {"lr", "X", "1e-2", "AdamW's learning rate (GPT-2-sized models want about 6e-4)"},
    {"warmup", "N", "100", "steps of linear learning-rate warm-up"},
    {"weight-decay", "X", "0.1", "AdamW's decoupled weight decay"},
    {"grad-clip", "X", "1", "the gradient's global norm is clipped to X (0: no clipping)"},
    {"seed", "S", "1337", "weight-initialisation and data seed"},
    {NULL, NULL, NULL, NULL}};

const OptionSpec setup_rank_options[] = {
    {"threads", "N", "1", "kernel threads per rank"},
    {"mem-limit", "SIZE", "unlimited", "memory limit per rank (per GPU with --device cuda), e.g. 512MiB"},
    {NULL, NULL, NULL, NULL}};

const OptionSpec setup_plan_switches[] = {
    {"prefetch", NULL, NULL, "gather the next zero3 weight while the current one computes"},
    {"shard-group", "G", NULL, "sharded slices shard within groups of G ranks (G divides N; e.g. the\n"
                               "ranks per host) and replicate across the groups (hybrid sharding)"},
    {"overlap-reduce", NULL, NULL, "zero2/zero3 gradient reduce-scatters run while the next gradient computes"},
    {"keep-whole", "K", "none, or a plan's", "what sharded slices keep whole across an optimizer step's\n"
                                       "micro-steps: grad (each gradient reduce-scattered once per\n"
                                       "step), weight (each zero3 weight gathered once per step),\n"
                                       "grad+weight or none; with --plan auto and osdp plan: what the\n"
                                       "planner may choose per op (default grad+weight)"},
    {"reduce-dtype", "T", "fp32", "fp32, or bf16: gradients travel as bf16, summed in fp32 (half the\n"
                                  "bytes; losses stay within 1e-4 of fp32's); with --plan auto and\n"
                                  "osdp plan also auto: the planner chooses"},
    {"head-rows", "R", "128 MiB of logits, or a plan's",
     "rows of logits the fused LM head and loss compute at once (the logits\n"
     "never exist whole): fewer, less memory"},
    {"recompute", "N|all", NULL, "the first N layers (or all) keep only their output and recompute the\n"
                                 "rest in backward: less activation memory, one more forward per layer\n"
                                 "(with --plan auto: exactly N layers; without it the planner chooses)"},
    {NULL, NULL, NULL, NULL}};

const OptionSpec setup_auto_options[] = {
    {"max-batch", "B", "512, or --batch", "with --plan auto: the largest micro-batch to consider\n"
                                          "(train --batch B instead fixes it at B)"},
    {"trial-steps", "N", "1", "with --plan auto: steps each candidate plan trains in the trial (at\n"
                              "least 1/3 s of steps each), in one round per 2 steps, at most 3 (6:\n"
                              "three rounds, surer between close candidates; 0: the prediction\n"
                              "alone chooses)"},
    {"devices", "FILE", NULL, "with --plan auto: plan with this device file (osdp profile --out)\n"
                              "instead of profiling"},
    {"profile-cache", "DIR|off", "~/.cache/osdp",
     "with --plan auto: where profiles are kept and reused (keyed by model,\n"
     "seq, ranks, threads, limit, machine and build; with --checkpoint D:\n"
     "D/.osdp-profiles); off: never"},
    {"reprofile", NULL, NULL, "with --plan auto: profile anew even when the cache has this setting's"},
    {NULL, NULL, NULL, NULL}};

const OptionSpec setup_profile_options[] = {
    {"profile-steps", "N", "3", "training steps timed per measurement while profiling (at least:\n"
                                "steps shorter than a third of a second run for a second)"},
    {"profile-layers", "N", "4",
     "layers of the model copy timed (identical layers share their times; 4 run\n"
     "every slice count in one step; more: more samples per op, slower)"},
    {NULL, NULL, NULL, NULL}};

const OptionSpec setup_device_options[] = {
    {"device", "D", "cpu", "cpu, or cuda (the rank's GPU: local rank mod GPUs)"},
    {"matmul", "fp32|tf32|bf16", "tf32",
     "with cuda: matrix products and attention in full fp32, or on tensor cores\n"
     "with inputs rounded to TF32 or to bf16 (fp32 storage and sums)"},
    {"tf32", "on|off", NULL, "the older spelling: on is --matmul tf32, off is --matmul fp32"},
    {"precision", "fp32|bf16", "fp32",
     "storage: fp32, or bf16 activations and weight copies beside fp32\n"
     "master weights, gradients and optimizer state (GPUs)"},
    {NULL, NULL, NULL, NULL}};

/* The model shape of weights file `path` in *cfg: the file's own, or --model's (which must
** agree with the file's; it supplies n_head when a safetensors file does not record it). */
static int weights_config(const char* path, const char* model, const char* who, GptConfig* cfg) {
  GptConfig fc;
  if (weights_read_config(path, &fc)) return -1;
  if (!model) {
    if (fc.n_head == 0)
      return osdp_fail("%s: %s does not record its number of heads (no n_head in its "
                       "safetensors __metadata__); give --model with the model's shape (a preset "
                       "or a JSON file)", who, path);
    *cfg = fc;
    return 0;
  }
  if (gpt_config_load(model, cfg)) return -1;
  char why[128];
  if (!weights_config_differs(cfg, &fc, why, sizeof why)) {
    cfg->padded_vocab = fc.padded_vocab; /* keep the file's padding (llm.c files record it) */
    return 0;
  }
  char heads[16] = "?";
  if (fc.n_head) snprintf(heads, sizeof heads, "%d", fc.n_head);
  return osdp_fail("%s: %s holds a model of L=%d C=%d heads=%s V=%d maxT=%d, but --model %s "
                   "is L=%d C=%d heads=%d V=%d maxT=%d (%s); drop --model to use the file's", who, path,
                   fc.n_layer, fc.n_embd, heads, fc.vocab_size, fc.max_seq, model, cfg->n_layer,
                   cfg->n_embd, cfg->n_head, cfg->vocab_size, cfg->max_seq, why);
}

int setup_read_weights(const char* path, const char* model, const char* who, GptDesc* d,
                       float** params) {
  memset(d, 0, sizeof *d);
  *params = NULL;
  struct stat st;
  if (stat(path, &st) == 0 && S_ISDIR(st.st_mode) && !safetensors_dir_holds(path)) {
    /* A checkpoint directory of osdp train --checkpoint (or one step of it). */
    GptConfig cfg;
    if (train_state_load_params(path, &cfg, params)) return -1;
    GptConfig want;
    if (model && (gpt_config_load(model, &want) || want.n_layer != cfg.n_layer ||
                  want.n_embd != cfg.n_embd || want.vocab_size != cfg.vocab_size ||
                  want.max_seq != cfg.max_seq)) {
      free(*params);
      *params = NULL;
      return osdp_fail("%s: --model %s does not match the checkpoint's model %s", who, model,
                       cfg.name);
    }
    if (gpt_desc_build(d, &cfg)) { free(*params); *params = NULL; return -1; }
    return 0;
  }
  GptConfig cfg;
  if (weights_config(path, model, who, &cfg) || gpt_desc_build(d, &cfg)) return -1;
  *params = malloc(d->n_params * sizeof(float));
  int rc = *params ? weights_load(path, d, *params)
                   : osdp_fail("%s: out of host memory for the %zu parameters of %s",
                               who, d->n_params, path);
  if (rc) {
    free(*params);
    *params = NULL;
    gpt_desc_free(d);
  }
  return rc;
}
