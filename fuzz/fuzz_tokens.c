/*
** fuzz_tokens.c: fuzzes data files (data/data.h): the input is opened as an llm.c token file
** (version 1 uint16 or version 2 uint32 tokens; "tokens:FILE") and as a text file ("text:FILE"), for sequences of FUZZ_SEQ tokens. A
** source that opens hands out a few train and val batches, every token of which must lie in
** its vocabulary and print (data_token_text).
*/
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "data/data.h"
#include "fuzz_util.h"

/* Sequence length and rows of the batches asked for. */
#define FUZZ_SEQ 4
#define FUZZ_ROWS 3

/* Opens spec and, when it opens, checks a few batches of each split. */
static void fuzz_source(const char* spec) {
  DataSource* ds = NULL;
  osdp_clear_error();
  if (data_open(&ds, spec, FUZZ_SEQ, 7)) {
    fuzz_expect_message("data_open");
    if (ds) fuzz_die("data_open failed but returned a source", spec);
    return;
  }
  int vocab = data_vocab_size(ds);
  if (vocab < 1 || vocab > DATA_MAX_VOCAB || data_seq_len(ds) != FUZZ_SEQ) fuzz_die("data_open", "bad vocabulary or seq");
  int in[FUZZ_ROWS * FUZZ_SEQ], tg[FUZZ_ROWS * FUZZ_SEQ], pr[FUZZ_ROWS * FUZZ_SEQ];
  char buf[DATA_TOKEN_TEXT];
  for (int split = 0; split < 2; split++)
    for (long step = 0; step < 3; step++) {
      if (data_batch(ds, (DataSplit)split, step * 1000003L, FUZZ_ROWS, 0, FUZZ_ROWS, in, tg, pr))
        fuzz_die("data_batch failed on an open source", osdp_last_error());
      for (int i = 0; i < FUZZ_ROWS * FUZZ_SEQ; i++) {
        if (in[i] < 0 || in[i] >= vocab || tg[i] < 0 || tg[i] >= vocab || pr[i] != -1)
          fuzz_die("data_batch", "a token outside the vocabulary");
        data_token_text(ds, in[i], buf);
      }
    }
  if (data_batch_target_count(ds, DATA_TRAIN, 0, FUZZ_ROWS) != FUZZ_ROWS * FUZZ_SEQ)
    fuzz_die("data_batch_target_count", "wrong count");
  data_close(ds);
}

/* libFuzzer's entry point: one data file per call. */
int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const char* path;
  static char tokens[600], text[600];
  if (!path) {
    path = fuzz_temp_path(NULL, "tokens.bin", 0);
    snprintf(tokens, sizeof tokens, "tokens:%s", path);
    snprintf(text, sizeof text, "text:%s", path);
  }
  fuzz_write_file(path, data, size);
  fuzz_source(tokens);
  fuzz_source(text);
  return 0;
}
