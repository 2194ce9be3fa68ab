/* data.c: addition problems, text files and llm.c token files as batches; see data.h. */
#include "data/data.h"

#include "core/files.h"
#include "core/util.h"
#include "tokenizer/tokenizer.h"

#include <errno.h>
#include <stdio.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

typedef enum { SOURCE_ADDITION, SOURCE_TEXT, SOURCE_TOKENS } SourceKind;

#define TOKEN_FILE_MAGIC 20240520
#define TOKEN_FILE_V_GPT2 1   /* uint16 tokens (llm.c's GPT-2 files) */
#define TOKEN_FILE_V_LLAMA3 2 /* uint32 tokens (llm.c's Llama 3 files) */
#define TOKEN_FILE_HEADER_INTS 256
#define TOKEN_FILE_HEADER_BYTES (TOKEN_FILE_HEADER_INTS * 4)

struct DataSource {
  SourceKind kind;
  int seq_len;      /* T */
  uint64_t seed;
  int vocab;
  char describe[512];
  char identity[96];     /* a file's size and checksum ("" for addition), see data_identity */

  /* addition */
  int digits;            /* n: digits of each operand */
  int problem_len;       /* L = 3n + 4 tokens */
  int problems_per_row;  /* P = T / L */
  uint64_t operand_end;  /* 10^n: operands are drawn from [0, 10^n) */

  /* text and token files: token i is bytes[i] (text) or tokens[i] (token file) */
  unsigned char* file;   /* the whole file as read */
  const unsigned char* tokens; /* token file: points into `file` past the header */
  int token_bytes;       /* token file: 2 (version 1) or 4 (version 2) */
  size_t ntok;           /* tokens (or bytes) in the file */
  size_t ntrain;         /* the first ntrain tokens are the train part, the rest val */
};

/* ------------------------------------------------------------------------------------ */
/* Random streams                                                                        */
/* ------------------------------------------------------------------------------------ */

/* splitmix64's finaliser: scrambles all 64 bits so nearby inputs give unrelated outputs. */
static uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

/* Seeds the random stream of one sample from (seed, split, step, row). Each value is folded
** in through mix64 so that, e.g., (step 1, row 0) and (step 0, row 1) get unrelated streams.
** This is what makes a batch independent of how it is split across ranks. */
static void seed_row_rng(Rng* rng, uint64_t seed, DataSplit split, long step, int row) {
  uint64_t h = mix64(seed);
  h = mix64(h ^ (uint64_t)split);
  h = mix64(h ^ (uint64_t)step);
  h = mix64(h ^ (uint64_t)row);
  rng_seed(rng, h);
}

/* ------------------------------------------------------------------------------------ */
/* Addition                                                                              */
/* ------------------------------------------------------------------------------------ */

/* Whether the pair (a, b) belongs to the held-out (val) side. The hash is of the unordered
** pair and does not depend on the seed, so the partition is fixed for every run and a + b
** always lands on the same side as b + a. */
static int addition_held_out(uint64_t a, uint64_t b) {
  uint64_t lo = a < b ? a : b, hi = a < b ? b : a;
  return mix64((hi << 32) ^ lo ^ 0x6a09e667f3bcc909ULL) % 10 == 0;
}

/* Draws an operand pair of the given split, uniformly among that split's ordered pairs, by
** drawing uniform pairs until one lands on the wanted side (about 1.1 draws for train, 10
** for val). */
static void addition_draw_pair(const DataSource* ds, Rng* rng, DataSplit split,
                               uint64_t* a, uint64_t* b) {
  int want_held_out = split == DATA_VAL;
  for (;;) {
    *a = rng_below(rng, ds->operand_end);
    *b = rng_below(rng, ds->operand_end);
    if (addition_held_out(*a, *b) == want_held_out) return;
  }
}

/* Writes `count` decimal digits of v into out[0..count), most significant first when
** `reversed` is 0 and least significant first when it is 1, zero-padded. */
static void write_digits(int* out, uint64_t v, int count, int reversed) {
  for (int i = 0; i < count; i++) {
    int pos = reversed ? i : count - 1 - i;
    out[pos] = (int)(v % 10);
    v /= 10;
  }
}

