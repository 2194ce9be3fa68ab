/*
** test_nccl_order.c: comm_nccl.c itself (included below) on a machine without a GPU: CUDA's
** runtime is replaced by a recorder of what each stream's work must come after, NCCL by the
** stub library (nccl_stub.c) for the set-up and by recording functions for the collectives,
** and comm_abort by a jump back into the test. Run on 2 ranks (tests/nccl.cmake).
**
** Ordering (every rank on its own): a collective comes after the compute work queued before it;
** a non-blocking one is not before the compute work queued until its request is finished (the
** overlap), and is before everything queued after that, the host waiting at the wait alone; a
** blocking one is before everything queued after it and waits on the host; each request has its own event; a reduce-scatter's
** shard is written on the compute stream after its wait; a buffer freed after a wait and reused
** by compute or by the next collective is ordered after the collective; events are reused and
** all destroyed at the end.
** Set-up (2 ranks): every way a rank can fail to go on (no GPU name, shared GPU, OSDP_COMM on
** one rank, no unique id, a communicator that fails on one rank, no stream, OSDP_NCCL_LIB
** unusable on one rank) ends with both ranks taking the same branch, none left waiting, and the
** right rank saying why in one line; a rank whose communicator fails while the other is still
** setting up stops the job rather than wait.
*/
#include "comm/comm_nccl.c"

#include <fcntl.h>
#include <setjmp.h>
#include <stdint.h>

#include "check.h"

/* ---- A recorder in place of CUDA's runtime ------------------------------------------- */

/* Work items ("ops") queued on the fake streams, and for each the set of ops it must come
** after: its stream's earlier ops and what its stream waited for, transitively. */
enum { MAX_OPS = 256 };
typedef struct Set { uint64_t w[MAX_OPS / 64]; } Set;
struct CUstream_st { Set frontier; };        /* the ops any new op of the stream comes after */
struct CUevent_st { Set recorded; int id; }; /* the stream's frontier when last recorded */

static Set op_after[MAX_OPS];
static int n_ops;
static struct CUstream_st s_compute, s_nccl;
static int host_syncs, events_alive, events_made;
static int complete;           /* cudaEventQuery: 1 everything has run */
static int fail_device, fail_stream;
static char bus_id[32] = "0000:01:00.0";

static void set_add(Set* s, int i) { s->w[i / 64] |= 1ull << (i % 64); }
static int set_has(const Set* s, int i) { return (int)(s->w[i / 64] >> (i % 64) & 1); }
static void set_union(Set* a, const Set* b) {
  for (int i = 0; i < MAX_OPS / 64; i++) a->w[i] |= b->w[i];
}

/* Queues an op on stream st; its number. */
static int queue(struct CUstream_st* st) {
  if (n_ops == MAX_OPS) {
    fprintf(stderr, "test_nccl_order: more than %d ops in one case\n", MAX_OPS);
    exit(2);
  }
  int id = n_ops++;
  op_after[id] = st->frontier;
  set_add(&st->frontier, id);
  return id;
}

/* 1 when op b comes after op a. */
static int before(int a, int b) { return set_has(&op_after[b], a); }

/* A compute kernel. */
static int kernel(void) { return queue(&s_compute); }

