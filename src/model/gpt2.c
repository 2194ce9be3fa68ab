/*
** gpt2.c: the GPT-2 family's spec: its presets and its op list (gpt2.h), each op with its named
** parameter tensors (shapes, initialisation, weight decay, names in llm.c and safetensors
** files), activation tensors, FLOPs and step flags (gpt.h). The step is in gpt2_step.c.
*/
#include "model/gpt2.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"
#include "kernels/cpu_kernels.h"
#include "model/family.h"
#include "model/spec_build.h"

typedef struct Preset { const char* name; int L, C, NH, V, maxT; } Preset;

static const Preset presets[] = {
    {"tiny", 2, 64, 4, 256, 256},
    {"small", 4, 256, 4, 8192, 512},
    {"gpt2-124m", 12, 768, 12, 50257, 1024},
    {"gpt2-350m", 24, 1024, 16, 50257, 1024},
    {"gpt2-774m", 36, 1280, 20, 50257, 1024},
    {"gpt2-1.5b", 48, 1600, 25, 50257, 1024},
};
#define NPRESETS ((int)(sizeof presets / sizeof presets[0]))

/* Fills cfg from the preset called name; 1 if there is one, else 0. */
static int gpt2_preset(const char* name, GptConfig* c) {
  for (int i = 0; i < NPRESETS; i++) {
    if (strcmp(name, presets[i].name) != 0) continue;
    const Preset* p = &presets[i];
    snprintf(c->name, sizeof c->name, "%s", p->name);
    c->n_layer = p->L; c->n_embd = p->C; c->n_head = p->NH;
    c->vocab_size = p->V; c->max_seq = p->maxT;
    return 1;
  }
  return 0;
}

/* ---- Building the op list ------------------------------------------------------------ */

/* The llm.c tensor order: each kind's slot, its layers' tensors one after another. */
enum { SLOT_WTE, SLOT_WPE, SLOT_LN1W, SLOT_LN1B, SLOT_QKVW, SLOT_QKVB, SLOT_PROJW, SLOT_PROJB,
       SLOT_LN2W, SLOT_LN2B, SLOT_FCW, SLOT_FCB, SLOT_FCPROJW, SLOT_FCPROJB, SLOT_LNFW, SLOT_LNFB };

/* Adds a linear K -> OC with bias (W N(0, std), b 0) named hf_base.weight and .bias. */
static void add_linear(GptDesc* d, const char* name, int layer, int K, int OC, int residual,
                       const char* hf_base, int slot_w) {
  GptOp* op = spec_add_op(d, name, OP_LINEAR, layer);
  spec_set_block(op, (size_t)K, (size_t)OC, (size_t)OC, 1);
  op->K = K; op->OC = OC; op->residual = residual;
  op->flops_tok = 2.0 * K * OC;
  double std = residual ? 0.02 / sqrt(2.0 * d->cfg.n_layer) : 0.02;
  char hf[64];
  snprintf(hf, sizeof hf, "%s.weight", hf_base);
  spec_add_tensor(op, "W", (size_t)K, (size_t)OC, INIT_NORMAL, std, hf, slot_w, 0);
  snprintf(hf, sizeof hf, "%s.bias", hf_base);
  spec_add_tensor(op, "b", 0, (size_t)OC, INIT_ZEROS, 0, hf, slot_w + 1, 0);
  spec_add_act(op, "out", (size_t)OC, ACT_VALUE);
}

/* Adds a LayerNorm over C features (gamma 1, beta 0: a tail of 2C, never split). */
static void add_layernorm(GptDesc* d, const char* name, int layer, const char* hf_base, int slot_w) {
  size_t C = (size_t)d->cfg.n_embd;
  GptOp* op = spec_add_op(d, name, OP_LAYERNORM, layer);
  spec_set_block(op, 0, 0, 2 * C, 0);
  char hf[64];
  snprintf(hf, sizeof hf, "%s.weight", hf_base);
  spec_add_tensor(op, "gamma", 0, C, INIT_ONES, 0, hf, slot_w, 0);
  snprintf(hf, sizeof hf, "%s.bias", hf_base);
  spec_add_tensor(op, "beta", 0, C, INIT_ZEROS, 0, hf, slot_w + 1, 0);
  spec_add_act(op, "out", C, ACT_VALUE);
  spec_add_act(op, "mean", 1, ACT_STAT);
  spec_add_act(op, "rstd", 1, ACT_STAT);
}

/* Adds the token + position embedding: wte [C, Vp] (the split part; its padded columns start at
** 0: no token or logit uses them) and wpe [maxT, C] (a decaying tail). It keeps the tokens and
** targets of the micro-batch after its output. */
static void add_embed(GptDesc* d) {
  const GptConfig* c = &d->cfg;
  size_t C = (size_t)c->n_embd, Vp = (size_t)c->padded_vocab;
  GptOp* e = spec_add_op(d, "embed", OP_EMBED, -1);
  spec_set_block(e, C, Vp, (size_t)c->max_seq * C, 1);
  e->tail_decay = 1;
  e->K = c->n_embd; e->OC = c->padded_vocab;
  e->fwd_reversed = 1; /* the last slice holds wpe, whose kernel initialises the output */
  e->bwd_weight = 0;
  ParamTensor* wte = spec_add_tensor(e, "wte", C, Vp, INIT_NORMAL, 0.02, "wte.weight", SLOT_WTE, 1);
  wte->real_cols = (size_t)c->vocab_size;
  wte->hf_shape[0] = (size_t)c->vocab_size; /* safetensors hold only the V real tokens */
  spec_add_tensor(e, "wpe", (size_t)c->max_seq, C, INIT_NORMAL, 0.02, "wpe.weight", SLOT_WPE, 0);
  spec_add_act(e, "out", C, ACT_VALUE);
  spec_add_act(e, "tokens", 1, ACT_INT);
  spec_add_act(e, "targets", 1, ACT_INT);
  d->tokens_op = e->index_self;
}

