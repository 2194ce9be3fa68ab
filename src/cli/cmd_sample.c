/*
** cmd_sample.c: `osdp sample`: what a trained model writes. Loads weights (--load FILE or
** --resume a checkpoint), then continues a prompt token by token over a KV cache, or, for the
** addition task without a prompt, answers held-out problems and says which are right. Rank 0
** works; under mpirun the other ranks wait for its result.
*/
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli/cli.h"
#include "cli/sample.h"
#include "cli/setup.h"
#include "comm/comm.h"
#include "core/output.h"
#include "core/util.h"
#include "kernels/backend.h"
#include "runtime/train_state.h"
#include "tokenizer/tokenizer.h"

#define SAMPLE_PROMPT_MAX 4096

static const OptionSpec sample_options[] = {
    {"load", "FILE", NULL, "the weights: an llm.c checkpoint, a safetensors file or a Hugging Face\n"
                           "model directory"},
    {"resume", "PATH", NULL, "the weights of a checkpoint of osdp train: DIR's newest, or DIR/step-N"},
    {"model", "M", NULL, "the model's shape, needed only for a safetensors file without n_head"},
    {"prompt", "TEXT", NULL, "the text to continue: encoded by the tokenizer when there is one, else\n"
                             "in the data's tokens (addition: \"347+285=\")"},
    {"tokenizer", "PATH", "the --load dir's", "a Hugging Face tokenizer.json (or a directory\n"
                  "holding one): --prompt encoded, the output decoded"},
    {"prompt-tokens", "IDS", NULL, "the prompt as token ids, comma-separated (\"15496,11,995\")"},
    {"tokens", "N", "64", "new tokens at most (fewer at the end token of addition or the context)"},
    {"temperature", "T", "1", "softmax temperature of the draws; 0: greedy (the likeliest token)"},
    {"top-k", "K", "0", "draw among the K likeliest tokens only; 0: among all"},
    {"seed", "S", "1", "seed of the draws: one seed, one output"},
    {"data", "SPEC", "the checkpoint's", "what the tokens are: addition[:N], text:FILE (bytes) or\n"
                                        "tokens:FILE (ids only); addition without a checkpoint"},
    {"problems", "N", "5", "addition without a prompt: held-out problems to answer and score"},
    {"no-cache", NULL, NULL, "run the full forward for every new token instead of the KV cache\n"
                             "(the reference path: the same tokens, slower)"},
    {"json", NULL, NULL, "print one JSON object"},
    {NULL, NULL, NULL, NULL}};

static const CommandSpec sample_spec = {
    "sample", "osdp sample (--load FILE | --resume PATH) [--prompt TEXT] [options]",
    "  generates tokens from trained weights on the CPU: each new token costs one position's\n"
    "  forward over a KV cache. With --prompt it continues the prompt; for the addition task\n"
    "  without one it answers --problems held-out problems and says which are right.",
    {sample_options, NULL},
    "  Addition answers are written least significant digit first and end with ';', as the model\n"
    "  learns them: \"347+285=\" is answered \"2360;\" (632). Example:\n"
    "    osdp train --model tiny --steps 3000 --lr 3e-3 --checkpoint run\n"
    "    osdp sample --resume run --prompt \"347+285=\" --temperature 0"};

/* Everything a sample run holds. */
typedef struct SampleRun {
  Args args;
  GptDesc d;
  float* params;
  DataSource* data;
  Tokenizer* tok;       /* --tokenizer, or the --load directory's: text in and out (NULL: none) */
  SampleOptions opt;
  int problems;         /* --problems */
  int json;
} SampleRun;

/* The data spec: --data, else the one the checkpoint at path was trained on, else addition. */
static int sample_data_spec(const SampleRun* r, const char* path, char* spec, size_t cap) {
  snprintf(spec, cap, "%s", args_get(&r->args, "data", "addition"));
  struct stat st;
  if (args_has(&r->args, "data") || !path || stat(path, &st) || !S_ISDIR(st.st_mode)) return 0;
  TrainState ts;
  if (train_state_open_path(path, &ts)) return 0; /* a model directory: not a checkpoint */
  const cJSON* data = cJSON_GetObjectItemCaseSensitive(ts.run, "data");
  if (cJSON_IsString(data)) snprintf(spec, cap, "%s", data->valuestring);
  train_state_close(&ts);
  return 0;
}