/* Forgets every op (events already recorded keep stale sets; every case records before waiting). */
static void reset_ops(void) {
  n_ops = 0;
  memset(&s_compute, 0, sizeof s_compute);
  memset(&s_nccl, 0, sizeof s_nccl);
  host_syncs = complete = 0;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned int flags) {
  (void)flags;
  *e = calloc(1, sizeof **e);
  (*e)->id = ++events_made;
  events_alive++;
  return cudaSuccess;
}
cudaError_t cudaEventDestroy(cudaEvent_t e) {
  free(e);
  events_alive--;
  return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t st) {
  e->recorded = st->frontier;
  return cudaSuccess;
}
cudaError_t cudaStreamWaitEvent(cudaStream_t st, cudaEvent_t e, unsigned int flags) {
  (void)flags;
  set_union(&st->frontier, &e->recorded);
  return cudaSuccess;
}
cudaError_t cudaEventQuery(cudaEvent_t e) {
  (void)e;
  return complete ? cudaSuccess : cudaErrorNotReady;
}
cudaError_t cudaStreamSynchronize(cudaStream_t st) {
  (void)st;
  host_syncs++;
  return cudaSuccess;
}
cudaError_t cudaEventSynchronize(cudaEvent_t e) {
  (void)e;
  host_syncs++;
  return cudaSuccess;
}
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* st, unsigned int flags) {
  (void)flags;
  if (fail_stream) return cudaErrorMemoryAllocation;
  *st = &s_nccl;
  return cudaSuccess;
}
cudaError_t cudaStreamDestroy(cudaStream_t st) {
  (void)st;
  return cudaSuccess;
}
cudaError_t cudaGetDevice(int* dev) {
  *dev = 0;
  return fail_device ? cudaErrorNoDevice : cudaSuccess;
}
cudaError_t cudaDeviceGetPCIBusId(char* bus, int len, int dev) {
  (void)dev;
  snprintf(bus, (size_t)len, "%s", bus_id);
  return cudaSuccess;
}
const char* cudaGetErrorString(cudaError_t e) { return e == cudaSuccess ? "no error" : "fake CUDA error"; }

/* ---- Recording collectives and backend ------------------------------------------------- */

/* The last op queued by a collective or by the backend, and its arguments. */
static struct { int op; const void *a, *b; size_t n; char what[16]; } last;

static void note(int op, const char* what, const void* a, const void* b, size_t n) {
  last.op = op;
  last.a = a;
  last.b = b;
  last.n = n;
  snprintf(last.what, sizeof last.what, "%s", what);
}
static ncclResult_t rec_all_reduce(const void* s, void* r, size_t n, ncclDataType_t t,
                                   ncclRedOp_t op, ncclComm_t c, cudaStream_t st) {
  (void)t; (void)op; (void)c;
  note(queue(st), "allreduce", s, r, n);
  return ncclSuccess;
}
static ncclResult_t rec_all_gather(const void* s, void* r, size_t n, ncclDataType_t t,
                                   ncclComm_t c, cudaStream_t st) {
  (void)t; (void)c;
  note(queue(st), "allgather", s, r, n);
  return ncclSuccess;
}
static ncclResult_t rec_reduce_scatter(const void* s, void* r, size_t n, ncclDataType_t t,
                                       ncclRedOp_t op, ncclComm_t c, cudaStream_t st) {
  (void)t; (void)op; (void)c;
  note(queue(st), "reducescatter", s, r, n);
  return ncclSuccess;
}
static void rec_accumulate(float* dst, const float* src, size_t n) {
  note(queue(&s_compute), "accumulate", dst, src, n);
}
static void rec_copy(void* dst, const void* src, size_t bytes) {
  note(queue(&s_compute), "copy", dst, src, bytes);
}
static void* fake_compute_stream(void) { return &s_compute; }

static Kernels_f32 fake_kernels = {.accumulate = rec_accumulate};
static const Backend fake_bk = {.name = "fake", .device_memory = 1, .copy = rec_copy,
                                .f32 = &fake_kernels, .compute_stream = fake_compute_stream};

/* comm_nccl.c's state as comm_nccl_init leaves it, on rank 1 (a reduce-scatter's part is then
** the second), with the recording collectives. */
static void as_initialised(void) {
  reset_ops();
  g_compute = &s_compute;
  g_stream = &s_nccl;
  g_bk = &fake_bk;
  g_rank = 1;
  g_api.all_reduce = rec_all_reduce;
  g_api.all_gather = rec_all_gather;
  g_api.reduce_scatter = rec_reduce_scatter;
}

