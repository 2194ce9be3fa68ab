# The sharded runtime: plan invariance on 1..4 ranks (losses, weights, exact memory).
osdp_add_test_exe(plan_tool ${PROJECT_SOURCE_DIR}/tests/plan_tool.c)
add_test(NAME plan_invariance
  COMMAND bash ${PROJECT_SOURCE_DIR}/tests/plan_invariance.sh $<TARGET_FILE:osdp> $<TARGET_FILE:plan_tool> ${OSDP_MPIRUN})
set_tests_properties(plan_invariance PROPERTIES TIMEOUT 900
  ENVIRONMENT "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1")
# The optimizer rules in one process: engine steps against an fp64 reference with AdamW,
# clipping, the learning-rate schedule and the weight-decay sets written out in the test.
osdp_add_test_exe(test_runtime ${PROJECT_SOURCE_DIR}/tests/test_runtime.c)
add_test(NAME runtime_optimizer COMMAND test_runtime)
set_tests_properties(runtime_optimizer PROPERTIES LABELS "sanitize"
  ENVIRONMENT "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1")
# Plan files: plan_load(plan_save(p)) == p for random plans (strategies, k 1..8, prefetch).
add_test(NAME runtime_plan_roundtrip COMMAND plan_tool roundtrip tiny 300 11 ${CMAKE_CURRENT_BINARY_DIR})
set_tests_properties(runtime_plan_roundtrip PROPERTIES LABELS "sanitize")
# The GPU's communication path without a GPU: every plan trains bit-identically when the
# collectives stage through host copies (backend_cpu_staged), on 2 and 3 ranks.
osdp_add_test_exe(test_staging ${PROJECT_SOURCE_DIR}/tests/test_staging.c)
add_test(NAME runtime_staging_2 COMMAND ${OSDP_MPIRUN} -np 2 $<TARGET_FILE:test_staging>)
add_test(NAME runtime_staging_3 COMMAND ${OSDP_MPIRUN} -np 3 $<TARGET_FILE:test_staging>)
add_test(NAME runtime_staging_4 COMMAND ${OSDP_MPIRUN} -np 4 $<TARGET_FILE:test_staging>)
# The same with the gathers as chunked all-to-alls (as across hosts), forced on one host.
add_test(NAME runtime_staging_3_exchange
  COMMAND ${OSDP_MPIRUN} -np 3 -x OSDP_COMM_GATHER=exchange $<TARGET_FILE:test_staging>)
set_tests_properties(runtime_staging_2 runtime_staging_3 runtime_staging_4 runtime_staging_3_exchange PROPERTIES TIMEOUT 180
  ENVIRONMENT "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1")
# Communicators (world, host, shard groups, across groups) and the collectives on them, fp32
# and bf16 against their contract, directly and through host staging.
osdp_add_test_exe(test_comm ${PROJECT_SOURCE_DIR}/tests/test_comm.c)
add_test(NAME comm_2 COMMAND ${OSDP_MPIRUN} -np 2 $<TARGET_FILE:test_comm>)
add_test(NAME comm_4 COMMAND ${OSDP_MPIRUN} -np 4 $<TARGET_FILE:test_comm>)
add_test(NAME comm_6 COMMAND ${OSDP_MPIRUN} -np 6 $<TARGET_FILE:test_comm>)
# The gathers as on communicators that span hosts (chunked all-to-alls), forced on one host.
add_test(NAME comm_4_exchange COMMAND ${OSDP_MPIRUN} -np 4 -x OSDP_COMM_GATHER=exchange $<TARGET_FILE:test_comm>)
set_tests_properties(comm_2 comm_4 comm_6 comm_4_exchange PROPERTIES TIMEOUT 120
  ENVIRONMENT "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1")
# The collectives and the staged runtime under ASan + UBSan too (make asan): chunked reductions,
# bf16 packing, lanes and hybrid plans.
set_tests_properties(comm_4 comm_4_exchange runtime_staging_4 PROPERTIES LABELS "sanitize")

# Bit-identical to a recorded build: every plan kind on 1-4 ranks ends 20 steps with the same
# weights, losses, gradient norms and peaks, and describe/plan predict the same bytes and plans
# (tests/reference/fingerprints-CORE.txt, one per OpenBLAS kernel set; re-recording is explained in tests/reference.sh).
add_test(NAME reference_fingerprints
  COMMAND bash ${PROJECT_SOURCE_DIR}/tests/reference.sh $<TARGET_FILE:osdp> $<TARGET_FILE:plan_tool> ${OSDP_MPIRUN})
set_tests_properties(reference_fingerprints PROPERTIES TIMEOUT 300
  ENVIRONMENT "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1")
# engine_create fails cleanly at every failure point: the checks before anything is built, and
# each allocation in turn (the link wraps malloc, calloc, realloc, free and the arena's
# allocations to count and fail them): -1, an error, nothing left allocated or reserved. Under
# ASan (make asan) LeakSanitizer checks it too, before MPI finalizes (MPI's own blocks
# suppressed), whatever ASAN_OPTIONS the suite runs with.
osdp_add_test_exe(test_engine_create ${PROJECT_SOURCE_DIR}/tests/test_engine_create.c)
target_link_options(test_engine_create PRIVATE
  "LINKER:--wrap=malloc,--wrap=calloc,--wrap=realloc,--wrap=free,--wrap=arena_alloc,--wrap=arena_alloc_uninit")
add_test(NAME runtime_create_failures COMMAND test_engine_create)
set_tests_properties(runtime_create_failures PROPERTIES LABELS "sanitize"
  ENVIRONMENT "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;ASAN_OPTIONS=detect_leaks=1;LSAN_OPTIONS=leak_check_at_exit=0:suppressions=${PROJECT_SOURCE_DIR}/tests/lsan_mpi.supp")
