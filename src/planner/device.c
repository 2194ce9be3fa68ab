/* device.c: device information files (JSON), validation, collective and operator times; see
** device.h. */
#include "planner/device.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"

/* JSON names of the collectives, indexed by COLL_*. */
static const char* coll_names[COLL_COUNT] = {"allreduce", "allgather", "reduce_scatter"};

int device_ranks_per_host(const DeviceInfo* dev) {
  int H = dev->ranks_per_host;
  return H >= 1 && H <= dev->ranks ? H : dev->ranks;
}

/* Whether the world level gives any collective (then every world collective is LINK_WORLD,
** the kinds it lacks falling back in device_link). */
static int world_measured(const DeviceInfo* dev) {
  return dev->world_given[0] || dev->world_given[1] || dev->world_given[2];
}

CommShape device_world_shape(const DeviceInfo* dev) {
  return device_group_shape(dev, dev->ranks);
}

CommShape device_group_shape(const DeviceInfo* dev, int G) {
  int H = device_ranks_per_host(dev);
  if (G == dev->ranks && G > H && world_measured(dev)) return (CommShape){G, LINK_WORLD};
  return (CommShape){G, G <= H && G > 0 && H % G == 0 ? LINK_INTRA : LINK_INTER};
}

CommShape device_across_shape(const DeviceInfo* dev, int G) {
  int n = G > 0 ? dev->ranks / G : 1;
  return (CommShape){n, dev->ranks > device_ranks_per_host(dev) ? LINK_INTER : LINK_INTRA};
}

CollectiveModel* device_link_model(DeviceInfo* dev, int level, int kind) {
  if (level == LINK_WORLD && dev->world_given[kind]) return &dev->world[kind];
  if (level != LINK_INTRA && dev->inter_given[kind]) return &dev->inter[kind];
  return &dev->coll[kind];
}

const CollectiveModel* device_link(const DeviceInfo* dev, int level, int kind) {
  return device_link_model((DeviceInfo*)dev, level, kind);
}

int device_link_ranks(const DeviceInfo* dev, int level, int kind) {
  int H = device_ranks_per_host(dev);
  if (level == LINK_WORLD && dev->world_given[kind]) return dev->ranks;
  if (level != LINK_INTRA && dev->inter_given[kind])
    return dev->inter_ranks > 0 ? dev->inter_ranks : (dev->ranks / H > 2 ? dev->ranks / H : 2);
  return dev->coll_ranks > 0 ? dev->coll_ranks : H;
}

/* The share of a buffer a ring collective of `kind` over n ranks moves through every link:
** all-reduce 2(n-1)/n, all-gather and reduce-scatter (n-1)/n. */
static double ring_share(int kind, int n) {
  double f = n > 1 ? (double)(n - 1) / n : 0;
  return kind == COLL_ALLREDUCE ? 2 * f : f;
}

/* A table's time at `bytes`: the latency + bandwidth line, or the measured points
** interpolated (below the smallest: its time; above the largest: the last segment extended). */
static double table_s(const CollectiveModel* c, double bytes) {
  int n = c->npoints;
  if (n < 2) return c->latency_s + bytes / c->bandwidth_Bps;
  const double *x = c->point_bytes, *t = c->point_s;
  if (bytes <= x[0]) return t[0];
  int i = 1;
  while (i < n - 1 && x[i] < bytes) i++;
  return t[i - 1] + (t[i] - t[i - 1]) * (bytes - x[i - 1]) / (x[i] - x[i - 1]);
}

double device_shape_collective_s(const DeviceInfo* dev, CommShape sh, int kind, double bytes) {
  if (sh.ranks <= 1 || bytes <= 0) return 0;
  int m = device_link_ranks(dev, sh.level, kind);
  if (m < 2) m = 2;
  double x = sh.ranks == m ? bytes : bytes * (ring_share(kind, sh.ranks) / ring_share(kind, m));
  return table_s(device_link(dev, sh.level, kind), x);
}

double device_shape_step_s(const DeviceInfo* dev, CommShape sh, int kind, double bytes) {
  double f = device_link(dev, sh.level, kind)->in_step;
  return (f > 0 ? f : 1.0) * device_shape_collective_s(dev, sh, kind, bytes);
}

double device_shape_async_step_s(const DeviceInfo* dev, CommShape sh, int kind, double bytes) {
  double f = device_link(dev, sh.level, kind)->async_in_step;
  return f > 0 ? f * device_shape_collective_s(dev, sh, kind, bytes) : device_shape_step_s(dev, sh, kind, bytes);
}

double device_collective_s(const DeviceInfo* dev, int kind, double bytes) {
  return device_shape_collective_s(dev, device_world_shape(dev), kind, bytes);
}

double device_step_collective_s(const DeviceInfo* dev, int kind, double bytes) {
  return device_shape_step_s(dev, device_world_shape(dev), kind, bytes);
}

int device_measured_for(const DeviceInfo* dev, const GptDesc* d, int T) {
  return dev->n_op_times > 0 && dev->compute_seq == T && strcmp(dev->compute_model, d->cfg.name) == 0;
}

const OpTime* device_measured_op(const DeviceInfo* dev, const GptDesc* d, int T, const char* name) {
  if (!device_measured_for(dev, d, T)) return NULL;
  for (int i = 0; i < dev->n_op_times; i++)
    if (strcmp(dev->op_times[i].name, name) == 0) return &dev->op_times[i];
  return NULL;
}

double device_op_level_s(const OpTime* t, int l, int B) {
  int n = t->npoints[l];
  if (n == 0) return t->fixed_s[l] + (double)B * t->per_sample_s[l];
  const int* b = t->point_batch[l];
  const double* s = t->point_s[l];
  for (int j = 0; j + 1 < n; j++)
    if (B >= b[j] && B <= b[j + 1])
      return s[j] + (s[j + 1] - s[j]) * (double)(B - b[j]) / (double)(b[j + 1] - b[j]);
  int e = B < b[0] ? 0 : n - 1;
  double v = s[e] + (double)(B - b[e]) * t->per_sample_s[l];
  return v > 0 ? v : 0;
}

