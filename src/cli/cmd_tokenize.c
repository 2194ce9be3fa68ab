/*
** cmd_tokenize.c: `osdp tokenize --tokenizer PATH FILE... --out tokens.bin`: text files to an
** llm.c token file (what `--data tokens:FILE` reads) with a Hugging Face tokenizer.json
** (tokenizer/tokenizer.h); and `--decode tokens.bin`, a token file's text on stdout. Each FILE is
** one document, written as the end-of-text token and then its tokens (llm.c's
** dev/data/fineweb.py). The files are read in pieces of about --chunk bytes, each cut where
** the tokenizer says encoding in pieces gives the ids of encoding whole (tok_safe_cut), so
** memory stays small whatever the input's size. Rank 0 works; under mpirun the other ranks
** only wait for its result.
*/
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/cli.h"
#include "comm/comm.h"
#include "core/files.h"
#include "core/output.h"
#include "core/util.h"
#include "tokenizer/tokenizer.h"

#define TOKFILE_MAGIC 20240520
#define TOKFILE_HEADER_INTS 256
#define TOKFILE_MAX_TOKENS 2147483647LL /* the header counts tokens in an int32 */
#define TOKFILE_U16_VOCAB 65536         /* version 1 (uint16 ids) up to this vocabulary */

static const OptionSpec tokenize_options[] = {
    {"tokenizer", "PATH", NULL, "a Hugging Face tokenizer.json, or a model directory holding one\n"
                                "(byte-level BPE: GPT-2, Llama 3, Qwen2, SmolLM2) (required)"},
    {"out", "FILE", NULL, "the token file to write, in llm.c's format (what --data tokens:FILE\n"
                          "reads): version 1, uint16 ids, for a vocabulary of at most 65536;\n"
                          "version 2, uint32 ids, above (required, unless --decode)"},
    {"val-fraction", "F", "0", "0 <= F < 1: the last F of the input's bytes (all FILEs in order)\n"
                               "go to a second file, FILE with .val before its extension\n"
                               "(tokens.bin -> tokens.val.bin), cut at the last place at or before\n"
                               "that point where the text may be cut (a line break or a space\n"
                               "between words, or a file's start): the two files' tokens are then\n"
                               "exactly --out's tokens without --val-fraction"},
    {"decode", "FILE", NULL, "print the text of token file FILE on stdout instead (each id's\n"
                             "bytes; the end-of-text token as its text)"},
    {"chunk", "SIZE", "1MiB", "read the inputs in pieces of about SIZE bytes"},
    {"json", NULL, NULL, "print the summary as one JSON object"},
    {"quiet", NULL, NULL, "no progress line on stderr and no summary (unless --json)"},
    {NULL, NULL, NULL, NULL}};

static const CommandSpec tokenize_spec = {
    "tokenize", "osdp tokenize --tokenizer PATH FILE... --out tokens.bin [options]\n"
                "       osdp tokenize --tokenizer PATH --decode tokens.bin",
    "  encodes each FILE (a document: UTF-8 text) with the tokenizer into one llm.c token file:\n"
    "  per document the end-of-text token (<|endoftext|>, <|end_of_text|> or </s>), then its\n"
    "  tokens, as llm.c's data scripts write them. An added token's text in a FILE (such as\n"
    "  \"<|endoftext|>\") is that token, as the tokenizer itself encodes it. Progress (MB, MB/s,\n"
    "  ETA) goes to stderr.",
    {tokenize_options, NULL},
    "  The token files are written to a temporary file beside each and renamed, so a failed run\n"
    "  leaves existing files as they were. A tokenizer whose split pattern is not GPT-2's, Llama\n"
    "  3's or Qwen2's reads each FILE whole. Example:\n"
    "    osdp tokenize --tokenizer gpt2/ input.txt --out tokens.bin --val-fraction 0.1\n"
    "    osdp train --data tokens:tokens.bin ..."};

/* One token file being written: llm.c's header (its count filled in last), then the ids. */
typedef struct TokFile {
  OutFile o;
  int wide;               /* uint32 ids (version 2), else uint16 (version 1) */
  long long count;        /* ids written */
  unsigned char buf[1 << 16];
  size_t nbuf;
} TokFile;

