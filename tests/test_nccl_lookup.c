/*
** test_nccl_lookup.c: where comm_nccl.c finds libnccl.so.2 (comm_nccl_candidates,
** comm_nccl_open), on a fake tree in a temporary directory whose libnccl.so.2 files are links to
** the stub NCCL (nccl_stub.c, NCCL_STUB) or to the stub of an older NCCL (NCCL_STUB_OLD):
** OSDP_NCCL_LIB alone when set (unusable: the one-line error), then the loader's path (off but
** in a child run whose LD_LIBRARY_PATH is in the tree: the machine's own NCCL would answer), then
** beside PyTorch's wheel in the venv, the conda
** environment, the python3 on PATH, ~/.local, /usr/local/lib and /usr/lib, then CUDA's lib64.
*/
#define _GNU_SOURCE
#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "comm/comm_nccl.h"

static char g_tmp[PATH_MAX]; /* the fake tree's root */
static const char* const k_names[] = {"ncclGetUniqueId", "ncclAllGather", "ncclGetVersion"};

/* g_tmp/rel in a static buffer (one of four, so a call can take a few). */
static const char* at(const char* rel) {
  static char buf[4][2 * PATH_MAX];
  static int i;
  i = (i + 1) % 4;
  snprintf(buf[i], sizeof buf[i], "%s/%s", g_tmp, rel);
  return buf[i];
}

/* Makes every directory above g_tmp/rel. */
static void make_parents(const char* rel) {
  char p[PATH_MAX];
  snprintf(p, sizeof p, "%s", at(rel));
  for (char* s = p + strlen(g_tmp) + 1; (s = strchr(s, '/')); s++) {
    *s = 0;
    mkdir(p, 0755);
    *s = '/';
  }
}

/* g_tmp/rel becomes a link to target (replacing what was there). */
static void plant(const char* rel, const char* target) {
  make_parents(rel);
  unlink(at(rel));
  CHECK_MSG(symlink(target, at(rel)) == 0, "symlink %s", at(rel));
}

/* An executable (empty) file at g_tmp/rel: a python3 on PATH. */
static void plant_exe(const char* rel) {
  make_parents(rel);
  FILE* f = fopen(at(rel), "w");
  if (f) fclose(f);
  chmod(at(rel), 0755);
}

#define WHEEL "nvidia/nccl/lib/libnccl.so.2"

/* The search of the fake tree: the loader's path off, every other place inside g_tmp. */
static NcclSearch fake_search(void) {
  static char venv[PATH_MAX], conda[PATH_MAX], path[2 * PATH_MAX], home[PATH_MAX], cuda[PATH_MAX],
      root[PATH_MAX];
  snprintf(venv, sizeof venv, "%s", at("venv"));
  snprintf(conda, sizeof conda, "%s", at("conda"));
  snprintf(path, sizeof path, "%s:%s/", at("nothing/bin"), at("py/bin"));
  snprintf(home, sizeof home, "%s", at("home"));
  snprintf(cuda, sizeof cuda, "%s", at("cuda"));
  snprintf(root, sizeof root, "%s", at("root"));
  return (NcclSearch){.lib = NULL, .loader_path = 0, .virtual_env = venv, .conda_prefix = conda,
                      .path = path, .home = home, .root = root, .cuda_home = cuda};
}

/* Every place, in the order they must be tried. */
static const char* const k_order[] = {
    "venv/lib/python3.11/site-packages/" WHEEL,
    "conda/lib/python3.10/site-packages/" WHEEL,
    "py/lib/python3.12/site-packages/" WHEEL,
    "home/.local/lib/python3.9/site-packages/" WHEEL,
    "root/usr/local/lib/python3.11/dist-packages/" WHEEL,
    "root/usr/lib/python3/dist-packages/" WHEEL,
    "cuda/lib64/libnccl.so.2",
    "root/usr/local/cuda/lib64/libnccl.so.2",
};
#define PLACES ((int)(sizeof k_order / sizeof k_order[0]))

