/*
** llama.h: the Llama family's op layout, for its own step (llama_step.c) and for tests that look
** at particular ops. Nothing outside src/model may include it.
**
** Operator order (L layers, C = n_embd, NH heads and NKV K/V heads of hs = head_dim, F = ffn_dim):
**   0             embed       token embedding; owns wte [C, Vp] (no position table)
**   1 + 11l + 0   h<l>.ln1    RMSNorm                       owns w [C]
**   1 + 11l + 1   h<l>.q      linear C -> NH*hs             owns W [C, NH*hs] (+ b: qkv_bias)
**   1 + 11l + 2   h<l>.k      linear C -> NKV*hs            owns W (+ b)
**   1 + 11l + 3   h<l>.v      linear C -> NKV*hs            owns W (+ b)
**   1 + 11l + 4   h<l>.attn   RoPE on q and k (in place), then causal grouped-query attention
**   1 + 11l + 5   h<l>.o      linear NH*hs -> C, + residual owns W
**   1 + 11l + 6   h<l>.ln2    RMSNorm
**   1 + 11l + 7   h<l>.gate   linear C -> F                 owns W
**   1 + 11l + 8   h<l>.up     linear C -> F                 owns W
**   1 + 11l + 9   h<l>.swiglu silu(gate) * up               no parameters
**   1 + 11l + 10  h<l>.down   linear F -> C, + residual (the layer's output)
**   1 + 11L       lnf         final RMSNorm
**   2 + 11L       lm_head     logits = x W: tied (embed's wte) or its own W [C, Vp]
**   3 + 11L       loss        softmax cross-entropy         no parameters
** Linear weights are [in, out] (transformers' nn.Linear holds [out, in]: transposed in files).
*/
#ifndef OSDP_LLAMA_H
#define OSDP_LLAMA_H

#include "model/gpt.h"

#define LLAMA_OPS_PER_LAYER 11

/* Op indices inside a layer. */
enum { LL_LN1 = 0, LL_Q, LL_K, LL_V, LL_ATTN, LL_O, LL_LN2, LL_GATE, LL_UP, LL_SWIGLU, LL_DOWN };
static inline int llama_op_layer(int l, int j) { return 1 + LLAMA_OPS_PER_LAYER * l + j; }
static inline int llama_op_lnf(const GptDesc* d) { return 1 + LLAMA_OPS_PER_LAYER * d->cfg.n_layer; }

/* The tensors of a linear (W, then b when it has one), an RMSNorm, the embedding, an untied
** head, by index into GptOp.tensor. */
enum { LL_LINEAR_W = 0, LL_LINEAR_B = 1, LL_NORM_W = 0, LL_EMBED_WTE = 0, LL_HEAD_W = 0 };

/* The rotary embedding's inverse frequencies of a config: hs/2 values, Llama 3's scaling applied
** when it has one (transformers' _compute_llama3_parameters), in double. */
void llama_rope_inv_freq(const GptConfig* c, double* inv_freq);

/* The Llama family's steps (llama_step.c compiled as float and as double). */
struct StepPasses;
extern const struct StepPasses llama_step_f32;
extern const struct StepPasses llama_step_f64;
extern const struct StepPasses llama_step_bf16;
/* Its one-position decoder over a KV cache (llama_decode.c). */
struct DecodeFns;
extern const struct DecodeFns llama_decode;

#endif