/* Writes the L tokens of the problem a + b into tok (format in data.h). */
static void addition_write_problem(int n, uint64_t a, uint64_t b, int* tok) {
  write_digits(tok, a, n, 0);
  tok[n] = DATA_ADD_PLUS;
  write_digits(tok + n + 1, b, n, 0);
  tok[2 * n + 1] = DATA_ADD_EQUALS;
  write_digits(tok + 2 * n + 2, a + b, n + 1, 1);
  tok[3 * n + 3] = DATA_ADD_END;
}

/* Fills one row of T positions with P problems and trailing pads. Targets are the next
** token only at '=' and at the answer digits, i.e. where the next token is part of the
** answer; those positions also get the problem's id. */
static void addition_fill_row(const DataSource* ds, DataSplit split, long step, int row,
                              int* inputs, int* targets, int* problem) {
  int n = ds->digits, L = ds->problem_len, T = ds->seq_len;
  Rng rng;
  seed_row_rng(&rng, ds->seed, split, step, row);
  for (int i = 0; i < T; i++) {
    inputs[i] = DATA_ADD_PAD;
    targets[i] = -1;
    if (problem) problem[i] = -1;
  }
  for (int j = 0; j < ds->problems_per_row; j++) {
    uint64_t a, b;
    addition_draw_pair(ds, &rng, split, &a, &b);
    int* tok = inputs + j * L;
    addition_write_problem(n, a, b, tok);
    int id = row * ds->problems_per_row + j;
    for (int k = 2 * n + 1; k <= L - 2; k++) {
      targets[j * L + k] = tok[k + 1];
      if (problem) problem[j * L + k] = id;
    }
  }
}

/* Parses the digit count of "addition" / "addition:N" (arg is what follows "addition"). */
static int addition_parse_digits(const char* spec, const char* arg, int* digits) {
  if (*arg == 0) { *digits = 3; return 0; }
  if (arg[0] == ':' && arg[1] >= '1' && arg[1] <= '9' && arg[2] == 0) {
    *digits = arg[1] - '0';
    return 0;
  }
  return osdp_fail("data: '%s' has a bad digit count; use addition:N with N from 1 to 9", spec);
}

/* Sets up an addition source with n-digit operands for sequences of T tokens. */
static int addition_open(DataSource* ds, const char* spec, const char* arg) {
  int n = 0;
  if (addition_parse_digits(spec, arg, &n)) return -1;
  ds->kind = SOURCE_ADDITION;
  ds->vocab = DATA_ADD_VOCAB;
  ds->digits = n;
  ds->problem_len = 3 * n + 4;
  ds->operand_end = 1;
  for (int i = 0; i < n; i++) ds->operand_end *= 10;
  if (ds->seq_len < ds->problem_len)
    return osdp_fail("--seq T=%d is too short for %d-digit addition problems of %d tokens; "
                     "use --seq >= %d", ds->seq_len, n, ds->problem_len, ds->problem_len);
  ds->problems_per_row = ds->seq_len / ds->problem_len;
  snprintf(ds->describe, sizeof ds->describe,
           "addition of %d-digit numbers (%d tokens a problem, %d a sequence of %d)",
           n, ds->problem_len, ds->problems_per_row, ds->seq_len);
  return 0;
}

/* ------------------------------------------------------------------------------------ */
/* Text and token files                                                                  */
/* ------------------------------------------------------------------------------------ */

/* Reads the whole regular file `path` into a new buffer (*buf, *size). `what` ("text",
** "tokens") names the source in messages. */
static int read_whole_file(const char* path, const char* what, unsigned char** buf, size_t* size) {
  char name[64];
  snprintf(name, sizeof name, "data: %s file", what);
  FILE* f = file_open_read(path, name, FILE_FOLLOW);
  if (!f) return -1;
  struct stat st;
  if (fstat(fileno(f), &st) != 0) {
    fclose(f);
    return osdp_fail("data: %s file '%s': %s", what, path, strerror(errno));
  }
  if (st.st_size == 0) {
    fclose(f);
    return osdp_fail("data: %s file '%s' is empty", what, path);
  }
  *size = (size_t)st.st_size;
  *buf = malloc(*size);
  if (!*buf) {
    fclose(f);
    return osdp_fail("data: out of memory reading %s file '%s' (%zu bytes)", what, path, *size);
  }
  size_t got = fread(*buf, 1, *size, f);
  int read_error = ferror(f);
  fclose(f);
  if (got != *size) {
    free(*buf);
    *buf = NULL;
    return osdp_fail("data: reading %s file '%s' stopped after %zu of %zu bytes%s", what, path,
                     got, *size, read_error ? " (read error)" : "");
  }
  return 0;
}

