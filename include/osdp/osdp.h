/*
** osdp.h: osdp's public C API for planning: load a model's shape and a description of the
** ranks, search the per-operator sharding plan with the highest predicted throughput under a
** memory limit, read and write plan files, and predict a plan's exact per-rank memory and its
** step time. It is what `osdp plan` does, as a library: the same inputs give the same plan
** (byte for byte the file `osdp plan --out` writes).
**
** The only header osdp installs; it includes nothing of osdp's own. Link with
**   cc prog.c $(pkg-config --cflags --libs --static osdp)
** (libosdp.a is a static library: --static adds what it needs, MPI, OpenMP, OpenBLAS, cJSON).
** Planning needs no MPI start-up: a plain process, no mpirun, no MPI_Init.
**
** Conventions:
**   - Objects are opaque handles made by a *_load / *_new / *_search / *_read function and
**     released by the matching *_free (which accepts NULL).
**   - A function that can fail returns 0 on success and -1 on failure; it then leaves its
**     output handle NULL, prints nothing, never exits, and records a one-line message that
**     osdp_last_error() returns (per thread).
**   - Sizes are bytes (size_t); times are seconds (double).
**   - The last error is kept per thread. The API is written for, and tested from, one thread:
**     do not use one handle from two threads at once.
*/
#ifndef OSDP_PUBLIC_OSDP_H
#define OSDP_PUBLIC_OSDP_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A model's shape: its ordered operators and their parameters (no weights). */
typedef struct OsdpModel OsdpModel;
/* The ranks a plan is for: how many, how many per host, the memory limit per rank, their
** speed and the links between them (a device file of `osdp profile`, or a few figures). */
typedef struct OsdpDevices OsdpDevices;
/* A plan: per operator its slices and each slice's strategy (dp, zero2, zero3) and shard
** group, the micro-batch, the sequence length, the layers that recompute, and the switches
** (prefetch, overlapped reductions, the gradient reductions' element type). */
typedef struct OsdpPlan OsdpPlan;

/* What a model is, for printing and sizing. */
typedef struct OsdpModelInfo {
  const char* name;       /* the preset's or file's name; valid while the model lives */
  const char* family;     /* "gpt2" or "llama" */
  size_t params;          /* parameters in all */
  int layers;             /* transformer layers */
  int ops;                /* operators (those without parameters included): plan op indices */
  int max_seq;            /* the longest sequence the model takes */
} OsdpModelInfo;

/* A simple description of the ranks (what `osdp plan --ranks N --mem-limit SIZE --flops F`
** builds from its flags): every collective within a host takes latency_s + bytes /
** bandwidth_Bps; between hosts the inter_ figures. Fill it with osdp_device_spec_init first. */
typedef struct OsdpDeviceSpec {
  int ranks;                   /* ranks to plan for (>= 1) */
  int ranks_per_host;          /* consecutive ranks per host, dividing ranks (0: all on one host) */
  int threads;                 /* kernel threads per rank (sizes the attention scratch; 1) */
  size_t mem_limit;            /* memory limit per rank in bytes (> 0) */
  double flops;                /* matrix-product FLOP/s of one rank (> 0) */
  double bandwidth_Bps;        /* bytes/s of a collective within a host (1.25e10) */
  double latency_s;            /* seconds per collective within a host (2e-5) */
  double inter_bandwidth_Bps;  /* between hosts (0: bandwidth_Bps; with several hosts) */
  double inter_latency_s;      /* between hosts (< 0: latency_s) */
} OsdpDeviceSpec;

/* How a search runs. Fill it with osdp_search_options_init, then change what you need. */
typedef struct OsdpSearchOptions {
  int seq;                 /* sequence length (0: the one the device file's op times were
                           ** measured at for this model, else the model's max_seq) */
  int max_batch;           /* the largest micro-batch to consider (0, the default: 512, or twice
                           ** the largest the device file's op times were measured at) */
  size_t mem_limit;        /* memory limit per rank (0: the devices' own) */
  int recompute;           /* exactly this many layers recompute their activations in backward
                           ** (-1, the default: the planner chooses) */
  int shard_group;         /* every sharded slice shards within groups of this many ranks,
                           ** dividing the ranks (0, the default: the planner chooses per op) */
  const char* reduce_dtype;/* gradient reductions: "fp32" (NULL, the default), "bf16", or
                           ** "auto" (bf16 where it makes the step at least 1% faster) */
} OsdpSearchOptions;

