/* comm_startup.c: a bound on a job's start-up; see comm_startup_guard in comm.h.
**
** Before MPI_Init returns there is no communicator, so no heartbeat: a rank that never joins (a
** stopped process, a host that hangs) would keep every other rank in MPI_Init forever. A thread
** started before MPI_Init waits for comm_startup_done; past the bound it names what it can see
** and ends this process, which makes the launcher (mpirun) end the whole job. What it can see
** without MPI: this rank, and the ranks of the same job on this host, found by their
** environment in /proc, with their state (a stopped one is named as stopped). */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "comm/comm.h"
#include "core/util.h"

static struct {
  pthread_mutex_t lock;
  pthread_cond_t cond;
  pthread_t thread;
  int running, done;
  double bound_s;
} g = {.lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER};

/* The value of variable name in the NUL-separated environment block env[0..n), or NULL. */
static const char* env_value(const char* env, size_t n, const char* name) {
  size_t k = strlen(name);
  for (size_t i = 0; i < n; i += strlen(env + i) + 1)
    if (strncmp(env + i, name, k) == 0 && env[i + k] == '=') return env + i + k + 1;
  return NULL;
}

/* Reads /proc/<pid>/environ into buf (NUL-terminated); its length, or 0. */
static size_t read_environ(const char* pid, char* buf, size_t cap) {
  char path[300];
  snprintf(path, sizeof path, "/proc/%s/environ", pid);
  FILE* f = fopen(path, "rb");
  size_t n = f ? fread(buf, 1, cap - 1, f) : 0;
  if (f) fclose(f);
  buf[n] = 0;
  return n;
}

/* The state letter of process pid (/proc/<pid>/stat: R, S, D, T stopped, ...), or '?'. */
static char proc_state(const char* pid) {
  char path[300], line[512];
  snprintf(path, sizeof path, "/proc/%s/stat", pid);
  FILE* f = fopen(path, "r");
  char* s = f ? fgets(line, sizeof line, f) : NULL;
  if (f) fclose(f);
  char* close_paren = s ? strrchr(s, ')') : NULL; /* "pid (comm) S ..." */
  return close_paren && close_paren[1] == ' ' ? close_paren[2] : '?';
}

/* Appends to out the ranks of job `ns` on this host that are stopped (state T or t), as
** "rank R (pid P) is stopped; ", and ends them: the job is over, and a stopped process would
** outlive it (the launcher's SIGTERM waits, pending, until it runs again). Returns how many. */
static int stopped_ranks(const char* ns, char* out, size_t cap) {
  static char env[1 << 16];
  DIR* d = opendir("/proc");
  int found = 0;
  struct dirent* e;
  while (d && (e = readdir(d)) != NULL) {
    if (!isdigit((unsigned char)e->d_name[0]) || atol(e->d_name) == (long)getpid()) continue;
    size_t n = read_environ(e->d_name, env, sizeof env);
    const char *job = env_value(env, n, "PMIX_NAMESPACE"), *rank = env_value(env, n, "PMIX_RANK");
    if (!job || !rank || strcmp(job, ns) != 0) continue;
    char st = proc_state(e->d_name);
    if (st != 'T' && st != 't') continue;
    size_t used = strlen(out);
    snprintf(out + used, cap - used, "rank %s (pid %s) is stopped (ended); ", rank, e->d_name);
    kill((pid_t)atol(e->d_name), SIGKILL);
    found++;
  }
  if (d) closedir(d);
  return found;
}

/* Past the bound: prints what this rank sees and ends the process (the launcher ends the job). */
static void startup_expired(void) {
  const char *rank = getenv("PMIX_RANK"), *size = getenv("OMPI_COMM_WORLD_SIZE");
  const char* ns = getenv("PMIX_NAMESPACE");
  char host[64] = "?", seen[1024] = "";
  gethostname(host, sizeof host - 1);
  if (!ns || stopped_ranks(ns, seen, sizeof seen) == 0)
    snprintf(seen, sizeof seen, "a rank did not join (stopped, killed, or its host unreachable; "
             "none of this host's is stopped); ");
  fprintf(stderr, "osdp: error: rank %s of %s (host %s): the job's start-up did not finish within "
          "%g s (--watchdog): %sthe job ends\n", rank ? rank : "?", size ? size : "?", host,
          g.bound_s, seen);
  fflush(stderr);
  _exit(6);
}

/* The guard thread: waits for comm_startup_done until the bound. */
static void* startup_thread(void* arg) {
  (void)arg;
  struct timespec until;
  clock_gettime(CLOCK_REALTIME, &until);
  until.tv_sec += (time_t)g.bound_s;
  until.tv_nsec += (long)((g.bound_s - (double)(time_t)g.bound_s) * 1e9);
  if (until.tv_nsec >= 1000000000L) { until.tv_sec++; until.tv_nsec -= 1000000000L; }
  pthread_mutex_lock(&g.lock);
  int rc = 0;
  while (!g.done && rc != ETIMEDOUT) rc = pthread_cond_timedwait(&g.cond, &g.lock, &until);
  int expired = !g.done;
  pthread_mutex_unlock(&g.lock);
  if (expired) startup_expired();
  return NULL;
}

int comm_startup_guard(double bound_s) {
  const char* size = getenv("OMPI_COMM_WORLD_SIZE");
  if (!(bound_s > 0) || !size || atoi(size) <= 1) return 0; /* one process: nothing to wait for */
  g.bound_s = bound_s;
  if (pthread_create(&g.thread, NULL, startup_thread, NULL) != 0)
    return osdp_fail("cannot start the start-up watchdog thread: %s", strerror(errno));
  g.running = 1;
  return 0;
}

void comm_startup_done(void) {
  if (!g.running) return;
  pthread_mutex_lock(&g.lock);
  g.done = 1;
  pthread_cond_signal(&g.cond);
  pthread_mutex_unlock(&g.lock);
  pthread_join(g.thread, NULL);
  g.running = 0;
}