/* Loads the tokenizer: --tokenizer PATH, else the tokenizer.json of the --load directory.
** 1 when there is one (r->tok), 0 when not, -1 with an error (unreadable, or ids beyond the
** model's vocabulary). */
static int sample_tokenizer(SampleRun* r, const char* load) {
  char found[4200];
  const char* path = args_get(&r->args, "tokenizer", NULL);
  struct stat st;
  if (!path && load && stat(load, &st) == 0 && S_ISDIR(st.st_mode)) {
    snprintf(found, sizeof found, "%s/tokenizer.json", load);
    if (stat(found, &st) == 0) path = found;
  }
  if (!path) return 0;
  if (out_claim_input(path, "--tokenizer") || tok_load(&r->tok, path)) return -1;
  if (tok_vocab_size(r->tok) > r->d.cfg.vocab_size)
    return osdp_fail("--tokenizer %s has %d ids, more than model %s's vocabulary of %d; give the "
                     "model's own tokenizer", path, tok_vocab_size(r->tok), r->d.cfg.name,
                     r->d.cfg.vocab_size);
  return 1;
}

/* Reads the options, the weights and the data source. */
static int sample_setup(SampleRun* r, int argc, char** argv) {
  if (args_parse(&r->args, &sample_spec, argc, argv)) return -1;
  const Args* a = &r->args;
  long tokens, top_k, seed, problems;
  double temp;
  if (args_int(a, "tokens", 64, 1, 1 << 20, &tokens) || args_int(a, "top-k", 0, 0, 1 << 24, &top_k) ||
      args_int(a, "seed", 1, 0, (1L << 62), &seed) || args_int(a, "problems", 5, 1, 100000, &problems) ||
      args_double(a, "temperature", 1.0, &temp))
    return -1;
  if (temp < 0 || temp > 100)
    return osdp_fail("--temperature: %g is outside 0..100 (0: greedy; 1: the model's own "
                     "distribution)", temp);
  r->opt = (SampleOptions){(int)tokens, temp, (int)top_k, (uint64_t)seed,
                           args_has(a, "no-cache"), -1};
  r->json = args_has(a, "json");
  r->problems = (int)problems;
  const char *load = args_get(a, "load", NULL), *resume = args_get(a, "resume", NULL);
  if (!load == !resume)
    return osdp_fail("osdp sample: give the weights with one of --load FILE or --resume PATH");
  if (args_has(a, "prompt") && args_has(a, "prompt-tokens"))
    return osdp_fail("--prompt and --prompt-tokens: give one");
  const char* path = load ? load : resume;
  struct stat st;
  if (resume && (stat(resume, &st) || !S_ISDIR(st.st_mode)))
    return osdp_fail("--resume: %s is not a checkpoint directory of osdp train (for a weights "
                     "file use --load)", resume);
  char spec[4200];
  if (out_claim_input(path, load ? "--load" : "--resume") ||
      setup_read_weights(path, args_get(a, "model", NULL), "sample", &r->d, &r->params) ||
      sample_data_spec(r, resume, spec, sizeof spec))
    return -1;
  int tk = sample_tokenizer(r, load);
  if (tk) return tk < 0 ? -1 : 0; /* text in and out through the tokenizer: no data source */
  int T = r->d.cfg.max_seq < 64 ? r->d.cfg.max_seq : 64;
  if (data_open(&r->data, spec, T, 1)) {
    /* Token ids need no tokenizer: a data file that is gone does not stop --prompt-tokens. */
    if (!args_has(a, "prompt-tokens")) return -1;
    fprintf(stderr, "osdp: note: %s; printing token ids\n", osdp_last_error());
    osdp_clear_error();
    return 0;
  }
  if (data_vocab_size(r->data) > r->d.cfg.vocab_size)
    return osdp_fail("--data: %s has %d tokens, more than model %s's vocabulary of %d; give the "
                     "data the model was trained on", spec, data_vocab_size(r->data),
                     r->d.cfg.name, r->d.cfg.vocab_size);
  return 0;
}

