/*
 * io.c - tensors in files, in NumPy's formats: .npy (one array: a magic
 * string, a version, a header that is a Python dict literal, then the raw
 * little-endian values) and .npz (a zip archive of .npy entries, stored
 * uncompressed as numpy.savez writes it). Only what optree's dtypes need is
 * read: '<f4', '<f8', '<i4'. Everything read is checked against the file's
 * length before it is trusted, so a truncated or corrupt file is an error
 * (OT_EIO, or OT_EUNSUPPORTED for valid files optree cannot take), never a
 * read past a buffer; nothing is left allocated on any error.
 *
 * Reads go through a region (a FILE with a byte budget: the whole .npy, or
 * one zip entry), which also keeps a running CRC-32 for zip entries.
 */
#include "internal.h"

#include <errno.h>
#include <stdio.h>
#include <sys/stat.h>

/* ---- CRC-32 (the zip checksum: reflected polynomial 0xEDB88320) ---------- */

typedef struct crc32 {
    uint32_t table[256];
    uint32_t value;
} crc32;

static void crc_init(crc32 *c)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t v = i;
        for (int k = 0; k < 8; k++)
            v = (v >> 1) ^ (0xEDB88320u & (0u - (v & 1u)));
        c->table[i] = v;
    }
    c->value = 0xFFFFFFFFu;
}

static void crc_add(crc32 *c, const void *data, size_t n)
{
    const unsigned char *p = data;
    uint32_t v = c->value;
    for (size_t i = 0; i < n; i++)
        v = c->table[(v ^ p[i]) & 0xFFu] ^ (v >> 8);
    c->value = v;
}

static uint32_t crc_done(const crc32 *c) { return c->value ^ 0xFFFFFFFFu; }

/* ---- little-endian fields ------------------------------------------------ */

static void put16(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)v;
    p[1] = (unsigned char)(v >> 8);
}

static void put32(unsigned char *p, uint32_t v)
{
    put16(p, v & 0xFFFFu);
    put16(p + 2, v >> 16);
}

static uint32_t get16(const unsigned char *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8; }

static uint32_t get32(const unsigned char *p) { return get16(p) | get16(p + 2) << 16; }

/* ---- reading a region of a file ------------------------------------------ */

typedef struct region {
    FILE *f;
    const char *fn, *path;
    uint64_t left;                /* bytes of the region not yet read */
    crc32 *crc;                   /* NULL: no checksum (a plain .npy) */
} region;

static int bad_file(const region *r, const char *fmt, const char *what)
{
    return ot__err_set(OT_EIO, NULL, 0, r->fn, "'%s': %s%s", r->path, fmt, what);
}

/* Reads exactly n bytes of the region, what naming them in the error. */
static int rd(region *r, void *p, size_t n, const char *what)
{
    if (n > r->left)
        return bad_file(r, "truncated: the file ends inside ", what);
    if (fread(p, 1, n, r->f) != n)
        return bad_file(r, ferror(r->f) ? "read error in " : "truncated: the file ends inside ",
                        what);
    r->left -= n;
    if (r->crc)
        crc_add(r->crc, p, n);
    return 0;
}

/* ---- the .npy header's dict ---------------------------------------------- */

/* What the header says. */
typedef struct npy_info {
    ot_dtype dtype;
    bool fortran;
    ot_shape shape;
} npy_info;

static void skip_ws(const char **p)
{
    while (**p == ' ' || **p == '\t' || **p == '\n' || **p == '\r')
        (*p)++;
}

static bool eat(const char **p, char c)
{
    skip_ws(p);
    if (**p != c)
        return false;
    (*p)++;
    return true;
}

/* A quoted string (no escapes: NumPy's keys and descrs have none) into
 * out[cap]. */
static bool parse_str(const char **p, char *out, size_t cap)
{
    skip_ws(p);
    char q = **p;
    if (q != '\'' && q != '"')
        return false;
    const char *end = strchr(*p + 1, q);
    if (!end || (size_t)(end - *p - 1) >= cap)
        return false;
    memcpy(out, *p + 1, (size_t)(end - *p - 1));
    out[end - *p - 1] = '\0';
    *p = end + 1;
    return true;
}

