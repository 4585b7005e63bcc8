/*
 * test_tensor.c - tensors: creation in every dtype, 0-d and zero-size
 * shapes, host copies through strided views, NumPy slicing, reshape,
 * transpose, broadcast_to, names, printing, overlap tests and every error
 * message of src/core/tensor.c. Expected values are what NumPy gives for the
 * same expression on np.arange data.
 */
#include "test.h"

#include "internal.h"

#include <stdint.h>
#include <stdlib.h>

static ot_backend *ref_backend(void)
{
    ot_backend *be = ot_backend_new("ref", NULL);
    CHECK(be != NULL);
    return be;
}

/* 0, 1, 2, ... in shape s (np.arange(n).reshape(s)). */
static ot_tensor *iota(ot_backend *be, ot_shape s, ot_dtype dt)
{
    ot_tensor *t = ot_empty(be, s, dt);
    if (!t)
        return NULL;
    int64_t n = ot_tensor_numel(t);
    size_t isz = ot_dtype_size(dt);
    char *host = malloc((size_t)n * isz + 1);
    for (int64_t i = 0; i < n; i++)
        ot__store(host + (size_t)i * isz, dt, (double)i);
    CHECK_INT(ot_set(t, host), 0);
    free(host);
    return t;
}

/* The values of t, row-major, converted to double (caller frees). */
static double *values(const ot_tensor *t)
{
    int64_t n = ot_tensor_numel(t);
    size_t isz = ot_dtype_size(ot_tensor_dtype(t));
    char *host = malloc((size_t)n * isz + 1);
    double *out = malloc((size_t)n * sizeof *out + 1);
    CHECK_INT(ot_get(t, host), 0);
    for (int64_t i = 0; i < n; i++)
        out[i] = ot__load(host + (size_t)i * isz, ot_tensor_dtype(t));
    free(host);
    return out;
}

static void expect_values(const char *file, int line, const ot_tensor *t, int n,
                          const double *want)
{
    if (!t) {
        test__fail(file, line, "tensor is NULL (%s)", ot_errmsg());
        return;
    }
    if (ot_tensor_numel(t) != n) {
        test__fail(file, line, "numel %lld, expected %d", (long long)ot_tensor_numel(t), n);
        return;
    }
    double *got = values(t);
    for (int i = 0; i < n; i++)
        if (!test__close(got[i], want[i], 0))
            test__fail(file, line, "element %d is %.17g, expected %.17g", i, got[i], want[i]);
    free(got);
}
#define EXPECT_VALUES(t, ...)                                                 \
    expect_values(__FILE__, __LINE__, (t),                                    \
                  (int)(sizeof((double[]){__VA_ARGS__}) / sizeof(double)),    \
                  (double[]){__VA_ARGS__})

static void expect_shape(const char *file, int line, const ot_tensor *t, ot_shape want)
{
    ot_shape got = ot_tensor_shape(t);
    if (!ot__shape_eq(&got, &want)) {
        char a[OT__SHAPE_STRLEN], b[OT__SHAPE_STRLEN];
        test__fail(file, line, "shape %s, expected %s", ot__shape_str(&got, a),
                   ot__shape_str(&want, b));
    }
}
#define EXPECT_SHAPE(t, ...) expect_shape(__FILE__, __LINE__, (t), OT_SHAPE(__VA_ARGS__))

static void expect_strides(const char *file, int line, const ot_tensor *t, int n,
                           const int64_t *want)
{
    if (ot_tensor_ndim(t) != n) {
        test__fail(file, line, "ndim %d, expected %d", ot_tensor_ndim(t), n);
        return;
    }
    for (int i = 0; i < n; i++)
        if (ot_tensor_stride(t, i) != want[i])
            test__fail(file, line, "stride %d is %lld, expected %lld", i,
                       (long long)ot_tensor_stride(t, i), (long long)want[i]);
}
#define EXPECT_STRIDES(t, ...)                                                \
    expect_strides(__FILE__, __LINE__, (t),                                   \
                   (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), \
                   (int64_t[]){__VA_ARGS__})

/* What ot_tensor_print writes, as a malloc'd string. */
static char *print_str(const ot_tensor *t)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f)
        return NULL;
    CHECK_INT(ot_tensor_print(t, f), 0);
    fclose(f);
    return buf;
}
#define CHECK_PRINT(t, want)                                                  \
    do {                                                                      \
        char *s_ = print_str(t);                                              \
        CHECK_STR(s_, want);                                                  \
        free(s_);                                                             \
    } while (0)

/* ---- dtypes and creation -------------------------------------------------- */

TEST(tensor_dtype_size_and_name)
{
    CHECK_INT(ot_dtype_size(OT_F32), 4);
    CHECK_INT(ot_dtype_size(OT_F64), 8);
    CHECK_INT(ot_dtype_size(OT_I32), 4);
    CHECK_INT(ot_dtype_size(OT_DTYPE_DEFAULT), 0);
    CHECK_INT(ot_dtype_size((ot_dtype)42), 0);
    CHECK_STR(ot_dtype_name(OT_F32), "float32");
    CHECK_STR(ot_dtype_name(OT_F64), "float64");
    CHECK_STR(ot_dtype_name(OT_I32), "int32");
    CHECK_STR(ot_dtype_name((ot_dtype)42), "unknown");
}

TEST(tensor_create_every_dtype)
{
    ot_backend *be = ref_backend();
    const ot_dtype dts[] = {OT_F32, OT_F64, OT_I32};
    for (int k = 0; k < 3; k++) {
        ot_tensor *z = ot_zeros(be, OT_SHAPE(3, 4), dts[k]);
        ot_tensor *o = ot_ones(be, OT_SHAPE(3, 4), dts[k]);
        ot_tensor *f = ot_full(be, OT_SHAPE(2), dts[k], -7.0);
        ot_tensor *e = ot_empty(be, OT_SHAPE(5, 1, 2), dts[k]);
        CHECK(z && o && f && e);
        CHECK_INT(ot_tensor_dtype(z), dts[k]);
        CHECK_INT(ot_tensor_ndim(z), 2);
        EXPECT_SHAPE(z, 3, 4);
        EXPECT_STRIDES(z, 4, 1);
        EXPECT_STRIDES(e, 2, 2, 1);
        CHECK_INT(ot_tensor_numel(z), 12);
        CHECK_INT(ot_tensor_offset(z), 0);
        CHECK(ot_tensor_backend(z) == be);
        CHECK(ot_tensor_is_contiguous(z));
        CHECK(ot_tensor_name(z) == NULL);
        CHECK((uintptr_t)ot_tensor_data(z) % 64 == 0);
        CHECK((uintptr_t)ot_tensor_data(e) % 64 == 0);
        EXPECT_VALUES(z, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0);
        EXPECT_VALUES(o, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1);
        EXPECT_VALUES(f, -7, -7);
        ot_tensor_free(z);
        ot_tensor_free(o);
        ot_tensor_free(f);
        ot_tensor_free(e);
    }
    ot_backend_free(be);
}

TEST(tensor_default_dtype_comes_from_backend)
{
    ot_backend *be = ref_backend();
    ot_backend *be64 = ot_backend_new("ref", &(ot_backend_opts){.dtype = OT_F64});
    ot_tensor *a = ot_zeros(be, OT_SHAPE(2), OT_DTYPE_DEFAULT);
    ot_tensor *b = ot_zeros(be64, OT_SHAPE(2), OT_DTYPE_DEFAULT);
    CHECK_INT(ot_tensor_dtype(a), OT_F32);
    CHECK_INT(ot_tensor_dtype(b), OT_F64);
    ot_tensor_free(a);
    ot_tensor_free(b);
    ot_backend_free(be);
    ot_backend_free(be64);
}

