/* train_state.c: checkpoints that survive kills and reshard on resume; see train_state.h. */
#include "runtime/train_state.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "comm/comm.h"
#include "core/files.h"
#include "core/util.h"

#define STATE_MAGIC "OSDPST01"
#define STATE_VERSION 1
#define HEADER_BYTES 24 /* magic 8, version 4, nranges 4, n_params 8 */

/* ---- Small file-system helpers ------------------------------------------------------------ */


/* fsync of a directory, so a rename or a new file in it is on disk. */
static int sync_dir(const char* dir) {
  int fd = open(dir, O_RDONLY | O_DIRECTORY);
  if (fd < 0) return osdp_fail("--checkpoint: cannot open directory %s: %s", dir, strerror(errno));
  int rc = fsync(fd);
  close(fd);
  return rc ? osdp_fail("--checkpoint: cannot sync directory %s: %s", dir, strerror(errno)) : 0;
}

/* Whether name is a file osdp writes into a checkpoint directory: manifest.json or
** rank-<5 or more digits>.bin. */
static int is_state_file(const char* name) {
  if (strcmp(name, "manifest.json") == 0) return 1;
  if (strncmp(name, "rank-", 5)) return 0;
  const char* p = name + 5;
  int digits = 0;
  while (*p >= '0' && *p <= '9') { p++; digits++; }
  return digits >= 5 && strcmp(p, ".bin") == 0;
}

/* Empties and removes the directory path (osdp's files in it only), recording nothing: 0 when
** it is gone (or was never there), 1 when path is not a real directory, 2 when it holds files
** osdp did not write (*others of them; they and the directory stay), 3 on another error (errno). */
static int remove_state_dir(const char* path, int* others) {
  struct stat st;
  *others = 0;
  if (lstat(path, &st)) return errno == ENOENT ? 0 : 3;
  if (!S_ISDIR(st.st_mode)) return 1;
  DIR* d = opendir(path);
  if (!d) return 3;
  struct dirent* ent;
  char p[4096 + 256];
  while ((ent = readdir(d)) != NULL) {
    if (!strcmp(ent->d_name, ".") || !strcmp(ent->d_name, "..")) continue;
    snprintf(p, sizeof p, "%s/%s", path, ent->d_name);
    if (is_state_file(ent->d_name) && lstat(p, &st) == 0 && S_ISREG(st.st_mode)) unlink(p);
    else (*others)++;
  }
  closedir(d);
  if (rmdir(path) == 0) return 0;
  return *others ? 2 : 3;
}

/* How many entries of directory path are not files osdp writes there; -1 when unreadable. */
static int foreign_entries(const char* path) {
  DIR* d = opendir(path);
  if (!d) return -1;
  int n = 0;
  struct dirent* ent;
  char p[4096 + 256];
  struct stat st;
  while ((ent = readdir(d)) != NULL) {
    if (!strcmp(ent->d_name, ".") || !strcmp(ent->d_name, "..")) continue;
    snprintf(p, sizeof p, "%s/%s", path, ent->d_name);
    n += !(is_state_file(ent->d_name) && lstat(p, &st) == 0 && S_ISREG(st.st_mode));
  }
  closedir(d);
  return n;
}

int train_state_remove(const char* path) {
  struct stat st;
  if (lstat(path, &st)) return errno == ENOENT ? 0 : osdp_fail("cannot remove %s: %s", path, strerror(errno));
  if (!S_ISDIR(st.st_mode))
    return osdp_fail("not removing %s: it is not a checkpoint directory (osdp never follows a link)", path);
  int others = foreign_entries(path);
  if (others < 0) return osdp_fail("cannot remove %s: %s", path, strerror(errno));
  if (others > 0) return osdp_fail("left %s in place: it holds %d file(s) osdp did not write", path, others);
  /* First out of sight under a hidden name (one rename), then emptied: a kill in between leaves
  ** no step-N without its manifest, only .step-N.del, which the next removal of it clears. */
  char del[4096 + 16], base[4096];
  snprintf(base, sizeof base, "%s", path);
  char* slash = strrchr(base, '/');
  if (slash) { *slash = 0; snprintf(del, sizeof del, "%s/.%s.del", base, slash + 1); }
  else snprintf(del, sizeof del, ".%s.del", base);
  if (remove_state_dir(del, &others) || rename(path, del) || remove_state_dir(del, &others))
    return osdp_fail("cannot remove %s: %s", path, others ? "a stale .del directory holds other files" : strerror(errno));
  return 0;
}

