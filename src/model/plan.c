/* plan.c: plans (uniform, JSON load/save, validation) and exact memory prediction; see plan.h. */
#include "model/plan.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"
#include "model/gpt_step.h"
#include "model/step_walk.h"

static const char* keep_names[KEEP_ALL + 1] = {"none", "grad", "weight", "grad+weight"};

const char* keep_name(int keep) { return keep >= 0 && keep <= KEEP_ALL ? keep_names[keep] : "?"; }

int keep_parse(const char* s) {
  for (int i = 0; i <= KEEP_ALL; i++) if (strcmp(s, keep_names[i]) == 0) return i;
  return -1;
}

int op_keep_allowed(const OpPlan* o) {
  int keep = 0;
  for (int s = 0; s < o->k; s++) {
    if (o->strat[s] != STRAT_DP) keep |= KEEP_GRAD;
    if (o->strat[s] == STRAT_ZERO3) keep |= KEEP_WEIGHT;
  }
  return keep;
}

void plan_set_keep(Plan* p, int keep) {
  for (int i = 0; i < p->nops; i++) p->ops[i].keep = keep & op_keep_allowed(&p->ops[i]);
}

int plan_keeps_grad(const Plan* p, int op, int s) {
  return (p->ops[op].keep & KEEP_GRAD) && p->ops[op].strat[s] != STRAT_DP;
}

int plan_keeps_weight(const Plan* p, int op, int s) {
  return (p->ops[op].keep & KEEP_WEIGHT) && p->ops[op].strat[s] == STRAT_ZERO3;
}

int plan_keep_ops(const Plan* p, int bits) {
  int n = 0;
  for (int i = 0; i < p->nops; i++) n += (p->ops[i].keep & bits) != 0;
  return n;
}

static const char* strategy_names[STRAT_COUNT] = {"dp", "zero2", "zero3"};

const char* strategy_name(Strategy s) { return (s >= 0 && s < STRAT_COUNT) ? strategy_names[s] : "?"; }

int strategy_parse(const char* s) {
  for (int i = 0; i < STRAT_COUNT; i++) if (strcmp(s, strategy_names[i]) == 0) return i;
  return -1;
}

static const char* reduce_dtype_names[2] = {"fp32", "bf16"};

const char* reduce_dtype_name(ReduceDtype t) { return t == REDUCE_BF16 ? "bf16" : "fp32"; }

int reduce_dtype_parse(const char* s) {
  for (int i = 0; i < 2; i++) if (strcmp(s, reduce_dtype_names[i]) == 0) return i;
  return -1;
}

int plan_accum(const Plan* p) { return p->accum > 1 ? p->accum : 1; }

long plan_global_batch(const Plan* p) {
  return (long)p->world * p->micro_batch * plan_accum(p);
}

int plan_op_group(const Plan* p, int op) {
  int g = p->ops[op].group;
  return g > 0 ? g : p->world;
}

void plan_set_group(Plan* p, int G) {
  for (int i = 0; i < p->nops; i++) p->ops[i].group = G == p->world ? 0 : G;
}

int plan_uniform(Plan* p, const GptDesc* d, Strategy s, int world, int B, int T) {
  memset(p, 0, sizeof *p);
  p->ops = calloc((size_t)d->nops, sizeof *p->ops);
  if (!p->ops) return osdp_fail("out of memory");
  p->nops = d->nops;
  p->nlayers = d->cfg.n_layer;
  p->recompute = calloc((size_t)p->nlayers, sizeof *p->recompute);
  if (!p->recompute) { plan_free(p); return osdp_fail("out of memory"); }
  p->world = world; p->micro_batch = B; p->seq = T; p->accum = 1;
  for (int i = 0; i < d->nops; i++) {
    p->ops[i].k = 1;
    p->ops[i].strat[0] = d->ops[i].n_params ? s : STRAT_DP;
  }
  return 0;
}

