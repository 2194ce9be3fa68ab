# Hugging Face tokenizer.json tokenizers (src/tokenizer) and `osdp tokenize`.
# The unit test: a hand-made byte-level BPE with the ids each text must give, and every
# malformed or unsupported file refused naming its field (fast: also under ASan).
osdp_add_test_exe(test_tokenizer ${PROJECT_SOURCE_DIR}/tests/test_tokenizer.c)
add_test(NAME tokenizer COMMAND test_tokenizer)
set_tests_properties(tokenizer PROPERTIES LABELS "sanitize")
# The command against independent implementations from the npm registry (js-tiktoken's GPT-2,
# llama3-tokenizer-js), installed once into build/npm-ref; skipped (77) where npm cannot install.
add_test(NAME cli_tokenize
  COMMAND bash ${PROJECT_SOURCE_DIR}/tests/cli_tokenize.sh $<TARGET_FILE:osdp> ${PROJECT_BINARY_DIR}/npm-ref)
set_tests_properties(cli_tokenize PROPERTIES ENVIRONMENT "${OSDP_CLI_TEST_ENV}" LABELS cli
  TIMEOUT 300 SKIP_RETURN_CODE 77)
