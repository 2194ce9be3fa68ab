/* test_tokenizer.c: Hugging Face tokenizer.json files (tokenizer/tokenizer.h) on a small
** hand-made byte-level BPE: its 256 byte tokens (id = the byte) and a few merges, with the ids
** each text must give worked out by hand: merge order by rank, the leftmost of equal pairs, both
** merge formats, added tokens (the longest at the leftmost place; normalized false before
** true; never split), ignore_merges, GPT-2's, Llama 3's and Digits' splits, decoding back,
** tok_safe_cut's cuts; and malformed or unsupported files refused in one line naming the
** field and the value. */
#include "check.h"
#include "core/util.h"
#include "tokenizer/tokenizer.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char tmpdir[256];

/* The merges of the test vocabulary, in rank order, and the ids their results get (256 on). */
static const char* const merges[][2] = {
    {"h", "e"},      /* 256 he */
    {"l", "l"},      /* 257 ll */
    {"he", "ll"},    /* 258 hell */
    {"hell", "o"},   /* 259 hello */
    {"\xc4\xa0", "w"}, /* 260 "Ġw" (a space and w) */
    {"o", "r"},      /* 261 or */
    {"\xc4\xa0w", "or"}, /* 262 Ġwor */
    {"l", "d"},      /* 263 ld */
    {"\xc4\xa0wor", "ld"}, /* 264 Ġworld */
    {"e", "l"},      /* 265 el: ranked after "h e", so "hel" is he + l */
    {"3", "4"},      /* 266 34 */
};
#define NMERGES 11
enum { ID_XY = 267, ID_EOT = 268, ID_ABC = 269, ID_AB = 270, ID_BC = 271, ID_PAD = 272 };

/* Writes the character GPT-2's byte alphabet writes byte b as, UTF-8, into s. */
static void byte_char(int b, char s[3]) {
  int printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
  int extra = 0;
  for (int c = 0; c < b; c++)
    extra += !((c >= '!' && c <= '~') || (c >= 0xA1 && c <= 0xAC) || c >= 0xAE);
  unsigned cp = printable ? (unsigned)b : 256u + (unsigned)extra;
  memset(s, 0, 3);
  if (cp < 0x80) s[0] = (char)cp;
  else {
    s[0] = (char)(0xC0 | cp >> 6);
    s[1] = (char)(0x80 | (cp & 0x3F));
  }
}

/* The test tokenizer's JSON (the caller deletes it); arrays: merges as ["a", "b"] pairs. */
static cJSON* base_json(int arrays) {
  cJSON* root = cJSON_CreateObject();
  cJSON* model = cJSON_AddObjectToObject(root, "model");
  cJSON_AddStringToObject(model, "type", "BPE");
  cJSON_AddNullToObject(model, "dropout");
  cJSON_AddFalseToObject(model, "byte_fallback");
  cJSON_AddFalseToObject(model, "ignore_merges");
  cJSON* vocab = cJSON_AddObjectToObject(model, "vocab");
  for (int b = 0; b < 256; b++) {
    char s[3];
    byte_char(b, s);
    cJSON_AddNumberToObject(vocab, s, b);
  }
  cJSON* m = cJSON_AddArrayToObject(model, "merges");
  for (int i = 0; i < NMERGES; i++) {
    char both[64];
    snprintf(both, sizeof both, "%s%s", merges[i][0], merges[i][1]);
    cJSON_AddNumberToObject(vocab, both, 256 + i);
    snprintf(both, sizeof both, "%s %s", merges[i][0], merges[i][1]);
    cJSON_AddItemToArray(m, arrays ? cJSON_CreateStringArray(merges[i], 2) : cJSON_CreateString(both));
  }
  cJSON_AddNumberToObject(vocab, "xy", ID_XY); /* a token no merge makes (ignore_merges) */
  cJSON* added = cJSON_AddArrayToObject(root, "added_tokens");
  const struct { int id; const char* text; int special, normalized; } adds[] = {
      {ID_EOT, "<|endoftext|>", 1, 0}, {ID_ABC, "abcd", 0, 0}, {ID_AB, "ab", 0, 1},
      {ID_BC, "bc", 0, 0}, {ID_PAD, "<pad>", 1, 1}};
  for (size_t i = 0; i < sizeof adds / sizeof adds[0]; i++) {
    cJSON* a = cJSON_CreateObject();
    cJSON_AddNumberToObject(a, "id", adds[i].id);
    cJSON_AddStringToObject(a, "content", adds[i].text);
    cJSON_AddFalseToObject(a, "single_word");
    cJSON_AddFalseToObject(a, "lstrip");
    cJSON_AddFalseToObject(a, "rstrip");
    cJSON_AddBoolToObject(a, "normalized", adds[i].normalized);
    cJSON_AddBoolToObject(a, "special", adds[i].special);
    cJSON_AddItemToArray(added, a);
  }
  cJSON_AddNullToObject(root, "normalizer");
  cJSON* pre = cJSON_AddObjectToObject(root, "pre_tokenizer");
  cJSON_AddStringToObject(pre, "type", "ByteLevel");
  cJSON_AddFalseToObject(pre, "add_prefix_space");
  cJSON_AddTrueToObject(pre, "use_regex");
  cJSON* dec = cJSON_AddObjectToObject(root, "decoder");
  cJSON_AddStringToObject(dec, "type", "ByteLevel");
  cJSON_AddNullToObject(root, "post_processor");
  return root;
}

