/*
 * io.c - tensors in files, in NumPy's formats: .npy (one array: a magic
 * string, a version, a header that is a Python dict literal, then the raw
 * little-endian values) and .npz (a zip archive of .npy entries, stored as
 * numpy.savez writes them or deflated as numpy.savez_compressed does).
 * Only what optree's dtypes need is read: '<f4', '<f8', '<i4', '<f2', and
 * '<i8' (NumPy's default integer) into i32 when every value fits. bfloat16
 * is written as '<V2' (two raw bytes, the top half of an f32), which is
 * what numpy.save writes for ml_dtypes' bfloat16 (NumPy has no bf16
 * descr; ml_dtypes reads such a file back with .view(bfloat16)), and
 * '<V2' or '|V2' reads as bfloat16. Everything read
 * is checked against the file's length before it is trusted, so a
 * truncated or corrupt file is an error (OT_EIO, or OT_EUNSUPPORTED for
 * valid files optree cannot take), never a read past a buffer; nothing is
 * left allocated on any error.
 *
 * The zip format itself (directories, deflate, CRCs, zip64) is libzip's:
 * an archive is read entry by entry through zip_fread, and written into
 * memory, then out through replace.c like every saved file, so that a
 * failed save never loses the old file.
 *
 * Reads go through a region (a FILE or a zip entry, with a byte budget).
 */
#include "front.h"
#include "replace.h"

#include <errno.h>
#include <stdarg.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <zip.h>

/* ---- little-endian fields ------------------------------------------------ */

static void put16(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)v;
    p[1] = (unsigned char)(v >> 8);
}

static uint32_t get16(const unsigned char *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8; }

static uint32_t get32(const unsigned char *p) { return get16(p) | get16(p + 2) << 16; }

/* ---- reading a region of a file ------------------------------------------ */

typedef struct region {
    FILE *f;                      /* a plain .npy, or */
    zip_file_t *zf;               /* an .npz entry */
    const char *fn, *path;
    uint64_t left;                /* bytes of the region not yet read */
    const char *entry;            /* the .npz entry's name, once known; else NULL */
} region;

/* An error about the region: "'path': " or, inside an archive, "'path':
 * entry 'a.npy': " before the message, so that a bad entry is found. */
__attribute__((format(printf, 3, 4)))
static int file_error(const region *r, int code, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (!r->entry) return ot__err_set(code, NULL, 0, r->fn, "'%s': %s", r->path, msg);
    return ot__err_set(code, NULL, 0, r->fn, "'%s': entry '%s': %s", r->path, r->entry, msg);
}

static int bad_file(const region *r, const char *fmt, const char *what)
{
    return file_error(r, OT_EIO, "%s%s", fmt, what);
}

static int zip_failed(const region *r, zip_error_t *e);

/* Up to n bytes of the zip entry into p; how many, or -1 (recorded). */
static int64_t zip_read(region *r, void *p, size_t n)
{
    size_t got = 0;
    while (got < n) {
        zip_int64_t k = zip_fread(r->zf, (char *)p + got, n - got);
        if (k < 0) {
            zip_failed(r, zip_file_get_error(r->zf));
            return -1;
        }
        if (k == 0)
            break;
        got += (size_t)k;
    }
    return (int64_t)got;
}

/* Reads exactly n bytes of the region, what naming them in the error. */
static int rd(region *r, void *p, size_t n, const char *what)
{
    if (n > r->left)
        return bad_file(r, "truncated: the file ends inside ", what);
    if (r->zf) {
        int64_t k = zip_read(r, p, n);
        if (k < 0)
            return ot_errcode();
        if ((size_t)k != n)
            return bad_file(r, "truncated: the entry ends inside ", what);
    } else if (fread(p, 1, n, r->f) != n)
        return bad_file(r, ferror(r->f) ? "read error in " : "truncated: the file ends inside ",
                        what);
    r->left -= n;
    return 0;
}

/* ---- the .npy header's dict ---------------------------------------------- */

