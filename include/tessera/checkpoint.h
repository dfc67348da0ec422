/* Checkpoints: a network's parameters, its optimizer's state and where
 * training stands, in one safetensors file (README, "Checkpoints").
 *
 * Tensors: `layers.<i>.<type>.weight` and `.bias` for the layer at position
 * i (0-based) of the model description, and `optimizer.<parameter>.<state>`
 * for the optimizer's state (its registry entry names them, PyTorch's names:
 * momentum_buffer, exp_avg, exp_avg_sq; tessera/optim.h). The metadata holds
 * the model (as an INI model file), the input shape and standardization (its kind, and a mean
 * and std, or one per column, space-separated), the
 * optimizer (its registered name), its hyper-parameters and step count, where
 * training stands (tsr_checkpoint_info_t), and a CRC-32 per tensor, checked
 * on load. */
#ifndef TESSERA_CHECKPOINT_H
#define TESSERA_CHECKPOINT_H

#include <stdbool.h>
#include <stdint.h>

#include "tessera/data.h"
#include "tessera/dist.h"
#include "tessera/error.h"
#include "tessera/net.h"

TSR_EXTERN_C_BEGIN

/* What the schedules that follow the validation loss hold between epochs (tsr_train keeps it,
 * checkpoints record it so that a resumed run goes on bitwise): reduce-on-plateau's and early
 * stopping's lowest loss and epochs without improvement. tsr_schedule_state_init starts it. */
typedef struct {
  double lr_factor;     /* plateau: the reductions so far (1, factor, factor^2, ...) */
  double plateau_best;  /* plateau: the lowest validation loss so far (+inf: none yet) */
  int plateau_bad;      /* plateau: epochs since it improved by the threshold */
  double early_best;    /* early stopping: the lowest validation loss so far (+inf: none yet) */
  int early_best_epoch; /* the epoch that had it (0: none) */
  int early_bad;        /* epochs since a lower one */
} tsr_schedule_state_t;

typedef struct {
  /* Where training stands. */
  int epoch;             /* epochs completed */
  int64_t step_in_epoch; /* steps of epoch + 1 already taken (0 at an epoch end) */
  int epochs;            /* the epochs the run was asked for */
  int schedule_epochs;   /* the schedule's horizon (tsr_train_opts_t.schedule_epochs as the run
                            took it: its epochs without one); reading a file of before: 0 */
  uint64_t seed;         /* of the epochs' sample orders */
  tsr_lr_schedule_t lr_schedule;
  float base_lr; /* the rate the schedule runs around (after scaling by the ranks) */
  char sync[64]; /* the synchronization policy; "none" for one process */
  int ranks;     /* ranks training when it was written */
  int grid_rows; /* Pr of its --grid PrxPc (1: none); the file holds whole tensors either way */
  /* What it was written for. */
  char model[256];             /* tsr_model_describe of the net */
  char data[128];              /* tsr_dataset_fingerprint of the training set, or "" */
  float input_mean, input_std; /* the scalar standardization the inputs got (tsr_dataset_stats);
                                  0 and 1 when it was per column or none */
  /* Saving: how the inputs were standardized (borrowed), or NULL for the scalar input_mean and
   * input_std. Loading and reading leave it NULL: tsr_checkpoint_read_standardization. */
  const tsr_standardization_t *standardization;
  char version[16]; /* tessera's version that wrote it */
  /* Saving: the command line that ran (borrowed), or NULL; the file also records the commit
   * tessera was built from (tessera_commit) and when it was written (written, UTC). */
  const char *command;
  /* What it holds of the replicas under MPI (docs/checkpoints.md). */
  int state_ranks;     /* the optimizer states it holds: 1, one for every rank (one process,
                          batch); one per replica under local SGD, each rank's own (ranks), or
                          under a grid each grid column's own (the columns; state_columns); 0,
                          unknown: written before issue 20, rank 0's only under weight
                          averaging */
  bool state_columns;  /* state_ranks counts grid columns (optimizer.column<q>. tensors) */
  bool outer_momentum; /* the outer optimizer's momentum (outer.<parameter>.momentum) */
  bool final_average;  /* written after the last epoch's average, one the schedule would not
                          have taken there (async-epoch's; every=K, epoch=n off their count) */
  /* Validation and schedules (docs/checkpoints.md): the fraction of the training set held out
   * (--val-split; 0: none) and how many samples that was; the schedule's parameters and the
   * state of those that follow the validation loss (has_schedule_state: written by a run with
   * plateau or early stopping; else schedule_state reads as tsr_schedule_state_init's). */
  double val_split;
  int64_t val_samples;
  int64_t val_from;   /* the training samples the split was drawn from (after --train-limit) */
  char val_data[128]; /* tsr_dataset_fingerprint of the held-out samples (raw), or "" */
  tsr_lr_opts_t lr;
  int early_stop; /* the patience of early stopping (0: none) */
  bool has_schedule_state;
  tsr_schedule_state_t schedule_state;
  /* Reading: the training batches' augmentation it was written under (tsr_augment_describe:
   * "crop 28x28:4 flip"; "none" for a file without, every one of before). Saving writes the
   * net's (tsr_net_set_augment) and ignores this. */
  char augment[64];
  /* The run's settings that only the net knew (docs/checkpoints.md, "The file" and
   * "Writing and resuming"): its batch per replica (saving: 0 writes the net's), gradient clipping
   * and label smoothing (saving writes the net's). settings: the file records them and
   * schedule_epochs (written since issue 40; a file of before reads as false, these fields 0). */
  int batch;
  float clip_grad, label_smoothing;
  bool settings;
} tsr_checkpoint_info_t;