/* Whether name is one of the hidden directories a checkpoint write or removal leaves when it is
** killed: .step-<n>.del, .step-<n>.tmp or .step-<n>.tmp.old. */
static int is_leftover_name(const char* name) {
  if (strncmp(name, ".step-", 6) || name[6] < '0' || name[6] > '9') return 0;
  const char* p = name + 6;
  while (*p >= '0' && *p <= '9') p++;
  return !strcmp(p, ".del") || !strcmp(p, ".tmp") || !strcmp(p, ".tmp.old");
}

int train_state_sweep(const char* dir) {
  DIR* d = opendir(dir);
  if (!d) return 0;
  int removed = 0, others;
  struct dirent* ent;
  char p[4096 + 256];
  while ((ent = readdir(d)) != NULL) {
    if (!is_leftover_name(ent->d_name)) continue;
    snprintf(p, sizeof p, "%s/%s", dir, ent->d_name);
    removed += remove_state_dir(p, &others) == 0; /* a link, or foreign files: left alone */
  }
  closedir(d);
  return removed;
}

long train_state_step_of_name(const char* name) {
  if (strncmp(name, "step-", 5) || name[5] < '0' || name[5] > '9') return -1;
  if (name[5] == '0' && name[6]) return -1; /* "step-007" is not what osdp writes */
  char* end = NULL;
  errno = 0;
  long s = strtol(name + 5, &end, 10);
  return *end == 0 && s >= 0 && errno == 0 ? s : -1;
}

long* train_state_list(const char* dir, int* n) {
  *n = 0;
  DIR* d = opendir(dir);
  if (!d) return NULL;
  long* steps = NULL;
  int cap = 0;
  struct dirent* ent;
  while ((ent = readdir(d)) != NULL) {
    long s = train_state_step_of_name(ent->d_name);
    if (s < 0) continue;
    if (*n == cap) {
      long* grown = realloc(steps, (size_t)(cap = cap ? 2 * cap : 16) * sizeof *steps);
      if (!grown) break;
      steps = grown;
    }
    steps[(*n)++] = s;
  }
  closedir(d);
  for (int i = 1; i < *n; i++) /* insertion sort, newest first */
    for (int j = i; j > 0 && steps[j] > steps[j - 1]; j--) { long t = steps[j]; steps[j] = steps[j - 1]; steps[j - 1] = t; }
  return steps;
}

/* ---- Writing ------------------------------------------------------------------------------ */

/* fwrite that folds the bytes into *h; 0 or -1 (errno kept). */
static int put(FILE* f, const void* p, size_t n, uint64_t* h) {
  *h = fnv1a64(*h, p, n);
  return fwrite(p, 1, n, f) == n ? 0 : -1;
}

/* A test hook: OSDP_TEST_SLOW_CHECKPOINT=S makes rank 0 take S seconds more for its rank file,
** as a slow disk would, so that tests can check how the watchdog treats long checkpoint writes. */
static void test_slow_disk(void) {
  const char* v = getenv("OSDP_TEST_SLOW_CHECKPOINT");
  double s = v ? atof(v) : 0;
  if (comm_rank() != 0 || !(s > 0)) return;
  struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
  nanosleep(&ts, NULL);
}

