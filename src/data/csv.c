/* CSV reader: one sample per line, the label in the first column, then the
 * features, as Kaggle and pandas write MNIST-like sets. The first line may be
 * a header (its first field is not a number). CSV is written by hand and by
 * scripts, so every row is checked for its column count and every field for
 * being a finite number, and errors give the file, line and column. Features
 * are stored as read: scaling is the caller's choice (tsr_dataset_normalize).
 * Files and byte buffers (tsr__dataset_load_csv_mem, for the fuzzer in
 * tests/fuzz/) go through the same parser, on a stdio stream. */

#include <errno.h>
#include <float.h>
#include <locale.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/csv.h"
#include "tessera/data.h"

/* Labels travel as float; above 2^24 they would no longer be exact. */
#define CSV_MAX_LABEL 16777215.0
#define CSV_FIRST_ROWS 1024
#define CSV_SHOW 40 /* characters of a bad field quoted in a message */

typedef struct {
  const char *path; /* borrowed */
  long line;
  locale_t c_locale; /* "0.5" must parse even if the program set a comma-decimal locale */
  tsr_errbuf_t *err;
} csv_ctx_t;

static int is_blank(char c) {
  return c == ' ' || c == '\t';
}

/* Parses the field starting at s and ending at ',' or the end of the line;
 * blanks around the number are allowed. Returns 1 on success and sets *end to
 * the delimiter. */
static int csv_number(const csv_ctx_t *c, const char *s, double *v, const char **end) {
  char *e;
  errno = 0;
  *v = strtod_l(s, &e, c->c_locale);
  int ok = e != s;
  while (is_blank(*e))
    e++;
  if (*e != ',' && *e != '\0') ok = 0;
  /* Leave *end at the delimiter even on failure, to quote the whole field. */
  *end = strchr(s, ',');
  if (!*end) *end = s + strlen(s);
  return ok;
}

static int csv_bad_field(const csv_ctx_t *c, int col, const char *s, const char *end,
                         const char *why) {
  while (is_blank(*s) && s < end)
    s++;
  int len = (int)(end - s);
  return tsr_error_set(c->err, TSR_EFORMAT, "%s: line %ld, column %d: '%.*s%s' %s", c->path,
                       c->line, col, len > CSV_SHOW ? CSV_SHOW : len, s,
                       len > CSV_SHOW ? "..." : "", why);
}

/* Parses one data row into y_row and x_row (features values). */
static int csv_row(const csv_ctx_t *c, const char *s, int64_t features, float *y_row, float *x_row,
                   int *max_label) {
  double v;
  const char *end;
  if (!csv_number(c, s, &v, &end)) return csv_bad_field(c, 1, s, end, "is not a number (label)");
  if (!isfinite(v) || v != floor(v))
    return csv_bad_field(c, 1, s, end, "is not an integer; labels must be integers 0, 1, 2, ...");
  if (v < 0)
    return csv_bad_field(c, 1, s, end, "is negative; labels must be integers 0, 1, 2, ...");
  if (v > CSV_MAX_LABEL)
    return csv_bad_field(c, 1, s, end, "is too large for a label (at most 16777215)");
  *y_row = (float)v;
  if ((int)v > *max_label) *max_label = (int)v;

  for (int64_t j = 0; j < features; j++) {
    s = end + 1; /* the column count was checked, so a ',' ends each field but the last */
    int col = (int)(j + 2);
    if (!csv_number(c, s, &v, &end)) return csv_bad_field(c, col, s, end, "is not a number");
    if (!isfinite(v)) return csv_bad_field(c, col, s, end, "is not finite");
    if (fabs(v) > FLT_MAX) return csv_bad_field(c, col, s, end, "is out of float range");
    x_row[j] = (float)v;
  }
  return 0;
}

static int64_t csv_columns(const char *s) {
  int64_t n = 1;
  for (; *s; s++)
    n += *s == ',';
  return n;
}

/* Parses the CSV text read from fp (borrowed; NULL reads as an empty file)
 * into ds; path names it in messages. */
