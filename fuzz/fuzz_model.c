/*
** fuzz_model.c: fuzzes model JSON files (gpt_config_load, model/gpt.h). The input is the file;
** a config that loads is expanded into its operator list (gpt_desc_build), whose shape is
** checked against gpt.h's layout, and freed.
*/
#include <stddef.h>
#include <stdint.h>

#include "fuzz_util.h"
#include "model/gpt.h"
#include "model/gpt2.h"

/* libFuzzer's entry point: one model file per call. */
int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const char* path;
  if (!path) path = fuzz_temp_path(NULL, "model.json", 0);
  fuzz_write_file(path, data, size);
  osdp_clear_error();
  GptConfig c;
  if (gpt_config_load(path, &c)) {
    fuzz_expect_message("gpt_config_load");
    return 0;
  }
  if (c.name[sizeof c.name - 1] != 0) fuzz_die("gpt_config_load", "name not terminated");
  GptDesc d;
  if (gpt_desc_build(&d, &c)) {
    fuzz_die("gpt_desc_build refused a config gpt_config_load accepted", osdp_last_error());
  }
  /* embed, the layers, lnf and the fused head with its loss */
  if (d.nops != 1 + d.ops_per_layer * c.n_layer + 2) fuzz_die("gpt_desc_build", "wrong op count");
  size_t total = 0;
  for (int i = 0; i < d.nops; i++) total += d.ops[i].n_params;
  if (total != d.n_params) fuzz_die("gpt_desc_build", "n_params is not the sum of the ops'");
  gpt_desc_free(&d);
  return 0;
}
