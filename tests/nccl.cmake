# NCCL (src/comm/comm_nccl.c) on a machine without a GPU, where the CUDA backend is built with
# NCCL's header: a stub libnccl.so.2 (tests/nccl_stub.c; and one of an older NCCL, lacking
# ncclAllGather) stands in for NCCL.
if(OSDP_CUDA_BUILT AND OSDP_NCCL_INCLUDE)
  add_library(nccl_stub SHARED ${PROJECT_SOURCE_DIR}/tests/nccl_stub.c)
  add_library(nccl_stub_old SHARED ${PROJECT_SOURCE_DIR}/tests/nccl_stub.c)
  target_compile_definitions(nccl_stub_old PRIVATE NCCL_STUB_OLD)
  foreach(t nccl_stub nccl_stub_old)
    target_include_directories(${t} PRIVATE ${OSDP_NCCL_INCLUDE} ${CUDAToolkit_INCLUDE_DIRS})
  endforeach()
  # Where NCCL is found: OSDP_NCCL_LIB alone (unusable: one line), then the loader's path, beside
  # PyTorch's wheel (venv, conda, python3 on PATH, ~/.local, /usr/local, /usr), CUDA's lib64.
  osdp_add_test_exe(test_nccl_lookup ${PROJECT_SOURCE_DIR}/tests/test_nccl_lookup.c)
  target_compile_definitions(test_nccl_lookup PRIVATE OSDP_HAVE_NCCL
    NCCL_STUB="$<TARGET_FILE:nccl_stub>" NCCL_STUB_OLD="$<TARGET_FILE:nccl_stub_old>")
  target_include_directories(test_nccl_lookup PRIVATE ${OSDP_NCCL_INCLUDE})
  target_link_libraries(test_nccl_lookup PRIVATE ${CMAKE_DL_LIBS})
  add_dependencies(test_nccl_lookup nccl_stub nccl_stub_old)
  add_test(NAME nccl_lookup COMMAND test_nccl_lookup)
  set_tests_properties(nccl_lookup PROPERTIES TIMEOUT 60)
  # comm_nccl.c itself with CUDA's runtime replaced by a recorder of each stream's order (no
  # libcudart): the overlap, an event per request, buffers reused after a wait, and set-up steps
  # on which 2 ranks always agree (the stub as NCCL, failures injected on one rank).
  add_executable(test_nccl_order ${PROJECT_SOURCE_DIR}/tests/test_nccl_order.c)
  target_compile_definitions(test_nccl_order PRIVATE OSDP_HAVE_NCCL
    NCCL_STUB="$<TARGET_FILE:nccl_stub>" NCCL_STUB_OLD="$<TARGET_FILE:nccl_stub_old>")
  target_include_directories(test_nccl_order PRIVATE ${PROJECT_SOURCE_DIR}/src
    ${PROJECT_SOURCE_DIR}/tests ${OSDP_NCCL_INCLUDE} ${CUDAToolkit_INCLUDE_DIRS})
  target_link_libraries(test_nccl_order PRIVATE MPI::MPI_C ${CMAKE_DL_LIBS})
  add_dependencies(test_nccl_order nccl_stub nccl_stub_old)
  add_test(NAME nccl_order COMMAND ${OSDP_MPIRUN} -np 2 $<TARGET_FILE:test_nccl_order>)
  set_tests_properties(nccl_order PROPERTIES TIMEOUT 60
    ENVIRONMENT "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1")
endif()
