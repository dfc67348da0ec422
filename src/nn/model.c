/* Model descriptions: the CLI shorthand ("mlp:512,512") and INI model files
 * with one section per layer. */
#include <ctype.h>
#include <errno.h>
#include <ini.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tessera/net.h"

static int add_layer(tsr_model_spec_t *spec, tsr_layer_kind_t kind, int units) {
  if (spec->n_layers >= TSR_MAX_LAYERS) return TSR_EINVAL;
  spec->layers[spec->n_layers++] = (tsr_layer_spec_t){kind, units};
  return 0;
}

static int parse_int(const char *s, char **end, long max, long *out) {
  errno = 0;
  long v = strtol(s, end, 10);
  if (*end == s || errno || v <= 0 || v > max) return TSR_EINVAL;
  *out = v;
  return 0;
}

int tsr_model_parse(tsr_model_spec_t *spec, const char *text, int classes, tsr_errbuf_t *err) {
  memset(spec, 0, sizeof *spec);
  const char *hint = "use mlp, mlp:W1,W2,... (hidden widths) or linear, or a model file (.ini)";
  if (strcmp(text, "linear") == 0) return add_layer(spec, TSR_LAYER_DENSE, classes);
  const char *widths = NULL;
  if (strcmp(text, "mlp") == 0)
    widths = "512,512";
  else if (strncmp(text, "mlp:", 4) == 0)
    widths = text + 4;
  else
    return tsr_error_set(err, TSR_EINVAL, "--model '%s': unknown model; %s", text, hint);
  const char *p = widths;
  if (!*p)
    return tsr_error_set(err, TSR_EINVAL, "--model '%s': no widths after 'mlp:'; %s", text, hint);
  while (*p) {
    char *end;
    long w;
    if (parse_int(p, &end, 1 << 20, &w) || (*end && *end != ',') || (*end == ',' && !end[1]))
      return tsr_error_set(err, TSR_EINVAL, "--model '%s': '%s' is not a positive width; %s", text,
                           p, hint);
    if (add_layer(spec, TSR_LAYER_DENSE, (int)w) || add_layer(spec, TSR_LAYER_RELU, 0))
      return tsr_error_set(err, TSR_EINVAL, "--model '%s': more than %d layers", text,
                           TSR_MAX_LAYERS);
    p = *end ? end + 1 : end;
  }
  if (add_layer(spec, TSR_LAYER_DENSE, classes))
    return tsr_error_set(err, TSR_EINVAL, "--model '%s': too many layers", text);
  return 0;
}

struct ini_state {
  tsr_model_spec_t *spec;
  const char *path;
  tsr_errbuf_t *err;
  int rc;
  char section[64];
  bool has_type; /* the current section said its type */
};

static int section_done(struct ini_state *st) {
  if (st->section[0] == '\0') return 0;
  if (!st->has_type)
    return tsr_error_set(st->err, TSR_EFORMAT,
                         "%s: section [%s] has no 'type' key; add type = dense or type = relu",
                         st->path, st->section);
  tsr_layer_spec_t *l = &st->spec->layers[st->spec->n_layers - 1];
  if (l->kind == TSR_LAYER_DENSE && l->units <= 0)
    return tsr_error_set(st->err, TSR_EFORMAT,
                         "%s: section [%s] is a dense layer without 'units'; add units = N",
                         st->path, st->section);
  return 0;
}

