/* cpu_dnnl.c: bf16 matrix products through oneDNN, one primitive per shape, kept; see
** cpu_dnnl.h. */
#include "kernels/cpu_dnnl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"

#include <cblas.h>

#ifdef OSDP_HAVE_DNNL
#include <oneapi/dnnl/dnnl.h>

/* The three products a linear layer needs (the operands' layouts differ). */
typedef enum { MM_FORWARD, MM_DINP, MM_DW } MmKind;

/* One kept primitive: its shape (the key) and the memory objects its arguments are bound to
** (their data pointers set on every call). */
typedef struct MmEntry {
  MmKind kind;
  int M, K, N, ld, accumulate, has_bias;
  dnnl_primitive_t prim;
  dnnl_memory_t src, wei, bias, dst;
} MmEntry;

/* The most shapes kept: a step uses a few dozen (GPT-2: about 10 per micro-batch size). Past
** it the oldest is dropped (round robin), so an unusual caller only costs re-creation. */
#define DNNL_MAX_PRIMS 96

static struct {
  int ready, failed;
  dnnl_engine_t engine;
  dnnl_stream_t stream;
  MmEntry e[DNNL_MAX_PRIMS];
  int n, next;
} g;

/* Aborts on a oneDNN failure: the kernels have no error path (their contract), and a failure
** here is a bug in a shape or layout osdp made, not the user's input. */
static void check(dnnl_status_t st, const char* what) {
  if (st == dnnl_success) return;
  fprintf(stderr, "osdp: internal error: oneDNN %s failed (status %d)\n", what, (int)st);
  abort();
}

/* Creates the engine and stream on first use. */
static void dnnl_ready(void) {
  if (g.ready) return;
  check(dnnl_engine_create(&g.engine, dnnl_cpu, 0), "engine_create");
  check(dnnl_stream_create(&g.stream, g.engine, dnnl_stream_default_flags), "stream_create");
  g.ready = 1;
}

int dnnl_bf16_supported(const char** missing) {
  dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
  int ok = (isa & dnnl_cpu_isa_avx512_core_bf16) == dnnl_cpu_isa_avx512_core_bf16;
  if (!ok && missing) *missing = "AVX512_BF16 (or AMX-BF16)";
  return ok;
}

/* A 2-D memory descriptor of rows x cols elements of type dt with the given strides. */
static dnnl_memory_desc_t md2(int rows, int cols, dnnl_data_type_t dt, long rs, long cs) {
  dnnl_memory_desc_t md;
  dnnl_dims_t dims = {rows, cols}, strides = {rs, cs};
  check(dnnl_memory_desc_init_by_strides(&md, 2, dims, dt, strides), "memory_desc");
  return md;
}

/* The operands' layouts of x (a product [M, K] x [K, N] into [M, N]; ld: the stride of the
** strided operand): forward: src inp [M, K] in rows of ld, weights w [K, N], dst bf16 [M, N];
** dinp: src dout [BT, OC], weights w^T [OC, K] read in place from w [K, OC] (strides 1, OC),
** dst bf16 [BT, K] in rows of ld; dw: src inp^T [K, BT] read in place from inp (strides 1,
** ld), weights dout [BT, OC], dst fp32 [K, OC]. */
static void layouts(const MmEntry* x, dnnl_memory_desc_t* s, dnnl_memory_desc_t* w,
                    dnnl_memory_desc_t* d) {
  if (x->kind == MM_FORWARD) {
    *s = md2(x->M, x->K, dnnl_bf16, x->ld, 1);
    *w = md2(x->K, x->N, dnnl_bf16, x->N, 1);
    *d = md2(x->M, x->N, dnnl_bf16, x->N, 1);
  } else if (x->kind == MM_DINP) {
    *s = md2(x->M, x->K, dnnl_bf16, x->K, 1);
    *w = md2(x->K, x->N, dnnl_bf16, 1, x->K); /* w^T: w is [N, K] row-major */
    *d = md2(x->M, x->N, dnnl_bf16, x->ld, 1);
  } else {
    *s = md2(x->M, x->K, dnnl_bf16, 1, x->ld); /* inp^T: inp is [K, M] rows of ld */
    *w = md2(x->K, x->N, dnnl_bf16, x->N, 1);
    *d = md2(x->M, x->N, dnnl_f32, x->N, 1);
  }
}

