/*
** kernel_list.h: the ONE list of the kernels every backend provides, with their contracts.
**
** KERNEL_LIST(X, act, wt, grad, stat) expands X(return type, name, (parameter list)) once per
** kernel. Every tensor parameter has one of four element types, named by its role:
**   - act:  activations and their gradients (what the step's activation layout holds);
**   - wt:   the weights (and biases) as the step reads them: the compute copy of a parameter;
**   - grad: parameter gradients and what the optimizer keeps beside them (master weights,
**           AdamW's moments), which share the gradients' precision;
**   - stat: the small fp32-or-better values: saved row statistics (LayerNorm's mean and rstd,
**           RMSNorm's rstd, attention's log-sum-exp), per-position losses, RoPE's frequencies.
** A table of one precision sets the four: fp32 (Kernels_f32) and fp64 (Kernels_f64, the
** gradient checks) make all four float or double; bf16 storage (Kernels_bf16, CUDA only)
** makes act and wt osdp_bf16 and keeps grad and stat float, so the step's activations and
** weight copies take half the bytes while gradients, optimizer state and statistics stay fp32.
** Everything that enumerates the kernels is made from the list, so they cannot drift apart:
**   - the table types Kernels_f32 / Kernels_f64 / Kernels_bf16 (backend.h): one function
**     pointer per entry;
**   - the CPU tables cpu_kernels_f32 / cpu_kernels_f64 (cpu_kernels_real.c, compiled once per
**     type): `.name = name` for every entry, so a kernel without a CPU definition is a compile
**     error, and one whose definition has another signature too;
**   - the CUDA tables cuda_kernels_f32 and cuda_kernels_bf16 (cuda/cuda_kernels.cu):
**     `cuda_<name>` for every entry (a function template, instantiated per table), the same two
**     errors;
**   - the test that every entry of every built table is set (tests/test_kernels.c,
**     tests/test_cuda_kernels.c).
** The list only builds tables and struct members: every kernel is defined under its own name
** (`static void matmul_forward(...)` on the CPU, `static void cuda_matmul_forward(...)` on CUDA),
** so grep and ctags find it.
**
** Conventions of all kernels (row-major, contiguous unless a leading dimension is given):
**   - a linear weight is stored [in, out] (K rows of OC values), so a slice along the reduction
**     dimension is a contiguous block of rows: y = sum_i x[:, s_i] W[s_i, :];
**   - the tied token embedding is stored [C, Vp] (the LM head's [in, out] weight), Vp = the
**     vocabulary padded to a multiple of 128 as llm.c pads it;
**   - a kernel that writes a PARAMETER gradient takes `accumulate`: 1 adds into the buffer (+=),
**     0 overwrites it (=, the first use of the gradient in a step), so no gradient needs zeroing;
**   - INPUT gradients: matmul_backward's and gelu_backward's dinp are always overwritten (=);
**     layernorm_backward's and rmsnorm_backward's dinp (the residual stream's gradient) and
**     attention_backward's dq, dk, dv always accumulate (+=): the step zeroes them first;
**   - pointers are the backend's memory (device memory on a GPU); a kernel that returns a value
**     (the loss sum, the sum of squares) waits for it and returns it on the host;
**   - kernels allocate nothing: any scratch is passed in by the caller;
**   - results are deterministic for a given thread count (no racy reductions);
**   - a kernel computes in fp32 or better whatever its storage (bf16 values are widened as they
**     are read) and rounds a bf16 result once, to nearest even, as it is stored.
*/
#ifndef OSDP_KERNEL_LIST_H
#define OSDP_KERNEL_LIST_H

