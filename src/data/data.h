/*
** data.h: where training and held-out token sequences come from.
**
** A DataSource hands out batches of token sequences. Every batch is a pure function of
** (seed, split, step, row index): each row draws from its own random-number stream seeded
** from those four numbers. So every MPI rank can build the SAME global batch on its own and
** keep just its rows, a run is reproducible, and a resumed run sees exactly the batches it
** would have seen without stopping. There is no hidden cursor to save in a checkpoint.
**
** Sources (the `spec` string given to data_open):
**
**   "addition"     n = 3 digit addition problems, made up on the fly (needs no file).
**   "addition:N"   the same with N-digit operands, 1 <= N <= 9.
**   "text:FILE"    the bytes of FILE, vocabulary 256; or, through data_open_tokenized, its
**                  tokens under a Hugging Face tokenizer.
**   "tokens:FILE"  a token file in llm.c's format (GPT-2 or Llama 3 tokens, see below); its
**                  vocabulary is its largest token id + 1 (the format does not record one).
**
** Addition format. Tokens: '0'..'9' = 0..9, '+' = 10, '=' = 11, end-of-problem = 12
** (shown as ';'), pad = 13 (shown as '_'); vocabulary 14. One problem a + b with n-digit
** operands is L = 3n + 4 tokens:
**
**     a (n digits, zero-padded, most significant first)  '+'
**     b (n digits, zero-padded, most significant first)  '='
**     c = a + b (n + 1 digits, zero-padded, LEAST significant first)  ';'
**
** e.g. for n = 3, 123 + 456 = 579 is "123+456=9750;". Writing the sum reversed lets a small
** transformer produce each digit from digits it has already seen plus one carry. A sequence
** of T tokens holds P = T / L problems back to back; the T - P*L positions left over at the
** end are pad tokens. Targets are next tokens, but taken only where the next token is an
** answer digit or the end token: at '=' and at each answer digit (n + 2 positions per
** problem); every other target is -1, so the loss measures the answers only. Each of those
** n + 2 positions also carries its problem's id (row * P + j for the j-th problem of a row),
** so a caller can score whole problems as right or wrong.
**
** Held-out pairs. The operand pairs are split once and for all (independent of the seed):
** a pair is held out when a hash of the UNORDERED pair {a, b} is 0 mod 10, so about 10% of
** pairs are held out, and a + b and b + a are always on the same side (the model cannot
** learn a held-out sum from its mirror image). The train split never produces a held-out
** pair and the val split produces only held-out pairs; within its side, each ordered pair
** is equally likely.
**
** Text and token files. A sample is a window of T + 1 consecutive tokens at a random offset:
** inputs = window[0..T), targets = window[1..T] (every target counts). The train split draws
** windows from the first 90% of the file (size * 9 / 10 tokens, rounded down), the val
** split from the rest; both parts must hold at least T + 1 tokens, so a file needs at least
** 10*T + 1 tokens. The whole file is read into memory at open.
**
** llm.c token file (llm.c's dev/data/data_common.py): a header of 256 little-endian int32
** (header[0] = 20240520 magic, header[1] = version, header[2] = number of tokens), then that
** many tokens, little-endian: version 1 uint16 (GPT-2), version 2 uint32 (Llama 3). The file
** size must match the header exactly, and every token must be < DATA_MAX_VOCAB; whether the
** model's vocabulary holds them is the caller's check (data_vocab_size).
**
** Errors: functions that can fail return -1 after recording a one-line message with
** osdp_fail() (see core/util.h); they never print or exit.
*/
#ifndef OSDP_DATA_H
#define OSDP_DATA_H

#include <stdint.h>

typedef struct DataSource DataSource;

typedef enum { DATA_TRAIN = 0, DATA_VAL = 1 } DataSplit;

/* Token ids of the addition task. */
enum {
  DATA_ADD_PLUS = 10,   /* '+' */
  DATA_ADD_EQUALS = 11, /* '=' */
  DATA_ADD_END = 12,    /* end of a problem, shown as ';' */
  DATA_ADD_PAD = 13,    /* filler after the last problem of a sequence, shown as '_' */
  DATA_ADD_VOCAB = 14
};

