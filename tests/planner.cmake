# The planner: device files, cost model, exact search against brute force, search speed.
osdp_add_test_exe(test_planner ${PROJECT_SOURCE_DIR}/tests/test_planner.c)
add_test(NAME planner COMMAND test_planner)
set_tests_properties(planner PROPERTIES LABELS "sanitize")
