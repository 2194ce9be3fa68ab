/*
** family.h: what a model family provides. A family is a spec (the function that expands a
** config into the op list of gpt.h, with every op's tensors, activations, FLOPs and step flags)
** plus its step: one forward and one backward function over its layers, in fp32 for training
** and fp64 for the gradient checks. Everything the runtime, planner and CLI need is derived
** from the op list; the step is the only family code that runs during training.
**
** Adding a family: a file like gpt2.c (presets, config keys, the op list), its step like
** gpt2_step.c, its one-position decoder like gpt2_decode.c, any new kernels
** (kernels/kernel_list.h), and a line in gpt.c's `families`.
*/
#ifndef OSDP_FAMILY_H
#define OSDP_FAMILY_H

#include "model/gpt_step.h"

struct Decoder;

/* A family's decoding (decode.h): `shape` gives the floats of keys per layer and position its KV
** cache holds and of the working buffers of one position; `token` is one position's forward:
** token at position pos (dec->len), its keys and values into the cache, the next token's logits
** into dec->logits. */
typedef struct DecodeFns {
  void (*shape)(const GptDesc* d, int* kv_dim, size_t* work_floats);
  void (*token)(struct Decoder* dec, int token, int pos);
} DecodeFns;

/* One precision's step of a family (see gpt_forward / gpt_backward in gpt_step.h). */
typedef struct StepPasses {
  double (*forward)(const GptDesc* d, GptActs* a, const GptParamHooks* h, const int* slices,
                    GptForwardMode mode, double loss_scale, int* argmax);
  void (*backward)(const GptDesc* d, GptActs* a, const GptParamHooks* h, const int* slices);
} StepPasses;

typedef struct ModelFamily {
  const char* name;                 /* "gpt2" */
  const char* title;                /* for messages: "GPT-2" */
  /* Fills cfg from one of the family's presets; 1 if name is one, 0 if not. */
  int (*preset)(const char* name, GptConfig* cfg);
  const char* preset_names;         /* for messages */
  /* Expands d->cfg into d's op list and roles (gpt.h). Returns 0, or -1 with an error. */
  int (*build)(GptDesc* d);
  /* Bytes of the step's own working buffers for B x T (gpt_scratch_bytes adds the LM head's
  ** chunk and the evaluation's ints after them). */
  size_t (*scratch_bytes)(const GptDesc* d, int B, int T, Precision prec, int threads);
  const StepPasses* f32;
  const StepPasses* f64;
  const StepPasses* bf16;           /* bf16 storage (runs on a backend with a bf16 table) */
  const DecodeFns* decode;
  /* safetensors files: a prefix names may carry ("transformer."), the name of a tied LM head
  ** that must equal the embedding (NULL: untied), the prefix of layer tensors before their
  ** layer number ("h."), and per-layer tensor suffixes files carry that osdp ignores. */
  const char* hf_prefix;
  const char* hf_tied_head;
  const char* hf_tied_to;           /* the tensor a tied head equals ("wte.weight") */
  const char* hf_layer_prefix;
  const char* hf_ignored[4];        /* NULL-terminated */
  const char* hf_example;           /* a layer tensor's name, for messages */
} ModelFamily;

/* The GPT-2 family (gpt2.c). */
const ModelFamily* family_gpt2(void);
/* The Llama family (llama.c): Llama 2/3, SmolLM2, TinyLlama, Qwen2. */
const ModelFamily* family_llama(void);

#endif
