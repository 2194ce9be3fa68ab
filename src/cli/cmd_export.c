/*
** cmd_export.c: `osdp export FILE --format llmc|safetensors OUT`: converts model weights
** between llm.c's GPT-2 checkpoint and a safetensors file with Hugging Face names (GPT-2,
** Llama, Qwen2; or rewrites a file in its own format). The input's format is read from its content. Rank 0
** converts; under mpirun the other ranks only wait for its result.
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli/cli.h"
#include "cli/setup.h"
#include "comm/comm.h"
#include "core/output.h"
#include "core/util.h"
#include "model/gpt.h"
#include "model/safetensors.h"
#include "model/weights_file.h"
#include "runtime/train_state.h"

static const OptionSpec export_options[] = {
    {"format", "F", NULL, "llmc: llm.c's GPT-2 checkpoint (fp32, version 3), which llm.c and osdp's\n"
                          "--load read; or safetensors: Hugging Face tensor names and shapes (GPT-2:\n"
                          "wte.weight [V, C], ...; Llama: model.embed_tokens.weight [V, C], ...), fp32,\n"
                          "which transformers and osdp's --load read; OUT an existing directory (or\n"
                          "ending in /): OUT/model.safetensors and OUT/config.json, which\n"
                          "transformers' from_pretrained(OUT) loads (required)"},
    {"model", "M", NULL, "the model's shape (preset, JSON file or config.json), needed only for a\n"
                         "GPT-2 safetensors FILE that does not record its number of heads"},
    {"quiet", NULL, NULL, "print nothing on success"},
    {NULL, NULL, NULL, NULL}};

static const CommandSpec export_spec = {
    "export", "osdp export FILE --format llmc|safetensors OUT [options]",
    "  converts the weights in FILE (an llm.c GPT-2 checkpoint, a safetensors file, a sharded\n"
    "  checkpoint's model.safetensors.index.json, a Hugging Face model directory, or a\n"
    "  checkpoint directory of osdp train; told apart by content) into OUT.",
    {export_options, NULL},
    "  OUT is written to a temporary file beside it (OUT.tmp-PID) and renamed, so a failed export\n"
    "  leaves an existing OUT as it was."};

/* Splits argv into the positional arguments and the options (args_split) and checks that the
** positional ones are exactly FILE and OUT. pos and opt have room for argc entries. */
static int export_args(int argc, char** argv, char** pos, int* npos, char** opt, int* nopt) {
  args_split(&export_spec, argc, argv, pos, npos, opt, nopt);
  if (*npos == 2) return 0;
  return osdp_fail("osdp export: expected FILE and OUT, got %d positional argument%s; usage: "
                   "osdp export FILE --format llmc|safetensors OUT", *npos, *npos == 1 ? "" : "s");
}

/* Whether OUT names a directory to export into: an existing one, or a name ending in '/'. */
static int out_is_dir(const char* out) {
  struct stat st;
  size_t n = strlen(out);
  return (n && out[n - 1] == '/') || (stat(out, &st) == 0 && S_ISDIR(st.st_mode));
}

/* Converts FILE into OUT (rank 0's work); prints a line unless quiet. */
static int export_run(const char* in, const char* out, WeightsFormat fmt, const char* model,
                      int quiet) {
  GptDesc d;
  float* params;
  if (out_claim_input(in, "export IN") || (!out_is_dir(out) && out_claim_output(out, "export OUT")))
    return -1;
  if (out_is_dir(out) && fmt != WEIGHTS_SAFETENSORS)
    return osdp_fail("export: OUT '%s' is a directory, which only --format safetensors writes "
                     "(model.safetensors and config.json); give a file name for llmc", out);
  if (setup_read_weights(in, model, "export", &d, &params)) return -1;
  int dir_out = out_is_dir(out);
  int rc = dir_out ? safetensors_save_dir(out, &d, params) : weights_save(out, fmt, &d, params);
  if (rc == 0 && !quiet) {
    WeightsFormat from = fmt;
    struct stat st;
    int is_dir = stat(in, &st) == 0 && S_ISDIR(st.st_mode) && !safetensors_dir_holds(in);
    if (!is_dir) (void)weights_detect(in, &from);
    char sz[32], file[4200];
    size_t len = strlen(out);
    while (dir_out && len > 1 && out[len - 1] == '/') len--;
    snprintf(file, sizeof file, dir_out ? "%.*s/model.safetensors" : "%.*s", (int)len, out);
    printf("export: %s (%s) -> %s (%s, %s%s): %d layers, hidden %d, %d heads, vocab %d, max seq "
           "%d, %zu parameters\n", in, is_dir ? "checkpoint directory" : weights_format_name(from),
           file, weights_format_name(fmt),
           stat(file, &st) == 0 ? format_bytes((double)st.st_size, sz) : "?",
           dir_out ? ", with config.json" : "", d.cfg.n_layer,
           d.cfg.n_embd, d.cfg.n_head, d.cfg.vocab_size, d.cfg.max_seq, d.n_params);
  }
  free(params);
  gpt_desc_free(&d);
  return rc;
}

/* `osdp export`: parses FILE, OUT and the options, converts on rank 0 and agrees on the
** outcome with every rank (so under mpirun all ranks exit alike). */
int cmd_export(int argc, char** argv) {
  if (args_help(&export_spec, argc, argv)) return 0;
  char** pos = malloc(((size_t)argc + 1) * sizeof *pos);
  char** opt = malloc(((size_t)argc + 1) * sizeof *opt);
  Args a;
  WeightsFormat fmt = WEIGHTS_LLMC;
  int npos = 0, nopt = 0, rc = -1;
  if (!pos || !opt) osdp_fail("out of host memory");
  else if (export_args(argc, argv, pos, &npos, opt, &nopt) == 0 &&
           args_parse(&a, &export_spec, nopt, opt) == 0) {
    if (!args_has(&a, "format"))
      osdp_fail("osdp export: --format is required: llmc or safetensors");
    else if (weights_format_parse(args_get(&a, "format", ""), "--format", &fmt) == 0)
      rc = comm_rank() == 0 ? export_run(pos[0], pos[1], fmt, args_get(&a, "model", NULL),
                                         args_has(&a, "quiet")) : 0;
    double failed = comm_allreduce_f64(comm_world(), rc ? 1.0 : 0.0); /* every rank got here */
    if (failed != 0 && comm_rank() != 0) osdp_fail("export: rank 0 failed");
    rc = failed != 0 ? -1 : 0;
  }
  free(pos);
  free(opt);
  return rc ? cli_report_error() : 0;
}