void plan_free(Plan* p) {
  free(p->ops);
  free(p->recompute);
  memset(p, 0, sizeof *p);
}

int plan_copy(Plan* dst, const Plan* src) {
  *dst = *src;
  dst->ops = malloc((size_t)src->nops * sizeof *src->ops);
  dst->recompute = malloc((size_t)(src->nlayers ? src->nlayers : 1) * sizeof *src->recompute);
  if (!dst->ops || !dst->recompute) {
    free(dst->ops);
    free(dst->recompute);
    memset(dst, 0, sizeof *dst);
    return osdp_fail("out of memory");
  }
  memcpy(dst->ops, src->ops, (size_t)src->nops * sizeof *src->ops);
  memcpy(dst->recompute, src->recompute, (size_t)src->nlayers * sizeof *src->recompute);
  return 0;
}

void plan_slice_counts(const Plan* p, int* slices) {
  for (int i = 0; i < p->nops; i++) slices[i] = p->ops[i].k;
}

void plan_set_recompute(Plan* p, int n) {
  for (int l = 0; l < p->nlayers; l++) p->recompute[l] = l < n;
}

int plan_recompute_count(const Plan* p) {
  int n = 0;
  for (int l = 0; l < p->nlayers; l++) n += p->recompute[l] != 0;
  return n;
}

int plan_same_layer(const GptDesc* d, const Plan* p, int a, int b) {
  if ((p->recompute[a] != 0) != (p->recompute[b] != 0)) return 0;
  for (int j = 0; j < d->ops_per_layer; j++) {
    const OpPlan* x = &p->ops[gpt_layer_op(d, a, j)];
    const OpPlan* y = &p->ops[gpt_layer_op(d, b, j)];
    if (x->k != y->k || x->group != y->group || x->keep != y->keep ||
        memcmp(x->strat, y->strat, (size_t)x->k * sizeof x->strat[0]) != 0)
      return 0;
  }
  return 1;
}

int plan_layer_groups(const GptDesc* d, const Plan* p) {
  int groups = 0;
  for (int l = 0; l < d->cfg.n_layer; l++) {
    int seen = 0;
    for (int m = 0; m < l && !seen; m++) seen = plan_same_layer(d, p, m, l);
    groups += !seen;
  }
  return groups;
}

int plan_strategy_kinds(const GptDesc* d, const Plan* p) {
  int used[STRAT_COUNT] = {0}, kinds = 0;
  for (int i = 0; i < d->nops; i++)
    for (int s = 0; d->ops[i].n_params && s < p->ops[i].k; s++) used[p->ops[i].strat[s]] = 1;
  for (int s = 0; s < STRAT_COUNT; s++) kinds += used[s];
  return kinds;
}