/* What a plan is, in a few numbers. */
typedef struct OsdpPlanSummary {
  int world;               /* ranks it is for */
  int micro_batch;         /* sequences per rank per step */
  int seq;                 /* sequence length */
  int ops;                 /* operators (as OsdpModelInfo.ops) */
  int recompute_layers;    /* layers that recompute their activations in backward */
  int prefetch;            /* 1: the next zero3 weight is gathered while one computes */
  int overlap_reduce;      /* 1: sharded gradients are reduce-scattered without blocking */
  const char* reduce_dtype;/* "fp32" or "bf16" (a static string) */
} OsdpPlanSummary;

/* One operator of a plan. */
typedef struct OsdpOpPlan {
  char name[32];           /* the operator's name ("embed", "h0.qkv", ...) */
  size_t params;           /* parameters it owns (0: none, nothing to plan: 1 dp slice) */
  int slices;              /* k: its parameter block runs as k slices (1..8) */
  int shard_group;         /* its sharded slices shard within groups of this many ranks */
  char strategies[64];     /* each slice's strategy, comma-separated: "zero3,zero3,dp,dp" */
} OsdpOpPlan;

/* A plan's predicted cost on one rank: memory exact to the byte (what the runtime's arena
** allocates), the step's time under the cost model `osdp plan` ranks plans with. */
typedef struct OsdpPrediction {
  size_t params, grads, optim;  /* persistent bytes: weights, gradients, AdamW state */
  size_t acts, scratch;         /* activations kept for backward; the kernels' scratch */
  size_t transient;             /* the most gathered weights / full gradients live at once */
  size_t peak;                  /* the sum of the above: the arena's peak */
  double step_s;                /* predicted seconds per training step (0 without devices) */
  double samples_per_s;         /* world * micro_batch / step_s (0 without devices) */
  double compute_s;             /* of step_s: the operators' compute */
  double comm_s;                /* of step_s: communication the rank waits for */
} OsdpPrediction;

/* The library's version, "MAJOR.MINOR.PATCH" (what `osdp --version` and `pkg-config
** --modversion osdp` say), so a program can report what it was linked with. */
const char* osdp_version(void);

/* The message of the last failure in this thread ("" if none): one line saying what was wrong
** and what would be right, e.g. "--model: unknown preset 'gpt9'; use one of ...". */
const char* osdp_last_error(void);

/* Parses a byte size as osdp's command line does ("1.6GiB", "512MiB", "8GB", "4096": binary
** units for Ki/Mi/Gi/Ti and bare K/M/G/T, decimal for KB/MB/GB/TB, rounded to a byte), so a
** program taking a limit from its user gets the same bytes as `--mem-limit`. 0 or -1. */
int osdp_parse_size(const char* text, size_t* bytes);

/* Loads a model's shape, as `osdp plan --model` and `--load` do: spec is a preset name
** ("gpt2-124m", "llama3.2-1b", ...), osdp's model JSON file, a Hugging Face config.json or model
** directory, or a weights file (an llm.c checkpoint or safetensors, whose shape it reads; no
** weights are loaded). *out is the new model (osdp_model_free it). 0 or -1. */
int osdp_model_load(const char* spec, OsdpModel** out);

/* Releases a model (NULL: nothing). Plans made for it must not be used with it afterwards. */
void osdp_model_free(OsdpModel* model);

/* Fills *info with the model's name, family, parameter count, layers, operators and longest
** sequence (the strings live as long as the model). 0, or -1 on a NULL argument. */
int osdp_model_info(const OsdpModel* model, OsdpModelInfo* info);

/* Sets *spec to the defaults of `osdp plan`'s flags: 1 rank on one host, 1 thread, bandwidth
** 1.25e10 B/s, latency 2e-5 s, the inter-host level the same; mem_limit and flops 0 (they
** must be set: there is no default for them). */
void osdp_device_spec_init(OsdpDeviceSpec* spec);

