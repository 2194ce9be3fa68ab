/* args.c: the flag parser shared by the subcommands; see cli.h. */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "comm/comm.h"
#include "core/util.h"

/* Whether name is in the NULL-terminated list. */
static int in_list(const char* const* list, const char* name) {
  for (; list && *list; list++) if (strcmp(*list, name) == 0) return 1;
  return 0;
}

int args_parse(Args* a, const char* cmd, int argc, char** argv, const char* const* options,
               const char* const* switches) {
  memset(a, 0, sizeof *a);
  a->cmd = cmd;
  for (int i = 0; i < argc; i++) {
    const char* arg = argv[i];
    if (strncmp(arg, "--", 2) != 0)
      return osdp_fail("osdp %s: unexpected argument '%s'; options start with -- (see osdp %s --help)",
                       cmd, arg, cmd);
    const char* name = arg + 2;
    if (a->n >= ARGS_MAX) return osdp_fail("osdp %s: too many options", cmd);
    if (in_list(switches, name)) {
      a->key[a->n] = name; a->val[a->n++] = NULL;
    } else if (in_list(options, name)) {
      if (i + 1 >= argc) return osdp_fail("osdp %s: --%s needs a value", cmd, name);
      a->key[a->n] = name; a->val[a->n++] = argv[++i];
    } else {
      return osdp_fail("osdp %s: unknown option --%s (see osdp %s --help)", cmd, name, cmd);
    }
  }
  return 0;
}

const char* args_get(const Args* a, const char* key, const char* def) {
  const char* v = def;
  for (int i = 0; i < a->n; i++) if (strcmp(a->key[i], key) == 0) v = a->val[i];
  return v;
}

int args_has(const Args* a, const char* key) {
  for (int i = 0; i < a->n; i++) if (strcmp(a->key[i], key) == 0) return 1;
  return 0;
}

int args_int(const Args* a, const char* key, long def, long lo, long hi, long* out) {
  const char* v = args_get(a, key, NULL);
  char field[48];
  snprintf(field, sizeof field, "--%s", key);
  if (!v) { *out = def; return 0; }
  return parse_int(v, field, lo, hi, out);
}

int args_size(const Args* a, const char* key, size_t def, size_t* out) {
  const char* v = args_get(a, key, NULL);
  char field[48];
  snprintf(field, sizeof field, "--%s", key);
  if (!v) { *out = def; return 0; }
  return parse_size(v, field, out);
}

int args_double(const Args* a, const char* key, double def, double* out) {
  const char* v = args_get(a, key, NULL);
  char field[48];
  snprintf(field, sizeof field, "--%s", key);
  if (!v) { *out = def; return 0; }
  return parse_double(v, field, out);
}

int cli_report_error(void) {
  const char* why = osdp_last_error();
  /* Every failure records its message; one that did not is a bug, but still says it failed. */
  if (!why[0]) why = "the command failed without recording why (a bug in osdp: please report the command line)";
  if (comm_rank() == 0) fprintf(stderr, "osdp: error: %s\n", why);
  return 1;
}
