/*
** cuda_lt.cu: a linear's forward with its bias, or its bias and GELU, in cuBLASLt's epilogue
** (CUBLASLT_EPILOGUE_BIAS, CUBLASLT_EPILOGUE_GELU_AUX_BIAS): one pass over the output instead of
** a bias kernel before the product or a GELU kernel after it. Used by matmul_forward and
** matmul_gelu_forward (cuda_kernels.cu), which keep their unfused path for what an epilogue
** cannot express and for a product cuBLASLt has no algorithm for.
**
** Layout as in cuda_kernels.cu's gemm: cuBLASLt is column-major, so the row-major
** out[BT, OC] = inp[BT, K] @ w[K, OC] is the column-major D[OC, BT] = W^T[OC, K] X^T[K, BT]
** (A = w with ld OC, B = inp with ld ldinp, C = D = out with ld OC, in place); the bias (length
** OC = D's rows) is broadcast along D's columns, as the epilogue defines it. Storage is fp32 or
** bf16 (all operands alike); the compute type is set_matmul_mode's on fp32 storage (fp32, TF32
** or bf16 tensor cores), as for cuBLAS's products, and CUBLAS_COMPUTE_32F on bf16 storage
** (bf16 products accumulated in fp32, D rounded once).
** Descriptors are made per call (a few microseconds of host time, as llm.c does); the
** heuristic is told the true alignment of every pointer, since a slice's input starts anywhere.
*/
#include "kernels/cuda/cuda_internal.cuh"

/* The descriptors of one product; lt_free destroys those that were made. */
typedef struct LtProduct {
  cublasLtMatmulDesc_t op;
  cublasLtMatrixLayout_t a, b, d;
  cublasLtMatmulPreference_t pref;
} LtProduct;

/* Destroys the descriptors of p that exist (the end of every path of cuda_lt_linear). */
static void lt_free(LtProduct* p) {
  if (p->pref) CUDA_CHECK(cublasLtMatmulPreferenceDestroy(p->pref));
  if (p->d) CUDA_CHECK(cublasLtMatrixLayoutDestroy(p->d));
  if (p->b) CUDA_CHECK(cublasLtMatrixLayoutDestroy(p->b));
  if (p->a) CUDA_CHECK(cublasLtMatrixLayoutDestroy(p->a));
  if (p->op) CUDA_CHECK(cublasLtMatmulDescDestroy(p->op));
}

/* The largest power of two up to 256 (cuBLASLt's default assumption) dividing p's address. */
static uint32_t alignment_of(const void* p) {
  uint32_t align = 256;
  while (align > 1 && (uintptr_t)p % align != 0) align /= 2;
  return align;
}

/* Sets one attribute of the operation (value v of its documented type). */
static void op_set(cublasLtMatmulDesc_t op, cublasLtMatmulDescAttributes_t attr, const void* v,
                   size_t size) {
  CUDA_CHECK(cublasLtMatmulDescSetAttribute(op, attr, v, size));
}

/* Sets one preference of the heuristic (value v of its documented type). */
static void pref_set(cublasLtMatmulPreference_t pref, cublasLtMatmulPreferenceAttributes_t attr,
                     const void* v, size_t size) {
  CUDA_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, attr, v, size));
}

/* The operation: no transposes, host scalars (fp32 in both storages), the epilogue with its bias
** and aux (aux's leading dimension OC, the rows of D). The bias and aux types are left at their
** default, D's (fp32 or bf16): cublasLt.h documents their attributes for other types (fp8
** outputs, IMMA), and a type set where the kernel does not take one makes cublasLtMatmul fail. */
static void lt_operation(LtProduct* p, cublasComputeType_t compute, const void* bias, void* aux,
                         int OC, cublasLtEpilogue_t epilogue) {
  CUDA_CHECK(cublasLtMatmulDescCreate(&p->op, compute, CUDA_R_32F));
  int32_t no_transpose = CUBLAS_OP_N, host = CUBLASLT_POINTER_MODE_HOST;
  uint32_t kind = (uint32_t)epilogue;
  op_set(p->op, CUBLASLT_MATMUL_DESC_POINTER_MODE, &host, sizeof host);
  op_set(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &no_transpose, sizeof no_transpose);
  op_set(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &no_transpose, sizeof no_transpose);
  op_set(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &kind, sizeof kind);
  if (bias != NULL) op_set(p->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias);
  if (aux != NULL) {
    int64_t aux_ld = OC;
    op_set(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof aux);
    op_set(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld, sizeof aux_ld);
  }
}