/* What a tokenize run holds. */
typedef struct TokRun {
  Tokenizer* tok;
  int eot;
  TokFile* file[2];        /* [0] --out, [1] the .val file (NULL without --val-fraction) */
  int cur;                 /* which file the tokens go to now */
  long long total, done;   /* input bytes in all, and encoded so far */
  long long val_at;        /* the byte offset the val part starts at or before; -1: none */
  size_t chunk;
  int quiet, json, tty;
  int eot_due;             /* the document's end-of-text token is not written yet */
  double t0, last_report;
  TokIds ids;
  char val_path[4200];
} TokRun;

/* Opens path as a token file to write (field: its option); the header is a placeholder until
** tokfile_finish. A fifo, which cannot be rewound to it, is refused. */
static int tokfile_open(TokFile** out, const char* path, const char* field, int wide) {
  TokFile* f = calloc(1, sizeof *f);
  if (!f) return osdp_fail("out of host memory");
  f->wide = wide;
  *out = f;
  if (out_open(&f->o, path, field, "wb")) return -1;
  if (fseek(f->o.f, 0, SEEK_CUR) != 0)
    return osdp_fail("%s: '%s' cannot be rewound (%s); the token count goes into the header after "
                     "the last token, so give a file", field, path, strerror(errno));
  static const int32_t zero[TOKFILE_HEADER_INTS];
  if (fwrite(zero, sizeof zero, 1, f->o.f) != 1)
    return osdp_fail("%s: writing '%s': %s", field, path, strerror(errno));
  return 0;
}

/* Writes f's buffered ids. */
static int tokfile_flush(TokFile* f) {
  if (f->nbuf && fwrite(f->buf, 1, f->nbuf, f->o.f) != f->nbuf)
    return osdp_fail("%s: writing '%s': %s", f->o.field, f->o.path, strerror(errno));
  f->nbuf = 0;
  return 0;
}

/* Appends ids[0..n) to f, little-endian, 2 or 4 bytes each. */
static int tokfile_write(TokFile* f, const int* ids, size_t n) {
  if (f->count + (long long)n > TOKFILE_MAX_TOKENS)
    return osdp_fail("%s: '%s' would hold more than %lld tokens, the most llm.c's header counts; "
                     "split the input into several runs", f->o.field, f->o.path, TOKFILE_MAX_TOKENS);
  size_t w = f->wide ? 4 : 2;
  for (size_t i = 0; i < n; i++) {
    if (f->nbuf + w > sizeof f->buf && tokfile_flush(f)) return -1;
    uint32_t v = (uint32_t)ids[i];
    for (size_t b = 0; b < w; b++) f->buf[f->nbuf++] = (unsigned char)(v >> (8 * b));
  }
  f->count += (long long)n;
  return 0;
}

/* Writes the header with the count over the placeholder and commits the file. */
static int tokfile_finish(TokFile* f) {
  unsigned char h[TOKFILE_HEADER_INTS * 4] = {0};
  uint32_t v[3] = {TOKFILE_MAGIC, f->wide ? 2u : 1u, (uint32_t)f->count};
  for (int i = 0; i < 3; i++)
    for (int b = 0; b < 4; b++) h[4 * i + b] = (unsigned char)(v[i] >> (8 * b));
  if (tokfile_flush(f)) return -1;
  if (fseek(f->o.f, 0, SEEK_SET) != 0 || fwrite(h, sizeof h, 1, f->o.f) != 1)
    return osdp_fail("%s: writing the header of '%s': %s", f->o.field, f->o.path, strerror(errno));
  int rc = out_commit(&f->o);
  f->o.f = NULL;
  return rc;
}

/* Closes f without committing (removing its temporary file) and frees it. */
static void tokfile_free(TokFile* f) {
  if (f && f->o.f) out_abort(&f->o);
  free(f);
}

/* The .val file's name: out with ".val" before the extension of its last component (none, or a
** leading dot only: ".val" at the end). */
static void val_name(const char* out, char* buf, size_t cap) {
  const char* base = strrchr(out, '/');
  base = base ? base + 1 : out;
  const char* dot = strrchr(base, '.');
  if (!dot || dot == base) snprintf(buf, cap, "%s.val", out);
  else snprintf(buf, cap, "%.*s.val%s", (int)(dot - out), out, dot);
}

