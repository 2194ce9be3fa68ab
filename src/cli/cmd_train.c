/*
** cmd_train.c: `osdp train`: trains a model on a data source under a plan, showing progress,
** logging JSON lines, evaluating on the held-out split and saving an llm.c checkpoint.
*/
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/run_plot.h"
#include "cli/sample.h"
#include "cli/setup.h"
#include "comm/comm.h"
#include "core/output.h"
#include "core/util.h"
#include "data/data.h"
#include "model/weights_file.h"
#include "planner/cost.h"
#include "runtime/engine.h"
#include "runtime/ckpt_dir.h"
#include "runtime/train_state.h"

static const OptionSpec train_run_options[] = {
    {"data", "D", "addition", "addition | addition:N | text:FILE | tokens:FILE (llm.c .bin)"},
    {"tokenizer", "PATH|bytes", "its model's", "how text:FILE becomes tokens: a Hugging Face\n"
                  "tokenizer.json (or a directory holding one; osdp tokenize), or bytes\n"
                  "(ids 0-255); by default the --model or --load directory's\n"
                  "tokenizer.json, else bytes for a vocabulary of at most 256"},
    {"steps", "N", "2000", "training steps (0: none; the model, e.g. a --load'ed one, is evaluated\n"
                          "and --save'd as it is)"},
    {"batch", "B", "16", "micro-batch per rank; the global batch is N*B*K (with --plan auto: fixed\n"
                                  "at B when given; absent, the planner chooses it)"},
    {"global-batch", "G", "N*B*K", "sequences per optimizer step: N ranks x micro-batch B x K\n"
                                   "micro-steps whose gradients add up (K = G/(N*B); with --plan auto\n"
                                   "the planner chooses B and K); the losses of one process on all G"},
    {"accum", "K", "1, or a plan's", "micro-steps per optimizer step (gradient accumulation)"},
    {"seq", "T", "64", "sequence length"},
    {"plan", "P", "ddp", "ddp | zero2 | zero3 | plan.json | auto (profile, plan, train)"},
    {"lr-schedule", "S", "constant", "constant, or cosine (decay to lr/10 at the last step)"},
    {"eval-batches", "N", "8", "held-out global batches evaluated at the end"},
    {"eval-every", "N", "0", "also evaluate every N steps: held-out loss (and accuracy) shown\n"
                             "and logged (0: only at the end)"},
    {"problems", "N", "5", "addition: held-out problems the trained model answers at the end,\n"
                           "shown with whether each is right (0: none)"},
    {NULL, NULL, NULL, NULL}};

static const OptionSpec train_file_options[] = {
    {"log", "FILE", NULL, "one JSON object per step, then a summary line"},
    {"plot", "FILE", NULL, "at the end, draw the run as SVG: loss and held-out loss, tokens/s and\n"
                           "peak memory by step (osdp plot draws logs, several overlaid)"},
    {"save", "FILE", NULL, "save the weights: safetensors (Hugging Face names) for FILE.safetensors\n"
                           "and Llama models, else an llm.c GPT-2 checkpoint (fp32, version 3)"},
    {"load", "FILE", NULL, "start from an llm.c checkpoint or a safetensors file (HF names)"},
    {"checkpoint", "DIR", NULL, "every --checkpoint-every N steps and at the end, DIR/step-N/: each\n"
                                "rank's weights and AdamW moments, a manifest; written whole or not at\n"
                                "all. DIR belongs to one run: another run's checkpoints there are refused"},
    {"checkpoint-every", "N", "0", "steps between checkpoints (0: only at the end)"},
    {"checkpoint-overwrite", NULL, NULL, "delete the checkpoints of other runs in DIR first"},
    {"keep", "K", "2", "this run's checkpoints kept in DIR, newest first"},
    {"resume", "PATH", NULL, "continue from a checkpoint: DIR's newest complete one, or DIR/step-N\n"
                             "(--steps counts from the start); any ranks, micro-batch and plan with\n"
                             "the same global batch and data"},
    {"resume-data-changed", "ok", NULL, "resume although the data file differs from the checkpoint's"},
    {"stop-after", "N", NULL, "end this run after step N with its checkpoint, as if stopped there"},
    {NULL, NULL, NULL, NULL}};

static const OptionSpec train_watch_options[] = {
    {"on-nonfinite", "P", "stop", "a step whose loss or gradient norm is not finite: stop (naming the\n"
                                  "step) or skip its update"},
    {"watchdog", "S", "300", "end the job when a rank is silent for S s, or a step makes no progress\n"
                             "for max(S, 10 x the median step; the first ones 10 x S), or a\n"
                             "checkpoint write for S plus 4x its expected time (0: off; else >= 1)"},
    {"json", NULL, NULL, "print the summary as JSON on stdout"},
    {"quiet", NULL, NULL, "no progress lines"},
    {NULL, NULL, NULL, NULL}};

static const CommandSpec train_spec = {
    "train", "[mpirun -np N] osdp train [options]", NULL,
    {setup_model_options, train_run_options, setup_plan_switches, setup_auto_options,
     setup_profile_options, setup_optimizer_options, setup_rank_options, setup_device_options, train_file_options,
     train_watch_options, NULL},
    NULL};

typedef struct TrainRun {
  Args args;
  GptDesc d;
  Plan plan;
  TrainOptions opt;
  Engine eng;
  DataSource* data;
  FILE* log;
  long steps, eval_batches, eval_every, problems;
  int B, T, quiet, json;
  int plotting;          /* rank 0 with --plot: the steps are kept in `plot` */
  PlotRun plot;
  int auto_plan;
  PlanCost predicted;   /* --plan auto: the planner's prediction */
  PlanReport report;    /* --plan auto: what the trial measured */
  double* step_times;   /* the timed steps' seconds (the first TIMES_KEPT), for the median */
  long ntimes;
  int *tokens, *targets; /* this rank's micro-batch on the host, copied into the engine */
  const char* ckpt_dir;  /* --checkpoint DIR (NULL: none) */
  CkptDir ckpt;          /* the directory, locked while this run writes it */
  long ckpt_every, stop_after, start_step; /* --checkpoint-every, --stop-after, steps resumed */
  char run_id[TRAIN_RUN_ID_MAX]; /* this run's (a resumed run keeps its checkpoint's) */
  int legacy_own;        /* resumed from a checkpoint without a run id */
  long step_now;         /* the 0-based global batch the step being run trains on */
  int data_changed_ok;   /* --resume-data-changed ok */
  double ckpt_rate;      /* the slowest checkpoint write so far, bytes/s (0: none yet) */
  double watchdog_s;     /* --watchdog (0: off) */
  int skip_nonfinite;    /* --on-nonfinite skip (default stop) */
  cJSON* run_desc;       /* what a checkpoint records of this run, and --resume compares */
} TrainRun;

