/*
** safetensors.c: model weights as safetensors files, named as the model family's spec names
** each parameter tensor (gpt.h ParamTensor.hf_name); see safetensors.h.
**
** Reading is in three steps, and params is touched only in the last: st_set_open (st_files.h)
** opens the file, or the shards of an index, and checks every header against its file alone
** (sizes, offsets, dtypes: anything a safetensors reader must refuse); st_match pairs the
** tensors with the tensors a model needs ("wants", built from the op list by wants_build) and
** checks names, dtypes and shapes; st_read_tensors then copies the data, converting BF16 and
** F16 to fp32. Writing walks the same wants.
*/
#include "model/safetensors.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/output.h"
#include "core/util.h"
#include "model/family.h"
#include "model/hf_config.h"
#include "model/st_files.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors.c writes little-endian files; add byte swapping for this host"
#endif

#define ST_STREAM_FLOATS ((size_t)1 << 20)
/* The prefix GPT-2 files may give names (family_gpt2()->hf_prefix), for st_config_gpt2, which
** infers a GPT-2 shape from a file. */
#define ST_PREFIX "transformer."

/* A tensor a model needs, and where it lives among osdp's parameters. */
typedef struct Want {
  char name[64];         /* the tensor's name in files (ParamTensor.hf_name), without prefix */
  int ndim;
  uint64_t shape[2];
  size_t off;            /* offset of its first element in params */
  /* Transposed: [shape[0], trows] in the file is the first shape[0] columns of the [trows,
  ** tcols] tensor in params (wte: [V, C] of [C, Vp], padded columns not stored; Llama's
  ** linears: [out, in] of [in, out]). */
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
  size_t largest;          /* elements of the largest want */
  int tied;                /* the LM head uses the embedding's weight (its op owns none) */
  int tied_to;             /* the want a tied head must equal (-1: none) */
  const StTensor* lm_head; /* the file's tied head, if any (st_match) */
} Wants;

/* Base name of a path, for config names. */
static const char* base_name(const char* path) {
  const char* slash = strrchr(path, '/');
  return slash ? slash + 1 : path;
}

/* The set's tensor called name with or without the "transformer." prefix, or NULL; both
** present is an error (*dup = 1). */
static const StTensor* st_find_any(const StSet* s, const char* name, int* dup) {
  char full[96];
  snprintf(full, sizeof full, ST_PREFIX "%s", name);
  const StTensor *a = st_set_find(s, name), *b = st_set_find(s, full);
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
  size_t n = w->shape[0] * (w->ndim > 1 ? w->shape[1] : 1);
  if (n > ws->largest) ws->largest = n;
}

