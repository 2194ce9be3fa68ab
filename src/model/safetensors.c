/*
** safetensors.c: model weights as safetensors files, named as the model family's spec names
** each parameter tensor (gpt.h ParamTensor.hf_name); see safetensors.h.
**
** Reading is in three steps, and params is touched only in the last: st_open parses and checks
** the header against the file alone (sizes, offsets, dtypes: anything a safetensors reader must
** refuse); st_match pairs the file's tensors with the tensors a model needs ("wants", built
** from the op list by wants_build) and checks names, dtypes and shapes; st_read_tensors then
** copies the data. Writing walks the same wants.
*/
#include "model/safetensors.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdarg.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/util.h"
#include "model/family.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors.c reads and writes little-endian files; add byte swapping for this host"
#endif
_Static_assert(sizeof(float) == 4, "F32 tensors hold 4-byte floats");

#define ST_MAX_DIMS 16
#define ST_MAX_INT 9007199254740992.0 /* 2^53: JSON numbers above it are not exact doubles */
#define ST_STREAM_FLOATS ((size_t)1 << 20)
/* The prefix GPT-2 files may give names (family_gpt2()->hf_prefix), for st_config, which infers
** a GPT-2 shape from a file. */
#define ST_PREFIX "transformer."

/* One tensor of a file's header. */
typedef struct StTensor {
  const char* name;  /* the header's key (points into StFile.root) */
  const char* dtype; /* the header's dtype (points into StFile.root) */
  size_t elem;       /* bytes per element of dtype */
  int ndim;
  uint64_t shape[ST_MAX_DIMS];
  uint64_t begin, end; /* data_offsets, relative to the buffer after the header */
} StTensor;

/* An open safetensors file whose header has been checked. */
typedef struct StFile {
  const char* path;
  FILE* f;
  uint64_t data_start; /* 8 + N: where the buffer starts in the file */
  cJSON* root;         /* the parsed header */
  const cJSON* meta;   /* its "__metadata__" object, or NULL */
  StTensor* t;
  int n;
} StFile;

/* A tensor a model needs, and where it lives among osdp's parameters. */
typedef struct Want {
  char name[64];         /* the tensor's name in files (ParamTensor.hf_name), without prefix */
  int ndim;
  uint64_t shape[2];
  size_t off;            /* offset of its first element in params */
  /* Transposed: [shape[0], trows] in the file is the first shape[0] columns of the [trows,
  ** tcols] tensor in params (GPT-2's wte: [V, C] of [C, Vp]; padded columns are not stored). */
  int transposed;
  size_t trows, tcols;
  const StTensor* have;  /* the file's tensor (st_match) */
} Want;

/* The wants of a model: every named tensor in model order. */
typedef struct Wants {
  Want* w;
  int n;
  int L;
  const ModelFamily* fam;  /* the names' conventions */
  size_t C;                /* the widest row of a transposed want (for the stream buffer) */
  int tied_to;             /* the want a tied head must equal (-1: none) */
  const StTensor* lm_head; /* the file's tied head, if any (st_match) */
} Wants;

/* Base name of a path, for config names. */
static const char* base_name(const char* path) {
  const char* slash = strrchr(path, '/');
  return slash ? slash + 1 : path;
}

/* ------------------------------------------------------------------------------------ */
/* Header parsing and the checks every reader must make                                  */
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

/* Parses and checks the N-byte header text h of s (N + 1 bytes allocated, NUL-terminated). */
static int header_parse(StFile* s, char* h, uint64_t N, uint64_t buf_len) {
  size_t bad = utf8_invalid_at((const unsigned char*)h, (size_t)N);
  if (bad < N)
    return osdp_fail("safetensors: '%s': the header is not valid UTF-8 (byte %zu)", s->path, bad);
  const char* nul = memchr(h, 0, (size_t)N);
  if (nul)
    return osdp_fail("safetensors: '%s': the header holds a NUL byte at byte %td; the header is "
                     "JSON text padded with spaces", s->path, nul - h);
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
  return tensors_check_layout(s, buf_len);
}

