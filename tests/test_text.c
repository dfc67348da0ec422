/* The text loader (src/data/text.c): windows of T byte tokens at stride T with their next-byte
 * targets, files concatenated in order, the split (the last windows the test set), every refusal
 * before training (an empty file, a folder, a FIFO, which must not block, an unreadable file, a
 * missing one, a text shorter than T + 1 bytes, too few windows for the split), each naming the
 * file and leaving both sets zeroed; the default corpus's file list; and what the rest of the
 * data code does with T labels a sample (truncation, --val-split, classes, standardization). */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "data/text.h"
#include "tessera/data.h"
#include "tessera/train.h"
#include "tmpfile.h"

static char dir[64];

static void setup(void) {
  make_temp_dir(dir, sizeof dir, "tsr-test-text");
}

static void teardown(void) {
  remove_temp_dir(dir);
}

TestSuite(text, .init = setup, .fini = teardown, .timeout = 60);

/* dir/name holding len bytes: its path (rotating buffers, several at once). */
static const char *write_bytes(const char *name, const void *bytes, size_t len) {
  static char paths[8][128];
  static int next;
  char *p = paths[next++ % 8];
  snprintf(p, sizeof paths[0], "%s/%s", dir, name);
  FILE *f = fopen(p, "wb");
  cr_assert_not_null(f, "cannot create %s", p);
  if (len) cr_assert_eq(fwrite(bytes, 1, len, f), len);
  fclose(f);
  return p;
}

static const char *write_str(const char *name, const char *text) {
  return write_bytes(name, text, strlen(text));
}

static void assert_zeroed(const tsr_dataset_t *ds) {
  cr_assert(ds->n == 0 && ds->x == NULL && ds->y == NULL && ds->features == 0);
}

/* One file refused: rc, both sets zeroed, the message holding path and want. */
static void assert_refused(const char *path, int context, double fraction, int rc_want,
                           const char *want) {
  tsr_dataset_t train, test;
  tsr_errbuf_t err = {""};
  int rc = tsr_dataset_load_text(&train, &test, &path, 1, context, fraction, &err);
  cr_assert_eq(rc, rc_want, "%s: rc %d, want %d (%s)", path, rc, rc_want, err.msg);
  cr_assert(strstr(err.msg, path), "the message names the file: %s", err.msg);
  cr_assert(strstr(err.msg, want), "the message says '%s': %s", want, err.msg);
  assert_zeroed(&train);
  assert_zeroed(&test);
}

Test(text, windows_and_targets) {
  const char *p = write_str("t", "abcdefghij"); /* 10 bytes, T = 3: 3 windows, 'j' a target */
  tsr_dataset_t train, test;
  tsr_errbuf_t err = {""};
  cr_assert_eq(tsr_dataset_load_text(&train, &test, &p, 1, 3, 0.0, &err), 0, "%s", err.msg);
  cr_assert_eq(train.n, 3);
  cr_assert_eq(test.n, 0);
  cr_assert(train.features == 3 && train.targets == 3 && train.classes == 256);
  cr_assert(train.channels == 1 && train.height == 3 && train.width == 1);
  cr_assert(test.features == 3 && test.targets == 3 && test.classes == 256 && test.height == 3);
  for (int i = 0; i < 3; i++)
    for (int t = 0; t < 3; t++) {
      cr_assert_eq(train.x[i * 3 + t], (float)('a' + 3 * i + t), "x[%d][%d]", i, t);
      cr_assert_eq(train.y[i * 3 + t], (float)('a' + 3 * i + t + 1), "y[%d][%d]", i, t);
    }
  tsr_dataset_fini(&train);
  tsr_dataset_fini(&test);
}

