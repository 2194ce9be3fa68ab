/*
** svg_out.h: writing SVG text safely to an output file opened with core/output.h, for the
** pictures osdp draws by hand (plan_svg.c: a plan's memory and strategies; run_plot.c: training
** runs). Every write is printf-style and checked once at the end (the first failure's errno is
** kept); text and attribute values are XML-escaped, bytes that are not UTF-8 shown as '?', so
** whatever a name or title holds, the file stays well-formed XML.
*/
#ifndef OSDP_SVG_OUT_H
#define OSDP_SVG_OUT_H

#include <stdio.h>

#include "core/output.h"

/* SvgOut.flags: tab, newline and DEL written as they are (XML allows them; the plan picture has
** always kept them) instead of as '?' like every other control character. */
#define SVG_KEEP_TAB_NL_DEL 1

/* The output file, whether any write to it has failed (checked once at the end), and how its
** text is escaped. */
typedef struct SvgOut {
  FILE* f;
  int err;   /* errno of the first failed write, or 0 */
  int flags; /* 0 or SVG_KEEP_TAB_NL_DEL */
} SvgOut;

/* Writes printf-style text to the file, remembering the first failure. */
void svg_emit(SvgOut* o, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
/* Writes at most max characters of s (0: all; "..." marks a cut) with XML's special characters
** escaped (for text and attribute values), bytes that are not UTF-8 and control characters as
** '?' (tab, newline and DEL kept under SVG_KEEP_TAB_NL_DEL). */
void svg_escaped(SvgOut* o, const char* s, int max);
/* Writes one <text> element holding s, escaped; attrs are extra attributes (font size, fill). */
void svg_text(SvgOut* o, double x, double y, const char* anchor, const char* attrs,
              const char* s);
/* Ends writing o to out (opened by out_open for path under option field): rc is the drawing's
** result; a failed write makes it an error naming field and path. Commits out when all went
** well, else abandons it. Returns 0, or -1 with an error. */
int svg_finish(SvgOut* o, OutFile* out, const char* field, const char* path, int rc);

/* Length of the valid UTF-8 sequence starting at s (1-4 bytes), or 0 when s does not start one
** (a stray continuation byte, an overlong or truncated sequence, a surrogate). */
int svg_utf8_seq(const unsigned char* s);
/* A round tick spacing in bytes (1, 2 or 5 times a power of ten of a binary unit: 512 KiB,
** 2 MiB, ...) that cuts span into about target intervals. */
double svg_nice_bytes(double span, int target);
/* A byte count for an axis: format_bytes without a ".00" that adds nothing ("14 MiB"). */
char* svg_axis_bytes(double b, char buf[32]);

#endif