static bool parse_bool(const char **p, bool *v)
{
    skip_ws(p);
    if (strncmp(*p, "True", 4) == 0 || strncmp(*p, "False", 5) == 0) {
        *v = **p == 'T';
        *p += *v ? 4 : 5;
        return true;
    }
    return false;
}

/* A tuple of non-negative ints: (), (5,), (2, 3). More than OT_MAX_DIMS
 * dims are counted (ndim) but not stored. */
static bool parse_shape(const char **p, ot_shape *s)
{
    memset(s, 0, sizeof *s);
    if (!eat(p, '('))
        return false;
    for (;;) {
        if (eat(p, ')'))
            return true;
        skip_ws(p);
        if (**p < '0' || **p > '9')
            return false;
        int64_t v = 0;
        for (; **p >= '0' && **p <= '9'; (*p)++) {
            if (v > (INT64_MAX - 9) / 10)
                return false;
            v = v * 10 + (**p - '0');
        }
        if (s->ndim < OT_MAX_DIMS)
            s->dims[s->ndim] = v;
        s->ndim++;
        if (!eat(p, ','))
            return eat(p, ')') && s->ndim > 1;    /* "(5)" is no tuple */
    }
}

/* descr's dtype; OT_EUNSUPPORTED (recorded) for any other. */
static int parse_descr(const region *r, const char *d, ot_dtype *dt)
{
    static const struct { const char *descr; ot_dtype dt; } known[] = {
        {"<f4", OT_F32}, {"<f8", OT_F64}, {"<i4", OT_I32},
    };
    for (size_t i = 0; i < sizeof known / sizeof *known; i++)
        if (strcmp(d, known[i].descr) == 0) {
            *dt = known[i].dt;
            return 0;
        }
    return ot__err_set(OT_EUNSUPPORTED, NULL, 0, r->fn,
                       "'%s': dtype '%s' is not supported%s (optree reads '<f4', '<f8', '<i4')",
                       r->path, d, d[0] == '>' ? ": big-endian" : "");
}

/* One "'key': value" of the dict; seen has a bit per key. */
static int parse_item(const region *r, const char **p, npy_info *info, unsigned *seen)
{
    static const char *const keys[] = {"descr", "fortran_order", "shape"};
    char key[16], descr[32];
    int k = 0;
    if (!parse_str(p, key, sizeof key) || !eat(p, ':'))
        return bad_file(r, "malformed header: ", "expected 'key':");
    while (k < 3 && strcmp(key, keys[k]) != 0)
        k++;
    if (k == 3 || (*seen & 1u << k))
        return bad_file(r, "malformed header: unknown or repeated key ", key);
    *seen |= 1u << k;
    if (k == 0)
        return parse_str(p, descr, sizeof descr) ? parse_descr(r, descr, &info->dtype)
                                                  : bad_file(r, "malformed header: ", "descr");
    if (k == 1 ? parse_bool(p, &info->fortran) : parse_shape(p, &info->shape))
        return 0;
    return bad_file(r, "malformed header: bad value of ", key);
}

/* The dict literal: the three keys, in any order, then only padding. */
static int parse_dict(const region *r, const char *text, npy_info *info)
{
    const char *p = text;
    unsigned seen = 0;
    if (!eat(&p, '{'))
        return bad_file(r, "malformed header: ", "no '{'");
    while (!eat(&p, '}')) {
        int rc = parse_item(r, &p, info, &seen);
        if (rc != 0)
            return rc;
        if (!eat(&p, ',') && (skip_ws(&p), *p != '}'))
            return bad_file(r, "malformed header: ", "expected ',' or '}'");
    }
    skip_ws(&p);
    if (seen != 7u || *p != '\0')
        return bad_file(r, "malformed header: ",
                        seen != 7u ? "a key is missing" : "text after the dict");
    if (info->shape.ndim > OT_MAX_DIMS)
        return ot__err_set(OT_EUNSUPPORTED, NULL, 0, r->fn,
                           "'%s': %d dims (optree has at most %d)", r->path,
                           info->shape.ndim, OT_MAX_DIMS);
    return 0;
}