/* What a checkpoint records of this run: the model, data, batch geometry and optimizer settings
** a resumed run must share (world size, micro-batch and plan may differ; the global batch not). */
static cJSON* run_description(const TrainRun* r) {
  const GptConfig* c = &r->d.cfg;
  cJSON* o = cJSON_CreateObject();
  cJSON* m = cJSON_AddObjectToObject(o, "model");
  gpt_config_to_json(c, m);
  cJSON_AddNumberToObject(m, "padded_vocab", c->padded_vocab);
  cJSON_AddStringToObject(o, "data", args_get(&r->args, "data", "addition"));
  if (data_identity(r->data)[0]) cJSON_AddStringToObject(o, "data_file", data_identity(r->data));
  cJSON_AddNumberToObject(o, "seed", (double)r->opt.seed);
  cJSON_AddNumberToObject(o, "seq", r->T);
  cJSON_AddNumberToObject(o, "global_batch", (double)plan_global_batch(&r->plan));
  cJSON_AddNumberToObject(o, "lr", r->opt.lr);
  cJSON_AddNumberToObject(o, "warmup", r->opt.warmup);
  cJSON_AddNumberToObject(o, "decay_steps", (double)r->opt.decay_steps);
  cJSON_AddNumberToObject(o, "lr_min_ratio", r->opt.lr_min_ratio);
  cJSON_AddNumberToObject(o, "weight_decay", r->opt.weight_decay);
  cJSON_AddNumberToObject(o, "grad_clip", r->opt.grad_clip);
  cJSON_AddNumberToObject(o, "beta1", r->opt.beta1);
  cJSON_AddNumberToObject(o, "beta2", r->opt.beta2);
  cJSON_AddNumberToObject(o, "eps", r->opt.eps);
  /* For people: how it was sharded (a resume may shard differently). */
  cJSON_AddNumberToObject(o, "world", comm_size());
  cJSON_AddNumberToObject(o, "micro_batch", r->B);
  cJSON_AddNumberToObject(o, "grad_accum", plan_accum(&r->plan));
  char* plan = plan_to_json(&r->plan, &r->d);
  if (plan) cJSON_AddItemToObject(o, "plan", cJSON_Parse(plan));
  free(plan);
  return o;
}

/* The error for a resumed run whose data file is not the checkpoint's. */
static int data_changed(const char* path, const char* was, const char* now, const char* data) {
  return osdp_fail("--resume: the data %s changed since %s was written (then %s, now %s); resume "
                   "with the data it was trained on, or pass --resume-data-changed ok to go on with "
                   "this one on purpose", data, path, was, now);
}

/* Writes the rank counts that divide global batch G ("1, 2, 4, 8"; at most the first 12) into buf. */
static const char* rank_counts(long G, char* buf, size_t n) {
  size_t at = 0;
  int shown = 0;
  buf[0] = 0;
  for (long k = 1; k <= G && shown < 12 && at < n; k++)
    if (G % k == 0) at += (size_t)snprintf(buf + at, n - at, "%s%ld", shown++ ? ", " : "", k);
  return buf;
}

/* The error for a resumed run whose global batch differs from the checkpoint's. */
static int global_batch_changed(const char* path, long was, long now) {
  char counts[128];
  return osdp_fail("--resume: %s was trained with a global batch of %ld sequences, this run has %ld; "
                   "resume with --global-batch %ld on a rank count that divides it (%s), any "
                   "micro-batch and plan", path, was, now, was, rank_counts(was, counts, sizeof counts));
}

/* Whether a checkpoint's run description `was` can continue as run `now`: every field but the
** sharding ones must be equal (the data file's identity too, unless data_ok). On a mismatch,
** an error naming the field and both values. */
static int check_resumable(const cJSON* was, const cJSON* now, const char* path, int data_ok) {
  static const char* const free_fields[] = {"world", "micro_batch", "grad_accum", "plan", NULL};
  for (const cJSON* f = now ? now->child : NULL; f; f = f->next) {
    int skip = 0;
    for (int i = 0; free_fields[i]; i++) skip |= strcmp(f->string, free_fields[i]) == 0;
    const cJSON* w = cJSON_GetObjectItemCaseSensitive(was, f->string);
    if (strcmp(f->string, "data_file") == 0) { /* checkpoints before 2026-12 did not record it */
      skip = 1;
      if (w && cJSON_IsString(w) && strcmp(w->valuestring, f->valuestring) && !data_ok)
        return data_changed(path, w->valuestring, f->valuestring,
                            cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(now, "data")));
      if (w && !cJSON_Compare(w, f, 1) && comm_rank() == 0)
        fprintf(stderr, "osdp: note: --resume-data-changed ok: training on a data file that differs "
                "from the checkpoint's\n");
    }
    if (skip) continue;
    if (w && cJSON_Compare(w, f, 1)) continue;
    if (strcmp(f->string, "global_batch") == 0 && cJSON_IsNumber(w))
      return global_batch_changed(path, (long)w->valuedouble, (long)f->valuedouble);
    char* a = w ? cJSON_PrintUnformatted(w) : NULL;
    char* b = cJSON_PrintUnformatted(f);
    osdp_fail("--resume: %s was written with %s %s, this run has %s; resume with the same %s (only "
              "ranks, micro-batch and plan may change, the global batch may not)", path, f->string,
              a ? a : "(none)", b ? b : "?", f->string);
    free(a);
    free(b);
    return -1;
  }
  return 0;
}

/* --resume PATH (a checkpoint directory, or a --checkpoint DIR: its newest complete one): loads
** it into the engine, sets start_step and takes its run id. */
static int train_resume(TrainRun* r) {
  const char* dir = args_get(&r->args, "resume", NULL);
  if (!dir) return 0;
  TrainState ts;
  if (train_state_open_path(dir, &ts)) return -1;
  const char* path = ts.path;
  int rc = 0;
  if (ts.step > r->steps)
    rc = osdp_fail("--resume: %s is at step %ld, past --steps %ld (--steps counts from the start of "
                   "training)", path, ts.step, r->steps);
  if (!rc) rc = check_resumable(ts.run, r->run_desc, path, r->data_changed_ok);
  if (!rc) rc = train_state_load(&r->eng, &ts);
  if (!rc) {
    r->start_step = ts.step;
    snprintf(r->run_id, sizeof r->run_id, "%s", ts.run_id);
    r->legacy_own = ts.run_id[0] == 0;
    if (comm_rank() == 0 && !r->quiet && !r->json)
      printf("resumed from %s (written by %d rank(s)): continuing at step %ld\n", path, ts.world,
             ts.step + 1);
  }
  train_state_close(&ts);
  return (int)comm_allreduce_max_f64(comm_world(), rc ? 1.0 : 0.0) ? -1 : 0;
}

