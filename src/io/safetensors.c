/* Safetensors reading and writing (safetensors.h). */
#include "io/safetensors.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors stores little-endian data; this writer copies memory as it is"
#endif

typedef struct {
  char *name;
  int ndims;
  int64_t shape[TSR_ST_MAX_DIMS];
  uint64_t begin, end; /* in the buffer */
} entry_t;

/* Names to their index, by open addressing: duplicate checks and lookups in constant time, so
 * that a header of 100,000 tensors is read in linear time (a pairwise check took quadratic). */
typedef struct {
  const char **name; /* [mask + 1] borrowed from the entries or keys; NULL: empty */
  int *index;        /* [mask + 1] */
  size_t mask;
} name_index_t;

struct tsr_st_file {
  int n;
  entry_t *entries; /* sorted by begin */
  int nmeta;
  char **keys, **values;
  name_index_t by_name, by_key; /* entries[] and keys[] by name */
  float *buffer;                /* owned, 64-byte aligned */
  uint64_t size;
};

/* FNV-1a. */
static uint64_t hash_name(const char *s) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (; *s; s++)
    h = (h ^ (unsigned char)*s) * 0x100000001b3ULL;
  return h;
}

/* Room for n names at a load of at most one half. */
static int index_init(name_index_t *x, int n) {
  size_t cap = 16;
  while (cap < 2 * (size_t)n + 2)
    cap *= 2;
  x->name = calloc(cap, sizeof *x->name);
  x->index = calloc(cap, sizeof *x->index);
  x->mask = cap - 1;
  return x->name && x->index ? 0 : TSR_ENOMEM;
}

static void index_fini(name_index_t *x) {
  free(x->name), free(x->index);
  *x = (name_index_t){0};
}

/* The slot of name: where it is, or the empty one where it would go. */
static size_t index_slot(const name_index_t *x, const char *name) {
  size_t i = (size_t)hash_name(name) & x->mask;
  while (x->name[i] && strcmp(x->name[i], name) != 0)
    i = (i + 1) & x->mask;
  return i;
}

/* Adds name (borrowed) as index; false when it was there already. */
static bool index_put(name_index_t *x, const char *name, int index) {
  size_t i = index_slot(x, name);
  if (x->name[i]) return false;
  x->name[i] = name, x->index[i] = index;
  return true;
}

static int index_get(const name_index_t *x, const char *name) {
  if (!x->name) return -1;
  size_t i = index_slot(x, name);
  return x->name[i] ? x->index[i] : -1;
}

/* ---- writing ---- */

static int write_all(int fd, const void *p, size_t n) {
  const char *c = p;
  while (n > 0) {
    ssize_t w = write(fd, c, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return -1;
    c += w, n -= (size_t)w;
  }
  return 0;
}

static int64_t elements(const tsr_st_tensor_t *t) {
  int64_t n = 1;
  for (int d = 0; d < t->ndims; d++)
    n *= t->shape[d];
  return n;
}

/* The header: the metadata first, then each tensor at its offset, padded
 * with spaces to a multiple of 8 bytes so the buffer starts aligned. */
static char *header_json(const tsr_st_tensor_t *tensors, int n, const tsr_st_meta_t *meta,
                         int nmeta, size_t *len) {
  cJSON *root = cJSON_CreateObject();
  if (!root) return NULL;
  if (nmeta > 0) {
    cJSON *m = cJSON_AddObjectToObject(root, "__metadata__");
    for (int k = 0; m && k < nmeta; k++)
      cJSON_AddStringToObject(m, meta[k].key, meta[k].value);
  }
  uint64_t offset = 0;
  for (int i = 0; i < n; i++) {
    cJSON *t = cJSON_AddObjectToObject(root, tensors[i].name);
    if (!t) break;
    cJSON_AddStringToObject(t, "dtype", "F32");
    cJSON *shape = cJSON_AddArrayToObject(t, "shape");
    for (int d = 0; shape && d < tensors[i].ndims; d++)
      cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)tensors[i].shape[d]));
    uint64_t bytes = (uint64_t)elements(&tensors[i]) * sizeof(float);
    cJSON *off = cJSON_AddArrayToObject(t, "data_offsets");
    if (off) {
      cJSON_AddItemToArray(off, cJSON_CreateNumber((double)offset));
      cJSON_AddItemToArray(off, cJSON_CreateNumber((double)(offset + bytes)));
    }
    offset += bytes;
  }
  char *text = cJSON_PrintUnformatted(root);
  cJSON_Delete(root);
  if (!text) return NULL;
  size_t raw = strlen(text), padded = (raw + 7) / 8 * 8;
  char *out = malloc(padded + 1);
  if (out) {
    memcpy(out, text, raw);
    memset(out + raw, ' ', padded - raw);
    out[padded] = '\0';
    *len = padded;
  }
  cJSON_free(text);
  return out;
}

