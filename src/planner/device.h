/*
** device.h: device information, the planner's view of the hardware.
**
** Number of ranks, how many share a host, memory per rank, how fast the ranks compute, and how
** long each collective takes on the links within a host and between hosts. `osdp profile`
** measures all of it on the ranks it runs on; hand-written files (or command-line flags)
** describe hardware osdp is not running on.
**
** On disk (JSON):
**   {"ranks": 16, "mem_limit": 8589934592 (bytes, or a string such as "8GiB"),
**    "ranks_per_host": 8,               H: ranks on each host, consecutive world ranks; H divides
**                                       ranks (optional; absent: ranks, i.e. one host)
**    "threads": 1,                      kernel threads per rank (sizes the attention scratch)
**    "device": "cpu",                   what the ranks compute on: cpu or cuda (optional, cpu)
**    "flops": 9.4e10,                   FLOP/s per rank, used for ops without measured times
**    "optimizer_s_per_param": 1.5e-9,   AdamW time per parameter a rank updates (optional, 0)
**    "collectives": {                   the INTRA-host level: t(bytes) = latency_s + bytes /
**      "measured_ranks": 8,             bandwidth_Bps over this many ranks (optional; H)
**      "allreduce":      {"latency_s": 2e-5, "bandwidth_Bps": 3e8,   bytes is the size of the
**                         "overlap": 0.3, "residual": 0.05},         full (unsharded) buffer
**      "allgather":      {"latency_s": 2e-5, "bandwidth_Bps": 3e8},
**      "reduce_scatter": {"latency_s": 2e-5, "bandwidth_Bps": 3e8}},
**    "inter_host": {                    optional: the INTER-host level, the same fields, over
**      "measured_ranks": 2,             this many ranks (optional; ranks / H, at least 2); a
**      "allreduce": {...}, ...},        collective absent here is the intra-host one
**    "compute": {                       optional: measured forward+backward time per op
**      "model": "gpt2-124m", "seq": 256,
**      "ops": [{"name": "h0.qkv", "fixed_s": 1e-4, "per_sample_s": 2e-3,
**               "slices": [{"k": 2, "fixed_s": .., "per_sample_s": ..}, ...]}, ...]}}
** "points" (optional): measured [[bytes, seconds], ...], sizes ascending; with two or more the
** time of a collective is interpolated linearly between them (below the smallest: its time;
** above the largest: the last segment extended), since measured times follow no one
** latency + bandwidth line over 1 KiB..16 MiB (caches, protocol switches); latency and
** bandwidth then summarise them.
** "in_step" (optional, > 0, default 1) scales the collective's time inside a training step: the
** profiler measures it as what real steps spent in that kind of call over what the table says
** (colder caches, ranks arriving at different moments, calls that progress in small pieces).
** "overlap" (optional, 0..1, default 0) is the share of wall time during which an outstanding
** non-blocking collective of that kind progresses while the rank computes (1: it runs fully
** beside compute; 0: it only moves when the rank waits for it). "residual" (optional,
** informational) is the fit's largest relative error over the measured sizes.
** An op's time at micro-batch B is fixed_s + B * per_sample_s when measured (at k slices: the
** "slices" entry for k, interpolated linearly in k between measured slice counts, and the
** unsplit time where none is measured); otherwise 3 * forward FLOPs / flops. An op entry or a
** slices entry may also give "points": [[micro_batch, seconds], ...] (micro-batches ascending,
** at most DEVICE_OP_POINTS): its time is then interpolated linearly between them, and past
** the last (or before the first) that point's plus per_sample_s a micro-batch, since measured
** times follow no one line over micro-batches 1..64 (small on this machine: 4% below it at 4,
** caches).
**
** The collective model over a communicator (CommShape: how many ranks, which link level).
**  - Levels. A collective over G consecutive world ranks (a shard group, comm_group) runs on
**    the intra-host level when the group lies within one host (G <= H and H % G == 0), else on
**    the inter-host level. The all-reduce of a hybrid plan's shards over the N/G ranks j, G+j,
**    2G+j, ... (comm_across) is inter-host whenever N > H: for G >= H each of its ranks is on
**    another host; for G < H it is hierarchical (partly within hosts, partly between), and is
**    priced as inter-host all the same (its slowest hops). The world is one group of N ranks.
**  - Ranks. Each level's tables were measured over measured_ranks ranks (the profiler: the
**    host communicator, H ranks, for the intra level; the ranks with one local index on every
**    host, N/H of them, for the inter level, all H such communicators at once, as a step runs
**    them). A ring collective over n ranks moves a share s(n) of the buffer through every link:
**    all-reduce 2(n-1)/n, all-gather and reduce-scatter (n-1)/n. So over n ranks a collective
**    of B bytes takes the measured time of B * s(n) / s(m) bytes at the m ranks it was measured
**    over (the same time when n = m; 0 when n = 1). The latency part is not rescaled (trees
**    and rings differ there; the measured tables carry it at their own rank count).
**  - bf16 gradient reductions (a plan's reduce_dtype) halve the bytes given to the model; the
**    cost model does that (cost.c), not this file.
*/
#ifndef OSDP_DEVICE_H
#define OSDP_DEVICE_H