/* Writes this rank's file `path`: header, ranges, then each range's w, m, v. Its byte count
** and checksum go to *bytes and *hash. 0, or -1 with an error naming the file. */
static int write_rank_file(Engine* e, const char* path, uint64_t* bytes, uint64_t* hash) {
  int nr = engine_owned_ranges(e, NULL);
  ParamRange* r = malloc((size_t)(nr ? nr : 1) * sizeof *r);
  size_t maxn = 1;
  if (!r) return osdp_fail("out of host memory writing %s", path);
  engine_owned_ranges(e, r);
  for (int i = 0; i < nr; i++) if (r[i].n > maxn) maxn = r[i].n;
  float* buf = malloc(3 * maxn * sizeof(float));
  FILE* f = buf ? file_create_new(path, "--checkpoint") : NULL;
  if (!f) {
    free(r); free(buf);
    return buf ? -1 : osdp_fail("--checkpoint: cannot write %s: out of host memory", path);
  }
  uint64_t h = FNV1A64_START;
  uint32_t hdr32[2] = {STATE_VERSION, (uint32_t)nr};
  uint64_t np = e->d->n_params;
  int bad = put(f, STATE_MAGIC, 8, &h) || put(f, hdr32, sizeof hdr32, &h) || put(f, &np, 8, &h);
  for (int i = 0; !bad && i < nr; i++) {
    uint64_t ext[2] = {r[i].offset, r[i].n};
    bad = put(f, ext, sizeof ext, &h);
  }
  for (int i = 0; !bad && i < nr; i++) {
    engine_read_owned(e, i, buf, buf + r[i].n, buf + 2 * r[i].n);
    bad = put(f, buf, 3 * r[i].n * sizeof(float), &h);
  }
  if (!bad) bad = fflush(f) || fsync(fileno(f));
  test_slow_disk();
  long long end = bad ? 0 : (long long)ftell(f);
  int err = errno;
  if (fclose(f)) { bad = 1; err = errno; }
  free(r);
  free(buf);
  if (bad) return osdp_fail("--checkpoint: writing %s failed: %s", path, strerror(err));
  *bytes = (uint64_t)end;
  *hash = h;
  return 0;
}

/* Rank 0: writes dir/manifest.json (fsynced) describing the rank files. */
static int write_manifest(const char* dir, long step, int world, size_t n_params, const char* run_id,
                          const cJSON* run, const double* sizes, const double* hashes) {
  cJSON* m = cJSON_CreateObject();
  cJSON_AddStringToObject(m, "format", "osdp-train-state");
  cJSON_AddNumberToObject(m, "version", STATE_VERSION);
  cJSON_AddNumberToObject(m, "step", (double)step);
  cJSON_AddNumberToObject(m, "world", world);
  cJSON_AddNumberToObject(m, "n_params", (double)n_params);
  cJSON_AddStringToObject(m, "run_id", run_id);
  cJSON_AddItemToObject(m, "run", run ? cJSON_Duplicate(run, 1) : cJSON_CreateObject());
  cJSON* files = cJSON_AddArrayToObject(m, "files");
  for (int r = 0; r < world; r++) {
    cJSON* o = cJSON_CreateObject();
    char name[32], hex[20];
    snprintf(name, sizeof name, "rank-%05d.bin", r);
    uint64_t h = ((uint64_t)hashes[2 * r] << 32) | (uint64_t)hashes[2 * r + 1];
    snprintf(hex, sizeof hex, "%016" PRIx64, h);
    cJSON_AddStringToObject(o, "name", name);
    cJSON_AddNumberToObject(o, "bytes", sizes[r]);
    cJSON_AddStringToObject(o, "fnv1a64", hex);
    cJSON_AddItemToArray(files, o);
  }
  char* text = cJSON_Print(m);
  cJSON_Delete(m);
  char path[4096 + 32];
  snprintf(path, sizeof path, "%s/manifest.json", dir);
  FILE* f = text ? file_create_new(path, "--checkpoint") : NULL;
  int bad = !f || fputs(text, f) < 0 || fputc('\n', f) == EOF || fflush(f) || fsync(fileno(f));
  int err = errno;
  if (f && fclose(f)) { bad = 1; err = errno; }
  free(text);
  return bad ? osdp_fail("--checkpoint: writing %s failed: %s", path, strerror(err)) : 0;
}

/* Every rank returns rank 0's verdict on rc (an error text travels with it). */
static int agree(int rc) {
  double worst = comm_allreduce_max_f64(comm_world(), rc ? 1.0 : 0.0);
  if (worst > 0 && !rc) osdp_fail("--checkpoint: another rank failed writing the checkpoint");
  return worst > 0 ? -1 : 0;
}