/* Prints the progress line (MB done of all, MB/s, ETA) on stderr: on a terminal at most 4
** times a second, over itself; elsewhere a line every 10 s. `end`: the last one. */
static void tokenize_progress(TokRun* r, int end) {
  double now = now_seconds(), dt = now - r->t0;
  if (r->quiet || (!end && now - r->last_report < (r->tty ? 0.25 : 10))) return;
  if (end && !r->tty && r->last_report == r->t0) return; /* a short run: the summary says it */
  r->last_report = now;
  double mb = (double)r->done / 1e6, rate = dt > 0 ? mb / dt : 0;
  double eta = rate > 0 ? ((double)(r->total - r->done) / 1e6) / rate : 0;
  fprintf(stderr, "%stokenize: %.1f / %.1f MB (%.0f%%), %.2f MB/s, ETA %.0f s%s", r->tty ? "\r" : "",
          mb, (double)r->total / 1e6, r->total ? 100.0 * (double)r->done / (double)r->total : 100.0,
          rate, eta, r->tty && !end ? "   " : "   \n");
  fflush(stderr);
}

/* Encodes text[0..n) (a safe piece: a document's start or a tok_safe_cut cut on each side),
** bytes `at` on of file path, into the current file. */
static int tokenize_piece(TokRun* r, const char* text, size_t n, const char* path, long long at) {
  size_t bad = tok_utf8_check(text, n);
  if (bad < n)
    return osdp_fail("%s: byte %lld (0x%02x) is not valid UTF-8; tokenizers read UTF-8 text "
                     "(convert it first, e.g. iconv -f latin1 -t utf-8)", path, at + (long long)bad,
                     (unsigned char)text[bad]);
  r->ids.n = 0;
  if (r->eot_due && tok_ids_push(&r->ids, r->eot)) return -1;
  r->eot_due = 0;
  if (tok_encode(r->tok, text, n, &r->ids)) {
    char why[400];
    snprintf(why, sizeof why, "%s", osdp_last_error());
    return osdp_fail("%s: from byte %lld: %s", path, at, why);
  }
  r->done += (long long)n;
  if (tokfile_write(r->file[r->cur], r->ids.ids, r->ids.n)) return -1;
  tokenize_progress(r, 0);
  return 0;
}

/* Where in buf[0..n) (the input's bytes from r->done on) to cut before encoding: the val
** part's start when it lies in it (the last safe cut at or before r->val_at: 0 when none,
** the buffer's start being one), else the last safe cut (0: keep reading), or n at the end of
** the file. *to_val says the val part starts at the cut. */
static size_t tokenize_cut(const TokRun* r, const char* buf, size_t n, int eof, int* to_val) {
  *to_val = 0;
  if (r->cur == 0 && r->val_at >= 0 && r->val_at < r->done + (long long)n) {
    size_t m = (size_t)(r->val_at - r->done) + 1;
    *to_val = 1;
    return tok_safe_cut(r->tok, buf, m < n ? m : n);
  }
  return eof ? n : tok_safe_cut(r->tok, buf, n);
}

/* Reads up to want more bytes of f into *buf (grown as needed) after its *len bytes. */
static int tokenize_read(FILE* f, const char* path, char** buf, size_t* len, size_t* cap,
                         size_t want, int* eof) {
  if (*len + want + 1 > *cap) {
    size_t c = (*len + want + 1) * 2;
    char* b = realloc(*buf, c);
    if (!b)
      return osdp_fail("%s: out of host memory for %zu bytes without a place to cut", path, *len);
    *buf = b;
    *cap = c;
  }
  size_t got = fread(*buf + *len, 1, want, f);
  *len += got;
  if (got < want && ferror(f)) return osdp_fail("%s: read error: %s", path, strerror(errno));
  *eof = got < want;
  return 0;
}

