/*
** fuzz_safetensors.c: fuzzes weights files through weights_read_config and weights_load
** (model/weights_file.h), which tell the format by content, so safetensors files
** (model/safetensors.h) and llm.c checkpoints both get here. The input is the file. A file
** whose config reads (n_head 1 when it records none) and whose model is small enough is loaded;
** what loads must survive weights_save and weights_load in its own format unchanged. Every
** input is also loaded into a fixed small model, as `--model M --load FILE` does (shape checks).
*/
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_util.h"
#include "model/gpt.h"
#include "model/weights_file.h"

/* Loads the file into the fixed micro model, whatever the file's own shape (the shape checks
** against a model given on the command line). */
static void load_into_micro(const char* path) {
  const GptDesc* d = fuzz_micro_model();
  static float* params;
  if (!params && !(params = malloc(d->n_params * sizeof(float)))) fuzz_die("out of memory", NULL);
  if (weights_load(path, d, params)) fuzz_expect_message("weights_load into micro");
}

/* libFuzzer's entry point: one weights file per call. */
int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const char *path, *again;
  if (!path) {
    path = fuzz_temp_path(NULL, "weights.safetensors", 0);
    again = fuzz_temp_path(NULL, "weights-again.safetensors", 0);
  }
  fuzz_write_file(path, data, size);
  osdp_clear_error();
  WeightsFormat fmt;
  GptConfig c;
  load_into_micro(path);
  osdp_clear_error();
  if (weights_read_config(path, &c)) {
    fuzz_expect_message("weights_read_config");
    return 0;
  }
  if (weights_detect(path, &fmt)) fuzz_die("weights_detect refused a file that was read", osdp_last_error());
  if (c.n_head == 0) c.n_head = 1; /* not recorded: a head count every n_embd allows */
  GptDesc d;
  if (gpt_desc_build(&d, &c)) fuzz_die("gpt_desc_build refused a weights file's config", osdp_last_error());
  if (d.n_params > FUZZ_MAX_PARAMS) { gpt_desc_free(&d); return 0; }
  float* params = calloc(d.n_params, sizeof(float));
  float* back = calloc(d.n_params, sizeof(float));
  if (!params || !back) fuzz_die("out of memory", NULL);
  if (weights_load(path, &d, params) == 0) {
    if (weights_save(again, fmt, &d, params)) fuzz_die("weights_save", osdp_last_error());
    if (weights_load(again, &d, back)) fuzz_die("weights_load refused weights_save's output", osdp_last_error());
    if (memcmp(params, back, d.n_params * sizeof(float))) fuzz_die("weights round trip", "parameters changed");
  } else {
    fuzz_expect_message("weights_load");
  }
  free(params);
  free(back);
  gpt_desc_free(&d);
  return 0;
}
