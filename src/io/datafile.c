/* The data folders and the one way model and cluster files are opened (datafile.h): a name
 * resolved to a path, then opened without blocking and checked to be a regular file. The
 * folders come from the build (tsr_datadir.h, written by meson: the configured data folder, the
 * source and build roots) and from the running program's own path. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tsr_datadir.h" /* written by meson (src/meson.build) */
#include "io/datafile.h"

const tsr_datafile_kind_t tsr__datafile_models = {
    .folder = "models",
    .checkout = "models",
    .what = "model file",
    .hint = "a model is read from a regular INI file",
};
const tsr_datafile_kind_t tsr__datafile_clusters = {
    .folder = "clusters",
    .checkout = "benchmarks/clusters",
    .what = "cluster file",
    .hint = "a machine is described in a regular INI file",
};

enum { MAX_DIRS = 4 };

/* The folders a bare name is looked up in, in order (datafile.h); returns how many. */
static int data_dirs(const tsr_datafile_kind_t *kind, char dirs[MAX_DIRS][PATH_MAX]) {
  const char *env = getenv("TESSERA_DATA_DIR");
  if (env && *env) {
    snprintf(dirs[0], PATH_MAX, "%s/%s", env, kind->folder);
    return 1;
  }
  int n = 0;
  char exe[PATH_MAX];
  ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (len > 0) {
    exe[len] = '\0';
    char *slash = strrchr(exe, '/');
    if (slash) *slash = '\0'; /* the program's folder (bin/) */
    char prefix[PATH_MAX];
    snprintf(prefix, sizeof prefix, "%s", exe);
    slash = strrchr(prefix, '/');
    if (slash) *slash = '\0'; /* the folder above it (the installed prefix) */
    if (snprintf(dirs[n], PATH_MAX, "%s/share/tessera/%s", prefix, kind->folder) < PATH_MAX) n++;
  }
  snprintf(dirs[n++], PATH_MAX, "%s/tessera/%s", TSR_DATADIR, kind->folder);
  size_t root = strlen(TSR_BUILD_ROOT);
  if (len > 0 && strncmp(exe, TSR_BUILD_ROOT, root) == 0 && (exe[root] == '/' || !exe[root]))
    snprintf(dirs[n++], PATH_MAX, "%s/%s", TSR_SOURCE_ROOT, kind->checkout);
  return n;
}

/* Writes into found the path name means: as given, or the first NAME or NAME.ini in the data
 * folders. TSR_EIO naming every folder looked in when a bare name is found nowhere. */
static int resolve(const tsr_datafile_kind_t *kind, const char *name, char *found,
                   size_t found_size, tsr_errbuf_t *err) {
  snprintf(found, found_size, "%s", name);
  if (!*name || strchr(name, '/') || access(name, F_OK) == 0) return 0;
  char dirs[MAX_DIRS][PATH_MAX];
  int n = data_dirs(kind, dirs);
  size_t len = strlen(name);
  bool has_ini = len > 4 && strcmp(name + len - 4, ".ini") == 0;
  for (int i = 0; i < n; i++)
    for (int ini = 0; ini <= !has_ini; ini++) {
      char path[PATH_MAX + 256];
      int len_path = snprintf(path, sizeof path, "%s/%s%s", dirs[i], name, ini ? ".ini" : "");
      if (len_path < (int)sizeof path && access(path, F_OK) == 0) {
        snprintf(found, found_size, "%s", path);
        return 0;
      }
    }
  char where[MAX_DIRS * (PATH_MAX + 2)] = "";
  for (int i = 0, at = 0; i < n; i++)
    at += snprintf(where + at, sizeof where - (size_t)at, "%s%s", i ? ", " : "", dirs[i]);
  return tsr_error_set(err, TSR_EIO,
                       "%s: no such %s here, nor in %s; give a path, or set TESSERA_DATA_DIR to "
                       "a folder holding %s/",
                       name, kind->what, where, kind->folder);
}

bool tsr__datafile_find(const tsr_datafile_kind_t *kind, const char *name, char *found,
                        size_t found_size) {
  char dirs[MAX_DIRS][PATH_MAX];
  int n = data_dirs(kind, dirs);
  for (int i = 0; i < n; i++) {
    char path[PATH_MAX + 256];
    struct stat sb;
    int len = snprintf(path, sizeof path, "%s/%s", dirs[i], name);
    if (len < (int)sizeof path && (size_t)len < found_size && stat(path, &sb) == 0 &&
        S_ISREG(sb.st_mode)) {
      snprintf(found, found_size, "%s", path);
      return true;
    }
  }
  return false;
}

int tsr__datafile_open(const tsr_datafile_kind_t *kind, const char *name, FILE **f, char *found,
                       size_t found_size, tsr_errbuf_t *err) {
  *f = NULL;
  int rc = resolve(kind, name, found, found_size, err);
  if (rc) return rc;
  int fd = open(found, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0)
    return tsr_error_set(err, TSR_EIO, "%s: cannot open %s: %s", found, kind->what,
                         strerror(errno));
  struct stat sb;
  char folder[64];
  snprintf(folder, sizeof folder, "is a folder, not a %s", kind->what);
  const char *bad = fstat(fd, &sb) != 0   ? strerror(errno)
                    : S_ISDIR(sb.st_mode) ? folder
                    : !S_ISREG(sb.st_mode)
                        ? "is not a regular file (a named pipe, a device or a socket)"
                        : NULL;
  FILE *stream = bad ? NULL : fdopen(fd, "r");
  if (!stream) {
    int e = errno;
    close(fd);
    return tsr_error_set(err, TSR_EIO, "%s: %s; %s", found, bad ? bad : strerror(e), kind->hint);
  }
  *f = stream;
  return 0;
}
