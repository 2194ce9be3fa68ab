/*
** test_kernels.c: tests of the CPU kernels (src/kernels).
**
**  1. Forward references: each forward kernel against a naive loop implementation of the
**     GPT-2 (llm.c) or Llama (transformers) semantics, in double (grouped-query attention
**     against the multi-head loops on explicitly repeated K/V heads, RoPE against the rotation
**     written out, also at large positions, and its backward as the forward's inverse and
**     adjoint).
**  2. Gradient checks: the backward of every kernel against central finite differences of
**     L = sum(out * R) for a fixed random R, in double precision (the fp64 table,
**     backend_cpu()->f64), at odd sizes, for every entry of every input and parameter.
**     Gradient buffers are pre-filled with random values, so the checks also prove that
**     backward kernels accumulate where their contract says so (kernel_list.h).
**  3. fp32 vs fp64: each kernel of the fp32 table agrees with its fp64 twin on the same inputs.
**  4. Determinism: with 2 threads, two runs of the parallel backward kernels are
**     bit-identical; attention (fused and grouped-query), RMSNorm, SwiGLU and RoPE are also
**     bit-identical between 1 and 2 threads.
**  5. Overwriting: the gradient kernels' accumulate = 0 (the first use of a gradient in a
**     step) gives the values accumulate = 1 gives on a zeroed buffer, without reading it.
**  6. Tables: every entry of the CPU backends' kernel tables (fp32, fp64, and cpu-staged's)
**     is set, and so is every member of those backends (run first).
*/
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "core/util.h"
#include "kernels/backend.h"
#include "kernels/cpu_kernels.h"

#define FD_H 1e-6      /* central-difference step */
/* Rounding noise of a central difference is ~ 1e-16 * |L| / FD_H ~ 1e-8 here, so gradient
** entries smaller than FD_FLOOR are compared in absolute terms (to FD_TOL * FD_FLOOR). */
#define FD_FLOOR 1e-2
#define FD_TOL 1e-6    /* max relative error of an analytic gradient */
#define F32_TOL 1e-4   /* max error of fp32 relative to the largest fp64 value */

static Rng rng;
/* The CPU kernels under test: backend_cpu()'s fp32 and fp64 tables (set by main). */
static const Kernels_f32* f32;
static const Kernels_f64* f64;

// ----------------------------------------------------------------------------
// small helpers

/* calloc that aborts the test on failure. */
static void* xcalloc(size_t n, size_t size) {
  void* p = calloc(n ? n : 1, size);
  if (!p) { fprintf(stderr, "out of memory\n"); exit(2); }
  return p;
}
static double* dalloc(size_t n) { return xcalloc(n, sizeof(double)); }
static float* falloc(size_t n) { return xcalloc(n, sizeof(float)); }

/* Returns a new array of n normal(0, sd) values (plus a constant offset). */
static double* drandn(size_t n, double sd, double offset) {
  double* a = dalloc(n);
  for (size_t i = 0; i < n; i++) a[i] = offset + sd * rng_normal(&rng);
  return a;
}

/* Returns a new copy of a[0..n). */
static double* dcopy(const double* a, size_t n) {
  double* c = dalloc(n);
  memcpy(c, a, n * sizeof(double));
  return c;
}

/* Returns a new float copy of a[0..n). */
static float* to_f32(const double* a, size_t n) {
  float* f = falloc(n);
  for (size_t i = 0; i < n; i++) f[i] = (float)a[i];
  return f;
}

/* sum_i a[i] * b[i]. */
static double dot(const double* a, const double* b, size_t n) {
  double s = 0;
  for (size_t i = 0; i < n; i++) s += a[i] * b[i];
  return s;
}

/* sum_i a[i] * b[i] accumulated in long double. An objective whose sum has many terms that
** a perturbation changes (attention over several tiles: every later row of the head) needs
** this to keep the rounding noise of its central differences well under FD_TOL. */
static double dot_extended(const double* a, const double* b, size_t n) {
  long double s = 0;
  for (size_t i = 0; i < n; i++) s += (long double)a[i] * b[i];
  return (double)s;
}

/* a[i] -= b[i]: turns an accumulated gradient buffer back into the gradient alone. */
static void subtract(double* a, const double* b, size_t n) {
  for (size_t i = 0; i < n; i++) a[i] -= b[i];
}

/* max_i |a[i] - b[i]|. */
static double max_abs_diff(const double* a, const double* b, size_t n) {
  double m = 0;
  for (size_t i = 0; i < n; i++) m = fmax(m, fabs(a[i] - b[i]));
  return m;
}

/* max_i |a[i]|. */
static double max_abs(const double* a, size_t n) {
  double m = 0;
  for (size_t i = 0; i < n; i++) m = fmax(m, fabs(a[i]));
  return m;
}

/* Checks that the forward result a matches the reference ref to rel_tol of its scale. */
static void check_close(const char* name, const double* a, const double* ref, size_t n,
                        double rel_tol) {
  double err = max_abs_diff(a, ref, n) / fmax(max_abs(ref, n), 1e-30);
  CHECK_MSG(err <= rel_tol, "%s: relative error %.3g", name, err);
}

/* Checks that an fp32 result agrees with the fp64 one, relative to the fp64 scale. */
static void check_f32(const char* name, const float* a, const double* ref, size_t n) {
  double m = 0;
  for (size_t i = 0; i < n; i++) m = fmax(m, fabs((double)a[i] - ref[i]));
  double err = m / fmax(max_abs(ref, n), 1e-30);
  CHECK_MSG(err <= F32_TOL, "%s: f32 vs f64 relative error %.3g", name, err);
}

// ----------------------------------------------------------------------------
// finite-difference gradient check

typedef double (*Objective)(void* ctx);

/* Compares grad[0..n), the analytic gradient of f with respect to x[0..n), with central
** differences (x is perturbed in place and restored). Returns the worst relative error,
** measured against max(|numeric|, |analytic|, FD_FLOOR). */
static double fd_max_error(Objective f, void* ctx, double* x, const double* grad, size_t n) {
  double worst = 0;
  for (size_t i = 0; i < n; i++) {
    double saved = x[i];
    x[i] = saved + FD_H;
    double fp = f(ctx);
    x[i] = saved - FD_H;
    double fm = f(ctx);
    x[i] = saved;
    double num = (fp - fm) / (2 * FD_H);
    double denom = fmax(fmax(fabs(num), fabs(grad[i])), FD_FLOOR);
    worst = fmax(worst, fabs(num - grad[i]) / denom);
  }
  return worst;
}

/* One CHECK per tensor: every entry of its gradient must match finite differences. */
static void check_grad(const char* name, Objective f, void* ctx, double* x, const double* grad,
                       size_t n) {
  double err = fd_max_error(f, ctx, x, grad, n);
  printf("  grad %-26s %4zu entries, max rel err %.2e\n", name, n, err);
  CHECK_MSG(err < FD_TOL, "%s: max relative error %.3g", name, err);
}

/* Fills grad with random values and returns a copy of them (caller frees). A backward kernel
** then accumulates into grad, and subtract(grad, copy) leaves just the gradient, which the
** finite-difference check can only match if the kernel really did +=. */
static double* prefill(double* grad, size_t n) {
  double* g0 = drandn(n, 1.0, 0.0);
  memcpy(grad, g0, n * sizeof(double));
  return g0;
}

// ----------------------------------------------------------------------------
// the tables