/* Splits the file's ntok tokens 90/10 into train and val parts and checks that each part
** holds a window of T + 1 tokens. `unit` is "bytes" or "tokens" for the message. */
static int split_train_val(DataSource* ds, const char* what, const char* path, const char* unit) {
  ds->ntrain = ds->ntok / 10 * 9 + ds->ntok % 10 * 9 / 10;  /* ntok * 9 / 10 without overflow */
  size_t window = (size_t)ds->seq_len + 1;
  if (ds->ntrain < window || ds->ntok - ds->ntrain < window)
    return osdp_fail("data: %s file '%s' has %zu %s, too few for --seq %d: its train (90%%) and "
                     "val (10%%) parts each need %zu %s, so it must hold at least %zu %s",
                     what, path, ds->ntok, unit, ds->seq_len, window, unit,
                     (size_t)10 * (size_t)ds->seq_len + 1, unit);
  return 0;
}

/* Records what the file just read is: its size and the FNV-1a 64 checksum of all its bytes (one
** more pass over memory the source holds anyway; ~1 s a GB), so that a resumed run can tell
** whether the file it trains on is the one its checkpoint was trained on. */
static void record_identity(DataSource* ds, size_t bytes) {
  uint64_t h = fnv1a64(FNV1A64_START, ds->file, bytes);
  snprintf(ds->identity, sizeof ds->identity, "%zu bytes, fnv1a64 %016llx", bytes, (unsigned long long)h);
}

/* Opens a text file: its bytes are the tokens. */
static int text_open(DataSource* ds, const char* path) {
  if (*path == 0) return osdp_fail("data: 'text:' needs a file name, e.g. text:input.txt");
  ds->kind = SOURCE_TEXT;
  ds->vocab = 256;
  if (read_whole_file(path, "text", &ds->file, &ds->ntok)) return -1;
  record_identity(ds, ds->ntok);
  if (split_train_val(ds, "text", path, "bytes")) return -1;
  snprintf(ds->describe, sizeof ds->describe, "text file %s (%zu bytes)", path, ds->ntok);
  return 0;
}

/* Opens a text file encoded by the tokenizer at tok_path: its token ids, held as a version-2
** token file's (uint32), train and val parts as for a token file. The identity is that of the
** ids, so a changed text or tokenizer is seen by a resumed run. */
static int text_open_tokenized(DataSource* ds, const char* path, const char* tok_path) {
  if (*path == 0) return osdp_fail("data: 'text:' needs a file name, e.g. text:input.txt");
  unsigned char* text = NULL;
  size_t n = 0;
  Tokenizer* t = NULL;
  TokIds ids = {0};
  int rc = read_whole_file(path, "text", &text, &n) || tok_load(&t, tok_path) ||
           tok_encode(t, (const char*)text, n, &ids) ? -1 : 0;
  if (!rc && !(ds->file = malloc(ids.n * 4 + 1))) rc = osdp_fail("data: out of memory tokenizing '%s'", path);
  for (size_t i = 0; !rc && i < ids.n; i++) {
    uint32_t v = (uint32_t)ids.ids[i];
    memcpy(ds->file + 4 * i, &v, 4);
  }
  if (!rc) {
    ds->kind = SOURCE_TOKENS;
    ds->tokens = ds->file;
    ds->token_bytes = 4;
    ds->ntok = ids.n;
    ds->vocab = tok_vocab_size(t);
    record_identity(ds, ids.n * 4);
    rc = split_train_val(ds, "text", path, "tokens");
    snprintf(ds->describe, sizeof ds->describe, "text file %s (%zu bytes, %zu tokens of %s)", path,
             n, ids.n, tok_path);
  }
  free(text);
  tok_ids_free(&ids);
  tok_free(t);
  return rc;
}

