# scripts/gpu-check.sh cannot pass falsely: against this build, without a GPU it says NO GPU, with
# a fake nvidia-smi listing one (and a backend that cannot start) FAILED naming the failure, and
# without the carried packages it stops at once. Label gpu-check, not gpu (gpu-check.sh runs
# `ctest -L '^gpu$'`); skipped where the CUDA backend is not built or a real GPU is visible.
add_test(NAME gpu_check COMMAND bash ${PROJECT_SOURCE_DIR}/tests/gpu_check.sh ${PROJECT_SOURCE_DIR}
  ${PROJECT_BINARY_DIR} ${OSDP_CUDA_BUILT})
set_tests_properties(gpu_check PROPERTIES LABELS "gpu-check" SKIP_RETURN_CODE 77 TIMEOUT 300
  RUN_SERIAL TRUE)

# The CUDA backend against the CPU kernels, only where it is built (OSDP_CUDA). The test exits
# 77 (skipped) only when no GPU is visible (and none is required: OSDP_REQUIRE_GPU); `ctest -L
# '^gpu$'` runs it alone.
if(NOT OSDP_CUDA_BUILT)
  return()
endif()
osdp_add_test_exe(test_cuda_kernels ${PROJECT_SOURCE_DIR}/tests/test_cuda_kernels.c)
add_test(NAME gpu_kernels COMMAND test_cuda_kernels)
set_tests_properties(gpu_kernels PROPERTIES LABELS "gpu" SKIP_RETURN_CODE 77)
# The bf16 table (bf16 activations and weights, fp32 gradients and statistics) against the CPU's
# fp32 kernels on the same bf16-representable inputs; skipped as gpu_kernels.
osdp_add_test_exe(test_cuda_bf16 ${PROJECT_SOURCE_DIR}/tests/test_cuda_bf16.c)
add_test(NAME gpu_bf16 COMMAND test_cuda_bf16)
set_tests_properties(gpu_bf16 PROPERTIES LABELS "gpu" SKIP_RETURN_CODE 77)
# Training on the GPU reproduces the CPU (tiny and small, ddp / zero2 / zero3 / sliced plans,
# 20 steps, 1e-4), 2 ranks sharing the GPU reproduce 1, measured peak = predicted.
add_test(NAME gpu_train
  COMMAND bash ${PROJECT_SOURCE_DIR}/tests/gpu_train.sh $<TARGET_FILE:osdp> $<TARGET_FILE:plan_tool> ${OSDP_MPIRUN})
set_tests_properties(gpu_train PROPERTIES LABELS "gpu" SKIP_RETURN_CODE 77 TIMEOUT 300
  ENVIRONMENT "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1")
