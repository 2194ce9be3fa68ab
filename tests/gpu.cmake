# The CUDA backend against the CPU kernels, only where it is built (OSDP_CUDA). The test exits
# 77 (skipped) when no GPU is visible; `ctest -L gpu` runs it alone.
if(NOT OSDP_CUDA_BUILT)
  return()
endif()
osdp_add_test_exe(test_cuda_kernels ${PROJECT_SOURCE_DIR}/tests/test_cuda_kernels.c)
add_test(NAME gpu_kernels COMMAND test_cuda_kernels)
set_tests_properties(gpu_kernels PROPERTIES LABELS "gpu" SKIP_RETURN_CODE 77)