/* Checks that every entry of KERNEL_LIST is set in kernel table t of backend `name`. */
#define CHECK_TABLE_ENTRY(ret, kernel, params) \
  CHECK_MSG(t->kernel != NULL, "%s: %s table: %s is NULL", name, precision, #kernel);
static void check_table_f32(const char* name, const Kernels_f32* t) {
  const char* precision = "fp32";
  KERNEL_LIST(CHECK_TABLE_ENTRY, float, float, float, float)
}
static void check_table_f64(const char* name, const Kernels_f64* t) {
  const char* precision = "fp64";
  KERNEL_LIST(CHECK_TABLE_ENTRY, double, double, double, double)
}
#undef CHECK_TABLE_ENTRY

/* Every member of a CPU backend is set: its services and both kernel tables, completely. */
static void check_cpu_backend(const Backend* bk) {
  CHECK(bk->reserve && bk->release && bk->available && bk->zero && bk->copy && bk->to_device &&
        bk->to_host && bk->synchronize && bk->clock && bk->set_threads && bk->set_matmul_mode &&
        bk->attention_scratch_elems && bk->compute_stream);
  CHECK(bk->f32 != NULL && bk->f64 != NULL);
  if (bk->f32) check_table_f32(bk->name, bk->f32);
  if (bk->f64) check_table_f64(bk->name, bk->f64);
}

/* The CPU backend and the staged CPU backend are complete, and the latter runs the very same
** kernels; the CPU's attention scratch is the tiles' (cpu_kernels.h). */
static void test_tables(void) {
  check_cpu_backend(backend_cpu());
  check_cpu_backend(backend_cpu_staged());
  CHECK(backend_cpu_staged()->f32 == backend_cpu()->f32);
  CHECK(backend_cpu_staged()->f64 == backend_cpu()->f64);
  CHECK(backend_cpu()->attention_scratch_elems(100, 64) == attention_scratch_elems(100, 64));
}

// ----------------------------------------------------------------------------
// embeddings

typedef struct { double *wpe, *out, *R; int B, T, C; } PosCtx;

/* L = sum(embed_pos_forward(wpe) * R). */
static double pos_objective(void* p) {
  PosCtx* c = p;
  f64->embed_pos_forward(c->out, c->wpe, c->B, c->T, c->C);
  return dot(c->out, c->R, (size_t)c->B * c->T * c->C);
}

/* embed_pos: forward copies rows, backward sums over the batch (rows >= T get nothing). */
static void test_embed_pos(void) {
  int B = 2, T = 5, C = 12, maxT = 7;
  size_t nout = (size_t)B * T * C, nw = (size_t)maxT * C;
  PosCtx c = { drandn(nw, 1, 0), dalloc(nout), drandn(nout, 1, 0), B, T, C };
  pos_objective(&c);
  int ok = 1;
  for (int b = 0; b < B; b++)
    ok &= memcmp(c.out + (size_t)b * T * C, c.wpe, (size_t)T * C * sizeof(double)) == 0;
  CHECK(ok);
  double* dwpe = dalloc(nw);
  double* g0 = prefill(dwpe, nw);
  f64->embed_pos_backward(dwpe, c.R, B, T, C, 1);
  subtract(dwpe, g0, nw);
  check_grad("embed_pos.dwpe", pos_objective, &c, c.wpe, dwpe, nw);

  float *wpe32 = to_f32(c.wpe, nw), *out32 = falloc(nout), *R32 = to_f32(c.R, nout);
  float* dwpe32 = falloc(nw);
  double* dwpe64 = dalloc(nw);
  f32->embed_pos_forward(out32, wpe32, B, T, C);
  check_f32("embed_pos_forward", out32, c.out, nout);
  f32->embed_pos_backward(dwpe32, R32, B, T, C, 1);
  f64->embed_pos_backward(dwpe64, c.R, B, T, C, 1);
  check_f32("embed_pos_backward", dwpe32, dwpe64, nw);
  free(wpe32); free(out32); free(R32); free(dwpe32); free(dwpe64);
  free(c.wpe); free(c.out); free(c.R); free(dwpe); free(g0);
}

typedef struct { double *table, *out0, *out, *R; const int* tok; int BT, C, Vp, c0, nrows; } TokCtx;

/* L = sum((out0 + embedding of rows c0..c0+nrows) * R). */
static double tok_objective(void* p) {
  TokCtx* c = p;
  size_t n = (size_t)c->BT * c->C;
  memcpy(c->out, c->out0, n * sizeof(double));
  f64->embed_tok_forward(c->out + c->c0, c->C, c->tok, c->BT, c->table + (size_t)c->c0 * c->Vp,
                         c->nrows, c->Vp);
  return dot(c->out, c->R, n);
}

/* embed_tok on a slice of rows: forward adds only the slice, backward scatters into the
** right rows and columns, repeated tokens add up. */
static void test_embed_tok(void) {
  int BT = 10, C = 12, Vp = 16, c0 = 3, nrows = 7;
  int tok[10] = { 3, 15, 0, 3, 7, 7, 11, 3, 2, 15 };
  size_t nt = (size_t)C * Vp, nout = (size_t)BT * C;
  TokCtx c = { drandn(nt, 1, 0), drandn(nout, 1, 0), dalloc(nout), drandn(nout, 1, 0), tok,
               BT, C, Vp, c0, nrows };
  tok_objective(&c);
  double worst = 0;
  for (int i = 0; i < BT; i++)
    for (int r = 0; r < C; r++) {
      double want = c.out0[i * C + r] + (r >= c0 && r < c0 + nrows ? c.table[r * Vp + tok[i]] : 0);
      worst = fmax(worst, fabs(c.out[i * C + r] - want));
    }
  CHECK_MSG(worst == 0, "embed_tok_forward error %.3g", worst);
  double* dt = dalloc(nt);
  double* g0 = prefill(dt, nt);
  f64->embed_tok_backward(dt + (size_t)c0 * Vp, c.R + c0, C, tok, BT, nrows, Vp, 1);
  subtract(dt, g0, nt);
  check_grad("embed_tok.dtable", tok_objective, &c, c.table, dt, nt);

  float *t32 = to_f32(c.table, nt), *out32 = to_f32(c.out0, nout), *R32 = to_f32(c.R, nout);
  float* dt32 = falloc(nt);
  double* dt64 = dalloc(nt);
  f32->embed_tok_forward(out32 + c0, C, tok, BT, t32 + (size_t)c0 * Vp, nrows, Vp);
  check_f32("embed_tok_forward", out32, c.out, nout);
  f32->embed_tok_backward(dt32 + (size_t)c0 * Vp, R32 + c0, C, tok, BT, nrows, Vp, 1);
  f64->embed_tok_backward(dt64 + (size_t)c0 * Vp, c.R + c0, C, tok, BT, nrows, Vp, 1);
  check_f32("embed_tok_backward", dt32, dt64, nt);
  free(t32); free(out32); free(R32); free(dt32); free(dt64);
  free(c.table); free(c.out0); free(c.out); free(c.R); free(dt); free(g0);
}

// ----------------------------------------------------------------------------
// matmul

typedef struct {
  double *inp, *w, *bias, *out0, *out, *R;
  int BT, K, OC, ldinp;
  double* act; /* matmul_gelu_forward's GELU output (its out is the pre-activation) */
} MatmulCtx;

/* L = sum((out0 + inp @ w + bias) * R), using accumulate = 1 on a strided input. */
static double matmul_objective(void* p) {
  MatmulCtx* c = p;
  size_t n = (size_t)c->BT * c->OC;
  memcpy(c->out, c->out0, n * sizeof(double));
  f64->matmul_forward(c->out, c->inp, c->ldinp, c->w, c->bias, c->BT, c->K, c->OC, 1);
  return dot(c->out, c->R, n);
}

/* Naive out = inp @ w (+ bias). */
static void matmul_reference(double* out, const double* inp, int ldinp, const double* w,
                             const double* bias, int BT, int K, int OC) {
  for (int i = 0; i < BT; i++)
    for (int o = 0; o < OC; o++) {
      double s = bias ? bias[o] : 0;
      for (int k = 0; k < K; k++) s += inp[i * ldinp + k] * w[k * OC + o];
      out[i * OC + o] = s;
    }
}

/* matmul forward (accumulate 0/1, with and without bias, strided input) and backward
** (dw, dbias +=, dinp =, dinp / dbias optional, padding columns of dinp untouched). */
static void test_matmul(void) {
  int BT = 10, K = 18, OC = 13, ld = 23;
  size_t ni = (size_t)BT * ld, nw = (size_t)K * OC, no = (size_t)BT * OC;
  MatmulCtx c = { drandn(ni, 1, 0), drandn(nw, 1, 0), drandn(OC, 1, 0), drandn(no, 1, 0),
                  dalloc(no), drandn(no, 1, 0), BT, K, OC, ld, NULL };
  double* ref = dalloc(no);
  double* out = dalloc(no);
  matmul_reference(ref, c.inp, ld, c.w, c.bias, BT, K, OC);
  f64->matmul_forward(out, c.inp, ld, c.w, c.bias, BT, K, OC, 0);
  check_close("matmul_forward bias", out, ref, no, 1e-14);
  matmul_reference(ref, c.inp, ld, c.w, NULL, BT, K, OC);
  f64->matmul_forward(out, c.inp, ld, c.w, NULL, BT, K, OC, 0);
  check_close("matmul_forward nobias", out, ref, no, 1e-14);
  memcpy(out, c.out0, no * sizeof(double));
  f64->matmul_forward(out, c.inp, ld, c.w, NULL, BT, K, OC, 1);
  subtract(out, c.out0, no);
  check_close("matmul_forward accumulate", out, ref, no, 1e-14);

  double *dinp = dalloc(ni), *dw = dalloc(nw), *db = dalloc(OC);
  double *gi = prefill(dinp, ni), *gw = prefill(dw, nw), *gb = prefill(db, OC);
  f64->matmul_backward(dinp, dw, db, c.R, c.inp, ld, c.w, BT, K, OC, 1);
  subtract(dw, gw, nw); subtract(db, gb, OC);
  int pad_ok = 1;  /* dinp is overwritten, but its padding columns K..ld-1 must be untouched */
  for (int i = 0; i < BT; i++)
    for (int k = K; k < ld; k++) {
      pad_ok &= dinp[i * ld + k] == gi[i * ld + k];
      dinp[i * ld + k] = 0; /* the padding's true gradient, for the check below */
    }
  CHECK(pad_ok);
  check_grad("matmul.dinp (ld>K)", matmul_objective, &c, c.inp, dinp, ni);
  check_grad("matmul.dw", matmul_objective, &c, c.w, dw, nw);
  check_grad("matmul.dbias", matmul_objective, &c, c.bias, db, OC);

  /* dinp == NULL and dbias == NULL are skipped, dw is the same. */
  double* dw2 = dalloc(nw);
  f64->matmul_backward(NULL, dw2, NULL, c.R, c.inp, ld, c.w, BT, K, OC, 1);
  CHECK(max_abs_diff(dw2, dw, nw) < 1e-12);

  float *i32 = to_f32(c.inp, ni), *w32 = to_f32(c.w, nw), *b32 = to_f32(c.bias, OC);
  float *o32 = falloc(no), *R32 = to_f32(c.R, no);
  float *di32 = falloc(ni), *dw32 = falloc(nw), *db32 = falloc(OC);
  double *di64 = dalloc(ni), *dw64 = dalloc(nw), *db64 = dalloc(OC);
  matmul_reference(ref, c.inp, ld, c.w, c.bias, BT, K, OC);
  f32->matmul_forward(o32, i32, ld, w32, b32, BT, K, OC, 0);
  check_f32("matmul_forward", o32, ref, no);
  f32->matmul_backward(di32, dw32, db32, R32, i32, ld, w32, BT, K, OC, 1);
  f64->matmul_backward(di64, dw64, db64, c.R, c.inp, ld, c.w, BT, K, OC, 1);
  check_f32("matmul_backward.dinp", di32, di64, ni);
  check_f32("matmul_backward.dw", dw32, dw64, nw);
  check_f32("matmul_backward.dbias", db32, db64, OC);
  free(i32); free(w32); free(b32); free(o32); free(R32); free(di32); free(dw32); free(db32);
  free(di64); free(dw64); free(db64);
  free(c.inp); free(c.w); free(c.bias); free(c.out0); free(c.out); free(c.R);
  free(ref); free(out); free(dinp); free(dw); free(db); free(gi); free(gw); free(gb); free(dw2);
}

// ----------------------------------------------------------------------------
// matmul + GELU (GPT-2's fc)

/* L = sum(GELU(out0 + inp @ w + bias) * R) through matmul_gelu_forward with accumulate = 1. */
static double matmul_gelu_objective(void* p) {
  MatmulCtx* c = p;
  size_t n = (size_t)c->BT * c->OC;
  memcpy(c->out, c->out0, n * sizeof(double));
  f64->matmul_gelu_forward(c->act, c->out, c->inp, c->ldinp, c->w, c->bias, c->BT, c->K, c->OC, 1);
  return dot(c->act, c->R, n);
}

/* The tanh-approximation GELU of x[0..n) into y, written out. */
static void gelu_reference(double* y, const double* x, size_t n) {
  for (size_t i = 0; i < n; i++)
    y[i] = 0.5 * x[i] * (1 + tanh(sqrt(2 / M_PI) * (x[i] + 0.044715 * x[i] * x[i] * x[i])));
}

/* matmul_gelu_forward: pre and out against matmul's reference and the GELU formula (overwrite,
** with and without bias, and accumulate), its gradients (through gelu_backward and
** matmul_backward, as the step's backward takes them) against finite differences of the fused
** forward, and fp32 against fp64. */
static void test_matmul_gelu(void) {
  int BT = 9, K = 11, OC = 8, ld = 14;
  size_t ni = (size_t)BT * ld, nw = (size_t)K * OC, no = (size_t)BT * OC;
  MatmulCtx c = { drandn(ni, 0.6, 0), drandn(nw, 0.6, 0), drandn(OC, 0.8, 0), drandn(no, 0.8, 0),
                  dalloc(no), drandn(no, 1, 0), BT, K, OC, ld, dalloc(no) };
  double *ref = dalloc(no), *gref = dalloc(no);
  for (int with_bias = 0; with_bias < 2; with_bias++) {
    const double* bias = with_bias ? c.bias : NULL;
    matmul_reference(ref, c.inp, ld, c.w, bias, BT, K, OC);
    gelu_reference(gref, ref, no);
    f64->matmul_gelu_forward(c.act, c.out, c.inp, ld, c.w, bias, BT, K, OC, 0);
    check_close(with_bias ? "matmul_gelu_forward pre bias" : "matmul_gelu_forward pre", c.out,
                ref, no, 1e-14);
    check_close(with_bias ? "matmul_gelu_forward out bias" : "matmul_gelu_forward out", c.act,
                gref, no, 1e-14);
  }
  for (size_t i = 0; i < no; i++) ref[i] += c.out0[i];
  gelu_reference(gref, ref, no);
  matmul_gelu_objective(&c);
  check_close("matmul_gelu_forward pre accumulate", c.out, ref, no, 1e-14);
  check_close("matmul_gelu_forward out accumulate", c.act, gref, no, 1e-14);

  double *dpre = dalloc(no), *dinp = dalloc(ni), *dw = dalloc(nw), *db = dalloc(OC);
  f64->gelu_backward(dpre, c.out, c.R, no);
  f64->matmul_backward(dinp, dw, db, dpre, c.inp, ld, c.w, BT, K, OC, 0);
  for (int i = 0; i < BT; i++)
    for (int k = K; k < ld; k++) dinp[i * ld + k] = 0; /* padding columns: no gradient */
  check_grad("matmul_gelu.dinp (ld>K)", matmul_gelu_objective, &c, c.inp, dinp, ni);
  check_grad("matmul_gelu.dw", matmul_gelu_objective, &c, c.w, dw, nw);
  check_grad("matmul_gelu.dbias", matmul_gelu_objective, &c, c.bias, db, OC);

  float *i32 = to_f32(c.inp, ni), *w32 = to_f32(c.w, nw), *b32 = to_f32(c.bias, OC);
  float *pre32 = to_f32(c.out0, no), *out32 = falloc(no);
  matmul_gelu_objective(&c); /* c.out, c.act: the fp64 accumulate case */
  f32->matmul_gelu_forward(out32, pre32, i32, ld, w32, b32, BT, K, OC, 1);
  check_f32("matmul_gelu_forward pre", pre32, c.out, no);
  check_f32("matmul_gelu_forward out", out32, c.act, no);
  free(i32); free(w32); free(b32); free(pre32); free(out32);
  free(dpre); free(dinp); free(dw); free(db); free(ref); free(gref);
  free(c.inp); free(c.w); free(c.bias); free(c.out0); free(c.out); free(c.R); free(c.act);
}

// ----------------------------------------------------------------------------
// layernorm

typedef struct { double *inp, *w, *b, *out, *mean, *rstd, *R; int BT, C; } LnCtx;

/* L = sum(layernorm(inp; w, b) * R). */
static double ln_objective(void* p) {
  LnCtx* c = p;
  f64->layernorm_forward(c->out, c->mean, c->rstd, c->inp, c->w, c->b, c->BT, c->C);
  return dot(c->out, c->R, (size_t)c->BT * c->C);
}

/* Naive LayerNorm with eps 1e-5 and biased variance. */
static void ln_reference(double* out, const double* inp, const double* w, const double* b,
                         int BT, int C) {
  for (int i = 0; i < BT; i++) {
    const double* x = inp + (size_t)i * C;
    double m = 0, v = 0;
    for (int c = 0; c < C; c++) m += x[c] / C;
    for (int c = 0; c < C; c++) v += (x[c] - m) * (x[c] - m) / C;
    for (int c = 0; c < C; c++) out[i * C + c] = (x[c] - m) / sqrt(v + 1e-5) * w[c] + b[c];
  }
}

/* layernorm forward against the formula, backward against finite differences. */
static void test_layernorm(void) {
  int BT = 14, C = 18;
  size_t n = (size_t)BT * C;
  LnCtx c = { drandn(n, 1.5, 0.7), drandn(C, 0.5, 1), drandn(C, 0.5, 0), dalloc(n),
              dalloc(BT), dalloc(BT), drandn(n, 1, 0), BT, C };
  double* ref = dalloc(n);
  ln_reference(ref, c.inp, c.w, c.b, BT, C);
  ln_objective(&c);
  check_close("layernorm_forward", c.out, ref, n, 1e-13);
  double *dinp = dalloc(n), *dw = dalloc(C), *db = dalloc(C);
  double *gi = prefill(dinp, n), *gw = prefill(dw, C), *gb = prefill(db, C);
  f64->layernorm_backward(dinp, dw, db, c.R, c.inp, c.w, c.mean, c.rstd, BT, C, 1);
  subtract(dinp, gi, n); subtract(dw, gw, C); subtract(db, gb, C);
  check_grad("layernorm.dinp", ln_objective, &c, c.inp, dinp, n);
  check_grad("layernorm.dw", ln_objective, &c, c.w, dw, C);
  check_grad("layernorm.db", ln_objective, &c, c.b, db, C);

  float *x32 = to_f32(c.inp, n), *w32 = to_f32(c.w, C), *b32 = to_f32(c.b, C);
  float *o32 = falloc(n), *m32 = falloc(BT), *r32 = falloc(BT), *R32 = to_f32(c.R, n);
  float *dx32 = falloc(n), *dw32 = falloc(C), *db32 = falloc(C);
  double *dx64 = dalloc(n), *dw64 = dalloc(C), *db64 = dalloc(C);
  f32->layernorm_forward(o32, m32, r32, x32, w32, b32, BT, C);
  check_f32("layernorm_forward", o32, c.out, n);
  check_f32("layernorm_forward.rstd", r32, c.rstd, BT);
  f32->layernorm_backward(dx32, dw32, db32, R32, x32, w32, m32, r32, BT, C, 1);
  f64->layernorm_backward(dx64, dw64, db64, c.R, c.inp, c.w, c.mean, c.rstd, BT, C, 1);
  check_f32("layernorm_backward.dinp", dx32, dx64, n);
  check_f32("layernorm_backward.dw", dw32, dw64, C);
  check_f32("layernorm_backward.db", db32, db64, C);
  free(x32); free(w32); free(b32); free(o32); free(m32); free(r32); free(R32);
  free(dx32); free(dw32); free(db32); free(dx64); free(dw64); free(db64);
  free(c.inp); free(c.w); free(c.b); free(c.out); free(c.mean); free(c.rstd); free(c.R);
  free(ref); free(dinp); free(dw); free(db); free(gi); free(gw); free(gb);
}

// ----------------------------------------------------------------------------
// RMSNorm

typedef struct { double *inp, *w, *out, *rstd, *R; int BT, C; double eps; } RmsCtx;

/* L = sum(rmsnorm(inp; w) * R). */
static double rms_objective(void* p) {
  RmsCtx* c = p;
  f64->rmsnorm_forward(c->out, c->rstd, c->inp, c->w, c->BT, c->C, c->eps);
  return dot_extended(c->out, c->R, (size_t)c->BT * c->C);
}

/* Naive RMSNorm: out = x / sqrt(mean(x^2) + eps) * w, and the rstd of every row. */
static void rms_reference(double* out, double* rstd, const double* inp, const double* w, int BT,
                          int C, double eps) {
  for (int i = 0; i < BT; i++) {
    const double* x = inp + (size_t)i * C;
    double ms = 0;
    for (int c = 0; c < C; c++) ms += x[c] * x[c] / C;
    rstd[i] = 1 / sqrt(ms + eps);
    for (int c = 0; c < C; c++) out[i * C + c] = x[c] * rstd[i] * w[c];
  }
}

/* rmsnorm forward (and rstd) against the formula, including a zero row (rstd = 1/sqrt(eps));
** backward against finite differences with dinp and dw pre-filled (both accumulate); with
** accumulate = 0, dw is overwritten and dinp still accumulates; fp32 against fp64. */
static void test_rmsnorm(void) {
  int BT = 14, C = 37;
  double eps = 1e-5;
  size_t n = (size_t)BT * C;
  RmsCtx c = { drandn(n, 1.5, 0.3), drandn(C, 0.5, 1), dalloc(n), dalloc(BT), drandn(n, 1, 0),
               BT, C, eps };
  for (int k = 0; k < C; k++) c.inp[3 * C + k] = 0;
  double *ref = dalloc(n), *ref_rstd = dalloc(BT);
  rms_reference(ref, ref_rstd, c.inp, c.w, BT, C, eps);
  rms_objective(&c);
  check_close("rmsnorm_forward", c.out, ref, n, 1e-14);
  check_close("rmsnorm_forward.rstd", c.rstd, ref_rstd, BT, 1e-14);
  double *dinp = dalloc(n), *dw = dalloc(C);
  double *gi = prefill(dinp, n), *gw = prefill(dw, C);
  f64->rmsnorm_backward(dinp, dw, c.R, c.inp, c.w, c.rstd, BT, C, 1);
  subtract(dinp, gi, n); subtract(dw, gw, C);
  check_grad("rmsnorm.dinp", rms_objective, &c, c.inp, dinp, n);
  check_grad("rmsnorm.dw", rms_objective, &c, c.w, dw, C);
  double *dinp0 = dcopy(gi, n), *dw0 = drandn(C, 1, 0);
  f64->rmsnorm_backward(dinp0, dw0, c.R, c.inp, c.w, c.rstd, BT, C, 0);
  subtract(dinp0, gi, n);
  CHECK(max_abs_diff(dw0, dw, C) < 1e-12 && max_abs_diff(dinp0, dinp, n) < 1e-12);

  float *x32 = to_f32(c.inp, n), *w32 = to_f32(c.w, C), *o32 = falloc(n), *r32 = falloc(BT);
  float *R32 = to_f32(c.R, n), *dx32 = falloc(n), *dw32 = falloc(C);
  double *dx64 = dalloc(n), *dw64 = dalloc(C);
  f32->rmsnorm_forward(o32, r32, x32, w32, BT, C, eps);
  check_f32("rmsnorm_forward", o32, c.out, n);
  check_f32("rmsnorm_forward.rstd", r32, c.rstd, BT);
  f32->rmsnorm_backward(dx32, dw32, R32, x32, w32, r32, BT, C, 1);
  f64->rmsnorm_backward(dx64, dw64, c.R, c.inp, c.w, c.rstd, BT, C, 1);
  check_f32("rmsnorm_backward.dinp", dx32, dx64, n);
  check_f32("rmsnorm_backward.dw", dw32, dw64, C);
  free(x32); free(w32); free(o32); free(r32); free(R32); free(dx32); free(dw32);
  free(dx64); free(dw64);
  free(c.inp); free(c.w); free(c.out); free(c.rstd); free(c.R);
  free(ref); free(ref_rstd); free(dinp); free(dw); free(gi); free(gw); free(dinp0); free(dw0);
}

// ----------------------------------------------------------------------------
// attention

/* An attention problem: q, k, v are views into one buffer buf of nbuf values (so one
** finite-difference check covers all three): either GPT-2's fused [B, T, 3C] qkv (q = buf,
** k = buf + C, v = buf + 2C, ldq = ldkv = 3C, NKV = NH), or three separate blocks [B*T, ldq],
** [B*T, ldkv], [B*T, ldkv] whose rows may be wider than their heads (padding that attention
** must neither read nor write). out is [B, T, NH*hs], lse [B, NH, T]. */
typedef struct {
  double *buf, *q, *k, *v, *out, *lse, *scratch, *R;
  size_t nbuf;
  int B, T, NH, NKV, hs, ldq, ldkv;
} AttCtx;

/* A shape: ldq == 0 means GPT-2's fused qkv (NKV = NH). */
typedef struct { int B, T, NH, NKV, hs, ldq, ldkv; } AttShape;

/* Elements of out (and dout): B*T rows of NH*hs. */
static size_t att_nout(const AttCtx* c) { return (size_t)c->B * c->T * c->NH * c->hs; }

/* L = sum(attention(q, k, v) * R). */
static double att_objective(void* p) {
  AttCtx* c = p;
  f64->attention_forward(c->out, c->lse, c->q, c->k, c->v, c->ldq, c->ldkv, c->scratch, c->B,
                         c->T, c->NH, c->NKV, c->hs);
  return dot_extended(c->out, c->R, att_nout(c));
}

/* A context with random q, k, v (padding included) and R for shape s, scratch for
** kernels_threads(). */
static AttCtx att_new(AttShape s) {
  size_t BT = (size_t)s.B * s.T;
  AttCtx c = { .B = s.B, .T = s.T, .NH = s.NH, .NKV = s.NKV, .hs = s.hs, .ldq = s.ldq,
               .ldkv = s.ldkv };
  int C = s.NH * s.hs;
  if (s.ldq == 0) {
    c.NKV = s.NH;
    c.ldq = c.ldkv = 3 * C;
    c.nbuf = BT * 3 * C;
  } else {
    c.nbuf = BT * (size_t)(s.ldq + 2 * s.ldkv);
  }
  c.buf = drandn(c.nbuf, 1, 0);
  c.q = c.buf;
  c.k = s.ldq == 0 ? c.buf + C : c.buf + BT * s.ldq;
  c.v = s.ldq == 0 ? c.buf + 2 * C : c.k + BT * s.ldkv;
  c.out = dalloc(BT * C);
  c.lse = dalloc((size_t)s.B * s.NH * s.T);
  c.scratch = dalloc(attention_scratch_elems(s.T, s.hs) * kernels_threads());
  c.R = drandn(BT * C, 1, 0);
  return c;
}

/* Frees the buffers of att_new. */
static void att_free(AttCtx* c) {
  free(c->buf); free(c->out); free(c->lse); free(c->scratch); free(c->R);
}

/* The views of q, k, v's gradient in dbuf, laid out as c's buf. */
static void att_grad_views(const AttCtx* c, double* dbuf, double** dq, double** dk, double** dv) {
  *dq = dbuf + (c->q - c->buf);
  *dk = dbuf + (c->k - c->buf);
  *dv = dbuf + (c->v - c->buf);
}

/* f64 attention_backward of c (after att_objective) with dout = R, accumulating into dbuf. */
static void att_backward64(const AttCtx* c, double* dbuf) {
  double *dq, *dk, *dv;
  att_grad_views(c, dbuf, &dq, &dk, &dv);
  f64->attention_backward(dq, dk, dv, c->R, c->q, c->k, c->v, c->ldq, c->ldkv, c->out, c->lse,
                          c->scratch, c->B, c->T, c->NH, c->NKV, c->hs);
}

/* Naive causal attention as in llm.c's attention_forward (loops, no GEMM, no tiles) on GPT-2's
** fused qkv [B, T, 3C]; lse [B, NH, T] receives each row's log-sum-exp of the scaled scores
** over keys 0..t. */
static void att_reference(double* out, double* lse, const double* qkv, int B, int T, int C,
                          int NH) {
  int hs = C / NH;
  double scale = 1.0 / sqrt(hs);
  double* w = dalloc(T);
  for (int b = 0; b < B; b++)
    for (int t = 0; t < T; t++)
      for (int h = 0; h < NH; h++) {
        const double* q = qkv + ((size_t)b * T + t) * 3 * C + h * hs;
        double maxv = -1e300, sum = 0;
        for (int j = 0; j <= t; j++) {
          const double* k = qkv + ((size_t)b * T + j) * 3 * C + C + h * hs;
          w[j] = scale * dot(q, k, hs);
          maxv = fmax(maxv, w[j]);
        }
        for (int j = 0; j <= t; j++) { w[j] = exp(w[j] - maxv); sum += w[j]; }
        lse[((size_t)b * NH + h) * T + t] = maxv + log(sum);
        double* o = out + ((size_t)b * T + t) * C + h * hs;
        for (int d = 0; d < hs; d++) o[d] = 0;
        for (int j = 0; j <= t; j++) {
          const double* v = qkv + ((size_t)b * T + j) * 3 * C + 2 * C + h * hs;
          for (int d = 0; d < hs; d++) o[d] += w[j] / sum * v[d];
        }
      }
  free(w);
}

/* transformers' repeat_kv, written out: GPT-2's fused qkv [B, T, 3C] (C = NH*hs) with c's
** queries and, for every query head h, a copy of K/V head h / (NH / NKV). Caller frees. */
static double* att_repeat_kv(const AttCtx* c) {
  int C = c->NH * c->hs, group = c->NH / c->NKV;
  size_t BT = (size_t)c->B * c->T;
  double* qkv = dalloc(BT * 3 * C);
  for (size_t i = 0; i < BT; i++)
    for (int h = 0; h < c->NH; h++)
      for (int d = 0; d < c->hs; d++) {
        double* row = qkv + i * 3 * C + (size_t)h * c->hs + d;
        size_t kv = i * c->ldkv + (size_t)(h / group) * c->hs + d;
        row[0] = c->q[i * c->ldq + (size_t)h * c->hs + d];
        row[C] = c->k[kv];
        row[2 * C] = c->v[kv];
      }
  return qkv;
}

/* Causal mask: changing token t_change's q, k, v leaves the outputs of earlier positions
** bit-identical and changes those at and after it. */
static void check_causal(AttCtx* c, int t_change) {
  int B = c->B, T = c->T, C = c->NH * c->hs;
  size_t no = att_nout(c);
  double* before = dalloc(no);
  att_objective(c);
  memcpy(before, c->out, no * sizeof(double));
  double* saved = dcopy(c->buf, c->nbuf);
  for (int b = 0; b < B; b++) {
    size_t row = (size_t)b * T + t_change;
    for (int i = 0; i < C; i++) c->q[row * c->ldq + i] += 0.5;
    for (int i = 0; i < c->NKV * c->hs; i++) {
      c->k[row * c->ldkv + i] += 0.5;
      c->v[row * c->ldkv + i] += 0.5;
    }
  }
  att_objective(c);
  int earlier_same = 1, later_changed = 1;
  for (int b = 0; b < B; b++)
    for (int t = 0; t < T; t++) {
      const double* x = c->out + ((size_t)b * T + t) * C;
      const double* y = before + ((size_t)b * T + t) * C;
      int same = memcmp(x, y, (size_t)C * sizeof(double)) == 0;
      if (t < t_change) earlier_same &= same;
      else later_changed &= !same;
    }
  CHECK_MSG(earlier_same, "attention: changing token %d changed an earlier output", t_change);
  CHECK_MSG(later_changed, "attention: changing token %d left a later output", t_change);
  memcpy(c->buf, saved, c->nbuf * sizeof(double));
  att_objective(c);
  free(before); free(saved);
}

/* A shape's name for the messages: B, T, heads, head size, strides. */
static void att_name(char* name, size_t size, const char* what, const AttCtx* c) {
  snprintf(name, size, "%s B%d T%d NH%d NKV%d hs%d ldq%d ldkv%d", what, c->B, c->T, c->NH,
           c->NKV, c->hs, c->ldq, c->ldkv);
}

/* attention forward and lse against the naive loops (on the explicitly repeated K/V for
** grouped-query shapes) for shapes with one and several tiles: T = 1, T below, at and not a
** multiple of the tile size, T over three tiles, B > 1, NH > 1, head sizes that are not a
** multiple of the vector width; GPT-2's fused qkv, and separate q, k, v with rows wider than
** their heads for NH = NKV, NH = 2 NKV, NH = 6 NKV and a single K/V head. Every lse is finite.
** Then the causal mask at the start, end and on both sides of a tile boundary, fused and
** grouped. */
static void test_attention_forward(void) {
  int tq = ATTENTION_TILE_Q;
  AttShape shapes[] = {
    { 2, 5, 3, 3, 4, 0, 0 }, { 1, 1, 2, 2, 4, 0, 0 }, { 3, 7, 1, 1, 6, 0, 0 },
    { 1, tq, 1, 1, 8, 0, 0 }, { 2, 2 * tq + 22, 2, 2, 5, 0, 0 }, { 2, 3 * tq + 8, 2, 2, 8, 0, 0 },
    { 1, tq + 1, 3, 3, 12, 0, 0 },
    { 2, 5, 4, 2, 3, 14, 7 }, { 2, 7, 6, 1, 4, 27, 5 }, { 2, 7, 3, 3, 4, 13, 12 },
    { 1, 2 * tq + 22, 4, 2, 5, 21, 10 }, { 1, tq + 3, 6, 1, 8, 48, 9 }, { 3, 1, 4, 4, 2, 8, 9 },
  };
  for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
    AttCtx c = att_new(shapes[si]);
    size_t no = att_nout(&c), nl = (size_t)c.B * c.NH * c.T;
    double *ref = dalloc(no), *ref_lse = dalloc(nl);
    double* qkv = att_repeat_kv(&c);
    att_reference(ref, ref_lse, qkv, c.B, c.T, c.NH * c.hs, c.NH);
    att_objective(&c);
    char name[96];
    att_name(name, sizeof name, "attention_forward", &c);
    check_close(name, c.out, ref, no, 1e-12);
    att_name(name, sizeof name, "attention_forward.lse", &c);
    check_close(name, c.lse, ref_lse, nl, 1e-12);
    int finite = 1;
    for (size_t i = 0; i < nl; i++) finite &= isfinite(c.lse[i]);
    CHECK(finite);
    free(ref); free(ref_lse); free(qkv);
    att_free(&c);
  }
  int changes[5] = { 0, 2, tq - 1, tq, 2 * tq + 21 };
  AttShape causal[2] = { { 2, 2 * tq + 22, 2, 2, 5, 0, 0 }, { 2, 2 * tq + 22, 4, 2, 5, 21, 11 } };
  for (int s = 0; s < 2; s++) {
    AttCtx c = att_new(causal[s]);
    for (int i = 0; i < 5; i++) check_causal(&c, changes[i]);
    att_free(&c);
  }
}