/* Rank 0: moves the complete temporary checkpoint tmp to fin, replacing an older fin of the
** same step (a run resumed from before it), and syncs dir. */
static int commit_checkpoint(const char* dir, const char* tmp, const char* fin) {
  struct stat st;
  if (lstat(fin, &st) == 0) {
    if (!S_ISDIR(st.st_mode))
      return osdp_fail("--checkpoint: not replacing %s: it is not a checkpoint directory", fin);
    char old[4096 + 8];
    snprintf(old, sizeof old, "%s.old", tmp);
    int others;
    if (remove_state_dir(old, &others) || rename(fin, old) || remove_state_dir(old, &others))
      return osdp_fail("--checkpoint: cannot replace the older %s: %s", fin,
                       others ? "it holds files osdp did not write" : strerror(errno));
  }
  if (rename(tmp, fin)) return osdp_fail("--checkpoint: cannot rename %s to %s: %s", tmp, fin, strerror(errno));
  return sync_dir(dir);
}

int train_state_save(Engine* e, const char* dir, long step, const char* run_id, const cJSON* run) {
  int rank = comm_rank(), world = comm_size();
  char tmp[4096], fin[4096], file[4096 + 32];
  if (snprintf(tmp, sizeof tmp, "%s/.step-%ld.tmp", dir, step) >= (int)sizeof tmp ||
      snprintf(fin, sizeof fin, "%s/step-%ld", dir, step) >= (int)sizeof fin)
    return osdp_fail("--checkpoint: path too long");
  int rc = 0;
  if (rank == 0) { /* a fresh temporary directory (a killed writer may have left one) */
    int others; /* dir exists: ckpt_dir_open made it */
    if (remove_state_dir(tmp, &others))
      rc = osdp_fail("--checkpoint: cannot clear %s, left by an earlier writer: %s", tmp,
                     others ? "it holds files osdp did not write; remove it" : strerror(errno));
    if (!rc && mkdir(tmp, 0777))
      rc = osdp_fail("--checkpoint: cannot create %s: %s", tmp, strerror(errno));
  }
  if (agree(rc)) return -1;
  snprintf(file, sizeof file, "%s/rank-%05d.bin", tmp, rank);
  uint64_t bytes = 0, hash = 0;
  rc = write_rank_file(e, file, &bytes, &hash);
  /* Sizes and checksums to rank 0 (a checksum as two exact 32-bit halves). */
  double* v = calloc((size_t)world * 3, sizeof *v);
  if (!v) rc = osdp_fail("out of host memory");
  if (agree(rc)) {
    free(v);
    int others;
    if (rank == 0) remove_state_dir(tmp, &others); /* no partial checkpoint stays behind */
    return -1;
  }
  v[rank] = (double)bytes;
  v[world + 2 * rank] = (double)(hash >> 32);
  v[world + 2 * rank + 1] = (double)(hash & 0xffffffffu);
  comm_allreduce_f64_array(comm_world(), v, 3 * world);
  if (rank == 0) {
    rc = write_manifest(tmp, step, world, e->d->n_params, run_id, run, v, v + world);
    if (!rc) rc = sync_dir(tmp);
    if (!rc) rc = commit_checkpoint(dir, tmp, fin);
    int others;
    if (rc) remove_state_dir(tmp, &others); /* keeps rc's message */
  }
  free(v);
  return agree(rc);
}

/* ---- Reading ------------------------------------------------------------------------------ */

/* The checksum and size of a whole file; -1 when unreadable. */
static int file_hash(const char* path, uint64_t* hash, long long* bytes) {
  FILE* f = file_open_read(path, "--resume", FILE_NOFOLLOW);
  if (!f) return -1;
  unsigned char buf[1 << 16];
  uint64_t h = FNV1A64_START;
  long long total = 0;
  size_t got;
  while ((got = fread(buf, 1, sizeof buf, f)) > 0) { h = fnv1a64(h, buf, got); total += (long long)got; }
  int err = ferror(f);
  fclose(f);
  *hash = h;
  *bytes = total;
  return err ? -1 : 0;
}