/* Measured time at k slices: the level of k if measured, else linear in k between the nearest
** measured levels below and above (the nearest one alone at the ends). Level 0 is always
** measured. */
static double measured_time_at_k(const OpTime* t, int B, int k) {
  int lo = 0, hi = -1;
  for (int l = 0; l < DEVICE_SLICE_LEVELS; l++) {
    if (!t->measured[l]) continue;
    int kl = 1 << l;
    if (kl == k) return device_op_level_s(t, l, B);
    if (kl < k) lo = l;
    else if (hi < 0) hi = l;
  }
  if (hi < 0) return device_op_level_s(t, lo, B);
  double k0 = (double)(1 << lo), k1 = (double)(1 << hi), f = ((double)k - k0) / (k1 - k0);
  return (1 - f) * device_op_level_s(t, lo, B) + f * device_op_level_s(t, hi, B);
}

double device_op_time_s(const DeviceInfo* dev, const GptDesc* d, int op, int B, int T, int k) {
  const OpTime* t = device_measured_op(dev, d, T, d->ops[op].name);
  if (t) return measured_time_at_k(t, B, k < 1 ? 1 : k);
  return 3.0 * gpt_op_flops_per_token(d, &d->ops[op], T) * (double)B * (double)T / dev->flops;
}

double device_op_pass_share(const DeviceInfo* dev, const GptDesc* d, int op, int T, GptPhase phase) {
  if (!d->ops[op].has_backward) return phase == GPT_BACKWARD ? 0.0 : 1.0;
  const OpTime* t = device_measured_op(dev, d, T, d->ops[op].name);
  if (!t || t->forward_share <= 0) return phase == GPT_BACKWARD ? DEVICE_BACKWARD_SHARE : DEVICE_FORWARD_SHARE;
  return phase == GPT_BACKWARD ? 1.0 - t->forward_share : t->forward_share;
}

int device_alloc_op_times(DeviceInfo* dev, int n) {
  free(dev->op_times);
  dev->op_times = calloc((size_t)(n > 0 ? n : 1), sizeof *dev->op_times);
  dev->n_op_times = dev->op_times ? n : 0;
  return dev->op_times ? 0 : osdp_fail("out of memory");
}

void device_free(DeviceInfo* dev) {
  free(dev->op_times);
  dev->op_times = NULL;
  dev->n_op_times = 0;
}

/* ---- Validation ------------------------------------------------------------------------ */

/* Checks that a time or speed is finite and > 0 (or >= 0 when zero_ok). */
static int check_number(double v, int zero_ok, const char* where, const char* field, const char* hint) {
  if (isfinite(v) && (v > 0 || (zero_ok && v == 0))) return 0;
  return osdp_fail("%s: field \"%s\" = %g must be %s; %s", where, field, v,
                   zero_ok ? "a finite number >= 0" : "a finite number > 0", hint);
}

/* Checks level l's points of op time t (`field` names them): at most DEVICE_OP_POINTS, micro-
** batches >= 1 and ascending, seconds finite and >= 0. */
static int validate_points(const OpTime* t, int l, const char* where, const char* field) {
  int n = t->npoints[l];
  if (n < 0 || n > DEVICE_OP_POINTS)
    return osdp_fail("%s: field \"%s\" has %d points; give at most %d [micro_batch, seconds] pairs", where,
                     field, n, DEVICE_OP_POINTS);
  for (int j = 0; j < n; j++) {
    int b = t->point_batch[l][j];
    if (b < 1 || (j > 0 && b <= t->point_batch[l][j - 1]))
      return osdp_fail("%s: field \"%s[%d]\" has micro-batch %d; micro-batches must be >= 1 and ascending",
                       where, field, j, b);
    if (!(isfinite(t->point_s[l][j]) && t->point_s[l][j] >= 0))
      return osdp_fail("%s: field \"%s[%d]\" has seconds %g; give a finite number >= 0", where, field, j,
                       t->point_s[l][j]);
  }
  return 0;
}

/* Checks the measured compute section, if any: every measured level's figures >= 0, and the
** unsplit level present. */
static int validate_compute(const DeviceInfo* dev, const char* where) {
  if (dev->n_op_times == 0) return 0;
  if (dev->n_op_times < 0) return osdp_fail("%s: \"compute.ops\" has a negative count", where);
  if (dev->compute_seq < 1)
    return osdp_fail("%s: field \"compute.seq\" = %d must be >= 1 (the sequence length the times "
                     "were measured at)", where, dev->compute_seq);
  char field[80];
  for (int i = 0; i < dev->n_op_times; i++) {
    const OpTime* t = &dev->op_times[i];
    if (!t->measured[0])
      return osdp_fail("%s: \"compute.ops[%d]\" has no unsplit time; give fixed_s and per_sample_s",
                       where, i);
    for (int l = 0; l < DEVICE_SLICE_LEVELS; l++) {
      if (!t->measured[l]) continue;
      const char* at = l ? ".slices[k=" : "";
      char kk[16] = "";
      if (l) snprintf(kk, sizeof kk, "%d]", 1 << l);
      snprintf(field, sizeof field, "compute.ops[%d]%s%s.fixed_s", i, at, kk);
      if (check_number(t->fixed_s[l], 1, where, field, "give seconds, e.g. 1e-4")) return -1;
      snprintf(field, sizeof field, "compute.ops[%d]%s%s.per_sample_s", i, at, kk);
      if (check_number(t->per_sample_s[l], 1, where, field, "give seconds, e.g. 2e-3")) return -1;
      snprintf(field, sizeof field, "compute.ops[%d]%s%s.points", i, at, kk);
      if (validate_points(t, l, where, field)) return -1;
    }
    if (!(t->forward_share >= 0 && t->forward_share < 1)) /* also catches NaN */
      return osdp_fail("%s: field \"compute.ops[%d].forward_share\" = %g must be in (0, 1): the share of "
                       "the op's time its forward pass takes (leave it out for %.2f)", where, i,
                       t->forward_share, DEVICE_FORWARD_SHARE);
  }
  return 0;
}

