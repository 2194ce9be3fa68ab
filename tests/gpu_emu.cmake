# The CUDA kernels checked on this machine's CPU (label gpu-emu, in every `make test`): the
# sources of src/kernels/cuda are compiled with the C++ compiler against the CUDA emulation of
# tools/cuda-emu (every thread block run as blockDim fibers with real barriers and warp
# shuffles, cuBLAS as a reference GEMM that honours TF32 and bf16 compute, cuBLASLt as the same
# GEMM with the bias and GELU epilogues) and tests/test_cuda_kernels.c runs on them: every kernel
# of the fp32 table against the CPU kernels in fp32 mode, and matmul, matmul + GELU and attention
# also in tf32 and bf16 modes (gpu_emu_kernels); tests/test_cuda_bf16.c runs every kernel of the
# bf16 table (bf16 activations and weights, fp32 gradients and statistics) against the CPU's
# fp32 kernels on the same bf16-representable inputs (gpu_emu_bf16). Built with everything else
# (build/test_cuda_kernels_emu, build/test_cuda_bf16_emu); nothing is written outside the build
# tree.
# gpu_emu_primitives checks the emulator's own numerics (bf16, TF32, WMMA fragments, cuBLASLt's
# epilogues and refusals). Says
# nothing about speed or the GPU's own rounding: that is `ctest -L gpu` on a GPU.
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
  else()
    enable_language(CXX)
    # Fibers: emu.cpp's own switch on x86-64, ucontext elsewhere.
    include(CheckIncludeFileCXX)
    check_include_file_cxx(ucontext.h OSDP_HAVE_UCONTEXT_H)
    if(NOT OSDP_HAVE_UCONTEXT_H AND NOT CMAKE_SYSTEM_PROCESSOR MATCHES "x86_64|AMD64")
      set(osdp_emu_why "no ucontext.h for the emulator's fibers on ${CMAKE_SYSTEM_PROCESSOR}")
    endif()
  endif()
endif()
if(osdp_emu_why)
  foreach(name gpu_emu_kernels gpu_emu_bf16 gpu_emu_primitives gpu_emu_train)
    add_test(NAME ${name} COMMAND sh -c "echo \"$0\"; exit 77" "${name}: SKIP: ${osdp_emu_why}")
    set_tests_properties(${name} PROPERTIES LABELS "gpu-emu" SKIP_RETURN_CODE 77)
  endforeach()
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

# The emulator itself (the CUDA runtime, cuBLAS, cuBLASLt; headers for bf16 and WMMA in include/).
add_library(osdp_emu_runtime OBJECT ${osdp_emu_dir}/emu.cpp)
set_target_properties(osdp_emu_runtime PROPERTIES CXX_STANDARD 17 CXX_STANDARD_REQUIRED ON
  CXX_EXTENSIONS OFF)
target_include_directories(osdp_emu_runtime PRIVATE ${osdp_emu_dir}/include)
include(CheckCXXCompilerFlag)
check_cxx_compiler_flag(-fcf-protection=none OSDP_HAVE_CF_PROTECTION_NONE)
if(OSDP_HAVE_CF_PROTECTION_NONE)
  # emu.cpp switches stacks without a shadow stack: keep the binaries unmarked for one.
  target_compile_options(osdp_emu_runtime PRIVATE -fcf-protection=none)
endif()

# The emulated backend: the CUDA sources, backend.c with OSDP_HAVE_CUDA (its stand-in for a
# build without CUDA left out) and comm_nccl.c without OSDP_HAVE_NCCL (collectives over MPI:
# NCCL needs the real CUDA runtime).
add_library(osdp_cuda_emu OBJECT ${osdp_emu_sources} ${PROJECT_SOURCE_DIR}/src/kernels/backend.c
  ${PROJECT_SOURCE_DIR}/src/comm/comm_nccl.c)
target_link_libraries(osdp_cuda_emu PRIVATE MPI::MPI_C)
set_target_properties(osdp_cuda_emu PROPERTIES CXX_STANDARD 17 CXX_STANDARD_REQUIRED ON
  CXX_EXTENSIONS OFF)
# The emulator's include/ first: its cuda_runtime.h, cublas_v2.h and cublasLt.h, and its
# kernels/cuda/cuda_internal.cuh (the real one with CUDA_LAUNCH as an emulated launch).
target_include_directories(osdp_cuda_emu BEFORE PRIVATE ${osdp_emu_dir}/include)
target_include_directories(osdp_cuda_emu PRIVATE ${PROJECT_SOURCE_DIR}/src ${CBLAS_INCLUDE})
# A small column-sum scratch, so that the checks' shapes also take the column groups' path.
target_compile_definitions(osdp_cuda_emu PRIVATE OSDP_HAVE_CUDA COLSUM_SCRATCH_FLOATS=16384)
target_compile_options(osdp_cuda_emu PRIVATE "$<$<COMPILE_LANGUAGE:CXX>:-Wno-unknown-pragmas>")

