/* comm_mpi.c: the communicators and collectives of comm.h over MPI; see comm.h. */
#include "comm/comm.h"

#include <limits.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm_internal.h"
#include "comm/comm_nccl.h"
#include "core/util.h"


/* Every Comm lives here until comm_finalize, so pointers to them stay valid: the world, the
** host, then the groups in the order they were first asked for. */
#define MAX_COMMS 32
static Comm g_comms[MAX_COMMS] = {{.size = 1, .name = "world"}, {.size = 1, .name = "host"}};
static int g_ncomms;
static Comm* const g_world = &g_comms[0];
static Comm* const g_hostc = &g_comms[1];
static int g_ranks_per_host;
static int g_host_id = -1;     /* the lowest world rank on this rank's host (-1 before comm_init) */
static int g_gather_mode;      /* OSDP_COMM_GATHER: 0 auto (exchange across hosts), 1 always, 2 never */

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

const Backend* comm_backend(void) { return g_bk ? g_bk : backend_cpu(); }
static const Backend* bk(void) { return comm_backend(); }

int comm_on_nccl(const Comm* c) { return g_nccl && c == g_world; }

int comm_on_device(void) { return bk()->device_memory; }

/* 1 when c's buffers are device memory copied through host staging for MPI. */
static int staged(const Comm* c) { return bk()->device_memory && !comm_on_nccl(c); }

void* comm_host_alloc(size_t bytes) {
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
    g_stage = comm_host_alloc(bytes);
    g_stage_bytes = bytes;
  }
  return g_stage;
}

/* Counts are int in MPI: every buffer osdp communicates is far below 2^31 elements, but
** say so clearly rather than truncate if a model ever grows past it. */
int comm_to_count(size_t n) {
  if (n > (size_t)INT_MAX) {
    fprintf(stderr, "osdp: error: a collective of %zu elements exceeds MPI's int count; split the "
            "operator into more slices\n", n);
    comm_abort(2);
  }
  return (int)n;
}

/* 1 when c's ranks are on more than one host (collective over c; the host must be known). */
static int spans_hosts(const Comm* c) {
  int v[2] = {g_host_id, -g_host_id};
  if (c->size > 1) MPI_Allreduce(MPI_IN_PLACE, v, 2, MPI_INT, MPI_MIN, c->mpi);
  return v[0] != -v[1];
}

/* Whether c's all-gathers go as all-to-alls (comm_reduce.c): across hosts, where MPI's own
** all-gathers run at half the link's rate, unless OSDP_COMM_GATHER says otherwise. */
static void choose_gathers(Comm* c) {
  c->exchange_gathers = g_gather_mode == 1 || (g_gather_mode == 0 && spans_hosts(c));
}

/* OSDP_COMM_GATHER: "auto" (or unset), "exchange" or "mpi"; anything else ends the job. */
static int gather_mode_from_env(void) {
  const char* v = getenv("OSDP_COMM_GATHER");
  if (!v || !*v || strcmp(v, "auto") == 0) return 0;
  if (strcmp(v, "exchange") == 0) return 1;
  if (strcmp(v, "mpi") == 0) return 2;
  return osdp_fail("OSDP_COMM_GATHER is '%s'; use auto, exchange or mpi", v);
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
  for (int i = 0; c->size > 1 && i < COMM_LANES; i++) MPI_Comm_dup(mpi, &c->lanes[i]);
  if (g_host_id >= 0) choose_gathers(c);
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
  g_gather_mode = gather_mode_from_env();
  if (g_gather_mode < 0) { MPI_Finalize(); return -1; }
  comm_setup(g_world, MPI_COMM_WORLD, 0, 0, "world");
  MPI_Comm host;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, g_world->rank, MPI_INFO_NULL, &host);
  MPI_Allreduce(&g_world->rank, &g_host_id, 1, MPI_INT, MPI_MIN, host);
  comm_setup(g_hostc, host, 0, 0, "host");
  choose_gathers(g_world); /* made before the host was known */
  g_ncomms = 2;
  g_ranks_per_host = uniform_hosts();
  return 0;
}

