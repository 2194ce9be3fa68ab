# safetensors files (Hugging Face GPT-2 names) and `osdp export`: the format's rules and the
# layout in C (also under ASan), the command line's round trips and failures, and a check of
# the file's meaning against a GPT-2 written in PyTorch the way transformers computes it
# (skipped, exit 77, where python3 has no torch).
osdp_add_test_exe(test_safetensors ${PROJECT_SOURCE_DIR}/tests/test_safetensors.c)
add_test(NAME safetensors COMMAND test_safetensors)
set_tests_properties(safetensors PROPERTIES LABELS "sanitize")

set(OSDP_EXPORT_TEST_ENV OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1)
add_test(NAME cli_export
  COMMAND bash ${PROJECT_SOURCE_DIR}/tests/cli_export.sh $<TARGET_FILE:osdp> ${OSDP_MPIRUN})
set_tests_properties(cli_export PROPERTIES ENVIRONMENT "${OSDP_EXPORT_TEST_ENV}" LABELS cli
  TIMEOUT 180)
add_test(NAME safetensors_torch
  COMMAND bash ${PROJECT_SOURCE_DIR}/tests/safetensors_torch.sh $<TARGET_FILE:osdp>)
set_tests_properties(safetensors_torch PROPERTIES ENVIRONMENT "${OSDP_EXPORT_TEST_ENV}"
  LABELS cli SKIP_RETURN_CODE 77 TIMEOUT 180)
# Checkpoints as the Hub holds them: Llama names, BF16/F16, shards, directories, config.json.
osdp_add_test_exe(test_safetensors_hub ${PROJECT_SOURCE_DIR}/tests/test_safetensors_hub.c)
add_test(NAME safetensors_hub COMMAND test_safetensors_hub)
set_tests_properties(safetensors_hub PROPERTIES LABELS "sanitize")
