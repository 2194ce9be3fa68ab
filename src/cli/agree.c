/* agree.c: the ranks of a job check that they run the same command on the same inputs; see
** cli.h. A difference (mpirun's "A : B" form, a launcher passing per-rank flags, a file that is
** not the same on every host) would otherwise train wrong losses and exit 0. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "comm/comm.h"
#include "core/util.h"

/* FNV-1a 64 of a string, continued from h, with its NUL (so "ab","c" differs from "a","bc"). */
static uint64_t hash_text(uint64_t h, const char* s) { return fnv1a64(h, s, strlen(s) + 1); }

/* Collective: whether some rank's h differs from rank 0's; the lowest such rank into *rank and
** how many into *count. */
static int disagree(uint64_t h, int* rank, int* count) {
  uint64_t h0 = h;
  comm_bcast(comm_world(), &h0, sizeof h0);
  int differs = h != h0, size = comm_size();
  *count = (int)comm_allreduce_f64(comm_world(), differs ? 1.0 : 0.0);
  *rank = size - (int)comm_allreduce_max_f64(comm_world(), differs ? (double)(size - comm_rank()) : 0.0);
  return *count > 0;
}

#define SHOWN 160 /* bytes of a rank's text shown in a message */

/* Collective: rank r's text s (its first SHOWN - 1 bytes) into out[SHOWN] on every rank; a
** sum in which only rank r's bytes are non-zero. */
static void text_of_rank(int r, const char* s, char out[SHOWN]) {
  double v[SHOWN] = {0};
  for (int i = 0; comm_rank() == r && s[i] && i < SHOWN - 1; i++) v[i] = (unsigned char)s[i];
  comm_allreduce_f64_array(comm_world(), v, SHOWN);
  for (int i = 0; i < SHOWN; i++) out[i] = (char)(int)v[i];
  out[SHOWN - 1] = 0;
}

/* What argument i of argv is, for a message: "--flag value", "--switch", or "nothing". */
static void describe_arg(int argc, char** argv, int i, char* out, size_t n) {
  if (i >= argc) { snprintf(out, n, "nothing there"); return; }
  int is_flag = strncmp(argv[i], "--", 2) == 0;
  if (!is_flag && i > 0 && strncmp(argv[i - 1], "--", 2) == 0) snprintf(out, n, "%s %s", argv[i - 1], argv[i]);
  else if (is_flag && i + 1 < argc && strncmp(argv[i + 1], "--", 2)) snprintf(out, n, "%s %s", argv[i], argv[i + 1]);
  else snprintf(out, n, "%s", argv[i]);
}

int cli_ranks_agree_args(int argc, char** argv) {
  if (comm_size() == 1) return 0;
  uint64_t h = FNV1A64_START;
  for (int i = 1; i < argc; i++) h = hash_text(h, argv[i]); /* argv[0]: paths may differ by host */
  int r, count;
  if (!disagree(h, &r, &count)) return 0;
  /* The first argument that differs, looked for together (each look is collective). */
  int most = (int)comm_allreduce_max_f64(comm_world(), (double)argc), at = 0;
  for (at = 1; at < most; at++)
    if (disagree(hash_text(FNV1A64_START, at < argc ? argv[at] : "\x01"), &r, &count)) break;
  char mine[SHOWN], first[SHOWN], other[SHOWN];
  describe_arg(argc, argv, at, mine, sizeof mine);
  text_of_rank(0, mine, first);
  text_of_rank(r, mine, other);
  return osdp_fail("the ranks were started with different arguments: rank 0 has %s, rank %d has %s "
                   "(%d of %d ranks differ from rank 0); start every rank with the same osdp command "
                   "line", first, r, other, count, comm_size());
}

int cli_ranks_agree(const char* what, const char* value) {
  if (comm_size() == 1) return 0;
  int r, count;
  if (!disagree(hash_text(FNV1A64_START, value), &r, &count)) return 0;
  char first[SHOWN], other[SHOWN];
  text_of_rank(0, value, first);
  text_of_rank(r, value, other);
  if (strlen(value) < SHOWN - 1 && strlen(first) < SHOWN - 1)
    return osdp_fail("the ranks disagree on %s: rank 0 has %s, rank %d has %s (%d of %d ranks differ); "
                     "give every rank the same files (on every host)", what, first[0] ? first : "none",
                     r, other[0] ? other : "none", count, comm_size());
  return osdp_fail("the ranks disagree on %s: rank %d's differs from rank 0's (%d of %d ranks "
                   "differ); give every rank the same files (on every host)", what, r, count, comm_size());
}