/* Reads rank file i's header and ranges into ts->ext (appending), checking every field against
** the file's real size before allocating from it. */
static int index_rank_file(TrainState* ts, int i, const char* path, long long size) {
  FILE* f = ts->files[i];
  unsigned char hdr[HEADER_BYTES];
  if (size < HEADER_BYTES || fread(hdr, 1, sizeof hdr, f) != sizeof hdr || memcmp(hdr, STATE_MAGIC, 8))
    return osdp_fail("--resume: %s is not an osdp training-state file (bad header)", path);
  uint32_t version, nr;
  uint64_t np;
  memcpy(&version, hdr + 8, 4);
  memcpy(&nr, hdr + 12, 4);
  memcpy(&np, hdr + 16, 8);
  if (version != STATE_VERSION)
    return osdp_fail("--resume: %s: version %u, this osdp reads version %d", path, version, STATE_VERSION);
  if (np != ts->n_params)
    return osdp_fail("--resume: %s: n_params %" PRIu64 " differs from the manifest's %zu", path, np, ts->n_params);
  if ((unsigned long long)nr > (unsigned long long)(size - HEADER_BYTES) / 16)
    return osdp_fail("--resume: %s: nranges %u does not fit in its %lld bytes", path, nr, size);
  uint64_t* ext = malloc((size_t)(nr ? nr : 1) * 16);
  if (!ext) return osdp_fail("out of host memory reading %s", path);
  if (fread(ext, 16, nr, f) != nr) { free(ext); return osdp_fail("--resume: %s is truncated", path); }
  long long at = HEADER_BYTES + 16LL * nr;
  StateExtent* grown = realloc(ts->ext, (size_t)(ts->next + (int)nr + 1) * sizeof *grown);
  if (!grown) { free(ext); return osdp_fail("out of host memory reading %s", path); }
  ts->ext = grown;
  int rc = 0;
  for (uint32_t k = 0; k < nr && !rc; k++) {
    uint64_t off = ext[2 * k], n = ext[2 * k + 1];
    if (off > ts->n_params || n > ts->n_params - off)
      rc = osdp_fail("--resume: %s: range %u [%" PRIu64 ", +%" PRIu64 ") is outside the %zu parameters",
                     path, k, off, n, ts->n_params);
    else if ((unsigned long long)n > (unsigned long long)(size - at) / 12)
      rc = osdp_fail("--resume: %s: range %u of %" PRIu64 " parameters runs past the file's end", path, k, n);
    else {
      ts->ext[ts->next++] = (StateExtent){(size_t)off, (size_t)n, i, at};
      at += 12LL * (long long)n;
    }
  }
  free(ext);
  if (!rc && at != size) rc = osdp_fail("--resume: %s has %lld bytes, its header says %lld", path, size, at);
  return rc;
}

/* qsort order of extents: by offset, then by length. */
static int by_offset(const void* a, const void* b) {
  const StateExtent *x = a, *y = b;
  if (x->offset != y->offset) return x->offset < y->offset ? -1 : 1;
  return x->n < y->n ? -1 : x->n > y->n;
}

/* Sorts the extents by offset, drops the empty ones and checks that the rest cover
** [0, n_params) exactly once. Empty extents hold no data, but a rank that owns nothing of a
** slice writes one at the slice's end, where the next slice starts: kept, it would sit after
** that slice's first extent, and train_state_read's binary search (which needs extent ends
** ascending) would skip the parameters of that extent. qsort: a checkpoint of many ranks and
** slices has many extents. */
static int check_coverage(TrainState* ts) {
  if (ts->next > 1) qsort(ts->ext, (size_t)ts->next, sizeof *ts->ext, by_offset);
  int kept = 0;
  for (int i = 0; i < ts->next; i++)
    if (ts->ext[i].n) ts->ext[kept++] = ts->ext[i];
  ts->next = kept;
  size_t at = 0;
  for (int i = 0; i < ts->next; i++) {
    size_t off = ts->ext[i].offset;
    if (off != at)
      return osdp_fail("--resume: %s: parameters %zu..%zu are %s", ts->path, off > at ? at : off,
                       off > at ? off : at, off > at ? "missing" : "written twice");
    at += ts->ext[i].n;
  }
  if (at != ts->n_params) return osdp_fail("--resume: %s: parameters from %zu on are missing", ts->path, at);
  return 0;
}