int plan_validate(const Plan* p, const GptDesc* d, int world) {
  if (p->nops != d->nops) return osdp_fail("plan: has %d operators, model has %d", p->nops, d->nops);
  if (p->nlayers != d->cfg.n_layer)
    return osdp_fail("plan: has %d layers, model has %d", p->nlayers, d->cfg.n_layer);
  if (p->world != world)
    return osdp_fail("plan: world_size=%d but running on %d ranks; launch with mpirun -np %d or "
                     "make a plan for %d ranks", p->world, world, p->world, world);
  if (p->micro_batch < 1) return osdp_fail("plan: micro_batch=%d must be >= 1", p->micro_batch);
  if (p->accum < 0) return osdp_fail("plan: grad_accum=%d must be >= 1", p->accum);
  if (p->seq < 1 || p->seq > d->cfg.max_seq)
    return osdp_fail("plan: seq_len=%d must be in [1, %d] (the model's max_seq)", p->seq,
                     d->cfg.max_seq);
  for (int i = 0; i < d->nops; i++) {
    const GptOp* op = &d->ops[i];
    const OpPlan* o = &p->ops[i];
    int kmax = op->splittable ? (int)(op->rows < GPT_MAX_SLICES ? op->rows : GPT_MAX_SLICES) : 1;
    if (o->k < 1 || o->k > kmax)
      return osdp_fail("plan: operator %s has %d slices; it allows 1..%d", op->name, o->k, kmax);
    for (int s = 0; s < o->k; s++)
      if (o->strat[s] < 0 || o->strat[s] >= STRAT_COUNT)
        return osdp_fail("plan: operator %s slice %d has an unknown strategy", op->name, s);
    if (o->group < 0 || o->group > p->world || (o->group && p->world % o->group))
      return osdp_fail("plan: operator %s has shard_group=%d; it must divide world_size=%d "
                       "(e.g. the ranks per host)", op->name, o->group, p->world);
    if (o->keep < 0 || (o->keep & ~op_keep_allowed(o)))
      return osdp_fail("plan: operator %s has keep_whole \"%s\" but no %s slice to keep it for; "
                       "\"grad\" needs a zero2 or zero3 slice, \"weight\" a zero3 slice",
                       op->name, keep_name(o->keep & KEEP_ALL),
                       (o->keep & ~op_keep_allowed(o) & KEEP_WEIGHT) ? "zero3" : "sharded");
  }
  if (p->reduce_dtype != REDUCE_FP32 && p->reduce_dtype != REDUCE_BF16)
    return osdp_fail("plan: reduce_dtype must be fp32 or bf16");
  if (p->precision != PRECISION_FP32 && p->precision != PRECISION_BF16)
    return osdp_fail("plan: precision must be fp32 or bf16");
  return 0;
}

/* Reads an integer member of a JSON object (a plan field); values outside int's range are
** refused before the cast, which would be undefined for them. */
static int plan_json_int(const cJSON* o, const char* path, const char* key, int* out) {
  const cJSON* v = cJSON_GetObjectItemCaseSensitive(o, key);
  if (!v || !cJSON_IsNumber(v) || !(v->valuedouble >= -2147483648.0 && v->valuedouble <= 2147483647.0) ||
      v->valuedouble != (double)(int)v->valuedouble)
    return osdp_fail("%s: field \"%s\" must be an integer", path, key);
  *out = (int)v->valuedouble;
  return 0;
}

/* Checks that the plan's "model" object describes model d. */
static int plan_check_model(const cJSON* m, const GptDesc* d, const char* path) {
  return gpt_config_matches_json(m, &d->cfg, path, "plan");
}

/* Whether two entries of array a (objects) give the same value for key (a string or a number):
** 0, or -1 with an error naming the array, the key and the value (a plan lists each operator and
** each layer once; with two entries one would silently win). */
static int plan_check_unique(const cJSON* a, const char* key, const char* path, const char* array) {
  const cJSON *x, *y;
  cJSON_ArrayForEach(x, a) {
    const cJSON* vx = cJSON_GetObjectItemCaseSensitive(x, key);
    for (y = a->child; vx && y != x; y = y->next) {
      const cJSON* vy = cJSON_GetObjectItemCaseSensitive(y, key);
      if (!vy) continue;
      if (cJSON_IsString(vx) && cJSON_IsString(vy) && strcmp(vx->valuestring, vy->valuestring) == 0)
        return osdp_fail("%s: \"%s\" lists %s \"%s\" twice; give each one entry", path, array, key,
                         vx->valuestring);
      if (cJSON_IsNumber(vx) && cJSON_IsNumber(vy) && vx->valuedouble == vy->valuedouble)
        return osdp_fail("%s: \"%s\" lists %s %g twice; give each one entry", path, array, key,
                         vx->valuedouble);
    }
  }
  return 0;
}

