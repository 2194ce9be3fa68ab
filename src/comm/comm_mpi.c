/* comm_mpi.c: the collectives of comm.h over MPI; see comm.h. */
#include "comm/comm.h"

#include <limits.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm_nccl.h"
#include "core/util.h"

static int g_rank, g_size = 1;
static CommStats g_stats;
static double g_clock; /* all seconds inside communication calls (comm_clock) */
static const Backend* g_bk;  /* the buffers' backend (comm_use_backend) */
static int g_staged;         /* 1: buffers are device memory, copied through host staging */
static int g_nccl;           /* 1: NCCL carries the collectives (each rank owns a GPU) */
static int g_nccl_tried;
static void* g_stage;        /* the blocking calls' host staging buffer (grows, never shrinks) */
static size_t g_stage_bytes;

void comm_use_backend(const Backend* bk) {
  g_bk = bk ? bk : backend_cpu();
  /* Once per process, on the first device backend: NCCL where every rank owns a GPU. */
  if (g_bk->device_memory && !g_nccl_tried) {
    g_nccl_tried = 1;
    g_nccl = comm_nccl_init(g_bk, g_rank, g_size);
  }
  g_staged = g_bk->device_memory && !g_nccl;
}

/* Copies between buffers of the backend (a world of one's collectives). */
static void buffer_copy(void* dst, const void* src, size_t bytes) {
  if (g_bk) g_bk->copy(dst, src, bytes);
  else memcpy(dst, src, bytes);
}

/* A host buffer of at least `bytes` for a blocking staged call. */
static void* stage_buffer(size_t bytes) {
  if (bytes > g_stage_bytes) {
    free(g_stage);
    g_stage = malloc(bytes);
    g_stage_bytes = g_stage ? bytes : 0;
    if (!g_stage) { fprintf(stderr, "osdp: error: out of host memory staging a collective\n"); comm_abort(2); }
  }
  return g_stage;
}

/* A fresh host buffer for a non-blocking staged call (freed when the request finishes). */
static void* request_buffer(size_t bytes) {
  void* p = malloc(bytes ? bytes : 1);
  if (!p) { fprintf(stderr, "osdp: error: out of host memory staging a collective\n"); comm_abort(2); }
  return p;
}

/* Counts are int in MPI: every buffer osdp communicates is far below 2^31 elements, but
** say so clearly rather than truncate if a model ever grows past it. */
static int to_count(size_t n) {
  if (n > (size_t)INT_MAX) {
    fprintf(stderr, "osdp: error: a collective of %zu elements exceeds MPI's int count; split the "
            "operator into more slices\n", n);
    comm_abort(2);
  }
  return (int)n;
}

int comm_init(int* argc, char*** argv) {
  int provided = 0;
  /* MULTIPLE: the watchdog's thread sends and receives its heartbeats beside the main thread. */
  if (MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS)
    return osdp_fail("MPI_Init failed");
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &g_size);
  return 0;
}

void comm_finalize(void) {
  comm_watchdog_stop();
  comm_nccl_finalize();
  MPI_Finalize();
}
int comm_rank(void) { return g_rank; }
int comm_size(void) { return g_size; }

void comm_abort(int code) {
  fflush(stdout);
  fflush(stderr);
  if (g_size > 1) MPI_Abort(MPI_COMM_WORLD, code);
  exit(code);
}

void comm_barrier(void) { MPI_Barrier(MPI_COMM_WORLD); }

/* Adds seconds since t0 spent in a call of kind k to the counters and the clock. */
static void count_time(CommKind k, double t0) {
  double dt = now_seconds() - t0;
  g_stats.seconds[k] += dt;
  g_clock += dt;
}

/* Adds one finished call to the counters. */
static void count(CommKind k, double t0, double bytes) {
  count_time(k, t0);
  g_stats.bytes[k] += bytes;
  g_stats.calls[k]++;
}

const double* comm_clock(void) { return &g_clock; }