/* A number field of the manifest, checked to be a non-negative integer at most max. */
static int manifest_count(const cJSON* m, const char* key, double max, const char* path, double* out) {
  const cJSON* v = cJSON_GetObjectItemCaseSensitive(m, key);
  if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble > max || v->valuedouble != (double)(long long)v->valuedouble)
    return osdp_fail("--resume: %s: field \"%s\" must be an integer in 0..%.0f", path, key, max);
  *out = v->valuedouble;
  return 0;
}

/* A checkpoint directory named step-<n> must hold the manifest of step n: a renamed or
** copied-over directory would otherwise resume at another step than its name says. */
static int check_step_name(const char* path, long step, const char* mpath) {
  char base[4096];
  snprintf(base, sizeof base, "%s", path);
  size_t n = strlen(base);
  while (n > 1 && base[n - 1] == '/') base[--n] = 0;
  const char* name = strrchr(base, '/') ? strrchr(base, '/') + 1 : base;
  long named = train_state_step_of_name(name);
  if (named >= 0 && named != step)
    return osdp_fail("--resume: %s says step %ld but its directory is %s (renamed or damaged); "
                     "rename it step-%ld or resume from another checkpoint", mpath, step, name, step);
  return 0;
}

/* Reads path/manifest.json (its path into mpath[n]) and checks its "format"; NULL with an error
** naming field otherwise. */
static cJSON* read_manifest(const char* path, const char* field, char* mpath, size_t n) {
  snprintf(mpath, n, "%s/manifest.json", path);
  cJSON* m = read_json_object(mpath, field, "a checkpoint manifest (written by osdp train --checkpoint)");
  const cJSON* fmt = cJSON_GetObjectItemCaseSensitive(m, "format");
  if (m && (!cJSON_IsString(fmt) || strcmp(fmt->valuestring, "osdp-train-state"))) {
    cJSON_Delete(m);
    osdp_fail("%s: %s: field \"format\" is not \"osdp-train-state\"", field, mpath);
    return NULL;
  }
  return m;
}

int train_state_open(const char* path, TrainState* ts) {
  memset(ts, 0, sizeof *ts);
  snprintf(ts->path, sizeof ts->path, "%s", path);
  char mpath[4096 + 32];
  cJSON* m = read_manifest(path, "--resume", mpath, sizeof mpath);
  if (!m) return -1;
  const cJSON* files = cJSON_GetObjectItemCaseSensitive(m, "files");
  double step = 0, world = 0, np = 0, version = 0;
  int rc = manifest_count(m, "version", 1e9, mpath, &version);
  if (!rc && version != STATE_VERSION)
    rc = osdp_fail("--resume: %s: version %.0f, this osdp reads version %d", mpath, version, STATE_VERSION);
  if (!rc) rc = manifest_count(m, "step", 1e15, mpath, &step) || manifest_count(m, "world", 1 << 20, mpath, &world) ||
                manifest_count(m, "n_params", 1e13, mpath, &np);
  if (!rc && (!cJSON_IsArray(files) || cJSON_GetArraySize(files) != (int)world || world < 1))
    rc = osdp_fail("--resume: %s: field \"files\" must list one file per rank (world %.0f)", mpath, world);
  if (!rc) rc = check_step_name(path, (long)step, mpath);
  const cJSON* id = cJSON_GetObjectItemCaseSensitive(m, "run_id");
  if (!rc && id && (!cJSON_IsString(id) || strlen(id->valuestring) >= sizeof ts->run_id))
    rc = osdp_fail("--resume: %s: field \"run_id\" must be a string of at most %zu characters", mpath,
                   sizeof ts->run_id - 1);
  if (rc) { cJSON_Delete(m); return -1; }
  if (id) snprintf(ts->run_id, sizeof ts->run_id, "%s", id->valuestring);
  ts->step = (long)step;
  ts->world = (int)world;
  ts->n_params = (size_t)np;
  ts->run = cJSON_DetachItemFromObjectCaseSensitive(m, "run");
  ts->nfiles = ts->world;
  ts->files = calloc((size_t)ts->nfiles, sizeof *ts->files);
  if (!ts->files) rc = osdp_fail("out of host memory");
  for (int i = 0; !rc && i < ts->nfiles; i++) {
    const cJSON* f = cJSON_GetArrayItem(files, i);
    const cJSON* name = cJSON_GetObjectItemCaseSensitive(f, "name");
    const cJSON* bytes = cJSON_GetObjectItemCaseSensitive(f, "bytes");
    const cJSON* hex = cJSON_GetObjectItemCaseSensitive(f, "fnv1a64");
    if (!cJSON_IsString(name) || strchr(name->valuestring, '/') || !cJSON_IsNumber(bytes) || !cJSON_IsString(hex)) {
      rc = osdp_fail("--resume: %s: files[%d] needs a plain \"name\", \"bytes\" and \"fnv1a64\"", mpath, i);
      break;
    }
    char fpath[4096 + 300];
    snprintf(fpath, sizeof fpath, "%s/%s", path, name->valuestring);
    uint64_t h = 0;
    long long size = 0;
    char want[20];
    if (file_hash(fpath, &h, &size)) { rc = -1; break; } /* its error recorded */
    snprintf(want, sizeof want, "%016" PRIx64, h);
    if ((double)size != bytes->valuedouble)
      rc = osdp_fail("--resume: %s has %lld bytes, the manifest says %.0f", fpath, size, bytes->valuedouble);
    else if (strcmp(want, hex->valuestring))
      rc = osdp_fail("--resume: %s: checksum %s, the manifest says %s (damaged)", fpath, want, hex->valuestring);
    else if (!(ts->files[i] = file_open_read(fpath, "--resume", FILE_NOFOLLOW)))
      rc = -1;
    else
      rc = index_rank_file(ts, i, fpath, size);
  }
  cJSON_Delete(m);
  if (!rc) rc = check_coverage(ts);
  if (rc) train_state_close(ts);
  return rc;
}

