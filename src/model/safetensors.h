/*
** safetensors.h: model weights as a safetensors file with Hugging Face GPT-2 tensor names and
** shapes, so that transformers' GPT2LMHeadModel (and anything that reads the Hub's gpt2
** model.safetensors) loads what osdp trains, and osdp loads GPT-2 weights from the Hub.
**
** The format (https://github.com/huggingface/safetensors):
**   8 bytes   N, the header size, unsigned little-endian
**   N bytes   a UTF-8 JSON object: "__metadata__": {string: string} (optional), and for every
**             tensor "NAME": {"dtype": "F32", "shape": [d0, d1, ...], "data_offsets": [b, e]}
**             with [b, e) relative to the byte buffer that follows the header; the tensors
**             are contiguous, do not overlap and cover the buffer exactly. osdp pads the header
**             with spaces so that the buffer starts at a multiple of 8 bytes.
**   the buffer, each tensor row-major and little-endian.
**
** Tensors (written without the "transformer." prefix, as the Hub's gpt2 file names them; read
** with or without it), L layers, hidden C, vocabulary V (the real one: Hugging Face's GPT-2 has
** no padded rows), maxT positions:
**   wte.weight [V, C]  wpe.weight [maxT, C]
**   h.{i}.ln_1.weight [C]  h.{i}.ln_1.bias [C]
**   h.{i}.attn.c_attn.weight [C, 3C]  h.{i}.attn.c_attn.bias [3C]
**   h.{i}.attn.c_proj.weight [C, C]   h.{i}.attn.c_proj.bias [C]
**   h.{i}.ln_2.weight [C]  h.{i}.ln_2.bias [C]
**   h.{i}.mlp.c_fc.weight [C, 4C]     h.{i}.mlp.c_fc.bias [4C]
**   h.{i}.mlp.c_proj.weight [4C, C]   h.{i}.mlp.c_proj.bias [C]
**   ln_f.weight [C]  ln_f.bias [C]
** GPT-2's linears are Conv1D modules whose weight is stored [in, out]: osdp's own layout, so
** they are copied as they are; only wte is transposed (osdp keeps it [C, Vp]). lm_head.weight is
** tied to wte and not written (transformers ties it on load); on read it is accepted only when
** it equals wte. The attention-mask buffers some files carry (h.{i}.attn.bias,
** h.{i}.attn.masked_bias) are ignored; any other tensor is refused.
**
** __metadata__ holds {"format": "pt"} (what transformers expects) and osdp's shape as strings:
** n_layer, n_head, n_embd, vocab_size, max_seq, padded_vocab, so that osdp can rebuild the model
** from the file alone. A file without them (e.g. from the Hub) gives its shape through its
** tensors, except the number of heads.
*/
#ifndef OSDP_SAFETENSORS_H
#define OSDP_SAFETENSORS_H

#include "model/gpt.h"

/* The largest header accepted (the reference implementation's limit). */
#define SAFETENSORS_MAX_HEADER 100000000ULL

/* Reads the model shape of a safetensors file into cfg (name = the file's base name): L, C, V
** and maxT from its tensors, n_head and padded_vocab from its osdp metadata (n_head = 0 when
** the file does not record it; padded_vocab = V rounded up to 128 then). Metadata that
** disagrees with the tensors is an error. The whole header is checked (see safetensors_load).
** Returns 0, or -1 with a one-line error naming the file and the field. */
int safetensors_read_config(const char* path, GptConfig* cfg);

/* Writes params (op-block order, d->n_params floats) as a safetensors file. Writes path.tmp,
** syncs it and renames it to path, so a failure at any point leaves an existing path as it
** was and removes the temporary file. Returns 0, or -1 with a one-line error naming the file. */
int safetensors_save(const char* path, const GptDesc* d, const float* params);

/* Reads a safetensors file into params (op-block order, d->n_params floats; wte's padded rows
** become 0). Before params is touched, checks everything against the real file size: header
** size bounded by the file and SAFETENSORS_MAX_HEADER, valid UTF-8 JSON, known dtypes, every
** tensor's byte range inside the buffer and equal to product(shape) * dtype size, ranges
** contiguous, non-overlapping and covering the buffer, every tensor model d needs present once
** as F32 with d's shape, no unknown tensor, an lm_head.weight (if any) equal to wte, and the
** metadata's n_head (if recorded) equal to d's; padded_vocab may differ (no padded rows are
** stored). Returns 0, or -1 with a one-line error naming the file and the field. */
int safetensors_load(const char* path, const GptDesc* d, float* params);

#endif
