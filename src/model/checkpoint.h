/*
** checkpoint.h: model weights on disk in llm.c's GPT-2 checkpoint format, so that files move
** freely between osdp and llm.c (train_gpt2.c / train_gpt2.cu / train_gpt2.py).
**
** File layout (little-endian, as llm.c writes it on x86 and ARM):
**   header   256 int32: [0] = 20240326 (magic), [1] = 3 (version: fp32, padded vocab),
**            [2] = maxT, [3] = V, [4] = L, [5] = NH, [6] = C, [7] = Vp; the rest 0.
**   params   float32, llm.c's tensors one after another, weights as [out, in]:
**            wte [Vp, C], wpe [maxT, C], ln1w [L, C], ln1b [L, C], qkvw [L, 3C, C],
**            qkvb [L, 3C], attprojw [L, C, C], attprojb [L, C], ln2w [L, C], ln2b [L, C],
**            fcw [L, 4C, C], fcb [L, 4C], fcprojw [L, C, 4C], fcprojb [L, C], lnfw [C], lnfb [C].
**
** In memory, osdp keeps the parameters in "op-block order" (see gpt.h): the blocks of the ops
** concatenated in op order, weights as [in, out] and wte as [C, Vp]. Saving and loading
** convert between the two orders, streaming through a small buffer.
*/
#ifndef OSDP_CHECKPOINT_H
#define OSDP_CHECKPOINT_H

#include "model/gpt.h"

#define CHECKPOINT_MAGIC 20240326
#define CHECKPOINT_VERSION 3
#define CHECKPOINT_HEADER_INTS 256

/* Reads only the header of an llm.c checkpoint into cfg (name = the file's base name). The
** header's shape is checked as gpt_config_validate does, and Vp must be >= V. Returns 0, or -1
** with a one-line error naming the file. */
/* 1 if llm.c checkpoints can hold model d (every tensor has an llm.c slot: GPT-2), else 0. */
int checkpoint_holds(const GptDesc* d);
int checkpoint_read_config(const char* path, GptConfig* cfg);

/* Writes params (op-block order, d->n_params floats) as an llm.c checkpoint. Writes to
** path.tmp, syncs it and then renames it to path, so a crash never leaves a half-written file.
** Returns 0, or -1 with a one-line error naming the file. */
int checkpoint_save(const char* path, const GptDesc* d, const float* params);

/* Reads an llm.c checkpoint into params (op-block order, d->n_params floats). Refuses a missing
** file, a wrong magic, a version other than 3, a header whose shape differs from d's, and a file
** shorter or longer than header + parameters; all these are checked before params is touched.
** Returns 0, or -1 with a one-line error naming the file. */
int checkpoint_load(const char* path, const GptDesc* d, float* params);

#endif
