#!/usr/bin/env bash
# tools/cuda-emu/build.sh: builds osdp's CUDA backend against a CPU emulation of the CUDA runtime,
# cuBLAS and cuBLASLt (emu.cpp), for checking the CUDA kernels' LOGIC on a machine without a GPU:
# every thread block runs as blockDim fibers with real barriers and warp shuffles, shared memory
# starts as NaN garbage, launches are checked against CUDA's limits, and cuBLAS is a column-major fp64
# reference GEMM that checks its leading dimensions and rounds its inputs to TF32 or bf16 in those
# compute types; cuBLASLt is that GEMM with the bias and GELU epilogues (descriptors, alignment
# and workspace checked as the library checks them).
# include/ also emulates cuda_bf16.h (bfloat16) and mma.h (WMMA fragments m16n16k8 tf32 and
# m16n16k16 bf16), whose numerics emu_checks.cpp checks. It says nothing about speed, real
# concurrency or the GPU's rounding: a GPU result needs a GPU (scripts/gpu-check.sh).
# The build is CMake's (tests/gpu_emu.cmake): every `make test` of a normal build already builds
# and runs these as CTest gpu_emu_kernels, gpu_emu_bf16, gpu_emu_primitives and gpu_emu_train
# (label gpu-emu).
# This script makes a separate build without the real CUDA backend, in build-emu/:
# build-emu/osdp_emu (the CLI with --device cuda emulated; about 10^4 times slower than a GPU:
# use tiny shapes and --mem-limit), build-emu/test_cuda_kernels_emu and build-emu/cuda_emu_checks.
# usage: bash tools/cuda-emu/build.sh   (from the repository root)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
out=$root/build-emu
cmake -S "$root" -B "$out" -DOSDP_CUDA=OFF -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$out" -j "$(nproc)" --target osdp_emu test_cuda_kernels_emu cuda_emu_checks \
  osdp plan_tool >/dev/null
echo "built $out/osdp_emu, $out/test_cuda_kernels_emu and $out/cuda_emu_checks"