/* --checkpoint DIR, after any resume: the run's id (a new one unless resumed from a checkpoint
** that has one), then DIR made this run's (locked at setup). */
static int train_claim_checkpoints(TrainRun* r) {
  if (!r->ckpt_dir) return 0;
  /* Every rank the same way: rank 0's resumed id, or a new one from rank 0. */
  double fresh = comm_allreduce_max_f64(comm_world(), r->run_id[0] ? 0.0 : 1.0);
  if (fresh > 0) ckpt_new_run_id(r->run_id);
  return ckpt_dir_claim(&r->ckpt, r->run_id, r->start_step, r->legacy_own,
                        args_has(&r->args, "checkpoint-overwrite"));
}

/* That every rank trains the same model, plan and data: the arguments agree (main.c), but a
** file given by the same name may differ between hosts. */
static int train_ranks_agree(const TrainRun* r) {
  const char* keys[] = {"model", "plan", "data_file"};
  const char* what[] = {"the model (--model)", "the plan (--plan)", "the data file (--data)"};
  int rc = 0;
  for (int i = 0; i < 3 && !rc; i++) {
    const cJSON* v = cJSON_GetObjectItemCaseSensitive(r->run_desc, keys[i]);
    char* text = v ? cJSON_PrintUnformatted(v) : NULL;
    rc = cli_ranks_agree(what[i], text ? text : "");
    free(text);
  }
  return rc;
}

/* Whether --plan names a uniform plan (ddp, zero2, zero3), not a file or auto. */
static int plan_is_uniform_name(const Args* a) {
  const char* spec = args_get(a, "plan", "ddp");
  return strcmp(spec, "ddp") == 0 || strcmp(spec, "zero2") == 0 || strcmp(spec, "zero3") == 0;
}

/* The largest divisor of n that is at most cap (at least 1). */
static long largest_divisor_upto(long n, long cap) {
  for (long b = cap < n ? cap : n; b > 1; b--)
    if (n % b == 0) return b;
  return 1;
}

/* --global-batch G and --accum K on a given plan (uniform, or a file): N ranks x micro-batch B x
** K micro-steps = G. G alone sets K = G / (N B); where B is free (a uniform plan without
** --batch) B is first lowered to the largest divisor of G / N not above it. K alone keeps B. Each
** misfit is one error naming the numbers and what works. */
static int train_accum(TrainRun* r, int B_free) {
  const Args* a = &r->args;
  Plan* p = &r->plan;
  long G = 0, K = 0, N = p->world, B = p->micro_batch;
  int hasG = args_has(a, "global-batch"), hasK = args_has(a, "accum");
  if ((hasG && args_int(a, "global-batch", 0, 1, 1L << 30, &G)) ||
      (hasK && args_int(a, "accum", 1, 1, 1 << 20, &K)))
    return -1;
  if (!hasG) {
    if (hasK) p->accum = (int)K;
    return 0;
  }
  char counts[128];
  if (G % N)
    return osdp_fail("--global-batch %ld is not a multiple of the %ld ranks; use a multiple of %ld, "
                     "or run on a rank count that divides %ld (%s)", G, N, N, G,
                     rank_counts(G, counts, sizeof counts));
  long per = G / N; /* sequences each rank trains on per optimizer step */
  if (hasK) {
    if (per % K)
      return osdp_fail("--global-batch %ld on %ld ranks is %ld sequences a rank, which --accum %ld "
                       "micro-steps cannot share evenly; use an --accum that divides %ld", G, N,
                       per, K, per);
    if (!B_free && per / K != B)
      return osdp_fail("--global-batch %ld = %ld ranks x micro-batch %ld x --accum %ld, but the "
                       "micro-batch is %ld (--batch or the plan); drop one of the three", G, N,
                       per / K, K, B);
    p->micro_batch = (int)(per / K);
    p->accum = (int)K;
    return 0;
  }
  if (B_free) B = p->micro_batch = (int)largest_divisor_upto(per, B);
  if (per % B)
    return osdp_fail("--global-batch %ld on %ld ranks is %ld sequences a rank, not a multiple of "
                     "micro-batch %ld; use a --global-batch that is a multiple of %ld, or a --batch "
                     "that divides %ld", G, N, per, B, N * B, per);
  p->accum = (int)(per / B);
  return 0;
}

/* The --plan auto options, read whatever the plan so that a value out of range is refused, not
** ignored: --max-batch and --trial-steps in the ranges setup_auto_plan reads them in,
** --profile-steps and --profile-layers as profile_options_from_args reads them. */
static int train_auto_ranges(TrainRun* r, long T) {
  ProfileOptions po;
  long v;
  if (args_int(&r->args, "max-batch", 512, 1, 1 << 20, &v) ||
      args_int(&r->args, "trial-steps", 1, 0, 1000, &v))
    return -1;
  return profile_options_from_args(&r->args, &r->d, T, &po);
}

/* Whether dir (a --model or --load value) is a directory holding tokenizer.json; its path then
** goes into path (cap bytes). */
static int dir_tokenizer(const char* dir, char* path, size_t cap) {
  struct stat st;
  if (!dir || stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) return 0;
  snprintf(path, cap, "%s/tokenizer.json", dir);
  return stat(path, &st) == 0;
}

/* The tokenizer text:FILE data goes through (*tok; NULL: its bytes): --tokenizer PATH, or
** bytes; else the tokenizer.json of the --model or --load directory; else bytes, which only a
** model whose vocabulary is bytes may take: -1 with an error saying how to give a tokenizer
** otherwise (bytes fed to a 50257-token model train silently on the wrong ids). */
static int train_tokenizer(TrainRun* r, const char** tok) {
  static char found[4200];
  const char* data = args_get(&r->args, "data", "addition");
  const char* opt = args_get(&r->args, "tokenizer", NULL);
  *tok = NULL;
  if (opt) {
    *tok = strcmp(opt, "bytes") == 0 ? NULL : opt;
    return 0;
  }
  if (strncmp(data, "text:", 5) != 0) return 0;
  if (dir_tokenizer(args_get(&r->args, "model", NULL), found, sizeof found) ||
      dir_tokenizer(args_get(&r->args, "load", NULL), found, sizeof found)) {
    *tok = found;
    return 0;
  }
  if (r->d.cfg.vocab_size <= 256) return 0;
  return osdp_fail("--data %s: a text file's bytes are ids 0-255, but model %s has vocab_size %d; "
                   "give --tokenizer PATH (a tokenizer.json, or a model directory holding one), "
                   "tokenize first (osdp tokenize), or --tokenizer bytes to train on bytes anyway",
                   data, r->d.cfg.name, r->d.cfg.vocab_size);
}

