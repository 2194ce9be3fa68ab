/* comm_mpi.c: the communicators and collectives of comm.h over MPI; see comm.h. */
#include "comm/comm.h"

#include <limits.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm_nccl.h"
#include "core/util.h"

/* A communicator (comm.h): the MPI one, this rank's place in it, and its counters. */
struct Comm {
  MPI_Comm mpi;
  int rank, size;
  int group;          /* comm_group / comm_across: the G it was made for (0: world, host) */
  int across;         /* 1: comm_across(group) */
  char name[40];
  CommStats stats;
};

/* Every Comm lives here until comm_finalize, so pointers to them stay valid: the world, the
** host, then the groups in the order they were first asked for. */
#define MAX_COMMS 32
static Comm g_comms[MAX_COMMS] = {{.size = 1, .name = "world"}, {.size = 1, .name = "host"}};
static int g_ncomms;
static Comm* const g_world = &g_comms[0];
static Comm* const g_hostc = &g_comms[1];
static int g_ranks_per_host;

static double g_clock; /* all seconds inside communication calls (comm_clock) */
static const Backend* g_bk;  /* the buffers' backend (comm_use_backend) */
static int g_nccl;           /* 1: NCCL carries the world's collectives (each rank owns a GPU) */
static int g_nccl_tried;
static void* g_stage;        /* the blocking calls' host staging buffer (grows, never shrinks) */
static size_t g_stage_bytes;

void comm_use_backend(const Backend* bk) {
  g_bk = bk ? bk : backend_cpu();
  /* Once per process, on the first device backend: NCCL where every rank owns a GPU. */
  if (g_bk->device_memory && !g_nccl_tried) {
    g_nccl_tried = 1;
    g_nccl = comm_nccl_init(g_bk, g_world->rank, g_world->size);
  }
}

/* The backend whose memory the buffers are in. */
static const Backend* bk(void) { return g_bk ? g_bk : backend_cpu(); }

/* 1 when c's collectives go through NCCL (the world's, where each rank owns a GPU). */
static int on_nccl(const Comm* c) { return g_nccl && c == g_world; }

/* 1 when the buffers are device memory (bf16 always goes through host copies there). */
static int on_device(void) { return bk()->device_memory; }

/* 1 when c's buffers are device memory copied through host staging for MPI. */
static int staged(const Comm* c) { return bk()->device_memory && !on_nccl(c); }

/* Dies with a one-line message when host memory for staging runs out. */
static void* host_alloc(size_t bytes) {
  void* p = malloc(bytes ? bytes : 1);
  if (!p) { fprintf(stderr, "osdp: error: out of host memory staging a collective\n"); comm_abort(2); }
  return p;
}

