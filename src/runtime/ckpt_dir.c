/* ckpt_dir.c: a checkpoint directory belongs to one run; see ckpt_dir.h. */
#include "runtime/ckpt_dir.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "comm/comm.h"
#include "core/files.h"
#include "core/util.h"

/* Every rank returns rank 0's verdict on rc (rank 0's message is the one printed). */
static int agree(int rc, const char* what) {
  double worst = comm_allreduce_max_f64(comm_world(), rc ? 1.0 : 0.0);
  if (worst > 0 && !rc) osdp_fail("--checkpoint: rank 0 could not %s", what);
  return worst > 0 ? -1 : 0;
}

/* Rank 0: opens and locks path/.osdp-lock (never through a link) and writes who holds it. */
static int take_lock(CkptDir* cd) {
  char lp[4096 + 32];
  snprintf(lp, sizeof lp, "%s/.osdp-lock", cd->path);
  int fd = open(lp, O_RDWR | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0666);
  struct stat st = {0};
  if (fd < 0 && errno == ELOOP)
    return osdp_fail("--checkpoint: %s is a symbolic link, which osdp neither writes nor follows "
                     "there; remove it", lp);
  if (fd < 0)
    return osdp_fail("--checkpoint: cannot write in %s (%s: %s); give a directory you can write", cd->path,
                     lp, strerror(errno));
  if (fstat(fd, &st) || !S_ISREG(st.st_mode)) {
    close(fd);
    return osdp_fail("--checkpoint: %s is a %s, not osdp's lock file; remove it", lp,
                     file_kind(st.st_mode));
  }
  if (flock(fd, LOCK_EX | LOCK_NB)) {
    char who[256] = "";
    ssize_t got = pread(fd, who, sizeof who - 1, 0);
    who[got > 0 ? got : 0] = 0;
    who[strcspn(who, "\n")] = 0;
    close(fd);
    return osdp_fail("--checkpoint: %s is in use by another osdp run (%s); wait for it to end, or "
                     "checkpoint into another directory", cd->path, who[0] ? who : "holder unknown");
  }
  char host[128] = "?", line[400], when[64];
  gethostname(host, sizeof host - 1);
  time_t now = time(NULL);
  strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S UTC", gmtime(&now));
  int n = snprintf(line, sizeof line, "pid %ld on host %s since %s\n", (long)getpid(), host, when);
  if (ftruncate(fd, 0) || pwrite(fd, line, (size_t)n, 0) != n) {
    int err = errno;
    close(fd);
    return osdp_fail("--checkpoint: cannot write %s: %s", lp, strerror(err));
  }
  cd->lock_fd = fd;
  return 0;
}

int ckpt_dir_open(CkptDir* cd, const char* path, int keep) {
  memset(cd, 0, sizeof *cd);
  cd->lock_fd = -1;
  cd->keep = keep;
  int rc = snprintf(cd->path, sizeof cd->path, "%s", path) >= (int)sizeof cd->path
               ? osdp_fail("--checkpoint: path too long") : 0;
  if (!rc && comm_rank() == 0) rc = make_dirs(cd->path, "--checkpoint") || take_lock(cd);
  if (!rc && comm_rank() == 0) train_state_sweep(cd->path);
  return agree(rc, "lock the checkpoint directory");
}

void ckpt_dir_close(CkptDir* cd) {
  if (cd->lock_fd >= 0) close(cd->lock_fd); /* releases the flock */
  cd->lock_fd = -1;
}

/* What an entry named step-N of the directory is, for the run of cd. */
typedef enum { ENTRY_OWN, ENTRY_NEWER, ENTRY_FOREIGN, ENTRY_LINK, ENTRY_OTHER } EntryKind;

/* Classifies path (an entry step-<step>) against cd's run and start_step; a foreign run's id
** goes into id. Reads only the manifest, never through a link. */
static EntryKind classify(const CkptDir* cd, const char* path, long step, long start_step,
                          char id[TRAIN_RUN_ID_MAX]) {
  struct stat st;
  id[0] = 0;
  if (lstat(path, &st)) return ENTRY_OTHER;
  if (S_ISLNK(st.st_mode)) return ENTRY_LINK;
  long mstep;
  if (!S_ISDIR(st.st_mode) || train_state_peek(path, id, &mstep)) {
    osdp_clear_error();
    return ENTRY_OTHER;
  }
  int own = strcmp(id, cd->run_id) == 0 || (cd->legacy_own && id[0] == 0);
  if (!own) return ENTRY_FOREIGN;
  return step > start_step ? ENTRY_NEWER : ENTRY_OWN;
}

