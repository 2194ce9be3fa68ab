/*
** fuzz_checkpoint.c: fuzzes llm.c GPT-2 checkpoints (model/checkpoint.h). The input is the file.
** checkpoint_read_config reads its header; when that accepts it and the model is small enough
** to allocate (FUZZ_MAX_PARAMS; the file-size check already refuses headers that do not match
** the data, so this bounds only files that really are that big), checkpoint_load must accept
** it too, and its parameters must survive checkpoint_save and checkpoint_load unchanged. Every
** input is also loaded into a fixed small model, as `--model M --load FILE` does (shape checks).
*/
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_util.h"
#include "model/checkpoint.h"
#include "model/gpt.h"

/* Aborts unless the checkpoint at path has the input's size, header fields [0, 8) and
** parameter bytes (checkpoint_save writes the rest of the header as 0, which the input need not). */
static void expect_same_file(const char* path, const uint8_t* data, size_t size) {
  FILE* f = fopen(path, "rb");
  uint8_t* got = malloc(size + 1);
  size_t n = f && got ? fread(got, 1, size + 1, f) : 0;
  if (f) fclose(f);
  if (n != size || memcmp(got, data, 8 * sizeof(int32_t)) ||
      memcmp(got + CHECKPOINT_HEADER_INTS * sizeof(int32_t), data + CHECKPOINT_HEADER_INTS * sizeof(int32_t),
             size - CHECKPOINT_HEADER_INTS * sizeof(int32_t)))
    fuzz_die("checkpoint round trip", "checkpoint_save did not write the loaded file back");
  free(got);
}

/* Loads the file into the fixed micro model, whatever the file's own shape (the shape checks
** against a model given on the command line). */
static void load_into_micro(const char* path) {
  const GptDesc* d = fuzz_micro_model();
  static float* params;
  if (!params && !(params = malloc(d->n_params * sizeof(float)))) fuzz_die("out of memory", NULL);
  if (checkpoint_load(path, d, params)) fuzz_expect_message("checkpoint_load into micro");
}

/* libFuzzer's entry point: one checkpoint file per call. */
int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const char *path, *again;
  if (!path) {
    path = fuzz_temp_path(NULL, "model.bin", 0);
    again = fuzz_temp_path(NULL, "model-again.bin", 0);
  }
  fuzz_write_file(path, data, size);
  osdp_clear_error();
  GptConfig c;
  load_into_micro(path);
  osdp_clear_error();
  if (checkpoint_read_config(path, &c)) {
    fuzz_expect_message("checkpoint_read_config");
    return 0;
  }
  GptDesc d;
  if (gpt_desc_build(&d, &c)) fuzz_die("gpt_desc_build refused a checkpoint's config", osdp_last_error());
  if (d.n_params > FUZZ_MAX_PARAMS) { gpt_desc_free(&d); return 0; }
  float* params = malloc(d.n_params * sizeof(float));
  float* back = malloc(d.n_params * sizeof(float));
  if (!params || !back) fuzz_die("out of memory", NULL);
  if (checkpoint_load(path, &d, params))
    fuzz_die("checkpoint_load refused what checkpoint_read_config accepted", osdp_last_error());
  if (checkpoint_save(again, &d, params)) fuzz_die("checkpoint_save", osdp_last_error());
  if (checkpoint_load(again, &d, back)) fuzz_die("checkpoint_load refused checkpoint_save's output", osdp_last_error());
  if (memcmp(params, back, d.n_params * sizeof(float))) fuzz_die("checkpoint round trip", "parameters changed");
  /* What checkpoint_save wrote is the input again: the same header fields and parameters. */
  expect_same_file(again, data, size);
  free(params);
  free(back);
  gpt_desc_free(&d);
  return 0;
}
