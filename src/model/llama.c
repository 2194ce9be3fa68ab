/*
** llama.c: the Llama family's spec (Llama 2/3, SmolLM2, TinyLlama, Qwen2): its presets, its op
** list (llama.h) with every op's named tensors (shapes, initialisation as transformers'
** LlamaPreTrainedModel does it, weight decay, Hugging Face names), activations, FLOPs and step
** flags (gpt.h), the step's working buffers and the rotary frequencies. The step is in
** llama_step.c.
*/
#include "model/llama.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"
#include "kernels/cpu_kernels.h"
#include "model/family.h"
#include "model/llama_work.h"
#include "model/spec_build.h"

/* A preset: the published config.json of each model (layers, hidden, heads, K/V heads,
** head_dim, intermediate, vocabulary, context, rope_theta, RMSNorm eps, tied head, QKV bias,
** llama3 rope scaling factor / low / high / original context). */
typedef struct Preset {
  const char* name;
  int L, C, NH, NKV, hs, F, V, maxT;
  double theta, eps;
  int tied, bias;
  double rf, rlow, rhigh;
  int rorig;
} Preset;

static const Preset presets[] = {
    /* small shapes for tests and quick runs */
    {"llama-tiny", 2, 64, 4, 2, 16, 128, 256, 256, 10000, 1e-5, 0, 0, 0, 0, 0, 0},
    {"qwen-tiny", 2, 64, 4, 1, 16, 96, 256, 256, 1e6, 1e-6, 1, 1, 0, 0, 0, 0},
    {"llama-small", 4, 256, 8, 2, 32, 768, 8192, 512, 10000, 1e-5, 1, 0, 0, 0, 0, 0},
    /* HuggingFaceTB/SmolLM2-135M */
    {"smollm2-135m", 30, 576, 9, 3, 64, 1536, 49152, 8192, 100000, 1e-5, 1, 0, 0, 0, 0, 0},
    /* TinyLlama/TinyLlama-1.1B-intermediate-step-1431k-3T */
    {"tinyllama-1.1b", 22, 2048, 32, 4, 64, 5632, 32000, 2048, 10000, 1e-5, 0, 0, 0, 0, 0, 0},
    /* meta-llama/Llama-3.2-1B */
    {"llama3.2-1b", 16, 2048, 32, 8, 64, 8192, 128256, 131072, 500000, 1e-5, 1, 0, 32, 1, 4, 8192},
    /* meta-llama/Meta-Llama-3-8B */
    {"llama3-8b", 32, 4096, 32, 8, 128, 14336, 128256, 8192, 500000, 1e-5, 0, 0, 0, 0, 0, 0},
    /* Qwen/Qwen2.5-0.5B */
    {"qwen2.5-0.5b", 24, 896, 14, 2, 64, 4864, 151936, 32768, 1000000, 1e-6, 1, 1, 0, 0, 0, 0},
};
#define NPRESETS ((int)(sizeof presets / sizeof presets[0]))

/* Fills cfg from the preset called name; 1 if there is one, else 0. */
static int llama_preset(const char* name, GptConfig* c) {
  for (int i = 0; i < NPRESETS; i++) {
    if (strcmp(name, presets[i].name) != 0) continue;
    const Preset* p = &presets[i];
    snprintf(c->name, sizeof c->name, "%s", p->name);
    snprintf(c->family, sizeof c->family, "llama");
    c->n_layer = p->L; c->n_embd = p->C; c->n_head = p->NH; c->n_kv_head = p->NKV;
    c->head_dim = p->hs; c->ffn_dim = p->F; c->vocab_size = p->V; c->max_seq = p->maxT;
    c->rope_theta = p->theta; c->norm_eps = p->eps; c->tied_head = p->tied; c->qkv_bias = p->bias;
    c->rope_factor = p->rf; c->rope_low_freq_factor = p->rlow; c->rope_high_freq_factor = p->rhigh;
    c->rope_original_max = p->rorig;
    return 1;
  }
  return 0;
}

void llama_rope_inv_freq(const GptConfig* c, double* inv_freq) {
  int half = c->head_dim / 2;
  const double pi = 3.14159265358979323846;
  for (int j = 0; j < half; j++) {
    /* transformers: 1 / theta^(arange(0, hs, 2) / hs), computed in float32 */
    double f = (float)(1.0 / pow(c->rope_theta, (double)(2 * j) / c->head_dim));
    if (c->rope_factor > 0) {
      double old = c->rope_original_max, wavelen = 2 * pi / f;
      double low_wavelen = old / c->rope_low_freq_factor, high_wavelen = old / c->rope_high_freq_factor;
      if (wavelen > low_wavelen) {
        f /= c->rope_factor;              /* long wavelengths: scaled */
      } else if (wavelen >= high_wavelen) { /* between: smoothly interpolated */
        double s = (old / wavelen - c->rope_low_freq_factor) /
                   (c->rope_high_freq_factor - c->rope_low_freq_factor);
        f = (1 - s) * f / c->rope_factor + s * f;
      }
    }
    inv_freq[j] = (float)f; /* transformers keeps the (scaled) frequencies as float32 */
  }
}

