/*
** fuzz_hf_config.c: fuzzes Hugging Face config.json files (model/hf_config.h). The input is the
** file, read by hf_config_load (and, like `--model FILE`, by gpt_config_load); a config that
** reads must survive hf_config_to_json and hf_config_from_json as the same model, and one that
** gpt_config_load accepts must expand into its op list.
*/
#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "fuzz_util.h"
#include "model/gpt.h"
#include "model/hf_config.h"

/* Whether two configs are the same model (all but the name). */
static int same_model(GptConfig a, GptConfig b) {
  memset(a.name, 0, sizeof a.name);
  memset(b.name, 0, sizeof b.name);
  return memcmp(&a, &b, sizeof a) == 0;
}

/* The config read back from hf_config_to_json must be the same model. */
static void check_round_trip(const GptConfig* c) {
  cJSON* o = hf_config_to_json(c);
  if (!o) fuzz_die("hf_config_to_json", "out of memory");
  GptConfig b;
  if (hf_config_from_json(o, "round-trip", &b)) fuzz_die("hf_config_from_json refused hf_config_to_json's", osdp_last_error());
  if (!same_model(*c, b)) fuzz_die("hf_config round trip", "the model changed");
  cJSON_Delete(o);
}

/* libFuzzer's entry point: one config.json per call. */
int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const char* path;
  if (!path) path = fuzz_temp_path(NULL, "config.json", 0);
  fuzz_write_file(path, data, size);
  osdp_clear_error();
  GptConfig c;
  int rc = hf_config_load(path, &c);
  if (rc < 0) fuzz_expect_message("hf_config_load");
  else if (rc == 0 && osdp_last_error()[0]) fuzz_die("hf_config_load left an error but returned 0", osdp_last_error());
  if (rc == 1) {
    if (c.name[sizeof c.name - 1] != 0) fuzz_die("hf_config_load", "name not terminated");
    check_round_trip(&c);
  }
  osdp_clear_error();
  if (gpt_config_load(path, &c)) {
    fuzz_expect_message("gpt_config_load");
    return 0;
  }
  GptDesc d;
  if (gpt_desc_build(&d, &c)) fuzz_die("gpt_desc_build refused a config gpt_config_load accepted", osdp_last_error());
  gpt_desc_free(&d);
  return 0;
}
