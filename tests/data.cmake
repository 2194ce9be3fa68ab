osdp_add_test_exe(test_data ${PROJECT_SOURCE_DIR}/tests/test_data.c)
add_test(NAME data COMMAND test_data)
set_tests_properties(data PROPERTIES LABELS "sanitize")