/* ---- Building the op list ------------------------------------------------------------ */

/* transformers initialises every linear and the embedding N(0, initializer_range = 0.02). */
#define LLAMA_INIT_STD 0.02

/* Adds a linear K -> OC without bias (or with one, zero-initialised) named hf_base.weight and
** .bias; transformers holds its weight [OC, K]. */
static void add_linear(GptDesc* d, const char* name, int layer, int K, int OC, int bias,
                       int residual, const char* hf_base) {
  GptOp* op = spec_add_op(d, name, OP_LINEAR, layer);
  spec_set_block(op, (size_t)K, (size_t)OC, bias ? (size_t)OC : 0, 1);
  op->K = K; op->OC = OC; op->residual = residual;
  op->flops_tok = 2.0 * K * OC;
  char hf[64];
  snprintf(hf, sizeof hf, "%s.weight", hf_base);
  spec_add_tensor(op, "W", (size_t)K, (size_t)OC, INIT_NORMAL, LLAMA_INIT_STD, hf, -1, 1);
  if (bias) {
    snprintf(hf, sizeof hf, "%s.bias", hf_base);
    spec_add_tensor(op, "b", 0, (size_t)OC, INIT_ZEROS, 0, hf, -1, 0);
  }
  spec_add_act(op, "out", (size_t)OC, ACT_VALUE);
}

/* Adds an RMSNorm over C features (w 1, no weight decay, never split). */
static void add_rmsnorm(GptDesc* d, const char* name, int layer, const char* hf) {
  size_t C = (size_t)d->cfg.n_embd;
  GptOp* op = spec_add_op(d, name, OP_RMSNORM, layer);
  spec_set_block(op, 0, 0, C, 0);
  spec_add_tensor(op, "w", 0, C, INIT_ONES, 0, hf, -1, 0);
  spec_add_act(op, "out", C, ACT_VALUE);
  spec_add_act(op, "rstd", 1, ACT_STAT);
}

/* Adds the token embedding wte [C, Vp] (split; transformers' embed_tokens [V, C], so osdp holds
** it transposed, and the padded columns start at 0). It keeps the tokens and targets of the
** micro-batch after its output. */
static void add_embed(GptDesc* d) {
  const GptConfig* c = &d->cfg;
  size_t C = (size_t)c->n_embd, Vp = (size_t)c->padded_vocab;
  GptOp* e = spec_add_op(d, "embed", OP_EMBED, -1);
  spec_set_block(e, C, Vp, 0, 1);
  e->K = c->n_embd; e->OC = c->padded_vocab;
  e->bwd_weight = 0;
  ParamTensor* wte = spec_add_tensor(e, "wte", C, Vp, INIT_NORMAL, LLAMA_INIT_STD,
                                     "model.embed_tokens.weight", -1, 1);
  wte->real_cols = (size_t)c->vocab_size;
  wte->hf_shape[0] = (size_t)c->vocab_size;
  spec_add_act(e, "out", C, ACT_VALUE);
  spec_add_act(e, "tokens", 1, ACT_INT);
  spec_add_act(e, "targets", 1, ACT_INT);
  d->tokens_op = e->index_self;
}

/* Names op `op` of layer l ("h3.q") and its safetensors name ("model.layers.3." + hf). */
static void layer_names(char nm[24], char hf[64], int l, const char* op, const char* hfname) {
  snprintf(nm, 24, "h%d.%s", l, op);
  snprintf(hf, 64, "model.layers.%d.%s", l, hfname);
}

