/*
 * test_io.c - tensors in files and over the caller's memory: .npy and .npz
 * round trips bit for bit (random bit patterns, NaN payloads included), the
 * exact header numpy.save writes, files written by NumPy read back and ours
 * read by NumPy (skipped, saying so, without /usr/bin/python3 and numpy),
 * compressed .npz both ways, NumPy's int64 into i32, corrupt, truncated
 * and unsupported files (and a small fuzz of both loaders), saves that
 * fail at every system call (and against a real file size limit) leaving
 * the old file whole, modes, symbolic links and devices as targets, ot_wrap over aligned and unaligned memory as operand and
 * output, ot_get_n/ot_set_n sizes, and summarised printing as NumPy's.
 */
#include "test.h"
#include "internal.h"
#include "replace.h"

#include <errno.h>

#include <stdint.h>
#include <stdlib.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zip.h>

/* ---- helpers -------------------------------------------------------------- */

static char tmpdir[64];

/* A path in this case's own temporary directory. */
static const char *tmp_path(const char *name)
{
    static char buf[8][128];
    static int k;
    if (!tmpdir[0]) {
        strcpy(tmpdir, "/tmp/ot_ioXXXXXX");
        CHECK(mkdtemp(tmpdir) != NULL);
    }
    char *p = buf[k++ % 8];
    snprintf(p, sizeof buf[0], "%s/%s", tmpdir, name);
    return p;
}

static void tmp_clean(void)
{
    char cmd[96];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (tmpdir[0])
        CHECK_INT(system(cmd), 0);
    tmpdir[0] = '\0';
}

static uint64_t rng = 0x9E3779B97F4A7C15u;
static uint32_t next32(void)
{
    rng = rng * 6364136223846793005u + 1442695040888963407u;
    return (uint32_t)(rng >> 32);
}

/* A tensor of random bit patterns (NaNs with payloads, infinities,
 * subnormals: whatever the bits give). */
static ot_tensor *random_tensor(ot_backend *be, ot_shape s, ot_dtype dt)
{
    ot_tensor *t = ot_empty(be, s, dt);
    if (!t)
        return NULL;
    size_t n = (size_t)ot_tensor_numel(t) * ot_dtype_size(dt) / 4;
    uint32_t *p = ot_tensor_data(t);
    for (size_t i = 0; i < n; i++)
        p[i] = next32();
    return t;
}

/* Whether a and b hold the same shape, dtype and bytes (a may be a view). */
static bool same_bits(const ot_tensor *a, const ot_tensor *b)
{
    ot_shape sa = ot_tensor_shape(a), sb = ot_tensor_shape(b);
    if (!a || !b || ot_tensor_dtype(a) != ot_tensor_dtype(b) || !ot__shape_eq(&sa, &sb))
        return false;
    size_t n = (size_t)ot_tensor_numel(a) * ot_dtype_size(ot_tensor_dtype(a));
    char *x = malloc(n + 1), *y = malloc(n + 1);
    CHECK_INT(ot_get(a, x), 0);
    CHECK_INT(ot_get(b, y), 0);
    bool same = memcmp(x, y, n) == 0;
    free(x);
    free(y);
    return same;
}

/* The whole file (caller frees), its length in *n. */
static unsigned char *slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    CHECK(f != NULL);
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc(*n + 1);
    CHECK_INT(fread(b, 1, *n, f), *n);
    fclose(f);
    return b;
}

static void spit(const char *path, const void *b, size_t n)
{
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    if (!f)
        return;
    CHECK_INT(fwrite(b, 1, n, f), n);
    fclose(f);
}

/* A .npy of header text hdr (padded as NumPy pads) and nbytes of zeros. */
static void write_npy_text(const char *path, const char *hdr, size_t nbytes)
{
    size_t h = strlen(hdr), pad = 64 - (10 + h + 1) % 64;
    unsigned char *b = calloc(1, 10 + h + pad + 1 + nbytes + 1);
    memcpy(b, "\x93NUMPY\x01\x00", 8);
    b[8] = (unsigned char)((h + pad + 1) & 0xFF);
    b[9] = (unsigned char)((h + pad + 1) >> 8);
    memcpy(b + 10, hdr, h);
    memset(b + 10 + h, ' ', pad);
    b[10 + h + pad] = '\n';
    spit(path, b, 10 + h + pad + 1 + nbytes);
    free(b);
}

static const ot_dtype dtypes[] = {OT_F32, OT_F64, OT_I32};

/* ---- .npy ------------------------------------------------------------------ */

TEST(io_npy_round_trip_bits)
{
    ot_backend *ref = ot_backend_new("ref", NULL), *cpu = ot_backend_new("cpu", NULL);
    const ot_shape shapes[] = {OT_SHAPE(), OT_SHAPE(0), OT_SHAPE(7), OT_SHAPE(2, 3),
                               OT_SHAPE(3, 0, 2), OT_SHAPE(2, 3, 4, 5), OT_SHAPE(1, 1, 1, 1, 1, 1, 1, 9)};
    for (int d = 0; d < 3; d++)
        for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
            ot_tensor *t = random_tensor(ref, shapes[s], dtypes[d]);
            CHECK_INT(ot_save(tmp_path("a.npy"), t), 0);
            ot_tensor *u = ot_load(s % 2 ? cpu : ref, tmp_path("a.npy"));
            CHECK(u != NULL);
            CHECK(same_bits(t, u));
            CHECK(u && ot_tensor_is_contiguous(u));
            CHECK(u && ot_tensor_backend(u) == (s % 2 ? cpu : ref));
            ot_tensor_free(t);
            ot_tensor_free(u);
        }
    tmp_clean();
    ot_backend_free(ref);
    ot_backend_free(cpu);
}

TEST(io_npy_header_is_numpys)
{
    ot_backend *be = ot_backend_new("ref", NULL);
    const struct { ot_shape s; ot_dtype dt; const char *dict; } cases[] = {
        {OT_SHAPE(2, 3), OT_F32, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }"},
        {OT_SHAPE(5), OT_F64, "{'descr': '<f8', 'fortran_order': False, 'shape': (5,), }"},
        {OT_SHAPE(), OT_I32, "{'descr': '<i4', 'fortran_order': False, 'shape': (), }"},
    };
    for (int i = 0; i < 3; i++) {
        ot_tensor *t = ot_zeros(be, cases[i].s, cases[i].dt);
        CHECK_INT(ot_save(tmp_path("h.npy"), t), 0);
        size_t n, len = strlen(cases[i].dict);
        unsigned char *b = slurp(tmp_path("h.npy"), &n);
        size_t hlen = (size_t)b[8] | (size_t)b[9] << 8;
        CHECK(memcmp(b, "\x93NUMPY\x01\x00", 8) == 0);
        CHECK_INT((10 + hlen) % 64, 0);
        CHECK(memcmp(b + 10, cases[i].dict, len) == 0);
        CHECK_INT(b[10 + hlen - 1], '\n');
        for (size_t k = 10 + len; k < 10 + hlen - 1; k++)
            CHECK_INT(b[k], ' ');
        CHECK_INT(n, 10 + hlen + (size_t)ot_tensor_numel(t) * ot_dtype_size(cases[i].dt));
        free(b);
        ot_tensor_free(t);
    }
    tmp_clean();
    ot_backend_free(be);
}

TEST(io_npy_view_saves_logical_contents)
{
    ot_backend *be = ot_backend_new("ref", NULL);
    ot_tensor *t = random_tensor(be, OT_SHAPE(4, 6), OT_F64);
    ot_tensor *tt = ot_transpose(t, NULL);
    ot_tensor *sl = ot_slice(t, OT_RANGE(3, OT_NONE, -2), OT_RANGE(1, 6, 2));
    ot_tensor *views[] = {tt, sl};
    for (int i = 0; i < 2; i++) {
        CHECK_INT(ot_save(tmp_path("v.npy"), views[i]), 0);
        ot_tensor *u = ot_load(be, tmp_path("v.npy"));
        CHECK(same_bits(views[i], u));
        ot_tensor_free(u);
    }
    ot_tensor_free(tt);
    ot_tensor_free(sl);
    ot_tensor_free(t);
    tmp_clean();
    ot_backend_free(be);
}

