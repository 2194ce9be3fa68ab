/*
** llama_work.h: where the Llama step's working buffers lie inside GptActs.scratch, for the step
** (llama_step.c) and the scratch size (llama.c) alike. Offsets are in bytes, for the step's
** precision (precision_elems: the buffers are act elements, inv_freq stat elements, each part
** starting at a multiple of its element size); BT = B*T, Q = NH*hs, KV = NKV*hs, F = ffn_dim:
**   dres [BT, C]    the residual stream's gradient
**   dx, dt [BT, C]  a layer input's gradient summed over the linears that read it
**   da [BT, max(F, Q)], dgate [BT, F], dup [BT, F]   the MLP's (and o's) activation gradients
**   dq [BT, Q], dk [BT, KV], dv [BT, KV]             attention's input gradients
**   inv_freq [hs/2, padded to 16]                    the rotary frequencies (filled by the step)
**   then the attention kernels' per-thread scratch (llama.c adds its size).
*/
#ifndef OSDP_LLAMA_WORK_H
#define OSDP_LLAMA_WORK_H

#include <stddef.h>

#include "model/gpt.h"

typedef struct LlamaWork {
  size_t dres, dx, dt, da, dgate, dup, dq, dk, dv, inv_freq, att;
  size_t bytes; /* bytes before the attention scratch (= att) */
} LlamaWork;

/* x rounded up to a multiple of m. */
static inline size_t llama_work_align(size_t x, size_t m) { return (x + m - 1) / m * m; }

/* The layout for B x T in precision prec. */
static inline LlamaWork llama_work_layout(const GptDesc* d, int B, int T, Precision prec) {
  const GptConfig* c = &d->cfg;
  StepElems e = precision_elems(prec);
  size_t BT = (size_t)B * (size_t)T, C = (size_t)c->n_embd, F = (size_t)c->ffn_dim;
  size_t Q = (size_t)c->n_head * c->head_dim, KV = (size_t)c->n_kv_head * c->head_dim;
  size_t A = F > Q ? F : Q;
  LlamaWork w;
  w.dres = 0;
  w.dx = w.dres + BT * C * e.act;
  w.dt = w.dx + BT * C * e.act;
  w.da = w.dt + BT * C * e.act;
  w.dgate = w.da + BT * A * e.act;
  w.dup = w.dgate + BT * F * e.act;
  w.dq = w.dup + BT * F * e.act;
  w.dk = w.dq + BT * Q * e.act;
  w.dv = w.dk + BT * KV * e.act;
  w.inv_freq = llama_work_align(w.dv + BT * KV * e.act, e.stat);
  w.att = llama_work_align(w.inv_freq + ((size_t)c->head_dim / 2 + 15) / 16 * 16 * e.stat, e.stat);
  w.bytes = w.att;
  return w;
}

#endif
