# Hugging Face model directories: config.json -> osdp's model config (the Hub's own config files
# in tests/hf/), each refused key with one line naming file, key and value.
osdp_add_test_exe(test_hf_config ${PROJECT_SOURCE_DIR}/tests/test_hf_config.c)
add_test(NAME hf_config COMMAND test_hf_config ${PROJECT_SOURCE_DIR}/tests/hf)
set_tests_properties(hf_config PROPERTIES LABELS "sanitize")
add_test(NAME cli_hf COMMAND bash ${PROJECT_SOURCE_DIR}/tests/cli_hf.sh $<TARGET_FILE:osdp>)
set_tests_properties(cli_hf PROPERTIES LABELS cli TIMEOUT 180 SKIP_RETURN_CODE 77
  ENVIRONMENT "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1")
