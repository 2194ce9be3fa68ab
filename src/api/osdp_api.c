/*
** osdp_api.c: the public C API of include/osdp/osdp.h, over the model, planner and core
** modules. Each handle wraps the internal object the command line uses (GptDesc, DeviceInfo,
** Plan), and each function does what the matching step of `osdp plan` (src/cli/cmd_plan.c)
** does with its flags, so that a program and the command get the same plan from the same
** inputs. Nothing here starts MPI: the search, the cost model and the plan files do not use it.
** No module below includes this one (docs/ARCHITECTURE.md).
*/
#include "osdp/osdp.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"
#include "model/gpt.h"
#include "model/plan.h"
#include "model/weights_file.h"
#include "planner/cost.h"
#include "planner/device.h"
#include "planner/search.h"

#ifndef OSDP_API_VERSION
#define OSDP_API_VERSION "unknown"
#endif

/* How many candidates a search ranks, as `osdp plan` (PLAN_CANDIDATES in cli/cmd_plan.c: 6, and
** 2 more for the hybrid baselines on several hosts). The first, the chosen plan, does not
** depend on it; the count is kept the same all the same. */
#define API_CANDIDATES 6
#define API_CANDIDATES_MAX (API_CANDIDATES + 2)

struct OsdpModel {
  GptDesc d;
};

struct OsdpDevices {
  DeviceInfo dev;
};

struct OsdpPlan {
  Plan p;
  size_t n_params;  /* of the model it was made for: a plan used with another model is refused */
};

/* The library's version (PROJECT_VERSION of CMakeLists.txt, compiled in). */
const char* osdp_version(void) { return OSDP_API_VERSION; }

/* osdp_last_error is core/util.c's (declared in both headers with one signature). */

/* A byte size parsed by core's parse_size, the parser behind every size flag. */
int osdp_parse_size(const char* text, size_t* bytes) {
  if (!bytes) return osdp_fail("osdp_parse_size: bytes is NULL");
  return parse_size(text, "size", bytes);
}

/* The model of spec: a preset, model JSON or Hugging Face config through gpt_config_load (as
** --model); failing that, when spec is a weights file, the shape it holds (as --load). */
int osdp_model_load(const char* spec, OsdpModel** out) {
  if (!out) return osdp_fail("osdp_model_load: out is NULL");
  *out = NULL;
  if (!spec || !*spec)
    return osdp_fail("osdp_model_load: no model given; give a preset (%s), a model JSON file, a "
                     "Hugging Face config.json or a weights file", gpt_preset_names());
  GptConfig cfg;
  if (gpt_config_load(spec, &cfg)) {
    WeightsFormat fmt;
    if (weights_detect(spec, &fmt)) {
      /* Not a weights file either: the error to report is the config's, recorded again. */
      gpt_config_load(spec, &cfg);
      return -1;
    }
    if (weights_read_config(spec, &cfg)) return -1;
    if (cfg.n_head == 0)
      return osdp_fail("%s does not record its number of heads (no n_head in its safetensors "
                       "__metadata__, no config.json beside it); load its config.json instead",
                       spec);
  }
  OsdpModel* m = calloc(1, sizeof *m);
  if (!m) return osdp_fail("osdp_model_load: out of memory");
  if (gpt_desc_build(&m->d, &cfg)) { free(m); return -1; }
  *out = m;
  return 0;
}

/* Frees the description and the handle. */
void osdp_model_free(OsdpModel* model) {
  if (!model) return;
  gpt_desc_free(&model->d);
  free(model);
}

/* The model's figures from its description. */
int osdp_model_info(const OsdpModel* model, OsdpModelInfo* info) {
  if (!model || !info) return osdp_fail("osdp_model_info: NULL argument");
  const GptDesc* d = &model->d;
  info->name = d->cfg.name;
  info->family = d->cfg.family[0] ? d->cfg.family : "gpt2";
  info->params = d->n_params;
  info->layers = d->cfg.n_layer;
  info->ops = d->nops;
  info->max_seq = d->cfg.max_seq;
  return 0;
}