/* Checks one collective's table; `field` names it ("collectives.allreduce"). */
static int validate_collective(const CollectiveModel* c, const char* where, const char* name) {
  char field[96];
  snprintf(field, sizeof field, "%s.latency_s", name);
  if (check_number(c->latency_s, 1, where, field, "give seconds such as 2e-5")) return -1;
  snprintf(field, sizeof field, "%s.bandwidth_Bps", name);
  if (check_number(c->bandwidth_Bps, 0, where, field, "give bytes per second such as 3e8")) return -1;
  snprintf(field, sizeof field, "%s.overlap", name);
  if (check_number(c->overlap, 1, where, field, "give a share between 0 and 1") ||
      (c->overlap > 1 && osdp_fail("%s: field \"%s\" = %g must be between 0 and 1", where, field, c->overlap)))
    return -1;
  snprintf(field, sizeof field, "%s.residual", name);
  if (check_number(c->residual, 1, where, field, "give a relative error >= 0, or omit it")) return -1;
  snprintf(field, sizeof field, "%s.in_step", name);
  if (check_number(c->in_step, 1, where, field, "give a factor > 0 such as 1.2, or omit it")) return -1;
  snprintf(field, sizeof field, "%s.async_in_step", name);
  if (check_number(c->async_in_step, 1, where, field, "give a factor > 0 such as 1.2, or omit it")) return -1;
  snprintf(field, sizeof field, "%s.bf16_factor", name);
  if (check_number(c->bf16_factor, 1, where, field, "give a share > 0 such as 0.5, or omit it")) return -1;
  for (int i = 0; i < c->npoints; i++) {
    snprintf(field, sizeof field, "%s.points[%d]", name, i);
    if (check_number(c->point_bytes[i], 0, where, field, "give [bytes > 0, seconds > 0]") ||
        check_number(c->point_s[i], 0, where, field, "give [bytes > 0, seconds > 0]"))
      return -1;
    if (i > 0 && (c->point_bytes[i] <= c->point_bytes[i - 1] || c->point_s[i] < c->point_s[i - 1]))
      return osdp_fail("%s: field \"%s\" must come after [%g, %g]: sizes ascending, times not "
                       "falling", where, field, c->point_bytes[i - 1], c->point_s[i - 1]);
  }
  return 0;
}

/* Checks a level's measured rank count (0: the default) is from 1 to the ranks (or 2, the
** least a collective is measured over). */
static int validate_link_ranks(const DeviceInfo* dev, int m, const char* where, const char* level) {
  int most = dev->ranks > 2 ? dev->ranks : 2;
  if (m >= 0 && m <= most) return 0;
  return osdp_fail("%s: field \"%s.measured_ranks\" = %d must be from 1 to %d (the ranks the "
                   "level's times were measured over), or omitted", where, level, m, most);
}

int device_validate(const DeviceInfo* dev, const char* where) {
  if (dev->ranks < 1)
    return osdp_fail("%s: field \"ranks\" = %d must be >= 1 (the number of ranks)", where, dev->ranks);
  if (dev->ranks_per_host < 0 || dev->ranks_per_host > dev->ranks ||
      (dev->ranks_per_host > 0 && dev->ranks % dev->ranks_per_host != 0))
    return osdp_fail("%s: field \"ranks_per_host\" = %d must divide ranks = %d (the ranks on each "
                     "host, consecutive world ranks); omit it for one host", where,
                     dev->ranks_per_host, dev->ranks);
  if (dev->mem_limit == 0)
    return osdp_fail("%s: field \"mem_limit\" = 0 must be > 0; give bytes per rank such as \"8GiB\"",
                     where);
  if (dev->threads < 1)
    return osdp_fail("%s: field \"threads\" = %d must be >= 1 (kernel threads per rank)", where,
                     dev->threads);
  if (check_number(dev->flops, 0, where, "flops", "give FLOP/s per rank such as 9.4e10") ||
      check_number(dev->optimizer_s_per_param, 1, where, "optimizer_s_per_param",
                   "give seconds per parameter such as 1.5e-9, or 0"))
    return -1;
  if (validate_link_ranks(dev, dev->coll_ranks, where, "collectives") ||
      validate_link_ranks(dev, dev->inter_ranks, where, "inter_host"))
    return -1;
  char name[64];
  for (int k = 0; k < COLL_COUNT; k++) {
    snprintf(name, sizeof name, "collectives.%s", coll_names[k]);
    if (validate_collective(&dev->coll[k], where, name)) return -1;
    snprintf(name, sizeof name, "inter_host.%s", coll_names[k]);
    if (dev->inter_given[k] && validate_collective(&dev->inter[k], where, name)) return -1;
    snprintf(name, sizeof name, "world.%s", coll_names[k]);
    if (dev->world_given[k] && validate_collective(&dev->world[k], where, name)) return -1;
  }
  return validate_compute(dev, where);
}

/* ---- Ranges ------------------------------------------------------------------------------ */

/* Checks that figure v (field `field` of `where`) lies in [lo, hi] (NaN does not); unit and hint
** complete the message. */
static int in_range(double v, double lo, double hi, const char* unit, const char* where,
                    const char* field, const char* hint) {
  if (v >= lo && v <= hi) return 0;
  return osdp_fail("%s: field \"%s\" = %g must be from %g to %g%s%s; %s", where, field, v, lo, hi,
                   unit[0] ? " " : "", unit, hint);
}

