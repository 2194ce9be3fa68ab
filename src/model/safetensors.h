/*
** safetensors.h: model weights as safetensors files with Hugging Face tensor names and shapes,
** so that transformers (GPT2LMHeadModel, LlamaForCausalLM, Qwen2ForCausalLM) loads what osdp
** trains, and osdp loads GPT-2 and Llama-family checkpoints from the Hub, sharded or not.
**
** The format (https://github.com/huggingface/safetensors):
**   8 bytes   N, the header size, unsigned little-endian
**   N bytes   a UTF-8 JSON object: "__metadata__": {string: string} (optional), and for every
**             tensor "NAME": {"dtype": "F32", "shape": [d0, d1, ...], "data_offsets": [b, e]}
**             with [b, e) relative to the byte buffer that follows the header; the tensors
**             are contiguous, do not overlap and cover the buffer exactly. osdp pads the header
**             with spaces so that the buffer starts at a multiple of 8 bytes.
**   the buffer, each tensor row-major and little-endian.
** osdp writes F32 and reads F32, BF16 and F16 tensors (converted to fp32 exactly).
**
** Names come from the model family's spec (ParamTensor.hf_name, and family.h's hf_* fields:
** the prefix names may carry, the layer prefix, a tied head, ignored buffers). GPT-2 (written
** without the "transformer." prefix, as the Hub's gpt2 file names them; read with or without
** it), L layers, hidden C, vocabulary V (the real one: no padded rows), maxT positions:
**   wte.weight [V, C]  wpe.weight [maxT, C]
**   h.{i}.ln_1.weight [C]  h.{i}.ln_1.bias [C]
**   h.{i}.attn.c_attn.weight [C, 3C]  h.{i}.attn.c_attn.bias [3C]
**   h.{i}.attn.c_proj.weight [C, C]   h.{i}.attn.c_proj.bias [C]
**   h.{i}.ln_2.weight [C]  h.{i}.ln_2.bias [C]
**   h.{i}.mlp.c_fc.weight [C, 4C]     h.{i}.mlp.c_fc.bias [4C]
**   h.{i}.mlp.c_proj.weight [4C, C]   h.{i}.mlp.c_proj.bias [C]
**   ln_f.weight [C]  ln_f.bias [C]
** GPT-2's linears are Conv1D modules whose weight is stored [in, out]: osdp's own layout, so
** they are copied as they are; only wte is transposed (osdp keeps it [C, Vp]). The Llama family
** (full transformers names, no prefix; Q = heads * head_dim, KV = kv_heads * head_dim, F the
** MLP width): model.embed_tokens.weight [V, C], model.layers.{i}.input_layernorm.weight [C],
** model.layers.{i}.self_attn.{q,k,v,o}_proj.weight [Q, C] [KV, C] [KV, C] [C, Q] (q, k, v
** biases [Q] [KV] [KV] for Qwen2), model.layers.{i}.post_attention_layernorm.weight [C],
** model.layers.{i}.mlp.{gate,up,down}_proj.weight [F, C] [F, C] [C, F], model.norm.weight [C],
** lm_head.weight [V, C] when the head is untied; every 2-D tensor is transposed (transformers
** holds linears [out, in], osdp [in, out]). A tied head (the LM head's op owns no parameters)
** is not written (transformers ties it on load); on read it may be absent or equal to the
** embedding. The buffers some files carry (GPT-2's h.{i}.attn.bias, h.{i}.attn.masked_bias,
** Llama's model.layers.{i}.self_attn.rotary_emb.inv_freq) are ignored; any other tensor is
** refused.
**
** __metadata__ holds {"format": "pt"} (what transformers expects) and the model's whole config
** as strings (the keys of gpt_config_to_json: n_layer, n_head, n_embd, vocab_size, max_seq, and
** for the Llama family family, n_kv_head, head_dim, ffn_dim, tied_head, qkv_bias, norm_eps,
** rope_*), and padded_vocab, so that osdp can rebuild the model from the file alone.
**
** A checkpoint (`path` below) is a safetensors file, a sharded checkpoint's index
** (model.safetensors.index.json: {"weight_map": {tensor: shard file}}; the shards beside it;
** see st_files.h for what is checked), or a directory holding the index or model.safetensors.
** Its config comes from, in order: osdp's __metadata__; for the Hub's layout (an index, or a
** file named model.safetensors) config.json beside it (a Hugging Face config,
** model/hf_config.h; another file there is not one); for GPT-2, the tensors themselves (every
** size but the number of heads).
*/
#ifndef OSDP_SAFETENSORS_H
#define OSDP_SAFETENSORS_H

#include "model/gpt.h"

/* The largest header accepted (the reference implementation's limit). */
#define SAFETENSORS_MAX_HEADER 100000000ULL

/* Reads the model config of the checkpoint at path into cfg (see above; name = the directory's
** name, the directory's for files named model.safetensors*, else the file's base name, or the
** name config.json gives). A GPT-2 checkpoint with neither metadata nor config.json gives
** n_head = 0 (unknown). A config that disagrees with the tensors (vocabulary, width, layers,
** positions) is an error. Every header is checked (see safetensors_load). Returns 0, or -1 with
** a one-line error naming the file and the field. */
int safetensors_read_config(const char* path, GptConfig* cfg);

/* Writes params (op-block order, d->n_params floats) as a safetensors file. Writes path.tmp,
** syncs it and renames it to path, so a failure at any point leaves an existing path as it
** was and removes the temporary file. Returns 0, or -1 with a one-line error naming the file. */
int safetensors_save(const char* path, const GptDesc* d, const float* params);

/* Writes DIR/model.safetensors and DIR/config.json (hf_config_write): a directory that
** transformers' from_pretrained loads. Makes DIR if needed. Returns 0, or -1 with an error. */
int safetensors_save_dir(const char* dir, const GptDesc* d, const float* params);

/* Reads the checkpoint at path into params (op-block order, d->n_params floats; padded columns
** become 0). Before params is touched, checks everything against the real file sizes: header
** size bounded by the file and SAFETENSORS_MAX_HEADER, valid UTF-8 JSON, known dtypes, every
** tensor's byte range inside the buffer and equal to product(shape) * dtype size, ranges
** contiguous, non-overlapping and covering the buffer; for an index, that it and its shards
** agree; then every tensor model d needs present once as F32, BF16 or F16 with d's shape, no
** unknown tensor, a tied head (if any) equal to the embedding, and the metadata's config (if
** recorded) equal to d's; padded_vocab may differ (no padded rows are stored). Returns 0, or
** -1 with a one-line error naming the file and the field. */
int safetensors_load(const char* path, const GptDesc* d, float* params);

/* 1 when directory dir holds a checkpoint (model.safetensors.index.json or model.safetensors). */
int safetensors_dir_holds(const char* dir);
/* 1 when the regular file at path is JSON text (a sharded checkpoint's index), not a
** safetensors file. */
int safetensors_is_index(const char* path);

#endif