/* The defaults of osdp plan's device flags (cmd_plan.c's plan_device_options). */
void osdp_device_spec_init(OsdpDeviceSpec* spec) {
  if (!spec) return;
  memset(spec, 0, sizeof *spec);
  spec->ranks = 1;
  spec->threads = 1;
  spec->bandwidth_Bps = 1.25e10;
  spec->latency_s = 2e-5;
  spec->inter_latency_s = -1;
}

/* A link figure that must be finite and > 0 (or >= 0 when zero_ok); -1 with an error naming
** the field otherwise. */
static int link_figure(double v, int zero_ok, const char* field) {
  if (isfinite(v) && (v > 0 || (zero_ok && v == 0))) return 0;
  return osdp_fail("device spec: %s = %g must be %s", field, v, zero_ok ? ">= 0" : "> 0");
}

/* Fills dev from spec as cmd_plan.c's device_from_args and inter_host_from_args fill it from
** the flags; -1 with an error naming the field. */
static int device_from_spec(const OsdpDeviceSpec* s, DeviceInfo* dev) {
  memset(dev, 0, sizeof *dev);
  if (s->ranks < 1 || s->ranks > (1 << 20))
    return osdp_fail("device spec: ranks = %d must be in [1, %d]", s->ranks, 1 << 20);
  if (s->threads < 1 || s->threads > 256)
    return osdp_fail("device spec: threads = %d must be in [1, 256]", s->threads);
  if (s->ranks_per_host < 0 || (s->ranks_per_host > 0 && s->ranks % s->ranks_per_host))
    return osdp_fail("device spec: ranks_per_host = %d must divide the %d ranks (the ranks on each "
                     "host, consecutive world ranks; 0: one host)", s->ranks_per_host, s->ranks);
  if (link_figure(s->bandwidth_Bps, 0, "bandwidth_Bps") || link_figure(s->latency_s, 1, "latency_s"))
    return -1;
  dev->ranks = s->ranks;
  dev->ranks_per_host = s->ranks_per_host;
  dev->threads = s->threads;
  dev->mem_limit = s->mem_limit;
  dev->flops = s->flops;
  for (int k = 0; k < COLL_COUNT; k++)
    dev->coll[k] = (CollectiveModel){.latency_s = s->latency_s, .bandwidth_Bps = s->bandwidth_Bps};
  int inter = s->inter_bandwidth_Bps != 0 || !(s->inter_latency_s < 0);
  if (inter) {
    double bw = s->inter_bandwidth_Bps != 0 ? s->inter_bandwidth_Bps : s->bandwidth_Bps;
    double lat = !(s->inter_latency_s < 0) ? s->inter_latency_s : s->latency_s;
    if (link_figure(bw, 0, "inter_bandwidth_Bps") || link_figure(lat, 1, "inter_latency_s"))
      return -1;
    for (int k = 0; k < COLL_COUNT; k++) {
      dev->inter[k] = (CollectiveModel){.latency_s = lat, .bandwidth_Bps = bw};
      dev->inter_given[k] = 1;
    }
    dev->inter_ranks = 0; /* ranks / H: one rank per host */
  }
  return device_validate(dev, "device spec");
}

/* A device description from a spec (checked as the flags are). */
int osdp_devices_new(const OsdpDeviceSpec* spec, OsdpDevices** out) {
  if (!out) return osdp_fail("osdp_devices_new: out is NULL");
  *out = NULL;
  if (!spec) return osdp_fail("osdp_devices_new: spec is NULL");
  OsdpDevices* v = calloc(1, sizeof *v);
  if (!v) return osdp_fail("osdp_devices_new: out of memory");
  if (device_from_spec(spec, &v->dev)) { free(v); return -1; }
  *out = v;
  return 0;
}