/* T + 1 bytes make one window; T bytes none (refused). Any byte value is a token. */
Test(text, every_byte_value_and_the_shortest_text) {
  unsigned char b[5] = {0, 255, 128, 10, 7};
  const char *p = write_bytes("b", b, sizeof b);
  tsr_dataset_t train, test;
  tsr_errbuf_t err = {""};
  cr_assert_eq(tsr_dataset_load_text(&train, &test, &p, 1, 4, 0.0, &err), 0, "%s", err.msg);
  cr_assert_eq(train.n, 1);
  float x[4] = {0, 255, 128, 10}, y[4] = {255, 128, 10, 7};
  for (int t = 0; t < 4; t++)
    cr_assert(train.x[t] == x[t] && train.y[t] == y[t], "position %d", t);
  tsr_dataset_fini(&train);
  tsr_dataset_fini(&test);
  assert_refused(p, 5, 0.0, TSR_EFORMAT, "context (5 tokens) is longer than the text (5 bytes)");
}

Test(text, files_concatenated_in_order) {
  const char *paths[3] = {write_str("a", "abc"), write_str("b", "defg"), write_str("c", "hi")};
  tsr_dataset_t train, test;
  tsr_errbuf_t err = {""};
  /* "abcdefghi": T = 2, 4 windows (ab cd ef gh; i a target). */
  cr_assert_eq(tsr_dataset_load_text(&train, &test, paths, 3, 2, 0.0, &err), 0, "%s", err.msg);
  cr_assert_eq(train.n, 4);
  for (int k = 0; k < 8; k++)
    cr_assert(train.x[k] == (float)('a' + k) && train.y[k] == (float)('a' + k + 1), "token %d", k);
  tsr_dataset_fini(&train);
  tsr_dataset_fini(&test);
  /* The other order is another text. */
  const char *swapped[2] = {paths[1], paths[0]};
  cr_assert_eq(tsr_dataset_load_text(&train, &test, swapped, 2, 2, 0.0, &err), 0, "%s", err.msg);
  cr_assert_eq(train.x[0], (float)'d');
  tsr_dataset_fini(&train);
  tsr_dataset_fini(&test);
}

/* 101 bytes, T = 4: 25 windows; 0.1 holds out floor(2.5) = 2, the last two, contiguous. */
Test(text, the_last_windows_are_the_test_set) {
  char text[102];
  for (int k = 0; k < 101; k++)
    text[k] = (char)(32 + k % 90);
  text[101] = '\0';
  const char *p = write_str("s", text);
  tsr_dataset_t train, test;
  tsr_errbuf_t err = {""};
  cr_assert_eq(tsr_dataset_load_text(&train, &test, &p, 1, 4, 0.1, &err), 0, "%s", err.msg);
  cr_assert_eq(train.n, 23);
  cr_assert_eq(test.n, 2);
  for (int k = 0; k < 8; k++) {
    cr_assert_eq(test.x[k], (float)text[92 + k], "test token %d", k);
    cr_assert_eq(test.y[k], (float)text[93 + k], "test target %d", k);
  }
  cr_assert_eq(train.x[22 * 4 + 3], (float)text[91]);
  tsr_dataset_fini(&train);
  tsr_dataset_fini(&test);
  /* 4 windows cannot put one aside at 0.1 (floor(0.4) = 0): refused with the windows needed,
   * 10 (41 bytes); 10 windows can. */
  const char *four = write_bytes("four", text, 17);
  assert_refused(four, 4, 0.1, TSR_EFORMAT, "that needs 10 windows (41 bytes)");
  const char *ten = write_bytes("ten", text, 41);
  cr_assert_eq(tsr_dataset_load_text(&train, &test, &ten, 1, 4, 0.1, &err), 0, "%s", err.msg);
  cr_assert(train.n == 9 && test.n == 1);
  tsr_dataset_fini(&train);
  tsr_dataset_fini(&test);
  /* One window cannot be split at all. */
  const char *one = write_bytes("one", text, 5);
  assert_refused(one, 4, 0.9, TSR_EFORMAT, "that needs 2 windows (9 bytes)");
}