/* ---- Ordering ------------------------------------------------------------------------- */

static float buf[64], other[64], shard[16];

/* A non-blocking all-reduce: after the gradient's kernel, beside the kernels queued before its
** wait, before those queued after it; the host waits at the wait alone. */
static void test_overlap(void) {
  as_initialised();
  int grad = kernel();
  CommRequest r = {0};
  comm_nccl_iallreduce(buf, 64, &r);
  int ar = last.op;
  int beside = kernel();
  CHECK(before(grad, ar));
  CHECK_MSG(!before(ar, beside), "compute queued before the wait waits for the all-reduce");
  CHECK(r.mpi != NULL && host_syncs == 0);
  comm_nccl_wait(&r);
  int use = kernel();
  CHECK_MSG(before(ar, use), "compute after the wait does not wait for the all-reduce");
  CHECK(r.mpi == NULL && host_syncs == 1);
}

/* Blocking collectives: after the compute before them, before the compute after them, and the
** host waits for each. */
static void test_blocking(void) {
  for (int which = 0; which < 3; which++) {
    as_initialised();
    int k0 = kernel();
    if (which == 0) comm_nccl_allreduce(buf, 64);
    if (which == 1) comm_nccl_allgather(buf + 16, buf, 16);
    if (which == 2) comm_nccl_reduce_scatter(buf, 16);
    int op = last.op, k1 = kernel();
    CHECK_MSG(before(k0, op) && before(op, k1) && host_syncs == 1, "blocking %s", last.what);
  }
}

/* An event per request: finishing one orders compute after it alone. */
static void test_per_request(void) {
  as_initialised();
  CommRequest a = {0}, b = {0};
  comm_nccl_iallgather(shard, buf, 16, &a);
  int ag = last.op;
  comm_nccl_iallreduce(other, 64, &b);
  int ar = last.op;
  comm_nccl_wait(&a);
  int k = kernel();
  CHECK(before(ag, k));
  CHECK_MSG(!before(ar, k), "waiting for one request made compute wait for a later one");
  comm_nccl_wait(&b);
  CHECK(before(ar, kernel()));
}

/* comm_nccl_test: not done leaves the request as it is and compute unordered; done finishes it
** like a wait. */
static void test_test(void) {
  as_initialised();
  CommRequest r = {0};
  comm_nccl_iallreduce(buf, 64, &r);
  int ar = last.op;
  CHECK(comm_nccl_test(&r) == 0 && r.mpi != NULL);
  CHECK(!before(ar, kernel()));
  complete = 1;
  CHECK(comm_nccl_test(&r) == 1 && r.mpi == NULL);
  CHECK(before(ar, kernel()));
  CHECK(host_syncs == 0);
}

/* A non-blocking reduce-scatter: NCCL's in place (rank 1's part is the second), and the part
** goes into the shard on the compute stream only when the request is finished. */
static void test_reduce_scatter(void) {
  for (int accumulate = 1; accumulate >= 0; accumulate--) {
    as_initialised();
    CommRequest r = {0};
    comm_nccl_ireduce_scatter(buf, shard, 16, accumulate, &r);
    int rs = last.op;
    CHECK(strcmp(last.what, "reducescatter") == 0 && last.a == buf && last.b == buf + 16 &&
          last.n == 16);
    int beside = kernel();
    CHECK(!before(rs, beside) && last.op == rs); /* nothing written to the shard yet */
    comm_nccl_wait(&r);
    CHECK_MSG(strcmp(last.what, accumulate ? "accumulate" : "copy") == 0, "%s", last.what);
    CHECK(last.op != rs && before(rs, last.op) && last.a == shard && last.b == buf + 16 &&
          last.n == (accumulate ? 16 : 16 * sizeof(float)));
  }
  /* the shard is the part itself: nothing to copy */
  as_initialised();
  CommRequest r = {0};
  comm_nccl_ireduce_scatter(buf, buf + 16, 16, 0, &r);
  int rs = last.op;
  comm_nccl_wait(&r);
  CHECK(last.op == rs);
}

