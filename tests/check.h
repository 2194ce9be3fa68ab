/*
** check.h: the few assertion macros osdp's C tests use. A failed CHECK prints the file,
** line and expression and counts a failure; check_summary() prints "N passed, M failed"
** and returns the exit status for main; read_file reads a test's file back.
*/
#ifndef OSDP_CHECK_H
#define OSDP_CHECK_H
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

static int check_passed, check_failed;

#define CHECK(cond) do { if (cond) check_passed++; else { check_failed++; \
  fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); } } while (0)
#define CHECK_MSG(cond, ...) do { if (cond) check_passed++; else { check_failed++; \
  fprintf(stderr, "%s:%d: CHECK failed: %s: ", __FILE__, __LINE__, #cond); \
  fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); } } while (0)
#define CHECK_NEAR(a, b, tol) CHECK_MSG(fabs((double)(a) - (double)(b)) <= (tol), \
  "%.9g vs %.9g (tol %.3g)", (double)(a), (double)(b), (double)(tol))

static inline int check_summary(void) {
  printf("%d passed, %d failed\n", check_passed, check_failed);
  return check_failed ? 1 : 0;
}
/* Reads a whole file into a heap buffer (NULL on failure); its size goes to *size. */
static inline unsigned char* read_file(const char* path, size_t* size) {
  FILE* f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  unsigned char* buf = malloc(n > 0 ? (size_t)n : 1);
  *size = fread(buf, 1, (size_t)n, f);
  fclose(f);
  return buf;
}

#endif