/* Reads every option, builds the model, data source, plan and engine. */
static int train_setup(TrainRun* r, int argc, char** argv) {
  static const char* const outputs[] = {"log", "save", "plot", NULL};
  if (args_parse(&r->args, &train_spec, argc, argv) || setup_claim_files(&r->args, outputs))
    return -1;
  long B, T, steps, evb, problems;
  if (args_int(&r->args, "batch", 16, 1, 1 << 20, &B) || args_int(&r->args, "seq", 64, 1, 65536, &T) ||
      args_int(&r->args, "steps", 2000, 0, 1L << 40, &steps) ||
      args_int(&r->args, "eval-batches", 8, 0, 1 << 20, &evb) ||
      args_int(&r->args, "eval-every", 0, 0, 1L << 40, &r->eval_every) ||
      args_int(&r->args, "problems", 5, 0, 1000, &problems) || setup_train_options(&r->args, &r->opt))
    return -1;
  r->steps = steps; r->eval_batches = evb; r->problems = problems;
  long every, keep, stop;
  double watchdog;
  if (args_double(&r->args, "watchdog", 300, &watchdog)) return -1;
  if (watchdog < 0 || (watchdog > 0 && watchdog < 1))
    return osdp_fail("--watchdog: %g must be 0 (off) or at least 1 second: a rank's heartbeat comes "
                     "every 0.25 s, and a shorter bound could not tell a silent rank from a busy one",
                     watchdog);
  if (watchdog > 0 && comm_watchdog_start(watchdog)) return -1;
  r->watchdog_s = watchdog;
  if (args_int(&r->args, "checkpoint-every", 0, 0, 1L << 40, &every) ||
      args_int(&r->args, "keep", 2, 1, 1 << 20, &keep) ||
      args_int(&r->args, "stop-after", 0, 0, 1L << 40, &stop))
    return -1;
  r->ckpt_dir = args_get(&r->args, "checkpoint", NULL);
  r->ckpt_every = every; r->stop_after = stop;
  const char* nf = args_get(&r->args, "on-nonfinite", "stop");
  if (strcmp(nf, "stop") && strcmp(nf, "skip"))
    return osdp_fail("--on-nonfinite: '%s' is not stop or skip", nf);
  r->skip_nonfinite = strcmp(nf, "skip") == 0;
  if (args_has(&r->args, "resume") && args_has(&r->args, "load"))
    return osdp_fail("--load and --resume: give one (--resume restores the weights and the optimizer)");
  if (!r->ckpt_dir && args_has(&r->args, "stop-after"))
    return osdp_fail("--stop-after %ld needs --checkpoint DIR: a stopped run is continued with "
                     "--resume DIR, and without one it would write nothing", stop);
  if (!r->ckpt_dir && (args_has(&r->args, "checkpoint-every") || args_has(&r->args, "keep") ||
                       args_has(&r->args, "checkpoint-overwrite")))
    return osdp_fail("--checkpoint-every / --keep / --checkpoint-overwrite need --checkpoint DIR "
                     "(where to write them)");
  const char* dch = args_get(&r->args, "resume-data-changed", NULL);
  if (dch && strcmp(dch, "ok"))
    return osdp_fail("--resume-data-changed: '%s' is not ok (the only value: resume on purpose with "
                     "a data file that differs from the checkpoint's)", dch);
  if (dch && !args_has(&r->args, "resume"))
    return osdp_fail("--resume-data-changed ok needs --resume (it only affects resuming)");
  r->data_changed_ok = dch != NULL;
  const char* sched = args_get(&r->args, "lr-schedule", "constant");
  if (strcmp(sched, "cosine") == 0) r->opt.decay_steps = steps;
  else if (strcmp(sched, "constant") != 0)
    return osdp_fail("--lr-schedule: '%s' is not a schedule; use cosine or constant", sched);
  r->quiet = args_has(&r->args, "quiet");
  r->json = args_has(&r->args, "json");
  if (setup_model(&r->args, "tiny", &r->d)) return -1;
  if (T > r->d.cfg.max_seq)
    return osdp_fail("--seq %ld is longer than model %s's maximum sequence %d; use --seq <= %d", T,
                     r->d.cfg.name, r->d.cfg.max_seq, r->d.cfg.max_seq);
  if (train_auto_ranges(r, T)) return -1;
  r->auto_plan = strcmp(args_get(&r->args, "plan", "ddp"), "auto") == 0;
  if (r->auto_plan) {
    long maxb;
    if (args_has(&r->args, "accum"))
      return osdp_fail("--accum with --plan auto: give --global-batch G instead (the planner then "
                       "chooses the micro-batch B and the micro-steps K with N B K = G)");
    int fixed = args_has(&r->args, "batch");
    if (fixed && args_has(&r->args, "max-batch"))
      return osdp_fail("--batch and --max-batch: give one (with --plan auto, --batch B fixes the "
                       "micro-batch at B; --max-batch B lets the planner choose up to B)");
    if (args_int(&r->args, "max-batch", fixed ? B : 512, 1, 1 << 20, &maxb)) return -1;
    if (setup_auto_plan(&r->args, &r->d, (int)T, fixed ? (int)B : 1, (int)maxb, r->quiet || r->json,
                        &r->plan, &r->predicted, &r->report))
      return -1;
  } else if (setup_plan(&r->args, &r->d, (int)B, (int)T, args_has(&r->args, "batch"),
                        args_has(&r->args, "seq"), &r->plan) ||
             train_accum(r, !args_has(&r->args, "batch") && plan_is_uniform_name(&r->args)) ||
             plan_validate(&r->plan, &r->d, comm_size())) {
    return -1;
  }
  r->B = r->plan.micro_batch; r->T = r->plan.seq;
  const char* tok = NULL;
  if (train_tokenizer(r, &tok) ||
      data_open_tokenized(&r->data, args_get(&r->args, "data", "addition"), tok, r->T, r->opt.seed))
    return -1;
  if (plan_global_batch(&r->plan) > data_train_sequences(r->data))
    return osdp_fail("--global-batch %ld: %s holds %ld training sequences of %d tokens, fewer than "
                     "one step's global batch; use a global batch of at most %ld, a shorter --seq or "
                     "more data", plan_global_batch(&r->plan), data_describe(r->data),
                     data_train_sequences(r->data), r->T, data_train_sequences(r->data));
  if (data_vocab_size(r->data) > r->d.cfg.vocab_size)
    return osdp_fail("--data: %s has token ids up to %d but model %s has vocab_size %d; use a "
                     "model with vocab_size >= %d (the tokenizer's: GPT-2 50257, Llama 3 128256)",
                     data_describe(r->data), data_vocab_size(r->data) - 1, r->d.cfg.name,
                     r->d.cfg.vocab_size, data_vocab_size(r->data));
  const char* logp = args_get(&r->args, "log", NULL);
  /* Output paths fail now, not after the run, and before the checkpoint directory is locked. */
  const char *savep = args_get(&r->args, "save", NULL), *plotp = args_get(&r->args, "plot", NULL);
  int bad = savep && comm_rank() == 0 ? check_writable(savep, "--save") : 0;
  if (!bad && plotp && comm_rank() == 0) bad = check_writable(plotp, "--plot");
  if (!bad && logp && comm_rank() == 0) bad = !(r->log = out_open_stream(logp, "--log"));
  if (comm_allreduce_max_f64(comm_world(), bad ? 1.0 : 0.0) > 0)
    return bad ? -1 : osdp_fail("--save, --plot or --log: rank 0 cannot write its file");
  if (r->ckpt_dir && ckpt_dir_open(&r->ckpt, r->ckpt_dir, (int)keep)) return -1;
  r->plotting = plotp && comm_rank() == 0;
  if (r->plotting) plot_run_init(&r->plot, r->d.cfg.name);
  if (!(r->run_desc = run_description(r))) return osdp_fail("out of host memory");
  if (train_ranks_agree(r)) return -1;
  r->tokens = malloc((size_t)r->B * r->T * sizeof(int));
  r->targets = malloc((size_t)r->B * r->T * sizeof(int));
  if (!r->tokens || !r->targets)
    return osdp_fail("out of host memory for the token batch: 2 x %zu bytes (micro-batch %d x seq %d)",
                     (size_t)r->B * r->T * sizeof(int), r->B, r->T);
  return engine_create(&r->eng, &r->d, &r->plan, &r->opt);
}