TEST(tensor_array_roundtrip)
{
    ot_backend *be = ref_backend();
    float f32[6] = {1.5f, -2, 3, 4, 5, 6.25f}, f32o[6];
    double f64[3] = {0.1, -1e300, 4.9e-324}, f64o[3];
    int32_t i32[4] = {INT32_MIN, -1, 0, INT32_MAX}, i32o[4];
    ot_tensor *a = ot_array(be, OT_SHAPE(2, 3), OT_F32, f32);
    ot_tensor *b = ot_array(be, OT_SHAPE(3), OT_F64, f64);
    ot_tensor *c = ot_array(be, OT_SHAPE(2, 1, 2), OT_I32, i32);
    f32[0] = 99;    /* the tensor holds a copy */
    CHECK_INT(ot_get(a, f32o), 0);
    CHECK_INT(ot_get(b, f64o), 0);
    CHECK_INT(ot_get(c, i32o), 0);
    CHECK(f32o[0] == 1.5f && memcmp(f32o + 1, f32 + 1, 5 * sizeof(float)) == 0);
    CHECK(memcmp(f64o, f64, sizeof f64) == 0);
    CHECK(memcmp(i32o, i32, sizeof i32) == 0);
    CHECK(memcmp(ot_tensor_data(b), f64, sizeof f64) == 0);
    ot_tensor_free(a);
    ot_tensor_free(b);
    ot_tensor_free(c);
    ot_backend_free(be);
}

TEST(tensor_int32_stores_truncate_and_saturate)
{
    ot_backend *be = ref_backend();
    ot_tensor *t = ot_full(be, OT_SHAPE(1), OT_I32, 2.7);
    EXPECT_VALUES(t, 2);
    const double in[] = {-2.7, NAN, 1e10, -1e10, INFINITY, -0.5};
    const double out[] = {-2, 0, INT32_MAX, INT32_MIN, INT32_MAX, 0};
    for (int i = 0; i < 6; i++) {
        CHECK_INT(ot_fill(t, in[i]), 0);
        double *v = values(t);
        CHECK_NEAR(v[0], out[i], 0);
        free(v);
    }
    ot_tensor_free(t);
    ot_backend_free(be);
}

TEST(tensor_zero_d)
{
    ot_backend *be = ref_backend();
    ot_tensor *t = ot_full(be, OT_SHAPE(), OT_F64, 3.5);
    CHECK(t != NULL);
    CHECK_INT(ot_tensor_ndim(t), 0);
    CHECK_INT(ot_tensor_numel(t), 1);
    CHECK(ot_tensor_is_contiguous(t));
    EXPECT_VALUES(t, 3.5);
    double v = -1.25;
    CHECK_INT(ot_set(t, &v), 0);
    EXPECT_VALUES(t, -1.25);
    CHECK_PRINT(t, "-1.25\n");
    ot_tensor *s = ot_slice_n(t, 0, NULL);      /* x[()] */
    ot_tensor *r = ot_reshape(t, OT_SHAPE(1, 1));
    ot_tensor *tt = ot_transpose(t, NULL);
    ot_tensor *c = ot_copy(t);
    CHECK(s && r && tt && c);
    EXPECT_VALUES(s, -1.25);
    EXPECT_VALUES(r, -1.25);
    EXPECT_VALUES(tt, -1.25);
    EXPECT_VALUES(c, -1.25);
    CHECK_INT(ot_tensor_dim(t, 0), -1);
    CHECK_ERR(OT_EINVAL, "tensor_dim: axis 0 is out of bounds for tensor of dimension 0");
    ot_tensor_free(s);
    ot_tensor_free(r);
    ot_tensor_free(tt);
    ot_tensor_free(c);
    ot_tensor_free(t);
    ot_backend_free(be);
}

TEST(tensor_zero_size)
{
    ot_backend *be = ref_backend();
    const ot_shape shapes[] = {OT_SHAPE(0), OT_SHAPE(0, 3, 3), OT_SHAPE(1, 0, 5),
                               OT_SHAPE(6, 0, 0, 0), OT_SHAPE(3, 0, 1, 0)};
    double dummy = 0;
    for (int k = 0; k < 5; k++) {
        ot_tensor *t = ot_zeros(be, shapes[k], OT_F32);
        CHECK(t != NULL);
        CHECK_INT(ot_tensor_numel(t), 0);
        CHECK(ot_tensor_data(t) != NULL);
        CHECK(ot_tensor_is_contiguous(t));
        CHECK_INT(ot_get(t, &dummy), 0);
        CHECK_INT(ot_set(t, &dummy), 0);
        CHECK_INT(ot_fill(t, 1), 0);
        CHECK_PRINT(t, "[]\n");
        ot_tensor *c = ot_copy(t);
        ot_tensor *z = ot_zeros_like(t);
        ot_tensor *r = ot_reshape(t, OT_SHAPE(2, 0, 5));
        ot_tensor *tt = ot_transpose(t, NULL);
        CHECK(c && z && r && tt);
        CHECK_INT(ot_tensor_numel(r), 0);
        CHECK_INT(ot_tensor_dim(r, 1), 0);
        CHECK(ot__overlap(t, t) == OT_OVERLAP_NONE);
        int dim;
        CHECK(!ot__internal_overlap(t, &dim));
        ot_tensor_free(c);
        ot_tensor_free(z);
        ot_tensor_free(r);
        ot_tensor_free(tt);
        ot_tensor_free(t);
    }
    /* strides of a zero-size tensor skip the zero dims, as NumPy's do */
    ot_tensor *t = ot_empty(be, OT_SHAPE(3, 0, 4), OT_F64);
    EXPECT_STRIDES(t, 4, 4, 1);
    /* a zero-size slice of a non-empty tensor, and a view of it */
    ot_tensor *x = iota(be, OT_SHAPE(4), OT_F64);
    ot_tensor *e = ot_slice(x, OT_RANGE(3, 1));
    ot_tensor *e2 = ot_slice(e, OT_RANGE(OT_NONE, OT_NONE, -1));
    CHECK_INT(ot_tensor_numel(e), 0);
    CHECK_INT(ot_tensor_numel(e2), 0);
    CHECK(ot__overlap(e, x) == OT_OVERLAP_NONE);
    ot_tensor_free(e2);
    ot_tensor_free(e);
    ot_tensor_free(x);
    ot_tensor_free(t);
    ot_backend_free(be);
}

TEST(tensor_create_errors)
{
    ot_backend *be = ref_backend();
    int32_t data[4] = {0};
    CHECK(ot_empty(be, OT_SHAPE(2, -3), OT_F32) == NULL);
    CHECK_ERR(OT_EINVAL, "empty: ", "negative dimension -3");
    CHECK(ot_zeros(be, OT_SHAPE(1, 1, 1, 1, 1, 1, 1, 1, 1), OT_F32) == NULL);
    CHECK_ERR(OT_EINVAL, "zeros: ", "9 dimensions");
    CHECK(ot_ones(be, OT_SHAPE(2), (ot_dtype)7) == NULL);
    CHECK_ERR(OT_EDTYPE, "ones: unknown dtype 7");
    CHECK(ot_full(be, OT_SHAPE(1 << 30, 1 << 30, 1 << 30), OT_F64, 1) == NULL);
    CHECK_ERR(OT_EOVERFLOW, "full: ");
    /* a zero dim does not make the other dims' strides fit */
    CHECK(ot_empty(be, OT_SHAPE(0, INT64_C(1) << 40, INT64_C(1) << 40), OT_F32) == NULL);
    CHECK_ERR(OT_EOVERFLOW, "empty: ", "(0,1099511627776,1099511627776)", "too big");
    CHECK(ot_empty(NULL, OT_SHAPE(2), OT_F32) == NULL);
    CHECK_ERR(OT_ENULL, "empty: backend is NULL");
    CHECK(ot_array(be, OT_SHAPE(2), OT_I32, NULL) == NULL);
    CHECK_ERR(OT_ENULL, "array: data is NULL");
    CHECK(ot_array(NULL, OT_SHAPE(2), OT_I32, data) == NULL);
    CHECK_ERR(OT_ENULL, "array: backend is NULL");
    CHECK(ot_array(be, OT_SHAPE(-1), OT_I32, data) == NULL);
    CHECK_ERR(OT_EINVAL, "array: ", "negative dimension");
    ot_backend_free(be);
}