/* Makes the primitive of x (its key filled) and its argument memories. */
static void make_entry(MmEntry* x) {
  dnnl_memory_desc_t s, w, d, b;
  layouts(x, &s, &w, &d);
  if (x->has_bias) b = md2(1, x->N, dnnl_bf16, x->N, 1);
  dnnl_matmul_desc_t desc;
  check(dnnl_matmul_desc_init(&desc, &s, &w, x->has_bias ? &b : NULL, &d), "matmul_desc_init");
  dnnl_primitive_attr_t attr;
  check(dnnl_primitive_attr_create(&attr), "attr_create");
  if (x->accumulate) { /* dst += product: a sum post-op, added in fp32, rounded once */
    dnnl_post_ops_t po;
    check(dnnl_post_ops_create(&po), "post_ops_create");
    check(dnnl_post_ops_append_sum(po, 1.0f), "post_ops_append_sum");
    check(dnnl_primitive_attr_set_post_ops(attr, po), "set_post_ops");
    dnnl_post_ops_destroy(po);
  }
  dnnl_primitive_desc_t pd;
  if (dnnl_primitive_desc_create(&pd, &desc, attr, g.engine, NULL) != dnnl_success) {
    fprintf(stderr, "osdp: internal error: oneDNN has no matmul for kind %d, %d x %d x %d, ld %d, "
            "accumulate %d, bias %d\n", (int)x->kind, x->M, x->K, x->N, x->ld, x->accumulate,
            x->has_bias);
    abort();
  }
  check(dnnl_primitive_create(&x->prim, pd), "primitive_create");
  if (getenv("OSDP_DNNL_VERBOSE")) {
    const char* impl = "?";
    dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl);
    fprintf(stderr, "osdp: oneDNN matmul kind %d %dx%dx%d ld %d acc %d bias %d: %s\n", (int)x->kind,
            x->M, x->K, x->N, x->ld, x->accumulate, x->has_bias, impl);
  }
  dnnl_primitive_desc_destroy(pd);
  dnnl_primitive_attr_destroy(attr);
  check(dnnl_memory_create(&x->src, &s, g.engine, DNNL_MEMORY_NONE), "memory_create");
  check(dnnl_memory_create(&x->wei, &w, g.engine, DNNL_MEMORY_NONE), "memory_create");
  check(dnnl_memory_create(&x->dst, &d, g.engine, DNNL_MEMORY_NONE), "memory_create");
  x->bias = NULL;
  if (x->has_bias) check(dnnl_memory_create(&x->bias, &b, g.engine, DNNL_MEMORY_NONE), "memory_create");
}

/* Frees what make_entry made. */
static void drop_entry(MmEntry* x) {
  dnnl_primitive_destroy(x->prim);
  dnnl_memory_destroy(x->src);
  dnnl_memory_destroy(x->wei);
  dnnl_memory_destroy(x->dst);
  if (x->bias) dnnl_memory_destroy(x->bias);
}

/* The kept entry of key, made now if it is new. */
static MmEntry* entry_for(const MmEntry* key) {
  dnnl_ready();
  for (int i = 0; i < g.n; i++) {
    MmEntry* x = &g.e[i];
    if (x->kind == key->kind && x->M == key->M && x->K == key->K && x->N == key->N &&
        x->ld == key->ld && x->accumulate == key->accumulate && x->has_bias == key->has_bias)
      return x;
  }
  MmEntry* x;
  if (g.n < DNNL_MAX_PRIMS) {
    x = &g.e[g.n++];
  } else {
    x = &g.e[g.next];
    g.next = (g.next + 1) % DNNL_MAX_PRIMS;
    drop_entry(x);
  }
  *x = *key;
  make_entry(x);
  return x;
}