/* Loads --load into the engine: rank 0 reads the file and broadcasts it in pieces. */
static int train_load(TrainRun* r) {
  const char* path = args_get(&r->args, "load", NULL);
  if (!path) return 0;
  float* full = malloc(r->d.n_params * sizeof(float));
  if (!full) return osdp_fail("out of host memory reading %s", path);
  int rc = comm_rank() == 0 ? weights_load(path, &r->d, full) : 0; /* llm.c or safetensors */
  double rcs = comm_allreduce_f64(comm_world(), rc ? 1.0 : 0.0);
  if (rcs == 0) {
    size_t chunk = (size_t)1 << 26, n = r->d.n_params;
    for (size_t at = 0; at < n; at += chunk)
      comm_bcast(comm_world(), full + at, (n - at < chunk ? n - at : chunk) * sizeof(float));
    engine_set_params(&r->eng, full);
  } else if (comm_rank() != 0) {
    osdp_fail("--load: rank 0 could not read %s", path);
  }
  free(full);
  return rcs == 0 ? 0 : -1;
}

/* Saves the weights (all ranks gather, rank 0 writes): an llm.c checkpoint, or a safetensors
** file for a name ending in .safetensors and for models llm.c files cannot hold. */
static int train_save(TrainRun* r) {
  const char* path = args_get(&r->args, "save", NULL);
  if (!path) return 0;
  float* full = malloc(r->d.n_params * sizeof(float));
  if (!full) return osdp_fail("out of host memory writing %s", path);
  engine_get_params(&r->eng, full);
  int rc = comm_rank() == 0 ? weights_save(path, weights_format_for_save(path, &r->d), &r->d, full) : 0;
  free(full);
  return rc;
}

/* Loads micro-step k of global batch `step` of `split` into the engine: rows [(k N + rank) B,
** + B) of its G = N B K rows, so every step (and every held-out batch) is the same G sequences
** whatever the ranks, micro-batch and accumulation. */
static void load_batch(TrainRun* r, DataSplit split, long step, int k, int* problem) {
  int first = (k * comm_size() + comm_rank()) * r->B;
  data_batch(r->data, split, step, (int)plan_global_batch(&r->plan), first, r->B, r->tokens,
             r->targets, problem);
  engine_set_batch(&r->eng, r->tokens, r->targets);
}

/* Training's EngineBatchFn: micro-step k of the step being run (r->step_now). */
static void load_micro_batch(void* ctx, Engine* e, int k) {
  TrainRun* r = ctx;
  (void)e;
  load_batch(r, DATA_TRAIN, r->step_now, k, NULL);
}

/* Formats seconds as "1h02m", "3m05s" or "12s". */
static const char* format_eta(double s, char buf[32]) {
  long t = (long)(s + 0.5);
  if (t >= 3600) snprintf(buf, 32, "%ldh%02ldm", t / 3600, (t % 3600) / 60);
  else if (t >= 60) snprintf(buf, 32, "%ldm%02lds", t / 60, t % 60);
  else snprintf(buf, 32, "%lds", t);
  return buf;
}

/* Prints the progress line and writes the JSON log line of one step (rank 0); -1 with an error
** when the log cannot be written (a full disk). */
static int report_step(TrainRun* r, long step, const StepResult* sr, double elapsed) {
  if (comm_rank() != 0) return 0;
  double tokens = (double)plan_global_batch(&r->plan) * r->T;
  double tps = tokens / sr->seconds;
  size_t peak = engine_peak_bytes(&r->eng, NULL);
  if (r->plotting && plot_run_add_step(&r->plot, step, isfinite(sr->loss) ? sr->loss : NAN, tps,
                                       (double)peak))
    return -1;
  if (r->log) {
    /* A skipped non-finite step's loss or norm is null: nan and inf are not JSON. */
    char loss[32] = "null", norm[32] = "null";
    if (isfinite(sr->loss)) snprintf(loss, sizeof loss, "%.6f", sr->loss);
    if (isfinite(sr->grad_norm)) snprintf(norm, sizeof norm, "%.6f", sr->grad_norm);
    int bad = fprintf(r->log, "{\"step\":%ld,\"loss\":%s,\"step_ms\":%.3f,\"tokens_per_s\":%.1f,"
                      "\"peak_bytes\":%zu,\"grad_norm\":%s,\"lr\":%.6g}\n",
                      step, loss, 1e3 * sr->seconds, tps, peak, norm, sr->lr) < 0;
    if (bad || fflush(r->log))
      return osdp_fail("--log: writing %s failed at step %ld: %s", args_get(&r->args, "log", ""), step,
                       strerror(errno));
  }
  long every = r->steps > 20 ? r->steps / 20 : 1;
  if (r->quiet || (step % every != 0 && step != 1 && step != r->steps)) return 0;
  char mem[32], eta[32];
  double per = elapsed / (double)step;
  printf("step %5ld/%ld | loss %.4f | %8.0f tok/s | peak %s | ETA %s\n", step, r->steps, sr->loss,
         tps, format_bytes((double)peak, mem), format_eta(per * (double)(r->steps - step), eta));
  fflush(stdout);
  return 0;
}

