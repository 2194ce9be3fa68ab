#include "../../../../../src/kernels/cuda/cuda_internal.cuh"
#undef CUDA_LAUNCH
#define CUDA_LAUNCH(kernel, grid, block, smem_bytes, ...) \
  do { emu_launch((const void*)&kernel, dim3(grid), dim3(block), (smem_bytes), [&]() { kernel(__VA_ARGS__); }); \
       cuda_check(cudaGetLastError(), "launch of " #kernel); } while (0)