/* Makes a device description from a spec, exactly as `osdp plan` does from --ranks,
** --ranks-per-host, --threads, --mem-limit, --flops, --bandwidth, --latency and
** --inter-bandwidth / --inter-latency (set when inter_bandwidth_Bps > 0 or inter_latency_s >=
** 0). Every figure is checked. *out is the new devices (osdp_devices_free them). 0 or -1. */
int osdp_devices_new(const OsdpDeviceSpec* spec, OsdpDevices** out);

/* Reads and checks a device file (JSON, as `osdp profile --out` writes it or written by hand
** for hardware one does not have; docs/FORMATS.md). *out is the new devices. 0 or -1 with an
** error naming the file and field. */
int osdp_devices_load(const char* path, OsdpDevices** out);

/* The main figures of a device description as a spec (ranks, ranks per host resolved to a
** number, threads, limit, FLOP/s, the intra-host all-reduce's latency and bandwidth, and the
** inter-host all-reduce's where the description has that level, else inter_ as
** osdp_device_spec_init leaves them), e.g. to print what a device file says. 0 or -1. */
int osdp_devices_describe(const OsdpDevices* devices, OsdpDeviceSpec* spec);

/* Releases a device description (NULL: nothing). */
void osdp_devices_free(OsdpDevices* devices);

/* Sets *o to the defaults of `osdp plan`: seq 0 (its default rule), max_batch 0 (its rule), the
** devices' limit, the planner choosing recomputation, shard groups and nothing else (fp32
** reductions). */
void osdp_search_options_init(OsdpSearchOptions* o);

/* Searches the plan `osdp plan` chooses for model on devices under options o (NULL: the
** defaults): per operator its slices, strategies and shard group, the micro-batch and the
** layers that recompute, with the highest samples/s predicted by the step replay whose peak
** memory fits the limit (the first of `osdp plan`'s candidates; no trial). *out is the new
** plan (osdp_plan_free it). -1 when nothing fits, the error then saying the smallest limit
** that would. Takes from a fraction of a second (small models) to seconds (billions of
** parameters on many ranks). */
int osdp_plan_search(const OsdpModel* model, const OsdpDevices* devices,
                     const OsdpSearchOptions* o, OsdpPlan** out);

/* Reads a plan file (as `osdp plan --out` or osdp_plan_write wrote it, or written by hand)
** made for model, and checks it against the model. *out is the new plan. 0 or -1 with an
** error naming the file and field. */
int osdp_plan_read(const OsdpModel* model, const char* path, OsdpPlan** out);

/* Writes plan (made for model) as a plan file for `osdp train --plan FILE`: the same bytes as
** `osdp plan --out`, written atomically (a temporary file beside path renamed over it; on any
** failure an existing file is left as it was). 0 or -1. */
int osdp_plan_write(const OsdpModel* model, const OsdpPlan* plan, const char* path);

/* Releases a plan (NULL: nothing). */
void osdp_plan_free(OsdpPlan* plan);

/* Fills *s with the plan's ranks, micro-batch, sequence, operator count, recomputed layers
** and switches. 0, or -1 on a NULL argument. */
int osdp_plan_summary(const OsdpPlan* plan, OsdpPlanSummary* s);

/* Fills *op with operator i (0 <= i < OsdpPlanSummary.ops) of plan, made for model: its name,
** parameters, slices, shard group and the slices' strategies. 0 or -1. */
int osdp_plan_op(const OsdpModel* model, const OsdpPlan* plan, int i, OsdpOpPlan* op);

/* Predicts plan's cost on one rank of devices: its exact memory per category and its step
** time, as `osdp plan` and `osdp describe` do. devices may be NULL: then only the memory, for
** 1 kernel thread (times 0). The plan's ranks must be the devices'. 0 or -1. */
int osdp_plan_predict(const OsdpModel* model, const OsdpDevices* devices, const OsdpPlan* plan,
                      OsdpPrediction* out);

#ifdef __cplusplus
}
#endif

#endif
