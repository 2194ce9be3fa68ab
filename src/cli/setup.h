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

/* The model of --model (a preset or JSON file), or of the --load checkpoint when --model is
** absent, or def. With both, the shapes must agree. */
int setup_model(const Args* a, const char* def, GptDesc* d);
/* The plan of --plan (ddp, zero2, zero3 or a plan file; default ddp) for micro-batch B and
** sequence T on the current world. A plan file's micro_batch and seq_len win when --batch /
** --seq are not given; given and different is an error. */
int setup_plan(const Args* a, const GptDesc* d, int B, int T, int B_given, int T_given, Plan* p);
/* Optimizer, threads and memory options (--lr --seed --threads --mem-limit --warmup ...). */
int setup_train_options(const Args* a, TrainOptions* o);
/* Profiling options (--seq --threads --mem-limit --profile-steps) for profile and train --plan auto. */
int profile_options_from_args(const Args* a, const GptDesc* d, ProfileOptions* o);
/* `--plan auto`: profiles this run's ranks for model d at sequence T, searches the fastest plan
** under --mem-limit (micro-batch at most max_batch) and returns it with its predicted cost.
** Prints the plan table on rank 0 unless quiet. */
int setup_auto_plan(const Args* a, const GptDesc* d, int T, int max_batch, int quiet, Plan* p,
                    PlanCost* cost);
/* Runs the plan search and prints the plan beside the uniform plans on rank 0 (as a table, or
** with json as one object; nothing when quiet). Returns 0, or -1 when nothing fits. */
int plan_and_report(const GptDesc* d, const DeviceInfo* dev, const SearchOptions* so, int json,
                    int quiet, Plan* p, PlanCost* c);
/* The option names the three helpers read, for the subcommands' option lists. */
#define SETUP_OPTIONS "model", "plan", "lr", "seed", "threads", "mem-limit", "warmup", \
  "weight-decay", "grad-clip", "batch", "seq", "load", "profile-steps", "max-batch"

#endif