#define KERNEL_LIST(X, act, wt, grad, stat)                                                       \
  /* out[b,t,:] = wpe[t,:] for b < B, t < T. wpe is [maxT, C]; only its first T rows are          \
  ** read. */                                                                                     \
  X(void, embed_pos_forward, (act* out, const wt* wpe, int B, int T, int C))                      \
  /* dwpe[t,:] += sum_b dout[b,t,:] for t < T (= instead of += when !accumulate; rows >= T        \
  ** are never touched). */                                                                       \
  X(void, embed_pos_backward, (grad* dwpe, const act* dout, int B, int T, int C,                  \
                               int accumulate))                                                   \
  /* Token embedding of one slice of rows of the [C, Vp] table: for every position i < BT and     \
  ** every row r < nrows, out[i*ldo + r] += wrows[r*Vp + tok[i]]. The caller offsets out by       \
  ** the slice's first row c0 and passes ldo = C. Tokens are in [0, Vp). */                       \
  X(void, embed_tok_forward, (act* out, int ldo, const int* tok, int BT, const wt* wrows,         \
                              int nrows, int Vp))                                                 \
  /* dwrows[r*Vp + tok[i]] += dout[i*ldo + r] for every i < BT, r < nrows. Without                \
  ** accumulate the nrows x Vp entries are set to 0 first: every one of them is written. */       \
  X(void, embed_tok_backward, (grad* dwrows, const act* dout, int ldo, const int* tok,            \
                               int BT, int nrows, int Vp, int accumulate))                        \
  /* out[BT, OC] (= if !accumulate, += if accumulate) inp[BT, K] @ w[K, OC] (+ bias[OC] when      \
  ** bias != NULL). inp rows have stride ldinp (>= K), so a column slice of a wider input can     \
  ** be passed; out rows have stride OC. */                                                       \
  X(void, matmul_forward, (act* out, const act* inp, int ldinp, const wt* w,                      \
                           const wt* bias, int BT, int K, int OC, int accumulate))                \
  /* Backward of matmul_forward: dinp[BT, K] (stride ldinp; columns K..ldinp untouched) =         \
  ** dout @ w^T (OVERWRITTEN; skipped if dinp is NULL); dw[K, OC] += inp^T @ dout; dbias[OC]      \
  ** += column sums of dout (skipped if NULL); dw and dbias are overwritten (=) when              \
  ** !accumulate. */                                                                              \
  X(void, matmul_backward, (act* dinp, grad* dw, grad* dbias, const act* dout,                    \
                            const act* inp, int ldinp, const wt* w, int BT, int K, int OC,        \
                            int accumulate))                                                      \
  /* LayerNorm over the last dimension, eps = 1e-5: out = (x - mean) * rstd * w + b.              \
  ** mean[BT] and rstd[BT] are saved for the backward pass. */                                    \
  X(void, layernorm_forward, (act* out, stat* mean, stat* rstd, const act* inp,                   \
                              const wt* w, const wt* b, int BT, int C))                           \
  /* Backward: dinp += the input gradient (ACCUMULATES: it is the residual stream's); dw, db      \
  ** += the weight and bias gradients (= when !accumulate). */                                    \
  X(void, layernorm_backward, (act* dinp, grad* dw, grad* db, const act* dout,                    \
                               const act* inp, const wt* w, const stat* mean,                     \
                               const stat* rstd, int BT, int C, int accumulate))                  \
  /* RMSNorm over the last dimension: out = x * rstd * w, rstd = 1 / sqrt(mean(x^2) + eps),       \
  ** the sum of squares and rstd computed in double per row; rstd[BT] is saved for backward. */   \
  X(void, rmsnorm_forward, (act* out, stat* rstd, const act* inp, const wt* w, int BT,            \
                            int C, double eps))                                                   \
  /* Backward: dinp += the input gradient (ACCUMULATES, like layernorm_backward); dw += the       \
  ** weight gradient (= when !accumulate). */                                                     \
  X(void, rmsnorm_backward, (act* dinp, grad* dw, const act* dout, const act* inp,                \
                             const wt* w, const stat* rstd, int BT, int C, int accumulate))       \
  /* SwiGLU's product, elementwise over N values: out = silu(gate) * up, silu(x) = x / (1 +       \
  ** exp(-x)). */                                                                                 \
  X(void, swiglu_forward, (act* out, const act* gate, const act* up, size_t N))                   \
  /* Backward: dgate = dout * up * silu'(gate), dup = dout * silu(gate) (both OVERWRITTEN). */    \
  X(void, swiglu_backward, (act* dgate, act* dup, const act* dout, const act* gate,               \
                            const act* up, size_t N))                                             \
  /* Rotary position embedding, in place, Hugging Face's rotate-half convention: x has B*T        \
  ** rows of stride ld, row b*T + t at position t; each of its nh heads (columns h*hs ..          \
  ** h*hs+hs-1, hs even) is rotated pairwise: for j < hs/2, with a = t * inv_freq[j] (the         \
  ** product in stat's precision, as transformers computes it), x1 = x[j], x2 = x[j + hs/2]:      \
  ** x[j] = x1 cos a - x2 sin a, x[j + hs/2] = x2 cos a + x1 sin a. inv_freq[hs/2] is in the      \
  ** backend's memory. */                                                                         \
  X(void, rope_forward, (act* x, int ld, const stat* inv_freq, int B, int T, int nh, int hs))     \
  /* Backward: the inverse rotation (angle -a) of the gradient dx, in place. */                   \
  X(void, rope_backward, (act* dx, int ld, const stat* inv_freq, int B, int T, int nh,            \
                          int hs))                                                                \
  /* Causal self-attention without the T x T matrix (FlashAttention-2), with grouped-query        \
  ** attention. q has B*T rows of stride ldq holding NH heads of hs (head h: columns h*hs ..      \
  ** h*hs+hs-1); k and v have rows of stride ldkv holding NKV heads each; query head h uses       \
  ** K/V head h / (NH / NKV) (transformers' repeat_kv; NKV divides NH). GPT-2's fused [B, T,      \
  ** 3C] qkv is q = qkv, k = qkv + C, v = qkv + 2C, ldq = ldkv = 3C, NKV = NH. out is [B, T,      \
  ** NH*hs] contiguous. Scores are scaled by 1/sqrt(hs). lse [B, NH, T] receives, per             \
  ** (sample, head, query row), the log-sum-exp of that row's scaled scores over the causal       \
  ** prefix (kept for backward; always finite). scratch holds the backend's                       \
  ** attention_scratch_elems(T, hs) elements per kernel thread (the CPU: times                    \
  ** kernels_threads(); CUDA uses none and may get NULL), in stat's precision: the tiles are      \
  ** computed in fp32 or better whatever the storage. */                                          \
  X(void, attention_forward, (act* out, stat* lse, const act* q, const act* k,                    \
                              const act* v, int ldq, int ldkv, stat* scratch, int B, int T,       \
                              int NH, int NKV, int hs))                                           \
  /* Backward; dq, dk, dv (strides ldq, ldkv as q, k, v) ACCUMULATE (+=); a K/V head's            \
  ** gradient sums over the query heads that share it, in a fixed order. out and lse are the      \
  ** forward's. Probabilities are recomputed tile by tile: P = exp(S - lse), dV += P^T dO,        \
  ** dP = dO V^T, dS = P * (dP - rowsum(dO * O)), dQ += dS K * scale, dK += dS^T Q * scale.       \
  ** scratch as for the forward. */                                                               \
  X(void, attention_backward, (act* dq, act* dk, act* dv, const act* dout, const act* q,          \
                               const act* k, const act* v, int ldq, int ldkv,                     \
                               const act* out, const stat* lse, stat* scratch, int B, int T,      \
                               int NH, int NKV, int hs))                                          \
  /* Tanh-approximation GELU, elementwise over N values. */                                       \
  X(void, gelu_forward, (act* out, const act* inp, size_t N))                                     \
  /* dinp = GELU'(inp) * dout (OVERWRITTEN). */                                                   \
  X(void, gelu_backward, (act* dinp, const act* inp, const act* dout, size_t N))                  \
  /* GPT-2's fc linear, then GELU: pre[BT, OC] as matmul_forward(pre, inp, ldinp, w, bias,        \
  ** BT, K, OC, accumulate) leaves it (the pre-activation gelu_backward needs), then out[BT,      \
  ** OC] = GELU(pre) as gelu_forward leaves it (OVERWRITTEN). The CPU makes exactly those two     \
  ** calls; CUDA fuses them where it can (a cuBLASLt epilogue), to fp32 rounding. */              \
  X(void, matmul_gelu_forward, (act* out, act* pre, const act* inp, int ldinp,                    \
                                const wt* w, const wt* bias, int BT, int K, int OC,               \
                                int accumulate))                                                  \
  /* Fused softmax cross-entropy over logits[BT, Vp] of which the first V columns are real.       \
  ** targets[i] < 0 marks a position without a loss. For each position with a target,             \
  ** losses[i] = -log softmax(logits[i])[targets[i]]; for the others losses[i] = 0. Then          \
  ** logits is OVERWRITTEN with dloss/dlogits for loss = scale * sum_i losses[i]:                 \
  ** dlogits[i, v] = scale * (p[v] - [v == target]) for v < V, 0 for v >= V and for               \
  ** positions without a target. Nothing comes back to the host: the LM head runs it per          \
  ** chunk of rows, then sums all the losses once (sum_values): one wait, not one a chunk. */     \
  X(void, crossentropy_forward_backward, (act* logits, stat* losses, const int* targets,          \
                                          int BT, int V, int Vp, double scale))                   \
  /* Sum of x[0..n) in double, added one by one in index order (a sequential loop's order; a      \
  ** GPU may split it, in a fixed order), returned on the host: the loss of a step. */            \
  X(double, sum_values, (const stat* x, size_t n))                                                \
  /* Sum of squares of g[0..n), accumulated in double in a fixed order (for gradient              \
  ** clipping), returned on the host. */                                                          \
  X(double, sum_squares, (const grad* g, size_t n))                                               \
  /* Sum of squares of several arrays: sum_squares(g[j], n[j]) for j < count, added in order j    \
  ** = 0, 1, ... to 0 in double (the value of adding the sum_squares results on the host), and    \
  ** returned on the host after one wait. g and n are host arrays, the g[j] the backend's         \
  ** memory. The gradient norm: every slice in one pass, one host read per step. */               \
  X(double, sum_squares_multi, (const grad* const* g, const size_t* n, int count))                \
  /* AdamW step on n parameters (PyTorch's formulation, bias-corrected, decoupled weight          \
  ** decay): g' = g * grad_scale; m = b1 m + (1-b1) g'; v = b2 v + (1-b2) g'^2;                   \
  ** w -= lr * ((m / (1-b1^t)) / (sqrt(v / (1-b2^t)) + eps) + wd * w). t is the 1-based step      \
  ** number. */                                                                                   \
  X(void, adamw_update, (grad* w, const grad* g, grad* m, grad* v, size_t n, float lr,            \
                         float b1, float b2, float eps, float wd, int t, float grad_scale))       \
  /* AdamW on several arrays: adamw_update(w[j], g[j], m[j], v[j], n[j], lr, b1, b2, eps,         \
  ** wd[j], t, grad_scale) for every j < count (the same arithmetic, so the same values). w, g,   \
  ** m, v, n and wd are host arrays, the w[j] ... v[j] the backend's memory. The optimizer        \
  ** step: every slice in one call (a few launches on a GPU, not one or two per slice). */        \
  X(void, adamw_update_multi, (grad* const* w, const grad* const* g, grad* const* m,              \
                               grad* const* v, const size_t* n, const float* wd, int count,       \
                               float lr, float b1, float b2, float eps, int t,                    \
                               float grad_scale))                                                 \
  /* argmax[i] = index of the largest of logits[i, 0..V) (the first on ties), for i < BT;         \
  ** rows of logits have stride Vp; argmax is in the backend's memory. */                         \
  X(void, logits_argmax, (const act* logits, int BT, int V, int Vp, int* argmax))                 \
  /* dst[0..n) = src[0..n) in dst's type: the compute copy of master weights (rounded to       \
  ** nearest even in bf16 storage; a plain copy where wt and grad are one type). */            \
  X(void, compute_copy, (wt* dst, const grad* src, size_t n))                                  \
  /* dst[0..n) += src[0..n). */                                                                   \
  X(void, accumulate, (act* dst, const act* src, size_t n))

#endif
