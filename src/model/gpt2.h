/*
** gpt2.h: the GPT-2 family's op layout, for its own step (gpt2_step.c) and for tests that
** look at particular GPT-2 ops. Nothing outside src/model may include it: the runtime, planner
** and CLI work from the op list of gpt.h alone.
**
** Operator order (L layers):
**   0            embed      token + position embedding; owns wte [C, Vp] and wpe [maxT, C]
**   1 + 8l + 0   h<l>.ln1   LayerNorm                  owns gamma, beta [C]
**   1 + 8l + 1   h<l>.qkv   linear C -> 3C             owns W [C, 3C], b [3C]
**   1 + 8l + 2   h<l>.attn  causal self-attention      no parameters
**   1 + 8l + 3   h<l>.proj  linear C -> C, + residual  owns W [C, C], b [C]
**   1 + 8l + 4   h<l>.ln2   LayerNorm
**   1 + 8l + 5   h<l>.fc    linear C -> 4C
**   1 + 8l + 6   h<l>.gelu  tanh GELU                  no parameters
**   1 + 8l + 7   h<l>.fcproj linear 4C -> C, + residual (the layer's output)
**   1 + 8L       lnf        final LayerNorm
**   2 + 8L       lm_head    logits = x wte (tied: uses embed's wte)
**   3 + 8L       loss       softmax cross-entropy      no parameters
** For a linear, rows are the reduction dimension (in), width = out; for embed, rows are C and
** width is Vp (wte is stored transposed, [C, Vp], because it is the LM head's [in, out] weight).
*/
#ifndef OSDP_GPT2_H
#define OSDP_GPT2_H

#include "model/gpt.h"

#define GPT_OPS_PER_LAYER 8

/* Op indices. */
enum { GPT_LN1 = 0, GPT_QKV, GPT_ATTN, GPT_PROJ, GPT_LN2, GPT_FC, GPT_GELU, GPT_FCPROJ };
static inline int gpt_op_layer(int l, int j) { return 1 + GPT_OPS_PER_LAYER * l + j; }
static inline int gpt_op_lnf(const GptDesc* d) { return 1 + GPT_OPS_PER_LAYER * d->cfg.n_layer; }
static inline int gpt_op_lmhead(const GptDesc* d) { return 2 + GPT_OPS_PER_LAYER * d->cfg.n_layer; }
static inline int gpt_op_loss(const GptDesc* d) { return 3 + GPT_OPS_PER_LAYER * d->cfg.n_layer; }

/* The tensors of each GPT-2 op kind, by index into GptOp.tensor. */
enum { LINEAR_W = 0, LINEAR_B = 1 };
enum { NORM_GAMMA = 0, NORM_BETA = 1 };
enum { EMBED_WTE = 0, EMBED_WPE = 1 };

/* Where the attention scratch starts in GPT-2's working buffer, in bytes: after dres [BT, C]
** and two [BT, 4C] buffers of act_bytes elements (BTC = B*T*C), rounded up to a multiple of
** stat_bytes (the tiles are in stat's precision). One source for the step and its size. */
size_t gpt2_work_att_offset(size_t BTC, size_t act_bytes, size_t stat_bytes);

/* GPT-2's steps (gpt2_step.c compiled as float and as double). */
struct StepPasses;
extern const struct StepPasses gpt2_step_f32;
extern const struct StepPasses gpt2_step_f64;
extern const struct StepPasses gpt2_step_bf16;
/* Its one-position decoder over a KV cache (gpt2_decode.c). */
struct DecodeFns;
extern const struct DecodeFns gpt2_decode;

#endif
