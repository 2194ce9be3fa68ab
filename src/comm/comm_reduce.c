/*
** comm_reduce.c: the collectives of comm.h built from chunked all-to-alls on MPI: the gradient
** reductions (all-reduce, reduce-scatter), and the all-gathers of communicators that span hosts.
**
** MPI's own reduce-scatter and non-blocking all-reduce are slow on this kind of machine (OpenMPI
** 4.1, shared memory, 2 ranks, 160 MB: MPI_Reduce_scatter_block 135 ms, MPI_Iallreduce 176 ms,
** against 22 ms for an all-to-all of the same buffer and 18 ms to sum what it delivers; see
** bench/bench_comm), and MPI has no bf16 sum. So every reduction here is a sequence of chunks of
** an all-to-all: in chunk k each rank sends piece k of every part of its buffer to the part's
** owner (fp32 as it is, or rounded to bf16), and the owner sums the N pieces it received in rank
** order, in fp32, into its destination. An all-reduce then gathers the summed parts back into
** every rank's buffer (bf16: the sums rounded to bf16), so every rank ends with the same bits.
**
** The gathering: within a host fp32 goes all at once, in place (MPI_Iallgatherv, the fastest
** there); across hosts, and for bf16, chunk k goes as an all-to-all too: this rank's piece k to
** every rank, every rank's piece k into the staging. Across a link MPI's all-gathers run at half
** its rate (2 hosts over a 300 Mbit/s link, 16 MB: MPI_Allgather, MPI_Iallgather and
** MPI_Iallgatherv 418 ms, the all-to-all 223 ms, the link's own time 213 ms), so the all-gathers
** of comm.h on such a communicator are this gathering alone (comm_exchange_gather).
**
** The staging is one chunk (about CHUNK_BYTES), never a copy of the buffer (except for device
** memory, which MPI reaches through a host copy). The same code runs blocking (waiting for each
** chunk) and non-blocking (each comm_test advances it), so both give the same result.
**
** A buffer of n elements over N ranks has N parts of m = ceil(n / N) elements (the last ones
** shorter, or empty); rank r owns part r. A reduce-scatter's buffer is N * shard_n exactly, and
** so is an all-gather's.
*/
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm_internal.h"
#include "comm/comm_nccl.h"
#include "core/util.h"

/* Bytes of received pieces per chunk (over all ranks): big enough that a chunk's fixed cost is
** small, small enough to stay in cache while it is summed. */
#define CHUNK_BYTES ((size_t)4 << 20)

/* One reduction in progress. */
typedef struct Reduction {
  Comm* c;
  int lane;            /* its lane of c (comm_internal.h) */
  MPI_Comm mpi;        /* that lane's communicator */
  CommDtype dtype;
  float* src;          /* host: the buffer being reduced (the caller's, or its host copy) */
  size_t n, m;         /* its elements; part length */
  size_t L, K, k;      /* piece length per chunk, chunk count, the chunk in flight */
  float* dst;          /* host: where this rank's summed part goes (NULL: its part of src) */
  int accumulate;      /* add into dst (else overwrite it) */
  int gather;          /* all-reduce and all-gather: gather every part back into src */
  int exchange;        /* gather chunk by chunk as all-to-alls (across hosts, or bf16) */
  int phase;           /* 1 reducing, 2 gathering, 3 done */
  void* send;          /* bf16: this chunk's packed pieces (N*L) */
  void* recv;          /* this chunk's received pieces (N*L elements of the dtype) */
  float* sum;          /* bf16: the chunk's sums in fp32 (L) */
  int* cnt;            /* 4N ints: send counts and displacements, receive counts and displacements */
  MPI_Request req;
  /* Device memory: src is a host copy of dev_buf; the result goes back at the end. */
  float* dev_buf;      /* the caller's (full) buffer (NULL on the CPU) */
  float* dev_acc;      /* reduce-scatter on a device: the caller's shard */
} Reduction;

/* ---- bf16 ---------------------------------------------------------------------------- */

