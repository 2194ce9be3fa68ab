/*
** checkpoint.c: llm.c GPT-2 checkpoints; see checkpoint.h.
**
** The conversion between llm.c's tensor order and osdp's op-block order is described by a
** "file layout", made from the model's named tensors (their llm.c slots): the list of pieces of the file in file order, each a [rows, cols] row-major
** matrix of the file that lives at some offset of osdp's parameter array, either as it is
** (biases, LayerNorms, wpe) or transposed (weights and wte, which osdp keeps as [in, out]).
** Saving and loading walk that list, streaming transposed pieces through a small buffer.
*/
#include "model/checkpoint.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/output.h"
#include "core/files.h"
#include "core/util.h"
#include "model/family.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "checkpoint.c reads and writes llm.c's little-endian files; add byte swapping for this host"
#endif
_Static_assert(sizeof(float) == 4 && sizeof(int32_t) == 4, "llm.c files hold 4-byte values");

#define HEADER_BYTES (CHECKPOINT_HEADER_INTS * sizeof(int32_t))
#define MAX_PADDED_VOCAB (1 << 25)
#define STREAM_FLOATS ((size_t)1 << 20)

/* A contiguous run of the file: a [rows, cols] row-major matrix that sits at params + off,
** either in the same layout or transposed (params holds it as [cols, rows]). */
typedef struct Piece {
  size_t off, rows, cols;
  int transpose;
} Piece;

/* The file layout: the file's pieces in file order, and the widest transposed row. */
typedef struct FileLayout {
  Piece* pieces;
  int n;
  size_t max_cols;
} FileLayout;

/* Base name of a path, for messages and config names. */
static const char* base_name(const char* path) {
  const char* slash = strrchr(path, '/');
  return slash ? slash + 1 : path;
}


/* The piece of the file that parameter tensor t of the op whose block starts at params + base
** is: llm.c holds split tensors (W, wte) transposed ([out, in]) and the others as they are. */
static Piece piece_of(const ParamTensor* t, size_t base) {
  if (t->llmc_transposed) return (Piece){base + t->off, t->cols, t->rows, 1};
  return (Piece){base + t->off, 1, t->n, 0};
}

/* The highest llm.c slot of model d's tensors, -1 if none. */
static int max_slot(const GptDesc* d) {
  int m = -1;
  for (int i = 0; i < d->nops; i++)
    for (int j = 0; j < d->ops[i].ntensors; j++)
      if (d->ops[i].tensor[j].llmc_slot > m) m = d->ops[i].tensor[j].llmc_slot;
  return m;
}

int checkpoint_holds(const GptDesc* d) {
  for (int i = 0; i < d->nops; i++)
    for (int j = 0; j < d->ops[i].ntensors; j++)
      if (d->ops[i].tensor[j].llmc_slot < 0) return 0;
  return 1;
}

/* Appends to lay the pieces of every llm.c tensor, in file order: slot by slot, each slot's
** tensors in op order (so a layer tensor's L copies follow each other, as llm.c writes them);
** base[i] is where op i's block starts. Returns 0, or -1 if some parameters have no place in
** the file (a model llm.c files cannot hold). */
static int layout_fill(const GptDesc* d, const size_t* base, FileLayout* lay) {
  size_t total = 0;
  for (int slot = 0, top = max_slot(d); slot <= top; slot++)
    for (int i = 0; i < d->nops; i++)
      for (int j = 0; j < d->ops[i].ntensors; j++) {
        const ParamTensor* t = &d->ops[i].tensor[j];
        if (t->llmc_slot != slot) continue;
        Piece p = piece_of(t, base[i]);
        if (p.transpose && p.cols > lay->max_cols) lay->max_cols = p.cols;
        total += p.rows * p.cols;
        lay->pieces[lay->n++] = p;
      }
  if (total == d->n_params) return 0;
  return osdp_fail("checkpoint: llm.c's tensors hold %zu parameters but model '%s' has %zu; its "
                   "family's spec leaves some tensors without an llm.c slot", total, d->cfg.name,
                   d->n_params);
}

