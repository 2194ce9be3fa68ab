/*
** st_files.h (private to src/model): the reading layer of safetensors.c. What a reader must
** check in one safetensors file before trusting it (st_open), the files of one checkpoint as
** one set of tensors (st_set_open: a single file, or a Hugging Face sharded checkpoint through
** its model.safetensors.index.json), and tensor elements read as fp32 whatever their float
** dtype (F32, BF16, F16).
**
** A sharded checkpoint: DIR/model.safetensors.index.json holds {"metadata": {...} (optional,
** ignored), "weight_map": {"tensor name": "shard file name", ...}}, the shards being files of
** DIR (plain names). Every tensor the map names must be in the shard it names, every tensor of
** a shard must be in the map with that shard, and no tensor may be named twice; each shard is
** a complete safetensors file checked as st_open checks one.
*/
#ifndef OSDP_ST_FILES_H
#define OSDP_ST_FILES_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

struct cJSON;

#define ST_MAX_DIMS 16
/* The most tensors one safetensors file may hold: far more than any model's (Llama 3 405B has
** about 1,100 in all), few enough that a header of a million empty tensors (60 MB of text, 1 GB
** of parsed JSON) is refused before it is parsed. */
#define ST_MAX_TENSORS (1 << 16)

typedef struct StFile StFile;

/* One tensor of a file's header. */
typedef struct StTensor {
  const char* name;  /* the header's key (points into its StFile's root) */
  const char* dtype; /* the header's dtype (likewise) */
  size_t elem;       /* bytes per element of dtype */
  int ndim;
  uint64_t shape[ST_MAX_DIMS];
  uint64_t begin, end; /* data_offsets, relative to the buffer after the header */
  const StFile* file;  /* the file holding it */
} StTensor;

/* An open safetensors file whose header has been checked. */
struct StFile {
  const char* path;
  FILE* f;
  uint64_t data_start;     /* 8 + N: where the buffer starts in the file */
  struct cJSON* root;      /* the parsed header */
  const struct cJSON* meta;/* its "__metadata__" object, or NULL */
  StTensor* t;             /* sorted by name */
  int n;
};

/* The tensors of one checkpoint: one file, or the shards of an index. */
typedef struct StSet {
  char* path;         /* the file or index read, for messages */
  char* dir;          /* the directory holding it (config.json and shards live there) */
  int is_index;
  StFile* files;
  char** file_paths;  /* files[i].path */
  int nfiles;
  const StTensor** t; /* every tensor of every file, sorted by name (names are unique) */
  int n;
  const struct cJSON* meta; /* the first file's __metadata__, or NULL */
} StSet;

/* Opens safetensors file path (which must outlive s) and checks its header against the file's
** real size before allocating anything of the sizes it claims. Returns 0, or -1 with s closed. */
int st_open(StFile* s, const char* path);
void st_close(StFile* s);

/* Opens the checkpoint at path: a safetensors file, an index (a JSON file), or a directory
** holding model.safetensors.index.json or else model.safetensors. Returns 0, or -1 with a
** one-line error (nothing left open). */
int st_set_open(StSet* set, const char* path);
void st_set_close(StSet* set);
/* The checkpoint file a directory holds (index first) into out; 1 when there is one, 0 when
** the directory holds neither. */
int st_dir_weights(const char* dir, char* out, size_t n);
/* Whether the regular file at path holds JSON text (an index: its first non-blank byte is '{'
** or '['), not a safetensors file (8 bytes of a header size within the file, then '{'). */
int st_is_index_file(const char* path);

/* The set's tensor called name (exact), or NULL. */
const StTensor* st_set_find(const StSet* set, const char* name);

/* Whether dtype is one osdp reads (converted to fp32): F32, BF16 or F16. */
int st_float_dtype(const char* dtype);
/* Reads count elements of tensor t from element `first` on into out as fp32 (F32 copied, BF16
** and F16 converted exactly), through `scratch` (cap 16-bit elements). t's dtype must be one
** st_float_dtype accepts. Returns 0, or -1 with an error naming the file. */
int st_read_floats(const StTensor* t, uint64_t first, size_t count, float* out, uint16_t* scratch,
                   size_t cap);

#endif
