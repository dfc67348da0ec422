/* What the checkpoint files share (src/train/checkpoint_format.c, checkpoint_state.c,
 * checkpoint_resume.c): the names of the tensors, the bundle of tensors and metadata written,
 * and the pieces of reading a file back. */
#ifndef TSR_TRAIN_CHECKPOINT_IMPL_H
#define TSR_TRAIN_CHECKPOINT_IMPL_H

#include <stdbool.h>
#include <stdint.h>

#include "io/safetensors.h"
#include "nn/layers.h"
#include "nn/net_impl.h"
#include "tessera/checkpoint.h"
#include "tessera/train.h"

#define TSR_CKPT_FORMAT "tessera-checkpoint/1"
#define TSR_CKPT_MAX_META 72 /* keys besides the per-tensor checksums */

/* ---- names ---- */

/* Parameter k of layer l by its type's names: layers.<i>.<type>.<name> (weight, bias). */
void tsr__ckpt_param_name(const tsr_layer_t *l, int k, char *buf, size_t size);
/* The names and count below, of a layer as laid out (src/nn/layout.h: no net built), which the
 * built layer's are: what a file must hold is known before StarPU starts. */
void tsr__ckpt_layout_param_name(const tsr_layout_layer_t *ll, int k, char *buf, size_t size);
void tsr__ckpt_layout_state_name(const tsr_layout_layer_t *ll, int k, char *buf, size_t size);
int tsr__ckpt_layout_state_count(const tsr_layout_layer_t *ll);
/* A layer's non-trained state by its type's (PyTorch's) names: buffer k, or the counter (k ==
 * l->nbuffers), layers.<i>.<type>.<name>. */
void tsr__ckpt_state_name(const tsr_layer_t *l, int k, char *buf, size_t size);
/* Tensors of l's non-trained state: its buffers, and its counter if its type has one. */
int tsr__ckpt_state_count(const tsr_layer_t *l);
/* The prefix of replica q's optimizer state in a file whose states are per replica: ranks
 * without a grid, grid columns under one (optimizer.rank<q>. or optimizer.column<q>.). */
void tsr__ckpt_replica_prefix(char *buf, size_t size, bool columns, int q);
/* Replica q's own copy of tensor name (a parameter or a buffer) in a file written between
 * averages, where the replicas differ: replica.rank<q>.<name> (replica 0's is the plain one). */
void tsr__ckpt_replica_weights(char *buf, size_t size, int q, const char *name);

/* ---- a growing list of tensors and metadata ---- */

typedef struct {
  tsr_st_tensor_t *t;
  float **owned; /* the copies of the tensors' data */
  char (*names)[160];
  int n, cap;
  tsr_st_meta_t *meta;
  char (*keys)[176], **values; /* values: owned, each of its own length */
  int nmeta, capmeta;
} tsr__ckpt_bundle_t;

/* Adds metadata key = the printf of fmt. */
int tsr__ckpt_add_meta(tsr__ckpt_bundle_t *b, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Adds data ((rows, cols), taken) as tensor name, and its checksum. */
int tsr__ckpt_add_data(tsr__ckpt_bundle_t *b, const char *name, int64_t rows, int64_t cols,
                       float *data);
/* Adds v as a scalar tensor name (shape [], as PyTorch stores a counter), and its checksum;
 * exact below 2^24. */
int tsr__ckpt_add_scalar(tsr__ckpt_bundle_t *b, const char *name, double v);
/* Adds a copy of matrix t (read through the runtime) as tensor name, and its checksum. */
int tsr__ckpt_add_tensor(tsr__ckpt_bundle_t *b, const char *name, const tsr_tiles_t *t);
/* A bundle of room for `tensors` tensors and their checksums beside the run's metadata, and
 * its release. */
void tsr__ckpt_bundle_fini(tsr__ckpt_bundle_t *b);
int tsr__ckpt_bundle_init(tsr__ckpt_bundle_t *b, int tensors);
/* The run's metadata: the model, its inputs and standardization, the optimizer, where the run
 * stands and how it was set (info). */
int tsr__ckpt_add_state_meta(tsr__ckpt_bundle_t *b, const tsr_net_t *net,
                             const tsr_checkpoint_info_t *in);

/* ---- reading ---- */

/* The whole number at *s (moved past it) in [lo, hi]. */
int tsr__ckpt_whole_at(const char **s, const char *path, const char *key, int64_t lo, int64_t hi,
                       int64_t *v, tsr_errbuf_t *err);
/* The end of a value read: nothing after the number. */
int tsr__ckpt_at_end(const char *s, const char *path, const char *key, tsr_errbuf_t *err);
/* Metadata key as one whole number in [lo, hi]. */
int tsr__ckpt_meta_int(const tsr_st_file_t *f, const char *path, const char *key, int64_t lo,
                       int64_t hi, int64_t *v, tsr_errbuf_t *err);
/* 0 when name (the file's "optimizer", may be NULL) is registered, filling *opt (may be NULL)
 * with its defaults; else a message naming it and the known ones. */
int tsr__ckpt_known_optimizer(const char *name, const char *path, tsr_optimizer_t *opt,
                              tsr_errbuf_t *err);
/* Opens path, checks that it is a tessera checkpoint and every tensor's checksum. */
int tsr__ckpt_open_checked(tsr_st_file_t **out, const char *path, tsr_errbuf_t *err);
/* The run's metadata of f into *info, every number range-checked. */
int tsr__ckpt_read_info(const tsr_st_file_t *f, const char *path, tsr_checkpoint_info_t *info,
                        tsr_errbuf_t *err);
/* The tensor name of f, borrowed from f into *data, after checking it has the shape of a (rows,
 * cols) matrix: [cols] when rows is 1, else [rows, cols]. */
int tsr__ckpt_find_shaped(const tsr_st_file_t *f, const char *path, const char *name, int64_t rows,
                          int64_t cols, const float **data, tsr_errbuf_t *err);
/* Copies tensor name of f into matrix t, whose shape it must have. */
int tsr__ckpt_load_tensor(const tsr_st_file_t *f, const char *path, const char *name,
                          tsr_tiles_t *t, tsr_errbuf_t *err);
/* The tensor name of f into the (rows, cols) row-major buffer *data (borrowed from f), after
 * checking its size. */
int tsr__ckpt_find_sized(const tsr_st_file_t *f, const char *path, const char *name, int64_t count,
                         const float **data, tsr_errbuf_t *err);
/* *n = the scalar tensor name of f: a whole number in [0, 2^24] (what a float holds exactly). */
int tsr__ckpt_load_counter(const tsr_st_file_t *f, const char *path, const char *name, int64_t *n,
                           tsr_errbuf_t *err);
/* Replica q's step count in a file of every replica's optimizer state (metadata
 * optimizer_steps_columns where columns, else optimizer_steps_ranks: one whole number per replica,
 * space-separated) into *steps; -1 when the file has no such list (it keeps the plain count). */
int tsr__ckpt_replica_steps(const tsr_st_file_t *f, const char *path, bool columns, int q,
                            int64_t *steps, tsr_errbuf_t *err);
/* Layer l's state of its own (tsr__ckpt_state_count: batchnorm's running statistics and its
 * batch count) from f. */
int tsr__ckpt_load_layer_state(const tsr_st_file_t *f, const char *path, tsr_layer_t *l,
                               tsr_errbuf_t *err);

#endif