/* fp32 against fp64 for the forward (out, lse) and the backward (dq, dk, dv from zero) of c. */
static void att_check_f32(AttCtx* c) {
  size_t no = att_nout(c), nl = (size_t)c->B * c->NH * c->T;
  float *b32 = to_f32(c->buf, c->nbuf), *o32 = falloc(no), *l32 = falloc(nl);
  float *R32 = to_f32(c->R, no), *db32 = falloc(c->nbuf);
  float* s32 = falloc(attention_scratch_elems(c->T, c->hs) * kernels_threads());
  double* db64 = dalloc(c->nbuf);
  float *q32 = b32 + (c->q - c->buf), *k32 = b32 + (c->k - c->buf), *v32 = b32 + (c->v - c->buf);
  float *dq32 = db32 + (c->q - c->buf), *dk32 = db32 + (c->k - c->buf);
  float* dv32 = db32 + (c->v - c->buf);
  att_objective(c);
  f32->attention_forward(o32, l32, q32, k32, v32, c->ldq, c->ldkv, s32, c->B, c->T, c->NH,
                         c->NKV, c->hs);
  char name[96];
  att_name(name, sizeof name, "attention_forward", c);
  check_f32(name, o32, c->out, no);
  att_name(name, sizeof name, "attention_forward.lse", c);
  check_f32(name, l32, c->lse, nl);
  f32->attention_backward(dq32, dk32, dv32, R32, q32, k32, v32, c->ldq, c->ldkv, o32, l32, s32,
                          c->B, c->T, c->NH, c->NKV, c->hs);
  att_backward64(c, db64);
  att_name(name, sizeof name, "attention_backward", c);
  check_f32(name, db32, db64, c->nbuf);
  free(b32); free(o32); free(l32); free(R32); free(db32); free(s32); free(db64);
}