/* The ranges of one collective's latency, bandwidth and in-step factors; `name` names it
** ("collectives.allreduce"). */
static int collective_link_ranges(const CollectiveModel* c, const char* where, const char* name) {
  char f[96];
  snprintf(f, sizeof f, "%s.latency_s", name);
  if (in_range(c->latency_s, 0, DEVICE_MAX_SECONDS, "s", where, f,
               "give seconds per collective such as 2e-5 (osdp profile measures them)"))
    return -1;
  snprintf(f, sizeof f, "%s.bandwidth_Bps", name);
  if (in_range(c->bandwidth_Bps, DEVICE_MIN_BANDWIDTH, DEVICE_MAX_BANDWIDTH, "B/s", where, f,
               "give bytes per second such as 3e8 (osdp profile measures them)"))
    return -1;
  snprintf(f, sizeof f, "%s.in_step", name);
  if (in_range(c->in_step, 0, DEVICE_MAX_FACTOR, "", where, f, "give a factor such as 1.2, or omit it"))
    return -1;
  snprintf(f, sizeof f, "%s.async_in_step", name);
  return in_range(c->async_in_step, 0, DEVICE_MAX_FACTOR, "", where, f,
                  "give a factor such as 1.2, or omit it");
}

/* The ranges of one collective's figures and measured points. */
static int collective_ranges(const CollectiveModel* c, const char* where, const char* name) {
  if (collective_link_ranges(c, where, name)) return -1;
  char f[96];
  for (int i = 0; i < c->npoints; i++) {
    snprintf(f, sizeof f, "%s.points[%d]", name, i);
    if (in_range(c->point_bytes[i], 0, DEVICE_MAX_BYTES, "bytes", where, f, "give [bytes, seconds]") ||
        in_range(c->point_s[i], 0, DEVICE_MAX_SECONDS, "s", where, f, "give [bytes, seconds]"))
      return -1;
  }
  return 0;
}

/* The ranges of level l of measured op i's times (fixed, per sample, points). */
static int op_level_ranges(const OpTime* t, int i, int l, const char* where) {
  char f[96], at[24] = "";
  if (l) snprintf(at, sizeof at, ".slices[k=%d]", 1 << l);
  const char* hint = "give seconds (osdp profile measures them)";
  snprintf(f, sizeof f, "compute.ops[%d]%s.fixed_s", i, at);
  if (in_range(t->fixed_s[l], 0, DEVICE_MAX_SECONDS, "s", where, f, hint)) return -1;
  snprintf(f, sizeof f, "compute.ops[%d]%s.per_sample_s", i, at);
  if (in_range(t->per_sample_s[l], 0, DEVICE_MAX_SECONDS, "s", where, f, hint)) return -1;
  for (int j = 0; j < t->npoints[l] && j < DEVICE_OP_POINTS; j++) {
    snprintf(f, sizeof f, "compute.ops[%d]%s.points[%d]", i, at, j);
    if (in_range(t->point_s[l][j], 0, DEVICE_MAX_SECONDS, "s", where, f, hint)) return -1;
  }
  return 0;
}

/* The ranges of every collective level the device gives. */
static int levels_ranges(const DeviceInfo* dev, const char* where) {
  char name[64];
  for (int k = 0; k < COLL_COUNT; k++) {
    snprintf(name, sizeof name, "collectives.%s", coll_names[k]);
    if (collective_ranges(&dev->coll[k], where, name)) return -1;
    snprintf(name, sizeof name, "inter_host.%s", coll_names[k]);
    if (dev->inter_given[k] && collective_ranges(&dev->inter[k], where, name)) return -1;
    snprintf(name, sizeof name, "world.%s", coll_names[k]);
    if (dev->world_given[k] && collective_ranges(&dev->world[k], where, name)) return -1;
  }
  return 0;
}

int device_check_ranges(const DeviceInfo* dev, const char* where) {
  if (in_range(dev->flops, DEVICE_MIN_FLOPS, DEVICE_MAX_FLOPS, "FLOP/s", where, "flops",
               "give one rank's FLOP/s such as 9.4e10 (osdp profile measures it)") ||
      in_range(dev->optimizer_s_per_param, 0, DEVICE_MAX_OPT_S, "s", where, "optimizer_s_per_param",
               "give seconds per parameter such as 1.5e-9, or 0"))
    return -1;
  if (levels_ranges(dev, where)) return -1;
  for (int i = 0; i < dev->n_op_times; i++)
    for (int l = 0; l < DEVICE_SLICE_LEVELS; l++)
      if (dev->op_times[i].measured[l] && op_level_ranges(&dev->op_times[i], i, l, where)) return -1;
  return 0;
}

/* ---- Loading ----------------------------------------------------------------------------- */

/* Reads a number member `key` of object o into *out. Missing: error if required, else
** *out keeps its default. `field` is the dotted name used in messages. */
static int json_number(const cJSON* o, const char* key, const char* field, int required,
                       const char* path, double* out) {
  const cJSON* v = cJSON_GetObjectItemCaseSensitive(o, key);
  if (!v) return required ? osdp_fail("%s: missing field \"%s\" (a number)", path, field) : 0;
  if (!cJSON_IsNumber(v)) return osdp_fail("%s: field \"%s\" must be a number", path, field);
  *out = v->valuedouble;
  return 0;
}

/* Reads an integer member, as json_number but rejecting fractions and out-of-range values. */
static int json_integer(const cJSON* o, const char* key, const char* field, int required,
                        const char* path, int* out) {
  double v = *out;
  if (json_number(o, key, field, required, path, &v)) return -1;
  if (v != floor(v) || fabs(v) > 2e9)
    return osdp_fail("%s: field \"%s\" = %g must be an integer", path, field, v);
  *out = (int)v;
  return 0;
}

/* Reads "mem_limit": a number of bytes or a size string such as "8GiB". */
static int json_mem_limit(const cJSON* root, const char* path, size_t* out) {
  const cJSON* v = cJSON_GetObjectItemCaseSensitive(root, "mem_limit");
  char field[300];
  snprintf(field, sizeof field, "%s: field \"mem_limit\"", path);
  if (!v) return osdp_fail("%s: missing field \"mem_limit\" (bytes per rank, or a size such as \"8GiB\")", path);
  if (cJSON_IsString(v)) return parse_size(v->valuestring, field, out);
  if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || v->valuedouble < 1 || v->valuedouble > 1e18 ||
      v->valuedouble != floor(v->valuedouble))
    return osdp_fail("%s: field \"mem_limit\" must be a positive whole number of bytes or a size "
                     "such as \"8GiB\"", path);
  *out = (size_t)v->valuedouble;
  return 0;
}

