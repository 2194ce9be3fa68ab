/*
** st_files.c: the reading layer of safetensors files (st_files.h): one file's header checked
** against the file (sizes, offsets, dtypes: anything a safetensors reader must refuse), the
** shards of a Hugging Face index as one set of tensors, and elements read as fp32.
*/
#include "model/st_files.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/files.h"
#include "core/util.h"
#include "model/safetensors.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "st_files.c reads little-endian files; add byte swapping for this host"
#endif
_Static_assert(sizeof(float) == 4, "F32 tensors hold 4-byte floats");

#define ST_MAX_INT 9007199254740992.0 /* 2^53: JSON numbers above it are not exact doubles */
/* The largest index file read (a 405B model's is about 100 KiB). */
#define ST_INDEX_MAX_BYTES ((size_t)64 << 20)

/* ------------------------------------------------------------------------------------ */
/* One file: the header and the checks every reader must make                            */
/* ------------------------------------------------------------------------------------ */

/* Bytes per element of a safetensors dtype, 0 if the dtype is unknown. Every dtype is sized so
** that the buffer's layout can be checked even for tensors osdp does not read. */
static size_t dtype_size(const char* dt) {
  static const struct { const char* name; size_t size; } dtypes[] = {
      {"BOOL", 1}, {"U8", 1}, {"I8", 1}, {"F8_E5M2", 1}, {"F8_E4M3", 1}, {"I16", 2}, {"U16", 2},
      {"F16", 2}, {"BF16", 2}, {"I32", 4}, {"U32", 4}, {"F32", 4}, {"F64", 8}, {"I64", 8},
      {"U64", 8}};
  for (size_t i = 0; i < sizeof dtypes / sizeof dtypes[0]; i++)
    if (strcmp(dt, dtypes[i].name) == 0) return dtypes[i].size;
  return 0;
}

/* Offset of the first byte of s[0..n) that is not valid UTF-8 (overlong forms, surrogates and
** code points above U+10FFFF included), or n when all of it is valid. */
static size_t utf8_invalid_at(const unsigned char* s, size_t n) {
  size_t i = 0;
  while (i < n) {
    unsigned c = s[i];
    size_t len = c < 0x80 ? 1 : (c & 0xe0) == 0xc0 ? 2 : (c & 0xf0) == 0xe0 ? 3 : (c & 0xf8) == 0xf0 ? 4 : 0;
    if (len == 0 || i + len > n) return i;
    uint32_t cp = len == 1 ? c : len == 2 ? c & 0x1f : len == 3 ? c & 0x0f : c & 0x07;
    for (size_t k = 1; k < len; k++) {
      if ((s[i + k] & 0xc0) != 0x80) return i;
      cp = cp << 6 | (s[i + k] & 0x3f);
    }
    static const uint32_t min_cp[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < min_cp[len] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return i;
    i += len;
  }
  return n;
}

/* Reads a JSON number that must be an exact non-negative integer (at most 2^53) into *out. */
static int json_u64(const cJSON* v, uint64_t* out) {
  if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble > ST_MAX_INT ||
      v->valuedouble != (double)(uint64_t)v->valuedouble)
    return -1;
  *out = (uint64_t)v->valuedouble;
  return 0;
}