/* The folder of path, for a temporary file beside it and its fsync. */
static void folder_of(const char *path, char *dir, size_t size) {
  const char *slash = strrchr(path, '/');
  if (!slash)
    snprintf(dir, size, ".");
  else if (slash == path)
    snprintf(dir, size, "/");
  else
    snprintf(dir, size, "%.*s", (int)(slash - path), path);
}

/* Temporary files of earlier writes of path that were killed before their rename: `NAME.tmp.PID.
 * XXXXXX` whose writer PID no longer runs, and `NAME.tmp.XXXXXX` of builds before the PID was in
 * the name. A live writer's (another process writing the same path) is left alone. */
static void remove_stale(const char *path, const char *dir) {
  const char *base = strrchr(path, '/');
  base = base ? base + 1 : path;
  size_t n = strlen(base);
  DIR *d = opendir(dir);
  if (!d) return;
  for (struct dirent *e; (e = readdir(d));) {
    const char *name = e->d_name, *rest = name + n + 5;
    if (strncmp(name, base, n) != 0 || strncmp(name + n, ".tmp.", 5) != 0) continue;
    char *end;
    long pid = strtol(rest, &end, 10);
    bool old_style = strlen(rest) == 6 && !strchr(rest, '.');
    bool dead = end != rest && *end == '.' && strlen(end + 1) == 6 && pid > 0 && pid <= INT_MAX &&
                kill((pid_t)pid, 0) != 0 && errno == ESRCH;
    if (!old_style && !dead) continue;
    char stale[PATH_MAX];
    if (snprintf(stale, sizeof stale, "%s/%s", dir, name) < (int)sizeof stale) unlink(stale);
  }
  closedir(d);
}

/* The process's umask, without changing it: /proc/self/status says it (Linux 4.7 on); umask(2)
 * can only be read by setting it, which races with the runtime's threads creating files. */
static mode_t current_umask(void) {
  FILE *f = fopen("/proc/self/status", "r");
  char line[128];
  unsigned mask = 0;
  bool found = false;
  while (f && !found && fgets(line, sizeof line, f))
    found = sscanf(line, "Umask: %o", &mask) == 1;
  if (f) fclose(f);
  if (found) return (mode_t)mask;
  mode_t m = umask(022);
  umask(m);
  return m;
}