/* A device file read and validated as `osdp plan --devices FILE` does. */
int osdp_devices_load(const char* path, OsdpDevices** out) {
  if (!out) return osdp_fail("osdp_devices_load: out is NULL");
  *out = NULL;
  if (!path) return osdp_fail("osdp_devices_load: path is NULL");
  OsdpDevices* v = calloc(1, sizeof *v);
  if (!v) return osdp_fail("osdp_devices_load: out of memory");
  if (device_load(&v->dev, path) || device_validate(&v->dev, path)) {
    device_free(&v->dev);
    free(v);
    return -1;
  }
  *out = v;
  return 0;
}

/* The device description's main figures, back as a spec. */
int osdp_devices_describe(const OsdpDevices* devices, OsdpDeviceSpec* spec) {
  if (!devices || !spec) return osdp_fail("osdp_devices_describe: NULL argument");
  const DeviceInfo* dev = &devices->dev;
  osdp_device_spec_init(spec);
  spec->ranks = dev->ranks;
  spec->ranks_per_host = device_ranks_per_host(dev);
  spec->threads = dev->threads;
  spec->mem_limit = dev->mem_limit;
  spec->flops = dev->flops;
  spec->bandwidth_Bps = dev->coll[COLL_ALLREDUCE].bandwidth_Bps;
  spec->latency_s = dev->coll[COLL_ALLREDUCE].latency_s;
  if (dev->inter_given[COLL_ALLREDUCE]) {
    spec->inter_bandwidth_Bps = dev->inter[COLL_ALLREDUCE].bandwidth_Bps;
    spec->inter_latency_s = dev->inter[COLL_ALLREDUCE].latency_s;
  }
  return 0;
}

/* Frees the measured op times and the handle. */
void osdp_devices_free(OsdpDevices* devices) {
  if (!devices) return;
  device_free(&devices->dev);
  free(devices);
}

/* The defaults of osdp plan's search flags. */
void osdp_search_options_init(OsdpSearchOptions* o) {
  if (!o) return;
  memset(o, 0, sizeof *o);
  o->max_batch = 0;
  o->recompute = -1;
}

/* The planner's options from o, as cmd_plan.c's search_options_from_args and
** setup_search_options make them from --seq, --max-batch, --reduce-dtype, --shard-group and
** --recompute; -1 with an error naming the field. */
static int search_options_from(const OsdpSearchOptions* o, const GptDesc* d, const DeviceInfo* dev,
                               SearchOptions* so) {
  int def_T = dev->n_op_times && strcmp(dev->compute_model, d->cfg.name) == 0 ? dev->compute_seq
                                                                             : d->cfg.max_seq;
  int T = o->seq ? o->seq : def_T;
  if (T < 1 || T > d->cfg.max_seq)
    return osdp_fail("search options: seq = %d must be in [1, %d] (model %s's max_seq), or 0 for "
                     "the default", T, d->cfg.max_seq, d->cfg.name);
  if (o->max_batch < 0 || o->max_batch > (1 << 20))
    return osdp_fail("search options: max_batch = %d must be in [1, %d], or 0 for the default",
                     o->max_batch, 1 << 20);
  planner_default_options(so, T);
  if (o->max_batch) so->max_batch = o->max_batch;
  else planner_cap_batch(d, dev, so);
  const char* rd = o->reduce_dtype ? o->reduce_dtype : "fp32";
  if (strcmp(rd, "auto") == 0) so->reduce_dtype = SEARCH_REDUCE_AUTO;
  else if (reduce_dtype_parse(rd) >= 0) so->reduce_dtype = reduce_dtype_parse(rd);
  else
    return osdp_fail("search options: reduce_dtype '%s' must be fp32, bf16 or auto (the element "
                     "type of gradient reductions; auto: the planner chooses per plan)", rd);
  int G = o->shard_group;
  if (G < 0 || G > dev->ranks || (G && dev->ranks % G))
    return osdp_fail("search options: shard_group = %d must divide the %d ranks (or 0: the "
                     "planner chooses per op)", G, dev->ranks);
  if (G) so->shard_group = G;
  int L = d->cfg.n_layer;
  if (o->recompute < -1 || o->recompute > L)
    return osdp_fail("search options: recompute = %d must be -1 (the planner chooses) or a layer "
                     "count 0..%d (model %s)", o->recompute, L, d->cfg.name);
  if (o->recompute >= 0) so->min_recompute = so->max_recompute = o->recompute;
  return 0;
}