TEST(io_npy_fortran_order_and_versions)
{
    ot_backend *be = ot_backend_new("ref", NULL);
    /* (2, 3) in Fortran order: the file holds the columns 0 3, 1 4, 2 5 */
    const float col[6] = {0, 3, 1, 4, 2, 5}, row[6] = {0, 1, 2, 3, 4, 5};
    write_npy_text(tmp_path("f.npy"),
                   "{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }", 0);
    size_t n;
    unsigned char *b = slurp(tmp_path("f.npy"), &n);
    unsigned char *c = malloc(n + sizeof col);
    memcpy(c, b, n);
    memcpy(c + n, col, sizeof col);
    spit(tmp_path("f.npy"), c, n + sizeof col);
    ot_tensor *u = ot_load(be, tmp_path("f.npy"));
    float got[6] = {0};
    CHECK(u != NULL);
    CHECK_INT(ot_get_n(u, got, sizeof got), 0);
    CHECK(memcmp(got, row, sizeof row) == 0);
    CHECK(ot_tensor_is_contiguous(u));
    ot_tensor_free(u);
    /* version 2.0: a 4-byte header length, the same dict */
    unsigned char *v2 = malloc(n + sizeof col + 2);
    memcpy(v2, c, 8);
    v2[6] = 2;
    v2[8] = c[8];
    v2[9] = c[9];
    v2[10] = v2[11] = 0;
    memcpy(v2 + 12, c + 10, n + sizeof col - 10);
    spit(tmp_path("v2.npy"), v2, n + sizeof col + 2);
    u = ot_load(be, tmp_path("v2.npy"));
    CHECK(u != NULL);
    CHECK_INT(ot_get_n(u, got, sizeof got), 0);
    CHECK(memcmp(got, row, sizeof row) == 0);
    ot_tensor_free(u);
    free(b);
    free(c);
    free(v2);
    tmp_clean();
    ot_backend_free(be);
}

/* ot_load of a .npy with header text hdr and nbytes of data fails with
 * code and a message holding sub. */
static void expect_bad_npy(const char *hdr, size_t nbytes, int code, const char *sub)
{
    ot_backend *be = ot_backend_new("ref", NULL);
    write_npy_text(tmp_path("bad.npy"), hdr, nbytes);
    ot_tensor *t = ot_load(be, tmp_path("bad.npy"));
    CHECK(t == NULL);
    if (t)
        fprintf(stderr, "loaded: %s\n", hdr);
    CHECK_ERR(code, "load", sub);
    ot_tensor_free(t);
    ot_backend_free(be);
}

TEST(io_npy_bad_files)
{
    expect_bad_npy("{'descr': '>f4', 'fortran_order': False, 'shape': (2,), }", 8,
                   OT_EUNSUPPORTED, "big-endian");
    expect_bad_npy("{'descr': '<u8', 'fortran_order': False, 'shape': (2,), }", 16,
                   OT_EUNSUPPORTED, "dtype '<u8' is not supported");
    expect_bad_npy("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", 20, OT_EIO,
                   "needs 24 bytes of data, the file has 20");
    expect_bad_npy("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", 28, OT_EIO,
                   "needs 24 bytes");
    expect_bad_npy("{'descr': '<f4', 'fortran_order': False}", 0, OT_EIO, "a key is missing");
    expect_bad_npy("{'descr': '<f4', 'descr': '<f4', 'shape': ()}", 4, OT_EIO, "repeated key");
    expect_bad_npy("{'descr': '<f4', 'fortran_order': Maybe, 'shape': ()}", 4, OT_EIO,
                   "bad value of fortran_order");
    expect_bad_npy("{'descr': '<f4', 'fortran_order': False, 'shape': (5)}", 20, OT_EIO,
                   "bad value of shape");
    expect_bad_npy("{'descr': '<f4', 'fortran_order': False, 'shape': (-5,)}", 0, OT_EIO,
                   "bad value of shape");
    expect_bad_npy("{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,)}",
                   0, OT_EIO, "bad value of shape");
    expect_bad_npy("{'descr': '<f4', 'fortran_order': False, 'shape': (4611686018427387904, 4)}",
                   0, OT_EOVERFLOW, "");
    expect_bad_npy("{'descr': '<f4', 'fortran_order': False, 'shape': (1,1,1,1,1,1,1,1,1)}", 4,
                   OT_EUNSUPPORTED, "9 dims");
    expect_bad_npy("{'descr': '<f4', 'fortran_order': False, 'shape': (), } x", 4, OT_EIO,
                   "text after the dict");
    expect_bad_npy("['descr']", 0, OT_EIO, "no '{'");
    expect_bad_npy("{'descr' '<f4'}", 0, OT_EIO, "expected 'key':");

    ot_backend *be = ot_backend_new("ref", NULL);
    spit(tmp_path("m.npy"), "\x93NUMPX\x01\x00\x00\x00", 10);
    CHECK(ot_load(be, tmp_path("m.npy")) == NULL);
    CHECK_ERR(OT_EIO, "not a .npy file: bad magic");
    spit(tmp_path("m.npy"), "\x93NUMPY\x04\x00\x00\x00", 10);
    CHECK(ot_load(be, tmp_path("m.npy")) == NULL);
    CHECK_ERR(OT_EUNSUPPORTED, "format version 4.0");
    spit(tmp_path("m.npy"), "\x93NUMPY\x01\x00\xff\x00{", 11);
    CHECK(ot_load(be, tmp_path("m.npy")) == NULL);
    CHECK_ERR(OT_EIO, "bad header length: past the end");
    spit(tmp_path("m.npy"), "\x93NU", 3);
    CHECK(ot_load(be, tmp_path("m.npy")) == NULL);
    CHECK_ERR(OT_EIO, "truncated", "the magic string");
    CHECK(ot_load(be, tmp_path("missing.npy")) == NULL);
    CHECK_ERR(OT_EIO, "cannot open", "missing.npy", "No such file");
    CHECK(ot_load(NULL, "x.npy") == NULL);
    CHECK_ERR(OT_ENULL, "load", "backend");
    CHECK(ot_load(be, NULL) == NULL);
    CHECK_ERR(OT_ENULL, "load", "path is NULL");
    CHECK_INT(ot_save(NULL, NULL), OT_ENULL);
    CHECK_ERR(OT_ENULL, "save", "tensor");
    ot_tensor *t = ot_zeros(be, OT_SHAPE(2), OT_F32);
    CHECK_INT(ot_save(NULL, t), OT_ENULL);
    CHECK_ERR(OT_ENULL, "save", "path is NULL");
    CHECK_INT(ot_save("/nonexistent-dir/x.npy", t), OT_EIO);
    CHECK_ERR(OT_EIO, "cannot open '/nonexistent-dir/x.npy'");
    if (access("/dev/full", W_OK) == 0) {
        ot_tensor *big = ot_zeros(be, OT_SHAPE(1 << 16), OT_F64);
        CHECK_INT(ot_save("/dev/full", big), OT_EIO);
        CHECK_ERR(OT_EIO, "save", "/dev/full");
        struct stat st;
        CHECK(stat("/dev/full", &st) == 0 && S_ISCHR(st.st_mode));   /* not removed */
        ot_tensor_free(big);
    }
    ot_tensor_free(t);
    tmp_clean();
    ot_backend_free(be);
}

/* ---- .npz ------------------------------------------------------------------ */

TEST(io_npz_round_trip)
{
    ot_backend *be = ot_backend_new("ref", NULL);
    ot_tensor *a = random_tensor(be, OT_SHAPE(3, 4), OT_F32);
    ot_tensor *b = random_tensor(be, OT_SHAPE(5), OT_F64);
    ot_tensor *c = random_tensor(be, OT_SHAPE(), OT_I32);
    ot_tensor *bt = ot_transpose(a, NULL);
    const char *names[] = {"w", "bias", "step", "w_t"};
    const ot_tensor *ts[] = {a, b, c, bt};
    CHECK_INT(ot_savez(tmp_path("p.npz"), 4, names, ts), 0);
    ot_tensor *out[4];
    /* by name, in another order */
    const char *want[] = {"step", "w_t", "w"};
    CHECK_INT(ot_loadz(be, tmp_path("p.npz"), 3, want, out), 4);
    CHECK(same_bits(out[0], c));
    CHECK(same_bits(out[1], bt));
    CHECK(same_bits(out[2], a));
    for (int i = 0; i < 3; i++)
        ot_tensor_free(out[i]);
    /* in file order; n = 0 counts */
    CHECK_INT(ot_loadz(be, tmp_path("p.npz"), 0, NULL, NULL), 4);
    CHECK_INT(ot_loadz(be, tmp_path("p.npz"), 4, NULL, out), 4);
    for (int i = 0; i < 4; i++) {
        CHECK(same_bits(out[i], ts[i]));
        ot_tensor_free(out[i]);
    }
    /* an empty archive */
    CHECK_INT(ot_savez(tmp_path("e.npz"), 0, NULL, NULL), 0);
    CHECK_INT(ot_loadz(be, tmp_path("e.npz"), 0, NULL, NULL), 0);
    ot_tensor_free(a);
    ot_tensor_free(b);
    ot_tensor_free(c);
    ot_tensor_free(bt);
    tmp_clean();
    ot_backend_free(be);
}

