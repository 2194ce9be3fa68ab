/*
** fuzz_tokenizer.c: fuzzes Hugging Face tokenizer.json files (tokenizer/tokenizer.h). The input
** is the file, read by tok_load: a refusal must leave a message; a tokenizer that loads must
** encode a fixed text (ASCII, accents, CJK, an added token's text) and decode its ids back to
** exactly that text, every id inside its vocabulary.
*/
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_util.h"
#include "tokenizer/tokenizer.h"

/* Encodes a fixed text with t and checks the ids and the round trip. */
static void check_round_trip(Tokenizer* t) {
  static const char text[] = "Hello  world, it's 2026!\n\tcaf\xc3\xa9 \xe4\xb8\xad\xe6\x96\x87 <|endoftext|> x";
  TokIds ids = {0};
  if (tok_encode(t, text, sizeof text - 1, &ids)) {
    fuzz_expect_message("tok_encode"); /* a vocabulary without some byte's token may refuse */
    tok_ids_free(&ids);
    return;
  }
  for (size_t i = 0; i < ids.n; i++)
    if (ids.ids[i] < 0 || ids.ids[i] >= tok_vocab_size(t)) fuzz_die("tok_encode", "an id outside the vocabulary");
  size_t len = 0;
  char* back = tok_decode(t, ids.ids, ids.n, &len);
  if (!back) fuzz_die("tok_decode refused tok_encode's ids", osdp_last_error());
  if (len != sizeof text - 1 || memcmp(back, text, len) != 0) fuzz_die("tok_decode", "not the text encoded");
  free(back);
  tok_ids_free(&ids);
}

/* libFuzzer's entry point: one tokenizer.json per call. */
int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const char* path;
  if (!path) path = fuzz_temp_path(NULL, "tokenizer.json", 0);
  fuzz_write_file(path, data, size);
  osdp_clear_error();
  Tokenizer* t = NULL;
  if (tok_load(&t, path)) {
    fuzz_expect_message("tok_load");
    return 0;
  }
  check_round_trip(t);
  tok_free(t);
  osdp_clear_error();
  return 0;
}