/* The plan osdp plan chooses: planner_candidates' first (fastest by the step replay). */
int osdp_plan_search(const OsdpModel* model, const OsdpDevices* devices,
                     const OsdpSearchOptions* o, OsdpPlan** out) {
  if (!out) return osdp_fail("osdp_plan_search: out is NULL");
  *out = NULL;
  if (!model || !devices) return osdp_fail("osdp_plan_search: model or devices is NULL");
  OsdpSearchOptions defaults;
  osdp_search_options_init(&defaults);
  if (!o) o = &defaults;
  const GptDesc* d = &model->d;
  DeviceInfo dev = devices->dev; /* a shallow copy, read only: the limit may be replaced */
  if (o->mem_limit) dev.mem_limit = o->mem_limit;
  SearchOptions so;
  if (search_options_from(o, d, &dev, &so)) return -1;
  OsdpPlan* r = calloc(1, sizeof *r);
  if (!r) return osdp_fail("osdp_plan_search: out of memory");
  Candidate cand[API_CANDIDATES_MAX];
  int H = device_ranks_per_host(&dev);
  int max = API_CANDIDATES + (H > 1 && H < dev.ranks ? 2 : 0);
  int n = planner_candidates(d, &dev, &so, cand, max, NULL, NULL);
  if (n < 1) { free(r); return n < 0 ? -1 : osdp_fail("osdp_plan_search: no candidate plan"); }
  r->p = cand[0].plan;
  r->n_params = d->n_params;
  for (int i = 1; i < n; i++) plan_free(&cand[i].plan);
  *out = r;
  return 0;
}

/* 0 when plan was made for model (operators, layers, parameters), else -1 with an error. */
static int plan_for_model(const OsdpModel* model, const OsdpPlan* plan, const char* who) {
  if (!model || !plan) return osdp_fail("%s: model or plan is NULL", who);
  if (plan->n_params != model->d.n_params || plan->p.nops != model->d.nops ||
      plan->p.nlayers != model->d.cfg.n_layer)
    return osdp_fail("%s: the plan was made for another model than %s (%d operators, %d layers)",
                     who, model->d.cfg.name, model->d.nops, model->d.cfg.n_layer);
  return 0;
}

/* A plan file through plan_load (as `osdp train --plan FILE`), then checked. */
int osdp_plan_read(const OsdpModel* model, const char* path, OsdpPlan** out) {
  if (!out) return osdp_fail("osdp_plan_read: out is NULL");
  *out = NULL;
  if (!model || !path) return osdp_fail("osdp_plan_read: model or path is NULL");
  OsdpPlan* r = calloc(1, sizeof *r);
  if (!r) return osdp_fail("osdp_plan_read: out of memory");
  if (plan_load(&r->p, &model->d, path)) { free(r); return -1; }
  if (plan_validate(&r->p, &model->d, r->p.world)) {
    char why[512];
    snprintf(why, sizeof why, "%s", osdp_last_error());
    plan_free(&r->p);
    free(r);
    return osdp_fail("%s is not a plan for model %s: %s", path, model->d.cfg.name, why);
  }
  r->n_params = model->d.n_params;
  *out = r;
  return 0;
}

