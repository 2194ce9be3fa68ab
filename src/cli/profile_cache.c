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
#include "core/util.h"
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
           "osdp-profile-key 1\nbuild %s %s\nblas %s\nmpi %s\nmachine %s\nmodel %s\nseq %d\n"
           "ranks %d per_host %d\nthreads %d\nmem_limit %zu\nsteps %d\ndevice %s\n",
           OSDP_VERSION, OSDP_GIT_COMMIT, kernels_blas_config(), comm_library_version(), machine,
           model ? model : "?", o->seq, comm_size(), comm_ranks_per_host(), o->threads,
           o->mem_limit, o->steps, o->backend ? o->backend->name : "cpu");
  free(model);
}

/* dir/<hash of key>.<ext> into path. */
static void entry_path(const char* dir, const char* key, const char* ext, char* path, size_t cap) {
  uint64_t h = fnv1a64(1469598103934665603ULL, key, strlen(key));
  snprintf(path, cap, "%s/%016llx.%s", dir, (unsigned long long)h, ext);
}

/* Whether the key file at path holds exactly key. */
static int key_matches(const char* path, const char* key) {
  FILE* f = fopen(path, "rb");
  if (!f) return 0;
  char buf[PROFILE_KEY_MAX + 2];
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = 0;
  return n == strlen(key) && memcmp(buf, key, n) == 0;
}

int profile_cache_find(const char* dir, const char* key, DeviceInfo* dev, char* path, size_t cap) {
  char kpath[4200];
  int found = 0;
  if (dir[0] && comm_rank() == 0) {
    entry_path(dir, key, "key", kpath, sizeof kpath);
    found = key_matches(kpath, key);
  }
  if (comm_allreduce_max_f64(comm_world(), found) == 0) return 0;
  entry_path(dir, key, "json", path, cap);
  DeviceInfo got;
  int bad = device_load(&got, path) != 0;
  if (!bad && (got.ranks != comm_size() || device_ranks_per_host(&got) != comm_ranks_per_host())) {
    device_free(&got);
    bad = 1;
  }
  if (comm_allreduce_max_f64(comm_world(), bad) > 0) {
    if (!bad) device_free(&got);
    return 0;
  }
  *dev = got;
  return 1;
}

int profile_cache_store(const char* dir, const char* key, const DeviceInfo* dev, char* path,
                        size_t cap) {
  char kpath[4200];
  if (make_dirs(dir, "--profile-cache")) return -1;
  entry_path(dir, key, "json", path, cap);
  entry_path(dir, key, "key", kpath, sizeof kpath);
  if (device_save(dev, path)) return -1;
  return write_file_atomic(kpath, key, "--profile-cache");
}
