/*
** train_state.h: checkpoints of a training run that survive a kill at any moment and reshard
** on resume (another world size, another plan).
**
** A checkpoint is the directory DIR/step-<step>/:
**   rank-<r>.bin   what rank r owns (engine_owned_ranges: every parameter once over the ranks),
**                  little-endian: "OSDPST01", u32 version (1), u32 nranges, u64 n_params, then
**                  nranges x {u64 offset, u64 n} (op-block order, ascending, disjoint), then for
**                  each range its weights, AdamW m and v, n fp32 each;
**   manifest.json  written last: {"format": "osdp-train-state", "version": 1, "step", "world",
**                  "n_params", "run_id" (the run it belongs to: a resumed run keeps its id; absent
**                  in checkpoints of osdp before 2026-12), "run": {the writer's description of the
**                  run}, "files": [{"name", "bytes", "fnv1a64"}]}.
** It is written as DIR/.step-<step>.tmp/, every file fsynced, then renamed: a checkpoint
** directory is complete or absent, so a kill leaves the previous one intact. Complete means the
** manifest parses and every file it lists has its size and checksum; every size field of a rank
** file is checked against the file's real size before anything is allocated from it.
** Reading is by global ranges, so any plan on any number of ranks reads what it needs. Which
** checkpoints of a directory a run may replace or prune is runtime/ckpt_dir.h's business.
*/
#ifndef OSDP_TRAIN_STATE_H
#define OSDP_TRAIN_STATE_H

#include <cjson/cJSON.h>
#include <stdio.h>

#include "runtime/engine.h"

/* One range of a rank file: parameters [offset, offset + n), found at byte `at` of file `file`
** (weights; then m at + 4n, v at + 8n). */
typedef struct StateExtent {
  size_t offset, n;
  int file;
  long long at;
} StateExtent;

/* Room for a run id ("" or 32 hex digits) and its NUL. */
#define TRAIN_RUN_ID_MAX 40

/* An opened, verified checkpoint. */
typedef struct TrainState {
  char path[4096];
  char run_id[TRAIN_RUN_ID_MAX]; /* "" when the manifest has none */
  long step;
  int world;           /* ranks that wrote it */
  size_t n_params;
  cJSON* run;          /* the writer's description of the run (owned) */
  int nfiles;
  FILE** files;
  StateExtent* ext;    /* sorted by offset, covering [0, n_params) exactly */
  int next;
} TrainState;

/* Writes the state of engine e after `step` steps to dir/step-<step>/ (collective): each rank its
** owned ranges, rank 0 the manifest with run_id and `run` (a JSON object describing the run;
** rank 0's is used), then the rename. An older dir/step-<step> (a run resumed from before it)
** is replaced. Returns 0, or -1 with an error on every rank (the previous checkpoints are
** untouched). Pruning is ckpt_dir_prune's. */
int train_state_save(Engine* e, const char* dir, long step, const char* run_id, const cJSON* run);

/* Removes the checkpoint directory path, which must hold only the files osdp writes there
** (manifest.json, rank-NNNNN.bin, plain files): renamed to a hidden .step-N.del first (so a kill
** never leaves a step-N without its manifest), then emptied and removed. Never follows a link:
** a path that is not a real directory is refused, and a directory holding anything else is left
** as it is. Returns 0 (also when path does not exist), or -1 with an error. */
int train_state_remove(const char* path);

/* Removes what killed writes and removals left in checkpoint directory dir (the hidden
** .step-N.del, .step-N.tmp and .step-N.tmp.old directories, when they hold only osdp's files;
** never through a link). Only for the run holding dir's lock. Returns how many it removed. */
int train_state_sweep(const char* dir);

/* The step of a checkpoint directory's name as osdp writes it ("step-<n>", n without leading
** zeros), or -1. */
long train_state_step_of_name(const char* name);
/* The steps of dir's entries named step-<n> (whatever they are), newest first, in a new array
** of *n (NULL when none or dir is unreadable). */
long* train_state_list(const char* dir, int* n);

/* Reads only the manifest of checkpoint directory path: its run id ("" when it has none) and
** step. Returns 0, or -1 with an error when path holds no osdp checkpoint manifest. */
int train_state_peek(const char* path, char run_id[TRAIN_RUN_ID_MAX], long* step);

/* The newest complete checkpoint in dir, opened (each file read once); incomplete or damaged
** ones are skipped with a note on stderr. -1 with an error when there is none. */
int train_state_open_newest(const char* dir, TrainState* ts);

/* Opens and verifies the checkpoint directory `path` (the manifest, every file's size and
** checksum, every rank file's header against its size, the ranges covering every parameter
** once; a directory named step-<n> must hold step n). Returns 0, or -1 with a one-line error
** naming the file and field. */
int train_state_open(const char* path, TrainState* ts);
/* train_state_open of path when it is a checkpoint directory (DIR/step-N: it holds a
** manifest), else train_state_open_newest of it (a --checkpoint DIR). */
int train_state_open_path(const char* path, TrainState* ts);
void train_state_close(TrainState* ts);

/* Sets engine e's weights, moments and step count from ts, whatever plan and world wrote it. */
int train_state_load(Engine* e, TrainState* ts);

/* Reads the weights (any of w, m, v may be NULL) of parameters [offset, offset + n) from ts. */
int train_state_read(TrainState* ts, size_t offset, size_t n, float* w, float* m, float* v);

/* The model and weights of a checkpoint: `path` is a checkpoint directory (DIR/step-N) or a
** --checkpoint DIR (its newest complete one). Fills cfg from the manifest's run description and
** *params (a new host array of cfg's n_params floats, caller frees). Returns 0 or -1 with an error. */
int train_state_load_params(const char* path, GptConfig* cfg, float** params);

#endif
