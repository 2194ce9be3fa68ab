# Whole-model checks in one process: fp64 gradient check, split equivalence, exact memory.
osdp_add_test_exe(test_model ${PROJECT_SOURCE_DIR}/tests/test_model.c)
add_test(NAME model_gradcheck_memory COMMAND test_model)
set_tests_properties(model_gradcheck_memory PROPERTIES LABELS "sanitize"
  ENVIRONMENT "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1")

# Decoding with a KV cache against the training forward, for every family (osdp sample).
osdp_add_test_exe(test_decode ${PROJECT_SOURCE_DIR}/tests/test_decode.c)
add_test(NAME model_decode COMMAND test_decode)
set_tests_properties(model_decode PROPERTIES LABELS "sanitize" TIMEOUT 120
  ENVIRONMENT "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1")
