/*
** output.h: how every output file of osdp is written, so that no output destroys what it
** should not.
**
** An output path is resolved before anything is written to it:
**   a symlink        is written through: its target (resolved, also when it does not exist
**                    yet) is what gets written, atomically beside the target; the link stays;
**   a special file   (a character or block device, a fifo, a socket: /dev/null) is opened and
**                    written directly, never replaced;
**   a regular file   (or a new name) is written into a temporary file beside it, flushed,
**                    fsynced and renamed over it, so a failure leaves the old file as it was;
**   a directory      is refused.
** Every write, the flush, the fsync and the close are checked.
**
** A command also registers its inputs and outputs (out_claim_input / out_claim_output) before
** doing any work: an output that is the same file as an input or as another output (the same
** device and inode, or, for a file that does not exist yet, the same resolved path) is refused
** with a message naming both options, so --log never truncates the --load weights and plan --out
** never replaces its --devices profile.
*/
#ifndef OSDP_OUTPUT_H
#define OSDP_OUTPUT_H

#include <stdio.h>

#define OUT_PATH_MAX 4096

/* An output file being written. */
typedef struct OutFile {
  FILE* f;                    /* the stream to write (NULL when not open) */
  const char* field;          /* the option it came from, for messages ("--save") */
  char path[OUT_PATH_MAX];    /* the path as given */
  char target[OUT_PATH_MAX];  /* the file that ends up written: path, or a symlink's target */
  char tmp[OUT_PATH_MAX + 32]; /* the temporary file beside target; "" when target is written
                              ** directly (a special file) */
} OutFile;

/* Opens output path for writing (mode "w" or "wb") as described above. Returns 0, or -1 with an
** error naming field, the path and the reason (nothing is created then). */
int out_open(OutFile* o, const char* path, const char* field, const char* mode);
/* Opens path for a stream written as the run goes (a --log): a regular file is truncated and
** written in place (through a symlink), a special file is written directly, a directory is
** refused. A fifo without a reader is waited for 5 s at most, then refused (so is it in
** out_open). The stream, or NULL with an error naming field, the path and the reason. */
FILE* out_open_stream(const char* path, const char* field);
/* Finishes an output: flush, fsync (a regular file and its directory), close, rename into place;
** each step checked. Returns 0, or -1 with an error (the temporary file is removed and an
** existing file is left as it was). */
int out_commit(OutFile* o);
/* Abandons an output: closes it and removes the temporary file (a special file is only closed). */
void out_abort(OutFile* o);

/* Resolves path as out_open would (a symlink's target; the path itself otherwise) into out.
** Returns 0, or -1 with an error naming field. */
int out_resolve(const char* path, const char* field, char out[OUT_PATH_MAX]);
/* Checks, before long work starts, that path can be written: a special file opens for writing,
** a regular one can be created beside its target. -1 with an error naming field otherwise. */
int out_check_writable(const char* path, const char* field);

/* Registers an input file (field: its option, "--load") of the running command; a path that
** does not exist is ignored (its own reader reports it). Returns 0, or -1 with an error naming
** field and what the file is when it is a fifo, a device or a socket (reading one would block,
** or never end; core/files.h). */
int out_claim_input(const char* path, const char* field);
/* Registers an output file; -1 with an error naming both options when it is the same file as an
** input or an output registered before. */
int out_claim_output(const char* path, const char* field);
/* Forgets every registered file (for tests and for commands run one after another). */
void out_claims_reset(void);

/* Flushes and closes standard output; -1 with an error when a write to it failed (a full disk,
** a closed pipe), so the command exits non-zero. */
int out_close_stdout(void);

#endif
