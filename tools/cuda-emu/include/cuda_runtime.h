/* Fake CUDA runtime for CPU emulation of the osdp CUDA backend (test harness only). */
#pragma once
#include <cstddef>
#include <cstdint>
#include <cmath>
#include <cstring>
#include <algorithm>
#include <functional>
using std::min;
using std::max;
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__ static
struct uint3 { unsigned x, y, z; };
struct float2 { float x, y; };
struct float4 { float x, y, z, w; };
struct dim3 { unsigned x, y, z; dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {} };
extern uint3 threadIdx, blockIdx; extern dim3 blockDim, gridDim;
typedef enum { cudaSuccess = 0, cudaErrorInvalidValue = 1, cudaErrorMemoryAllocation = 2, cudaErrorInvalidConfiguration = 9, cudaErrorNoDevice = 100 } cudaError_t;
typedef struct CUstream_st* cudaStream_t;
typedef struct CUevent_st* cudaEvent_t;
enum cudaMemcpyKind { cudaMemcpyHostToDevice, cudaMemcpyDeviceToHost, cudaMemcpyDeviceToDevice };
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize };
#define cudaStreamNonBlocking 1
const char* cudaGetErrorString(cudaError_t);
cudaError_t cudaGetLastError(void);
cudaError_t cudaGetDeviceCount(int*);
cudaError_t cudaSetDevice(int);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t*, unsigned);
cudaError_t cudaStreamSynchronize(cudaStream_t);
cudaError_t cudaEventCreate(cudaEvent_t*);
cudaError_t cudaEventRecord(cudaEvent_t, cudaStream_t);
cudaError_t cudaEventSynchronize(cudaEvent_t);
cudaError_t cudaEventElapsedTime(float*, cudaEvent_t, cudaEvent_t);
cudaError_t emu_malloc(void**, size_t);
template <class T> cudaError_t cudaMalloc(T** p, size_t n) { return emu_malloc((void**)p, n); }
cudaError_t cudaFree(void*);
cudaError_t cudaMemGetInfo(size_t*, size_t*);
cudaError_t cudaMemsetAsync(void*, int, size_t, cudaStream_t);
cudaError_t cudaMemcpyAsync(void*, const void*, size_t, cudaMemcpyKind, cudaStream_t);
cudaError_t emu_set_smem_limit(const void* fn, int bytes);
template <class F> cudaError_t cudaFuncSetAttribute(F* fn, cudaFuncAttribute, int bytes) { return emu_set_smem_limit((const void*)fn, bytes); }
/* warp shuffles */
void emu_warp_barrier(void);
void* emu_shfl_slot(int lane);
int emu_lane(void);
template <class T> T emu_shfl(T v, int src) {
  memcpy(emu_shfl_slot(emu_lane()), &v, sizeof v);
  emu_warp_barrier();
  T r; memcpy(&r, emu_shfl_slot(src & 31), sizeof r);
  emu_warp_barrier();
  return r;
}
template <class T> T __shfl_sync(unsigned, T v, int src) { return emu_shfl(v, src); }
template <class T> T __shfl_xor_sync(unsigned, T v, int m) { return emu_shfl(v, emu_lane() ^ m); }
void __syncthreads(void);
/* The lanes of the calling warp meet (all must call it, as on a GPU with a full mask). */
inline void __syncwarp(unsigned = 0xffffffffu) { emu_warp_barrier(); }
float* emu_dynamic_smem(void);
void emu_launch(const void* fn, dim3 grid, dim3 block, size_t smem, std::function<void()> body);
/* cuBLAS */
typedef enum { CUBLAS_STATUS_SUCCESS = 0, CUBLAS_STATUS_NOT_INITIALIZED = 1, CUBLAS_STATUS_INVALID_VALUE = 7, CUBLAS_STATUS_NOT_SUPPORTED = 15 } cublasStatus_t;
typedef struct cublasContext* cublasHandle_t;
typedef enum { CUBLAS_OP_N, CUBLAS_OP_T } cublasOperation_t;
typedef enum { CUBLAS_COMPUTE_32F = 68, CUBLAS_COMPUTE_32F_FAST_16BF = 75, CUBLAS_COMPUTE_32F_FAST_TF32 = 77 } cublasComputeType_t;
/* the real values; only CUDA_R_32F is emulated, the others are there to be refused */
typedef enum { CUDA_R_32F = 0, CUDA_R_16F = 2, CUDA_R_16BF = 14 } cudaDataType;
typedef cudaDataType cudaDataType_t;
typedef enum { CUBLAS_GEMM_DEFAULT = -1 } cublasGemmAlgo_t;
const char* cublasGetStatusString(cublasStatus_t);
cublasStatus_t cublasCreate(cublasHandle_t*);
cublasStatus_t cublasSetStream(cublasHandle_t, cudaStream_t);
cublasStatus_t cublasSetWorkspace(cublasHandle_t, void*, size_t);
cublasStatus_t cublasGemmEx(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void*, const void*, cudaDataType, int, const void*, cudaDataType, int, const void*, void*, cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t);