/* The magic, the version and the header, up to the first value. */
static int read_header(region *r, npy_info *info)
{
    unsigned char pre[12];
    if (rd(r, pre, 8, "the magic string") != 0)
        return OT_EIO;
    if (memcmp(pre, "\x93NUMPY", 6) != 0)
        return bad_file(r, "not a .npy file: ", "bad magic string");
    if (pre[6] < 1 || pre[6] > 3 || pre[7] != 0)
        return ot__err_set(OT_EUNSUPPORTED, NULL, 0, r->fn,
                           "'%s': .npy format version %d.%d (optree reads 1.0 to 3.0)",
                           r->path, pre[6], pre[7]);
    bool wide = pre[6] > 1;       /* versions 2 and 3 have a 4-byte length */
    if (rd(r, pre + 8, wide ? 4 : 2, "the header length") != 0)
        return OT_EIO;
    uint32_t hlen = wide ? get32(pre + 8) : get16(pre + 8);
    if (hlen > (1u << 20) || hlen > r->left)
        return bad_file(r, "bad header length: ", hlen > r->left ? "past the end" : "over 1 MiB");
    char *text = ot__malloc(hlen + 1);
    if (!text)
        return ot__err_set(OT_ENOMEM, NULL, 0, r->fn, "cannot allocate a header");
    int rc = rd(r, text, hlen, "the header");
    text[hlen] = '\0';
    if (rc == 0 && strlen(text) != hlen)
        rc = bad_file(r, "malformed header: ", "a NUL byte");
    if (rc == 0)
        rc = parse_dict(r, text, info);
    free(text);
    return rc;
}

/* A Fortran-order array's bytes are its transpose's in C order. */
static ot_tensor *from_fortran(ot_tensor *t)
{
    ot_tensor *v = ot_transpose(t, NULL);
    ot_tensor *c = v ? ot_copy(v) : NULL;
    ot_tensor_free(v);
    ot_tensor_free(t);
    return c;
}

/* The values the header announced, which must be exactly the rest of the
 * region. */
static ot_tensor *read_values(ot_backend *be, region *r, const npy_info *info)
{
    char sbuf[OT__SHAPE_STRLEN];
    ot_shape s = info->shape;
    if (ot__shape_check(&s, info->dtype, r->fn, NULL, 0) != 0)
        return NULL;
    uint64_t nbytes = (uint64_t)ot__numel(&s) * ot_dtype_size(info->dtype);
    if (nbytes != r->left) {
        ot__err_set(OT_EIO, NULL, 0, r->fn,
                    "'%s': shape %s of %s needs %llu bytes of data, the file has %llu",
                    r->path, ot__shape_str(&s, sbuf), ot_dtype_name(info->dtype),
                    (unsigned long long)nbytes, (unsigned long long)r->left);
        return NULL;
    }
    if (info->fortran)
        for (int d = 0; d < s.ndim; d++)
            s.dims[d] = info->shape.dims[s.ndim - 1 - d];
    ot_tensor *t = ot_empty(be, s, info->dtype);
    if (!t)
        return NULL;
    if (rd(r, ot_tensor_data(t), (size_t)nbytes, "the data") != 0) {
        ot_tensor_free(t);
        return NULL;
    }
    return info->fortran && s.ndim > 1 ? from_fortran(t) : t;
}

static ot_tensor *read_npy(ot_backend *be, region *r)
{
    npy_info info;
    memset(&info, 0, sizeof info);
    return read_header(r, &info) == 0 ? read_values(be, r, &info) : NULL;
}

static FILE *open_file(const char *fn, const char *path, const char *mode)
{
    FILE *f = fopen(path, mode);
    if (!f)
        ot__err_set(OT_EIO, NULL, 0, fn, "cannot open '%s': %s", path, strerror(errno));
    return f;
}

/* The file's length, or -1 (recorded) when it cannot be told. */
static int64_t file_length(FILE *f, const char *fn, const char *path)
{
    long n = -1;
    if (fseek(f, 0, SEEK_END) == 0)
        n = ftell(f);
    if (n < 0 || fseek(f, 0, SEEK_SET) != 0) {
        ot__err_set(OT_EIO, NULL, 0, fn, "'%s': cannot seek: %s", path, strerror(errno));
        return -1;
    }
    return n;
}

