/*
** cpu_kernels_f64.c: the fp64 kernels (suffix _f64), used by the finite-difference tests
** to check the very same code as the fp32 kernels in double precision. The code lives in
** cpu_kernels_impl.inc; this file only picks the type, suffix, BLAS routine and math.
*/
#include <math.h>
#include <stdint.h>
#include <cblas.h>
#include "cpu_kernels.h"

#define REAL double
#define KN(name) name##_f64
#define GEMM cblas_dgemm
#define EXP exp
#define LOG log
#define SQRT sqrt
#define TANH tanh
#define KINT int64_t
#define KINT_MAX INT64_MAX
#include "cpu_kernels_impl.inc"