/* text encoded by tokenizer t into ids (at most max): the count, or -1 with an error. */
static int tok_prompt(Tokenizer* t, const char* text, int* ids, int max) {
  TokIds v = {0};
  int n = tok_encode(t, text, strlen(text), &v) ? -1 : (int)v.n;
  if (n > max) n = osdp_fail("--prompt: %zu tokens, more than %d", v.n, max);
  if (n > 0) memcpy(ids, v.ids, (size_t)n * sizeof *ids);
  tok_ids_free(&v);
  return n;
}

/* The prompt's token ids into ids (at most max): --prompt in the data's tokens, or the ids of
** --prompt-tokens. Returns the count, or -1 with an error. */
static int sample_prompt(const SampleRun* r, int* ids, int max) {
  const char* text = args_get(&r->args, "prompt", NULL);
  if (text && r->tok) return tok_prompt(r->tok, text, ids, max);
  if (text) return data_encode(r->data, text, ids, max); /* --prompt-tokens when r->data is NULL */
  const char* list = args_get(&r->args, "prompt-tokens", "");
  int n = 0;
  for (const char* p = list; *p;) {
    char* end;
    long v = strtol(p, &end, 10);
    if (end == p || (*end && *end != ',') || v < 0 || v >= r->d.cfg.vocab_size)
      return osdp_fail("--prompt-tokens: '%s' is not a comma-separated list of token ids below "
                       "%d (the vocabulary of %s)", list, r->d.cfg.vocab_size, r->d.cfg.name);
    if (n >= max) return osdp_fail("--prompt-tokens: more than %d tokens", max);
    ids[n++] = (int)v;
    p = *end ? end + 1 : end;
  }
  return n;
}

/* Adds an int array to o. */
static void add_ints(cJSON* o, const char* key, const int* v, int n) {
  cJSON* a = cJSON_AddArrayToObject(o, key);
  for (int i = 0; i < n; i++) cJSON_AddItemToArray(a, cJSON_CreateNumber(v[i]));
}

/* Prints the prompt and its continuation as text through the tokenizer: the words alone on
** standard output (so they can be piped), or ids and text in out. 0, or -1 with an error. */
static int sample_words(SampleRun* r, const int* prompt, int n, const int* gen, int ng, cJSON* out) {
  size_t lp = 0, lg = 0;
  char *ptxt = tok_decode(r->tok, prompt, (size_t)n, &lp), *gtxt = tok_decode(r->tok, gen, (size_t)ng, &lg);
  int rc = ptxt && gtxt ? 0 : -1;
  if (!rc && out) {
    add_ints(out, "prompt_tokens", prompt, n);
    add_ints(out, "tokens", gen, ng);
    cJSON_AddStringToObject(out, "prompt", ptxt);
    cJSON_AddStringToObject(out, "text", gtxt);
  } else if (!rc) {
    fwrite(ptxt, 1, lp, stdout);
    fwrite(gtxt, 1, lg, stdout);
    fputc('\n', stdout);
  }
  free(ptxt);
  free(gtxt);
  return rc;
}

