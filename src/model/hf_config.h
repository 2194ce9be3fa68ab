/*
** hf_config.h: Hugging Face transformers' config.json as an osdp model config (GptConfig), and
** back, so that `--model DIR` (a Hub model directory) or `--model DIR/config.json` builds the
** model a checkpoint on the Hub holds, and `osdp export` writes a directory transformers loads.
**
** model_type (required) picks the keys:
**   "llama", "qwen2"  family "llama" (qwen2: q, k, v projections with biases):
**       num_hidden_layers, hidden_size, num_attention_heads, intermediate_size, vocab_size,
**       max_position_embeddings (-> max_seq) are required; num_key_value_heads (default:
**       num_attention_heads), head_dim (default hidden_size / num_attention_heads),
**       rms_norm_eps (1e-6), rope_theta (10000), tie_word_embeddings (false), hidden_act
**       ("silu", the only one), rope_scaling (null, or rope_type "llama3" with factor,
**       low_freq_factor, high_freq_factor, original_max_position_embeddings; "default" is
**       none) are optional, as in transformers' LlamaConfig / Qwen2Config; newer files'
**       rope_parameters object (rope_type, rope_theta, the llama3 keys) is read the same way.
**   "gpt2"  family GPT-2: n_layer, n_embd, n_head, vocab_size, n_positions (-> max_seq).
** Keys that would change the computation in a way osdp does not implement are refused with one
** line naming the file, the key, its value and what to do: another hidden_act or rope type,
** attention_bias / mlp_bias true on llama (biases on o_proj and the MLP), use_sliding_window
** true (qwen2), mixture-of-experts keys (num_experts, num_local_experts, n_routed_experts,
** moe_intermediate_size), GPT-2's untied head, another activation_function, n_inner != 4 *
** n_embd, layer_norm_epsilon != 1e-5, scale_attn_weights false, scale_attn_by_inverse_layer_idx
** or add_cross_attention true. Every other key (torch_dtype, architectures, token ids,
** initializer_range, use_cache, dropout rates, transformers_version, pretraining_tp, whose
** sliced matmuls compute the same products, ...) is ignored. The name is "_name_or_path"'s
** last component when it has one, else the directory's name (DIR, or DIR of DIR/config.json),
** else the file's.
*/
#ifndef OSDP_HF_CONFIG_H
#define OSDP_HF_CONFIG_H

#include "model/gpt.h"

struct cJSON;

/* Whether JSON object o is a Hugging Face config (it has "model_type"). */
int hf_config_is(const struct cJSON* o);

/* Fills cfg (padded_vocab included) from the Hugging Face config object o read from `path`
** (named in messages; also the name when the object has no _name_or_path). Returns 0, or -1
** with a one-line error naming the file, the key, its value and the fix. Does not run
** gpt_config_validate. */
int hf_config_from_json(const struct cJSON* o, const char* path, GptConfig* cfg);

/* Reads path as a Hugging Face config when it is one: a directory (its config.json, which
** must exist) or a JSON file holding an object with "model_type". Returns 1 when it read one
** into cfg, 0 when path is neither (no such file, not JSON, osdp's own model JSON: cfg
** untouched, for the caller's other readers), -1 with a one-line error. */
int hf_config_load(const char* path, GptConfig* cfg);

/* The config.json transformers loads for cfg (LlamaForCausalLM, Qwen2ForCausalLM when the
** q, k, v projections have biases, GPT2LMHeadModel); the caller cJSON_Delete's it. NULL only
** when out of memory. */
struct cJSON* hf_config_to_json(const GptConfig* cfg);

/* Writes hf_config_to_json(cfg) to path atomically. Returns 0, or -1 with an error naming it. */
int hf_config_write(const GptConfig* cfg, const char* path);

#endif