/* Rounds a float to bf16, to nearest even (NaN stays NaN); branch-free, so loops vectorise. */
static inline uint16_t to_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  uint32_t rounded = u + 0x7fffu + ((u >> 16) & 1u), quiet = u | 0x400000u;
  return (uint16_t)(((u & 0x7fffffffu) > 0x7f800000u ? quiet : rounded) >> 16);
}

static inline float from_bf16(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

/* Bytes of one element as sent. */
static size_t dtype_bytes(CommDtype dtype) { return dtype == COMM_BF16 ? 2 : 4; }

/* ---- Geometry ------------------------------------------------------------------------ */

/* Elements of part p. */
static size_t part_len(const Reduction* R, int p) {
  size_t start = (size_t)p * R->m;
  if (start >= R->n) return 0;
  return R->n - start < R->m ? R->n - start : R->m;
}

/* Elements of chunk k of part p. */
static size_t piece_len(const Reduction* R, int p, size_t k) {
  size_t len = part_len(R, p), c0 = k * R->L;
  if (c0 >= len) return 0;
  return len - c0 < R->L ? len - c0 : R->L;
}

/* ---- The chunks ---------------------------------------------------------------------- */

/* Posts the all-to-all of chunk k: piece k of every part to its owner. */
static void post_reduce_chunk(Reduction* R) {
  int N = R->c->size, r = R->c->rank;
  int *sc = R->cnt, *sd = sc + N, *rc = sd + N, *rd = rc + N;
  size_t c0 = R->k * R->L;
  for (int p = 0; p < N; p++) {
    sc[p] = comm_to_count(piece_len(R, p, R->k));
    rc[p] = comm_to_count(piece_len(R, r, R->k));
    rd[p] = comm_to_count((size_t)p * R->L);
  }
  if (R->dtype == COMM_BF16) {
    uint16_t* send = R->send;
    for (int p = 0; p < N; p++) {
      const float* in = R->src + (size_t)p * R->m + c0;
      uint16_t* out = send + (size_t)p * R->L;
      for (int i = 0; i < sc[p]; i++) out[i] = to_bf16(in[i]);
      sd[p] = rd[p];
    }
    MPI_Ialltoallv(send, sc, sd, MPI_UINT16_T, R->recv, rc, rd, MPI_UINT16_T, R->mpi, &R->req);
    return;
  }
  for (int p = 0; p < N; p++) sd[p] = comm_to_count((size_t)p * R->m + c0);
  MPI_Ialltoallv(R->src, sc, sd, MPI_FLOAT, R->recv, rc, rd, MPI_FLOAT, R->mpi, &R->req);
}

/* Sums the N received pieces of chunk k, in rank order, into this rank's destination: the sums
** are formed in place in the first piece (fp32) or in R->sum (bf16), one vector loop per piece,
** then written (or added) to the destination. */
static void sum_reduce_chunk(Reduction* R) {
  int N = R->c->size, r = R->c->rank;
  size_t len = piece_len(R, r, R->k), L = R->L;
  float* restrict out = (R->dst ? R->dst : R->src + (size_t)r * R->m) + R->k * L;
  int acc = R->accumulate && R->dst;
  float* restrict s;
  if (R->dtype == COMM_BF16) {
    const uint16_t* in = R->recv;
    s = R->sum;
    for (size_t i = 0; i < len; i++) s[i] = from_bf16(in[i]);
    for (int p = 1; p < N; p++) {
      const uint16_t* restrict q = in + (size_t)p * L;
      for (size_t i = 0; i < len; i++) s[i] += from_bf16(q[i]);
    }
  } else {
    s = R->recv;
    for (int p = 1; p < N; p++) {
      const float* restrict q = s + (size_t)p * L;
      for (size_t i = 0; i < len; i++) s[i] += q[i];
    }
  }
  if (acc) for (size_t i = 0; i < len; i++) out[i] += s[i];
  else memcpy(out, s, len * sizeof(float));
}

/* Posts the gathering of the summed parts: without exchange (fp32 within a host) all at once, in
** place; with it chunk k, each rank's piece to every rank, bf16 rounded (including its own, so
** that every rank holds the same values) or fp32 from src as it is (to the others only). */
static void post_gather(Reduction* R) {
  int N = R->c->size, r = R->c->rank;
  int *sc = R->cnt, *sd = sc + N, *rc = sd + N, *rd = rc + N;
  if (!R->exchange) {
    for (int p = 0; p < N; p++) {
      rc[p] = comm_to_count(part_len(R, p));
      rd[p] = comm_to_count((size_t)p * R->m);
    }
    MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, R->src, rc, rd, MPI_FLOAT, R->mpi, &R->req);
    return;
  }
  size_t mine = piece_len(R, r, R->k), at = (size_t)r * R->m + R->k * R->L;
  for (int p = 0; p < N; p++) {
    rc[p] = comm_to_count(piece_len(R, p, R->k));
    rd[p] = comm_to_count((size_t)p * R->L);
    sc[p] = comm_to_count(mine);
  }
  if (R->dtype == COMM_BF16) {
    uint16_t* send = R->send;
    for (size_t i = 0; i < mine; i++) send[i] = to_bf16(R->src[at + i]);
    for (int p = 0; p < N; p++) sd[p] = 0;
    MPI_Ialltoallv(send, sc, sd, MPI_UINT16_T, R->recv, rc, rd, MPI_UINT16_T, R->mpi, &R->req);
    return;
  }
  for (int p = 0; p < N; p++) sd[p] = comm_to_count(at);
  sc[r] = rc[r] = 0; /* its own piece is in place already */
  MPI_Ialltoallv(R->src, sc, sd, MPI_FLOAT, R->recv, rc, rd, MPI_FLOAT, R->mpi, &R->req);
}