/* Adds transformer layer l: ln1, qkv, attn, proj, ln2, fc, gelu, fcproj (its output). */
static void add_layer(GptDesc* d, int l) {
  int C = d->cfg.n_embd;
  char nm[24], hf[48];
  snprintf(nm, sizeof nm, "h%d.ln1", l);  snprintf(hf, sizeof hf, "h.%d.ln_1", l);
  add_layernorm(d, nm, l, hf, SLOT_LN1W);
  snprintf(nm, sizeof nm, "h%d.qkv", l);  snprintf(hf, sizeof hf, "h.%d.attn.c_attn", l);
  add_linear(d, nm, l, C, 3 * C, 0, hf, SLOT_QKVW);
  snprintf(nm, sizeof nm, "h%d.attn", l);
  GptOp* att = spec_add_op(d, nm, OP_ATTENTION, l);
  att->flops_tok_T = 4.0 * C;
  spec_add_act(att, "out", (size_t)C, ACT_VALUE);
  spec_add_act(att, "lse", (size_t)d->cfg.n_head, ACT_STAT); /* [B, NH, T]: each query row's log-sum-exp */
  snprintf(nm, sizeof nm, "h%d.proj", l); snprintf(hf, sizeof hf, "h.%d.attn.c_proj", l);
  add_linear(d, nm, l, C, C, 1, hf, SLOT_PROJW);
  snprintf(nm, sizeof nm, "h%d.ln2", l);  snprintf(hf, sizeof hf, "h.%d.ln_2", l);
  add_layernorm(d, nm, l, hf, SLOT_LN2W);
  snprintf(nm, sizeof nm, "h%d.fc", l);   snprintf(hf, sizeof hf, "h.%d.mlp.c_fc", l);
  add_linear(d, nm, l, C, 4 * C, 0, hf, SLOT_FCW);
  snprintf(nm, sizeof nm, "h%d.gelu", l);
  spec_add_act(spec_add_op(d, nm, OP_GELU, l), "out", 4 * (size_t)C, ACT_VALUE);
  snprintf(nm, sizeof nm, "h%d.fcproj", l); snprintf(hf, sizeof hf, "h.%d.mlp.c_proj", l);
  add_linear(d, nm, l, 4 * C, C, 1, hf, SLOT_FCPROJW);
  d->ops[d->nops - 1].layer_output = 1;
}

/* The GPT-2 op list of d->cfg (see gpt2.h). */
static int gpt2_build(GptDesc* d) {
  const GptConfig* cfg = &d->cfg;
  d->ops = calloc((size_t)(GPT_OPS_PER_LAYER * cfg->n_layer + 3), sizeof *d->ops);
  if (!d->ops) return osdp_fail("out of memory");
  add_embed(d);
  d->first_layer_op = d->nops;
  d->ops_per_layer = GPT_OPS_PER_LAYER;
  for (int l = 0; l < cfg->n_layer; l++) add_layer(d, l);
  add_layernorm(d, "lnf", -1, "ln_f", SLOT_LNFW);
  GptOp* head = spec_add_op(d, "lm_head", OP_LMHEAD, -1);
  head->owner = d->tokens_op; /* tied: wte is the LM head's [in, out] weight */
  head->K = cfg->n_embd; head->OC = cfg->padded_vocab;
  head->flops_tok = 2.0 * head->K * head->OC;
  head->has_backward = 0; /* the head and loss run fused, backward included (step_ops.h) */
  spec_add_act(head, "losses", 1, ACT_STAT);
  d->head_op = head->index_self;
  return 0;
}

size_t gpt2_work_att_offset(size_t BTC, size_t act_bytes, size_t stat_bytes) {
  size_t end = 9 * BTC * act_bytes; /* dres [BT, C] + two [BT, 4C] */
  return (end + stat_bytes - 1) / stat_bytes * stat_bytes;
}

/* The working buffers of GPT-2's step: dres [BT, C] + two [BT, 4C] work buffers + per-thread
** attention scratch in stat's precision (also used by the forward); gpt_scratch_bytes adds the
** head's chunk. */
static size_t gpt2_scratch_bytes(const GptDesc* d, int B, int T, Precision prec, int threads) {
  size_t BT = (size_t)B * (size_t)T, C = (size_t)d->cfg.n_embd;
  size_t att = (size_t)threads * attention_scratch_elems(T, d->cfg.n_embd / d->cfg.n_head);
  StepElems e = precision_elems(prec);
  return gpt2_work_att_offset(BT * C, e.act, e.stat) + att * e.stat;
}

static const ModelFamily gpt2_family = {
    .name = "gpt2",
    .title = "GPT-2",
    .preset = gpt2_preset,
    .preset_names = "tiny, small, gpt2-124m, gpt2-350m, gpt2-774m, gpt2-1.5b",
    .build = gpt2_build,
    .scratch_bytes = gpt2_scratch_bytes,
    .f32 = &gpt2_step_f32,
    .f64 = &gpt2_step_f64,
    .bf16 = &gpt2_step_bf16,
    .decode = &gpt2_decode,
    .hf_prefix = "transformer.",
    .hf_tied_head = "lm_head.weight",
    .hf_tied_to = "wte.weight",
    .hf_layer_prefix = "h.",
    .hf_ignored = {"attn.bias", "attn.masked_bias", NULL},
    .hf_example = "h.0.attn.c_attn.weight",
};

const ModelFamily* family_gpt2(void) { return &gpt2_family; }
