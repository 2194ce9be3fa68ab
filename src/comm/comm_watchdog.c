/* comm_watchdog.c: ending a job whose rank stopped answering; see comm_watchdog_start in comm.h.
**
** A thread per rank sends a heartbeat every HEARTBEAT_S seconds on a communicator of its own:
** rank 0 to every rank, every other rank to rank 0. Rank 0 watches all ranks, the others watch
** rank 0. A rank whose heartbeats stop for the timeout (a stopped process, a hung host) is
** named and the job is aborted, whatever the main threads are blocked in. Separately, a training
** step that makes no progress for the step timeout aborts the job (a deadlock with every process
** alive). A checkpoint write is not a step: while one runs (comm_watchdog_checkpoint) the step
** bound is off and the write has its own, and the heartbeat says so (its tag is the phase), so a
** rank's silence is reported with what it was doing. At the end every rank sends a last message
** (tag STOP) and drains its watched ranks up to theirs, so no message is left unreceived at
** MPI_Finalize. Needs MPI_THREAD_MULTIPLE. */
#include <math.h>
#include <mpi.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "comm/comm.h"
#include "core/util.h"

#define HEARTBEAT_S 0.25
/* Heartbeat tags: the sender's phase (training or idle; writing a checkpoint), or its end. */
enum { TAG_BEAT = 1, TAG_STOP = 2, TAG_BEAT_CHECKPOINT = 3 };

static struct {
  int running, stop;
  pthread_t thread;
  pthread_mutex_t lock;
  MPI_Comm comm;
  int rank, size;
  double timeout_s, step_timeout_s;
  double* last_seen;    /* per rank: when its last heartbeat arrived (watched ranks only) */
  int* last_tag;        /* per rank: the tag of that heartbeat (its phase) */
  char (*host)[64];     /* per rank: its host's name, for the messages */
  long step;            /* the step in progress (-1: none; the step timeout is off) */
  double step_since;    /* when it began */
  double ckpt_bound_s;  /* > 0: a checkpoint write is in progress, with this bound */
  double ckpt_since;    /* when it began */
} wd = {.lock = PTHREAD_MUTEX_INITIALIZER, .step = -1};

/* Prints why the job ends and aborts every rank. */
static void wd_abort(const char* why) {
  fprintf(stderr, "osdp: error: %s\n", why);
  fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, 6);
}

/* Sends this rank's heartbeat (or its last message) to every rank it is watched by. */
static void wd_send(int tag) {
  static int beat; /* content unused; one buffer for the eager sends */
  for (int r = 0; r < wd.size; r++) {
    if (r == wd.rank || (wd.rank != 0 && r != 0)) continue;
    MPI_Request req;
    MPI_Isend(&beat, 1, MPI_INT, r, tag, wd.comm, &req);
    MPI_Request_free(&req);
  }
}

/* Receives every heartbeat that has arrived; returns how many watched ranks have sent STOP. */
static int wd_receive(int* stopped) {
  int flag = 1, beat;
  MPI_Status st;
  while (flag) {
    MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, wd.comm, &flag, &st);
    if (!flag) break;
    MPI_Recv(&beat, 1, MPI_INT, st.MPI_SOURCE, st.MPI_TAG, wd.comm, MPI_STATUS_IGNORE);
    wd.last_seen[st.MPI_SOURCE] = now_seconds();
    wd.last_tag[st.MPI_SOURCE] = st.MPI_TAG;
    if (st.MPI_TAG == TAG_STOP) stopped[st.MPI_SOURCE] = 1;
  }
  int n = 0;
  for (int r = 0; r < wd.size; r++) n += stopped[r];
  return n;
}

/* What the main thread is doing, as the watchdog thread reads it under the lock. */
typedef struct WdState {
  long step;
  double since, ckpt_bound_s, ckpt_since;
} WdState;