int tsr__st_write(const char *path, const tsr_st_tensor_t *tensors, int ntensors,
                  const tsr_st_meta_t *meta, int nmeta, tsr_errbuf_t *err) {
  size_t hlen = 0;
  char *header = header_json(tensors, ntensors, meta, nmeta, &hlen);
  if (!header) return tsr_error_set(err, TSR_ENOMEM, "%s: out of memory for the header", path);
  char tmp[PATH_MAX], dir[PATH_MAX];
  folder_of(path, dir, sizeof dir);
  remove_stale(path, dir);
  if (snprintf(tmp, sizeof tmp, "%s.tmp.%ld.XXXXXX", path, (long)getpid()) >= (int)sizeof tmp) {
    free(header);
    return tsr_error_set(err, TSR_EINVAL, "%s: path too long", path);
  }
  int fd = mkstemp(tmp);
  if (fd < 0) {
    int e = errno;
    free(header);
    return tsr_error_set(err, TSR_EIO, "%s: cannot create a temporary file beside it: %s", path,
                         strerror(e));
  }
  /* mkstemp makes the file 0600; a checkpoint is shared as the user's other files are (a
   * project folder on a cluster): the mode open(2) would give it, 0666 less the umask. */
  if (fchmod(fd, 0666 & ~current_umask()) != 0) {
    int e = errno;
    close(fd), unlink(tmp), free(header);
    return tsr_error_set(err, TSR_EIO, "%s: cannot set the mode of its temporary file: %s", path,
                         strerror(e));
  }
  unsigned char len8[8];
  for (int b = 0; b < 8; b++)
    len8[b] = (unsigned char)((uint64_t)hlen >> (8 * b));
  int rc = write_all(fd, len8, 8) || write_all(fd, header, hlen);
  for (int i = 0; i < ntensors && rc == 0; i++)
    rc = write_all(fd, tensors[i].data, (size_t)elements(&tensors[i]) * sizeof(float));
  int e = errno;
  free(header);
  if (rc == 0 && fsync(fd) != 0) rc = -1, e = errno;
  if (close(fd) != 0 && rc == 0) rc = -1, e = errno;
  if (rc == 0 && rename(tmp, path) != 0) rc = -1, e = errno;
  if (rc) {
    unlink(tmp);
    return tsr_error_set(err, TSR_EIO, "%s: cannot write: %s (the previous file, if any, is kept)",
                         path, strerror(e));
  }
  /* The rename is durable once the folder is. */
  int dfd = open(dir, O_RDONLY | O_DIRECTORY);
  if (dfd >= 0) {
    fsync(dfd);
    close(dfd);
  }
  return 0;
}

/* ---- reading ---- */

static int bad(tsr_errbuf_t *err, const char *file, const char *fmt, const char *detail) {
  char what[256];
  snprintf(what, sizeof what, fmt, detail);
  return tsr_error_set(err, TSR_EFORMAT, "%s: not a valid safetensors file: %s", file, what);
}

/* A non-negative integer that a double holds exactly, or -1. */
static int64_t exact(const cJSON *v) {
  if (!cJSON_IsNumber(v)) return -1;
  double d = v->valuedouble;
  if (!(d >= 0) || d > 9007199254740992.0 || d != floor(d)) return -1;
  return (int64_t)d;
}

static int by_begin(const void *a, const void *b) {
  const entry_t *x = a, *y = b;
  return x->begin < y->begin ? -1 : x->begin > y->begin ? 1 : (x->end > y->end) - (x->end < y->end);
}

static int parse_entry(const cJSON *item, entry_t *e, uint64_t buffer, const char *file,
                       tsr_errbuf_t *err) {
  const char *name = item->string;
  if (!cJSON_IsObject(item)) return bad(err, file, "entry '%s' is not an object", name);
  const cJSON *dtype = cJSON_GetObjectItemCaseSensitive(item, "dtype");
  const cJSON *shape = cJSON_GetObjectItemCaseSensitive(item, "shape");
  const cJSON *off = cJSON_GetObjectItemCaseSensitive(item, "data_offsets");
  if (!cJSON_IsString(dtype)) return bad(err, file, "tensor '%s' has no dtype", name);
  if (strcmp(dtype->valuestring, "F32") != 0)
    return bad(err, file, "tensor '%s': only dtype F32 is supported", name);
  if (!cJSON_IsArray(shape) || cJSON_GetArraySize(shape) > TSR_ST_MAX_DIMS)
    return bad(err, file, "tensor '%s': shape is not an array of at most 8 sizes", name);
  if (!cJSON_IsArray(off) || cJSON_GetArraySize(off) != 2)
    return bad(err, file, "tensor '%s': data_offsets is not [begin, end]", name);
  e->ndims = cJSON_GetArraySize(shape);
  uint64_t count = 1;
  for (int d = 0; d < e->ndims; d++) {
    int64_t s = exact(cJSON_GetArrayItem(shape, d));
    if (s < 0)
      return bad(err, file, "tensor '%s': a size of its shape is not an integer >= 0", name);
    e->shape[d] = s;
    if (s > 0 && count > (UINT64_MAX / 4) / (uint64_t)s)
      return bad(err, file, "tensor '%s': its shape is too large", name);
    count *= (uint64_t)s;
  }
  int64_t begin = exact(cJSON_GetArrayItem(off, 0)), end = exact(cJSON_GetArrayItem(off, 1));
  if (begin < 0 || end < begin || (uint64_t)end > buffer)
    return bad(err, file, "tensor '%s': data_offsets out of the buffer", name);
  if ((uint64_t)(end - begin) != count * sizeof(float))
    return bad(err, file, "tensor '%s': data_offsets do not match its shape", name);
  e->begin = (uint64_t)begin, e->end = (uint64_t)end;
  if (!(e->name = strdup(name))) return tsr_error_set(err, TSR_ENOMEM, "%s: out of memory", file);
  return 0;
}