Test(text, refusals_name_the_file) {
  assert_refused(write_bytes("empty", "", 0), 4, 0.1, TSR_EFORMAT, "empty text file");
  char sub[128];
  snprintf(sub, sizeof sub, "%s/folder", dir);
  cr_assert_eq(mkdir(sub, 0700), 0);
  assert_refused(sub, 4, 0.1, TSR_EIO, "is a folder");
  char missing[128];
  snprintf(missing, sizeof missing, "%s/missing", dir);
  assert_refused(missing, 4, 0.1, TSR_EIO, "No such file");
  assert_refused(write_str("short", "abcd"), 8, 0.1, TSR_EFORMAT,
                 "context (8 tokens) is longer than the text (4 bytes)");
}

/* A FIFO with no writer: opening it for reading would block until one came (the suite's
 * timeout would end the test); it is refused from its stat. */
Test(text, a_fifo_is_refused_without_blocking, .timeout = 10) {
  char fifo[128];
  snprintf(fifo, sizeof fifo, "%s/fifo", dir);
  cr_assert_eq(mkfifo(fifo, 0600), 0, "mkfifo: %s", strerror(errno));
  assert_refused(fifo, 4, 0.1, TSR_EIO, "is a pipe (FIFO)");
  /* Among other files, before any is read. */
  const char *paths[2] = {write_str("ok", "some text of enough bytes"), fifo};
  tsr_dataset_t train, test;
  tsr_errbuf_t err = {""};
  cr_assert_eq(tsr_dataset_load_text(&train, &test, paths, 2, 4, 0.0, &err), TSR_EIO);
  cr_assert(strstr(err.msg, fifo), "%s", err.msg);
  assert_zeroed(&train);
}

Test(text, an_unreadable_file_is_refused) {
  if (geteuid() == 0) cr_skip_test("root reads a file of mode 000");
  const char *p = write_str("secret", "some text of enough bytes");
  cr_assert_eq(chmod(p, 0), 0);
  assert_refused(p, 4, 0.1, TSR_EIO, "Permission denied");
}

/* The bytes-in-memory entry the fuzzer drives: the same windows, the name in messages. */
Test(text, from_memory) {
  tsr_dataset_t train, test;
  tsr_errbuf_t err = {""};
  cr_assert_eq(tsr__dataset_load_text_mem(&train, &test, "0123456", 7, "<mem>", 2, 0.0, &err), 0);
  cr_assert(train.n == 3 && train.x[4] == '4' && train.y[5] == '6');
  tsr_dataset_fini(&train);
  tsr_dataset_fini(&test);
  cr_assert_eq(tsr__dataset_load_text_mem(&train, &test, "", 0, "<mem>", 2, 0.0, &err),
               TSR_EFORMAT);
  cr_assert(strstr(err.msg, "<mem>: empty text file"), "%s", err.msg);
  cr_assert_eq(tsr__dataset_load_text_mem(&train, &test, "0123", 4, "<mem>", 2, 1.0, &err),
               TSR_EINVAL);
}

Test(text, the_default_corpus_files) {
  const char *a = write_str("alpha", "text a"), *b = write_str("beta", "text b");
  write_str("alpha.dat", "index"); /* fortune's index: left out */
  write_bytes("zero", "", 0);      /* empty: left out */
  char link[128], sub[128];
  snprintf(link, sizeof link, "%s/alpha.u8", dir);
  cr_assert_eq(symlink("alpha", link), 0);
  snprintf(sub, sizeof sub, "%s/gamma", dir);
  cr_assert_eq(mkdir(sub, 0700), 0); /* a folder: left out */
  char **paths;
  int n;
  tsr_errbuf_t err = {""};
  cr_assert_eq(tsr_dataset_text_files(&paths, &n, dir, &err), 0, "%s", err.msg);
  cr_assert_eq(n, 2);
  cr_assert_str_eq(paths[0], a);
  cr_assert_str_eq(paths[1], b);
  tsr_dataset_text_files_free(paths, n);
  cr_assert_eq(tsr_dataset_text_files(&paths, &n, sub, &err), TSR_EIO);
  cr_assert(strstr(err.msg, "no plain text file") && strstr(err.msg, "fortunes"), "%s", err.msg);
  char missing[128];
  snprintf(missing, sizeof missing, "%s/missing", dir);
  cr_assert_eq(tsr_dataset_text_files(&paths, &n, missing, &err), TSR_EIO);
  cr_assert(strstr(err.msg, missing) && strstr(err.msg, "apt-get install fortunes"), "%s", err.msg);
}