/* Fills tensor t from its header entry e (key t->name) and checks it on its own: a known
** dtype, at most ST_MAX_DIMS integer dimensions, two integer offsets b <= e inside the buffer of
** buf_len bytes, and e - b = product(shape) * dtype size. */
static int tensor_parse(const StFile* s, const cJSON* e, uint64_t buf_len, StTensor* t) {
  const char* p = s->path;
  if (!cJSON_IsObject(e))
    return osdp_fail("safetensors: '%s': header entry '%s' is not an object with dtype, shape "
                     "and data_offsets", p, t->name);
  const cJSON* dt = cJSON_GetObjectItemCaseSensitive(e, "dtype");
  const cJSON* sh = cJSON_GetObjectItemCaseSensitive(e, "shape");
  const cJSON* of = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
  if (!cJSON_IsString(dt))
    return osdp_fail("safetensors: '%s': tensor '%s' has no dtype string; expected a safetensors "
                     "dtype such as \"F32\"", p, t->name);
  if (!(t->elem = dtype_size(dt->valuestring)))
    return osdp_fail("safetensors: '%s': tensor '%s' has dtype \"%s\", which is not a "
                     "safetensors dtype (F32, F16, BF16, ...)", p, t->name, dt->valuestring);
  t->dtype = dt->valuestring;
  int nd = cJSON_IsArray(sh) ? cJSON_GetArraySize(sh) : -1;
  if (nd < 0 || nd > ST_MAX_DIMS)
    return osdp_fail("safetensors: '%s': tensor '%s' has %s; expected an array of at most %d "
                     "integers", p, t->name, nd < 0 ? "no shape array" : "too many dimensions",
                     ST_MAX_DIMS);
  t->ndim = nd;
  uint64_t numel = 1;
  int overflow = 0;
  for (int k = 0; k < nd; k++) {
    if (json_u64(cJSON_GetArrayItem(sh, k), &t->shape[k]))
      return osdp_fail("safetensors: '%s': tensor '%s' has shape[%d] that is not a non-negative "
                       "integer", p, t->name, k);
    if (t->shape[k] && numel > UINT64_MAX / t->shape[k]) overflow = 1;
    else numel *= t->shape[k];
  }
  if (!cJSON_IsArray(of) || cJSON_GetArraySize(of) != 2 ||
      json_u64(cJSON_GetArrayItem(of, 0), &t->begin) || json_u64(cJSON_GetArrayItem(of, 1), &t->end))
    return osdp_fail("safetensors: '%s': tensor '%s' has data_offsets that are not two "
                     "non-negative integers [begin, end]", p, t->name);
  if (t->end < t->begin)
    return osdp_fail("safetensors: '%s': tensor '%s' has data_offsets [%llu, %llu] with end "
                     "before begin", p, t->name, (unsigned long long)t->begin,
                     (unsigned long long)t->end);
  if (t->end > buf_len)
    return osdp_fail("safetensors: '%s': tensor '%s' has data_offsets [%llu, %llu] past the end "
                     "of the file's %llu data bytes; the file is truncated or corrupt", p,
                     t->name, (unsigned long long)t->begin, (unsigned long long)t->end,
                     (unsigned long long)buf_len);
  if (overflow || numel > UINT64_MAX / t->elem || numel * t->elem != t->end - t->begin)
    return osdp_fail("safetensors: '%s': tensor '%s' has data_offsets [%llu, %llu] (%llu bytes) "
                     "but its shape and dtype %s need %s%llu bytes", p, t->name,
                     (unsigned long long)t->begin, (unsigned long long)t->end,
                     (unsigned long long)(t->end - t->begin), t->dtype, overflow ? "more than " : "",
                     overflow ? (unsigned long long)UINT64_MAX : (unsigned long long)(numel * t->elem));
  return 0;
}

/* qsort order of tensors by name. */
static int by_name(const void* a, const void* b) {
  return strcmp(((const StTensor*)a)->name, ((const StTensor*)b)->name);
}

/* qsort order of tensor pointers by (begin, end). */
static int by_offset(const void* a, const void* b) {
  const StTensor *x = *(const StTensor* const*)a, *y = *(const StTensor* const*)b;
  if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
  return x->end < y->end ? -1 : x->end > y->end;
}