/* Runs entry x on the given operands (bias NULL when it has none) and waits for it. */
static void run(MmEntry* x, const void* src, const void* wei, const void* bias, void* dst) {
  check(dnnl_memory_set_data_handle(x->src, (void*)src), "set_data_handle");
  check(dnnl_memory_set_data_handle(x->wei, (void*)wei), "set_data_handle");
  check(dnnl_memory_set_data_handle(x->dst, dst), "set_data_handle");
  dnnl_exec_arg_t args[4] = {{DNNL_ARG_SRC, x->src}, {DNNL_ARG_WEIGHTS, x->wei}, {DNNL_ARG_DST, x->dst}};
  int n = 3;
  if (x->bias) {
    check(dnnl_memory_set_data_handle(x->bias, (void*)bias), "set_data_handle");
    args[n++] = (dnnl_exec_arg_t){DNNL_ARG_BIAS, x->bias};
  }
  check(dnnl_primitive_execute(x->prim, g.stream, n, args), "primitive_execute");
  check(dnnl_stream_wait(g.stream), "stream_wait");
}

/* The three products on oneDNN (see cpu_dnnl.h for their contracts). */
static void native_forward(osdp_bf16* out, const osdp_bf16* inp, int ldinp, const osdp_bf16* w,
                           const osdp_bf16* bias, int BT, int K, int OC, int accumulate) {
  MmEntry key = {.kind = MM_FORWARD, .M = BT, .K = K, .N = OC, .ld = ldinp,
                 .accumulate = accumulate != 0, .has_bias = bias != NULL};
  run(entry_for(&key), inp, w, bias, out);
}

static void native_dinp(osdp_bf16* dinp, int ldinp, const osdp_bf16* dout, const osdp_bf16* w,
                        int BT, int K, int OC) {
  MmEntry key = {.kind = MM_DINP, .M = BT, .K = OC, .N = K, .ld = ldinp};
  run(entry_for(&key), dout, w, NULL, dinp);
}

static void native_dw(float* dw, const osdp_bf16* inp, int ldinp, const osdp_bf16* dout, int BT,
                      int K, int OC, int accumulate) {
  MmEntry key = {.kind = MM_DW, .M = K, .K = BT, .N = OC, .ld = ldinp, .accumulate = accumulate != 0};
  run(entry_for(&key), inp, dout, NULL, dw);
}

/* The instruction set oneDNN dispatches to on this CPU, by name ("AVX2", "AVX512_BF16"). */
static const char* isa_name(void) {
  static const struct { dnnl_cpu_isa_t isa; const char* name; } names[] = {
      {dnnl_cpu_isa_avx512_core_amx, "AMX"},   {dnnl_cpu_isa_avx512_core_bf16, "AVX512_BF16"},
      {dnnl_cpu_isa_avx512_core, "AVX512"},    {dnnl_cpu_isa_avx2, "AVX2"},
      {dnnl_cpu_isa_avx, "AVX"},               {dnnl_cpu_isa_sse41, "SSE4.1"}};
  dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
    if ((isa & names[i].isa) == names[i].isa) return names[i].name;
  return "generic";
}

const char* dnnl_describe(void) {
  static char s[96];
  const dnnl_version_t* v = dnnl_version();
  snprintf(s, sizeof s, "oneDNN v%d.%d.%d (%s%s)", v->major, v->minor, v->patch, isa_name(),
           dnnl_bf16_supported(NULL) ? "" : ": no native bf16");
  return s;
}

#else /* built without oneDNN: no native bf16 products on the CPU */

int dnnl_bf16_supported(const char** missing) {
  if (missing) *missing = "oneDNN (this osdp was built without libdnnl-dev)";
  return 0;
}

