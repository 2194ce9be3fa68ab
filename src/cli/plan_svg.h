/*
** plan_svg.h: a plan drawn as a plain SVG file (`osdp describe --svg`, `osdp plan --svg`).
**
** The picture has three panels over one training step of one rank:
**   1. memory: the persistent bands (params, grads, optimizer state, activations, backward
**      scratch: all allocated at engine creation, so constant over the step) stacked from 0,
**      and on top the transient bytes (gathered weights, full gradients) live at each
**      parameter use, from plan_transient_timeline; the limit as a line, the peak marked;
**   2. the transient alone on its own scale, so op-by-op changes stay visible;
**   3. each operator's strategy per slice (k cells per operator, model order).
** The root <svg> element carries the numbers as attributes (data-peak-bytes,
** data-params-bytes, ..., data-limit-bytes when there is a limit), so tests can compare the
** picture with `osdp describe --json`.
*/
#ifndef OSDP_PLAN_SVG_H
#define OSDP_PLAN_SVG_H

#include <stddef.h>

#include "model/gpt.h"
#include "model/plan.h"

/* Writes plan p of model d, predicted with `threads` kernel threads, to path as SVG, with
** `title` as its heading and mem_limit (0: none) as the limit line. The file is written to
** PATH.tmp and renamed, so path is either the whole picture or untouched. Returns 0, or -1
** with a one-line error naming --svg and the path. */
int plan_svg_write(const char* path, const GptDesc* d, const Plan* p, int threads,
                   size_t mem_limit, const char* title);

#endif
