/*
** tok_pretok.c: the pre-tokenizer's steps as PCRE2 regexes, and text split by them into the
** words the BPE merges. A step's matches and the text between them each become a piece
** (`tokenizers`' Split with behavior "Isolated"); the next step splits each piece again, and
** the pieces of the last step are the words. Patterns come in Oniguruma's syntax (what
** `tokenizers` compiles); the few escapes whose meaning differs are rewritten or refused here.
*/
#ifdef OSDP_HAVE_PCRE2
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"
#include "tokenizer/tok_internal.h"

/* GPT-2's split (tokenizers' ByteLevel with use_regex, tiktoken's "gpt2"). */
const char* const tok_gpt2_pattern =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

/* Llama 3's split, and Qwen2's (digits one by one instead of up to three). */
static const char* const tok_llama3_pattern =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+"
    "[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char* const tok_qwen2_pattern =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+"
    "[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

/* What tok_safe_cut knows of pattern: 2 a word split its cuts hold for (GPT-2's, Llama 3's,
** Qwen2's: none matches across "\n" between printable ASCII, nor across a letter and a space
** before a letter), 1 Digits' (splits only at digits), 0 anything else. */
static int tok_pattern_cut(const char* pattern) {
  if (strcmp(pattern, tok_gpt2_pattern) == 0 || strcmp(pattern, tok_llama3_pattern) == 0 ||
      strcmp(pattern, tok_qwen2_pattern) == 0)
    return 2;
  return strcmp(pattern, "\\p{N}") == 0 || strcmp(pattern, "\\p{N}+") == 0;
}

int tok_steps_cut_known(const Tokenizer* t) {
  int words = 0;
  for (int i = 0; i < t->nsteps; i++) {
    if (t->step[i].cut == 0) return 0;
    words |= t->step[i].cut == 2;
  }
  return words;
}

/* Appends n bytes of s to the growing pattern out (cap bytes); -1 when it would not fit. */
static int tok_put(char* out, size_t cap, size_t* k, const char* s, size_t n) {
  if (*k + n >= cap) return -1;
  memcpy(out + *k, s, n);
  *k += n;
  return 0;
}

/* Rewrites Oniguruma pattern in into PCRE2's syntax in out (cap bytes): \s and \S become the
** White_Space property (Oniguruma's \s has U+0085, PCRE2's does not), \uHHHH becomes \x{HHHH};
** \w \W \b \B \h \H (other classes in PCRE2), unescaped ^ and $ (line anchors in Oniguruma)
** and nested classes are refused. -1 with an error naming what. */
static int tok_translate(const char* in, char* out, size_t cap, const char* what) {
  size_t k = 0;
  int in_class = 0, rc = 0;
  for (const char* p = in; *p && rc == 0; p++) {
    if (*p == '\\' && p[1]) {
      char c = *++p;
      if (c == 's') rc = tok_put(out, cap, &k, "\\p{White_Space}", 15);
      else if (c == 'S') rc = tok_put(out, cap, &k, "\\P{White_Space}", 15);
      else if (strchr("wWbBhH", c))
        return osdp_fail("%s: \\%c in %.80s means another class in PCRE2 than in Oniguruma; osdp "
                         "does not support it", what, c, in);
      else if (c == 'u' && strspn(p + 1, "0123456789abcdefABCDEF") >= 4) {
        char x[16];
        snprintf(x, sizeof x, "\\x{%.4s}", p + 1);
        rc = tok_put(out, cap, &k, x, strlen(x));
        p += 4;
      } else {
        char two[2] = {'\\', c};
        rc = tok_put(out, cap, &k, two, 2);
      }
      continue;
    }
    if (!in_class && (*p == '^' || *p == '$'))
      return osdp_fail("%s: anchor '%c' in %.80s matches at every line in Oniguruma; osdp does not "
                       "support it", what, *p, in);
    if (in_class && *p == '[' && p[1] != ':')
      return osdp_fail("%s: a nested class in %.80s; osdp does not support it", what, in);
    if (!in_class && *p == '[') {
      in_class = 1;
      rc = tok_put(out, cap, &k, p, 1);
      if (p[1] == '^') rc = rc ? rc : tok_put(out, cap, &k, ++p, 1);
      if (p[1] == ']') rc = rc ? rc : tok_put(out, cap, &k, ++p, 1); /* a literal ']' first */
      continue;
    }
    if (in_class && *p == '[') { /* [:name:] */
      const char* e = strstr(p, ":]");
      if (!e) return osdp_fail("%s: an unclosed [: in %.80s", what, in);
      rc = tok_put(out, cap, &k, p, (size_t)(e + 2 - p));
      p = e + 1;
      continue;
    }
    if (in_class && *p == ']') in_class = 0;
    rc = tok_put(out, cap, &k, p, 1);
  }
  if (rc) return osdp_fail("%s: pattern longer than %zu bytes", what, cap / 2);
  out[k] = 0;
  return 0;
}

