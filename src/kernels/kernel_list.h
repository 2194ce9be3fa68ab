/*
** kernel_list.h: the ONE list of the kernels every backend provides, with their contracts.
**
** KERNEL_LIST(X, real) expands X(return type, name, (parameter list)) once per kernel, with
** `real` (float or double) as the element type. Everything that enumerates the kernels is made
** from it, so they cannot drift apart:
**   - the table types Kernels_f32 / Kernels_f64 (backend.h): one function pointer per entry;
**   - the CPU tables cpu_kernels_f32 / cpu_kernels_f64 (cpu_kernels_real.c, compiled once per
**     type): `.name = name` for every entry, so a kernel without a CPU definition is a compile
**     error, and one whose definition has another signature too;
**   - the CUDA table cuda_kernels_f32 (cuda/cuda_kernels.cu): `cuda_<name>` for every entry,
**     the same two errors;
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
**     layernorm_backward's dinp (the residual stream's gradient) and attention_backward's dqkv
**     always accumulate (+=): the step zeroes dqkv before attention_backward;
**   - pointers are the backend's memory (device memory on a GPU); a kernel that returns a value
**     (the loss sum, the sum of squares) waits for it and returns it on the host;
**   - kernels allocate nothing: any scratch is passed in by the caller;
**   - results are deterministic for a given thread count (no racy reductions).
*/
#ifndef OSDP_KERNEL_LIST_H
#define OSDP_KERNEL_LIST_H

