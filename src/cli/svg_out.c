/*
** svg_out.c: the SVG writing primitives the hand-drawn pictures share (see svg_out.h): checked
** printf-style writes, XML escaping that keeps the file well-formed, <text> elements, the end
** of the output, and the small helpers both pictures' axes and labels use.
*/
#include "cli/svg_out.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "core/output.h"
#include "core/util.h"

/* Writes printf-style text, keeping the first failure's errno for svg_finish. */
void svg_emit(SvgOut* o, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  if (vfprintf(o->f, fmt, ap) < 0 && !o->err) o->err = errno ? errno : EIO;
  va_end(ap);
}

/* How many bytes the UTF-8 character at s has (0: not UTF-8), so text is cut and escaped by
** whole characters. */
int svg_utf8_seq(const unsigned char* s) {
  if (s[0] < 0x80) return 1;
  int n = s[0] >= 0xF0 && s[0] <= 0xF4 ? 4 : s[0] >= 0xE0 ? 3 : s[0] >= 0xC2 && s[0] < 0xE0 ? 2 : 0;
  for (int i = 1; i < n; i++)
    if ((s[i] & 0xC0) != 0x80) return 0;
  if (n == 3 && ((s[0] == 0xE0 && s[1] < 0xA0) || (s[0] == 0xED && s[1] >= 0xA0))) return 0;
  if (n == 4 && ((s[0] == 0xF0 && s[1] < 0x90) || (s[0] == 0xF4 && s[1] >= 0x90))) return 0;
  return n;
}

/* Whether byte c is a control character svg_escaped shows as '?' under o's flags. */
static int hidden_control(const SvgOut* o, unsigned char c) {
  if (c >= 0x20 && c != 0x7F) return 0;
  return !((o->flags & SVG_KEEP_TAB_NL_DEL) && (c == '\t' || c == '\n' || c == 0x7F));
}

/* Writes s (at most max characters) escaped, so that no name or title breaks the XML. */
void svg_escaped(SvgOut* o, const char* s, int max) {
  const unsigned char* p = (const unsigned char*)s;
  for (int chars = 0; *p; chars++) {
    int n = svg_utf8_seq(p);
    if (max && chars == max) { svg_emit(o, "..."); return; }
    if (n == 0 || hidden_control(o, *p)) { svg_emit(o, "?"); p++; continue; }
    switch (*p) {
      case '&': svg_emit(o, "&amp;"); break;
      case '<': svg_emit(o, "&lt;"); break;
      case '>': svg_emit(o, "&gt;"); break;
      case '"': svg_emit(o, "&quot;"); break;
      case '\'': svg_emit(o, "&apos;"); break;
      default: svg_emit(o, "%.*s", n, (const char*)p);
    }
    p += n;
  }
}

/* Writes one <text> element with s escaped: the pictures' every label. */
void svg_text(SvgOut* o, double x, double y, const char* anchor, const char* attrs,
              const char* s) {
  svg_emit(o, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"%s\" %s>", x, y, anchor, attrs);
  svg_escaped(o, s, 0);
  svg_emit(o, "</text>\n");
}

/* Turns a failed write into an error and commits or abandons the file, so a picture is
** either written whole or not at all. */
int svg_finish(SvgOut* o, OutFile* out, const char* field, const char* path, int rc) {
  if (!rc && o->err) rc = osdp_fail("%s: error writing '%s': %s", field, path, strerror(o->err));
  if (rc) {
    out_abort(out);
    return rc;
  }
  return out_commit(out);
}

/* A round byte spacing for an axis's ticks (binary units, 1-2-5 steps). */
double svg_nice_bytes(double span, int target) {
  static const double c[] = {1, 2, 5, 10, 20, 50, 100, 200, 500, 1024};
  double raw = span / target, unit = 1;
  if (raw <= 1) return 1;
  while (raw / unit >= 1024) unit *= 1024;
  for (size_t i = 0; i < sizeof c / sizeof c[0]; i++)
    if (c[i] * unit >= raw) return c[i] * unit;
  return 1024 * unit;
}

/* A tick's byte label, without a ".00" that adds nothing. */
char* svg_axis_bytes(double b, char buf[32]) {
  format_bytes(b, buf);
  char* z = strstr(buf, ".00 "); /* "14.00 MiB" -> "14 MiB" */
  if (z) memmove(z, z + 3, strlen(z + 3) + 1);
  return buf;
}
