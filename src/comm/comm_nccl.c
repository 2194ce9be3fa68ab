/*
** comm_nccl.c: the collectives on NCCL for ranks that each own a GPU; see comm_nccl.h.
**
** Ordering between the compute stream (every kernel, copy and zeroing of the backend, host
** copies included) and NCCL's stream (every collective, in the order started, which is the same
** on every rank):
**
** 1. Inputs and outputs after compute (compute -> NCCL). Starting a collective records an event
**    on the compute stream and makes NCCL's stream wait for it (after_compute). The collective
**    so reads its input only after every kernel queued before it (the gradient or shard it sends
**    is complete) and writes its output only after every kernel queued before it that used the
**    same memory: an arena block handed to a collective (a prefetch's buffer) was freed on the
**    host after its previous user's last kernel was queued, hence before that event.
** 2. Results (NCCL -> compute). Every collective records an event on NCCL's stream after it. A
**    blocking one makes the compute stream wait for it at once (and the host too, for the
**    counters). A non-blocking one keeps its event in its request, and the compute stream waits
**    for it only when the request is finished (comm_nccl_wait, or comm_nccl_test finding the
**    event complete): comm.h's contract is that the caller touches neither buffer before
**    comm_wait, so the kernels queued in between run beside the collective, and never read its
**    result early nor overwrite its input while NCCL reads it. A reduce-scatter's part goes into
**    its shard then, on the compute stream, after that wait.
** 3. Frees (NCCL -> compute -> the next user). The engine frees a buffer a collective used (a
**    taken prefetch, a reduce-scatter's full gradient) only after finishing its request, so the
**    compute stream already waits for the collective before anything later reuses the block: a
**    kernel (on the compute stream, after the wait), or a later collective (NCCL's stream is in
**    order, and waits for compute by 1).
** 4. The host. A finished request always makes the compute stream wait (a no-op for an event
**    already complete), so 2 and 3 hold whichever of comm_test and comm_wait finished it.
**    comm_wait also waits on the host, for comm's counters (the time a rank waits for each kind
**    of collective, which the planner's profile calibrates from, as on MPI): the GPU has by then
**    run the collective beside every kernel queued between its start and the wait, and the host
**    has queued them all; starting never waits, and comm_test never blocks.
** Events come from a small pool: once cudaStreamWaitEvent has returned, the stream waits for
** the event as recorded then, so the event can be recorded again at once.
**
** Errors: setting up is collective, and every step of it ends with an agreement (all_ok) that
** every rank joins whatever happened to it locally, so all ranks take the same branch: all use
** NCCL, or all fall back to MPI with host staging (the lowest rank that could not go on says
** why), or all stop (OSDP_NCCL_LIB unusable: one line). One step cannot be agreed on by MPI
** alone: a rank whose ncclCommInitRank failed while others are still inside theirs (waiting
** for it in NCCL) stops the job after 60 s, with one line, instead of waiting for them. A
** failing collective stops the job (comm_abort: MPI_Abort ends every rank, none is left
** waiting).
*/
#define _GNU_SOURCE /* dladdr */
#include "comm/comm_nccl.h"

#include <stdio.h>

#ifdef OSDP_HAVE_NCCL

#include <cuda_runtime.h>
#include <dlfcn.h>
#include <glob.h>
#include <limits.h>
#include <mpi.h>
#include <nccl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- Finding libnccl.so.2 ------------------------------------------------------------ */

void comm_nccl_search_from_env(NcclSearch* s) {
  *s = (NcclSearch){.lib = getenv("OSDP_NCCL_LIB"), .loader_path = 1,
                    .virtual_env = getenv("VIRTUAL_ENV"), .conda_prefix = getenv("CONDA_PREFIX"),
                    .path = getenv("PATH"), .home = getenv("HOME"), .root = "",
                    .cuda_home = getenv("CUDA_HOME")};
}

/* The candidates found so far: out holds max paths of len bytes; n counts every one found. */
typedef struct Found {
  char* out;
  size_t len;
  int max, n;
} Found;

