/*
** comm_internal.h (private to comm): what comm_mpi.c (communicators, gathers, requests) and
** comm_reduce.c (the gradient reductions) share: the Comm struct and the helpers for buffers,
** staging and counters. Defined in comm_mpi.c unless said otherwise.
*/
#ifndef OSDP_COMM_INTERNAL_H
#define OSDP_COMM_INTERNAL_H

#include <mpi.h>
#include <stddef.h>

#include "comm/comm.h"

/* Reductions run on lanes: duplicates of the communicator, each carrying one reduction at a
** time, so the chunks each reduction posts whenever it progresses never interleave with another
** collective on the same MPI communicator in a different order on different ranks (MPI matches
** collectives by the order they are started). Reduction j of a Comm takes lane j mod COMM_LANES;
** the ranks start reductions in the same order, so they agree on the lanes. */
#define COMM_LANES 16

/* A communicator (comm.h): the MPI one, this rank's place in it, and its counters. */
struct Comm {
  MPI_Comm mpi;
  MPI_Comm lanes[COMM_LANES];  /* duplicates of mpi for reductions (size > 1) */
  void* lane_job[COMM_LANES];  /* the reduction whose MPI work is on that lane, or NULL */
  long reductions;             /* reductions started so far (the next one's lane) */
  int rank, size;
  int group;          /* comm_group / comm_across: the G it was made for (0: world, host) */
  int across;         /* 1: comm_across(group) */
  int exchange_gathers; /* 1: all-gathers as chunked all-to-alls (comm_reduce.c): c spans hosts */
  char name[40];
  CommStats stats;
};

/* The backend whose memory the collectives' buffers are in (comm_use_backend; the CPU). */
const Backend* comm_backend(void);
/* 1 when c's fp32 collectives go through NCCL (the world's, where each rank owns a GPU). */
int comm_on_nccl(const Comm* c);
/* 1 when the buffers are device memory, which MPI reaches through host copies. */
int comm_on_device(void);
/* malloc that ends the job with a one-line error when host memory runs out. */
void* comm_host_alloc(size_t bytes);
/* n as MPI's int count; ends the job with an error past INT_MAX. */
int comm_to_count(size_t n);
/* Adds seconds since t0 spent in a call of kind k on c to its counters and the clock. */
void comm_count_time(Comm* c, CommKind k, double t0);
/* Adds one finished call (bytes of payload) to c's counters. */
void comm_count_call(Comm* c, CommKind k, double bytes);

/* comm_reduce.c: advances a reduction request (block: to its end); 1 when finished (its result
** is then in place, its staging freed and its call counted). */
int comm_reduction_advance(CommRequest* r, int block);
/* comm_reduce.c: starts gathering every rank's shard[0..shard_n) (backend memory; it may be
** full's own part) into full[0..N*shard_n) as chunked all-to-alls, advanced like a reduction. */
void comm_exchange_gather(Comm* c, const float* shard, float* full, size_t shard_n, CommRequest* r);

#endif
