/* backend.c: choosing a backend by name; the CUDA stand-in when built without CUDA. See backend.h. */
#include "kernels/backend.h"

#include <string.h>

#include "core/util.h"

const Backend* backend_by_name(const char* name, const char* field) {
  if (!strcmp(name, "cpu")) return backend_cpu();
  if (!strcmp(name, "cuda")) return backend_cuda();
  osdp_fail("%s: unknown device '%s': use cpu or cuda", field, name);
  return NULL;
}

#ifndef OSDP_HAVE_CUDA
/* Built without CUDA: says so (the real one is in src/kernels/cuda/cuda_backend.cu). */
const Backend* backend_cuda(void) {
  osdp_fail("--device cuda: this osdp was built without CUDA (no nvcc/cuBLAS found); rebuild "
            "with cmake -DOSDP_CUDA=ON on a machine with the CUDA toolkit, or use --device cpu");
  return NULL;
}

int backend_cuda_built(void) { return 0; }
#endif