#ifdef OSDP_HAVE_PCRE2
int tok_step_add(Tokenizer* t, const char* pattern, int literal, const char* what) {
  if (t->nsteps >= TOK_MAX_STEPS)
    return osdp_fail("%s: %s: more than %d pre-tokenizer steps", t->path, what, TOK_MAX_STEPS);
  size_t cap = 2 * strlen(pattern) + 64;
  char* pcre = malloc(cap);
  char field[600];
  snprintf(field, sizeof field, "%s: %s", t->path, what);
  if (!pcre) return osdp_fail("%s: out of memory", field);
  int rc = 0;
  if (literal) snprintf(pcre, cap, "%s", pattern); /* String patterns: PCRE2_LITERAL below */
  else rc = tok_translate(pattern, pcre, cap, field);
  int err = 0;
  PCRE2_SIZE at = 0;
  pcre2_code* code = rc ? NULL
                        : pcre2_compile((PCRE2_SPTR)pcre, PCRE2_ZERO_TERMINATED,
                                        PCRE2_UTF | (literal ? PCRE2_LITERAL : PCRE2_UCP), &err,
                                        &at, NULL);
  free(pcre);
  if (rc) return -1;
  if (!code) {
    PCRE2_UCHAR msg[200];
    pcre2_get_error_message(err, msg, sizeof msg);
    return osdp_fail("%s: regex %.80s does not compile (PCRE2: %s at offset %zu)", field, pattern,
                     (const char*)msg, (size_t)at);
  }
  TokStep* s = &t->step[t->nsteps];
  memset(s, 0, sizeof *s);
  s->code = code;
  s->jit = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
  s->match = pcre2_match_data_create_from_pattern(code, NULL);
  s->cut = literal ? 0 : tok_pattern_cut(pattern);
  snprintf(s->what, sizeof s->what, "%s", what);
  t->nsteps++;
  if (!s->match) return osdp_fail("%s: out of memory", field);
  return 0;
}

void tok_steps_free(Tokenizer* t) {
  for (int i = 0; i < t->nsteps; i++) {
    pcre2_match_data_free(t->step[i].match);
    pcre2_code_free(t->step[i].code);
  }
  t->nsteps = 0;
}

/* The next match of step s in text[0..n) from offset `from`: 1 with its range in [*ms, *me),
** 0 when there is none, -1 with an error when the matcher fails (a resource limit). */
static int tok_next_match(const Tokenizer* t, const TokStep* s, const char* text, size_t n,
                          size_t from, size_t* ms, size_t* me) {
  pcre2_match_data* md = s->match;
  int rc = s->jit ? pcre2_jit_match(s->code, (PCRE2_SPTR)text, n, from, 0, md, NULL)
                  : pcre2_match(s->code, (PCRE2_SPTR)text, n, from, PCRE2_NO_UTF_CHECK, md, NULL);
  if (rc == PCRE2_ERROR_NOMATCH) return 0;
  if (rc < 0) {
    PCRE2_UCHAR msg[200];
    pcre2_get_error_message(rc, msg, sizeof msg);
    return osdp_fail("%s: %s: matching failed at byte %zu of a %zu-byte piece (PCRE2: %s)", t->path,
                     s->what, from, n, (const char*)msg);
  }
  const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
  *ms = ov[0];
  *me = ov[1];
  return 1;
}

#else /* built without PCRE2 (CMake found no libpcre2-8): no regex steps */

int tok_step_add(Tokenizer* t, const char* pattern, int literal, const char* what) {
  (void)pattern, (void)literal;
  return osdp_fail("%s: %s: the pre-tokenizer's regexes need PCRE2, and this osdp was built "
                   "without it; install libpcre2-dev (scripts/deps.sh) and rebuild", t->path, what);
}

void tok_steps_free(Tokenizer* t) { t->nsteps = 0; }

/* Never called: a tokenizer has no steps without PCRE2. */
static int tok_next_match(const Tokenizer* t, const TokStep* s, const char* text, size_t n,
                          size_t from, size_t* ms, size_t* me) {
  (void)s, (void)text, (void)n, (void)from, (void)ms, (void)me;
  return osdp_fail("%s: no regex matcher in this build", t->path);
}
#endif

/* Splits text[0..n) by step k (or merges it as a word past the last step) into out. */
static int tok_split(Tokenizer* t, int k, const char* text, size_t n, TokIds* out) {
  if (n == 0) return 0;
  if (k == t->nsteps) return tok_bpe_word(t, (const unsigned char*)text, n, out);
  size_t from = 0, last = 0, ms = 0, me = 0;
  int rc = 0;
  while (from < n && (rc = tok_next_match(t, &t->step[k], text, n, from, &ms, &me)) == 1) {
    if (me == ms) { /* an empty match splits nothing: go on after the next character */
      from = ms + 1;
      while (from < n && ((unsigned char)text[from] & 0xC0) == 0x80) from++;
      continue;
    }
    if (tok_split(t, k + 1, text + last, ms - last, out) ||
        tok_split(t, k + 1, text + ms, me - ms, out))
      return -1;
    last = from = me;
  }
  if (from < n && rc < 0) return -1;
  return tok_split(t, k + 1, text + last, n - last, out);
}

int tok_pretok_encode(Tokenizer* t, int first, const char* text, size_t n, TokIds* out) {
  return tok_split(t, first, text, n, out);
}