/* comm_nccl_candidates lists exactly the planted files, in k_order; a python3 on PATH inside the
** venv does not list the venv twice. */
static void test_candidates(void) {
  plant_exe("py/bin/python3");
  for (int i = 0; i < PLACES; i++) plant(k_order[i], NCCL_STUB);
  plant("venv/lib/python3.11/site-packages/nvidia/other.so", NCCL_STUB); /* not NCCL */
  NcclSearch s = fake_search();
  char out[16][PATH_MAX];
  int n = comm_nccl_candidates(&s, out[0], PATH_MAX, 16);
  CHECK_MSG(n == PLACES, "%d candidates", n);
  for (int i = 0; i < n && i < PLACES; i++)
    CHECK_MSG(strcmp(out[i], at(k_order[i])) == 0, "candidate %d: %s, expected %s", i, out[i],
              at(k_order[i]));
  /* max bounds what is written, not the count */
  CHECK(comm_nccl_candidates(&s, out[0], PATH_MAX, 2) == PLACES);
  /* PATH's python3 in the venv: the venv once, and py/ is no longer the python3 on PATH */
  plant_exe("venv/bin/python3");
  char path[PATH_MAX];
  snprintf(path, sizeof path, "%s:%s", at("venv/bin"), at("py/bin"));
  s.path = path;
  n = comm_nccl_candidates(&s, out[0], PATH_MAX, 16);
  CHECK_MSG(n == PLACES - 1, "%d candidates with PATH in the venv", n);
  CHECK(strcmp(out[0], at(k_order[0])) == 0 && strcmp(out[1], at(k_order[1])) == 0 &&
        strcmp(out[2], at(k_order[3])) == 0);
  unlink(at("venv/bin/python3"));
}

/* Opens as s says; checks the handle's presence, fatal and (loaded) the file it came from. */
static void expect_open(const NcclSearch* s, const char* file, int fatal_expected, const char* why_has) {
  char where[PATH_MAX], why[2048];
  int fatal = -1;
  void* h = comm_nccl_open(s, k_names, 3, where, sizeof where, why, sizeof why, &fatal);
  CHECK_MSG((h != NULL) == (file != NULL), "loaded %s: %s", file ? file : "nothing", h ? where : why);
  CHECK_MSG(fatal == fatal_expected, "fatal %d: %s", fatal, why);
  if (h && file) CHECK_MSG(strcmp(where, file) == 0, "loaded %s, expected %s", where, file);
  if (!h && why_has) {
    CHECK_MSG(strstr(why, why_has) != NULL, "'%s' lacks '%s'", why, why_has);
    CHECK_MSG(strchr(why, '\n') == NULL, "one line: %s", why);
  }
  if (h) dlclose(h);
}

/* The order of loading: the first usable place wins; an older NCCL is passed over; OSDP_NCCL_LIB
** is the only place tried when set, and an unusable one is fatal with its one-line error. */
static void test_open(void) {
  NcclSearch s = fake_search();
  expect_open(&s, at(k_order[0]), 0, NULL);
  plant(k_order[0], NCCL_STUB_OLD); /* the venv's is too old: conda's is next */
  expect_open(&s, at(k_order[1]), 0, NULL);
  for (int i = 0; i < PLACES - 1; i++) unlink(at(k_order[i])); /* only the last is left */
  expect_open(&s, at(k_order[PLACES - 1]), 0, NULL);
  plant(k_order[PLACES - 1], NCCL_STUB_OLD); /* only an old NCCL: not fatal, and said so */
  expect_open(&s, NULL, 0, "has no ncclAllGather (an older NCCL than osdp needs)");
  unlink(at(k_order[PLACES - 1]));
  expect_open(&s, NULL, 0, "OSDP_NCCL_LIB names another");

  /* OSDP_NCCL_LIB: a missing file, an old NCCL, the stub (before the loader's path, even with a
  ** usable NCCL in the tree). */
  plant(k_order[0], NCCL_STUB);
  s.loader_path = 1;
  s.lib = at("missing/libnccl.so.2");
  char expected[PATH_MAX + 64];
  snprintf(expected, sizeof expected, "OSDP_NCCL_LIB=%s cannot be used (", s.lib);
  expect_open(&s, NULL, 1, expected);
  expect_open(&s, NULL, 1, "; point it at NCCL's libnccl.so.2 or unset it");
  s.lib = NCCL_STUB_OLD;
  expect_open(&s, NULL, 1, "has no ncclAllGather");
  s.lib = NCCL_STUB;
  expect_open(&s, NCCL_STUB, 0, NULL);
}