/* Encodes one document: the end-of-text token, then the file's text, piece by piece. Where the
** val part starts at the file's start, the end-of-text token goes there too. */
static int tokenize_file(TokRun* r, const char* path) {
  r->eot_due = 1;
  FILE* f = file_open_read(path, "tokenize FILE", FILE_FOLLOW);
  if (!f) return -1;
  char* buf = NULL;
  size_t len = 0, cap = 0;
  long long at = 0; /* the file's bytes encoded */
  int eof = 0, rc = 0;
  while (rc == 0 && (!eof || len > 0)) {
    if (!eof) rc = tokenize_read(f, path, &buf, &len, &cap, r->chunk, &eof);
    int to_val;
    size_t cut = rc ? 0 : tokenize_cut(r, buf, len, eof, &to_val);
    if (!rc && to_val && cut == 0) r->cur = 1; /* no cut after the buffer's start */
    if (rc || cut == 0) continue;
    rc = tokenize_piece(r, buf, cut, path, at);
    at += (long long)cut;
    memmove(buf, buf + cut, len - cut);
    len -= cut;
    if (to_val) r->cur = 1;
  }
  if (rc == 0 && r->val_at >= 0 && r->val_at <= r->done) r->cur = 1; /* an empty file */
  if (rc == 0 && r->eot_due) rc = tokenize_piece(r, "", 0, path, 0);
  free(buf);
  fclose(f);
  return rc;
}

/* Sizes every input (they must be regular files) into r->total. */
static int tokenize_inputs(TokRun* r, char** files, int n) {
  for (int i = 0; i < n; i++) {
    struct stat st;
    if (out_claim_input(files[i], "tokenize FILE")) return -1;
    if (stat(files[i], &st) != 0)
      return osdp_fail("tokenize: cannot read '%s': %s", files[i], strerror(errno));
    if (!S_ISREG(st.st_mode))
      return osdp_fail("tokenize: '%s' is a %s, not a text file", files[i], file_kind(st.st_mode));
    r->total += (long long)st.st_size;
  }
  return 0;
}

/* Prints what was written: a line, or with --json one object. */
static int tokenize_summary(const TokRun* r, int nfiles, const char* out) {
  double s = now_seconds() - r->t0, mbs = s > 0 ? (double)r->total / 1e6 / s : 0;
  long long val = r->file[1] ? r->file[1]->count : 0, all = r->file[0]->count + val;
  if (r->json) {
    cJSON* o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "files", nfiles);
    cJSON_AddNumberToObject(o, "bytes", (double)r->total);
    cJSON_AddNumberToObject(o, "tokens", (double)r->file[0]->count);
    cJSON_AddNumberToObject(o, "val_tokens", (double)val);
    cJSON_AddNumberToObject(o, "seconds", s);
    cJSON_AddNumberToObject(o, "mb_per_s", mbs);
    cJSON_AddNumberToObject(o, "vocab", tok_vocab_size(r->tok));
    cJSON_AddNumberToObject(o, "eot", r->eot);
    cJSON_AddStringToObject(o, "format", r->file[0]->wide ? "uint32" : "uint16");
    cJSON_AddStringToObject(o, "out", out);
    if (r->file[1]) cJSON_AddStringToObject(o, "val_out", r->val_path);
    char* text = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    if (!text) return osdp_fail("out of host memory");
    printf("%s\n", text);
    free(text);
  } else if (!r->quiet) {
    printf("tokenize: %d file%s, %.2f MB -> %lld tokens (%s, vocab %d) in %.2f s (%.2f MB/s): "
           "%s, %lld tokens", nfiles, nfiles == 1 ? "" : "s", (double)r->total / 1e6, all,
           r->file[0]->wide ? "uint32" : "uint16", tok_vocab_size(r->tok), s, mbs, out,
           r->file[0]->count);
    if (r->file[1]) printf("; %s, %lld tokens", r->val_path, val);
    printf("\n");
  }
  return 0;
}

