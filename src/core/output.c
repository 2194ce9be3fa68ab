/* output.c: output files that never replace special files, symlinks or inputs; see output.h. */
#include "core/output.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/files.h"
#include "core/util.h"

/* Copies the directory part of path into dir ("." when it has none). */
static void dir_of(const char* path, char* dir, size_t n) {
  const char* slash = strrchr(path, '/');
  if (!slash) snprintf(dir, n, ".");
  else if (slash == path) snprintf(dir, n, "/");
  else snprintf(dir, n, "%.*s", (int)(slash - path), path);
}

int out_resolve(const char* path, const char* field, char out[OUT_PATH_MAX]) {
  char cur[OUT_PATH_MAX], link[OUT_PATH_MAX], dir[OUT_PATH_MAX];
  if (snprintf(cur, sizeof cur, "%s", path) >= (int)sizeof cur)
    return osdp_fail("%s: path '%.64s...' is too long", field, path);
  for (int hops = 0; hops < 40; hops++) {
    struct stat st;
    if (lstat(cur, &st) != 0 || !S_ISLNK(st.st_mode)) {
      memcpy(out, cur, sizeof cur);
      return 0;
    }
    ssize_t n = readlink(cur, link, sizeof link - 1);
    if (n < 0) return osdp_fail("%s: cannot read the link '%s': %s", field, cur, strerror(errno));
    link[n] = 0;
    dir_of(cur, dir, sizeof dir);
    int len = link[0] == '/' ? snprintf(cur, sizeof cur, "%s", link)
                             : snprintf(cur, sizeof cur, "%s/%s", dir, link);
    if (len >= (int)sizeof cur) return osdp_fail("%s: the link '%s' leads to a path too long", field, path);
  }
  return osdp_fail("%s: '%s': too many levels of symbolic links", field, path);
}

/* fsyncs the directory holding path, so a rename into it survives a crash (best effort). */
static void sync_dir_of(const char* path) {
  char dir[OUT_PATH_MAX];
  dir_of(path, dir, sizeof dir);
  int fd = open(dir, O_RDONLY);
  if (fd < 0) return;
  (void)fsync(fd);
  close(fd);
}

/* How long an output waits for a fifo's reader before it gives up, in seconds. */
#define OUT_FIFO_WAIT_S 5.0

/* Opens the special file target (a device, fifo or socket) for writing without ever blocking
** for long: a fifo without a reader is retried for OUT_FIFO_WAIT_S, then refused. The stream,
** or NULL with an error naming field and path. */
static FILE* open_special(const char* target, const char* path, const char* field, const char* mode) {
  double t0 = now_seconds();
  int fd;
  while ((fd = open(target, O_WRONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC)) < 0 && errno == ENXIO &&
         now_seconds() - t0 < OUT_FIFO_WAIT_S)
    usleep(50 * 1000);
  if (fd < 0) {
    if (errno == ENXIO)
      osdp_fail("%s: '%s' is a fifo that no process reads (waited %.0f s); start its reader "
                "first, or give a file", field, path, OUT_FIFO_WAIT_S);
    else
      osdp_fail("%s: cannot write '%s': %s", field, path, strerror(errno));
    return NULL;
  }
  int fl = fcntl(fd, F_GETFL);
  FILE* f = fl >= 0 && fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) == 0 ? fdopen(fd, mode) : NULL;
  if (!f) {
    osdp_fail("%s: cannot write '%s': %s", field, path, strerror(errno));
    close(fd);
  }
  return f;
}

FILE* out_open_stream(const char* path, const char* field) {
  char target[OUT_PATH_MAX];
  struct stat st;
  if (out_resolve(path, field, target)) return NULL;
  int there = stat(target, &st) == 0;
  if (there && S_ISDIR(st.st_mode)) {
    osdp_fail("%s: '%s' is a directory; give a file name", field, path);
    return NULL;
  }
  if (there && !S_ISREG(st.st_mode)) return open_special(target, path, field, "w");
  FILE* f = fopen(target, "w");
  if (!f) osdp_fail("%s: cannot write '%s': %s", field, path, strerror(errno));
  return f;
}