TEST(io_npz_bad_arguments)
{
    ot_backend *be = ot_backend_new("ref", NULL);
    ot_tensor *a = ot_zeros(be, OT_SHAPE(2), OT_F32);
    const ot_tensor *ts[] = {a, a};
    ot_tensor *out[2] = {a, a};
    CHECK_INT(ot_savez(tmp_path("d.npz"), 2, (const char *[]){"x", "x"}, ts), OT_EINVAL);
    CHECK_ERR(OT_EINVAL, "savez", "names[0] and names[1] are both 'x'");
    CHECK(access(tmp_path("d.npz"), F_OK) != 0);
    CHECK_INT(ot_savez(tmp_path("d.npz"), 2, (const char *[]){"x", ""}, ts), OT_EINVAL);
    CHECK_ERR(OT_EINVAL, "names[1] is empty");
    CHECK_INT(ot_savez(tmp_path("d.npz"), 2, (const char *[]){"x", NULL}, ts), OT_ENULL);
    CHECK_ERR(OT_ENULL, "names[1] is NULL");
    CHECK_INT(ot_savez(tmp_path("d.npz"), 2, (const char *[]){"x", "y"},
                       (const ot_tensor *[]){a, NULL}), OT_ENULL);
    CHECK_ERR(OT_ENULL, "tensors[1] is NULL");
    CHECK_INT(ot_savez(tmp_path("d.npz"), -1, NULL, NULL), OT_EINVAL);
    CHECK_INT(ot_savez(tmp_path("d.npz"), 1, NULL, ts), OT_ENULL);
    CHECK_INT(ot_savez(NULL, 1, (const char *[]){"x"}, ts), OT_ENULL);
    CHECK_INT(ot_savez(tmp_path("d.npz"), 2, (const char *[]){"x", "y"}, ts), 0);
    CHECK_INT(ot_loadz(be, tmp_path("d.npz"), 2, (const char *[]){"x", "z"}, out), OT_EINVAL);
    CHECK_ERR(OT_EINVAL, "loadz", "no entry 'z.npy'");
    CHECK(out[0] == NULL && out[1] == NULL);
    /* an entry's own name, as NumPy's np.load(f)["y.npy"] takes it */
    CHECK_INT(ot_loadz(be, tmp_path("d.npz"), 2, (const char *[]){"y.npy", "x"}, out), 2);
    CHECK(out[0] && out[1] && ot_tensor_shape(out[0]).dims[0] == 2);
    ot_tensor_free(out[0]), ot_tensor_free(out[1]);
    CHECK_INT(ot_loadz(be, tmp_path("d.npz"), 1, (const char *[]){"z.npy"}, out), OT_EINVAL);
    CHECK_ERR(OT_EINVAL, "no entry 'z.npy' or 'z.npy.npy'");
    CHECK(out[0] == NULL);
    CHECK_INT(ot_loadz(be, tmp_path("d.npz"), 3, NULL, (ot_tensor *[3]){0}), OT_EINVAL);
    CHECK_ERR(OT_EINVAL, "2 entries, not 3");
    CHECK_INT(ot_loadz(be, tmp_path("d.npz"), 1, NULL, NULL), OT_ENULL);
    CHECK_INT(ot_loadz(be, tmp_path("d.npz"), -1, NULL, NULL), OT_EINVAL);
    ot_clear_error();
    CHECK_INT(ot_loadz(NULL, tmp_path("d.npz"), 0, NULL, NULL), OT_ENULL);
    CHECK_INT(ot_loadz(be, tmp_path("nothere.npz"), 0, NULL, NULL), OT_EIO);
    /* a .npy is no zip */
    CHECK_INT(ot_save(tmp_path("a.npy"), a), 0);
    CHECK_INT(ot_loadz(be, tmp_path("a.npy"), 0, NULL, NULL), OT_EIO);
    CHECK_ERR(OT_EIO, "not a zip archive");
    ot_tensor_free(a);
    tmp_clean();
    ot_backend_free(be);
}

/* Where the central directory of an archive of n bytes starts (its end
 * record, with no comment, is the last 22 bytes). */
static size_t central_at(const unsigned char *b, size_t n)
{
    const unsigned char *e = b + n - 22 + 16;
    return (size_t)e[0] | (size_t)e[1] << 8 | (size_t)e[2] << 16 | (size_t)e[3] << 24;
}

TEST(io_npz_corrupt_and_compressed)
{
    ot_backend *be = ot_backend_new("ref", NULL);
    ot_tensor *a = random_tensor(be, OT_SHAPE(4), OT_F32), *out[1];
    CHECK_INT(ot_savez(tmp_path("z.npz"), 1, (const char *[]){"a"}, (const ot_tensor *[]){a}),
              0);
    size_t n;
    unsigned char *b = slurp(tmp_path("z.npz"), &n), *m = malloc(n);
    size_t cd = central_at(b, n);
    CHECK(cd > 0);
    /* LZMA (method 14) in both headers: neither numpy's nor ours */
    memcpy(m, b, n);
    m[8] = m[cd + 10] = 14;
    spit(tmp_path("c.npz"), m, n);
    CHECK_INT(ot_loadz(be, tmp_path("c.npz"), 1, NULL, out), OT_EUNSUPPORTED);
    CHECK_ERR(OT_EUNSUPPORTED, "loadz", "c.npz': entry 'a.npy': ", "method 14",
              "stored and deflated");
    /* a data byte changed: the CRC catches it */
    memcpy(m, b, n);
    m[cd - 1] ^= 0x40;
    spit(tmp_path("c.npz"), m, n);
    CHECK_INT(ot_loadz(be, tmp_path("c.npz"), 1, NULL, out), OT_EIO);
    CHECK_ERR(OT_EIO, "loadz: ", "c.npz': entry 'a.npy': corrupt zip: an entry whose CRC-32 "
              "does not match");
    CHECK(out[0] == NULL);
    /* the local header's offset past the end */
    memcpy(m, b, n);
    m[cd + 45] = 0x7F;
    spit(tmp_path("c.npz"), m, n);
    CHECK_INT(ot_loadz(be, tmp_path("c.npz"), 1, NULL, out), OT_EIO);
    CHECK_ERR(OT_EIO, "loadz", "c.npz");
    free(b);
    free(m);
    ot_tensor_free(a);
    tmp_clean();
    ot_backend_free(be);
}

/* An archive at path of n stored entries names[i] holding the files
 * at files[i] (written with libzip, as any zip tool would). */
static void zip_of(const char *path, int n, const char *const names[], const char *const files[])
{
    int err = 0;
    zip_t *za = zip_open(path, ZIP_CREATE | ZIP_TRUNCATE, &err);
    CHECK(za != NULL);
    for (int i = 0; za && i < n; i++) {
        zip_source_t *src = zip_source_file(za, files[i], 0, -1);
        CHECK(src != NULL);
        zip_int64_t k = src ? zip_file_add(za, names[i], src, ZIP_FL_OVERWRITE) : -1;
        CHECK(k >= 0);
        if (k >= 0) CHECK_INT(zip_set_file_compression(za, (zip_uint64_t)k, ZIP_CM_STORE, 0), 0);
        else zip_source_free(src);
    }
    if (za) CHECK_INT(zip_close(za), 0);
}

/* An entry's errors name it: a shape too large for memory (found before
 * any data is read), and an entry that is not a .npy array at all, short
 * or long, when entries are read by position (names NULL): the code
 * before this fix named only the archive, and called a short entry a
 * truncated file ("the file ends inside the magic string"). */
TEST(io_npz_entry_errors_name_the_entry)
{
    ot_backend *be = ot_backend_new("ref", NULL);
    ot_tensor *out[2] = {NULL, NULL};
    char text[200];
    write_npy_text(tmp_path("big.npy"), "{'descr': '<f8', 'fortran_order': False, "
                   "'shape': (1099511627776, 1099511627776), }", 0);
    write_npy_text(tmp_path("ok.npy"), "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }",
                   8);
    spit(tmp_path("short.txt"), "hello", 5);
    memset(text, 'x', sizeof text);
    spit(tmp_path("long.txt"), text, sizeof text);
    zip_of(tmp_path("b.npz"), 2, (const char *[]){"ok.npy", "big.npy"},
           (const char *[]){tmp_path("ok.npy"), tmp_path("big.npy")});
    CHECK_INT(ot_loadz(be, tmp_path("b.npz"), 1, (const char *[]){"big"}, out), OT_EOVERFLOW);
    CHECK_ERR(OT_EOVERFLOW, "loadz: ", "b.npz': entry 'big.npy': ");
    CHECK_INT(ot_loadz(be, tmp_path("b.npz"), 2, NULL, out), OT_EOVERFLOW);
    CHECK_ERR(OT_EOVERFLOW, "b.npz': entry 'big.npy': ");
    CHECK(out[0] == NULL && out[1] == NULL);
    for (int k = 0; k < 2; k++) {
        const char *name = k ? "long.txt" : "short.txt";
        zip_of(tmp_path("t.npz"), 2, (const char *[]){"ok.npy", name},
               (const char *[]){tmp_path("ok.npy"), tmp_path(name)});
        CHECK_INT(ot_loadz(be, tmp_path("t.npz"), 2, NULL, out), OT_EIO);
        snprintf(text, sizeof text, "t.npz': entry '%s': not a .npy array: ", name);
        CHECK_ERR(OT_EIO, "loadz: ", text, k ? "no .npy magic string" : "shorter than");
        CHECK(strstr(ot_errmsg(), "truncated") == NULL);
        CHECK(out[0] == NULL && out[1] == NULL);
    }
    CHECK_INT(ot_loadz(be, tmp_path("t.npz"), 1, NULL, out), 2);   /* the first is fine */
    ot_tensor_free(out[0]);
    tmp_clean();
    ot_backend_free(be);
}

/* ot_savez_compressed deflates every entry (method 8 in the central
 * directory); ot_loadz reads it back bit for bit, views and empty tensors
 * included, and refuses a deflated entry whose stream is corrupt. */
