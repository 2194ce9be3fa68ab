# The CUDA kernels checked on this machine's CPU (label gpu-emu, in every `make test`): the
# sources of src/kernels/cuda are compiled with the C++ compiler against the CUDA emulation of
# tools/cuda-emu (every thread block run as blockDim fibers with real barriers and warp
# shuffles, cuBLAS as a reference GEMM that honours TF32 compute) and tests/test_cuda_kernels.c
# runs on them: every kernel against the CPU kernels, in fp32 and with TF32 matmuls. Built with
# everything else (build/test_cuda_kernels_emu); nothing is written outside the build tree.
# Says nothing about speed or the GPU's own rounding: that is `ctest -L gpu` on a GPU.
# Skipped (77, with the reason) without a C++ compiler, and in sanitizer builds (the fibers
# switch stacks behind AddressSanitizer's back).
set(osdp_emu_why "")
if(OSDP_SANITIZE OR OSDP_FUZZ)
  set(osdp_emu_why "sanitizer build (the emulator's fibers switch stacks behind ASan)")
else()
  include(CheckLanguage)
  check_language(CXX)
  if(NOT CMAKE_CXX_COMPILER)
    set(osdp_emu_why "no C++ compiler found (the emulator compiles the .cu files as C++17)")
  endif()
endif()
if(osdp_emu_why)
  add_test(NAME gpu_emu_kernels
    COMMAND sh -c "echo 'gpu_emu_kernels: SKIP: ${osdp_emu_why}'; exit 77")
  set_tests_properties(gpu_emu_kernels PROPERTIES LABELS "gpu-emu" SKIP_RETURN_CODE 77)
  return()
endif()
enable_language(CXX)
include(CheckIncludeFileCXX)
check_include_file_cxx(ucontext.h OSDP_HAVE_UCONTEXT_H)
if(NOT OSDP_HAVE_UCONTEXT_H AND NOT CMAKE_SYSTEM_PROCESSOR MATCHES "x86_64|AMD64")
  add_test(NAME gpu_emu_kernels
    COMMAND sh -c "echo 'gpu_emu_kernels: SKIP: no ucontext.h for the emulator fibers'; exit 77")
  set_tests_properties(gpu_emu_kernels PROPERTIES LABELS "gpu-emu" SKIP_RETURN_CODE 77)
  return()
endif()

set(osdp_emu_dir ${PROJECT_SOURCE_DIR}/tools/cuda-emu)
set(osdp_emu_gen ${PROJECT_BINARY_DIR}/cuda-emu)
# Each .cu as the C++ the emulator compiles (tools/cuda-emu/generate.cmake), regenerated when it
# changes.
file(GLOB osdp_emu_cu CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/src/kernels/cuda/*.cu)
set(osdp_emu_sources)
foreach(cu ${osdp_emu_cu})
  get_filename_component(name ${cu} NAME_WE)
  add_custom_command(OUTPUT ${osdp_emu_gen}/${name}.cpp
    COMMAND ${CMAKE_COMMAND} -DIN=${cu} -DOUT=${osdp_emu_gen}/${name}.cpp
            -P ${osdp_emu_dir}/generate.cmake
    DEPENDS ${cu} ${osdp_emu_dir}/generate.cmake
    COMMENT "cuda-emu: ${name}.cu as C++")
  list(APPEND osdp_emu_sources ${osdp_emu_gen}/${name}.cpp)
endforeach()

# The emulated backend: the CUDA sources, the emulator, and backend.c with OSDP_HAVE_CUDA (its
# stand-in for a build without CUDA left out).
add_library(osdp_cuda_emu OBJECT ${osdp_emu_sources} ${osdp_emu_dir}/emu.cpp
  ${PROJECT_SOURCE_DIR}/src/kernels/backend.c)
set_target_properties(osdp_cuda_emu PROPERTIES CXX_STANDARD 17 CXX_STANDARD_REQUIRED ON
  CXX_EXTENSIONS OFF)
# The emulator's include/ first: its cuda_runtime.h and cublas_v2.h, and its
# kernels/cuda/cuda_internal.cuh (the real one with CUDA_LAUNCH as an emulated launch).
target_include_directories(osdp_cuda_emu BEFORE PRIVATE ${osdp_emu_dir}/include)
target_include_directories(osdp_cuda_emu PRIVATE ${PROJECT_SOURCE_DIR}/src ${CBLAS_INCLUDE})
# A small column-sum scratch, so that the checks' shapes also take the column groups' path.
target_compile_definitions(osdp_cuda_emu PRIVATE OSDP_HAVE_CUDA COLSUM_SCRATCH_FLOATS=16384)
target_compile_options(osdp_cuda_emu PRIVATE "$<$<COMPILE_LANGUAGE:CXX>:-Wno-unknown-pragmas>")
include(CheckCXXCompilerFlag)
check_cxx_compiler_flag(-fcf-protection=none OSDP_HAVE_CF_PROTECTION_NONE)
if(OSDP_HAVE_CF_PROTECTION_NONE)
  # emu.cpp switches stacks without a shadow stack: keep the binary unmarked for one.
  set_property(SOURCE ${osdp_emu_dir}/emu.cpp TARGET_DIRECTORY osdp_cuda_emu APPEND PROPERTY
    COMPILE_OPTIONS -fcf-protection=none)
endif()

# The kernel checks on the emulated backend. The CPU side comes from osdp_lib's archive, linked
# after the emulated objects: those define every symbol of the archive's backend.c and CUDA
# members, so the linker never takes those members (nor the CUDA runtime they need), whether
# or not this build also has the real CUDA backend. OSDP_CUDA_EMU shrinks what only costs time
# in the emulation (the clock check's products).
add_executable(test_cuda_kernels_emu ${PROJECT_SOURCE_DIR}/tests/test_cuda_kernels.c
  $<TARGET_OBJECTS:osdp_cuda_emu>)
set_target_properties(test_cuda_kernels_emu PROPERTIES LINKER_LANGUAGE CXX)
target_compile_definitions(test_cuda_kernels_emu PRIVATE OSDP_CUDA_EMU)
target_include_directories(test_cuda_kernels_emu PRIVATE ${PROJECT_SOURCE_DIR}/src
  ${PROJECT_SOURCE_DIR}/tests ${CBLAS_INCLUDE})
add_dependencies(test_cuda_kernels_emu osdp_lib)
target_link_libraries(test_cuda_kernels_emu PRIVATE $<TARGET_FILE:osdp_lib> MPI::MPI_C
  OpenMP::OpenMP_C Threads::Threads PkgConfig::CJSON ${OPENBLAS_LIB} m)
add_test(NAME gpu_emu_kernels COMMAND test_cuda_kernels_emu)
set_tests_properties(gpu_emu_kernels PROPERTIES LABELS "gpu-emu" SKIP_RETURN_CODE 77 TIMEOUT 300)