/* Builds the file layout of model d (free lay->pieces after use). Returns 0 or -1. */
static int layout_build(const GptDesc* d, FileLayout* lay) {
  memset(lay, 0, sizeof *lay);
  size_t* base = malloc(((size_t)d->nops + 1) * sizeof *base);
  lay->pieces = malloc(((size_t)d->nops * MODEL_MAX_TENSORS + 1) * sizeof *lay->pieces);
  int rc = base && lay->pieces ? 0 : osdp_fail("checkpoint: out of memory");
  if (rc == 0) {
    base[0] = 0;
    for (int i = 0; i < d->nops; i++) base[i + 1] = base[i] + d->ops[i].n_params;
    rc = layout_fill(d, base, lay);
  }
  free(base);
  if (rc != 0) { free(lay->pieces); lay->pieces = NULL; }
  return rc;
}

/* Streaming state shared by the pieces of one save or load. */
typedef struct Stream {
  FILE* f;
  const char* path;   /* the file being written or read, for messages */
  float* buf;         /* holds whole rows of a transposed piece */
  size_t cap;         /* floats in buf */
} Stream;

/* Allocates the stream buffer for a file layout. */
static int stream_open(Stream* s, FILE* f, const char* path, const FileLayout* lay) {
  s->f = f;
  s->path = path;
  s->cap = lay->max_cols > STREAM_FLOATS ? lay->max_cols : STREAM_FLOATS;
  s->buf = malloc(s->cap * sizeof(float));
  return s->buf ? 0 : osdp_fail("checkpoint: out of memory for a %zu-float buffer", s->cap);
}

/* Writes n floats. */
static int write_floats(Stream* s, const float* p, size_t n) {
  if (fwrite(p, sizeof(float), n, s->f) == n) return 0;
  return osdp_fail("checkpoint: writing '%s' failed: %s; check free disk space", s->path,
                   strerror(errno));
}

/* Reads n floats (the file's size was checked, so a short read is an I/O error). */
static int read_floats(Stream* s, float* p, size_t n) {
  if (fread(p, sizeof(float), n, s->f) == n) return 0;
  return osdp_fail("checkpoint: reading '%s' failed: %s", s->path,
                   ferror(s->f) ? strerror(errno) : "unexpected end of file");
}

/* Copies file rows [r0, r0+nr) of transposed piece p from params (held as [cols, rows]) into buf. */
static void gather_rows(float* buf, const float* params, const Piece* p, size_t r0, size_t nr) {
  for (size_t c = 0; c < p->cols; c++) {
    const float* col = params + p->off + c * p->rows + r0;
    for (size_t r = 0; r < nr; r++) buf[r * p->cols + c] = col[r];
  }
}

/* Copies file rows [r0, r0+nr) of transposed piece p from buf into params (held as [cols, rows]). */
static void scatter_rows(float* params, const float* buf, const Piece* p, size_t r0, size_t nr) {
  for (size_t c = 0; c < p->cols; c++) {
    float* col = params + p->off + c * p->rows + r0;
    for (size_t r = 0; r < nr; r++) col[r] = buf[r * p->cols + c];
  }
}

/* Writes piece p of params to the file. */
static int save_piece(Stream* s, const Piece* p, const float* params) {
  if (!p->transpose) return write_floats(s, params + p->off, p->rows * p->cols);
  size_t step = s->cap / p->cols;
  for (size_t r0 = 0; r0 < p->rows; r0 += step) {
    size_t nr = p->rows - r0 < step ? p->rows - r0 : step;
    gather_rows(s->buf, params, p, r0, nr);
    if (write_floats(s, s->buf, nr * p->cols)) return -1;
  }
  return 0;
}

/* Reads piece p of the file into params. */
static int load_piece(Stream* s, const Piece* p, float* params) {
  if (!p->transpose) return read_floats(s, params + p->off, p->rows * p->cols);
  size_t step = s->cap / p->cols;
  for (size_t r0 = 0; r0 < p->rows; r0 += step) {
    size_t nr = p->rows - r0 < step ? p->rows - r0 : step;
    if (read_floats(s, s->buf, nr * p->cols)) return -1;
    scatter_rows(params, s->buf, p, r0, nr);
  }
  return 0;
}

/* Fills an llm.c header for config c. */
static void header_fill(int32_t h[CHECKPOINT_HEADER_INTS], const GptConfig* c) {
  memset(h, 0, HEADER_BYTES);
  h[0] = CHECKPOINT_MAGIC;
  h[1] = CHECKPOINT_VERSION;
  h[2] = c->max_seq;
  h[3] = c->vocab_size;
  h[4] = c->n_layer;
  h[5] = c->n_head;
  h[6] = c->n_embd;
  h[7] = c->padded_vocab;
}

