/* comm_nccl.c: the collectives on NCCL for ranks that each own a GPU; see comm_nccl.h. */
#include "comm/comm_nccl.h"

#include <stdio.h>

#ifdef OSDP_HAVE_NCCL

#include <cuda_runtime.h>
#include <dlfcn.h>
#include <mpi.h>
#include <nccl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The NCCL functions osdp calls, loaded from libnccl.so.2. */
typedef struct NcclApi {
  ncclResult_t (*get_unique_id)(ncclUniqueId*);
  ncclResult_t (*comm_init_rank)(ncclComm_t*, int, ncclUniqueId, int);
  ncclResult_t (*comm_destroy)(ncclComm_t);
  ncclResult_t (*all_reduce)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t);
  ncclResult_t (*all_gather)(const void*, void*, size_t, ncclDataType_t, ncclComm_t, cudaStream_t);
  ncclResult_t (*reduce_scatter)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t);
  const char* (*error_string)(ncclResult_t);
} NcclApi;

static NcclApi g_api;
static void* g_lib;
static ncclComm_t g_comm;
static cudaStream_t g_compute, g_stream; /* the backend's compute stream; NCCL's own */
static int g_rank;

/* Stops every rank after a failed NCCL or CUDA call (a collective cannot be retried alone). */
static void fail(const char* what, const char* why) {
  fprintf(stderr, "osdp: error: NCCL: %s: %s\n", what, why);
  comm_abort(5);
}

#define NCCL_CHECK(call) do { ncclResult_t r_ = (call); \
  if (r_ != ncclSuccess) fail(#call, g_api.error_string(r_)); } while (0)
#define CUDA_CHECK(call) do { cudaError_t e_ = (call); \
  if (e_ != cudaSuccess) fail(#call, cudaGetErrorString(e_)); } while (0)

/* Loads libnccl.so.2 and its functions; 0, or -1 with *why set. */
static int load_nccl(const char** why) {
  g_lib = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
  if (!g_lib) { *why = "libnccl.so.2 not found"; return -1; }
  void** slots[] = {(void**)&g_api.get_unique_id, (void**)&g_api.comm_init_rank,
                    (void**)&g_api.comm_destroy, (void**)&g_api.all_reduce,
                    (void**)&g_api.all_gather, (void**)&g_api.reduce_scatter,
                    (void**)&g_api.error_string};
  const char* names[] = {"ncclGetUniqueId", "ncclCommInitRank", "ncclCommDestroy", "ncclAllReduce",
                         "ncclAllGather", "ncclReduceScatter", "ncclGetErrorString"};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    *slots[i] = dlsym(g_lib, names[i]);
    if (!*slots[i]) { *why = "libnccl.so.2 lacks a function osdp needs"; return -1; }
  }
  return 0;
}

/* Whether two ranks of one host share a GPU: every rank's "host/PCI bus id" gathered and compared. */
static int gpus_shared(int size) {
  enum { ID = 128 };
  char me[ID] = {0}, bus[32] = {0};
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetPCIBusId(bus, sizeof bus, dev) != cudaSuccess)
    return 1;
  gethostname(me, 64);
  me[63] = 0;
  snprintf(me + strlen(me), (size_t)ID - strlen(me), "/%s", bus);
  char* all = calloc((size_t)size, ID);
  if (!all) return 1;
  MPI_Allgather(me, ID, MPI_CHAR, all, ID, MPI_CHAR, MPI_COMM_WORLD);
  int shared = 0;
  for (int i = 0; i < size && !shared; i++)
    for (int j = i + 1; j < size && !shared; j++) shared = strcmp(all + (size_t)i * ID, all + (size_t)j * ID) == 0;
  free(all);
  return shared;
}