/* Exchange: writes the gathered pieces of chunk k into every part of src (bf16: its own too,
** rounded; fp32: the others'). */
static void unpack_gather_chunk(Reduction* R) {
  int N = R->c->size, r = R->c->rank;
  for (int p = 0; p < N; p++) {
    size_t len = piece_len(R, p, R->k);
    float* out = R->src + (size_t)p * R->m + R->k * R->L;
    if (R->dtype == COMM_BF16) {
      const uint16_t* q = (const uint16_t*)R->recv + (size_t)p * R->L;
      for (size_t i = 0; i < len; i++) out[i] = from_bf16(q[i]);
    } else if (p != r) {
      memcpy(out, (const float*)R->recv + (size_t)p * R->L, len * sizeof(float));
    }
  }
}

/* The reduction's MPI work is over: its lane is free for the next one. */
static void release_lane(Reduction* R) {
  if (R->c->lane_job[R->lane] == R) R->c->lane_job[R->lane] = NULL;
}

/* What follows a completed MPI operation: the next chunk, the gather, or the end. */
static void next_step(Reduction* R) {
  if (R->phase == 1) {
    sum_reduce_chunk(R);
    if (++R->k < R->K) { post_reduce_chunk(R); return; }
    R->k = 0;
    if (!R->gather) { R->phase = 3; release_lane(R); return; }
    R->phase = 2;
    post_gather(R);
    return;
  }
  if (R->exchange) {
    unpack_gather_chunk(R);
    if (++R->k < R->K) { post_gather(R); return; }
  }
  R->phase = 3;
  release_lane(R);
}

/* Runs R's MPI work to its end (its owner still finishes it with comm_test / comm_wait). */
static void drive(Reduction* R) {
  while (R->phase != 3) {
    MPI_Wait(&R->req, MPI_STATUS_IGNORE);
    next_step(R);
  }
}

/* ---- Requests ------------------------------------------------------------------------ */

/* A new job over c for a buffer of n elements sent as dtype: its lane (a job still there,
** COMM_LANES started since, is driven to its end first), geometry and chunk staging. */
static Reduction* reduction_new(Comm* c, CommKind kind, size_t n, CommDtype dtype) {
  size_t N = (size_t)c->size, elem = dtype_bytes(dtype);
  Reduction* R = comm_host_alloc(sizeof *R);
  memset(R, 0, sizeof *R);
  R->c = c;
  R->lane = (int)(c->reductions++ % COMM_LANES);
  R->mpi = c->lanes[R->lane];
  if (c->lane_job[R->lane]) drive(c->lane_job[R->lane]);
  c->lane_job[R->lane] = R;
  R->dtype = dtype;
  R->n = n;
  R->m = (n + N - 1) / N;
  R->L = CHUNK_BYTES / elem / N;
  if (R->L < 1) R->L = 1;
  R->K = R->m ? (R->m + R->L - 1) / R->L : 0;
  R->gather = kind != COMM_REDUCE_SCATTER;
  R->exchange = c->exchange_gathers || dtype == COMM_BF16;
  R->req = MPI_REQUEST_NULL;
  R->recv = comm_host_alloc(N * R->L * elem);
  R->send = dtype == COMM_BF16 ? comm_host_alloc(N * R->L * elem) : NULL;
  R->sum = dtype == COMM_BF16 ? comm_host_alloc(R->L * sizeof(float)) : NULL;
  R->cnt = comm_host_alloc(4 * N * sizeof(int));
  comm_to_count(n);
  return R;
}