/* A host buffer of at least `bytes` for a blocking staged call. */
static void* stage_buffer(size_t bytes) {
  if (bytes > g_stage_bytes) {
    free(g_stage);
    g_stage = NULL;
    g_stage_bytes = 0;
    g_stage = host_alloc(bytes);
    g_stage_bytes = bytes;
  }
  return g_stage;
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

/* Fills a Comm from an MPI communicator. */
static void comm_setup(Comm* c, MPI_Comm mpi, int group, int across, const char* name) {
  memset(c, 0, sizeof *c);
  c->mpi = mpi;
  MPI_Comm_rank(mpi, &c->rank);
  MPI_Comm_size(mpi, &c->size);
  c->group = group;
  c->across = across;
  snprintf(c->name, sizeof c->name, "%s", name);
}

/* The ranks per host if every host has the same number and holds consecutive world ranks. */
static int uniform_hosts(void) {
  int hs = g_hostc->size, ok = g_world->rank % hs == g_hostc->rank && g_world->size % hs == 0;
  int v[2] = {ok ? hs : 0, ok ? -hs : 0}; /* min of hs and of -hs: all equal when v0 == -v1 */
  MPI_Allreduce(MPI_IN_PLACE, v, 2, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  return v[0] > 0 && v[0] == -v[1] ? v[0] : 0;
}

int comm_init(int* argc, char*** argv) {
  int provided = 0;
  /* MULTIPLE: the watchdog's thread sends and receives its heartbeats beside the main thread. */
  if (MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS)
    return osdp_fail("MPI_Init failed");
  comm_setup(g_world, MPI_COMM_WORLD, 0, 0, "world");
  MPI_Comm host;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, g_world->rank, MPI_INFO_NULL, &host);
  comm_setup(g_hostc, host, 0, 0, "host");
  g_ncomms = 2;
  g_ranks_per_host = uniform_hosts();
  return 0;
}

void comm_finalize(void) {
  comm_watchdog_stop();
  comm_nccl_finalize();
  for (int i = 1; i < g_ncomms; i++)
    if (g_comms[i].mpi != MPI_COMM_WORLD) MPI_Comm_free(&g_comms[i].mpi);
  g_ncomms = 0;
  free(g_stage);
  g_stage = NULL;
  g_stage_bytes = 0;
  MPI_Finalize();
}

int comm_rank(void) { return g_world->rank; }
int comm_size(void) { return g_world->size ? g_world->size : 1; }
Comm* comm_world(void) { return g_world; }
Comm* comm_host(void) { return g_hostc; }
int comm_ranks_per_host(void) { return g_ranks_per_host; }
int comm_rank_in(const Comm* c) { return c->rank; }
int comm_size_of(const Comm* c) { return c->size; }
const char* comm_name(const Comm* c) { return c->name; }
CommStats comm_stats_of(const Comm* c) { return c->stats; }

int comm_list(Comm** out, int max) {
  for (int i = 0; i < g_ncomms && i < max; i++) out[i] = &g_comms[i];
  return g_ncomms;
}

/* The Comm of groups of G (across = 0: the group holding this rank; 1: the ranks holding this
** rank's index in their groups), made on first use by an MPI_Comm_split over the world. */
static Comm* group_comm(int G, int across) {
  int N = g_world->size;
  if (G < 1 || N % G) {
    fprintf(stderr, "osdp: internal error: shard group %d does not divide the world of %d\n", G, N);
    comm_abort(4);
  }
  if ((!across && G == N) || (across && G == 1)) return g_world;
  for (int i = 2; i < g_ncomms; i++)
    if (g_comms[i].group == G && g_comms[i].across == across) return &g_comms[i];
  if (g_ncomms == MAX_COMMS) {
    fprintf(stderr, "osdp: error: more than %d distinct shard groups in one plan\n", MAX_COMMS - 2);
    comm_abort(2);
  }
  int r = g_world->rank, color = across ? r % G : r / G;
  MPI_Comm m;
  MPI_Comm_split(MPI_COMM_WORLD, color, r, &m);
  char name[40];
  snprintf(name, sizeof name, across ? "across groups of %d" : "group of %d", G);
  Comm* c = &g_comms[g_ncomms++];
  comm_setup(c, m, G, across, name);
  return c;
}

Comm* comm_group(int G) { return group_comm(G, 0); }
Comm* comm_across(int G) { return group_comm(G, 1); }

void comm_abort(int code) {
  fflush(stdout);
  fflush(stderr);
  if (g_world->size > 1) MPI_Abort(MPI_COMM_WORLD, code);
  exit(code);
}

void comm_barrier(Comm* c) { if (c->size > 1) MPI_Barrier(c->mpi); }

/* Adds seconds since t0 spent in a call of kind k on c to its counters and the clock. */
static void count_time(Comm* c, CommKind k, double t0) {
  double dt = now_seconds() - t0;
  c->stats.seconds[k] += dt;
  g_clock += dt;
}

/* Adds one finished call to c's counters. */
static void count(Comm* c, CommKind k, double t0, double bytes) {
  count_time(c, k, t0);
  c->stats.bytes[k] += bytes;
  c->stats.calls[k]++;
}

const double* comm_clock(void) { return &g_clock; }

/* ---- bf16 ---------------------------------------------------------------------------- */

/* Rounds a float to bf16, to nearest even (NaN stays NaN). */
static inline uint16_t to_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}

