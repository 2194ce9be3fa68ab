/*
** profile_cache.c: profiles kept between runs (see profile_cache.h).
*/
#include "cli/profile_cache.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "comm/comm.h"
#include "core/files.h"
#include "core/util.h"
#include "model/plan.h"
#include "kernels/cpu_kernels.h"
#include "osdp_version.h"

int profile_cache_dir(const Args* a, char* dir, size_t cap) {
  const char* opt = args_get(a, "profile-cache", NULL);
  const char* ckpt = args_get(a, "checkpoint", NULL);
  const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
  dir[0] = 0;
  if (opt && strcmp(opt, "off") == 0) return 0;
  int n;
  if (opt) n = snprintf(dir, cap, "%s", opt);
  else if (ckpt) n = snprintf(dir, cap, "%s/.osdp-profiles", ckpt);
  else if (xdg && xdg[0] == '/') n = snprintf(dir, cap, "%s/osdp", xdg);
  else if (home && home[0]) n = snprintf(dir, cap, "%s/.cache/osdp", home);
  else return 0;
  if (n <= 0 || (size_t)n >= cap || !dir[0]) {
    dir[0] = 0;
    return osdp_fail("--profile-cache: the directory name is empty or too long; give a "
                     "directory, or off");
  }
  return 0;
}

/* This machine, for the key: its host name and CPU model (/proc/cpuinfo's "model name"). */
static void machine_text(char* out, size_t cap) {
  char host[256] = "?", cpu[256] = "?";
  if (gethostname(host, sizeof host) != 0) snprintf(host, sizeof host, "?");
  host[sizeof host - 1] = 0;
  FILE* f = fopen("/proc/cpuinfo", "r");
  char line[512];
  while (f && fgets(line, sizeof line, f)) {
    char* colon = strchr(line, ':');
    if (strncmp(line, "model name", 10) != 0 || !colon) continue;
    snprintf(cpu, sizeof cpu, "%s", colon + 2);
    cpu[strcspn(cpu, "\n")] = 0;
    break;
  }
  if (f) fclose(f);
  snprintf(out, cap, "%s | %s", host, cpu);
}

void profile_cache_key(const GptDesc* d, const ProfileOptions* o, char key[PROFILE_KEY_MAX]) {
  char machine[600];
  machine_text(machine, sizeof machine);
  cJSON* m = cJSON_CreateObject();
  gpt_config_to_json(&d->cfg, m);
  char* model = cJSON_PrintUnformatted(m);
  cJSON_Delete(m);
  snprintf(key, PROFILE_KEY_MAX,
           "osdp-profile-key 2\nbuild %s %s\nblas %s\nmpi %s\nmachine %s\nmodel %s\nseq %d\n"
           "ranks %d per_host %d\nthreads %d\nmem_limit %zu\nsteps %d\nlayers %d\ndevice %s\n"
           "precision %s\n",
           OSDP_VERSION, OSDP_GIT_COMMIT, kernels_blas_config(), comm_library_version(), machine,
           model ? model : "?", o->seq, comm_size(), comm_ranks_per_host(), o->threads,
           o->mem_limit, o->steps, o->layers, o->backend ? o->backend->name : "cpu",
           precision_name(o->precision));
  free(model);
}

/* <hash of key>.<ext> into name: the entry's file name in the cache directory. */
static void entry_name(const char* key, const char* ext, char* name, size_t cap) {
  uint64_t h = fnv1a64(FNV1A64_START, key, strlen(key));
  snprintf(name, cap, "%016llx.%s", (unsigned long long)h, ext);
}

/* dir/<hash of key>.<ext> into path. */
static void entry_path(const char* dir, const char* key, const char* ext, char* path, size_t cap) {
  char name[64];
  entry_name(key, ext, name, sizeof name);
  snprintf(path, cap, "%s/%s", dir, name);
}

/* The key file's text: the key, then the hash of the profile's text, so an entry whose profile
** was replaced (another model's, edited) is never taken for this key's. A new string. */
static char* key_file_text(const char* key, const char* profile) {
  size_t n = strlen(key) + 64;
  char* t = malloc(n);
  if (t)
    snprintf(t, n, "%sprofile_fnv1a64 %016llx\n", key,
             (unsigned long long)fnv1a64(FNV1A64_START, profile, strlen(profile)));
  return t;
}

/* Prints, on rank 0, why a cache entry is not used (the run measures anew). */
static void cache_note(const char* why) {
  if (comm_rank() == 0) fprintf(stderr, "osdp: note: profile cache: %s; measuring anew\n", why);
}

/* Collective: the text rank 0 has (text on rank 0, NULL elsewhere; len -1: none), on every rank
** (a new string the caller frees; text is taken over), or NULL on every rank. */
static char* share(char* text) {
  double len = comm_allreduce_f64(comm_world(), comm_rank() == 0 ? (text ? (double)strlen(text) : -1) : 0);
  if (len < 0) return NULL;
  if (comm_rank() != 0 && !(text = malloc((size_t)len + 1))) {
    comm_allreduce_max_f64(comm_world(), 1);
    return NULL;
  }
  int bad = comm_allreduce_max_f64(comm_world(), 0) > 0; /* a rank out of memory */
  if (bad) { free(text); return NULL; }
  comm_bcast(comm_world(), text, (size_t)len + 1);
  return text;
}