/* attention backward against finite differences on every entry of q, k, v, padding included
** (whose gradient must stay 0: untouched); dq, dk, dv pre-filled, so they must accumulate. On
** small shapes and on shapes of three query and key tiles, the last partial (so the recurrence
** across tiles and the masked diagonal tiles are exercised): GPT-2's fused qkv, and separate,
** strided q, k, v with NH = NKV, NH = 2 NKV and one K/V head for six query heads (a K/V
** head's gradient sums over its group). Then fp32 against fp64 on the larger shapes. */
static void test_attention_backward(void) {
  int T3 = 2 * ATTENTION_TILE_Q + 22;
  AttShape shapes[] = {
    { 2, 5, 3, 3, 4, 0, 0 }, { 1, T3, 2, 2, 5, 0, 0 }, { 2, 5, 4, 2, 3, 14, 7 },
    { 2, 7, 6, 1, 4, 27, 5 }, { 2, 7, 3, 3, 4, 13, 12 }, { 1, T3, 4, 2, 3, 13, 7 },
    { 1, T3, 6, 1, 2, 13, 3 },
  };
  for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
    AttCtx c = att_new(shapes[si]);
    double* dbuf = dalloc(c.nbuf);
    double* g0 = prefill(dbuf, c.nbuf);
    att_objective(&c);
    att_backward64(&c, dbuf);
    subtract(dbuf, g0, c.nbuf);
    char name[96];
    snprintf(name, sizeof name, "attention.dqkv T%d NH%d NKV%d%s", c.T, c.NH, c.NKV,
             shapes[si].ldq ? " ld" : "");
    check_grad(name, att_objective, &c, c.buf, dbuf, c.nbuf);
    if (c.T == T3) att_check_f32(&c);
    free(dbuf); free(g0);
    att_free(&c);
  }
}