void comm_finalize(void) {
  comm_watchdog_stop();
  comm_nccl_finalize();
  for (int i = 0; i < g_ncomms; i++) {
    for (int l = 0; g_comms[i].size > 1 && l < COMM_LANES; l++) MPI_Comm_free(&g_comms[i].lanes[l]);
    if (g_comms[i].mpi != MPI_COMM_WORLD) MPI_Comm_free(&g_comms[i].mpi);
  }
  g_ncomms = 0;
  free(g_stage);
  g_stage = NULL;
  g_stage_bytes = 0;
  MPI_Finalize();
}

const char* comm_library_version(void) {
  static char v[MPI_MAX_LIBRARY_VERSION_STRING];
  int n = 0;
  if (!v[0] && MPI_Get_library_version(v, &n) == MPI_SUCCESS) {
    v[strcspn(v, ",\n")] = 0; /* "Open MPI v4.1.4, package: ..." -> "Open MPI v4.1.4" */
  }
  return v[0] ? v : "unknown";
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

void comm_count_time(Comm* c, CommKind k, double t0) {
  double dt = now_seconds() - t0;
  c->stats.seconds[k] += dt;
  g_clock += dt;
}

void comm_count_call(Comm* c, CommKind k, double bytes) {
  c->stats.bytes[k] += bytes;
  c->stats.calls[k]++;
}

/* Adds one finished call of kind k since t0 to c's counters. */
static void count(Comm* c, CommKind k, double t0, double bytes) {
  comm_count_time(c, k, t0);
  comm_count_call(c, k, bytes);
}

const double* comm_clock(void) { return &g_clock; }

/* A new MPI request for r (freed when r finishes). */
static MPI_Request* new_mpi_request(void) {
  MPI_Request* req = malloc(sizeof *req);
  if (!req) { fprintf(stderr, "osdp: error: out of host memory\n"); comm_abort(2); }
  *req = MPI_REQUEST_NULL;
  return req;
}

/* ---- Requests ------------------------------------------------------------------------ */

/* Releases a finished gather (copying a staged result back) and counts its payload. */
static void finish_request(CommRequest* r) {
  Comm* c = r->comm;
  if (r->device_result) bk()->to_device(r->device_result, r->host, r->result_bytes);
  free(r->host);
  r->host = NULL;
  if (!comm_on_nccl(c)) free(r->mpi); /* NCCL's request is released by comm_nccl_test / wait */
  r->mpi = NULL;
  r->active = 0;
  comm_count_call(c, r->kind, r->bytes);
}

/* Advances r (block: to its end); 1 when it is finished. Reductions run in comm_reduce.c. */
static int request_advance(CommRequest* r, int block) {
  if (r->job) return comm_reduction_advance(r, block);
  int done = 1;
  if (comm_on_nccl(r->comm)) {
    if (block) comm_nccl_wait(r);
    else done = comm_nccl_test(r);
  } else if (block) {
    MPI_Wait((MPI_Request*)r->mpi, MPI_STATUS_IGNORE);
  } else {
    MPI_Test((MPI_Request*)r->mpi, &done, MPI_STATUS_IGNORE);
  }
  if (done) finish_request(r);
  return done;
}

int comm_test(CommRequest* r) {
  if (!r->active) return 1;
  Comm* c = r->comm;
  CommKind k = r->kind;
  double t0 = now_seconds();
  int done = request_advance(r, 0);
  comm_count_time(c, k, t0);
  return done;
}

void comm_wait(CommRequest* r) {
  if (!r->active) return;
  Comm* c = r->comm;
  CommKind k = r->kind;
  double t0 = now_seconds();
  request_advance(r, 1);
  comm_count_time(c, k, t0);
}

/* ---- All-gather ---------------------------------------------------------------------- */

/* A blocking all-gather as chunked all-to-alls (across hosts; comm_reduce.c), begun at t0. */
static void exchange_gather(Comm* c, const float* shard, float* full, size_t shard_n, double t0) {
  CommRequest r;
  comm_exchange_gather(c, shard, full, shard_n, &r);
  comm_reduction_advance(&r, 1); /* counts the call */
  comm_count_time(c, COMM_ALLGATHER, t0);
}

void comm_allgather_f32(Comm* c, float* full, size_t shard_n) {
  if (c->size == 1) return;
  double t0 = now_seconds();
  size_t N = (size_t)c->size;
  if (comm_on_nccl(c)) {
    comm_nccl_allgather(full + shard_n * (size_t)c->rank, full, shard_n);
    count(c, COMM_ALLGATHER, t0, 4.0 * (double)shard_n * (double)N);
    return;
  }
  if (c->exchange_gathers) { exchange_gather(c, full + shard_n * (size_t)c->rank, full, shard_n, t0); return; }
  size_t shard_bytes = shard_n * sizeof(float), bytes = shard_bytes * N;
  float* host = staged(c) ? stage_buffer(bytes) : full;
  if (staged(c))
    bk()->to_host(host + shard_n * (size_t)c->rank, full + shard_n * (size_t)c->rank, shard_bytes);
  MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, host, comm_to_count(shard_n), MPI_FLOAT, c->mpi);
  if (staged(c)) bk()->to_device(full, host, bytes);
  count(c, COMM_ALLGATHER, t0, 4.0 * (double)shard_n * (double)N);
}