/* Reads the optional "points" array [[bytes, seconds], ...] of one collective (`name`, such as
** "collectives.allreduce", for messages). */
static int json_points(const cJSON* o, const char* path, const char* name, CollectiveModel* c) {
  const cJSON* pts = cJSON_GetObjectItemCaseSensitive(o, "points");
  c->npoints = 0;
  if (!pts) return 0;
  int n = cJSON_IsArray(pts) ? cJSON_GetArraySize(pts) : -1;
  if (n < 0 || n > DEVICE_MAX_POINTS)
    return osdp_fail("%s: field \"%s.points\" must be an array of at most %d [bytes, seconds] "
                     "pairs", path, name, DEVICE_MAX_POINTS);
  for (int i = 0; i < n; i++) {
    const cJSON* e = cJSON_GetArrayItem(pts, i);
    const cJSON *b = cJSON_GetArrayItem(e, 0), *t = cJSON_GetArrayItem(e, 1);
    if (!cJSON_IsArray(e) || cJSON_GetArraySize(e) != 2 || !cJSON_IsNumber(b) || !cJSON_IsNumber(t))
      return osdp_fail("%s: field \"%s.points[%d]\" must be [bytes, seconds]", path, name, i);
    c->point_bytes[i] = b->valuedouble;
    c->point_s[i] = t->valuedouble;
  }
  c->npoints = n;
  return 0;
}

/* Reads one collective's object o (named `name`, such as "collectives.allreduce") into c. */
static int json_collective(const cJSON* o, const char* path, const char* name, CollectiveModel* c) {
  char field[96];
  snprintf(field, sizeof field, "%s.latency_s", name);
  if (json_number(o, "latency_s", field, 1, path, &c->latency_s)) return -1;
  snprintf(field, sizeof field, "%s.bandwidth_Bps", name);
  if (json_number(o, "bandwidth_Bps", field, 1, path, &c->bandwidth_Bps)) return -1;
  snprintf(field, sizeof field, "%s.overlap", name);
  if (json_number(o, "overlap", field, 0, path, &c->overlap)) return -1;
  snprintf(field, sizeof field, "%s.residual", name);
  if (json_number(o, "residual", field, 0, path, &c->residual)) return -1;
  snprintf(field, sizeof field, "%s.in_step", name);
  c->in_step = 1;
  if (json_number(o, "in_step", field, 0, path, &c->in_step)) return -1;
  if (c->in_step <= 0)
    return osdp_fail("%s: field \"%s\" = %g must be > 0 (1: as measured alone)", path, field, c->in_step);
  snprintf(field, sizeof field, "%s.async_in_step", name);
  if (json_number(o, "async_in_step", field, 0, path, &c->async_in_step)) return -1;
  if (cJSON_GetObjectItemCaseSensitive(o, "async_in_step") && !(c->async_in_step > 0))
    return osdp_fail("%s: field \"%s\" = %g must be > 0 (1: as measured alone; omit it for in_step's)", path,
                     field, c->async_in_step);
  snprintf(field, sizeof field, "%s.bf16_factor", name);
  if (json_number(o, "bf16_factor", field, 0, path, &c->bf16_factor)) return -1;
  if (c->bf16_factor < 0 || c->bf16_factor > 4)
    return osdp_fail("%s: field \"%s\" = %g must be in (0, 4] (0.5: bf16 costs half of fp32)", path,
                     field, c->bf16_factor);
  return json_points(o, path, name, c);
}

/* Reads the optional "measured_ranks" of link level object c (named `level`) into *out (left
** 0 when absent: the default); present, it must be a whole number >= 1. */
static int json_link_ranks(const cJSON* c, const char* level, const char* path, int* out) {
  char field[64];
  snprintf(field, sizeof field, "%s.measured_ranks", level);
  if (json_integer(c, "measured_ranks", field, 0, path, out)) return -1;
  if (*out >= 1 || !cJSON_GetObjectItemCaseSensitive(c, "measured_ranks")) return 0;
  return osdp_fail("%s: field \"%s\" = %d must be >= 1 (the ranks the level's times were measured "
                   "over), or omitted", path, field, *out);
}

/* Reads a link level's object `key` of root: "collectives" (the intra-host level: required,
** all three collectives), or "inter_host" or "world" (optional; any of them, the others falling
** back as device_link says, marked in given[]), each collective with latency and bandwidth, and
** the level's optional measured_ranks into *ranks. */
static int json_level(const cJSON* root, const char* key, const char* path, CollectiveModel* models,
                      int* given, int* ranks) {
  const cJSON* c = cJSON_GetObjectItemCaseSensitive(root, key);
  int intra = given == NULL;
  if (!c && !intra) return 0;
  if (!cJSON_IsObject(c) && intra)
    return osdp_fail("%s: missing object \"collectives\" with allreduce, allgather and "
                     "reduce_scatter, each {\"latency_s\": .., \"bandwidth_Bps\": ..}", path);
  if (!cJSON_IsObject(c))
    return osdp_fail("%s: field \"%s\" must be an object like \"collectives\" (allreduce, "
                     "allgather, reduce_scatter), or omitted", path, key);
  if (json_link_ranks(c, key, path, ranks)) return -1;
  char name[64];
  for (int k = 0; k < COLL_COUNT; k++) {
    const cJSON* o = cJSON_GetObjectItemCaseSensitive(c, coll_names[k]);
    snprintf(name, sizeof name, "%s.%s", key, coll_names[k]);
    if (!o && !intra) continue;
    if (!cJSON_IsObject(o))
      return osdp_fail("%s: %s \"%s\"%s {\"latency_s\": .., \"bandwidth_Bps\": ..}", path,
                       o ? "field" : "missing object", name, o ? " must be an object" : ":");
    if (json_collective(o, path, name, &models[k])) return -1;
    if (given) given[k] = 1;
  }
  return 0;
}