void train_state_close(TrainState* ts) {
  for (int i = 0; ts->files && i < ts->nfiles; i++) if (ts->files[i]) fclose(ts->files[i]);
  free(ts->files);
  free(ts->ext);
  cJSON_Delete(ts->run);
  memset(ts, 0, sizeof *ts);
}

/* Reads n floats at byte `at` of file f into dst. */
static int read_floats(FILE* f, long long at, float* dst, size_t n, const char* path) {
  if (fseeko(f, (off_t)at, SEEK_SET) || fread(dst, sizeof(float), n, f) != n)
    return osdp_fail("--resume: reading %s failed", path);
  return 0;
}

int train_state_read(TrainState* ts, size_t offset, size_t n, float* w, float* m, float* v) {
  /* The first extent ending after offset (binary search), then forward while they overlap. */
  int lo = 0, hi = ts->next;
  while (lo < hi) {
    int mid = (lo + hi) / 2;
    if (ts->ext[mid].offset + ts->ext[mid].n <= offset) lo = mid + 1; else hi = mid;
  }
  size_t end = offset + n;
  for (int i = lo; i < ts->next && ts->ext[i].offset < end; i++) {
    const StateExtent* x = &ts->ext[i];
    size_t a = x->offset > offset ? x->offset : offset;
    size_t b = x->offset + x->n < end ? x->offset + x->n : end;
    if (a >= b) continue;
    long long at = x->at + 4LL * (long long)(a - x->offset);
    FILE* f = ts->files[x->file];
    if ((w && read_floats(f, at, w + (a - offset), b - a, ts->path)) ||
        (m && read_floats(f, at + 4LL * (long long)x->n, m + (a - offset), b - a, ts->path)) ||
        (v && read_floats(f, at + 8LL * (long long)x->n, v + (a - offset), b - a, ts->path)))
      return -1;
  }
  return 0; /* coverage was checked at open */
}

/* StateReadFn over a TrainState. */
static int read_from_state(void* ctx, size_t offset, size_t n, float* w, float* m, float* v) {
  return train_state_read(ctx, offset, n, w, m, v);
}