static int csv_load(tsr_dataset_t *ds, FILE *fp, const char *path, tsr_errbuf_t *err) {
  memset(ds, 0, sizeof *ds);

  csv_ctx_t c = {.path = path, .line = 0, .err = err};
  char *line = NULL;
  size_t line_cap = 0;
  float *x = NULL, *y = NULL;
  int64_t n = 0, cap = 0, columns = 0, features = 0;
  long columns_line = 0; /* where the column count was set, for messages */
  int max_label = 0, rc = 0;

  c.c_locale = newlocale(LC_NUMERIC_MASK, "C", (locale_t)0);
  if (c.c_locale == (locale_t)0) {
    rc = tsr_error_set(err, TSR_ENOMEM, "%s: cannot create the C locale for parsing numbers", path);
    goto out;
  }

  ssize_t len;
  while (fp && (len = getline(&line, &line_cap, fp)) >= 0) {
    c.line++;
    if ((size_t)len != strlen(line)) {
      rc = tsr_error_set(err, TSR_EFORMAT,
                         "%s: line %ld contains a NUL byte; this is not a text CSV file", path,
                         c.line);
      goto out;
    }
    while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r'))
      line[--len] = '\0';
    const char *s = line;
    while (is_blank(*s))
      s++;
    if (*s == '\0') continue; /* blank lines, typically a final one, carry no sample */

    int64_t cols = csv_columns(line);
    if (columns == 0) {
      double v;
      const char *end;
      int header = !csv_number(&c, line, &v, &end);
      if (cols < 2) {
        rc = tsr_error_set(err, TSR_EFORMAT,
                           "%s: line %ld has 1 column; a row needs the label, then at least one "
                           "feature, separated by commas",
                           path, c.line);
        goto out;
      }
      if (cols - 1 > INT32_MAX) {
        rc = tsr_error_set(err, TSR_EFORMAT, "%s: line %ld has %lld columns, too many for a sample",
                           path, c.line, (long long)cols);
        goto out;
      }
      columns = cols;
      features = cols - 1;
      columns_line = c.line;
      if (header) continue;
    } else if (cols != columns) {
      rc = tsr_error_set(err, TSR_EFORMAT,
                         "%s: line %ld has %lld columns but line %ld has %lld; every row needs a "
                         "label and the same number of features",
                         path, c.line, (long long)cols, columns_line, (long long)columns);
      goto out;
    }

    if (n == cap) {
      int64_t next = cap ? cap * 2 : CSV_FIRST_ROWS;
      if ((uint64_t)next > SIZE_MAX / sizeof(float) / (uint64_t)features) {
        rc = tsr_error_set(err, TSR_ENOMEM, "%s: too many rows to hold in memory (line %ld)", path,
                           c.line);
        goto out;
      }
      float *gx = realloc(x, (size_t)next * (size_t)features * sizeof *x);
      if (gx) x = gx;
      float *gy = realloc(y, (size_t)next * sizeof *y);
      if (gy) y = gy;
      if (!gx || !gy) {
        rc = tsr_error_set(err, TSR_ENOMEM, "%s: out of memory at line %ld", path, c.line);
        goto out;
      }
      cap = next;
    }
    if ((rc = csv_row(&c, line, features, &y[n], &x[n * features], &max_label)) < 0) goto out;
    n++;
  }
  if (fp && ferror(fp)) {
    rc = tsr_error_set(err, TSR_EIO, "%s: cannot read the CSV file: %s", path, strerror(errno));
    goto out;
  }
  if (n == 0) {
    rc = tsr_error_set(err, TSR_EFORMAT, "%s: no samples: the file is %s", path,
                       columns ? "only a header line" : "empty");
    goto out;
  }

  /* Give back the growth slack; failing to shrink is harmless. */
  float *sx = realloc(x, (size_t)n * (size_t)features * sizeof *x);
  if (sx) x = sx;
  float *sy = realloc(y, (size_t)n * sizeof *y);
  if (sy) y = sy;

  ds->n = n;
  ds->features = features;
  ds->classes = 1 + max_label;
  ds->channels = 1;
  ds->height = 1;
  ds->width = (int)features; /* checked against INT32_MAX on the first row */
  ds->x = x;
  ds->y = y;
  x = y = NULL;
out:
  if (c.c_locale != (locale_t)0) freelocale(c.c_locale);
  free(line);
  free(x);
  free(y);
  return rc;
}

int tsr_dataset_load_csv(tsr_dataset_t *ds, const char *path, tsr_errbuf_t *err) {
  if (!ds || !path)
    return tsr_error_set(err, TSR_EINVAL,
                         "tsr_dataset_load_csv: dataset and path must not be NULL");
  memset(ds, 0, sizeof *ds);
  FILE *fp = fopen(path, "r");
  if (!fp)
    return tsr_error_set(err, TSR_EIO, "%s: cannot open the CSV file: %s", path, strerror(errno));
  int rc = csv_load(ds, fp, path, err);
  fclose(fp);
  return rc;
}

int tsr__dataset_load_csv_mem(tsr_dataset_t *ds, const void *text, size_t len, const char *name,
                              tsr_errbuf_t *err) {
  if (!ds || (!text && len) || !name)
    return tsr_error_set(err, TSR_EINVAL,
                         "tsr__dataset_load_csv_mem: dataset, text and name must not be NULL");
  memset(ds, 0, sizeof *ds);
  /* fmemopen refuses a size of 0: an empty text reads as no stream at all. */
  FILE *fp = len ? fmemopen((void *)text, len, "r") : NULL;
  if (len && !fp)
    return tsr_error_set(err, TSR_ENOMEM, "%s: cannot open the text as a stream: %s", name,
                         strerror(errno));
  int rc = csv_load(ds, fp, name, err);
  if (fp) fclose(fp);
  return rc;
}
