/*
** util.h: small services every module uses: error reporting, sizes, time, random numbers.
**
** Errors: library functions never print or exit. They record a one-line message with
** osdp_fail() and return -1 (or NULL); the command-line layer prints it and exits non-zero.
*/
#ifndef OSDP_UTIL_H
#define OSDP_UTIL_H

#include <stddef.h>
#include <stdint.h>

/* Records a printf-style one-line error message and returns -1. */
int osdp_fail(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
/* The message recorded by the last osdp_fail() ("" if none). */
const char* osdp_last_error(void);
/* Clears the recorded error. */
void osdp_clear_error(void);

/* Parses a byte size such as "512MiB", "1.5GB", "8G", "4096" (binary units for Ki/Mi/Gi/Ti
** and for bare K/M/G/T, decimal for KB/MB/GB/TB). Returns 0 on success, -1 with an error
** naming `field` otherwise. */
int parse_size(const char* s, const char* field, size_t* out);
/* Parses a strictly positive int; on failure records an error naming `field`. */
int parse_int(const char* s, const char* field, long lo, long hi, long* out);
/* Parses a finite double; on failure records an error naming `field`. */
int parse_double(const char* s, const char* field, double* out);
/* Formats a byte count for people, e.g. "1.50 GiB" or "812 B". Returns buf. */
char* format_bytes(double bytes, char buf[32]);

/* Reads the regular file path, of at most max_bytes, as a NUL-terminated heap string the caller
** frees. NULL with a one-line error otherwise: "<name>: cannot open: ...", "<name>: read
** error", "<name>: larger than <max>; <hint>", where name says what the file is ("PATH",
** "safetensors: index 'PATH'"). A file that grows while it is read is seen as too large. */
char* read_text_bounded(const char* path, size_t max_bytes, const char* name, const char* hint);

/* Reads a JSON file whose top level must be an object. Returns the parsed cJSON object (the
** caller cJSON_Delete's it), or NULL with an error naming the file: unreadable (naming
** `field`), "malformed JSON; <shape>" where shape says what the file should hold, or a
** document that means two things (json_check_one_meaning). */
struct cJSON* read_json_object(const char* path, const char* field, const char* shape);

/* One meaning per JSON document: after a parse that stopped at `end` (cJSON's return_parse_end;
** NULL: not checked) only whitespace may follow, and no object in root may name a key twice
** (cJSON would read the first and drop the rest: "model_type" twice built GPT-2 where
** transformers builds Llama). Returns 0, or -1 with an error "<what>: ..." naming the key or the
** byte where the extra content starts. */
int json_check_one_meaning(const struct cJSON* root, const char* text, const char* end,
                           const char* what);

/* Writes text to path as an output (core/output.h: atomically into a temporary file beside it,
** flushed, fsynced and renamed over it; through a symlink; directly into a device or fifo). On
** any failure (a full disk, an unwritable directory) the temporary file is removed, an existing
** file at path is left as it was, and the error names `field` (the option, e.g. "--out"), the
** path and the reason. Returns 0 or -1. */
int write_file_atomic(const char* path, const char* text, const char* field);
/* Checks, before long work starts, that path can be written (out_check_writable); -1 with an
** error naming `field` otherwise. */
int check_writable(const char* path, const char* field);
/* Bytes of memory this host has available now (MemAvailable; else physical memory), 0 unknown. */
size_t host_available_bytes(void);

/* The median of v[0..n) (sorts v in place); 0 when n is 0. Timings use it: noise from other
** processes only ever adds time, and the median ignores a few such outliers. */
double median_of(double* v, int n);

/* FNV-1a 64 of n bytes at p, continued from h (start with FNV1A64_START): the checksum of
** checkpoint files, data files and the ranks' agreement. */
#define FNV1A64_START 0xcbf29ce484222325ULL
uint64_t fnv1a64(uint64_t h, const void* p, size_t n);

/* mkdir -p of path, then a check that it is a directory; -1 with an error naming field. */
int make_dirs(const char* path, const char* field);

/* Monotonic wall-clock time in seconds. */
double now_seconds(void);

/* Deterministic random numbers (splitmix64-seeded xoshiro256**), identical on every host. */
typedef struct Rng { uint64_t s[4]; } Rng;
void rng_seed(Rng* r, uint64_t seed);
uint64_t rng_next(Rng* r);
/* Uniform in [0, 1). */
double rng_uniform(Rng* r);
/* Standard normal (Box-Muller). */
double rng_normal(Rng* r);
/* Uniform integer in [0, n). */
uint64_t rng_below(Rng* r, uint64_t n);

#endif
