/*
** gpt.h: the model description. A GPT-2 style decoder is expanded into an explicit ordered
** list of operators; each knows its parameters, FLOPs, the activations it keeps for backward
** and whether it is a splittable linear. Everything else (runtime, planner, CLI) works from
** this list.
**
** Operator order (L layers):
**   0            embed      token + position embedding; owns wte [C, Vp] and wpe [maxT, C]
**   1 + 8l + 0   h<l>.ln1   LayerNorm                  owns w, b [C]
**   1 + 8l + 1   h<l>.qkv   linear C -> 3C             owns W [C, 3C], b [3C]
**   1 + 8l + 2   h<l>.attn  causal self-attention      no parameters
**   1 + 8l + 3   h<l>.proj  linear C -> C, + residual  owns W [C, C], b [C]
**   1 + 8l + 4   h<l>.ln2   LayerNorm
**   1 + 8l + 5   h<l>.fc    linear C -> 4C
**   1 + 8l + 6   h<l>.gelu  tanh GELU                  no parameters
**   1 + 8l + 7   h<l>.fcproj linear 4C -> C, + residual
**   1 + 8L       lnf        final LayerNorm
**   2 + 8L       lm_head    logits = x wte (tied: uses embed's wte)
**   3 + 8L       loss       softmax cross-entropy      no parameters
**
** Parameter blocks. Each operator that owns parameters owns one contiguous block laid out as
** `rows` rows of `width` elements (the part a split cuts) followed by `tail` elements (bias, or
** wpe for embed). Split into k slices, slice i holds rows [i*rows/k, (i+1)*rows/k) and the last
** slice also holds the tail, so every slice is a contiguous range of the block. For a linear,
** rows are the reduction dimension (in), width = out; for embed, rows are C and width is Vp
** (wte is stored transposed, [C, Vp], because it is the LM head's [in, out] weight).
*/
#ifndef OSDP_GPT_H
#define OSDP_GPT_H

#include <stddef.h>

#define GPT_MAX_SLICES 8
#define GPT_OPS_PER_LAYER 8

typedef struct GptConfig {
  char name[48];
  int n_layer, n_embd, n_head;
  int vocab_size;    /* V: real tokens */
  int padded_vocab;  /* Vp: V rounded up to a multiple of 128, as llm.c pads it */
  int max_seq;       /* maxT: rows of wpe */
} GptConfig;

typedef enum OpKind {
  OP_EMBED, OP_LAYERNORM, OP_LINEAR, OP_ATTENTION, OP_GELU, OP_LMHEAD, OP_LOSS
} OpKind;

typedef struct GptOp {
  char name[24];
  OpKind kind;
  int layer;            /* -1 outside the blocks */
  int owner;            /* index of the op whose parameters it uses (itself, embed for lm_head), -1 if none */
  size_t rows, width, tail; /* parameter block geometry (see above); n_params = rows*width + tail */
  size_t n_params;      /* parameters it owns (0 for lm_head, which uses embed's) */
  int splittable;       /* may run as k slices along rows */
  int tail_decay;       /* whether weight decay applies to the tail (wpe yes, biases no) */
  int K, OC;            /* for linears and lm_head: input and output widths */
  int residual;         /* linear adds its output to the residual stream */
  int index_self;       /* its own index in the op list */
} GptOp;

typedef struct GptDesc {
  GptConfig cfg;
  int nops;
  GptOp* ops;           /* owned */
  size_t n_params;      /* total parameters */
} GptDesc;

/* Fills cfg from a preset name (tiny, small, gpt2-124m, gpt2-350m, gpt2-774m, gpt2-1.5b) or a
** JSON file {"n_layer":..,"n_embd":..,"n_head":..,"vocab_size":..,"max_seq":..,"name":..}.
** Returns 0, or -1 with a one-line error naming the field. */
int gpt_config_load(const char* name_or_path, GptConfig* cfg);
/* Checks a config for consistency (heads divide hidden, sizes positive). */
int gpt_config_validate(const GptConfig* cfg);
/* Space-separated list of preset names, for messages. */
const char* gpt_preset_names(void);

/* Expands a config into its operator list. Returns 0 or -1. */
int gpt_desc_build(GptDesc* d, const GptConfig* cfg);
void gpt_desc_free(GptDesc* d);

/* Op indices. */
static inline int gpt_op_layer(int l, int j) { return 1 + GPT_OPS_PER_LAYER * l + j; }
enum { GPT_LN1 = 0, GPT_QKV, GPT_ATTN, GPT_PROJ, GPT_LN2, GPT_FC, GPT_GELU, GPT_FCPROJ };
static inline int gpt_op_lnf(const GptDesc* d) { return 1 + GPT_OPS_PER_LAYER * d->cfg.n_layer; }
static inline int gpt_op_lmhead(const GptDesc* d) { return 2 + GPT_OPS_PER_LAYER * d->cfg.n_layer; }
static inline int gpt_op_loss(const GptDesc* d) { return 3 + GPT_OPS_PER_LAYER * d->cfg.n_layer; }

/* Start and end rows of slice i of k of an op with `rows` rows. */
static inline size_t gpt_slice_row0(size_t rows, int k, int i) { return rows * (size_t)i / (size_t)k; }
/* Number of parameters of slice i of k of op (the last slice includes the tail). */
size_t gpt_slice_params(const GptOp* op, int k, int i);
/* Offset of slice i's first parameter inside the op's block. */
size_t gpt_slice_offset(const GptOp* op, int k, int i);

/* Forward FLOPs per token of an op at sequence length T (matrix products only: 2*K*OC per
** linear, 4*T*C for attention's two T x T products); backward costs twice as much. */
double gpt_op_flops_per_token(const GptDesc* d, const GptOp* op, int T);
/* Bytes of activations an op keeps for backward for B samples of length T, elements of
** elem bytes (embed also keeps the B*T input tokens and targets, 4 bytes each). */
size_t gpt_op_act_bytes(const GptDesc* d, const GptOp* op, int B, int T, size_t elem);
/* Bytes of the backward working buffers (activation gradients and attention scratch for
** `threads` threads, which the forward uses too), which the runtime allocates once per step
** setup. */
size_t gpt_scratch_bytes(const GptDesc* d, int B, int T, size_t elem, int threads);
/* Short name of an op kind ("linear", ...). */
const char* gpt_op_kind_name(OpKind k);
/* The initial value of parameter idx of op's block for a seed, computed from (seed, op, idx)
** alone, so every rank can initialise exactly its own shard and the result is the same for
** every plan: N(0, 0.02) for weights (0.02/sqrt(2L) for the projections into the residual
** stream, as GPT-2 does), 0 for biases and for wte's padded columns (tokens V..Vp, which
** nothing uses), 1 and 0 for LayerNorm's scale and shift. */
float gpt_init_value(const GptDesc* d, int op, size_t idx, unsigned long long seed);
/* Total forward+backward FLOPs of one training step for B x T tokens. */
double gpt_step_flops(const GptDesc* d, int B, int T);

#endif
