/*
** fuzz_json.c: fuzzes the one-meaning rule every JSON reader applies (json_check_one_meaning in
** core/util.h: nothing but whitespace after the document, no key twice in one object). The input
** is the text; its verdict is checked against a plain reference: a pairwise walk of every object
** for a repeated key (the rule sorts objects of more than 16 keys), and a scan of what follows
** the document. A document that passes must pass again when printed and read back.
*/
#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_util.h"

/* Whether o, or an object or array inside it, has an object naming a key twice (pairwise). */
static int has_repeat(const cJSON* o) {
  for (const cJSON* a = o ? o->child : NULL; a; a = a->next) {
    if (has_repeat(a)) return 1;
    for (const cJSON* b = a->next; cJSON_IsObject(o) && b; b = b->next)
      if (a->string && b->string && strcmp(a->string, b->string) == 0) return 1;
  }
  return 0;
}

/* Whether only whitespace (JSON's four characters) follows end. */
static int only_space(const char* end) {
  while (*end == ' ' || *end == '\t' || *end == '\n' || *end == '\r') end++;
  return *end == 0;
}

/* libFuzzer's entry point: one JSON text per call. */
int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  char* text = malloc(size + 1);
  if (!text) fuzz_die("malloc", "out of memory");
  memcpy(text, data, size);
  text[size] = 0;
  const char* end = NULL;
  cJSON* root = cJSON_ParseWithOpts(text, &end, 0);
  if (root) {
    osdp_clear_error();
    int bad = json_check_one_meaning(root, text, end, "fuzz") != 0;
    int want = !only_space(end) || has_repeat(root);
    if (bad != want) fuzz_die("json_check_one_meaning", bad ? "refused a document of one meaning" : "passed a document of two meanings");
    if (bad) fuzz_expect_message("json_check_one_meaning");
    char* again = bad ? NULL : cJSON_PrintUnformatted(root);
    cJSON* back = again ? cJSON_ParseWithOpts(again, &end, 0) : NULL;
    if (again && (!back || json_check_one_meaning(back, again, end, "fuzz reprint")))
      fuzz_die("json_check_one_meaning", "refused its own document printed back");
    cJSON_Delete(back);
    free(again);
  }
  cJSON_Delete(root);
  free(text);
  osdp_clear_error();
  return 0;
}
