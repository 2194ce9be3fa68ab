/*
** comm_nccl.h (private to comm): the collectives on NCCL for ranks that each own a GPU.
**
** comm_mpi.c and comm_reduce.c call these instead of MPI when comm_nccl_init said yes. NCCL is
** bootstrapped over MPI (rank 0's ncclUniqueId broadcast) and loaded at run time (dlopen, see
** comm_nccl_open), so an osdp built with CUDA runs where NCCL is absent, staging through MPI.
**
** Collectives run on NCCL's own stream, ordered against the backend's compute stream by events
** (the whole argument is at the top of comm_nccl.c): a collective waits for the compute work
** queued before it was started; the compute stream waits for a non-blocking collective only
** when its request is finished (comm_wait, or a comm_test that finds it done), the point where
** the caller uses the result, so the kernels queued in between overlap it. comm_wait, and every
** blocking collective (whose result the compute stream waits for at once), also wait on the
** host, so the time a rank waits is counted like MPI's; starting one never waits.
** Built only with OSDP_HAVE_NCCL (CUDA builds); elsewhere comm_nccl_init says no.
*/
#ifndef OSDP_COMM_NCCL_H
#define OSDP_COMM_NCCL_H

#include <stddef.h>

#include "comm/comm.h"

/* Sets NCCL up for backend bk when every rank owns a distinct GPU (no two ranks of one host on
** one device: NCCL refuses that, and MPI with host staging serves it) and NCCL loads. Collective
** over MPI_COMM_WORLD, and every rank takes the same branch at every step (a rank that cannot go
** on tells the others through the step's agreement, never by leaving a collective). Returns 1
** when NCCL now carries the collectives, 0 when it does not (OSDP_COMM_VERBOSE: the reason, by
** the lowest rank that had one; a NCCL that loads but fails to start says so always). Ends the
** job with one line when OSDP_NCCL_LIB names a library that cannot be used, or when this rank's
** communicator failed while other ranks are still setting theirs up after 60 s. */
int comm_nccl_init(const Backend* bk, int rank, int size);
/* Releases the NCCL communicator, its stream and events (at comm_finalize). */
void comm_nccl_finalize(void);

/* In-place sum of buf[0..n). */
void comm_nccl_allreduce(float* buf, size_t n);
/* Starts an in-place sum; r->mpi holds the request's state until it is finished. */
void comm_nccl_iallreduce(float* buf, size_t n, CommRequest* r);
/* 1 when r's collective is complete; r is then finished (see comm_nccl_wait). */
int comm_nccl_test(CommRequest* r);
/* Finishes r: the compute stream waits for r's collective (kernels queued from now on see its
** result), a reduce-scatter's part is added or copied into its shard, and the host waits for the
** collective (for the counters). */
void comm_nccl_wait(CommRequest* r);
/* Gathers into full[0..size*shard_n) from each rank's shard (which may be full + rank*shard_n). */
void comm_nccl_allgather(const float* shard, float* full, size_t shard_n);
/* Starts the same gather. */
void comm_nccl_iallgather(const float* shard, float* full, size_t shard_n, CommRequest* r);
/* Sums full[0..size*shard_n) across ranks, leaving this rank's part in place at
** full + rank*shard_n. */
void comm_nccl_reduce_scatter(float* full, size_t shard_n);
/* Starts the same; finishing r adds (accumulate) or copies that part into shard[0..shard_n). */
void comm_nccl_ireduce_scatter(float* full, float* shard, size_t shard_n, int accumulate,
                               CommRequest* r);

#ifdef OSDP_HAVE_NCCL
/* Where comm_nccl_open looks for libnccl.so.2: the process's environment
** (comm_nccl_search_from_env), or a test's fake tree. */
typedef struct NcclSearch {
  const char* lib;          /* OSDP_NCCL_LIB: this file and nowhere else (NULL or "": unset) */
  int loader_path;          /* 1: first dlopen("libnccl.so.2") on the loader's own path */
  const char* virtual_env;  /* $VIRTUAL_ENV: a venv's site-packages */
  const char* conda_prefix; /* $CONDA_PREFIX: a conda environment's */
  const char* path;         /* $PATH: the prefix of the first python3 on it (PREFIX/bin/python3) */
  const char* home;         /* $HOME: ~/.local's (pip install --user) */
  const char* root;         /* prepended to the system's /usr/local/lib/python3* and
                            ** /usr/lib/python3* ("" in a run) */
  const char* cuda_home;    /* $CUDA_HOME (NULL: ROOT/usr/local/cuda): its lib64 */
} NcclSearch;

/* The search a run makes: its environment's values, the loader's path first. */
void comm_nccl_search_from_env(NcclSearch* s);
/* The files that exist among the places searched after the loader's path, in the order tried:
** beside PyTorch's wheel (SITE/nvidia/nccl/lib/libnccl.so.2 for the site-packages of the venv,
** the conda environment, the python3 on PATH, ~/.local, /usr/local/lib and /usr/lib, each
** python3.* in the order glob sorts them), then CUDA's lib64. Writes up to max paths of
** `len` bytes each into out (out[i * len]); returns how many exist (may exceed max). */
int comm_nccl_candidates(const NcclSearch* s, char* out, size_t len, int max);
/* Loads NCCL as s says and checks that it has each of the `count` functions in names: first
** OSDP_NCCL_LIB alone when set, else the loader's path, else comm_nccl_candidates in order. Returns
** the dlopen handle with the file loaded in where[0..where_len); NULL with the reason in why:
** *fatal = 1 when OSDP_NCCL_LIB is set and unusable (why is then the job's one-line error, naming
** the variable, its value and the fix), 0 when NCCL is merely absent or too old. */
void* comm_nccl_open(const NcclSearch* s, const char* const* names, int count, char* where,
                     size_t where_len, char* why, size_t why_len, int* fatal);
#endif

#endif
