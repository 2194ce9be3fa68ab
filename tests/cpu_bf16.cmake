# The CPU's bf16 kernel table (src/kernels/cpu_bf16.c) against the CPU's fp32 kernels on the same
# bf16-representable inputs: every kernel to one bf16 rounding of the fp32 result, stores rounded
# to nearest even (not truncated), attention's single rounding of dq, dk, dv, determinism over
# thread counts. The matrix products run in oneDNN where the CPU has AVX512_BF16 / AMX and are
# emulated elsewhere (cpu_dnnl.h's test hook), so every check runs on any machine; 77 (skipped)
# only where no products can run at all.
osdp_add_test_exe(test_cpu_bf16 ${PROJECT_SOURCE_DIR}/tests/test_cpu_bf16.c)
add_test(NAME kernels_cpu_bf16 COMMAND test_cpu_bf16)
set_tests_properties(kernels_cpu_bf16 PROPERTIES LABELS "sanitize" SKIP_RETURN_CODE 77 TIMEOUT 120)