/* Closes s and frees what st_open allocated. */
static void st_close(StFile* s) {
  if (s->f) fclose(s->f);
  cJSON_Delete(s->root);
  free(s->t);
  memset(s, 0, sizeof *s);
}

/* Opens safetensors file path and checks its header against the file's real size before
** allocating anything of the sizes it claims. Returns 0, or -1 with s closed. */
static int st_open(StFile* s, const char* path) {
  memset(s, 0, sizeof *s);
  s->path = path;
  s->f = fopen(path, "rb");
  if (!s->f) return osdp_fail("safetensors: cannot open '%s': %s", path, strerror(errno));
  struct stat st;
  unsigned char n8[8];
  int rc = -1;
  char* h = NULL;
  if (fstat(fileno(s->f), &st) != 0 || !S_ISREG(st.st_mode)) {
    osdp_fail("safetensors: '%s' is not a regular file", path);
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

/* The file's tensor called name with or without the "transformer." prefix, or NULL; both
** present is an error (*dup = 1). */
static const StTensor* st_find_any(const StFile* s, const char* name, int* dup) {
  char full[96];
  snprintf(full, sizeof full, ST_PREFIX "%s", name);
  const StTensor *a = st_find(s, name), *b = st_find(s, full);
  *dup = a && b;
  return a ? a : b;
}

/* Formats a tensor's shape as "[a, b]". Returns buf. */
static const char* shape_text(int nd, const uint64_t* sh, char buf[128]) {
  size_t at = (size_t)snprintf(buf, 128, "[");
  for (int k = 0; k < nd && at < 100; k++)
    at += (size_t)snprintf(buf + at, 128 - at, "%s%llu", k ? ", " : "", (unsigned long long)sh[k]);
  snprintf(buf + at, 128 - at, "]");
  return buf;
}

/* ------------------------------------------------------------------------------------ */
/* The tensors a model needs                                                             */
/* ------------------------------------------------------------------------------------ */

/* Appends the want of parameter tensor t, whose op's block starts at params + base. */
static void want_add(Wants* ws, const ParamTensor* t, size_t base) {
  Want* w = &ws->w[ws->n++];
  memset(w, 0, sizeof *w);
  snprintf(w->name, sizeof w->name, "%s", t->hf_name);
  w->ndim = t->hf_ndim;
  w->shape[0] = t->hf_shape[0];
  w->shape[1] = t->hf_shape[1];
  w->off = base + t->off;
  w->transposed = t->hf_transposed;
  w->trows = t->rows;
  w->tcols = t->cols;
  if (w->transposed && w->trows > ws->C) ws->C = w->trows;
}

/* Builds the list of tensors model d needs: every parameter tensor with a file name, in model
** order (free ws->w after use). Checks that they hold every parameter but the padding a
** transposed tensor leaves out. */
static int wants_build(const GptDesc* d, Wants* ws) {
  memset(ws, 0, sizeof *ws);
  ws->L = d->cfg.n_layer;
  ws->fam = d->family;
  ws->tied_to = -1;
  ws->w = malloc(((size_t)d->nops * MODEL_MAX_TENSORS + 1) * sizeof *ws->w);
  if (!ws->w) return osdp_fail("safetensors: out of memory");
  size_t base = 0, total = 0, padding = 0;
  for (int i = 0; i < d->nops; i++) {
    for (int j = 0; j < d->ops[i].ntensors; j++) {
      const ParamTensor* t = &d->ops[i].tensor[j];
      if (!t->hf_name[0]) continue;
      if (ws->fam->hf_tied_to && strcmp(t->hf_name, ws->fam->hf_tied_to) == 0) ws->tied_to = ws->n;
      want_add(ws, t, base);
      const Want* w = &ws->w[ws->n - 1];
      total += w->shape[0] * (w->ndim > 1 ? w->shape[1] : 1);
      if (w->transposed) padding += (w->tcols - w->shape[0]) * w->trows;
    }
    base += d->ops[i].n_params;
  }
  if (total + padding == d->n_params) return 0;
  free(ws->w);
  ws->w = NULL;
  return osdp_fail("safetensors: the named tensors of model '%s' hold %zu parameters but it has "
                   "%zu besides padding; its family's spec leaves some tensors without a file name",
                   d->cfg.name, total, d->n_params - padding);
}

/* Parses "<layer prefix><l>.<suffix>" (e.g. "h.3.ln_1.weight"; the file prefix already
** removed): the layer l (no sign, no leading zero) into *l, and returns the suffix, or NULL when
** name is not of that form. */
static const char* layer_of(const char* name, const char* prefix, long* l) {
  size_t np = strlen(prefix);
  if (strncmp(name, prefix, np) != 0 || name[np] < '0' || name[np] > '9') return NULL;
  const char* p = name + np;
  if (p[0] == '0' && p[1] != '.') return NULL;
  long v = 0;
  for (; *p >= '0' && *p <= '9'; p++) {
    if (v > 100000000L) return NULL;
    v = v * 10 + (*p - '0');
  }
  if (*p != '.') return NULL;
  *l = v;
  return p + 1;
}

/* The index in ws of the want called name (prefix removed), -1 for a tensor that is ignored
** (the family's ignored per-layer buffers, a tied head: *lm = 1), -2 for an unknown one, -3 for
** a layer beyond the model's. */
static int want_index(const Wants* ws, const char* name, int* lm) {
  *lm = 0;
  for (int k = 0; k < ws->n; k++)
    if (strcmp(ws->w[k].name, name) == 0) return k;
  if (ws->fam->hf_tied_head && strcmp(name, ws->fam->hf_tied_head) == 0) { *lm = 1; return -1; }
  long l;
  const char* suf = layer_of(name, ws->fam->hf_layer_prefix, &l);
  if (!suf) return -2;
  for (int j = 0; ws->fam->hf_ignored[j]; j++)
    if (strcmp(suf, ws->fam->hf_ignored[j]) == 0) return -1;
  return l >= ws->L ? -3 : -2;
}

/* Pairs the file's tensors with the wants: each want present once (with or without the
** prefix) as F32 of its shape; no unknown tensors; an lm_head.weight of wte's shape and dtype
** is remembered (its values are compared later). */
static int st_match(const StFile* s, Wants* ws, const char* model) {
  const char* p = s->path;
  char a[128], b[128];
  for (int i = 0; i < s->n; i++) {
    const StTensor* t = &s->t[i];
    const char* pre = ws->fam->hf_prefix;
    const char* name = strncmp(t->name, pre, strlen(pre)) == 0 ? t->name + strlen(pre) : t->name;
    int lm, k = want_index(ws, name, &lm);
    if (k == -3)
      return osdp_fail("safetensors: '%s' has tensor '%s' but model '%s' has %d layers; use a "
                       "model of the file's shape", p, t->name, model, ws->L);
    if (k == -2)
      return osdp_fail("safetensors: '%s' has tensor '%s', which is not part of a %s model "
                       "(names such as %s, with or without '%s')", p, t->name, ws->fam->title,
                       ws->fam->hf_example, pre);
    if (lm) {
      const Want* to = ws->tied_to >= 0 ? &ws->w[ws->tied_to] : NULL;
      if (!to || strcmp(t->dtype, "F32") || t->ndim != 2 || t->shape[0] != to->shape[0] ||
          t->shape[1] != to->shape[1])
        return osdp_fail("safetensors: '%s': tensor '%s' is %s %s, not F32 %s like %s; osdp ties "
                         "the LM head to it", p, t->name, t->dtype, shape_text(t->ndim, t->shape, a),
                         to ? shape_text(to->ndim, to->shape, b) : "?", ws->fam->hf_tied_to);
      ws->lm_head = t;
    }
    if (k < 0) continue;
    Want* w = &ws->w[k];
    if (w->have)
      return osdp_fail("safetensors: '%s' has tensor %s twice, as '%s' and '%s'", p, w->name,
                       w->have->name, t->name);
    w->have = t;
  }
  for (int k = 0; k < ws->n; k++) {
    const Want* w = &ws->w[k];
    const StTensor* t = w->have;
    if (!t)
      return osdp_fail("safetensors: '%s' has no tensor '%s' (nor '%s%s'), which model '%s' "
                       "needs", p, w->name, ws->fam->hf_prefix, w->name, model);
    if (strcmp(t->dtype, "F32") != 0)
      return osdp_fail("safetensors: '%s': tensor '%s' has dtype %s; osdp reads F32 tensors only",
                       p, t->name, t->dtype);
    if (t->ndim != w->ndim || t->shape[0] != w->shape[0] || (w->ndim > 1 && t->shape[1] != w->shape[1]))
      return osdp_fail("safetensors: '%s': tensor '%s' has shape %s but model '%s' needs %s; use "
                       "a model of the file's shape", p, t->name, shape_text(t->ndim, t->shape, a),
                       model, shape_text(w->ndim, w->shape, b));
  }
  return 0;
}

/* ------------------------------------------------------------------------------------ */
/* Metadata and the model shape                                                          */
/* ------------------------------------------------------------------------------------ */

/* The metadata value key as an integer in [1, 2^30] into *v: 1 when present, 0 when absent,
** -1 (with an error) when present but not such an integer. */
static int meta_int(const StFile* s, const char* key, int* v) {
  const cJSON* m = s->meta ? cJSON_GetObjectItemCaseSensitive(s->meta, key) : NULL;
  if (!m) return 0;
  const char* str = m->valuestring;
  char* end = NULL;
  errno = 0;
  long x = strtol(str, &end, 10);
  if (end == str || *end || errno || x < 1 || x > (1L << 30))
    return osdp_fail("safetensors: '%s': __metadata__.%s is \"%s\", not a positive integer",
                     s->path, key, str);
  *v = (int)x;
  return 1;
}

/* Checks that metadata key, when present, equals the value the tensors give. */
static int meta_agrees(const StFile* s, const char* key, int tensors, const char* what) {
  int v = 0, rc = meta_int(s, key, &v);
  if (rc <= 0) return rc;
  if (v == tensors) return 0;
  return osdp_fail("safetensors: '%s': __metadata__.%s is %d but its tensors give %d %s; the "
                   "file is inconsistent", s->path, key, v, tensors, what);
}

/* Infers the model shape of an open file (see safetensors_read_config). */
static int st_config(const StFile* s, GptConfig* c) {
  memset(c, 0, sizeof *c);
  snprintf(c->name, sizeof c->name, "%s", base_name(s->path));
  int dup;
  const StTensor* wte = st_find_any(s, "wte.weight", &dup);
  const StTensor* wpe = st_find_any(s, "wpe.weight", &dup);
  if (!wte || !wpe)
    return osdp_fail("safetensors: '%s' has no tensor %s (nor " ST_PREFIX "%s); is it a GPT-2 "
                     "model?", s->path, wte ? "wpe.weight" : "wte.weight", wte ? "wpe.weight" : "wte.weight");
  if (wte->ndim != 2 || wpe->ndim != 2 || wte->shape[0] > (1 << 24) || wte->shape[1] > 65536 ||
      wpe->shape[0] > 65536) {
    char a[128], b[128];
    return osdp_fail("safetensors: '%s': wte.weight %s and wpe.weight %s are not [V, C] and "
                     "[maxT, C] of a GPT-2 osdp can build", s->path,
                     shape_text(wte->ndim, wte->shape, a), shape_text(wpe->ndim, wpe->shape, b));
  }
  c->vocab_size = (int)wte->shape[0];
  c->n_embd = (int)wte->shape[1];
  c->max_seq = (int)wpe->shape[0];
  long L = -1;
  for (int i = 0; i < s->n; i++) {
    const char* name = s->t[i].name;
    if (strncmp(name, ST_PREFIX, strlen(ST_PREFIX)) == 0) name += strlen(ST_PREFIX);
    long l;
    if (layer_of(name, family_gpt2()->hf_layer_prefix, &l) && l > L) L = l;
  }
  if (L < 0 || L >= 1000)
    return osdp_fail("safetensors: '%s' has %s; expected layers h.0 ... h.{L-1} with L <= 1000",
                     s->path, L < 0 ? "no layer tensors (h.0.ln_1.weight, ...)" : "layers beyond h.999");
  c->n_layer = (int)L + 1;
  if (meta_agrees(s, "n_layer", c->n_layer, "layers") || meta_agrees(s, "n_embd", c->n_embd, "as C") ||
      meta_agrees(s, "vocab_size", c->vocab_size, "wte rows") ||
      meta_agrees(s, "max_seq", c->max_seq, "wpe rows"))
    return -1;
  int heads = 0, vp = 0;
  if (meta_int(s, "n_head", &heads) < 0 || meta_int(s, "padded_vocab", &vp) < 0) return -1;
  c->n_head = heads ? heads : 1;  /* validated with 1 head when the file does not say */
  c->padded_vocab = vp ? vp : (c->vocab_size + 127) / 128 * 128;
  if (gpt_config_validate(c)) {
    char why[512];
    const char* e = osdp_last_error();
    snprintf(why, sizeof why, "%s", strncmp(e, "model: ", 7) == 0 ? e + 7 : e);
    return osdp_fail("safetensors: '%s' holds a model osdp cannot build: %s", s->path, why);
  }
  c->n_head = heads;
  return 0;
}

int safetensors_read_config(const char* path, GptConfig* cfg) {
  StFile s;
  if (st_open(&s, path)) return -1;
  GptConfig c;
  int rc = st_config(&s, &c);
  st_close(&s);
  if (rc == 0) *cfg = c;
  return rc;
}

/* ------------------------------------------------------------------------------------ */
/* Reading the data                                                                      */
/* ------------------------------------------------------------------------------------ */

/* Reads n bytes at data offset off of s into buf. */
static int st_read_at(const StFile* s, uint64_t off, void* buf, size_t n) {
  if (fseeko(s->f, (off_t)(s->data_start + off), SEEK_SET) == 0 && fread(buf, 1, n, s->f) == n)
    return 0;
  return osdp_fail("safetensors: reading '%s' failed: %s", s->path,
                   ferror(s->f) ? strerror(errno) : "unexpected end of file");
}

/* Checks that the file's tied head (lm_head.weight) holds exactly the bytes of the tensor it is
** tied to (wte). */
static int lm_head_check(const StFile* s, const Wants* ws, float* buf, size_t cap) {
  const StTensor *lm = ws->lm_head, *wte = ws->w[ws->tied_to].have;
  size_t half = cap / 2 * sizeof(float), total = (size_t)(wte->end - wte->begin);
  unsigned char* a = (unsigned char*)buf;
  for (size_t at = 0; at < total; at += half) {
    size_t n = total - at < half ? total - at : half;
    if (st_read_at(s, wte->begin + at, a, n) || st_read_at(s, lm->begin + at, a + half, n)) return -1;
    if (memcmp(a, a + half, n) != 0)
      return osdp_fail("safetensors: '%s': tensor '%s' differs from '%s'; osdp ties the LM head "
                       "to the token embedding and cannot load an untied model", s->path,
                       lm->name, wte->name);
  }
  return 0;
}

/* Reads every want from the file into params: direct copies, and transposed ones (wte) in
** chunks of whole rows with their padded columns zeroed. */
static int st_read_tensors(const StFile* s, const Wants* ws, float* params, float* buf, size_t cap) {
  for (int k = 0; k < ws->n; k++) {
    const Want* w = &ws->w[k];
    size_t n = (size_t)(w->have->end - w->have->begin);
    if (!w->transposed) {
      if (st_read_at(s, w->have->begin, params + w->off, n)) return -1;
      continue;
    }
    size_t C = w->trows, Vp = w->tcols, V = w->shape[0], step = cap / C;
    for (size_t v0 = 0; v0 < V; v0 += step) {
      size_t nv = V - v0 < step ? V - v0 : step;
      if (st_read_at(s, w->have->begin + v0 * C * sizeof(float), buf, nv * C * sizeof(float))) return -1;
      for (size_t c = 0; c < C; c++) {
        float* col = params + w->off + c * Vp + v0;
        for (size_t v = 0; v < nv; v++) col[v] = buf[v * C + c];
      }
    }
    for (size_t c = 0; c < C; c++)
      for (size_t v = V; v < Vp; v++) params[w->off + c * Vp + v] = 0.0f;
  }
  return 0;
}

/* Checks that the metadata's n_head (when recorded) is model d's. */
static int heads_check(const StFile* s, const GptDesc* d) {
  int h = 0, rc = meta_int(s, "n_head", &h);
  if (rc <= 0 || h == d->cfg.n_head) return rc < 0 ? -1 : 0;
  return osdp_fail("safetensors: '%s' has __metadata__.n_head=%d but model '%s' has n_head=%d; "
                   "use a model of the file's shape", s->path, h, d->cfg.name, d->cfg.n_head);
}

int safetensors_load(const char* path, const GptDesc* d, float* params) {
  if (!params) return osdp_fail("safetensors: loading '%s' needs a parameter buffer", path);
  StFile s;
  Wants ws;
  if (st_open(&s, path)) return -1;
  if (wants_build(d, &ws)) { st_close(&s); return -1; }
  size_t cap = ST_STREAM_FLOATS > ws.C ? ST_STREAM_FLOATS : 2 * ws.C;
  float* buf = NULL;
  int rc = st_match(&s, &ws, d->cfg.name) || heads_check(&s, d) ? -1 : 0;
  if (rc == 0 && !(buf = malloc(cap * sizeof(float))))
    rc = osdp_fail("safetensors: out of memory for a %zu-float buffer", cap);
  if (rc == 0 && ws.lm_head) rc = lm_head_check(&s, &ws, buf, cap);
  if (rc == 0) rc = st_read_tensors(&s, &ws, params, buf, cap);
  free(buf);
  free(ws.w);
  st_close(&s);
  return rc;
}

/* ------------------------------------------------------------------------------------ */
/* Writing                                                                               */
/* ------------------------------------------------------------------------------------ */

/* A growing text buffer for the header. */
typedef struct Text {
  char* s;
  size_t len, cap;
  int failed;
} Text;

/* Appends printf-style text to t (t->failed on out of memory). */
__attribute__((format(printf, 2, 3))) static void text_add(Text* t, const char* fmt, ...) {
  if (t->failed) return;
  for (;;) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(t->s ? t->s + t->len : NULL, t->s ? t->cap - t->len : 0, fmt, ap);
    va_end(ap);
    if (n < 0) { t->failed = 1; return; }
    if (t->s && t->len + (size_t)n < t->cap) { t->len += (size_t)n; return; }
    size_t cap = (t->cap ? 2 * t->cap : 4096) + (size_t)n;
    char* s = realloc(t->s, cap);
    if (!s) { t->failed = 1; return; }
    t->s = s;
    t->cap = cap;
  }
}

/* Builds the header of model d's file into t: metadata, then every want in model order with
** contiguous offsets, padded with spaces so that 8 + its length is a multiple of 8. */
static int header_build(const GptDesc* d, const Wants* ws, Text* t) {
  const GptConfig* c = &d->cfg;
  text_add(t, "{\"__metadata__\":{\"format\":\"pt\",\"producer\":\"osdp\",\"n_layer\":\"%d\","
           "\"n_head\":\"%d\",\"n_embd\":\"%d\",\"vocab_size\":\"%d\",\"max_seq\":\"%d\","
           "\"padded_vocab\":\"%d\"}", c->n_layer, c->n_head, c->n_embd, c->vocab_size,
           c->max_seq, c->padded_vocab);
  uint64_t at = 0;
  for (int k = 0; k < ws->n; k++) {
    const Want* w = &ws->w[k];
    uint64_t bytes = w->shape[0] * (w->ndim > 1 ? w->shape[1] : 1) * sizeof(float);
    if (w->ndim > 1)
      text_add(t, ",\"%s\":{\"dtype\":\"F32\",\"shape\":[%llu,%llu],\"data_offsets\":[%llu,%llu]}",
               w->name, (unsigned long long)w->shape[0], (unsigned long long)w->shape[1],
               (unsigned long long)at, (unsigned long long)(at + bytes));
    else
      text_add(t, ",\"%s\":{\"dtype\":\"F32\",\"shape\":[%llu],\"data_offsets\":[%llu,%llu]}",
               w->name, (unsigned long long)w->shape[0], (unsigned long long)at,
               (unsigned long long)(at + bytes));
    at += bytes;
  }
  text_add(t, "}");
  while (!t->failed && (8 + t->len) % 8 != 0) text_add(t, " ");
  return t->failed ? osdp_fail("safetensors: out of memory building the header") : 0;
}

/* Writes n bytes to f, naming path on failure. */
static int write_bytes(FILE* f, const char* path, const void* p, size_t n) {
  if (fwrite(p, 1, n, f) == n) return 0;
  return osdp_fail("safetensors: writing '%s' failed: %s; check free disk space", path,
                   strerror(errno));
}

/* Writes the whole file of model d to the open file f, then flushes and syncs it. */
static int st_write(FILE* f, const char* path, const GptDesc* d, const float* params) {
  Wants ws;
  Text t = {0};
  float* buf = NULL;
  if (wants_build(d, &ws)) return -1;
  int rc = header_build(d, &ws, &t);
  size_t cap = ST_STREAM_FLOATS > ws.C ? ST_STREAM_FLOATS : ws.C;
  if (rc == 0 && !(buf = malloc(cap * sizeof(float))))
    rc = osdp_fail("safetensors: out of memory for a %zu-float buffer", cap);
  unsigned char n8[8];
  for (int i = 0; i < 8; i++) n8[i] = (unsigned char)((uint64_t)t.len >> (8 * i));
  if (rc == 0) rc = write_bytes(f, path, n8, 8) || write_bytes(f, path, t.s, t.len) ? -1 : 0;
  for (int k = 0; k < ws.n && rc == 0; k++) {
    const Want* w = &ws.w[k];
    if (!w->transposed) {
      rc = write_bytes(f, path, params + w->off, w->shape[0] * (w->ndim > 1 ? w->shape[1] : 1) * sizeof(float));
      continue;
    }
    size_t C = w->trows, Vp = w->tcols, V = w->shape[0], step = cap / C;
    for (size_t v0 = 0; v0 < V && rc == 0; v0 += step) {
      size_t nv = V - v0 < step ? V - v0 : step;
      for (size_t c = 0; c < C; c++) {
        const float* col = params + w->off + c * Vp + v0;
        for (size_t v = 0; v < nv; v++) buf[v * C + c] = col[v];
      }
      rc = write_bytes(f, path, buf, nv * C * sizeof(float));
    }
  }
  if (rc == 0 && (fflush(f) != 0 || fsync(fileno(f)) != 0))
    rc = osdp_fail("safetensors: writing '%s' failed: %s; check free disk space", path,
                   strerror(errno));
  free(buf);
  free(t.s);
  free(ws.w);
  return rc;
}

/* Syncs the directory holding path, so that a rename into it survives a crash (best effort:
** some file systems cannot sync directories, and the file itself is already synced). */
static void sync_parent_dir(const char* path) {
  const char* slash = strrchr(path, '/');
  char dir[4096];
  if (!slash) snprintf(dir, sizeof dir, ".");
  else if (slash == path) snprintf(dir, sizeof dir, "/");
  else snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
  int fd = open(dir, O_RDONLY);
  if (fd < 0) return;
  (void)fsync(fd);
  close(fd);
}

int safetensors_save(const char* path, const GptDesc* d, const float* params) {
  if (!params) return osdp_fail("safetensors: saving '%s' needs a parameter buffer", path);
  size_t n = strlen(path) + 5;
  char* tmp = malloc(n);
  if (!tmp) return osdp_fail("safetensors: out of memory");
  snprintf(tmp, n, "%s.tmp", path);
  FILE* f = fopen(tmp, "wb");
  if (!f) {
    osdp_fail("safetensors: cannot create '%s': %s", tmp, strerror(errno));
    free(tmp);
    return -1;
  }
  int rc = st_write(f, tmp, d, params);
  if (fclose(f) != 0 && rc == 0)
    rc = osdp_fail("safetensors: writing '%s' failed: %s; check free disk space", tmp, strerror(errno));
  if (rc == 0 && rename(tmp, path) != 0)
    rc = osdp_fail("safetensors: cannot rename '%s' to '%s': %s", tmp, path, strerror(errno));
  if (rc != 0) remove(tmp);
  else sync_parent_dir(path);
  free(tmp);
  return rc;
}