/* Writes text as tmpdir/name; the path in path (1024 bytes). */
static void put_text(const char* name, const char* text, char* path) {
  snprintf(path, 1024, "%s/%s", tmpdir, name);
  FILE* f = fopen(path, "w");
  CHECK(f && fputs(text, f) >= 0 && fclose(f) == 0);
}

/* Writes o as tmpdir/name and deletes it; the path in path. */
static void put_json(const char* name, cJSON* o, char* path) {
  char* text = cJSON_PrintUnformatted(o);
  put_text(name, text, path);
  free(text);
  cJSON_Delete(o);
}

/* Loads o (written as tmpdir/name, then deleted); NULL after a failed CHECK. */
static Tokenizer* load_json(const char* name, cJSON* o) {
  char path[1024];
  Tokenizer* t = NULL;
  put_json(name, o, path);
  int rc = tok_load(&t, path);
  CHECK_MSG(rc == 0, "%s: %s", name, osdp_last_error());
  return t;
}

/* Whether encoding text gives exactly ids[0..n) and decoding them gives text back. */
static int encodes_to(Tokenizer* t, const char* text, const int* ids, size_t n) {
  TokIds out = {0};
  int ok = tok_encode(t, text, strlen(text), &out) == 0 && out.n == n &&
           memcmp(out.ids, ids, n * sizeof *ids) == 0;
  if (!ok) {
    fprintf(stderr, "  '%s' ->", text);
    for (size_t i = 0; i < out.n; i++) fprintf(stderr, " %d", out.ids[i]);
    fprintf(stderr, " (want %zu ids: %d ...) %s\n", n, n ? ids[0] : -1, osdp_last_error());
  }
  size_t len = 0;
  char* back = ok ? tok_decode(t, out.ids, out.n, &len) : NULL;
  if (ok && !(back && len == strlen(text) && memcmp(back, text, len) == 0)) {
    fprintf(stderr, "  '%s' decodes to '%s'\n", text, back ? back : "(null)");
    ok = 0;
  }
  free(back);
  tok_ids_free(&out);
  return ok;
}
#define ENCODES(t, text, ...) do { const int want_[] = {__VA_ARGS__}; \
  CHECK_MSG(encodes_to(t, text, want_, sizeof want_ / sizeof want_[0]), "%s", text); } while (0)