/* ---- host copies through views -------------------------------------------- */

TEST(tensor_get_set_through_views)
{
    ot_backend *be = ref_backend();
    ot_tensor *m = ot_zeros(be, OT_SHAPE(2, 3), OT_F64);
    ot_tensor *mt = ot_transpose(m, NULL);       /* (3,2) */
    CHECK_INT(ot_set(mt, (double[]){1, 2, 3, 4, 5, 6}), 0);
    EXPECT_VALUES(m, 1, 3, 5, 2, 4, 6);
    EXPECT_VALUES(mt, 1, 2, 3, 4, 5, 6);

    ot_tensor *x = iota(be, OT_SHAPE(7), OT_F64);
    ot_tensor *rev2 = ot_slice(x, OT_RANGE(OT_NONE, OT_NONE, -2));   /* x[::-2] */
    EXPECT_VALUES(rev2, 6, 4, 2, 0);
    CHECK_INT(ot_set(rev2, (double[]){10, 20, 30, 40}), 0);
    EXPECT_VALUES(x, 40, 1, 30, 3, 20, 5, 10);

    ot_tensor *col = ot_slice(m, OT_ALL, OT_IDX(1));                 /* m[:, 1] */
    EXPECT_VALUES(col, 3, 4);
    CHECK_INT(ot_set(col, (double[]){-1, -2}), 0);
    EXPECT_VALUES(m, 1, -1, 5, 2, -2, 6);
    CHECK_INT(ot_fill(col, 9), 0);
    EXPECT_VALUES(m, 1, 9, 5, 2, 9, 6);

    /* a 3-d permutation: a.transpose(2, 0, 1)[i, j, k] == a[j, k, i] */
    ot_tensor *a = iota(be, OT_SHAPE(2, 3, 4), OT_I32);
    ot_tensor *p = ot_transpose(a, (int[]){2, 0, 1});
    EXPECT_SHAPE(p, 4, 2, 3);
    EXPECT_STRIDES(p, 1, 12, 4);
    int32_t got[24];
    CHECK_INT(ot_get(p, got), 0);
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 2; j++)
            for (int k = 0; k < 3; k++)
                CHECK_INT(got[i * 6 + j * 3 + k], j * 12 + k * 4 + i);
    /* and back in through a doubly reversed, transposed view */
    ot_tensor *pr = ot_slice(p, OT_RANGE(OT_NONE, OT_NONE, -1), OT_ALL,
                             OT_RANGE(OT_NONE, OT_NONE, -1));
    for (int i = 0; i < 24; i++)
        got[i] = -i;
    CHECK_INT(ot_set(pr, got), 0);
    int32_t back[24];
    CHECK_INT(ot_get(pr, back), 0);
    CHECK(memcmp(got, back, sizeof got) == 0);
    /* a[0, 0, c] == pr[3 - c, 0, 2] == -(6 * (3 - c) + 2) */
    ot_tensor *row = ot_slice(a, OT_IDX(0), OT_IDX(0));
    EXPECT_VALUES(row, -20, -14, -8, -2);
    ot_tensor_free(row);
    ot_tensor_free(pr);
    ot_tensor_free(p);
    ot_tensor_free(a);
    ot_tensor_free(col);
    ot_tensor_free(rev2);
    ot_tensor_free(x);
    ot_tensor_free(mt);
    ot_tensor_free(m);
    ot_backend_free(be);
}

/* ---- slicing -------------------------------------------------------------- */

TEST(tensor_slice_1d_like_numpy)
{
    ot_backend *be = ref_backend();
    ot_tensor *x = iota(be, OT_SHAPE(10), OT_F64);
    const int64_t N = OT_NONE;
    struct { ot_index ix; int n; double want[10]; } cases[] = {
        {OT_RANGE(N, N, -1), 10, {9, 8, 7, 6, 5, 4, 3, 2, 1, 0}},   /* x[::-1] */
        {OT_RANGE(1, -1, 2), 4, {1, 3, 5, 7}},                      /* x[1:-1:2] */
        {OT_RANGE(5, 2, -1), 3, {5, 4, 3}},                         /* x[5:2:-1] */
        {OT_RANGE(8, 100), 2, {8, 9}},                              /* x[8:100] */
        {OT_RANGE(-100, 3), 3, {0, 1, 2}},                          /* x[-100:3] */
        {OT_RANGE(7, 3), 0, {0}},                                   /* x[7:3] */
        {OT_RANGE(N, N, -3), 4, {9, 6, 3, 0}},                      /* x[::-3] */
        {OT_RANGE(-1, -11, -1), 10, {9, 8, 7, 6, 5, 4, 3, 2, 1, 0}},/* x[-1:-11:-1] */
        {OT_RANGE(-1, -100, -4), 3, {9, 5, 1}},                     /* x[-1:-100:-4] */
        {OT_RANGE(3, N), 7, {3, 4, 5, 6, 7, 8, 9}},                 /* x[3:] */
        {OT_RANGE(10, N), 0, {0}},                                  /* x[10:] */
        {OT_RANGE(-20, -15), 0, {0}},                               /* x[-20:-15] */
        {OT_RANGE(2, 5, N), 3, {2, 3, 4}},                          /* x[2:5:None] */
        {OT_RANGE(N, N, INT64_MAX), 1, {0}},                        /* x[::2**63-1] */
        {OT_RANGE(N, N, -INT64_MAX), 1, {9}},                       /* x[::-(2**63-1)] */
        {OT_RANGE(100, -100, -1), 10, {9, 8, 7, 6, 5, 4, 3, 2, 1, 0}},
        {OT_RANGE(N, 4), 4, {0, 1, 2, 3}},                          /* x[:4] */
        {OT_RANGE(N, -7, -2), 3, {9, 7, 5}},                        /* x[:-7:-2] */
        {OT_ALL, 10, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9}},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        ot_tensor *v = ot_slice_n(x, 1, &cases[k].ix);
        CHECK(v != NULL);
        CHECK_INT(ot_tensor_ndim(v), 1);
        if (cases[k].n == 0)
            CHECK_INT(ot_tensor_numel(v), 0);
        else
            expect_values(__FILE__, __LINE__, v, cases[k].n, cases[k].want);
        ot_tensor_free(v);
    }
    ot_tensor *rev = ot_slice(x, OT_RANGE(N, N, -1));
    EXPECT_STRIDES(rev, -1);
    CHECK_INT(ot_tensor_offset(rev), 9);
    CHECK(!ot_tensor_is_contiguous(rev));
    CHECK(ot_tensor_data(rev) == (double *)ot_tensor_data(x) + 9);
    ot_tensor *e = ot_slice(x, OT_IDX(-2));                          /* x[-2] */
    CHECK_INT(ot_tensor_ndim(e), 0);
    EXPECT_VALUES(e, 8);
    ot_tensor *f = ot_slice(x, OT_IDX(0));
    EXPECT_VALUES(f, 0);
    ot_tensor_free(f);
    ot_tensor_free(e);
    ot_tensor_free(rev);
    ot_tensor_free(x);
    ot_backend_free(be);
}

