#!/usr/bin/env bash
# tools/cuda-emu/build.sh: builds osdp's CUDA backend against a CPU emulation of the CUDA runtime
# and cuBLAS (emu.cpp), for checking the CUDA kernels' LOGIC on a machine without a GPU: every
# thread block runs as blockDim fibers with real barriers and warp shuffles, shared memory starts
# as NaN garbage, launches are checked against CUDA's limits, and cuBLAS is a column-major fp64
# reference GEMM that checks its leading dimensions. It says nothing about speed, real
# concurrency or the GPU's rounding: a GPU result needs a GPU (scripts/gpu-check.sh).
# The kernel checks also run in every `make test`: CTest's gpu_emu_kernels (tests/gpu_emu.cmake)
# builds build/test_cuda_kernels_emu the same way through CMake. This script adds the CLI.
# include/ also emulates cuda_bf16.h (bfloat16) and mma.h (WMMA fragments m16n16k8 tf32 and
# m16n16k16 bf16), whose numerics emu_checks.cpp checks (CTest gpu_emu_primitives).
# Writes build-emu/osdp_emu (the CLI with --device cuda emulated; about 10^4 times slower than
# a GPU: use tiny shapes and --mem-limit), build-emu/test_cuda_kernels_emu and
# build-emu/cuda_emu_checks.
# usage: bash tools/cuda-emu/build.sh   (from the repository root)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
emu=$root/tools/cuda-emu
out=$root/build-emu
mkdir -p "$out/gen" "$out/obj/lib"
# The CPU build the emulated backend is linked into (without CUDA: backend.c's stub is replaced).
cmake -S "$root" -B "$out/cpu" -DOSDP_CUDA=OFF -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$out/cpu" -j "$(nproc)" >/dev/null
cxx=(g++ -std=c++17 -O2 -g -Wno-unknown-pragmas -I"$emu/include" -I"$root/src" -DOSDP_HAVE_CUDA -DCOLSUM_SCRATCH_FLOATS=16384)
for f in "$root"/src/kernels/cuda/*.cu; do
  n=$(basename "$f" .cu)
  # Dynamic shared memory is a per-launch buffer in the emulation (generate.cmake).
  cmake -DIN="$f" -DOUT="$out/gen/$n.cpp" -P "$emu/generate.cmake"
  "${cxx[@]}" -c "$out/gen/$n.cpp" -o "$out/obj/$n.o"
done
g++ -std=c++17 -O2 -g -fcf-protection=none -I"$emu/include" -c "$emu/emu.cpp" -o "$out/obj/emu.o"
cc=(gcc -std=c11 -O2 -g -D_POSIX_C_SOURCE=200809L -D_DEFAULT_SOURCE -DOSDP_HAVE_CUDA -I"$root/src"
    -I"$root/tests" -I/usr/include/x86_64-linux-gnu/openblas-openmp)
"${cc[@]}" -c "$root/src/kernels/backend.c" -o "$out/obj/backend.o"
"${cc[@]}" -DOSDP_CUDA_EMU -c "$root/tests/test_cuda_kernels.c" -o "$out/obj/test_cuda_kernels.o"
# The CPU library without its backend.c (kept as an archive, linked whole: it holds two members
# named cpu_kernels_real.c.o, the fp32 and the fp64 compile, which `ar x` would merge into one).
cp "$out/cpu/libosdp_lib.a" "$out/obj/lib/libosdp_cpu.a"
ar d "$out/obj/lib/libosdp_cpu.a" backend.c.o
libs=(/usr/lib/x86_64-linux-gnu/openblas-openmp/libopenblas.so -lcjson $(mpicc --showme:link) -lm)
objs=("$out/obj/backend.o" "$out"/obj/cuda_*.o "$out/obj/emu.o")
lib=(-Wl,--whole-archive "$out/obj/lib/libosdp_cpu.a" -Wl,--no-whole-archive)
cli=("$out"/cpu/CMakeFiles/osdp.dir/src/cli/*.o)
g++ -fopenmp "${objs[@]}" "${cli[@]}" "${lib[@]}" -o "$out/osdp_emu" "${libs[@]}"
g++ -fopenmp "$out/obj/test_cuda_kernels.o" "${objs[@]}" "${lib[@]}" \
  -o "$out/test_cuda_kernels_emu" "${libs[@]}"
g++ -std=c++17 -O2 -g -I"$emu/include" "$emu/emu_checks.cpp" "$out/obj/emu.o" -o "$out/cuda_emu_checks"
echo "built $out/osdp_emu, $out/test_cuda_kernels_emu and $out/cuda_emu_checks"