/* Merges by rank, ties leftmost, bytes without merges, added tokens, decoding. */
static void test_encode(Tokenizer* t) {
  CHECK(tok_vocab_size(t) == ID_PAD + 1);
  CHECK(tok_eot_id(t) == ID_EOT);
  ENCODES(t, "hello world", 259, 264);
  ENCODES(t, "hellohello", 259, 259);
  ENCODES(t, "hel", 256, 'l');          /* "h e" ranks before "e l" */
  ENCODES(t, "lll", 257, 'l');          /* the leftmost "l l" first */
  ENCODES(t, "llll", 257, 257);
  ENCODES(t, "yo", 'y', 'o');
  ENCODES(t, " world world", 264, 264);
  ENCODES(t, "hello<|endoftext|> world", 259, ID_EOT, 264);
  ENCODES(t, "<|endoftext|><|endoftext|>", ID_EOT, ID_EOT);
  ENCODES(t, "<|endoftext", '<', '|', 'e', 'n', 'd', 'o', 'f', 't', 'e', 'x', 't');
  ENCODES(t, "xabcdy", 'x', ID_ABC, 'y'); /* the longest added token at the leftmost place */
  ENCODES(t, "zabc", 'z', 'a', ID_BC);    /* normalized false ("bc") before true ("ab") */
  ENCODES(t, "zab", 'z', ID_AB);
  ENCODES(t, "aab", 'a', ID_AB);
  ENCODES(t, "xbcab", 'x', ID_BC, ID_AB);
  ENCODES(t, "z<pad>", 'z', ID_PAD);
  ENCODES(t, "xy", 'x', 'y');             /* no merge makes xy */
  ENCODES(t, "caf\xc3\xa9 \xe6\x97\xa5", 'c', 'a', 'f', 0xc3, 0xa9, ' ', 0xe6, 0x97, 0xa5);
  ENCODES(t, "a  \n\n b", 'a', ' ', ' ', '\n', '\n', ' ', 'b');
  ENCODES(t, "12345 34", '1', '2', 266, '5', ' ', 266);
  TokIds out = {0};
  CHECK(tok_encode(t, "ok\xff", 3, &out) == -1 && strstr(osdp_last_error(), "byte 2") && out.n == 0);
  CHECK(tok_encode(t, "\xc0\xaf", 2, &out) == -1); /* an overlong '/' */
  CHECK(tok_encode(t, "\xed\xa0\x80", 3, &out) == -1); /* a surrogate */
  CHECK(tok_encode(t, "", 0, &out) == 0 && out.n == 0);
  tok_ids_free(&out);
  size_t len;
  int bad[] = {259, 9999};
  CHECK(tok_decode(t, bad, 2, &len) == NULL && strstr(osdp_last_error(), "9999"));
  const char* s = tok_token_text(t, 260, &len);
  CHECK(s && len == 3 && memcmp(s, "\xc4\xa0w", 3) == 0);
}

/* tok_safe_cut: the last line break between printable characters or space between letters. */
static void test_cuts(Tokenizer* t) {
  const char* s = "one two\nthree four";
  CHECK(tok_safe_cut(t, s, strlen(s)) == 13);       /* before " four" */
  CHECK(tok_safe_cut(t, s, 14) == 8);               /* after "two\n": " f" needs what follows */
  CHECK(tok_safe_cut(t, "x,\ny", 4) == 3);
  CHECK(tok_safe_cut(t, "x, y", 4) == 0);
  CHECK(tok_safe_cut(t, "a \n b", 5) == 0);
  CHECK(tok_safe_cut(t, "x", 1) == 0);
}

/* The same file with merges as ["a", "b"] pairs gives the same ids. */
static void test_array_merges(void) {
  Tokenizer* t = load_json("arrays.json", base_json(1));
  if (!t) return;
  ENCODES(t, "hello world", 259, 264);
  ENCODES(t, "hel", 256, 'l');
  tok_free(t);
}

/* ignore_merges: a word that is a token is that token, even where no merge makes it. */
static void test_ignore_merges(void) {
  cJSON* o = base_json(0);
  cJSON_ReplaceItemInObject(cJSON_GetObjectItem(o, "model"), "ignore_merges", cJSON_CreateTrue());
  Tokenizer* t = load_json("ignore.json", o);
  if (!t) return;
  ENCODES(t, "xy xyz", ID_XY, ' ', 'x', 'y', 'z');
  ENCODES(t, "hello", 259);
  tok_free(t);
}

