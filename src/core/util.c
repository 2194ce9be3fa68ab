/* util.c: error reporting, size parsing, clocks and random numbers; see util.h. */
#include "core/util.h"

#include "core/files.h"

#include "core/output.h"

#include <cjson/cJSON.h>

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static _Thread_local char last_error[512];

int osdp_fail(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(last_error, sizeof last_error, fmt, ap);
  va_end(ap);
  return -1;
}

const char* osdp_last_error(void) { return last_error; }

void osdp_clear_error(void) { last_error[0] = 0; }

/* Multiplier of a size suffix, or 0 if the suffix is unknown. */
static double size_suffix_multiplier(const char* suf) {
  static const struct { const char* name; double mult; } table[] = {
      {"", 1}, {"B", 1},
      {"K", 1024.0}, {"KiB", 1024.0}, {"KB", 1e3},
      {"M", 1048576.0}, {"MiB", 1048576.0}, {"MB", 1e6},
      {"G", 1073741824.0}, {"GiB", 1073741824.0}, {"GB", 1e9},
      {"T", 1099511627776.0}, {"TiB", 1099511627776.0}, {"TB", 1e12},
  };
  for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
    if (strcasecmp(suf, table[i].name) == 0 && strcmp(suf, table[i].name) == 0) return table[i].mult;
  /* Accept lowercase forms such as "512mib" or "8g" too. */
  for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
    if (strcasecmp(suf, table[i].name) == 0) return table[i].mult;
  return 0;
}

int parse_size(const char* s, const char* field, size_t* out) {
  if (!s || !*s) return osdp_fail("%s: empty size; give bytes such as 512MiB or 8GB", field);
  errno = 0;
  char* end = NULL;
  double v = strtod(s, &end);
  if (end == s || errno || !isfinite(v) || v < 0)
    return osdp_fail("%s: '%s' is not a size; give bytes such as 512MiB or 8GB", field, s);
  while (*end == ' ') end++;
  double mult = size_suffix_multiplier(end);
  if (mult == 0)
    return osdp_fail("%s: unknown unit in '%s'; use B, KiB, MiB, GiB, TiB, KB, MB, GB or TB",
                     field, s);
  double bytes = v * mult;
  if (bytes > 1e18) return osdp_fail("%s: '%s' is too large", field, s);
  *out = (size_t)llround(bytes);
  return 0;
}

int parse_int(const char* s, const char* field, long lo, long hi, long* out) {
  if (!s || !*s) return osdp_fail("%s: missing value; give an integer in [%ld, %ld]", field, lo, hi);
  errno = 0;
  char* end = NULL;
  long v = strtol(s, &end, 10);
  if (*end || errno || v < lo || v > hi)
    return osdp_fail("%s: '%s' is not an integer in [%ld, %ld]", field, s, lo, hi);
  *out = v;
  return 0;
}

int parse_double(const char* s, const char* field, double* out) {
  if (!s || !*s) return osdp_fail("%s: missing value; give a number", field);
  errno = 0;
  char* end = NULL;
  double v = strtod(s, &end);
  if (*end || errno || !isfinite(v)) return osdp_fail("%s: '%s' is not a finite number", field, s);
  *out = v;
  return 0;
}

char* format_bytes(double bytes, char buf[32]) {
  static const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  int u = 0;
  double v = bytes;
  while (fabs(v) >= 1024.0 && u < 5) { v /= 1024.0; u++; }
  if (u == 0) snprintf(buf, 32, "%.0f B", v);
  else snprintf(buf, 32, "%.2f %s", v, units[u]);
  return buf;
}

/* Reads a whole text file (at most 64 MiB) into a NUL-terminated heap string the caller
** frees; NULL with an error naming `field` and the file when it cannot be read (a fifo or a
** device is refused before it can block: core/files.h). */
static char* read_text_file(const char* path, const char* field) {
  char what[300];
  snprintf(what, sizeof what, "%s", field);
  return file_read_text(path, 1u << 26, what, "give a text file of at most 64 MiB", FILE_FOLLOW);
}

char* read_text_bounded(const char* path, size_t max_bytes, const char* name, const char* hint) {
  return file_read_text(path, max_bytes, name, hint, FILE_FOLLOW);
}

cJSON* read_json_object(const char* path, const char* field, const char* shape) {
  char* text = read_text_file(path, field);
  if (!text) return NULL;
  const char* end = NULL;
  cJSON* root = cJSON_ParseWithOpts(text, &end, 0);
  int bad = cJSON_IsObject(root) && json_check_one_meaning(root, text, end, path);
  free(text);
  if (cJSON_IsObject(root) && !bad) return root;
  cJSON_Delete(root);
  if (!bad) osdp_fail("%s: malformed JSON; %s", path, shape);
  return NULL;
}

/* Orders key names for qsort (pointers to strings). */
static int cmp_key(const void* a, const void* b) {
  return strcmp(*(const char* const*)a, *(const char* const*)b);
}