/* Adds each existing file matching the glob pattern, in glob's (sorted) order, unless already
** there. */
static void add_matches(Found* f, const char* pattern) {
  glob_t g;
  if (glob(pattern, 0, NULL, &g) != 0) return; /* no match (or an unreadable directory) */
  for (size_t i = 0; i < g.gl_pathc; i++) {
    int seen = 0;
    for (int j = 0; j < f->n && j < f->max && !seen; j++)
      seen = strcmp(f->out + (size_t)j * f->len, g.gl_pathv[i]) == 0;
    if (seen) continue;
    if (f->n < f->max) snprintf(f->out + (size_t)f->n * f->len, f->len, "%s", g.gl_pathv[i]);
    f->n++;
  }
  globfree(&g);
}

/* Adds NCCL as PyTorch's wheel ships it (the nvidia-nccl-cu* package) under each python3.* of
** ROOT PREFIX/lib (site-packages, then Debian's dist-packages); no prefix: nothing. */
static void add_wheels(Found* f, const char* root, const char* prefix, const char* lib) {
  if (!prefix || !*prefix) return;
  const char* kinds[] = {"site-packages", "dist-packages"};
  for (int k = 0; k < 2; k++) {
    char pattern[PATH_MAX];
    int n = snprintf(pattern, sizeof pattern, "%s%s%s/python3*/%s/nvidia/nccl/lib/libnccl.so.2",
                     root, prefix, lib, kinds[k]);
    if (n > 0 && (size_t)n < sizeof pattern) add_matches(f, pattern);
  }
}

/* Writes into prefix (len bytes) PREFIX for the first PATH entry PREFIX/bin holding an
** executable python3 (the interpreter a user runs PyTorch with); "" when there is none. Nothing
** is run: the interpreter's own sys.path is not asked. */
static void python_prefix(const char* path, char* prefix, size_t len) {
  prefix[0] = 0;
  for (const char* p = path; p && *p; p += *p == ':') {
    size_t n = strcspn(p, ":");
    while (n > 1 && p[n - 1] == '/') n--; /* "/usr/bin/" as "/usr/bin" */
    char exe[PATH_MAX];
    int w = snprintf(exe, sizeof exe, "%.*s/python3", (int)n, p);
    if (n > 0 && w > 0 && (size_t)w < sizeof exe && access(exe, X_OK) == 0) {
      snprintf(prefix, len, "%.*s", (int)n, p);
      char* slash = strrchr(prefix, '/');
      if (slash) *slash = 0; else prefix[0] = 0;
      return;
    }
    p += strcspn(p, ":");
  }
}

int comm_nccl_candidates(const NcclSearch* s, char* out, size_t len, int max) {
  Found f = {out, len, max, 0};
  const char* root = s->root ? s->root : "";
  char py[PATH_MAX];
  python_prefix(s->path, py, sizeof py);
  add_wheels(&f, "", s->virtual_env, "/lib");
  add_wheels(&f, "", s->conda_prefix, "/lib");
  add_wheels(&f, "", py, "/lib");
  add_wheels(&f, "", s->home, "/.local/lib");
  add_wheels(&f, root, "/usr/local", "/lib");
  add_wheels(&f, root, "/usr", "/lib");
  char file[PATH_MAX];
  if (s->cuda_home && *s->cuda_home &&
      snprintf(file, sizeof file, "%s/lib64/libnccl.so.2", s->cuda_home) < (int)sizeof file)
    add_matches(&f, file);
  if (snprintf(file, sizeof file, "%s/usr/local/cuda/lib64/libnccl.so.2", root) < (int)sizeof file)
    add_matches(&f, file);
  return f.n;
}

/* dlopens file (a path, or a name for the loader's path) and checks that it has every function
** of names; the handle, or NULL with why (a reason naming the file) and *too_old set when the
** file loaded but lacks one. */
static void* open_checked(const char* file, const char* const* names, int count, char* why,
                          size_t why_len, int* too_old) {
  void* h = dlopen(file, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char* e = dlerror();
    snprintf(why, why_len, "%s", e ? e : file);
    return NULL;
  }
  for (int i = 0; i < count; i++)
    if (!dlsym(h, names[i])) {
      snprintf(why, why_len, "%s has no %s (an older NCCL than osdp needs)", file, names[i]);
      dlclose(h);
      *too_old = 1;
      return NULL;
    }
  return h;
}