/* Token i of a token file (ds->token_bytes wide, little-endian like the header). */
static uint32_t token_at(const DataSource* ds, size_t i) {
  if (ds->token_bytes == 2) {
    uint16_t t;
    memcpy(&t, ds->tokens + 2 * i, 2);
    return t;
  }
  uint32_t t;
  memcpy(&t, ds->tokens + 4 * i, 4);
  return t;
}

/* One pass over a token file's tokens: each id must be below DATA_MAX_VOCAB, and the largest
** sets the vocabulary the file needs (the format does not record one; a file of small ids
** trains a small model, and the model's vocabulary is checked against it by the caller). */
static int tokens_scan(DataSource* ds, const char* path) {
  uint32_t max_id = 0;
  for (size_t i = 0; i < ds->ntok; i++) {
    uint32_t t = token_at(ds, i);
    if (t >= DATA_MAX_VOCAB)
      return osdp_fail("data: tokens file '%s' has token %lu at position %zu, beyond the largest "
                       "vocabulary osdp builds (%d); is the file corrupt?", path,
                       (unsigned long)t, i, DATA_MAX_VOCAB);
    if (t > max_id) max_id = t;
  }
  ds->vocab = (int)max_id + 1;
  return 0;
}

/* Checks an llm.c token file held in ds->file (ds->ntok bytes so far): header magic, version
** (1: uint16 tokens, 2: uint32), token count against the file size, and token ids. On success
** points ds->tokens at the tokens and sets ds->ntok to their number. */
static int tokens_check(DataSource* ds, const char* path) {
  size_t size = ds->ntok;
  if (size < TOKEN_FILE_HEADER_BYTES)
    return osdp_fail("data: tokens file '%s' is %zu bytes, shorter than the %d-byte llm.c header; "
                     "is it a token file?", path, size, TOKEN_FILE_HEADER_BYTES);
  int32_t header[TOKEN_FILE_HEADER_INTS];
  memcpy(header, ds->file, sizeof header);
  if (header[0] != TOKEN_FILE_MAGIC)
    return osdp_fail("data: tokens file '%s' has magic %d, not llm.c's %d; is it a token file?",
                     path, (int)header[0], TOKEN_FILE_MAGIC);
  if (header[1] != TOKEN_FILE_V_GPT2 && header[1] != TOKEN_FILE_V_LLAMA3)
    return osdp_fail("data: tokens file '%s' has version %d; llm.c writes version %d (uint16 "
                     "GPT-2 tokens) or %d (uint32 Llama 3 tokens)", path, (int)header[1],
                     TOKEN_FILE_V_GPT2, TOKEN_FILE_V_LLAMA3);
  if (header[2] <= 0)
    return osdp_fail("data: tokens file '%s' header says it holds %d tokens; it must hold some",
                     path, (int)header[2]);
  ds->token_bytes = header[1] == TOKEN_FILE_V_GPT2 ? 2 : 4;
  size_t ntok = (size_t)header[2];
  size_t expect = TOKEN_FILE_HEADER_BYTES + (size_t)ds->token_bytes * ntok;
  if (size != expect)
    return osdp_fail("data: tokens file '%s' is %zu bytes but its header promises %zu tokens of "
                     "%d bytes (%zu bytes); the file is %s", path, size, ntok, ds->token_bytes,
                     expect, size < expect ? "truncated" : "longer than its header says");
  ds->tokens = ds->file + TOKEN_FILE_HEADER_BYTES;
  ds->ntok = ntok;
  return tokens_scan(ds, path);
}

/* Opens an llm.c token file (GPT-2's uint16 or Llama 3's uint32 tokens). */
static int tokens_open(DataSource* ds, const char* path) {
  if (*path == 0) return osdp_fail("data: 'tokens:' needs a file name, e.g. tokens:train.bin");
  ds->kind = SOURCE_TOKENS;
  if (read_whole_file(path, "tokens", &ds->file, &ds->ntok)) return -1;
  record_identity(ds, ds->ntok); /* before ntok becomes the token count */
  if (tokens_check(ds, path)) return -1;
  if (split_train_val(ds, "tokens", path, "tokens")) return -1;
  snprintf(ds->describe, sizeof ds->describe, "tokens file %s (%zu %s tokens)", path, ds->ntok,
           ds->token_bytes == 2 ? "uint16" : "uint32");
  return 0;
}