int out_open(OutFile* o, const char* path, const char* field, const char* mode) {
  memset(o, 0, sizeof *o);
  o->field = field;
  snprintf(o->path, sizeof o->path, "%s", path);
  if (out_resolve(path, field, o->target)) return -1;
  struct stat st;
  if (stat(o->target, &st) == 0 && S_ISDIR(st.st_mode))
    return osdp_fail("%s: '%s' is a directory; give a file name", field, path);
  if (stat(o->target, &st) == 0 && !S_ISREG(st.st_mode)) { /* a device, fifo or socket */
    o->f = open_special(o->target, path, field, mode);
    return o->f ? 0 : -1;
  }
  snprintf(o->tmp, sizeof o->tmp, "%s.tmp-%ld", o->target, (long)getpid());
  /* The temporary file is new (O_EXCL), never a link someone put at its predictable name; one
  ** of this pid left by a killed run (a regular file) is replaced. */
  if (lstat(o->tmp, &st) == 0 && S_ISREG(st.st_mode)) unlink(o->tmp);
  int fd = open(o->tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
  o->f = fd >= 0 ? fdopen(fd, mode) : NULL;
  if (!o->f && fd >= 0) { close(fd); unlink(o->tmp); }
  if (!o->f) {
    int e = errno;
    o->tmp[0] = 0;
    return osdp_fail("%s: cannot write '%s': %s", field, path, strerror(e));
  }
  return 0;
}

int out_commit(OutFile* o) {
  if (!o->f) return osdp_fail("%s: '%s' is not open", o->field, o->path);
  int bad = fflush(o->f) != 0 || ferror(o->f), err = bad ? (errno ? errno : EIO) : 0;
  if (!bad && o->tmp[0] && fsync(fileno(o->f))) { bad = 1; err = errno; }
  if (fclose(o->f) && !bad) { bad = 1; err = errno; }
  o->f = NULL;
  if (!bad && o->tmp[0] && rename(o->tmp, o->target)) { bad = 1; err = errno; }
  if (bad) {
    if (o->tmp[0]) unlink(o->tmp);
    return osdp_fail("%s: writing '%s' failed: %s; the previous file, if any, is unchanged",
                     o->field, o->path, strerror(err));
  }
  if (o->tmp[0]) sync_dir_of(o->target);
  return 0;
}

void out_abort(OutFile* o) {
  if (o->f) fclose(o->f);
  o->f = NULL;
  if (o->tmp[0]) unlink(o->tmp);
  o->tmp[0] = 0;
}

int out_check_writable(const char* path, const char* field) {
  char target[OUT_PATH_MAX];
  struct stat st;
  if (out_resolve(path, field, target)) return -1;
  /* A special file is only checked, not opened: opening a fifo waits for its reader. */
  if (stat(target, &st) == 0 && !S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode))
    return access(target, W_OK) ? osdp_fail("%s: cannot write '%s': %s", field, path, strerror(errno)) : 0;
  OutFile o;
  if (out_open(&o, path, field, "w")) return -1;
  out_abort(&o);
  return 0;
}

/* ---- Claims: the command's inputs and outputs ---------------------------------------------- */

#define OUT_MAX_CLAIMS 32

/* One registered file: its identity (device and inode when it exists, else its absolute
** resolved path), its option and whether it is an output. */
typedef struct Claim {
  int exists;
  dev_t dev;
  ino_t ino;
  char canon[OUT_PATH_MAX];
  char path[256];
  char field[48];
  int output;
} Claim;

static Claim claims[OUT_MAX_CLAIMS];
static int nclaims;

void out_claims_reset(void) { nclaims = 0; }

/* Fills c's identity from path (resolved through symlinks). Returns 0, or -1 with an error. */
static int identify(const char* path, const char* field, Claim* c) {
  char target[OUT_PATH_MAX], dir[OUT_PATH_MAX], real[PATH_MAX];
  if (out_resolve(path, field, target)) return -1;
  struct stat st;
  c->exists = stat(target, &st) == 0;
  if (c->exists) {
    c->dev = st.st_dev;
    c->ino = st.st_ino;
    return 0;
  }
  dir_of(target, dir, sizeof dir);
  const char* base = strrchr(target, '/') ? strrchr(target, '/') + 1 : target;
  if (!realpath(dir, real)) snprintf(real, sizeof real, "%s", dir);
  if (strlen(real) + 1 + strlen(base) >= sizeof c->canon)
    return osdp_fail("%s: path '%.64s...' is too long", field, path);
  memcpy(c->canon, real, strlen(real));
  c->canon[strlen(real)] = '/';
  memcpy(c->canon + strlen(real) + 1, base, strlen(base) + 1);
  return 0;
}

/* Whether two claims name the same file. */
static int same_file(const Claim* a, const Claim* b) {
  if (a->exists != b->exists) return 0;
  return a->exists ? a->dev == b->dev && a->ino == b->ino : strcmp(a->canon, b->canon) == 0;
}

/* Registers path under field; an output that is the same file as a registered one fails. */
static int claim(const char* path, const char* field, int output) {
  if (!path || !*path) return 0;
  Claim c = {.output = output};
  snprintf(c.path, sizeof c.path, "%s", path);
  snprintf(c.field, sizeof c.field, "%s", field);
  if (identify(path, field, &c)) return -1;
  if (!output && !c.exists) return 0;
  struct stat st;
  int special = c.exists && stat(path, &st) == 0 && !S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode);
  if (special && !output) /* read, a fifo would block and a device never ends */
    return osdp_fail("%s: '%s' is a %s, not a regular file; give a file", field, path,
                     file_kind(st.st_mode));
  for (int i = 0; i < nclaims && !special; i++) {
    if (!same_file(&claims[i], &c) || (!output && !claims[i].output)) continue;
    const Claim* out = claims[i].output ? &claims[i] : &c;
    const Claim* in = claims[i].output ? &c : &claims[i];
    if (claims[i].output && output)
      return osdp_fail("%s '%s' and %s '%s' are the same file; give each output its own path",
                       claims[i].field, claims[i].path, field, path);
    return osdp_fail("%s '%s' is the same file as the input %s '%s'; writing it would destroy "
                     "that input: choose another output path", out->field, out->path, in->field,
                     in->path);
  }
  if (nclaims == OUT_MAX_CLAIMS) return 0;
  claims[nclaims++] = c;
  return 0;
}

int out_claim_input(const char* path, const char* field) { return claim(path, field, 0); }
int out_claim_output(const char* path, const char* field) { return claim(path, field, 1); }

int out_close_stdout(void) {
  int bad = fflush(stdout) != 0 || ferror(stdout);
  int err = errno;
  if (fclose(stdout) && !bad) { bad = 1; err = errno; }
  if (bad) return osdp_fail("writing standard output failed: %s", strerror(err ? err : EIO));
  return 0;
}