/* Checks be and path, the first things every loader checks. */
static int load_args(const ot_backend *be, const char *path, const char *fn)
{
    if (!be)
        return ot__err_null(fn, "backend");
    ot_clear_error();
    return path ? 0 : ot__err_set(OT_ENULL, NULL, 0, fn, "path is NULL");
}

ot_tensor *ot_load(ot_backend *be, const char *path)
{
    if (load_args(be, path, "load") != 0)
        return NULL;
    FILE *f = open_file("load", path, "rb");
    if (!f)
        return NULL;
    int64_t len = file_length(f, "load", path);
    region r = {f, "load", path, (uint64_t)len, NULL};
    ot_tensor *t = len >= 0 ? read_npy(be, &r) : NULL;
    fclose(f);
    return t;
}

/* ---- writing .npy -------------------------------------------------------- */

/* The header numpy.save writes for t (format 1.0, padded with spaces to a
 * multiple of 64 bytes with the magic, ending in a newline) into buf;
 * returns its length. 512 bytes hold the longest (8 dims of 19 digits). */
#define NPY_HEADER_MAX 512
static size_t npy_header(unsigned char *buf, const ot_tensor *t)
{
    static const char *const descr[] = {[OT_F32] = "<f4", [OT_F64] = "<f8", [OT_I32] = "<i4"};
    const ot_shape *s = &t->leaf.shape;
    char *text = (char *)buf + 10;
    int n = sprintf(text, "{'descr': '%s', 'fortran_order': False, 'shape': (",
                    descr[t->leaf.dtype]);
    for (int d = 0; d < s->ndim; d++)
        n += sprintf(text + n, d ? ", %lld" : "%lld", (long long)s->dims[d]);
    n += sprintf(text + n, "%s), }", s->ndim == 1 ? "," : "");
    while ((10 + n + 1) % 64)
        text[n++] = ' ';
    text[n++] = '\n';
    memcpy(buf, "\x93NUMPY\x01\x00", 8);
    put16(buf + 8, (uint32_t)n);
    return 10 + (size_t)n;
}

/* A writer: the FILE, the bytes written and, for zip entries, their CRC. */
typedef struct writer {
    FILE *f;
    const char *fn, *path;
    uint64_t bytes;
    crc32 *crc;
} writer;

static int wr(writer *w, const void *p, size_t n)
{
    if (fwrite(p, 1, n, w->f) != n)
        return ot__err_set(OT_EIO, NULL, 0, w->fn, "'%s': write failed: %s", w->path,
                           strerror(errno));
    w->bytes += n;
    if (w->crc)
        crc_add(w->crc, p, n);
    return 0;
}

/* The header and t's logical values (a view is copied out row-major). */
static int write_npy(writer *w, const ot_tensor *t)
{
    unsigned char head[NPY_HEADER_MAX];
    size_t nbytes = (size_t)ot__numel(&t->leaf.shape) * ot_dtype_size((ot_dtype)t->leaf.dtype);
    int rc = wr(w, head, npy_header(head, t));
    if (rc != 0 || nbytes == 0)
        return rc;
    if (ot_tensor_is_contiguous(t))
        return wr(w, ot_tensor_data(t), nbytes);
    void *tmp = ot__malloc(nbytes);
    if (!tmp)
        return ot__err_set(OT_ENOMEM, NULL, 0, w->fn, "cannot allocate %zu bytes to copy a view",
                           nbytes);
    rc = ot_get(t, tmp);
    if (rc == 0)
        rc = wr(w, tmp, nbytes);
    free(tmp);
    return rc;
}

/* Closes f and, when rc says the write failed, removes the partial file if
 * it is a regular file (never a device such as /dev/full). */
static int finish_write(FILE *f, int rc, const char *fn, const char *path)
{
    struct stat st;
    bool regular = fstat(fileno(f), &st) == 0 && S_ISREG(st.st_mode);
    if (fclose(f) != 0 && rc == 0)
        rc = ot__err_set(OT_EIO, NULL, 0, fn, "'%s': write failed: %s", path, strerror(errno));
    if (rc != 0 && regular)
        remove(path);
    return rc;
}