static int parse_meta(const cJSON *m, tsr_st_file_t *f, const char *file, tsr_errbuf_t *err) {
  if (!cJSON_IsObject(m)) return bad(err, file, "%s is not an object", "__metadata__");
  int n = cJSON_GetArraySize(m);
  f->keys = calloc((size_t)n + 1, sizeof *f->keys);
  f->values = calloc((size_t)n + 1, sizeof *f->values);
  if (!f->keys || !f->values || index_init(&f->by_key, n))
    return tsr_error_set(err, TSR_ENOMEM, "%s: out of memory", file);
  for (const cJSON *v = m->child; v; v = v->next) {
    if (!cJSON_IsString(v)) return bad(err, file, "metadata '%s' is not a string", v->string);
    f->keys[f->nmeta] = strdup(v->string);
    f->values[f->nmeta] = strdup(v->valuestring);
    if (!f->keys[f->nmeta] || !f->values[f->nmeta])
      return tsr_error_set(err, TSR_ENOMEM, "%s: out of memory", file);
    if (!index_put(&f->by_key, f->keys[f->nmeta], f->nmeta)) {
      f->nmeta++; /* its strings are freed with the others */
      return bad(err, file, "metadata key '%s' appears twice", v->string);
    }
    f->nmeta++;
  }
  return 0;
}

/* Checks the header (len bytes of JSON) against a buffer of size bytes. */
static int parse_header(tsr_st_file_t *f, const char *json, size_t len, const char *file,
                        tsr_errbuf_t *err) {
  cJSON *root = cJSON_ParseWithLength(json, len);
  if (!root || !cJSON_IsObject(root)) {
    cJSON_Delete(root);
    return bad(err, file, "%s", "the header is not a JSON object");
  }
  int rc = 0, count = 0;
  for (const cJSON *c = root->child; c; c = c->next)
    count += strcmp(c->string, "__metadata__") != 0;
  f->entries = calloc((size_t)count + 1, sizeof *f->entries);
  if (!f->entries || index_init(&f->by_name, count))
    rc = tsr_error_set(err, TSR_ENOMEM, "%s: out of memory", file);
  bool seen_meta = false;
  for (const cJSON *c = root->child; c && rc == 0; c = c->next) {
    if (strcmp(c->string, "__metadata__") == 0) {
      rc = seen_meta ? bad(err, file, "%s appears twice", "__metadata__")
                     : parse_meta(c, f, file, err);
      seen_meta = true;
      continue;
    }
    if (!c->string[0]) {
      rc = bad(err, file, "%s", "a tensor has an empty name");
      break;
    }
    if (index_get(&f->by_name, c->string) >= 0)
      rc = bad(err, file, "tensor name '%s' appears twice", c->string);
    if (rc == 0 && (rc = parse_entry(c, &f->entries[f->n], f->size, file, err)) == 0) {
      index_put(&f->by_name, f->entries[f->n].name, f->n);
      f->n++;
    }
  }
  cJSON_Delete(root);
  if (rc) return rc;
  qsort(f->entries, (size_t)f->n, sizeof *f->entries, by_begin);
  /* The entries moved: index them again, in their new places. */
  memset(f->by_name.name, 0, sizeof *f->by_name.name * (f->by_name.mask + 1));
  for (int k = 0; k < f->n; k++)
    index_put(&f->by_name, f->entries[k].name, k);
  uint64_t at = 0;
  for (int k = 0; k < f->n; k++) {
    if (f->entries[k].begin < at)
      return bad(err, file, "tensor '%s' overlaps the one before it in the buffer",
                 f->entries[k].name);
    if (f->entries[k].begin > at)
      return bad(err, file, "the buffer has a hole before tensor '%s'", f->entries[k].name);
    at = f->entries[k].end;
  }
  if (at != f->size) return bad(err, file, "%s", "the buffer has bytes no tensor describes");
  return 0;
}

