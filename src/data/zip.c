/* A zip reader for NumPy's .npz files, on bytes in memory: np.savez stores each array as a
 * member NAME.npy, np.savez_compressed deflates it (zlib, raw deflate), and both write zip64
 * extra fields (NumPy forces zip64 on every member). The central directory at the end is the
 * archive's table of contents; each member's local header is checked to agree with it, its data
 * is inflated into a buffer of the size the directory says (no more than deflate can produce
 * from the compressed bytes, so a lying size costs no memory), and its CRC-32 is checked.
 * Encrypted members, other compression methods and multi-disk archives are refused. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "data/zip.h"

#define SIG_LOCAL 0x04034b50u
#define SIG_CENTRAL 0x02014b50u
#define SIG_END 0x06054b50u
#define SIG_END64 0x06064b50u
#define SIG_LOC64 0x07064b50u
#define U32_MAX_FIELD 0xffffffffu
/* Deflate produces at most 258 bytes per 2 bits of input (about 1032:1). */
#define DEFLATE_MAX_RATIO 1032u

static uint16_t le16(const unsigned char *b) {
  return (uint16_t)(b[0] | b[1] << 8);
}
static uint32_t le32(const unsigned char *b) {
  return (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
}
static uint64_t le64(const unsigned char *b) {
  return (uint64_t)le32(b) | (uint64_t)le32(b + 4) << 32;
}

/* Whether [at, at + n) lies within len bytes. */
static int fits(uint64_t at, uint64_t n, size_t len) {
  return at <= len && n <= len - at;
}

typedef struct {
  const unsigned char *z;
  size_t len;
  const char *name;
  tsr_errbuf_t *err;
} zip_t;

static int bad(const zip_t *a, const char *what) {
  return tsr_error_set(a->err, TSR_EFORMAT, "%s: not a valid .npz (zip) file: %s", a->name, what);
}

/* The central directory's offset, size and entry count, from the end record (zip64 where the
 * 32-bit fields say so). */
static int find_directory(const zip_t *a, uint64_t *offset, uint64_t *size, uint64_t *entries) {
  if (a->len < 22) return bad(a, "shorter than a zip end record");
  size_t at = a->len - 22, stop = a->len - 22 > 0xffff ? a->len - 22 - 0xffff : 0;
  for (;; at--) {
    if (le32(a->z + at) == SIG_END && at + 22 + le16(a->z + at + 20) == a->len) break;
    if (at == stop) return bad(a, "no end of central directory record (a cut-short file?)");
  }
  const unsigned char *e = a->z + at;
  if (le16(e + 4) != 0 || le16(e + 6) != 0 || le16(e + 8) != le16(e + 10))
    return bad(a, "a multi-disk archive");
  *entries = le16(e + 10), *size = le32(e + 12), *offset = le32(e + 16);
  if (*entries == 0xffff || *size == U32_MAX_FIELD || *offset == U32_MAX_FIELD) {
    if (at < 20 || le32(a->z + at - 20) != SIG_LOC64) return bad(a, "zip64 locator missing");
    uint64_t e64 = le64(a->z + at - 20 + 8);
    if (!fits(e64, 56, a->len) || le32(a->z + e64) != SIG_END64)
      return bad(a, "zip64 end record missing");
    const unsigned char *r = a->z + e64;
    *entries = le64(r + 32), *size = le64(r + 40), *offset = le64(r + 48);
  }
  if (!fits(*offset, *size, a->len)) return bad(a, "the central directory lies outside the file");
  return 0;
}

/* Replaces the 32-bit fields that say 0xffffffff by the zip64 extra field's values, in order. */
static int zip64_sizes(const zip_t *a, const unsigned char *extra, size_t n, uint64_t *usize,
                       uint64_t *csize, uint64_t *offset) {
  uint64_t *want[3] = {usize, csize, offset};
  for (size_t at = 0; at + 4 <= n;) {
    size_t id = le16(extra + at), len = le16(extra + at + 2);
    if (at + 4 + len > n) return bad(a, "an extra field runs past its entry");
    if (id == 0x0001) {
      size_t k = at + 4, end = at + 4 + len;
      for (int i = 0; i < 3; i++) {
        if (!want[i] || *want[i] != U32_MAX_FIELD) continue;
        if (k + 8 > end) return bad(a, "a zip64 extra field is too short");
        *want[i] = le64(extra + k);
        k += 8;
      }
      return 0;
    }
    at += 4 + len;
  }
  return 0;
}

static void list_member(char *members, size_t size, const unsigned char *n, size_t len) {
  if (!members || size == 0) return;
  size_t used = strlen(members);
  if (used + 1 >= size) return;
  snprintf(members + used, size - used, "%s%.*s", used ? ", " : "", (int)(len > 64 ? 64 : len),
           (const char *)n);
}

/* Inflates csize bytes at src into usize bytes, checking that exactly that many come out. */
static int inflate_member(const zip_t *a, const char *member, const unsigned char *src,
                          uint64_t csize, uint64_t usize, unsigned char **out) {
  if (usize / DEFLATE_MAX_RATIO > csize + 1)
    return tsr_error_set(a->err, TSR_EFORMAT,
                         "%s: %s claims %llu bytes from %llu compressed bytes, more than deflate "
                         "can produce; the file is corrupt",
                         a->name, member, (unsigned long long)usize, (unsigned long long)csize);
  if (usize > SIZE_MAX - 1)
    return tsr_error_set(a->err, TSR_ENOMEM, "%s: %s is too large here", a->name, member);
  unsigned char *buf = malloc(usize ? (size_t)usize : 1);
  if (!buf)
    return tsr_error_set(a->err, TSR_ENOMEM, "%s: out of memory inflating %s (%llu bytes)", a->name,
                         member, (unsigned long long)usize);
  z_stream s = {0};
  if (inflateInit2(&s, -15) != Z_OK) {
    free(buf);
    return tsr_error_set(a->err, TSR_ENOMEM, "%s: cannot start zlib", a->name);
  }
  uint64_t in_left = csize, out_left = usize;
  s.next_in = (unsigned char *)src, s.next_out = buf;
  int zrc = Z_OK;
  while (zrc == Z_OK) {
    /* zlib counts in unsigned int: feed it in pieces. */
    if (s.avail_in == 0 && in_left) {
      s.avail_in = in_left > (1u << 30) ? 1u << 30 : (unsigned)in_left;
      in_left -= s.avail_in;
    }
    if (s.avail_out == 0 && out_left) {
      s.avail_out = out_left > (1u << 30) ? 1u << 30 : (unsigned)out_left;
      out_left -= s.avail_out;
    }
    unsigned before_in = s.avail_in, before_out = s.avail_out;
    zrc = inflate(&s, Z_NO_FLUSH);
    if (zrc == Z_BUF_ERROR || (zrc == Z_OK && s.avail_in == before_in && s.avail_out == before_out))
      break;
  }
  uint64_t produced = usize - out_left - s.avail_out;
  inflateEnd(&s);
  if (zrc != Z_STREAM_END || produced != usize) {
    free(buf);
    if (zrc == Z_DATA_ERROR)
      return tsr_error_set(a->err, TSR_EFORMAT, "%s: %s: corrupt deflate data", a->name, member);
    if (produced == usize)
      return tsr_error_set(a->err, TSR_EFORMAT,
                           "%s: %s: the deflate data holds more than the %llu bytes the directory "
                           "says",
                           a->name, member, (unsigned long long)usize);
    return tsr_error_set(a->err, TSR_EFORMAT,
                         "%s: %s: the deflate data %s after %llu of the %llu bytes the directory "
                         "says",
                         a->name, member, zrc == Z_STREAM_END ? "ends" : "is cut short",
                         (unsigned long long)produced, (unsigned long long)usize);
  }
  *out = buf;
  return 0;
}

/* Entry at `at` of the directory (its bytes checked to lie inside it); *next is the next one. */
static int read_entry(const zip_t *a, uint64_t at, uint64_t end, const char *member,
                      tsr__zip_entry_t *e, uint64_t *next, char *members, size_t size) {
  if (!fits(at, 46, (size_t)end) || le32(a->z + at) != SIG_CENTRAL)
    return bad(a, "a central directory entry is damaged");
  const unsigned char *c = a->z + at;
  uint16_t flags = le16(c + 8), method = le16(c + 10);
  uint32_t crc = le32(c + 16);
  uint64_t csize = le32(c + 20), usize = le32(c + 24), offset = le32(c + 42);
  size_t nlen = le16(c + 28), xlen = le16(c + 30), clen = le16(c + 32);
  if (!fits(at + 46, (uint64_t)nlen + xlen + clen, (size_t)end))
    return bad(a, "a central directory entry runs past the directory");
  *next = at + 46 + nlen + xlen + clen;
  const unsigned char *name = c + 46;
  list_member(members, size, name, nlen);
  if (nlen != strlen(member) || memcmp(name, member, nlen) != 0) return 0;

  int rc = zip64_sizes(a, c + 46 + nlen, xlen, &usize, &csize, &offset);
  if (rc) return rc;
  if (flags & 1)
    return tsr_error_set(a->err, TSR_EFORMAT, "%s: %s is encrypted; save it with np.savez", a->name,
                         member);
  if (method != 0 && method != 8)
    return tsr_error_set(a->err, TSR_EFORMAT,
                         "%s: %s uses zip compression method %u; only stored (np.savez) and "
                         "deflated (np.savez_compressed) members are read",
                         a->name, member, method);
  if (!fits(offset, 30, a->len) || le32(a->z + offset) != SIG_LOCAL)
    return bad(a, "a member's local header is missing");
  const unsigned char *l = a->z + offset;
  uint64_t data = offset + 30 + le16(l + 26) + le16(l + 28);
  if (!fits(data, csize, a->len))
    return tsr_error_set(a->err, TSR_EFORMAT,
                         "%s: truncated: %s's %llu bytes run past the end of the file (%zu bytes)",
                         a->name, member, (unsigned long long)csize, a->len);
  const unsigned char *src = a->z + data;
  if (method == 0) {
    if (csize != usize) return bad(a, "a stored member's sizes disagree");
    e->data = src, e->len = (size_t)usize;
  } else {
    if ((rc = inflate_member(a, member, src, csize, usize, &e->owned)) < 0) return rc;
    e->data = e->owned, e->len = (size_t)usize;
  }
  uLong sum = crc32(0L, Z_NULL, 0);
  for (size_t done = 0; done < e->len;) {
    size_t piece = e->len - done > (1u << 30) ? 1u << 30 : e->len - done;
    sum = crc32(sum, e->data + done, (uInt)piece);
    done += piece;
  }
  if ((uint32_t)sum != crc) {
    tsr__zip_entry_fini(e);
    return tsr_error_set(a->err, TSR_EFORMAT, "%s: %s fails its CRC-32 check; the file is corrupt",
                         a->name, member);
  }
  return 1;
}

int tsr__zip_find(tsr__zip_entry_t *e, const unsigned char *zip, size_t len, const char *name,
                  const char *member, char *members, size_t size, tsr_errbuf_t *err) {
  *e = (tsr__zip_entry_t){0};
  if (members && size) members[0] = '\0';
  zip_t a = {.z = zip, .len = len, .name = name, .err = err};
  uint64_t offset = 0, dsize = 0, entries = 0;
  int rc = find_directory(&a, &offset, &dsize, &entries);
  if (rc) return rc;
  uint64_t at = offset, end = offset + dsize;
  for (uint64_t i = 0; i < entries; i++) {
    if ((rc = read_entry(&a, at, end, member, e, &at, members, size)) != 0) return rc;
  }
  return 0;
}

void tsr__zip_entry_fini(tsr__zip_entry_t *e) {
  free(e->owned);
  *e = (tsr__zip_entry_t){0};
}