/* The bounds, checked once a heartbeat period: a watched rank silent for the timeout, a step
** without progress, a checkpoint write past its bound. Each aborts the job naming the rank. */
static void wd_check(const WdState* st, const int* stopped, double now) {
  char why[400];
  double quiet = 0; /* the longest any watched rank has been silent */
  int writing = st->ckpt_bound_s > 0; /* this rank or a watched one is writing a checkpoint */
  for (int r = 0; r < wd.size; r++) {
    if (r == wd.rank || (wd.rank != 0 && r != 0) || stopped[r]) continue;
    if (now - wd.last_seen[r] > quiet) quiet = now - wd.last_seen[r];
    writing |= wd.last_tag[r] == TAG_BEAT_CHECKPOINT;
    if (now - wd.last_seen[r] > wd.timeout_s) {
      snprintf(why, sizeof why, "rank %d on host %s has not answered for %.0f s%s: it was stopped, "
               "died, its host hangs or the network to it is cut; ending the job (--watchdog %.0f)",
               r, wd.host[r], now - wd.last_seen[r],
               wd.last_tag[r] == TAG_BEAT_CHECKPOINT ? " (while writing a checkpoint)"
               : st->step >= 0 ? " (during a training step)" : "", wd.timeout_s);
      wd_abort(why);
    }
  }
  /* A stall is blamed on a hung collective only while every watched rank answers: a rank silent
  ** for a few heartbeats is more likely stopped, and is named above when its silence reaches the
  ** timeout. A step waiting for a rank that writes a checkpoint is not stalled. */
  if (quiet >= 4 * HEARTBEAT_S) return;
  /* Rank 0 watches every rank and names the silent one; another rank sees only rank 0 and would
  ** blame a stall on a hung collective. It waits twice as long, a backup for when rank 0 is gone. */
  double late = wd.rank == 0 ? 1 : 2;
  if (st->ckpt_bound_s > 0 && now - st->ckpt_since > late * st->ckpt_bound_s) {
    snprintf(why, sizeof why, "rank %d on host %s: writing a checkpoint has made no progress for %.0f s "
             "though every rank answers (bound %.0f s: --watchdog plus 4x its expected time; a hung "
             "disk or file system); ending the job", wd.rank, wd.host[wd.rank], now - st->ckpt_since,
             st->ckpt_bound_s);
    wd_abort(why);
  }
  if (st->step >= 0 && !writing && now - st->since > late * wd.step_timeout_s) {
    snprintf(why, sizeof why, "rank %d on host %s: step %ld has made no progress for %.0f s though "
             "every rank answers (a hung collective or device); ending the job (--watchdog %.0f)",
             wd.rank, wd.host[wd.rank], st->step, now - st->since, wd.timeout_s);
    wd_abort(why);
  }
}

/* The watchdog thread: heartbeats out, heartbeats in, the bounds. */
static void* wd_main(void* arg) {
  (void)arg;
  int* stopped = calloc((size_t)wd.size, sizeof *stopped);
  if (!stopped) return NULL;
  int watched = wd.rank == 0 ? wd.size - 1 : 1;
  double last_tick = now_seconds();
  for (;;) {
    pthread_mutex_lock(&wd.lock);
    int stop = wd.stop;
    WdState st = {wd.step, wd.step_since, wd.ckpt_bound_s, wd.ckpt_since};
    pthread_mutex_unlock(&wd.lock);
    if (stop) break;
    wd_send(st.ckpt_bound_s > 0 ? TAG_BEAT_CHECKPOINT : TAG_BEAT);
    wd_receive(stopped);
    double now = now_seconds();
    if (now - last_tick > wd.timeout_s / 2) {
      /* This process itself was frozen (stopped, then continued): its clocks say nothing about
      ** the others; start them again. */
      for (int r = 0; r < wd.size; r++) wd.last_seen[r] = now;
      pthread_mutex_lock(&wd.lock);
      if (wd.step >= 0) wd.step_since = now;
      if (wd.ckpt_bound_s > 0) wd.ckpt_since = now;
      st.since = wd.step_since;
      st.ckpt_since = wd.ckpt_since;
      pthread_mutex_unlock(&wd.lock);
    }
    last_tick = now;
    wd_check(&st, stopped, now);
    struct timespec ts = {0, (long)(HEARTBEAT_S * 1e9)};
    nanosleep(&ts, NULL);
  }
  /* The end: a last message to the watchers, then everything up to the watched ranks' last. */
  wd_send(TAG_STOP);
  while (wd_receive(stopped) < watched) {
    struct timespec ts = {0, 1000000};
    nanosleep(&ts, NULL);
  }
  free(stopped);
  return NULL;
}