/* Checks the file-wide rules: names unique, byte ranges contiguous from 0, non-overlapping
** and covering the whole buffer of buf_len bytes. Sorts s->t by name. */
static int tensors_check_layout(StFile* s, uint64_t buf_len) {
  qsort(s->t, (size_t)s->n, sizeof *s->t, by_name);
  for (int i = 1; i < s->n; i++)
    if (strcmp(s->t[i].name, s->t[i - 1].name) == 0)
      return osdp_fail("safetensors: '%s': tensor '%s' appears twice in the header", s->path,
                       s->t[i].name);
  const StTensor** order = malloc(((size_t)s->n + 1) * sizeof *order);
  if (!order) return osdp_fail("safetensors: out of memory reading '%s'", s->path);
  for (int i = 0; i < s->n; i++) order[i] = &s->t[i];
  qsort(order, (size_t)s->n, sizeof *order, by_offset);
  uint64_t at = 0;
  int rc = 0;
  for (int i = 0; i < s->n && rc == 0; i++) {
    const StTensor* t = order[i];
    if (t->begin < at)
      rc = osdp_fail("safetensors: '%s': tensor '%s' (data_offsets [%llu, %llu]) overlaps "
                     "tensor '%s', which ends at %llu", s->path, t->name,
                     (unsigned long long)t->begin, (unsigned long long)t->end, order[i - 1]->name,
                     (unsigned long long)at);
    else if (t->begin > at)
      rc = osdp_fail("safetensors: '%s': tensor '%s' starts at data offset %llu, leaving bytes "
                     "[%llu, %llu) of the buffer to no tensor", s->path, t->name,
                     (unsigned long long)t->begin, (unsigned long long)at,
                     (unsigned long long)t->begin);
    at = t->end;
  }
  free(order);
  if (rc == 0 && at != buf_len)
    rc = osdp_fail("safetensors: '%s': the tensors cover %llu of the %llu data bytes after the "
                   "header; the file has trailing data", s->path, (unsigned long long)at,
                   (unsigned long long)buf_len);
  return rc;
}

/* The members of the JSON object text h[0..n), counted without parsing it (the commas at depth
** 1 outside strings, plus one): an upper bound on the tensors a header names, known before cJSON
** builds a node for each. */
static long header_members(const char* h, size_t n) {
  long commas = 0;
  int depth = 0, in_str = 0, esc = 0;
  for (size_t i = 0; i < n; i++) {
    char c = h[i];
    if (in_str) {
      if (esc) esc = 0;
      else if (c == '\\') esc = 1;
      else if (c == '"') in_str = 0;
    } else if (c == '"') {
      in_str = 1;
    } else if (c == '{' || c == '[') {
      depth++;
    } else if (c == '}' || c == ']') {
      depth--;
    } else if (c == ',' && depth == 1) {
      commas++;
    }
  }
  return commas + 1;
}

/* Parses and checks the N-byte header text h of s (N + 1 bytes allocated, NUL-terminated). */
static int header_parse(StFile* s, char* h, uint64_t N, uint64_t buf_len) {
  size_t bad = utf8_invalid_at((const unsigned char*)h, (size_t)N);
  if (bad < N)
    return osdp_fail("safetensors: '%s': the header is not valid UTF-8 (byte %zu)", s->path, bad);
  const char* nul = memchr(h, 0, (size_t)N);
  if (nul)
    return osdp_fail("safetensors: '%s': the header holds a NUL byte at byte %td; the header is "
                     "JSON text padded with spaces", s->path, nul - h);
  long members = header_members(h, (size_t)N);
  if (members > ST_MAX_TENSORS + 1) /* + 1: __metadata__ */
    return osdp_fail("safetensors: '%s': the header holds %ld entries, more than the %d tensors a "
                     "file may hold; the file is corrupt or not a model's checkpoint", s->path,
                     members, ST_MAX_TENSORS);
  const char* end = NULL;
  s->root = cJSON_ParseWithLengthOpts(h, (size_t)N + 1, &end, 1); /* + 1: the NUL after it */
  if (!s->root)
    return osdp_fail("safetensors: '%s': the header is not valid JSON (error near byte %td of "
                     "%llu)", s->path, end ? end - h : (ptrdiff_t)0, (unsigned long long)N);
  if (!cJSON_IsObject(s->root))
    return osdp_fail("safetensors: '%s': the header is not a JSON object", s->path);
  int n = 0;
  for (const cJSON* e = s->root->child; e; e = e->next) n++;
  s->t = calloc((size_t)n + 1, sizeof *s->t);
  if (!s->t) return osdp_fail("safetensors: out of memory reading '%s'", s->path);
  for (const cJSON* e = s->root->child; e; e = e->next) {
    if (strcmp(e->string, "__metadata__") == 0) {
      if (s->meta || !cJSON_IsObject(e))
        return osdp_fail("safetensors: '%s': __metadata__ must appear once, as an object of "
                         "strings", s->path);
      for (const cJSON* m = e->child; m; m = m->next)
        if (!cJSON_IsString(m))
          return osdp_fail("safetensors: '%s': __metadata__.%s is not a string (metadata values "
                           "must be strings)", s->path, m->string);
      s->meta = e;
      continue;
    }
    StTensor* t = &s->t[s->n++];
    t->name = e->string;
    if (tensor_parse(s, e, buf_len, t)) return -1;
  }
  if (tensors_check_layout(s, buf_len)) return -1; /* names a tensor given twice itself */
  char what[4200];
  snprintf(what, sizeof what, "safetensors: '%s': the header", s->path);
  return json_check_one_meaning(s->root, h, NULL, what); /* a key twice inside an entry */
}

