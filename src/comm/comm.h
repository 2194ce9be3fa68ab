/*
** comm.h: the collectives osdp needs, over MPI (OpenMPI), on float buffers.
**
** The same binary runs as one process (no mpirun: world size 1, every collective is a
** copy or a no-op) or as N ranks under mpirun / Slurm on one or several hosts. Everything
** the runtime communicates goes through this interface, so a NCCL version can sit beside
** it. Each call adds its wall time and payload to per-kind counters for reporting. Float buffers
** are in the memory of the backend set by comm_use_backend (host memory by default).
*/
#ifndef OSDP_COMM_H
#define OSDP_COMM_H

#include <stddef.h>

#include "kernels/backend.h"

typedef enum CommKind { COMM_ALLREDUCE = 0, COMM_ALLGATHER, COMM_REDUCE_SCATTER, COMM_KINDS } CommKind;

/* The element type a gradient reduction sends: fp32, or bf16 (each rank rounds its float
** contribution to bf16; the owner of each part sums the contributions in fp32; an all-reduce's
** sums then travel back as bf16 too). Half the bytes of fp32. */
typedef enum CommDtype { COMM_FP32 = 0, COMM_BF16 = 1 } CommDtype;

typedef struct CommStats {
  double seconds[COMM_KINDS];  /* wall time spent inside calls: blocking ones, and starting,
                               ** testing and waiting for non-blocking ones */
  double bytes[COMM_KINDS];    /* payload bytes (the full buffer size of each call, in the
                               ** element type sent) */
  long calls[COMM_KINDS];
} CommStats;

/* A communicator: a set of ranks (an MPI communicator) with this rank's place in it and its own
** counters. The world, the ranks of one host, and the shard groups of hybrid plans are Comms;
** every collective takes the Comm it runs on. Owned by comm_mpi.c until comm_finalize. */
typedef struct Comm Comm;

/* An outstanding non-blocking collective. A gather with device memory (comm_use_backend) runs
** on the host copy `host`, and `result_bytes` of it go back to `device_result` on completion; a
** reduction on MPI is a chunked job of comm_reduce.c (`job`). Private to comm apart from `active`. */
typedef struct CommRequest {
  void* mpi;           /* a gather's MPI request, or NCCL's request (its event; comm_nccl.c) */
  int active;
  CommKind kind;
  double bytes;
  void* host;
  void* device_result;
  size_t result_bytes;
  Comm* comm;
  void* job;           /* a reduction in chunks (comm_reduce.c), or NULL */
} CommRequest;

/* A bound on start-up (comm_startup.c), for a job of several ranks: called before comm_init, it
** starts a thread that ends this process, with an error naming this rank and the job's stopped
** ranks on this host, when comm_startup_done has not been called within bound_s seconds (a rank
** that never joins would hold every other in MPI_Init forever). 0: no bound. Returns 0, or -1
** with an error. */
int comm_startup_guard(double bound_s);
/* Start-up is over (the ranks have met; the step watchdog, if any, takes over): the bound is
** lifted. */
void comm_startup_done(void);
/* Initialises MPI (once per process) and the world and host communicators. */
int comm_init(int* argc, char*** argv);
/* Finalises MPI (and frees every Comm). */
void comm_finalize(void);
/* The MPI library's name and version ("Open MPI v4.1.4"), for osdp --version. */
const char* comm_library_version(void);
/* This rank and the world's size: shortcuts for comm_rank_in/comm_size_of(comm_world()). */
int comm_rank(void);
int comm_size(void);
/* Stops every rank at once after an unrecoverable error (never hangs the others). */
void comm_abort(int code) __attribute__((noreturn));
void comm_barrier(Comm* c);

/* Every rank of the job. */
Comm* comm_world(void);
/* The ranks that share this rank's host (MPI_Comm_split_type shared memory). */
Comm* comm_host(void);
/* The number of ranks per host when every host runs the same number and each host's ranks are
** consecutive world ranks (the hybrid plans' shard groups are then hosts); else 0. */
int comm_ranks_per_host(void);
/* The shard group of G ranks holding this rank: world ranks g*G .. g*G+G-1 for g = rank / G
** (G must divide the world size). Created on first use, which is collective over the world:
** every rank asks for the same G's in the same order (the engine does, from the plan). */
Comm* comm_group(int G);
/* The ranks holding the same index in their groups of G: world ranks j, G+j, 2G+j, .. for
** j = rank % G (size world / G); what a hybrid plan's shards are all-reduced over. */
Comm* comm_across(int G);
int comm_rank_in(const Comm* c);
int comm_size_of(const Comm* c);
/* "world", "host", "group of G", "across groups of G". */
const char* comm_name(const Comm* c);
/* The Comms created so far (world first); returns their count, writes up to max of them. */
int comm_list(Comm** out, int max);
/* A Comm's counters since the last comm_reset_stats. */
CommStats comm_stats_of(const Comm* c);