/* Continues the prompt and prints it, for people or as JSON. */
static int sample_continue(SampleRun* r, cJSON* out) {
  int* prompt = malloc(SAMPLE_PROMPT_MAX * sizeof(int));
  int* gen = malloc(((size_t)r->opt.tokens + 1) * sizeof(int));
  int n = prompt && gen ? sample_prompt(r, prompt, SAMPLE_PROMPT_MAX) : osdp_fail("out of memory");
  int addition = r->data && data_batch_problem_count(r->data, 1) > 0, ng = 0, rc = n < 0 ? -1 : 0;
  double secs = 0;
  if (addition) r->opt.stop_token = DATA_ADD_END; /* one answer, then stop */
  if (!rc) rc = sample_generate(&r->d, r->params, prompt, n, &r->opt, gen, &ng, &secs);
  if (!rc && r->tok) {
    rc = sample_words(r, prompt, n, gen, ng, out);
    if (!rc && !out)
      fprintf(stderr, "%d new tokens in %.1f ms (%.0f tokens/s, %s)\n", ng, 1e3 * secs,
              secs > 0 ? ng / secs : 0, r->opt.no_cache ? "full forward per token" : "KV cache");
  } else if (!rc) {
    size_t cap = 8 * ((size_t)n + ng) + 16;
    char *ptxt = malloc(cap), *gtxt = malloc(cap);
    if (ptxt && gtxt) {
      sample_text(r->data, prompt, n, ptxt, cap);
      sample_text(r->data, gen, ng, gtxt, cap);
      if (out) {
        add_ints(out, "prompt_tokens", prompt, n);
        add_ints(out, "tokens", gen, ng);
        cJSON_AddStringToObject(out, "text", gtxt);
      } else {
        printf("%s%s\n", ptxt, gtxt);
      }
    }
    free(ptxt);
    free(gtxt);
    if (out) {
      cJSON_AddNumberToObject(out, "seconds", secs);
      cJSON_AddNumberToObject(out, "tokens_per_s", secs > 0 ? ng / secs : 0);
    } else {
      printf("%d new tokens in %.1f ms (%.0f tokens/s, %s)\n", ng, 1e3 * secs,
             secs > 0 ? ng / secs : 0, r->opt.no_cache ? "full forward per token" : "KV cache");
    }
  }
  free(prompt);
  free(gen);
  return rc;
}

/* Answers held-out addition problems and prints the score. */
static int sample_score(SampleRun* r, cJSON* out) {
  if (!r->data || data_batch_problem_count(r->data, 1) == 0)
    return osdp_fail("osdp sample: give --prompt TEXT or --prompt-tokens IDS (only the addition "
                     "task has problems to answer without one)");
  int right;
  if (!out) printf("%d held-out problems (answers are written least significant digit first):\n",
                   r->problems);
  if (sample_problems(&r->d, r->params, r->data, r->problems, &r->opt, out ? NULL : stdout, out,
                      &right))
    return -1;
  if (!out) printf("%d of %d right\n", right, r->problems);
  return 0;
}

/* Rank 0's work: the setup, then the prompt continued or the problems answered. */
static int sample_run(SampleRun* r, int argc, char** argv) {
  if (sample_setup(r, argc, argv)) return -1;
  backend_cpu()->set_threads(1); /* one position's kernels are too small to share out */
  cJSON* out = r->json ? cJSON_CreateObject() : NULL;
  if (out) {
    cJSON_AddStringToObject(out, "model", r->d.cfg.name);
    cJSON_AddBoolToObject(out, "cache", !r->opt.no_cache);
    cJSON_AddNumberToObject(out, "temperature", r->opt.temperature);
    cJSON_AddNumberToObject(out, "seed", (double)r->opt.seed);
  }
  int has_prompt = args_has(&r->args, "prompt") || args_has(&r->args, "prompt-tokens");
  int rc = has_prompt ? sample_continue(r, out) : sample_score(r, out);
  if (out && !rc) {
    char* s = cJSON_PrintUnformatted(out);
    if (s) printf("%s\n", s);
    free(s);
  }
  cJSON_Delete(out);
  return rc;
}

/* `osdp sample`: rank 0 samples; every rank agrees on the outcome. */
int cmd_sample(int argc, char** argv) {
  if (args_help(&sample_spec, argc, argv)) return 0;
  SampleRun r;
  memset(&r, 0, sizeof r);
  int rc = comm_rank() == 0 ? sample_run(&r, argc, argv) : 0;
  double failed = comm_allreduce_f64(comm_world(), rc ? 1.0 : 0.0);
  if (failed != 0 && comm_rank() != 0) osdp_fail("sample: rank 0 failed");
  free(r.params);
  data_close(r.data);
  tok_free(r.tok);
  gpt_desc_free(&r.d);
  return failed != 0 || rc ? cli_report_error() : 0;
}