int ot_save(const char *path, const ot_tensor *t)
{
    if (!t)
        return ot__err_null("save", "tensor");
    ot_clear_error();
    if (!path)
        return ot__err_set(OT_ENULL, NULL, 0, "save", "path is NULL");
    FILE *f = open_file("save", path, "wb");
    if (!f)
        return OT_EIO;
    writer w = {f, "save", path, 0, NULL};
    return finish_write(f, write_npy(&w, t), "save", path);
}

/* ---- .npz: zip archives of stored entries -------------------------------- */

/* Sizes and signatures of the zip records used (PKWARE's APPNOTE). */
#define ZIP_LOCAL 30
#define ZIP_CENTRAL 46
#define ZIP_END 22
#define ZIP_LOCAL_SIG 0x04034b50u
#define ZIP_CENTRAL_SIG 0x02014b50u
#define ZIP_END_SIG 0x06054b50u
#define ZIP_DATE_1980 0x21u       /* MS-DOS date 1980-01-01: no clock is read */
#define ZIP_MAX 0xFFFFFFFEu       /* beyond: zip64, which is not written */

typedef struct zip_entry {
    uint32_t crc, size, offset;
} zip_entry;

/* The fields a local header and a central header share, from "version
 * needed" on: stored (method 0), fixed date, crc and sizes, name length. */
static void zip_common(unsigned char *p, const zip_entry *e, size_t namelen)
{
    memset(p, 0, 26);
    put16(p, 20);
    put16(p + 8, ZIP_DATE_1980);
    put32(p + 10, e->crc);
    put32(p + 14, e->size);
    put32(p + 18, e->size);
    put16(p + 22, (uint32_t)namelen);
    put16(p + 24, 0);
}

static int zip_too_big(const writer *w)
{
    return ot__err_set(OT_EUNSUPPORTED, NULL, 0, w->fn,
                       "'%s': the archive passes 4 GiB (zip64 is not written)", w->path);
}

/* One entry: a local header with the CRC left zero, the .npy bytes, then
 * the CRC and sizes written into the header. */
static int zip_write_entry(writer *w, const char *name, const ot_tensor *t, zip_entry *e)
{
    unsigned char h[ZIP_LOCAL];
    size_t namelen = strlen(name);
    crc32 crc;
    if (w->bytes > ZIP_MAX)
        return zip_too_big(w);
    *e = (zip_entry){0, 0, (uint32_t)w->bytes};
    put32(h, ZIP_LOCAL_SIG);
    zip_common(h + 4, e, namelen + 4);
    int rc = wr(w, h, ZIP_LOCAL);
    if (rc == 0)
        rc = wr(w, name, namelen);
    if (rc == 0)
        rc = wr(w, ".npy", 4);
    crc_init(&crc);
    writer ew = {w->f, w->fn, w->path, 0, &crc};
    if (rc != 0 || (rc = write_npy(&ew, t)) != 0)
        return rc;
    if (ew.bytes > ZIP_MAX)
        return zip_too_big(w);
    w->bytes += ew.bytes;
    e->crc = crc_done(&crc);
    e->size = (uint32_t)ew.bytes;
    zip_common(h + 4, e, namelen + 4);
    if (fseek(w->f, (long)e->offset + 14, SEEK_SET) != 0 || fwrite(h + 14, 1, 12, w->f) != 12 ||
        fseek(w->f, 0, SEEK_END) != 0)
        return ot__err_set(OT_EIO, NULL, 0, w->fn, "'%s': write failed: %s", w->path,
                           strerror(errno));
    return 0;
}