/* Frees the per-rank tables. */
static void wd_free(void) {
  free(wd.last_seen);
  free(wd.last_tag);
  free(wd.host);
  wd.last_seen = NULL;
  wd.last_tag = NULL;
  wd.host = NULL;
}

int comm_watchdog_start(double timeout_s) {
  if (wd.running || comm_size() == 1) return 0;
  int provided = 0;
  MPI_Query_thread(&provided);
  if (provided < MPI_THREAD_MULTIPLE)
    return osdp_fail("--watchdog: this MPI does not support threads (MPI_THREAD_MULTIPLE); use "
                     "--watchdog 0");
  wd.rank = comm_rank();
  wd.size = comm_size();
  wd.timeout_s = timeout_s;
  wd.step_timeout_s = timeout_s;
  wd.last_seen = malloc((size_t)wd.size * sizeof *wd.last_seen);
  wd.last_tag = calloc((size_t)wd.size, sizeof *wd.last_tag);
  wd.host = calloc((size_t)wd.size, sizeof *wd.host);
  if (!wd.last_seen || !wd.last_tag || !wd.host) {
    wd_free();
    return osdp_fail("out of host memory");
  }
  double now = now_seconds();
  for (int r = 0; r < wd.size; r++) wd.last_seen[r] = now;
  MPI_Comm_dup(MPI_COMM_WORLD, &wd.comm);
  char me[64] = "?";
  int len = 0;
  char name[MPI_MAX_PROCESSOR_NAME];
  if (MPI_Get_processor_name(name, &len) == MPI_SUCCESS) snprintf(me, sizeof me, "%.63s", name);
  MPI_Allgather(me, sizeof me, MPI_CHAR, wd.host, sizeof me, MPI_CHAR, wd.comm);
  wd.stop = 0;
  if (pthread_create(&wd.thread, NULL, wd_main, NULL)) {
    MPI_Comm_free(&wd.comm);
    wd_free();
    return osdp_fail("--watchdog: cannot start its thread");
  }
  wd.running = 1;
  return 0;
}

void comm_watchdog_step(long step, double median_step_s) {
  if (!wd.running) return;
  pthread_mutex_lock(&wd.lock);
  wd.step = step;
  wd.step_since = now_seconds();
  /* Generous: ten times the typical step, never under the timeout itself. Before any step was
  ** timed, ten times the timeout: a first step warms up (page faults over every buffer, library
  ** start-up) and takes several times a later one (gpt2-124m zero3 on 2 ranks: 5.3 s, then 1.1). */
  double t = 10 * (median_step_s > 0 ? median_step_s : wd.timeout_s);
  wd.step_timeout_s = t > wd.timeout_s ? t : wd.timeout_s;
  pthread_mutex_unlock(&wd.lock);
}

void comm_watchdog_checkpoint(double bound_s) {
  if (!wd.running) return;
  pthread_mutex_lock(&wd.lock);
  wd.ckpt_bound_s = bound_s > 0 ? bound_s : 0;
  wd.ckpt_since = now_seconds();
  wd.step_since = wd.ckpt_since; /* the step bound excludes the checkpoint's time */
  pthread_mutex_unlock(&wd.lock);
}

void comm_watchdog_stop(void) {
  if (!wd.running) return;
  pthread_mutex_lock(&wd.lock);
  wd.stop = 1;
  pthread_mutex_unlock(&wd.lock);
  pthread_join(wd.thread, NULL);
  MPI_Comm_free(&wd.comm);
  wd_free();
  wd.running = 0;
}