// ----------------------------------------------------------------------------
// GELU

typedef struct { double *inp, *out, *R; size_t n; } EwCtx;

/* L = sum(gelu(inp) * R). */
static double gelu_objective(void* p) {
  EwCtx* c = p;
  f64->gelu_forward(c->out, c->inp, c->n);
  return dot(c->out, c->R, c->n);
}

/* GELU against the tanh formula (including large |x|), its backward against finite
** differences, and fp32 against fp64. */
static void test_elementwise(void) {
  size_t n = 37;
  EwCtx c = { drandn(n, 2, 0), dalloc(n), drandn(n, 1, 0), n };
  c.inp[0] = 9.0; c.inp[1] = -9.0; c.inp[2] = 0.0;
  double* ref = dalloc(n);
  gelu_reference(ref, c.inp, n);
  gelu_objective(&c);
  check_close("gelu_forward", c.out, ref, n, 1e-15);
  double* dx = dalloc(n);
  double* g0 = prefill(dx, n);
  f64->gelu_backward(dx, c.inp, c.R, n); /* overwrites the prefilled dx */
  check_grad("gelu.dinp", gelu_objective, &c, c.inp, dx, n);

  float *x32 = to_f32(c.inp, n), *o32 = falloc(n), *R32 = to_f32(c.R, n), *d32 = falloc(n);
  double* d64 = dalloc(n);
  f32->gelu_forward(o32, x32, n);
  check_f32("gelu_forward", o32, ref, n);
  f32->gelu_backward(d32, x32, R32, n);
  f64->gelu_backward(d64, c.inp, c.R, n);
  check_f32("gelu_backward", d32, d64, n);
  free(x32); free(o32); free(R32); free(d32); free(d64);
  free(c.inp); free(c.out); free(c.R); free(ref); free(dx); free(g0);
}

// ----------------------------------------------------------------------------
// SwiGLU

typedef struct { double *gate, *up, *out, *R; size_t n; } GluCtx;

/* L = sum(swiglu(gate, up) * R). */
static double glu_objective(void* p) {
  GluCtx* c = p;
  f64->swiglu_forward(c->out, c->gate, c->up, c->n);
  return dot(c->out, c->R, c->n);
}

/* SwiGLU against silu(gate) * up (including large |gate|), its backward against finite
** differences on gate and up (dgate and dup pre-filled: both are overwritten), fp32 against
** fp64, and finite results in both precisions for |gate| far beyond exp's range. */
static void test_swiglu(void) {
  size_t n = 37;
  GluCtx c = { drandn(n, 2, 0), drandn(n, 1, 0.3), dalloc(n), drandn(n, 1, 0), n };
  c.gate[0] = 9.0; c.gate[1] = -9.0; c.gate[2] = 0.0; c.gate[3] = 30.0; c.gate[4] = -30.0;
  double* ref = dalloc(n);
  for (size_t i = 0; i < n; i++) ref[i] = c.gate[i] / (1 + exp(-c.gate[i])) * c.up[i];
  glu_objective(&c);
  check_close("swiglu_forward", c.out, ref, n, 1e-15);
  double *dg = dalloc(n), *du = dalloc(n);
  double *g0 = prefill(dg, n), *u0 = prefill(du, n);
  f64->swiglu_backward(dg, du, c.R, c.gate, c.up, n);
  check_grad("swiglu.dgate", glu_objective, &c, c.gate, dg, n);
  check_grad("swiglu.dup", glu_objective, &c, c.up, du, n);

  float *g32 = to_f32(c.gate, n), *u32 = to_f32(c.up, n), *o32 = falloc(n), *R32 = to_f32(c.R, n);
  float *dg32 = falloc(n), *du32 = falloc(n);
  f32->swiglu_forward(o32, g32, u32, n);
  check_f32("swiglu_forward", o32, ref, n);
  f32->swiglu_backward(dg32, du32, R32, g32, u32, n);
  check_f32("swiglu_backward.dgate", dg32, dg, n);
  check_f32("swiglu_backward.dup", du32, du, n);

  double big[4] = { 100, -100, 1000, -1000 }, one[4] = { 1, 1, 1, 1 }, r64[3][4];
  float big32[4] = { 100, -100, 1000, -1000 }, one32[4] = { 1, 1, 1, 1 }, r32[3][4];
  f64->swiglu_forward(r64[0], big, one, 4);
  f64->swiglu_backward(r64[1], r64[2], one, big, one, 4);
  f32->swiglu_forward(r32[0], big32, one32, 4);
  f32->swiglu_backward(r32[1], r32[2], one32, big32, one32, 4);
  int finite = 1;
  for (int k = 0; k < 3; k++)
    for (int i = 0; i < 4; i++) finite &= isfinite(r64[k][i]) && isfinite(r32[k][i]);
  CHECK_MSG(finite, "swiglu: a non-finite result for |gate| up to 1000");
  CHECK(r64[0][0] == 100 && r32[0][0] == 100 && fabs(r64[0][1]) < 1e-40 && r32[0][1] <= 0);
  free(g32); free(u32); free(o32); free(R32); free(dg32); free(du32);
  free(c.gate); free(c.up); free(c.out); free(c.R); free(ref); free(dg); free(du);
  free(g0); free(u0);
}

// ----------------------------------------------------------------------------
// rotary position embedding

typedef struct { double *x, *y, *inv_freq, *R; int B, T, nh, hs, ld; } RopeCtx;

/* Elements of a RoPE problem's x: B*T rows of ld. */
static size_t rope_n(const RopeCtx* c) { return (size_t)c->B * c->T * c->ld; }