/* In a child run with LD_LIBRARY_PATH=g_tmp/loader: the loader's path comes before every other
** place; a NCCL there that is too old is passed over, and said to be too old when it is the only
** one (old: that directory's libnccl.so.2 is the old stub). */
static void test_loader_path(int old) {
  NcclSearch s = fake_search();
  s.loader_path = 1;
  plant(k_order[0], NCCL_STUB);
  expect_open(&s, old ? at(k_order[0]) : at("loader/libnccl.so.2"), 0, NULL);
  unlink(at(k_order[0]));
  if (old) expect_open(&s, NULL, 0, "libnccl.so.2 has no ncclAllGather");
}

/* Runs this test as a child (test_loader_path) with the loader's path at g_tmp/loader, whose
** libnccl.so.2 links to stub. */
static void run_loader_child(const char* stub, int old) {
  plant("loader/libnccl.so.2", stub);
  char self[PATH_MAX] = "", cmd[4 * PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  self[n > 0 ? n : 0] = 0;
  snprintf(cmd, sizeof cmd, "LD_LIBRARY_PATH='%s' '%s' %s '%s'", at("loader"), self,
           old ? "loader-old" : "loader", g_tmp);
  CHECK_MSG(system(cmd) == 0, "%s failed", cmd);
}

/* The search of a run reads the environment; on this machine it reports what it finds. */
static void test_env(void) {
  setenv("OSDP_NCCL_LIB", "/x/libnccl.so.2", 1);
  setenv("VIRTUAL_ENV", "/v", 1);
  NcclSearch s;
  comm_nccl_search_from_env(&s);
  CHECK(s.lib && strcmp(s.lib, "/x/libnccl.so.2") == 0 && s.loader_path == 1);
  CHECK(s.virtual_env && strcmp(s.virtual_env, "/v") == 0 && s.root && !*s.root);
  unsetenv("OSDP_NCCL_LIB");
  unsetenv("VIRTUAL_ENV");
  comm_nccl_search_from_env(&s);
  char where[PATH_MAX], why[2048];
  int fatal = 0;
  void* h = comm_nccl_open(&s, k_names, 3, where, sizeof where, why, sizeof why, &fatal);
  printf("this machine's NCCL: %s\n", h ? where : why);
  CHECK(!fatal);
  if (h) dlclose(h);
}

int main(int argc, char** argv) {
  if (argc == 3) { /* the child of run_loader_child */
    snprintf(g_tmp, sizeof g_tmp, "%s", argv[2]);
    test_loader_path(strcmp(argv[1], "loader-old") == 0);
    return check_summary();
  }
  snprintf(g_tmp, sizeof g_tmp, "%s/osdp-nccl-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
  if (!mkdtemp(g_tmp)) {
    perror("mkdtemp");
    return 1;
  }
  test_candidates();
  test_open();
  run_loader_child(NCCL_STUB, 0);
  run_loader_child(NCCL_STUB_OLD, 1);
  test_env();
  char cmd[PATH_MAX + 16];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_tmp);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", g_tmp);
  return check_summary();
}