/* Writes the file h was loaded from (found through one of its functions) into where. */
static void loaded_from(void* h, const char* name, const char* fallback, char* where, size_t len) {
  Dl_info info;
  void* fn = dlsym(h, name);
  snprintf(where, len, "%s", fn && dladdr(fn, &info) && info.dli_fname ? info.dli_fname : fallback);
}

void* comm_nccl_open(const NcclSearch* s, const char* const* names, int count, char* where,
                     size_t where_len, char* why, size_t why_len, int* fatal) {
  int too_old = 0;
  *fatal = 0;
  where[0] = why[0] = 0;
  if (s->lib && *s->lib) { /* the user's choice, and only it */
    char reason[1024];
    void* h = open_checked(s->lib, names, count, reason, sizeof reason, &too_old);
    if (h) {
      loaded_from(h, names[0], s->lib, where, where_len);
      return h;
    }
    snprintf(why, why_len, "OSDP_NCCL_LIB=%s cannot be used (%s); point it at NCCL's "
             "libnccl.so.2 or unset it", s->lib, reason);
    *fatal = 1;
    return NULL;
  }
  void* h = NULL;
  if (s->loader_path && (h = open_checked("libnccl.so.2", names, count, why, why_len, &too_old))) {
    loaded_from(h, names[0], "libnccl.so.2", where, where_len);
    return h;
  }
  enum { MAX = 32, LEN = PATH_MAX };
  char* files = malloc((size_t)MAX * LEN);
  int n = files ? comm_nccl_candidates(s, files, LEN, MAX) : 0;
  for (int i = 0; i < n && i < MAX && !h; i++) {
    h = open_checked(files + (size_t)i * LEN, names, count, why, why_len, &too_old);
    if (h) loaded_from(h, names[0], files + (size_t)i * LEN, where, where_len);
  }
  if (!h && n == 0 && !too_old) /* else why says which NCCL was too old */
    snprintf(why, why_len, "libnccl.so.2 is not on the loader's path, beside a PyTorch wheel "
             "(site-packages/nvidia/nccl/lib) or in CUDA's lib64; OSDP_NCCL_LIB names another");
  free(files);
  return h;
}

/* ---- Set-up ---------------------------------------------------------------------------- */

/* The NCCL functions osdp calls, in the order of k_nccl_names. */
typedef struct NcclApi {
  ncclResult_t (*get_unique_id)(ncclUniqueId*);
  ncclResult_t (*comm_init_rank)(ncclComm_t*, int, ncclUniqueId, int);
  ncclResult_t (*comm_destroy)(ncclComm_t);
  ncclResult_t (*comm_abort)(ncclComm_t);
  ncclResult_t (*all_reduce)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t);
  ncclResult_t (*all_gather)(const void*, void*, size_t, ncclDataType_t, ncclComm_t, cudaStream_t);
  ncclResult_t (*reduce_scatter)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t);
  const char* (*error_string)(ncclResult_t);
  ncclResult_t (*get_version)(int*);
} NcclApi;

static const char* const k_nccl_names[] = {
    "ncclGetUniqueId", "ncclCommInitRank", "ncclCommDestroy", "ncclCommAbort", "ncclAllReduce",
    "ncclAllGather", "ncclReduceScatter", "ncclGetErrorString", "ncclGetVersion"};
#define NCCL_FUNCTIONS ((int)(sizeof k_nccl_names / sizeof k_nccl_names[0]))

static NcclApi g_api;
static void* g_lib;
static ncclComm_t g_comm;
static cudaStream_t g_compute, g_stream; /* the backend's compute stream; NCCL's own */
static const Backend* g_bk;              /* the backend (a reduce-scatter's shard update) */
static int g_rank;
static char g_loaded[PATH_MAX + 64];     /* "NCCL 2.28.9 from /path/libnccl.so.2" */

/* Stops every rank after a failed NCCL or CUDA call (a collective cannot be retried alone). */
static void fail(const char* what, const char* why) {
  fprintf(stderr, "osdp: error: NCCL: %s: %s\n", what, why);
  comm_abort(5);
}

