/* The optimizer registry: the table of kinds (optim.h) and the public calls
 * that find them by name (tessera/optim.h). Adding an optimizer: its
 * descriptor in its own file in src/optim/ (listed in src/meson.build), and
 * its name in the two lists below; its step, when the arithmetic is new, in
 * the layers below (a kernel, its OpenCL version, a codelet, a tile op). */
#include <stdio.h>
#include <string.h>

#include "optim/optim.h"

extern const tsr_optim_kind_t tsr__optim_sgd, tsr__optim_sgd_nesterov, tsr__optim_adam,
    tsr__optim_adamw;

static const tsr_optim_kind_t *const kinds[] = {
    &tsr__optim_sgd,
    &tsr__optim_sgd_nesterov,
    &tsr__optim_adam,
    &tsr__optim_adamw,
};

enum { NKINDS = (int)(sizeof kinds / sizeof *kinds) };

const tsr_optim_kind_t *tsr__optim_find(const char *name) {
  for (int i = 0; name && i < NKINDS; i++)
    if (strcmp(name, kinds[i]->name) == 0) return kinds[i];
  return NULL;
}

const char *tsr_optimizer_registered(int i) {
  return i >= 0 && i < NKINDS ? kinds[i]->name : NULL;
}

void tsr_optimizer_list(char *buf, size_t size) {
  size_t n = 0;
  if (size) buf[0] = '\0';
  for (int i = 0; i < NKINDS && n < size; i++) {
    int w = snprintf(buf + n, size - n, "%s%s", i ? ", " : "", kinds[i]->name);
    n += w > 0 ? (size_t)w : 0;
  }
}

/* The kind called name, or NULL with a message naming it and the known ones. */
static const tsr_optim_kind_t *known(const char *name, tsr_errbuf_t *err) {
  const tsr_optim_kind_t *k = tsr__optim_find(name);
  if (!k) {
    char names[256];
    tsr_optimizer_list(names, sizeof names);
    tsr_error_set(err, TSR_EINVAL, "--optimizer %s: unknown optimizer (known: %s)",
                  name ? name : "(none)", names);
  }
  return k;
}

int tsr_optimizer_init(tsr_optimizer_t *opt, const char *name, tsr_errbuf_t *err) {
  const tsr_optim_kind_t *k = known(name, err);
  if (!k) return TSR_EINVAL;
  *opt = k->defaults;
  snprintf(opt->name, sizeof opt->name, "%s", k->name);
  return 0;
}

const char *tsr_optimizer_name(const tsr_optimizer_t *opt) {
  return opt->name;
}

int tsr_optimizer_variant(tsr_optimizer_t *opt, const char *variant, tsr_errbuf_t *err) {
  const tsr_optim_kind_t *k = known(opt->name, err);
  if (!k) return TSR_EINVAL;
  if (k->variant && strcmp(k->variant, variant) == 0) return 0;
  char having[256] = "";
  size_t n = 0;
  for (int i = 0; i < NKINDS; i++) {
    const tsr_optim_kind_t *v = kinds[i];
    if (!v->variant || strcmp(v->variant, variant) != 0) continue;
    if (strcmp(v->variant_of, k->name) == 0) {
      snprintf(opt->name, sizeof opt->name, "%s", v->name);
      return 0;
    }
    if (n < sizeof having) {
      int w = snprintf(having + n, sizeof having - n, "%s%s", n ? ", " : "", v->variant_of);
      n += w > 0 ? (size_t)w : 0;
    }
  }
  return tsr_error_set(err, TSR_EINVAL, "optimizer %s has no %s variant (%s applies to: %s)",
                       k->name, variant, variant, n ? having : "none");
}

int tsr_optimizer_check(const tsr_optimizer_t *opt, tsr_errbuf_t *err) {
  const tsr_optim_kind_t *k = known(opt->name, err);
  if (!k) return TSR_EINVAL;
  if (!(opt->lr > 0.0f) || opt->momentum < 0.0f || opt->momentum >= 1.0f ||
      opt->weight_decay < 0.0f)
    return tsr_error_set(err, TSR_EINVAL,
                         "optimizer: lr must be > 0, momentum in [0, 1), weight decay >= 0");
  return k->check ? k->check(opt, err) : 0;
}

int tsr_optimizer_nstate(const tsr_optimizer_t *opt) {
  const tsr_optim_kind_t *k = tsr__optim_find(opt->name);
  return k ? k->nstate(opt) : TSR_EINVAL;
}
