/*
** spec_build.h: the helpers a family's spec (gpt2.c, llama.c) builds its op list with (gpt.h):
** append an op, give it a parameter block, append the named tensors that partition the block and
** the named activation tensors. They only fill the structs; the family decides what to add.
*/
#ifndef OSDP_SPEC_BUILD_H
#define OSDP_SPEC_BUILD_H

#include "model/gpt.h"

/* Appends one op to d's list (d->ops must have room): it has a backward, reads its weight in
** backward, visits its slices in order and owns no parameters (owner -1). */
GptOp* spec_add_op(GptDesc* d, const char* name, OpKind kind, int layer);

/* Gives op a parameter block of rows x width plus tail; the op becomes its own owner. */
void spec_set_block(GptOp* op, size_t rows, size_t width, size_t tail, int splittable);

/* Appends a parameter tensor of rows x cols (rows = 0: a vector of cols) after the op's last
** tensor (the first of a split block is its rows x width part). Weight decay applies to the
** split part and to the tail of an op with tail_decay. hf: its safetensors name ("" if none);
** transposed: osdp holds the file's tensor as [cols, rows]. llmc_slot: its llm.c slot (-1: not
** in llm.c files), transposed there when it is split. */
ParamTensor* spec_add_tensor(GptOp* op, const char* name, size_t rows, size_t cols, InitRule init,
                             double std, const char* hf, int llmc_slot, int transposed);

/* Appends an activation tensor of per_token elements of the given kind (a value, a statistic or
** an int: ActKind) to the op's block. */
void spec_add_act(GptOp* op, const char* name, size_t per_token, ActKind kind);

#endif