/* The fortunes package (scripts/setup.sh installs it): about 2.5 MB of text, 128-token windows. */
Test(text, the_default_corpus) {
  char **paths;
  int n;
  tsr_errbuf_t err = {""};
  if (tsr_dataset_text_files(&paths, &n, TSR_DEFAULT_TEXT_DIR, &err)) cr_skip_test("%s", err.msg);
  tsr_dataset_t train, test;
  int rc = tsr_dataset_load_text(&train, &test, (const char *const *)paths, n, 128, 0.1, &err);
  tsr_dataset_text_files_free(paths, n);
  cr_assert_eq(rc, 0, "%s", err.msg);
  cr_assert(train.n + test.n > 15000, "%lld windows", (long long)(train.n + test.n));
  cr_assert_eq(test.n, (train.n + test.n) / 10);
  tsr_dataset_fini(&train);
  tsr_dataset_fini(&test);
}

/* What the rest of the data code does with T labels a sample. */
Test(text, sets_of_windows_elsewhere) {
  char text[402];
  for (int k = 0; k < 401; k++)
    text[k] = (char)('a' + k % 26);
  text[401] = '\0';
  const char *p = write_str("w", text);
  tsr_dataset_t train, test, val;
  tsr_errbuf_t err = {""};
  cr_assert_eq(tsr_dataset_load_text(&train, &test, &p, 1, 8, 0.0, &err), 0, "%s", err.msg);
  cr_assert_eq(train.n, 50);
  /* Auto standardization leaves token ids alone. */
  tsr_standardization_t z;
  cr_assert_eq(tsr_standardization_fit(&z, TSR_STANDARDIZE_AUTO, &train, &err), 0);
  cr_assert_eq(z.kind, TSR_STANDARDIZE_NONE);
  tsr_standardization_fini(&z);
  /* Every target counts for the classes: 'z' (122) is one. */
  cr_assert_eq(tsr_dataset_set_classes(&train, 122, "the text", &err), TSR_EFORMAT);
  int64_t counts[256];
  tsr_dataset_class_counts(&train, counts);
  int64_t total = 0;
  for (int c = 0; c < 256; c++)
    total += counts[c];
  cr_assert_eq(total, 50 * 8);
  /* --val-split moves each window with its 8 targets. */
  cr_assert_eq(tsr_validation_split(&train, &val, 0.2, 7, &err), 0, "%s", err.msg);
  cr_assert(train.n == 40 && val.n == 10);
  for (int64_t i = 0; i < val.n; i++)
    for (int t = 0; t < 8; t++)
      cr_assert_eq(val.y[i * 8 + t], val.x[i * 8 + t] == 'z' ? 'a' : val.x[i * 8 + t] + 1);
  for (int64_t i = 0; i < train.n; i++)
    for (int t = 0; t < 8; t++)
      cr_assert_eq(train.y[i * 8 + t], train.x[i * 8 + t] == 'z' ? 'a' : train.x[i * 8 + t] + 1);
  /* --train-limit keeps whole windows. */
  cr_assert_eq(tsr_dataset_truncate(&train, 3), 0);
  for (int k = 0; k < 3 * 8; k++)
    cr_assert_eq(train.y[k], train.x[k] == 'z' ? 'a' : train.x[k] + 1);
  tsr_dataset_fini(&train);
  tsr_dataset_fini(&test);
  tsr_dataset_fini(&val);
}