/* Closes s and frees what st_open allocated (a closed or zeroed s is fine). */
void st_close(StFile* s) {
  if (s->f) fclose(s->f);
  cJSON_Delete(s->root);
  free(s->t);
  memset(s, 0, sizeof *s);
}

int st_open(StFile* s, const char* path) {
  memset(s, 0, sizeof *s);
  s->path = path;
  s->f = file_open_read(path, "safetensors", FILE_FOLLOW);
  if (!s->f) return -1;
  struct stat st;
  unsigned char n8[8];
  int rc = -1;
  char* h = NULL;
  if (fstat(fileno(s->f), &st) != 0) {
    osdp_fail("safetensors: '%s': %s", path, strerror(errno));
  } else if (st.st_size < 8) {
    osdp_fail("safetensors: '%s' is truncated: %lld bytes, shorter than the 8-byte header size",
              path, (long long)st.st_size);
  } else if (fread(n8, 1, 8, s->f) != 8) {
    osdp_fail("safetensors: reading '%s' failed: %s", path, strerror(errno));
  } else {
    uint64_t N = 0, size = (uint64_t)st.st_size;
    for (int i = 7; i >= 0; i--) N = N << 8 | n8[i];
    if (N > size - 8)
      osdp_fail("safetensors: '%s': header size %llu is larger than the %llu bytes that follow "
                "it; the file is truncated or not a safetensors file", path,
                (unsigned long long)N, (unsigned long long)(size - 8));
    else if (N > SAFETENSORS_MAX_HEADER)
      osdp_fail("safetensors: '%s': header size %llu is over the %llu-byte limit; the file is "
                "corrupt", path, (unsigned long long)N, SAFETENSORS_MAX_HEADER);
    else if (N < 2)
      osdp_fail("safetensors: '%s': header size %llu is too small for a JSON object", path,
                (unsigned long long)N);
    else if (!(h = malloc((size_t)N + 1)))
      osdp_fail("safetensors: out of memory for the %llu-byte header of '%s'",
                (unsigned long long)N, path);
    else if (fread(h, 1, (size_t)N, s->f) != (size_t)N)
      osdp_fail("safetensors: reading the header of '%s' failed: %s", path, strerror(errno));
    else if (h[0] != '{')
      osdp_fail("safetensors: '%s': the header does not start with '{'; not a safetensors file",
                path);
    else {
      h[N] = 0;
      s->data_start = 8 + N;
      rc = header_parse(s, h, N, size - 8 - N);
      for (int i = 0; rc == 0 && i < s->n; i++) s->t[i].file = s;
    }
  }
  free(h);
  if (rc) st_close(s);
  return rc;
}

/* The file's tensor called name (exact), or NULL. s->t is sorted by name. */
static const StTensor* st_find(const StFile* s, const char* name) {
  StTensor key;
  key.name = name;
  return bsearch(&key, s->t, (size_t)s->n, sizeof *s->t, by_name);
}