/* Reads the options of an encoding run and opens the tokenizer and the outputs. */
static int tokenize_setup(TokRun* r, const Args* a, char** files, int n) {
  double frac;
  const char* out = args_get(a, "out", NULL);
  if (!out) return osdp_fail("osdp tokenize: --out FILE is required (or --decode FILE)");
  if (n == 0) return osdp_fail("osdp tokenize: no input FILE; give the text files to encode");
  if (args_double(a, "val-fraction", 0, &frac) || args_size(a, "chunk", 1 << 20, &r->chunk))
    return -1;
  if (!(frac >= 0 && frac < 1))
    return osdp_fail("--val-fraction: %g is not in [0, 1); give the held-out share, e.g. 0.1", frac);
  if (r->chunk < 64 || r->chunk > ((size_t)1 << 30))
    return osdp_fail("--chunk: %zu bytes is not in [64 B, 1 GiB]; e.g. 1MiB", r->chunk);
  if (out_claim_input(args_get(a, "tokenizer", ""), "--tokenizer") || tokenize_inputs(r, files, n))
    return -1;
  val_name(out, r->val_path, sizeof r->val_path);
  if (out_claim_output(out, "--out") || (frac > 0 && out_claim_output(r->val_path, "--out (.val)")))
    return -1;
  if (tok_load(&r->tok, args_get(a, "tokenizer", ""))) return -1;
  r->eot = tok_eot_id(r->tok);
  if (r->eot < 0)
    return osdp_fail("--tokenizer: it has no end-of-text token (<|endoftext|>, <|end_of_text|> or "
                     "</s>) among its added tokens, which separates the documents");
  int wide = tok_vocab_size(r->tok) > TOKFILE_U16_VOCAB;
  r->val_at = frac > 0 ? (long long)((double)r->total * (1 - frac)) : -1;
  if (tokfile_open(&r->file[0], out, "--out", wide) ||
      (frac > 0 && tokfile_open(&r->file[1], r->val_path, "--out (.val)", wide)))
    return -1;
  return 0;
}

/* Checks, at the end, that each file written holds tokens. */
static int tokenize_check_parts(const TokRun* r, const char* out) {
  if (r->file[1] && (r->file[0]->count == 0 || r->file[1]->count == 0))
    return osdp_fail("--val-fraction: the input has no place to cut (a line break between printable "
                     "characters, a space between words, a file's start) that leaves tokens in both "
                     "'%s' and '%s'; give more text or another fraction", out, r->val_path);
  return 0;
}

/* `osdp tokenize FILE... --out OUT`: encodes the files (rank 0's work). */
static int tokenize_run(const Args* a, char** files, int n) {
  TokRun r;
  memset(&r, 0, sizeof r);
  r.quiet = args_has(a, "quiet");
  r.json = args_has(a, "json");
  r.tty = isatty(fileno(stderr));
  r.t0 = r.last_report = now_seconds();
  int rc = tokenize_setup(&r, a, files, n);
  for (int i = 0; rc == 0 && i < n; i++) rc = tokenize_file(&r, files[i]);
  if (rc == 0) rc = tokenize_check_parts(&r, args_get(a, "out", ""));
  if (rc == 0) tokenize_progress(&r, 1);
  for (int i = 0; rc == 0 && i < 2; i++) rc = r.file[i] ? tokfile_finish(r.file[i]) : 0;
  if (rc == 0) rc = tokenize_summary(&r, n, args_get(a, "out", ""));
  tokfile_free(r.file[0]);
  tokfile_free(r.file[1]);
  tok_ids_free(&r.ids);
  tok_free(r.tok);
  return rc;
}

/* Reads the header of token file f (named path): the id width and the count, checked against
** the file's size. */
static int decode_header(FILE* f, const char* path, int* wide, long long* count) {
  unsigned char h[TOKFILE_HEADER_INTS * 4];
  struct stat st;
  if (fstat(fileno(f), &st) != 0 || fread(h, sizeof h, 1, f) != 1)
    return osdp_fail("--decode: '%s' is shorter than llm.c's %zu-byte header; is it a token file?",
                     path, sizeof h);
  uint32_t v[3];
  for (int i = 0; i < 3; i++)
    v[i] = (uint32_t)h[4 * i] | (uint32_t)h[4 * i + 1] << 8 | (uint32_t)h[4 * i + 2] << 16 |
           (uint32_t)h[4 * i + 3] << 24;
  if (v[0] != TOKFILE_MAGIC || (v[1] != 1 && v[1] != 2))
    return osdp_fail("--decode: '%s' has magic %u version %u, not llm.c's %d version 1 or 2; is it "
                     "a token file?", path, v[0], v[1], TOKFILE_MAGIC);
  *wide = v[1] == 2;
  *count = v[2];
  long long want = (long long)sizeof h + *count * (*wide ? 4 : 2);
  if ((long long)st.st_size != want)
    return osdp_fail("--decode: '%s' is %lld bytes but its header promises %lld tokens (%lld bytes)",
                     path, (long long)st.st_size, *count, want);
  return 0;
}