/* Evaluates on eval_batches held-out global batches: mean loss and problem accuracy. */
static void train_evaluate(TrainRun* r, double* val_loss, double* acc, long* nprob) {
  double loss = 0, targets = 0;
  long tot = 0, ok = 0;
  int* problem = malloc((size_t)r->B * r->T * sizeof(int));
  long G = plan_global_batch(&r->plan);
  for (long b = 0; b < r->eval_batches && problem; b++) {
    targets += (double)data_batch_target_count(r->data, DATA_VAL, b, (int)G);
    for (int k = 0; k < plan_accum(&r->plan); k++) {
      load_batch(r, DATA_VAL, b, k, problem);
      long t = 0, o = 0;
      loss += engine_eval(&r->eng, problem, &t, &o);
      tot += t; ok += o;
    }
  }
  free(problem);
  *val_loss = targets > 0 ? loss / targets : 0;
  *acc = tot > 0 ? (double)ok / (double)tot : -1;
  *nprob = tot;
}

/* --eval-every: the held-out loss and accuracy after `step`, as a log line {"step", "val_loss",
** "val_accuracy"} and, for people, a progress line. Collective; -1 when the log cannot be
** written (rank 0). */
static int train_eval_point(TrainRun* r, long step) {
  double vl, acc;
  long np;
  train_evaluate(r, &vl, &acc, &np);
  if (comm_rank() != 0) return 0;
  if (r->plotting && plot_run_add_eval(&r->plot, step, vl)) return -1;
  char a[32] = "null";
  if (acc >= 0) snprintf(a, sizeof a, "%.6f", acc);
  if (r->log && (fprintf(r->log, "{\"step\":%ld,\"val_loss\":%.6f,\"val_accuracy\":%s}\n", step, vl,
                         a) < 0 || fflush(r->log)))
    return osdp_fail("--log: writing %s failed at step %ld: %s", args_get(&r->args, "log", ""), step,
                     strerror(errno));
  if (!r->quiet && !r->json) {
    printf("step %5ld/%ld | held-out loss %.4f", step, r->steps, vl);
    if (acc >= 0) printf(", exact-match accuracy %.1f%% of %ld problems", 100 * acc, np);
    printf("\n");
  }
  return 0;
}

/* Timed steps whose seconds are kept for the median step time. */
#define TIMES_KEPT 100000

/* The median of the kept step times (0 if none); less sensitive than the mean to a step that
** another process on the machine slowed down. */
static double median_step_s(TrainRun* r) {
  if (!r->step_times) return 0; /* no memory for the times: no median */
  return median_of(r->step_times, (int)r->ntimes);
}

/* The "done" line: the steps, this process's first and last loss and its speed; or, when it ran
** no step (--steps 0: the model evaluated and saved as it is; a resume at --steps), that nothing
** was trained, without losses it never computed. */
static void print_done(const TrainRun* r, long done, double first_loss, double last_loss, double tps,
                       size_t peak) {
  char pk[32], pr[32];
  format_bytes((double)peak, pk);
  format_bytes((double)r->eng.predicted.peak, pr);
  if (done == r->start_step)
    printf("done: %ld steps (no step ran here: nothing trained), peak memory %s per rank (predicted "
           "%s)\n", done, pk, pr);
  else
    printf("done: %ld steps, loss %.4f -> %.4f, %.0f tok/s, peak memory %s per rank (predicted %s)\n",
           done, first_loss, last_loss, tps, pk, pr);
}

