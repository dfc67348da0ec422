/* Standardizations (tessera/data.h): fitted to a training set, one mean and std for every
 * feature (scalar, images of one channel), one per feature column (column, tabular data whose
 * columns have their own scales: an age beside an income) or one per channel (channel, colour
 * images, whose red, green and blue differ: feature j of a channels-last sample is channel
 * j % channels), then applied to the training and test sets. The
 * scalar kind is tsr_dataset_stats and tsr_dataset_normalize, so its digits are those of every
 * run of before. Statistics are two passes in double (a one-pass sum of squares cancels when
 * the mean is large against the spread), rounded to float32. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tessera/data.h"

static const char *const names[] = {
    [TSR_STANDARDIZE_AUTO] = "auto",       [TSR_STANDARDIZE_SCALAR] = "scalar",
    [TSR_STANDARDIZE_COLUMN] = "column",   [TSR_STANDARDIZE_NONE] = "none",
    [TSR_STANDARDIZE_CHANNEL] = "channel",
};

int tsr_standardize_parse(const char *name, tsr_standardize_t *kind) {
  for (int k = 0; k < (int)(sizeof names / sizeof *names); k++)
    if (name && strcmp(name, names[k]) == 0) {
      *kind = (tsr_standardize_t)k;
      return 0;
    }
  return TSR_EINVAL;
}

const char *tsr_standardize_name(tsr_standardize_t kind) {
  return (unsigned)kind < sizeof names / sizeof *names ? names[kind] : "unknown";
}

/* Column j's mean and population std over ds's samples. */
static void column_stats(const tsr_dataset_t *ds, int64_t j, float *mean, float *std) {
  int64_t n = ds->n, f = ds->features;
  double sum = 0.0, sq = 0.0;
  for (int64_t i = 0; i < n; i++)
    sum += ds->x[i * f + j];
  double m = n > 0 ? sum / (double)n : 0.0;
  for (int64_t i = 0; i < n; i++) {
    double d = ds->x[i * f + j] - m;
    sq += d * d;
  }
  *mean = (float)m;
  *std = n > 0 ? (float)sqrt(sq / (double)n) : 0.0f;
}

/* Each channel's mean and population std over every pixel of ds's samples (channels-last). */
static void channel_stats(const tsr_dataset_t *ds, int64_t channels, float *mean, float *std) {
  int64_t count = ds->n * ds->features, per = count / channels;
  for (int64_t k = 0; k < channels; k++) {
    double sum = 0.0, sq = 0.0;
    for (int64_t i = k; i < count; i += channels)
      sum += ds->x[i];
    double m = per > 0 ? sum / (double)per : 0.0;
    for (int64_t i = k; i < count; i += channels) {
      double d = ds->x[i] - m;
      sq += d * d;
    }
    mean[k] = (float)m;
    std[k] = per > 0 ? (float)sqrt(sq / (double)per) : 0.0f;
  }
}

/* j' of feature j (the header's formula): the entry of mean and std that standardizes it. */
static int64_t entry_of(const tsr_standardization_t *s, int64_t j) {
  return s->kind == TSR_STANDARDIZE_CHANNEL ? j % s->n : j;
}

int tsr_standardization_fit(tsr_standardization_t *s, tsr_standardize_t kind,
                            const tsr_dataset_t *train, tsr_errbuf_t *err) {
  *s = (tsr_standardization_t){0};
  /* A set with labels at each position (text) holds token ids, which an embedding looks up:
   * they must stay exact integers. */
  if (kind == TSR_STANDARDIZE_AUTO)
    kind = train->targets > 1    ? TSR_STANDARDIZE_NONE
           : train->height <= 1  ? TSR_STANDARDIZE_COLUMN
           : train->channels > 1 ? TSR_STANDARDIZE_CHANNEL
                                 : TSR_STANDARDIZE_SCALAR;
  int64_t channels = train->channels > 0 ? train->channels : 1;
  if (kind == TSR_STANDARDIZE_CHANNEL && train->features != channels * train->height * train->width)
    return tsr_error_set(err, TSR_ESHAPE,
                         "--standardize channel: the training set's %lld features are not images "
                         "of %lld channels of %dx%d; use column or scalar",
                         (long long)train->features, (long long)channels, train->height,
                         train->width);
  s->kind = kind;
  s->n = kind == TSR_STANDARDIZE_NONE      ? 0
         : kind == TSR_STANDARDIZE_COLUMN  ? train->features
         : kind == TSR_STANDARDIZE_CHANNEL ? channels
                                           : 1;
  if (s->n == 0) return 0;
  s->mean = malloc(sizeof *s->mean * (size_t)s->n);
  s->std = malloc(sizeof *s->std * (size_t)s->n);
  if (!s->mean || !s->std) {
    tsr_standardization_fini(s);
    return tsr_error_set(err, TSR_ENOMEM, "cannot hold the standardization of %lld features",
                         (long long)train->features);
  }
  if (kind == TSR_STANDARDIZE_SCALAR)
    tsr_dataset_stats(train, &s->mean[0], &s->std[0]);
  else if (kind == TSR_STANDARDIZE_CHANNEL)
    channel_stats(train, s->n, s->mean, s->std);
  else
    for (int64_t j = 0; j < s->n; j++)
      column_stats(train, j, &s->mean[j], &s->std[j]);
  return 0;
}

int tsr_standardization_apply(const tsr_standardization_t *s, tsr_dataset_t *ds, const char *what,
                              tsr_errbuf_t *err) {
  if (!ds || !ds->x || s->n == 0) return 0;
  if (s->kind == TSR_STANDARDIZE_SCALAR) {
    tsr_dataset_normalize(ds, s->mean[0], s->std[0]);
    return 0;
  }
  if (s->kind == TSR_STANDARDIZE_CHANNEL && (ds->channels != s->n || ds->features % s->n != 0))
    return tsr_error_set(err, TSR_ESHAPE,
                         "%s has images of %d channels, but the standardization was fitted to %lld "
                         "channels; use images of the training set's channels",
                         what, ds->channels, (long long)s->n);
  if (s->kind == TSR_STANDARDIZE_COLUMN && s->n != ds->features)
    return tsr_error_set(err, TSR_ESHAPE,
                         "%s has %lld features, but the standardization was fitted to %lld "
                         "columns; use data of the same columns as the training set",
                         what, (long long)ds->features, (long long)s->n);
  float *scale = malloc(sizeof *scale * (size_t)s->n);
  if (!scale) return tsr_error_set(err, TSR_ENOMEM, "%s: cannot standardize: out of memory", what);
  /* As tsr_dataset_normalize, per entry: a constant column or channel keeps its scale. */
  for (int64_t j = 0; j < s->n; j++)
    scale[j] = s->std[j] > 0.0f && isfinite(s->std[j]) ? 1.0f / s->std[j] : 1.0f;
  for (int64_t i = 0; i < ds->n; i++) {
    float *row = ds->x + i * ds->features;
    for (int64_t j = 0; j < ds->features; j++) {
      int64_t e = entry_of(s, j);
      row[j] = (row[j] - s->mean[e]) * scale[e];
    }
  }
  free(scale);
  return 0;
}

void tsr_standardization_fini(tsr_standardization_t *s) {
  if (!s) return;
  free(s->mean);
  free(s->std);
  *s = (tsr_standardization_t){0};
}