#include <stddef.h>

#include "model/gpt.h"
#include "model/gpt_step.h"

/* Most measured sizes a collective keeps. */
#define DEVICE_MAX_POINTS 24

/* The physically sensible ranges a device file's figures must lie in (generous: no hardware is
** near either end). Outside them a file is a typo or hostile, and the planner's times would
** overflow to infinity or print with hundreds of digits. */
#define DEVICE_MIN_FLOPS 1e3      /* FLOP/s of one rank */
#define DEVICE_MAX_FLOPS 1e19
#define DEVICE_MIN_BANDWIDTH 1.0  /* bytes per second of a collective */
#define DEVICE_MAX_BANDWIDTH 1e15
#define DEVICE_MAX_SECONDS 1000.0 /* a latency, a measured collective or op time */
#define DEVICE_MAX_BYTES 1e18     /* a measured collective's size */
#define DEVICE_MAX_OPT_S 1.0      /* optimizer seconds per parameter */
#define DEVICE_MAX_FACTOR 1e4     /* in_step, async_in_step */

typedef struct CollectiveModel {
  double latency_s;      /* alpha */
  double bandwidth_Bps;  /* beta: bytes per second of the full buffer */
  double overlap;        /* 0..1: progress of a non-blocking call while the rank computes */
  double in_step;        /* time of the collective inside a training step / alone (> 0; 1) */
  double async_in_step;  /* the same for a non-blocking call of the kind where it differs (a
                         ** prefetched gather: posted early, it shares the rank with compute
                         ** and the calls in between; 0: in_step) */
  double residual;       /* largest relative error of the model at measured sizes (informational) */
  double bf16_factor;    /* reductions: a bf16 one costs what an fp32 one of this share of the
                         ** bytes costs (0: not measured, 0.5: only the bytes count) */
  int npoints;           /* measured (bytes, seconds), bytes ascending; >= 2: they are the model */
  double point_bytes[DEVICE_MAX_POINTS], point_s[DEVICE_MAX_POINTS];
} CollectiveModel;

enum { COLL_ALLREDUCE = 0, COLL_ALLGATHER = 1, COLL_REDUCE_SCATTER = 2, COLL_COUNT = 3 };

/* The link levels: within one host; between hosts (one rank per host, every host's ranks at
** once, as a hybrid step's across-group all-reduces); and, on several hosts, the world's own
** collectives over all ranks (measured as they are: their traffic over each host's link depends
** on the algorithm MPI picks, which no rescaling of the other levels predicts). */
enum { LINK_INTRA = 0, LINK_INTER = 1, LINK_WORLD = 2, LINK_LEVELS = 3 };

/* A communicator as the collective model sees it: its number of ranks and its link level. */
typedef struct CommShape {
  int ranks;
  int level;      /* LINK_INTRA, LINK_INTER or LINK_WORLD */
} CommShape;

/* Slice counts with their own measured op times: k = 1, 2, 4, 8 (index = log2 k). */
#define DEVICE_SLICE_LEVELS 4