int comm_nccl_init(const Backend* bk, int rank, int size) {
  const char* why = NULL;
  int ok = size > 1 && bk->compute_stream && getenv("OSDP_COMM") == NULL;
  if (!ok) why = size > 1 ? "OSDP_COMM is set" : "one rank";
  if (ok && gpus_shared(size)) { ok = 0; why = "ranks share a GPU"; }
  int loaded = ok ? load_nccl(&why) == 0 : 0;
  /* Every rank must agree, or some would call NCCL and others MPI. */
  int all = 0;
  MPI_Allreduce(&loaded, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (!all) {
    if (rank == 0 && getenv("OSDP_COMM_VERBOSE"))
      fprintf(stderr, "osdp: collectives over MPI with host staging (%s)\n", why ? why : "a rank cannot load NCCL");
    return 0;
  }
  ncclUniqueId id;
  if (rank == 0) NCCL_CHECK(g_api.get_unique_id(&id));
  MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
  NCCL_CHECK(g_api.comm_init_rank(&g_comm, size, id, rank));
  g_compute = (cudaStream_t)bk->compute_stream();
  CUDA_CHECK(cudaStreamCreateWithFlags(&g_stream, cudaStreamNonBlocking));
  g_rank = rank;
  if (rank == 0 && getenv("OSDP_COMM_VERBOSE")) fprintf(stderr, "osdp: collectives over NCCL\n");
  return 1;
}

void comm_nccl_finalize(void) {
  if (g_comm) g_api.comm_destroy(g_comm);
  if (g_stream) cudaStreamDestroy(g_stream);
  g_comm = NULL;
  g_stream = NULL;
}

/* Makes the communication stream wait for everything queued on the compute stream so far. */
static void after_compute(void) {
  cudaEvent_t ev;
  CUDA_CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
  CUDA_CHECK(cudaEventRecord(ev, g_compute));
  CUDA_CHECK(cudaStreamWaitEvent(g_stream, ev, 0));
  CUDA_CHECK(cudaEventDestroy(ev));
}

/* Records the end of the collective just queued and makes the compute stream wait for it;
** returns the event (for a request), or NULL after destroying it. */
static cudaEvent_t before_compute(int keep) {
  cudaEvent_t ev;
  CUDA_CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
  CUDA_CHECK(cudaEventRecord(ev, g_stream));
  CUDA_CHECK(cudaStreamWaitEvent(g_compute, ev, 0));
  if (keep) return ev;
  CUDA_CHECK(cudaEventDestroy(ev));
  return NULL;
}

void comm_nccl_allreduce(float* buf, size_t n) {
  after_compute();
  NCCL_CHECK(g_api.all_reduce(buf, buf, n, ncclFloat32, ncclSum, g_comm, g_stream));
  before_compute(0);
  CUDA_CHECK(cudaStreamSynchronize(g_stream));
}

void comm_nccl_iallreduce(float* buf, size_t n, CommRequest* r) {
  after_compute();
  NCCL_CHECK(g_api.all_reduce(buf, buf, n, ncclFloat32, ncclSum, g_comm, g_stream));
  r->mpi = before_compute(1);
}

int comm_nccl_test(CommRequest* r) {
  cudaError_t e = cudaEventQuery((cudaEvent_t)r->mpi);
  if (e == cudaErrorNotReady) return 0;
  if (e != cudaSuccess) fail("cudaEventQuery", cudaGetErrorString(e));
  CUDA_CHECK(cudaEventDestroy((cudaEvent_t)r->mpi));
  r->mpi = NULL;
  return 1;
}

void comm_nccl_wait(CommRequest* r) {
  CUDA_CHECK(cudaEventSynchronize((cudaEvent_t)r->mpi));
  CUDA_CHECK(cudaEventDestroy((cudaEvent_t)r->mpi));
  r->mpi = NULL;
}

void comm_nccl_allgather(const float* shard, float* full, size_t shard_n) {
  after_compute();
  NCCL_CHECK(g_api.all_gather(shard, full, shard_n, ncclFloat32, g_comm, g_stream));
  before_compute(0);
  CUDA_CHECK(cudaStreamSynchronize(g_stream));
}

void comm_nccl_iallgather(const float* shard, float* full, size_t shard_n, CommRequest* r) {
  after_compute();
  NCCL_CHECK(g_api.all_gather(shard, full, shard_n, ncclFloat32, g_comm, g_stream));
  r->mpi = before_compute(1);
}

void comm_nccl_reduce_scatter(float* full, size_t shard_n) {
  after_compute();
  /* In place as NCCL defines it: this rank's result lands at full + rank * shard_n. */
  NCCL_CHECK(g_api.reduce_scatter(full, full + (size_t)g_rank * shard_n, shard_n, ncclFloat32,
                                  ncclSum, g_comm, g_stream));
  before_compute(0);
  CUDA_CHECK(cudaStreamSynchronize(g_stream));
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

#endif
