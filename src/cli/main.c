/*
** main.c: the osdp command. Every subcommand runs as one process or as N MPI ranks
** (mpirun -np N osdp ...); see README.md for the commands.
*/
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "comm/comm.h"
#include "core/output.h"
#include "core/util.h"

static const char* usage =
    "usage: osdp <command> [options]\n"
    "commands:\n"
    "  train     train a model (default: tiny GPT on the built-in addition task)\n"
    "  bench     time training steps on synthetic tokens and compare with sgemm\n"
    "  describe  print the model's operator list, sizes and predicted memory\n"
    "  profile   measure this machine's ranks (collectives, operator times) into device.json\n"
    "  plan      find the fastest per-operator plan that fits the memory limit\n"
    "  export    convert weights: llm.c checkpoints, safetensors (Hugging Face GPT-2/Llama/Qwen2)\n"
    "run 'osdp <command> --help' for a command's options; under mpirun -np N every command\n"
    "runs on N ranks.\n";

int main(int argc, char** argv) {
  if (comm_init(&argc, &argv)) { fprintf(stderr, "osdp: error: %s\n", osdp_last_error()); return 1; }
  int rc = 2;
  const char* cmd = argc > 1 ? argv[1] : "";
  if (cli_ranks_agree_args(argc, argv)) rc = cli_report_error();
  else if (strcmp(cmd, "train") == 0) rc = cmd_train(argc - 2, argv + 2);
  else if (strcmp(cmd, "bench") == 0) rc = cmd_bench(argc - 2, argv + 2);
  else if (strcmp(cmd, "describe") == 0) rc = cmd_describe(argc - 2, argv + 2);
  else if (strcmp(cmd, "profile") == 0) rc = cmd_profile(argc - 2, argv + 2);
  else if (strcmp(cmd, "plan") == 0) rc = cmd_plan(argc - 2, argv + 2);
  else if (strcmp(cmd, "export") == 0) rc = cmd_export(argc - 2, argv + 2);
  else if (strcmp(cmd, "--help") == 0 || strcmp(cmd, "help") == 0) { fputs(usage, stdout); rc = 0; }
  else if (comm_rank() == 0) {
    if (*cmd) fprintf(stderr, "osdp: error: unknown command '%s'; use train, bench, describe, profile, plan or export (see osdp --help)\n", cmd);
    else fputs(usage, stderr);
  }
  /* Output to a full disk or a closed pipe is a failure, not a silent success. */
  if (out_close_stdout()) {
    fprintf(stderr, "osdp: error: %s\n", osdp_last_error());
    if (rc == 0) rc = 1;
  }
  comm_finalize();
  return rc;
}
