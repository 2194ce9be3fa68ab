/* spec_build.c: building an op list; see spec_build.h. */
#include "model/spec_build.h"

#include <stdio.h>
#include <string.h>

GptOp* spec_add_op(GptDesc* d, const char* name, OpKind kind, int layer) {
  GptOp* op = &d->ops[d->nops];
  memset(op, 0, sizeof *op);
  snprintf(op->name, sizeof op->name, "%s", name);
  op->kind = kind;
  op->layer = layer;
  op->owner = -1;
  op->has_backward = 1;
  op->bwd_weight = 1;
  op->index_self = d->nops;
  d->nops++;
  return op;
}

void spec_set_block(GptOp* op, size_t rows, size_t width, size_t tail, int splittable) {
  op->rows = rows; op->width = width; op->tail = tail;
  op->n_params = rows * width + tail;
  op->splittable = splittable;
  op->owner = op->index_self;
}

ParamTensor* spec_add_tensor(GptOp* op, const char* name, size_t rows, size_t cols, InitRule init,
                             double std, const char* hf, int llmc_slot, int transposed) {
  ParamTensor* t = &op->tensor[op->ntensors];
  size_t off = op->ntensors ? op->tensor[op->ntensors - 1].off + op->tensor[op->ntensors - 1].n : 0;
  memset(t, 0, sizeof *t);
  snprintf(t->name, sizeof t->name, "%s", name);
  t->off = off;
  t->rows = rows ? rows : 1;
  t->cols = cols;
  t->n = t->rows * cols;
  t->split = off < op->rows * op->width;
  t->decay = t->split || op->tail_decay;
  t->init = init;
  t->std = std;
  t->real_cols = cols;
  snprintf(t->hf_name, sizeof t->hf_name, "%s", hf);
  t->hf_ndim = rows ? 2 : 1;
  t->hf_shape[0] = rows ? (transposed ? cols : rows) : cols;
  t->hf_shape[1] = rows ? (transposed ? rows : cols) : 0;
  t->hf_transposed = transposed;
  t->llmc_slot = llmc_slot;
  t->llmc_transposed = t->split;
  op->ntensors++;
  return t;
}

void spec_add_act(GptOp* op, const char* name, size_t per_token, ActKind kind) {
  ActTensor* a = &op->act[op->nacts++];
  snprintf(a->name, sizeof a->name, "%s", name);
  a->per_token = per_token;
  a->kind = kind;
}