# The kernel checks on the emulated backend: tests/test_cuda_kernels.c (the fp32 table,
# test_cuda_kernels_emu, CTest gpu_emu_kernels) and tests/test_cuda_bf16.c (the bf16 table,
# test_cuda_bf16_emu, gpu_emu_bf16), built alike. The CPU side comes from osdp_lib's archive,
# linked after the emulated objects: those define every symbol of the archive's backend.c,
# comm_nccl.c and CUDA members, so the linker never takes those members (nor the CUDA runtime
# they need), whether or not this build also has the real CUDA backend. OSDP_CUDA_EMU shrinks
# what only costs time in the emulation (the clock check's products) and tells the checks that
# the emulated cuBLASLt counts its products.
foreach(table kernels bf16)
  set(exe test_cuda_${table}_emu)
  add_executable(${exe} ${PROJECT_SOURCE_DIR}/tests/test_cuda_${table}.c
    $<TARGET_OBJECTS:osdp_cuda_emu> $<TARGET_OBJECTS:osdp_emu_runtime>)
  set_target_properties(${exe} PROPERTIES LINKER_LANGUAGE CXX)
  target_compile_definitions(${exe} PRIVATE OSDP_CUDA_EMU)
  target_include_directories(${exe} PRIVATE ${PROJECT_SOURCE_DIR}/src
    ${PROJECT_SOURCE_DIR}/tests ${CBLAS_INCLUDE})
  add_dependencies(${exe} osdp_lib)
  target_link_libraries(${exe} PRIVATE $<TARGET_FILE:osdp_lib> ${OSDP_DEP_LIBS})
  add_test(NAME gpu_emu_${table} COMMAND ${exe})
  set_tests_properties(gpu_emu_${table} PROPERTIES LABELS "gpu-emu" SKIP_RETURN_CODE 77
    TIMEOUT 300)
endforeach()

# The emulator's own numerics (tools/cuda-emu/emu_checks.cpp): bf16 conversions, TF32 rounding,
# the WMMA fragments (m16n16k8 tf32, m16n16k16 bf16), cuBLAS's compute types, and cuBLAS and
# cuBLASLt on fp32 and bf16 data.
add_executable(cuda_emu_checks ${osdp_emu_dir}/emu_checks.cpp $<TARGET_OBJECTS:osdp_emu_runtime>)
set_target_properties(cuda_emu_checks PROPERTIES CXX_STANDARD 17 CXX_STANDARD_REQUIRED ON
  CXX_EXTENSIONS OFF)
target_include_directories(cuda_emu_checks PRIVATE ${osdp_emu_dir}/include)
add_test(NAME gpu_emu_primitives COMMAND cuda_emu_checks)
set_tests_properties(gpu_emu_primitives PROPERTIES LABELS "gpu-emu" TIMEOUT 60)

# The CLI on the emulated backend (osdp --device cuda without a GPU): osdp's own objects, the
# emulated backend in place of the CUDA one, and osdp_lib's archive as for the kernel checks.
# gpu_emu_train trains the tiny model a few steps on it (tests/gpu_emu_train.sh): the engine's
# GPU path (device memory, the multi-array gradient norm and AdamW, sharded plans) against the
# CPU's losses, and the measured arena peak against the prediction.
add_executable(osdp_emu $<TARGET_OBJECTS:osdp> $<TARGET_OBJECTS:osdp_cuda_emu>
  $<TARGET_OBJECTS:osdp_emu_runtime>)
set_target_properties(osdp_emu PROPERTIES LINKER_LANGUAGE CXX)
add_dependencies(osdp_emu osdp_lib)
target_link_libraries(osdp_emu PRIVATE $<TARGET_FILE:osdp_lib> ${OSDP_DEP_LIBS})
add_test(NAME gpu_emu_train
  COMMAND bash ${PROJECT_SOURCE_DIR}/tests/gpu_emu_train.sh $<TARGET_FILE:osdp> $<TARGET_FILE:osdp_emu>
          $<TARGET_FILE:plan_tool> ${OSDP_MPIRUN})
set_tests_properties(gpu_emu_train PROPERTIES LABELS "gpu-emu" TIMEOUT 420
  ENVIRONMENT "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1")