/* The engine's buffers: a prefetch's block, last used by compute before the gather writes it,
** is written only after that use; freed after its wait, it is reused by compute or by the next
** gather only after the gather. A reduce-scatter's full gradient likewise. */
static void test_reuse(void) {
  as_initialised();
  int previous_user = kernel();
  CommRequest r = {0};
  comm_nccl_iallgather(shard, buf, 16, &r); /* WALK_PREFETCH into buf */
  int ag1 = last.op;
  int beside = kernel();
  comm_nccl_wait(&r);                       /* WALK_TAKE_PREFETCH */
  int use = kernel();
  /* WALK_FREE_WEIGHT frees buf; the next prefetch gets it */
  comm_nccl_iallgather(shard, buf, 16, &r);
  int ag2 = last.op;
  int reuse = kernel();
  CHECK(before(previous_user, ag1) && !before(ag1, beside) && before(ag1, use));
  CHECK_MSG(before(use, ag2), "the next gather may write the block before its last use");
  CHECK(!before(ag2, reuse));
  comm_nccl_wait(&r);

  /* WALK_REDUCE_START, WALK_REDUCE_WAIT, then the block's next user */
  comm_nccl_ireduce_scatter(other, shard, 16, 1, &r);
  int rs = last.op;
  comm_nccl_wait(&r);
  int acc = last.op, next_user = kernel();
  CHECK(before(rs, acc) && before(acc, next_user));
}

/* Events: each request in flight has its own; they are reused, and comm_nccl_finalize destroys
** every one. */
static void test_events(void) {
  enum { N = 70 };
  as_initialised();
  int made = events_made;
  CommRequest r[N];
  for (int i = 0; i < N; i++) {
    memset(&r[i], 0, sizeof r[i]);
    comm_nccl_iallreduce(buf, 64, &r[i]);
  }
  int distinct = 1;
  for (int i = 0; i < N; i++)
    for (int j = i + 1; j < N; j++)
      distinct &= ((NcclPending*)r[i].mpi)->done != ((NcclPending*)r[j].mpi)->done;
  CHECK_MSG(distinct, "two requests in flight share an event");
  for (int i = 0; i < N; i++) comm_nccl_wait(&r[i]);
  int after_first = events_made - made;
  for (int i = 0; i < N; i++) {
    comm_nccl_iallreduce(buf, 64, &r[i]);
    comm_nccl_wait(&r[i]);
  }
  CHECK_MSG(events_made - made == after_first, "events not reused: %d made", events_made - made);
  g_comm = NULL;
  comm_nccl_finalize();
  CHECK_MSG(events_alive == 0, "%d events left", events_alive);
}

/* ---- Set-up on 2 ranks ----------------------------------------------------------------- */

static int g_rank_w, g_size_w;
static jmp_buf abort_jump;
static int abort_armed;

/* comm_abort: back to the set-up case being run (MPI_Abort outside one). */
void comm_abort(int code) {
  if (abort_armed) longjmp(abort_jump, code);
  fprintf(stderr, "test_nccl_order: comm_abort(%d) outside a case\n", code);
  MPI_Abort(MPI_COMM_WORLD, code);
  exit(code);
}

/* What a rank said on stderr during a case. */
static char said[4096];
static int saved_stderr;
static char said_path[64];

static void capture_begin(void) {
  fflush(stderr);
  saved_stderr = dup(2);
  int fd = open(said_path, O_CREAT | O_TRUNC | O_RDWR, 0600);
  dup2(fd, 2);
  close(fd);
}

