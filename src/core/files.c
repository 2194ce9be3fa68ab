/* files.c: inputs that cannot block, and osdp's own files never reached through a link; see
** files.h. */
#include "core/files.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/util.h"

const char* file_kind(mode_t m) {
  if (S_ISREG(m)) return "regular file";
  if (S_ISDIR(m)) return "directory";
  if (S_ISFIFO(m)) return "fifo";
  if (S_ISCHR(m)) return "character device";
  if (S_ISBLK(m)) return "block device";
  if (S_ISSOCK(m)) return "socket";
  if (S_ISLNK(m)) return "symbolic link";
  return "special file";
}

/* The error for a file at path of mode m where a regular file belongs. */
static int not_regular(const char* what, const char* path, mode_t m) {
  if (S_ISLNK(m))
    return osdp_fail("%s: '%s' is a symbolic link, which osdp does not follow here; remove it", what,
                     path);
  return osdp_fail("%s: '%s' is a %s, not a regular file; give a file", what, path, file_kind(m));
}

/* Turns fd (opened O_NONBLOCK and checked regular) back into blocking mode and wraps it in a
** stream; NULL with an error (fd closed). */
static FILE* blocking_stream(int fd, const char* what, const char* path) {
  int fl = fcntl(fd, F_GETFL);
  FILE* f = fl >= 0 && fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) == 0 ? fdopen(fd, "rb") : NULL;
  if (!f) {
    int e = errno;
    close(fd);
    osdp_fail("%s: cannot read '%s': %s", what, path, strerror(e));
  }
  return f;
}

FILE* file_open_read(const char* path, const char* what, int flags) {
  struct stat st = {0};
  int nofollow = flags & FILE_NOFOLLOW;
  /* Refused before open() where possible: opening some devices acts on them. */
  if ((nofollow ? lstat(path, &st) : stat(path, &st)) == 0 && !S_ISREG(st.st_mode)) {
    not_regular(what, path, st.st_mode);
    return NULL;
  }
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC | (nofollow ? O_NOFOLLOW : 0));
  if (fd < 0) {
    if (errno == ELOOP && nofollow) not_regular(what, path, S_IFLNK);
    else osdp_fail("%s: cannot open '%s': %s", what, path, strerror(errno));
    return NULL;
  }
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) { /* replaced since the stat */
    close(fd);
    not_regular(what, path, st.st_mode);
    return NULL;
  }
  return blocking_stream(fd, what, path);
}

/* Reads all of stream f (at most max_bytes) as a string; NULL with an error naming what. */
static char* read_stream(FILE* f, size_t max_bytes, const char* what, const char* hint) {
  struct stat st;
  size_t size = fstat(fileno(f), &st) == 0 && st.st_size >= 0 ? (size_t)st.st_size : 0;
  if (size > max_bytes) size = max_bytes;
  char* text = malloc(size + 2);
  size_t n = text ? fread(text, 1, size + 1, f) : 0; /* + 1: a file that grew shows it */
  int err = ferror(f);
  fclose(f);
  if (!text || err || n > max_bytes) {
    char lim[32];
    if (!text) osdp_fail("%s: out of memory", what);
    else if (err) osdp_fail("%s: read error", what);
    else osdp_fail("%s: larger than %s; %s", what, format_bytes((double)max_bytes, lim), hint);
    free(text);
    return NULL;
  }
  text[n] = 0;
  return text;
}

char* file_read_text(const char* path, size_t max_bytes, const char* what, const char* hint,
                     int flags) {
  FILE* f = file_open_read(path, what, flags);
  return f ? read_stream(f, max_bytes, what, hint) : NULL;
}

FILE* file_create_new(const char* path, const char* what) {
  int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  FILE* f = fd >= 0 ? fdopen(fd, "wb") : NULL;
  if (!f) {
    osdp_fail("%s: cannot create '%s': %s", what, path, strerror(errno));
    if (fd >= 0) close(fd);
  }
  return f;
}

/* Opens directory dir for the *at() calls; -1 with an error naming what. */
static int open_dir(const char* dir, const char* what) {
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) {
    int e = errno;
    osdp_fail("%s: cannot open the directory '%s': %s", what, dir, strerror(e));
    errno = e; /* for the caller: ENOENT, no directory yet */
  }
  return fd;
}

char* file_own_read(const char* dir, const char* name, size_t max_bytes, const char* what,
                    int* absent) {
  char path[4400];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  *absent = 0;
  int dfd = open_dir(dir, what);
  if (dfd < 0) {
    *absent = errno == ENOENT;
    if (*absent) osdp_clear_error();
    return NULL;
  }
  struct stat st = {0};
  int fd = -1;
  if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0) {
    *absent = errno == ENOENT;
    if (!*absent) osdp_fail("%s: cannot read '%s': %s", what, path, strerror(errno));
  } else if (!S_ISREG(st.st_mode)) {
    not_regular(what, path, st.st_mode);
  } else if ((fd = openat(dfd, name, O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_NOCTTY | O_CLOEXEC)) < 0) {
    osdp_fail("%s: cannot open '%s': %s", what, path, strerror(errno));
  } else if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    not_regular(what, path, st.st_mode);
    close(fd);
    fd = -1;
  }
  close(dfd);
  FILE* f = fd >= 0 ? blocking_stream(fd, what, path) : NULL;
  return f ? read_stream(f, max_bytes, what, "not a file osdp wrote; remove it") : NULL;
}

/* Writes n bytes of data to fd, fsyncs and closes it; 0, or -1 with errno set. */
static int write_all(int fd, const char* data, size_t n) {
  while (n > 0) {
    ssize_t w = write(fd, data, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      int e = w < 0 ? errno : EIO;
      close(fd);
      errno = e;
      return -1;
    }
    data += w;
    n -= (size_t)w;
  }
  if (fsync(fd) != 0) {
    int e = errno;
    close(fd);
    errno = e;
    return -1;
  }
  return close(fd);
}

int file_own_write(const char* dir, const char* name, const void* data, size_t n, const char* what) {
  char path[4400], tmp[300];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  snprintf(tmp, sizeof tmp, "%s.tmp-%ld", name, (long)getpid());
  int dfd = open_dir(dir, what);
  if (dfd < 0) return -1;
  struct stat st;
  if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && !S_ISREG(st.st_mode)) {
    close(dfd);
    return not_regular(what, path, st.st_mode);
  }
  /* A temporary file of this pid left by a killed run is osdp's own: removed, if regular. */
  if (fstatat(dfd, tmp, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode)) unlinkat(dfd, tmp, 0);
  int fd = openat(dfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  int rc = fd < 0 ? -1 : write_all(fd, data, n);
  if (rc == 0) rc = renameat(dfd, tmp, dfd, name);
  int err = errno;
  if (rc != 0 && fd >= 0) unlinkat(dfd, tmp, 0);
  if (rc == 0) (void)fsync(dfd);
  close(dfd);
  return rc == 0 ? 0 : osdp_fail("%s: cannot write '%s': %s", what, path, strerror(err));
}