/* Copies between buffers of the backend (a one-rank gather). */
static void buffer_copy(void* dst, const void* src, size_t bytes) { bk()->copy(dst, src, bytes); }

void comm_allgather_into_f32(Comm* c, const float* shard, float* full, size_t shard_n) {
  if (c->size == 1) { buffer_copy(full, shard, shard_n * sizeof(float)); return; }
  double t0 = now_seconds();
  size_t N = (size_t)c->size;
  if (comm_on_nccl(c)) {
    comm_nccl_allgather(shard, full, shard_n);
    count(c, COMM_ALLGATHER, t0, 4.0 * (double)shard_n * (double)N);
    return;
  }
  if (c->exchange_gathers) { exchange_gather(c, shard, full, shard_n, t0); return; }
  size_t shard_bytes = shard_n * sizeof(float), bytes = shard_bytes * N;
  float* host = staged(c) ? stage_buffer(bytes + shard_bytes) : full;
  const float* send = shard;
  if (staged(c)) {
    bk()->to_host(host + shard_n * N, shard, shard_bytes);
    send = host + shard_n * N;
  }
  MPI_Allgather(send, comm_to_count(shard_n), MPI_FLOAT, host, comm_to_count(shard_n), MPI_FLOAT, c->mpi);
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
  if (comm_on_nccl(c)) {
    comm_nccl_iallgather(shard, full, shard_n, r);
    comm_count_time(c, COMM_ALLGATHER, t0);
    return;
  }
  if (c->exchange_gathers) {
    comm_exchange_gather(c, shard, full, shard_n, r);
    comm_count_time(c, COMM_ALLGATHER, t0);
    return;
  }
  r->mpi = new_mpi_request();
  const float* send = shard;
  float* recv = full;
  if (staged(c)) {
    size_t shard_bytes = shard_n * sizeof(float), bytes = shard_bytes * N;
    /* The host copy: the gathered result, then this rank's shard to send. */
    recv = r->host = comm_host_alloc(bytes + shard_bytes);
    bk()->to_host(recv + shard_n * N, shard, shard_bytes);
    send = recv + shard_n * N;
    r->device_result = full;
    r->result_bytes = bytes;
  }
  MPI_Iallgather(send, comm_to_count(shard_n), MPI_FLOAT, recv, comm_to_count(shard_n), MPI_FLOAT, c->mpi,
                 (MPI_Request*)r->mpi);
  comm_count_time(c, COMM_ALLGATHER, t0);
}

/* Aborts the job on an odd bf16 shard: its last value would not travel (plan.c pads zero3
** slices in bf16 to an even shard, so this is a bug). */
static void check_even(size_t shard_n) {
  if (shard_n % 2 == 0) return;
  fprintf(stderr, "osdp: internal error: bf16 all-gather of an odd shard (%zu values)\n", shard_n);
  comm_abort(4);
}

void comm_allgather_into_bf16(Comm* c, const osdp_bf16* shard, osdp_bf16* full, size_t shard_n) {
  check_even(shard_n);
  comm_allgather_into_f32(c, (const float*)(const void*)shard, (float*)(void*)full, shard_n / 2);
}

void comm_iallgather_into_bf16(Comm* c, const osdp_bf16* shard, osdp_bf16* full, size_t shard_n,
                               CommRequest* r) {
  check_even(shard_n);
  comm_iallgather_into_f32(c, (const float*)(const void*)shard, (float*)(void*)full, shard_n / 2,
                           r);
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
  if (c->size > 1) MPI_Bcast(buf, comm_to_count(bytes), MPI_BYTE, 0, c->mpi);
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