/* Says where the buffers given to the collectives live: the backend's memory (NULL: the CPU's).
** For a GPU every collective goes through host copies (MPI over host memory; the way several
** ranks share one GPU); on the CPU the buffers are used directly. The engine sets it. */
void comm_use_backend(const Backend* bk);

/* The watchdog (comm_watchdog.c): a thread per rank exchanging heartbeats with rank 0 on a
** communicator of its own. A rank silent for timeout_s seconds (stopped, dead, its host hung) is
** named on stderr and the job aborted; so is a training step (comm_watchdog_step) that makes no
** progress for max(timeout_s, 10 x the median step; 10 x timeout_s before a median exists) while
** every rank answers, and a checkpoint
** write (comm_watchdog_checkpoint) past its own bound. Collective; a no-op on one rank. -1 with an error when the MPI lacks MPI_THREAD_MULTIPLE. */
int comm_watchdog_start(double timeout_s);
/* Step `step` begins (-1: no step in progress, e.g. evaluation or saving); median_step_s is the
** median step so far (0: none yet). */
void comm_watchdog_step(long step, double median_step_s);
/* A checkpoint write begins (bound_s > 0: it may take this long; the step bound is off until
** it ends) or ends (bound_s 0). Other ranks learn it from the heartbeat, so a step waiting for a
** writing rank is not taken for a hung one. */
void comm_watchdog_checkpoint(double bound_s);
/* Stops the watchdog (collective: every rank drains its heartbeats); comm_finalize calls it. */
void comm_watchdog_stop(void);

/* In the collectives below N is comm_size_of(c) and r this rank's comm_rank_in(c).
** In-place sum of buf[0..n) across c's ranks. */
void comm_allreduce_f32(Comm* c, float* buf, size_t n);
/* Starts an in-place sum sent as dtype; buf must not be touched until comm_wait. */
void comm_iallreduce_f32(Comm* c, float* buf, size_t n, CommDtype dtype, CommRequest* r);
/* Lets outstanding requests progress (call between operators). Returns 1 if r is done. */
int comm_test(CommRequest* r);
void comm_wait(CommRequest* r);
/* full holds N shards of shard_n floats; rank r's own shard is already at full + r*shard_n;
** afterwards every rank has all of them. */
void comm_allgather_f32(Comm* c, float* full, size_t shard_n);
/* Gathers each rank's shard[0..shard_n) into full[0..N*shard_n). */
void comm_allgather_into_f32(Comm* c, const float* shard, float* full, size_t shard_n);
/* Starts gathering each rank's shard into full; neither may be touched until comm_wait. */
void comm_iallgather_into_f32(Comm* c, const float* shard, float* full, size_t shard_n,
                              CommRequest* r);
/* The same for bf16 shards (zero3's compute copies under bf16 storage), shard_n EVEN: an
** all-gather only moves bytes, so shard_n bf16 values travel as shard_n / 2 fp32 words through
** the fp32 all-gathers (every path copies their bits and computes nothing on them). */
void comm_allgather_into_bf16(Comm* c, const osdp_bf16* shard, osdp_bf16* full, size_t shard_n);
void comm_iallgather_into_bf16(Comm* c, const osdp_bf16* shard, osdp_bf16* full, size_t shard_n,
                               CommRequest* r);
/* Sums full[0..N*shard_n) across ranks (sent as dtype) and ADDS (accumulate) or writes
** (!accumulate) rank r's part (elements r*shard_n ..) into shard[0..shard_n). full is used as a
** work buffer and is clobbered. */
void comm_reduce_scatter_f32(Comm* c, float* full, float* shard, size_t shard_n, CommDtype dtype,
                             int accumulate);
/* Starts the same; neither buffer may be touched until comm_wait, which writes the shard. */
void comm_ireduce_scatter_f32(Comm* c, float* full, float* shard, size_t shard_n, CommDtype dtype,
                              int accumulate, CommRequest* r);
/* Sum of one double across c's ranks. */
double comm_allreduce_f64(Comm* c, double x);
/* Sum of n doubles in place across c's ranks. */
void comm_allreduce_f64_array(Comm* c, double* x, int n);
/* Maximum of one double across c's ranks. */
double comm_allreduce_max_f64(Comm* c, double x);
/* Broadcast of bytes from c's rank 0. */
void comm_bcast(Comm* c, void* buf, size_t bytes);

/* The counters of every Comm together since the last reset. */
CommStats comm_stats(void);
/* A clock of all seconds spent inside communication calls since the process started (never
** reset): callers subtract it from compute timings. */
const double* comm_clock(void);
/* Resets every Comm's counters. */
void comm_reset_stats(void);

#endif