/* L = sum(rope(x) * R), rope applied to a copy y of x (padding columns included, unchanged). */
static double rope_objective(void* p) {
  RopeCtx* c = p;
  memcpy(c->y, c->x, rope_n(c) * sizeof(double));
  f64->rope_forward(c->y, c->ld, c->inv_freq, c->B, c->T, c->nh, c->hs);
  return dot(c->y, c->R, rope_n(c));
}

/* A RoPE problem with random x and R, padding columns when ld > nh*hs, and Llama's
** frequencies inv_freq[j] = 10000^(-2j/hs). */
static RopeCtx rope_new(int B, int T, int nh, int hs, int ld) {
  size_t n = (size_t)B * T * ld;
  RopeCtx c = { drandn(n, 1, 0), dalloc(n), dalloc(hs / 2), drandn(n, 1, 0), B, T, nh, hs, ld };
  for (int j = 0; j < hs / 2; j++) c.inv_freq[j] = 1 / pow(10000.0, 2.0 * j / hs);
  return c;
}

/* Frees the buffers of rope_new. */
static void rope_free(RopeCtx* c) { free(c->x); free(c->y); free(c->inv_freq); free(c->R); }

/* The rotation written out: out = x with every head's pairs (j, j + hs/2) rotated by
** a = t * inv_freq[j], the product taken in double or (float_angle) in float as the fp32
** kernel must; padding copied. */
static void rope_reference(double* out, const RopeCtx* c, int float_angle) {
  int half = c->hs / 2;
  memcpy(out, c->x, rope_n(c) * sizeof(double));
  for (int row = 0; row < c->B * c->T; row++) {
    int t = row % c->T;
    for (int h = 0; h < c->nh; h++)
      for (int j = 0; j < half; j++) {
        double a = float_angle ? (double)((float)t * (float)c->inv_freq[j]) : t * c->inv_freq[j];
        size_t i1 = (size_t)row * c->ld + (size_t)h * c->hs + j, i2 = i1 + half;
        out[i1] = c->x[i1] * cos(a) - c->x[i2] * sin(a);
        out[i2] = c->x[i2] * cos(a) + c->x[i1] * sin(a);
      }
  }
}

/* Whether the padding columns (nh*hs .. ld) of every row of a and b are the same bits. */
static int rope_padding_same(const RopeCtx* c, const double* a, const double* b) {
  int w = c->nh * c->hs, same = 1;
  for (int row = 0; row < c->B * c->T; row++)
    same &= memcmp(a + (size_t)row * c->ld + w, b + (size_t)row * c->ld + w,
                   (size_t)(c->ld - w) * sizeof(double)) == 0;
  return same;
}

/* One RoPE shape: forward against the rotation written out (fp64; fp32 against the angle
** taken in float, so large positions check the angle's precision) with padding untouched;
** backward as forward's exact inverse (to rounding) and as its adjoint, <dy, R x> =
** <R^T dy, x>; against finite differences (fd); fp32 against fp64. */
static void rope_check(int B, int T, int nh, int hs, int ld, int fd) {
  RopeCtx c = rope_new(B, T, nh, hs, ld);
  size_t n = rope_n(&c);
  char name[80];
  double *ref = dalloc(n), *ref32 = dalloc(n);
  rope_reference(ref, &c, 0);
  rope_reference(ref32, &c, 1);
  rope_objective(&c);
  snprintf(name, sizeof name, "rope_forward B%d T%d nh%d hs%d ld%d", B, T, nh, hs, ld);
  check_close(name, c.y, ref, n, 1e-14);
  CHECK_MSG(rope_padding_same(&c, c.y, c.x), "%s: padding written", name);
  float *x32 = to_f32(c.x, n), *dy32 = to_f32(c.R, n), *if32 = to_f32(c.inv_freq, hs / 2);
  f32->rope_forward(x32, ld, if32, B, T, nh, hs);
  double err = 0;
  for (size_t i = 0; i < n; i++) err = fmax(err, fabs(x32[i] - ref32[i]));
  CHECK_MSG(err < 1e-6 * max_abs(ref32, n), "%s: fp32 (float angle) error %.3g", name, err);
  double* back = dcopy(c.y, n);
  f64->rope_backward(back, ld, c.inv_freq, B, T, nh, hs);
  check_close("rope_backward(rope_forward(x)) = x", back, c.x, n, 1e-14);
  double* rt = dcopy(c.R, n); /* R^T dy, dy = R */
  f64->rope_backward(rt, ld, c.inv_freq, B, T, nh, hs);
  double lhs = dot(c.R, c.y, n), rhs = dot(rt, c.x, n);
  CHECK_MSG(fabs(lhs - rhs) <= 1e-13 * fmax(fabs(lhs), 1), "%s: <dy, R x> %.17g, <R^T dy, x> %.17g",
            name, lhs, rhs);
  if (fd) {
    snprintf(name, sizeof name, "rope.dx hs%d ld%d", hs, ld);
    check_grad(name, rope_objective, &c, c.x, rt, n);
  }
  f32->rope_backward(dy32, ld, if32, B, T, nh, hs);
  snprintf(name, sizeof name, "rope_backward B%d T%d nh%d hs%d ld%d", B, T, nh, hs, ld);
  check_f32(name, dy32, rt, n);
  free(x32); free(dy32); free(if32); free(ref); free(ref32); free(back); free(rt);
  rope_free(&c);
}

/* RoPE on a small strided shape, at positions up to 4099 (angles of thousands of radians),
** and with hs/2 = 80 pairs (more than one chunk of cosines). */
static void test_rope(void) {
  rope_check(2, 5, 3, 8, 27, 1);
  rope_check(1, 4100, 2, 6, 12, 0);
  rope_check(1, 3, 2, 160, 330, 1);
}

// ----------------------------------------------------------------------------
// cross-entropy

typedef struct {
  double *logits, *work, *losses;
  const int* targets;
  int BT, V, Vp;
  double scale;
} CeCtx;

/* L = scale * sum(losses), computed on a copy of the logits (the kernel overwrites them). */
static double ce_objective(void* p) {
  CeCtx* c = p;
  size_t n = (size_t)c->BT * c->Vp;
  memcpy(c->work, c->logits, n * sizeof(double));
  f64->crossentropy_forward_backward(c->work, c->losses, c->targets, c->BT, c->V, c->Vp, c->scale);
  return c->scale * f64->sum_values(c->losses, (size_t)c->BT);
}

/* Cross-entropy: losses against log-sum-exp, their sum (sum_values: in index order, exactly),
** ignored targets, and dlogits (overwritten in place) against finite differences on every
** entry, padding included. */
static void test_crossentropy(void) {
  int BT = 10, V = 11, Vp = 16;
  int targets[10] = { 3, -1, 0, 10, 5, -1, 7, 7, 1, 10 };
  size_t n = (size_t)BT * Vp;
  CeCtx c = { drandn(n, 2, 0), dalloc(n), dalloc(BT), targets, BT, V, Vp, 0.37 };
  double total = ce_objective(&c) / c.scale;
  double want_total = 0, loss_err = 0;
  for (int i = 0; i < BT; i++) {
    double want = 0;
    if (targets[i] >= 0) {
      double s = 0;
      for (int v = 0; v < V; v++) s += exp(c.logits[i * Vp + v]);
      want = log(s) - c.logits[i * Vp + targets[i]];
    }
    loss_err = fmax(loss_err, fabs(c.losses[i] - want));
    want_total += c.losses[i];
  }
  CHECK_NEAR(loss_err, 0, 1e-13);
  CHECK(total == want_total); /* the same additions in the same order */
  double* dlogits = dcopy(c.work, n);
  check_grad("crossentropy.dlogits", ce_objective, &c, c.logits, dlogits, n);

  float *l32 = to_f32(c.logits, n), *loss32 = falloc(BT);
  f32->crossentropy_forward_backward(l32, loss32, targets, BT, V, Vp, c.scale);
  double total32 = f32->sum_values(loss32, (size_t)BT), want32 = 0;
  for (int i = 0; i < BT; i++) want32 += loss32[i];
  CHECK(total32 == want32);
  CHECK_NEAR(total32, total, 1e-4 * fabs(total));
  ce_objective(&c);
  check_f32("crossentropy.losses", loss32, c.losses, BT);
  check_f32("crossentropy.dlogits", l32, c.work, n);
  free(l32); free(loss32);
  free(c.logits); free(c.work); free(c.losses); free(dlogits);
}

// ----------------------------------------------------------------------------
// sum of squares and AdamW

/* sum_squares against a plain double sum, for sizes below and above the chunk count. */
static void test_sum_squares(void) {
  size_t sizes[3] = { 0, 5, 1001 };
  for (int s = 0; s < 3; s++) {
    size_t n = sizes[s];
    double* g = drandn(n, 1, 0);
    double want = dot(g, g, n);
    CHECK_NEAR(f64->sum_squares(g, n), want, 1e-12 * fmax(want, 1));
    float* g32 = to_f32(g, n);
    CHECK_NEAR(f32->sum_squares(g32, n), want, 1e-5 * fmax(want, 1));
    free(g); free(g32);
  }
}

/* AdamW: three steps against the PyTorch formula written out in double. */
static void test_adamw(void) {
  size_t n = 50;
  float lr = 1e-2f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f, wd = 0.1f, gs = 0.5f;
  double *w = drandn(n, 1, 0), *m = dalloc(n), *v = dalloc(n);
  double *rw = dcopy(w, n), *rm = dalloc(n), *rv = dalloc(n);
  float *w32 = to_f32(w, n), *m32 = falloc(n), *v32 = falloc(n);
  for (int t = 1; t <= 3; t++) {
    double* g = drandn(n, 1, 0);
    float* g32 = to_f32(g, n);
    f64->adamw_update(w, g, m, v, n, lr, b1, b2, eps, wd, t, gs);
    f32->adamw_update(w32, g32, m32, v32, n, lr, b1, b2, eps, wd, t, gs);
    for (size_t i = 0; i < n; i++) {
      double gi = g[i] * (double)gs;
      rm[i] = (double)b1 * rm[i] + (1 - (double)b1) * gi;
      rv[i] = (double)b2 * rv[i] + (1 - (double)b2) * gi * gi;
      double mhat = rm[i] / (1 - pow(b1, t)), vhat = rv[i] / (1 - pow(b2, t));
      rw[i] -= (double)lr * (mhat / (sqrt(vhat) + (double)eps) + (double)wd * rw[i]);
    }
    free(g); free(g32);
  }
  check_close("adamw.w", w, rw, n, 1e-14);
  check_close("adamw.m", m, rm, n, 1e-14);
  check_close("adamw.v", v, rv, n, 1e-14);
  check_f32("adamw_f32.w", w32, rw, n);
  free(w); free(m); free(v); free(rw); free(rm); free(rv); free(w32); free(m32); free(v32);
}