/* Token i of a text or token file. */
static int file_token(const DataSource* ds, size_t i) {
  return ds->kind == SOURCE_TEXT ? (int)ds->file[i] : (int)token_at(ds, i);
}

/* Fills one row with a window of T + 1 tokens at a random offset inside the split's part. */
static void file_fill_row(const DataSource* ds, DataSplit split, long step, int row,
                          int* inputs, int* targets, int* problem) {
  size_t T = (size_t)ds->seq_len;
  size_t lo = split == DATA_TRAIN ? 0 : ds->ntrain;
  size_t len = split == DATA_TRAIN ? ds->ntrain : ds->ntok - ds->ntrain;
  Rng rng;
  seed_row_rng(&rng, ds->seed, split, step, row);
  size_t start = lo + (size_t)rng_below(&rng, len - T);  /* window [start, start+T] fits */
  for (size_t i = 0; i < T; i++) {
    inputs[i] = file_token(ds, start + i);
    targets[i] = file_token(ds, start + i + 1);
    if (problem) problem[i] = -1;
  }
}

/* ------------------------------------------------------------------------------------ */
/* Public API                                                                            */
/* ------------------------------------------------------------------------------------ */

int data_open(DataSource** out, const char* spec, int seq_len, uint64_t seed) {
  *out = NULL;
  if (!spec) spec = "addition";
  if (seq_len < 1) return osdp_fail("data: sequence length %d must be at least 1", seq_len);
  DataSource* ds = calloc(1, sizeof *ds);
  if (!ds) return osdp_fail("data: out of memory");
  ds->seq_len = seq_len;
  ds->seed = seed;
  int rc;
  if (strncmp(spec, "addition", 8) == 0 && (spec[8] == 0 || spec[8] == ':'))
    rc = addition_open(ds, spec, spec + 8);
  else if (strncmp(spec, "text:", 5) == 0)
    rc = text_open(ds, spec + 5);
  else if (strncmp(spec, "tokens:", 7) == 0)
    rc = tokens_open(ds, spec + 7);
  else
    rc = osdp_fail("data: unknown source '%s'; use addition, addition:N, text:FILE or tokens:FILE",
                   spec);
  if (rc) {
    data_close(ds);
    return -1;
  }
  *out = ds;
  return 0;
}

int data_open_tokenized(DataSource** out, const char* spec, const char* tokenizer, int seq_len,
                        uint64_t seed) {
  if (!tokenizer || !spec || strncmp(spec, "text:", 5) != 0) return data_open(out, spec, seq_len, seed);
  *out = NULL;
  if (seq_len < 1) return osdp_fail("data: sequence length %d must be at least 1", seq_len);
  DataSource* ds = calloc(1, sizeof *ds);
  if (!ds) return osdp_fail("data: out of memory");
  ds->seq_len = seq_len;
  ds->seed = seed;
  if (text_open_tokenized(ds, spec + 5, tokenizer)) {
    data_close(ds);
    return -1;
  }
  *out = ds;
  return 0;
}

void data_close(DataSource* ds) {
  if (!ds) return;
  free(ds->file);
  free(ds);
}

int data_vocab_size(const DataSource* ds) { return ds->vocab; }

int data_seq_len(const DataSource* ds) { return ds->seq_len; }

const char* data_describe(const DataSource* ds) { return ds->describe; }

const char* data_identity(const DataSource* ds) { return ds->identity; }

/* Checks the arguments shared by data_batch and data_batch_target_count. */
static int check_batch_args(DataSplit split, long step, int global_rows) {
  if (split != DATA_TRAIN && split != DATA_VAL)
    return osdp_fail("data: split %d is neither DATA_TRAIN (0) nor DATA_VAL (1)", (int)split);
  if (step < 0) return osdp_fail("data: batch step %ld must be >= 0", step);
  if (global_rows < 1) return osdp_fail("data: global batch of %d rows; need at least 1", global_rows);
  return 0;
}