/* The error for entry `name` of kind k (not ENTRY_OWN) when --checkpoint-overwrite is not given. */
static int refuse(const CkptDir* cd, EntryKind k, const char* name, const char* id, long start_step,
                  int more) {
  char also[64] = "";
  if (more > 0) snprintf(also, sizeof also, ", and %d more", more);
  if (k == ENTRY_FOREIGN)
    return osdp_fail("--checkpoint: %s holds checkpoints of another run (%s of run %s%s); continue "
                     "that run with --resume %s, train into a new directory, or pass "
                     "--checkpoint-overwrite to delete them", cd->path, name, id[0] ? id : "(no id)",
                     also, cd->path);
  if (k == ENTRY_NEWER)
    return osdp_fail("--checkpoint: %s holds %s of this run, newer than step %ld this run continues "
                     "from%s: the two histories would mix; checkpoint into a new directory, or pass "
                     "--checkpoint-overwrite to delete them", cd->path, name, start_step, also);
  if (k == ENTRY_LINK)
    return osdp_fail("--checkpoint: %s/%s is a symbolic link, which osdp neither writes nor follows "
                     "there; move it away%s or checkpoint into another directory", cd->path, name,
                     " (--checkpoint-overwrite removes the link, not its target)");
  return osdp_fail("--checkpoint: %s/%s is not an osdp checkpoint; move it away or checkpoint into "
                   "another directory (osdp deletes only checkpoints it wrote)", cd->path, name);
}

/* With --checkpoint-overwrite: deletes entry path of kind k (a checkpoint or a link; anything
** else is refused), with a note. */
static int clear_entry(const CkptDir* cd, EntryKind k, const char* path, const char* name, const char* id) {
  if (k == ENTRY_OTHER) return refuse(cd, k, name, id, 0, 0);
  if (k == ENTRY_LINK ? unlink(path) != 0 : train_state_remove(path) != 0)
    return osdp_fail("--checkpoint-overwrite: could not remove %s: %s", path,
                     k == ENTRY_LINK ? strerror(errno) : osdp_last_error());
  fprintf(stderr, "osdp: note: --checkpoint-overwrite: removed %s (%s)\n", path,
          k == ENTRY_LINK ? "a link; its target is untouched" : k == ENTRY_NEWER ? "newer, of this run" : "another run's");
  return 0;
}

int ckpt_dir_claim(CkptDir* cd, const char* run_id, long start_step, int legacy_own, int overwrite) {
  snprintf(cd->run_id, sizeof cd->run_id, "%s", run_id);
  cd->legacy_own = legacy_own;
  int rc = 0;
  if (comm_rank() == 0) {
    int n = 0, bad = 0;
    long* steps = train_state_list(cd->path, &n);
    EntryKind first = ENTRY_OWN;
    char first_name[64] = "", first_id[TRAIN_RUN_ID_MAX] = "";
    for (int i = n - 1; i >= 0 && !rc; i--) { /* oldest first */
      char path[4096 + 64], name[40], id[TRAIN_RUN_ID_MAX];
      snprintf(name, sizeof name, "step-%ld", steps[i]);
      snprintf(path, sizeof path, "%s/%s", cd->path, name);
      EntryKind k = classify(cd, path, steps[i], start_step, id);
      if (k == ENTRY_OWN) continue;
      if (overwrite) { rc = clear_entry(cd, k, path, name, id); continue; }
      if (bad++) continue;
      first = k; /* the oldest is named in the error */
      snprintf(first_name, sizeof first_name, "%s", name);
      snprintf(first_id, sizeof first_id, "%s", id);
    }
    free(steps);
    if (!rc && bad) rc = refuse(cd, first, first_name, first_id, start_step, bad - 1);
  }
  return agree(rc, "use the checkpoint directory");
}

void ckpt_dir_prune(const CkptDir* cd) {
  if (comm_rank() != 0 || cd->keep <= 0) return;
  int n = 0, kept = 0;
  long* steps = train_state_list(cd->path, &n);
  for (int i = 0; i < n; i++) { /* newest first */
    char path[4096 + 64], id[TRAIN_RUN_ID_MAX];
    snprintf(path, sizeof path, "%s/step-%ld", cd->path, steps[i]);
    EntryKind k = classify(cd, path, steps[i], steps[i], id);
    if (k != ENTRY_OWN || ++kept <= cd->keep) continue;
    if (train_state_remove(path)) {
      fprintf(stderr, "osdp: note: --keep: %s\n", osdp_last_error());
      osdp_clear_error();
    }
  }
  free(steps);
}

void ckpt_new_run_id(char out[TRAIN_RUN_ID_MAX]) {
  unsigned char b[16];
  if (getrandom(b, sizeof b, 0) != (ssize_t)sizeof b) { /* no kernel randomness: time and pid */
    unsigned long long t = (unsigned long long)time(NULL) ^ ((unsigned long long)getpid() << 32);
    for (int i = 0; i < 16; i++) { t = t * 6364136223846793005ULL + 1442695040888963407ULL; b[i] = (unsigned char)(t >> 56); }
  }
  comm_bcast(comm_world(), b, sizeof b);
  for (int i = 0; i < 16; i++) snprintf(out + 2 * i, 3, "%02x", b[i]);
}