/* The first key that object o, or an object or array inside it, names twice; NULL when none
** does. Objects of up to 16 keys are compared pairwise; larger ones (a safetensors header of a
** million tensors) are sorted, so the check stays n log n. */
static const char* duplicate_key(const cJSON* o) {
  int n = 0;
  for (const cJSON* c = o ? o->child : NULL; c; c = c->next) {
    n++;
    const char* inner = cJSON_IsObject(c) || cJSON_IsArray(c) ? duplicate_key(c) : NULL;
    if (inner) return inner;
  }
  if (!cJSON_IsObject(o) || n < 2) return NULL;
  if (n <= 16) {
    for (const cJSON* a = o->child; a; a = a->next)
      for (const cJSON* b = a->next; b; b = b->next)
        if (a->string && b->string && strcmp(a->string, b->string) == 0) return a->string;
    return NULL;
  }
  const char** keys = malloc((size_t)n * sizeof *keys);
  if (!keys) return NULL; /* out of memory: the document is taken as it is */
  int k = 0;
  for (const cJSON* c = o->child; c; c = c->next) keys[k++] = c->string ? c->string : "";
  qsort(keys, (size_t)n, sizeof *keys, cmp_key);
  const char* dup = NULL;
  for (int i = 1; i < n && !dup; i++) if (strcmp(keys[i - 1], keys[i]) == 0) dup = keys[i];
  free(keys);
  return dup;
}

int json_check_one_meaning(const cJSON* root, const char* text, const char* end, const char* what) {
  if (end) {
    const char* p = end;
    while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r') p++;
    int shown = 0; /* what follows, up to 20 printable characters, on the error's one line */
    while (shown < 20 && p[shown] && (unsigned char)p[shown] >= 0x20) shown++;
    if (*p)
      return osdp_fail("%s: content after the JSON document at byte %td ('%.*s'); a file holds "
                       "one JSON value", what, p - text, shown, p);
  }
  const char* dup = duplicate_key(root);
  if (dup)
    return osdp_fail("%s: key \"%.64s\" appears twice in one object; say each thing once (which "
                     "one was meant is not clear)", what, dup);
  return 0;
}

/* Orders doubles for qsort. */
static int cmp_double(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return x < y ? -1 : x > y;
}

uint64_t fnv1a64(uint64_t h, const void* p, size_t n) {
  const unsigned char* b = p;
  for (size_t i = 0; i < n; i++) { h ^= b[i]; h *= 0x100000001b3ULL; }
  return h;
}

int make_dirs(const char* path, const char* field) {
  char p[4096];
  if (snprintf(p, sizeof p, "%s", path) >= (int)sizeof p) return osdp_fail("%s: path too long", field);
  for (char* s = p + 1;; s++) {
    if (*s && *s != '/') continue;
    char c = *s;
    *s = 0;
    if (mkdir(p, 0777) && errno != EEXIST)
      return osdp_fail("%s: cannot create directory %s: %s", field, p, strerror(errno));
    if (!(*s = c)) break;
  }
  struct stat st;
  if (stat(path, &st) || !S_ISDIR(st.st_mode))
    return osdp_fail("%s: %s is not a directory; give a directory", field, path);
  return 0;
}

double median_of(double* v, int n) {
  if (n <= 0) return 0;
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double now_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static uint64_t splitmix64(uint64_t* x) {
  uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

void rng_seed(Rng* r, uint64_t seed) {
  uint64_t x = seed;
  for (int i = 0; i < 4; i++) r->s[i] = splitmix64(&x);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t rng_next(Rng* r) {
  uint64_t* s = r->s;
  uint64_t result = rotl(s[1] * 5, 7) * 9;
  uint64_t t = s[1] << 17;
  s[2] ^= s[0]; s[3] ^= s[1]; s[1] ^= s[2]; s[0] ^= s[3];
  s[2] ^= t;
  s[3] = rotl(s[3], 45);
  return result;
}

double rng_uniform(Rng* r) { return (double)(rng_next(r) >> 11) * 0x1.0p-53; }

double rng_normal(Rng* r) {
  double u1 = rng_uniform(r), u2 = rng_uniform(r);
  if (u1 < 1e-300) u1 = 1e-300;
  return sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
}

uint64_t rng_below(Rng* r, uint64_t n) { return n ? rng_next(r) % n : 0; }

int write_file_atomic(const char* path, const char* text, const char* field) {
  OutFile o;
  if (out_open(&o, path, field, "w")) return -1;
  size_t n = strlen(text);
  if (fwrite(text, 1, n, o.f) != n) { /* out_commit reports the stream's error */ }
  return out_commit(&o);
}

int check_writable(const char* path, const char* field) { return out_check_writable(path, field); }

size_t host_available_bytes(void) {
  FILE* f = fopen("/proc/meminfo", "r");
  char line[256];
  unsigned long long kb = 0;
  while (f && fgets(line, sizeof line, f))
    if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) break;
  if (f) fclose(f);
  if (kb) return (size_t)kb * 1024;
  long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
  return pages > 0 && psz > 0 ? (size_t)pages * (size_t)psz : 0;
}
