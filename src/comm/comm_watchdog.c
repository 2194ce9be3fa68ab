/* comm_watchdog.c: ending a job whose rank stopped answering; see comm_watchdog_start in comm.h.
**
** A thread per rank sends a heartbeat every HEARTBEAT_S seconds on a communicator of its own:
** rank 0 to every rank, every other rank to rank 0. Rank 0 watches all ranks, the others watch
** rank 0. A rank whose heartbeats stop for the timeout (a stopped process, a hung host) is
** named and the job is aborted, whatever the main threads are blocked in. Separately, a training
** step that makes no progress for the step timeout aborts the job (a deadlock with every process
** alive). At the end every rank sends a last message (tag STOP) and drains its watched ranks up
** to theirs, so no message is left unreceived at MPI_Finalize. Needs MPI_THREAD_MULTIPLE. */
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
enum { TAG_BEAT = 1, TAG_STOP = 2 };

static struct {
  int running, stop;
  pthread_t thread;
  pthread_mutex_t lock;
  MPI_Comm comm;
  int rank, size;
  double timeout_s, step_timeout_s;
  double* last_seen;    /* per rank: when its last heartbeat arrived (watched ranks only) */
  long step;            /* the step in progress (-1: none; the step timeout is off) */
  double step_since;    /* when it began */
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
    if (st.MPI_TAG == TAG_STOP) stopped[st.MPI_SOURCE] = 1;
  }
  int n = 0;
  for (int r = 0; r < wd.size; r++) n += stopped[r];
  return n;
}

/* The watchdog thread: heartbeats out, heartbeats in, both timeouts. */
static void* wd_main(void* arg) {
  (void)arg;
  int* stopped = calloc((size_t)wd.size, sizeof *stopped);
  if (!stopped) return NULL;
  int watched = wd.rank == 0 ? wd.size - 1 : 1;
  char why[400];
  double last_tick = now_seconds();
  for (;;) {
    pthread_mutex_lock(&wd.lock);
    int stop = wd.stop;
    long step = wd.step;
    double since = wd.step_since;
    pthread_mutex_unlock(&wd.lock);
    if (stop) break;
    wd_send(TAG_BEAT);
    wd_receive(stopped);
    double now = now_seconds();
    if (now - last_tick > wd.timeout_s / 2) {
      /* This process itself was frozen (stopped, then continued): its clocks say nothing about
      ** the others; start them again. */
      for (int r = 0; r < wd.size; r++) wd.last_seen[r] = now;
      pthread_mutex_lock(&wd.lock);
      if (wd.step >= 0) wd.step_since = now;
      since = wd.step_since;
      pthread_mutex_unlock(&wd.lock);
    }
    last_tick = now;
    double quiet = 0; /* the longest any watched rank has been silent */
    for (int r = 0; r < wd.size; r++) {
      if (r == wd.rank || (wd.rank != 0 && r != 0) || stopped[r]) continue;
      if (now - wd.last_seen[r] > quiet) quiet = now - wd.last_seen[r];
      if (now - wd.last_seen[r] > wd.timeout_s) {
        snprintf(why, sizeof why, "rank %d has not answered for %.0f s%s: it was stopped, died or "
                 "its host hangs; ending the job (--watchdog %.0f)", r, now - wd.last_seen[r],
                 step >= 0 ? " (during a training step)" : "", wd.timeout_s);
        wd_abort(why);
      }
    }
    /* A stalled step is blamed on a hung collective only while every watched rank answers: a
    ** rank silent for a few heartbeats is more likely stopped, and is named by the check above
    ** when its silence reaches the timeout. */
    if (step >= 0 && now - since > wd.step_timeout_s && quiet < 4 * HEARTBEAT_S) {
      snprintf(why, sizeof why, "rank %d: step %ld has made no progress for %.0f s though every rank "
               "answers (a hung collective or device); ending the job (--watchdog %.0f)", wd.rank,
               step, now - since, wd.timeout_s);
      wd_abort(why);
    }
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
  if (!wd.last_seen) return osdp_fail("out of host memory");
  double now = now_seconds();
  for (int r = 0; r < wd.size; r++) wd.last_seen[r] = now;
  MPI_Comm_dup(MPI_COMM_WORLD, &wd.comm);
  wd.stop = 0;
  if (pthread_create(&wd.thread, NULL, wd_main, NULL)) {
    MPI_Comm_free(&wd.comm);
    free(wd.last_seen);
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
  /* Generous: ten times the typical step, never under the timeout itself. */
  double t = 10 * median_step_s;
  wd.step_timeout_s = t > wd.timeout_s ? t : wd.timeout_s;
  pthread_mutex_unlock(&wd.lock);
}

void comm_watchdog_stop(void) {
  if (!wd.running) return;
  pthread_mutex_lock(&wd.lock);
  wd.stop = 1;
  pthread_mutex_unlock(&wd.lock);
  pthread_join(wd.thread, NULL);
  MPI_Comm_free(&wd.comm);
  free(wd.last_seen);
  wd.last_seen = NULL;
  wd.running = 0;
}