/* The most measured micro-batches an op's time keeps per slice-count level. */
#define DEVICE_OP_POINTS 8

/* Measured forward+backward seconds of one op at micro-batch B, per slice-count level (level l
** is k = 2^l; measured[l] says whether it was measured): fixed_s + B * per_sample_s, or, with
** points, interpolated linearly between the measured (micro-batch, seconds) points and
** per_sample_s a micro-batch beyond them (device_op_level_s); the time of its forward pass as
** a share of them (0: not measured, DEVICE_FORWARD_SHARE). */
typedef struct OpTime {
  char name[24];
  double fixed_s[DEVICE_SLICE_LEVELS];
  double per_sample_s[DEVICE_SLICE_LEVELS];
  int measured[DEVICE_SLICE_LEVELS];
  int npoints[DEVICE_SLICE_LEVELS];                       /* 0: the line alone */
  int point_batch[DEVICE_SLICE_LEVELS][DEVICE_OP_POINTS]; /* ascending, >= 1 */
  double point_s[DEVICE_SLICE_LEVELS][DEVICE_OP_POINTS];
  double forward_share;
} OpTime;

/* Seconds of measured op t at micro-batch B at slice-count level l (measured[l] set): between
** two of its points, the line joining them; at or past the last point (or before the first),
** that point's time plus per_sample_s a micro-batch (at least 0); without points, fixed_s + B *
** per_sample_s. */
double device_op_level_s(const OpTime* t, int l, int B);

/* The forward and backward passes' shares of an op's forward+backward time when the device does
** not give them: a linear's forward is one of its three matrix products. */
#define DEVICE_FORWARD_SHARE (1.0 / 3.0)
#define DEVICE_BACKWARD_SHARE (2.0 / 3.0)

typedef struct DeviceInfo {
  int ranks;
  int ranks_per_host;         /* H, dividing ranks (0, e.g. in code: ranks, i.e. one host) */
  size_t mem_limit;
  int threads;
  char backend[8];            /* "cpu" or "cuda": the backend a trial of plans runs on */
  Precision precision;        /* the storage its op times were measured in; the plans searched
                              ** on it run in it (JSON "precision", absent: fp32) */
  double flops;
  double optimizer_s_per_param;
  CollectiveModel coll[COLL_COUNT];  /* the intra-host level (with one host, the only one) */
  int coll_ranks;             /* ranks coll was measured over (0: H) */
  CollectiveModel inter[COLL_COUNT]; /* the inter-host level, of the kinds inter_given marks */
  int inter_given[COLL_COUNT];/* 0: that kind's inter-host level is its intra-host one */
  int inter_ranks;            /* ranks inter was measured over (0: ranks / H, at least 2) */
  CollectiveModel world[COLL_COUNT]; /* the world level, of the kinds world_given marks */
  int world_given[COLL_COUNT];/* 0: that kind's world collectives use the inter- (or intra-) host
                              ** level, rescaled to the world's ranks */
  /* Measured compute (optional): valid for the model named and sequence seq only. Besides the
  ** model's ops it may hold "overhead": the rest of a step (zeroing, norms, bookkeeping). */
  char compute_model[48];
  int compute_seq;
  int compute_max_batch;      /* the largest micro-batch they were measured at (0: not recorded) */
  int n_op_times;             /* 0 when not measured */
  OpTime* op_times;           /* n_op_times entries */
} DeviceInfo;

