/* Optimizers, found by name. Each one is an entry of a registry inside the
 * library (src/optim/registry.c, each optimizer in its own file beside it):
 * its name, as `tessera train --optimizer` and checkpoints write it, its
 * default hyper-parameters, the names of its state tensors (a checkpoint's
 * `optimizer.<parameter>.<state>`), whether its rate scales with the
 * data-parallel replicas, and its step on CPU and OpenCL. Callers name an
 * optimizer and ask these functions; none needs to know which exist.
 *
 * Registered (PyTorch's formulas; g the gradient, w the parameter, wd the
 * weight decay, applied to weights and not to biases):
 *   sgd           torch.optim.SGD, dampening 0: g' = g + wd w; v = momentum v + g';
 *                 w -= lr v (momentum 0: w -= lr g', no state). State momentum_buffer.
 *                 lr 0.01, momentum 0.9 (tessera's default; PyTorch's is 0).
 *   sgd-nesterov  torch.optim.SGD(nesterov=True): v = momentum v + g';
 *                 w -= lr (g' + momentum v); momentum must be > 0. The "nesterov"
 *                 variant of sgd (tsr_optimizer_variant). lr 0.01, momentum 0.9.
 *   adam          torch.optim.Adam (L2 decay in the gradient): g' = g + wd w;
 *                 m = b1 m + (1 - b1) g'; s = b2 s + (1 - b2) g'^2;
 *                 w -= lr (m / (1 - b1^t)) / (sqrt(s / (1 - b2^t)) + eps) at step t
 *                 from 1. State exp_avg, exp_avg_sq. lr 0.001, betas 0.9, 0.999, eps 1e-8.
 *   adamw         torch.optim.AdamW (decoupled decay): w *= 1 - lr wd, then adam's
 *                 step with g' = g. Same state and defaults, and wd 0.01. */
#ifndef TESSERA_OPTIM_H
#define TESSERA_OPTIM_H

#include <stddef.h>

#include "tessera/error.h"

TSR_EXTERN_C_BEGIN

#define TSR_OPTIMIZER_NAME_MAX 24

/* An optimizer and its hyper-parameters; caller-owned, copied by whoever
 * keeps it (tsr_net_create). Fill it with tsr_optimizer_init, then change
 * what differs. A field an optimizer does not read is kept and ignored. */
typedef struct {
  char name[TSR_OPTIMIZER_NAME_MAX]; /* a registered name */
  float lr;
  float momentum;          /* sgd, sgd-nesterov: in [0, 1) */
  float weight_decay;      /* >= 0; L2 in the gradient, decoupled for adamw */
  float beta1, beta2, eps; /* adam, adamw */
} tsr_optimizer_t;

/* *opt = optimizer name with its default hyper-parameters. An unknown name:
 * TSR_EINVAL, with a message naming it and the registered ones. */
TSR_API int tsr_optimizer_init(tsr_optimizer_t *opt, const char *name, tsr_errbuf_t *err);
/* Its name (points into opt). */
TSR_API const char *tsr_optimizer_name(const tsr_optimizer_t *opt);
/* The i-th registered name (from 0), NULL past the last: for help texts. */
TSR_API const char *tsr_optimizer_registered(int i);
/* The registered names, ", " between them, into buf of size bytes (cut to fit). */
TSR_API void tsr_optimizer_list(char *buf, size_t size);
/* Switches opt to the variant of its optimizer called variant ("nesterov":
 * sgd to sgd-nesterov), keeping every hyper-parameter; already that variant:
 * nothing changes. TSR_EINVAL, naming the optimizers that have one, when its
 * optimizer has no such variant. */
TSR_API int tsr_optimizer_variant(tsr_optimizer_t *opt, const char *variant, tsr_errbuf_t *err);
/* 0, or TSR_EINVAL with a message naming the value and the fix: an unknown
 * name, lr <= 0, momentum outside [0, 1), weight decay < 0, or what the
 * optimizer itself refuses (sgd-nesterov with momentum 0). tsr_net_create
 * checks the same. */
TSR_API int tsr_optimizer_check(const tsr_optimizer_t *opt, tsr_errbuf_t *err);
/* State matrices it keeps per parameter, each shaped like the parameter (sgd
 * without momentum keeps none); TSR_EINVAL for an unknown name. */
TSR_API int tsr_optimizer_nstate(const tsr_optimizer_t *opt);

TSR_EXTERN_C_END

#endif