/* ------------------------------------------------------------------------------------ */
/* Elements as fp32                                                                      */
/* ------------------------------------------------------------------------------------ */

int st_float_dtype(const char* dt) {
  return strcmp(dt, "F32") == 0 || strcmp(dt, "BF16") == 0 || strcmp(dt, "F16") == 0;
}

/* A bfloat16 as fp32: its 16 bits are fp32's high half (exact, NaN payloads kept). */
static float bf16_to_f32(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

/* An IEEE half as fp32 (exact: subnormals, infinities and NaNs included). */
static float f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h >> 15) << 31, e = (h >> 10) & 0x1f, m = h & 0x3ffu, u;
  if (e == 0x1f) {
    u = sign | 0x7f800000u | m << 13;              /* inf, NaN */
  } else if (e) {
    u = sign | (e + 112) << 23 | m << 13;          /* normal: rebias 15 -> 127 */
  } else {
    float f = ldexpf((float)m, -24);               /* zero, subnormal: m * 2^-24 */
    return sign ? -f : f;
  }
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

/* Reads n bytes at data offset off of s into buf. */
static int st_read_at(const StFile* s, uint64_t off, void* buf, size_t n) {
  if (fseeko(s->f, (off_t)(s->data_start + off), SEEK_SET) == 0 && fread(buf, 1, n, s->f) == n)
    return 0;
  return osdp_fail("safetensors: reading '%s' failed: %s", s->path,
                   ferror(s->f) ? strerror(errno) : "unexpected end of file");
}

int st_read_floats(const StTensor* t, uint64_t first, size_t count, float* out, uint16_t* scratch,
                   size_t cap) {
  if (t->elem == 4) return st_read_at(t->file, t->begin + first * 4, out, count * 4);
  int bf16 = strcmp(t->dtype, "BF16") == 0;
  for (size_t at = 0; at < count; at += cap) {
    size_t n = count - at < cap ? count - at : cap;
    if (st_read_at(t->file, t->begin + (first + at) * 2, scratch, n * 2)) return -1;
    for (size_t i = 0; i < n; i++) out[at + i] = bf16 ? bf16_to_f32(scratch[i]) : f16_to_f32(scratch[i]);
  }
  return 0;
}

/* ------------------------------------------------------------------------------------ */
/* A checkpoint: one file, or an index and its shards                                    */
/* ------------------------------------------------------------------------------------ */

/* One entry of an index's weight_map, pointing into the parsed index. */
typedef struct IndexEntry {
  const char* tensor;
  const char* shard;
  int file;            /* index of the shard in the set's files */
} IndexEntry;

/* A new string "dir/name" (NULL when out of memory). */
static char* path_join(const char* dir, const char* name) {
  size_t n = strlen(dir) + strlen(name) + 2;
  char* p = malloc(n);
  if (p) snprintf(p, n, "%s/%s", dir, name);
  return p;
}

/* A new string holding the directory of path ("." for a bare name). */
static char* dir_of(const char* path) {
  const char* slash = strrchr(path, '/');
  size_t n = slash ? (size_t)(slash - path) : 1;
  char* d = malloc(n + 2);
  if (!d) return NULL;
  if (!slash) strcpy(d, ".");
  else if (slash == path) strcpy(d, "/");
  else snprintf(d, n + 1, "%.*s", (int)n, path);
  return d;
}