TEST(tensor_slice_2d_like_numpy)
{
    ot_backend *be = ref_backend();
    ot_tensor *m = iota(be, OT_SHAPE(3, 4), OT_F64);   /* np.arange(12).reshape(3, 4) */
    const int64_t N = OT_NONE;

    ot_tensor *col = ot_slice(m, OT_ALL, OT_IDX(1));                       /* m[:, 1] */
    EXPECT_SHAPE(col, 3);
    EXPECT_STRIDES(col, 4);
    EXPECT_VALUES(col, 1, 5, 9);
    ot_tensor *row = ot_slice(m, OT_IDX(1));                               /* m[1] */
    EXPECT_SHAPE(row, 4);
    CHECK_INT(ot_tensor_offset(row), 4);
    CHECK(ot_tensor_is_contiguous(row));
    EXPECT_VALUES(row, 4, 5, 6, 7);
    ot_tensor *last = ot_slice(m, OT_IDX(-1), OT_IDX(-1));                 /* m[-1, -1] */
    CHECK_INT(ot_tensor_ndim(last), 0);
    EXPECT_VALUES(last, 11);
    ot_tensor *rs = ot_slice(m, OT_RANGE(N, N, -1), OT_RANGE(N, N, 2));    /* m[::-1, ::2] */
    EXPECT_SHAPE(rs, 3, 2);
    EXPECT_STRIDES(rs, -4, 2);
    CHECK_INT(ot_tensor_offset(rs), 8);
    EXPECT_VALUES(rs, 8, 10, 4, 6, 0, 2);
    ot_tensor *blk = ot_slice(m, OT_RANGE(1, N), OT_RANGE(1, 3));          /* m[1:, 1:3] */
    EXPECT_VALUES(blk, 5, 6, 9, 10);
    ot_tensor *neg = ot_slice(m, OT_IDX(1), OT_RANGE(3, 0, -2));           /* m[1, 3:0:-2] */
    EXPECT_VALUES(neg, 7, 5);
    ot_tensor *flip = ot_slice(m, OT_ALL, OT_RANGE(N, N, -1));             /* m[:, ::-1] */
    ot_tensor *sub = ot_slice(flip, OT_RANGE(1, N), OT_IDX(1));            /* ...[1:, 1] */
    EXPECT_VALUES(sub, 6, 10);
    ot_tensor *all = ot_slice(m, OT_ALL);
    EXPECT_SHAPE(all, 3, 4);
    CHECK(ot__overlap(all, m) == OT_OVERLAP_FULL);
    CHECK(ot_tensor_name(all) == NULL);

    ot_tensor *views[] = {col, row, last, rs, blk, neg, flip, sub, all};
    for (size_t i = 0; i < sizeof views / sizeof views[0]; i++)
        ot_tensor_free(views[i]);
    ot_tensor_free(m);
    ot_backend_free(be);
}

TEST(tensor_slice_errors)
{
    ot_backend *be = ref_backend();
    ot_tensor *m = iota(be, OT_SHAPE(3, 4), OT_F32);
    CHECK(ot_slice(m, OT_IDX(3)) == NULL);
    CHECK_ERR(OT_EINVAL, "slice: index 3 is out of bounds for axis 0 with size 3");
    CHECK(ot_slice(m, OT_ALL, OT_IDX(-5)) == NULL);
    CHECK_ERR(OT_EINVAL, "slice: index -5 is out of bounds for axis 1 with size 4");
    CHECK(ot_slice(m, OT_IDX(OT_NONE)) == NULL);
    CHECK_ERR(OT_EINVAL, "index -9223372036854775808 is out of bounds for axis 0");
    CHECK(ot_slice(m, OT_IDX(0), OT_IDX(0), OT_IDX(0)) == NULL);
    CHECK_ERR(OT_EINVAL, "slice: too many indices: tensor is 2-dimensional, but 3 were indexed");
    CHECK(ot_slice(m, OT_RANGE(0, 3, 0)) == NULL);
    CHECK_ERR(OT_EINVAL, "slice: slice step cannot be zero");
    CHECK(ot_slice(m, OT_ALL, ((ot_index){7, 0, 0, 1})) == NULL);
    CHECK_ERR(OT_EINVAL, "slice: index 1 has unknown kind 7");
    CHECK(ot_slice_n(m, -1, NULL) == NULL);
    CHECK_ERR(OT_EINVAL, "slice: negative index count -1");
    CHECK(ot_slice_n(m, 1, NULL) == NULL);
    CHECK_ERR(OT_ENULL, "slice: idx is NULL");
    ot_tensor *z = ot_zeros(be, OT_SHAPE(0), OT_F32);
    CHECK(ot_slice(z, OT_IDX(0)) == NULL);
    CHECK_ERR(OT_EINVAL, "index 0 is out of bounds for axis 0 with size 0");
    ot_tensor_free(z);
    ot_tensor_free(m);
    ot_backend_free(be);
}

/* ---- reshape -------------------------------------------------------------- */

TEST(tensor_reshape_views)
{
    ot_backend *be = ref_backend();
    ot_tensor *x = iota(be, OT_SHAPE(12), OT_F64);
    ot_tensor *m = ot_reshape(x, OT_SHAPE(3, 4));
    EXPECT_SHAPE(m, 3, 4);
    EXPECT_STRIDES(m, 4, 1);
    CHECK(ot_tensor_data(m) == ot_tensor_data(x));
    ot_tensor *r3 = ot_reshape(m, OT_SHAPE(2, -1, 3));
    EXPECT_SHAPE(r3, 2, 2, 3);
    ot_tensor *flat = ot_reshape(r3, OT_SHAPE(-1));
    EXPECT_SHAPE(flat, 12);
    CHECK(ot__overlap(flat, x) == OT_OVERLAP_FULL);
    ot_tensor *e = ot_slice(m, OT_IDX(1), OT_IDX(2));     /* the buffer is shared */
    CHECK_INT(ot_fill(e, -6), 0);
    EXPECT_VALUES(x, 0, 1, 2, 3, 4, 5, -6, 7, 8, 9, 10, 11);
    ot_tensor_free(e);
    ot_tensor_free(flat);
    ot_tensor_free(r3);
    ot_tensor_free(m);
    ot_tensor_free(x);
    ot_backend_free(be);
}

TEST(tensor_reshape_strided_views)
{
    ot_backend *be = ref_backend();
    ot_tensor *m = iota(be, OT_SHAPE(3, 4), OT_F64);
    const int64_t N = OT_NONE;

    /* m.T is (4,3) with strides (1,4): splitting its dims stays a view */
    ot_tensor *t = ot_transpose(m, NULL);
    ot_tensor *r = ot_reshape(t, OT_SHAPE(2, 2, 3));
    EXPECT_STRIDES(r, 2, 1, 4);
    EXPECT_VALUES(r, 0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11);
    ot_tensor *r1 = ot_reshape(t, OT_SHAPE(4, 1, 3, 1));
    EXPECT_VALUES(r1, 0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11);

    /* m[:, ::2] has strides (4, 2): one arithmetic run, so (6,) is a view */
    ot_tensor *ev = ot_slice(m, OT_ALL, OT_RANGE(N, N, 2));
    ot_tensor *evf = ot_reshape(ev, OT_SHAPE(6));
    EXPECT_STRIDES(evf, 2);
    EXPECT_VALUES(evf, 0, 2, 4, 6, 8, 10);

    /* reversed rows still merge: m[::-1] has strides (-4, 1) */
    ot_tensor *rv = ot_slice(m, OT_RANGE(N, N, -1));
    ot_tensor *rvr = ot_reshape(rv, OT_SHAPE(3, 2, 2));
    EXPECT_VALUES(rvr, 8, 9, 10, 11, 4, 5, 6, 7, 0, 1, 2, 3);

    /* size-1 dims with odd strides never get in the way */
    ot_tensor *one = ot_slice(m, OT_RANGE(1, 2), OT_RANGE(N, N, -1));       /* (1,4) */
    ot_tensor *oner = ot_reshape(one, OT_SHAPE(2, 1, 2));
    EXPECT_VALUES(oner, 7, 6, 5, 4);

    ot_tensor *views[] = {t, r, r1, ev, evf, rv, rvr, one, oner};
    for (size_t i = 0; i < sizeof views / sizeof views[0]; i++) {
        CHECK(views[i] != NULL);
        ot_tensor_free(views[i]);
    }
    ot_tensor_free(m);
    ot_backend_free(be);
}

