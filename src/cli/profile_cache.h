/*
** profile_cache.h: `train --plan auto` measures this run's ranks once per machine and setting,
** not on every start.
**
** A profile (planner/profile.h) depends on the model, the sequence length, the ranks and how
** they sit on hosts, the kernel threads, the memory limit (which micro-batches it times), the
** timed steps, the device, the machine and the build. Those facts, written out as text, are the
** profile's KEY; the cache directory holds for each key two files named by the key's FNV-1a
** hash: <hash>.json, the device file itself (what `osdp profile --out` writes; `osdp plan
** --devices` reads it too), and <hash>.key, the key's text and the FNV-1a hash of the profile's
** text, compared whole on lookup so a hash collision can never hand over another setting's
** profile, nor a replaced profile file another model's. Both are written atomically, the key
** last: an entry is complete or absent. The cache holds only osdp's own regular files: entries
** are read and written relative to the directory, never through a link (core/files.h); a link
** or fifo where an entry belongs is left alone and not used, with a note.
**
** The directory: --profile-cache DIR; else DIR/.osdp-profiles under --checkpoint DIR; else
** $XDG_CACHE_HOME/osdp, or ~/.cache/osdp. `--profile-cache off` neither reads nor writes one.
*/
#ifndef OSDP_CLI_PROFILE_CACHE_H
#define OSDP_CLI_PROFILE_CACHE_H

#include <stddef.h>

#include "cli/cli.h"
#include "model/gpt.h"
#include "planner/device.h"
#include "planner/profile.h"
#include "planner/search.h"
#include "planner/trial.h"

#define PROFILE_KEY_MAX 2048

/* Where this run's cache lives: into dir (cap bytes); "" when there is none (off, or no home).
** Returns 0, or -1 with an error naming --profile-cache. */
int profile_cache_dir(const Args* a, char* dir, size_t cap);

/* The key of a profile of model d with options o on this run's ranks, into key (rank 0's view
** of the machine: its host name and CPU; every rank computes the same text otherwise). */
void profile_cache_key(const GptDesc* d, const ProfileOptions* o, char key[PROFILE_KEY_MAX]);

/* Collective: the cached profile of key in dir, loaded on every rank into dev. 1 when found,
** every rank could read it and it is a profile of model d at seq on this run's ranks (path
** receives its file), 0 when not (dev untouched). An entry that is not a regular file (a link),
** or whose profile is not the one its key file names (replaced by another model's), is not used
** and left as it is, with a note. */
int profile_cache_find(const char* dir, const char* key, const GptDesc* d, int seq, DeviceInfo* dev,
                       char* path, size_t cap);

/* Collective: the device file at path as rank 0 reads it, parsed on every rank (ranks on other
** hosts plan with rank 0's file, never with a copy of their own). 0, or -1 with an error. */
int devices_load_shared(const char* path, DeviceInfo* dev);

/* Rank 0: stores dev under key in dir (creating dir). Returns 0, or -1 with an error (the
** caller reports it as a note: a cache that cannot be written costs time, not the run). */
int profile_cache_store(const char* dir, const char* key, const DeviceInfo* dev, char* path,
                        size_t cap);

/* Trials are kept beside the profile they ran on: a second start that reuses a profile, finds
** the same candidates (the same plans, compared by the hash of each plan file's text) and trials
** them with the same limit and steps reuses what the first start measured.
** The trial file of profile_key's profile for a trial of `steps` steps under mem_limit. */
void trial_cache_path(const char* dir, const char* profile_key, size_t mem_limit, int steps,
                      char* path, size_t cap);
/* Collective: the trial at path when it measured exactly candidates c[0..n) (r filled, the
** index of the trial's choice returned; rank 0's file for every rank), else -1. */
int trial_cache_find(const char* path, const GptDesc* d, const Candidate* c, int n, TrialResult* r);
/* Rank 0: stores the trial of candidates c as measured in r, and its choice (planner_trial's
** index: the measured fastest, or the model's first within the trial's noise). 0, or -1 with
** an error. */
int trial_cache_store(const char* path, const GptDesc* d, const Candidate* c, int n,
                      const TrialResult* r, int chosen);

#endif