/* Whether a regular file exists at path. */
static int is_file(const char* path) {
  struct stat st;
  return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

int st_dir_weights(const char* dir, char* out, size_t n) {
  static const char* const names[] = {"model.safetensors.index.json", "model.safetensors"};
  for (int i = 0; i < 2; i++) {
    snprintf(out, n, "%s/%s", dir, names[i]);
    if (is_file(out)) return 1;
  }
  return 0;
}

int st_is_index_file(const char* path) {
  FILE* f = file_open_read(path, "safetensors", FILE_FOLLOW);
  if (!f) osdp_clear_error(); /* not a readable regular file: not an index */
  unsigned char b[9];
  size_t n = f ? fread(b, 1, sizeof b, f) : 0;
  struct stat st;
  int ok = f && fstat(fileno(f), &st) == 0;
  if (f) fclose(f);
  if (!ok || n == 0) return 0;
  /* A safetensors file: 8 bytes of header size (within the file), then '{'. JSON text read as
  ** that size is beyond any file (its high bytes are printable characters). */
  uint64_t N = 0;
  for (int i = 7; i >= 0 && n == 9; i--) N = N << 8 | b[i];
  if (n == 9 && b[8] == '{' && N <= (uint64_t)st.st_size - 8) return 0;
  size_t k = 0;
  while (k < n && (b[k] == ' ' || b[k] == '\n' || b[k] == '\r' || b[k] == '\t')) k++;
  return k < n && (b[k] == '{' || b[k] == '[');
}

/* qsort order of index entries by tensor name, and of string pointers. */
static int entry_by_tensor(const void* a, const void* b) {
  return strcmp(((const IndexEntry*)a)->tensor, ((const IndexEntry*)b)->tensor);
}
static int by_string(const void* a, const void* b) {
  return strcmp(*(const char* const*)a, *(const char* const*)b);
}

/* Whether name is a plain file name: not empty, no '/', not "." or "..". */
static int plain_name(const char* name) {
  return name[0] && !strchr(name, '/') && strcmp(name, ".") && strcmp(name, "..");
}

/* Reads the entries of the index's weight_map object `map` into *e (sorted by tensor; the
** caller frees it) and *n: every value a plain file name, no tensor twice. */
static int index_entries(const char* path, const cJSON* map, IndexEntry** e, int* n) {
  int count = 0;
  for (const cJSON* m = map->child; m; m = m->next) count++;
  *e = calloc((size_t)count, sizeof **e);
  if (!*e) return osdp_fail("safetensors: out of memory reading index '%s'", path);
  for (const cJSON* m = map->child; m; m = m->next) {
    if (!cJSON_IsString(m) || !plain_name(m->valuestring))
      return osdp_fail("safetensors: index '%s' maps tensor '%s' to %s%s%s; expected the name of a "
                       "shard file beside the index (\"model-00001-of-00002.safetensors\")", path,
                       m->string, cJSON_IsString(m) ? "'" : "", cJSON_IsString(m) ? m->valuestring :
                       "a value that is not a string", cJSON_IsString(m) ? "'" : "");
    (*e)[*n].tensor = m->string;
    (*e)[(*n)++].shard = m->valuestring;
  }
  qsort(*e, (size_t)*n, sizeof **e, entry_by_tensor);
  for (int i = 1; i < *n; i++)
    if (strcmp((*e)[i].tensor, (*e)[i - 1].tensor) == 0)
      return osdp_fail("safetensors: index '%s' maps tensor '%s' twice (to '%s' and '%s')", path,
                       (*e)[i].tensor, (*e)[i - 1].shard, (*e)[i].shard);
  return 0;
}

/* Reads the index at path into *root (the caller deletes it) and its weight_map's entries
** (*e, *n; see index_entries). */
static int index_parse(const char* path, cJSON** root, IndexEntry** e, int* n) {
  *e = NULL;
  *n = 0;
  char name[4200];
  snprintf(name, sizeof name, "safetensors: index '%s'", path);
  char* text = read_text_bounded(path, ST_INDEX_MAX_BYTES, name,
                                 "is it a model.safetensors.index.json?");
  if (!text) return -1;
  const char* end = NULL;
  *root = cJSON_ParseWithOpts(text, &end, 1);
  long at = end ? (long)(end - text) : 0;
  free(text);
  const cJSON* map = cJSON_GetObjectItemCaseSensitive(*root, "weight_map");
  if (!*root)
    return osdp_fail("safetensors: index '%s' is not valid JSON (error near byte %ld); expected "
                     "{\"metadata\": {...}, \"weight_map\": {\"tensor\": \"shard file\", ...}}",
                     path, at);
  if (!cJSON_IsObject(*root) || !cJSON_IsObject(map) || !map->child)
    return osdp_fail("safetensors: index '%s' has %s; expected {\"metadata\": {...}, "
                     "\"weight_map\": {\"tensor\": \"shard file\", ...}}", path,
                     !cJSON_IsObject(*root) ? "no JSON object" : !map ? "no \"weight_map\"" :
                     !cJSON_IsObject(map) ? "a weight_map that is not an object" : "an empty weight_map");
  if (index_entries(path, map, e, n)) return -1; /* names a tensor mapped twice itself */
  return json_check_one_meaning(*root, NULL, NULL, name); /* then a key twice anywhere else */
}

/* Allocates the set's files and their paths for nfiles files (zeroed). */
static int set_alloc(StSet* set, int nfiles) {
  set->files = calloc((size_t)nfiles, sizeof *set->files);
  set->file_paths = calloc((size_t)nfiles, sizeof *set->file_paths);
  set->nfiles = nfiles;
  if (set->files && set->file_paths) return 0;
  return osdp_fail("safetensors: out of memory opening '%s'", set->path);
}

/* Opens each distinct shard the entries name (in name order) and points each entry at its
** shard's index in set->files. A shard that does not exist is named with a tensor mapped to it. */
static int shards_open(StSet* set, IndexEntry* e, int n) {
  const char** names = malloc((size_t)n * sizeof *names);
  if (!names) return osdp_fail("safetensors: out of memory opening '%s'", set->path);
  for (int i = 0; i < n; i++) names[i] = e[i].shard;
  qsort(names, (size_t)n, sizeof *names, by_string);
  int k = 0;
  for (int i = 0; i < n; i++)
    if (k == 0 || strcmp(names[i], names[k - 1]) != 0) names[k++] = names[i];
  int rc = set_alloc(set, k);
  for (int i = 0; i < n && rc == 0; i++) {
    const char** at = bsearch(&e[i].shard, names, (size_t)k, sizeof *names, by_string);
    e[i].file = (int)(at - names);
  }
  for (int i = 0; i < k && rc == 0; i++) {
    if (!(set->file_paths[i] = path_join(set->dir, names[i])))
      rc = osdp_fail("safetensors: out of memory opening '%s'", set->path);
    else if (!is_file(set->file_paths[i])) {
      const IndexEntry* first = e;
      while (strcmp(first->shard, names[i]) != 0) first++;
      struct stat st;
      if (stat(set->file_paths[i], &st) == 0) /* a fifo or a directory: there, but not a shard */
        rc = osdp_fail("safetensors: index '%s' maps tensor '%s' to shard '%s', which is a %s, "
                       "not a regular file (%s); give the shard's file", set->path, first->tensor,
                       names[i], file_kind(st.st_mode), set->file_paths[i]);
      else
        rc = osdp_fail("safetensors: index '%s' maps tensor '%s' to shard '%s', which is missing "
                       "(%s); download every shard the index names", set->path, first->tensor,
                       names[i], set->file_paths[i]);
    } else {
      rc = st_open(&set->files[i], set->file_paths[i]);
    }
  }
  free(names);
  return rc;
}

/* Checks the index against its shards: each entry's tensor is in its shard, and each shard's
** tensor is mapped to that shard. */
static int shards_agree(const StSet* set, const IndexEntry* e, int n) {
  for (int i = 0; i < n; i++)
    if (!st_find(&set->files[e[i].file], e[i].tensor))
      return osdp_fail("safetensors: index '%s' maps tensor '%s' to shard '%s', which has no such "
                       "tensor; the index and its shards disagree", set->path, e[i].tensor,
                       e[i].shard);
  for (int f = 0; f < set->nfiles; f++)
    for (int j = 0; j < set->files[f].n; j++) {
      IndexEntry key = {set->files[f].t[j].name, NULL, 0};
      const IndexEntry* m = bsearch(&key, e, (size_t)n, sizeof *e, entry_by_tensor);
      if (!m || m->file != f)
        return osdp_fail("safetensors: shard '%s' holds tensor '%s', which index '%s' %s%s%s; the "
                         "index and its shards disagree", set->file_paths[f], key.tensor,
                         set->path, m ? "maps to shard '" : "does not list", m ? m->shard : "",
                         m ? "'" : "");
    }
  return 0;
}

/* qsort order of tensor pointers by name. */
static int tensor_ptr_by_name(const void* a, const void* b) {
  return strcmp((*(const StTensor* const*)a)->name, (*(const StTensor* const*)b)->name);
}

/* Lists every tensor of the set's files in set->t, sorted by name; names must be unique (an
** index guarantees it; one file checks it itself). */
static int set_list(StSet* set) {
  size_t total = 0;
  for (int f = 0; f < set->nfiles; f++) total += (size_t)set->files[f].n;
  set->t = malloc((total + 1) * sizeof *set->t);
  if (!set->t) return osdp_fail("safetensors: out of memory opening '%s'", set->path);
  for (int f = 0; f < set->nfiles; f++)
    for (int j = 0; j < set->files[f].n; j++) set->t[set->n++] = &set->files[f].t[j];
  qsort(set->t, (size_t)set->n, sizeof *set->t, tensor_ptr_by_name);
  set->meta = set->files[0].meta;
  return 0;
}

/* Opens the shards of the index at set->path. */
static int set_open_index(StSet* set) {
  cJSON* root = NULL;
  IndexEntry* e = NULL;
  int n = 0;
  int rc = index_parse(set->path, &root, &e, &n);
  if (rc == 0) rc = shards_open(set, e, n);
  if (rc == 0) rc = shards_agree(set, e, n);
  if (rc == 0) rc = set_list(set);
  free(e);
  cJSON_Delete(root);
  return rc;
}

/* The file the set reads for path (a directory's index or model.safetensors, else path) into
** set->path, and whether it is an index. */
static int set_resolve(StSet* set, const char* path) {
  struct stat st;
  char found[4096];
  if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
    if (!st_dir_weights(path, found, sizeof found))
      return osdp_fail("safetensors: '%s' is a directory without model.safetensors or "
                       "model.safetensors.index.json; give a Hugging Face model directory or a "
                       "weights file", path);
    path = found;
  }
  set->path = malloc(strlen(path) + 1);
  set->dir = dir_of(path);
  if (!set->path || !set->dir) return osdp_fail("safetensors: out of memory opening '%s'", path);
  strcpy(set->path, path);
  set->is_index = is_file(path) && st_is_index_file(path);
  return 0;
}