/* A pre-tokenizer of the Sequence of steps (JSON text) with ByteLevel last. */
static cJSON* with_sequence(const char* steps) {
  cJSON* o = base_json(0);
  char text[1024];
  snprintf(text, sizeof text, "{\"type\":\"Sequence\",\"pretokenizers\":[%s,{\"type\":\"ByteLevel\","
           "\"add_prefix_space\":false,\"trim_offsets\":true,\"use_regex\":false}]}", steps);
  cJSON_ReplaceItemInObject(o, "pre_tokenizer", cJSON_Parse(text));
  return o;
}

/* Llama 3's Split pattern (digits in threes) and Digits steps split where GPT-2's does not. */
static void test_splits(void) {
  Tokenizer* t = load_json("llama3.json", with_sequence(
      "{\"type\":\"Split\",\"pattern\":{\"Regex\":\"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\\\r\\\\n\\\\p{L}"
      "\\\\p{N}]?\\\\p{L}+|\\\\p{N}{1,3}| ?[^\\\\s\\\\p{L}\\\\p{N}]+[\\\\r\\\\n]*|\\\\s*[\\\\r\\\\n]+|"
      "\\\\s+(?!\\\\S)|\\\\s+\"},\"behavior\":\"Isolated\",\"invert\":false}"));
  if (t) {
    ENCODES(t, "12345", '1', '2', '3', '4', '5'); /* "123" "45": no 34 */
    ENCODES(t, "1234", '1', '2', '3', '4');
    ENCODES(t, " 34", ' ', 266);
    ENCODES(t, "hello world", 259, 264);
    CHECK(tok_safe_cut(t, "ab cd", 5) == 2);
  }
  tok_free(t);
  t = load_json("digits.json", with_sequence("{\"type\":\"Digits\",\"individual_digits\":true}"));
  if (t) {
    ENCODES(t, "a34", 'a', '3', '4');
    ENCODES(t, "hello world", 259, 264);
    CHECK(tok_safe_cut(t, "ab cd", 5) == 0);          /* no word split: no known cut */
  }
  tok_free(t);
  t = load_json("split_str.json", with_sequence(
      "{\"type\":\"Split\",\"pattern\":{\"String\":\"l\"},\"behavior\":\"Isolated\",\"invert\":false}"));
  if (t) ENCODES(t, "hello", 256, 'l', 'l', 'o');
  tok_free(t);
}

/* A model directory holding tokenizer.json loads as the file does. */
static void test_directory(void) {
  char dir[600], path[1024];
  snprintf(dir, sizeof dir, "%s/model", tmpdir);
  CHECK(mkdir(dir, 0755) == 0);
  put_json("model/tokenizer.json", base_json(0), path);
  Tokenizer* t = NULL;
  CHECK_MSG(tok_load(&t, dir) == 0, "%s", osdp_last_error());
  if (t) ENCODES(t, "hello", 259);
  tok_free(t);
  snprintf(dir, sizeof dir, "%s/empty", tmpdir);
  CHECK(mkdir(dir, 0755) == 0);
  CHECK(tok_load(&t, dir) == -1 && strstr(osdp_last_error(), "no tokenizer.json") && !t);
}

/* Whether loading the text gives one line naming every needle (NULL-terminated). */
static int refuses_text(const char* name, const char* text, const char* const* needles) {
  char path[1024];
  Tokenizer* t = NULL;
  put_text(name, text, path);
  int rc = tok_load(&t, path);
  const char* e = osdp_last_error();
  int ok = rc == -1 && !t && !strchr(e, '\n');
  for (int i = 0; needles[i] && ok; i++) ok = strstr(e, needles[i]) != NULL;
  if (!ok) fprintf(stderr, "  %s: rc %d, message '%s' (wanted '%s' ...)\n", name, rc, e, needles[0]);
  tok_free(t);
  return ok;
}

/* Whether loading o (deleted) fails naming every needle. */
static int refuses(const char* name, cJSON* o, const char* const* needles) {
  char* text = cJSON_PrintUnformatted(o);
  cJSON_Delete(o);
  int ok = refuses_text(name, text, needles);
  free(text);
  return ok;
}
#define REFUSES(name, o, ...) CHECK(refuses(name, o, (const char* const[]){__VA_ARGS__, NULL}))