/* The run's summary: one JSON object (to --log, and stdout with --json) and, for people, the
** "done" lines. A run that failed (error: its message; done: the last step completed) is marked
** "failed" with its error, and prints no "done" line (the error follows on stderr); a run
** stopped or failed before evaluating has val_loss null. */
static void train_summary(TrainRun* r, long done, const char* error, double first_loss,
                          double last_loss, double tps, double step_s, int evaluated,
                          double val_loss, double acc, long nprob) {
  size_t peak = engine_peak_bytes(&r->eng, NULL);
  double med = median_step_s(r);
  double off = comm_allreduce_f64(comm_world(), peak != r->eng.predicted.peak ? 1.0 : 0.0);
  if (comm_rank() != 0) return;
  cJSON* o = cJSON_CreateObject();
  cJSON_AddBoolToObject(o, "summary", 1);
  cJSON_AddStringToObject(o, "model", r->d.cfg.name);
  cJSON_AddStringToObject(o, "data", data_describe(r->data));
  cJSON_AddStringToObject(o, "plan", args_get(&r->args, "plan", "ddp"));
  cJSON_AddBoolToObject(o, "prefetch", r->plan.prefetch);
  cJSON_AddBoolToObject(o, "overlap_reduce", r->plan.overlap_reduce);
  cJSON_AddStringToObject(o, "reduce_dtype", reduce_dtype_name(r->plan.reduce_dtype));
  cJSON_AddStringToObject(o, "precision", precision_name(r->plan.precision));
  cJSON* groups = cJSON_AddArrayToObject(o, "shard_groups"); /* the distinct groups of the ops */
  for (int G = 1; G <= comm_size(); G++)
    for (int i = 0; i < r->plan.nops; i++)
      if (plan_op_group(&r->plan, i) == G) {
        cJSON_AddItemToArray(groups, cJSON_CreateNumber(G));
        break;
      }
  cJSON_AddNumberToObject(o, "keep_grad_ops", plan_keep_ops(&r->plan, KEEP_GRAD));
  cJSON_AddNumberToObject(o, "keep_weight_ops", plan_keep_ops(&r->plan, KEEP_WEIGHT));
  cJSON_AddNumberToObject(o, "recompute_layers", plan_recompute_count(&r->plan));
  cJSON_AddNumberToObject(o, "ranks", comm_size());
  cJSON_AddNumberToObject(o, "ranks_per_host", comm_ranks_per_host());
  cJSON_AddNumberToObject(o, "micro_batch", r->B);
  cJSON_AddNumberToObject(o, "grad_accum", plan_accum(&r->plan));
  cJSON_AddNumberToObject(o, "global_batch", (double)plan_global_batch(&r->plan));
  cJSON_AddNumberToObject(o, "seq", r->T);
  cJSON_AddNumberToObject(o, "steps", (double)done);
  cJSON_AddBoolToObject(o, "failed", error != NULL);
  if (error) cJSON_AddStringToObject(o, "error", error);
  if (done > r->start_step) {
    cJSON_AddNumberToObject(o, "first_loss", first_loss);
    cJSON_AddNumberToObject(o, "final_loss", last_loss);
  } else { /* no step ran here: no loss to report */
    cJSON_AddNullToObject(o, "first_loss");
    cJSON_AddNullToObject(o, "final_loss");
  }
  if (evaluated) cJSON_AddNumberToObject(o, "val_loss", val_loss);
  else cJSON_AddNullToObject(o, "val_loss");
  cJSON_AddNumberToObject(o, "val_accuracy", acc);
  cJSON_AddNumberToObject(o, "val_problems", (double)nprob);
  cJSON_AddNumberToObject(o, "tokens_per_s", tps);
  cJSON_AddNumberToObject(o, "samples_per_s", step_s > 0 ? (double)plan_global_batch(&r->plan) / step_s : 0);
  cJSON_AddNumberToObject(o, "peak_bytes", (double)peak);
  cJSON_AddNumberToObject(o, "predicted_peak_bytes", (double)r->eng.predicted.peak);
  cJSON_AddNumberToObject(o, "ranks_off_prediction", off);
  cJSON_AddNumberToObject(o, "step_s", step_s);
  cJSON_AddNumberToObject(o, "median_step_s", med);
  if (r->auto_plan) cJSON_AddNumberToObject(o, "predicted_step_s", r->predicted.step_s);
  else cJSON_AddNullToObject(o, "predicted_step_s");
  if (r->report.chosen_sps > 0) {
    cJSON_AddStringToObject(o, "trial_chosen", r->report.chosen);
    cJSON_AddNumberToObject(o, "trial_chosen_samples_per_s", r->report.chosen_sps);
    cJSON_AddStringToObject(o, "trial_best_uniform", r->report.best_uniform);
    cJSON_AddNumberToObject(o, "trial_best_uniform_samples_per_s", r->report.best_uniform_sps);
  }
  char* js = cJSON_PrintUnformatted(o);
  cJSON_Delete(o);
  if (!js) return;
  if (r->log) fprintf(r->log, "%s\n", js);
  if (r->json) printf("%s\n", js);
  free(js);
  if (r->json || error) return;
  print_done(r, done, first_loss, last_loss, tps, peak);
  if (r->auto_plan && done > r->start_step)
    printf("auto plan: predicted %.4f s/step, measured %.4f s/step (%+.1f%%); predicted peak %zu "
           "bytes, measured %zu bytes\n", r->predicted.step_s, step_s,
           100.0 * (step_s - r->predicted.step_s) / r->predicted.step_s, r->predicted.mem.peak, peak);
  const PlanReport* t = &r->report;
  if (r->auto_plan && t->chosen_sps > 0) {
    static const char* un[] = {"ddp", "zero2", "zero3"};
    printf("trial, measured samples/s: chosen plan (%s) %.1f", t->chosen, t->chosen_sps);
    for (int u = 0; u < 3; u++) {
      if (t->uniform_sps[u] > 0) printf("; %s %.1f", un[u], t->uniform_sps[u]);
      else printf("; %s does not fit", un[u]);
    }
    printf("\n");
    if (t->best_uniform_sps > 0)
      printf("the chosen plan is %.2fx the best uniform plan (%s)%s\n", t->chosen_sps / t->best_uniform_sps,
             t->best_uniform, t->chosen_uniform < 0 && t->chosen_sps > t->best_uniform_sps
                                  ? ": per-operator sharding wins" : "");
    else
      printf("no uniform plan fits: only per-operator sharding trains this model here\n");
  }
  if (r->eval_batches == 0) { printf("held-out: not evaluated (--eval-batches 0)\n"); return; }
  printf("held-out: loss %.4f", val_loss);
  if (acc >= 0) printf(", exact-match accuracy %.1f%% of %ld problems", 100 * acc, nprob);
  printf("\n");
}

/* --plot FILE: rank 0 draws the run from the steps it kept (a run that failed draws nothing). The
** other ranks learn whether it worked. */
static int train_plot(TrainRun* r) {
  if (!args_has(&r->args, "plot")) return 0;
  int rc = 0;
  if (r->plotting && r->plot.n > 0) {
    char title[160];
    snprintf(title, sizeof title, "%s on %d rank(s), plan %s", r->d.cfg.name, comm_size(),
             args_get(&r->args, "plan", "ddp"));
    rc = plot_svg_write_runs(args_get(&r->args, "plot", ""), "--plot", &r->plot, 1, title);
    if (!rc && !r->quiet && !r->json) printf("plot: %s\n", args_get(&r->args, "plot", ""));
  }
  if (comm_allreduce_max_f64(comm_world(), rc ? 1.0 : 0.0) > 0)
    return rc ? -1 : osdp_fail("--plot: rank 0 could not write %s", args_get(&r->args, "plot", ""));
  return 0;
}

/* Addition, for people: the trained model answers --problems held-out problems (greedy, over the
** KV cache) and rank 0 shows them with whether each is right. Collective (the weights are
** gathered from every rank). */
static void train_show_problems(TrainRun* r) {
  if (r->quiet || r->json || r->problems == 0 || data_batch_problem_count(r->data, 1) == 0) return;
  float* params = malloc(r->d.n_params * sizeof(float));
  int ok = comm_allreduce_max_f64(comm_world(), params ? 0.0 : 1.0) == 0;
  if (ok) engine_get_params(&r->eng, params);
  if (ok && comm_rank() == 0) {
    SampleOptions so = {.tokens = 32, .temperature = 0, .seed = (uint64_t)r->opt.seed, .stop_token = -1};
    int right = 0;
    printf("the trained model answers %ld held-out problems (greedy; digits least significant "
           "first):\n", r->problems);
    if (sample_problems(&r->d, params, r->data, (int)r->problems, &so, stdout, NULL, &right) == 0)
      printf("%d of %ld right\n", right, r->problems);
    else
      printf("sampling failed: %s\n", osdp_last_error());
  }
  free(params);
}

/* The write rate a first checkpoint is assumed to reach, for the watchdog's bound on it: a slow
** disk's. Later checkpoints are bounded by the slowest rate measured so far. */
#define CKPT_ASSUMED_BYTES_PER_S 20e6