/* Collective: the text of the file at path as rank 0 reads it, on every rank (a new string the
** caller frees), so that ranks on other hosts, whose files may differ or be missing, act on
** rank 0's; NULL on every rank when rank 0 cannot read it (its error recorded there). */
static char* shared_text(const char* path, const char* what) {
  return share(comm_rank() == 0 ? read_text_bounded(path, 64u << 20, path, what) : NULL);
}

/* Collective: the cache's own file dir/name as rank 0 reads it (never through a link), on every
** rank; NULL when it is absent, or refused (a note printed, the file left as it is). */
static char* shared_own_text(const char* dir, const char* name) {
  char* text = NULL;
  if (comm_rank() == 0) {
    int absent = 0;
    text = file_own_read(dir, name, 64u << 20, "profile cache", &absent);
    if (!text && !absent) cache_note(osdp_last_error());
    osdp_clear_error();
  }
  return share(text);
}

int devices_load_shared(const char* path, DeviceInfo* dev) {
  char* text = shared_text(path, "a device file of osdp profile --out");
  int bad = !text || device_parse(dev, text, path) != 0;
  free(text);
  return comm_allreduce_max_f64(comm_world(), bad) > 0 ? (bad ? -1 : osdp_fail("%s: rank 0 "
                                "could not read it", path)) : 0;
}

/* Collective: dev parsed from the profile text of the cache entry of key (whose key file text
** is ktext), when it is this run's: the key file names this text's hash, and the profile is of
** this model, sequence and ranks. 1, or 0 (a note says why when the entry was replaced). */
static int entry_profile(const char* key, const char* ktext, const char* text, const char* path,
                         const GptDesc* d, int seq, DeviceInfo* dev) {
  char* want = key_file_text(key, text);
  int same = want && strcmp(want, ktext) == 0;
  free(want);
  char why[600];
  if (!same) {
    snprintf(why, sizeof why, "%s is not the profile its key file names (replaced or edited)", path);
    cache_note(why);
    return 0;
  }
  DeviceInfo got;
  if (device_parse(&got, text, path)) { osdp_clear_error(); return 0; }
  if (got.ranks == comm_size() && device_ranks_per_host(&got) == comm_ranks_per_host() &&
      device_measured_for(&got, d, seq)) {
    *dev = got;
    return 1;
  }
  snprintf(why, sizeof why, "%s holds a profile of model '%s' at seq %d on %d ranks, not this run's",
           path, got.compute_model, got.compute_seq, got.ranks);
  cache_note(why);
  device_free(&got);
  return 0;
}

int profile_cache_find(const char* dir, const char* key, const GptDesc* d, int seq, DeviceInfo* dev,
                       char* path, size_t cap) {
  char kname[64], jname[64];
  entry_name(key, "key", kname, sizeof kname);
  entry_name(key, "json", jname, sizeof jname);
  snprintf(path, cap, "%s/%s", dir, jname);
  if (!dir[0]) return 0;
  char* ktext = shared_own_text(dir, kname);
  /* Another key's entry under the same hash is not this key's (compared whole). */
  int mine = ktext && strncmp(ktext, key, strlen(key)) == 0;
  char* text = mine ? shared_own_text(dir, jname) : NULL;
  int found = text && entry_profile(key, ktext, text, path, d, seq, dev);
  free(ktext);
  free(text);
  return found;
}

int profile_cache_store(const char* dir, const char* key, const DeviceInfo* dev, char* path,
                        size_t cap) {
  char kname[64], jname[64];
  entry_name(key, "key", kname, sizeof kname);
  entry_name(key, "json", jname, sizeof jname);
  snprintf(path, cap, "%s/%s", dir, jname);
  if (make_dirs(dir, "--profile-cache")) return -1;
  char* text = device_to_text(dev);
  char* ktext = text ? key_file_text(key, text) : NULL;
  int rc = !ktext ? osdp_fail("out of memory")
                  : file_own_write(dir, jname, text, strlen(text), "--profile-cache") ||
                        file_own_write(dir, kname, ktext, strlen(ktext), "--profile-cache");
  free(text);
  free(ktext);
  return rc ? -1 : 0;
}

/* ---- Trials -------------------------------------------------------------------------------- */

void trial_cache_path(const char* dir, const char* profile_key, size_t mem_limit, int steps,
                      char* path, size_t cap) {
  char key[PROFILE_KEY_MAX + 64];
  snprintf(key, sizeof key, "%strial mem_limit %zu steps %d\n", profile_key, mem_limit, steps);
  entry_path(dir, key, "trial.json", path, cap);
}

