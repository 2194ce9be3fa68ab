/*
** files.h: how osdp opens the files it reads, and the files it keeps in its own directories.
**
** Inputs never block. Every file osdp reads is opened non-blocking and fstat'ed before a byte is
** read: a fifo, a device, a socket or a directory where a regular file belongs is a one-line
** error naming what it is ("'f.bin' is a fifo, not a regular file"), never a process waiting
** forever in open() for a writer that does not come.
**
** osdp's own directories hold only osdp's regular files. In a directory osdp manages (the
** profile cache, a checkpoint's step directory) the files it names itself are opened relative
** to the directory (openat) and never through a symbolic link (O_NOFOLLOW); a new one is created
** exclusively (O_EXCL) under a temporary name and renamed into place. A link, fifo or directory
** standing where osdp's file belongs is refused with an error naming it; nothing is written
** through it. (User-named outputs follow core/output.h's rules instead.)
*/
#ifndef OSDP_FILES_H
#define OSDP_FILES_H

#include <stddef.h>
#include <stdio.h>
#include <sys/types.h>

/* What kind of file mode m is, for messages: "regular file", "directory", "fifo", "character
** device", "block device", "socket", "symbolic link" or "special file". */
const char* file_kind(mode_t m);

/* Options of file_open_read. */
enum {
  FILE_FOLLOW = 0,   /* a symlink to a regular file is read (a user-named input) */
  FILE_NOFOLLOW = 1, /* a symlink is refused (a file osdp wrote itself) */
};

/* Opens path for reading without blocking and checks it is a regular file. Returns the stream
** (blocking again, for ordinary reads), or NULL with an error "<what>: cannot open 'PATH': ..."
** or "<what>: 'PATH' is a fifo, not a regular file; give a file". */
FILE* file_open_read(const char* path, const char* what, int flags);

/* Reads the regular file path (at most max_bytes) as a NUL-terminated heap string the caller
** frees, opened as file_open_read does. NULL with an error "<what>: ..." otherwise (unreadable,
** not a regular file, "larger than MAX; <hint>"). */
char* file_read_text(const char* path, size_t max_bytes, const char* what, const char* hint,
                     int flags);

/* Creates path, which must not exist yet, for writing (O_EXCL, never through a link: a file osdp
** writes into a directory it just made). The stream, or NULL with an error naming what. */
FILE* file_create_new(const char* path, const char* what);

/* A file osdp keeps in its own directory dir (name: one path component). */
/* Reads dir/name as text (at most max_bytes): the string (the caller frees it); NULL with
** *absent set when the name does not exist; NULL with an error naming "<what>: DIR/NAME" when it
** is a link, not a regular file, unreadable or too large. */
char* file_own_read(const char* dir, const char* name, size_t max_bytes, const char* what,
                    int* absent);
/* Writes n bytes of data as dir/name: into a new file (O_EXCL, never through a link) beside it,
** fsynced, renamed over name, then the directory fsynced. A name that exists and is not a
** regular file (a symlink, a fifo, a directory) is refused and left as it is. Returns 0, or -1
** with an error naming "<what>: DIR/NAME" (the temporary file removed). */
int file_own_write(const char* dir, const char* name, const void* data, size_t n, const char* what);

#endif
