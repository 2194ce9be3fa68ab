/*
** main.c: the osdp command. Every subcommand runs as one process or as N MPI ranks
** (mpirun -np N osdp ...); see README.md for a tour and docs/GUIDE.md for every command.
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "comm/comm.h"
#include "core/output.h"
#include "core/util.h"
#include "kernels/backend.h"
#include "kernels/cpu_dnnl.h"
#include "kernels/cpu_kernels.h"
#include "osdp_version.h"

static const char* usage =
    "usage: osdp <command> [options]\n"
    "commands:\n"
    "  train     train a model (default: tiny GPT on the built-in addition task)\n"
    "  bench     time training steps on synthetic tokens and compare with sgemm\n"
    "  describe  print the model's operator list, sizes and predicted memory\n"
    "  profile   measure this machine's ranks (collectives, operator times) into device.json\n"
    "  plan      find the fastest per-operator plan that fits the memory limit\n"
    "  export    convert weights: llm.c checkpoints, safetensors (Hugging Face GPT-2/Llama/Qwen2)\n"
    "  sample    generate from trained weights (a prompt continued; addition problems answered)\n"
    "  plot      draw training logs (loss, held-out loss, tokens/s, memory by step) as SVG\n"
    "  tokenize  text files to an llm.c token file with a Hugging Face tokenizer.json (and back)\n"
    "  help      this list (osdp help CMD: that command's options)\n"
    "run 'osdp <command> --help' for a command's options, 'osdp --version' for the build; under\n"
    "mpirun -np N every command runs on N ranks.\n";

/* Prints the version, the git commit the binary was built from and the build's options. */
static void print_version(void) {
#ifdef OSDP_BUILD_SANITIZE
  const char* san = ", ASan+UBSan";
#else
  const char* san = "";
#endif
  printf("osdp %s (commit %s)\n", OSDP_VERSION, OSDP_GIT_COMMIT);
  printf("build: %s, %s CPU code%s; CUDA backend %s; MPI %s\n", OSDP_BUILD_TYPE, OSDP_BUILD_ARCH,
         san, backend_cuda_built() ? "built" : "not built", comm_library_version());
  printf("BLAS: %s\n", kernels_blas_config());
  printf("GEMM: %s (the CPU's fp32 linear layers)\n", cpu_sgemm_name());
  const char* missing = "";
  int bf16 = dnnl_bf16_supported(&missing);
  printf("CPU bf16 products: %s; --precision bf16 on the CPU: %s%s\n", dnnl_describe(),
         bf16 ? "native" : "unavailable, this CPU lacks ", bf16 ? "" : missing);
}

/* The subcommands, by name. */
typedef struct Command {
  const char* name;
  int (*run)(int argc, char** argv);
} Command;

static const Command commands[] = {
    {"train", cmd_train},     {"bench", cmd_bench}, {"describe", cmd_describe},
    {"profile", cmd_profile}, {"plan", cmd_plan},   {"export", cmd_export},
    {"sample", cmd_sample},   {"plot", cmd_plot},   {"tokenize", cmd_tokenize},
};

/* The subcommand called name, or NULL. */
static const Command* find_command(const char* name) {
  for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
    if (strcmp(commands[i].name, name) == 0) return &commands[i];
  return NULL;
}

/* Runs what argv asks: a subcommand, `help [CMD]`, `--version`; the exit status. */
static int run(int argc, char** argv) {
  const char* cmd = argc > 1 ? argv[1] : "";
  const Command* c = find_command(cmd);
  if (c) return c->run(argc - 2, argv + 2);
  if (strcmp(cmd, "--version") == 0 || strcmp(cmd, "version") == 0) {
    if (comm_rank() == 0) print_version();
    return 0;
  }
  if (strcmp(cmd, "help") == 0 && argc > 2 && find_command(argv[2])) {
    char* help[] = {(char*)"--help"};
    return find_command(argv[2])->run(1, help);
  }
  if (strcmp(cmd, "help") == 0 || strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0) {
    if (comm_rank() == 0) fputs(usage, argc > 2 ? stderr : stdout);
    if (argc > 2 && comm_rank() == 0) fprintf(stderr, "osdp: error: unknown command '%s'\n", argv[2]);
    return argc > 2 ? 2 : 0;
  }
  if (comm_rank() == 0) {
    if (*cmd) {
      fprintf(stderr, "osdp: error: unknown command '%s'; use", cmd);
      for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(stderr, "%s %s", i ? "," : "", commands[i].name);
      fprintf(stderr, " (see osdp --help)\n");
    } else {
      fputs(usage, stderr);
    }
  }
  return 2;
}

/* The bound on start-up: --watchdog S as given (0: off; a malformed value is the parser's to
** report later), else its default of 300 s. Read before MPI starts, so from argv itself. */
static double startup_bound(int argc, char** argv) {
  double s = 300;
  for (int i = 1; i < argc; i++) {
    const char* v = strncmp(argv[i], "--watchdog=", 11) == 0 ? argv[i] + 11
                    : strcmp(argv[i], "--watchdog") == 0 && i + 1 < argc ? argv[i + 1] : NULL;
    char* end = NULL;
    double x = v ? strtod(v, &end) : 0;
    if (v && end != v && *end == 0 && x >= 0 && x < 1e9) s = x;
  }
  return s;
}

int main(int argc, char** argv) {
  if (comm_startup_guard(startup_bound(argc, argv)) || comm_init(&argc, &argv)) {
    fprintf(stderr, "osdp: error: %s\n", osdp_last_error());
    return 1;
  }
  int agreed = cli_ranks_agree_args(argc, argv) == 0;
  comm_startup_done(); /* every rank has met: the step watchdog, where there is one, takes over */
  int rc = agreed ? run(argc, argv) : cli_report_error();
  /* Output to a full disk or a closed pipe is a failure, not a silent success. */
  if (out_close_stdout()) {
    fprintf(stderr, "osdp: error: %s\n", osdp_last_error());
    if (rc == 0) rc = 1;
  }
  comm_finalize();
  return rc;
}