int tsr__st_parse(tsr_st_file_t **out, const void *bytes, size_t size, const char *name,
                  tsr_errbuf_t *err) {
  *out = NULL;
  const unsigned char *b = bytes;
  if (size < 8) return bad(err, name, "%s", "shorter than its 8-byte header length");
  uint64_t hlen = 0;
  for (int k = 0; k < 8; k++)
    hlen |= (uint64_t)b[k] << (8 * k);
  if (hlen > TSR_ST_MAX_HEADER) return bad(err, name, "%s", "header length above 100 MB");
  if (hlen > size - 8) return bad(err, name, "%s", "truncated inside its header");
  tsr_st_file_t *f = calloc(1, sizeof *f);
  if (!f) return tsr_error_set(err, TSR_ENOMEM, "%s: out of memory", name);
  f->size = size - 8 - hlen;
  f->buffer = aligned_alloc(64, (f->size + 63) / 64 * 64 + 64);
  int rc = f->buffer ? 0 : tsr_error_set(err, TSR_ENOMEM, "%s: out of memory", name);
  if (rc == 0) {
    memcpy(f->buffer, b + 8 + hlen, f->size);
    rc = parse_header(f, (const char *)b + 8, hlen, name, err);
  }
  if (rc) {
    tsr__st_close(&f);
    return rc;
  }
  *out = f;
  return 0;
}

int tsr__st_open(tsr_st_file_t **out, const char *path, tsr_errbuf_t *err) {
  *out = NULL;
  int fd = open(path, O_RDONLY);
  struct stat st;
  if (fd < 0 || fstat(fd, &st) != 0) {
    int e = errno;
    if (fd >= 0) close(fd);
    return tsr_error_set(err, TSR_EIO, "%s: cannot open: %s", path, strerror(e));
  }
  if (!S_ISREG(st.st_mode)) {
    close(fd);
    return tsr_error_set(err, TSR_EIO, "%s: not a regular file", path);
  }
  size_t size = (size_t)st.st_size;
  char *bytes = malloc(size ? size : 1);
  size_t got = 0;
  while (bytes && got < size) {
    ssize_t r = read(fd, bytes + got, size - got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    got += (size_t)r;
  }
  int e = errno;
  close(fd);
  if (!bytes || got != size) {
    free(bytes);
    return tsr_error_set(err, bytes ? TSR_EIO : TSR_ENOMEM, "%s: cannot read: %s", path,
                         bytes ? strerror(e) : "out of memory");
  }
  int rc = tsr__st_parse(out, bytes, size, path, err);
  free(bytes);
  return rc;
}

void tsr__st_close(tsr_st_file_t **fp) {
  tsr_st_file_t *f = *fp;
  if (!f) return;
  for (int k = 0; f->entries && k < f->n; k++)
    free(f->entries[k].name);
  for (int k = 0; k < f->nmeta; k++)
    free(f->keys[k]), free(f->values[k]);
  free(f->entries), free(f->keys), free(f->values), free(f->buffer);
  index_fini(&f->by_name), index_fini(&f->by_key);
  free(f);
  *fp = NULL;
}

int tsr__st_count(const tsr_st_file_t *f) {
  return f->n;
}

void tsr__st_tensor(const tsr_st_file_t *f, int i, tsr_st_tensor_t *t) {
  const entry_t *e = &f->entries[i];
  t->name = e->name, t->ndims = e->ndims;
  memcpy(t->shape, e->shape, sizeof t->shape);
  t->data = (const float *)((const char *)f->buffer + e->begin);
}

int tsr__st_find(const tsr_st_file_t *f, const char *name) {
  return index_get(&f->by_name, name);
}

const char *tsr__st_meta(const tsr_st_file_t *f, const char *key) {
  int k = index_get(&f->by_key, key);
  return k >= 0 ? f->values[k] : NULL;
}

int tsr__st_nmeta(const tsr_st_file_t *f) {
  return f->nmeta;
}

tsr_st_meta_t tsr__st_meta_at(const tsr_st_file_t *f, int k) {
  return (tsr_st_meta_t){f->keys[k], f->values[k]};
}