/* The central directory and its end record, after the entries. */
static int zip_write_directory(writer *w, int n, const char *const names[],
                               const zip_entry *e)
{
    unsigned char h[ZIP_CENTRAL];
    uint64_t start = w->bytes;
    int rc = 0;
    for (int i = 0; i < n && rc == 0; i++) {
        size_t namelen = strlen(names[i]);
        memset(h, 0, sizeof h);
        put32(h, ZIP_CENTRAL_SIG);
        put16(h + 4, 20);
        zip_common(h + 6, &e[i], namelen + 4);
        put32(h + 42, e[i].offset);
        rc = wr(w, h, ZIP_CENTRAL);
        if (rc == 0)
            rc = wr(w, names[i], namelen);
        if (rc == 0)
            rc = wr(w, ".npy", 4);
    }
    if (rc != 0)
        return rc;
    if (w->bytes > ZIP_MAX)
        return zip_too_big(w);
    memset(h, 0, ZIP_END);
    put32(h, ZIP_END_SIG);
    put16(h + 8, (uint32_t)n);
    put16(h + 10, (uint32_t)n);
    put32(h + 12, (uint32_t)(w->bytes - start));
    put32(h + 16, (uint32_t)start);
    return wr(w, h, ZIP_END);
}

/* n names, each given, not empty, short enough for zip, and unique. */
static int check_names(const char *fn, int n, const char *const names[])
{
    for (int i = 0; i < n; i++) {
        if (!names[i])
            return ot__err_set(OT_ENULL, NULL, 0, fn, "names[%d] is NULL", i);
        if (!names[i][0] || strlen(names[i]) > 0xFFFF - 4)
            return ot__err_set(OT_EINVAL, NULL, 0, fn, "names[%d] is empty or too long", i);
        for (int j = 0; j < i; j++)
            if (strcmp(names[i], names[j]) == 0)
                return ot__err_set(OT_EINVAL, NULL, 0, fn,
                                   "names[%d] and names[%d] are both '%s'", j, i, names[i]);
    }
    return 0;
}

static int savez_args(const char *path, int n, const char *const names[],
                      const ot_tensor *const tensors[])
{
    if (!path)
        return ot__err_set(OT_ENULL, NULL, 0, "savez", "path is NULL");
    if (n < 0 || n > 0xFFFF)
        return ot__err_set(OT_EINVAL, NULL, 0, "savez", "n is %d (0..65535)", n);
    if (n > 0 && (!names || !tensors))
        return ot__err_set(OT_ENULL, NULL, 0, "savez", "%s is NULL", names ? "tensors" : "names");
    for (int i = 0; i < n; i++)
        if (!tensors[i])
            return ot__err_set(OT_ENULL, NULL, 0, "savez", "tensors[%d] is NULL", i);
    return check_names("savez", n, names);
}

int ot_savez(const char *path, int n, const char *const names[],
             const ot_tensor *const tensors[])
{
    ot_clear_error();
    int rc = savez_args(path, n, names, tensors);
    if (rc != 0)
        return rc;
    zip_entry *e = ot__calloc(n > 0 ? (size_t)n : 1, sizeof *e);
    if (!e)
        return ot__err_set(OT_ENOMEM, NULL, 0, "savez", "cannot allocate %d entries", n);
    FILE *f = open_file("savez", path, "wb");
    if (!f) {
        free(e);
        return OT_EIO;
    }
    writer w = {f, "savez", path, 0, NULL};
    for (int i = 0; i < n && rc == 0; i++)
        rc = zip_write_entry(&w, names[i], tensors[i], &e[i]);
    if (rc == 0)
        rc = zip_write_directory(&w, n, names, e);
    free(e);
    return finish_write(f, rc, "savez", path);
}

/* An archive being read: the file, its length and central directory. */
typedef struct zip {
    region r;                     /* fn and path for errors */
    int64_t len;
    unsigned char *dir;           /* the central directory */
    uint32_t dirlen;
    int count;
    crc32 crc;                    /* of the entry being read */
} zip;

/* The end record: the last "PK\5\6" whose comment ends at the file's end. */
static int zip_find_end(zip *z, unsigned char *end)
{
    int64_t tail = z->len < ZIP_END + 0xFFFF ? z->len : ZIP_END + 0xFFFF;
    unsigned char *buf = ot__malloc((size_t)tail + 1);
    if (!buf)
        return ot__err_set(OT_ENOMEM, NULL, 0, z->r.fn, "cannot allocate a read buffer");
    int rc = 0;
    if (fseek(z->r.f, (long)(z->len - tail), SEEK_SET) != 0 ||
        fread(buf, 1, (size_t)tail, z->r.f) != (size_t)tail)
        rc = bad_file(&z->r, "read error in ", "the end record");
    int64_t i = tail - ZIP_END;
    while (rc == 0 && i >= 0 &&
           (get32(buf + i) != ZIP_END_SIG || i + ZIP_END + get16(buf + i + 20) != tail))
        i--;
    if (rc == 0 && i < 0)
        rc = bad_file(&z->r, "not a zip archive: ", "no end record");
    if (rc == 0)
        memcpy(end, buf + i, ZIP_END);
    free(buf);
    return rc;
}