static int on_key(void *user, const char *section, const char *name, const char *value) {
  struct ini_state *st = user;
  if (st->rc) return 0;
  if (strcmp(section, st->section) != 0) {
    if ((st->rc = section_done(st))) return 0;
    snprintf(st->section, sizeof st->section, "%s", section);
    st->has_type = false;
  }
  tsr_model_spec_t *spec = st->spec;
  if (strcmp(name, "type") == 0) {
    tsr_layer_kind_t kind;
    if (strcmp(value, "dense") == 0)
      kind = TSR_LAYER_DENSE;
    else if (strcmp(value, "relu") == 0)
      kind = TSR_LAYER_RELU;
    else {
      st->rc = tsr_error_set(st->err, TSR_EFORMAT,
                             "%s: [%s] type = %s: unknown layer type; use dense or relu", st->path,
                             section, value);
      return 0;
    }
    if (st->has_type || add_layer(spec, kind, 0)) {
      st->rc = tsr_error_set(st->err, TSR_EFORMAT, "%s: [%s]: %s", st->path, section,
                             st->has_type ? "a second 'type' key in one section (one section "
                                            "per layer)"
                                          : "too many layers");
      return 0;
    }
    st->has_type = true;
    return 1;
  }
  if (!st->has_type) {
    st->rc =
        tsr_error_set(st->err, TSR_EFORMAT, "%s: [%s] %s comes before 'type'; put type = ... first",
                      st->path, section, name);
    return 0;
  }
  tsr_layer_spec_t *l = &spec->layers[spec->n_layers - 1];
  if (strcmp(name, "units") == 0 && l->kind == TSR_LAYER_DENSE) {
    char *end;
    long v;
    if (parse_int(value, &end, 1 << 20, &v) || *end) {
      st->rc =
          tsr_error_set(st->err, TSR_EFORMAT, "%s: [%s] units = %s: expected a positive integer",
                        st->path, section, value);
      return 0;
    }
    l->units = (int)v;
  } else if (strcmp(name, "activation") == 0 && l->kind == TSR_LAYER_DENSE) {
    if (strcmp(value, "relu") == 0) {
      if (add_layer(spec, TSR_LAYER_RELU, 0)) {
        st->rc = tsr_error_set(st->err, TSR_EFORMAT, "%s: too many layers", st->path);
        return 0;
      }
    } else if (strcmp(value, "none") != 0) {
      st->rc = tsr_error_set(st->err, TSR_EFORMAT, "%s: [%s] activation = %s: use relu or none",
                             st->path, section, value);
      return 0;
    }
  } else {
    st->rc = tsr_error_set(st->err, TSR_EFORMAT,
                           "%s: [%s] unknown key '%s' for a %s layer (known: type, units, "
                           "activation)",
                           st->path, section, name, l->kind == TSR_LAYER_DENSE ? "dense" : "relu");
    return 0;
  }
  return 1;
}

int tsr_model_load_ini(tsr_model_spec_t *spec, const char *path, tsr_errbuf_t *err) {
  memset(spec, 0, sizeof *spec);
  FILE *f = fopen(path, "r");
  if (!f)
    return tsr_error_set(err, TSR_EIO, "%s: cannot open model file: %s", path, strerror(errno));
  struct ini_state st = {.spec = spec, .path = path, .err = err};
  int line = ini_parse_file(f, on_key, &st);
  fclose(f);
  if (st.rc == 0 && line > 0)
    st.rc = tsr_error_set(err, TSR_EFORMAT,
                          "%s:%d: not an INI line (expected [section] or key = value)", path, line);
  if (st.rc == 0) st.rc = section_done(&st);
  if (st.rc == 0 && spec->n_layers == 0)
    st.rc = tsr_error_set(err, TSR_EFORMAT, "%s: no layers; add one section per layer", path);
  if (st.rc) memset(spec, 0, sizeof *spec);
  return st.rc;
}

void tsr_model_describe(const tsr_model_spec_t *spec, int inputs, char *buf, int size) {
  int n = snprintf(buf, (size_t)size, "%d", inputs);
  for (int i = 0; i < spec->n_layers && n < size; i++)
    if (spec->layers[i].kind == TSR_LAYER_DENSE)
      n += snprintf(buf + n, (size_t)(size - n), "-%d", spec->layers[i].units);
    else
      n += snprintf(buf + n, (size_t)(size - n), "-relu");
}