int st_set_open(StSet* set, const char* path) {
  memset(set, 0, sizeof *set);
  int rc = set_resolve(set, path);
  if (rc == 0 && set->is_index) {
    rc = set_open_index(set);
  } else if (rc == 0) {
    rc = set_alloc(set, 1);
    if (rc == 0 && !(set->file_paths[0] = malloc(strlen(set->path) + 1)))
      rc = osdp_fail("safetensors: out of memory opening '%s'", set->path);
    if (rc == 0) rc = st_open(&set->files[0], strcpy(set->file_paths[0], set->path));
    if (rc == 0) rc = set_list(set);
  }
  if (rc) st_set_close(set);
  return rc;
}

void st_set_close(StSet* set) {
  for (int f = 0; f < set->nfiles; f++) {
    if (set->files) st_close(&set->files[f]);
    if (set->file_paths) free(set->file_paths[f]);
  }
  free(set->files);
  free(set->file_paths);
  free((void*)set->t);
  free(set->path);
  free(set->dir);
  memset(set, 0, sizeof *set);
}

const StTensor* st_set_find(const StSet* set, const char* name) {
  StTensor key;
  key.name = name;
  const StTensor* k = &key;
  const StTensor* const* at = bsearch(&k, set->t, (size_t)set->n, sizeof *set->t, tensor_ptr_by_name);
  return at ? *at : NULL;
}