/* Vocabulary of GPT-2 token files. */
#define DATA_GPT2_VOCAB 50257
/* The largest vocabulary a token file may need (token ids below it): the largest model
** vocabulary osdp builds (gpt_config_validate). */
#define DATA_MAX_VOCAB (1 << 24)
/* Bytes data_token_text's buffer holds ("<16777215>" and its NUL). */
#define DATA_TOKEN_TEXT 16

/* Opens the data source named by `spec` ("addition", "addition:N", "text:FILE" or
** "tokens:FILE") for sequences of seq_len tokens; `seed` picks the random streams.
** On success stores a new source in *out and returns 0; otherwise returns -1 with an
** osdp_fail message (unknown spec, unreadable/empty/malformed file, file too short for
** seq_len, seq_len too short for one addition problem). */
int data_open(DataSource** out, const char* spec, int seq_len, uint64_t seed);
/* The same, but "text:FILE" is encoded by the Hugging Face tokenizer at `tokenizer` (a
** tokenizer.json or a directory holding one: tokenizer/tokenizer.h) into token ids, split and
** drawn as a token file's (its vocabulary: the tokenizer's). NULL tokenizer, or another source:
** data_open. */
int data_open_tokenized(DataSource** out, const char* spec, const char* tokenizer, int seq_len,
                        uint64_t seed);

/* Frees a source and its file contents. NULL is allowed. */
void data_close(DataSource* ds);

/* Number of token ids the model must handle: 14 for addition, 256 for text, the largest
** token id + 1 for a token file (at most DATA_MAX_VOCAB), found in the one pass over its tokens
** that data_open makes anyway. */
int data_vocab_size(const DataSource* ds);

/* Sequence length T every sample has (the seq_len given to data_open). */
int data_seq_len(const DataSource* ds);

/* One line for logs, e.g. "addition of 3-digit numbers (13 tokens a problem, 4 a sequence)"
** or "text file input.txt (1115394 bytes)". Owned by the source. */
const char* data_describe(const DataSource* ds);

/* What a text or token file is, for telling whether it changed: "<bytes> bytes, fnv1a64 <hex>"
** (the checksum of every byte). "" for the addition task, which its spec names completely.
** Owned by the source. */
const char* data_identity(const DataSource* ds);

/* Fills rows first_row .. first_row+nrows-1 of global batch number `step` (>= 0) of `split`,
** a batch of global_rows rows. A sample depends only on (seed, split, step, row index), so
** the global batch is the same however it is cut into row ranges. inputs and targets each
** receive nrows*T ints (row-major); targets[i] is the token to predict after inputs[i], or -1
** where no loss is taken. problem, if not NULL, receives nrows*T ints: for addition the id of
** the problem whose answer the target at that position belongs to (ids run 0 ..
** data_batch_problem_count()-1, unique within the global batch), else -1; always -1 for text
** and token files. Returns 0, or -1 with an osdp_fail message on bad arguments. */
int data_batch(const DataSource* ds, DataSplit split, long step, int global_rows, int first_row,
               int nrows, int* inputs, int* targets, int* problem);

/* How many sequences of seq_len tokens the training split holds end to end (a text or token
** file: its training tokens / seq_len), or LONG_MAX for the addition task (made up on demand):
** a global batch of more sequences than this would repeat the data within one step. */
long data_train_sequences(const DataSource* ds);

/* Number of positions with a target (>= 0) in the whole global batch `step` of `split`,
** computed without building it (the loss is normalised by this global count). Returns -1
** with an osdp_fail message on bad arguments. */
long data_batch_target_count(const DataSource* ds, DataSplit split, long step, int global_rows);

/* Number of addition problems in a global batch of global_rows rows: problem ids run from 0
** to this minus 1. 0 for text and token files. */
long data_batch_problem_count(const DataSource* ds, int global_rows);

/* Printable text for one token, for samples in logs: a digit or "+", "=", ";", "_" for
** addition; the character itself or an escape such as "\n" or "\x1f" for text; "<id>" for
** token files (no decoder here); "?" for an id outside the vocabulary. Returns buf. */
const char* data_token_text(const DataSource* ds, int token, char buf[DATA_TOKEN_TEXT]);

/* Token ids of text for prompts (osdp sample): for addition each character is its token ('0'..'9',
** '+', '=', ';', '_'), for text each byte. Writes at most max ids; returns their count, or -1
** with an error naming --prompt (a character outside the addition task, too long, or a tokens
** file, which has no text encoding here). */
int data_encode(const DataSource* ds, const char* text, int* ids, int max);

#endif