TEST(io_npz_compressed_round_trip)
{
    ot_backend *be = ot_backend_new("ref", NULL);
    ot_tensor *a = ot_zeros(be, OT_SHAPE(64, 64), OT_F64);
    ot_tensor *b = random_tensor(be, OT_SHAPE(3, 5), OT_I32), *bt = ot_transpose(b, NULL);
    ot_tensor *e = ot_empty(be, OT_SHAPE(0, 3), OT_F32), *out[3];
    const ot_tensor *ts[] = {a, bt, e};
    CHECK_INT(ot_savez_compressed(tmp_path("c.npz"), 3, (const char *[]){"a", "bt", "e"}, ts),
              0);
    size_t n;
    unsigned char *bytes = slurp(tmp_path("c.npz"), &n);
    size_t cd = central_at(bytes, n);
    CHECK(n < 64 * 64 * 8 / 4);   /* 32 KiB of zeros shrink */
    CHECK_INT(bytes[cd + 10], 8);
    CHECK_INT(ot_loadz(be, tmp_path("c.npz"), 3, NULL, out), 3);
    for (int i = 0; i < 3; i++) {
        CHECK(same_bits(out[i], ts[i]));
        ot_tensor_free(out[i]);
    }
    /* the deflate stream damaged: an error, never a wrong tensor */
    for (size_t at = 40; at < cd; at += 7) {
        bytes[at] ^= 0x5A;
        spit(tmp_path("d.npz"), bytes, n);
        int rc = ot_loadz(be, tmp_path("d.npz"), 3, NULL, out);
        if (rc == 3)
            for (int i = 0; i < 3; i++) {
                CHECK(same_bits(out[i], ts[i]));
                ot_tensor_free(out[i]);
            }
        else {
            if (rc != OT_EIO) fprintf(stderr, "byte %zu: %d %s\n", at, rc, ot_errmsg());
            CHECK(rc == OT_EIO && out[0] == NULL && out[2] == NULL);
        }
        bytes[at] ^= 0x5A;
    }
    CHECK_INT(ot_savez_compressed(NULL, 1, (const char *[]){"a"}, ts), OT_ENULL);
    CHECK_ERR(OT_ENULL, "savez_compressed", "path is NULL");
    free(bytes);
    ot_tensor_free(a);
    ot_tensor_free(b);
    ot_tensor_free(bt);
    ot_tensor_free(e);
    tmp_clean();
    ot_backend_free(be);
}

/* NumPy's default integer, '<i8', loads into i32 when every value fits,
 * in C and Fortran order and inside an .npz; the first value that does
 * not fit is named. ot_load of an .npz says to use ot_loadz, and ot_loadz
 * of a .npy says to use ot_load. */
TEST(io_int64_and_wrong_loader)
{
    ot_backend *be = ot_backend_new("ref", NULL);
    static const int64_t fits[6] = {0, -1, 7, INT32_MAX, INT32_MIN, 123456};
    char hdr[] = "{'descr': '<i8', 'fortran_order': False, 'shape': (2, 3), }";
    write_npy_text(tmp_path("i8.npy"), hdr, 0);
    size_t n;
    unsigned char *b = slurp(tmp_path("i8.npy"), &n);
    size_t order = (size_t)(strstr((char *)b + 10, "False") - (char *)b);   /* past the length */
    b = realloc(b, n + sizeof fits);
    memcpy(b + n, fits, sizeof fits);   /* little-endian host, as the tests assume */
    spit(tmp_path("i8.npy"), b, n + sizeof fits);
    ot_tensor *t = ot_load(be, tmp_path("i8.npy"));
    int32_t got[6];
    CHECK(t && ot_tensor_dtype(t) == OT_I32);
    CHECK_INT(ot_get_n(t, got, sizeof got), 0);
    for (int i = 0; i < 6; i++)
        CHECK_INT(got[i], fits[i]);
    ot_tensor_free(t);
    /* Fortran order: the file holds the transpose */
    memcpy(b + order, "True, ", 6);
    spit(tmp_path("f8.npy"), b, n + sizeof fits);
    t = ot_load(be, tmp_path("f8.npy"));
    CHECK_INT(ot_get_n(t, got, sizeof got), 0);
    CHECK(got[0] == 0 && got[1] == 7 && got[2] == INT32_MIN && got[3] == -1);
    ot_tensor_free(t);
    /* 2^31 at element 4 */
    memcpy(b + order, "False,", 6);
    int64_t big = (int64_t)INT32_MAX + 1;
    memcpy(b + n + 4 * 8, &big, 8);
    spit(tmp_path("i8.npy"), b, n + sizeof fits);
    CHECK(ot_load(be, tmp_path("i8.npy")) == NULL);
    CHECK_ERR(OT_EOVERFLOW, "load", "i8.npy", "2147483648", "element 4", "does not fit int32");
    /* truncated inside the values */
    spit(tmp_path("i8.npy"), b, n + 20);
    CHECK(ot_load(be, tmp_path("i8.npy")) == NULL);
    CHECK_ERR(OT_EIO, "needs 48 bytes of data, the file has 20");
    /* each loader names the other */
    ot_tensor *a = ot_zeros(be, OT_SHAPE(2), OT_F32);
    CHECK_INT(ot_savez(tmp_path("a.npz"), 1, (const char *[]){"a"}, (const ot_tensor *[]){a}), 0);
    CHECK(ot_load(be, tmp_path("a.npz")) == NULL);
    CHECK_ERR(OT_EIO, "load", "a.npz", "zip archive", "ot_loadz");
    CHECK_INT(ot_save(tmp_path("a.npy"), a), 0);
    CHECK_INT(ot_loadz(be, tmp_path("a.npy"), 0, NULL, NULL), OT_EIO);
    CHECK_ERR(OT_EIO, "loadz", "not a zip archive", "ot_load");
    free(b);
    ot_tensor_free(a);
    tmp_clean();
    ot_backend_free(be);
}

/* ---- saving never loses the old file --------------------------------------- */

/* The names in the temporary directory, but "t.py"; how many. */
static int dir_entries(void)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "ls -A '%s' | wc -l", tmpdir);
    FILE *p = popen(cmd, "r");
    int n = -1;
    CHECK(p && fscanf(p, "%d", &n) == 1);
    if (p)
        pclose(p);
    return n;
}

/* One save of kind k (0 .npy, 1 .npz, 2 compressed .npz) of t to path. */
static int save_kind(int k, const char *path, const ot_tensor *t)
{
    const char *names[] = {"t"};
    return k == 0 ? ot_save(path, t)
         : k == 1 ? ot_savez(path, 1, names, &t)
                  : ot_savez_compressed(path, 1, names, &t);
}

/* Every system call of every saver failed in turn (ENOSPC, EIO): the call
 * returns OT_EIO naming the path and the errno, the old file keeps its
 * bytes, and no temporary is left; past the last call the save succeeds.
 * The code before this fix opened the target with truncation first. */
TEST(io_failed_save_keeps_old_file)
{
    ot_backend *be = ot_backend_new("ref", NULL);
    ot_tensor *old = random_tensor(be, OT_SHAPE(3), OT_F32);
    ot_tensor *big = random_tensor(be, OT_SHAPE(100, 300), OT_F64);   /* > the write buffer */
    for (int k = 0; k < 3; k++) {
        const char *path = tmp_path("kept");
        CHECK_INT(save_kind(k, path, old), 0);
        size_t n0, n1;
        unsigned char *before = slurp(path, &n0);
        long calls = 0;
        for (long at = 1; at < 100; at++) {
            ot__replace_fail_at(at, at % 2 ? ENOSPC : EIO);
            int rc = save_kind(k, path, big);
            calls = ot__replace_calls();
            ot__replace_fail_at(0, 0);
            if (rc == 0)
                break;
            CHECK_INT(rc, OT_EIO);
            CHECK_ERR(OT_EIO, "kept", strerror(at % 2 ? ENOSPC : EIO));
            unsigned char *after = slurp(path, &n1);
            CHECK(n1 == n0 && memcmp(before, after, n0) == 0);
            CHECK_INT(dir_entries(), 1);
            free(after);
        }
        CHECK(calls >= 5);        /* open, writes, fsync, close, rename */
        ot_tensor *out[1] = {NULL};
        if (k == 0)
            out[0] = ot_load(be, path);
        else
            CHECK_INT(ot_loadz(be, path, 1, NULL, out), 1);
        CHECK(same_bits(out[0], big));
        ot_tensor_free(out[0]);
        CHECK_INT(dir_entries(), 1);
        free(before);
        tmp_clean();
    }
    ot_tensor_free(old);
    ot_tensor_free(big);
    ot_backend_free(be);
}

/* The new file keeps the old one's permission bits, or gets 0666 less the
 * umask; a symbolic link is followed and stays a link; a device is
 * written in place (/dev/full: ENOSPC, and it is still a device); a
 * directory that cannot be written is an error with the old file intact. */
