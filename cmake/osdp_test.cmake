# osdp_add_test_exe(NAME SOURCES...): builds tests/NAME from the given sources against osdp_lib.
function(osdp_add_test_exe name)
  add_executable(${name} ${ARGN})
  target_link_libraries(${name} PRIVATE osdp_lib)
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR}/tests)
endfunction()