TEST(tensor_reshape_errors)
{
    ot_backend *be = ref_backend();
    ot_tensor *x = iota(be, OT_SHAPE(12), OT_F32);
    CHECK(ot_reshape(x, OT_SHAPE(5, 3)) == NULL);
    CHECK_ERR(OT_ESHAPE, "reshape: cannot reshape tensor of size 12 into shape (5,3)");
    CHECK(ot_reshape(x, OT_SHAPE(5, -1)) == NULL);
    CHECK_ERR(OT_ESHAPE, "reshape: cannot reshape tensor of size 12 into shape (5,-1)");
    CHECK(ot_reshape(x, OT_SHAPE(-1, -1)) == NULL);
    CHECK_ERR(OT_EINVAL, "reshape: can only specify one unknown dimension in shape (-1,-1)");
    CHECK(ot_reshape(x, OT_SHAPE(-2, -6)) == NULL);
    CHECK_ERR(OT_EINVAL, "reshape: ", "negative dimension -2");
    CHECK(ot_reshape(x, OT_SHAPE(1, 1, 1, 1, 1, 1, 1, 1, 12)) == NULL);
    CHECK_ERR(OT_EINVAL, "reshape: ", "9 dimensions");
    CHECK(ot_reshape(x, OT_SHAPE(INT64_C(1) << 40, INT64_C(1) << 40, -1)) == NULL);
    CHECK_ERR(OT_ESHAPE, "reshape: cannot reshape tensor of size 12");

    /* layouts that a view cannot express */
    ot_tensor *m = ot_reshape(x, OT_SHAPE(3, 4));
    ot_tensor *t = ot_transpose(m, NULL);
    CHECK(ot_reshape(t, OT_SHAPE(12)) == NULL);
    CHECK_ERR(OT_EINVAL, "reshape: a view of shape (4,3) with strides (1,4) cannot be reshaped "
              "to (12,) without a copy", "ot_copy");
    ot_tensor *half = ot_slice(m, OT_ALL, OT_RANGE(0, 2));                 /* m[:, :2] */
    CHECK(ot_reshape(half, OT_SHAPE(6)) == NULL);
    CHECK_ERR(OT_EINVAL, "strides (4,1)", "copy");
    CHECK(ot_reshape(t, OT_SHAPE(2, 6)) == NULL);
    CHECK_ERR(OT_EINVAL, "without a copy");
    /* after ot_copy the same reshape works */
    ot_tensor *c = ot_copy(t);
    ot_tensor *cf = ot_reshape(c, OT_SHAPE(12));
    EXPECT_VALUES(cf, 0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11);

    /* zero-size tensors always reshape; -1 cannot be inferred next to a 0 */
    ot_tensor *z = ot_zeros(be, OT_SHAPE(0, 3), OT_F32);
    ot_tensor *zt = ot_transpose(z, NULL);
    ot_tensor *zr = ot_reshape(zt, OT_SHAPE(-1, 3));
    EXPECT_SHAPE(zr, 0, 3);
    CHECK(ot_reshape(z, OT_SHAPE(0, -1)) == NULL);
    CHECK_ERR(OT_ESHAPE, "cannot reshape tensor of size 0 into shape (0,-1)");
    CHECK(ot_reshape(z, OT_SHAPE(0, INT64_C(1) << 40, INT64_C(1) << 40)) == NULL);
    CHECK_ERR(OT_EOVERFLOW, "reshape: ", "too big");

    ot_tensor *all[] = {m, t, half, c, cf, z, zt, zr, x};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        ot_tensor_free(all[i]);
    ot_backend_free(be);
}

/* ---- transpose and broadcast_to ------------------------------------------- */

TEST(tensor_transpose)
{
    ot_backend *be = ref_backend();
    ot_tensor *m = iota(be, OT_SHAPE(3, 4), OT_F64);
    ot_tensor *t = ot_transpose(m, NULL);
    EXPECT_SHAPE(t, 4, 3);
    EXPECT_STRIDES(t, 1, 4);
    CHECK(!ot_tensor_is_contiguous(t));
    EXPECT_VALUES(t, 0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11);
    ot_tensor *tt = ot_transpose(t, (int[]){1, 0});
    EXPECT_STRIDES(tt, 4, 1);
    CHECK(ot_tensor_is_contiguous(tt));
    CHECK(ot__overlap(tt, m) == OT_OVERLAP_FULL);
    ot_tensor *same = ot_transpose(m, (int[]){0, 1});
    EXPECT_VALUES(same, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11);

    ot_tensor *a = iota(be, OT_SHAPE(2, 3, 4), OT_F32);
    ot_tensor *ar = ot_transpose(a, NULL);                  /* (4,3,2) */
    EXPECT_SHAPE(ar, 4, 3, 2);
    EXPECT_STRIDES(ar, 1, 4, 12);
    ot_tensor *v = ot_slice(ar, OT_IDX(1), OT_RANGE(OT_NONE, OT_NONE, -1));  /* a.T[1, ::-1] */
    EXPECT_VALUES(v, 9, 21, 5, 17, 1, 13);

    ot_tensor *x = iota(be, OT_SHAPE(5), OT_I32);
    ot_tensor *xt = ot_transpose(x, NULL);
    EXPECT_VALUES(xt, 0, 1, 2, 3, 4);

    CHECK(ot_transpose(m, (int[]){0, 0}) == NULL);
    CHECK_ERR(OT_EINVAL, "transpose: perm (0,0) is not a permutation of 2 dims");
    CHECK(ot_transpose(m, (int[]){0, 2}) == NULL);
    CHECK_ERR(OT_EINVAL, "transpose: perm (0,2) is not a permutation of 2 dims");
    CHECK(ot_transpose(a, (int[]){-1, 0, 1}) == NULL);
    CHECK_ERR(OT_EINVAL, "perm (-1,0,1) is not a permutation of 3 dims");

    ot_tensor *all[] = {m, t, tt, same, a, ar, v, x, xt};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        ot_tensor_free(all[i]);
    ot_backend_free(be);
}

TEST(tensor_broadcast_to)
{
    ot_backend *be = ref_backend();
    ot_tensor *x = iota(be, OT_SHAPE(3), OT_F64);
    ot_tensor *b = ot_broadcast_to(x, OT_SHAPE(2, 3));
    EXPECT_SHAPE(b, 2, 3);
    EXPECT_STRIDES(b, 0, 1);
    EXPECT_VALUES(b, 0, 1, 2, 0, 1, 2);

    ot_tensor *c = iota(be, OT_SHAPE(3, 1), OT_F64);
    ot_tensor *cb = ot_broadcast_to(c, OT_SHAPE(2, 3, 4));
    EXPECT_STRIDES(cb, 0, 1, 0);
    double *v = values(cb);
    for (int i = 0; i < 24; i++)
        CHECK_NEAR(v[i], (i / 4) % 3, 0);
    free(v);

    ot_tensor *s = ot_full(be, OT_SHAPE(), OT_I32, 5);
    ot_tensor *sb = ot_broadcast_to(s, OT_SHAPE(2, 2));
    EXPECT_VALUES(sb, 5, 5, 5, 5);
    ot_tensor *one = ot_zeros(be, OT_SHAPE(1), OT_F32);
    ot_tensor *zb = ot_broadcast_to(one, OT_SHAPE(4, 0));    /* 1 stretches to 0 too */
    EXPECT_SHAPE(zb, 4, 0);

    /* reshaping a broadcast view keeps the stride-0 dims */
    ot_tensor *br = ot_reshape(b, OT_SHAPE(2, 1, 3));
    EXPECT_STRIDES(br, 0, 0, 1);
    CHECK(ot_reshape(b, OT_SHAPE(6)) == NULL);
    CHECK_ERR(OT_EINVAL, "without a copy");

    /* a copy is a plain writable tensor */
    ot_tensor *bc = ot_copy(b);
    CHECK(ot_tensor_is_contiguous(bc));
    CHECK_INT(ot_fill(bc, 1), 0);

    CHECK(ot_broadcast_to(x, OT_SHAPE(4)) == NULL);
    CHECK_ERR(OT_ESHAPE, "broadcast_to: cannot broadcast shape (3,) to (4,) (dim 0: 3 vs 4)");
    CHECK(ot_broadcast_to(c, OT_SHAPE(3, 2, 5)) == NULL);
    CHECK_ERR(OT_ESHAPE, "cannot broadcast shape (3,1) to (3,2,5) (dim 1: 3 vs 2)");
    CHECK(ot_broadcast_to(c, OT_SHAPE(3)) == NULL);
    CHECK_ERR(OT_ESHAPE, "cannot broadcast shape (3,1) to (3,)", "fewer dims");
    CHECK(ot_broadcast_to(x, OT_SHAPE(-1, 3)) == NULL);
    CHECK_ERR(OT_EINVAL, "broadcast_to: ", "negative dimension");

    ot_tensor *all[] = {x, b, c, cb, s, sb, one, zb, br, bc};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        ot_tensor_free(all[i]);
    ot_backend_free(be);
}

