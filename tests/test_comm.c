/*
** test_comm.c: the communicators and collectives of comm.h. Run under mpirun with an even
** number of ranks (2, 4 and 6 in the suite), on one host.
**  - comm_host is the whole job, comm_ranks_per_host the world size; comm_group(2) holds world
**    ranks 2g, 2g+1 and comm_across(2) the ranks of one parity, each with the right size, rank
**    and members (gathered);
**  - fp32 reduce-scatter and all-reduce on a group give the sums (to rounding), blocking and not,
**    adding into the shard or overwriting it;
**  - bf16 reductions equal, bit for bit, what their contract says: every contribution rounded
**    to bf16 (here by an independent rounding through nearbyint), the parts summed in fp32 in
**    rank order, and for an all-reduce the sums rounded to bf16 again;
**  - the all-gathers (in place, into, non-blocking) deliver every rank's shard, for a shard of
**    one element, an odd one and one of several chunks; the reductions at a size of several
**    chunks too;
**  - the same on backend_cpu_staged (buffers declared device memory: host staging);
**  - all of it again with OSDP_COMM_GATHER=exchange (the suite's comm_4_exchange): the gathers
**    as chunked all-to-alls, as on communicators that span hosts;
**  - each communicator counts its own calls and bytes.
*/
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "comm/comm.h"
#include "core/util.h"

/* bf16 rounding of a float, to nearest even, independently of comm_mpi.c's bit trick: keep 8
** significant bits with nearbyint (the default rounding mode rounds half to even). */
static float ref_bf16(float x) {
  if (x == 0 || !isfinite(x)) return x;
  int e = ilogb(x);
  return (float)ldexp(nearbyint(ldexp((double)x, 7 - e)), e - 7);
}

/* The value world rank r contributes at element i of a test buffer. */
static float contribution(int r, size_t i) {
  Rng g;
  rng_seed(&g, 7919u * (uint64_t)(r + 1) + (uint64_t)i);
  return (float)((rng_uniform(&g) - 0.5) * 3.0 * (1 + (double)(i % 7)));
}

/* Checks a communicator's shape: size, this rank's place and its members' world ranks. */
static void check_members(Comm* c, int size, int rank, const int* members) {
  CHECK_MSG(comm_size_of(c) == size, "%s: size %d, expected %d", comm_name(c), comm_size_of(c), size);
  CHECK_MSG(comm_rank_in(c) == rank, "%s: rank %d, expected %d", comm_name(c), comm_rank_in(c), rank);
  float me = (float)comm_rank(), all[64];
  comm_allgather_into_f32(c, &me, all, 1);
  for (int i = 0; i < size && i < 64; i++)
    CHECK_MSG((int)all[i] == members[i], "%s: member %d is world rank %d, expected %d", comm_name(c),
              i, (int)all[i], members[i]);
}

/* The reductions over communicator c, whose members are world ranks members[0..N): fp32 exact
** sums, then bf16 against the contract, blocking and non-blocking. */
static void check_reductions(Comm* c, const int* members, size_t SH, const char* what) {
  int N = comm_size_of(c), me = comm_rank_in(c);
  /* A communicator of one sends nothing, so nothing is rounded either. */
  int rounds = N > 1;
  size_t n = (size_t)N * SH;
  float* full = malloc(n * sizeof(float));
  float* ref = malloc(n * sizeof(float));
  float* acc = malloc(SH * sizeof(float));
  float* want = malloc(SH * sizeof(float));
  if (!full || !ref || !acc || !want) { CHECK(0); free(full); free(ref); free(acc); free(want); return; }
  for (int dt = 0; dt < 2; dt++) {
    for (int blocking = 0; blocking < 2; blocking++) {
      /* Reduce-scatter: blocking adds this rank's part into acc = 1; non-blocking overwrites
      ** acc (NaN before: nothing of it may survive). */
      int accumulate = blocking;
      for (size_t i = 0; i < n; i++) full[i] = contribution(comm_rank(), i);
      for (size_t i = 0; i < SH; i++) {
        float s = 0;
        for (int r = 0; r < N; r++) {
          float x = contribution(members[r], (size_t)me * SH + (size_t)i);
          s += dt && rounds ? ref_bf16(x) : x;
        }
        acc[i] = accumulate ? 1.0f : NAN;
        want[i] = (accumulate ? 1.0f : 0.0f) + s;
      }
      CommDtype t = dt ? COMM_BF16 : COMM_FP32;
      if (blocking) {
        comm_reduce_scatter_f32(c, full, acc, SH, t, accumulate);
      } else {
        CommRequest rq;
        comm_ireduce_scatter_f32(c, full, acc, SH, t, accumulate, &rq);
        while (!comm_test(&rq)) {}
      }
      int bad = 0;
      /* fp32: MPI may sum in any order, so within rounding; bf16: exactly the contract. */
      for (size_t i = 0; i < SH; i++)
        bad += dt ? !(acc[i] == want[i]) : !(fabsf(acc[i] - want[i]) <= 1e-5f * (1 + fabsf(want[i])));
      CHECK_MSG(!bad, "%s: %s %s reduce-scatter: %d elements off (first %.9g vs %.9g)", what,
                dt ? "bf16" : "fp32", blocking ? "blocking" : "non-blocking", bad, acc[0], want[0]);
      /* All-reduce of n elements. */
      for (size_t i = 0; i < n; i++) {
        float s = 0;
        for (int r = 0; r < N; r++) {
          float x = contribution(members[r], i);
          s += dt && rounds ? ref_bf16(x) : x;
        }
        ref[i] = dt && rounds ? ref_bf16(s) : s;
        full[i] = contribution(comm_rank(), i);
      }
      if (blocking && !dt) {
        comm_allreduce_f32(c, full, n);
      } else {
        CommRequest rq;
        comm_iallreduce_f32(c, full, n, t, &rq);
        if (blocking) comm_wait(&rq);
        else while (!comm_test(&rq)) {}
      }
      bad = 0;
      for (size_t i = 0; i < n; i++)
        bad += dt ? full[i] != ref[i] : fabsf(full[i] - ref[i]) > 1e-5f * (1 + fabsf(ref[i]));
      CHECK_MSG(!bad, "%s: %s %s all-reduce: %d elements off (first %.9g vs %.9g)", what,
                dt ? "bf16" : "fp32", blocking ? "waited" : "tested", bad, full[0], ref[0]);
    }
  }
  free(full);
  free(ref);
  free(acc);
  free(want);
}

