/* llama_step_f64.c: the Llama family's step in double precision (exports llama_step_f64), for
** the whole-model finite-difference gradient checks: llama_step.c compiled with STEP_REAL_DOUBLE (step_ops.h: everything double). */
#define STEP_REAL_DOUBLE
#include "llama_step.c"