TEST(tensor_writes_into_broadcast_views_fail)
{
    ot_backend *be = ref_backend();
    ot_tensor *c = iota(be, OT_SHAPE(3, 1), OT_F32);
    ot_tensor *cb = ot_broadcast_to(c, OT_SHAPE(3, 4));
    float host[12] = {0};
    CHECK_INT(ot_fill(cb, 1), OT_EALIAS);
    CHECK_ERR(OT_EALIAS, "fill: written-to tensor has overlapping elements (stride 0 at dim 1)");
    CHECK_INT(ot_set(cb, host), OT_EALIAS);
    CHECK_ERR(OT_EALIAS, "set: written-to tensor has overlapping elements (stride 0 at dim 1)");
    /* nothing was written */
    EXPECT_VALUES(c, 0, 1, 2);
    /* views of a broadcast view stay read-only, even without stride 0 */
    ot_tensor *col = ot_slice(cb, OT_ALL, OT_IDX(2));
    CHECK_INT(ot_fill(col, 1), OT_EALIAS);
    CHECK_ERR(OT_EALIAS, "fill: written-to tensor is a read-only broadcast view");
    ot_tensor *same = ot_broadcast_to(c, OT_SHAPE(3, 1));
    CHECK_INT(ot_set(same, host), OT_EALIAS);
    CHECK_ERR(OT_EALIAS, "read-only");
    CHECK_INT(ot_get(cb, host), 0);
    CHECK(host[4] == 1 && host[7] == 1 && host[11] == 2);
    ot_tensor_free(same);
    ot_tensor_free(col);
    ot_tensor_free(cb);
    ot_tensor_free(c);
    ot_backend_free(be);
}

/* ---- copies ---------------------------------------------------------------- */

TEST(tensor_copy_and_zeros_like)
{
    ot_backend *be = ref_backend();
    ot_tensor *m = iota(be, OT_SHAPE(3, 4), OT_I32);
    ot_tensor_set_name(m, "m");
    ot_tensor *v = ot_slice(m, OT_RANGE(OT_NONE, OT_NONE, -1), OT_RANGE(1, OT_NONE, 2));
    ot_tensor *c = ot_copy(v);                               /* m[::-1, 1::2].copy() */
    CHECK_INT(ot_tensor_dtype(c), OT_I32);
    EXPECT_SHAPE(c, 3, 2);
    EXPECT_STRIDES(c, 2, 1);
    CHECK_INT(ot_tensor_offset(c), 0);
    CHECK(ot_tensor_name(c) == NULL);
    CHECK(ot_tensor_backend(c) == be);
    EXPECT_VALUES(c, 9, 11, 5, 7, 1, 3);
    CHECK(ot__overlap(c, m) == OT_OVERLAP_NONE);
    CHECK_INT(ot_fill(c, 0), 0);
    EXPECT_VALUES(v, 9, 11, 5, 7, 1, 3);                     /* the source is untouched */

    ot_tensor *z = ot_zeros_like(v);
    CHECK_INT(ot_tensor_dtype(z), OT_I32);
    EXPECT_SHAPE(z, 3, 2);
    CHECK(ot_tensor_is_contiguous(z));
    EXPECT_VALUES(z, 0, 0, 0, 0, 0, 0);
    CHECK(ot_tensor_name(z) == NULL);
    ot_tensor_free(z);
    ot_tensor_free(c);
    ot_tensor_free(v);
    ot_tensor_free(m);
    ot_backend_free(be);
}

TEST(tensor_buffer_outlives_base)
{
    ot_backend *be = ref_backend();
    ot_tensor *x = iota(be, OT_SHAPE(4, 4), OT_F64);
    ot_tensor *v = ot_slice(x, OT_RANGE(1, 3), OT_IDX(-1));
    ot_tensor *t = ot_transpose(x, NULL);
    ot_tensor_free(x);                                       /* views keep the buffer */
    EXPECT_VALUES(v, 7, 11);
    CHECK_INT(ot_fill(v, -1), 0);
    ot_tensor_free(v);
    ot_tensor *w = ot_slice(t, OT_IDX(3));                   /* x[:, 3] */
    ot_tensor_free(t);
    EXPECT_VALUES(w, 3, -1, -1, 15);
    ot_tensor_free(w);
    ot_backend_free(be);
}

TEST(tensor_is_its_own_leaf_node)
{
    ot_backend *be = ref_backend();
    ot_tensor *x = iota(be, OT_SHAPE(2, 3), OT_F32);
    ot_node *n = ot_tensor_node(x);
    CHECK(n == (ot_node *)x);
    CHECK_INT(ot_node_kind(n), OT_NODE_LEAF);
    CHECK_INT(ot_node_op(n), OT_OP_NONE);
    CHECK_INT(ot_node_dtype(n), OT_F32);
    ot_shape s = ot_node_shape(n);
    CHECK(ot__shape_eq(&s, &(ot_shape){2, {2, 3}}));
    CHECK(ot_node_tensor(n) == x);
    CHECK(ot_tensor_node(NULL) == NULL);
    /* a retained leaf outlives ot_tensor_free */
    CHECK(ot_retain(n) == n);
    ot_tensor_free(x);
    EXPECT_VALUES(x, 0, 1, 2, 3, 4, 5);
    ot_release(n);
    ot_backend_free(be);
}

/* ---- names and accessors ------------------------------------------------- */

TEST(tensor_names)
{
    ot_backend *be = ref_backend();
    ot_tensor *t = ot_zeros(be, OT_SHAPE(2), OT_F32);
    CHECK(ot_tensor_name(t) == NULL);
    char buf[8] = "x0";
    CHECK_INT(ot_tensor_set_name(t, buf), 0);
    buf[1] = '9';                                            /* the name was copied */
    CHECK_STR(ot_tensor_name(t), "x0");
    CHECK_INT(ot_tensor_set_name(t, "weights"), 0);
    CHECK_STR(ot_tensor_name(t), "weights");
    ot_tensor *v = ot_slice(t, OT_RANGE(0, 1));
    CHECK_STR(ot_tensor_name(v), "weights[0:1]");            /* named after t */
    CHECK_INT(ot_tensor_set_name(t, ot_tensor_name(t)), 0);   /* renaming to itself */
    CHECK_STR(ot_tensor_name(t), "weights");
    CHECK_INT(ot_tensor_set_name(t, NULL), 0);
    CHECK(ot_tensor_name(t) == NULL);
    CHECK_INT(ot_tensor_set_name(t, ""), 0);
    CHECK_STR(ot_tensor_name(t), "");
    CHECK_INT(ot_tensor_set_name(NULL, "x"), OT_ENULL);
    CHECK_ERR(OT_ENULL, "tensor_set_name: tensor is NULL");
    ot_tensor_free(v);
    ot_tensor_free(t);
    ot_backend_free(be);
}