/* Reads the optional "points" of `obj` ([[micro_batch, seconds], ...], `field` naming it) into
** level l of t; validate_compute checks their values. */
static int json_op_points(const cJSON* obj, const char* field, const char* path, OpTime* t, int l) {
  const cJSON* pts = cJSON_GetObjectItemCaseSensitive(obj, "points");
  if (!pts) return 0;
  int n = cJSON_IsArray(pts) ? cJSON_GetArraySize(pts) : -1;
  if (n < 1 || n > DEVICE_OP_POINTS)
    return osdp_fail("%s: field \"%s.points\" must be an array of 1 to %d [micro_batch, seconds] pairs", path,
                     field, DEVICE_OP_POINTS);
  for (int j = 0; j < n; j++) {
    const cJSON* p = cJSON_GetArrayItem(pts, j);
    const cJSON *b = cJSON_GetArrayItem(p, 0), *s = cJSON_GetArrayItem(p, 1);
    if (!cJSON_IsArray(p) || cJSON_GetArraySize(p) != 2 || !cJSON_IsNumber(b) || !cJSON_IsNumber(s) ||
        !(fabs(b->valuedouble) <= 1e9) || b->valuedouble != floor(b->valuedouble)) /* an int, then */
      return osdp_fail("%s: field \"%s.points[%d]\" must be a pair [micro_batch, seconds] (a whole number, "
                       "then a number)", path, field, j);
    t->point_batch[l][j] = (int)b->valuedouble;
    t->point_s[l][j] = s->valuedouble;
  }
  t->npoints[l] = n;
  return 0;
}

/* Reads the optional "slices" array of entry i: {"k": 2|4|8, "fixed_s", "per_sample_s"}. */
static int json_op_slices(const cJSON* e, int i, const char* path, OpTime* t) {
  const cJSON* sl = cJSON_GetObjectItemCaseSensitive(e, "slices");
  if (!sl) return 0;
  if (!cJSON_IsArray(sl))
    return osdp_fail("%s: field \"compute.ops[%d].slices\" must be an array of {\"k\", \"fixed_s\", "
                     "\"per_sample_s\"}", path, i);
  char field[80];
  int j = 0;
  const cJSON* x;
  cJSON_ArrayForEach(x, sl) {
    int k = 0, l = 0;
    snprintf(field, sizeof field, "compute.ops[%d].slices[%d].k", i, j);
    if (json_integer(x, "k", field, 1, path, &k)) return -1;
    while (l < DEVICE_SLICE_LEVELS && (1 << l) != k) l++;
    if (l == 0 || l == DEVICE_SLICE_LEVELS)
      return osdp_fail("%s: field \"%s\" = %d must be 2, 4 or 8", path, field, k);
    snprintf(field, sizeof field, "compute.ops[%d].slices[%d].fixed_s", i, j);
    if (json_number(x, "fixed_s", field, 1, path, &t->fixed_s[l])) return -1;
    snprintf(field, sizeof field, "compute.ops[%d].slices[%d].per_sample_s", i, j);
    if (json_number(x, "per_sample_s", field, 1, path, &t->per_sample_s[l])) return -1;
    snprintf(field, sizeof field, "compute.ops[%d].slices[%d]", i, j);
    if (json_op_points(x, field, path, t, l)) return -1;
    t->measured[l] = 1;
    j++;
  }
  return 0;
}

/* Reads the optional share `key` of entry i of "compute.ops" (a pass's time over the op's
** forward+backward time: in (0, 1); absent: 0, not measured). */
static int json_share(const cJSON* e, const char* key, int i, const char* path, double* out) {
  char field[64];
  snprintf(field, sizeof field, "compute.ops[%d].%s", i, key);
  if (json_number(e, key, field, 0, path, out)) return -1;
  if (cJSON_GetObjectItemCaseSensitive(e, key) && !(*out > 0 && *out < 1))
    return osdp_fail("%s: field \"%s\" = %g must be in (0, 1): a pass's time over the op's forward+backward "
                     "time (leave it out to have it assumed)", path, field, *out);
  return 0;
}

/* Reads one entry of "compute.ops" into slot i. */
static int json_op_time(const cJSON* e, int i, const char* path, DeviceInfo* dev) {
  char field[64];
  OpTime* t = &dev->op_times[i];
  const cJSON* name = cJSON_GetObjectItemCaseSensitive(e, "name");
  if (!cJSON_IsString(name) || strlen(name->valuestring) >= sizeof t->name)
    return osdp_fail("%s: field \"compute.ops[%d].name\" must be an operator name (see osdp "
                     "describe) of at most %zu characters", path, i, sizeof t->name - 1);
  snprintf(t->name, sizeof t->name, "%s", name->valuestring);
  snprintf(field, sizeof field, "compute.ops[%d].fixed_s", i);
  if (json_number(e, "fixed_s", field, 1, path, &t->fixed_s[0])) return -1;
  snprintf(field, sizeof field, "compute.ops[%d].per_sample_s", i);
  if (json_number(e, "per_sample_s", field, 1, path, &t->per_sample_s[0])) return -1;
  t->measured[0] = 1;
  snprintf(field, sizeof field, "compute.ops[%d]", i);
  if (json_op_points(e, field, path, t, 0)) return -1;
  if (json_share(e, "forward_share", i, path, &t->forward_share)) return -1;
  return json_op_slices(e, i, path, t);
}

