/*
** ckpt_dir.h: a --checkpoint directory belongs to one run at a time.
**
** While a run trains into DIR, rank 0 holds an advisory lock (flock) on DIR/.osdp-lock, a file
** that says who holds it ("pid P on host H since T"): a second run into DIR fails at start
** naming the first, instead of colliding with it. The lock file stays after the run (removing a
** lock file others may be opening is a race); it holds nothing else.
**
** Every checkpoint's manifest names the run it belongs to (its run id; a run resumed from a
** checkpoint keeps that checkpoint's id). At start a run refuses a DIR holding checkpoints of
** another run, or of its own run newer than the step it starts from (they would mix two
** histories), unless told --checkpoint-overwrite, which deletes them first. Anything in DIR
** named step-N that is not an osdp checkpoint directory (a file, a link) is never deleted.
** Pruning (--keep) considers only this run's checkpoints, never follows a link, and deletes only
** the files osdp writes (train_state_remove).
*/
#ifndef OSDP_CKPT_DIR_H
#define OSDP_CKPT_DIR_H

#include "runtime/train_state.h"

typedef struct CkptDir {
  char path[4096];
  char run_id[TRAIN_RUN_ID_MAX]; /* the run whose checkpoints these are (set by ckpt_dir_claim) */
  int legacy_own; /* checkpoints without a run id (written before run ids) count as this run's */
  int keep;       /* newest checkpoints of this run kept by ckpt_dir_prune */
  int lock_fd;    /* rank 0: the open, locked DIR/.osdp-lock; -1 elsewhere */
} CkptDir;

/* Creates DIR if missing and, on rank 0, takes its lock (collective: every rank gets rank 0's
** verdict). Returns 0, or -1 with an error naming the run holding the lock or why DIR cannot
** be written. */
int ckpt_dir_open(CkptDir* cd, const char* path, int keep);

/* Makes DIR this run's (collective; rank 0 looks): run_id is the run's id, start_step the step
** it continues from (0 for a new run), legacy_own whether checkpoints without an id are its own
** (it resumed from one). Checkpoints of another run, of this run past start_step, links and
** other things named step-N are refused with an error naming the first and the way out; with
** overwrite the checkpoints and links among them are deleted first (each with a note), and
** anything else is still refused. Returns 0 or -1. */
int ckpt_dir_claim(CkptDir* cd, const char* run_id, long start_step, int legacy_own, int overwrite);

/* Rank 0, after a checkpoint was written: deletes this run's checkpoints beyond the newest
** cd->keep (a failure to delete one is a note on stderr, not an error). */
void ckpt_dir_prune(const CkptDir* cd);

/* Releases the lock. */
void ckpt_dir_close(CkptDir* cd);

/* A new run id into out: 32 hex digits from the kernel's random source (rank 0's; collective,
** every rank gets the same id). */
void ckpt_new_run_id(char out[TRAIN_RUN_ID_MAX]);

#endif