/* Reads the "ops" array into p->ops. */
static int plan_read_ops(Plan* p, const GptDesc* d, const cJSON* ops, const char* path) {
  if (!cJSON_IsArray(ops)) return osdp_fail("%s: missing array \"ops\"", path);
  if (plan_check_unique(ops, "name", path, "ops")) return -1;
  const cJSON* o;
  cJSON_ArrayForEach(o, ops) {
    const cJSON* name = cJSON_GetObjectItemCaseSensitive(o, "name");
    const cJSON* sl = cJSON_GetObjectItemCaseSensitive(o, "slices");
    if (!cJSON_IsString(name)) return osdp_fail("%s: an entry of \"ops\" has no \"name\"", path);
    int idx = -1;
    for (int i = 0; i < d->nops; i++) if (strcmp(d->ops[i].name, name->valuestring) == 0) idx = i;
    if (idx < 0)
      return osdp_fail("%s: operator \"%s\" does not exist in model %s (see osdp describe)", path,
                       name->valuestring, d->cfg.name);
    if (!d->ops[idx].n_params)
      return osdp_fail("%s: operator \"%s\" has no parameters to place", path, name->valuestring);
    int k = cJSON_IsArray(sl) ? cJSON_GetArraySize(sl) : 0;
    if (k < 1 || k > GPT_MAX_SLICES)
      return osdp_fail("%s: operator \"%s\": \"slices\" must list 1..%d strategies", path,
                       name->valuestring, GPT_MAX_SLICES);
    p->ops[idx].k = k;
    for (int s = 0; s < k; s++) {
      const cJSON* st = cJSON_GetArrayItem(sl, s);
      int v = cJSON_IsString(st) ? strategy_parse(st->valuestring) : -1;
      if (v < 0)
        return osdp_fail("%s: operator \"%s\" slice %d: strategy must be \"dp\", \"zero2\" or "
                         "\"zero3\"", path, name->valuestring, s);
      p->ops[idx].strat[s] = (Strategy)v;
    }
    const cJSON* g = cJSON_GetObjectItemCaseSensitive(o, "shard_group");
    if (g && (!cJSON_IsNumber(g) || g->valuedouble != (double)(int)g->valuedouble ||
              g->valuedouble < 1 || g->valuedouble > p->world || p->world % (int)g->valuedouble))
      return osdp_fail("%s: operator \"%s\": \"shard_group\" must be a whole number that divides "
                       "world_size=%d (the ranks a slice is sharded over; absent: all of them)", path,
                       name->valuestring, p->world);
    p->ops[idx].group = g && (int)g->valuedouble != p->world ? (int)g->valuedouble : 0;
    const cJSON* kp = cJSON_GetObjectItemCaseSensitive(o, "keep_whole");
    int keep = !kp ? 0 : cJSON_IsString(kp) ? keep_parse(kp->valuestring) : -1;
    if (keep < 0)
      return osdp_fail("%s: operator \"%s\": \"keep_whole\" must be \"none\", \"grad\", \"weight\" or "
                       "\"grad+weight\" (what its sharded slices keep whole across micro-steps)",
                       path, name->valuestring);
    p->ops[idx].keep = keep;
  }
  return 0;
}

/* Reads the optional "layers" array (which layers recompute) into p->recompute. */
static int plan_read_layers(Plan* p, const GptDesc* d, const cJSON* layers, const char* path) {
  if (!layers) return 0;
  if (!cJSON_IsArray(layers))
    return osdp_fail("%s: \"layers\" must be an array of {\"layer\": L, \"recompute\": true}", path);
  if (plan_check_unique(layers, "layer", path, "layers")) return -1;
  const cJSON* o;
  cJSON_ArrayForEach(o, layers) {
    int l = -1;
    if (!cJSON_IsObject(o) || plan_json_int(o, path, "layer", &l)) {
      osdp_clear_error();
      return osdp_fail("%s: an entry of \"layers\" has no integer \"layer\"", path);
    }
    if (l < 0 || l >= d->cfg.n_layer)
      return osdp_fail("%s: layers: layer=%d does not exist; model %s has layers 0..%d", path, l,
                       d->cfg.name, d->cfg.n_layer - 1);
    const cJSON* r = cJSON_GetObjectItemCaseSensitive(o, "recompute");
    if (r && !cJSON_IsBool(r))
      return osdp_fail("%s: layers: layer %d: \"recompute\" must be true or false", path, l);
    p->recompute[l] = cJSON_IsTrue(r);
  }
  return 0;
}