void comm_allreduce_f32(float* buf, size_t n) {
  if (g_size == 1) return;
  double t0 = now_seconds();
  if (g_nccl) { comm_nccl_allreduce(buf, n); count(COMM_ALLREDUCE, t0, 4.0 * (double)n); return; }
  size_t bytes = n * sizeof(float);
  float* host = g_staged ? stage_buffer(bytes) : buf;
  if (g_staged) g_bk->to_host(host, buf, bytes);
  MPI_Allreduce(MPI_IN_PLACE, host, to_count(n), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  if (g_staged) g_bk->to_device(buf, host, bytes);
  count(COMM_ALLREDUCE, t0, 4.0 * (double)n);
}

void comm_iallreduce_f32(float* buf, size_t n, CommRequest* r) {
  memset(r, 0, sizeof *r);
  if (g_size == 1) return;
  if (g_nccl) {
    double t0 = now_seconds();
    comm_nccl_iallreduce(buf, n, r);
    count_time(COMM_ALLREDUCE, t0);
    *r = (CommRequest){.mpi = r->mpi, .active = 1, .kind = COMM_ALLREDUCE, .bytes = 4.0 * (double)n};
    return;
  }
  MPI_Request* req = malloc(sizeof *req);
  if (!req) { fprintf(stderr, "osdp: error: out of host memory\n"); comm_abort(2); }
  double t0 = now_seconds();
  float* host = buf;
  if (g_staged) {
    size_t bytes = n * sizeof(float);
    host = r->host = request_buffer(bytes);
    g_bk->to_host(host, buf, bytes);
    r->device_result = buf;
    r->result_bytes = bytes;
  }
  MPI_Iallreduce(MPI_IN_PLACE, host, to_count(n), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, req);
  count_time(COMM_ALLREDUCE, t0);
  r->mpi = req;
  r->active = 1;
  r->kind = COMM_ALLREDUCE;
  r->bytes = 4.0 * (double)n;
}

/* Releases a finished request (copying a staged result back) and counts its payload. */
static void finish_request(CommRequest* r) {
  if (r->host) g_bk->to_device(r->device_result, r->host, r->result_bytes);
  free(r->host);
  r->host = NULL;
  if (!g_nccl) free(r->mpi); /* NCCL's event is released by comm_nccl_test / wait */
  r->mpi = NULL;
  r->active = 0;
  g_stats.bytes[r->kind] += r->bytes;
  g_stats.calls[r->kind]++;
}

int comm_test(CommRequest* r) {
  if (!r->active) return 1;
  int done = 0;
  double t0 = now_seconds();
  if (g_nccl) done = comm_nccl_test(r);
  else MPI_Test((MPI_Request*)r->mpi, &done, MPI_STATUS_IGNORE);
  if (done) finish_request(r);
  count_time(r->kind, t0);
  return done;
}

void comm_wait(CommRequest* r) {
  if (!r->active) return;
  double t0 = now_seconds();
  if (g_nccl) comm_nccl_wait(r);
  else MPI_Wait((MPI_Request*)r->mpi, MPI_STATUS_IGNORE);
  finish_request(r);
  count_time(r->kind, t0);
}

void comm_allgather_f32(float* full, size_t shard_n) {
  if (g_size == 1) return;
  double t0 = now_seconds();
  if (g_nccl) {
    comm_nccl_allgather(full + shard_n * (size_t)g_rank, full, shard_n);
    count(COMM_ALLGATHER, t0, 4.0 * (double)shard_n * g_size);
    return;
  }
  size_t shard_bytes = shard_n * sizeof(float), bytes = shard_bytes * (size_t)g_size;
  float* host = g_staged ? stage_buffer(bytes) : full;
  if (g_staged) g_bk->to_host(host + shard_n * (size_t)g_rank, full + shard_n * (size_t)g_rank, shard_bytes);
  MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, host, to_count(shard_n), MPI_FLOAT,
                MPI_COMM_WORLD);
  if (g_staged) g_bk->to_device(full, host, bytes);
  count(COMM_ALLGATHER, t0, 4.0 * (double)shard_n * g_size);
}

void comm_allgather_into_f32(const float* shard, float* full, size_t shard_n) {
  if (g_size == 1) { buffer_copy(full, shard, shard_n * sizeof(float)); return; }
  double t0 = now_seconds();
  if (g_nccl) {
    comm_nccl_allgather(shard, full, shard_n);
    count(COMM_ALLGATHER, t0, 4.0 * (double)shard_n * g_size);
    return;
  }
  size_t shard_bytes = shard_n * sizeof(float), bytes = shard_bytes * (size_t)g_size;
  float* host = g_staged ? stage_buffer(bytes + shard_bytes) : full;
  const float* send = shard;
  if (g_staged) {
    g_bk->to_host(host + shard_n * (size_t)g_size, shard, shard_bytes);
    send = host + shard_n * (size_t)g_size;
  }
  MPI_Allgather(send, to_count(shard_n), MPI_FLOAT, host, to_count(shard_n), MPI_FLOAT,
                MPI_COMM_WORLD);
  if (g_staged) g_bk->to_device(full, host, bytes);
  count(COMM_ALLGATHER, t0, 4.0 * (double)shard_n * g_size);
}

