/*
** plan_table.h: the plan as a table a person can read (`osdp plan`). Consecutive transformer
** layers whose ops all have identical plans print as one block ("h1-h47 (47 layers)") with one
** row per op kind; embed and lnf are single rows. Per row: the slices ("4 x zero2 + 4 x zero3"),
** the bytes kept between steps, the largest transient, the search model's time and, for
** sharded ops, a few words on why (planner_explain). `osdp plan --json` keeps every op.
*/
#ifndef OSDP_PLAN_TABLE_H
#define OSDP_PLAN_TABLE_H

#include <stddef.h>
#include <stdio.h>

#include "model/gpt.h"
#include "model/plan.h"
#include "planner/device.h"
#include "planner/search.h"

/* An op's slices in a few words, runs of equal strategies in slice order: "dp", "zero3",
** "8 x zero3", "4 x zero2 + 4 x zero3". Truncated to fit n bytes. */
void plan_slices_text(const OpPlan* o, char* buf, size_t n);

/* Prints plan p of model d as the table described above (a header line, the rows, and a line
** saying what the columns mean) to f. */
void plan_table_print(FILE* f, const GptDesc* d, const DeviceInfo* dev, const SearchOptions* so,
                      const Plan* p);

#endif