/* The plan's JSON (plan_to_json and a newline: plan_save's bytes) through the output layer's
** atomic write (core/output.h). */
int osdp_plan_write(const OsdpModel* model, const OsdpPlan* plan, const char* path) {
  if (plan_for_model(model, plan, "osdp_plan_write")) return -1;
  if (!path) return osdp_fail("osdp_plan_write: path is NULL");
  return plan_save(&plan->p, &model->d, path, "osdp_plan_write");
}

/* Frees the plan's arrays and the handle. */
void osdp_plan_free(OsdpPlan* plan) {
  if (!plan) return;
  plan_free(&plan->p);
  free(plan);
}

/* The plan's figures from its fields. */
int osdp_plan_summary(const OsdpPlan* plan, OsdpPlanSummary* s) {
  if (!plan || !s) return osdp_fail("osdp_plan_summary: NULL argument");
  const Plan* p = &plan->p;
  s->world = p->world;
  s->micro_batch = p->micro_batch;
  s->seq = p->seq;
  s->ops = p->nops;
  s->recompute_layers = plan_recompute_count(p);
  s->prefetch = p->prefetch != 0;
  s->overlap_reduce = p->overlap_reduce != 0;
  s->reduce_dtype = reduce_dtype_name(p->reduce_dtype);
  return 0;
}

/* Operator i of the plan, named from the model. */
int osdp_plan_op(const OsdpModel* model, const OsdpPlan* plan, int i, OsdpOpPlan* op) {
  if (plan_for_model(model, plan, "osdp_plan_op")) return -1;
  if (!op) return osdp_fail("osdp_plan_op: op is NULL");
  if (i < 0 || i >= plan->p.nops)
    return osdp_fail("osdp_plan_op: operator %d is not in [0, %d)", i, plan->p.nops);
  const GptOp* g = &model->d.ops[i];
  const OpPlan* o = &plan->p.ops[i];
  memset(op, 0, sizeof *op);
  snprintf(op->name, sizeof op->name, "%s", g->name);
  op->params = g->n_params;
  op->slices = o->k;
  op->shard_group = plan_op_group(&plan->p, i);
  size_t w = 0;
  for (int s = 0; s < o->k && w < sizeof op->strategies; s++) {
    int c = snprintf(op->strategies + w, sizeof op->strategies - w, "%s%s", s ? "," : "",
                     strategy_name(o->strat[s]));
    if (c < 0) break;
    w += (size_t)c;
  }
  return 0;
}

/* Copies a MemPrediction into the public struct. */
static void memory_out(const MemPrediction* m, OsdpPrediction* out) {
  out->params = m->params;
  out->grads = m->grads;
  out->optim = m->optim;
  out->acts = m->acts;
  out->scratch = m->scratch;
  out->transient = m->transient;
  out->peak = m->peak;
}

/* plan_cost on the devices (memory and time), or plan_predict_memory alone without them. */
int osdp_plan_predict(const OsdpModel* model, const OsdpDevices* devices, const OsdpPlan* plan,
                      OsdpPrediction* out) {
  if (plan_for_model(model, plan, "osdp_plan_predict")) return -1;
  if (!out) return osdp_fail("osdp_plan_predict: out is NULL");
  memset(out, 0, sizeof *out);
  if (!devices) {
    MemPrediction m;
    plan_predict_memory(&model->d, &plan->p, 1, &m);
    memory_out(&m, out);
    return 0;
  }
  if (devices->dev.ranks != plan->p.world)
    return osdp_fail("osdp_plan_predict: the plan is for %d rank(s), the devices describe %d",
                     plan->p.world, devices->dev.ranks);
  PlanCost c;
  if (plan_cost(&model->d, &devices->dev, &plan->p, &c)) return -1;
  memory_out(&c.mem, out);
  out->step_s = c.step_s;
  out->samples_per_s = c.samples_per_s;
  out->compute_s = c.compute_s;
  out->comm_s = c.comm_s;
  return 0;
}