int data_batch(const DataSource* ds, DataSplit split, long step, int global_rows, int first_row,
               int nrows, int* inputs, int* targets, int* problem) {
  if (check_batch_args(split, step, global_rows)) return -1;
  if (first_row < 0 || nrows < 0 || (long)first_row + nrows > global_rows)
    return osdp_fail("data: rows %d..%d (first_row %d, nrows %d) are outside the global batch of "
                     "%d rows", first_row, first_row + nrows - 1, first_row, nrows, global_rows);
  if (nrows > 0 && (!inputs || !targets))
    return osdp_fail("data: data_batch needs inputs and targets buffers");
  size_t T = (size_t)ds->seq_len;
  for (int r = 0; r < nrows; r++) {
    size_t off = (size_t)r * T;
    int* prob = problem ? problem + off : NULL;
    if (ds->kind == SOURCE_ADDITION)
      addition_fill_row(ds, split, step, first_row + r, inputs + off, targets + off, prob);
    else
      file_fill_row(ds, split, step, first_row + r, inputs + off, targets + off, prob);
  }
  return 0;
}

long data_train_sequences(const DataSource* ds) {
  if (ds->kind == SOURCE_ADDITION) return LONG_MAX;
  return (long)(ds->ntrain / (size_t)ds->seq_len);
}

long data_batch_target_count(const DataSource* ds, DataSplit split, long step, int global_rows) {
  if (check_batch_args(split, step, global_rows)) return -1;
  if (ds->kind == SOURCE_ADDITION)
    return (long)global_rows * ds->problems_per_row * (ds->digits + 2);
  return (long)global_rows * ds->seq_len;
}

long data_batch_problem_count(const DataSource* ds, int global_rows) {
  if (ds->kind != SOURCE_ADDITION || global_rows < 1) return 0;
  return (long)global_rows * ds->problems_per_row;
}

/* Printable form of a byte of a text file: itself, a C escape, or \xNN. */
static const char* byte_text(int c, char buf[DATA_TOKEN_TEXT]) {
  if (c == '\n') return strcpy(buf, "\\n");
  if (c == '\t') return strcpy(buf, "\\t");
  if (c == '\r') return strcpy(buf, "\\r");
  if (c >= 0x20 && c < 0x7f) {
    buf[0] = (char)c;
    buf[1] = 0;
    return buf;
  }
  snprintf(buf, DATA_TOKEN_TEXT, "\\x%02x", (unsigned)(unsigned char)c);
  return buf;
}

const char* data_token_text(const DataSource* ds, int token, char buf[DATA_TOKEN_TEXT]) {
  /* A token file's vocabulary is what it uses; any id its format holds prints. */
  int bound = ds->kind == SOURCE_TOKENS ? DATA_MAX_VOCAB : ds->vocab;
  if (token < 0 || token >= bound) return strcpy(buf, "?");
  if (ds->kind == SOURCE_TEXT) return byte_text(token, buf);
  if (ds->kind == SOURCE_TOKENS) {
    snprintf(buf, DATA_TOKEN_TEXT, "<%d>", token);
    return buf;
  }
  static const char* names[DATA_ADD_VOCAB] = {"0", "1", "2", "3", "4", "5", "6", "7",
                                              "8", "9", "+", "=", ";", "_"};
  return strcpy(buf, names[token]);
}

/* The addition token of character ch, or -1. */
static int addition_token_of(char ch) {
  if (ch >= '0' && ch <= '9') return ch - '0';
  const char* sym = "+=;_";
  const char* p = ch ? strchr(sym, ch) : NULL;
  return p ? DATA_ADD_PLUS + (int)(p - sym) : -1;
}

int data_encode(const DataSource* ds, const char* text, int* ids, int max) {
  if (ds->kind == SOURCE_TOKENS)
    return osdp_fail("--prompt: a tokens file has no text encoding here; give the token ids "
                     "with --prompt-tokens 15496,11,995");
  int n = 0;
  for (const char* c = text; *c; c++) {
    if (n >= max) return osdp_fail("--prompt: more than %d tokens", max);
    int t = ds->kind == SOURCE_TEXT ? (unsigned char)*c : addition_token_of(*c);
    if (t < 0)
      return osdp_fail("--prompt: '%c' is not a token of the addition task (digits, '+', '=', "
                       "';' and '_'), as in --prompt \"347+285=\"", *c);
    ids[n++] = t;
  }
  return n;
}
