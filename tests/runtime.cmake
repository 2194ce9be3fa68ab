# The sharded runtime: plan invariance on 1..4 ranks (losses, weights, exact memory).
osdp_add_test_exe(plan_tool ${PROJECT_SOURCE_DIR}/tests/plan_tool.c)
add_test(NAME plan_invariance
  COMMAND bash ${PROJECT_SOURCE_DIR}/tests/plan_invariance.sh $<TARGET_FILE:osdp> $<TARGET_FILE:plan_tool> ${OSDP_MPIRUN})
set_tests_properties(plan_invariance PROPERTIES TIMEOUT 900
  ENVIRONMENT "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1")