TEST(tensor_accessors)
{
    ot_backend *be = ref_backend();
    ot_tensor *a = iota(be, OT_SHAPE(2, 3, 4), OT_F32);
    CHECK_INT(ot_tensor_dim(a, 0), 2);
    CHECK_INT(ot_tensor_dim(a, -1), 4);
    CHECK_INT(ot_tensor_dim(a, -3), 2);
    CHECK_INT(ot_tensor_stride(a, -2), 4);
    CHECK_INT(ot_tensor_dim(a, 3), -1);
    CHECK_ERR(OT_EINVAL, "tensor_dim: axis 3 is out of bounds for tensor of dimension 3");
    CHECK_INT(ot_tensor_dim(a, -4), -1);
    CHECK_ERR(OT_EINVAL, "tensor_dim: axis -4 is out of bounds");
    CHECK_INT(ot_tensor_stride(a, 7), -1);
    CHECK_ERR(OT_EINVAL, "tensor_stride: axis 7 is out of bounds for tensor of dimension 3");

    ot_tensor *row = ot_slice(a, OT_IDX(1), OT_IDX(2));
    CHECK_INT(ot_tensor_offset(row), 20);
    CHECK(ot_tensor_data(row) == (float *)ot_tensor_data(a) + 20);
    CHECK(ot_tensor_is_contiguous(row));
    ot_tensor *col = ot_slice(a, OT_IDX(1), OT_ALL, OT_IDX(2));
    CHECK(!ot_tensor_is_contiguous(col));
    ot_tensor *thin = ot_slice(a, OT_RANGE(1, 2), OT_RANGE(2, 3));     /* (1,1,4) */
    CHECK(ot_tensor_is_contiguous(thin));
    ot_tensor *flat = ot_reshape(thin, OT_SHAPE(4, 1));
    CHECK(ot_tensor_is_contiguous(flat));
    ot_tensor *step = ot_slice(a, OT_ALL, OT_ALL, OT_RANGE(0, 4, 2));
    CHECK(!ot_tensor_is_contiguous(step));

    /* NULL tensors: neutral values, no crash, no error */
    ot_shape s = ot_tensor_shape(NULL);
    CHECK_INT(s.ndim, 0);
    CHECK_INT(ot_tensor_dtype(NULL), OT_DTYPE_DEFAULT);
    CHECK_INT(ot_tensor_ndim(NULL), 0);
    CHECK_INT(ot_tensor_dim(NULL, 0), 0);
    CHECK_INT(ot_tensor_stride(NULL, 0), 0);
    CHECK_INT(ot_tensor_offset(NULL), 0);
    CHECK_INT(ot_tensor_numel(NULL), 0);
    CHECK(ot_tensor_data(NULL) == NULL);
    CHECK(ot_tensor_backend(NULL) == NULL);
    CHECK(!ot_tensor_is_contiguous(NULL));
    CHECK(ot_tensor_name(NULL) == NULL);
    ot_tensor_free(NULL);
    CHECK_INT(ot_errcode(), 0);

    ot_tensor *all[] = {a, row, col, thin, flat, step};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        ot_tensor_free(all[i]);
    ot_backend_free(be);
}

TEST(tensor_null_arguments)
{
    float host[4];
    CHECK(ot_slice(NULL, OT_ALL) == NULL);
    CHECK_ERR(OT_ENULL, "slice: tensor is NULL");
    CHECK(ot_reshape(NULL, OT_SHAPE(2)) == NULL);
    CHECK_ERR(OT_ENULL, "reshape: tensor is NULL");
    CHECK(ot_transpose(NULL, NULL) == NULL);
    CHECK_ERR(OT_ENULL, "transpose: tensor is NULL");
    CHECK(ot_broadcast_to(NULL, OT_SHAPE(2)) == NULL);
    CHECK_ERR(OT_ENULL, "broadcast_to: tensor is NULL");
    CHECK(ot_copy(NULL) == NULL);
    CHECK_ERR(OT_ENULL, "copy: tensor is NULL");
    CHECK(ot_zeros_like(NULL) == NULL);
    CHECK_ERR(OT_ENULL, "zeros_like: tensor is NULL");
    CHECK_INT(ot_fill(NULL, 1), OT_ENULL);
    CHECK_ERR(OT_ENULL, "fill: tensor is NULL");
    CHECK_INT(ot_get(NULL, host), OT_ENULL);
    CHECK_ERR(OT_ENULL, "get: tensor is NULL");
    CHECK_INT(ot_set(NULL, host), OT_ENULL);
    CHECK_ERR(OT_ENULL, "set: tensor is NULL");
    CHECK_INT(ot_tensor_print(NULL, stdout), OT_ENULL);
    CHECK_ERR(OT_ENULL, "tensor_print: tensor is NULL");

    ot_backend *be = ref_backend();
    ot_tensor *t = ot_zeros(be, OT_SHAPE(4), OT_F32);
    CHECK_INT(ot_get(t, NULL), OT_ENULL);
    CHECK_ERR(OT_ENULL, "get: host is NULL");
    CHECK_INT(ot_set(t, NULL), OT_ENULL);
    CHECK_ERR(OT_ENULL, "set: host is NULL");
    CHECK_INT(ot_tensor_print(t, NULL), OT_ENULL);
    CHECK_ERR(OT_ENULL, "tensor_print: f is NULL");

    /* a NULL that comes from a failed call keeps that call's message */
    ot_tensor *bad = ot_reshape(t, OT_SHAPE(3));
    ot_tensor *v = ot_slice(bad, OT_IDX(0));
    CHECK(v == NULL);
    CHECK_INT(ot_fill(v, 0), OT_ESHAPE);
    CHECK_ERR(OT_ESHAPE, "reshape: cannot reshape tensor of size 4 into shape (3,)");
    /* and a call that works clears the slot */
    CHECK(ot_reshape(t, OT_SHAPE(3)) == NULL);
    CHECK_INT(ot_fill(t, 2), 0);
    CHECK_INT(ot_errcode(), 0);
    CHECK_STR(ot_errmsg(), "");
    ot_tensor_free(t);
    ot_backend_free(be);
}

/* ---- printing ------------------------------------------------------------ */

TEST(tensor_print)
{
    ot_backend *be = ref_backend();
    ot_tensor *a = ot_array(be, OT_SHAPE(2, 2), OT_F32, (float[]){1, 2, 3, 4});
    CHECK_PRINT(a, "[[1. 2.]\n [3. 4.]]\n");
    ot_tensor *at = ot_transpose(a, NULL);
    CHECK_PRINT(at, "[[1. 3.]\n [2. 4.]]\n");
    ot_tensor *i = ot_array(be, OT_SHAPE(3), OT_I32, (int32_t[]){1, -2, 30});
    CHECK_PRINT(i, "[ 1 -2 30]\n");
    ot_tensor *c = iota(be, OT_SHAPE(2, 2, 2), OT_I32);
    CHECK_PRINT(c, "[[[0 1]\n  [2 3]]\n\n [[4 5]\n  [6 7]]]\n");
    ot_tensor *f = ot_array(be, OT_SHAPE(4), OT_F64, (double[]){0.5, -1.25, NAN, -INFINITY});
    CHECK_PRINT(f, "[ 0.5  -1.25   nan  -inf]\n");   /* NumPy's: lined up on the point */
    ot_tensor *g = ot_array(be, OT_SHAPE(3), OT_F32, (float[]){0.1f, 1.0f / 3, 1e20f});
    CHECK_PRINT(g, "[1.0000000e-01 3.3333334e-01 1.0000000e+20]\n");
    ot_tensor *s = ot_full(be, OT_SHAPE(), OT_F64, 2);
    CHECK_PRINT(s, "2.\n");
    ot_tensor *e = ot_zeros(be, OT_SHAPE(2, 0), OT_F64);
    CHECK_PRINT(e, "[]\n");
    ot_tensor *col = ot_slice(c, OT_ALL, OT_ALL, OT_IDX(1));
    CHECK_PRINT(col, "[[1 3]\n [5 7]]\n");
    ot_tensor *d4 = iota(be, OT_SHAPE(2, 1, 1, 2), OT_I32);
    CHECK_PRINT(d4, "[[[[0 1]]]\n\n\n [[[2 3]]]]\n");

    /* a stream that cannot be written */
    FILE *ro = fopen("/dev/null", "r");
    CHECK(ro != NULL);
    if (ro) {
        CHECK_INT(ot_tensor_print(a, ro), OT_EIO);
        CHECK_ERR(OT_EIO, "tensor_print: write failed");
        CHECK_INT(ot_tensor_print(e, ro), OT_EIO);
        CHECK_ERR(OT_EIO, "tensor_print");
        fclose(ro);
    }
    ot_tensor *all[] = {a, at, i, c, f, g, s, e, col, d4};
    for (size_t k = 0; k < sizeof all / sizeof all[0]; k++)
        ot_tensor_free(all[k]);
    ot_backend_free(be);
}