static void capture_end(void) {
  fflush(stderr);
  dup2(saved_stderr, 2);
  close(saved_stderr);
  said[0] = 0;
  FILE* f = fopen(said_path, "r");
  if (f) {
    size_t n = fread(said, 1, sizeof said - 1, f);
    said[n] = 0;
    fclose(f);
  }
}

/* comm_nccl.c's state before comm_nccl_init. */
static void fresh(void) {
  memset(&g_api, 0, sizeof g_api);
  g_lib = NULL;
  g_comm = NULL;
  g_stream = NULL;
  g_compute = NULL;
  g_bk = NULL;
  reset_ops();
}

/* Runs comm_nccl_init on this rank with env (NAME=VALUE, or NULL) set, stderr captured in
** `said`; returns its result, or 100 + the code when it ended the job (comm_abort). */
static int run_init(const char* env) {
  fresh();
  char name[64] = "", value[PATH_MAX] = "";
  if (env) {
    size_t k = strcspn(env, "=");
    snprintf(name, sizeof name, "%.*s", (int)k, env);
    snprintf(value, sizeof value, "%s", env + k + 1);
    setenv(name, value, 1);
  }
  if (!getenv("OSDP_NCCL_LIB")) setenv("OSDP_NCCL_LIB", NCCL_STUB, 1);
  capture_begin();
  volatile int got = -1;
  abort_armed = 1;
  int code = setjmp(abort_jump);
  if (code == 0) got = comm_nccl_init(&fake_bk, g_rank_w, g_size_w);
  else got = 100 + code;
  abort_armed = 0;
  capture_end();
  if (env) unsetenv(name);
  unsetenv("OSDP_NCCL_LIB");
  if (got == 1) comm_nccl_finalize();
  return got;
}

