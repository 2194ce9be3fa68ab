/* llama_step_bf16.c: the Llama step with bf16 storage (exports llama_step_bf16): llama_step.c
** compiled with STEP_BF16 (step_ops.h: bf16 activations, fp32 gradients and statistics), run on
** a backend with a bf16 kernel table under `--precision bf16`. */
#define STEP_BF16
#include "llama_step.c"