/* Makes a reduction of buf (n elements, backend memory) over c into r and posts its first
** chunk. Reduce-scatter: acc receives this rank's part; all-reduce (acc NULL): buf gets all. */
static void reduction_start(Comm* c, CommKind kind, float* buf, size_t n, float* acc,
                            int accumulate, CommDtype dtype, CommRequest* r) {
  Reduction* R = reduction_new(c, kind, n, dtype);
  R->accumulate = accumulate;
  R->phase = 1;
  if (comm_on_device()) {
    /* MPI works on a host copy; the result goes back in comm_reduction_advance's finish. */
    R->dev_buf = buf;
    R->dev_acc = acc;
    R->src = comm_host_alloc(n * sizeof(float));
    comm_backend()->to_host(R->src, buf, n * sizeof(float));
    R->dst = NULL;
  } else {
    R->src = buf;
    R->dst = acc;
  }
  *r = (CommRequest){.active = 1, .kind = kind, .comm = c, .job = R,
                     .bytes = (double)dtype_bytes(dtype) * (double)n};
  if (R->K) post_reduce_chunk(R);
  else { R->phase = 3; release_lane(R); }
}

void comm_exchange_gather(Comm* c, const float* shard, float* full, size_t shard_n, CommRequest* r) {
  size_t N = (size_t)c->size, n = shard_n * N, at = shard_n * (size_t)c->rank;
  Reduction* R = reduction_new(c, COMM_ALLGATHER, n, COMM_FP32);
  R->phase = 2;
  if (comm_on_device()) {
    /* A host copy of the whole buffer, this rank's shard in its place; all of it goes back. */
    R->dev_buf = full;
    R->src = comm_host_alloc(n * sizeof(float));
    comm_backend()->to_host(R->src + at, shard, shard_n * sizeof(float));
  } else {
    R->src = full;
    if (shard != full + at) memcpy(full + at, shard, shard_n * sizeof(float));
  }
  *r = (CommRequest){.active = 1, .kind = COMM_ALLGATHER, .comm = c, .job = R, .bytes = 4.0 * (double)n};
  if (R->K) post_gather(R);
  else { R->phase = 3; release_lane(R); }
}

/* The end of a reduction: a device's result copied back, the staging freed, the call counted. */
static void reduction_finish(CommRequest* r) {
  Reduction* R = r->job;
  const Backend* bk = comm_backend();
  if (R->dev_buf) {
    if (r->kind != COMM_REDUCE_SCATTER) { /* all-reduce, all-gather: every part */
      bk->to_device(R->dev_buf, R->src, R->n * sizeof(float));
    } else {
      /* This rank's sums sit at its part of the host copy; through the (clobbered) device buffer
      ** into the shard. */
      size_t m = R->m, at = (size_t)R->c->rank * m;
      bk->to_device(R->dev_buf, R->src + at, m * sizeof(float));
      if (R->accumulate) bk->f32->accumulate(R->dev_acc, R->dev_buf, m);
      else bk->copy(R->dev_acc, R->dev_buf, m * sizeof(float));
    }
    free(R->src);
  }
  free(R->recv);
  free(R->send);
  free(R->sum);
  free(R->cnt);
  free(R);
  r->job = NULL;
  r->active = 0;
  comm_count_call(r->comm, r->kind, r->bytes);
}

