/*
** comm_nccl.h (private to comm): the collectives on NCCL for ranks that each own a GPU.
**
** comm_mpi.c calls these instead of MPI when comm_nccl_init said yes. NCCL is bootstrapped over
** MPI (rank 0's ncclUniqueId broadcast) and loaded at run time (dlopen of libnccl.so.2), so an
** osdp built with CUDA runs where NCCL is absent, staging through MPI instead. Collectives run on
** a communication stream: each waits for the compute stream's work queued before it (an event),
** and the compute stream waits for its result (another event) before any later kernel, so the
** host never waits for a non-blocking one until comm_wait and compute overlaps communication.
** Blocking ones also wait on the host, so their time is counted like MPI's.
** Built only with OSDP_HAVE_NCCL (CUDA builds); elsewhere comm_nccl_init says no.
*/
#ifndef OSDP_COMM_NCCL_H
#define OSDP_COMM_NCCL_H

#include <stddef.h>

#include "comm/comm.h"

/* Sets NCCL up for backend bk when every rank owns a distinct GPU (no two ranks of one host on
** one device: NCCL refuses that, and MPI with host staging serves it) and NCCL loads. Collective
** over MPI_COMM_WORLD. Returns 1 when NCCL now carries the collectives, 0 when it does not (the
** reason is printed by rank 0 when OSDP_COMM_VERBOSE is set). */
int comm_nccl_init(const Backend* bk, int rank, int size);
/* Releases the NCCL communicator and its stream (at comm_finalize). */
void comm_nccl_finalize(void);

/* In-place sum of buf[0..n). */
void comm_nccl_allreduce(float* buf, size_t n);
/* Starts an in-place sum; r->mpi holds the completion event. */
void comm_nccl_iallreduce(float* buf, size_t n, CommRequest* r);
/* 1 when r's collective is complete (its result is then ordered before later kernels). */
int comm_nccl_test(CommRequest* r);
/* Orders r's result before every later kernel and, for comm's counters, waits for it. */
void comm_nccl_wait(CommRequest* r);
/* Gathers into full[0..size*shard_n) from each rank's shard (which may be full + rank*shard_n). */
void comm_nccl_allgather(const float* shard, float* full, size_t shard_n);
/* Starts the same gather; r->mpi holds the completion event. */
void comm_nccl_iallgather(const float* shard, float* full, size_t shard_n, CommRequest* r);
/* Sums full[0..size*shard_n) across ranks, leaving this rank's part in place at
** full + rank*shard_n. */
void comm_nccl_reduce_scatter(float* full, size_t shard_n);

#endif