/* 1 when every rank has the same v. */
static int same_everywhere(int v) {
  int lo = v, hi = v;
  MPI_Allreduce(&v, &lo, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(&v, &hi, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  return lo == hi;
}

/* One case: env on rank `on` only (-1: every rank); expects result `want` on every rank and, from
** rank `speaker` alone (-1: nobody), a stderr holding `line`. */
static void init_case(const char* title, int on, const char* env, int want, int speaker,
                      const char* line) {
  int got = run_init(on < 0 || on == g_rank_w ? env : NULL);
  CHECK_MSG(same_everywhere(got), "%s: ranks disagree (rank %d: %d)", title, g_rank_w, got);
  CHECK_MSG(got == want, "%s: rank %d got %d, expected %d", title, g_rank_w, got, want);
  if (g_rank_w == speaker) {
    CHECK_MSG(strstr(said, line) != NULL, "%s: rank %d said '%s', not '%s'", title, g_rank_w, said,
              line);
    CHECK_MSG(strchr(said, '\n') == said + strlen(said) - 1, "%s: not one line: '%s'", title, said);
  } else {
    CHECK_MSG(said[0] == 0, "%s: rank %d said '%s'", title, g_rank_w, said);
  }
}

/* The stub's count of ncclCommAbort calls. */
static int stub_aborts(void) {
  void* h = dlopen(NCCL_STUB, RTLD_NOW | RTLD_NOLOAD);
  int* n = h ? dlsym(h, "nccl_stub_aborts") : NULL;
  int v = n ? *n : -1;
  if (h) dlclose(h);
  return v;
}

static void test_init(void) {
  if (g_size_w != 2) {
    printf("set-up cases skipped: they need 2 ranks (%d here)\n", g_size_w);
    return;
  }
  snprintf(bus_id, sizeof bus_id, "0000:0%d:00.0", g_rank_w + 1);
  init_case("each rank its GPU", -1, NULL, 1, -1, NULL);
  init_case("verbose", -1, "OSDP_COMM_VERBOSE=1", 1, 0,
            "osdp: collectives over NCCL (NCCL 2.28.9 from " NCCL_STUB ")");
  init_case("OSDP_COMM on rank 1", 1, "OSDP_COMM=mpi", 0, -1, NULL);

  fail_device = g_rank_w == 1;
  init_case("rank 1 cannot name its GPU", -1, NULL, 0, 1,
            "osdp: warning: collectives over MPI with host staging (rank 1: cannot name its GPU)");
  fail_device = 0;

  snprintf(bus_id, sizeof bus_id, "0000:01:00.0");
  init_case("one GPU for both", -1, NULL, 0, -1, NULL);
  init_case("one GPU for both, verbose", -1, "OSDP_COMM_VERBOSE=1", 0, 0, "(ranks share a GPU)");
  snprintf(bus_id, sizeof bus_id, "0000:0%d:00.0", g_rank_w + 1);

  init_case("no unique id", 0, "NCCL_STUB_FAIL=id", 0, 0,
            "osdp: warning: collectives over MPI with host staging (rank 0: ncclGetUniqueId: stub failure)");

  fail_stream = g_rank_w == 0;
  init_case("no stream on rank 0", -1, NULL, 0, 0, "(rank 0: cudaStreamCreateWithFlags: fake CUDA error)");
  fail_stream = 0;

  int aborts = stub_aborts();
  init_case("communicator fails on rank 1", -1, "NCCL_STUB_FAIL=init:1", 0, 1,
            "(rank 1: ncclCommInitRank: stub failure)");
  CHECK_MSG(stub_aborts() == aborts + (g_rank_w == 0), "rank %d: %d aborts", g_rank_w,
            stub_aborts() - aborts);

  /* rank 1 fails while rank 0 is still inside ncclCommInitRank: rank 1 does not wait for it
  ** past g_init_wait_s but ends the job with its line (MPI_Abort would end rank 0 too; here rank 0
  ** is let finish, and rank 1 joins what it then waits for: the request and all_ok). */
  g_init_wait_s = 0.5;
  aborts = stub_aborts();
  int got = run_init(g_rank_w == 0 ? "NCCL_STUB_FAIL=slow:0" : "NCCL_STUB_FAIL=init:1");
  if (g_rank_w == 1) {
    CHECK_MSG(got == 105, "rank 1 got %d while rank 0 was still setting up", got);
    CHECK_MSG(strcmp(said, "osdp: error: NCCL: rank 1: ncclCommInitRank: stub failure, and other "
                     "ranks are still setting NCCL up; OSDP_COMM=mpi uses MPI with host staging "
                     "instead\n") == 0, "rank 1 said '%s'", said);
    MPI_Wait(&g_init_req, MPI_STATUS_IGNORE);
    all_ok(0, g_rank_w, g_size_w, "", 0);
  } else {
    CHECK_MSG(got == 0 && stub_aborts() == aborts + 1, "rank 0 got %d", got);
  }
  g_init_wait_s = 60;

  init_case("OSDP_NCCL_LIB missing on rank 1", 1, "OSDP_NCCL_LIB=/nonexistent/libnccl.so.2", 102, 1,
            "osdp: error: OSDP_NCCL_LIB=/nonexistent/libnccl.so.2 cannot be used (");
  init_case("OSDP_NCCL_LIB too old everywhere", -1, "OSDP_NCCL_LIB=" NCCL_STUB_OLD, 102, 0,
            "has no ncclAllGather");
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank_w);
  MPI_Comm_size(MPI_COMM_WORLD, &g_size_w);
  snprintf(said_path, sizeof said_path, "/tmp/osdp-nccl-order-%d.txt", (int)getpid());
  unsetenv("OSDP_COMM");
  unsetenv("OSDP_COMM_VERBOSE");
  unsetenv("OSDP_NCCL_LIB");
  test_overlap();
  test_blocking();
  test_per_request();
  test_test();
  test_reduce_scatter();
  test_reuse();
  test_events();
  test_init();
  unlink(said_path);
  int failed = check_failed, any = 0;
  MPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  int status = check_summary();
  MPI_Finalize();
  return status || any;
}
