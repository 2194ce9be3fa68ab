# tools/cuda-emu/generate.cmake: one CUDA source of src/kernels/cuda as the C++ the emulator
# compiles: cmake -DIN=x.cu -DOUT=x.cpp -P generate.cmake (a build step of tests/gpu_emu.cmake).
# The only rewrite: dynamic shared memory (extern __shared__ float smem[]) becomes the launch's
# buffer, which the emulator fills with NaN garbage per block. A #line keeps compiler messages
# and debuggers on the .cu file's own lines (the rewrite keeps the line count).
file(READ "${IN}" text)
string(REPLACE "extern __shared__ float smem[];" "float* smem = emu_dynamic_smem();" text "${text}")
set(text "#line 1 \"${IN}\"\n${text}")
file(WRITE "${OUT}" "${text}")
