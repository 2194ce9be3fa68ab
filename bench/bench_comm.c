/*
** bench_comm.c: the gradient collectives of comm.h at training sizes, on the world and on the
** shard groups, fp32 and bf16, blocking and non-blocking (started, then tested until done, as
** the engine does between operators). Prints the median of REPS runs per size, the slowest
** rank's time. Not part of CTest; built as build/bench_comm:
**   mpirun -np 2 build/bench_comm [MB ...]   (default 4 16 64 160: 160 MB is GPT-2 124M's wte)
** Use it to see what a reduce dtype or a collective costs on this machine before planning.
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"
#include "core/util.h"

enum { REPS = 5, KINDS = 7 };

static const char* kind_names[KINDS] = {"reduce-scatter", "ireduce-scatter", "ireduce-scatter bf16",
                                        "allreduce", "iallreduce", "iallreduce bf16", "allgather"};

/* Runs collective `kind` once on c over buf (n floats; shard has n / size floats), waiting for
** it (a non-blocking one tested until done); returns the slowest rank's seconds. */
static double run_once(Comm* c, int kind, float* buf, float* shard, size_t n) {
  size_t sh = n / (size_t)comm_size_of(c);
  CommRequest q;
  comm_barrier(comm_world());
  double t0 = now_seconds();
  switch (kind) {
    case 0: comm_reduce_scatter_f32(c, buf, shard, sh, COMM_FP32, 0); break;
    case 1: comm_ireduce_scatter_f32(c, buf, shard, sh, COMM_FP32, 0, &q); while (!comm_test(&q)) {} break;
    case 2: comm_ireduce_scatter_f32(c, buf, shard, sh, COMM_BF16, 0, &q); while (!comm_test(&q)) {} break;
    case 3: comm_allreduce_f32(c, buf, n); break;
    case 4: comm_iallreduce_f32(c, buf, n, COMM_FP32, &q); while (!comm_test(&q)) {} break;
    case 5: comm_iallreduce_f32(c, buf, n, COMM_BF16, &q); while (!comm_test(&q)) {} break;
    default: comm_allgather_f32(c, buf, sh); break;
  }
  return comm_allreduce_max_f64(comm_world(), now_seconds() - t0);
}

/* Prints one row per collective kind for communicator c at every size. */
static void bench_comm(Comm* c, const double* mb, int nsizes) {
  if (comm_size_of(c) < 2) return;
  if (comm_rank() == 0) {
    printf("%s (%d ranks): median ms of %d runs (GB/s of the full buffer)\n", comm_name(c),
           comm_size_of(c), REPS);
    printf("  %-22s", "collective");
    for (int s = 0; s < nsizes; s++) printf(" %14.0f MB", mb[s]);
    printf("\n");
  }
  for (int k = 0; k < KINDS; k++) {
    if (comm_rank() == 0) printf("  %-22s", kind_names[k]);
    for (int s = 0; s < nsizes; s++) {
      size_t n = (size_t)(mb[s] * 1e6 / 4) / (size_t)comm_size_of(c) * (size_t)comm_size_of(c);
      float* buf = malloc(n * sizeof(float));
      float* shard = malloc(n / (size_t)comm_size_of(c) * sizeof(float) + 4);
      if (!buf || !shard) { fprintf(stderr, "bench_comm: out of memory\n"); comm_abort(2); }
      double t[REPS];
      for (int r = 0; r < REPS; r++) {
        for (size_t i = 0; i < n; i++) buf[i] = (float)(i % 13) * 0.25f;
        t[r] = run_once(c, k, buf, shard, n);
      }
      double med = median_of(t, REPS);
      if (comm_rank() == 0) printf(" %8.1f (%5.1f)", 1e3 * med, 4.0 * (double)n / med / 1e9);
      free(buf);
      free(shard);
    }
    if (comm_rank() == 0) printf("\n");
  }
}

int main(int argc, char** argv) {
  if (comm_init(&argc, &argv)) { fprintf(stderr, "%s\n", osdp_last_error()); return 1; }
  double mb[16] = {4, 16, 64, 160};
  int nsizes = 4;
  if (argc > 1) {
    nsizes = 0;
    for (int i = 1; i < argc && nsizes < 16; i++) {
      mb[nsizes] = atof(argv[i]);
      if (mb[nsizes] <= 0) {
        if (comm_rank() == 0) fprintf(stderr, "bench_comm: size '%s' is not a positive MB count\n", argv[i]);
        comm_finalize();
        return 2;
      }
      nsizes++;
    }
  }
  bench_comm(comm_world(), mb, nsizes);
  if (comm_size() % 2 == 0 && comm_size() > 2) {
    bench_comm(comm_group(2), mb, nsizes);
    bench_comm(comm_across(2), mb, nsizes);
  }
  comm_finalize();
  return 0;
}