TEST(io_save_modes_links_and_devices)
{
    ot_backend *be = ot_backend_new("ref", NULL);
    ot_tensor *a = random_tensor(be, OT_SHAPE(4), OT_F32);
    struct stat st;
    mode_t mask = umask(022);
    CHECK_INT(ot_save(tmp_path("new.npy"), a), 0);
    CHECK(stat(tmp_path("new.npy"), &st) == 0 && (st.st_mode & 0777) == 0644);
    CHECK_INT(chmod(tmp_path("new.npy"), 0604), 0);
    CHECK_INT(ot_save(tmp_path("new.npy"), a), 0);
    CHECK(stat(tmp_path("new.npy"), &st) == 0 && (st.st_mode & 0777) == 0604);
    umask(mask);
    /* through a link */
    CHECK_INT(symlink("new.npy", tmp_path("link.npy")), 0);
    ot_tensor *b = random_tensor(be, OT_SHAPE(2), OT_F64);
    CHECK_INT(ot_save(tmp_path("link.npy"), b), 0);
    CHECK(lstat(tmp_path("link.npy"), &st) == 0 && S_ISLNK(st.st_mode));
    ot_tensor *got = ot_load(be, tmp_path("new.npy"));
    CHECK(same_bits(got, b));
    ot_tensor_free(got);
    CHECK_INT(dir_entries(), 2);
    /* a device */
    if (access("/dev/full", W_OK) == 0) {
        CHECK_INT(ot_save("/dev/full", b), OT_EIO);
        CHECK_ERR(OT_EIO, "save", "/dev/full", strerror(ENOSPC));
        CHECK(stat("/dev/full", &st) == 0 && S_ISCHR(st.st_mode));
    }
    CHECK_INT(ot_save("/dev/null", b), 0);
    CHECK(stat("/dev/null", &st) == 0 && S_ISCHR(st.st_mode));
    /* a read-only directory (root writes anyway: then only the injected
     * EACCES of the create is checked) */
    CHECK_INT(chmod(tmpdir, 0555), 0);
    if (geteuid() != 0) {
        CHECK_INT(ot_save(tmp_path("new.npy"), a), OT_EIO);
        CHECK_ERR(OT_EIO, "cannot open", "new.npy", strerror(EACCES));
    }
    ot__replace_fail_at(1, EACCES);
    CHECK_INT(ot_save(tmp_path("new.npy"), a), OT_EIO);
    ot__replace_fail_at(0, 0);
    CHECK_ERR(OT_EIO, "cannot open", "new.npy", strerror(EACCES));
    CHECK_INT(chmod(tmpdir, 0700), 0);
    got = ot_load(be, tmp_path("new.npy"));
    CHECK(same_bits(got, b));
    ot_tensor_free(got);
    CHECK_INT(dir_entries(), 2);
    /* a write-protected file in a writable directory is refused, as fopen
     * and numpy.save refuse it (the rename replaced it without a word);
     * root may write it, so there only the injected EACCES of the check */
    CHECK_INT(chmod(tmp_path("new.npy"), 0444), 0);
    if (geteuid() != 0) {
        CHECK_INT(ot_save(tmp_path("new.npy"), a), OT_EIO);
        CHECK_ERR(OT_EIO, "save: cannot open", "new.npy' for writing", strerror(EACCES));
        CHECK_INT(ot_savez(tmp_path("link.npy"), 1, (const char *[]){"a"},
                           (const ot_tensor *[]){a}), OT_EIO);
    }
    ot__replace_fail_at(1, EACCES);
    CHECK_INT(ot_save(tmp_path("link.npy"), a), OT_EIO);
    ot__replace_fail_at(0, 0);
    CHECK(strstr(ot_errmsg(), "temporary") == NULL);   /* the check's, not the create's */
    CHECK_ERR(OT_EIO, "save: cannot open", "link.npy' for writing", strerror(EACCES));
    got = ot_load(be, tmp_path("new.npy"));
    CHECK(same_bits(got, b));
    ot_tensor_free(got);
    CHECK(stat(tmp_path("new.npy"), &st) == 0 && (st.st_mode & 0777) == 0444);
    CHECK_INT(dir_entries(), 2);
    ot_tensor_free(a);
    ot_tensor_free(b);
    tmp_clean();
    ot_backend_free(be);
}

/* A dangling symbolic link (the link there, its target not): the save
 * creates the target, as fopen and numpy.save do, through a chain of
 * links too (relative ones read from their own directory, an absolute
 * one), and the links stay links; a save that fails creates nothing and
 * leaves the links; a loop of links is an error naming the path. The code
 * before this fix failed every such save ("cannot follow the symbolic
 * link": realpath needs the target to exist). */
TEST(io_save_through_dangling_links)
{
    ot_backend *be = ot_backend_new("ref", NULL);
    ot_tensor *a = random_tensor(be, OT_SHAPE(5), OT_F32);
    const char *names[] = {"a"};
    const ot_tensor *arrays[] = {a};
    struct stat st;
    char abs[160];
    CHECK_INT(symlink("made.npy", tmp_path("dangling.npy")), 0);
    CHECK_INT(ot_save(tmp_path("dangling.npy"), a), 0);
    CHECK(lstat(tmp_path("dangling.npy"), &st) == 0 && S_ISLNK(st.st_mode));
    ot_tensor *got = ot_load(be, tmp_path("made.npy"));
    CHECK(same_bits(got, a));
    ot_tensor_free(got);
    /* a chain: one -> sub/two (relative) -> ../end.npz (relative to sub) */
    CHECK_INT(mkdir(tmp_path("sub"), 0700), 0);
    CHECK_INT(symlink("sub/two.npz", tmp_path("one.npz")), 0);
    CHECK_INT(symlink("../end.npz", tmp_path("sub/two.npz")), 0);
    ot__replace_fail_at(1, ENOSPC);   /* the temporary's creation */
    CHECK_INT(ot_savez(tmp_path("one.npz"), 1, names, arrays), OT_EIO);
    ot__replace_fail_at(0, 0);
    CHECK_ERR(OT_EIO, "one.npz", strerror(ENOSPC));
    CHECK(lstat(tmp_path("end.npz"), &st) != 0 && errno == ENOENT);
    CHECK_INT(dir_entries(), 4);   /* dangling, made, sub, one: nothing more */
    for (int k = 0; k < 2; k++) {   /* creates end.npz, then replaces it */
        CHECK_INT(ot_savez(tmp_path("one.npz"), 1, names, arrays), 0);
        ot_tensor *out[1] = {NULL};
        CHECK_INT(ot_loadz(be, tmp_path("end.npz"), 1, NULL, out), 1);
        CHECK(same_bits(out[0], a));
        ot_tensor_free(out[0]);
        CHECK(lstat(tmp_path("one.npz"), &st) == 0 && S_ISLNK(st.st_mode));
        CHECK(lstat(tmp_path("sub/two.npz"), &st) == 0 && S_ISLNK(st.st_mode));
        CHECK_INT(dir_entries(), 5);
    }
    /* an absolute target */
    snprintf(abs, sizeof abs, "%s", tmp_path("abs.npy"));
    CHECK_INT(symlink(abs, tmp_path("to_abs.npy")), 0);
    CHECK_INT(ot_save(tmp_path("to_abs.npy"), a), 0);
    got = ot_load(be, abs);
    CHECK(same_bits(got, a));
    ot_tensor_free(got);
    /* a loop */
    CHECK_INT(symlink("loop2.npy", tmp_path("loop1.npy")), 0);
    CHECK_INT(symlink("loop1.npy", tmp_path("loop2.npy")), 0);
    CHECK_INT(ot_save(tmp_path("loop1.npy"), a), OT_EIO);
    CHECK_ERR(OT_EIO, "save", "loop1.npy", "cannot follow the symbolic link");
    ot_tensor_free(a);
    tmp_clean();
    ot_backend_free(be);
}

/* A file name within 10 bytes of NAME_MAX (255 bytes here): the
 * temporary beside it (name + ".tmp" + 6) was too long, and every save of
 * it failed; a short temporary name is taken instead, and no temporary is
 * left behind. */
TEST(io_save_names_near_name_max)
{
    ot_backend *be = ot_backend_new("ref", NULL);
    ot_tensor *a = random_tensor(be, OT_SHAPE(4), OT_F32);
    char name[256], dir[96];
    memset(name, 'n', 251);
    strcpy(name + 251, ".npy");   /* 255 bytes */
    tmp_clean();   /* a fresh directory: its entries are counted below */
    snprintf(dir, sizeof dir, "%s", tmp_path(""));
    char *path = malloc(strlen(dir) + 300);
    sprintf(path, "%s%s", dir, name);
    for (int k = 0; k < 2; k++) {   /* a new file, then over it */
        CHECK_INT(ot_save(path, a), 0);
        ot_tensor *b = ot_load(be, path);
        CHECK(b != NULL && same_bits(a, b));
        ot_tensor_free(b);
    }
    CHECK_INT(ot_savez(path, 1, (const char *[]){"a"}, (const ot_tensor *[]){a}), 0);
    CHECK_INT(dir_entries(), 1);   /* no temporary left */
    free(path);
    tmp_clean();
    ot_tensor_free(a);
    ot_backend_free(be);
}