/* Never called: products run natively only where dnnl_bf16_supported. */
static void no_dnnl(void) {
  fprintf(stderr, "osdp: internal error: a native bf16 product on a build without oneDNN\n");
  abort();
}

static void native_forward(osdp_bf16* out, const osdp_bf16* inp, int ldinp, const osdp_bf16* w,
                           const osdp_bf16* bias, int BT, int K, int OC, int accumulate) {
  (void)out, (void)inp, (void)ldinp, (void)w, (void)bias, (void)BT, (void)K, (void)OC, (void)accumulate;
  no_dnnl();
}

static void native_dinp(osdp_bf16* dinp, int ldinp, const osdp_bf16* dout, const osdp_bf16* w,
                        int BT, int K, int OC) {
  (void)dinp, (void)ldinp, (void)dout, (void)w, (void)BT, (void)K, (void)OC;
  no_dnnl();
}

static void native_dw(float* dw, const osdp_bf16* inp, int ldinp, const osdp_bf16* dout, int BT,
                      int K, int OC, int accumulate) {
  (void)dw, (void)inp, (void)ldinp, (void)dout, (void)BT, (void)K, (void)OC, (void)accumulate;
  no_dnnl();
}

const char* dnnl_describe(void) { return "no oneDNN"; }

#endif

/* ---- fp32 products of the linear layers ----------------------------------------------------- */

void cpu_sgemm(char transa, char transb, int M, int N, int K, float alpha, const float* A, int lda,
               const float* B, int ldb, float beta, float* C, int ldc) {
#ifdef OSDP_HAVE_DNNL
  if (dnnl_sgemm(transa, transb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc) == dnnl_success) return;
#endif
  cblas_sgemm(CblasRowMajor, transa == 'T' ? CblasTrans : CblasNoTrans,
              transb == 'T' ? CblasTrans : CblasNoTrans, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

const char* cpu_sgemm_name(void) {
  static char s[96];
#ifdef OSDP_HAVE_DNNL
  const dnnl_version_t* v = dnnl_version();
  snprintf(s, sizeof s, "oneDNN v%d.%d.%d sgemm, %s", v->major, v->minor, v->patch, isa_name());
#else
  snprintf(s, sizeof s, "OpenBLAS sgemm (kernel %s)", openblas_get_corename());
#endif
  return s;
}

/* ---- Emulated products (tests only: dnnl_bf16_emulate) ------------------------------------ */

static int g_emulate;

void dnnl_bf16_emulate(int on) { g_emulate = on; }

int dnnl_bf16_usable(void) { return dnnl_bf16_supported(NULL) || g_emulate; }

/* rows x cols bf16 values (row stride ld) widened into a new fp32 array (dense); NULL when out
** of memory (the emulation aborts then: it is a test's tool). */
static float* widen(const osdp_bf16* x, int rows, int cols, int ld) {
  float* f = malloc((size_t)rows * cols * sizeof *f + 1);
  if (!f) { fprintf(stderr, "osdp: emulated bf16 product: out of memory\n"); abort(); }
  for (int i = 0; i < rows; i++)
    for (int j = 0; j < cols; j++) f[(size_t)i * cols + j] = osdp_bf16_to_float(x[(size_t)i * ld + j]);
  return f;
}

/* The emulated forward: fp32 product of the widened operands, bias and the old out added in
** fp32, rounded once into out. */
static void emu_forward(osdp_bf16* out, const osdp_bf16* inp, int ldinp, const osdp_bf16* w,
                        const osdp_bf16* bias, int BT, int K, int OC, int accumulate) {
  float *a = widen(inp, BT, K, ldinp), *b = widen(w, K, OC, OC);
  float* c = accumulate ? widen(out, BT, OC, OC) : calloc((size_t)BT * OC + 1, sizeof(float));
  if (!c) abort();
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, BT, OC, K, 1.0f, a, K, b, OC, 1.0f, c, OC);
  for (int i = 0; i < BT; i++)
    for (int j = 0; j < OC; j++) {
      float v = c[(size_t)i * OC + j] + (bias ? osdp_bf16_to_float(bias[j]) : 0.0f);
      out[(size_t)i * OC + j] = osdp_bf16_from_float(v);
    }
  free(a), free(b), free(c);
}

/* The emulated input gradient: dout @ w^T in fp32, rounded once into dinp's rows. */
static void emu_dinp(osdp_bf16* dinp, int ldinp, const osdp_bf16* dout, const osdp_bf16* w, int BT,
                     int K, int OC) {
  float *d = widen(dout, BT, OC, OC), *b = widen(w, K, OC, OC);
  float* c = calloc((size_t)BT * K + 1, sizeof(float));
  if (!c) abort();
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, BT, K, OC, 1.0f, d, OC, b, OC, 0.0f, c, K);
  for (int i = 0; i < BT; i++)
    for (int j = 0; j < K; j++) dinp[(size_t)i * ldinp + j] = osdp_bf16_from_float(c[(size_t)i * K + j]);
  free(d), free(b), free(c);
}