// ----------------------------------------------------------------------------
// fp32 math: the fp32 kernels use their own vectorisable exp / tanh / sqrt

/* GELU (tanh) and its derivative on a dense grid of [-12, 12] plus inf and NaN, softmax
** cross-entropy with logits far apart (exp near under/overflow), and AdamW with zero
** gradients (sqrt(0)) and tiny ones, each against double precision. */
static void test_fp32_math(void) {
  enum { N = 4801 };
  double* x = dalloc(N);
  float *x32 = falloc(N), *y32 = falloc(N), *d32 = falloc(N), *one32 = falloc(N);
  double gelu_err = 0, dgelu_err = 0;
  for (int i = 0; i < N; i++) {
    x[i] = -12.0 + 24.0 * i / (N - 1);
    x32[i] = (float)x[i];
    one32[i] = 1;
  }
  f32->gelu_forward(y32, x32, N);
  f32->gelu_backward(d32, x32, one32, N);
  for (int i = 0; i < N; i++) {
    double xd = x32[i], u = sqrt(2 / M_PI) * (xd + 0.044715 * xd * xd * xd), th = tanh(u);
    double y = 0.5 * xd * (1 + th);
    double du = sqrt(2 / M_PI) * (1 + 3 * 0.044715 * xd * xd);
    double dy = 0.5 * (1 + th) + 0.5 * xd * (1 - th * th) * du;
    gelu_err = fmax(gelu_err, fabs(y32[i] - y) / fmax(fabs(y), 1));
    dgelu_err = fmax(dgelu_err, fabs(d32[i] - dy) / fmax(fabs(dy), 1));
  }
  CHECK_MSG(gelu_err < 1e-6, "gelu_forward_f32 error %.3g", gelu_err);
  /* 1 - tanh^2 cancels in fp32 for large |x| (as it does with libm's tanhf) */
  CHECK_MSG(dgelu_err < 5e-6, "gelu_backward_f32 error %.3g", dgelu_err);
  float special[2] = { INFINITY, NAN }, out[2];
  f32->gelu_forward(out, special, 2);
  CHECK(out[0] == INFINITY);
  CHECK(isnan(out[1]));

  /* cross-entropy: one row with logits spread over [-100, 100] */
  int V = 1000, Vp = 1024, target = 777;
  double* l = dalloc(Vp);
  for (int v = 0; v < V; v++) l[v] = 100 * sin(v * 0.37);
  float* l32 = to_f32(l, Vp);
  float loss32;
  double loss64;
  f32->crossentropy_forward_backward(l32, &loss32, &target, 1, V, Vp, 1.0);
  f64->crossentropy_forward_backward(l, &loss64, &target, 1, V, Vp, 1.0);
  CHECK_NEAR(loss32, loss64, 1e-5 * fmax(1, fabs(loss64)));
  check_f32("crossentropy wide logits", l32, l, Vp);

  /* AdamW: zero and tiny gradients */
  double g[4] = { 0, 1e-20, -3e-9, 0.5 }, w[4] = { 1, -1, 0.5, 2 }, m[4] = { 0 }, v[4] = { 0 };
  float *g32 = to_f32(g, 4), *w32 = to_f32(w, 4), *m32 = falloc(4), *v32 = falloc(4);
  for (int t = 1; t <= 2; t++) {
    f64->adamw_update(w, g, m, v, 4, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.0f, t, 1.0f);
    f32->adamw_update(w32, g32, m32, v32, 4, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.0f, t, 1.0f);
  }
  double aerr = 0;
  for (int i = 0; i < 4; i++) aerr = fmax(aerr, fabs(w32[i] - w[i]));
  CHECK_MSG(aerr < 1e-6, "adamw_f32 small-gradient error %.3g", aerr);
  free(x); free(x32); free(y32); free(d32); free(one32); free(l); free(l32);
  free(g32); free(w32); free(m32); free(v32);
}

// ----------------------------------------------------------------------------
// determinism with 2 threads

/* attention forward (out, lse) and backward (dq, dk, dv, from zero) in fp32 with n threads on
** the problem c (whose values are taken in fp32). Returns out, lse and the gradient buffer
** (laid out as c's buf) in res[0..3) (caller frees). */
static void attention_run_f32(int threads, const AttCtx* c, float* res[3]) {
  size_t no = att_nout(c);
  int threads_before = kernels_threads();
  kernels_set_threads(threads);
  float *b32 = to_f32(c->buf, c->nbuf), *dout = to_f32(c->R, no);
  float* scratch = falloc(attention_scratch_elems(c->T, c->hs) * threads);
  res[0] = falloc(no);
  res[1] = falloc((size_t)c->B * c->NH * c->T);
  res[2] = falloc(c->nbuf);
  size_t oq = (size_t)(c->q - c->buf), ok = (size_t)(c->k - c->buf), ov = (size_t)(c->v - c->buf);
  f32->attention_forward(res[0], res[1], b32 + oq, b32 + ok, b32 + ov, c->ldq, c->ldkv, scratch,
                         c->B, c->T, c->NH, c->NKV, c->hs);
  f32->attention_backward(res[2] + oq, res[2] + ok, res[2] + ov, dout, b32 + oq, b32 + ok,
                          b32 + ov, c->ldq, c->ldkv, res[0], res[1], scratch, c->B, c->T, c->NH,
                          c->NKV, c->hs);
  free(b32); free(dout); free(scratch);
  kernels_set_threads(threads_before);
}

/* Attention: bit-identical over two runs with 2 threads and with 1 thread (each output is
** computed by one thread in a fixed order, whatever the thread count), at shapes whose work
** splits unevenly among threads: four query tiles, the last partial; GPT-2's fused qkv with
** B*NH = 3 heads, and grouped-query, strided q, k, v with B*NKV = 3 K/V heads of two query
** heads each. */
static void test_attention_determinism(void) {
  int T = 3 * ATTENTION_TILE_Q + 8;
  AttShape shapes[2] = { { 1, T, 3, 3, 32, 0, 0 }, { 1, T, 6, 3, 32, 200, 100 } };
  for (int s = 0; s < 2; s++) {
    AttCtx c = att_new(shapes[s]);
    size_t sizes[3] = { att_nout(&c), (size_t)c.NH * T, c.nbuf };
    float *one[3], *two_a[3], *two_b[3];
    attention_run_f32(1, &c, one);
    attention_run_f32(2, &c, two_a);
    attention_run_f32(2, &c, two_b);
    const char* names[3] = { "out", "lse", "dqkv" };
    for (int k = 0; k < 3; k++) {
      CHECK_MSG(memcmp(two_a[k], two_b[k], sizes[k] * sizeof(float)) == 0,
                "attention %s differs between two runs with 2 threads (NKV %d)", names[k], c.NKV);
      CHECK_MSG(memcmp(one[k], two_a[k], sizes[k] * sizeof(float)) == 0,
                "attention %s differs between 1 and 2 threads (NKV %d)", names[k], c.NKV);
      free(one[k]); free(two_a[k]); free(two_b[k]);
    }
    att_free(&c);
  }
}

/* RMSNorm (out, rstd, dinp, dw), SwiGLU (out, dgate, dup) and RoPE (forward, backward) in fp32
** with n threads on the values d; the 9 results into res (caller frees). */
static void llama_ops_run_f32(int threads, const double* d, int BT, int C, float* res[9]) {
  size_t n = (size_t)BT * C;
  int threads_before = kernels_threads();
  kernels_set_threads(threads);
  float *x = to_f32(d, n), *dout = to_f32(d + n, n), *w = to_f32(d + 2 * n, C);
  float* inv_freq = falloc(16);
  for (int j = 0; j < 16; j++) inv_freq[j] = powf(10000.0f, -j / 16.0f);
  for (int k = 0; k < 9; k++) res[k] = falloc(n);
  f32->rmsnorm_forward(res[0], res[1], x, w, BT, C, 1e-6);
  f32->rmsnorm_backward(res[2], res[3], dout, x, w, res[1], BT, C, 0);
  f32->swiglu_forward(res[4], x, dout, n);
  f32->swiglu_backward(res[5], res[6], w, x, dout, (size_t)C);
  memcpy(res[7], x, n * sizeof(float));
  memcpy(res[8], dout, n * sizeof(float));
  /* RoPE on 5 heads of 32, the last 40 columns of each row padding */
  f32->rope_forward(res[7], C, inv_freq, 2, BT / 2, C / 32 - 1, 32);
  f32->rope_backward(res[8], C, inv_freq, 2, BT / 2, C / 32 - 1, 32);
  free(x); free(dout); free(w); free(inv_freq);
  kernels_set_threads(threads_before);
}

/* RMSNorm, SwiGLU and RoPE: bit-identical with 1 and 2 threads (rows and blocks of columns are
** each computed by one thread in a fixed order), at sizes that split their work unevenly. */
static void test_llama_ops_determinism(void) {
  int BT = 2 * 37, C = 200;
  size_t n = (size_t)BT * C;
  double* d = drandn(3 * n, 1, 0);
  float *one[9], *two[9];
  llama_ops_run_f32(1, d, BT, C, one);
  llama_ops_run_f32(2, d, BT, C, two);
  const char* names[9] = { "rmsnorm out", "rmsnorm rstd", "rmsnorm dinp", "rmsnorm dw",
                           "swiglu out", "swiglu dgate", "swiglu dup", "rope", "rope dx" };
  size_t sizes[9] = { n, (size_t)BT, n, (size_t)C, n, (size_t)C, (size_t)C, n, n };
  for (int k = 0; k < 9; k++) {
    CHECK_MSG(memcmp(one[k], two[k], sizes[k] * sizeof(float)) == 0,
              "%s differs between 1 and 2 threads", names[k]);
    free(one[k]); free(two[k]);
  }
  free(d);
}