static inline float from_bf16(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

/* out[i] = bf16(in[i]) for i < n, zeros up to n_pad. */
static void pack_bf16(uint16_t* out, const float* in, size_t n, size_t n_pad) {
  for (size_t i = 0; i < n; i++) out[i] = to_bf16(in[i]);
  for (size_t i = n; i < n_pad; i++) out[i] = 0;
}

/* sum[i] = sum over the N parts of parts[p*m + i], in fp32, for i < m. */
static void sum_bf16_parts(float* sum, const uint16_t* parts, int N, size_t m) {
  for (size_t i = 0; i < m; i++) sum[i] = 0;
  for (int p = 0; p < N; p++) {
    const uint16_t* q = parts + (size_t)p * m;
    for (size_t i = 0; i < m; i++) sum[i] += from_bf16(q[i]);
  }
}

/* ---- All-reduce ---------------------------------------------------------------------- */

void comm_allreduce_f32(Comm* c, float* buf, size_t n) {
  if (c->size == 1) return;
  double t0 = now_seconds();
  if (on_nccl(c)) { comm_nccl_allreduce(buf, n); count(c, COMM_ALLREDUCE, t0, 4.0 * (double)n); return; }
  size_t bytes = n * sizeof(float);
  float* host = staged(c) ? stage_buffer(bytes) : buf;
  if (staged(c)) bk()->to_host(host, buf, bytes);
  MPI_Allreduce(MPI_IN_PLACE, host, to_count(n), MPI_FLOAT, MPI_SUM, c->mpi);
  if (staged(c)) bk()->to_device(buf, host, bytes);
  count(c, COMM_ALLREDUCE, t0, 4.0 * (double)n);
}

/* The host layout of a bf16 all-reduce of n floats over N ranks, in r->host: the float copy of
** the buffer (device memory only), then send and receive parts of N*m bf16 each, m = ceil(n/N),
** then this rank's summed part (m bf16). */
static size_t bf16_allreduce_part(size_t n, int N) { return (n + (size_t)N - 1) / (size_t)N; }

/* Phase 2 of a bf16 all-reduce: this rank's part summed in fp32, rounded, gathered to all. */
static void bf16_allreduce_gather(CommRequest* r) {
  Comm* c = r->comm;
  size_t m = bf16_allreduce_part(r->n, c->size), N = (size_t)c->size;
  uint16_t* send = (uint16_t*)((char*)r->host + (on_device() ? r->n * sizeof(float) : 0));
  uint16_t* recv = send + N * m;
  uint16_t* mine = recv + N * m;
  float* sum = (float*)malloc((m ? m : 1) * sizeof(float));
  if (!sum) { fprintf(stderr, "osdp: error: out of host memory\n"); comm_abort(2); }
  sum_bf16_parts(sum, recv, c->size, m);
  pack_bf16(mine, sum, m, m);
  free(sum);
  /* The gathered sums land in `send` (no longer needed). */
  MPI_Iallgather(mine, to_count(m), MPI_UINT16_T, send, to_count(m), MPI_UINT16_T, c->mpi,
                 (MPI_Request*)r->mpi);
  r->phase = 2;
}

/* Starts an all-reduce of buf[0..n) sent as bf16: each rank's parts go to their owners
** (all-to-all), which sum them in fp32 (phase 1); the rounded sums are gathered back (2). */
static void bf16_iallreduce(Comm* c, float* buf, size_t n, CommRequest* r) {
  size_t N = (size_t)c->size, m = bf16_allreduce_part(n, c->size);
  size_t fl = on_device() ? n * sizeof(float) : 0;
  r->host = host_alloc(fl + (2 * N * m + m) * sizeof(uint16_t));
  float* src = buf;
  if (on_device()) { src = r->host; bk()->to_host(src, buf, n * sizeof(float)); }
  uint16_t* send = (uint16_t*)((char*)r->host + fl);
  pack_bf16(send, src, n, N * m);
  r->buf = buf;
  r->n = n;
  r->phase = 1;
  MPI_Ialltoall(send, to_count(m), MPI_UINT16_T, send + N * m, to_count(m), MPI_UINT16_T, c->mpi,
                (MPI_Request*)r->mpi);
}

/* Writes a finished bf16 all-reduce's gathered sums into the caller's buffer. */
static void bf16_allreduce_finish(CommRequest* r) {
  size_t fl = on_device() ? r->n * sizeof(float) : 0;
  const uint16_t* all = (const uint16_t*)((char*)r->host + fl);
  float* out = on_device() ? (float*)r->host : r->buf;
  for (size_t i = 0; i < r->n; i++) out[i] = from_bf16(all[i]);
  if (on_device()) bk()->to_device(r->buf, out, r->n * sizeof(float));
}

/* A new MPI request for r (freed when r finishes). */
static MPI_Request* new_mpi_request(void) {
  MPI_Request* req = malloc(sizeof *req);
  if (!req) { fprintf(stderr, "osdp: error: out of host memory\n"); comm_abort(2); }
  *req = MPI_REQUEST_NULL;
  return req;
}

void comm_iallreduce_f32(Comm* c, float* buf, size_t n, CommDtype dtype, CommRequest* r) {
  memset(r, 0, sizeof *r);
  if (c->size == 1) return;
  double t0 = now_seconds();
  r->comm = c;
  r->kind = COMM_ALLREDUCE;
  r->dtype = dtype;
  r->active = 1;
  if (dtype == COMM_BF16) {
    r->mpi = new_mpi_request();
    r->bytes = 2.0 * (double)n;
    bf16_iallreduce(c, buf, n, r);
    count_time(c, COMM_ALLREDUCE, t0);
    return;
  }
  r->bytes = 4.0 * (double)n;
  if (on_nccl(c)) {
    comm_nccl_iallreduce(buf, n, r);
    count_time(c, COMM_ALLREDUCE, t0);
    return;
  }
  r->mpi = new_mpi_request();
  float* host = buf;
  if (staged(c)) {
    size_t bytes = n * sizeof(float);
    host = r->host = host_alloc(bytes);
    bk()->to_host(host, buf, bytes);
    r->device_result = buf;
    r->result_bytes = bytes;
  }
  MPI_Iallreduce(MPI_IN_PLACE, host, to_count(n), MPI_FLOAT, MPI_SUM, c->mpi, (MPI_Request*)r->mpi);
  count_time(c, COMM_ALLREDUCE, t0);
}

/* ---- Reduce-scatter ------------------------------------------------------------------ */

/* Adds (accumulate) or copies this rank's reduced part, part[0..n) (backend memory), into
** shard: the first gradient use of a step overwrites the shard, so nothing has to zero it. */
static void shard_result(float* shard, const float* part, size_t n, int accumulate) {
  if (accumulate) bk()->f32->accumulate(shard, part, n);
  else if (shard != part) bk()->copy(shard, part, n * sizeof(float));
}

/* The host layout of a bf16 reduce-scatter of N*m floats: the float copy (device memory only),
** then the send and receive parts of N*m bf16 each. */
static size_t bf16_rs_bytes(const Comm* c, size_t m) {
  size_t N = (size_t)c->size;
  return (on_device() ? N * m * sizeof(float) : 0) + 2 * N * m * sizeof(uint16_t);
}

/* Converts full (N*m floats, backend memory) to bf16 parts in host (layout of bf16_rs_bytes). */
static uint16_t* bf16_rs_pack(Comm* c, const float* full, size_t m, void* host) {
  size_t N = (size_t)c->size, fl = on_device() ? N * m * sizeof(float) : 0;
  const float* src = full;
  if (on_device()) { bk()->to_host(host, full, N * m * sizeof(float)); src = host; }
  uint16_t* send = (uint16_t*)((char*)host + fl);
  pack_bf16(send, src, N * m, N * m);
  return send;
}

/* Sums the received bf16 parts into full[0..m) (backend memory) and adds (accumulate) or writes
** them into acc. */
static void bf16_rs_finish(Comm* c, float* full, float* acc, size_t m, void* host, int accumulate) {
  size_t N = (size_t)c->size, fl = on_device() ? N * m * sizeof(float) : 0;
  const uint16_t* recv = (const uint16_t*)((char*)host + fl) + N * m;
  float* sum = on_device() ? (float*)host : full; /* the float copy is free again */
  sum_bf16_parts(sum, recv, c->size, m);
  if (on_device()) bk()->to_device(full, sum, m * sizeof(float));
  shard_result(acc, full, m, accumulate);
}

void comm_reduce_scatter_f32(Comm* c, float* full, float* shard_acc, size_t shard_n,
                             CommDtype dtype, int accumulate) {
  if (c->size == 1) { shard_result(shard_acc, full, shard_n, accumulate); return; }
  double t0 = now_seconds();
  size_t N = (size_t)c->size, shard_bytes = shard_n * sizeof(float);
  if (dtype == COMM_BF16) {
    void* host = stage_buffer(bf16_rs_bytes(c, shard_n));
    uint16_t* send = bf16_rs_pack(c, full, shard_n, host);
    MPI_Alltoall(send, to_count(shard_n), MPI_UINT16_T, send + N * shard_n, to_count(shard_n),
                 MPI_UINT16_T, c->mpi);
    bf16_rs_finish(c, full, shard_acc, shard_n, host, accumulate);
    count(c, COMM_REDUCE_SCATTER, t0, 2.0 * (double)shard_n * (double)N);
    return;
  }
  if (on_nccl(c)) {
    /* NCCL in place: this rank's result lands at its own part of the buffer. */
    comm_nccl_reduce_scatter(full, shard_n);
    shard_result(shard_acc, full + shard_n * (size_t)c->rank, shard_n, accumulate);
    count(c, COMM_REDUCE_SCATTER, t0, 4.0 * (double)shard_n * (double)N);
    return;
  }
  /* In place: the result for this rank lands at the start of the buffer. */
  float* host = staged(c) ? stage_buffer(shard_bytes * N) : full;
  if (staged(c)) bk()->to_host(host, full, shard_bytes * N);
  MPI_Reduce_scatter_block(MPI_IN_PLACE, host, to_count(shard_n), MPI_FLOAT, MPI_SUM, c->mpi);
  if (staged(c)) bk()->to_device(full, host, shard_bytes);
  /* The accumulation counts as part of the collective (profiled the same way). */
  shard_result(shard_acc, full, shard_n, accumulate);
  count(c, COMM_REDUCE_SCATTER, t0, 4.0 * (double)shard_n * (double)N);
}

void comm_ireduce_scatter_f32(Comm* c, float* full, float* shard_acc, size_t shard_n,
                              CommDtype dtype, int accumulate, CommRequest* r) {
  memset(r, 0, sizeof *r);
  if (c->size == 1) { shard_result(shard_acc, full, shard_n, accumulate); return; }
  double t0 = now_seconds();
  size_t N = (size_t)c->size;
  *r = (CommRequest){.active = 1, .kind = COMM_REDUCE_SCATTER, .comm = c, .dtype = dtype,
                     .acc = shard_acc, .accumulate = accumulate, .buf = full, .n = shard_n};
  if (on_nccl(c) && dtype == COMM_FP32) {
    /* NCCL has no non-blocking reduce-scatter here: run it now (on its stream). */
    comm_nccl_reduce_scatter(full, shard_n);
    shard_result(shard_acc, full + shard_n * (size_t)c->rank, shard_n, accumulate);
    count(c, COMM_REDUCE_SCATTER, t0, 4.0 * (double)shard_n * (double)N);
    memset(r, 0, sizeof *r);
    return;
  }
  r->mpi = new_mpi_request();
  if (dtype == COMM_BF16) {
    r->bytes = 2.0 * (double)shard_n * (double)N;
    r->host = host_alloc(bf16_rs_bytes(c, shard_n));
    uint16_t* send = bf16_rs_pack(c, full, shard_n, r->host);
    MPI_Ialltoall(send, to_count(shard_n), MPI_UINT16_T, send + N * shard_n, to_count(shard_n),
                  MPI_UINT16_T, c->mpi, (MPI_Request*)r->mpi);
  } else {
    r->bytes = 4.0 * (double)shard_n * (double)N;
    float* host = full;
    if (staged(c)) {
      host = r->host = host_alloc(shard_n * N * sizeof(float));
      bk()->to_host(host, full, shard_n * N * sizeof(float));
      r->device_result = full;
      r->result_bytes = shard_n * sizeof(float);
    }
    MPI_Ireduce_scatter_block(MPI_IN_PLACE, host, to_count(shard_n), MPI_FLOAT, MPI_SUM, c->mpi,
                              (MPI_Request*)r->mpi);
  }
  count_time(c, COMM_REDUCE_SCATTER, t0);
}

/* ---- Requests ------------------------------------------------------------------------ */

/* Releases a finished request (copying a staged result back, adding a reduce-scatter's part,
** unpacking a bf16 all-reduce) and counts its payload. */
static void finish_request(CommRequest* r) {
  Comm* c = r->comm;
  if (r->kind == COMM_REDUCE_SCATTER && r->dtype == COMM_BF16) {
    bf16_rs_finish(c, r->buf, r->acc, r->n, r->host, r->accumulate);
  } else if (r->kind == COMM_ALLREDUCE && r->dtype == COMM_BF16) {
    bf16_allreduce_finish(r);
  } else {
    if (r->device_result) bk()->to_device(r->device_result, r->host, r->result_bytes);
    if (r->acc) shard_result(r->acc, r->buf, r->n, r->accumulate);
  }
  free(r->host);
  r->host = NULL;
  if (!on_nccl(c) || r->dtype == COMM_BF16) free(r->mpi); /* NCCL's event: comm_nccl_test/wait */
  r->mpi = NULL;
  r->active = 0;
  c->stats.bytes[r->kind] += r->bytes;
  c->stats.calls[r->kind]++;
}

/* 1 when r's current MPI (or NCCL) operation is complete; waits for it when `block`. */
static int request_step(CommRequest* r, int block) {
  int done = 0;
  if (on_nccl(r->comm) && r->dtype == COMM_FP32) {
    if (block) { comm_nccl_wait(r); return 1; }
    return comm_nccl_test(r);
  }
  if (block) { MPI_Wait((MPI_Request*)r->mpi, MPI_STATUS_IGNORE); return 1; }
  MPI_Test((MPI_Request*)r->mpi, &done, MPI_STATUS_IGNORE);
  return done;
}

/* Advances r as far as it goes now (block: to its end). Returns 1 when r is finished. */
static int request_advance(CommRequest* r, int block) {
  for (;;) {
    if (!request_step(r, block)) return 0;
    if (r->kind == COMM_ALLREDUCE && r->dtype == COMM_BF16 && r->phase == 1) {
      bf16_allreduce_gather(r);
      continue;
    }
    finish_request(r);
    return 1;
  }
}

int comm_test(CommRequest* r) {
  if (!r->active) return 1;
  Comm* c = r->comm;
  CommKind k = r->kind;
  double t0 = now_seconds();
  int done = request_advance(r, 0);
  count_time(c, k, t0);
  return done;
}

void comm_wait(CommRequest* r) {
  if (!r->active) return;
  Comm* c = r->comm;
  CommKind k = r->kind;
  double t0 = now_seconds();
  request_advance(r, 1);
  count_time(c, k, t0);
}

/* ---- All-gather ---------------------------------------------------------------------- */

void comm_allgather_f32(Comm* c, float* full, size_t shard_n) {
  if (c->size == 1) return;
  double t0 = now_seconds();
  size_t N = (size_t)c->size;
  if (on_nccl(c)) {
    comm_nccl_allgather(full + shard_n * (size_t)c->rank, full, shard_n);
    count(c, COMM_ALLGATHER, t0, 4.0 * (double)shard_n * (double)N);
    return;
  }
  size_t shard_bytes = shard_n * sizeof(float), bytes = shard_bytes * N;
  float* host = staged(c) ? stage_buffer(bytes) : full;
  if (staged(c))
    bk()->to_host(host + shard_n * (size_t)c->rank, full + shard_n * (size_t)c->rank, shard_bytes);
  MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, host, to_count(shard_n), MPI_FLOAT, c->mpi);
  if (staged(c)) bk()->to_device(full, host, bytes);
  count(c, COMM_ALLGATHER, t0, 4.0 * (double)shard_n * (double)N);
}