void comm_iallgather_into_f32(const float* shard, float* full, size_t shard_n, CommRequest* r) {
  memset(r, 0, sizeof *r);
  if (g_size == 1) { buffer_copy(full, shard, shard_n * sizeof(float)); return; }
  if (g_nccl) {
    double t0 = now_seconds();
    comm_nccl_iallgather(shard, full, shard_n, r);
    count_time(COMM_ALLGATHER, t0);
    *r = (CommRequest){.mpi = r->mpi, .active = 1, .kind = COMM_ALLGATHER,
                       .bytes = 4.0 * (double)shard_n * g_size};
    return;
  }
  MPI_Request* req = malloc(sizeof *req);
  if (!req) { fprintf(stderr, "osdp: error: out of host memory\n"); comm_abort(2); }
  double t0 = now_seconds();
  const float* send = shard;
  float* recv = full;
  if (g_staged) {
    size_t shard_bytes = shard_n * sizeof(float), bytes = shard_bytes * (size_t)g_size;
    /* The host copy: the gathered result, then this rank's shard to send. */
    recv = r->host = request_buffer(bytes + shard_bytes);
    g_bk->to_host(recv + shard_n * (size_t)g_size, shard, shard_bytes);
    send = recv + shard_n * (size_t)g_size;
    r->device_result = full;
    r->result_bytes = bytes;
  }
  MPI_Iallgather(send, to_count(shard_n), MPI_FLOAT, recv, to_count(shard_n), MPI_FLOAT,
                 MPI_COMM_WORLD, req);
  count_time(COMM_ALLGATHER, t0);
  r->mpi = req;
  r->active = 1;
  r->kind = COMM_ALLGATHER;
  r->bytes = 4.0 * (double)shard_n * g_size;
}

/* Adds (accumulate) or copies this rank's reduced part, src[0..n), into shard. */
static void shard_result(float* shard, const float* src, size_t n, int accumulate) {
  if (accumulate) {
    if (g_bk) g_bk->f32->accumulate(shard, src, n);
    else for (size_t i = 0; i < n; i++) shard[i] += src[i];
  } else if (g_bk) {
    g_bk->copy(shard, src, n * sizeof(float));
  } else {
    memcpy(shard, src, n * sizeof(float));
  }
}

void comm_reduce_scatter_f32(float* full, float* shard, size_t shard_n, int accumulate) {
  double t0 = now_seconds();
  size_t shard_bytes = shard_n * sizeof(float);
  if (g_nccl && g_size > 1) {
    /* NCCL in place: this rank's result lands at its own part of the buffer. */
    comm_nccl_reduce_scatter(full, shard_n);
    shard_result(shard, full + shard_n * (size_t)g_rank, shard_n, accumulate);
    count(COMM_REDUCE_SCATTER, t0, 4.0 * (double)shard_n * g_size);
    return;
  }
  /* In place: the result for this rank lands at the start of the buffer. */
  if (g_size > 1) {
    float* host = g_staged ? stage_buffer(shard_bytes * (size_t)g_size) : full;
    if (g_staged) g_bk->to_host(host, full, shard_bytes * (size_t)g_size);
    MPI_Reduce_scatter_block(MPI_IN_PLACE, host, to_count(shard_n), MPI_FLOAT, MPI_SUM,
                             MPI_COMM_WORLD);
    if (g_staged) g_bk->to_device(full, host, shard_bytes);
  }
  shard_result(shard, full, shard_n, accumulate);
  /* The accumulation counts as part of the collective (profiled the same way). */
  if (g_size > 1) count(COMM_REDUCE_SCATTER, t0, 4.0 * (double)shard_n * g_size);
}

double comm_allreduce_f64(double x) {
  if (g_size > 1) MPI_Allreduce(MPI_IN_PLACE, &x, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  return x;
}

void comm_allreduce_f64_array(double* x, int n) {
  if (g_size > 1) MPI_Allreduce(MPI_IN_PLACE, x, n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
}

double comm_allreduce_max_f64(double x) {
  if (g_size > 1) MPI_Allreduce(MPI_IN_PLACE, &x, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return x;
}

void comm_bcast(void* buf, size_t bytes) {
  if (g_size > 1) MPI_Bcast(buf, to_count(bytes), MPI_BYTE, 0, MPI_COMM_WORLD);
}

CommStats comm_stats(void) { return g_stats; }
void comm_reset_stats(void) { memset(&g_stats, 0, sizeof g_stats); }
