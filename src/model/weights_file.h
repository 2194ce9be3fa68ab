/*
** weights_file.h: model weights files of either format osdp reads and writes, told apart by
** their content, never by their name:
**   llm.c checkpoint  starts with the int32 magic 20240326 (model/checkpoint.h);
**   safetensors       starts with an 8-byte header size, then the JSON header's '{'
**                     (model/safetensors.h, Hugging Face names); also a Hub sharded
**                     checkpoint's index (JSON text: model.safetensors.index.json) and a
**                     directory holding model.safetensors.index.json or model.safetensors.
** `train --load`, the model set-up and `osdp export` go through these functions.
*/
#ifndef OSDP_WEIGHTS_FILE_H
#define OSDP_WEIGHTS_FILE_H

#include "model/gpt.h"

typedef enum WeightsFormat { WEIGHTS_LLMC = 0, WEIGHTS_SAFETENSORS = 1 } WeightsFormat;

/* "llmc" or "safetensors" into *fmt; -1 with an error naming `field` and the value otherwise. */
int weights_format_parse(const char* name, const char* field, WeightsFormat* fmt);
/* "llmc" or "safetensors". */
const char* weights_format_name(WeightsFormat fmt);

/* The format `--save path` writes for model d: safetensors when the name ends in ".safetensors"
** or llm.c files cannot hold the model (the Llama family), else an llm.c checkpoint. */
WeightsFormat weights_format_for_save(const char* path, const GptDesc* d);

/* The format of the file at path, from its first bytes. Returns 0, or -1 with a one-line error
** naming the file (missing, not a regular file, neither format). */
int weights_detect(const char* path, WeightsFormat* fmt);

/* The model shape a weights file holds (name = the file's base name). A safetensors file that
** does not record its number of heads gives n_head = 0 (the caller must get it elsewhere, e.g.
** from --model). Returns 0, or -1 with a one-line error naming the file. */
int weights_read_config(const char* path, GptConfig* cfg);

/* Whether the config a weights file gives (file; n_head 0: not recorded) is another model than
** `model`, in any key of gpt_config_to_json (names and padding aside): 1 with the first
** difference in why ("n_kv_head: 2, the file's 4"), else 0. */
int weights_config_differs(const GptConfig* model, const GptConfig* file, char* why, size_t n);

/* Reads a weights file of either format into params (op-block order, d->n_params floats), after
** checking that it holds model d. Returns 0, or -1 with a one-line error naming the file. */
int weights_load(const char* path, const GptDesc* d, float* params);

/* Writes params as a file of format fmt, atomically (a temporary file renamed into place; an
** existing path is left as it was on any failure). Returns 0, or -1 with a one-line error. */
int weights_save(const char* path, WeightsFormat fmt, const GptDesc* d, const float* params);

#endif