/* Reads the optional "compute" section of measured operator times. */
static int json_compute(const cJSON* root, const char* path, DeviceInfo* dev) {
  const cJSON* c = cJSON_GetObjectItemCaseSensitive(root, "compute");
  if (!c) return 0;
  if (!cJSON_IsObject(c))
    return osdp_fail("%s: field \"compute\" must be an object {\"model\", \"seq\", \"ops\"}", path);
  const cJSON* model = cJSON_GetObjectItemCaseSensitive(c, "model");
  if (!cJSON_IsString(model) || strlen(model->valuestring) >= sizeof dev->compute_model)
    return osdp_fail("%s: field \"compute.model\" must be the model's name (at most %zu characters)",
                     path, sizeof dev->compute_model - 1);
  snprintf(dev->compute_model, sizeof dev->compute_model, "%s", model->valuestring);
  if (json_integer(c, "seq", "compute.seq", 1, path, &dev->compute_seq)) return -1;
  if (json_integer(c, "max_batch", "compute.max_batch", 0, path, &dev->compute_max_batch)) return -1;
  if (dev->compute_max_batch < 0)
    return osdp_fail("%s: field \"compute.max_batch\" = %d must be the largest micro-batch the op "
                     "times were measured at (>= 1), or absent", path, dev->compute_max_batch);
  const cJSON* ops = cJSON_GetObjectItemCaseSensitive(c, "ops");
  if (!cJSON_IsArray(ops))
    return osdp_fail("%s: missing array \"compute.ops\" of {\"name\", \"fixed_s\", \"per_sample_s\"}", path);
  int n = cJSON_GetArraySize(ops);
  if (n == 0) return 0;
  if (device_alloc_op_times(dev, n)) return -1;
  for (int i = 0; i < n; i++)
    if (json_op_time(cJSON_GetArrayItem(ops, i), i, path, dev)) return -1;
  return 0;
}

/* Fills dev from a parsed device file. */
static int device_from_json(const cJSON* root, const char* path, DeviceInfo* dev) {
  int world_ranks = 0;
  dev->threads = 1;
  snprintf(dev->backend, sizeof dev->backend, "cpu");
  const cJSON* kind = cJSON_GetObjectItemCaseSensitive(root, "device");
  if (kind && (!cJSON_IsString(kind) || (strcmp(kind->valuestring, "cpu") && strcmp(kind->valuestring, "cuda"))))
    return osdp_fail("%s: field \"device\" must be \"cpu\" or \"cuda\"", path);
  if (kind) snprintf(dev->backend, sizeof dev->backend, "%s", kind->valuestring);
  const cJSON* prec = cJSON_GetObjectItemCaseSensitive(root, "precision");
  int pr = !prec ? PRECISION_FP32 : cJSON_IsString(prec) ? precision_parse(prec->valuestring) : -1;
  if (pr != PRECISION_FP32 && pr != PRECISION_BF16)
    return osdp_fail("%s: field \"precision\" must be \"fp32\" or \"bf16\" (the storage the op "
                     "times are for), or absent", path);
  dev->precision = (Precision)pr;
  if (json_integer(root, "ranks", "ranks", 1, path, &dev->ranks) ||
      json_integer(root, "ranks_per_host", "ranks_per_host", 0, path, &dev->ranks_per_host) ||
      (dev->ranks_per_host < 1 && cJSON_GetObjectItemCaseSensitive(root, "ranks_per_host") &&
       osdp_fail("%s: field \"ranks_per_host\" = %d must be >= 1 (the ranks on each host); omit "
                 "it for one host", path, dev->ranks_per_host)) ||
      json_mem_limit(root, path, &dev->mem_limit) ||
      json_integer(root, "threads", "threads", 0, path, &dev->threads) ||
      json_number(root, "flops", "flops", 1, path, &dev->flops) ||
      json_number(root, "optimizer_s_per_param", "optimizer_s_per_param", 0, path,
                  &dev->optimizer_s_per_param) ||
      json_level(root, "collectives", path, dev->coll, NULL, &dev->coll_ranks) ||
      json_level(root, "inter_host", path, dev->inter, dev->inter_given, &dev->inter_ranks) ||
      json_level(root, "world", path, dev->world, dev->world_given, &world_ranks) ||
      (world_ranks != 0 && world_ranks != dev->ranks &&
       osdp_fail("%s: field \"world.measured_ranks\" = %d must be ranks = %d (the world level is "
                 "measured over every rank), or omitted", path, world_ranks, dev->ranks)) ||
      json_compute(root, path, dev))
    return -1;
  return device_validate(dev, path) || device_check_ranges(dev, path) ? -1 : 0;
}

int device_load(DeviceInfo* dev, const char* path) {
  memset(dev, 0, sizeof *dev);
  cJSON* root = read_json_object(path, "--devices", "a device file is an object with ranks, "
                                 "mem_limit, flops and collectives (see osdp profile --out)");
  if (!root) return -1;
  int rc = device_from_json(root, path, dev);
  cJSON_Delete(root);
  if (rc) device_free(dev);
  return rc;
}

int device_parse(DeviceInfo* dev, const char* text, const char* where) {
  memset(dev, 0, sizeof *dev);
  const char* end = NULL;
  cJSON* root = cJSON_ParseWithOpts(text, &end, 0);
  if (!cJSON_IsObject(root)) {
    cJSON_Delete(root);
    return osdp_fail("%s: malformed JSON; a device file is an object with ranks, mem_limit, flops "
                     "and collectives (see osdp profile --out)", where);
  }
  if (json_check_one_meaning(root, text, end, where)) {
    cJSON_Delete(root);
    return -1;
  }
  int rc = device_from_json(root, where, dev);
  cJSON_Delete(root);
  if (rc) device_free(dev);
  return rc;
}

/* ---- Saving ------------------------------------------------------------------------------ */

/* Adds collective c's fields to object o. */
static void collective_to_json(cJSON* o, const CollectiveModel* c) {
  cJSON_AddNumberToObject(o, "latency_s", c->latency_s);
  cJSON_AddNumberToObject(o, "bandwidth_Bps", c->bandwidth_Bps);
  cJSON_AddNumberToObject(o, "overlap", c->overlap);
  cJSON_AddNumberToObject(o, "residual", c->residual);
  cJSON_AddNumberToObject(o, "in_step", c->in_step > 0 ? c->in_step : 1);
  if (c->async_in_step > 0) cJSON_AddNumberToObject(o, "async_in_step", c->async_in_step);
  if (c->bf16_factor > 0) cJSON_AddNumberToObject(o, "bf16_factor", c->bf16_factor);
  if (c->npoints > 0) {
    cJSON* pts = cJSON_AddArrayToObject(o, "points");
    for (int i = 0; i < c->npoints; i++) {
      double v[2] = {c->point_bytes[i], c->point_s[i]};
      cJSON_AddItemToArray(pts, cJSON_CreateDoubleArray(v, 2));
    }
  }
}

