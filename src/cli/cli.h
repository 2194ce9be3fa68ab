/*
** cli.h: the command-line layer: argument parsing shared by the subcommands, and the
** subcommands themselves (each in its own cmd_*.c file).
*/
#ifndef OSDP_CLI_H
#define OSDP_CLI_H

#include <stddef.h>

#include <stdio.h>

#define ARGS_MAX 64

/* One flag of a command, declared once: the parser accepts it, --help prints it. */
typedef struct OptionSpec {
  const char* name;  /* without the leading "--" */
  const char* value; /* what it takes, as help names it ("N", "SIZE", "on|off"); NULL: a switch */
  const char* def;   /* the default as help shows it (NULL: none); a plain number here must be
                     ** the default the code passes to args_int / args_double (checked) */
  const char* help;  /* its meaning, in lines of at most ~70 characters joined by '\n' */
} OptionSpec;

#define COMMAND_GROUPS_MAX 10

/* A command's help and flags: its synopsis ("osdp train [options]"), a paragraph before the
** flags and one after (NULL: none), and its flags as up to COMMAND_GROUPS_MAX arrays (shared
** groups such as the optimizer's flags are arrays of their own), each ended by {NULL}. */
typedef struct CommandSpec {
  const char* name;
  const char* synopsis;
  const char* about;
  const OptionSpec* groups[COMMAND_GROUPS_MAX + 1];
  const char* notes;
} CommandSpec;

typedef struct Args {
  const CommandSpec* spec;
  int n;
  const char* key[ARGS_MAX];
  const char* val[ARGS_MAX];   /* NULL for switches */
} Args;

/* Whether the arguments ask for c's help (--help or -h anywhere): then it is printed on rank 0
** and the command exits 0 without doing anything else. */
int args_help(const CommandSpec* c, int argc, char** argv);
/* Parses "--key value" and "--switch" arguments against the command's declared flags. 0, or
** -1 with an error (an unknown flag names the nearest declared one). */
int args_parse(Args* a, const CommandSpec* c, int argc, char** argv);
/* Splits argv of a command that takes positional arguments (files) among its flags: an
** argument starting with "--" goes to opt, followed by its value when c declares the flag with
** one; everything else goes to pos, in order. pos and opt have room for argc entries; opt is
** then what args_parse reads. */
void args_split(const CommandSpec* c, int argc, char** argv, char** pos, int* npos, char** opt,
                int* nopt);
/* Prints c's help: the synopsis, the paragraph, every flag with its default, the notes. */
void args_print_help(const CommandSpec* c, FILE* f);
/* The declared flag of c named name, or NULL. */
const OptionSpec* command_option(const CommandSpec* c, const char* name);
/* The value of --key, or def when absent. */
const char* args_get(const Args* a, const char* key, const char* def);
/* Whether --key was given. */
int args_has(const Args* a, const char* key);
/* Integer / size / double option with default and range; -1 with an error naming the flag.
** When the flag is absent and its help shows a numeric default, def must equal it (-1 with an
** internal error otherwise: the help drifted from the code). */
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
int cmd_sample(int argc, char** argv);
int cmd_export(int argc, char** argv);
int cmd_plot(int argc, char** argv);
int cmd_tokenize(int argc, char** argv);

#endif
