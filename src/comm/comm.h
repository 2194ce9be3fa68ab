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

typedef struct CommStats {
  double seconds[COMM_KINDS];  /* wall time spent inside calls: blocking ones, and starting,
                               ** testing and waiting for non-blocking ones */
  double bytes[COMM_KINDS];    /* payload bytes (the full buffer size of each call) */
  long calls[COMM_KINDS];
} CommStats;

/* An outstanding non-blocking collective. With device memory (comm_use_backend) the MPI side runs
** on the host copy `host`, and `result_bytes` of it go back to `device_result` on completion. */
typedef struct CommRequest {
  void* mpi;
  int active;
  CommKind kind;
  double bytes;
  void* host;
  void* device_result;
  size_t result_bytes;
} CommRequest;

/* Initialises MPI (once per process); rank and world size are then available. */
int comm_init(int* argc, char*** argv);
/* Finalises MPI. */
void comm_finalize(void);
int comm_rank(void);
int comm_size(void);
/* Stops every rank at once after an unrecoverable error (never hangs the others). */
void comm_abort(int code) __attribute__((noreturn));
void comm_barrier(void);

/* Says where the buffers given to the collectives live: the backend's memory (NULL: the CPU's).
** For a GPU every collective goes through host copies (MPI over host memory; the way several
** ranks share one GPU); on the CPU the buffers are used directly. The engine sets it. */
void comm_use_backend(const Backend* bk);

/* The watchdog (comm_watchdog.c): a thread per rank exchanging heartbeats with rank 0 on a
** communicator of its own. A rank silent for timeout_s seconds (stopped, dead, its host hung) is
** named on stderr and the job aborted; so is a training step (comm_watchdog_step) that makes no
** progress for max(timeout_s, 10 x the median step) while every rank answers. Collective; a no-op
** on one rank. -1 with an error when the MPI lacks MPI_THREAD_MULTIPLE. */
int comm_watchdog_start(double timeout_s);
/* Step `step` begins (-1: no step in progress, e.g. evaluation or saving); median_step_s is the
** median step so far (0: none yet). */
void comm_watchdog_step(long step, double median_step_s);
/* Stops the watchdog (collective: every rank drains its heartbeats); comm_finalize calls it. */
void comm_watchdog_stop(void);

/* In-place sum of buf[0..n) across ranks. */
void comm_allreduce_f32(float* buf, size_t n);
/* Starts an in-place sum; buf must not be touched until comm_wait. */
void comm_iallreduce_f32(float* buf, size_t n, CommRequest* r);
/* Lets outstanding requests progress (call between operators). Returns 1 if r is done. */
int comm_test(CommRequest* r);
void comm_wait(CommRequest* r);
/* full holds N shards of shard_n floats; rank r's own shard is already at full + r*shard_n;
** afterwards every rank has all of them. */
void comm_allgather_f32(float* full, size_t shard_n);
/* Gathers each rank's shard[0..shard_n) into full[0..N*shard_n). */
void comm_allgather_into_f32(const float* shard, float* full, size_t shard_n);
/* Starts gathering each rank's shard into full; neither may be touched until comm_wait. */
void comm_iallgather_into_f32(const float* shard, float* full, size_t shard_n, CommRequest* r);
/* Sums full[0..N*shard_n) across ranks and ADDS (accumulate) or writes (!accumulate) rank r's
** part (elements r*shard_n ..) into shard[0..shard_n). full is used as a work buffer and is
** clobbered. */
void comm_reduce_scatter_f32(float* full, float* shard, size_t shard_n, int accumulate);
/* Sum of one double across ranks. */
double comm_allreduce_f64(double x);
/* Sum of n doubles in place across ranks. */
void comm_allreduce_f64_array(double* x, int n);
/* Maximum of one double across ranks. */
double comm_allreduce_max_f64(double x);
/* Broadcast of bytes from rank 0. */
void comm_bcast(void* buf, size_t bytes);

/* The counters since the last reset. */
CommStats comm_stats(void);
/* A clock of all seconds spent inside communication calls since the process started (never
** reset): callers subtract it from compute timings. */
const double* comm_clock(void);
void comm_reset_stats(void);

#endif