/* Adds level l's points of op time t to object o as "points", when it has any. */
static void op_points_to_json(cJSON* o, const OpTime* t, int l) {
  if (t->npoints[l] == 0) return;
  cJSON* pts = cJSON_AddArrayToObject(o, "points");
  for (int j = 0; j < t->npoints[l]; j++) {
    double v[2] = {t->point_batch[l][j], t->point_s[l][j]};
    cJSON_AddItemToArray(pts, cJSON_CreateDoubleArray(v, 2));
  }
}

/* Builds the JSON object of a device (the ranks per host and the measured rank counts written
** out, defaults resolved). */
static cJSON* device_to_json(const DeviceInfo* dev) {
  cJSON* root = cJSON_CreateObject();
  cJSON_AddNumberToObject(root, "ranks", dev->ranks);
  cJSON_AddNumberToObject(root, "ranks_per_host", device_ranks_per_host(dev));
  cJSON_AddNumberToObject(root, "mem_limit", (double)dev->mem_limit);
  cJSON_AddNumberToObject(root, "threads", dev->threads);
  cJSON_AddStringToObject(root, "device", dev->backend[0] ? dev->backend : "cpu");
  if (dev->precision != PRECISION_FP32)
    cJSON_AddStringToObject(root, "precision", precision_name(dev->precision));
  cJSON_AddNumberToObject(root, "flops", dev->flops);
  cJSON_AddNumberToObject(root, "optimizer_s_per_param", dev->optimizer_s_per_param);
  cJSON* c = cJSON_AddObjectToObject(root, "collectives");
  cJSON_AddNumberToObject(c, "measured_ranks", device_link_ranks(dev, LINK_INTRA, 0));
  for (int k = 0; k < COLL_COUNT; k++) collective_to_json(cJSON_AddObjectToObject(c, coll_names[k]), &dev->coll[k]);
  int any = 0;
  for (int k = 0; k < COLL_COUNT; k++) any |= dev->inter_given[k];
  if (world_measured(dev)) {
    cJSON* w = cJSON_AddObjectToObject(root, "world");
    cJSON_AddNumberToObject(w, "measured_ranks", dev->ranks);
    for (int k = 0; k < COLL_COUNT; k++)
      if (dev->world_given[k]) collective_to_json(cJSON_AddObjectToObject(w, coll_names[k]), &dev->world[k]);
  }
  if (any) {
    cJSON* x = cJSON_AddObjectToObject(root, "inter_host");
    int m = 0;
    for (int k = 0; k < COLL_COUNT && !m; k++)
      if (dev->inter_given[k]) m = device_link_ranks(dev, LINK_INTER, k);
    cJSON_AddNumberToObject(x, "measured_ranks", m);
    for (int k = 0; k < COLL_COUNT; k++)
      if (dev->inter_given[k]) collective_to_json(cJSON_AddObjectToObject(x, coll_names[k]), &dev->inter[k]);
  }
  if (dev->n_op_times > 0) {
    cJSON* comp = cJSON_AddObjectToObject(root, "compute");
    cJSON_AddStringToObject(comp, "model", dev->compute_model);
    cJSON_AddNumberToObject(comp, "seq", dev->compute_seq);
    if (dev->compute_max_batch > 0) cJSON_AddNumberToObject(comp, "max_batch", dev->compute_max_batch);
    cJSON* ops = cJSON_AddArrayToObject(comp, "ops");
    for (int i = 0; i < dev->n_op_times; i++) {
      const OpTime* t = &dev->op_times[i];
      cJSON* e = cJSON_CreateObject();
      cJSON_AddStringToObject(e, "name", t->name);
      cJSON_AddNumberToObject(e, "fixed_s", t->fixed_s[0]);
      cJSON_AddNumberToObject(e, "per_sample_s", t->per_sample_s[0]);
      op_points_to_json(e, t, 0);
      if (t->forward_share > 0) cJSON_AddNumberToObject(e, "forward_share", t->forward_share);
      cJSON* sl = NULL;
      for (int l = 1; l < DEVICE_SLICE_LEVELS; l++) {
        if (!t->measured[l]) continue;
        if (!sl) sl = cJSON_AddArrayToObject(e, "slices");
        cJSON* x = cJSON_CreateObject();
        cJSON_AddNumberToObject(x, "k", 1 << l);
        cJSON_AddNumberToObject(x, "fixed_s", t->fixed_s[l]);
        cJSON_AddNumberToObject(x, "per_sample_s", t->per_sample_s[l]);
        op_points_to_json(x, t, l);
        cJSON_AddItemToArray(sl, x);
      }
      cJSON_AddItemToArray(ops, e);
    }
  }
  return root;
}

char* device_to_text(const DeviceInfo* dev) {
  cJSON* root = device_to_json(dev);
  char* s = cJSON_Print(root);
  cJSON_Delete(root);
  size_t n = s ? strlen(s) : 0;
  char* text = s ? realloc(s, n + 2) : NULL;
  if (!text) {
    free(s);
    osdp_fail("out of memory writing a device file");
    return NULL;
  }
  memcpy(text + n, "\n", 2);
  return text;
}

int device_save(const DeviceInfo* dev, const char* path) {
  char* text = device_to_text(dev);
  int rc = text ? write_file_atomic(path, text, "--out") : -1;
  free(text);
  return rc;
}

double device_reduce_factor(const DeviceInfo* dev, int kind, int bf16) {
  if (!bf16) return 1.0;
  double f = dev->coll[kind].bf16_factor;
  return f > 0 ? f : 0.5;
}