/* Checks the magic and version of header h read from path. */
static int header_check_format(const int32_t* h, const char* path) {
  if (h[0] != CHECKPOINT_MAGIC)
    return osdp_fail("checkpoint: '%s' is not an llm.c GPT-2 checkpoint (magic %d, expected %d)",
                     path, (int)h[0], CHECKPOINT_MAGIC);
  if (h[1] == 5)
    return osdp_fail("checkpoint: '%s' is version 5 (bf16), which osdp does not support; use "
                     "llm.c's fp32 file (version 3), e.g. gpt2_124M.bin, not gpt2_124M_bf16.bin", path);
  if (h[1] != CHECKPOINT_VERSION)
    return osdp_fail("checkpoint: '%s' has version %d; only version 3 (fp32, padded vocab) is "
                     "supported; re-export it with a current llm.c train_gpt2.py", path, (int)h[1]);
  return 0;
}

/* Turns header h into a config and checks it the way gpt_config_validate does, plus Vp >= V. */
static int header_to_config(const int32_t* h, const char* path, GptConfig* c) {
  memset(c, 0, sizeof *c);
  snprintf(c->name, sizeof c->name, "%s", base_name(path));
  c->max_seq = h[2];
  c->vocab_size = h[3];
  c->n_layer = h[4];
  c->n_head = h[5];
  c->n_embd = h[6];
  c->padded_vocab = h[7];
  if (gpt_config_validate(c)) {
    char why[512];
    const char* e = osdp_last_error();
    snprintf(why, sizeof why, "%s", strncmp(e, "model: ", 7) == 0 ? e + 7 : e);
    return osdp_fail("checkpoint: '%s' has a corrupt header: %s", path, why);
  }
  if (c->padded_vocab < c->vocab_size || c->padded_vocab > MAX_PADDED_VOCAB)
    return osdp_fail("checkpoint: '%s' has a corrupt header: padded_vocab=%d must be in "
                     "[vocab_size=%d, %d]", path, c->padded_vocab, c->vocab_size, MAX_PADDED_VOCAB);
  return 0;
}

/* Opens checkpoint path, reads and checks its header into cfg and its size into size. Returns
** the file positioned at the first parameter, or NULL with an error. */
static FILE* checkpoint_open(const char* path, GptConfig* cfg, long long* size) {
  FILE* f = file_open_read(path, "checkpoint", FILE_FOLLOW);
  if (!f) return NULL;
  struct stat st;
  int32_t h[CHECKPOINT_HEADER_INTS];
  if (fstat(fileno(f), &st) != 0) {
    osdp_fail("checkpoint: '%s': %s", path, strerror(errno));
  } else if ((size_t)st.st_size < HEADER_BYTES) {
    osdp_fail("checkpoint: '%s' is truncated: %lld bytes, shorter than the %zu-byte llm.c header",
              path, (long long)st.st_size, HEADER_BYTES);
  } else if (fread(h, sizeof(int32_t), CHECKPOINT_HEADER_INTS, f) != CHECKPOINT_HEADER_INTS) {
    osdp_fail("checkpoint: reading the header of '%s' failed: %s", path, strerror(errno));
  } else if (header_check_format(h, path) == 0 && header_to_config(h, path, cfg) == 0) {
    *size = (long long)st.st_size;
    return f;
  }
  fclose(f);
  return NULL;
}

/* Checks that a checkpoint of model d is exactly `size` bytes long. */
static int size_check(long long size, const GptDesc* d, const char* path);

int checkpoint_read_config(const char* path, GptConfig* cfg) {
  GptConfig c;
  long long size;
  FILE* f = checkpoint_open(path, &c, &size);
  if (!f) return -1;
  fclose(f);
  /* The header's shape against the file's real size, before anything that big is allocated. */
  GptDesc d;
  if (gpt_desc_build(&d, &c)) return -1;
  int rc = size_check(size, &d, path);
  gpt_desc_free(&d);
  if (rc) return -1;
  *cfg = c;
  return 0;
}