int plan_load(Plan* p, const GptDesc* d, const char* path) {
  memset(p, 0, sizeof *p);
  cJSON* root = read_json_object(path, "--plan", "a plan is an object with model, world_size, "
                                 "micro_batch, seq_len and ops (see osdp plan --out)");
  if (!root) return -1;
  int world = 0, B = 0, T = 0;
  int rc = plan_check_model(cJSON_GetObjectItemCaseSensitive(root, "model"), d, path);
  if (!rc) rc = plan_json_int(root, path, "world_size", &world);
  if (!rc) rc = plan_json_int(root, path, "micro_batch", &B);
  if (!rc) rc = plan_json_int(root, path, "seq_len", &T);
  if (!rc && world < 1) rc = osdp_fail("%s: world_size=%d must be >= 1", path, world);
  if (!rc && B > PLAN_MAX_MICRO_BATCH)
    rc = osdp_fail("%s: field \"micro_batch\"=%d must be from 1 to %d (sequences per rank in one "
                   "micro-step; more sequences per step: \"grad_accum\")", path, B, PLAN_MAX_MICRO_BATCH);
  if (!rc) rc = plan_uniform(p, d, STRAT_DP, world, B, T);
  const cJSON* pf = cJSON_GetObjectItemCaseSensitive(root, "prefetch");
  if (!rc && pf && !cJSON_IsBool(pf)) rc = osdp_fail("%s: field \"prefetch\" must be true or false", path);
  if (!rc) p->prefetch = cJSON_IsTrue(pf);
  const cJSON* ov = cJSON_GetObjectItemCaseSensitive(root, "overlap_reduce");
  if (!rc && ov && !cJSON_IsBool(ov))
    rc = osdp_fail("%s: field \"overlap_reduce\" must be true or false", path);
  if (!rc) p->overlap_reduce = cJSON_IsTrue(ov);
  const cJSON* rd = cJSON_GetObjectItemCaseSensitive(root, "reduce_dtype");
  int rdt = !rd ? REDUCE_FP32 : cJSON_IsString(rd) ? reduce_dtype_parse(rd->valuestring) : -1;
  if (!rc && rdt < 0) rc = osdp_fail("%s: field \"reduce_dtype\" must be \"fp32\" or \"bf16\"", path);
  if (!rc) p->reduce_dtype = (ReduceDtype)rdt;
  const cJSON* pr = cJSON_GetObjectItemCaseSensitive(root, "precision");
  int prec = !pr ? PRECISION_FP32 : cJSON_IsString(pr) ? precision_parse(pr->valuestring) : -1;
  if (!rc && prec != PRECISION_FP32 && prec != PRECISION_BF16)
    rc = osdp_fail("%s: field \"precision\" must be \"fp32\" or \"bf16\"", path);
  if (!rc) p->precision = (Precision)prec;
  if (!rc && cJSON_GetObjectItemCaseSensitive(root, "grad_accum")) {
    rc = plan_json_int(root, path, "grad_accum", &p->accum);
    if (!rc && (p->accum < 1 || p->accum > PLAN_MAX_ACCUM))
      rc = osdp_fail("%s: field \"grad_accum\"=%d must be from 1 to %d (micro-steps per optimizer "
                     "step; absent: 1)", path, p->accum, PLAN_MAX_ACCUM);
  }
  if (!rc && cJSON_GetObjectItemCaseSensitive(root, "head_rows")) {
    rc = plan_json_int(root, path, "head_rows", &p->head_rows);
    if (!rc && p->head_rows < 1)
      rc = osdp_fail("%s: field \"head_rows\"=%d must be >= 1 (or absent: the default)", path,
                     p->head_rows);
  }
  if (!rc) rc = plan_read_ops(p, d, cJSON_GetObjectItemCaseSensitive(root, "ops"), path);
  if (!rc) rc = plan_read_layers(p, d, cJSON_GetObjectItemCaseSensitive(root, "layers"), path);
  cJSON_Delete(root);
  if (rc) plan_free(p);
  return rc;
}