/* A real write failure, no hook: with the file size limited to 4 KiB
 * (SIGXFSZ ignored, so write fails with EFBIG) a 64 KiB save over a small
 * file fails and the small file keeps its bytes, for each saver. The code
 * before this fix truncated the old file, then removed it. */
TEST(io_save_over_file_size_limit_keeps_old_file)
{
    ot_backend *be = ot_backend_new("ref", NULL);
    ot_tensor *small = random_tensor(be, OT_SHAPE(4), OT_F32);
    ot_tensor *big = random_tensor(be, OT_SHAPE(8192), OT_F64);
    const char *path = tmp_path("limited");
    struct rlimit was, lim;
    signal(SIGXFSZ, SIG_IGN);
    CHECK_INT(getrlimit(RLIMIT_FSIZE, &was), 0);
    lim = (struct rlimit){4096, was.rlim_max};   /* the soft limit only: it can be raised back */
    for (int k = 0; k < 3; k++) {
        const char *names[] = {"t"};
        const ot_tensor *one[] = {small}, *other[] = {big};
        CHECK_INT(k == 0 ? ot_save(path, small) : ot_savez(path, 1, names, one), 0);
        size_t n0, n1;
        unsigned char *before = slurp(path, &n0);
        CHECK_INT(setrlimit(RLIMIT_FSIZE, &lim), 0);
        int rc = k == 0 ? ot_save(path, big)
               : k == 1 ? ot_savez(path, 1, names, other)
                        : ot_savez_compressed(path, 1, names, other);
        CHECK_INT(setrlimit(RLIMIT_FSIZE, &was), 0);
        CHECK_INT(rc, OT_EIO);
        CHECK_ERR(OT_EIO, "limited", strerror(EFBIG));
        unsigned char *after = slurp(path, &n1);
        CHECK(after && n1 == n0 && memcmp(before, after, n0) == 0);
        CHECK_INT(dir_entries(), 1);
        free(before);
        free(after);
    }
    ot_tensor_free(small);
    ot_tensor_free(big);
    tmp_clean();
    ot_backend_free(be);
}

/* Loads path (as .npy or .npz) after writing bytes b[0..n); it may fail but
 * must not crash, leak or read out of bounds (ASan and valgrind watch). */
static void load_mutant(ot_backend *be, const char *path, const unsigned char *b, size_t n,
                        bool zip, int *failed)
{
    spit(path, b, n);
    if (zip) {
        ot_tensor *out[2] = {0};
        int rc = ot_loadz(be, path, 2, NULL, out);
        *failed += rc < 0;
        if (rc < 0)
            CHECK(out[0] == NULL && out[1] == NULL && ot_errcode() == rc && *ot_errmsg());
        ot_tensor_free(out[0]);
        ot_tensor_free(out[1]);
    } else {
        ot_tensor *t = ot_load(be, path);
        *failed += !t;
        if (!t)
            CHECK(ot_errcode() != 0 && *ot_errmsg());
        ot_tensor_free(t);
    }
}

TEST(io_fuzz_loaders)
{
    ot_backend *be = ot_backend_new("ref", NULL);
    ot_tensor *a = random_tensor(be, OT_SHAPE(3, 5), OT_F64);
    ot_tensor *c = random_tensor(be, OT_SHAPE(2), OT_I32);
    CHECK_INT(ot_save(tmp_path("f.npy"), a), 0);
    CHECK_INT(ot_savez(tmp_path("f.npz"), 2, (const char *[]){"a", "c"},
                       (const ot_tensor *[]){a, c}), 0);
    for (int zip = 0; zip < 2; zip++) {
        size_t n;
        unsigned char *b = slurp(tmp_path(zip ? "f.npz" : "f.npy"), &n), *m = malloc(n);
        int failed = 0;
        /* every truncation fails */
        for (size_t len = 0; len < n; len++)
            load_mutant(be, tmp_path("m"), b, len, zip, &failed);
        CHECK_INT(failed, (long long)n);
        /* random bytes changed: anything may happen but a crash */
        for (int k = 0; k < 1500; k++) {
            memcpy(m, b, n);
            for (int j = 0, flips = 1 + (int)(next32() % 4); j < flips; j++) {
                size_t at = next32() % n;
                m[at] = next32() % 3 ? (unsigned char)next32() : m[at] ^ (1u << next32() % 8);
            }
            load_mutant(be, tmp_path("m"), m, n, zip, &failed);
        }
        free(b);
        free(m);
    }
    ot_tensor_free(a);
    ot_tensor_free(c);
    tmp_clean();
    ot_backend_free(be);
}

/* ---- NumPy itself ----------------------------------------------------------- */

/* The Python with numpy, or NULL after saying why the case is skipped. */
static const char *numpy_python(void)
{
    const char *py = getenv("PYTHON") && *getenv("PYTHON") ? getenv("PYTHON") : "/usr/bin/python3";
    char cmd[512];
    snprintf(cmd, sizeof cmd, "'%s' -c 'import numpy' >/dev/null 2>&1", py);
    if (access(py, X_OK) != 0 || system(cmd) != 0) {
        fprintf(stderr, "SKIPPED: io NumPy interop: %s %s\n", py,
                access(py, X_OK) != 0 ? "not found" : "has no numpy");
        return NULL;
    }
    return py;
}

/* Runs python code with the temporary directory as argv[1]; its status. */
static int run_python(const char *py, const char *code)
{
    char path[160], cmd[512];
    snprintf(path, sizeof path, "%s", tmp_path("t.py"));
    spit(path, code, strlen(code));
    snprintf(cmd, sizeof cmd, "'%s' '%s' '%s'", py, path, tmpdir);
    return system(cmd);
}

/* The same bytes on both sides: 0, 1, 2, ... as uint32 words viewed as
 * each dtype (so every value is a bit pattern, NaNs and subnormals
 * included, that NumPy must not change). */
static ot_tensor *words(ot_backend *be, ot_shape s, ot_dtype dt, uint32_t seed)
{
    ot_tensor *t = ot_empty(be, s, dt);
    uint32_t *p = ot_tensor_data(t);
    size_t n = (size_t)ot_tensor_numel(t) * ot_dtype_size(dt) / 4;
    for (size_t i = 0; i < n; i++)
        p[i] = (uint32_t)i * 2654435761u + seed;
    return t;
}

static const char numpy_reads[] =
    "import sys, numpy as np\n"
    "d = sys.argv[1]\n"
    "def words(shape, dt, seed):\n"
    "    n = int(np.prod(shape)) * np.dtype(dt).itemsize // 4\n"
    "    w = (np.arange(n, dtype=np.uint64) * 2654435761 + seed) % 2**32\n"
    "    return w.astype('<u4').view(dt).reshape(shape)\n"
    "want = {'f': words((3, 4), '<f4', 1), 'd': words((2, 3, 2), '<f8', 2),\n"
    "        'i': words((5,), '<i4', 3)}\n"
    "for k, w in want.items():\n"
    "    a = np.load(d + '/' + k + '.npy')\n"
    "    assert a.dtype == w.dtype and a.shape == w.shape, (k, a.dtype, a.shape)\n"
    "    assert a.tobytes() == w.tobytes(), k\n"
    "z = np.load(d + '/all.npz')\n"
    "assert sorted(z.files) == ['d', 'f', 'i'], z.files\n"
    "for k, w in want.items():\n"
    "    assert z[k].tobytes() == w.tobytes() and z[k].shape == w.shape, k\n"
    "np.save(d + '/np_f.npy', want['f'])\n"
    "np.save(d + '/np_fort.npy', np.asfortranarray(want['d']))\n"
    "np.savez(d + '/np.npz', f=want['f'], d=want['d'], i=want['i'])\n"
    "np.savez_compressed(d + '/np_c.npz', f=want['f'])\n"
    "np.savez_compressed(d + '/np_i8.npz', small=np.array([1, -2, 2**31 - 1]),\n"
    "                    big=np.array([0, -2**31 - 1]))\n"
    "z = np.load(d + '/all_c.npz')\n"
    "assert all(z.zip.getinfo(k + '.npy').compress_type == 8 for k in want), z.files\n"
    "for k, w in want.items():\n"
    "    assert z[k].tobytes() == w.tobytes() and z[k].shape == w.shape, k\n";

