/*
** replay_main.c: runs a fuzz target without libFuzzer (and without clang), for the regression
** corpus in the normal test suite: calls LLVMFuzzerTestOneInput on every file named on the
** command line and on every file of every directory named (in name order, not recursing).
** Each input is passed in a heap buffer of exactly its size, so that AddressSanitizer builds
** catch reads past its end as libFuzzer would. A crash or abort fails the test; so does
** finding no input at all (a corpus that went missing must not pass silently). With
** OSDP_FUZZ_VERBOSE set, each input's name and the errors the parsers report are printed.
*/
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

/* Reads the whole file at path into a new heap buffer of exactly its size (*n bytes; one byte
** allocated for an empty file). Returns NULL when it cannot be read. */
static uint8_t* read_input(const char* path, size_t* n) {
  FILE* f = fopen(path, "rb");
  struct stat st;
  if (!f || fstat(fileno(f), &st) || !S_ISREG(st.st_mode)) {
    if (f) fclose(f);
    return NULL;
  }
  *n = (size_t)st.st_size;
  uint8_t* buf = malloc(*n ? *n : 1);
  if (buf && fread(buf, 1, *n, f) != *n) { free(buf); buf = NULL; }
  fclose(f);
  return buf;
}

/* Runs the target on one file; returns 0, or -1 when the file cannot be read. */
static int replay_file(const char* path) {
  size_t n = 0;
  uint8_t* buf = read_input(path, &n);
  if (!buf) {
    fprintf(stderr, "replay: cannot read %s\n", path);
    return -1;
  }
  if (getenv("OSDP_FUZZ_VERBOSE")) fprintf(stderr, "replay: %s\n", path);
  LLVMFuzzerTestOneInput(buf, n);
  free(buf);
  return 0;
}

/* Orders directory entries by name, for a reproducible replay order. */
static int by_name(const void* a, const void* b) {
  return strcmp(*(char* const*)a, *(char* const*)b);
}

/* Runs the target on every regular file of directory dir (not recursing). Returns the number
** run, or -1 when the directory or one of its files cannot be read. */
static int replay_dir(const char* dir) {
  DIR* d = opendir(dir);
  if (!d) return -1;
  char** names = NULL;
  int n = 0, cap = 0, rc = 0;
  struct dirent* e;
  while ((e = readdir(d)) != NULL) {
    if (e->d_name[0] == '.') continue;
    if (n == cap) {
      char** grown = realloc(names, (size_t)(cap = cap ? 2 * cap : 64) * sizeof *names);
      if (!grown) { rc = -1; break; }
      names = grown;
    }
    size_t len = strlen(dir) + strlen(e->d_name) + 2;
    if (!(names[n] = malloc(len))) { rc = -1; break; }
    snprintf(names[n++], len, "%s/%s", dir, e->d_name);
  }
  closedir(d);
  if (n > 1) qsort(names, (size_t)n, sizeof *names, by_name);
  int ran = 0;
  for (int i = 0; i < n; i++) {
    struct stat st;
    if (rc == 0 && stat(names[i], &st) == 0 && S_ISREG(st.st_mode)) {
      if (replay_file(names[i])) rc = -1;
      else ran++;
    }
    free(names[i]);
  }
  free(names);
  return rc ? -1 : ran;
}

/* Replays every input named on the command line; exit status 0 when all ran (and some did). */
int main(int argc, char** argv) {
  int total = 0;
  for (int i = 1; i < argc; i++) {
    struct stat st;
    if (stat(argv[i], &st) != 0) {
      fprintf(stderr, "replay: %s does not exist\n", argv[i]);
      return 1;
    }
    int ran = S_ISDIR(st.st_mode) ? replay_dir(argv[i]) : (replay_file(argv[i]) ? -1 : 1);
    if (ran < 0) {
      fprintf(stderr, "replay: cannot read %s\n", argv[i]);
      return 1;
    }
    total += ran;
  }
  if (total == 0) {
    fprintf(stderr, "replay: no inputs (give files or directories of them)\n");
    return 1;
  }
  printf("replay: %d inputs ran without a crash\n", total);
  return 0;
}