int comm_reduction_advance(CommRequest* r, int block) {
  Reduction* R = r->job;
  while (R->phase != 3) {
    int done = 1;
    if (block) MPI_Wait(&R->req, MPI_STATUS_IGNORE);
    else MPI_Test(&R->req, &done, MPI_STATUS_IGNORE);
    if (!done) return 0;
    next_step(R);
  }
  reduction_finish(r);
  return 1;
}

/* ---- The calls of comm.h ------------------------------------------------------------- */

void comm_iallreduce_f32(Comm* c, float* buf, size_t n, CommDtype dtype, CommRequest* r) {
  memset(r, 0, sizeof *r);
  if (c->size == 1) return;
  double t0 = now_seconds();
  if (comm_on_nccl(c) && dtype == COMM_FP32) {
    *r = (CommRequest){.active = 1, .kind = COMM_ALLREDUCE, .comm = c, .bytes = 4.0 * (double)n};
    comm_nccl_iallreduce(buf, n, r);
  } else {
    reduction_start(c, COMM_ALLREDUCE, buf, n, NULL, 0, dtype, r);
  }
  comm_count_time(c, COMM_ALLREDUCE, t0);
}

void comm_allreduce_f32(Comm* c, float* buf, size_t n) {
  if (c->size == 1) return;
  double t0 = now_seconds();
  if (comm_on_nccl(c)) {
    comm_nccl_allreduce(buf, n);
    comm_count_call(c, COMM_ALLREDUCE, 4.0 * (double)n);
  } else {
    CommRequest r;
    reduction_start(c, COMM_ALLREDUCE, buf, n, NULL, 0, COMM_FP32, &r);
    comm_reduction_advance(&r, 1);
  }
  comm_count_time(c, COMM_ALLREDUCE, t0);
}

/* Adds (accumulate) or copies this rank's reduced part, part[0..n) (backend memory), into
** shard: the first gradient use of a step overwrites the shard, so nothing has to zero it. */
static void shard_result(float* shard, const float* part, size_t n, int accumulate) {
  if (accumulate) comm_backend()->f32->accumulate(shard, part, n);
  else if (shard != part) comm_backend()->copy(shard, part, n * sizeof(float));
}

void comm_ireduce_scatter_f32(Comm* c, float* full, float* shard, size_t shard_n, CommDtype dtype,
                              int accumulate, CommRequest* r) {
  memset(r, 0, sizeof *r);
  if (c->size == 1) { shard_result(shard, full, shard_n, accumulate); return; }
  double t0 = now_seconds();
  if (comm_on_nccl(c) && dtype == COMM_FP32) {
    /* NCCL in place, on its stream; finishing r puts this rank's part into the shard. */
    *r = (CommRequest){.active = 1, .kind = COMM_REDUCE_SCATTER, .comm = c,
                       .bytes = 4.0 * (double)shard_n * (double)c->size};
    comm_nccl_ireduce_scatter(full, shard, shard_n, accumulate, r);
  } else {
    reduction_start(c, COMM_REDUCE_SCATTER, full, shard_n * (size_t)c->size, shard, accumulate,
                    dtype, r);
  }
  comm_count_time(c, COMM_REDUCE_SCATTER, t0);
}

void comm_reduce_scatter_f32(Comm* c, float* full, float* shard, size_t shard_n, CommDtype dtype,
                             int accumulate) {
  if (c->size > 1 && comm_on_nccl(c) && dtype == COMM_FP32) {
    /* NCCL in place (run now, on its stream): this rank's result lands at its own part. */
    double t0 = now_seconds();
    comm_nccl_reduce_scatter(full, shard_n);
    shard_result(shard, full + shard_n * (size_t)c->rank, shard_n, accumulate);
    comm_count_call(c, COMM_REDUCE_SCATTER, 4.0 * (double)shard_n * (double)c->size);
    comm_count_time(c, COMM_REDUCE_SCATTER, t0);
    return;
  }
  CommRequest r;
  comm_ireduce_scatter_f32(c, full, shard, shard_n, dtype, accumulate, &r);
  if (!r.active) return;
  double t0 = now_seconds();
  comm_reduction_advance(&r, 1);
  comm_count_time(c, COMM_REDUCE_SCATTER, t0);
}
