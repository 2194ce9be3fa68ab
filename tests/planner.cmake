# The planner: device files, cost model, exact search against brute force, search speed.
osdp_add_test_exe(test_planner ${PROJECT_SOURCE_DIR}/tests/test_planner.c)
add_test(NAME planner COMMAND test_planner)
set_tests_properties(planner PROPERTIES LABELS "sanitize")

# The planner's promise swept: random models of every family, devices, options and limits, and
# every preset at its max_seq on 8 / 16 / 80 GiB, 8 / 64 ranks, fp32 / bf16: the search's own
# peak is the prediction, and no plan returned is over the limit.
osdp_add_test_exe(test_plan_promise ${PROJECT_SOURCE_DIR}/tests/test_plan_promise.c)
add_test(NAME plan_promise COMMAND test_plan_promise)
set_tests_properties(plan_promise PROPERTIES TIMEOUT 300)