#define KERNEL_LIST(X, real)                                                                  \
  /* out[b,t,:] = wpe[t,:] for b < B, t < T. wpe is [maxT, C]; only its first T rows are     \
  ** read. */                                                                                \
  X(void, embed_pos_forward, (real* out, const real* wpe, int B, int T, int C))               \
  /* dwpe[t,:] += sum_b dout[b,t,:] for t < T (= instead of += when !accumulate; rows >= T    \
  ** are never touched). */                                                                  \
  X(void, embed_pos_backward, (real* dwpe, const real* dout, int B, int T, int C,             \
                               int accumulate))                                               \
  /* Token embedding of one slice of rows of the [C, Vp] table: for every position i < BT and \
  ** every row r < nrows, out[i*ldo + r] += wrows[r*Vp + tok[i]]. The caller offsets out by   \
  ** the slice's first row c0 and passes ldo = C. Tokens are in [0, Vp). */                  \
  X(void, embed_tok_forward, (real* out, int ldo, const int* tok, int BT, const real* wrows,  \
                              int nrows, int Vp))                                             \
  /* dwrows[r*Vp + tok[i]] += dout[i*ldo + r] for every i < BT, r < nrows. Without           \
  ** accumulate the nrows x Vp entries are set to 0 first: every one of them is written. */   \
  X(void, embed_tok_backward, (real* dwrows, const real* dout, int ldo, const int* tok,       \
                               int BT, int nrows, int Vp, int accumulate))                    \
  /* out[BT, OC] (= if !accumulate, += if accumulate) inp[BT, K] @ w[K, OC] (+ bias[OC] when  \
  ** bias != NULL). inp rows have stride ldinp (>= K), so a column slice of a wider input can \
  ** be passed; out rows have stride OC. */                                                  \
  X(void, matmul_forward, (real* out, const real* inp, int ldinp, const real* w,              \
                           const real* bias, int BT, int K, int OC, int accumulate))          \
  /* Backward of matmul_forward: dinp[BT, K] (stride ldinp; columns K..ldinp untouched) =     \
  ** dout @ w^T (OVERWRITTEN; skipped if dinp is NULL); dw[K, OC] += inp^T @ dout; dbias[OC]  \
  ** += column sums of dout (skipped if NULL); dw and dbias are overwritten (=) when          \
  ** !accumulate. */                                                                         \
  X(void, matmul_backward, (real* dinp, real* dw, real* dbias, const real* dout,              \
                            const real* inp, int ldinp, const real* w, int BT, int K, int OC, \
                            int accumulate))                                                  \
  /* LayerNorm over the last dimension, eps = 1e-5: out = (x - mean) * rstd * w + b.          \
  ** mean[BT] and rstd[BT] are saved for the backward pass. */                               \
  X(void, layernorm_forward, (real* out, real* mean, real* rstd, const real* inp,             \
                              const real* w, const real* b, int BT, int C))                   \
  /* Backward: dinp += the input gradient (ACCUMULATES: it is the residual stream's); dw, db  \
  ** += the weight and bias gradients (= when !accumulate). */                               \
  X(void, layernorm_backward, (real* dinp, real* dw, real* db, const real* dout,              \
                               const real* inp, const real* w, const real* mean,              \
                               const real* rstd, int BT, int C, int accumulate))              \
  /* Causal multi-head self-attention without the T x T matrix (FlashAttention-2). qkv is     \
  ** [B, T, 3C] (q, k, v of each position, heads contiguous inside each of q, k, v: head h    \
  ** uses columns h*hs .. h*hs+hs-1, hs = C/NH); out is [B, T, C]. Scores are scaled by       \
  ** 1/sqrt(hs). lse [B, NH, T] receives, per (sample, head, query row), the log-sum-exp of   \
  ** that row's scaled scores over the causal prefix (kept for backward; always finite).      \
  ** scratch holds the backend's attention_scratch_elems(T, hs) elements per kernel thread    \
  ** (the CPU: times kernels_threads(); CUDA uses none and may get NULL). */                   \
  X(void, attention_forward, (real* out, real* lse, const real* qkv, real* scratch, int B,    \
                              int T, int C, int NH))                                          \
  /* Backward; dqkv ACCUMULATES (+=). out and lse are the forward's. Probabilities are        \
  ** recomputed tile by tile: P = exp(S - lse), dV += P^T dO, dP = dO V^T,                    \
  ** dS = P * (dP - rowsum(dO * O)), dQ += dS K * scale, dK += dS^T Q * scale. scratch as for \
  ** the forward. */                                                                         \
  X(void, attention_backward, (real* dqkv, const real* dout, const real* qkv, const real* out, \
                               const real* lse, real* scratch, int B, int T, int C, int NH))  \
  /* Tanh-approximation GELU, elementwise over N values. */                                   \
  X(void, gelu_forward, (real* out, const real* inp, size_t N))                               \
  /* dinp = GELU'(inp) * dout (OVERWRITTEN). */                                               \
  X(void, gelu_backward, (real* dinp, const real* inp, const real* dout, size_t N))           \
  /* Fused softmax cross-entropy over logits[BT, Vp] of which the first V columns are real.  \
  ** targets[i] < 0 marks a position without a loss. For each position with a target,         \
  ** losses[i] = -log softmax(logits[i])[targets[i]]; for the others losses[i] = 0. Then      \
  ** logits is OVERWRITTEN with dloss/dlogits for loss = scale * sum_i losses[i]:             \
  ** dlogits[i, v] = scale * (p[v] - [v == target]) for v < V, 0 for v >= V and for          \
  ** positions without a target. Returns sum_i losses[i] on the host (in double, summed in a  \
  ** fixed order). */                                                                        \
  X(double, crossentropy_forward_backward, (real* logits, real* losses, const int* targets,   \
                                            int BT, int V, int Vp, double scale))             \
  /* Sum of squares of g[0..n), accumulated in double in a fixed order (for gradient          \
  ** clipping), returned on the host. */                                                     \
  X(double, sum_squares, (const real* g, size_t n))                                           \
  /* AdamW step on n parameters (PyTorch's formulation, bias-corrected, decoupled weight      \
  ** decay): g' = g * grad_scale; m = b1 m + (1-b1) g'; v = b2 v + (1-b2) g'^2;               \
  ** w -= lr * ((m / (1-b1^t)) / (sqrt(v / (1-b2^t)) + eps) + wd * w). t is the 1-based step  \
  ** number. */                                                                              \
  X(void, adamw_update, (real* w, const real* g, real* m, real* v, size_t n, float lr,        \
                         float b1, float b2, float eps, float wd, int t, float grad_scale))   \
  /* argmax[i] = index of the largest of logits[i, 0..V) (the first on ties), for i < BT;     \
  ** rows of logits have stride Vp; argmax is in the backend's memory. */                     \
  X(void, logits_argmax, (const real* logits, int BT, int V, int Vp, int* argmax))            \
  /* dst[0..n) += src[0..n). */                                                               \
  X(void, accumulate, (real* dst, const real* src, size_t n))

#endif