char* plan_to_json(const Plan* p, const GptDesc* d) {
  cJSON* root = cJSON_CreateObject();
  cJSON* m = cJSON_AddObjectToObject(root, "model");
  gpt_config_to_json(&d->cfg, m);
  cJSON_AddNumberToObject(root, "world_size", p->world);
  cJSON_AddNumberToObject(root, "micro_batch", p->micro_batch);
  cJSON_AddNumberToObject(root, "seq_len", p->seq);
  cJSON_AddBoolToObject(root, "prefetch", p->prefetch);
  cJSON_AddBoolToObject(root, "overlap_reduce", p->overlap_reduce);
  cJSON_AddStringToObject(root, "reduce_dtype", reduce_dtype_name(p->reduce_dtype));
  if (p->head_rows > 0) cJSON_AddNumberToObject(root, "head_rows", p->head_rows);
  if (plan_accum(p) > 1) cJSON_AddNumberToObject(root, "grad_accum", plan_accum(p));
  if (p->precision != PRECISION_FP32)
    cJSON_AddStringToObject(root, "precision", precision_name(p->precision));
  cJSON* ops = cJSON_AddArrayToObject(root, "ops");
  for (int i = 0; i < d->nops; i++) {
    if (!d->ops[i].n_params) continue;
    cJSON* o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "name", d->ops[i].name);
    cJSON* sl = cJSON_AddArrayToObject(o, "slices");
    for (int s = 0; s < p->ops[i].k; s++)
      cJSON_AddItemToArray(sl, cJSON_CreateString(strategy_name(p->ops[i].strat[s])));
    if (p->ops[i].group) cJSON_AddNumberToObject(o, "shard_group", p->ops[i].group);
    if (p->ops[i].keep) cJSON_AddStringToObject(o, "keep_whole", keep_name(p->ops[i].keep));
    cJSON_AddItemToArray(ops, o);
  }
  if (plan_recompute_count(p)) {
    cJSON* layers = cJSON_AddArrayToObject(root, "layers");
    for (int l = 0; l < p->nlayers; l++) {
      if (!p->recompute[l]) continue;
      cJSON* o = cJSON_CreateObject();
      cJSON_AddNumberToObject(o, "layer", l);
      cJSON_AddBoolToObject(o, "recompute", 1);
      cJSON_AddItemToArray(layers, o);
    }
  }
  char* s = cJSON_Print(root);
  cJSON_Delete(root);
  return s;
}

int plan_save(const Plan* p, const GptDesc* d, const char* path, const char* field) {
  char* s = plan_to_json(p, d);
  size_t n = s ? strlen(s) : 0;
  char* text = s ? realloc(s, n + 2) : NULL;
  if (!text) { free(s); return osdp_fail("%s: out of memory writing '%s'", field, path); }
  memcpy(text + n, "\n", 2);
  int rc = write_file_atomic(path, text, field);
  free(text);
  return rc;
}

size_t slice_padded(size_t n, Strategy s, int group, Precision prec) {
  if (s == STRAT_DP) return n;
  size_t unit = (size_t)group * (s == STRAT_ZERO3 && prec == PRECISION_BF16 ? 2 : 1);
  return (n + unit - 1) / unit * unit;
}

size_t slice_shard(size_t n, Strategy s, int group, Precision prec) {
  return s == STRAT_DP ? n : slice_padded(n, s, group, prec) / (size_t)group;
}

