/* weights_file.c: llm.c checkpoints and safetensors files behind one interface; see
** weights_file.h. */
#include "model/weights_file.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "core/files.h"
#include "core/util.h"
#include "model/checkpoint.h"
#include "model/safetensors.h"

int weights_format_parse(const char* name, const char* field, WeightsFormat* fmt) {
  if (strcmp(name, "llmc") == 0) { *fmt = WEIGHTS_LLMC; return 0; }
  if (strcmp(name, "safetensors") == 0) { *fmt = WEIGHTS_SAFETENSORS; return 0; }
  return osdp_fail("%s: '%s' is not a weights format; use llmc (llm.c's GPT-2 checkpoint) or "
                   "safetensors (Hugging Face names)", field, name);
}

const char* weights_format_name(WeightsFormat fmt) {
  return fmt == WEIGHTS_SAFETENSORS ? "safetensors" : "llmc";
}

WeightsFormat weights_format_for_save(const char* path, const GptDesc* d) {
  size_t n = strlen(path), m = strlen(".safetensors");
  if (n >= m && strcmp(path + n - m, ".safetensors") == 0) return WEIGHTS_SAFETENSORS;
  return checkpoint_holds(d) ? WEIGHTS_LLMC : WEIGHTS_SAFETENSORS;
}

int weights_detect(const char* path, WeightsFormat* fmt) {
  struct stat ds;
  if (stat(path, &ds) == 0 && S_ISDIR(ds.st_mode)) {
    if (safetensors_dir_holds(path)) { *fmt = WEIGHTS_SAFETENSORS; return 0; }
    return osdp_fail("weights: '%s' is a directory without model.safetensors or "
                     "model.safetensors.index.json; give a weights file or a Hugging Face model "
                     "directory", path);
  }
  if (safetensors_is_index(path)) { *fmt = WEIGHTS_SAFETENSORS; return 0; }
  FILE* f = file_open_read(path, "weights file", FILE_FOLLOW);
  if (!f) return -1;
  unsigned char b[9];
  size_t n = fread(b, 1, sizeof b, f);
  fclose(f);
  int32_t magic = 0;
  if (n >= 4) memcpy(&magic, b, 4);
  if (n >= 4 && magic == CHECKPOINT_MAGIC) { *fmt = WEIGHTS_LLMC; return 0; }
  if (n >= 9 && b[8] == '{') { *fmt = WEIGHTS_SAFETENSORS; return 0; }
  if (n < 9)
    return osdp_fail("weights file '%s' is %zu bytes, too short for an llm.c checkpoint or a "
                     "safetensors file", path, n);
  return osdp_fail("weights file '%s' is neither an llm.c checkpoint (its first int32 is %d, not "
                   "the magic %d) nor a safetensors file (byte 8 is not the header's '{')", path,
                   (int)magic, CHECKPOINT_MAGIC);
}

int weights_read_config(const char* path, GptConfig* cfg) {
  WeightsFormat fmt = WEIGHTS_LLMC;
  if (weights_detect(path, &fmt)) return -1;
  return fmt == WEIGHTS_SAFETENSORS ? safetensors_read_config(path, cfg)
                                    : checkpoint_read_config(path, cfg);
}

int weights_load(const char* path, const GptDesc* d, float* params) {
  WeightsFormat fmt = WEIGHTS_LLMC;
  if (weights_detect(path, &fmt)) return -1;
  return fmt == WEIGHTS_SAFETENSORS ? safetensors_load(path, d, params)
                                    : checkpoint_load(path, d, params);
}

int weights_save(const char* path, WeightsFormat fmt, const GptDesc* d, const float* params) {
  return fmt == WEIGHTS_SAFETENSORS ? safetensors_save(path, d, params)
                                    : checkpoint_save(path, d, params);
}

int weights_config_differs(const GptConfig* model, const GptConfig* file, char* why, size_t n) {
  cJSON *a = cJSON_CreateObject(), *b = cJSON_CreateObject();
  int differs = 0;
  if (a) gpt_config_to_json(model, a);
  if (b) gpt_config_to_json(file, b);
  if (strcmp(model->family, file->family) != 0) {
    snprintf(why, n, "family: %s, the file's %s", model->family[0] ? model->family : "gpt2",
             file->family[0] ? file->family : "gpt2");
    differs = 1;
  }
  for (const cJSON* v = a ? a->child : NULL; v && !differs; v = v->next) {
    const cJSON* w = b ? cJSON_GetObjectItemCaseSensitive(b, v->string) : NULL;
    if (!cJSON_IsNumber(v) || (strcmp(v->string, "n_head") == 0 && file->n_head == 0)) continue;
    if (cJSON_IsNumber(w) && w->valuedouble == v->valuedouble) continue;
    snprintf(why, n, "%s: %.17g, the file's %.17g", v->string, v->valuedouble, w ? w->valuedouble : 0.0);
    differs = 1;
  }
  cJSON_Delete(a);
  cJSON_Delete(b);
  return differs;
}