/* Builds the list of tensors model d needs: every parameter tensor with a file name, in model
** order (free ws->w after use). Checks that they hold every parameter but the padding a
** transposed tensor leaves out. The head is tied when the LM head's op uses another op's
** parameters (owner: the embedding); then a file may also hold the family's tied-head name. */
static int wants_build(const GptDesc* d, Wants* ws) {
  memset(ws, 0, sizeof *ws);
  ws->L = d->cfg.n_layer;
  ws->fam = d->family;
  ws->tied = d->ops[d->head_op].owner != d->head_op && d->family->hf_tied_head;
  ws->tied_to = -1;
  ws->w = malloc(((size_t)d->nops * MODEL_MAX_TENSORS + 1) * sizeof *ws->w);
  if (!ws->w) return osdp_fail("safetensors: out of memory");
  size_t base = 0, total = 0, padding = 0;
  for (int i = 0; i < d->nops; i++) {
    for (int j = 0; j < d->ops[i].ntensors; j++) {
      const ParamTensor* t = &d->ops[i].tensor[j];
      if (!t->hf_name[0]) continue;
      if (ws->tied && strcmp(t->hf_name, ws->fam->hf_tied_to) == 0) ws->tied_to = ws->n;
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

/* Elements of a stream buffer for the wants: ST_STREAM_FLOATS, or less when no tensor is that
** large, but at least `rows` of the widest transposed row (reads take whole rows; the tied-head
** check halves the buffer). */
static size_t stream_cap(const Wants* ws, size_t rows) {
  size_t cap = ws->largest < ST_STREAM_FLOATS ? 2 * ws->largest : ST_STREAM_FLOATS;
  return cap > rows * ws->C ? cap : rows * ws->C;
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
  if (ws->tied && strcmp(name, ws->fam->hf_tied_head) == 0) { *lm = 1; return -1; }
  long l;
  const char* suf = layer_of(name, ws->fam->hf_layer_prefix, &l);
  if (!suf) return -2;
  for (int j = 0; ws->fam->hf_ignored[j]; j++)
    if (strcmp(suf, ws->fam->hf_ignored[j]) == 0) return -1;
  return l >= ws->L ? -3 : -2;
}

/* " (nor 'PREFIXname')" for messages when the family's names may carry a prefix, else "". */
static const char* nor_prefixed(const Wants* ws, const char* name, char buf[128]) {
  if (!ws->fam->hf_prefix[0]) return "";
  snprintf(buf, 128, " (nor '%s%s')", ws->fam->hf_prefix, name);
  return buf;
}

/* Remembers the file's tied head t (the family's hf_tied_head) after checking it is a float
** tensor of the embedding's shape (its values are compared later). */
static int tied_head_seen(Wants* ws, const StTensor* t) {
  const Want* to = ws->tied_to >= 0 ? &ws->w[ws->tied_to] : NULL;
  char a[128], b[128];
  if (!to || !st_float_dtype(t->dtype) || t->ndim != 2 || t->shape[0] != to->shape[0] ||
      t->shape[1] != to->shape[1])
    return osdp_fail("safetensors: '%s': tensor '%s' is %s %s, not %s like %s; osdp ties the LM "
                     "head to it", t->file->path, t->name, t->dtype, shape_text(t->ndim, t->shape, a),
                     to ? shape_text(to->ndim, to->shape, b) : "?", ws->fam->hf_tied_to);
  ws->lm_head = t;
  return 0;
}

/* Checks that every want has its tensor, of a float dtype and of its shape. */
static int wants_complete(const StSet* s, const Wants* ws, const char* model) {
  char a[128], b[128];
  for (int k = 0; k < ws->n; k++) {
    const Want* w = &ws->w[k];
    const StTensor* t = w->have;
    if (!t)
      return osdp_fail("safetensors: '%s' has no tensor '%s'%s, which model '%s' needs", s->path,
                       w->name, nor_prefixed(ws, w->name, a), model);
    if (!st_float_dtype(t->dtype))
      return osdp_fail("safetensors: '%s': tensor '%s' has dtype %s; osdp reads F32, BF16 and F16 "
                       "tensors", t->file->path, t->name, t->dtype);
    if (t->ndim != w->ndim || t->shape[0] != w->shape[0] || (w->ndim > 1 && t->shape[1] != w->shape[1]))
      return osdp_fail("safetensors: '%s': tensor '%s' has shape %s but model '%s' needs %s; use "
                       "a model of the file's shape", t->file->path, t->name,
                       shape_text(t->ndim, t->shape, a), model, shape_text(w->ndim, w->shape, b));
  }
  return 0;
}

/* Pairs the set's tensors with the wants: each want present once (with or without the
** family's prefix) as a float tensor of its shape; no unknown tensors; a tied head of the
** embedding's shape is remembered (its values are compared later). */
static int st_match(const StSet* s, Wants* ws, const char* model) {
  const char* pre = ws->fam->hf_prefix;
  char a[128];
  for (int i = 0; i < s->n; i++) {
    const StTensor* t = s->t[i];
    const char* p = t->file->path;
    const char* name = strncmp(t->name, pre, strlen(pre)) == 0 ? t->name + strlen(pre) : t->name;
    int lm, k = want_index(ws, name, &lm);
    if (k == -3)
      return osdp_fail("safetensors: '%s' has tensor '%s' but model '%s' has %d layers; use a "
                       "model of the file's shape", p, t->name, model, ws->L);
    if (k == -2) {
      if (pre[0]) snprintf(a, sizeof a, ", with or without '%s'", pre);
      return osdp_fail("safetensors: '%s' has tensor '%s', which is not part of a %s model (names "
                       "such as %s%s)", p, t->name, ws->fam->title, ws->fam->hf_example, pre[0] ? a : "");
    }
    if (lm && tied_head_seen(ws, t)) return -1;
    if (k < 0) continue;
    Want* w = &ws->w[k];
    if (w->have)
      return osdp_fail("safetensors: '%s' has tensor %s twice, as '%s' and '%s'", s->path, w->name,
                       w->have->name, t->name);
    w->have = t;
  }
  return wants_complete(s, ws, model);
}

/* ------------------------------------------------------------------------------------ */
/* Metadata and the model shape                                                          */
/* ------------------------------------------------------------------------------------ */

/* Whether the metadata key holds a number in osdp's files: every number gpt_config_to_json
** writes for a Llama config (the most keys), and padded_vocab. */
static int meta_numeric(const char* key) {
  static cJSON* ref;
  if (!ref) {
    GptConfig c;
    memset(&c, 0, sizeof c);
    snprintf(c.family, sizeof c.family, "llama");
    ref = cJSON_CreateObject();
    if (ref) gpt_config_to_json(&c, ref);
  }
  const cJSON* v = ref ? cJSON_GetObjectItemCaseSensitive(ref, key) : NULL;
  return strcmp(key, "padded_vocab") == 0 || cJSON_IsNumber(v);
}

/* The model config osdp's metadata records, as the JSON object gpt_config_from_json reads
** (numbers parsed from their strings) in *out; *out = NULL when the metadata records none (no
** n_layer: a file written elsewhere). A GPT-2 file without n_head (older tools) gets n_head 0:
** unknown. */
static int meta_config(const StSet* s, cJSON** out) {
  *out = NULL;
  if (!s->meta || !cJSON_GetObjectItemCaseSensitive(s->meta, "n_layer")) return 0;
  cJSON* o = cJSON_CreateObject();
  if (!o) return osdp_fail("safetensors: out of memory");
  for (const cJSON* m = s->meta->child; m; m = m->next) {
    if (!meta_numeric(m->string)) {
      cJSON_AddStringToObject(o, m->string, m->valuestring);
      continue;
    }
    char* end = NULL;
    errno = 0;
    double v = strtod(m->valuestring, &end);
    if (end == m->valuestring || *end || errno || !isfinite(v)) {
      cJSON_Delete(o);
      return osdp_fail("safetensors: '%s': __metadata__.%s is \"%s\", not a number", s->files[0].path,
                       m->string, m->valuestring);
    }
    cJSON_AddNumberToObject(o, m->string, v);
  }
  if (!cJSON_GetObjectItemCaseSensitive(o, "family") && !cJSON_GetObjectItemCaseSensitive(o, "n_head"))
    cJSON_AddNumberToObject(o, "n_head", 0);
  *out = o;
  return 0;
}

/* The family of config c. */
static const ModelFamily* family_of(const GptConfig* c) {
  return strcmp(c->family, "llama") == 0 ? family_llama() : family_gpt2();
}

/* Checks that config value `key` (from `src`: "__metadata__." or "config.json's ") equals what
** the tensors give. */
static int agrees(const StSet* s, const char* src, const char* key, int v, uint64_t tensors,
                  const char* what) {
  if ((uint64_t)v == tensors) return 0;
  return osdp_fail("safetensors: '%s': %s%s is %d but its tensors give %llu %s; the %s is "
                   "inconsistent", s->path, src, key, v, (unsigned long long)tensors, what,
                   src[0] == '_' ? "file" : "checkpoint");
}

/* The number of layers the set's tensors hold under the family's names: the largest layer
** number + 1 (0 when none). */
static long layers_of(const StSet* s, const ModelFamily* fam) {
  long L = -1;
  size_t np = strlen(fam->hf_prefix);
  for (int i = 0; i < s->n; i++) {
    const char* name = s->t[i]->name;
    if (np && strncmp(name, fam->hf_prefix, np) == 0) name += np;
    long l;
    if (layer_of(name, fam->hf_layer_prefix, &l) && l > L) L = l;
  }
  return L + 1;
}

/* Checks config c (from src, see agrees) against the tensors: the token embedding's [V, C],
** the layers, GPT-2's positions. */
static int tensors_agree(const StSet* s, const GptConfig* c, const char* src) {
  const ModelFamily* fam = family_of(c);
  int dup;
  const StTensor* emb = fam == family_gpt2() ? st_find_any(s, "wte.weight", &dup)
                                             : st_set_find(s, fam->hf_tied_to);
  char a[128];
  if (!emb || emb->ndim != 2)
    return osdp_fail("safetensors: '%s' has %s tensor '%s', the token embedding of the %s model "
                     "its %s describes", s->path, emb ? shape_text(emb->ndim, emb->shape, a) : "no",
                     fam->hf_tied_to, fam->title, src[0] == '_' ? "__metadata__" : "config.json");
  if (agrees(s, src, "vocab_size", c->vocab_size, emb->shape[0], "token embedding rows") ||
      agrees(s, src, "n_embd", c->n_embd, emb->shape[1], "as its width") ||
      agrees(s, src, "n_layer", c->n_layer, (uint64_t)layers_of(s, fam), "layers"))
    return -1;
  if (fam != family_gpt2()) return 0;
  const StTensor* wpe = st_find_any(s, "wpe.weight", &dup);
  return wpe && wpe->ndim == 2 ? agrees(s, src, "max_seq", c->max_seq, wpe->shape[0], "wpe rows")
                               : osdp_fail("safetensors: '%s' has no [maxT, C] tensor wpe.weight; "
                                           "is it a GPT-2 model?", s->path);
}

/* Infers a GPT-2 shape from the tensors alone (a file from the Hub without config.json): L, C,
** V and maxT; n_head 0 (unknown). */
static int st_config_gpt2(const StSet* s, GptConfig* c) {
  int dup;
  const StTensor* wte = st_find_any(s, "wte.weight", &dup);
  const StTensor* wpe = st_find_any(s, "wpe.weight", &dup);
  if (!wte || !wpe) {
    if (st_set_find(s, family_llama()->hf_tied_to))
      return osdp_fail("safetensors: '%s' holds a Llama-family model (%s) without osdp's "
                       "__metadata__ or a config.json beside it; give the model's directory "
                       "(config.json and model.safetensors or its index)", s->path,
                       family_llama()->hf_tied_to);
    return osdp_fail("safetensors: '%s' has no tensor %s (nor " ST_PREFIX "%s); is it a GPT-2 "
                     "model?", s->path, wte ? "wpe.weight" : "wte.weight", wte ? "wpe.weight" : "wte.weight");
  }
  if (wte->ndim != 2 || wpe->ndim != 2 || wte->shape[0] > (1 << 24) || wte->shape[1] > 65536 ||
      wpe->shape[0] > (1 << 20)) {
    char a[128], b[128];
    return osdp_fail("safetensors: '%s': wte.weight %s and wpe.weight %s are not [V, C] and "
                     "[maxT, C] of a GPT-2 osdp can build", s->path,
                     shape_text(wte->ndim, wte->shape, a), shape_text(wpe->ndim, wpe->shape, b));
  }
  c->vocab_size = (int)wte->shape[0];
  c->n_embd = (int)wte->shape[1];
  c->max_seq = (int)wpe->shape[0];
  long L = layers_of(s, family_gpt2());
  if (L < 1 || L > 1000)
    return osdp_fail("safetensors: '%s' has %s; expected layers h.0 ... h.{L-1} with L <= 1000",
                     s->path, L < 1 ? "no layer tensors (h.0.ln_1.weight, ...)" : "layers beyond h.999");
  c->n_layer = (int)L;
  c->padded_vocab = (c->vocab_size + 127) / 128 * 128;
  return 0;
}

/* The config osdp's metadata records (see meta_config) into c: 1 when there is one, 0 when
** not, -1 on an error. */
static int st_config_meta(const StSet* s, GptConfig* c) {
  cJSON* m;
  if (meta_config(s, &m)) return -1;
  if (!m) return 0;
  char where[600];
  snprintf(where, sizeof where, "safetensors: '%s' __metadata__", s->files[0].path);
  int rc = gpt_config_from_json(m, where, c);
  const cJSON* vp = cJSON_GetObjectItemCaseSensitive(m, "padded_vocab");
  c->padded_vocab = cJSON_IsNumber(vp) && vp->valuedouble == (int)vp->valuedouble ? (int)vp->valuedouble
                                                                               : (c->vocab_size + 127) / 128 * 128;
  cJSON_Delete(m);
  return rc ? -1 : 1;
}

/* The name of the model at path: a directory's name, the directory's for files of the Hub's
** names (model.safetensors, its index), else the file's base name. */
static void config_name(const char* path, GptConfig* c) {
  char buf[4096];
  struct stat st;
  snprintf(buf, sizeof buf, "%s", path);
  size_t n = strlen(buf);
  while (n > 1 && buf[n - 1] == '/') buf[--n] = 0;
  const char* base = base_name(buf);
  int dir = stat(path, &st) == 0 && S_ISDIR(st.st_mode);
  if (!dir && strncmp(base, "model.safetensors", 17) == 0 && base > buf + 1) {
    buf[base - buf - 1] = 0;
    base = base_name(buf);
  }
  snprintf(c->name, sizeof c->name, "%.*s", (int)sizeof c->name - 1, base);
}

/* Whether the checkpoint is laid out as the Hub's (an index, or a file named
** model.safetensors), so that a config.json beside it describes it. */
static int hub_layout(const StSet* s) {
  return s->is_index || strcmp(base_name(s->path), "model.safetensors") == 0;
}

/* The model shape of an open set (see safetensors_read_config), from the first of: osdp's
** metadata, config.json beside a checkpoint of the Hub's layout, the GPT-2 tensors themselves;
** checked against the tensors. */
static int st_config(const StSet* s, const char* path, GptConfig* c) {
  memset(c, 0, sizeof *c);
  char cj[4096];
  snprintf(cj, sizeof cj, "%s/config.json", s->dir);
  int rc = st_config_meta(s, c), heads;
  const char* src = "__metadata__.";
  if (rc == 0 && hub_layout(s) && access(cj, F_OK) == 0) {
    rc = hf_config_load(cj, c);
    src = "config.json's ";
  }
  if (rc == 0) rc = st_config_gpt2(s, c) ? -1 : 2;
  heads = c->n_head != 0;
  if (rc < 0 || (rc < 2 && tensors_agree(s, c, src))) return -1;
  char name[sizeof c->name];
  snprintf(name, sizeof name, "%s", c->name);
  if (rc != 1 || strcmp(src, "config.json's ") != 0) config_name(path, c);
  else snprintf(c->name, sizeof c->name, "%s", name);
  if (!heads) c->n_head = 1; /* validated with 1 head when nothing says */
  if (gpt_config_validate(c)) {
    char why[512];
    const char* e = osdp_last_error();
    snprintf(why, sizeof why, "%s", strncmp(e, "model: ", 7) == 0 ? e + 7 : e);
    return osdp_fail("safetensors: '%s' holds a model osdp cannot build: %s", s->path, why);
  }
  if (!heads) c->n_head = 0;
  return 0;
}

int safetensors_read_config(const char* path, GptConfig* cfg) {
  StSet s;
  if (st_set_open(&s, path)) return -1;
  GptConfig c;
  int rc = st_config(&s, path, &c);
  st_set_close(&s);
  if (rc == 0) *cfg = c;
  return rc;
}

/* Checks that the config osdp's metadata records (when it records one) is model d's: its
** family only (before the tensors are matched, so that a file of another family is named as
** such), or key by key (the padding aside: none is stored). */
static int meta_matches(const StSet* s, const GptDesc* d, int family_only) {
  GptConfig f;
  int rc = st_config_meta(s, &f);
  if (rc <= 0) return rc;
  if (family_only && strcmp(f.family, d->cfg.family) == 0) return 0;
  cJSON *a = cJSON_CreateObject(), *b = cJSON_CreateObject();
  if (a) gpt_config_to_json(&f, a);
  if (b) gpt_config_to_json(&d->cfg, b);
  rc = a && b ? 0 : osdp_fail("safetensors: out of memory");
  if (rc == 0 && strcmp(f.family, d->cfg.family) != 0)
    rc = osdp_fail("safetensors: '%s' holds a %s model (__metadata__.family) but model '%s' is %s; "
                   "use a model of the file's shape", s->path, family_of(&f)->title, d->cfg.name,
                   family_of(&d->cfg)->title);
  for (const cJSON* v = b ? b->child : NULL; v && rc == 0; v = v->next) {
    const cJSON* w = cJSON_GetObjectItemCaseSensitive(a, v->string);
    if (!cJSON_IsNumber(v) || !cJSON_IsNumber(w) || w->valuedouble == v->valuedouble ||
        (strcmp(v->string, "n_head") == 0 && w->valuedouble == 0))
      continue;
    rc = osdp_fail("safetensors: '%s' has __metadata__.%s=%.17g but model '%s' has %s=%.17g; use a "
                   "model of the file's shape", s->path, v->string, w ? w->valuedouble : 0.0,
                   d->cfg.name, v->string, v->valuedouble);
  }
  cJSON_Delete(a);
  cJSON_Delete(b);
  return rc;
}

/* ------------------------------------------------------------------------------------ */
/* Reading the data                                                                      */
/* ------------------------------------------------------------------------------------ */

/* Buffers of the reads: fp32 chunks and their 16-bit sources. */
typedef struct ReadBufs {
  float* f;
  uint16_t* h;
  size_t cap;  /* elements of each */
} ReadBufs;

/* Checks that the file's tied head (lm_head.weight) holds exactly the values of the tensor it
** is tied to (the embedding), compared as fp32. */
static int lm_head_check(const Wants* ws, const ReadBufs* rb) {
  const StTensor *lm = ws->lm_head, *emb = ws->w[ws->tied_to].have;
  size_t half = rb->cap / 2, total = (size_t)(emb->shape[0] * emb->shape[1]);
  for (size_t at = 0; at < total; at += half) {
    size_t n = total - at < half ? total - at : half;
    if (st_read_floats(emb, at, n, rb->f, rb->h, rb->cap) ||
        st_read_floats(lm, at, n, rb->f + half, rb->h, rb->cap))
      return -1;
    if (memcmp(rb->f, rb->f + half, n * sizeof(float)) != 0)
      return osdp_fail("safetensors: '%s': tensor '%s' differs from '%s'; this model ties the LM "
                       "head to the token embedding (an untied model needs tied_head 0 / "
                       "tie_word_embeddings false)", lm->file->path, lm->name, emb->name);
  }
  return 0;
}

/* Reads every want into params: direct reads, and transposed ones in chunks of whole file rows
** scattered into osdp's columns, with the padded columns zeroed. */
static int st_read_tensors(const Wants* ws, float* params, const ReadBufs* rb) {
  for (int k = 0; k < ws->n; k++) {
    const Want* w = &ws->w[k];
    const StTensor* t = w->have;
    if (!w->transposed) {
      if (st_read_floats(t, 0, w->shape[0] * (w->ndim > 1 ? w->shape[1] : 1), params + w->off,
                         rb->h, rb->cap))
        return -1;
      continue;
    }
    size_t C = w->trows, Vp = w->tcols, V = w->shape[0], step = rb->cap / C;
    for (size_t v0 = 0; v0 < V; v0 += step) {
      size_t nv = V - v0 < step ? V - v0 : step;
      if (st_read_floats(t, v0 * C, nv * C, rb->f, rb->h, rb->cap)) return -1;
      for (size_t c = 0; c < C; c++) {
        float* col = params + w->off + c * Vp + v0;
        for (size_t v = 0; v < nv; v++) col[v] = rb->f[v * C + c];
      }
    }
    for (size_t c = 0; c < C; c++)
      for (size_t v = V; v < Vp; v++) params[w->off + c * Vp + v] = 0.0f;
  }
  return 0;
}

int safetensors_load(const char* path, const GptDesc* d, float* params) {
  if (!params) return osdp_fail("safetensors: loading '%s' needs a parameter buffer", path);
  StSet s;
  Wants ws;
  if (st_set_open(&s, path)) return -1;
  if (wants_build(d, &ws)) { st_set_close(&s); return -1; }
  ReadBufs rb = {NULL, NULL, stream_cap(&ws, 2)};
  int rc = meta_matches(&s, d, 1) || st_match(&s, &ws, d->cfg.name) || meta_matches(&s, d, 0) ? -1 : 0;
  if (rc == 0 && (!(rb.f = malloc(rb.cap * sizeof *rb.f)) || !(rb.h = malloc(rb.cap * sizeof *rb.h))))
    rc = osdp_fail("safetensors: out of memory for a %zu-float buffer", rb.cap);
  if (rc == 0 && ws.lm_head) rc = lm_head_check(&ws, &rb);
  if (rc == 0) rc = st_read_tensors(&ws, params, &rb);
  free(rb.f);
  free(rb.h);
  free(ws.w);
  st_set_close(&s);
  return rc;
}

int safetensors_dir_holds(const char* dir) {
  char p[4096];
  return st_dir_weights(dir, p, sizeof p);
}

int safetensors_is_index(const char* path) { return st_is_index_file(path); }

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

/* A config number as metadata text: the shortest of %.15g / %.17g that reads back exactly. */
static void number_text(double v, char buf[32]) {
  snprintf(buf, 32, "%.15g", v);
  if (strtod(buf, NULL) != v) snprintf(buf, 32, "%.17g", v);
}

/* The __metadata__ object of model d's file: {"format": "pt"} (what transformers expects),
** the producer, and every key of the model's config (gpt_config_to_json) and padded_vocab as
** strings, so that the file alone rebuilds the model. NULL when out of memory. */
static char* metadata_text(const GptConfig* c) {
  cJSON *m = cJSON_CreateObject(), *cfg = cJSON_CreateObject();
  char num[32];
  if (m && cfg) {
    cJSON_AddStringToObject(m, "format", "pt");
    cJSON_AddStringToObject(m, "producer", "osdp");
    gpt_config_to_json(c, cfg);
    for (const cJSON* v = cfg->child; v; v = v->next) {
      if (strcmp(v->string, "name") == 0) continue; /* a file's model is named after the file */
      if (cJSON_IsString(v)) {
        cJSON_AddStringToObject(m, v->string, v->valuestring);
        continue;
      }
      number_text(v->valuedouble, num);
      cJSON_AddStringToObject(m, v->string, num);
    }
    number_text(c->padded_vocab, num);
    cJSON_AddStringToObject(m, "padded_vocab", num);
  }
  char* text = m && cfg ? cJSON_PrintUnformatted(m) : NULL;
  cJSON_Delete(m);
  cJSON_Delete(cfg);
  return text;
}

/* Builds the header of model d's file into t: metadata, then every want in model order with
** contiguous offsets, padded with spaces so that 8 + its length is a multiple of 8. */
static int header_build(const GptDesc* d, const Wants* ws, Text* t) {
  char* meta = metadata_text(&d->cfg);
  if (!meta) return osdp_fail("safetensors: out of memory building the header");
  text_add(t, "{\"__metadata__\":%s", meta);
  free(meta);
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
  size_t cap = stream_cap(&ws, 1);
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
  if (rc == 0 && fflush(f) != 0) /* out_commit fsyncs a regular file */
    rc = osdp_fail("safetensors: writing '%s' failed: %s; check free disk space", path,
                   strerror(errno));
  free(buf);
  free(t.s);
  free(ws.w);
  return rc;
}

int safetensors_save(const char* path, const GptDesc* d, const float* params) {
  if (!params) return osdp_fail("safetensors: saving '%s' needs a parameter buffer", path);
  OutFile o;
  if (out_open(&o, path, "safetensors", "wb")) return -1;
  if (st_write(o.f, o.path, d, params)) {
    out_abort(&o);
    return -1;
  }
  return out_commit(&o);
}

int safetensors_save_dir(const char* dir, const GptDesc* d, const float* params) {
  struct stat st;
  if (stat(dir, &st) == 0 && !S_ISDIR(st.st_mode))
    return osdp_fail("safetensors: '%s' exists and is not a directory; give a directory for the "
                     "model's model.safetensors and config.json", dir);
  if (stat(dir, &st) != 0 && mkdir(dir, 0777) != 0)
    return osdp_fail("safetensors: cannot make directory '%s': %s", dir, strerror(errno));
  size_t n = strlen(dir) + 32, len = strlen(dir);
  char* p = malloc(n);
  if (!p) return osdp_fail("safetensors: out of memory");
  while (len > 1 && dir[len - 1] == '/') len--;
  snprintf(p, n, "%.*s/model.safetensors", (int)len, dir);
  int rc = safetensors_save(p, d, params);
  snprintf(p, n, "%.*s/config.json", (int)len, dir);
  if (rc == 0) rc = hf_config_write(&d->cfg, p);
  free(p);
  return rc;
}