/* The all-gathers over c (members as above) of a shard of SH elements: in place, into another
** buffer, and non-blocking (tested until done); each must deliver every rank's shard exactly. */
static void check_gathers(Comm* c, const int* members, size_t SH, const char* what) {
  int N = comm_size_of(c), me = comm_rank_in(c);
  size_t n = (size_t)N * SH;
  float* full = malloc(n * sizeof(float));
  float* shard = malloc(SH * sizeof(float));
  if (!full || !shard) { CHECK(0); free(full); free(shard); return; }
  static const char* names[3] = {"in place", "into", "non-blocking"};
  for (int way = 0; way < 3; way++) {
    for (size_t i = 0; i < n; i++) full[i] = NAN;
    for (size_t i = 0; i < SH; i++) shard[i] = contribution(comm_rank(), (size_t)me * SH + i);
    if (way == 0) {
      memcpy(full + (size_t)me * SH, shard, SH * sizeof(float));
      comm_allgather_f32(c, full, SH);
    } else if (way == 1) {
      comm_allgather_into_f32(c, shard, full, SH);
    } else {
      CommRequest rq;
      comm_iallgather_into_f32(c, shard, full, SH, &rq);
      while (!comm_test(&rq)) {}
    }
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) bad += full[i] != contribution(members[i / SH], i);
    CHECK_MSG(!bad, "%s: %s all-gather of %zu per rank: %zu elements off", what, names[way], SH, bad);
  }
  free(full);
  free(shard);
}

/* Every collective over c at a few sizes: one element, an odd size, several chunks. */
static void check_comm(Comm* c, const int* members, const char* what) {
  size_t sizes[3] = {1, 37, ((size_t)1 << 20) / (size_t)comm_size_of(c) + 5};
  for (int s = 0; s < 3; s++) {
    check_gathers(c, members, sizes[s], what);
    if (s) check_reductions(c, members, sizes[s], what);
  }
}

int main(int argc, char** argv) {
  comm_init(&argc, &argv);
  int W = comm_size(), R = comm_rank();
  if (W % 2 || W > 64) {
    if (R == 0) fprintf(stderr, "test_comm: run with an even number of ranks (<= 64)\n");
    comm_finalize();
    return 2;
  }
  int members[64];
  for (int i = 0; i < W; i++) members[i] = i;
  check_members(comm_world(), W, R, members);
  check_members(comm_host(), W, R, members); /* the suite runs on one host */
  CHECK_MSG(comm_ranks_per_host() == W, "ranks per host %d, expected %d", comm_ranks_per_host(), W);
  Comm* g = comm_group(2);
  Comm* a = comm_across(2);
  CHECK(comm_group(2) == g && comm_across(2) == a && comm_group(W) == comm_world() &&
        comm_across(1) == comm_world());
  int gm[2] = {R - R % 2, R - R % 2 + 1}, am[32];
  for (int i = 0; i < W / 2; i++) am[i] = 2 * i + R % 2;
  check_members(g, 2, R % 2, gm);
  check_members(a, W / 2, R / 2, am);

  for (int staged = 0; staged < 2; staged++) {
    comm_use_backend(staged ? backend_cpu_staged() : backend_cpu());
    const char* where = staged ? "staged" : "direct";
    char what[64];
    snprintf(what, sizeof what, "world, %s", where);
    check_comm(comm_world(), members, what);
    snprintf(what, sizeof what, "group of 2, %s", where);
    check_comm(g, gm, what);
    snprintf(what, sizeof what, "across groups of 2, %s", where);
    check_comm(a, am, what);
  }
  comm_use_backend(NULL);

  /* Counters: a gather on the group counts there only (on 4 ranks or more, where the group is
  ** not the world and the groups are more than one rank apart). */
  if (W >= 4) {
    comm_reset_stats();
    float one = 1, two[2];
    comm_allgather_into_f32(g, &one, two, 1);
    CommStats gs = comm_stats_of(g), ws = comm_stats_of(comm_world()), all = comm_stats();
    CHECK(gs.calls[COMM_ALLGATHER] == 1 && gs.bytes[COMM_ALLGATHER] == 8.0);
    CHECK(ws.calls[COMM_ALLGATHER] == 0 && all.calls[COMM_ALLGATHER] == 1);
    CommRequest rq;
    float buf[10] = {0};
    comm_iallreduce_f32(a, buf, 10, COMM_BF16, &rq);
    comm_wait(&rq);
    CHECK(comm_stats_of(a).calls[COMM_ALLREDUCE] == 1 && comm_stats_of(a).bytes[COMM_ALLREDUCE] == 20.0);
  }

  int rc = check_summary();
  rc = (int)comm_allreduce_max_f64(comm_world(), rc);
  comm_finalize();
  return rc;
}