#define NCCL_CHECK(call) do { ncclResult_t r_ = (call); \
  if (r_ != ncclSuccess) fail(#call, g_api.error_string(r_)); } while (0)
#define CUDA_CHECK(call) do { cudaError_t e_ = (call); \
  if (e_ != cudaSuccess) fail(#call, cudaGetErrorString(e_)); } while (0)

/* Fills g_api from the loaded library (comm_nccl_open checked that every function is there). */
static void bind_api(void) {
  void** slots[] = {(void**)&g_api.get_unique_id, (void**)&g_api.comm_init_rank,
                    (void**)&g_api.comm_destroy, (void**)&g_api.comm_abort,
                    (void**)&g_api.all_reduce, (void**)&g_api.all_gather,
                    (void**)&g_api.reduce_scatter, (void**)&g_api.error_string,
                    (void**)&g_api.get_version};
  _Static_assert(sizeof slots / sizeof slots[0] == NCCL_FUNCTIONS, "a slot per NCCL function");
  for (int i = 0; i < NCCL_FUNCTIONS; i++) *slots[i] = dlsym(g_lib, k_nccl_names[i]);
}

/* Forgets the library (a fallback to MPI); the handle stays open, as NCCL may have started
** threads. */
static void drop_api(void) {
  memset(&g_api, 0, sizeof g_api);
  g_lib = NULL;
}

/* Every rank's v combined by op (MPI_MIN, MPI_MAX) over the world. */
static int agree(int v, MPI_Op op) {
  int all = v;
  MPI_Allreduce(&v, &all, 1, MPI_INT, op, MPI_COMM_WORLD);
  return all;
}

/* 1 when every rank has ok. Else 0 on every rank, and the lowest rank without it says why
** ("osdp: collectives over MPI with host staging (rank R: why)") when OSDP_COMM_VERBOSE is set,
** or always as a warning (loud: NCCL was there but failed). Collective. */
static int all_ok(int ok, int rank, int size, const char* why, int loud) {
  if (agree(ok != 0, MPI_MIN)) return 1;
  int first = agree(ok ? size : rank, MPI_MIN);
  if (rank == first && (loud || getenv("OSDP_COMM_VERBOSE")))
    fprintf(stderr, "osdp: %scollectives over MPI with host staging (rank %d: %s)\n",
            loud ? "warning: " : "", rank, why);
  return 0;
}

/* Whether two ranks of one host share a GPU, from every rank's "host/PCI bus id": 1 or 0, the
** same on every rank; -1 on every rank when some rank could not name its GPU or hold the table
** (it says why). Every rank joins the agreement and then the gather whatever happened to it. */
static int gpus_shared(int rank, int size) {
  enum { ID = 128 };
  char me[ID] = {0}, bus[32] = {0};
  int dev = 0;
  int named = cudaGetDevice(&dev) == cudaSuccess &&
              cudaDeviceGetPCIBusId(bus, sizeof bus, dev) == cudaSuccess;
  gethostname(me, 64);
  me[63] = 0;
  snprintf(me + strlen(me), (size_t)ID - strlen(me), "/%s", bus);
  char* all = calloc((size_t)size, ID);
  if (!all_ok(named && all, rank, size, named ? "out of host memory" : "cannot name its GPU", 1)) {
    free(all);
    return -1;
  }
  MPI_Allgather(me, ID, MPI_CHAR, all, ID, MPI_CHAR, MPI_COMM_WORLD);
  int shared = 0;
  for (int i = 0; i < size && !shared; i++)
    for (int j = i + 1; j < size && !shared; j++)
      shared = strcmp(all + (size_t)i * ID, all + (size_t)j * ID) == 0;
  free(all);
  return shared;
}

/* Loads NCCL on every rank: 1 on every rank when all have it; 0 on every rank when some lack it;
** when OSDP_NCCL_LIB is unusable on some rank, the lowest such rank prints the one-line error
** and every rank stops. */
static int load_everywhere(int rank, int size) {
  NcclSearch s;
  comm_nccl_search_from_env(&s);
  char where[PATH_MAX], why[1536];
  int fatal = 0;
  g_lib = comm_nccl_open(&s, k_nccl_names, NCCL_FUNCTIONS, where, sizeof where, why, sizeof why,
                         &fatal);
  if (agree(fatal, MPI_MAX)) {
    if (rank == agree(fatal ? rank : size, MPI_MIN)) fprintf(stderr, "osdp: error: %s\n", why);
    fflush(stderr);
    MPI_Barrier(MPI_COMM_WORLD); /* the line is out before any rank aborts */
    comm_abort(2);
  }
  if (!all_ok(g_lib != NULL, rank, size, why, 0)) {
    g_lib = NULL;
    return 0;
  }
  bind_api();
  int version = 0;
  if (g_api.get_version(&version) != ncclSuccess) version = 0;
  snprintf(g_loaded, sizeof g_loaded, "NCCL %d.%d.%d from %s", version / 10000,
           version / 100 % 100, version % 100, where);
  return 1;
}

/* Seconds a rank whose ncclCommInitRank failed waits for the others to return from theirs before
** it stops the job: they may be waiting inside NCCL for it, where no agreement reaches them. */
static double g_init_wait_s = 60;
static MPI_Request g_init_req = MPI_REQUEST_NULL; /* agree_on_comm's (a static for the tests) */

/* After ncclCommInitRank: 1 on every rank when it succeeded everywhere; 0 on every rank when it
** failed somewhere and every rank returned from it (the lowest failing rank says why). A rank
** whose init failed while another has not returned within g_init_wait_s ends the job with one
** line (MPI_Abort also ends the ranks waiting inside NCCL). */
static int agree_on_comm(int ok, int rank, int size, const char* why) {
  int all = ok, done = 0;
  MPI_Iallreduce(&ok, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD, &g_init_req);
  if (ok) {
    MPI_Wait(&g_init_req, MPI_STATUS_IGNORE);
  } else {
    double t0 = MPI_Wtime();
    while (MPI_Test(&g_init_req, &done, MPI_STATUS_IGNORE) == MPI_SUCCESS && !done) {
      if (MPI_Wtime() - t0 > g_init_wait_s) {
        fprintf(stderr, "osdp: error: NCCL: rank %d: %s, and other ranks are still setting NCCL "
                "up; OSDP_COMM=mpi uses MPI with host staging instead\n", rank, why);
        comm_abort(5);
      }
      usleep(1000);
    }
  }
  return all ? 1 : all_ok(ok, rank, size, why, 1);
}

/* Creates NCCL's stream and the communicator from rank 0's id; 1 on every rank when all have
** them, else 0 on every rank with whatever was made released. */
static int start_everywhere(int rank, int size) {
  struct { int ok; ncclUniqueId id; } boot;
  memset(&boot, 0, sizeof boot);
  char why[256] = "";
  if (rank == 0) {
    ncclResult_t res = g_api.get_unique_id(&boot.id);
    boot.ok = res == ncclSuccess;
    if (!boot.ok) snprintf(why, sizeof why, "ncclGetUniqueId: %s", g_api.error_string(res));
  }
  MPI_Bcast(&boot, (int)sizeof boot, MPI_BYTE, 0, MPI_COMM_WORLD);
  if (!all_ok(boot.ok, rank, size, why, 1)) return 0;
  cudaError_t e = cudaStreamCreateWithFlags(&g_stream, cudaStreamNonBlocking);
  if (e != cudaSuccess) {
    g_stream = NULL;
    snprintf(why, sizeof why, "cudaStreamCreateWithFlags: %s", cudaGetErrorString(e));
  }
  /* Before the communicator: NCCL's initialisation waits for every rank to join it. */
  if (!all_ok(g_stream != NULL, rank, size, why, 1)) {
    if (g_stream) cudaStreamDestroy(g_stream);
    g_stream = NULL;
    return 0;
  }
  ncclResult_t res = g_api.comm_init_rank(&g_comm, size, boot.id, rank);
  if (res != ncclSuccess) {
    g_comm = NULL;
    snprintf(why, sizeof why, "ncclCommInitRank: %s", g_api.error_string(res));
  }
  if (!agree_on_comm(g_comm != NULL, rank, size, why)) {
    if (g_comm) g_api.comm_abort(g_comm); /* its peers are not all there: no orderly destroy */
    g_comm = NULL;
    cudaStreamDestroy(g_stream);
    g_stream = NULL;
    return 0;
  }
  return 1;
}

int comm_nccl_init(const Backend* bk, int rank, int size) {
  if (size == 1) return 0;
  int want = bk->compute_stream != NULL && getenv("OSDP_COMM") == NULL;
  /* OSDP_COMM set on any rank (or no stream to order against): MPI for every rank. */
  if (!all_ok(want, rank, size, bk->compute_stream ? "OSDP_COMM is set" : "no compute stream", 0))
    return 0;
  int shared = gpus_shared(rank, size);
  if (shared) {
    if (shared > 0 && rank == 0 && getenv("OSDP_COMM_VERBOSE"))
      fprintf(stderr, "osdp: collectives over MPI with host staging (ranks share a GPU)\n");
    return 0;
  }
  if (!load_everywhere(rank, size)) return 0;
  if (!start_everywhere(rank, size)) {
    drop_api();
    return 0;
  }
  g_compute = (cudaStream_t)bk->compute_stream();
  g_bk = bk;
  g_rank = rank;
  if (rank == 0 && getenv("OSDP_COMM_VERBOSE"))
    fprintf(stderr, "osdp: collectives over NCCL (%s)\n", g_loaded);
  return 1;
}

/* ---- Events ---------------------------------------------------------------------------- */

/* Events not in use, for reuse (see the top of the file). */
#define EVENT_POOL 64
static cudaEvent_t g_pool[EVENT_POOL];
static int g_pooled;

/* An event from the pool, or a new one. */
static cudaEvent_t event_get(void) {
  if (g_pooled > 0) return g_pool[--g_pooled];
  cudaEvent_t ev;
  CUDA_CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
  return ev;
}

/* Gives an event back (any stream that waits for it already waits for its last record). */
static void event_put(cudaEvent_t ev) {
  if (g_pooled < EVENT_POOL) g_pool[g_pooled++] = ev;
  else CUDA_CHECK(cudaEventDestroy(ev));
}

void comm_nccl_finalize(void) {
  if (g_comm) g_api.comm_destroy(g_comm);
  while (g_pooled > 0) cudaEventDestroy(g_pool[--g_pooled]);
  if (g_stream) cudaStreamDestroy(g_stream);
  g_comm = NULL;
  g_stream = NULL;
}

/* Ordering 1: NCCL's stream waits for everything queued on the compute stream so far. */
static void after_compute(void) {
  cudaEvent_t ev = event_get();
  CUDA_CHECK(cudaEventRecord(ev, g_compute));
  CUDA_CHECK(cudaStreamWaitEvent(g_stream, ev, 0));
  event_put(ev);
}

/* Ordering 2: an event recorded on NCCL's stream after the collective just queued. */
static cudaEvent_t collective_done(void) {
  cudaEvent_t ev = event_get();
  CUDA_CHECK(cudaEventRecord(ev, g_stream));
  return ev;
}

/* The compute stream waits for ev's collective; ev goes back to the pool. */
static void compute_waits(cudaEvent_t ev) {
  CUDA_CHECK(cudaStreamWaitEvent(g_compute, ev, 0));
  event_put(ev);
}

/* The end of a blocking collective: the compute stream waits for it at once, and the host too. */
static void finish_blocking(void) {
  compute_waits(collective_done());
  CUDA_CHECK(cudaStreamSynchronize(g_stream));
}

/* ---- Requests -------------------------------------------------------------------------- */

/* A non-blocking collective in flight (CommRequest.mpi): its end, and for a reduce-scatter
** where this rank's part goes when it is finished. */
typedef struct NcclPending {
  cudaEvent_t done; /* recorded on NCCL's stream after the collective */
  float* part;      /* reduce-scatter: this rank's summed part (inside the full buffer) */
  float* shard;     /* ... and its destination; NULL for the other collectives */
  size_t n;
  int accumulate;   /* add the part to the shard (else copy it) */
} NcclPending;

/* Gives r the collective just queued on NCCL's stream (a reduce-scatter's part and shard). */
static void start_request(CommRequest* r, float* part, float* shard, size_t n, int accumulate) {
  NcclPending* p = malloc(sizeof *p);
  if (!p) fail("a request", "out of host memory");
  *p = (NcclPending){.done = collective_done(), .part = part, .shard = shard, .n = n,
                     .accumulate = accumulate};
  r->mpi = p;
}

/* Finishes r (orderings 2 and 3): the compute stream waits for its collective, then a
** reduce-scatter's part is added or copied into its shard on that stream. */
static void finish_request(CommRequest* r) {
  NcclPending* p = r->mpi;
  compute_waits(p->done);
  if (p->shard) {
    if (p->accumulate) g_bk->f32->accumulate(p->shard, p->part, p->n);
    else if (p->shard != p->part) g_bk->copy(p->shard, p->part, p->n * sizeof(float));
  }
  free(p);
  r->mpi = NULL;
}

int comm_nccl_test(CommRequest* r) {
  cudaError_t e = cudaEventQuery(((NcclPending*)r->mpi)->done);
  if (e == cudaErrorNotReady) return 0;
  if (e != cudaSuccess) fail("cudaEventQuery", cudaGetErrorString(e));
  finish_request(r);
  return 1;
}

void comm_nccl_wait(CommRequest* r) {
  CUDA_CHECK(cudaEventSynchronize(((NcclPending*)r->mpi)->done)); /* for the counters: see 4 */
  finish_request(r);
}

/* ---- Collectives ----------------------------------------------------------------------- */

void comm_nccl_allreduce(float* buf, size_t n) {
  after_compute();
  NCCL_CHECK(g_api.all_reduce(buf, buf, n, ncclFloat32, ncclSum, g_comm, g_stream));
  finish_blocking();
}

void comm_nccl_iallreduce(float* buf, size_t n, CommRequest* r) {
  after_compute();
  NCCL_CHECK(g_api.all_reduce(buf, buf, n, ncclFloat32, ncclSum, g_comm, g_stream));
  start_request(r, NULL, NULL, 0, 0);
}

void comm_nccl_allgather(const float* shard, float* full, size_t shard_n) {
  after_compute();
  NCCL_CHECK(g_api.all_gather(shard, full, shard_n, ncclFloat32, g_comm, g_stream));
  finish_blocking();
}

void comm_nccl_iallgather(const float* shard, float* full, size_t shard_n, CommRequest* r) {
  after_compute();
  NCCL_CHECK(g_api.all_gather(shard, full, shard_n, ncclFloat32, g_comm, g_stream));
  start_request(r, NULL, NULL, 0, 0);
}

/* Queues the in-place reduce-scatter of full (NCCL's in place: this rank's result lands at
** full + rank * shard_n) after the compute work before it; returns that part. */
static float* queue_reduce_scatter(float* full, size_t shard_n) {
  float* part = full + (size_t)g_rank * shard_n;
  after_compute();
  NCCL_CHECK(g_api.reduce_scatter(full, part, shard_n, ncclFloat32, ncclSum, g_comm, g_stream));
  return part;
}

void comm_nccl_reduce_scatter(float* full, size_t shard_n) {
  queue_reduce_scatter(full, shard_n);
  finish_blocking();
}

void comm_nccl_ireduce_scatter(float* full, float* shard, size_t shard_n, int accumulate,
                               CommRequest* r) {
  float* part = queue_reduce_scatter(full, shard_n);
  start_request(r, part, shard, shard_n, accumulate);
}

#else /* built without NCCL: MPI carries every collective */

int comm_nccl_init(const Backend* bk, int rank, int size) { return 0; }
void comm_nccl_finalize(void) {}

/* The rest is never called without NCCL; each stops the job loudly should that change. */
static void unavailable(void) {
  fprintf(stderr, "osdp: internal error: NCCL collective in a build without NCCL\n");
  comm_abort(5);
}
void comm_nccl_allreduce(float* buf, size_t n) { unavailable(); }
void comm_nccl_iallreduce(float* buf, size_t n, CommRequest* r) { unavailable(); }
int comm_nccl_test(CommRequest* r) { unavailable(); return 1; }
void comm_nccl_wait(CommRequest* r) { unavailable(); }
void comm_nccl_allgather(const float* shard, float* full, size_t shard_n) { unavailable(); }
void comm_nccl_iallgather(const float* shard, float* full, size_t shard_n, CommRequest* r) { unavailable(); }
void comm_nccl_reduce_scatter(float* full, size_t shard_n) { unavailable(); }
void comm_nccl_ireduce_scatter(float* full, float* shard, size_t shard_n, int accumulate,
                               CommRequest* r) { unavailable(); }

#endif