/* The emulated weight gradient: inp^T @ dout in fp32, into (or added to) dw. */
static void emu_dw(float* dw, const osdp_bf16* inp, int ldinp, const osdp_bf16* dout, int BT, int K,
                   int OC, int accumulate) {
  float *a = widen(inp, BT, K, ldinp), *d = widen(dout, BT, OC, OC);
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, K, OC, BT, 1.0f, a, K, d, OC,
              accumulate ? 1.0f : 0.0f, dw, OC);
  free(a), free(d);
}

/* ---- The products: native where the CPU has bf16, else emulated when a test asked -------- */

void dnnl_matmul_bf16_forward(osdp_bf16* out, const osdp_bf16* inp, int ldinp, const osdp_bf16* w,
                              const osdp_bf16* bias, int BT, int K, int OC, int accumulate) {
  if (BT <= 0 || OC <= 0) return;
  if (dnnl_bf16_supported(NULL)) native_forward(out, inp, ldinp, w, bias, BT, K, OC, accumulate);
  else emu_forward(out, inp, ldinp, w, bias, BT, K, OC, accumulate);
}

void dnnl_matmul_bf16_dinp(osdp_bf16* dinp, int ldinp, const osdp_bf16* dout, const osdp_bf16* w,
                           int BT, int K, int OC) {
  if (BT <= 0 || K <= 0) return;
  if (dnnl_bf16_supported(NULL)) native_dinp(dinp, ldinp, dout, w, BT, K, OC);
  else emu_dinp(dinp, ldinp, dout, w, BT, K, OC);
}

void dnnl_matmul_bf16_dw(float* dw, const osdp_bf16* inp, int ldinp, const osdp_bf16* dout, int BT,
                         int K, int OC, int accumulate) {
  if (K <= 0 || OC <= 0) return;
  if (dnnl_bf16_supported(NULL)) native_dw(dw, inp, ldinp, dout, BT, K, OC, accumulate);
  else emu_dw(dw, inp, ldinp, dout, BT, K, OC, accumulate);
}

double dnnl_bf16_gflops(int M, int N, int K) {
  if (!dnnl_bf16_supported(NULL)) return 0;
  osdp_bf16* a = calloc((size_t)M * K, sizeof *a);
  osdp_bf16* b = calloc((size_t)K * N, sizeof *b);
  osdp_bf16* c = calloc((size_t)M * N, sizeof *c);
  double best = 1e30;
  for (int i = 0; a && b && c && i < 5; i++) {
    double t0 = now_seconds();
    dnnl_matmul_bf16_forward(c, a, K, b, NULL, M, K, N, 0);
    double t = now_seconds() - t0;
    if (i > 0 && t < best) best = t; /* the first run makes the primitive and warms caches */
  }
  free(a);
  free(b);
  free(c);
  return best < 1e30 ? 2.0 * M * N * K / best / 1e9 : 0.0;
}
