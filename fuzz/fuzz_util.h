/*
** fuzz_util.h: what the fuzz targets share. Every parser osdp has reads a file, so each target
** writes its input to a temporary file (one per process and purpose, reused for every input,
** removed at exit) and hands the parser that path. Also the checks every target makes beyond
** "no crash": a function that fails must say why (osdp_fail), and a harness-level surprise
** aborts, so libFuzzer (or replay_main) reports it as a crash with the input that caused it.
*/
#ifndef OSDP_FUZZ_UTIL_H
#define OSDP_FUZZ_UTIL_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/util.h"
#include "model/gpt.h"

/* Most temporary paths one target uses (files and directories), removed at exit. */
#define FUZZ_MAX_TEMPS 16

/* The temporary paths registered so far, and whether each is a directory. */
static char fuzz_temps[FUZZ_MAX_TEMPS][512];
static int fuzz_temp_is_dir[FUZZ_MAX_TEMPS];
static int fuzz_ntemps;

/* atexit handler: removes the registered temporary files, then the directories (last first,
** so files registered inside a directory go before it). */
static void fuzz_remove_temps(void) {
  for (int i = fuzz_ntemps - 1; i >= 0; i--) {
    if (fuzz_temp_is_dir[i]) rmdir(fuzz_temps[i]);
    else unlink(fuzz_temps[i]);
  }
}

/* Aborts with a message: a harness-level failure or a broken invariant, which libFuzzer and
** replay_main report as a crash of the input being run. */
static inline void fuzz_die(const char* what, const char* detail) {
  fprintf(stderr, "fuzz: %s%s%s\n", what, detail ? ": " : "", detail ? detail : "");
  abort();
}

/* A temporary path "<TMPDIR or /tmp>/osdp-fuzz-<pid>-<name>" (or, when dir is not NULL, the
** file `name` inside the registered directory dir), registered for removal at exit. The path
** is unique to this process, so parallel fuzzers (-jobs) and ctest -j do not collide. */
static inline const char* fuzz_temp_path(const char* dir, const char* name, int is_dir) {
  if (fuzz_ntemps == FUZZ_MAX_TEMPS) fuzz_die("too many temporary paths", name);
  char* p = fuzz_temps[fuzz_ntemps];
  if (dir) {
    snprintf(p, sizeof fuzz_temps[0], "%s/%s", dir, name);
  } else {
    const char* tmp = getenv("TMPDIR");
    snprintf(p, sizeof fuzz_temps[0], "%s/osdp-fuzz-%ld-%s", tmp && *tmp ? tmp : "/tmp",
             (long)getpid(), name);
  }
  fuzz_temp_is_dir[fuzz_ntemps] = is_dir;
  if (fuzz_ntemps++ == 0) atexit(fuzz_remove_temps);
  return p;
}

/* Writes data[0..n) to path, replacing what was there; a failure to write is the harness's,
** so it aborts. */
static inline void fuzz_write_file(const char* path, const void* data, size_t n) {
  FILE* f = fopen(path, "wb");
  if (!f || (n && fwrite(data, 1, n, f) != n) || fclose(f)) fuzz_die("cannot write", path);
}

/* Checks the error contract of core/util.h after a call that returned -1: the failure left a
** one-line message (printed when OSDP_FUZZ_VERBOSE is set, to see how far an input gets).
** Clears it for the next call. */
static inline void fuzz_expect_message(const char* call) {
  if (!osdp_last_error()[0]) fuzz_die("returned -1 without an error message", call);
  if (getenv("OSDP_FUZZ_VERBOSE")) fprintf(stderr, "  %s: %s\n", call, osdp_last_error());
  osdp_clear_error();
}

/* Largest model the weights-file targets load from a valid header (floats; 16 MiB). */
#define FUZZ_MAX_PARAMS ((size_t)4 << 20)

/* The model the CLI would hold for `--model micro --load FILE`: 1 layer, hidden 4, 2 heads,
** vocabulary 14, 8 positions (the seed corpus's model); built once. */
static inline const GptDesc* fuzz_micro_model(void) {
  static GptDesc d;
  if (!d.ops) {
    GptConfig c = {.name = "micro", .n_layer = 1, .n_embd = 4, .n_head = 2, .vocab_size = 14,
                   .padded_vocab = 128, .max_seq = 8};
    if (gpt_desc_build(&d, &c)) fuzz_die("cannot build the micro model", osdp_last_error());
  }
  return &d;
}

/* The tiny preset, built once (the model plan and device files are read against). */
static inline const GptDesc* fuzz_tiny_model(void) {
  static GptDesc d;
  if (!d.ops) {
    GptConfig c;
    if (gpt_config_load("tiny", &c) || gpt_desc_build(&d, &c))
      fuzz_die("cannot build the tiny model", osdp_last_error());
  }
  return &d;
}

#endif
