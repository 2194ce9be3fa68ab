/*
** gpt.h: the model description, as data. A model family (model/family.h; GPT-2 in gpt2.c)
** expands a config into an explicit ordered list of operators, and everything else — the
** runtime, the memory prediction, the planner, the CLI, checkpoints and safetensors files —
** works from that list alone:
**   - each op's parameter BLOCK and the NAMED TENSORS inside it (ParamTensor: offset, shape,
**     initialisation rule, weight decay, the names files give it);
**   - the activations it keeps for backward (ActTensor: named, sized per token);
**   - its FLOPs per token, whether it can be split into slices, whose parameters it uses (weight
**     tying), how its passes use them (ModelOp's step flags);
**   - the layer it belongs to and whether its output is the layer's output (the recompute
**     boundary); every layer has the same ops (ops_per_layer, first_layer_op);
**   - the roles the runtime needs: which op's activations hold the tokens and targets, which
**     hold the logits.
** Nothing outside src/model names an op of a particular family.
**
** Parameter blocks. Each operator that owns parameters owns one contiguous block laid out as
** `rows` rows of `width` elements (the part a split cuts) followed by `tail` elements. Split
** into k slices, slice i holds rows [i*rows/k, (i+1)*rows/k) and the last slice also holds the
** tail, so every slice is a contiguous range of the block. The tensors partition the block: a
** tensor is either the whole rows x width part ("split": each slice holds some of its rows) or
** lies in the tail (only the last slice holds it). model_param_view names a slice's tensors.
*/
#ifndef OSDP_GPT_H
#define OSDP_GPT_H

#include <stddef.h>

#include "kernels/backend.h" /* Precision: the element sizes of activation tensors */

#define GPT_MAX_SLICES 8       /* the most slices an op can be split into */
#define MODEL_MAX_TENSORS 2    /* named parameter tensors per op */
#define MODEL_MAX_ACTS 3       /* named activation tensors per op */

struct ModelFamily;
struct cJSON;

/* A model's shape. `family` picks the spec (family.h); GPT-2 reads the first block only, the
** Llama family (Llama 2/3, SmolLM2, TinyLlama, Qwen2) all of it. */
typedef struct GptConfig {
  char name[48];
  char family[16];   /* "gpt2" or "llama" */
  int n_layer, n_embd, n_head;
  int vocab_size;    /* V: real tokens */
  int padded_vocab;  /* Vp: V rounded up to a multiple of 128, as llm.c pads it */
  int max_seq;       /* maxT: the longest sequence (rows of GPT-2's wpe; Llama's context) */
  /* Llama family: */
  int n_kv_head;     /* K/V heads (grouped-query attention): divides n_head */
  int head_dim;      /* per head; n_head * head_dim need not be n_embd */
  int ffn_dim;       /* the SwiGLU MLP's intermediate size */
  int tied_head;     /* 1: the LM head is the token embedding (0: its own lm_head weight) */
  int qkv_bias;      /* 1: q, k and v projections have biases (Qwen2) */
  double norm_eps;   /* RMSNorm's epsilon */
  double rope_theta; /* rotary embedding base */
  /* Llama 3's rope_scaling ("rope_type": "llama3"); rope_factor 0: no scaling. */
  double rope_factor, rope_low_freq_factor, rope_high_freq_factor;
  int rope_original_max;  /* original_max_position_embeddings */
} GptConfig;

/* The computation an op performs, for messages, tables and per-kind timing. */
typedef enum OpKind {
  OP_EMBED, OP_LAYERNORM, OP_LINEAR, OP_ATTENTION, OP_GELU, OP_LMHEAD, OP_RMSNORM,
  OP_SWIGLU, OP_KIND_COUNT
} OpKind;

/* How a parameter tensor starts. */
typedef enum InitRule { INIT_ZEROS, INIT_ONES, INIT_NORMAL } InitRule;

/* A named parameter tensor inside its op's block. */
typedef struct ParamTensor {
  char name[8];          /* "W", "b", "gamma", "beta", "wte", "wpe", "w" (RMSNorm) */
  size_t off, n;         /* elements [off, off + n) of the op's block */
  size_t rows, cols;     /* its shape as osdp stores it, row-major (a vector: 1 x n) */
  int split;             /* 1: it is the block's rows x width part, cut by slices; 0: in the tail */
  int decay;             /* AdamW's weight decay applies to it */
  InitRule init;
  double std;            /* INIT_NORMAL: N(0, std) */
  size_t real_cols;      /* INIT_NORMAL: columns >= real_cols start at 0 (wte's padded tokens) */
  /* In safetensors files (Hugging Face names): the name, its shape there, and whether osdp
  ** holds it transposed ([cols, rows] of the file; only the file's first hf_shape[0] of osdp's
  ** columns are stored, so wte's padded columns are not). */
  char hf_name[64];
  int hf_ndim;
  size_t hf_shape[2];
  int hf_transposed;
  /* In llm.c checkpoints: its place in llm.c's tensor order (all layers' tensors of one slot
  ** follow each other, slots in increasing order), and whether the file holds it transposed. */
  int llmc_slot;
  int llmc_transposed;
} ParamTensor;

