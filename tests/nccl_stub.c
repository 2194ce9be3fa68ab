/*
** nccl_stub.c: a stand-in for libnccl.so.2 for the NCCL tests on machines without a GPU
** (tests/nccl.cmake): every function comm_nccl.c looks up, doing nothing and succeeding.
** Built twice: as it is, and with NCCL_STUB_OLD lacking ncclAllGather (a NCCL too old to use).
** NCCL_STUB_FAIL=id makes ncclGetUniqueId fail; NCCL_STUB_FAIL=init:R makes ncclCommInitRank
** fail on rank R, NCCL_STUB_FAIL=slow:R makes it take 4 s there (a rank still inside it while
** another has failed); nccl_stub_aborts counts ncclCommAbort calls.
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <nccl.h>

int nccl_stub_aborts;

/* Whether NCCL_STUB_FAIL is `what`. */
static int failing(const char* what) {
  const char* v = getenv("NCCL_STUB_FAIL");
  return v && strcmp(v, what) == 0;
}

ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  memset(id, 7, sizeof *id);
  return failing("id") ? ncclSystemError : ncclSuccess;
}

ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank) {
  char mine[32];
  (void)nranks;
  (void)id;
  snprintf(mine, sizeof mine, "slow:%d", rank);
  if (failing(mine)) sleep(4);
  snprintf(mine, sizeof mine, "init:%d", rank);
  *comm = (ncclComm_t)(size_t)(rank + 1);
  return failing(mine) ? ncclSystemError : ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) { (void)comm; return ncclSuccess; }
ncclResult_t ncclCommAbort(ncclComm_t comm) { (void)comm; nccl_stub_aborts++; return ncclSuccess; }

ncclResult_t ncclAllReduce(const void* s, void* r, size_t n, ncclDataType_t t, ncclRedOp_t op,
                           ncclComm_t c, cudaStream_t st) {
  (void)s; (void)r; (void)n; (void)t; (void)op; (void)c; (void)st;
  return ncclSuccess;
}

#ifndef NCCL_STUB_OLD
ncclResult_t ncclAllGather(const void* s, void* r, size_t n, ncclDataType_t t, ncclComm_t c,
                           cudaStream_t st) {
  (void)s; (void)r; (void)n; (void)t; (void)c; (void)st;
  return ncclSuccess;
}
#endif

ncclResult_t ncclReduceScatter(const void* s, void* r, size_t n, ncclDataType_t t, ncclRedOp_t op,
                               ncclComm_t c, cudaStream_t st) {
  (void)s; (void)r; (void)n; (void)t; (void)op; (void)c; (void)st;
  return ncclSuccess;
}

const char* ncclGetErrorString(ncclResult_t r) { return r == ncclSuccess ? "no error" : "stub failure"; }
ncclResult_t ncclGetVersion(int* v) { *v = 22809; return ncclSuccess; }