/* Decodes n ids in blocks (a token's bytes follow the last's, so no character is cut). */
static int decode_block(const Tokenizer* t, const int* ids, size_t n, long long first) {
  size_t len;
  char* s = tok_decode(t, ids, n, &len);
  if (!s) {
    char why[400];
    snprintf(why, sizeof why, "%s", osdp_last_error());
    return osdp_fail("--decode: token %lld on: %s", first, why);
  }
  size_t put = fwrite(s, 1, len, stdout);
  free(s);
  return put == len ? 0 : osdp_fail("--decode: writing to stdout failed: %s", strerror(errno));
}

/* `osdp tokenize --decode FILE`: the token file's text on stdout (rank 0's work). */
static int decode_run(const Args* a, int npos) {
  const char* path = args_get(a, "decode", "");
  if (npos > 0 || args_has(a, "out"))
    return osdp_fail("osdp tokenize --decode FILE prints FILE's text on stdout; it takes no input "
                     "files and no --out");
  Tokenizer* t = NULL;
  if (tok_load(&t, args_get(a, "tokenizer", ""))) return -1;
  FILE* f = file_open_read(path, "--decode", FILE_FOLLOW);
  int wide = 0, rc = f ? 0 : -1;
  long long count = 0;
  if (f) rc = decode_header(f, path, &wide, &count);
  enum { BLOCK = 1 << 16 };
  unsigned char* raw = malloc(BLOCK * 4);
  int* ids = malloc(BLOCK * sizeof *ids);
  if (!rc && (!raw || !ids)) rc = osdp_fail("out of host memory");
  for (long long at = 0; rc == 0 && at < count; at += BLOCK) {
    size_t n = count - at < BLOCK ? (size_t)(count - at) : BLOCK, w = wide ? 4 : 2;
    if (fread(raw, w, n, f) != n) rc = osdp_fail("--decode: '%s': read error", path);
    for (size_t i = 0; rc == 0 && i < n; i++)
      ids[i] = wide ? (int)((uint32_t)raw[4 * i] | (uint32_t)raw[4 * i + 1] << 8 |
                            (uint32_t)raw[4 * i + 2] << 16 | (uint32_t)raw[4 * i + 3] << 24)
                    : (int)(raw[2 * i] | raw[2 * i + 1] << 8);
    if (rc == 0) rc = decode_block(t, ids, n, at);
  }
  free(raw);
  free(ids);
  if (f) fclose(f);
  tok_free(t);
  return rc;
}

/* `osdp tokenize`: parses FILEs and options, runs on rank 0 and agrees on the outcome with every
** rank (so under mpirun all ranks exit alike). */
int cmd_tokenize(int argc, char** argv) {
  if (args_help(&tokenize_spec, argc, argv)) return 0;
  char** pos = malloc(((size_t)argc + 1) * sizeof *pos);
  char** opt = malloc(((size_t)argc + 1) * sizeof *opt);
  Args a;
  int npos = 0, nopt = 0, rc = -1;
  if (!pos || !opt) osdp_fail("out of host memory");
  else {
    args_split(&tokenize_spec, argc, argv, pos, &npos, opt, &nopt);
    if (args_parse(&a, &tokenize_spec, nopt, opt) == 0) {
      if (!args_has(&a, "tokenizer"))
        osdp_fail("osdp tokenize: --tokenizer PATH is required (a tokenizer.json or a model "
                  "directory holding one)");
      else if (comm_rank() != 0) rc = 0;
      else rc = args_has(&a, "decode") ? decode_run(&a, npos) : tokenize_run(&a, pos, npos);
      double failed = comm_allreduce_f64(comm_world(), rc ? 1.0 : 0.0); /* every rank got here */
      if (failed != 0 && comm_rank() != 0) osdp_fail("tokenize: rank 0 failed");
      rc = failed != 0 ? -1 : 0;
    }
  }
  free(pos);
  free(opt);
  return rc ? cli_report_error() : 0;
}