/* Adds decoder layer l (see llama.h). */
static void add_layer(GptDesc* d, int l) {
  const GptConfig* c = &d->cfg;
  int C = c->n_embd, Q = c->n_head * c->head_dim, KV = c->n_kv_head * c->head_dim, F = c->ffn_dim;
  char nm[24], hf[64];
  layer_names(nm, hf, l, "ln1", "input_layernorm.weight");   add_rmsnorm(d, nm, l, hf);
  layer_names(nm, hf, l, "q", "self_attn.q_proj");  add_linear(d, nm, l, C, Q, c->qkv_bias, 0, hf);
  layer_names(nm, hf, l, "k", "self_attn.k_proj");  add_linear(d, nm, l, C, KV, c->qkv_bias, 0, hf);
  layer_names(nm, hf, l, "v", "self_attn.v_proj");  add_linear(d, nm, l, C, KV, c->qkv_bias, 0, hf);
  layer_names(nm, hf, l, "attn", "");
  GptOp* att = spec_add_op(d, nm, OP_ATTENTION, l);
  att->flops_tok_T = 4.0 * Q;
  spec_add_act(att, "out", (size_t)Q, ACT_VALUE);
  spec_add_act(att, "lse", (size_t)c->n_head, ACT_STAT); /* [B, NH, T] */
  layer_names(nm, hf, l, "o", "self_attn.o_proj");  add_linear(d, nm, l, Q, C, 0, 1, hf);
  layer_names(nm, hf, l, "ln2", "post_attention_layernorm.weight"); add_rmsnorm(d, nm, l, hf);
  layer_names(nm, hf, l, "gate", "mlp.gate_proj");  add_linear(d, nm, l, C, F, 0, 0, hf);
  layer_names(nm, hf, l, "up", "mlp.up_proj");      add_linear(d, nm, l, C, F, 0, 0, hf);
  layer_names(nm, hf, l, "swiglu", "");
  spec_add_act(spec_add_op(d, nm, OP_SWIGLU, l), "out", (size_t)F, ACT_VALUE);
  layer_names(nm, hf, l, "down", "mlp.down_proj");  add_linear(d, nm, l, F, C, 0, 1, hf);
  d->ops[d->nops - 1].layer_output = 1;
}

/* Adds the LM head: tied (it uses embed's wte) or with its own weight [C, Vp] (transformers'
** lm_head [V, C]), fused with the loss. */
static void add_head(GptDesc* d) {
  const GptConfig* c = &d->cfg;
  GptOp* head = spec_add_op(d, "lm_head", OP_LMHEAD, -1);
  head->K = c->n_embd; head->OC = c->padded_vocab;
  head->flops_tok = 2.0 * head->K * head->OC;
  if (c->tied_head) {
    head->owner = d->tokens_op;
  } else {
    spec_set_block(head, (size_t)c->n_embd, (size_t)c->padded_vocab, 0, 1);
    ParamTensor* w = spec_add_tensor(head, "W", (size_t)c->n_embd, (size_t)c->padded_vocab,
                                     INIT_NORMAL, LLAMA_INIT_STD, "lm_head.weight", -1, 1);
    w->real_cols = (size_t)c->vocab_size;
    w->hf_shape[0] = (size_t)c->vocab_size;
  }
  head->has_backward = 0; /* the head and loss run fused, backward included (step_ops.h) */
  spec_add_act(head, "losses", 1, ACT_STAT);
  d->head_op = head->index_self;
}

/* The Llama op list of d->cfg (see llama.h). */
static int llama_build(GptDesc* d) {
  d->ops = calloc((size_t)(LLAMA_OPS_PER_LAYER * d->cfg.n_layer + 3), sizeof *d->ops);
  if (!d->ops) return osdp_fail("out of memory");
  add_embed(d);
  d->first_layer_op = d->nops;
  d->ops_per_layer = LLAMA_OPS_PER_LAYER;
  for (int l = 0; l < d->cfg.n_layer; l++) add_layer(d, l);
  add_rmsnorm(d, "lnf", -1, "model.norm.weight");
  add_head(d);
  return 0;
}

/* The step's working buffers (llama_work.h); gpt_scratch_bytes adds the head's chunk. */
static size_t llama_scratch_bytes(const GptDesc* d, int B, int T, Precision prec, int threads) {
  LlamaWork w = llama_work_layout(d, B, T, prec);
  size_t att = (size_t)threads * attention_scratch_elems(T, d->cfg.head_dim);
  return w.bytes + att * precision_elems(prec).stat; /* the attention tiles: stat's precision */
}

static const ModelFamily llama_family = {
    .name = "llama",
    .title = "Llama",
    .preset = llama_preset,
    .preset_names = "llama-tiny, qwen-tiny, llama-small, smollm2-135m, tinyllama-1.1b, "
                    "llama3.2-1b, llama3-8b, qwen2.5-0.5b",
    .build = llama_build,
    .scratch_bytes = llama_scratch_bytes,
    .f32 = &llama_step_f32,
    .f64 = &llama_step_f64,
    .bf16 = &llama_step_bf16,
    .decode = &llama_decode,
    .hf_prefix = "",
    .hf_tied_head = "lm_head.weight",
    .hf_tied_to = "model.embed_tokens.weight",
    .hf_layer_prefix = "model.layers.",
    .hf_ignored = {"self_attn.rotary_emb.inv_freq", NULL},
    .hf_example = "model.layers.0.self_attn.q_proj.weight",
};

const ModelFamily* family_llama(void) { return &llama_family; }