/* Checks that the checkpoint's shape fc equals model d's. */
static int shape_check(const GptConfig* fc, const GptDesc* d, const char* path) {
  const GptConfig* mc = &d->cfg;
  const struct { const char* name; int file, model; } fields[] = {
      {"n_layer", fc->n_layer, mc->n_layer},       {"n_embd", fc->n_embd, mc->n_embd},
      {"n_head", fc->n_head, mc->n_head},          {"vocab_size", fc->vocab_size, mc->vocab_size},
      {"padded_vocab", fc->padded_vocab, mc->padded_vocab}, {"max_seq", fc->max_seq, mc->max_seq},
  };
  for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) {
    if (fields[i].file == fields[i].model) continue;
    return osdp_fail("checkpoint: '%s' has %s=%d but model '%s' has %s=%d; use a model of the "
                     "checkpoint's shape", path, fields[i].name, fields[i].file, mc->name,
                     fields[i].name, fields[i].model);
  }
  return 0;
}

/* Checks that a checkpoint of model d is exactly `size` bytes long. */
static int size_check(long long size, const GptDesc* d, const char* path) {
  size_t expected = HEADER_BYTES + d->n_params * sizeof(float);
  if ((unsigned long long)size == expected) return 0;
  return osdp_fail("checkpoint: '%s' is %s: expected %zu bytes (%zu-byte header + %zu float32 "
                   "parameters), found %lld", path, (unsigned long long)size < expected ?
                   "truncated" : "longer than its header says (trailing data)",
                   expected, HEADER_BYTES, d->n_params, size);
}

/* Reads the parameters of an open checkpoint (positioned after the header) into params. */
static int load_params(FILE* f, const char* path, const GptDesc* d, float* params) {
  FileLayout lay;
  Stream s;
  if (layout_build(d, &lay)) return -1;
  if (stream_open(&s, f, path, &lay)) { free(lay.pieces); return -1; }
  int rc = 0;
  for (int i = 0; i < lay.n && rc == 0; i++) rc = load_piece(&s, &lay.pieces[i], params);
  free(s.buf);
  free(lay.pieces);
  return rc;
}

int checkpoint_load(const char* path, const GptDesc* d, float* params) {
  if (!params) return osdp_fail("checkpoint: loading '%s' needs a parameter buffer", path);
  if (!checkpoint_holds(d))
    return osdp_fail("checkpoint: '%s' is an llm.c GPT-2 checkpoint, but %s is a %s model; load "
                     "its weights from safetensors", path, d->cfg.name, d->family->title);
  GptConfig fc;
  long long size;
  FILE* f = checkpoint_open(path, &fc, &size);
  if (!f) return -1;
  int rc = shape_check(&fc, d, path) || size_check(size, d, path) ||
           load_params(f, path, d, params) ? -1 : 0;
  fclose(f);
  return rc;
}

/* Writes the header and the parameters of model d to the open file f, then syncs it. */
static int save_to(FILE* f, const char* path, const GptDesc* d, const float* params) {
  int32_t h[CHECKPOINT_HEADER_INTS];
  FileLayout lay;
  Stream s;
  if (layout_build(d, &lay)) return -1;
  if (stream_open(&s, f, path, &lay)) { free(lay.pieces); return -1; }
  header_fill(h, &d->cfg);
  int rc = fwrite(h, sizeof(int32_t), CHECKPOINT_HEADER_INTS, f) == CHECKPOINT_HEADER_INTS ? 0 :
           osdp_fail("checkpoint: writing '%s' failed: %s", path, strerror(errno));
  for (int i = 0; i < lay.n && rc == 0; i++) rc = save_piece(&s, &lay.pieces[i], params);
  free(s.buf);
  free(lay.pieces);
  if (rc == 0 && fflush(f) != 0) /* out_commit fsyncs a regular file */
    rc = osdp_fail("checkpoint: writing '%s' failed: %s; check free disk space", path, strerror(errno));
  return rc;
}

int checkpoint_save(const char* path, const GptDesc* d, const float* params) {
  if (!params) return osdp_fail("checkpoint: saving '%s' needs a parameter buffer", path);
  if (!checkpoint_holds(d))
    return osdp_fail("checkpoint: llm.c checkpoints hold GPT-2 models only, not %s (a %s model); "
                     "write safetensors instead (a name ending in .safetensors, or --format "
                     "safetensors)", d->cfg.name, d->family->title);
  OutFile o;
  if (out_open(&o, path, "checkpoint", "wb")) return -1;
  if (save_to(o.f, o.path, d, params)) {
    out_abort(&o);
    return -1;
  }
  return out_commit(&o);
}