/* H: the ranks per host (ranks_per_host, or ranks when it is 0). */
int device_ranks_per_host(const DeviceInfo* dev);
/* The shapes of the communicators the runtime uses: the world (LINK_WORLD where its level was
** measured, else as a group of N); a shard group of G consecutive ranks (intra-host when G <= H
** and H % G == 0; G = N is the world); the N/G ranks holding the same shard index in their
** groups of G (inter-host whenever N > H). See the header comment. */
CommShape device_world_shape(const DeviceInfo* dev);
CommShape device_group_shape(const DeviceInfo* dev, int G);
CommShape device_across_shape(const DeviceInfo* dev, int G);
/* The table of collective `kind` at link level `level` (a level that does not give that kind
** falls back: world to inter-host, inter-host to intra-host), and the number of ranks it was
** measured over; device_link_model is the same table, to calibrate. */
const CollectiveModel* device_link(const DeviceInfo* dev, int level, int kind);
CollectiveModel* device_link_model(DeviceInfo* dev, int level, int kind);
int device_link_ranks(const DeviceInfo* dev, int level, int kind);
/* Time of one collective of `kind` over a full buffer of `bytes` on communicator shape sh,
** measured alone: the level's table at the rank-rescaled size (0 for one rank). */
double device_shape_collective_s(const DeviceInfo* dev, CommShape sh, int kind, double bytes);
/* The same inside a training step: times the level's in_step factor for the kind. */
double device_shape_step_s(const DeviceInfo* dev, CommShape sh, int kind, double bytes);
/* The same for a non-blocking call (its link's async_in_step, else in_step). */
double device_shape_async_step_s(const DeviceInfo* dev, CommShape sh, int kind, double bytes);
/* Time of one collective over all the ranks (device_world_shape), alone and inside a step. */
double device_collective_s(const DeviceInfo* dev, int kind, double bytes);
double device_step_collective_s(const DeviceInfo* dev, int kind, double bytes);
/* The share of its fp32 bytes a reduction of kind (all-reduce, reduce-scatter) is priced at
** when it travels in dtype: 1 for fp32; for bf16 the intra-host level's measured bf16_factor
** (conversions included), or 0.5 (half the bytes) when not measured. */
double device_reduce_factor(const DeviceInfo* dev, int kind, int bf16);
/* Forward+backward time of op i of model d at micro-batch B, sequence T and k slices: measured
** when the device holds times for this model and T, else from FLOPs and dev->flops. */
double device_op_time_s(const DeviceInfo* dev, const GptDesc* d, int op, int B, int T, int k);
/* The time of op i's pass `phase` as a share of its forward+backward time: the forward's (and a
** recomputed forward's) measured when the device gives it for model d at sequence T, else
** DEVICE_FORWARD_SHARE; the backward's the rest. An op without a backward pass (the LM head
** fused with the loss) is all forward. */
double device_op_pass_share(const DeviceInfo* dev, const GptDesc* d, int op, int T, GptPhase phase);
/* Whether the device's measured compute times are for model d at sequence length T. */
int device_measured_for(const DeviceInfo* dev, const GptDesc* d, int T);
/* The measured entry called `name` when the device's times are for model d at sequence T
** (NULL otherwise). */
const OpTime* device_measured_op(const DeviceInfo* dev, const GptDesc* d, int T, const char* name);

/* Reads and validates a device file; -1 with a one-line error naming the file and field. */
int device_load(DeviceInfo* dev, const char* path);
/* The same from a device file's text (where names it in errors), for a file one rank read and
** every rank parses. */
int device_parse(DeviceInfo* dev, const char* text, const char* where);
/* The device file's text of dev (what device_save writes), a string the caller frees; NULL
** with an error when out of memory. */
char* device_to_text(const DeviceInfo* dev);
/* Writes a device file (atomically: a temporary file renamed into place). */
int device_save(const DeviceInfo* dev, const char* path);
/* Checks the values (ranks >= 1, H dividing ranks, limit > 0, speeds > 0, latencies >= 0,
** measured rank counts from 1 to ranks, ...); -1 with a one-line error naming the field. */
int device_validate(const DeviceInfo* dev, const char* where);
/* Checks that the figures lie in the DEVICE_MIN_* .. DEVICE_MAX_* ranges (flops, bandwidths,
** latencies, measured points and op times, the optimizer's time, in_step factors): every file
** read does, figures a program builds need not. -1 with a one-line error "<where>: field
** \"F\" = V must be from LO to HI UNIT; ..." naming the first figure outside. */
int device_check_ranges(const DeviceInfo* dev, const char* where);
/* Allocates n measured op entries (zeroed); -1 when out of memory. */
int device_alloc_op_times(DeviceInfo* dev, int n);
/* Frees the measured op times. */
void device_free(DeviceInfo* dev);

#endif