/* Writes checkpoint step-<step> into the run's directory and prunes it to --keep, telling the
** watchdog: a checkpoint is not a training step, its bound is --watchdog plus 4x the time its
** bytes (weights and both moments, 12 per parameter) take at the slowest rate seen so far. */
static int train_checkpoint(TrainRun* r, long step) {
  double bytes = 12.0 * (double)r->d.n_params;
  double rate = r->ckpt_rate > 0 ? r->ckpt_rate : CKPT_ASSUMED_BYTES_PER_S;
  comm_watchdog_checkpoint(r->watchdog_s + 4 * bytes / rate);
  double t0 = now_seconds();
  int rc = train_state_save(&r->eng, r->ckpt_dir, step, r->run_id, r->run_desc);
  double took = now_seconds() - t0;
  if (!rc && took > 0 && (r->ckpt_rate == 0 || bytes / took < r->ckpt_rate)) r->ckpt_rate = bytes / took;
  if (!rc) ckpt_dir_prune(&r->ckpt);
  comm_watchdog_checkpoint(0);
  return rc;
}

/* Prints what is about to run (rank 0). */
static void train_banner(const TrainRun* r) {
  if (comm_rank() != 0 || r->quiet || r->json) return;
  char pr[32];
  char acc[64] = "";
  if (plan_accum(&r->plan) > 1)
    snprintf(acc, sizeof acc, " x %d micro-steps (global batch %ld)", plan_accum(&r->plan),
             plan_global_batch(&r->plan));
  printf("osdp train: model %s (%zu params), data %s, %d rank(s) x micro-batch %d%s x seq %d, "
         "plan %s, predicted peak %s per rank\n",
         r->d.cfg.name, r->d.n_params, data_describe(r->data), comm_size(), r->B, acc, r->T,
         args_get(&r->args, "plan", "ddp"), format_bytes((double)r->eng.predicted.peak, pr));
  fflush(stdout);
}

int cmd_train(int argc, char** argv) {
  if (args_help(&train_spec, argc, argv)) return 0;
  TrainRun r;
  memset(&r, 0, sizeof r);
  r.ckpt.lock_fd = -1;
  if (train_setup(&r, argc, argv) || train_load(&r) || train_resume(&r) || train_claim_checkpoints(&r)) {
    ckpt_dir_close(&r.ckpt);
    return cli_report_error();
  }
  train_banner(&r);
  r.step_times = malloc((size_t)(r.steps < TIMES_KEPT ? r.steps + 1 : TIMES_KEPT) * sizeof *r.step_times);
  double t0 = now_seconds(), first = 0, last = 0, train_s = 0;
  int rc = 0, stopped = 0;
  long ran = 0, completed = r.start_step; /* steps run here; the last step whose update is done */
  double typical = 0; /* the median step so far, for the watchdog */
  for (long step = r.start_step + 1; step <= r.steps && !rc; step++) {
    if (r.ntimes && (r.ntimes & 63) == 1) typical = median_step_s(&r); /* now and then: it sorts */
    comm_watchdog_step(step, typical);
    r.step_now = step - 1;
    long ntarg = data_batch_target_count(r.data, DATA_TRAIN, r.step_now, (int)plan_global_batch(&r.plan));
    StepResult sr;
    engine_step(&r.eng, ntarg, load_micro_batch, &r, &sr);
    ran++;
    if (step == r.start_step + 1) first = sr.loss;
    last = sr.loss;
    if (step > r.start_step + 1 || r.steps - r.start_step == 1) { /* the first is a warm-up */
      train_s += sr.seconds;
      if (r.ntimes < TIMES_KEPT) { /* the slowest rank's time: every rank calls, always */
        double slowest = comm_allreduce_max_f64(comm_world(), sr.seconds);
        if (r.step_times) r.step_times[r.ntimes] = slowest;
        r.ntimes++;
      }
    }
    if (sr.nonfinite) {
      char note[4200] = "";
      if (r.ckpt_dir) snprintf(note, sizeof note, "; the checkpoints in %s are intact", r.ckpt_dir);
      if (!r.skip_nonfinite) {
        rc = osdp_fail("step %ld: loss %g, gradient norm %g: not finite; stopped before updating the "
                       "weights%s (--on-nonfinite skip steps over such batches; a lower --lr may help)",
                       step, sr.loss, sr.grad_norm, note);
        break;
      }
      if (comm_rank() == 0)
        fprintf(stderr, "osdp: note: step %ld: loss %g, gradient norm %g: not finite; its update "
                "skipped (--on-nonfinite skip)\n", step, sr.loss, sr.grad_norm);
    }
    completed = step;
    /* A log that cannot be written (a full disk) stops every rank, not just rank 0's output. */
    int log_bad = report_step(&r, step, &sr, now_seconds() - t0) != 0;
    if (r.eval_every > 0 && r.eval_batches > 0 && step % r.eval_every == 0 && step < r.steps)
      log_bad |= train_eval_point(&r, step) != 0; /* the last step's is the run's own evaluation */
    if (comm_allreduce_max_f64(comm_world(), log_bad ? 1.0 : 0.0) > 0) {
      rc = log_bad ? -1 : osdp_fail("--log: rank 0 could not write the log");
      break;
    }
    stopped = r.stop_after > 0 && step == r.stop_after && step < r.steps;
    int due = r.ckpt_every > 0 && step % r.ckpt_every == 0;
    if (r.ckpt_dir && (due || step == r.steps || stopped)) rc = train_checkpoint(&r, step);
    if (stopped) break;
  }
  comm_watchdog_step(-1, 0);
  long timed = ran > 1 ? ran - 1 : ran;
  double tps = train_s > 0 ? (double)timed * plan_global_batch(&r.plan) * r.T / train_s : 0;
  double val_loss = 0, acc = -1;
  long nprob = 0;
  /* A run stopped early (--stop-after) ends as a kill would, less the loss: with its checkpoint. */
  int evaluated = !rc && !stopped && r.eval_batches > 0;
  if (evaluated) train_evaluate(&r, &val_loss, &acc, &nprob);
  if (!rc && !stopped) rc = train_save(&r);
  if (!rc && evaluated && r.plotting) rc = plot_run_add_eval(&r.plot, completed, val_loss);
  if (!rc) rc = train_plot(&r);
  double step_s = train_s > 0 ? train_s / (double)timed : 0;
  char error[1024];
  snprintf(error, sizeof error, "%s", osdp_last_error());
  train_summary(&r, completed, rc ? error : NULL, first, last, tps, step_s, evaluated, val_loss,
                acc, nprob);
  if (evaluated && !rc) train_show_problems(&r);
  if (r.log && (ferror(r.log) | fclose(r.log)) && !rc)
    rc = osdp_fail("--log: writing %s failed: %s", args_get(&r.args, "log", ""), strerror(errno));
  ckpt_dir_close(&r.ckpt);
  engine_destroy(&r.eng);
  free(r.step_times);
  if (r.plotting) plot_run_free(&r.plot);
  cJSON_Delete(r.run_desc);
  free(r.tokens);
  free(r.targets);
  data_close(r.data);
  plan_free(&r.plan);
  gpt_desc_free(&r.d);
  return rc ? cli_report_error() : 0;
}