/* ---- overlap ------------------------------------------------------------- */

TEST(tensor_overlap_classes)
{
    ot_backend *be = ref_backend();
    ot_tensor *m = iota(be, OT_SHAPE(4, 4), OT_F32);
    ot_tensor *other = iota(be, OT_SHAPE(4, 4), OT_F32);
    ot_tensor *top = ot_slice(m, OT_RANGE(0, 2));
    ot_tensor *top2 = ot_slice(m, OT_RANGE(0, 2), OT_ALL);
    ot_tensor *bottom = ot_slice(m, OT_RANGE(2, 4));
    ot_tensor *mt = ot_transpose(m, NULL);
    ot_tensor *c0 = ot_slice(m, OT_ALL, OT_IDX(0));
    ot_tensor *c1 = ot_slice(m, OT_ALL, OT_IDX(1));
    ot_tensor *flat = ot_reshape(m, OT_SHAPE(16));
    ot_tensor *rr = ot_slice(m, OT_RANGE(OT_NONE, OT_NONE, -1));
    ot_tensor *rrr = ot_slice(rr, OT_RANGE(OT_NONE, OT_NONE, -1));
    ot_tensor *last = ot_slice(m, OT_IDX(3), OT_IDX(3));
    ot_tensor *first = ot_slice(m, OT_IDX(0), OT_IDX(0));
    ot_tensor *empty = ot_slice(m, OT_RANGE(1, 1));

    CHECK_INT(ot__overlap(m, m), OT_OVERLAP_FULL);
    CHECK_INT(ot__overlap(top, top2), OT_OVERLAP_FULL);
    CHECK_INT(ot__overlap(rrr, m), OT_OVERLAP_FULL);
    CHECK_INT(ot__overlap(m, other), OT_OVERLAP_NONE);
    CHECK_INT(ot__overlap(top, bottom), OT_OVERLAP_NONE);
    CHECK_INT(ot__overlap(bottom, top), OT_OVERLAP_NONE);
    CHECK_INT(ot__overlap(first, last), OT_OVERLAP_NONE);
    CHECK_INT(ot__overlap(m, empty), OT_OVERLAP_NONE);
    CHECK_INT(ot__overlap(empty, empty), OT_OVERLAP_NONE);
    CHECK_INT(ot__overlap(m, mt), OT_OVERLAP_PARTIAL);
    CHECK_INT(ot__overlap(m, flat), OT_OVERLAP_PARTIAL);
    CHECK_INT(ot__overlap(m, rr), OT_OVERLAP_PARTIAL);
    CHECK_INT(ot__overlap(top, m), OT_OVERLAP_PARTIAL);
    CHECK_INT(ot__overlap(last, rr), OT_OVERLAP_PARTIAL);
    /* interleaved columns share a byte range but never an element */
    CHECK_INT(ot__overlap(c0, c1), OT_OVERLAP_NONE);

    /* strides of size-1 dims do not make two views differ */
    ot_tensor *r1 = ot_slice(m, OT_RANGE(1, 2));                          /* (1,4) */
    ot_tensor *r1t = ot_transpose(r1, NULL);                              /* (4,1) */
    ot_tensor *r1v = ot_slice(m, OT_IDX(1));
    ot_tensor *r1r = ot_reshape(r1v, OT_SHAPE(4, 1));
    CHECK(ot_tensor_stride(r1t, 1) != ot_tensor_stride(r1r, 1));
    CHECK_INT(ot__overlap(r1t, r1r), OT_OVERLAP_FULL);

    ot_tensor *all[] = {m, other, top, top2, bottom, mt, c0, c1, flat, rr, rrr, last,
                        first, empty, r1, r1t, r1v, r1r};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        ot_tensor_free(all[i]);
    ot_backend_free(be);
}

TEST(tensor_internal_overlap)
{
    ot_backend *be = ref_backend();
    ot_tensor *m = iota(be, OT_SHAPE(3, 4), OT_F64);
    ot_tensor *mt = ot_transpose(m, NULL);
    ot_tensor *rs = ot_slice(m, OT_RANGE(OT_NONE, OT_NONE, -1), OT_RANGE(OT_NONE, OT_NONE, 3));
    int dim = -1;
    CHECK(!ot__internal_overlap(m, &dim));
    CHECK(!ot__internal_overlap(mt, &dim));
    CHECK(!ot__internal_overlap(rs, &dim));

    ot_tensor *c = ot_slice(m, OT_ALL, OT_RANGE(0, 1));                   /* (3,1) */
    ot_tensor *b = ot_broadcast_to(c, OT_SHAPE(2, 3, 4));
    CHECK(ot__internal_overlap(b, &dim));
    CHECK_INT(dim, 0);
    ot_tensor *b1 = ot_slice(b, OT_IDX(0));
    CHECK(ot__internal_overlap(b1, &dim));
    CHECK_INT(dim, 1);
    /* a broadcast to size 1 or 0 repeats nothing */
    ot_tensor *bz = ot_broadcast_to(c, OT_SHAPE(3, 0));
    CHECK(!ot__internal_overlap(bz, &dim));
    ot_tensor *b11 = ot_broadcast_to(c, OT_SHAPE(1, 3, 1));
    CHECK(!ot__internal_overlap(b11, &dim));

    /* strides that no view function makes, set by hand: (2,2) with strides
     * (1,1) reads element 1 twice; (2,2) with strides (2,3) never repeats */
    ot_tensor *h = ot_slice(m, OT_RANGE(0, 2), OT_RANGE(0, 2));
    h->strides[0] = 1;
    h->strides[1] = 1;
    CHECK(ot__internal_overlap(h, &dim));
    CHECK_INT(dim, 1);
    CHECK_INT(ot_fill(h, 0), OT_EALIAS);
    CHECK_ERR(OT_EALIAS, "written-to tensor has overlapping elements (stride 1 at dim 1)");
    h->strides[0] = 3;
    h->strides[1] = -2;
    h->offset = 2;
    CHECK(!ot__internal_overlap(h, &dim));
    /* (2,3) with strides (5,2) is 0,2,4 and 5,7,9; with (4,2) 4 comes twice */
    h->leaf.shape.dims[1] = 3;
    h->strides[0] = 5;
    h->strides[1] = 2;
    CHECK(!ot__internal_overlap(h, &dim));
    h->strides[0] = 4;
    CHECK(ot__internal_overlap(h, &dim));
    CHECK_INT(dim, 0);

    ot_tensor *all[] = {m, mt, rs, c, b, b1, bz, b11, h};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        ot_tensor_free(all[i]);
    ot_backend_free(be);
}

/* Data of 4 MiB and more starts on a 2 MiB boundary (whole huge pages,
 * src/core/alloc.c); smaller data stays 64-byte aligned. */
TEST(tensor_large_data_in_huge_pages)
{
    ot_backend *be = ot_backend_new("cpu", NULL);
    ot_tensor *big = ot_empty(be, OT_SHAPE(5, 1 << 18), OT_F32);   /* 5 MiB */
    ot_tensor *small = ot_zeros(be, OT_SHAPE(3, 7), OT_F64);
    CHECK(big && small);
    if (big && small) {
        CHECK((uintptr_t)ot_tensor_data(big) % ((uintptr_t)2 << 20) == 0);
        CHECK((uintptr_t)ot_tensor_data(small) % 64 == 0);
        CHECK_INT(ot_fill(big, 1.5), 0);
        CHECK(((const float *)ot_tensor_data(big))[5 * (1 << 18) - 1] == 1.5f);
    }
    ot_tensor_free(big);
    ot_tensor_free(small);
    ot_backend_free(be);
}