static int zip_unsupported(const zip *z, const char *what)
{
    return ot__err_set(OT_EUNSUPPORTED, NULL, 0, z->r.fn, "'%s': %s", z->r.path, what);
}

/* Reads the central directory that the end record points at. */
static int zip_open_dir(zip *z)
{
    unsigned char end[ZIP_END] = {0};
    int rc = zip_find_end(z, end);
    if (rc != 0)
        return rc;
    uint32_t count = get16(end + 10), off = get32(end + 16);
    z->dirlen = get32(end + 12);
    if (count == 0xFFFF || off == 0xFFFFFFFFu || z->dirlen == 0xFFFFFFFFu)
        return zip_unsupported(z, "a zip64 archive");
    if (get16(end + 4) != 0 || get16(end + 8) != count)
        return zip_unsupported(z, "a multi-disk archive");
    if ((uint64_t)off + z->dirlen > (uint64_t)z->len)
        return bad_file(&z->r, "corrupt zip: ", "the central directory is past the end");
    z->count = (int)count;
    z->dir = ot__malloc(z->dirlen + 1u);
    if (!z->dir)
        return ot__err_set(OT_ENOMEM, NULL, 0, z->r.fn, "cannot allocate the directory");
    if (fseek(z->r.f, (long)off, SEEK_SET) != 0 ||
        fread(z->dir, 1, z->dirlen, z->r.f) != z->dirlen)
        return bad_file(&z->r, "read error in ", "the central directory");
    return 0;
}

/* Entry i's central header in *h (bounds checked), walking from the start
 * of the directory. */
static int zip_entry_at(zip *z, int i, const unsigned char **h)
{
    uint32_t pos = 0;
    for (int k = 0;; k++) {
        if ((uint64_t)pos + ZIP_CENTRAL > z->dirlen || get32(z->dir + pos) != ZIP_CENTRAL_SIG)
            return bad_file(&z->r, "corrupt zip: ", "a bad central directory entry");
        uint64_t size = (uint64_t)ZIP_CENTRAL + get16(z->dir + pos + 28) +
                        get16(z->dir + pos + 30) + get16(z->dir + pos + 32);
        if (pos + size > z->dirlen)
            return bad_file(&z->r, "corrupt zip: ", "a bad central directory entry");
        if (k == i) {
            *h = z->dir + pos;
            return 0;
        }
        pos += (uint32_t)size;
    }
}

/* The index of the entry called name + ".npy", or -1. */
static int zip_find(zip *z, const char *name, int *found)
{
    size_t n = strlen(name);
    *found = -1;
    for (int i = 0; i < z->count; i++) {
        const unsigned char *h;
        int rc = zip_entry_at(z, i, &h);
        if (rc != 0)
            return rc;
        if (get16(h + 28) == n + 4 && memcmp(h + ZIP_CENTRAL, name, n) == 0 &&
            memcmp(h + ZIP_CENTRAL + n, ".npy", 4) == 0) {
            *found = i;
            return 0;
        }
    }
    return 0;
}

/* Points the region at the stored bytes of the entry whose central header
 * is h, after checking what optree can read. */
