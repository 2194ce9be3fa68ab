# Kernel tests: finite-difference gradient checks in fp64, fp32 vs fp64, determinism.
osdp_add_test_exe(test_kernels ${PROJECT_SOURCE_DIR}/tests/test_kernels.c)
add_test(NAME kernels_gradcheck COMMAND test_kernels)
set_tests_properties(kernels_gradcheck PROPERTIES LABELS "sanitize")