/* o with key of the object at `at` (a key of o, or "" for o) set to the JSON text value. */
static cJSON* set(cJSON* o, const char* at, const char* key, const char* value) {
  cJSON* parent = *at ? cJSON_GetObjectItem(o, at) : o;
  cJSON* v = cJSON_Parse(value);
  if (cJSON_GetObjectItem(parent, key)) cJSON_ReplaceItemInObject(parent, key, v);
  else cJSON_AddItemToObject(parent, key, v);
  return o;
}

/* The added token at index i of o set to have key = value (JSON text). */
static cJSON* set_added(cJSON* o, int i, const char* key, const char* value) {
  cJSON* a = cJSON_GetArrayItem(cJSON_GetObjectItem(o, "added_tokens"), i);
  cJSON_ReplaceItemInObject(a, key, cJSON_Parse(value));
  return o;
}

/* Malformed and unsupported files: one line naming the field and its value. */
static void test_refused(void) {
  cJSON* base = base_json(0);
  char* good = cJSON_PrintUnformatted(base);
  cJSON_Delete(base);
  char* dup = malloc(strlen(good) + 64);
  char* at = strstr(good, "\"vocab\":{") + 9;
  sprintf(dup, "%.*s\"he\":300,%s", (int)(at - good), good, at);
  CHECK(refuses_text("dup.json", dup, (const char* const[]){"\"he\"", "twice", NULL}));
  sprintf(dup, "%s {}", good);
  CHECK(refuses_text("trailing.json", dup, (const char* const[]){"content after", NULL}));
  CHECK(refuses_text("notjson.json", "{\"model\":", (const char* const[]){"malformed JSON", NULL}));
  free(dup);
  free(good);
  REFUSES("wordpiece", set(base_json(0), "model", "type", "\"WordPiece\""), "model.type", "WordPiece");
  REFUSES("unigram", set(base_json(0), "model", "type", "\"Unigram\""), "model.type", "Unigram");
  REFUSES("merge num", set(base_json(0), "model", "merges", "[5]"), "model.merges[0]", "5");
  REFUSES("merge obj", set(base_json(0), "model", "merges", "[\"h e\",{}]"), "model.merges[1]");
  REFUSES("merge 1", set(base_json(0), "model", "merges", "[\"he\"]"), "model.merges[0]", "\"he\"");
  REFUSES("merge 3", set(base_json(0), "model", "merges", "[[\"h\",\"e\",\"l\"]]"), "model.merges[0]");
  REFUSES("merge result", set(base_json(0), "model", "merges", "[\"h e\",\"x z\"]"),
          "model.merges[1]", "result", "\"xz\"");
  REFUSES("merge part", set(base_json(0), "model", "merges", "[\"hq e\"]"), "model.merges[0]",
          "first part", "\"hq\"");
  REFUSES("merges str", set(base_json(0), "model", "merges", "\"h e\""), "model.merges");
  REFUSES("vocab id", set(base_json(0), "model", "vocab", "{\"a\":-1}"), "model.vocab[\"a\"]", "-1");
  REFUSES("vocab frac", set(base_json(0), "model", "vocab", "{\"a\":1.5}"), "model.vocab[\"a\"]", "1.5");
  REFUSES("vocab same id", set(base_json(0), "model", "vocab", "{\"a\":1,\"b\":1}"), "model.vocab",
          "id 1", "\"a\"", "\"b\"");
  REFUSES("vocab bytes", set(base_json(0), "model", "vocab", "{\"a\":0}"), "model.vocab", "byte 0x00");
  REFUSES("no vocab", set(base_json(0), "model", "vocab", "[]"), "model.vocab");
  REFUSES("byte_fallback", set(base_json(0), "model", "byte_fallback", "true"), "model.byte_fallback");
  REFUSES("dropout", set(base_json(0), "model", "dropout", "0.1"), "model.dropout", "0.1");
  REFUSES("prefix", set(base_json(0), "model", "continuing_subword_prefix", "\"##\""),
          "model.continuing_subword_prefix", "##");
  REFUSES("model key", set(base_json(0), "model", "foo", "1"), "model.\"foo\"");
  REFUSES("top key", set(base_json(0), "", "extra", "1"), "\"extra\"");
  REFUSES("normalizer", set(base_json(0), "", "normalizer", "{\"type\":\"NFC\"}"), "normalizer.type",
          "NFC");
  REFUSES("metaspace", set(base_json(0), "", "pre_tokenizer",
          "{\"type\":\"Metaspace\",\"replacement\":\"x\"}"), "pre_tokenizer.type", "Metaspace");
  REFUSES("no pretok", set(base_json(0), "", "pre_tokenizer", "null"), "pre_tokenizer");
  REFUSES("prefix space", set(base_json(0), "", "pre_tokenizer",
          "{\"type\":\"ByteLevel\",\"add_prefix_space\":true}"), "pre_tokenizer.add_prefix_space");
  REFUSES("whitespace", with_sequence("{\"type\":\"Whitespace\"}"), "pre_tokenizer.pretokenizers[0].type",
          "Whitespace");
  REFUSES("removed", with_sequence("{\"type\":\"Split\",\"pattern\":{\"Regex\":\"a\"},\"behavior\":"
          "\"Removed\",\"invert\":false}"), "pretokenizers[0].behavior", "Removed");
  REFUSES("invert", with_sequence("{\"type\":\"Split\",\"pattern\":{\"Regex\":\"a\"},\"behavior\":"
          "\"Isolated\",\"invert\":true}"), "pretokenizers[0].invert");
  REFUSES("bad regex", with_sequence("{\"type\":\"Split\",\"pattern\":{\"Regex\":\"(a\"},\"behavior\":"
          "\"Isolated\"}"), "pretokenizers[0].pattern", "(a", "does not compile");
  REFUSES("\\w", with_sequence("{\"type\":\"Split\",\"pattern\":{\"Regex\":\"\\\\w+\"},\"behavior\":"
          "\"Isolated\"}"), "pretokenizers[0].pattern", "\\w");
  REFUSES("anchor", with_sequence("{\"type\":\"Split\",\"pattern\":{\"Regex\":\"^a\"},\"behavior\":"
          "\"Isolated\"}"), "pretokenizers[0].pattern", "'^'");
  REFUSES("bytelevel first", set(base_json(0), "", "pre_tokenizer", "{\"type\":\"Sequence\","
          "\"pretokenizers\":[{\"type\":\"ByteLevel\",\"add_prefix_space\":false},{\"type\":\"Digits\"}]}"),
          "pretokenizers[0]", "ByteLevel");
  REFUSES("decoder", set(base_json(0), "", "decoder", "{\"type\":\"WordPiece\"}"), "decoder.type",
          "WordPiece");
  REFUSES("no decoder", set(base_json(0), "", "decoder", "null"), "decoder");
  REFUSES("lstrip", set_added(base_json(0), 0, "lstrip", "true"), "added_tokens[0].lstrip");
  REFUSES("added id", set_added(base_json(0), 1, "id", "\"x\""), "added_tokens[1].id");
  REFUSES("added text", set_added(base_json(0), 1, "content", "\"\""), "added_tokens[1].content");
  REFUSES("added clash", set_added(base_json(0), 1, "id", "256"), "added_tokens[1]", "id 256",
          "\"abcd\"", "id 269");
  REFUSES("added vocab id", set_added(base_json(0), 1, "content", "\"he\""), "added_tokens[1]",
          "\"he\" id 269", "id 256", "model.vocab's");
  REFUSES("added twice", set_added(base_json(0), 1, "id", "268"), "added_tokens[1]", "268");
  REFUSES("added gap", set_added(base_json(0), 1, "id", "300"), "added_tokens[1]", "id 300", "id 269");
  REFUSES("added array", set(base_json(0), "", "added_tokens", "{}"), "added_tokens");
}

int main(void) {
  snprintf(tmpdir, sizeof tmpdir, "/tmp/osdp_test_tokenizer_XXXXXX");
  if (!mkdtemp(tmpdir)) return 1;
  Tokenizer* t = load_json("base.json", base_json(0));
  if (t) {
    test_encode(t);
    test_cuts(t);
  }
  tok_free(t);
  test_array_merges();
  test_ignore_merges();
  test_splits();
  test_directory();
  test_refused();
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
  CHECK(system(cmd) == 0);
  return check_summary();
}