TEST(io_numpy_interop)
{
    const char *py = numpy_python();
    if (!py)
        return;
    ot_backend *be = ot_backend_new("ref", NULL);
    ot_tensor *f = words(be, OT_SHAPE(3, 4), OT_F32, 1), *d = words(be, OT_SHAPE(2, 3, 2), OT_F64, 2),
              *i = words(be, OT_SHAPE(5), OT_I32, 3);
    CHECK_INT(ot_save(tmp_path("f.npy"), f), 0);
    CHECK_INT(ot_save(tmp_path("d.npy"), d), 0);
    CHECK_INT(ot_save(tmp_path("i.npy"), i), 0);
    CHECK_INT(ot_savez(tmp_path("all.npz"), 3, (const char *[]){"f", "d", "i"},
                       (const ot_tensor *[]){f, d, i}), 0);
    CHECK_INT(ot_savez_compressed(tmp_path("all_c.npz"), 3, (const char *[]){"f", "d", "i"},
                                  (const ot_tensor *[]){f, d, i}), 0);
    CHECK_INT(run_python(py, numpy_reads), 0);
    ot_tensor *u = ot_load(be, tmp_path("np_f.npy"));
    CHECK(same_bits(u, f));
    ot_tensor_free(u);
    u = ot_load(be, tmp_path("np_fort.npy"));
    CHECK(same_bits(u, d));
    ot_tensor_free(u);
    ot_tensor *out[3];
    CHECK_INT(ot_loadz(be, tmp_path("np.npz"), 3, (const char *[]){"i", "f", "d"}, out), 3);
    CHECK(same_bits(out[0], i) && same_bits(out[1], f) && same_bits(out[2], d));
    for (int k = 0; k < 3; k++)
        ot_tensor_free(out[k]);
    CHECK_INT(ot_loadz(be, tmp_path("np_c.npz"), 1, NULL, out), 1);
    CHECK(same_bits(out[0], f));
    ot_tensor_free(out[0]);
    CHECK_INT(ot_loadz(be, tmp_path("np_i8.npz"), 2, (const char *[]){"small", "big"}, out),
              OT_EOVERFLOW);
    CHECK_ERR(OT_EOVERFLOW, "loadz", "np_i8.npz", "-2147483649", "element 1");
    CHECK_INT(ot_loadz(be, tmp_path("np_i8.npz"), 1, (const char *[]){"small"}, out), 2);
    int32_t small[3];
    CHECK_INT(ot_get_n(out[0], small, sizeof small), 0);
    CHECK(small[0] == 1 && small[1] == -2 && small[2] == INT32_MAX);
    ot_tensor_free(out[0]);
    ot_tensor_free(f);
    ot_tensor_free(d);
    ot_tensor_free(i);
    tmp_clean();
    ot_backend_free(be);
}

/* ---- ot_wrap ---------------------------------------------------------------- */

static int freed;
static void count_free(void *user, void *ptr)
{
    CHECK(user == &freed);
    CHECK(ptr != NULL);
    freed++;
}

TEST(io_wrap_frees_with_last_view)
{
    ot_backend *be = ot_backend_new("ref", NULL);
    float buf[6] = {0, 1, 2, 3, 4, 5};
    freed = 0;
    ot_tensor *t = ot_wrap(be, OT_SHAPE(2, 3), OT_F32, buf, NULL, count_free, &freed);
    CHECK(t != NULL);
    CHECK(ot_tensor_data(t) == buf);
    ot_tensor *v = ot_slice(t, OT_IDX(1));
    ot_tensor_free(t);
    CHECK_INT(freed, 0);
    float got[3];
    CHECK_INT(ot_get_n(v, got, sizeof got), 0);
    CHECK(got[0] == 3 && got[2] == 5);
    ot_tensor_free(v);
    CHECK_INT(freed, 1);
    /* no free_fn: the memory stays the caller's */
    t = ot_wrap(be, OT_SHAPE(6), OT_F32, buf, NULL, NULL, NULL);
    CHECK_INT(ot_fill(t, 7), 0);
    CHECK(buf[5] == 7);
    ot_tensor_free(t);
    /* negative strides: the view reaches below ptr */
    t = ot_wrap(be, OT_SHAPE(3), OT_F32, &buf[4], (int64_t[]){-2}, count_free, &freed);
    CHECK_INT(ot_set(t, (float[]){1, 2, 3}), 0);
    CHECK(buf[4] == 1 && buf[2] == 2 && buf[0] == 3);
    ot_tensor_free(t);
    CHECK_INT(freed, 2);
    /* errors; free_fn is not called */
    CHECK(ot_wrap(be, OT_SHAPE(2), OT_F32, (char *)buf + 1, NULL, count_free, &freed) == NULL);
    CHECK_ERR(OT_EINVAL, "wrap", "not aligned to its 4-byte float32 elements");
    CHECK(ot_wrap(be, OT_SHAPE(2), OT_F64, (char *)buf + 4, NULL, count_free, &freed) == NULL);
    CHECK_ERR(OT_EINVAL, "8-byte float64");
    CHECK(ot_wrap(be, OT_SHAPE(2), OT_F32, NULL, NULL, NULL, NULL) == NULL);
    CHECK_ERR(OT_ENULL, "wrap", "ptr");
    CHECK(ot_wrap(NULL, OT_SHAPE(2), OT_F32, buf, NULL, NULL, NULL) == NULL);
    CHECK_ERR(OT_ENULL, "wrap", "backend");
    CHECK(ot_wrap(be, OT_SHAPE(-2), OT_F32, buf, NULL, NULL, NULL) == NULL);
    CHECK(ot_errcode() != 0);
    CHECK(ot_wrap(be, OT_SHAPE(2), (ot_dtype)9, buf, NULL, NULL, NULL) == NULL);
    CHECK_ERR(OT_EDTYPE, "wrap");
    CHECK(ot_wrap(be, OT_SHAPE(3, 3), OT_F32, buf, (int64_t[]){INT64_MAX / 2, 1}, NULL, NULL) ==
          NULL);
    CHECK_ERR(OT_EOVERFLOW, "wrap");
    CHECK_INT(freed, 2);
    /* a broadcast (stride 0) is read, never written */
    t = ot_wrap(be, OT_SHAPE(2, 3), OT_F32, buf, (int64_t[]){0, 1}, NULL, NULL);
    CHECK_INT(ot_fill(t, 1), OT_EALIAS);
    ot_tensor_free(t);
    ot_backend_free(be);
}

/* y = tanh(x * 2 + x), then x * 2 + 1, and sum(exp(x)) into a 0-d output,
 * on backend be, x and the outputs wrapped at byte offsets from 64-byte
 * aligned memory; the bits compared with the same trees over tensors of
 * the library's own. */
static void wrap_assign_at(ot_backend *be, size_t xoff, size_t yoff)
{
    enum { N = 1000 };
    char *xm = aligned_alloc(64, 4096 + 64), *ym = aligned_alloc(64, 4096 + 64);
    float *x = (float *)(xm + xoff), *y = (float *)(ym + yoff);
    for (int i = 0; i < N; i++)
        x[i] = (float)(i - 500) / 97.0f;
    ot_tensor *tx = ot_wrap(be, OT_SHAPE(N), OT_F32, x, NULL, NULL, NULL);
    ot_tensor *ty = ot_wrap(be, OT_SHAPE(N), OT_F32, y, NULL, NULL, NULL);
    ot_tensor *ax = ot_array(be, OT_SHAPE(N), OT_F32, x), *ay = ot_empty(be, OT_SHAPE(N), OT_F32);
    ot_pool *p = ot_pool_push();
    CHECK_INT(ot_assign(ty, ot_tanh(ot_add(ot_mul(tx, 2.0f), tx))), 0);
    CHECK_INT(ot_assign(ay, ot_tanh(ot_add(ot_mul(ax, 2.0f), ax))), 0);
    /* a reduction reading the wrapped operand, into a wrapped 0-d output */
    float *s = (float *)(ym + yoff);
    ot_tensor *ts = ot_wrap(be, OT_SHAPE(), OT_F32, s, NULL, NULL, NULL);
    ot_tensor *as = ot_empty(be, OT_SHAPE(), OT_F32);
    ot_pool_pop(p);
    CHECK(same_bits(ty, ay));
    p = ot_pool_push();
    /* memory-bound: streams on a backend with a low threshold, if aligned */
    CHECK_INT(ot_assign(ty, ot_add(ot_mul(tx, 2.0f), 1.0f)), 0);
    CHECK_INT(ot_assign(ay, ot_add(ot_mul(ax, 2.0f), 1.0f)), 0);
    ot_pool_pop(p);
    CHECK(same_bits(ty, ay));
    p = ot_pool_push();
    CHECK_INT(ot_assign(ts, ot_sum(ot_exp(tx))), 0);
    CHECK_INT(ot_assign(as, ot_sum(ot_exp(ax))), 0);
    ot_pool_pop(p);
    CHECK(same_bits(ts, as));
    ot_tensor *tensors[] = {tx, ty, ax, ay, ts, as};
    for (int i = 0; i < 6; i++)
        ot_tensor_free(tensors[i]);
    free(xm);
    free(ym);
}

TEST(io_wrap_assign_aligned_and_unaligned)
{
    /* the third streams every output of 64 bytes on, where aligned */
    ot_backend *be[] = {ot_backend_new("cpu", NULL), ot_backend_new("ref", NULL),
                        ot_backend_new("cpu", &(ot_backend_opts){.stream_bytes = 64})};
    const size_t offs[][2] = {{0, 0}, {4, 0}, {0, 4}, {12, 20}, {60, 36}};
    for (int b = 0; b < 3; b++)
        for (int k = 0; k < 5; k++)
            wrap_assign_at(be[b], offs[k][0], offs[k][1]);
    for (int b = 0; b < 3; b++)
        ot_backend_free(be[b]);
}

/* ---- ot_get_n / ot_set_n ---------------------------------------------------- */

