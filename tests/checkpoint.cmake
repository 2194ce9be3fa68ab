osdp_add_test_exe(test_checkpoint ${PROJECT_SOURCE_DIR}/tests/test_checkpoint.c)
add_test(NAME checkpoint COMMAND test_checkpoint)
set_tests_properties(checkpoint PROPERTIES LABELS "sanitize")
