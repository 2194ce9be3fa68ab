/*
** cli.h: the command-line layer: argument parsing shared by the subcommands, and the
** subcommands themselves (each in its own cmd_*.c file).
*/
#ifndef OSDP_CLI_H
#define OSDP_CLI_H

#include <stddef.h>

#define ARGS_MAX 64

typedef struct Args {
  const char* cmd;
  int n;
  const char* key[ARGS_MAX];
  const char* val[ARGS_MAX];   /* NULL for switches */
} Args;

/* Parses "--key value" and "--switch" arguments. `options` lists the flags that take a value,
** `switches` those that do not (both NULL-terminated). Unknown flags are an error. */
int args_parse(Args* a, const char* cmd, int argc, char** argv, const char* const* options,
               const char* const* switches);
/* The value of --key, or def when absent. */
const char* args_get(const Args* a, const char* key, const char* def);
/* Whether --key was given. */
int args_has(const Args* a, const char* key);
/* Integer / size / double option with default and range; -1 with an error naming the flag. */
int args_int(const Args* a, const char* key, long def, long lo, long hi, long* out);
int args_size(const Args* a, const char* key, size_t def, size_t* out);
int args_double(const Args* a, const char* key, double def, double* out);

/* Prints the error recorded by osdp_fail on rank 0 (every rank meets the same deterministic
** errors), and returns the exit status 1. */
int cli_report_error(void);

/* Collective: that every rank was started with the same arguments (argv[1..], the program path
** aside); -1 with an error naming the first differing argument, rank 0's and the first other
** rank's (agree.c). */
int cli_ranks_agree_args(int argc, char** argv);
/* Collective: that every rank has the same value of `what` ("the model", "the data file"); -1
** with an error naming both values (when short) and the first differing rank. */
int cli_ranks_agree(const char* what, const char* value);

int cmd_train(int argc, char** argv);
int cmd_bench(int argc, char** argv);
int cmd_describe(int argc, char** argv);
int cmd_profile(int argc, char** argv);
int cmd_plan(int argc, char** argv);
int cmd_export(int argc, char** argv);

#endif