/* Runs the parallel backward kernels with row or column reductions (fp32) twice with 2
** threads at sizes that split work among threads, and checks that both runs give
** bit-identical gradients. */
static void test_determinism(void) {
  int B = 2, T = 32, C = 200, Vp = 64, BT = B * T;
  size_t no = (size_t)BT * C;
  int threads_before = kernels_threads();
  kernels_set_threads(2);
  double* d = drandn(no + 2 * C, 1, 0);
  float *x = to_f32(d, no), *dout = to_f32(d, no), *out = falloc(no);
  float *w = to_f32(d + no, C), *b = to_f32(d + no + C, C), *mean = falloc(BT), *rstd = falloc(BT);
  int* tok = xcalloc(BT, sizeof(int));
  for (int i = 0; i < BT; i++) tok[i] = (int)rng_below(&rng, 5);  /* many repeats */
  float* res[2][3];
  f32->layernorm_forward(out, mean, rstd, x, w, b, BT, C);
  for (int run = 0; run < 2; run++) {
    res[run][0] = falloc(no);
    res[run][1] = falloc(2 * C);
    f32->layernorm_backward(res[run][0], res[run][1], res[run][1] + C, dout, x, w, mean, rstd,
                            BT, C, 1);
    res[run][2] = falloc((size_t)C * Vp);
    f32->embed_tok_backward(res[run][2], dout, C, tok, BT, C, Vp, 1);
  }
  CHECK(memcmp(res[0][0], res[1][0], no * sizeof(float)) == 0);
  CHECK(memcmp(res[0][1], res[1][1], 2 * C * sizeof(float)) == 0);
  CHECK(memcmp(res[0][2], res[1][2], (size_t)C * Vp * sizeof(float)) == 0);
  for (int run = 0; run < 2; run++)
    for (int k = 0; k < 3; k++) free(res[run][k]);
  free(d); free(x); free(dout); free(out); free(w); free(b); free(mean); free(rstd); free(tok);
  kernels_set_threads(threads_before);
}

// ----------------------------------------------------------------------------
// overwriting instead of accumulating

/* Returns n floats set to NaN: what an overwriting kernel must never read. */
static float* fnan(size_t n) {
  float* a = falloc(n);
  for (size_t i = 0; i < n; i++) a[i] = NAN;
  return a;
}

/* Whether a[i] == b[i] for every i < n (as numbers: +0 equals -0, NaN equals nothing). */
static int same_values(const float* a, const float* b, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (!(a[i] == b[i])) return 0;
  return 1;
}

/* The first gradient use of a step overwrites instead of accumulating (the engine zeroes no
** gradient): every gradient kernel with accumulate = 0 on a NaN-filled buffer gives exactly
** what accumulate = 1 gives on a zeroed one, and leaves alone what it must not write (wpe rows
** >= T, dinp's padding columns); matmul's dinp, GELU's dinp and SwiGLU's dgate and dup are
** always overwritten. At
** sizes that split the work of 1 and 2 threads. */
static void test_overwrite(void) {
  int B = 2, T = 9, BT = B * T, C = 150, maxT = 11, Vp = 24, c0 = 5, nrows = 97, OC = 70, ld = 160;
  int threads_before = kernels_threads();
  double* d = drandn((size_t)BT * ld + (size_t)BT * 4 * C + 4 * C, 1, 0);
  float *dout = to_f32(d, (size_t)BT * ld), *x = to_f32(d + (size_t)BT * ld, (size_t)BT * 4 * C);
  float* w = to_f32(d + (size_t)BT * ld + (size_t)BT * 4 * C, 4 * C);
  int tok[18];
  for (int i = 0; i < BT; i++) tok[i] = (int)rng_below(&rng, 6) * 3; /* repeats, gaps */
  for (int threads = 1; threads <= 2; threads++) {
    kernels_set_threads(threads);
    size_t nw = (size_t)maxT * C;
    float *z = falloc(nw), *o = fnan(nw);
    f32->embed_pos_backward(z, dout, B, T, C, 1);
    f32->embed_pos_backward(o, dout, B, T, C, 0);
    CHECK_MSG(same_values(z, o, (size_t)T * C), "embed_pos_backward overwrite differs");
    CHECK_MSG(isnan(o[(size_t)T * C]) && isnan(o[nw - 1]), "embed_pos_backward wrote rows >= T");
    free(z); free(o);

    size_t nt = (size_t)C * Vp;
    z = falloc(nt); o = fnan(nt);
    f32->embed_tok_backward(z + (size_t)c0 * Vp, dout + c0, C, tok, BT, nrows, Vp, 1);
    f32->embed_tok_backward(o + (size_t)c0 * Vp, dout + c0, C, tok, BT, nrows, Vp, 0);
    CHECK_MSG(same_values(z + (size_t)c0 * Vp, o + (size_t)c0 * Vp, (size_t)nrows * Vp),
              "embed_tok_backward overwrite differs");
    CHECK_MSG(isnan(o[(size_t)c0 * Vp - 1]) && isnan(o[(size_t)(c0 + nrows) * Vp]),
              "embed_tok_backward wrote outside its rows");
    free(z); free(o);

    /* matmul: inp = x [BT, C] (stride C), w = the first C*OC of x, dout [BT, OC] */
    size_t nwm = (size_t)C * OC + OC, ni = (size_t)BT * ld;
    float *gz = falloc(nwm), *go = fnan(nwm), *iz = falloc(ni), *io = fnan(ni);
    f32->matmul_backward(iz, gz, gz + (size_t)C * OC, dout, x, ld, x, BT, C, OC, 1);
    f32->matmul_backward(io, go, go + (size_t)C * OC, dout, x, ld, x, BT, C, OC, 0);
    CHECK_MSG(same_values(gz, go, nwm), "matmul_backward dw/dbias overwrite differs");
    int dinp_ok = 1, pad_ok = 1;
    for (int i = 0; i < BT; i++) {
      dinp_ok &= same_values(iz + (size_t)i * ld, io + (size_t)i * ld, (size_t)C);
      for (int k = C; k < ld; k++) pad_ok &= isnan(io[(size_t)i * ld + k]);
    }
    CHECK_MSG(dinp_ok && pad_ok, "matmul_backward dinp not overwritten (or padding written)");
    free(gz); free(go); free(iz); free(io);

    /* layernorm params: dinp accumulates either way (into zeros here) */
    float *mean = falloc(BT), *rstd = falloc(BT), *out = falloc((size_t)BT * C);
    f32->layernorm_forward(out, mean, rstd, x, w, w + C, BT, C);
    float *dxz = falloc((size_t)BT * C), *dxo = falloc((size_t)BT * C);
    z = falloc(2 * C); o = fnan(2 * C);
    f32->layernorm_backward(dxz, z, z + C, dout, x, w, mean, rstd, BT, C, 1);
    f32->layernorm_backward(dxo, o, o + C, dout, x, w, mean, rstd, BT, C, 0);
    CHECK_MSG(same_values(z, o, 2 * C), "layernorm_backward dw/db overwrite differs");
    CHECK(same_values(dxz, dxo, (size_t)BT * C));
    free(z); free(o); free(mean); free(rstd); free(out); free(dxz); free(dxo);

    /* rmsnorm weight: dinp accumulates either way (into zeros here) */
    rstd = falloc(BT); out = falloc((size_t)BT * C);
    f32->rmsnorm_forward(out, rstd, x, w, BT, C, 1e-6);
    dxz = falloc((size_t)BT * C); dxo = falloc((size_t)BT * C);
    z = falloc(C); o = fnan(C);
    f32->rmsnorm_backward(dxz, z, dout, x, w, rstd, BT, C, 1);
    f32->rmsnorm_backward(dxo, o, dout, x, w, rstd, BT, C, 0);
    CHECK_MSG(same_values(z, o, C), "rmsnorm_backward dw overwrite differs");
    CHECK(same_values(dxz, dxo, (size_t)BT * C));
    free(z); free(o); free(rstd); free(out); free(dxz); free(dxo);

    size_t ng = (size_t)BT * 4 * C;
    z = falloc(ng); o = fnan(ng);
    f32->gelu_backward(z, x, x, ng);
    f32->gelu_backward(o, x, x, ng);
    CHECK_MSG(same_values(z, o, ng), "gelu_backward does not overwrite");
    free(z); free(o);

    size_t nh = ng / 2;
    float *uz = falloc(nh), *uo = fnan(nh);
    z = falloc(nh); o = fnan(nh);
    f32->swiglu_backward(z, uz, x, x, x + nh, nh);
    f32->swiglu_backward(o, uo, x, x, x + nh, nh);
    CHECK_MSG(same_values(z, o, nh) && same_values(uz, uo, nh),
              "swiglu_backward does not overwrite");
    free(z); free(o); free(uz); free(uo);
  }
  kernels_set_threads(threads_before);
  free(d); free(dout); free(x); free(w);
}

/* Whether bytes [0, n) of p are all zero. */
static int all_zero(const unsigned char* p, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (p[i]) return 0;
  return 1;
}

/* The CPU backend keeps one released range for the next reserve (its pages stay committed): a
** reserve after a release, smaller or larger than the range kept (shrunk, or grown by mremap),
** reads as zeros wherever the last user wrote, as a fresh mapping does (reserve_zeroed); a
** range released while one is kept, less written, is unmapped, not lost track of. */
static void test_spare_range(void) {
  const Backend* bk = backend_cpu();
  const size_t MiB = (size_t)1 << 20;
  CHECK(bk->reserve_zeroed);
  unsigned char* a = bk->reserve(8 * MiB + 100);
  CHECK(a != NULL);
  if (!a) return;
  memset(a, 0xAB, 3 * MiB);
  bk->release(a, 8 * MiB + 100, 3 * MiB);
  unsigned char* b = bk->reserve(16 * MiB); /* grows the kept range */
  CHECK(b != NULL && all_zero(b, 16 * MiB));
  if (!b) return;
  memset(b, 0xCD, 16 * MiB);
  unsigned char* c = bk->reserve(2 * MiB); /* nothing kept now: a fresh range */
  CHECK(c != NULL && all_zero(c, 2 * MiB));
  if (c) memset(c, 0x11, MiB);
  bk->release(b, 16 * MiB, 16 * MiB);
  if (c) bk->release(c, 2 * MiB, MiB); /* written less than the one kept: unmapped */
  unsigned char* d = bk->reserve(MiB + 7); /* shrinks the kept range */
  CHECK(d != NULL && all_zero(d, MiB + 7));
  if (d) bk->release(d, MiB + 7, MiB + 7);
}

int main(void) {
  rng_seed(&rng, 1234);
  kernels_set_threads(1);
  f32 = backend_cpu()->f32;
  f64 = backend_cpu()->f64;
  test_tables();
  test_embed_pos();
  test_embed_tok();
  test_matmul();
  test_matmul_gelu();
  test_layernorm();
  test_rmsnorm();
  test_attention_forward();
  test_attention_backward();
  test_elementwise();
  test_swiglu();
  test_rope();
  test_crossentropy();
  test_sum_squares();
  test_adamw();
  test_fp32_math();
  test_determinism();
  test_attention_determinism();
  test_llama_ops_determinism();
  test_overwrite();
  test_spare_range();
  return check_summary();
}