/* Copies between buffers of the backend (a one-rank gather). */
static void buffer_copy(void* dst, const void* src, size_t bytes) { bk()->copy(dst, src, bytes); }

void comm_allgather_into_f32(Comm* c, const float* shard, float* full, size_t shard_n) {
  if (c->size == 1) { buffer_copy(full, shard, shard_n * sizeof(float)); return; }
  double t0 = now_seconds();
  size_t N = (size_t)c->size;
  if (on_nccl(c)) {
    comm_nccl_allgather(shard, full, shard_n);
    count(c, COMM_ALLGATHER, t0, 4.0 * (double)shard_n * (double)N);
    return;
  }
  size_t shard_bytes = shard_n * sizeof(float), bytes = shard_bytes * N;
  float* host = staged(c) ? stage_buffer(bytes + shard_bytes) : full;
  const float* send = shard;
  if (staged(c)) {
    bk()->to_host(host + shard_n * N, shard, shard_bytes);
    send = host + shard_n * N;
  }
  MPI_Allgather(send, to_count(shard_n), MPI_FLOAT, host, to_count(shard_n), MPI_FLOAT, c->mpi);
  if (staged(c)) bk()->to_device(full, host, bytes);
  count(c, COMM_ALLGATHER, t0, 4.0 * (double)shard_n * (double)N);
}