/* The element kind of an activation tensor: a value (an activation, in the step's act
** precision: bf16 under PRECISION_BF16), a statistic kept for backward or the loss (LayerNorm's
** mean and rstd, attention's lse, the losses: the stat precision, fp32 under bf16), or an int
** (token ids, targets). */
typedef enum ActKind { ACT_VALUE = 0, ACT_STAT = 1, ACT_INT = 2 } ActKind;

/* A named tensor of an op's activation block: per_token elements of its kind for each of the B*T
** positions. */
typedef struct ActTensor {
  char name[8];
  size_t per_token;
  ActKind kind;
} ActTensor;

typedef struct GptOp {
  char name[24];
  OpKind kind;
  int layer;            /* -1 outside the layers */
  int owner;            /* index of the op whose parameters it uses (itself; embed for a tied
                        ** lm_head), -1 if none */
  size_t rows, width, tail; /* parameter block geometry (see above); n_params = rows*width + tail */
  size_t n_params;      /* parameters it owns (0 for a tied lm_head, which uses embed's) */
  int splittable;       /* may run as k slices along rows */
  int tail_decay;       /* whether weight decay applies to the tail (its tensors' decay) */
  int ntensors;         /* its named parameter tensors, in block order */
  ParamTensor tensor[MODEL_MAX_TENSORS];
  int nacts;            /* its activation block's tensors, in block order */
  ActTensor act[MODEL_MAX_ACTS];
  double flops_tok, flops_tok_T; /* forward FLOPs per token: flops_tok + flops_tok_T * T */
  /* How the step uses it. */
  int has_backward;     /* 0: its backward runs inside its forward (the LM head, fused with the
                        ** loss: its forward uses its owner's weights and gradients) */
  int fwd_reversed;     /* the forward visits its slices last first (embed: the last holds wpe) */
  int bwd_weight;       /* the backward reads its weight (embed's backward does not) */
  int layer_output;     /* its output is its layer's output (kept when the layer recomputes) */
  int K, OC;            /* for linears and lm_head: input and output widths */
  int residual;         /* a linear that adds its output to the residual stream */
  int index_self;       /* its own index in the op list */
} GptOp;

typedef struct GptDesc {
  GptConfig cfg;
  const struct ModelFamily* family;
  int nops;
  GptOp* ops;           /* owned */
  size_t n_params;      /* total parameters */
  int first_layer_op;   /* index of layer 0's first op */
  int ops_per_layer;    /* every layer has the same ops */
  int tokens_op;        /* the op whose activation block holds the tokens and targets */
  int head_op;          /* the LM head (with the loss): its block holds the losses */
} GptDesc;

/* Fills cfg from a preset name (gpt_preset_names) or a JSON file; see the family's loader.
** Returns 0, or -1 with a one-line error naming the field. */
int gpt_config_load(const char* name_or_path, GptConfig* cfg);
/* Checks a config for consistency (heads divide hidden, sizes positive, the family's fields). */
int gpt_config_validate(const GptConfig* cfg);
/* osdp's model JSON (model files, the "model" object of plans and checkpoint manifests): adds
** name, family (Llama only) and every field of the config's family to object m. */
void gpt_config_to_json(const GptConfig* cfg, struct cJSON* m);
/* Reads a config from such an object (family "gpt2" when absent); path names it in errors.
** Returns 0, or -1 with a one-line error naming the field. */
int gpt_config_from_json(const struct cJSON* o, const char* path, GptConfig* cfg);
/* 0 if object m (a plan's or manifest's "model", called `what` in messages) describes cfg,
** else -1 with an error naming the first field that differs. */
int gpt_config_matches_json(const struct cJSON* m, const GptConfig* cfg, const char* path,
                            const char* what);
/* One line describing cfg for people ("12 layers, hidden 768, 12 heads, vocab ..."), into buf. */
const char* gpt_config_summary(const GptConfig* cfg, char* buf, size_t n);
/* The family called name ("gpt2", "llama"), or NULL. */
const struct ModelFamily* model_family_find(const char* name);
/* Comma-separated list of preset names, for messages. */
const char* gpt_preset_names(void);

/* Expands a config into its operator list (the family's spec). Returns 0 or -1. */
int gpt_desc_build(GptDesc* d, const GptConfig* cfg);
void gpt_desc_free(GptDesc* d);

/* Index of op j (0 .. ops_per_layer-1) of layer l. */
static inline int gpt_layer_op(const GptDesc* d, int l, int j) {
  return d->first_layer_op + d->ops_per_layer * l + j;
}