/* Writes net (its parameters, optimizer state and step count) and info to
 * path atomically: a temporary file beside it, synced, renamed over it. It
 * waits for the tasks that write the net. A net under --grid (tsr_net_grid_rows > 1) is
 * spread over its grid column's ranks: every rank calls this at the same point (collective),
 * rank 0 gathering the tiles and writing whole tensors. */
TSR_API int tsr_checkpoint_save(const tsr_net_t *net, const tsr_checkpoint_info_t *info,
                                const char *path, tsr_errbuf_t *err);

/* Loads path into net, refusing a checkpoint of another model, of another
 * optimizer, or (when data is neither NULL nor "") of other data, with a
 * message naming both, and one of an optimizer this tessera does not know
 * (TSR_EFORMAT, naming it and the known ones). *info (may be NULL) receives where training stood.
 * Each rank reads whole tensors and keeps the tiles it owns, so a checkpoint of any grid or
 * number of ranks loads onto any other. Not collective.
 */
TSR_API int tsr_checkpoint_load(tsr_net_t *net, const char *path, const char *data,
                                tsr_checkpoint_info_t *info, tsr_errbuf_t *err);

/* What path was written for, without a network: the model, the inputs and
 * classes, and net options (optimizer and its hyper-parameters, input
 * geometry, seed) to build one that tsr_checkpoint_load accepts; an unknown
 * optimizer is refused as tsr_checkpoint_load refuses it. Any output may be NULL. On success
 * *spec is started by the call and the caller's to fini (tsr_model_spec_fini); on an error it
 * is left as it was. */
TSR_API int tsr_checkpoint_read(const char *path, tsr_checkpoint_info_t *info,
                                tsr_model_spec_t *spec, tsr_net_opts_t *opts, int *inputs,
                                int *classes, tsr_errbuf_t *err);

/* How path's inputs were standardized, into *s (the caller's to fini, tsr_standardization_fini):
 * the metadata's input_standardize ("column" or "none"; absent in a scalar checkpoint, and in
 * every checkpoint of before) with input_mean and input_std (one number, or one per column).
 * TSR_EFORMAT when they do not read as that kind. */
TSR_API int tsr_checkpoint_read_standardization(const char *path, tsr_standardization_t *s,
                                                tsr_errbuf_t *err);

/* Whether resuming a checkpoint that holds info (tsr_checkpoint_read's) with net (built for
 * the run) on `ranks` ranks under sync gives every rank back all of its training state: 0, or
 * 1 with why (one sentence, without a final period) saying what restarts instead: rank 0's
 * optimizer state on ranks whose own the file does not hold (a checkpoint of before issue 20,
 * or of another number of ranks, under weight averaging), an outer momentum from zero,
 * weights of a finished run's final average (tsr_checkpoint_info_t.final_average), another
 * augmentation than the file's (tsr_checkpoint_info_t.augment: its batches differ), or a
 * checkpoint written inside an epoch resumed with another number of replicas (ranks / Pr: the
 * rest of that epoch is cut into other shards). A run
 * that promises the uninterrupted run's digits (--deterministic) refuses such a resume. */
TSR_API int tsr_checkpoint_resume_check(const tsr_net_t *net, const tsr_checkpoint_info_t *info,
                                        const tsr_sync_t *sync, int ranks, char *why, size_t size);

/* A checkpoint's listing (`tessera inspect`): its tensors and metadata, after checking the file
 * (every tensor's checksum). Caller-owned: tsr_checkpoint_list fills it, and it owns its arrays
 * and strings until tsr_checkpoint_listing_fini. */
#define TSR_CHECKPOINT_MAX_DIMS 8
typedef struct {
  const char *name; /* as stored: layers.<i>.<type>.weight, optimizer.<state>..., ... */
  int ndims;
  int64_t shape[TSR_CHECKPOINT_MAX_DIMS]; /* [ndims]; every tensor is F32 */
} tsr_checkpoint_tensor_t;
typedef struct {
  const char *key, *value; /* as stored: the value is a string, JSON for some keys */
} tsr_checkpoint_entry_t;
typedef struct {
  int n_tensors;
  tsr_checkpoint_tensor_t *tensors; /* [n_tensors], in the file's order */
  int n_metadata;
  tsr_checkpoint_entry_t *metadata; /* [n_metadata], in the file's order, the checksums
                                       (crc32.*) left out */
} tsr_checkpoint_listing_t;

/* Lists path into *l (zeroed first; nothing to free after an error): TSR_EFORMAT and the other
 * errors of reading a checkpoint as tsr_checkpoint_read gives them, TSR_ENOMEM. */
TSR_API int tsr_checkpoint_list(tsr_checkpoint_listing_t *l, const char *path, tsr_errbuf_t *err);
/* Frees what tsr_checkpoint_list filled in and zeroes *l (a zeroed one: nothing). */
TSR_API void tsr_checkpoint_listing_fini(tsr_checkpoint_listing_t *l);

TSR_EXTERN_C_END

#endif