/* The heuristic's preferences: the shared workspace, and the true alignment of A (w), B (inp)
** and C = D (out). */
static void lt_preference(LtProduct* p, const void* w, const void* inp, const void* out) {
  CUDA_CHECK(cublasLtMatmulPreferenceCreate(&p->pref));
  uint64_t workspace = cuda_ctx.gemm_workspace_bytes;
  uint32_t align_a = alignment_of(w), align_b = alignment_of(inp), align_d = alignment_of(out);
  pref_set(p->pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace, sizeof workspace);
  pref_set(p->pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align_a, sizeof align_a);
  pref_set(p->pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align_b, sizeof align_b);
  pref_set(p->pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align_d, sizeof align_d);
  pref_set(p->pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align_d, sizeof align_d);
}

/* See cuda_internal.cuh. The product and its epilogue in one cublasLtMatmul, with the algorithm
** the heuristic picks for these shapes, alignments and workspace; none (NOT_SUPPORTED, or no
** result) returns -1 before anything is queued. */
template <typename T>
int cuda_lt_linear(T* out, T* aux, const T* inp, int ldinp, const T* w, const T* bias, int BT,
                   int K, int OC, float beta, cublasLtEpilogue_t epilogue) {
  LtProduct p = {};
  const cudaDataType_t type = cuda_type_of(out);
  lt_operation(&p, type == CUDA_R_32F ? cuda_ctx.gemm_compute : CUBLAS_COMPUTE_32F, bias, aux,
               OC, epilogue);
  CUDA_CHECK(cublasLtMatrixLayoutCreate(&p.a, type, OC, K, OC));
  CUDA_CHECK(cublasLtMatrixLayoutCreate(&p.b, type, K, BT, ldinp));
  CUDA_CHECK(cublasLtMatrixLayoutCreate(&p.d, type, OC, BT, OC));
  lt_preference(&p, w, inp, out);
  cublasLtMatmulHeuristicResult_t found;
  int count = 0;
  cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(cuda_ctx.cublaslt, p.op, p.a, p.b, p.d,
                                                         p.d, p.pref, 1, &found, &count);
  if (status != CUBLAS_STATUS_NOT_SUPPORTED)
    cuda_check(status, "cublasLtMatmulAlgoGetHeuristic");
  int usable = status == CUBLAS_STATUS_SUCCESS && count > 0;
  if (usable) {
    const float alpha = 1.0f;
    CUDA_CHECK(cublasLtMatmul(cuda_ctx.cublaslt, p.op, &alpha, w, p.a, inp, p.b, &beta, out, p.d,
                              out, p.d, &found.algo, cuda_ctx.gemm_workspace,
                              cuda_ctx.gemm_workspace_bytes, cuda_ctx.stream));
  }
  lt_free(&p);
  return usable ? 0 : -1;
}

/* The two storages the kernel tables use. */
template int cuda_lt_linear<float>(float*, float*, const float*, int, const float*, const float*,
                                   int, int, int, float, cublasLtEpilogue_t);
template int cuda_lt_linear<osdp_bf16>(osdp_bf16*, osdp_bf16*, const osdp_bf16*, int,
                                       const osdp_bf16*, const osdp_bf16*, int, int, int, float,
                                       cublasLtEpilogue_t);