static int zip_seek_entry(zip *z, const unsigned char *h)
{
    unsigned char lh[ZIP_LOCAL];
    uint32_t method = get16(h + 10), size = get32(h + 20), off = get32(h + 42);
    if (get16(h + 8) & 1u)
        return zip_unsupported(z, "an encrypted entry");
    if (method != 0)
        return zip_unsupported(z, method == 8 ? "a deflate-compressed entry "
                                                "(numpy.savez_compressed): optree reads "
                                                "stored entries (numpy.savez)"
                                              : "an entry compressed with an unknown method");
    if (size == 0xFFFFFFFFu || off == 0xFFFFFFFFu)
        return zip_unsupported(z, "a zip64 entry");
    if (size != get32(h + 24))
        return bad_file(&z->r, "corrupt zip: ", "a stored entry whose sizes differ");
    if ((uint64_t)off + ZIP_LOCAL > (uint64_t)z->len || fseek(z->r.f, (long)off, SEEK_SET) != 0 ||
        fread(lh, 1, ZIP_LOCAL, z->r.f) != ZIP_LOCAL || get32(lh) != ZIP_LOCAL_SIG)
        return bad_file(&z->r, "corrupt zip: ", "a bad local header");
    uint64_t data = (uint64_t)off + ZIP_LOCAL + get16(lh + 26) + get16(lh + 28);
    if (data + size > (uint64_t)z->len || fseek(z->r.f, (long)data, SEEK_SET) != 0)
        return bad_file(&z->r, "corrupt zip: ", "an entry past the end");
    crc_init(&z->crc);
    z->r.left = size;
    z->r.crc = &z->crc;
    return 0;
}

/* Entry i as a new tensor, its CRC checked. */
static ot_tensor *zip_load_entry(ot_backend *be, zip *z, int i)
{
    const unsigned char *h;
    if (zip_entry_at(z, i, &h) != 0 || zip_seek_entry(z, h) != 0)
        return NULL;
    ot_tensor *t = read_npy(be, &z->r);
    if (t && crc_done(&z->crc) != get32(h + 16)) {
        bad_file(&z->r, "corrupt zip: ", "an entry whose CRC-32 does not match");
        ot_tensor_free(t);
        return NULL;
    }
    return t;
}

/* out[0..n) from the open archive; on error every out[i] is NULL. */
static int zip_load(ot_backend *be, zip *z, int n, const char *const names[], ot_tensor *out[])
{
    int rc = 0;
    for (int i = 0; i < n && rc == 0; i++) {
        int k = i;
        if (names && (rc = zip_find(z, names[i], &k)) != 0)
            break;
        if (k < 0 || k >= z->count) {
            rc = names ? ot__err_set(OT_EINVAL, NULL, 0, z->r.fn, "'%s': no entry '%s.npy'",
                                     z->r.path, names[i])
                       : ot__err_set(OT_EINVAL, NULL, 0, z->r.fn, "'%s': %d entries, not %d",
                                     z->r.path, z->count, n);
            break;
        }
        out[i] = zip_load_entry(be, z, k);
        if (!out[i])
            rc = ot_errcode() ? ot_errcode() : OT_EINTERNAL;
    }
    for (int i = 0; rc != 0 && i < n; i++) {
        ot_tensor_free(out[i]);
        out[i] = NULL;
    }
    return rc;
}

static int loadz_args(const ot_backend *be, const char *path, int n,
                      const char *const names[], ot_tensor *out[])
{
    int rc = load_args(be, path, "loadz");
    if (rc != 0)
        return rc;
    if (n < 0)
        return ot__err_set(OT_EINVAL, NULL, 0, "loadz", "n is %d", n);
    if (n > 0 && !out)
        return ot__err_set(OT_ENULL, NULL, 0, "loadz", "out is NULL");
    for (int i = 0; i < n; i++)
        out[i] = NULL;
    return names ? check_names("loadz", n, names) : 0;
}

int ot_loadz(ot_backend *be, const char *path, int n, const char *const names[],
             ot_tensor *out[])
{
    int rc = loadz_args(be, path, n, names, out);
    if (rc != 0)
        return rc;
    zip z;
    memset(&z, 0, sizeof z);
    z.r = (region){NULL, "loadz", path, 0, NULL};
    z.r.f = open_file("loadz", path, "rb");
    if (!z.r.f)
        return OT_EIO;
    z.len = file_length(z.r.f, "loadz", path);
    rc = z.len < 0 ? OT_EIO : zip_open_dir(&z);
    if (rc == 0)
        rc = zip_load(be, &z, n, names, out);
    free(z.dir);
    fclose(z.r.f);
    return rc == 0 ? z.count : rc;
}
