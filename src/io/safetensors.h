/* Safetensors files (https://github.com/huggingface/safetensors): an 8-byte
 * little-endian header length N, N bytes of JSON header, then the byte
 * buffer. The header maps each tensor's name to {"dtype", "shape",
 * "data_offsets": [begin, end)} (offsets relative to the buffer), plus an
 * optional "__metadata__" object of string values. tessera writes and reads
 * float32 tensors (dtype "F32"), little-endian, row-major.
 *
 * The reader trusts nothing: the header length (at most 100 MB, inside the
 * file), the JSON, every name (unique, not empty), dtype, shape and offsets
 * (inside the buffer, matching the shape, not overlapping, covering the
 * buffer without holes) are checked, and a bad file is refused with a
 * message naming the file and the defect. The writer writes atomically: a
 * temporary file in the same folder, fsync'ed, renamed over the target, and
 * the folder fsync'ed, so a crash leaves the old file or the new one. The
 * temporary file is PATH.tmp.PID.XXXXXX; one left by a writer killed before
 * its rename is removed by the next write of the same path (issue 20). Names
 * are indexed by hash: reading is linear in the number of tensors and keys. */
#ifndef TSR_IO_SAFETENSORS_H
#define TSR_IO_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "tessera/error.h"

#define TSR_ST_MAX_HEADER (100u << 20)
#define TSR_ST_MAX_DIMS 8

typedef struct {
  const char *name;
  int ndims;
  int64_t shape[TSR_ST_MAX_DIMS];
  const float *data; /* product of shape floats */
} tsr_st_tensor_t;

typedef struct {
  const char *key, *value;
} tsr_st_meta_t;

/* Writes tensors and metadata to path atomically (see above). */
int tsr__st_write(const char *path, const tsr_st_tensor_t *tensors, int ntensors,
                  const tsr_st_meta_t *meta, int nmeta, tsr_errbuf_t *err);

typedef struct tsr_st_file tsr_st_file_t;

/* Reads and checks path; *f is owned by the caller (tsr__st_close). */
int tsr__st_open(tsr_st_file_t **f, const char *path, tsr_errbuf_t *err);
/* The same from memory (bytes copied): what the file checks see; name is
 * used in messages. */
int tsr__st_parse(tsr_st_file_t **f, const void *bytes, size_t size, const char *name,
                  tsr_errbuf_t *err);
void tsr__st_close(tsr_st_file_t **f);

int tsr__st_count(const tsr_st_file_t *f);
/* Tensor i (in offset order), its data pointing into f. */
void tsr__st_tensor(const tsr_st_file_t *f, int i, tsr_st_tensor_t *t);
/* The index of the tensor named name, or -1. */
int tsr__st_find(const tsr_st_file_t *f, const char *name);
/* The metadata value of key, or NULL; and the k-th entry (k < tsr__st_nmeta). */
const char *tsr__st_meta(const tsr_st_file_t *f, const char *key);
int tsr__st_nmeta(const tsr_st_file_t *f);
tsr_st_meta_t tsr__st_meta_at(const tsr_st_file_t *f, int k);

#endif