/* What the header says. */
typedef struct npy_info {
    ot_dtype dtype;
    bool int64;                   /* '<i8' in the file, loaded into i32 */
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
static int parse_descr(const region *r, const char *d, npy_info *info)
{
    static const struct { const char *descr; ot_dtype dt; } known[] = {
        {"<f4", OT_F32}, {"<f8", OT_F64}, {"<i4", OT_I32}, {"<i8", OT_I32},
        {"<f2", OT_F16}, {"<V2", OT_BF16}, {"|V2", OT_BF16},
    };
    for (size_t i = 0; i < sizeof known / sizeof *known; i++)
        if (strcmp(d, known[i].descr) == 0) {
            info->dtype = known[i].dt;
            info->int64 = i == 3;
            return 0;
        }
    return file_error(r, OT_EUNSUPPORTED,
                      "dtype '%s' is not supported%s (optree reads '<f4', '<f8', '<i4', '<f2', "
                      "'<V2' as bfloat16, and '<i8' into int32)", d,
                      d[0] == '>' ? ": big-endian" : "");
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
        return parse_str(p, descr, sizeof descr) ? parse_descr(r, descr, info)
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
        return file_error(r, OT_EUNSUPPORTED, "%d dims (optree has at most %d)",
                          info->shape.ndim, OT_MAX_DIMS);
    return 0;
}

/* An archive's entry that does not start as a .npy file does is some
 * other file (numpy.load hands such entries back as bytes), not a
 * truncated or damaged array: said so, whatever its length. */
static int not_npy_entry(const region *r)
{
    return bad_file(r, "not a .npy array: ", r->left < 8 ? "shorter than the .npy magic string"
                                                         : "no .npy magic string");
}

/* The magic, the version and the header, up to the first value. */
static int read_header(region *r, npy_info *info)
{
    unsigned char pre[12];
    if (r->zf && r->left < 8)
        return not_npy_entry(r);
    if (rd(r, pre, 8, "the magic string") != 0)
        return OT_EIO;
    if (r->zf && memcmp(pre, "\x93NUMPY", 6) != 0)
        return not_npy_entry(r);
    if (memcmp(pre, "\x93NUMPY", 6) != 0)
        return bad_file(r, "not a .npy file: ",
                        memcmp(pre, "PK\x03\x04", 4) == 0 || memcmp(pre, "PK\x05\x06", 4) == 0
                            ? "a zip archive (an .npz?): read it with ot_loadz"
                            : "bad magic string");
    if (pre[6] < 1 || pre[6] > 3 || pre[7] != 0)
        return file_error(r, OT_EUNSUPPORTED, ".npy format version %d.%d (optree reads 1.0 "
                          "to 3.0)", pre[6], pre[7]);
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
    ot_tensor *v = (ot_transpose)(t, NULL);
    ot_tensor *c = v ? (ot_copy)(v) : NULL;
    ot_tensor_free(v);
    ot_tensor_free(t);
    return c;
}

/* NumPy's int64 values (n of them) into the i32 tensor data out, a chunk
 * at a time; OT_EOVERFLOW naming the first value that int32 cannot hold. */
static int read_int64(region *r, int32_t *out, int64_t n)
{
    unsigned char chunk[4096];
    for (int64_t i = 0; i < n;) {
        int64_t k = n - i < 512 ? n - i : 512;
        if (rd(r, chunk, (size_t)k * 8, "the data") != 0)
            return ot_errcode();
        for (int64_t j = 0; j < k; j++, i++) {
            uint64_t u = (uint64_t)get32(chunk + 8 * j) | (uint64_t)get32(chunk + 8 * j + 4) << 32;
            int64_t v = u > INT64_MAX ? -(int64_t)(~u) - 1 : (int64_t)u;
            if (v < INT32_MIN || v > INT32_MAX)
                return file_error(r, OT_EOVERFLOW,
                                  "int64 value %lld (element %lld in the file's order) does "
                                  "not fit int32, optree's integer dtype; save it as int32 or "
                                  "float64", (long long)v, (long long)i);
            out[i] = (int32_t)v;
        }
    }
    return 0;
}

/* The values the header announced, which must be exactly the rest of the
 * region. */
static ot_tensor *read_values(ot_backend *be, region *r, const npy_info *info)
{
    char sbuf[OT__SHAPE_STRLEN], msg[256];
    ot_shape s = info->shape;
    int code = ot__shape_problem(&s, info->dtype, msg, sizeof msg);
    if (code) {
        file_error(r, code, "%s", msg);   /* a shape too large, named with its file */
        return NULL;
    }
    int64_t numel = ot__numel(&s);
    uint64_t nbytes = (uint64_t)numel * (info->int64 ? 8 : ot_dtype_size(info->dtype));
    if (nbytes != r->left) {
        file_error(r, OT_EIO, "shape %s of %s needs %llu bytes of data, the file has %llu",
                   ot__shape_str(&s, sbuf), info->int64 ? "int64" : ot_dtype_name(info->dtype),
                   (unsigned long long)nbytes, (unsigned long long)r->left);
        return NULL;
    }
    if (info->fortran)
        for (int d = 0; d < s.ndim; d++)
            s.dims[d] = info->shape.dims[s.ndim - 1 - d];
    ot_tensor *t = (ot_empty)(be, s, info->dtype);
    if (!t)
        return NULL;
    if (info->int64 ? read_int64(r, ot_tensor_data(t), numel) != 0
                    : rd(r, ot_tensor_data(t), (size_t)nbytes, "the data") != 0) {
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

ot_tensor *(ot_load)(ot_backend *be, const char *path)
{
    if (load_args(be, path, "load") != 0)
        return NULL;
    FILE *f = open_file("load", path, "rb");
    if (!f)
        return NULL;
    int64_t len = file_length(f, "load", path);
    region r = {f, NULL, "load", path, (uint64_t)len, NULL};
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
    static const char *const descr[] = {[OT_F32] = "<f4", [OT_F64] = "<f8", [OT_I32] = "<i4",
                                        [OT_F16] = "<f2", [OT_BF16] = "<V2"};
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

/* The header and t's logical values (a view is copied out row-major). */
static int write_npy(ot__replace *w, const char *fn, const ot_tensor *t)
{
    unsigned char head[NPY_HEADER_MAX];
    size_t nbytes = (size_t)ot__numel(&t->leaf.shape) * ot_dtype_size((ot_dtype)t->leaf.dtype);
    int rc = ot__replace_write(w, head, npy_header(head, t));
    if (rc != 0 || nbytes == 0)
        return rc;
    if (ot_tensor_is_contiguous(t))
        return ot__replace_write(w, ot_tensor_data(t), nbytes);
    void *tmp = ot__malloc(nbytes);
    if (!tmp)
        return ot__err_set(OT_ENOMEM, NULL, 0, fn, "cannot allocate %zu bytes to copy a view",
                           nbytes);
    rc = (ot_get_raw)(t, tmp);
    if (rc == 0)
        rc = ot__replace_write(w, tmp, nbytes);
    free(tmp);
    return rc;
}

int (ot_save)(const char *path, const ot_tensor *t)
{
    if (!t)
        return ot__err_null("save", "tensor");
    ot_clear_error();
    if (!path)
        return ot__err_set(OT_ENULL, NULL, 0, "save", "path is NULL");
    ot__replace *w = ot__replace_open("save", path);
    if (!w)
        return ot_errcode();
    return ot__replace_end(w, write_npy(w, "save", t));
}

/* ---- .npz: writing ------------------------------------------------------- */

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

static int savez_args(const char *fn, const char *path, int n, const char *const names[],
                      const ot_tensor *const tensors[])
{
    if (!path)
        return ot__err_set(OT_ENULL, NULL, 0, fn, "path is NULL");
    if (n < 0 || n > 0xFFFF)
        return ot__err_set(OT_EINVAL, NULL, 0, fn, "n is %d (0..65535)", n);
    if (n > 0 && (!names || !tensors))
        return ot__err_set(OT_ENULL, NULL, 0, fn, "%s is NULL", names ? "tensors" : "names");
    for (int i = 0; i < n; i++)
        if (!tensors[i])
            return ot__err_set(OT_ENULL, NULL, 0, fn, "tensors[%d] is NULL", i);
    return check_names(fn, n, names);
}

/* One entry's bytes, which libzip reads when the archive is closed: the
 * .npy header, then the tensor's own data or, for a view, a copy. */
typedef struct npz_entry {
    unsigned char head[NPY_HEADER_MAX];
    void *copy;
    zip_buffer_fragment_t frag[2];
} npz_entry;

/* libzip's error e recorded for fn as OT_ENOMEM or OT_EIO. */
static int zip_write_failed(const char *fn, const char *path, zip_error_t *e)
{
    int code = zip_error_code_zip(e) == ZIP_ER_MEMORY ? OT_ENOMEM : OT_EIO;
    return ot__err_set(code, NULL, 0, fn, "'%s': cannot build the archive: %s", path,
                       zip_error_strerror(e));
}

/* The fragments of tensor t's .npy in e (n of them in *nfrag). */
static int entry_bytes(const char *fn, npz_entry *e, const ot_tensor *t, int *nfrag)
{
    size_t nbytes = (size_t)ot__numel(&t->leaf.shape) * ot_dtype_size((ot_dtype)t->leaf.dtype);
    e->frag[0] = (zip_buffer_fragment_t){e->head, npy_header(e->head, t)};
    *nfrag = nbytes ? 2 : 1;
    if (ot_tensor_is_contiguous(t)) {
        e->frag[1] = (zip_buffer_fragment_t){ot_tensor_data(t), nbytes};
        return 0;
    }
    e->copy = ot__malloc(nbytes);
    if (!e->copy)
        return ot__err_set(OT_ENOMEM, NULL, 0, fn, "cannot allocate %zu bytes to copy a view",
                           nbytes);
    e->frag[1] = (zip_buffer_fragment_t){e->copy, nbytes};
    return (ot_get_raw)(t, e->copy);
}

/* Adds tensor t as name + ".npy", stored or deflated, dated 1980-01-01 (no
 * clock is read: the same tensors give the same bytes). */
static int add_entry(zip_t *za, const char *fn, const char *path, const char *name,
                     const ot_tensor *t, npz_entry *e, bool deflate)
{
    int nfrag, rc = entry_bytes(fn, e, t, &nfrag);
    if (rc != 0)
        return rc;
    size_t len = strlen(name);
    char *full = ot__malloc(len + 5);
    if (!full)
        return ot__err_set(OT_ENOMEM, NULL, 0, fn, "cannot allocate a name");
    memcpy(full, name, len);
    memcpy(full + len, ".npy", 5);
    zip_source_t *src = zip_source_buffer_fragment(za, e->frag, (zip_uint64_t)nfrag, 0);
    zip_int64_t i = src ? zip_file_add(za, full, src, 0) : -1;
    free(full);
    struct tm y1980 = {.tm_year = 80, .tm_mday = 1, .tm_isdst = -1};
    if (i < 0 || zip_set_file_compression(za, (zip_uint64_t)i,
                                          deflate ? ZIP_CM_DEFLATE : ZIP_CM_STORE, 0) != 0 ||
        zip_file_set_mtime(za, (zip_uint64_t)i, mktime(&y1980), 0) != 0) {
        if (src && i < 0)
            zip_source_free(src);
        return zip_write_failed(fn, path, zip_get_error(za));
    }
    return 0;
}

/* The archive, built in src, written out to w. */
static int copy_out(const char *fn, const char *path, zip_source_t *src, ot__replace *w)
{
    unsigned char chunk[8192];
    if (zip_source_open(src) != 0)
        return zip_write_failed(fn, path, zip_source_error(src));
    int rc = 0;
    for (;;) {
        zip_int64_t k = zip_source_read(src, chunk, sizeof chunk);
        if (k < 0)
            rc = zip_write_failed(fn, path, zip_source_error(src));
        if (k <= 0 || rc != 0)
            break;
        rc = ot__replace_write(w, chunk, (size_t)k);
    }
    zip_source_close(src);
    return rc;
}

/* The archive of n entries in memory (libzip writes into src when za is
 * closed). */
static int build_archive(const char *fn, const char *path, zip_source_t *src, int n,
                         const char *const names[], const ot_tensor *const tensors[],
                         bool deflate)
{
    zip_error_t ze;
    zip_error_init(&ze);
    zip_t *za = zip_open_from_source(src, ZIP_CREATE | ZIP_TRUNCATE, &ze);
    if (!za) {
        int rc = zip_write_failed(fn, path, &ze);
        zip_error_fini(&ze);
        return rc;
    }
    zip_source_keep(src);         /* zip_close must not free it: it is read next */
    npz_entry *e = ot__calloc((size_t)n, sizeof *e);
    int rc = e ? 0 : ot__err_set(OT_ENOMEM, NULL, 0, fn, "cannot allocate %d entries", n);
    for (int i = 0; i < n && rc == 0; i++)
        rc = add_entry(za, fn, path, names[i], tensors[i], &e[i], deflate);
    if (rc == 0 && zip_close(za) != 0)
        rc = zip_write_failed(fn, path, zip_get_error(za));
    if (rc != 0)
        zip_discard(za);
    for (int i = 0; e && i < n; i++)
        free(e[i].copy);
    free(e);
    return rc;
}

/* The end record alone: an archive of no entries, as numpy.savez writes it
 * (libzip writes no file for an empty archive). */
static const unsigned char empty_zip[22] = {'P', 'K', 5, 6};

static int savez(const char *fn, const char *path, int n, const char *const names[],
                 const ot_tensor *const tensors[], bool deflate)
{
    ot_clear_error();
    int rc = savez_args(fn, path, n, names, tensors);
    if (rc != 0)
        return rc;
    zip_error_t ze;
    zip_error_init(&ze);
    zip_source_t *src = n ? zip_source_buffer_create(NULL, 0, 0, &ze) : NULL;
    if (n && !src)
        rc = zip_write_failed(fn, path, &ze);
    zip_error_fini(&ze);
    if (rc == 0 && n)
        rc = build_archive(fn, path, src, n, names, tensors, deflate);
    ot__replace *w = rc == 0 ? ot__replace_open(fn, path) : NULL;
    if (rc == 0 && !w)
        rc = ot_errcode();
    if (w)
        rc = ot__replace_end(w, n ? copy_out(fn, path, src, w)
                                  : ot__replace_write(w, empty_zip, sizeof empty_zip));
    if (src)
        zip_source_free(src);
    return rc;
}

int (ot_savez)(const char *path, int n, const char *const names[],
             const ot_tensor *const tensors[])
{
    return savez("savez", path, n, names, tensors, false);
}

int (ot_savez_compressed)(const char *path, int n, const char *const names[],
                        const ot_tensor *const tensors[])
{
    return savez("savez_compressed", path, n, names, tensors, true);
}

/* ---- .npz: reading ------------------------------------------------------- */

/* libzip's error e recorded: OT_ENOMEM, OT_EUNSUPPORTED for what optree
 * cannot read, OT_EIO for a file that cannot be read or is corrupt. */
static int zip_failed(const region *r, zip_error_t *e)
{
    const char *what = zip_error_strerror(e);
    switch (zip_error_code_zip(e)) {
    case ZIP_ER_MEMORY:
        return file_error(r, OT_ENOMEM, "%s", what);
    case ZIP_ER_NOZIP:
        return bad_file(r, "not a zip archive: ", what);
    case ZIP_ER_CRC:
        return bad_file(r, "corrupt zip: an entry whose CRC-32 does not match: ", what);
    case ZIP_ER_COMPNOTSUPP:
    case ZIP_ER_ENCRNOTSUPP:
    case ZIP_ER_MULTIDISK:
        return file_error(r, OT_EUNSUPPORTED, "%s", what);
    case ZIP_ER_READ:
    case ZIP_ER_SEEK:
    case ZIP_ER_OPEN:
        return bad_file(r, "read error: ", what);
    default:
        return bad_file(r, "corrupt zip: ", what);
    }
}

static int zip_code_failed(const region *r, int code)
{
    zip_error_t e;
    zip_error_init_with_code(&e, code);
    int rc = zip_failed(r, &e);
    zip_error_fini(&e);
    return rc;
}

/* An archive being read. */
typedef struct npz {
    region r;                     /* fn and path for errors; zf of the entry read */
    zip_t *za;
    int64_t len, count;
} npz;

/* Opens path for reading with libzip, which checks the archive's
 * consistency (ZIP_CHECKCONS) before any entry is trusted. */
static int npz_open(npz *z, const char *path)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return ot__err_set(OT_EIO, NULL, 0, z->r.fn, "cannot open '%s': %s", path,
                           strerror(errno));
    struct stat st;
    unsigned char magic[6] = {0};
    if (fstat(fd, &st) != 0 || pread(fd, magic, 6, 0) < 0) {
        int rc = ot__err_set(OT_EIO, NULL, 0, z->r.fn, "'%s': %s", path, strerror(errno));
        close(fd);
        return rc;
    }
    z->len = st.st_size;
    if (memcmp(magic, "\x93NUMPY", 6) == 0) {
        close(fd);
        return bad_file(&z->r, "not a zip archive: ", "a .npy file (read it with ot_load)");
    }
    int code = 0;
    z->za = zip_fdopen(fd, ZIP_CHECKCONS, &code);
    if (!z->za) {
        close(fd);                /* zip_fdopen keeps fd only when it succeeds */
        return zip_code_failed(&z->r, code);
    }
    z->count = zip_get_num_entries(z->za, 0);
    if (z->count > INT_MAX)
        return ot__err_set(OT_EUNSUPPORTED, NULL, 0, z->r.fn, "'%s': %lld entries", path,
                           (long long)z->count);
    return 0;
}

/* Checks what entry i is before it is read: stored or deflated, not
 * encrypted, and no larger than deflate can make its compressed bytes (at
 * most 1032 to 1), so a corrupt size cannot ask for a huge tensor. */
static int entry_readable(npz *z, zip_uint64_t i, zip_stat_t *st)
{
    if (zip_stat_index(z->za, i, 0, st) != 0)
        return zip_failed(&z->r, zip_get_error(z->za));
    z->r.entry = st->valid & ZIP_STAT_NAME ? st->name : NULL;   /* the errors' from here */
    const uint64_t need = ZIP_STAT_SIZE | ZIP_STAT_COMP_SIZE | ZIP_STAT_COMP_METHOD |
                          ZIP_STAT_ENCRYPTION_METHOD;
    if ((st->valid & need) != need)
        return bad_file(&z->r, "corrupt zip: ", "an entry without sizes");
    if (st->encryption_method != ZIP_EM_NONE)
        return file_error(&z->r, OT_EUNSUPPORTED, "encrypted");
    if (st->comp_method != ZIP_CM_STORE && st->comp_method != ZIP_CM_DEFLATE)
        return file_error(&z->r, OT_EUNSUPPORTED, "compressed with method %d (optree reads "
                          "stored and deflated entries, as numpy.savez and "
                          "numpy.savez_compressed write)", (int)st->comp_method);
    if (st->comp_size > (uint64_t)z->len ||
        st->size > (st->comp_method == ZIP_CM_STORE ? st->comp_size : st->comp_size * 1032 + 64))
        return bad_file(&z->r, "corrupt zip: ", "an entry larger than the file can hold");
    return 0;
}

/* Reads the rest of an entry whose .npy was refused: a damaged deflate
 * stream decodes to a plausible but wrong header before libzip sees the
 * bad CRC, and the CRC (recorded over the header's error) is the cause. */
static void drain(region *r)
{
    unsigned char chunk[4096];
    while (zip_read(r, chunk, sizeof chunk) > 0)
        ;
}

/* Entry i (st: its zip_stat) as a new tensor; reading past its end makes
 * libzip check its length and CRC. */
static ot_tensor *read_entry(ot_backend *be, npz *z, zip_uint64_t i, const zip_stat_t *st)
{
    z->r.zf = zip_fopen_index(z->za, i, 0);
    if (!z->r.zf) {
        zip_failed(&z->r, zip_get_error(z->za));
        return NULL;
    }
    z->r.left = st->size;
    ot_tensor *t = read_npy(be, &z->r);
    char extra;
    int64_t k = t ? zip_read(&z->r, &extra, 1) : 0;
    if (k > 0)
        bad_file(&z->r, "corrupt zip: ", "an entry longer than its header says");
    if (!t)
        drain(&z->r);
    if (k != 0) {
        ot_tensor_free(t);
        t = NULL;
    }
    zip_fclose(z->r.zf);
    z->r.zf = NULL;
    return t;
}

/* Entry i as a new tensor, its errors naming it. */
static ot_tensor *npz_load_entry(ot_backend *be, npz *z, zip_uint64_t i)
{
    zip_stat_t st;
    ot_tensor *t = entry_readable(z, i, &st) == 0 ? read_entry(be, z, i, &st) : NULL;
    z->r.entry = NULL;
    return t;
}

/* The index of entry name + ".npy", or -1. A name that ends in ".npy" is
 * first looked up as it is, as NumPy's NpzFile does (np.load(f)["a.npy"]
 * is array a; it looked for "a.npy.npy"). */
static int64_t npz_find(npz *z, const char *name)
{
    size_t n = strlen(name);
    bool whole = n > 4 && strcmp(name + n - 4, ".npy") == 0;
    zip_int64_t i = whole ? zip_name_locate(z->za, name, 0) : -1;
    if (i >= 0) return i;
    char *full = ot__malloc(n + 5);
    if (!full) {
        ot__err_set(OT_ENOMEM, NULL, 0, z->r.fn, "cannot allocate a name");
        return -2;
    }
    memcpy(full, name, n);
    memcpy(full + n, ".npy", 5);
    i = zip_name_locate(z->za, full, 0);
    free(full);
    if (i < 0 && whole)
        ot__err_set(OT_EINVAL, NULL, 0, z->r.fn, "'%s': no entry '%s' or '%s.npy'", z->r.path, name,
                    name);
    else if (i < 0)
        ot__err_set(OT_EINVAL, NULL, 0, z->r.fn, "'%s': no entry '%s.npy'", z->r.path, name);
    return i;
}

/* out[0..n) from the open archive; on error every out[i] is NULL. */
static int npz_load(ot_backend *be, npz *z, int n, const char *const names[], ot_tensor *out[])
{
    int rc = 0;
    if (!names && n > z->count)
        rc = ot__err_set(OT_EINVAL, NULL, 0, z->r.fn, "'%s': %lld entries, not %d", z->r.path,
                         (long long)z->count, n);
    for (int i = 0; i < n && rc == 0; i++) {
        int64_t k = names ? npz_find(z, names[i]) : i;
        out[i] = k >= 0 ? npz_load_entry(be, z, (zip_uint64_t)k) : NULL;
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

int (ot_loadz)(ot_backend *be, const char *path, int n, const char *const names[],
             ot_tensor *out[])
{
    int rc = loadz_args(be, path, n, names, out);
    if (rc != 0)
        return rc;
    npz z = {.r = {NULL, NULL, "loadz", path, 0, NULL}};
    rc = npz_open(&z, path);
    if (rc == 0)
        rc = npz_load(be, &z, n, names, out);
    if (z.za)
        zip_discard(z.za);        /* read-only: nothing to write back */
    return rc == 0 ? (int)z.count : rc;
}

/* The _at twins: each function above under the caller's file:line. */
OT__AT_TWIN(int, ot_save,
        (const char *path, const ot_tensor *t, const char *file, int line),
        (path, t))
OT__AT_TWIN(ot_tensor *, ot_load,
        (ot_backend *be, const char *path, const char *file, int line),
        (be, path))
OT__AT_TWIN(int, ot_savez,
        (const char *path, int n, const char *const names[], const ot_tensor *const tensors[],
         const char *file, int line),
        (path, n, names, tensors))
OT__AT_TWIN(int, ot_savez_compressed,
        (const char *path, int n, const char *const names[], const ot_tensor *const tensors[],
         const char *file, int line),
        (path, n, names, tensors))
OT__AT_TWIN(int, ot_loadz,
        (ot_backend *be, const char *path, int n, const char *const names[], ot_tensor *out[],
         const char *file, int line),
        (be, path, n, names, out))
