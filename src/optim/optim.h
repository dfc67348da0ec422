/* Optimizers. An optimizer object belongs to a network and owns what an
 * update needs besides the parameter and its gradient: the hyper-parameters,
 * the step count (Adam's t), the current learning rate, and the state of
 * every parameter it updates (momentum, Adam's moments), as matrices shaped
 * and tiled like the parameter. Each kind (sgd.c, sgd_nesterov.c, adam.c,
 * adamw.c) is one file with its descriptor: name, defaults, state count and
 * names, rate scaling, checks and how one tile is updated; registry.c lists
 * them and answers the public calls (tessera/optim.h). Nothing outside a
 * kind's file asks which kind it is: the network calls the update for its
 * own parameters, the synchronization code calls the same update on a
 * parameter's home copies, the checkpoint and the planner read the
 * descriptor. */
#ifndef TSR_OPTIM_OPTIM_H
#define TSR_OPTIM_OPTIM_H

#include <stdbool.h>
#include <stdint.h>

#include "runtime/task_opts.h"
#include "tessera/error.h"
#include "tessera/net.h"
#include "tessera/optim.h"
#include "tessera/tiles.h"
#include "tile/ops.h"

#define TSR_OPTIM_MAX_STATE 2

/* One kind of optimizer, in its own file; registry.c lists it. */
typedef struct {
  const char *name; /* as --optimizer and checkpoints write it */
  /* A variant of another kind (tsr_optimizer_variant): variant_of's name and the variant's
   * ("sgd", "nesterov"); NULL for none. */
  const char *variant_of, *variant;
  tsr_optimizer_t defaults; /* every hyper-parameter but the name */
  /* Under TSR_LR_SCALING_AUTO, the rate is multiplied by the replicas when they average
   * gradients every step (--sync batch, post-local): the linear scaling rule of SGD. */
  bool lr_scales_with_replicas;
  /* State matrices kept per parameter with these hyper-parameters (SGD
   * without momentum keeps none), and their names (PyTorch's, for
   * checkpoints). */
  int (*nstate)(const tsr_optimizer_t *hp);
  const char *state_names[TSR_OPTIM_MAX_STATE];
  /* What this kind refuses beyond the common ranges (tsr_optimizer_check), with a message;
   * NULL: nothing. */
  int (*check)(const tsr_optimizer_t *hp, tsr_errbuf_t *err);
  /* Submits the update of rows r0 .. of tile (i, j) of w, with state[0 ..
   * nstate) tiled like w, from tile (gi, gj) of g holding those rows of the
   * gradient, at rate lr, step t (1-based) and weight decay wd. */
  int (*update_tile)(const tsr_optimizer_t *hp, float lr, int64_t t, float wd, tsr_tiles_t *w,
                     tsr_tiles_t *const *state, int i, int j, int r0, const tsr_tiles_t *g, int gi,
                     int gj, const tsr_task_opts_t *o);
  /* TSR_SGD_STEP_PLAIN or _NESTEROV: update_tile is tsr__tile_sgd's, which a dense layer's
   * weight gradient tasks can take themselves (tsr__optim_sgd_step); 0: another update. */
  int sgd_step;
} tsr_optim_kind_t;
enum { TSR_SGD_STEP_PLAIN = 1, TSR_SGD_STEP_NESTEROV };

/* The registered kind called name, or NULL (registry.c). */
const tsr_optim_kind_t *tsr__optim_find(const char *name);

/* Adam's state count and tile step (adam.c), shared by AdamW; decoupled: AdamW's decay. */
int tsr__adam_nstate(const tsr_optimizer_t *hp);
int tsr__adam_update_tile(const tsr_optimizer_t *hp, float lr, int64_t t, float wd, tsr_tiles_t *w,
                          tsr_tiles_t *const *state, int i, int j, int r0, const tsr_tiles_t *g,
                          int gi, int gj, const tsr_task_opts_t *o, bool decoupled);

typedef struct tsr_optim tsr_optim_t;

/* An optimizer with hyper-parameters hp (copied), at step 0 and rate hp->lr; TSR_EINVAL for
 * an unregistered name (tsr_optimizer_check says more). */
int tsr__optim_create(tsr_optim_t **o, const tsr_optimizer_t *hp);
/* Destroys it and every parameter's state. */
void tsr__optim_destroy(tsr_optim_t **o);

/* Registers a parameter: creates its state, zero, shaped and tiled like w
 * (local matrices), and returns its index. decay: weight decay applies. */
int tsr__optim_add(tsr_optim_t *o, const tsr_tiles_t *w, bool decay, int *index);

const tsr_optim_kind_t *tsr__optim_kind(const tsr_optim_t *o);
const tsr_optimizer_t *tsr__optim_hyper(const tsr_optim_t *o);
/* State matrices per parameter, their names, and parameter param's k-th. */
int tsr__optim_nstate(const tsr_optim_t *o);
const char *tsr__optim_state_name(const tsr_optim_t *o, int k);
tsr_tiles_t *tsr__optim_state(const tsr_optim_t *o, int param, int k);

/* A new step begins: its updates use step count t + 1. */
void tsr__optim_next_step(tsr_optim_t *o);
/* Sets the steps taken (a resumed run's). */
void tsr__optim_set_steps(tsr_optim_t *o, int64_t steps);
int64_t tsr__optim_steps(const tsr_optim_t *o);
void tsr__optim_set_lr(tsr_optim_t *o, float lr);
float tsr__optim_lr(const tsr_optim_t *o);

/* Submits the update of rows r0 .. of tile (i, j) of parameter param,
 * stored in w, with state (NULL: the optimizer's own), from tile (gi, gj) of
 * g holding those rows of the gradient (--sync batch: a band, on its home). */
int tsr__optim_update_tile(const tsr_optim_t *o, int param, tsr_tiles_t *w,
                           tsr_tiles_t *const *state, int i, int j, int r0, const tsr_tiles_t *g,
                           int gi, int gj, const tsr_task_opts_t *to);
/* Whether the update of parameters wparam (a dense layer's weights w) and bparam (its bias b)
 * is an SGD step that their gradient's GEMM tasks can take (tsr__tiles_gemm_dbias); if so, fills
 * step with this step's rate, the momentum, each one's decay and their velocities. */
bool tsr__optim_sgd_step(const tsr_optim_t *o, int wparam, tsr_tiles_t *w, int bparam,
                         tsr_tiles_t *b, tsr_sgd_step_t *step);
/* Submits the update of every tile of parameter param (w, its gradient g),
 * with its own state. */
int tsr__optim_update(const tsr_optim_t *o, int param, tsr_tiles_t *w, const tsr_tiles_t *g,
                      const tsr_task_opts_t *to);

/* The learning rate at step t (0-based) of a run of total steps, around base. */
double tsr__lr_at(tsr_lr_schedule_t schedule, double base, int64_t t, int64_t total);

#endif