TEST(io_get_set_n)
{
    ot_backend *be = ot_backend_new("ref", NULL);
    ot_tensor *t = ot_zeros(be, OT_SHAPE(2, 3), OT_F64);
    double six[6] = {1, 2, 3, 4, 5, 6}, got[7] = {0};
    CHECK_INT(ot_set_n(t, six, sizeof six - 1), OT_EINVAL);
    CHECK_ERR(OT_EINVAL, "set_n", "host buffer of 47 bytes is too small for float64 (2,3) (48 bytes)");
    CHECK_INT(ot_set_n(t, six, sizeof six), 0);
    got[6] = -1;
    CHECK_INT(ot_get_n(t, got, 5 * sizeof(double)), OT_EINVAL);
    CHECK_ERR(OT_EINVAL, "get_n", "40 bytes is too small");
    CHECK(got[0] == 0);
    CHECK_INT(ot_get_n(t, got, sizeof got), 0);
    CHECK(memcmp(got, six, sizeof six) == 0 && got[6] == -1);
    CHECK_INT(ot_get_n(NULL, got, 8), OT_ENULL);
    CHECK_INT(ot_get_n(t, NULL, 8), OT_ENULL);
    CHECK_ERR(OT_ENULL, "get_n", "host");
    CHECK_INT(ot_set_n(NULL, six, 8), OT_ENULL);
    CHECK_INT(ot_set_n(t, NULL, 48), OT_ENULL);
    /* a broadcast view is not written, even with room */
    ot_tensor *row = ot_slice(t, OT_IDX(0));
    ot_tensor *bc = ot_broadcast_to(row, OT_SHAPE(2, 3));
    CHECK(bc != NULL);
    ot_tensor_free(row);
    CHECK_INT(ot_set_n(bc, six, sizeof six), OT_EALIAS);
    ot_tensor *e = ot_zeros(be, OT_SHAPE(0, 3), OT_F32);
    CHECK_INT(ot_get_n(e, got, 0), 0);
    ot_tensor_free(e);
    ot_tensor_free(bc);
    ot_tensor_free(t);
    ot_backend_free(be);
}

/* ---- printing ---------------------------------------------------------------- */

/* What ot_tensor_print_opts writes (caller frees). */
static char *print_str(const ot_tensor *t, const ot_print_options *o)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    CHECK_INT(ot_tensor_print_opts(t, f, o), 0);
    fclose(f);
    return buf;
}

static ot_tensor *iota_i32(ot_backend *be, ot_shape s)
{
    ot_tensor *t = ot_empty(be, s, OT_I32);
    int32_t *p = ot_tensor_data(t);
    for (int64_t i = 0; i < ot_tensor_numel(t); i++)
        p[i] = (int32_t)i;
    return t;
}

/* The expected texts are NumPy 1.24's print() of the same arrays. */
TEST(io_print_summarises_as_numpy)
{
    ot_backend *be = ot_backend_new("ref", NULL);
    ot_tensor *a = iota_i32(be, OT_SHAPE(20, 100));
    char *s = print_str(a, NULL);
    CHECK_STR(s, "[[   0    1    2 ...   97   98   99]\n"
                 " [ 100  101  102 ...  197  198  199]\n"
                 " [ 200  201  202 ...  297  298  299]\n"
                 " ...\n"
                 " [1700 1701 1702 ... 1797 1798 1799]\n"
                 " [1800 1801 1802 ... 1897 1898 1899]\n"
                 " [1900 1901 1902 ... 1997 1998 1999]]\n");
    free(s);
    ot_tensor *b = iota_i32(be, OT_SHAPE(2, 3, 400));
    s = print_str(b, NULL);
    CHECK_STR(s, "[[[   0    1    2 ...  397  398  399]\n"
                 "  [ 400  401  402 ...  797  798  799]\n"
                 "  [ 800  801  802 ... 1197 1198 1199]]\n"
                 "\n"
                 " [[1200 1201 1202 ... 1597 1598 1599]\n"
                 "  [1600 1601 1602 ... 1997 1998 1999]\n"
                 "  [2000 2001 2002 ... 2397 2398 2399]]]\n");
    free(s);
    ot_tensor *c = iota_i32(be, OT_SHAPE(2, 3, 4));
    s = print_str(c, &(ot_print_options){.threshold = 5, .edgeitems = 1});
    CHECK_STR(s, "[[[ 0 ...  3]\n"
                 "  ...\n"
                 "  [ 8 ... 11]]\n"
                 "\n"
                 " [[12 ... 15]\n"
                 "  ...\n"
                 "  [20 ... 23]]]\n");
    free(s);
    /* 8x8x8 with threshold 10: a gap between matrices too */
    ot_tensor *d = iota_i32(be, OT_SHAPE(8, 8, 8));
    s = print_str(d, &(ot_print_options){.threshold = 10});
    CHECK(strstr(s, "  [184 185 186 ... 189 190 191]]\n\n ...\n\n [[320 321 322 ... 325 326 327]\n") !=
          NULL);
    free(s);
    /* a negative threshold prints everything; small tensors are unchanged */
    s = print_str(a, &(ot_print_options){.threshold = -1});
    CHECK(strlen(s) > 20 * 100 * 5 && !strstr(s, "..."));
    free(s);
    ot_tensor *tensors[] = {a, b, c, d};
    for (int i = 0; i < 4; i++)
        ot_tensor_free(tensors[i]);
    ot_backend_free(be);
}

TEST(io_print_large_and_precision)
{
    ot_backend *be = ot_backend_new("ref", NULL);
    ot_tensor *big = ot_full(be, OT_SHAPE(1000, 1000), OT_F32, 0.1);
    char *s = print_str(big, NULL);
    CHECK(strlen(s) < 400);
    CHECK(strstr(s, "[[0.1 0.1 0.1 ... 0.1 0.1 0.1]\n") == s);
    free(s);
    ot_tensor *pi = ot_full(be, OT_SHAPE(2), OT_F64, 3.14159265358979);
    s = print_str(pi, &(ot_print_options){.precision = 3});   /* digits after the point */
    CHECK_STR(s, "[3.142 3.142]\n");
    free(s);
    s = print_str(pi, NULL);
    CHECK_STR(s, "[3.14159265 3.14159265]\n");
    free(s);
    CHECK_INT(ot_tensor_print_opts(pi, stdout, &(ot_print_options){.precision = 18}), OT_EINVAL);
    CHECK_ERR(OT_EINVAL, "tensor_print", "precision 18");
    CHECK_INT(ot_tensor_print_opts(pi, stdout, &(ot_print_options){.edgeitems = -1}), OT_EINVAL);
    ot_clear_error();
    CHECK_INT(ot_tensor_print_opts(NULL, stdout, NULL), OT_ENULL);
    CHECK_INT(ot_tensor_print_opts(pi, NULL, NULL), OT_ENULL);
    ot_tensor_free(big);
    ot_tensor_free(pi);
    ot_backend_free(be);
}

/* ---- allocation failures ------------------------------------------------------ */

/* One of each I/O call, with allocation n failing (0: none); returns the
 * first failure's code (every tensor it made freed). */
static int io_calls(ot_backend *be, const ot_tensor *a, long n)
{
    ot_tensor *view = ot_transpose(a, NULL), *out[2] = {0}, *t = NULL, *w = NULL;
    static float host[6];
    ot_clear_error();
    ot__alloc_fail_at(n);
    int rc = view ? ot_save(tmp_path("o.npy"), view) : OT_ENOMEM;
    if (rc == 0)
        rc = ot_savez(tmp_path("o.npz"), 2, (const char *[]){"a", "v"},
                      (const ot_tensor *[]){a, view});
    if (rc == 0)
        rc = (t = ot_load(be, tmp_path("o.npy"))) ? 0 : ot_errcode();
    if (rc == 0)
        rc = ot_loadz(be, tmp_path("o.npz"), 2, (const char *[]){"v", "a"}, out) == 2
                 ? 0 : ot_errcode();
    if (rc == 0)
        rc = (w = ot_wrap(be, OT_SHAPE(2, 3), OT_F32, host, NULL, NULL, NULL)) ? 0 : ot_errcode();
    ot__alloc_fail_at(0);
    if (rc == 0)
        CHECK(same_bits(t, view) && same_bits(out[0], view) && same_bits(out[1], a));
    ot_tensor *all[] = {view, out[0], out[1], t, w};
    for (int i = 0; i < 5; i++)
        ot_tensor_free(all[i]);
    return rc;
}

TEST(io_allocation_failures)
{
    ot_backend *be = ot_backend_new("ref", NULL);
    ot_tensor *a = random_tensor(be, OT_SHAPE(2, 3), OT_F32);
    CHECK_INT(io_calls(be, a, 0), 0);
    int failed = 0;
    for (long n = 1; n < 200; n++) {
        int rc = io_calls(be, a, n);
        if (rc == 0)
            break;
        failed++;
        CHECK_INT(rc, OT_ENOMEM);
        CHECK_INT(ot_errcode(), OT_ENOMEM);
    }
    CHECK(failed >= 4);           /* optree's own: libzip allocates through malloc */
    ot_tensor_free(a);
    tmp_clean();
    ot_backend_free(be);
}