void slice_persistent_bytes(size_t n, Strategy s, int group, Precision prec, size_t* params,
                            size_t* grads, size_t* optim) {
  size_t f = sizeof(float), sh = slice_shard(n, s, group, prec);
  *params = f * (s == STRAT_ZERO3 ? sh : slice_padded(n, s, group, prec));
  if (prec == PRECISION_BF16) /* the compute copy: of the shard (zero3) or the whole slice */
    *params += precision_elems(prec).wt * (s == STRAT_ZERO3 ? sh : n);
  *grads = f * sh;
  *optim = 2 * f * sh;
}

void slice_kept_bytes(size_t n, Strategy s, int group, Precision prec, int keep, size_t* params,
                      size_t* grads) {
  size_t full = slice_padded(n, s, group, prec);
  *params = (keep & KEEP_WEIGHT) && s == STRAT_ZERO3 ? precision_elems(prec).wt * full : 0;
  *grads = (keep & KEEP_GRAD) && s != STRAT_DP ? sizeof(float) * full : 0;
}

size_t slice_transient_forward(size_t n, Strategy s, int group, Precision prec, int keep) {
  if (s != STRAT_ZERO3 || (keep & KEEP_WEIGHT)) return 0;
  return precision_elems(prec).wt * slice_padded(n, s, group, prec);
}

size_t slice_transient_backward(size_t n, Strategy s, int group, Precision prec,
                                int needs_weight, int keep) {
  if (s == STRAT_DP) return 0;
  size_t gradient = keep & KEEP_GRAD ? 0 : sizeof(float) * slice_padded(n, s, group, prec);
  return gradient + (needs_weight ? slice_transient_forward(n, s, group, prec, keep) : 0);
}

/* Bytes of a slice's full (padded) transient buffers: its gathered weight (weight = 1; the
** compute copy's elements) or its full gradient (weight = 0; fp32). */
static size_t slice_full_bytes(const GptDesc* d, const Plan* p, int owner, int slice,
                               int weight) {
  const OpPlan* o = &p->ops[owner];
  size_t n = gpt_slice_params(&d->ops[owner], o->k, slice);
  size_t elem = weight ? precision_elems(p->precision).wt : sizeof(float);
  return elem * slice_padded(n, o->strat[slice], plan_op_group(p, owner), p->precision);
}

/* The memory replay: the transient bytes live as the walk allocates and frees them. */
typedef struct MemReplay {
  const GptDesc* d;
  const Plan* p;
  size_t cur;   /* bytes live now */
} MemReplay;

/* The walk's actions in bytes: a gathered weight (now or prefetched) and a full gradient are
** live from their allocation until freed, a full gradient until its reduce-scatter has landed.
** What a slice keeps across the step (arg WALK_KEPT) is in its own buffer: no bytes here. */
static void mem_action(void* ctx, WalkAction a, const GptParamUse* u, int arg) {
  MemReplay* m = ctx;
  if (arg & WALK_KEPT) return;
  switch (a) {
    case WALK_GATHER: case WALK_PREFETCH:
      m->cur += slice_full_bytes(m->d, m->p, u->owner, u->slice, 1);
      break;
    case WALK_ALLOC_GRAD:
      m->cur += slice_full_bytes(m->d, m->p, u->owner, u->slice, 0);
      break;
    case WALK_FREE_WEIGHT:
      m->cur -= slice_full_bytes(m->d, m->p, u->owner, u->slice, 1);
      break;
    case WALK_REDUCE: case WALK_REDUCE_WAIT:
      m->cur -= slice_full_bytes(m->d, m->p, u->owner, u->slice, 0);
      break;
    default: /* the rest moves no bytes */
      break;
  }
}

