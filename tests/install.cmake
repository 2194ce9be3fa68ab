# Install and the C API: `cmake --install` into a temporary prefix holds exactly bin/osdp,
# lib/libosdp.a, include/osdp/osdp.h and lib/pkgconfig/osdp.pc; the header compiles on its own;
# examples/plan_api.c built against the installed tree with pkg-config alone writes the plan the
# installed `osdp plan --out` writes for the same inputs, byte for byte (tests/install.sh).
add_test(NAME install
  COMMAND bash ${PROJECT_SOURCE_DIR}/tests/install.sh ${PROJECT_BINARY_DIR} ${PROJECT_SOURCE_DIR}
          ${CMAKE_C_COMPILER} ${CMAKE_COMMAND})
set_tests_properties(install PROPERTIES
  ENVIRONMENT "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1"
  LABELS "cli;install" TIMEOUT 300)