/* Whether op's parameters are held whole by a fused op (has_backward 0: the LM head, which
** uses every slice of its owner at once). */
int gpt_op_held(const GptDesc* d, int op);

/* Start row of slice i of k of an op with `rows` rows. */
static inline size_t gpt_slice_row0(size_t rows, int k, int i) { return rows * (size_t)i / (size_t)k; }
/* Number of parameters of slice i of k of op (the last slice includes the tail). */
size_t gpt_slice_params(const GptOp* op, int k, int i);
/* Offset of slice i's first parameter inside the op's block. */
size_t gpt_slice_offset(const GptOp* op, int k, int i);

/* A slice's named tensors: t[j] points at the part of tensor j (op->tensor[j]) this slice holds
** — rows [row0, row0 + nrows) of a split tensor, or the whole of a tail tensor in the last slice
** — or is NULL when the slice holds none of it. Elements are float or double (elem bytes). */
typedef struct ParamView {
  void* t[MODEL_MAX_TENSORS];
  size_t row0, nrows;   /* the slice's rows of the split part */
} ParamView;
/* The view of slice i of k of op whose elements start at base (elem bytes each). */
ParamView model_param_view(const GptOp* op, int k, int i, void* base, size_t elem);

/* The tensor of op called name, or NULL. */
const ParamTensor* model_tensor(const GptOp* op, const char* name);

/* Forward FLOPs per token of an op at sequence length T (matrix products only); backward
** costs twice as much. */
double gpt_op_flops_per_token(const GptDesc* d, const GptOp* op, int T);
/* Bytes of the activation block of an op for B samples of length T in precision prec: its
** tensors in order, each of its kind's element size (precision_elems: act for values, stat for
** statistics; ints) and starting at a multiple of that size (padding only where a bf16 tensor is
** followed by a wider one). */
size_t gpt_op_act_bytes(const GptDesc* d, const GptOp* op, int B, int T, Precision prec);
/* Offset in bytes of activation tensor `name` inside the op's block (B x T, precision prec, laid
** out as gpt_op_act_bytes says); the tensor must exist. */
size_t model_act_offset(const GptOp* op, const char* name, int B, int T, Precision prec);
/* The LM head and its loss run fused over chunks of rows of the B*T positions, so the logits
** [B*T, Vp] never exist whole: a chunk of head_rows rows at a time (see step_ops.h). The rows of
** a chunk: head_rows when given (> 0), else the default rule (gpt_head_rows_default), at most
** B*T. */
int gpt_head_rows(const GptDesc* d, int B, int T, int head_rows);
/* The default chunk: as many rows as fit in GPT_HEAD_CHUNK_BYTES of fp32 logits, a multiple of
** 16, at least 16. */
#define GPT_HEAD_CHUNK_BYTES (128u << 20)
int gpt_head_rows_default(const GptDesc* d);
/* Bytes of the step's working buffers, which the runtime allocates once per step setup: first
** the LM head's chunk of logits [gpt_head_rows, Vp] (gpt_head_chunk_bytes), then the family's
** buffers (activation gradients and attention scratch for `threads` threads, which the forward
** uses too), then 2*B*T ints at the end (the evaluation's argmax); in precision prec. */
size_t gpt_scratch_bytes(const GptDesc* d, int B, int T, Precision prec, int threads,
                         int head_rows);
/* Bytes of the head's chunk of logits (act elements of prec) at the start of the scratch buffer
** (rounded up to 64). */
size_t gpt_head_chunk_bytes(const GptDesc* d, int B, int T, Precision prec, int head_rows);
/* Short name of an op kind ("linear", ...). */
const char* gpt_op_kind_name(OpKind k);
/* The initial value of parameter idx of op's block for a seed, computed from (seed, op, idx)
** alone by the rule of the tensor holding it, so every rank can initialise exactly its own
** shard and the result is the same for every plan. */
float gpt_init_value(const GptDesc* d, int op, size_t idx, unsigned long long seed);
/* Values of the same rules and scale, much cheaper (no libm; a normal tensor gets a uniform of
** its std), for parameters [first, first + n) of op's block into out: for engines that only time
** steps (profiles, trials), whose weights' values do not matter, only their magnitude. */
void gpt_init_range_fast(const GptDesc* d, int op, size_t first, size_t n, unsigned long long seed,
                         float* out);
/* Total forward+backward FLOPs of one training step for B x T tokens (attention's T x T
** products counted whole, as the cost model prices them). */
double gpt_step_flops(const GptDesc* d, int B, int T);
/* The same, counting only the useful part of causal attention: query t meets t + 1 keys, so
** (T + 1) / 2 on average (what the kernels compute, up to the diagonal tiles). */
double gpt_step_useful_flops(const GptDesc* d, int B, int T);

#endif