int train_state_load(Engine* e, TrainState* ts) {
  if (ts->n_params != e->d->n_params)
    return osdp_fail("--resume: %s holds %zu parameters, model %s has %zu", ts->path, ts->n_params,
                     e->d->cfg.name, e->d->n_params);
  return engine_load_state(e, read_from_state, ts, ts->step);
}

int train_state_open_newest(const char* dir, TrainState* ts) {
  int count;
  long* steps = train_state_list(dir, &count);
  if (!steps && count == 0) {
    struct stat st;
    if (stat(dir, &st)) return osdp_fail("--resume: %s: %s", dir, strerror(errno));
  }
  for (int i = 0; i < count; i++) {
    char path[4096];
    snprintf(path, sizeof path, "%s/step-%ld", dir, steps[i]);
    if (train_state_open(path, ts) == 0) {
      free(steps);
      return 0;
    }
    if (comm_rank() == 0) fprintf(stderr, "osdp: note: skipping %s: %s\n", path, osdp_last_error());
    osdp_clear_error();
  }
  free(steps);
  return osdp_fail("--resume: no complete checkpoint in %s (train with --checkpoint %s first)", dir, dir);
}

int train_state_open_path(const char* path, TrainState* ts) {
  char manifest[4096 + 32];
  struct stat st;
  snprintf(manifest, sizeof manifest, "%s/manifest.json", path);
  return stat(manifest, &st) == 0 ? train_state_open(path, ts) : train_state_open_newest(path, ts);
}

int train_state_peek(const char* path, char run_id[TRAIN_RUN_ID_MAX], long* step) {
  char mpath[4096 + 32];
  cJSON* m = read_manifest(path, "--checkpoint", mpath, sizeof mpath);
  if (!m) return -1;
  const cJSON* id = cJSON_GetObjectItemCaseSensitive(m, "run_id");
  const cJSON* st = cJSON_GetObjectItemCaseSensitive(m, "step");
  int rc = 0;
  if (!cJSON_IsNumber(st)) rc = osdp_fail("--checkpoint: %s: field \"step\" is missing", mpath);
  else {
    snprintf(run_id, TRAIN_RUN_ID_MAX, "%s", cJSON_IsString(id) ? id->valuestring : "");
    *step = (long)st->valuedouble;
  }
  cJSON_Delete(m);
  return rc;
}

/* The model of a run description ({"model": {...}}), checked as a model file's would be. */
static int run_model(const cJSON* run, const char* path, GptConfig* cfg) {
  const cJSON* m = cJSON_GetObjectItemCaseSensitive(run, "model");
  const cJSON* pv = cJSON_GetObjectItemCaseSensitive(m, "padded_vocab");
  char what[4200];
  snprintf(what, sizeof what, "%s: the manifest's run.model", path);
  if (gpt_config_from_json(m, what, cfg)) return -1;
  if (!cJSON_IsNumber(pv) || pv->valuedouble < 1 || pv->valuedouble > 1 << 26)
    return osdp_fail("%s: the manifest's run.model.padded_vocab is missing or out of range", path);
  cfg->padded_vocab = (int)pv->valuedouble;
  if (!cJSON_IsString(cJSON_GetObjectItemCaseSensitive(m, "name")))
    snprintf(cfg->name, sizeof cfg->name, "checkpoint");
  return gpt_config_validate(cfg);
}

int train_state_load_params(const char* path, GptConfig* cfg, float** params) {
  char dir[4096];
  *params = NULL;
  TrainState ts;
  if (train_state_open_path(path, &ts)) return -1;
  snprintf(dir, sizeof dir, "%s", ts.path);
  GptDesc d;
  int rc = run_model(ts.run, dir, cfg);
  if (!rc) rc = gpt_desc_build(&d, cfg);
  if (!rc) {
    if (d.n_params != ts.n_params)
      rc = osdp_fail("%s: the manifest's model has %zu parameters, its files %zu", dir, d.n_params, ts.n_params);
    gpt_desc_free(&d);
  }
  if (!rc && !(*params = malloc(ts.n_params * sizeof(float)))) rc = osdp_fail("out of host memory");
  if (!rc) rc = train_state_read(&ts, 0, ts.n_params, *params, NULL, NULL);
  if (rc) { free(*params); *params = NULL; }
  train_state_close(&ts);
  return rc;
}
