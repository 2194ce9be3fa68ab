/* Fake cuBLASLt for CPU emulation of the osdp CUDA backend (test harness only): the subset
** cuda_lt.cu uses, with the real header's names, attribute numbers and value types (cublasLt.h
** of CUDA 13). emu.cpp checks every attribute's size and value as strictly as the library
** documents them and refuses what it does not emulate, loudly. */
#pragma once
#include <cublas_v2.h>

typedef struct EmuLtContext* cublasLtHandle_t;
typedef struct EmuLtMatmulDesc* cublasLtMatmulDesc_t;
typedef struct EmuLtLayout* cublasLtMatrixLayout_t;
typedef struct EmuLtPreference* cublasLtMatmulPreference_t;
/* Semi-opaque, as in the real header (emu.cpp keeps the chosen alignments and workspace here). */
typedef struct { uint64_t data[8]; } cublasLtMatmulAlgo_t;
typedef struct {
  cublasLtMatmulAlgo_t algo;
  size_t workspaceSize;
  cublasStatus_t state;
  float wavesCount;
  int reserved[4];
} cublasLtMatmulHeuristicResult_t;

typedef enum {
  CUBLASLT_MATMUL_DESC_COMPUTE_TYPE = 0,       /* int32_t */
  CUBLASLT_MATMUL_DESC_SCALE_TYPE = 1,         /* int32_t */
  CUBLASLT_MATMUL_DESC_POINTER_MODE = 2,       /* int32_t */
  CUBLASLT_MATMUL_DESC_TRANSA = 3,             /* int32_t */
  CUBLASLT_MATMUL_DESC_TRANSB = 4,             /* int32_t */
  CUBLASLT_MATMUL_DESC_EPILOGUE = 7,           /* uint32_t */
  CUBLASLT_MATMUL_DESC_BIAS_POINTER = 8,       /* const void* */
  CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER = 11, /* void* */
  CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD = 12,   /* int64_t */
  CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE = 22, /* int32_t, default -1: D's type */
  CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE = 26     /* int32_t, default -1: D's type */
} cublasLtMatmulDescAttributes_t;

typedef enum { CUBLASLT_POINTER_MODE_HOST = 0, CUBLASLT_POINTER_MODE_DEVICE = 1 } cublasLtPointerMode_t;

typedef enum {
  CUBLASLT_EPILOGUE_DEFAULT = 1,
  CUBLASLT_EPILOGUE_RELU = 2,
  CUBLASLT_EPILOGUE_BIAS = 4,
  CUBLASLT_EPILOGUE_GELU = 32,
  CUBLASLT_EPILOGUE_GELU_AUX = (32 | 128),
  CUBLASLT_EPILOGUE_GELU_BIAS = (32 | 4),
  CUBLASLT_EPILOGUE_GELU_AUX_BIAS = (32 | 128 | 4),
  CUBLASLT_EPILOGUE_DGELU = 64 | 128,
  CUBLASLT_EPILOGUE_DGELU_BGRAD = 64 | 128 | 16,
  CUBLASLT_EPILOGUE_BGRADA = 256,
  CUBLASLT_EPILOGUE_BGRADB = 512
} cublasLtEpilogue_t;

typedef enum {
  CUBLASLT_MATMUL_PREF_SEARCH_MODE = 0,           /* uint32_t */
  CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES = 1,   /* uint64_t, default 0 */
  CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES = 5, /* uint32_t, default 256 */
  CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES = 6,
  CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES = 7,
  CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES = 8
} cublasLtMatmulPreferenceAttributes_t;

cublasStatus_t cublasLtCreate(cublasLtHandle_t*);
cublasStatus_t cublasLtDestroy(cublasLtHandle_t);
cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t*, cublasComputeType_t, cudaDataType_t);
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t);
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t, cublasLtMatmulDescAttributes_t, const void*, size_t);
cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t*, cudaDataType, uint64_t rows, uint64_t cols, int64_t ld);
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t);
cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t*);
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t);
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t, cublasLtMatmulPreferenceAttributes_t, const void*, size_t);
cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t, cublasLtMatmulDesc_t, cublasLtMatrixLayout_t Adesc,
                                              cublasLtMatrixLayout_t Bdesc, cublasLtMatrixLayout_t Cdesc,
                                              cublasLtMatrixLayout_t Ddesc, cublasLtMatmulPreference_t,
                                              int requestedAlgoCount, cublasLtMatmulHeuristicResult_t heuristicResultsArray[],
                                              int* returnAlgoCount);
cublasStatus_t cublasLtMatmul(cublasLtHandle_t, cublasLtMatmulDesc_t, const void* alpha, const void* A,
                              cublasLtMatrixLayout_t Adesc, const void* B, cublasLtMatrixLayout_t Bdesc,
                              const void* beta, const void* C, cublasLtMatrixLayout_t Cdesc, void* D,
                              cublasLtMatrixLayout_t Ddesc, const cublasLtMatmulAlgo_t* algo, void* workspace,
                              size_t workspaceSizeInBytes, cudaStream_t stream);
