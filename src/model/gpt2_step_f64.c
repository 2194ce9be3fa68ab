/* gpt2_step_f64.c: GPT-2's step in double precision (exports gpt2_step_f64), for the
** whole-model finite-difference gradient checks: gpt2_step.c compiled with STEP_REAL_DOUBLE (step_ops.h: everything double). */
#define STEP_REAL_DOUBLE
#include "gpt2_step.c"