void comm_iallgather_into_f32(Comm* c, const float* shard, float* full, size_t shard_n,
                              CommRequest* r) {
  memset(r, 0, sizeof *r);
  if (c->size == 1) { buffer_copy(full, shard, shard_n * sizeof(float)); return; }
  size_t N = (size_t)c->size;
  double t0 = now_seconds();
  *r = (CommRequest){.active = 1, .kind = COMM_ALLGATHER, .comm = c,
                     .bytes = 4.0 * (double)shard_n * (double)N};
  if (on_nccl(c)) {
    comm_nccl_iallgather(shard, full, shard_n, r);
    count_time(c, COMM_ALLGATHER, t0);
    return;
  }
  r->mpi = new_mpi_request();
  const float* send = shard;
  float* recv = full;
  if (staged(c)) {
    size_t shard_bytes = shard_n * sizeof(float), bytes = shard_bytes * N;
    /* The host copy: the gathered result, then this rank's shard to send. */
    recv = r->host = host_alloc(bytes + shard_bytes);
    bk()->to_host(recv + shard_n * N, shard, shard_bytes);
    send = recv + shard_n * N;
    r->device_result = full;
    r->result_bytes = bytes;
  }
  MPI_Iallgather(send, to_count(shard_n), MPI_FLOAT, recv, to_count(shard_n), MPI_FLOAT, c->mpi,
                 (MPI_Request*)r->mpi);
  count_time(c, COMM_ALLGATHER, t0);
}

