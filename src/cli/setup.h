/* setup.h: turning command-line options into a model, a plan and training options (shared
** by train and bench). */
#ifndef OSDP_CLI_SETUP_H
#define OSDP_CLI_SETUP_H

#include "cli/cli.h"
#include "model/gpt.h"
#include "model/plan.h"
#include "planner/profile.h"
#include "planner/search.h"
#include "runtime/engine.h"

/* How plan_and_report reports and chooses. */
typedef struct PlanReport {
  int json;          /* one JSON object instead of tables */
  int quiet;         /* print nothing */
  int trial_steps;   /* > 0: train every candidate this many steps and keep the measured best */
  char trial_cache[4200]; /* "" or the file a trial is kept in (cli/profile_cache.h) */
  int reuse_trial;   /* 1: a kept trial of the same candidates is reused instead of run */
  /* Filled by plan_and_report after a trial: the chosen plan and the best uniform baseline. */
  char chosen[32], best_uniform[32]; /* candidate origins (Candidate.origin) */
  int chosen_uniform;                   /* the chosen plan's Strategy if uniform, else -1 */
  double chosen_sps, best_uniform_sps;  /* measured samples/s (0: not measured / none fits) */
  double uniform_sps[3];                /* measured ddp, zero2, zero3 (0: does not fit / ran not) */
} PlanReport;

/* The model of --model (a preset or JSON file), or of the --load checkpoint when --model is
** absent, or def. With both, the shapes must agree. */
int setup_model(const Args* a, const char* def, GptDesc* d);
/* The model and weights of a weights file or checkpoint at path (the one place an input of
** export and sample becomes a model): an llm.c or safetensors file (told apart by content), a
** Hugging Face model directory or index, or a checkpoint directory of osdp train (DIR/step-N or
** a --checkpoint DIR: its newest). model (NULL: none) is --model, which must agree with the
** file and supplies n_head where a safetensors file lacks it. *d is built and *params (op-block
** order, the caller frees) filled; who names the command in errors. Returns 0, or -1 with a
** one-line error (nothing left allocated). */
int setup_read_weights(const char* path, const char* model, const char* who, GptDesc* d,
                       float** params);
/* Registers the command's files (core/output.h) before any work: the inputs --model, --load,
** --plan, --devices, --resume and --data's FILE (text:FILE, tokens:FILE), then the outputs named
** in `outputs` (option names, NULL-terminated). -1 with an error naming both options when an
** output is the same file as an input or another output. */
int setup_claim_files(const Args* a, const char* const* outputs);
/* The plan of --plan (ddp, zero2, zero3 or a plan file; default ddp) for micro-batch B and
** sequence T on the current world. A plan file's micro_batch and seq_len win when --batch /
** --seq are not given; given and different is an error. */
int setup_plan(const Args* a, const GptDesc* d, int B, int T, int B_given, int T_given, Plan* p);
/* Applies the plan switches of the command line to p: --prefetch, --overlap-reduce,
** --shard-group G (every op's sharded slices shard within groups of G ranks), --reduce-dtype
** fp32|bf16, --head-rows R (the fused LM head's chunk rows), --recompute N|all. 0, or -1 with an
** error naming the option. */
int setup_plan_options(const Args* a, const GptDesc* d, Plan* p);
/* --recompute N|all: the first N layers (all: every layer) of plan p recompute their activations
** in backward; absent leaves p as it is (a plan file's "layers"). -1 with an error naming the
** value when it is not a layer count. */
int setup_recompute(const Args* a, const GptDesc* d, Plan* p);
/* --recompute N|all for a search (plan, train --plan auto): exactly that many layers recompute
** (min = max); absent, the planner chooses. -1 with an error as setup_recompute. */
int setup_recompute_search(const Args* a, const GptDesc* d, SearchOptions* so);
/* The search options of the command line: --reduce-dtype fp32|bf16|auto, --shard-group G (fixes
** every op's group; absent: the planner chooses), --recompute N|all (the count fixed). */
int setup_search_options(const Args* a, const GptDesc* d, int ranks, SearchOptions* so);
/* Without --max-batch or --batch: the largest micro-batch searched lowered to what dev's op
** times may be extrapolated to (planner_cap_batch), with a line saying so unless quiet. */
void setup_cap_batch(const Args* a, const GptDesc* d, const DeviceInfo* dev, SearchOptions* so, int quiet);
/* The matmul mode of --matmul fp32|tf32|bf16 (default tf32) or of the older --tf32 on|off (on:
** tf32, off: fp32) into *mode; 0, or -1 with a one-line error for a bad value or when both are
** given and disagree. */
int setup_matmul_mode(const Args* a, MatmulMode* mode);
/* The storage precision of --precision fp32|bf16 (default fp32) into *prec; 0, or -1 with a
** one-line error. */
int setup_precision(const Args* a, Precision* prec);
/* The backend of --device cpu|cuda (default cpu) in the matmul mode of setup_matmul_mode, able
** to run --precision (bf16 needs a backend with bf16 kernels: a GPU). NULL with a one-line error
** (e.g. no GPU here, bf16 on the CPU). */
const Backend* setup_backend(const Args* a);
/* Optimizer, threads, memory and device options (--lr --seed --threads --mem-limit --warmup
** --device ...). */
int setup_train_options(const Args* a, TrainOptions* o);
/* Profiling options (--seq, default def_T; --threads --mem-limit --profile-steps) for profile
** and train --plan auto. */
int profile_options_from_args(const Args* a, const GptDesc* d, long def_T, ProfileOptions* o);
/* `--plan auto`: profiles this run's ranks for model d at sequence T, searches the candidate
** plans under --mem-limit (micro-batch from min_batch to max_batch), trains each for --trial-steps steps
** (default 6, in 3 rounds; 0: the prediction alone decides) and returns the measured fastest with its
** predicted cost. Trial engines are discarded, so the run starts from the same weights and data
** as without a trial. Prints the plan table on rank 0 unless quiet. */
int setup_auto_plan(const Args* a, const GptDesc* d, int T, int min_batch, int max_batch, int quiet,
                    Plan* p, PlanCost* cost, PlanReport* report);
/* Finds the candidate plans (planner_candidates), trials them if asked, and prints the chosen
** plan, the candidates and the uniform plans on rank 0 (tables, or one JSON object). Returns
** the chosen plan and its predicted cost; 0, or -1 when nothing fits or no trial ran. */
int plan_and_report(const GptDesc* d, const DeviceInfo* dev, const SearchOptions* so,
                    PlanReport* ro, Plan* p, PlanCost* c);
/* The flags the helpers above read, as option groups for the commands' CommandSpecs: --model;
** the optimizer's; a rank's threads and memory limit; the plan switches setup_plan_options
** reads; --plan auto's search; profiling's; the device's. */
extern const OptionSpec setup_model_options[];
extern const OptionSpec setup_optimizer_options[];
extern const OptionSpec setup_rank_options[];
extern const OptionSpec setup_plan_switches[];
extern const OptionSpec setup_auto_options[];
extern const OptionSpec setup_profile_options[];
extern const OptionSpec setup_device_options[];

#endif
