# Fuzzing of every file parser (fuzz/, see fuzz/README.md). Always: replay_<name> runs the
# target fuzz/fuzz_<name>.c on its regression corpus fuzz/corpus/<name>/ with a plain main()
# (any compiler; also under the ASan/UBSan build, label "sanitize"). With OSDP_FUZZ=ON (clang)
# also the libFuzzer binaries fuzz_<name>, built by the target fuzz_targets and run by
# `make fuzz` (fuzz/run.sh).
set(OSDP_FUZZ_TARGETS model plan device checkpoint safetensors train_state tokens hf_config json
  st_index tokenizer)
set(OSDP_FUZZ_TEST_ENV OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1)
if(OSDP_FUZZ)
  add_custom_target(fuzz_targets)
endif()
foreach(name ${OSDP_FUZZ_TARGETS})
  set(src ${PROJECT_SOURCE_DIR}/fuzz/fuzz_${name}.c)
  osdp_add_test_exe(replay_${name} ${src} ${PROJECT_SOURCE_DIR}/fuzz/replay_main.c)
  add_test(NAME fuzz_replay_${name}
    COMMAND replay_${name} ${PROJECT_SOURCE_DIR}/fuzz/corpus/${name})
  set_tests_properties(fuzz_replay_${name} PROPERTIES LABELS "sanitize" TIMEOUT 120
    ENVIRONMENT "${OSDP_FUZZ_TEST_ENV}")
  if(OSDP_FUZZ)
    osdp_add_test_exe(fuzz_${name} ${src})
    target_link_options(fuzz_${name} PRIVATE -fsanitize=fuzzer)
    add_dependencies(fuzz_targets fuzz_${name})
  endif()
endforeach()
