/*
** args.c: the flag parser shared by the subcommands, and their help; see cli.h. Each command
** declares its flags once (a CommandSpec); the parser accepts exactly those, `--help` prints
** them, and a numeric default the help shows is checked against the one the code uses, so the
** help cannot drift from what the command does.
*/
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "comm/comm.h"
#include "core/util.h"

/* The column where the meaning of a flag starts in help. */
#define HELP_COLUMN 24

const OptionSpec* command_option(const CommandSpec* c, const char* name) {
  for (int g = 0; c && c->groups[g]; g++)
    for (const OptionSpec* o = c->groups[g]; o->name; o++)
      if (strcmp(o->name, name) == 0) return o;
  return NULL;
}

/* The edit distance between a and b (insertions, deletions, substitutions), for suggesting
** the flag a mistyped one meant; names are short (under 64 bytes: longer ones count as far). */
static int edit_distance(const char* a, const char* b) {
  size_t n = strlen(a), m = strlen(b);
  if (n >= 64 || m >= 64) return 64;
  int row[64], prev;
  for (size_t j = 0; j <= m; j++) row[j] = (int)j;
  for (size_t i = 1; i <= n; i++) {
    prev = row[0];
    row[0] = (int)i;
    for (size_t j = 1; j <= m; j++) {
      int sub = prev + (a[i - 1] != b[j - 1]), del = row[j] + 1, ins = row[j - 1] + 1, cur = row[j];
      row[j] = sub < del ? (sub < ins ? sub : ins) : (del < ins ? del : ins);
      prev = cur;
    }
  }
  return row[m];
}

/* The declared flag nearest to name (or having it as a prefix), or NULL when none is within a
** third of its length. */
static const OptionSpec* nearest_option(const CommandSpec* c, const char* name) {
  const OptionSpec* best = NULL;
  int bd = 1 << 30;
  for (int g = 0; c->groups[g]; g++)
    for (const OptionSpec* o = c->groups[g]; o->name; o++) {
      int d = strncmp(o->name, name, strlen(name)) == 0 && name[0] ? 1 : edit_distance(name, o->name);
      if (d < bd) { bd = d; best = o; }
    }
  int len = (int)strlen(name);
  return best && bd <= (len < 6 ? 2 : len / 3) ? best : NULL;
}

/* Prints one flag's line(s): "  --name VALUE" then its meaning from HELP_COLUMN (on the next
** line when the flag is wider), continuation lines aligned, and " [default]" at the end. */
static void print_option(FILE* f, const OptionSpec* o) {
  char head[96];
  snprintf(head, sizeof head, "  --%s%s%s", o->name, o->value ? " " : "", o->value ? o->value : "");
  int w = (int)strlen(head);
  fputs(head, f);
  if (w >= HELP_COLUMN) fprintf(f, "\n%*s", HELP_COLUMN, "");
  else fprintf(f, "%*s", HELP_COLUMN - w, "");
  for (const char* p = o->help; *p; p++) {
    fputc(*p, f);
    if (*p == '\n') fprintf(f, "%*s", HELP_COLUMN, "");
  }
  if (o->def) fprintf(f, " [%s]", o->def);
  fputc('\n', f);
}

void args_print_help(const CommandSpec* c, FILE* f) {
  fprintf(f, "usage: %s\n", c->synopsis);
  if (c->about) fprintf(f, "%s\n", c->about);
  for (int g = 0; c->groups[g]; g++)
    for (const OptionSpec* o = c->groups[g]; o->name; o++) print_option(f, o);
  if (c->notes) fprintf(f, "%s\n", c->notes);
}

int args_help(const CommandSpec* c, int argc, char** argv) {
  for (int i = 0; i < argc; i++)
    if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
      if (comm_rank() == 0) args_print_help(c, stdout);
      return 1;
    }
  return 0;
}

int args_parse(Args* a, const CommandSpec* c, int argc, char** argv) {
  memset(a, 0, sizeof *a);
  a->spec = c;
  for (int i = 0; i < argc; i++) {
    const char* arg = argv[i];
    if (strncmp(arg, "--", 2) != 0)
      return osdp_fail("osdp %s: unexpected argument '%s'; options start with -- (see osdp %s --help)",
                       c->name, arg, c->name);
    const char* name = arg + 2;
    const OptionSpec* o = command_option(c, name);
    if (!o) {
      const OptionSpec* near = nearest_option(c, name);
      if (near)
        return osdp_fail("osdp %s: unknown option --%s; did you mean --%s? (see osdp %s --help)",
                         c->name, name, near->name, c->name);
      return osdp_fail("osdp %s: unknown option --%s (see osdp %s --help)", c->name, name, c->name);
    }
    if (a->n >= ARGS_MAX) return osdp_fail("osdp %s: too many options (at most %d)", c->name, ARGS_MAX);
    a->key[a->n] = o->name;
    a->val[a->n] = NULL;
    if (o->value) {
      if (i + 1 >= argc)
        return osdp_fail("osdp %s: --%s needs a value (%s)", c->name, name, o->value);
      a->val[a->n] = argv[++i];
    }
    a->n++;
  }
  return 0;
}

/* Separates positional arguments from flags (and their values), so that commands taking files
** still parse their flags with args_parse. */
void args_split(const CommandSpec* c, int argc, char** argv, char** pos, int* npos, char** opt,
                int* nopt) {
  *npos = *nopt = 0;
  for (int i = 0; i < argc; i++) {
    if (strncmp(argv[i], "--", 2) != 0) { pos[(*npos)++] = argv[i]; continue; }
    opt[(*nopt)++] = argv[i];
    const OptionSpec* o = command_option(c, argv[i] + 2);
    if (o && o->value && i + 1 < argc) opt[(*nopt)++] = argv[++i];
  }
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

/* That the default the code uses for --key (def) is the one the command's help shows, where
** the help shows a plain number; -1 with an internal error naming both otherwise. */
static int check_default(const Args* a, const char* key, double def) {
  const OptionSpec* o = a->spec ? command_option(a->spec, key) : NULL;
  if (!o || !o->def) return 0;
  char* end = NULL;
  double shown = strtod(o->def, &end);
  if (end == o->def || *end) return 0; /* words ("unlimited", "the model's"): not a number */
  if (fabs(shown - def) <= 1e-12 * fabs(def)) return 0;
  return osdp_fail("osdp %s: internal error: --%s defaults to %g but its help says %s (a bug in "
                   "osdp: please report it)", a->spec->name, key, def, o->def);
}

int args_int(const Args* a, const char* key, long def, long lo, long hi, long* out) {
  const char* v = args_get(a, key, NULL);
  char field[48];
  snprintf(field, sizeof field, "--%s", key);
  if (!v) { *out = def; return check_default(a, key, (double)def); }
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
  if (!v) { *out = def; return check_default(a, key, def); }
  return parse_double(v, field, out);
}

int cli_report_error(void) {
  const char* why = osdp_last_error();
  /* Every failure records its message; one that did not is a bug, but still says it failed. */
  if (!why[0]) why = "the command failed without recording why (a bug in osdp: please report the command line)";
  if (comm_rank() == 0) fprintf(stderr, "osdp: error: %s\n", why);
  return 1;
}