/* Replays the step's parameter uses of plan p as the runtime's hooks execute them (the step
** walk, step_walk.h) and returns the largest transient bytes live at once; live[i] (when live
** != NULL) receives the bytes live at the fullest moment of use i: after its weight (and with
** prefetch the next zero3 weight's buffer) and its full gradient are allocated, before anything
** of it is freed; for a run of held uses (the fused head's slices), once all of them are. Sets
** *n to the number of uses; -1 with an error when out of memory. */
static size_t replay_transient(const GptDesc* d, const Plan* p, size_t* live, int* n) {
  MemReplay m = {d, p, 0};
  StepWalk* w = walk_create(d, p, PLAN_BUCKET_BYTES, mem_action, &m);
  size_t peak = 0;
  *n = w ? walk_use_count(w) : -1;
  int first, run;
  while (w && (first = walk_run_begin(w, &run)) >= 0) {
    for (int i = first; live && i < first + run; i++) live[i] = m.cur;
    if (m.cur > peak) peak = m.cur;
    walk_run_end(w, run);
  }
  walk_destroy(w);
  return peak;
}

int plan_transient_timeline(const GptDesc* d, const Plan* p, size_t* live) {
  int n;
  replay_transient(d, p, live, &n);
  return n;
}

/* Largest transient bytes of plan p: the maximum of its timeline. If the schedule cannot be
** allocated, falls back to the largest single use (a slice's gathered weight plus its full
** gradient), plus, with prefetch, the largest zero3 weight, which may be in flight beside it,
** and with overlap_reduce the largest full gradient still being reduced; that bound is exact
** without either and never below the truth with them. */
static size_t plan_transient_peak(const GptDesc* d, const Plan* p) {
  int n;
  size_t peak = replay_transient(d, p, NULL, &n);
  if (n >= 0) return peak;
  osdp_clear_error();
  size_t use = 0, z3 = 0, rs = 0;
  for (int i = 0; i < d->nops; i++) {
    const GptOp* op = &d->ops[i];
    for (int s = 0; op->n_params && s < p->ops[i].k; s++) {
      size_t np = gpt_slice_params(op, p->ops[i].k, s);
      Strategy st = p->ops[i].strat[s];
      int G = plan_op_group(p, i);
      int keep = p->ops[i].keep;
      size_t tb = slice_transient_backward(np, st, G, p->precision, 1, keep);
      size_t tf = slice_transient_forward(np, st, G, p->precision, keep);
      size_t gradient = st == STRAT_DP || (keep & KEEP_GRAD)
                            ? 0 : sizeof(float) * slice_padded(np, st, G, p->precision);
      if (tb > use) use = tb;
      if (tf > z3) z3 = tf;
      if (gradient > rs) rs = gradient;
    }
  }
  return use + (p->prefetch ? z3 : 0) + (p->overlap_reduce ? rs : 0);
}

void plan_predict_memory(const GptDesc* d, const Plan* p, int threads, MemPrediction* m) {
  memset(m, 0, sizeof *m);
  int B = p->micro_batch, T = p->seq;
  m->acts = gpt_acts_layout(d, B, T, p->precision, p->recompute, NULL, NULL, &m->recompute);
  for (int i = 0; i < d->nops; i++) {
    const GptOp* op = &d->ops[i];
    if (!op->n_params) continue;
    for (int s = 0; s < p->ops[i].k; s++) {
      size_t n = gpt_slice_params(op, p->ops[i].k, s), pa, gr, op_, kw, kg;
      Strategy st = p->ops[i].strat[s];
      int G = plan_op_group(p, i);
      slice_persistent_bytes(n, st, G, p->precision, &pa, &gr, &op_);
      slice_kept_bytes(n, st, G, p->precision, p->ops[i].keep, &kw, &kg);
      m->params += pa + kw; m->grads += gr + kg; m->optim += op_;
      m->kept += kw + kg;
    }
  }
  m->transient = plan_transient_peak(d, p);
  m->scratch = gpt_scratch_bytes(d, B, T, p->precision, threads, p->head_rows);
  m->peak = m->params + m->grads + m->optim + m->acts + m->scratch + m->transient;
}