/* The FNV-1a hash of candidate c's plan file text, as 16 hex digits in out. */
static void plan_hash(const GptDesc* d, const Candidate* c, char out[17]) {
  char* s = plan_to_json(&c->plan, d);
  uint64_t h = s ? fnv1a64(1469598103934665603ULL, s, strlen(s)) : 0;
  free(s);
  snprintf(out, 17, "%016llx", (unsigned long long)h);
}

/* Fills r from a parsed trial file when it holds exactly candidates c (in order, by their plans'
** hashes); the trial's choice (its "chosen", a candidate that ran), or -1. */
static int trial_from_json(const cJSON* root, const GptDesc* d, const Candidate* c, int n,
                           TrialResult* r) {
  const cJSON* arr = cJSON_GetObjectItemCaseSensitive(root, "candidates");
  if (!cJSON_IsArray(arr) || cJSON_GetArraySize(arr) != n) return -1;
  int best = -1;
  for (int i = 0; i < n; i++) {
    const cJSON* e = cJSON_GetArrayItem(arr, i);
    const cJSON *h = cJSON_GetObjectItemCaseSensitive(e, "plan_fnv1a64"),
                *st = cJSON_GetObjectItemCaseSensitive(e, "step_s"),
                *sps = cJSON_GetObjectItemCaseSensitive(e, "samples_per_s"),
                *pk = cJSON_GetObjectItemCaseSensitive(e, "peak_bytes");
    char want[17];
    plan_hash(d, &c[i], want);
    if (!cJSON_IsString(h) || strcmp(h->valuestring, want) != 0) return -1;
    memset(&r[i], 0, sizeof r[i]);
    if (!cJSON_IsNumber(st) || !cJSON_IsNumber(sps) || !cJSON_IsNumber(pk)) continue; /* did not run */
    r[i] = (TrialResult){1, st->valuedouble, sps->valuedouble, (size_t)pk->valuedouble};
    if (r[i].step_s <= 0 || r[i].samples_per_s <= 0) return -1;
    if (best < 0 || r[i].samples_per_s > r[best].samples_per_s) best = i;
  }
  const cJSON* ch = cJSON_GetObjectItemCaseSensitive(root, "chosen");
  if (!cJSON_IsNumber(ch) || ch->valueint < 0 || ch->valueint >= n || !r[ch->valueint].ok) return -1;
  return best < 0 ? -1 : ch->valueint;
}

/* Splits a cache entry's path (dir/name, as trial_cache_path makes it) into dir and name. */
static void split_entry(const char* path, char* dir, size_t dcap, char* name, size_t ncap) {
  const char* slash = strrchr(path, '/');
  snprintf(dir, dcap, "%.*s", slash ? (int)(slash - path) : 1, slash ? path : ".");
  snprintf(name, ncap, "%s", slash ? slash + 1 : path);
}

int trial_cache_find(const char* path, const GptDesc* d, const Candidate* c, int n, TrialResult* r) {
  char dir[4200], name[256];
  split_entry(path, dir, sizeof dir, name, sizeof name);
  char* text = shared_own_text(dir, name);
  if (!text) return -1;
  const char* end = NULL;
  cJSON* root = text ? cJSON_ParseWithOpts(text, &end, 0) : NULL;
  if (root && json_check_one_meaning(root, text, end, path)) { cJSON_Delete(root); root = NULL; }
  free(text);
  int best = root ? trial_from_json(root, d, c, n, r) : -1;
  cJSON_Delete(root);
  osdp_clear_error();
  return best;
}

int trial_cache_store(const char* path, const GptDesc* d, const Candidate* c, int n,
                      const TrialResult* r, int chosen) {
  cJSON* root = cJSON_CreateObject();
  cJSON_AddStringToObject(root, "format", "osdp-trial");
  cJSON_AddNumberToObject(root, "version", 2);
  cJSON_AddNumberToObject(root, "chosen", chosen);
  cJSON* arr = cJSON_AddArrayToObject(root, "candidates");
  for (int i = 0; i < n; i++) {
    cJSON* e = cJSON_CreateObject();
    char h[17];
    plan_hash(d, &c[i], h);
    cJSON_AddStringToObject(e, "origin", c[i].origin);
    cJSON_AddStringToObject(e, "plan_fnv1a64", h);
    if (r[i].ok) {
      cJSON_AddNumberToObject(e, "step_s", r[i].step_s);
      cJSON_AddNumberToObject(e, "samples_per_s", r[i].samples_per_s);
      cJSON_AddNumberToObject(e, "peak_bytes", (double)r[i].peak);
    }
    cJSON_AddItemToArray(arr, e);
  }
  char* text = cJSON_Print(root);
  cJSON_Delete(root);
  char dir[4200], name[256];
  split_entry(path, dir, sizeof dir, name, sizeof name);
  int rc = text ? file_own_write(dir, name, text, strlen(text), "--profile-cache")
                : osdp_fail("out of memory");
  free(text);
  return rc;
}
