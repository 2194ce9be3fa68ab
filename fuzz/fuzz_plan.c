/*
** fuzz_plan.c: fuzzes plan JSON files (plan_load, model/plan.h) for the fixed model "tiny".
** A plan that loads is validated for its own world size, its memory is predicted when valid
** (what `osdp train --plan FILE` does next), and it must survive a round trip through
** plan_to_json and plan_load unchanged.
*/
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "fuzz_util.h"
#include "model/gpt.h"
#include "model/plan.h"

/* Aborts unless plans a and b say the same thing (what plan_to_json writes and plan_load reads). */
static void plan_expect_equal(const Plan* a, const Plan* b) {
  if (a->world != b->world || a->micro_batch != b->micro_batch || a->seq != b->seq ||
      a->prefetch != b->prefetch || a->nops != b->nops || a->nlayers != b->nlayers)
    fuzz_die("plan round trip", "world, micro_batch, seq_len, prefetch or sizes changed");
  for (int i = 0; i < a->nops; i++) {
    if (a->ops[i].k != b->ops[i].k) fuzz_die("plan round trip", "a slice count changed");
    for (int s = 0; s < a->ops[i].k; s++)
      if (a->ops[i].strat[s] != b->ops[i].strat[s]) fuzz_die("plan round trip", "a strategy changed");
  }
  for (int l = 0; l < a->nlayers; l++)
    if (!a->recompute[l] != !b->recompute[l]) fuzz_die("plan round trip", "recompute changed");
}

/* libFuzzer's entry point: one plan file per call. */
int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const char *path, *again;
  const GptDesc* tiny = fuzz_tiny_model();
  if (!path) {
    path = fuzz_temp_path(NULL, "plan.json", 0);
    again = fuzz_temp_path(NULL, "plan-again.json", 0);
  }
  fuzz_write_file(path, data, size);
  osdp_clear_error();
  Plan p;
  if (plan_load(&p, tiny, path)) {
    fuzz_expect_message("plan_load");
    return 0;
  }
  if (plan_validate(&p, tiny, p.world) == 0) {
    MemPrediction m;
    plan_predict_memory(tiny, &p, 1, &m);
  } else {
    fuzz_expect_message("plan_validate");
  }
  char* text = plan_to_json(&p, tiny);
  if (!text) fuzz_die("plan_to_json", "returned NULL");
  fuzz_write_file(again, text, strlen(text));
  free(text);
  Plan q;
  if (plan_load(&q, tiny, again)) fuzz_die("plan_load refused plan_to_json's output", osdp_last_error());
  plan_expect_equal(&p, &q);
  plan_free(&q);
  plan_free(&p);
  return 0;
}