/* ---- Scalars ------------------------------------------------------------------------- */

double comm_allreduce_f64(Comm* c, double x) {
  if (c->size > 1) MPI_Allreduce(MPI_IN_PLACE, &x, 1, MPI_DOUBLE, MPI_SUM, c->mpi);
  return x;
}

void comm_allreduce_f64_array(Comm* c, double* x, int n) {
  if (c->size > 1) MPI_Allreduce(MPI_IN_PLACE, x, n, MPI_DOUBLE, MPI_SUM, c->mpi);
}

double comm_allreduce_max_f64(Comm* c, double x) {
  if (c->size > 1) MPI_Allreduce(MPI_IN_PLACE, &x, 1, MPI_DOUBLE, MPI_MAX, c->mpi);
  return x;
}

void comm_bcast(Comm* c, void* buf, size_t bytes) {
  if (c->size > 1) MPI_Bcast(buf, to_count(bytes), MPI_BYTE, 0, c->mpi);
}

CommStats comm_stats(void) {
  CommStats s;
  memset(&s, 0, sizeof s);
  for (int i = 0; i < g_ncomms; i++)
    for (int k = 0; k < COMM_KINDS; k++) {
      s.seconds[k] += g_comms[i].stats.seconds[k];
      s.bytes[k] += g_comms[i].stats.bytes[k];
      s.calls[k] += g_comms[i].stats.calls[k];
    }
  return s;
}

void comm_reset_stats(void) {
  for (int i = 0; i < g_ncomms; i++) memset(&g_comms[i].stats, 0, sizeof g_comms[i].stats);
}
